"""Client-side load balancing (the Artemis "Clusters" chapter, "Client-Side Load balancing";
../shared/spec/artemis-clusters.md; catalogue artemis_clusters.toml, CLU-CLIENT-1 to -7) checked
on the client the chapter documents: Artemis's Core client (artemis-jms-client 2.40.0, through
brokerconf's Java driver, drivers/java; issue 28), against a three-node Artemis cluster.
test_cluster_client_balancing.py checks our own implementation of the same policies.

One connection factory per policy (the driver keeps a factory per URL, so the policy's state, kept
in the factory's server locator, lives across its connections), with the three nodes' core
acceptors written in its URL in node order and ``useTopologyForLoadBalancing=false``, the way the
chapter says a factory balances over an explicit list (CLU-CLIENT-7); ``ha=false`` so that the
client does not follow the cluster's topology either. Each connection subscribes one consumer to a
fresh queue; the node whose consumer count grew is where it landed, and the driver's report of the
connection's remote address must name the same node. CLU-CLIENT-7 (where the servers come from)
compares such a factory with one that keeps the default and names one node in its URL.
"""

from __future__ import annotations

import pytest

from suites.java_support import address, artemis_cluster, artemis_driver
from suites.network_support import parametrize_by_target, queue
from suites.test_cluster_client_balancing import (LANDING_TIMEOUT, NODES, RANDOM_CONNECTIONS,
                                                              assert_round_robin, counts)
from conformance.clients.java_driver import port_of
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll

CAPABILITY = "topology.cluster"
POLICY_PACKAGE = "org.apache.activemq.artemis.api.core.client.loadbalance"

pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc, scope="module")


@pytest.fixture(scope="module")
def cluster(request, target_name, tmp_path_factory):
    yield from artemis_cluster(request, target_name, tmp_path_factory,
                               Topology(NODES, cluster=ClusterConnection(), prefix="clbr"),
                               "cluster-client-balancing-real", "the load-balancing policies checked here")


@pytest.fixture(scope="module")
def driver(cluster, tmp_path_factory):
    yield from artemis_driver(tmp_path_factory)


def _url(cluster, policy: str | None, nodes: tuple[str, ...] = NODES, use_topology: bool = False) -> str:
    """The factory URL naming ``nodes`` with the ``policy`` load-balancing class (None: the
    factory's default). ``use_topology`` False pins the factory to the URL's servers, as the policy
    statements need; True leaves ``useTopologyForLoadBalancing`` at its default."""
    listed = ",".join("tcp://{}:{}".format(*address(cluster[name], "artemis")) for name in nodes)
    params = "ha=false" + ("" if use_topology else "&useTopologyForLoadBalancing=false")
    if policy is not None:
        params += f"&connectionLoadBalancingPolicyClassName={POLICY_PACKAGE}.{policy}ConnectionLoadBalancingPolicy"
    return f"({listed})?{params}"


def landings(cluster, driver, url: str, n: int, spec: str) -> list[str]:
    """Open ``n`` connections of the factory for ``url``, each subscribing one consumer to a fresh
    queue, and return the node each landed on (consumer counts), checked against the node the
    driver says the connection is on. All stay open until the last is made, then are closed."""
    destination = queue("clbr")
    name = destination.split("://", 1)[1]
    node_of_port = {address(cluster[node], "artemis")[1]: node for node in NODES}
    connections, landed, reported = [], [], []
    before = counts(cluster, destination)
    try:
        for i in range(n):
            conn = driver.connect(url, timeout=60)
            connections.append(conn)
            conn.subscribe(name)
            total = sum(before.values())
            now = poll(lambda: counts(cluster, destination), lambda c: sum(c.values()) > total, timeout=LANDING_TIMEOUT)
            gained = [node for node in NODES if now[node] > before[node]]
            assert len(gained) == 1 and sum(now.values()) == total + 1, (
                f"setup: connection {i + 1} should add exactly one consumer of {destination} on one node "
                f"(counts before {before}, after {now})")
            landed.append(gained[0])
            reported.append(node_of_port.get(port_of(conn.first_address), conn.first_address))
            before = now
    finally:
        for conn in reversed(connections):
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection must not hide the outcome
                pass
    print(f"{spec} landings {url.rsplit('.', 1)[-1]}: {landed}")
    assert landed == reported, f"{spec}: the brokers counted the consumers on {landed}, the client reports {reported}"
    return landed


@pytest.mark.spec("CLU-CLIENT-1", "CLU-CLIENT-2")
@pytest.mark.client_subject("artemis-core-client 2.40.0")
def test_real_round_robin_walks_the_nodes_in_order_from_a_random_start(cluster, driver):
    landed = landings(cluster, driver, _url(cluster, "RoundRobin"), 2 * len(NODES), "CLU-CLIENT-2")
    assert_round_robin(landed, "CLU-CLIENT-2")
    assert {n: landed.count(n) for n in NODES} == {n: 2 for n in NODES}, \
        f"CLU-CLIENT-1: six connections over three nodes should put two on each, landed {landed}"


@pytest.mark.spec("CLU-CLIENT-6")
@pytest.mark.client_subject("artemis-core-client 2.40.0")
def test_real_client_without_a_policy_spreads_round_robin(cluster, driver):
    landed = landings(cluster, driver, _url(cluster, None), 2 * len(NODES), "CLU-CLIENT-6")
    assert_round_robin(landed, "CLU-CLIENT-6")


@pytest.mark.spec("CLU-CLIENT-3")
@pytest.mark.client_subject("artemis-core-client 2.40.0")
def test_real_random_uses_every_node_without_cycling(cluster, driver):
    landed = landings(cluster, driver, _url(cluster, "Random"), RANDOM_CONNECTIONS, "CLU-CLIENT-3")
    assert set(landed) == set(NODES), f"CLU-CLIENT-3: {RANDOM_CONNECTIONS} random picks left a node out: {landed}"
    assert any(a == b for a, b in zip(landed, landed[1:])), \
        f"CLU-CLIENT-3: {RANDOM_CONNECTIONS} random picks never repeated a node in a row (a cycle?): {landed}"


@pytest.mark.spec("CLU-CLIENT-4")
@pytest.mark.client_subject("artemis-core-client 2.40.0")
def test_real_random_sticky_keeps_every_connection_on_its_first_node(cluster, driver):
    landed = landings(cluster, driver, _url(cluster, "RandomSticky"), 2 * len(NODES), "CLU-CLIENT-4")
    assert landed == [landed[0]] * len(landed), f"CLU-CLIENT-4: random sticky moved between nodes: {landed}"


@pytest.mark.spec("CLU-CLIENT-5")
@pytest.mark.client_subject("artemis-core-client 2.40.0")
def test_real_first_element_puts_every_connection_on_node_0(cluster, driver):
    landed = landings(cluster, driver, _url(cluster, "FirstElement"), len(NODES), "CLU-CLIENT-5")
    assert landed == [NODES[0]] * len(landed), \
        f"CLU-CLIENT-5: first element should always pick {NODES[0]} (position 0), landed {landed}"


@pytest.mark.spec("CLU-CLIENT-7")
@pytest.mark.client_subject("artemis-core-client 2.40.0")
def test_real_factory_balances_over_the_cluster_by_default_and_over_its_url_without_the_topology(cluster, driver):
    """The default takes the servers from the cluster (the topology the first connection brings),
    so a factory whose URL names A alone still reaches B and C; with
    useTopologyForLoadBalancing=false only the URL's servers (A and B here) are used. Round robin
    over six connections visits every server it balances over."""
    n = 2 * len(NODES)
    from_topology = landings(cluster, driver, _url(cluster, "RoundRobin", (NODES[0],), use_topology=True), n,
                              "CLU-CLIENT-7")
    from_url = landings(cluster, driver, _url(cluster, "RoundRobin", NODES[:2]), n, "CLU-CLIENT-7")
    assert set(from_url) == set(NODES[:2]), (
        f"CLU-CLIENT-7: with useTopologyForLoadBalancing=false the factory should balance over the servers of its "
        f"URL, {list(NODES[:2])}; {n} connections landed on {from_url}")
    assert set(from_topology) == set(NODES), (
        f"CLU-CLIENT-7: by default the factory balances over the servers the cluster tells it of, so its "
        f"connections should reach every node {list(NODES)} although its URL names {NODES[0]} alone; {n} "
        f"connections landed on {from_topology}")
