"""How Artemis's Core client finds the servers it connects to (../shared/spec/artemis-clusters.md:
"Discovery Groups on the Client Side" / "Configuring client discovery", the udp:// URL and its
initial wait; "Discovery using static Connectors" / "Configuring a Client Connection", the
bracketed server list; catalogue artemis_clusters.toml CLU-DISC-8, CLU-DISC-11, CLU-STATIC-2),
checked on the client the chapter documents: artemis-jms-client 2.40.0 through brokerconf's Java
driver (drivers/java; issue 28), against a three-node Artemis cluster whose nodes find each other
by UDP, so that its broadcasts are there for the client to hear.

The multicast group is the launched cluster's (`UdpGroup`, a random group and port on loopback).
The client's URL adds ``localBindAddress=127.0.0.1`` to the group and port the document writes:
the client's discovery endpoint then joins the group on the loopback interface, where the nodes
broadcast (conformance/targets/artemis/cluster.py says why their datagrams stay on lo); without it
the client would join on whichever interface the system picks for the group, which need not be lo.

The initial-wait measurements count from the factory's creation, which the driver reports (its
``factory`` command makes a factory under a name, and connections name it), to the library handing
the first connection over, or, where nobody broadcasts, to the client's own log line saying its
wait for a first broadcast ran out (AMQ212077, stamped by the driver's log with the JVM's clock,
the clock of the creation time it reports too).
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime

import pytest

from conformance.clients.java_driver import DriverError, port_of
from suites.java_support import SUBJECTS, address, artemis_cluster, artemis_driver, tcp
from suites.network_support import parametrize_by_target
from suites.test_cluster_client_balancing_real import landings
from conformance.targets.artemis.cluster import ArtemisCluster, UdpGroup
from conformance.topology import ClusterConnection, Topology
from machinery.process import free_ports

CAPABILITY = "topology.cluster"
SUBJECT = SUBJECTS["artemis"]
NODES = ("A", "B", "C")
#: short, so that a client that connects on the first broadcast it hears does so well inside any
#: initial wait below (the chapter's default is 2000 ms)
BROADCAST_PERIOD_MS = 500
UDP_CLUSTER = Topology(NODES, cluster=ClusterConnection(discovery="udp", broadcast_period_ms=BROADCAST_PERIOD_MS),
                       prefix="cdisc")
#: the chapter's default initial wait ("Configuring client discovery")
DOCUMENTED_DEFAULT_WAIT_MS = 10000
#: an initial wait of our own choosing, well apart from the default, so that a factory that ignores
#: the setting shows
SET_WAIT_MS = 4000
#: The initial wait is a timed wait on the JVM's clock, which does not end early; the creation time
#: and the end are both read from that clock (the log's stamps have millisecond resolution), so a
#: few milliseconds of rounding is all that may come before the bound.
WAIT_EARLY_MS = 20
#: A timed wait on a loaded two-core machine wakes late, never early; once it ends the factory
#: opens one TCP connection and does the Core handshake on loopback (well under a second unloaded),
#: or, hearing nobody, writes its log line. 5 s covers that under the load the suites run with,
#: and stays below the gap between a wait of SET_WAIT_MS and one of the default.
WAIT_LATE_MS = 5000
#: the client's log line when its wait for a first broadcast runs out before it retries
#: (ActiveMQClientLogger.broadcastTimeout) and the driver's log-stamp options that date it
BROADCAST_TIMEOUT_LINE = "AMQ212077"
LOG_STAMPS = ("-Dorg.slf4j.simpleLogger.showDateTime=true",
              "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
#: a loopback address other than 127.0.0.1 for the client's end of its sockets (CLU-STATIC-2):
#: every 127.0.0.0/8 address is the loopback interface's, so a socket can be bound to it unasked
CLIENT_ADDRESS = "127.0.0.23"
DEFAULT_CLIENT_ADDRESS = "127.0.0.1"

pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc, scope="module")


@pytest.fixture(scope="module")
def cluster(request, target_name, tmp_path_factory):
    # UDP discovery is launched on local JVMs only: a container target is not applicable
    yield from artemis_cluster(request, target_name, tmp_path_factory, UDP_CLUSTER, "cluster-client-discovery-real",
                               "the discovery URLs checked here")


@pytest.fixture(scope="module")
def driver(cluster, tmp_path_factory):
    yield from artemis_driver(tmp_path_factory, jvm_options=LOG_STAMPS)


def udp_url(group: UdpGroup, query: str = "") -> str:
    """The client's discovery URL for ``group`` (the module docstring says why localBindAddress)."""
    return (f"udp://{group.group_address}:{group.group_port}?localBindAddress={group.local_bind_address}"
            + (f"&{query}" if query else ""))


def cluster_group(cluster) -> UdpGroup:
    """The multicast group the launched Artemis cluster broadcasts on (its launcher picked it)."""
    assert isinstance(cluster, ArtemisCluster) and cluster.udp is not None, (
        f"setup: a local Artemis cluster with discovery 'udp' expected, got {type(cluster).__name__} "
        f"without a UDP group")
    return cluster.udp


def silent_group(cluster) -> UdpGroup:
    """A random loopback group and port nobody broadcasts on (not the cluster's)."""
    while (group := UdpGroup.fresh()).group_port == cluster_group(cluster).group_port:
        pass
    return group


# --------------------------------------------------------------------------- CLU-DISC-8


@pytest.mark.spec("CLU-DISC-8")
@pytest.mark.client_subject(SUBJECT)
def test_real_udp_url_spreads_connections_over_the_servers_it_hears(cluster, driver):
    """A factory made from the udp:// URL of the nodes' broadcast group, with nothing else set
    (the default load-balancing policy, round robin), connects, and its connections land on every
    node of the cluster: six connections over the three servers it heard."""
    url = udp_url(cluster_group(cluster))
    landed = landings(cluster, driver, url, 2 * len(NODES), "CLU-DISC-8")
    print(f"CLU-DISC-8 {url}: landed {landed}")
    assert set(landed) == set(NODES), (
        f"CLU-DISC-8: a factory discovering the cluster through {url} should spread its connections over "
        f"every server it heard, {list(NODES)}; {len(landed)} connections landed on {landed}")


# --------------------------------------------------------------------------- CLU-DISC-11


def _elapsed_ms(since: float, until: float) -> float:
    return (until - since) * 1000


@pytest.mark.spec("CLU-DISC-11")
@pytest.mark.client_subject(SUBJECT)
@pytest.mark.parametrize("query, wait_ms", [(f"initialWaitTimeout={SET_WAIT_MS}", SET_WAIT_MS),
                                            ("", DOCUMENTED_DEFAULT_WAIT_MS)],
                         ids=["initialWaitTimeout-set", "default"])
def test_real_udp_factory_waits_its_initial_wait_before_its_first_connection(cluster, driver, query, wait_ms):
    """Used at once after its creation, a discovery factory makes its first connection only once
    the initial wait (the URL's initialWaitTimeout, 10000 ms by default) has passed since it was
    made, with the cluster broadcasting every BROADCAST_PERIOD_MS all along."""
    url = udp_url(cluster_group(cluster), query)
    name = f"wait-{uuid.uuid4().hex[:8]}"
    created = driver.factory(url, name)
    conn = driver.connect(url, factory=name, timeout=60)
    try:
        assert conn.connected_mono is not None, "setup: the driver did not report when the connection was made"
        elapsed = _elapsed_ms(created, conn.connected_mono)
    finally:
        conn.close()
    print(f"CLU-DISC-11 {url}: first connection {elapsed:.0f} ms after the factory was made "
          f"(broadcast-period {BROADCAST_PERIOD_MS} ms)")
    assert wait_ms - WAIT_EARLY_MS <= elapsed <= wait_ms + WAIT_LATE_MS, (
        f"CLU-DISC-11: used at once after its creation, a factory for {url} should make its first connection "
        f"once its initial wait of {wait_ms} ms has passed since its creation; it made it {elapsed:.0f} ms after "
        f"(bounds {wait_ms - WAIT_EARLY_MS} to {wait_ms + WAIT_LATE_MS} ms; the nodes broadcast every "
        f"{BROADCAST_PERIOD_MS} ms)")


def _log_time_ms(line: str) -> float | None:
    """The epoch milliseconds of a driver log line stamped by LOG_STAMPS, None for an unstamped one."""
    try:
        return datetime.fromisoformat(line.split(" ", 1)[0]).timestamp() * 1000
    except ValueError:
        return None


def first_wait_of_a_silent_factory(driver, group: UdpGroup, query: str) -> tuple[float, float, str]:
    """Make a factory for ``group`` (where nobody broadcasts) with ``query``, use it at once, and
    return (ms from its creation to the end of its first wait for a broadcast, ms to its giving
    up, the error it gave up with). The first wait ends with the client's AMQ212077 line (it then
    waits once more, its initialConnectAttempts); a client that does not retry ends it by giving up."""
    url = udp_url(group, query)
    name = f"silent-{uuid.uuid4().hex[:8]}"
    mark = driver.log_mark()  # the earlier steps' lines (their factories may still retry) are not this one's
    created = driver.request("factory", timeout=30, factory=name, uri=url)
    created_mono, created_wall_ms = float(created["created_mono"]), float(created["created_wall_ms"])
    try:
        conn = driver.connect(url, factory=name, timeout=120)
    except DriverError as exc:
        failed = exc.reply
    else:
        conn.close()
        raise AssertionError(f"setup: a factory for {url} connected, though nobody should broadcast on "
                             f"{group.group_address}:{group.group_port}")
    gave_up = _elapsed_ms(created_mono, float(failed["mono"]))
    error = f"{failed.get('class')}: {failed.get('error')} (cause {failed.get('cause')})"
    assert "broadcast" in error.lower(), f"setup: the factory for {url} failed otherwise than for want of a broadcast: {error}"
    lines = driver.log_since(mark).splitlines()
    ends = [t for line in lines if BROADCAST_TIMEOUT_LINE in line
            and (t := _log_time_ms(line)) is not None and t >= created_wall_ms]
    first_wait = ends[0] - created_wall_ms if ends else gave_up
    print(f"CLU-DISC-11 silent {url}: first wait ended {first_wait:.0f} ms after creation "
          f"({'AMQ212077' if ends else 'no AMQ212077: the give-up'}), gave up after {gave_up:.0f} ms: {error}")
    return first_wait, gave_up, error


@pytest.mark.spec("CLU-DISC-11")
@pytest.mark.client_subject(SUBJECT)
def test_real_udp_factory_hearing_nobody_waits_the_documented_default(cluster, driver):
    """Where nobody broadcasts, a factory used at once waits for a first broadcast as long as its
    initial wait, 10000 ms by default, before it can tell it heard nobody."""
    first_wait, gave_up, error = first_wait_of_a_silent_factory(driver, silent_group(cluster), "")
    low, high = DOCUMENTED_DEFAULT_WAIT_MS - WAIT_EARLY_MS, DOCUMENTED_DEFAULT_WAIT_MS + WAIT_LATE_MS
    assert low <= first_wait <= high, (
        f"CLU-DISC-11: with initialWaitTimeout unset and nobody broadcasting, the factory's first wait for a "
        f"broadcast should last the default {DOCUMENTED_DEFAULT_WAIT_MS} ms; it ended {first_wait:.0f} ms after its "
        f"creation (bounds {low} to {high} ms; gave up after {gave_up:.0f} ms: {error})")


@pytest.mark.spec("CLU-DISC-11")
@pytest.mark.client_subject(SUBJECT)
def test_real_udp_factory_hearing_nobody_waits_the_initial_wait_its_url_sets(cluster, driver):
    """The same with the URL parameter the chapter names, initialWaitTimeout=SET_WAIT_MS: the first
    wait must last that long, not the default. Control first: the same wait set through the name
    the 2.40 library's DiscoveryGroupConfiguration has (discoveryInitialWaitTimeout) must show as
    SET_WAIT_MS, or this measurement could not tell a set wait from the default."""
    group = silent_group(cluster)
    control, _, _ = first_wait_of_a_silent_factory(driver, group, f"discoveryInitialWaitTimeout={SET_WAIT_MS}")
    low, high = SET_WAIT_MS - WAIT_EARLY_MS, SET_WAIT_MS + WAIT_LATE_MS
    assert low <= control <= high, (
        f"setup: with discoveryInitialWaitTimeout={SET_WAIT_MS} the first wait ended {control:.0f} ms after "
        f"creation, outside {low} to {high} ms: this measurement cannot tell a set wait from the default")
    first_wait, gave_up, error = first_wait_of_a_silent_factory(driver, group, f"initialWaitTimeout={SET_WAIT_MS}")
    assert low <= first_wait <= high, (
        f"CLU-DISC-11: with initialWaitTimeout={SET_WAIT_MS} in its URL and nobody broadcasting, the factory's "
        f"first wait for a broadcast should last {SET_WAIT_MS} ms; it ended {first_wait:.0f} ms after its creation "
        f"(bounds {low} to {high} ms; gave up after {gave_up:.0f} ms: {error}; with "
        f"discoveryInitialWaitTimeout={SET_WAIT_MS} it ended after {control:.0f} ms)")


# --------------------------------------------------------------------------- CLU-STATIC-2


def _ip_port(socket_address: str | None) -> tuple[str, int] | None:
    """("127.0.0.23", 40123) from the transports' "/127.0.0.23:40123" (or "host/127.0.0.23:40123")."""
    match = re.search(r"(\d+\.\d+\.\d+\.\d+):(\d+)$", socket_address or "")
    return (match.group(1), int(match.group(2))) if match else None


def client_ends_seen_by(node) -> set[tuple[str, int]]:
    """The client ends (address, port) of every connection ``node``'s broker has open
    (ActiveMQServerControl.listRemoteAddresses over Jolokia)."""
    mbean = f'org.apache.activemq.artemis:broker="{node.process.name}"'
    listed = node.process.jolokia({"type": "exec", "mbean": mbean, "operation": "listRemoteAddresses()"})
    return {end for entry in listed or [] if (end := _ip_port(entry)) is not None}


def client_ends(cluster, driver, url: str, n: int) -> dict[str, list[str]]:
    """Open ``n`` connections of the factory for ``url``; return, per node they landed on, the
    address each came from, as the node's broker lists the connection (the driver's report of its
    local end, found among the broker's client connections). All stay open until the last is made."""
    node_of_port = {address(cluster[name], "artemis")[1]: name for name in NODES}
    connections, seen = [], {}
    try:
        for i in range(n):
            conn = driver.connect(url, timeout=60)
            connections.append(conn)
            node = node_of_port.get(port_of(conn.first_address))
            local = _ip_port(conn.local_address)
            assert node is not None and local is not None, (
                f"setup: connection {i + 1} of {url} reports being on {conn.first_address} from {conn.local_address}, "
                f"not a node of the cluster {node_of_port}")
            listed = client_ends_seen_by(cluster[node])
            assert local in listed, (f"setup: node {node} does not list connection {i + 1}'s client end "
                                     f"{local[0]}:{local[1]} among its connections {sorted(listed)}")
            seen.setdefault(node, []).append(local[0])
    finally:
        for conn in reversed(connections):
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection must not hide the outcome
                pass
    return seen


def bracketed(cluster, local_ports: list[int], query: str) -> str:
    """``(tcp://A?localPort=p1,tcp://B?localPort=p2)?query``: A and B, each with a client port of its
    own inside the bracket (2.40's Netty connector binds its localAddress only together with a
    non-zero localPort; localAddress alone left every connection on 127.0.0.1 in the first run of
    this test), and ``query`` after the bracket."""
    servers = ",".join(f"{tcp(cluster[name], 'artemis')}?localPort={port}"
                       for name, port in zip(NODES[:2], local_ports))
    return f"({servers})?{query}"


@pytest.mark.spec("CLU-STATIC-2")
@pytest.mark.client_subject(SUBJECT)
def test_real_query_after_the_bracket_applies_to_every_server_of_the_list(cluster, driver):
    """``localAddress=127.0.0.23`` written once after the bracket of a two-server list must hold for
    the connection to A and the one to B alike: the brokers see both come from 127.0.0.23 (each
    server has its own client port inside the bracket, see `bracketed`). A server the query did not
    reach would bind its port on every address, and its connection would come from 127.0.0.1. The
    factory balances round robin over the two (useTopologyForLoadBalancing=false, ha=false: the
    list is all it uses), so two connections reach both. Control: the same list without
    localAddress, whose connections come from 127.0.0.1, so the check can fail. Fresh client ports
    for each factory: the first factory's closed sockets keep theirs in TIME_WAIT."""
    ports = free_ports(4)
    balancing = "ha=false&useTopologyForLoadBalancing=false"
    control_url = bracketed(cluster, ports[:2], balancing)
    url = bracketed(cluster, ports[2:], f"{balancing}&localAddress={CLIENT_ADDRESS}")
    n = 2
    control = client_ends(cluster, driver, control_url, n)
    seen = client_ends(cluster, driver, url, n)
    print(f"CLU-STATIC-2 {control_url}: {control}; {url}: {seen}")
    assert set(control) == set(NODES[:2]) and all(a == DEFAULT_CLIENT_ADDRESS for ends in control.values()
                                                  for a in ends), (
        f"setup: without localAddress the {n} connections of {control_url} should reach {list(NODES[:2])} from "
        f"{DEFAULT_CLIENT_ADDRESS}; the brokers saw {control}")
    assert set(seen) == set(NODES[:2]), (
        f"CLU-STATIC-2: the {n} connections of {url} should reach both servers of its list, {list(NODES[:2])}; "
        f"the brokers saw {seen}")
    wrong = {node: ends for node, ends in seen.items() if any(a != CLIENT_ADDRESS for a in ends)}
    assert not wrong, (
        f"CLU-STATIC-2: localAddress={CLIENT_ADDRESS}, written after the bracket of {url}, should apply to every "
        f"server of the list; the brokers saw connections from other addresses: {seen}")
