"""Clustered grouping end to end with the real handlers (reference_broker/clustering/grouping.py,
from the refgroup branch; artemis-message-grouping.md, "Clustered Grouping"): LOCAL on A, REMOTE
on B and C, configured from the topology's GroupingHandlers by the launcher. Before that module is
merged these tests are skipped (the module is missing), never passed."""

from __future__ import annotations

import pytest

from conformance.targets.reference.clustering import ReferenceCluster
from conformance.topology import ClusterConnection, GroupingHandlers, Topology
from machinery.waiting import poll

from .helpers import NodeClient, wait_remote_consumers

pytest.importorskip("reference_broker.clustering.grouping",
                    reason="reference_broker/clustering/grouping.py (the grouping handlers) is not on this branch yet")


@pytest.fixture
def cluster():
    topology = Topology(("A", "B", "C"), cluster=ClusterConnection(grouping=GroupingHandlers(local="A", timeout_ms=500)),
                        prefix="grp")
    launched = ReferenceCluster(topology)
    launched.start(timeout=15)
    yield launched
    launched.stop()


def test_handlers_by_role(cluster):
    kinds = {name: type(node.cluster.grouping).__name__ for name, node in cluster.nodes.items()}
    assert kinds == {"A": "LocalGroupingHandler", "B": "RemoteGroupingHandler", "C": "RemoteGroupingHandler"}


def test_a_group_is_pinned_to_one_node_whichever_node_receives_it(cluster):
    clients = {n: NodeClient(cluster[n]) for n in "ABC"}
    subs = {n: clients[n].subscribe("orders") for n in "ABC"}
    for n in "ABC":
        for m in "ABC":
            if m != n:
                wait_remote_consumers(cluster[n], "orders", m, 1)
    senders = "BCA" * 4  # the group's first message reaches B, a REMOTE node
    for i, sender in enumerate(senders):
        clients[sender].send("orders", f"g{i}", group="G1")
    poll(lambda: sum(len(clients[n].bodies(subs[n])) for n in "ABC"), lambda x: x == len(senders), timeout=5)
    got = {n: clients[n].bodies(subs[n]) for n in "ABC"}
    holders = [n for n in "ABC" if got[n]]
    assert len(holders) == 1, f"group G1 was spread over {holders}: {got}"
    for sender in "ABC":  # each sender's messages in its own order
        mine = [b for b in got[holders[0]] if senders[int(b[1:])] == sender]
        assert mine == sorted(mine, key=lambda b: int(b[1:])), f"{sender}'s messages out of order: {mine}"


def test_without_the_local_node_a_remote_grouped_send_fails(cluster):
    b = NodeClient(cluster["B"])
    cluster["A"].kill()
    b.send("orders", "grouped", group="G9")
    failures = poll(lambda: cluster["B"].cluster_call(lambda s: s.grouping_failures), lambda n: n == 1, timeout=5)
    assert failures == 1, "no LOCAL handler reachable: the REMOTE handler's timeout must fail the grouped message"
    assert cluster["B"].queue_size("queue://orders") == 0


def test_without_the_local_node_a_stomp_sender_gets_an_error(cluster):
    from conformance.clients.base import ClientError
    from conformance.clients.stomp_client import StompClient

    cluster["A"].kill()
    with StompClient(*cluster["C"].address("stomp")) as producer:
        with pytest.raises(ClientError, match="no decision from the grouping handler"):
            producer.send("queue://orders", "grouped", group_id="G10")
