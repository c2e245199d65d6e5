"""The real Java clients reach the real brokers (issue 28): a smoke test of the driver
(drivers/java, conformance/clients/java_driver.py) before the failover and load-balancing suites
lean on it. Each pinned client connects to one broker of its own product through a failover:
URI (ActiveMQ) or an ha URL (Artemis), sends, receives, and reports the broker it is on; a
connection to a port where nothing listens fails with the library's own error, reported back.

Not tied to a catalogue statement (no ``spec`` mark): it checks the harness, not a document.
"""

from __future__ import annotations

import uuid

import pytest

from conformance.clients.java_driver import DriverError
from conformance.plugin import STATE
from conformance.scenario import Scenario
from suites.java_support import address, client_params, require_applicable, start_driver, tcp
from suites.network_support import network_workdir, parametrize_by_target
from suites.test_failover_pairs import free_port
from conformance.topology import Topology
from suites.proxy_support import fault_proxy  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.fixture(scope="module")
def node(target_name, request, tmp_path_factory):
    target = request.config.stash[STATE].targets[target_name]
    if target.kind not in ("activemq", "artemis"):
        pytest.skip(f"not applicable: the real Java clients are ActiveMQ's and Artemis's; {target_name} is neither")
    cluster = target.launch_topology(Topology(nodes=("A",), prefix="jc"), Scenario(name="java-clients-smoke"),
                                     network_workdir(tmp_path_factory, f"java-{target_name}"))
    try:
        yield target, cluster["A"]
    finally:
        cluster.stop()


def _uri(client: str, node) -> str:
    if client.startswith("activemq"):
        return f"failover:({tcp(node, client)})?randomize=false&maxReconnectAttempts=3"
    return f"{tcp(node, client)}?ha=true&reconnectAttempts=3&retryInterval=100"


@pytest.mark.parametrize("client", client_params(("activemq-5", "activemq-6", "artemis")))
def test_the_real_client_connects_sends_and_receives(node, client, tmp_path):
    target, broker = node
    require_applicable(target, client)
    queue = f"jc.smoke.{uuid.uuid4().hex[:8]}"
    with start_driver(client, tmp_path) as driver:
        conn = driver.connect(_uri(client, broker), timeout=60)
        try:
            assert conn.port == address(broker, client)[1], \
                f"the driver reports the connection on {conn.address}, not on the broker's listener"
            conn.send(queue, "hello from java")
            assert conn.receive(queue, 10.0) == "hello from java", driver.log_tail()
            assert conn.receive(queue, 0.5) is None
        finally:
            conn.close()
        with pytest.raises(DriverError) as refused:
            if client.startswith("activemq"):
                driver.connect(f"failover:(tcp://127.0.0.1:{free_port()})?startupMaxReconnectAttempts=0", timeout=60)
            else:
                driver.connect(f"tcp://127.0.0.1:{free_port()}?reconnectAttempts=0&initialConnectAttempts=1",
                               timeout=60)
        assert refused.value.java_class, f"the error should name the Java exception: {refused.value}"


@pytest.mark.parametrize("client", client_params(("activemq-5", "activemq-6", "artemis")))
def test_the_real_client_reports_its_connection_lost_and_back(node, client, fault_proxy, tmp_path):
    # the events the failover suites rely on: ActiveMQ's TransportListener, Artemis's
    # FailoverEventListener (reconnecting to the same server: reconnectAttempts)
    from suites.test_failover_pairs import Gate
    from machinery.waiting import poll

    target, broker = node
    require_applicable(target, client)
    gate = Gate(fault_proxy, address(broker, client))
    queue = f"jc.events.{uuid.uuid4().hex[:8]}"
    uri = (f"failover:(tcp://127.0.0.1:{gate.port})?initialReconnectDelay=100&maxReconnectDelay=200"
           if client.startswith("activemq") else
           f"tcp://127.0.0.1:{gate.port}?reconnectAttempts=-1&retryInterval=100&retryIntervalMultiplier=1")
    try:
        with start_driver(client, tmp_path) as driver:
            conn = driver.connect(uri, timeout=60)
            try:
                gate.close()
                assert poll(lambda: conn.events("interrupted"), bool, timeout=30, interval=0.05), \
                    f"no interruption reported: {conn.events()}{driver.log_tail()}"
                gate.open()
                lost = conn.events("interrupted")[0].mono
                assert poll(lambda: [e for e in conn.events("resumed") if e.mono > lost], bool, timeout=60,
                            interval=0.05), f"no resumption reported: {conn.events()}{driver.log_tail()}"
                conn.send(queue, "back")
                assert conn.receive(queue, 10.0) == "back"
            finally:
                conn.close()
    finally:
        gate.remove()
