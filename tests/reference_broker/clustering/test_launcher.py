"""The reference target launches kind "cluster" topologies as a `Cluster` of `Node`s (the
contract of conformance/topology.py): wait_formed, stop_broker / start_broker on the same ports,
and cluster links through ``bridge_route`` when ``"cluster"`` is in ``topology.proxied``."""

from __future__ import annotations

import asyncio

import pytest

from conformance.scenario import Scenario
from conformance.targets.reference.target import ReferenceTarget
from machinery.loop_thread import LoopThread
from conformance.topology import Cluster, ClusterConnection, Node, Topology, TopologyUnsupported
from machinery.waiting import poll

from .helpers import NodeClient, wait_remote_consumers


class Relay:
    """A loopback TCP relay in front of one address (what the fault proxy does), counting
    the connections it relayed."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.connections = 0
        self._handlers: set[asyncio.Task] = set()
        self.loop = LoopThread("relay")
        self.server = self.loop.run(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.address = self.server.sockets[0].getsockname()[:2]

    async def _relay(self, reader, writer):
        self.connections += 1
        self._handlers.add(asyncio.current_task())
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def _shut(self) -> None:
        # the relayed connections end here, on the running loop: left pending, their coroutines
        # were closed later by the garbage collector, and the pipes' ``dst.close()`` then called
        # into a loop already closed (an unraisable-exception warning in CI)
        self.server.close()
        for handler in self._handlers:
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def close(self) -> None:
        self.loop.run(self._shut())
        self.loop.stop(5)


def test_launch_topology_gives_a_cluster_that_survives_a_restart(tmp_path):
    target = ReferenceTarget()
    assert "topology.cluster" in target.capabilities()
    topology = Topology(("A", "B"), cluster=ClusterConnection(), prefix="launch")
    cluster = target.launch_topology(topology, Scenario(name="clu", protocols=("stomp",)), tmp_path)
    try:
        assert isinstance(cluster, Cluster) and all(isinstance(n, Node) for n in cluster.nodes.values())
        assert cluster.serving() == ["A", "B"] and cluster.bridge_establishments() == 2
        ports = cluster["B"].address("stomp"), cluster["B"].address("amqp")
        cluster.stop_broker("B")
        assert cluster.serving() == ["A"] and not cluster["B"].running
        cluster.start_broker("B", timeout=15)
        assert (cluster["B"].address("stomp"), cluster["B"].address("amqp")) == ports, "same ports after a restart"
        cluster.wait_formed(10)
        a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
        on_b = b.subscribe("orders")
        wait_remote_consumers(cluster["A"], "orders", "B", 1)
        a.send("orders", "after-restart")
        assert poll(lambda: b.bodies(on_b), lambda x: x == ["after-restart"], timeout=5) == ["after-restart"]
        assert cluster.bridge_establishments() == 3, "A's link to B reconnected once"
    finally:
        cluster.stop()


def test_proxied_cluster_links_dial_the_route(tmp_path):
    relays: dict[tuple[str, str], Relay] = {}

    def route(bridge, host, port):
        relays[(bridge.source, bridge.target)] = relay = Relay(host, port)
        return relay.address

    topology = Topology(("A", "B"), cluster=ClusterConnection(), proxied=("cluster",), prefix="proxied")
    cluster = ReferenceTarget().launch_topology(topology, Scenario(name="clu", protocols=("stomp",)), tmp_path,
                                                bridge_route=route)
    try:
        assert set(relays) == {("A", "B"), ("B", "A")}
        assert all(r.connections == 1 for r in relays.values()), "each link dialed its route"
        a, b = NodeClient(cluster["A"]), NodeClient(cluster["B"])
        on_b = b.subscribe("orders")
        wait_remote_consumers(cluster["A"], "orders", "B", 1)
        a.send("orders", "via-relay")
        assert poll(lambda: b.bodies(on_b), lambda x: x == ["via-relay"], timeout=5) == ["via-relay"]
    finally:
        cluster.stop()
        for relay in relays.values():
            relay.close()


def test_a_persistent_cluster_keeps_messages_across_a_restart(tmp_path):
    from conformance.targets.reference.clustering import ReferenceCluster
    from reference_broker.engine.message import Message
    from reference_broker.engine.names import QUEUE, DestinationName

    topology = Topology(("A", "B"), cluster=ClusterConnection(message_load_balancing="OFF"), persistent=True,
                        prefix="persist")
    cluster = ReferenceCluster(topology, tmp_path)
    cluster.start(timeout=15)
    try:
        node = cluster["B"]

        def send():
            connection = node.server.broker.connect()
            connection.send(DestinationName(QUEUE, "orders"), Message(connection.new_message_id(), "queue://orders",
                                                                      b"kept", persistent=True))
            node.server.broker.flush()
        node.call(send)
        cluster.restart("B", timeout=15)
        assert cluster["B"].queue_size("queue://orders") == 1
    finally:
        cluster.stop()


def test_a_paused_node_reports_no_links_instead_of_hanging():
    from conformance.targets.reference.clustering import ClusterFormationError, ReferenceCluster

    cluster = ReferenceCluster(Topology(("A", "B"), cluster=ClusterConnection(), prefix="paused"))
    cluster.start(timeout=15)
    try:
        cluster["B"].pause()
        try:
            assert ("B", "A") in cluster.missing_links() and not cluster["B"].serving()
            import pytest
            with pytest.raises(ClusterFormationError):
                cluster.wait_formed(0.5)
        finally:
            cluster["B"].resume()
        cluster.wait_formed(10)
    finally:
        cluster.stop()


def test_members_learnt_through_another_node_are_refused_by_name():
    """CLU-STATIC-1 is Artemis's alone: the reference launcher says so instead of forming a
    cluster that silently connects only to the listed nodes."""
    from conformance.targets.reference.clustering import launch_cluster

    topology = Topology(("A", "B"), cluster=ClusterConnection(connections=(("A", "B"),), direct_connections_only=False))
    with pytest.raises(TopologyUnsupported, match="direct_connections_only=False"):
        launch_cluster(topology)


def test_a_ttl_check_interval_other_than_the_check_period_is_refused_by_name():
    """The reference nodes look for silent links at every check period: that value is taken (it is
    what they do), any other is refused rather than ignored."""
    from conformance.targets.reference.clustering import launch_cluster

    other = Topology(("A", "B"), cluster=ClusterConnection(check_period_ms=500, ttl_check_interval_ms=2000))
    with pytest.raises(TopologyUnsupported, match="ttl_check_interval_ms can only equal check_period_ms"):
        launch_cluster(other)
    unset_period = Topology(("A", "B"), cluster=ClusterConnection(ttl_check_interval_ms=500))
    with pytest.raises(TopologyUnsupported, match="ttl_check_interval_ms"):
        launch_cluster(unset_period)  # the default check period is 30 s, not 500 ms
