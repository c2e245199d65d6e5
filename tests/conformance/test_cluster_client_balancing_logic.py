"""The client-balancing cluster suite's checks (suites/test_cluster_client_balancing.py)
over a fake three-node cluster: they pass when each connection's consumer shows up on the node the
policy picked, and fail (with the spec ID) when the nodes say otherwise, so the suite cannot pass
whatever the brokers do."""

from __future__ import annotations

import pytest

from suites import test_cluster_client_balancing as suite


class FakeNode:
    def __init__(self, name: str) -> None:
        self.name = name
        self.consumers: dict[str, int] = {}

    def consumer_count(self, destination: str) -> int:
        return self.consumers.get(destination, 0)


class FakeCluster:
    """Nodes A, B, C on ports 1, 2, 3; ``route`` maps the port a client dialled to the node that
    gets its consumer (a faithful cluster: the node behind that port)."""

    def __init__(self, route=None, count_everywhere: bool = False) -> None:
        self.nodes = {name: FakeNode(name) for name in suite.NODES}
        self.route = route or {1: "A", 2: "B", 3: "C"}
        self.count_everywhere = count_everywhere
        self.closed = 0

    def __getitem__(self, name: str) -> FakeNode:
        return self.nodes[name]

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)]

    def log_tail(self, lines: int = 40) -> str:
        return "(fake log)"

    def connect(self, host, port, protocol, **options):
        cluster = self

        class Client:
            def subscribe(self, destination, **kw):
                targets = suite.NODES if cluster.count_everywhere else (cluster.route[port],)
                for name in targets:
                    node = cluster.nodes[name]
                    node.consumers[destination] = node.consumers.get(destination, 0) + 1

            def close(self):
                cluster.closed += 1

        return Client()


def run(cluster: FakeCluster, policy, n: int, spec: str) -> list[str]:
    return suite.landings(cluster, suite.factory(cluster, policy, connect=cluster.connect), "queue://q", n, spec)


@pytest.mark.parametrize("policy", [None, "round_robin"])
def test_round_robin_passes_on_a_faithful_cluster(policy):
    cluster = FakeCluster()
    landed = run(cluster, policy, 6, "CLU-CLIENT-2")
    suite.assert_round_robin(landed, "CLU-CLIENT-2")
    assert cluster.closed == 6


def test_a_cluster_that_puts_consumers_elsewhere_fails_with_the_spec_id():
    cluster = FakeCluster(route={1: "A", 2: "A", 3: "C"})  # node B's port leads to A
    with pytest.raises(AssertionError, match="^CLU-CLIENT-2: connections landed on"):
        run(cluster, "round_robin", 6, "CLU-CLIENT-2")
    assert cluster.closed == 6


def test_a_node_counting_every_nodes_consumers_is_reported_as_a_setup_problem():
    cluster = FakeCluster(count_everywhere=True)
    with pytest.raises(AssertionError, match="^setup: connection 1 should add exactly one consumer"):
        run(cluster, "first_element", 3, "CLU-CLIENT-5")
    assert cluster.closed == 1


def test_round_robin_shape_check_fails_on_a_sticky_sequence():
    with pytest.raises(AssertionError, match="^CLU-CLIENT-2: round robin should visit"):
        suite.assert_round_robin(["B", "B", "B"], "CLU-CLIENT-2")


def test_sticky_first_and_random_pass_on_a_faithful_cluster():
    assert set(run(FakeCluster(), "random_sticky", 6, "CLU-CLIENT-4")) != set(suite.NODES)
    assert run(FakeCluster(), "first_element", 3, "CLU-CLIENT-5") == ["A", "A", "A"]
    landed = run(FakeCluster(), "random", suite.RANDOM_CONNECTIONS, "CLU-CLIENT-3")
    assert set(landed) == set(suite.NODES)
