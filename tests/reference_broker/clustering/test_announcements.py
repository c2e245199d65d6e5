"""Bindings announcements (artemis-clusters.md, "Symmetric cluster": each node learns the queues
and consumers of the others): a node tells the nodes that dial it its table when it changes, and
only then. Two nodes that dial each other used to answer every table with their own, changed or
not, and so echoed tables between them for as long as both ran (135 000 frames in one 20 s chaos
run of three nodes, most of the run's CPU)."""

from __future__ import annotations

from reference_broker.clustering.bindings import BindingTable, RemoteQueue

from .helpers import NodeClient, launch, wait_remote_consumers


def test_a_table_announced_again_unchanged_is_no_change():
    table = BindingTable("A", max_hops=1)
    entries = [RemoteQueue("B", "q", (None,), 1)]
    assert table.replace("B", entries), "a first table is a change"
    assert not table.replace("B", list(entries)), "the same table again is not"
    assert table.replace("B", [RemoteQueue("B", "q", (None, "x = 1"), 1)]), "another consumer is"
    table.drop("B")
    assert table.replace("B", [RemoteQueue("B", "q", (None, "x = 1"), 1)]), "after the link dropped, it is new again"


def _bindings_sent(cluster) -> int:
    return sum(node.cluster_call(lambda service: service.bindings_sent) for node in cluster.nodes.values())


def test_a_consumer_arriving_is_announced_once_and_not_echoed():
    cluster = launch(("A", "B"))
    client = None
    try:
        a, b = cluster.nodes["A"], cluster.nodes["B"]
        client = NodeClient(b)
        client.subscribe("echo.q")
        wait_remote_consumers(a, "echo.q", on="B", count=1)
        after_change = _bindings_sent(cluster)
        # a second consumer: one more table from B, which A learns; if either node answered a
        # table with its own, the exchange would still be running when A has learned it
        client.subscribe("echo.q")
        wait_remote_consumers(a, "echo.q", on="B", count=2)
        assert _bindings_sent(cluster) - after_change == 1, "B tells A once; A has nothing new to tell B"
        # each read above was a round trip on that node's loop: an echo would have gone on meanwhile
        assert _bindings_sent(cluster) - after_change == 1
    finally:
        if client is not None:
            client.close()
        cluster.stop()
