"""Broadcast and discovery groups (artemis-clusters.md, "Broadcast Groups", "Discovery Groups"):
nodes that list no connector find each other on a loopback multicast group; a node not heard for
refresh_timeout is dropped."""

from __future__ import annotations

from conformance.targets.reference.clustering import ReferenceCluster
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll
from reference_broker.clustering.udp_discovery import DiscoveryTable, announcement

from .helpers import NodeClient, wait_remote_consumers


def test_discovery_table_drops_a_silent_node():
    table = DiscoveryTable("A", refresh_timeout_ms=1000)
    assert table.heard_from(announcement("A", "127.0.0.1", 1), 0.0) is None, "a node ignores itself"
    assert table.heard_from(announcement("B", "127.0.0.1", 2), 0.0) == ("B", "127.0.0.1", 2)
    assert table.heard_from(announcement("B", "127.0.0.1", 2), 0.5) is None, "known already"
    assert table.expired(1.4) == [], "heard 0.9 s ago: within the refresh timeout"
    assert table.expired(1.6) == ["B"]
    assert table.heard_from(b"not json", 2.0) is None


def test_nodes_find_each_other_by_udp_and_balance():
    topology = Topology(("A", "B"), cluster=ClusterConnection(discovery="udp", broadcast_period_ms=100,
                                                              refresh_timeout_ms=1000), prefix="udp")
    cluster = ReferenceCluster(topology)
    cluster.start(timeout=15)
    try:
        a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
        on_b = b.subscribe("orders")
        wait_remote_consumers(cluster["A"], "orders", "B", 1)
        a.send("orders", "m0")
        assert poll(lambda: b.bodies(on_b), lambda x: x == ["m0"], timeout=5) == ["m0"]
        cluster["B"].pause()  # silent: neither broadcasts nor answers
        try:
            gone = poll(lambda: cluster["A"].cluster_call(lambda s: "B" in s.discovery.table.heard), lambda x: not x,
                        timeout=5)
            assert gone is False, "B not heard for refresh_timeout: A's discovery group must drop it"
        finally:
            cluster["B"].resume()
    finally:
        cluster.stop()
