"""Dynamic failover (the A-MQ "Fault Tolerant Messaging" guide, 2.1.2 "Dynamic Failover";
../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue fault_tolerance.toml,
FT-DYNAMIC-1, -2 and -7) on ActiveMQ with its own clients (activemq-client 5.17.2 and 6.3.1,
through brokerconf's Java driver, drivers/java; issue 28): the broker list travels as OpenWire
ConnectionControl commands, which only these clients receive.

Each test launches its own two brokers, A and B, joined by a duplex network connector from A
(the guide's set-up: the brokers form a network), since it kills A. The client's failover URI
names A alone. Once A dies, a client that took B's address from A's update reaches B within its
reconnect delays (50 ms doubling to 500 ms; the first such move here took 0.1 s); one that did not
keeps dialling A, and its send is still waiting `NOT_REACHED` s later, ten times the longest delay
(a short timer: the statement is not about how long it waits, and a slow machine can only make
a client that moved look late, never a client that stayed look moved, since the send's outcome
and the connection's address are what is read).

* FT-DYNAMIC-2 (the broker's part): A and B with ``updateClusterClients`` set send their clients
  the network's brokers; without it (the configuration does not name the option, its default)
  they do not, so the client never reaches B.
* FT-DYNAMIC-1 and -7 (the client's part): with updates sent, a client left at
  ``updateURIsSupported``'s default takes the list and reaches B; with ``updateURIsSupported=false``
  it keeps its own list and does not.

updateClusterFilter, updateClusterClientsOnRemove and rebalanceClusterClients, joining and leaving
brokers, the random pick and the updateURIsURL fallback (FT-DYNAMIC-3, -4, -6, -8, -10) are in the
sibling test_dynamic_failover_topology_real.py, which reads the brokers' announcements and the
client's supplied list instead of only where the client lands.
"""

from __future__ import annotations

import time
import uuid

import pytest

from conformance.clients.java_driver import DriverError, NoAnswer
from conformance.plugin import NOT_APPLICABLE, STATE
from suites.java_support import ACTIVEMQ_CLIENTS, SUBJECTS, client_params, drivers  # noqa: F401
from suites.network_support import network_workdir, parametrize_by_target
from conformance.targets.activemq.network import established_bridges
from conformance.targets.activemq.process import ActiveMQProcess

pytestmark = [pytest.mark.slow]

#: the guide's Table 2.2 attribute that makes a transport connector send its clients the brokers
#: of its network (set on both brokers' OpenWire connectors where a test says so)
UPDATES = {"updateClusterClients": "true"}
#: the client's reconnect delays: short, so that a client that knows B gets there at once
DELAYS = "initialReconnectDelay=50&maxReconnectDelay=500"
#: seconds a send is given after A died before the client counts as not having reached B
NOT_REACHED = 5.0
#: seconds a client that knows B has to get there after A died (a JVM client on a loaded machine)
REACHED = 60.0
#: seconds a connection's close is waited for: one still dialling the dead A blocks in it (the
#: failover transport's reconnect holds the connection), and the driver process, stopped with the
#: module, ends it
CLOSE_WAIT = 5.0
#: seconds the bridge has to come up (two JVMs starting side by side on a loaded machine)
BRIDGE_UP = 90.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


class NetworkedPair:
    """ActiveMQ brokers A and B, a duplex bridge from A to B, both OpenWire connectors with
    ``attributes``; started by `start`, stopped by `stop` (by their handles)."""

    def __init__(self, workdir, attributes: dict[str, str]) -> None:
        options = dict(jvm_heap_mb=256, memory_limit_mb=96, openwire_attributes=attributes)
        self.b = ActiveMQProcess(workdir / "b", name="dynB", **options)
        self.a: ActiveMQProcess | None = None
        self._workdir, self._options = workdir, options

    def start(self) -> "NetworkedPair":
        self.b.start(timeout=180)
        bridge = (f'<networkConnector name="a-b" uri="static:(tcp://127.0.0.1:{self.b.openwire_port})" '
                  f'duplex="true"/>')
        self.a = ActiveMQProcess(self._workdir / "a", name="dynA", network_connectors_xml=bridge, **self._options)
        self.a.start(timeout=180)
        deadline = time.monotonic() + BRIDGE_UP
        while "dynB" not in established_bridges(self.a):
            if time.monotonic() > deadline:
                pytest.fail(f"setup: A's bridge to B did not come up in {BRIDGE_UP:.0f} s\n{self.a.log_tail(20)}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        try:
            if self.a is not None:
                self.a.stop()
        finally:
            self.b.stop()


@pytest.fixture
def networked(target_name, request, tmp_path_factory):
    """``start(attributes)``: A and B networked, their OpenWire connectors carrying ``attributes``."""
    target = request.config.stash[STATE].targets[target_name]
    if target.kind != "activemq":
        pytest.skip(f"{NOT_APPLICABLE}dynamic failover is ActiveMQ's (OpenWire ConnectionControl); "
                    f"{target_name} is {target.kind}")
    started: list[NetworkedPair] = []

    def start(attributes: dict[str, str]) -> NetworkedPair:
        pair = NetworkedPair(network_workdir(tmp_path_factory, f"ftdyn-{target_name}"), attributes)
        started.append(pair)
        return pair.start()

    yield start
    for pair in started:
        pair.stop()


def reaches_b_after_a_dies(pair: NetworkedPair, driver, options: str = "") -> tuple[bool, str]:
    """Connect with a failover URI naming A alone, kill A, send: (whether the send went through on
    B, what was seen). The send is given `REACHED` s when it moves, `NOT_REACHED` s to show it
    does not (see the module docstring)."""
    conn = driver.connect(f"failover:(tcp://127.0.0.1:{pair.a.openwire_port})?{DELAYS}{options}", timeout=60)
    queue = f"ftdyn.{uuid.uuid4().hex[:8]}"
    try:
        assert conn.port == pair.a.openwire_port, f"setup: the client should be on A, the only broker it names: {conn.address}"
        conn.send(queue, "before")  # the client has been on A a round trip: A's update has had its chance
        pair.a.kill()
        try:
            conn.send(queue, "after", timeout=NOT_REACHED)
        except NoAnswer:
            return False, f"the send was still waiting {NOT_REACHED:.0f} s after A died; on {conn.address}"
        return conn.port == pair.b.openwire_port, f"the send went through on {conn.address} (B is port {pair.b.openwire_port})"
    finally:
        try:
            conn.close(timeout=CLOSE_WAIT)
        except DriverError:
            pass  # a client still dialling the dead A does not close; the driver stops with the module


# FT-DYNAMIC-2 too (the broker's statement, booked to the ActiveMQ column): A's update is what
# the client follows; the client's statements go to the client's column
@pytest.mark.spec("FT-DYNAMIC-1", "FT-DYNAMIC-7", "FT-DYNAMIC-2")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_a_client_naming_one_broker_takes_the_network_s_list_and_fails_over_to_the_other(networked, drivers, client):
    pair = networked(UPDATES)
    reached, seen = reaches_b_after_a_dies(pair, drivers(client))
    assert reached, (f"FT-DYNAMIC-1: with updateClusterClients on A and B and updateURIsSupported at its default, "
                     f"{SUBJECTS[client]} naming only A should have taken B from A's update and moved there once A "
                     f"died: {seen}")


@pytest.mark.spec("FT-DYNAMIC-1", "FT-DYNAMIC-7")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_a_client_with_update_uris_supported_false_keeps_its_own_list(networked, drivers, client):
    pair = networked(UPDATES)
    reached, seen = reaches_b_after_a_dies(pair, drivers(client), "&updateURIsSupported=false")
    assert not reached, (f"FT-DYNAMIC-7: with updateURIsSupported=false {SUBJECTS[client]} keeps the list of its own "
                         f"URI (A alone), yet it reached B: {seen}")


@pytest.mark.spec("FT-DYNAMIC-2")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_by_default_a_broker_does_not_send_its_clients_the_network_s_brokers(networked, drivers, client):
    """The configuration names none of Table 2.2's attributes: updateClusterClients is false by
    default, so a client naming A alone never learns of B."""
    pair = networked({})
    assert "updateClusterClients" not in pair.a.config_path.read_text(), "setup: the configuration names the option"
    reached, seen = reaches_b_after_a_dies(pair, drivers(client))
    assert not reached, (f"FT-DYNAMIC-2: with updateClusterClients left at its default (false) A should not send its "
                         f"clients the network's brokers, yet {SUBJECTS[client]} naming only A reached B: {seen}")
