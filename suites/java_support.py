"""What the suites that drive the real Java clients share (issue 28): which pinned client runs
against which target kind, the driver as a fixture-friendly handle, and the not-available verdict.

Not a suite (no ``test_`` prefix). A real ActiveMQ client is checked against the real ActiveMQ
target (OpenWire), Artemis's Core client against Artemis (its core acceptor); on other targets the
statement is about another product's client, so those runs are reported not applicable.
"""

from __future__ import annotations

import pytest

from conformance.clients import java_driver
from conformance.clients.failover import CLIENT_SUBJECT as FAILOVER_SUBJECT
from conformance.clients.java_driver import JavaDriver
from conformance.deployment import NativeListener, require
from conformance.plugin import NOT_APPLICABLE
from conformance.requirements import skip_or_fail
from conformance.scenario import Scenario
from conformance.topology import TopologyUnsupported
from suites.network_support import network_workdir

#: pinned client (machinery/pins.toml [java-clients.*]) -> the target kind it runs against
#: and the listener of that target it speaks to
CLIENT_TARGETS = {"activemq-5": ("activemq", "openwire"), "activemq-6": ("activemq", "openwire"),
                  "artemis": ("artemis", "core")}
ACTIVEMQ_CLIENTS = ("activemq-5", "activemq-6")

#: the matrix's names of the clients (the same strings as pins.toml's ``subject``; literal here so
#: that a test's mark can be read without loading the pins)
SUBJECTS = {"activemq-5": "activemq-client 5.17.2 (openwire)", "activemq-6": "activemq-client 6.3.1 (openwire)",
            "artemis": "artemis-core-client 2.40.0", "ours": FAILOVER_SUBJECT}


def client_params(names: tuple[str, ...]) -> list:
    """``pytest.param`` per client, each carrying its ``client_subject`` mark."""
    return [pytest.param(name, id=name, marks=pytest.mark.client_subject(SUBJECTS[name])) for name in names]


def require_applicable(target, client: str) -> None:
    """Skip as not applicable when ``client`` is not the client of ``target``'s product."""
    kind, _ = CLIENT_TARGETS[client]
    if target.kind != kind:
        pytest.skip(f"{NOT_APPLICABLE}{SUBJECTS[client]} is {kind}'s client; {target.name} is {target.kind}")


def start_driver(client: str, log_dir, jvm_options: tuple[str, ...] = ()) -> JavaDriver:
    """The driver process for ``client`` (``jvm_options``: extra ``-D...`` for its JVM); skipped
    (failed where CI requires java-clients) when the JDK, Maven's fetch or the build is missing,
    with what to run."""
    ok, reason = java_driver.availability(client)
    if not ok:
        skip_or_fail(java_driver.REQUIREMENT, reason)
    return JavaDriver.start(client, log_dir=log_dir, jvm_options=jvm_options)


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    """``get(client)``: that client's driver process, started on first use, stopped after the module
    (a suite imports this fixture by name)."""
    started = {}
    log_dir = tmp_path_factory.mktemp("java-drivers")

    def get(client: str):
        if client not in started:
            started[client] = start_driver(client, log_dir)
        return started[client]

    yield get
    for driver in started.values():
        driver.stop()


def listener(client: str) -> str:
    return CLIENT_TARGETS[client][1]


def address(node, client: str) -> tuple[str, int]:
    """(host, port) of ``node``'s listener for ``client``: the node's `NativeListener` part (a real
    broker's own protocol: ActiveMQ's OpenWire connector, Artemis's core acceptor), which must be
    the protocol ``client`` speaks. MissingPart for a node without one (the reference broker's)."""
    wanted = listener(client)
    native = require(node, NativeListener, f"give {SUBJECTS[client]} its {wanted} address")
    if native.native_protocol != wanted:
        raise KeyError(f"node {node.name} listens on {native.native_protocol}, not on {wanted} ({SUBJECTS[client]})")
    return native.native_address()


def tcp(node, client: str) -> str:
    """``tcp://host:port`` of ``node``'s listener for ``client``."""
    return "tcp://{}:{}".format(*address(node, client))


def artemis_cluster(request, target_name: str, tmp_path_factory, topology, name: str, checked: str):
    """A module fixture's body for the Artemis core client's suites: ``topology`` launched on
    ``target_name`` (a scenario ``name`` over STOMP) and stopped after the module. Another product's
    target, or one that cannot launch ``topology`` (UDP discovery is the local JVMs' only), is not
    applicable, saying what the suite checks (``checked``) and why not there."""
    from conformance.plugin import STATE

    target = request.config.stash[STATE].targets.get(target_name)
    if target is None or target.kind != "artemis":
        pytest.skip(f"{NOT_APPLICABLE}{checked} are Artemis's Core client's; {target_name} is not Artemis")
    workdir = network_workdir(tmp_path_factory, f"{topology.prefix}-{target_name}")
    try:
        launched = target.launch_topology(topology, Scenario(name=name, protocols=("stomp",)), workdir)
    except TopologyUnsupported as exc:
        pytest.skip(f"{NOT_APPLICABLE}{target_name} cannot launch this cluster: {exc}")
    try:
        yield launched
    finally:
        launched.stop()


def artemis_driver(tmp_path_factory, jvm_options: tuple[str, ...] = ()):
    """A module fixture's body: the Artemis core client's driver, stopped after the module."""
    started = start_driver("artemis", tmp_path_factory.mktemp("java-driver"), jvm_options=jvm_options)
    try:
        yield started
    finally:
        started.stop()
