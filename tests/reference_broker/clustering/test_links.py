"""Cluster links (artemis-clusters.md, "Configuring Cluster Connections": retry-interval and its
multiplier and maximum, initial-connect-attempts / reconnect-attempts with a node given up,
use-duplicate-detection; "Cluster User Credentials")."""

from __future__ import annotations

import pytest

from conformance.targets.reference.clustering import ReferenceClusterNode
from machinery.process import free_ports
from conformance.waiting import settle
from machinery.waiting import poll
from reference_broker.clustering import wire
from reference_broker.clustering.retry import RetryPolicy
from reference_broker.engine.message import Message

from .helpers import NodeClient, launch, wait_remote_consumers


def test_retry_interval_arithmetic():
    policy = RetryPolicy(retry_interval=500, retry_interval_multiplier=2.0, max_retry_interval=3000)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert RetryPolicy().delay(7) == 0.5, "the defaults: 500 ms, multiplier 1"


def test_attempts_run_out():
    policy = RetryPolicy(initial_connect_attempts=3, reconnect_attempts=0)
    assert not policy.gives_up(2, ever_connected=False) and policy.gives_up(3, ever_connected=False)
    assert policy.gives_up(0, ever_connected=True), "reconnect_attempts 0: a broken link is not retried"
    assert not RetryPolicy().gives_up(10_000, ever_connected=True), "-1 retries for ever"


def test_frames_round_trip_a_message():
    message = Message("ID:1", "queue://q", b"\x00body", {"a": 1, "b": "x"}, persistent=True, group_id="g")
    (frame,) = wire.FrameReader().feed(wire.encode({"kind": "forward", "message": wire.message_to_wire(message)}))
    back = wire.message_from_wire(frame["message"])
    assert (back.body, back.properties, back.persistent, back.group_id) == (b"\x00body", {"a": 1, "b": "x"}, True, "g")
    with pytest.raises(wire.FrameError):
        wire.FrameReader().feed(b"\x00\x00\x00\x02[]")


def _node(name: str, **cluster) -> ReferenceClusterNode:
    node = ReferenceClusterNode(name, f"lnk-{name}", {"cluster_connection": {
        "node_name": name, "cluster_user": "u", "cluster_password": "p", **cluster}})
    node.listen()
    return node


def test_a_node_given_up_after_its_initial_attempts():
    (dead,) = free_ports(1)
    node = _node("A", retry_interval=50, max_retry_interval=50, initial_connect_attempts=3)
    try:
        node.dial("127.0.0.1", dead)
        gave_up = poll(lambda: node.cluster_call(lambda s: s.connectors[0].given_up), timeout=5)
        assert gave_up, "3 failed attempts with initial_connect_attempts 3: the node is given up"
    finally:
        node.close()


def test_wrong_cluster_password_is_refused():
    a = _node("A")
    b = ReferenceClusterNode("B", "lnk-B", {"cluster_connection": {
        "node_name": "B", "cluster_user": "u", "cluster_password": "wrong", "retry_interval": 100,
        "max_retry_interval": 100}})
    b.listen()
    try:
        b.dial(*a.cluster_address)
        settle(0.5)
        assert b.links_up() == set(), "a link with the wrong cluster password must not come up"
        assert a.cluster_call(lambda s: dict(s.inbound)) == {}
    finally:
        b.close()
        a.close()


def _lose_acks_and_reset(cluster, queue_size_on_b):
    """A sends 3 messages to B; the acks are lost and the link breaks; A resends on reconnect."""
    a_node = cluster["A"]

    def lose_acks(service):
        connector = next(c for c in service.connectors if c.peer == "B")
        connector.acknowledged = lambda duplicate_id: None  # the acks never arrive
        return connector
    a_node.cluster_call(lose_acks)
    a = NodeClient(a_node)
    for i in range(3):
        a.send("orders", f"m{i}")
    assert poll(queue_size_on_b, lambda n: n == 3, timeout=5) == 3, "B did not get the 3 forwards"
    a_node.cluster_call(lambda s: next(c for c in s.connectors if c.peer == "B").link.close())


@pytest.mark.parametrize("detect", [True, False])
def test_duplicate_detection_across_a_link_reset(detect):
    cluster = launch(("A", "B"), use_duplicate_detection=detect)
    try:
        b = NodeClient(cluster["B"])
        held = b.subscribe("orders")  # ON_DEMAND: B's consumer draws every message (A has none)...
        cluster["B"].call(lambda: b.connection.consumers[held].__setattr__("writable", False))  # ...and holds them
        wait_remote_consumers(cluster["A"], "orders", "B", 1)
        size_b = lambda: cluster["B"].queue_size("queue://orders")  # noqa: E731
        _lose_acks_and_reset(cluster, size_b)
        cluster.wait_formed(10)
        resent = poll(lambda: cluster["B"].cluster_call(lambda s: s.duplicates_received), lambda n: n >= 1, timeout=5)
        assert resent >= 1, "A did not resend its unacknowledged forwards after the reconnect"
        settle()
        if detect:
            assert size_b() == 3, f"use_duplicate_detection: the resent copies must be dropped, B has {size_b()}"
        else:
            assert size_b() > 3, "without duplicate detection the resend is delivered again (the chapter's reason)"
    finally:
        cluster.stop()


def test_a_frozen_node_is_cut_after_connection_ttl_and_rejoins():
    cluster = launch(("A", "B"), check_period_ms=100, connection_ttl_ms=500, retry_interval_ms=100,
                     max_retry_interval_ms=100)
    try:
        cluster["B"].pause()  # its socket stays open; it answers nothing
        try:
            up = poll(lambda: cluster["A"].links_up(), lambda peers: "B" not in peers, timeout=5)
            assert "B" not in up, "A kept its link to a node silent for longer than connection_ttl"
        finally:
            cluster["B"].resume()
        cluster.wait_formed(10)
        assert cluster.bridge_establishments() >= 3, "A's link to B came back after B thawed"
    finally:
        cluster.stop()


def test_bindings_sent_with_the_welcome_are_not_lost():
    """The accepting node sends its bindings right after the welcome; the dialer may read both in
    one chunk, and must not drop the second (nothing else would tell it until a binding changes)."""
    import asyncio

    from reference_broker.clustering.link import read_opening

    async def scenario():
        async def accept(reader, writer):
            writer.write(wire.encode({"kind": "welcome", "node": "B"}) + wire.encode({"kind": "bindings", "entries": []})
                         + wire.encode({"kind": "ping"})[:3])
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(wire.encode({"kind": "ping"})[3:])
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        opening = await read_opening(reader, 2.0)
        rest = opening.reader.feed(await reader.read(100))
        writer.close()
        server.close()
        return opening.first["kind"], [f["kind"] for f in opening.rest], [f["kind"] for f in rest]

    assert asyncio.run(scenario()) == ("welcome", ["bindings"], ["ping"])


def test_unacknowledged_persistent_forwards_survive_a_restart_of_the_source(tmp_path):
    """Forwards B never acknowledged (B frozen) are kept in A's store; A killed and started again
    resends them with the same duplicate ids: B gets each message once."""
    from conformance.targets.reference.clustering import ReferenceCluster
    from conformance.topology import ClusterConnection, Topology
    from reference_broker.engine.names import QUEUE, DestinationName

    cluster = ReferenceCluster(Topology(("A", "B"), cluster=ClusterConnection(retry_interval_ms=100,
                                                                              max_retry_interval_ms=100),
                                        persistent=True, prefix="sf"), tmp_path)
    cluster.start(timeout=15)
    try:
        b = NodeClient(cluster["B"])
        held = b.subscribe("orders")
        cluster["B"].call(lambda: b.connection.consumers[held].__setattr__("writable", False))
        wait_remote_consumers(cluster["A"], "orders", "B", 1)
        cluster["B"].pause()
        a_node = cluster["A"]

        def send():
            connection = a_node.server.broker.connect()
            for i in range(3):
                connection.send(DestinationName(QUEUE, "orders"),
                                Message(connection.new_message_id(), "queue://orders", f"p{i}".encode(), persistent=True))
        a_node.call(send)
        pending = a_node.forwarding_count()  # what the chaos drain of a cluster waits for
        assert pending == 3, f"A should hold 3 unacknowledged forwards, holds {pending}"
        a_node.kill()
        cluster["B"].resume()
        a_node.start()
        cluster.wait_formed(10)
        got = poll(lambda: cluster["B"].queue_size("queue://orders"), lambda n: n == 3, timeout=5)
        settle()
        assert cluster["B"].queue_size("queue://orders") == 3, f"B holds {got}: each forward once"
        # B had read the first sends from its socket on thawing; A, restarted, resent all 3 from its
        # store with the same duplicate ids, and B dropped them
        resent = cluster["B"].cluster_call(lambda s: s.duplicates_received)
        assert resent == 3, f"A's restart should resend its 3 stored forwards (B saw {resent} again)"
        assert a_node.cluster_call(lambda s: (sum(len(c.pending) for c in s.connectors), dict(s.store_forward.stored))) \
            == (0, {}), "acknowledged now: nothing left to resend"
    finally:
        cluster.stop()


def test_a_target_that_crashed_and_recovered_still_drops_resent_forwards(tmp_path):
    """artemis-clusters.md, use-duplicate-detection: the target crashes after taking forwards
    whose acks never reached the source; when it is back the source resends them and the target,
    with its duplicate ids kept in its store, drops them."""
    from conformance.targets.reference.clustering import ReferenceCluster
    from conformance.topology import ClusterConnection, Topology
    from reference_broker.engine.names import QUEUE, DestinationName

    cluster = ReferenceCluster(Topology(("A", "B"), cluster=ClusterConnection(retry_interval_ms=100,
                                                                              max_retry_interval_ms=100),
                                        persistent=True, prefix="ids"), tmp_path)
    cluster.start(timeout=15)
    try:
        b = NodeClient(cluster["B"])
        held = b.subscribe("orders")
        cluster["B"].call(lambda: b.connection.consumers[held].__setattr__("writable", False))
        wait_remote_consumers(cluster["A"], "orders", "B", 1)
        a_node = cluster["A"]

        def lose_acks(service):
            connector = next(c for c in service.connectors if c.peer == "B")
            connector.acknowledged = lambda duplicate_id: None
        a_node.cluster_call(lose_acks)

        def send():
            connection = a_node.server.broker.connect()
            for i in range(3):
                connection.send(DestinationName(QUEUE, "orders"),
                                Message(connection.new_message_id(), "queue://orders", f"p{i}".encode(), persistent=True))
        a_node.call(send)
        assert poll(lambda: cluster["B"].queue_size("queue://orders"), lambda n: n == 3, timeout=5) == 3
        cluster["B"].kill()
        cluster["B"].start()
        cluster.wait_formed(10)  # A's link comes back and resends its 3 unacknowledged forwards
        resent = poll(lambda: cluster["B"].cluster_call(lambda s: s.duplicates_received), lambda n: n == 3, timeout=5)
        settle()
        assert resent == 3, f"A should have resent its 3 forwards, B saw {resent}"
        assert cluster["B"].queue_size("queue://orders") == 3, \
            f"B kept its duplicate ids across the crash: 3 messages, not {cluster['B'].queue_size('queue://orders')}"
    finally:
        cluster.stop()


def test_duplicate_ids_pushed_out_of_the_cache_leave_the_store():
    from reference_broker.clustering.duplicates import DuplicateCache

    forgotten = []
    cache = DuplicateCache(size=2, on_forget=forgotten.append)
    assert [cache.seen(i) for i in ("a", "b", "a", "c")] == [False, False, True, False]
    assert forgotten == ["a"] and cache.seen("a") is False


def test_connector_stop_ends_its_dial_loop_even_when_a_cancel_is_lost():
    """CI once hung 30 s stopping a node whose links were being refused: on Python 3.11,
    ``asyncio.wait_for`` returns the connection instead of raising when the cancel lands as the
    connect completes, so the dial loop never saw the stop. Here every dial swallows its cancel,
    the worst case: the stop must still end the loop."""
    import asyncio

    from reference_broker.clustering.link import Connector, LinkRefused

    async def scenario() -> bool:
        dials = 0
        swallow = True

        async def dial_that_swallows_cancel():
            nonlocal dials
            dials += 1
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if not swallow:
                    raise
                # the lost cancel
            raise LinkRefused("refused")

        async def never_serves(link):  # pragma: no cover - no link ever comes up
            raise AssertionError("no link expected")

        connector = Connector("127.0.0.1", 1, {"kind": "hello", "node": "A"}, RetryPolicy(retry_interval=1),
                              on_link=never_serves, on_give_up=lambda c, pending: None)
        connector._dial = dial_that_swallows_cancel
        connector.start()
        await asyncio.sleep(0.05)
        stopping = asyncio.ensure_future(connector.stop())
        done, _ = await asyncio.wait({stopping}, timeout=3)  # no cancel of our own: it would end it
        swallow = False
        while not connector._task.done():  # on failure, clean up: cancels land from now on
            connector._task.cancel()
            await asyncio.sleep(0.02)
        await asyncio.gather(stopping, return_exceptions=True)
        assert dials >= 1
        return bool(done)

    assert asyncio.run(scenario()), "the connector's stop did not end its dial loop within 3 s"
