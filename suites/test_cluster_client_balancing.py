"""Client-side load balancing over a three-node cluster, against the Artemis "Clusters" chapter,
"Client-Side Load balancing" (../shared/spec/artemis-clusters.md; catalogue
artemis_clusters.toml, CLU-CLIENT-1 to -6), on every target that launches a ``topology.cluster``
(Artemis processes with static cluster connections; reference brokers clustering Artemis-style).

Artemis documents the policies for its own client factories; brokerconf's clients implement them
(conformance/clients/load_balancing.py), so what is checked here is where the connections of
one factory really land: each connection subscribes one consumer to a fresh queue, and after each
one the nodes' consumer counts (read from the brokers, ``Node.consumer_count``) say which node got
it. The sequence of landing nodes must be the one the policy prescribes: round robin (also the
default) walks the nodes in list order from a random start, random sticky stays on its first
node, first element stays on node 0, random leaves no node out over many connections and does not
cycle. It must also equal the policy's own picks, i.e. the broker saw the connection where the
client meant it to go.

Premise: a node's consumer count is the consumers its own clients attached to its queue. Artemis
counts remote consumers as remote queue bindings, not as consumers of the local queue; a
launcher whose ``consumer_count`` also counted consumers elsewhere in the cluster would make
every landing ambiguous, and the setup check below says so.
"""

from __future__ import annotations

import random

import pytest

from conformance.clients.load_balancing import CLIENT_SUBJECT, BalancedConnections
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from suites.network_support import network_workdir, parametrize_by_target, queue
from conformance.targets.base import why_missing
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll

CAPABILITY = "topology.cluster"
NODES = ("A", "B", "C")
#: bound on a consumer count reflecting a subscription the broker has already confirmed
LANDING_TIMEOUT = 15.0
#: the random policy's draws: with 3 nodes, leaving one out has probability 3 * (2/3)**24 < 0.002
#: and never repeating a node in a row (a cycle) (2/3)**23 < 1e-4; the seed makes a run repeatable
RANDOM_CONNECTIONS = 24
SEED = 19

#: the policies are our client's (client statements): the matrix books them under its column
pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY), pytest.mark.client_subject(CLIENT_SUBJECT)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc, scope="module")


@pytest.fixture(scope="module")
def cluster(request, target_name, tmp_path_factory):
    """A started symmetric three-node cluster of ``target_name`` (the chapter's defaults), stopped
    after the module."""
    target = request.config.stash[STATE].targets.get(target_name)
    if target is None or CAPABILITY not in target.capabilities():
        why = why_missing(target, CAPABILITY) if target is not None else "unknown target"
        pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {CAPABILITY}" + (f" ({why})" if why else ""))
    workdir = network_workdir(tmp_path_factory, f"clb-{target_name}")
    launched = target.launch_topology(Topology(NODES, cluster=ClusterConnection(), prefix="clb"),
                                      Scenario(name="cluster-client-balancing", protocols=("stomp",)), workdir)
    try:
        yield launched
    finally:
        launched.stop()


def counts(cluster, destination: str) -> dict[str, int]:
    return {name: cluster[name].consumer_count(destination) for name in NODES}


def landings(cluster, factory: BalancedConnections, destination: str, n: int, spec: str) -> list[str]:
    """Open ``n`` connections through ``factory``, each subscribing to ``destination``, and return
    the node each one landed on, as the brokers' consumer counts show. The clients stay open
    until all ``n`` are made (a closed consumer would leave the counts), then are closed."""
    clients, landed = [], []
    before = counts(cluster, destination)
    try:
        for i in range(n):
            client = factory.connect(timeout=10.0)
            clients.append(client)
            client.subscribe(destination)  # returns once the broker has the subscription

            total = sum(before.values())
            now = poll(lambda: counts(cluster, destination), lambda c: sum(c.values()) > total,
                       timeout=LANDING_TIMEOUT)
            gained = [name for name in NODES if now[name] > before[name]]
            assert len(gained) == 1 and now[gained[0]] == before[gained[0]] + 1 \
                and sum(now.values()) == sum(before.values()) + 1, (
                    f"setup: connection {i + 1} should add exactly one consumer of {destination} on one node "
                    f"(counts before {before}, after {now}); a node counting other nodes' consumers, or a "
                    f"consumer not counted within {LANDING_TIMEOUT:.0f} s, makes the landing unknowable\n"
                    f"{cluster.log_tail(30)}")
            landed.append(gained[0])
            before = now
    finally:
        for client in reversed(clients):
            try:
                client.close()
            except Exception:  # noqa: BLE001 - a broken connection must not hide the outcome
                pass
    picked = [NODES[i] for i in factory.picks]
    assert landed == picked, (f"{spec}: connections landed on {landed}, but the policy "
                              f"{factory.policy.name} sent them to {picked}")
    return landed


def factory(cluster, policy: str | None, connect=None) -> BalancedConnections:
    """A STOMP factory over the cluster's nodes in node order (``connect``: for the suite's own
    tests without brokers, tests/conformance/test_cluster_client_balancing_logic.py)."""
    extra = {} if connect is None else {"connect": connect}
    return BalancedConnections(cluster.addresses("stomp"), "stomp", policy=policy, rng=random.Random(SEED), **extra)


def assert_round_robin(landed: list[str], spec: str) -> None:
    start = NODES.index(landed[0])
    expected = [NODES[(start + i) % len(NODES)] for i in range(len(landed))]
    assert landed == expected, (f"{spec}: round robin should visit the nodes in list order {NODES} from its "
                                f"first pick {landed[0]}, once per cycle; landed {landed}")


@pytest.mark.spec("CLU-CLIENT-1", "CLU-CLIENT-2")
def test_round_robin_walks_the_nodes_in_order_from_a_random_start(cluster):
    destination = queue("clb.rr")
    landed = landings(cluster, factory(cluster, "round_robin"), destination, 2 * len(NODES), "CLU-CLIENT-2")
    assert_round_robin(landed, "CLU-CLIENT-2")
    assert {n: landed.count(n) for n in NODES} == {n: 2 for n in NODES}, \
        f"CLU-CLIENT-1: six connections over three nodes should put two on each, landed {landed}"


@pytest.mark.spec("CLU-CLIENT-6")
def test_without_a_policy_connections_are_spread_round_robin(cluster):
    destination = queue("clb.default")
    landed = landings(cluster, factory(cluster, None), destination, 2 * len(NODES), "CLU-CLIENT-6")
    assert_round_robin(landed, "CLU-CLIENT-6")


@pytest.mark.spec("CLU-CLIENT-3")
def test_random_uses_every_node_without_cycling(cluster):
    destination = queue("clb.random")
    landed = landings(cluster, factory(cluster, "random"), destination, RANDOM_CONNECTIONS, "CLU-CLIENT-3")
    assert set(landed) == set(NODES), f"CLU-CLIENT-3: {RANDOM_CONNECTIONS} random picks left a node out: {landed}"
    assert any(a == b for a, b in zip(landed, landed[1:])), \
        f"CLU-CLIENT-3: {RANDOM_CONNECTIONS} random picks never repeated a node in a row (a cycle?): {landed}"


@pytest.mark.spec("CLU-CLIENT-4")
def test_random_sticky_keeps_every_connection_on_its_first_node(cluster):
    destination = queue("clb.sticky")
    landed = landings(cluster, factory(cluster, "random_sticky"), destination, 2 * len(NODES), "CLU-CLIENT-4")
    assert landed == [landed[0]] * len(landed), f"CLU-CLIENT-4: random sticky moved between nodes: {landed}"


@pytest.mark.spec("CLU-CLIENT-5")
def test_first_element_puts_every_connection_on_node_0(cluster):
    destination = queue("clb.first")
    landed = landings(cluster, factory(cluster, "first_element"), destination, len(NODES), "CLU-CLIENT-5")
    assert landed == [NODES[0]] * len(landed), \
        f"CLU-CLIENT-5: first element should always pick {NODES[0]} (position 0), landed {landed}"
