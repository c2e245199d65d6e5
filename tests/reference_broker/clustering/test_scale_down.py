"""Scale-down (artemis-clusters.md, "Scaling Down"): on a graceful stop every message goes, in
order, to the back of the same queue on another node, only one of the same scale-down group;
a crash (kill) sends nothing."""

from __future__ import annotations

from machinery.waiting import poll

from .helpers import NodeClient, launch


def _fill(client, queue, bodies):
    for body in bodies:
        client.send(queue, body)


def test_graceful_stop_appends_every_message_in_order_to_the_back_of_the_target_queue():
    cluster = launch(("A", "B"), scale_down=True, message_load_balancing="OFF")
    try:
        a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
        _fill(b, "orders", ["b0", "b1"])  # B's own messages come first
        _fill(a, "orders", [f"a{i}" for i in range(5)])
        _fill(a, "other", ["x"])
        cluster.stop_broker("A")
        assert cluster["B"].queue_size("queue://orders") == 7 and cluster["B"].queue_size("queue://other") == 1
        on_b = b.subscribe("orders")
        got = poll(lambda: b.bodies(on_b), lambda x: len(x) == 7, timeout=5)
        assert got == ["b0", "b1", "a0", "a1", "a2", "a3", "a4"], f"order after scale-down: {got}"
    finally:
        cluster.stop()


def test_only_to_a_node_of_the_same_scale_down_group():
    cluster = launch(("A", "B", "C"), scale_down=True, message_load_balancing="OFF",
                     scale_down_groups={"A": "east", "B": "west", "C": "east"})
    try:
        a = NodeClient(cluster["A"])
        _fill(a, "orders", ["a0", "a1"])
        cluster.stop_broker("A")
        assert cluster["C"].queue_size("queue://orders") == 2, "C is in A's group: it gets them"
        assert cluster["B"].queue_size("queue://orders") == 0, "B is in another group: it gets none"
    finally:
        cluster.stop()


def test_no_node_of_the_group_left_keeps_them_nowhere_else():
    cluster = launch(("A", "B"), scale_down=True, message_load_balancing="OFF",
                     scale_down_groups={"A": "east", "B": "west"})
    try:
        _fill(NodeClient(cluster["A"]), "orders", ["a0"])
        cluster.stop_broker("A")
        assert cluster["B"].queue_size("queue://orders") == 0
    finally:
        cluster.stop()


def test_a_kill_does_not_scale_down():
    cluster = launch(("A", "B"), scale_down=True, message_load_balancing="OFF")
    try:
        _fill(NodeClient(cluster["A"]), "orders", ["a0", "a1"])
        cluster["A"].kill()
        assert cluster["B"].queue_size("queue://orders") == 0
    finally:
        cluster.stop()


def test_without_scale_down_a_graceful_stop_sends_nothing():
    cluster = launch(("A", "B"), message_load_balancing="OFF")
    try:
        _fill(NodeClient(cluster["A"]), "orders", ["a0"])
        cluster.stop_broker("A")
        assert cluster["B"].queue_size("queue://orders") == 0
    finally:
        cluster.stop()


def test_unacknowledged_deliveries_scale_down_too():
    from reference_broker.engine.consumer import AckMode

    cluster = launch(("A", "B"), scale_down=True, message_load_balancing="OFF")
    try:
        a = NodeClient(cluster["A"])
        a.subscribe("orders", ack=AckMode.CLIENT_INDIVIDUAL)  # gets them, never acknowledges
        _fill(a, "orders", ["a0", "a1"])
        assert poll(lambda: cluster["A"].in_flight_count("queue://orders"), lambda n: n == 2, timeout=5) == 2
        cluster.stop_broker("A")
        assert cluster["B"].queue_size("queue://orders") == 2
    finally:
        cluster.stop()
