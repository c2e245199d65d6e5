"""How a node's cluster service uses a clustered grouping handler (the interface of
reference_broker/clustering/grouping.py, written separately): the handler's decision, not the
load balancer, says which node gets a group's messages; a REMOTE handler reaches the LOCAL one
through the cluster link's RPC (`ClusterService.request`), which hands requests of kind
"grouping" to the LOCAL handler's ``handle``; a failed decision fails the grouped message.

The handlers here are test doubles with that interface, so the wiring is checked on its own."""

from __future__ import annotations

import asyncio

from conformance.topology import GroupingHandlers
from conformance.waiting import settle
from machinery.waiting import poll

from .helpers import NodeClient, launch, wait_remote_consumers


class FirstProposalWins:
    """A LOCAL handler double: the first proposal of a group wins."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], str] = {}
        self.touched = 0

    def handle(self, message: dict) -> dict:
        key = (message["address"], message["group_id"])
        route = self.routes.setdefault(key, message["proposal"])
        return {"kind": "grouping", "route": route}

    async def route(self, address, group_id, proposal):
        return self.handle({"address": address, "group_id": group_id, "proposal": proposal})["route"]

    def touch(self, address, group_id):
        self.touched += 1

    def forget_node(self, node):
        pass

    async def close(self):
        pass


class AsksTheLocalNode(FirstProposalWins):
    """A REMOTE handler double: every decision is the LOCAL node's answer over the link."""

    def __init__(self, request, timeout: float = 1.0) -> None:
        super().__init__()
        self.request, self.timeout = request, timeout

    async def route(self, address, group_id, proposal):
        try:
            answer = await asyncio.wait_for(self.request({"kind": "grouping", "op": "propose", "address": address,
                                                          "group_id": group_id, "proposal": proposal}), self.timeout)
        except (asyncio.TimeoutError, ConnectionError) as exc:
            raise TimeoutError(f"no decision: {exc}") from None
        return answer["route"]


def _install(cluster, local="A"):
    def install(service):
        if service.me == local:
            service.grouping = FirstProposalWins()
        else:
            service.grouping = AsksTheLocalNode(lambda m: service.request(local, m))
    for node in cluster.nodes.values():
        node.cluster_call(install)


def test_a_group_stays_on_the_node_the_local_handler_chose():
    cluster = launch(("A", "B"))
    try:
        _install(cluster)
        a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
        on_a, on_b = a.subscribe("orders"), b.subscribe("orders")
        wait_remote_consumers(cluster["A"], "orders", "B", 1)
        wait_remote_consumers(cluster["B"], "orders", "A", 1)
        for i in range(6):  # ungrouped round robin would split them; a group must not be split
            b.send("orders", f"g{i}", group="G1")
        for i in range(6):
            a.send("orders", f"h{i}", group="G1")
        poll(lambda: len(a.bodies(on_a)) + len(b.bodies(on_b)), lambda n: n == 12, timeout=5)
        everything = a.bodies(on_a) + b.bodies(on_b)
        assert sorted(everything) == sorted([f"g{i}" for i in range(6)] + [f"h{i}" for i in range(6)])
        assert a.bodies(on_a) == [] or b.bodies(on_b) == [], \
            f"group G1 was split across nodes: A {a.bodies(on_a)}, B {b.bodies(on_b)}"
        holder = a.bodies(on_a) or b.bodies(on_b)
        assert [x for x in holder if x.startswith("g")] == [f"g{i}" for i in range(6)], "order within the group"
        local = cluster["A"].cluster_call(lambda s: s.grouping.routes)
        assert list(local) == [("orders", "G1")], "the REMOTE node's first message asked the LOCAL one"
    finally:
        cluster.stop()


def test_no_decision_fails_the_grouped_message():
    cluster = launch(("A", "B"))
    try:
        _install(cluster)
        a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
        on_a = a.subscribe("orders")

        def no_local_handler(service):
            service.grouping = None  # A answers requests with an error: B gets no decision
        cluster["A"].cluster_call(no_local_handler)
        b.send("orders", "lost", group="G2")
        failures = poll(lambda: cluster["B"].cluster_call(lambda s: s.grouping_failures), lambda n: n == 1, timeout=5)
        assert failures == 1
        b.send("orders", "plain")  # ungrouped messages are not affected
        settle()
        assert "lost" not in a.bodies(on_a) and cluster["B"].queue_size("queue://orders") + len(a.bodies(on_a)) == 1
    finally:
        cluster.stop()


def test_grouping_applies_to_the_handlers_address_only():
    cluster = launch(("A", "B"), grouping=GroupingHandlers(local="A", address="grouped."))
    try:
        _install(cluster)
        a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
        on_a, on_b = a.subscribe("plain"), b.subscribe("plain")
        wait_remote_consumers(cluster["A"], "plain", "B", 1)
        for i in range(4):
            a.send("plain", f"p{i}", group="G")
        poll(lambda: len(a.bodies(on_a)) + len(b.bodies(on_b)), lambda n: n == 4, timeout=5)
        assert len(a.bodies(on_a)) == 2 and len(b.bodies(on_b)) == 2, \
            "outside the grouping handler's address a grouped message is balanced like any other"
        assert cluster["A"].cluster_call(lambda s: s.grouping.routes) == {}
    finally:
        cluster.stop()


def test_a_stomp_send_waits_for_the_decision_and_fails_without_one():
    """The receipt of a grouped STOMP send comes once the message is routed; without a decision
    the sender gets an ERROR instead (the send fails), not a receipt for a message kept nowhere."""
    import pytest

    from conformance.clients.base import ClientError
    from conformance.clients.stomp_client import StompClient

    cluster = launch(("A", "B"))
    try:
        _install(cluster)
        b = NodeClient(cluster["B"])
        on_b = b.subscribe("orders")
        with StompClient(*cluster["B"].address("stomp")) as producer:
            producer.send("queue://orders", "first", group_id="G1")  # decided: a receipt
        assert poll(lambda: b.bodies(on_b), lambda x: x == ["first"], timeout=5) == ["first"]

        def no_local_handler(service):
            service.grouping = None
        cluster["A"].cluster_call(no_local_handler)
        with StompClient(*cluster["B"].address("stomp")) as producer:
            with pytest.raises(ClientError, match="no decision from the grouping handler"):
                producer.send("queue://orders", "undecided", group_id="G2")
    finally:
        cluster.stop()


def test_no_per_group_state_left_after_routing():
    cluster = launch(("A", "B"))
    try:
        _install(cluster)
        b = NodeClient(cluster["B"])
        on_b = b.subscribe("orders")
        for i in range(50):
            b.send("orders", f"m{i}", group=f"G{i}")
        poll(lambda: len(b.bodies(on_b)), lambda n: n == 50, timeout=5)
        assert cluster["B"].cluster_call(lambda s: len(s._group_locks)) == 0, "a lock per group id was kept"
    finally:
        cluster.stop()
