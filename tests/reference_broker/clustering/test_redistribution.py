"""Message redistribution (artemis-clusters.md, "Message Redistribution" and "Redistribution and
filters"): after the last consumer of a queue closed, once redistribution_delay passed, its
messages move to a node whose queue has consumers; a consumer returning in time keeps them; -1
never; filters are ignored (the myProperty example)."""

from __future__ import annotations

import time

import pytest

from conformance.waiting import settle
from machinery.waiting import poll

from .helpers import NodeClient, launch, wait_remote_consumers


@pytest.fixture
def pair(request):
    clusters = []

    def make(**options):
        cluster = launch(("A", "B"), **options)
        clusters.append(cluster)
        return cluster, NodeClient(cluster["A"]), NodeClient(cluster["B"])
    yield make
    for cluster in clusters:
        cluster.stop()


def strand_on_a(cluster, a, b, count=3):
    """Messages on A's queue with nobody there, while B's queue has a consumer created after."""
    hold = a.subscribe("orders")  # a consumer on A so initial distribution keeps them local...
    cluster["A"].call(lambda: a.connection.consumers[hold].__setattr__("writable", False))  # ...not taking them
    for i in range(count):
        a.send("orders", f"m{i}")
    return hold


def test_delay_zero_moves_at_once(pair):
    cluster, a, b = pair(redistribution_delay_ms=0)
    hold = strand_on_a(cluster, a, b)
    on_b = b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    settle()
    assert b.bodies(on_b) == [], "A still has a consumer: nothing moves"
    a.unsubscribe(hold)
    got = poll(lambda: b.bodies(on_b), lambda x: len(x) == 3, timeout=5)
    assert got == ["m0", "m1", "m2"] and cluster["A"].queue_size("queue://orders") == 0


def test_delay_n_waits_then_moves(pair):
    cluster, a, b = pair(redistribution_delay_ms=600)
    hold = strand_on_a(cluster, a, b)
    on_b = b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    a.unsubscribe(hold)
    closed = time.monotonic()
    got = poll(lambda: b.bodies(on_b), lambda x: len(x) == 3, timeout=5)
    waited = time.monotonic() - closed
    assert got == ["m0", "m1", "m2"]
    assert waited >= 0.5, f"moved after {waited:.2f} s, before the 600 ms delay"


def test_a_returning_consumer_cancels_it(pair):
    cluster, a, b = pair(redistribution_delay_ms=800)
    hold = strand_on_a(cluster, a, b)
    on_b = b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    a.unsubscribe(hold)
    back = a.subscribe("orders")
    settle(1.5)
    assert b.bodies(on_b) == [], "a consumer came back within the delay: nothing may move"
    assert a.bodies(back) == ["m0", "m1", "m2"]


def test_minus_one_never(pair):
    cluster, a, b = pair()  # redistribution_delay -1, the default
    hold = strand_on_a(cluster, a, b)
    on_b = b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    a.unsubscribe(hold)
    settle(1.0)
    assert b.bodies(on_b) == [] and cluster["A"].queue_size("queue://orders") == 3


def test_off_with_redistribution_redistributes_but_strict_does_not(pair):
    cluster, a, b = pair(redistribution_delay_ms=0, message_load_balancing="OFF_WITH_REDISTRIBUTION")
    on_b = b.subscribe("orders")
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    hold = a.subscribe("orders")
    cluster["A"].call(lambda: a.connection.consumers[hold].__setattr__("writable", False))
    for i in range(2):
        a.send("orders", f"m{i}")
    settle(0.3)
    assert b.bodies(on_b) == [], "OFF_WITH_REDISTRIBUTION does no initial distribution"
    a.unsubscribe(hold)
    assert poll(lambda: b.bodies(on_b), lambda x: len(x) == 2, timeout=5) == ["m0", "m1"]

    strict, sa, sb = pair(redistribution_delay_ms=0, message_load_balancing="STRICT")
    hold = sa.subscribe("solo")
    sb.unsubscribe(sb.subscribe("solo"))
    wait_remote_consumers(strict["A"], "solo", "B", 0)
    strict["A"].call(lambda: sa.connection.consumers[hold].__setattr__("writable", False))
    for i in range(4):
        sa.send("solo", f"s{i}")
    poll(lambda: strict["A"].queue_size("queue://solo") + strict["B"].queue_size("queue://solo"),
         lambda n: n == 4, timeout=5)
    on_sb = sb.subscribe("solo")
    sa.unsubscribe(hold)
    settle(0.8)
    assert strict["A"].queue_size("queue://solo") == 2, "STRICT: no redistribution of what A kept"
    assert len(sb.bodies(on_sb)) == 2


def test_filters_are_ignored_my_property_example(pair):
    """The chapter's example: a message with myProperty=10 on A, a consumer on A with
    myProperty=5, one on B with myProperty=10, created after the send: the message stays on A."""
    cluster, a, b = pair(redistribution_delay_ms=0)
    a.send("foo", "ten", {"myProperty": 10})
    on_a = a.subscribe("foo", selector="myProperty = 5")
    on_b = b.subscribe("foo", selector="myProperty = 10")
    wait_remote_consumers(cluster["A"], "foo", "B", 1)
    settle(0.8)
    assert b.bodies(on_b) == [] and a.bodies(on_a) == []
    assert cluster["A"].queue_size("queue://foo") == 1, "the consumer on A keeps the message there"
    # And the other way round: with A's consumer gone, it moves to B, whose selector matches
    a.unsubscribe(on_a)
    assert poll(lambda: b.bodies(on_b), lambda x: x == ["ten"], timeout=5) == ["ten"]


def test_redistribution_ignores_the_target_consumers_selector(pair):
    cluster, a, b = pair(redistribution_delay_ms=0)
    hold = strand_on_a(cluster, a, b, count=1)
    on_b = b.subscribe("orders", selector="colour = 'red'")  # the stranded message has no colour
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    a.unsubscribe(hold)
    poll(lambda: cluster["B"].queue_size("queue://orders"), lambda n: n == 1, timeout=5)
    assert cluster["A"].queue_size("queue://orders") == 0 and cluster["B"].queue_size("queue://orders") == 1
    assert b.bodies(on_b) == [], "moved to B although B's consumer's selector does not match it"


def test_moves_once_a_remote_consumer_appears_later(pair):
    cluster, a, b = pair(redistribution_delay_ms=0)
    hold = strand_on_a(cluster, a, b)
    a.unsubscribe(hold)  # no consumer anywhere: nothing to move to yet
    settle(0.5)
    assert cluster["A"].queue_size("queue://orders") == 3
    on_b = b.subscribe("orders")
    got = poll(lambda: b.bodies(on_b), lambda x: len(x) == 3, timeout=5)
    assert got == ["m0", "m1", "m2"], f"B's new consumer should get the stranded messages, got {got}"


def test_back_and_forth_without_duplicates(pair):
    cluster, a, b = pair(redistribution_delay_ms=0)
    hold = strand_on_a(cluster, a, b, count=5)
    on_b = b.subscribe("orders")
    cluster["B"].call(lambda: b.connection.consumers[on_b].__setattr__("writable", False))  # B holds them too
    wait_remote_consumers(cluster["A"], "orders", "B", 1)
    a.unsubscribe(hold)
    assert poll(lambda: cluster["B"].queue_size("queue://orders"), lambda n: n == 5, timeout=5) == 5
    back = a.subscribe("orders")
    wait_remote_consumers(cluster["B"], "orders", "A", 1)
    b.unsubscribe(on_b)  # now B has no consumer: they go back to A
    got = poll(lambda: a.bodies(back), lambda x: len(x) == 5, timeout=5)
    settle()
    assert sorted(a.bodies(back)) == [f"m{i}" for i in range(5)], f"back on A, each once: {a.bodies(back)}"
    assert cluster["B"].queue_size("queue://orders") == 0 and len(got) == 5


def test_redistribution_reaches_the_end_of_a_chain():
    from conformance.targets.reference.clustering import ReferenceCluster
    from conformance.topology import ClusterConnection, Topology

    topology = Topology(("A", "B", "C"), cluster=ClusterConnection(max_hops=2, connections=(("A", "B"), ("B", "C")),
                                                                   redistribution_delay_ms=0), prefix="rchain")
    cluster = ReferenceCluster(topology)
    cluster.start(timeout=15)
    try:
        a, c = NodeClient(cluster["A"]), NodeClient(cluster["C"])
        hold = strand_on_a(cluster, a, None)
        on_c = c.subscribe("orders")
        wait_remote_consumers(cluster["A"], "orders", "C", 1)
        a.unsubscribe(hold)
        got = poll(lambda: c.bodies(on_c), lambda x: len(x) == 3, timeout=5)
        assert got == ["m0", "m1", "m2"], f"A's messages should move through B to C's consumer, C got {got}"
        assert cluster["B"].queue_size("queue://orders") == 0
    finally:
        cluster.stop()
