"""What the network-of-brokers suites share (test_networks.py, test_network_store_forward.py,
test_network_reconnect_waits.py, test_network_durable.py, test_network_topologies.py,
test_network_temp.py): one run per target,
the not-applicable verdict for targets without ``topology.network``, launching a network through
the topology contract (`launch_network`), work directories, STOMP clients closed after the test, and the demand / send helpers.

Not a suite (the name does not match pytest's ``test_*.py``): the suite files import from it.
These suites start several brokers per target themselves instead of the plugin's ``broker``
fixture, so they parametrize ``target_name`` the way the plugin does (conformance/plugin.py:
its spec, capability, deviation and matrix handling all key on ``target_name``).
"""

from __future__ import annotations

import re
import uuid
from typing import Callable

import pytest

from conformance.clients import connect
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from conformance.targets.base import CAPABILITIES, why_missing
from conformance.topology import Topology

NETWORK_CAPABILITY = "topology.network"
#: how long demand may take to cross a bridge (advisory + network consumer creation): a bound on
#: waiting for the count, which normally comes within seconds; 15 s ran out once in a loaded CI run
#: (a full mesh of three ActiveMQ brokers)
DEMAND_TIMEOUT = 45.0
#: reconnect options (page, "Static discovery" table; masterslave: takes the same) so a bridge that
#: lost its peer tries again within a second instead of the default exponential back-off up to 30 s
FAST_RECONNECT = dict(initial_reconnect_delay=500, max_reconnect_delay=1000, use_exponential_back_off=False)


def network_suite_marks() -> list:
    """The ``pytestmark`` of a network suite: slow (several brokers per test), and, once the
    capability is declared (conformance/targets/base.py), ``requires`` so the plugin decides
    applicability before any broker starts; `network_target` says the same when a test asks."""
    marks = [pytest.mark.slow]
    if NETWORK_CAPABILITY in CAPABILITIES:
        marks.append(pytest.mark.requires(NETWORK_CAPABILITY))
    return marks


def parametrize_by_target(metafunc: pytest.Metafunc, scope: str | None = "module") -> None:
    """One run per selected target, as the plugin's ``broker`` fixture does. ``scope`` as
    ``Metafunc.parametrize`` takes it (``None``: per test, for suites whose networks are per test)."""
    if "target_name" in metafunc.fixturenames:
        names = list(dict.fromkeys(metafunc.config.stash[STATE].target_names))
        metafunc.parametrize("target_name", names, ids=names, scope=scope)


def network_target(request: pytest.FixtureRequest, target_name: str):
    """The target ``target_name``; skips the test as not applicable (the plugin's NOT_APPLICABLE
    prefix, so the matrix says so) when it cannot launch a network (no ``topology.network``)."""
    target = request.config.stash[STATE].targets.get(target_name)
    if target is None or NETWORK_CAPABILITY not in target.capabilities():
        why = why_missing(target, NETWORK_CAPABILITY) if target is not None else "unknown target"
        pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {NETWORK_CAPABILITY}" + (f" ({why})" if why else ""))
    return target


def launch_network(request: pytest.FixtureRequest, target_name: str, workdir, topology: Topology, *,
                   bridge_route=None):
    """``topology`` launched (started) by target ``target_name`` through the topology contract
    (conformance/topology.py): a `Cluster` whose nodes have the counters the suites wait on.
    Skips as not applicable when the target forms no networks."""
    target = network_target(request, target_name)
    scenario = Scenario(name=f"network-{topology.prefix}", protocols=("stomp",))
    return target.launch_topology(topology, scenario, workdir, bridge_route=bridge_route)


def network_workdir(tmp_path_factory: pytest.TempPathFactory, name: str):
    """A fresh work directory named after ``name`` (characters a path may not take replaced by
    ``_``): the brokers' logs and evidence end up under it."""
    return tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_.-]", "_", name))


class OneNetworkAtATime:
    """Networks of a module-scoped fixture, keyed: ``get(key, start)`` returns the running network
    ``key``, first stopping any other one and calling ``start()`` for it. Suites group their tests
    by network, so each network starts once and at most one runs at a time (2-core machine)."""

    def __init__(self) -> None:
        self.current: dict = {}

    def get(self, key, start: Callable):
        if key not in self.current:
            for old in list(self.current):
                self.current.pop(old).stop()
            self.current[key] = start()
        return self.current[key]

    def stop(self) -> None:
        for network in self.current.values():
            network.stop()


class StompClients:
    """STOMP clients on network nodes (`conformance.topology.Node`), all closed when the ``with``
    block ends."""

    def __init__(self) -> None:
        self.made: list = []

    def on(self, node, login: str | None = None, passcode: str | None = None):
        host, port = node.address("stomp")
        self.made.append(connect(host, port, "stomp", login=login, passcode=passcode))
        return self.made[-1]

    def __enter__(self) -> "StompClients":
        return self

    def __exit__(self, *exc) -> None:
        for c in reversed(self.made):
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a broken connection (its broker was killed) must not hide the outcome
                pass


def queue(prefix: str) -> str:
    """A queue name of this test's own: ``prefix`` and a random suffix."""
    return f"queue://{prefix}.{uuid.uuid4().hex[:8]}"


def send(producer, destination: str, n: int, tag: str = "m") -> list[str]:
    """Sends ``n`` persistent messages ``{tag}0``.. (each confirmed by a receipt); returns the bodies."""
    bodies = [f"{tag}{i}" for i in range(n)]
    for body in bodies:
        producer.send(destination, body)  # persistent, each confirmed by a receipt
    return bodies


def demand(node, destination: str, count: int) -> None:
    """Setup check: ``node`` counts ``count`` consumers of ``destination`` (local + network)
    within DEMAND_TIMEOUT, i.e. demand has crossed the bridge(s) before the test produces."""
    seen = node.wait_for_consumers(destination, count, DEMAND_TIMEOUT)
    assert seen == count, (f"setup: broker {node.name} should count {count} consumer(s) of {destination} "
                           f"(local + network) within {DEMAND_TIMEOUT:.0f} s, counts {seen}")
