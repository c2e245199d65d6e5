"""Initial distribution across an in-process cluster (artemis-clusters.md, "Server-Side Message
Load Balancing", message-load-balancing and max-hops; "Chain cluster")."""

from __future__ import annotations

import pytest

from conformance.topology import ClusterConnection, Topology
from conformance.targets.reference.clustering import ReferenceCluster
from conformance.waiting import settle
from machinery.waiting import poll

from .helpers import NodeClient, launch, wait_remote_consumers


@pytest.fixture
def clusters():
    started = []

    def make(*args, **kwargs):
        cluster = launch(*args, **kwargs)
        started.append(cluster)
        return cluster
    yield make
    for cluster in started:
        cluster.stop()


def sizes(cluster, queue="orders"):
    return {name: node.queue_size(f"queue://{queue}") for name, node in cluster.nodes.items()}


def test_strict_round_robins_to_every_node_with_the_queue_consumers_or_not(clusters):
    cluster = clusters(("A", "B", "C"), message_load_balancing="STRICT")
    a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
    b.unsubscribe(b.subscribe("orders"))  # B has the queue, without consumers; C has none
    wait_remote_consumers(cluster["A"], "orders", "B", 0)
    for i in range(6):
        a.send("orders", f"m{i}")
    seen = poll(lambda: sizes(cluster), lambda s: sum(s.values()) == 6, timeout=10)
    assert seen == {"A": 3, "B": 3, "C": 0}, f"STRICT: expected A and B to get 3 each, C none, got {seen}"


def test_on_demand_forwards_only_to_nodes_with_consumers(clusters):
    cluster = clusters(("A", "B", "C"), message_load_balancing="ON_DEMAND")
    a, b, c = (NodeClient(cluster[n]) for n in "ABC")
    c.unsubscribe(c.subscribe("orders"))  # C has the queue, no consumer
    on_b = b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    wait_remote_consumers(cluster["A"], "orders", "C", 0)
    for i in range(4):
        a.send("orders", f"m{i}")
    got = poll(lambda: b.bodies(on_b), lambda x: len(x) == 4, timeout=10)
    assert got == ["m0", "m1", "m2", "m3"], f"ON_DEMAND: B (the only consumer) should get all 4, got {got}"
    assert sizes(cluster)["C"] == 0 and sizes(cluster)["A"] == 0


def test_on_demand_round_robins_between_local_and_remote_consumers(clusters):
    cluster = clusters(("A", "B"))  # ON_DEMAND is the default
    a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
    on_a, on_b = a.subscribe("orders"), b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    for i in range(6):
        a.send("orders", f"m{i}")
    poll(lambda: len(a.bodies(on_a)) + len(b.bodies(on_b)), lambda n: n == 6, timeout=10)
    assert (len(a.bodies(on_a)), len(b.bodies(on_b))) == (3, 3), \
        f"round robin A/B: {a.bodies(on_a)} / {b.bodies(on_b)}"


def test_on_demand_without_any_consumer_keeps_messages_local(clusters):
    cluster = clusters(("A", "B"))
    a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
    b.unsubscribe(b.subscribe("orders"))
    wait_remote_consumers(cluster["A"], "orders", "B", 0)
    for i in range(3):
        a.send("orders", f"m{i}")
    settle()
    assert sizes(cluster) == {"A": 3, "B": 0}


def test_on_demand_considers_selectors(clusters):
    cluster = clusters(("A", "B", "C"))
    a, b, c = (NodeClient(cluster[n]) for n in "ABC")
    on_b = b.subscribe("orders", selector="colour = 'red'")
    on_c = c.subscribe("orders", selector="colour = 'blue'")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    wait_remote_consumers(cluster["A"], "orders", "C", 1)
    for i, colour in enumerate(["red", "blue", "red", "green"]):
        a.send("orders", f"{colour}{i}", {"colour": colour})
    poll(lambda: len(b.bodies(on_b)) + len(c.bodies(on_c)), lambda n: n == 3, timeout=10)
    settle()
    assert b.bodies(on_b) == ["red0", "red2"] and c.bodies(on_c) == ["blue1"]
    assert sizes(cluster)["A"] == 1, "green matches no selector anywhere: it stays on A"


def test_off_never_forwards(clusters):
    cluster = clusters(("A", "B"), message_load_balancing="OFF")
    a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
    on_b = b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    for i in range(3):
        a.send("orders", f"m{i}")
    settle()
    assert b.bodies(on_b) == [] and sizes(cluster)["A"] == 3


def test_never_to_a_node_without_the_queue(clusters):
    cluster = clusters(("A", "B"), message_load_balancing="STRICT")
    a = NodeClient(cluster["A"])
    settle(0.3)
    for i in range(4):
        a.send("orders", f"m{i}")
    settle()
    assert sizes(cluster) == {"A": 4, "B": 0}


def test_address_prefixes_and_exclusions(clusters):
    cluster = clusters(("A", "B"), address="eu,!eu.uk")
    a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
    on_b = {q: b.subscribe(q) for q in ("eu.de", "eu.uk", "us")}
    for q in on_b:
        wait_remote_consumers(cluster["A"], q, "B", 1) if q == "eu.de" else None
    for q in on_b:
        a.send(q, q)
    got = poll(lambda: b.bodies(on_b["eu.de"]), lambda x: x == ["eu.de"], timeout=10)
    settle()
    assert got == ["eu.de"], "eu.de begins with the included prefix eu: forwarded to B's consumer"
    assert b.bodies(on_b["eu.uk"]) == [] and cluster["A"].queue_size("queue://eu.uk") == 1, \
        "eu.uk is excluded (!eu.uk wins over eu): stays on A"
    assert b.bodies(on_b["us"]) == [] and cluster["A"].queue_size("queue://us") == 1, "us is outside the cluster"


def test_max_hops_two_reaches_the_end_of_a_chain():
    topology = Topology(("A", "B", "C"), cluster=ClusterConnection(max_hops=2, connections=(("A", "B"), ("B", "C"))),
                        prefix="chain")
    cluster = ReferenceCluster(topology)
    cluster.start(timeout=15)
    try:
        a, c = NodeClient(cluster["A"]), NodeClient(cluster["C"])
        on_c = c.subscribe("orders")
        wait_remote_consumers(cluster["A"], "orders", "C", 1)
        for i in range(3):
            a.send("orders", f"m{i}")
        got = poll(lambda: c.bodies(on_c), lambda x: len(x) == 3, timeout=10)
        assert got == ["m0", "m1", "m2"], f"A should forward via B to C's consumer, C got {got}"
        assert cluster["B"].queue_size("queue://orders") == 0
    finally:
        cluster.stop()


def test_max_hops_one_does_not_see_past_the_next_node():
    topology = Topology(("A", "B", "C"), cluster=ClusterConnection(max_hops=1, connections=(("A", "B"), ("B", "C"))),
                        prefix="chain")
    cluster = ReferenceCluster(topology)
    cluster.start(timeout=15)
    try:
        a, c = NodeClient(cluster["A"]), NodeClient(cluster["C"])
        on_c = c.subscribe("orders")
        wait_remote_consumers(cluster["B"], "orders", "C", 1)
        settle()
        assert cluster["A"].cluster_call(lambda s: s.table.remote_queues("orders")) == {}, \
            "with max_hops 1, A must not learn C's queue"
        a.send("orders", "m0")
        settle()
        assert c.bodies(on_c) == [] and cluster["A"].queue_size("queue://orders") == 1
    finally:
        cluster.stop()
