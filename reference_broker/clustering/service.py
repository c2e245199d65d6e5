"""A node's cluster connection, running beside its listeners (artemis-clusters.md).

`ClusterService(broker, config)`: listens on the cluster acceptor, dials the static connectors
(and the nodes UDP discovery finds), exchanges binding tables, and takes over the broker's
routing of messages to clustered queues (`Broker.queue_router`): each message goes to the node
`LoadBalancer` picks, forwarded over the link to the next hop. Received forwards are enqueued
here (or handed on towards their node), never balanced again. Redistribution and scale-down move
pending messages the same way.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import itertools
import logging
import secrets

from ..config import DEFAULT_CLUSTER_PASSWORD, BrokerConfig, ClusterConnectionConfig, address_matches
from ..engine.broker import Broker
from ..engine.consumer import Consumer
from ..engine.errors import RoutingFailed
from ..engine.message import Message
from ..engine.names import QUEUE, DestinationName
from ..engine.queue import Queue
from . import wire
from .balancer import LoadBalancer
from .bindings import BindingTable, RemoteQueue
from .duplicates import DuplicateCache
from .link import Connector, Link, LinkRefused, read_opening
from .redistribution import Redistributor
from .retry import RetryPolicy
from .store_forward import INTERNAL_PREFIX, PersistentIds, StoreAndForward

log = logging.getLogger("reference_broker.clustering")

_SCALE_DOWN_TIMEOUT = 10.0


def _grouping_failures() -> tuple[type[BaseException], ...]:
    """What a grouping handler raises when a grouped send must fail (grouping.py's errors)."""
    try:
        from . import grouping
    except ImportError:
        return (TimeoutError,)
    return tuple(getattr(grouping, name) for name in ("GroupingError", "GroupingTimeout")
                 if hasattr(grouping, name)) + (TimeoutError,)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class ClusterService:
    def __init__(self, broker: Broker, config: BrokerConfig | None = None) -> None:
        self.broker = broker
        self.config = config or broker.config
        cc: ClusterConnectionConfig | None = self.config.cluster_connection
        if cc is None:
            raise ValueError("ClusterService needs a [cluster_connection] section in the configuration")
        self.cc = cc
        self.me = cc.node_name or self.config.name
        self.table = BindingTable(self.me, cc.max_hops)
        self.balancer = LoadBalancer(self.me, cc.message_load_balancing)
        self.persistent_ids = PersistentIds(broker)
        self.duplicates = DuplicateCache(on_forget=self.persistent_ids.forget)
        self.retry = RetryPolicy(cc.retry_interval, cc.retry_interval_multiplier, cc.max_retry_interval,
                                 cc.initial_connect_attempts, cc.reconnect_attempts)
        self.redistributor = Redistributor(
            cc.message_load_balancing,
            lambda q: broker.policies.redistribution_delay_for(DestinationName(QUEUE, q)),
            self._redistribute)
        self.inbound: dict[str, Link] = {}
        self.connectors: list[Connector] = []
        self.acceptor_address: tuple[str, int] | None = None
        self.grouping = None  # the clustered grouping handler (grouping.py), when configured
        self.grouping_failures = 0
        self.duplicates_received = 0  # forwards that came again (counted even without detection)
        self._group_locks: dict[str, tuple[asyncio.Lock, int]] = {}  # group -> (lock, sends using it)
        self._ids = itertools.count(1)
        self._incarnation = secrets.token_hex(4)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._announce_pending = False
        self.bindings_sent = 0  # bindings frames announced to the nodes that dial this one
        self._waiters: dict[str, asyncio.Future] = {}
        self._poke: set[str] = set()  # queues that received forwards in this read
        self.store_forward = StoreAndForward(broker)
        self._recovered: dict[str, list[dict]] = {}  # next hop -> forwards of a previous run
        self.discovery = None
        self.stopped = False

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cc = self.cc
        if cc.cluster_password == DEFAULT_CLUSTER_PASSWORD:
            # artemis-clusters.md, "Cluster User Credentials": the defaults must be changed
            log.warning("cluster node %s uses the default cluster password: change cluster_password", self.me)
        for prefix in cc.literal_wildcards():
            log.warning("cluster node %s: address prefix %r is matched literally (a cluster connection's address "
                        "takes prefixes, not wildcards)", self.me, prefix)
        host, port = _split(cc.acceptor)
        try:
            self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen for the cluster on {cc.acceptor} (option "
                                     f"'cluster_connection.acceptor'): {exc.strerror}") from None
        self.acceptor_address = self._server.sockets[0].getsockname()[:2]
        self._recovered = self.store_forward.recover()
        for duplicate_id in self.persistent_ids.recover():
            self.duplicates.seen(duplicate_id)
        for name in cc.queues:
            self.broker.queue(DestinationName(QUEUE, name))
        broker = self.broker
        broker.queue_router = self._route
        broker.consumer_listeners.append(self._consumer_event)
        broker.queue_listeners.append(self._queue_created)
        self._make_grouping_handler()
        self._spawn(self._keep_alive())
        for connector in cc.static_connectors:
            self.add_connector(*_split(connector))
        if cc.discovery is not None:
            from .udp_discovery import UdpDiscovery

            self.discovery = UdpDiscovery(cc.discovery, self.me, self.acceptor_address, self._discovered,
                                          self._lost)
            await self.discovery.start()

    def add_connector(self, host: str, port: int) -> Connector:
        hello = {"kind": "hello", "node": self.me, "user": self.cc.cluster_user,
                 "password": self.cc.cluster_password, "group": self.cc.scale_down_group_name}
        connector = Connector(host, port, hello, self.retry, self._serve_outbound, self._given_up)
        self.connectors.append(connector)
        connector.start()
        return connector

    def _discovered(self, node: str, host: str, port: int) -> None:
        if node == self.me or any((c.host, c.port) == (host, port) for c in self.connectors):
            return
        log.info("cluster node %s discovered %s at %s:%d", self.me, node, host, port)
        self.add_connector(host, port)

    def _lost(self, node: str) -> None:
        """The discovery group stopped hearing ``node``: no more links to it (it may come back)."""
        for connector in [c for c in self.connectors if c.peer == node]:
            self.connectors.remove(connector)
            self._spawn(connector.stop())
            self._keep_here(list(connector.pending.values()))  # never acknowledged
        self.table.drop(node)
        self._bindings_changed()

    async def stop(self, *, scale_down: bool | None = None) -> None:
        """Leave the cluster. ``scale_down`` (default: the configuration's): a graceful stop that
        first sends every message this node holds to a node of its scale-down group."""
        if self.stopped:
            return
        if scale_down if scale_down is not None else self.cc.scale_down:
            await self.scale_down()
        self.stopped = True
        broker = self.broker
        if broker.queue_router == self._route:
            broker.queue_router = None
        for hooks, fn in ((broker.consumer_listeners, self._consumer_event), (broker.queue_listeners, self._queue_created)):
            if fn in hooks:
                hooks.remove(fn)
        self.redistributor.close()
        if self.discovery is not None:
            await self.discovery.stop()
        if self.grouping is not None:
            await self.grouping.close()
        for connector in self.connectors:
            await connector.stop()
        if self._server is not None:
            self._server.close()
        for link in list(self.inbound.values()):
            link.close()
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------ links

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            opening = await read_opening(reader, 5.0)
        except (LinkRefused, TimeoutError, wire.FrameError, ConnectionError):
            writer.close()
            return
        hello = opening.first
        if hello.get("kind") != "hello" or "node" not in hello:
            writer.close()
            return
        if not (hmac.compare_digest(str(hello.get("user", "")).encode(), self.cc.cluster_user.encode())
                and hmac.compare_digest(str(hello.get("password", "")).encode(), self.cc.cluster_password.encode())):
            log.warning("cluster node %s refused a link from %s: wrong cluster user or password", self.me,
                        hello.get("node"))
            writer.write(wire.encode({"kind": "refused", "reason": "wrong cluster user or password"}))
            writer.close()
            return
        writer.write(wire.encode({"kind": "welcome", "node": self.me, "group": self.cc.scale_down_group_name}))
        link = Link(reader, writer, str(hello["node"]), hello.get("group"), opening)
        previous = self.inbound.get(link.peer)
        if previous is not None:
            previous.close()
        self.inbound[link.peer] = link
        self._send_bindings(link)
        try:
            await link.serve(self._on_frame, self._end_of_read)
        finally:
            if self.inbound.get(link.peer) is link:
                del self.inbound[link.peer]

    async def _serve_outbound(self, link: Link) -> None:
        settings = self.cc.grouping_handler
        if (self.grouping is not None and settings.type == "REMOTE" and link.peer == settings.local_node
                and link.connector.connections > 1 and hasattr(self.grouping, "forget_all")):
            # the LOCAL node may have restarted meanwhile: its routes are asked for again (grouping.py)
            self.grouping.forget_all()
        for frame in self._recovered.pop(link.peer, []):  # a previous run's, same duplicate ids
            link.connector.forward(frame)
        try:
            await link.serve(self._on_frame, self._end_of_read)
        finally:
            self.table.drop(link.peer)
            self._bindings_changed()

    def _given_up(self, connector: Connector, pending: list[dict]) -> None:
        """The node is down for good: what it never acknowledged stays here."""
        if connector.peer is not None:
            self.table.drop(connector.peer)
            if self.grouping is not None:
                self.grouping.forget_node(connector.peer)  # considered down for good
        self._keep_here(pending)
        self._bindings_changed()

    def _keep_here(self, frames: list[dict]) -> None:
        """Forwards no node will acknowledge: back into this node's queues."""
        for frame in frames:
            self._enqueue_locally(frame["queue"], wire.message_from_wire(frame["message"]))
            self.store_forward.done(frame["id"])

    async def _keep_alive(self) -> None:
        """artemis-clusters.md, check-period and connection-ttl: ping every link every check_period;
        close one that heard nothing for connection_ttl (the dialing end then reconnects)."""
        loop = asyncio.get_running_loop()
        ttl = self.cc.connection_ttl / 1000
        while True:
            await asyncio.sleep(self.cc.check_period / 1000)
            links = [c.link for c in self.connectors if c.up] + [l for l in self.inbound.values() if l.is_open]
            for link in links:
                if loop.time() - link.last_heard > ttl:
                    log.warning("cluster node %s: nothing from %s for %d ms (connection_ttl): link closed", self.me,
                                link.peer, self.cc.connection_ttl)
                    link.close()
                else:
                    link.send({"kind": "ping"})

    def links_up(self) -> int:
        """Outbound links established now."""
        return sum(1 for c in self.connectors if c.up)

    def _link_to(self, node: str) -> Link | None:
        for connector in self.connectors:
            if connector.peer == node and connector.up:
                return connector.link
        link = self.inbound.get(node)
        return link if link is not None and link.is_open else None

    def _connector_to(self, node: str) -> Connector | None:
        for connector in self.connectors:
            if connector.peer == node and not connector.given_up:
                return connector
        return None

    async def request(self, node: str, message: dict) -> dict:
        """An RPC to ``node`` over the cluster link (the grouping handlers' `request`)."""
        link = self._link_to(node)
        if link is None:
            raise ConnectionError(f"no cluster link from {self.me} to {node}")
        return await link.request(message)

    # ------------------------------------------------------------ frames

    def _on_frame(self, link: Link, frame: dict) -> None:
        kind = frame["kind"]
        if kind == "bindings":
            # only what a node we dial tells us counts: we forward to it. An unchanged table changes
            # nothing here: announcing on it would echo between two nodes that dial each other
            # (a symmetric cluster) for as long as both run
            if link.connector is not None and self.table.replace(
                    link.peer, [RemoteQueue.from_wire(e) for e in frame.get("entries", [])]):
                self._bindings_changed()
        elif kind == "forward":
            self._received(link, frame)
        elif kind == "acks":
            for duplicate_id in frame.get("ids", ()):
                if link.connector is not None:
                    link.connector.acknowledged(duplicate_id)
                    self.store_forward.done(duplicate_id)
                waiter = self._waiters.pop(duplicate_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
        elif kind == "ping":
            pass  # Link.last_heard is all it is for
        elif kind == "request":
            self._spawn(self._answer(link, frame))
        else:
            log.info("cluster node %s: unknown frame %r from %s ignored", self.me, kind, link.peer)

    async def _answer(self, link: Link, frame: dict) -> None:
        body = frame.get("body") or {}
        try:
            if body.get("kind", "grouping") != "grouping" or self.grouping is None or not hasattr(self.grouping, "handle"):
                raise RuntimeError(f"node {self.me} has no LOCAL grouping handler for this request")
            answer = self.grouping.handle(body)
            if inspect.isawaitable(answer):
                answer = await answer
            link.send({"kind": "response", "rid": frame.get("rid"), "body": answer})
        except Exception as exc:  # noqa: BLE001 - the asking node gets the error
            link.send({"kind": "response", "rid": frame.get("rid"), "error": str(exc)})

    def _received(self, link: Link, frame: dict) -> None:
        message = wire.message_from_wire(frame["message"])
        duplicate_id = frame["id"]
        if self.duplicates.seen(duplicate_id):
            self.duplicates_received += 1
            if frame.get("dedupe", True):
                log.info("cluster node %s dropped a duplicate forward %s from %s", self.me, duplicate_id, link.peer)
                link.acks.append(duplicate_id)
                return
        elif message.persistent and frame.get("dedupe", True):
            self.persistent_ids.keep(duplicate_id)  # written in the same flush as the message
        target = frame.get("target", self.me)
        queue = frame["queue"]
        if target != self.me and frame.get("why") in ("route", "redistribute"):
            hop = self.table.next_hop(target)
            connector = self._connector_to(hop) if hop is not None else None
            if connector is not None:
                onward = {**frame, "from": self.me}
                self.store_forward.keep(connector.peer, onward, message)
                connector.forward(onward)
                link.acks.append(duplicate_id)
                return
            log.warning("cluster node %s has no route to %s any more: %s stays here", self.me, target,
                        message.message_id)
        self._enqueue_locally(queue, message)
        link.acks.append(duplicate_id)
        self._poke.add(queue)

    def _end_of_read(self, link: Link) -> None:
        """After a read's frames: make what they brought durable, then acknowledge it all at once
        (the source forgets a forward on its ack)."""
        if link.acks:
            self.broker.flush()
            acks, link.acks = link.acks, []
            link.send({"kind": "acks", "ids": acks})
        poke, self._poke = self._poke, set()
        for queue in poke:
            self.redistributor.poke(queue)

    def _enqueue_locally(self, queue: str, message: Message) -> None:
        self.broker.queue(DestinationName(QUEUE, queue)).enqueue(message)

    def _forward(self, node: str, queue: str, message: Message, why: str) -> bool:
        """Hand ``message`` on towards ``node``; False when no link leads there."""
        hop = node if self._connector_to(node) is not None else self.table.next_hop(node)
        connector = self._connector_to(hop) if hop is not None else None
        if connector is None:
            return False
        frame = {"kind": "forward", "id": f"{self.me}-{self._incarnation}-{next(self._ids)}", "target": node,
                 "queue": queue, "why": why, "dedupe": self.cc.use_duplicate_detection,
                 "message": wire.message_to_wire(message)}
        self.store_forward.keep(connector.peer, frame, message)
        connector.forward(frame)
        return True

    # ------------------------------------------------------------ bindings

    def _in_scope(self, queue: Queue | str) -> bool:
        name = queue if isinstance(queue, str) else queue.name.name
        if name.startswith(INTERNAL_PREFIX):
            return False  # the node's own store-and-forward and duplicate-id keys
        if not isinstance(queue, str) and self.broker.temporary.is_temporary(queue.name.canonical):
            return False
        return self.cc.matches(name)

    def _own_bindings(self) -> list[RemoteQueue]:
        own = []
        for queue in list(self.broker.queues.values()):
            if self._in_scope(queue):
                selectors = tuple(c.selector.text if c.selector is not None else None for c in queue.consumers)
                own.append(RemoteQueue(self.me, queue.name.name, selectors, 1))
        return own

    def _bindings_frame(self, peer: str) -> dict:
        return {"kind": "bindings", "entries": [e.to_wire() for e in self.table.announce(self._own_bindings(), peer)]}

    def _bindings_changed(self) -> None:
        """Tell the nodes that dial us (soon, once for a burst of changes); move what waits."""
        if not self._announce_pending and not self.stopped:
            self._announce_pending = True
            asyncio.get_running_loop().call_soon(self._announce)

    def _announce(self) -> None:
        self._announce_pending = False
        for link in list(self.inbound.values()):
            self._send_bindings(link)
        self.redistributor.poke()

    def _send_bindings(self, link: Link) -> None:
        """Announce this node's table to the node that dials over ``link``, unless that link was
        last told the same (a change elsewhere need not concern every peer)."""
        frame = self._bindings_frame(link.peer)
        if frame == link.last_announced:
            return
        if link.send(frame):
            link.last_announced = frame
            self.bindings_sent += 1

    def _consumer_event(self, event: str, consumer: Consumer) -> None:
        source = consumer.source
        if not isinstance(source, Queue) or source is not self.broker.queues.get(source.name.canonical):
            return  # a topic subscription, or a durable/shared subscription's own queue
        if not self._in_scope(source):
            return
        if event == "add":
            self.redistributor.consumer_arrived(source.name.name)
        else:
            self.redistributor.consumer_left(source.name.name, len(source.consumers))
        self._bindings_changed()

    def _queue_created(self, canonical: str) -> None:
        self._bindings_changed()

    # ------------------------------------------------------------ routing

    def _route(self, queue: Queue, message: Message) -> bool:
        """`Broker.queue_router`: True when the message goes elsewhere than ``queue`` here."""
        if not self._in_scope(queue):
            return False
        name = queue.name.name
        settings = self.cc.grouping_handler
        if (self.grouping is not None and message.group_id is not None
                and address_matches(settings.address if settings is not None else "", name)):
            # the sender's protocol adapter confirms the send once routed, or fails it
            task = self._spawn(self._route_grouped(queue, message))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # logged already
            self.broker.deferred_route = task
            return True
        node = self._choose(queue, message)
        if node != self.me and self._forward(node, name, message, "route"):
            return True
        if name in self.redistributor.active:
            asyncio.get_running_loop().call_soon(self.redistributor.poke, name)
        return False

    def _choose(self, queue: Queue, message: Message) -> str:
        from ..engine.message import MessageRef

        ref = MessageRef(message, 0)
        local_matches = any(c.accepts(ref) for c in queue.consumers)
        remotes = [entry for _, entry in self.table.remote_queues(queue.name.name).values()]
        return self.balancer.choose(queue.name.name, message, local_matches, remotes)

    async def _route_grouped(self, queue: Queue, message: Message) -> None:
        """Clustered grouping (artemis-message-grouping.md, "Clustered Grouping"): the handler
        decides the group's node; the balancer's choice is only the proposal. Messages of one
        group are routed one after the other, so their order holds."""
        group = message.group_id
        lock, users = self._group_locks.get(group, (asyncio.Lock(), 0))
        self._group_locks[group] = (lock, users + 1)
        try:
            async with lock:
                await self._route_one_grouped(queue, message)
        finally:
            lock, users = self._group_locks[group]
            if users == 1:
                del self._group_locks[group]  # group ids come from clients: keep none idle
            else:
                self._group_locks[group] = (lock, users - 1)

    async def _route_one_grouped(self, queue: Queue, message: Message) -> None:
        name = queue.name.name
        proposal = self._choose(queue, message)
        try:
            node = await self.grouping.route(name, message.group_id, proposal)
        except _grouping_failures() as exc:
            # the send fails (artemis-message-grouping.md, "Clustered Grouping"): a STOMP
            # sender gets an ERROR instead of its receipt; other protocols only see it logged
            self.grouping_failures += 1
            log.error("cluster node %s: no grouping decision for group %s of %s (%s); message %s not "
                      "delivered", self.me, message.group_id, name, exc, message.message_id)
            raise RoutingFailed(f"message group {message.group_id!r} on {name}: no decision from the "
                                f"grouping handler in time ({exc}); the send failed") from None
        self.grouping.touch(name, message.group_id)
        if node == self.me or not self._forward(node, name, message, "route"):
            if node != self.me:
                log.warning("cluster node %s: group %s is pinned to %s, which no link reaches; kept here",
                            self.me, message.group_id, node)
            queue.enqueue(message)

    def _make_grouping_handler(self) -> None:
        settings = self.cc.grouping_handler
        if settings is None:
            return
        try:
            from . import grouping
        except ImportError:
            # The handlers live in reference_broker/clustering/grouping.py (another piece of
            # work); without it grouped messages are balanced like the others.
            log.warning("cluster node %s: grouping_handler configured but reference_broker/clustering/grouping.py "
                        "is missing; grouped messages are not pinned across nodes", self.me)
            return
        options = {"timeout_ms": settings.timeout, "group_timeout_ms": settings.group_timeout,
                   "reaper_period_ms": settings.reaper_period}
        if settings.type == "LOCAL":
            self.grouping = grouping.local_handler(self.me, **options)
        else:
            self.grouping = grouping.remote_handler(self.me, self._request_local_handler, **options)

    async def _request_local_handler(self, message: dict) -> dict:
        """A REMOTE handler's request, to the node with the LOCAL one (grouping_handler.local_node)."""
        return await self.request(self.cc.grouping_handler.local_node, message)

    # ------------------------------------------------------------ redistribution

    def _redistribute(self, name: str) -> int:
        """Move the pending messages of queue ``name`` to nodes whose queue has consumers
        (round robin, filters ignored); returns how many moved."""
        queue = self.broker.queues.get(f"queue://{name}")
        if queue is None:
            self.redistributor.active.discard(name)  # forgotten (idle): nothing to move
            return 0
        if queue.consumers or not queue.pending_count:
            return 0
        targets = sorted(node for node, (_, entry) in self.table.remote_queues(name).items() if entry.consumers)
        targets = [t for t in targets if self._connector_to(self.table.next_hop(t) or t) is not None]
        if not targets:
            return 0
        moved = 0
        for i, ref in enumerate(queue.take_pending()):
            node = targets[i % len(targets)]
            if not self._forward(node, name, ref.message, "redistribute"):
                queue.enqueue(ref.message, delivery_count=ref.delivery_count)
            else:
                moved += 1
        if moved:
            log.info("cluster node %s redistributed %d messages of %s to %s", self.me, moved, name, targets)
        return moved

    # ------------------------------------------------------------ scale-down

    def scale_down_target(self) -> str | None:
        """A node up and linked, of this node's scale-down group (any node when it has none)."""
        group = self.cc.scale_down_group_name
        candidates = sorted({c.peer for c in self.connectors if c.up and (group is None or c.peer_group == group)}
                            | {p for p, link in self.inbound.items()
                               if link.is_open and (group is None or link.peer_group == group)})
        return candidates[0] if candidates else None

    async def scale_down(self) -> int:
        """artemis-clusters.md, "Scaling Down": every message of every queue, in order, to the back
        of the same queue on one node of this node's scale-down group. Returns how many moved;
        without such a node nothing moves (and the messages go with this node)."""
        target = self.scale_down_target()
        if target is None:
            log.warning("cluster node %s: scale-down found no node of group %r; its messages stay", self.me,
                        self.cc.scale_down_group_name)
            return 0
        link = self._link_to(target)
        broker = self.broker
        for connection in list(broker.connections.values()):
            if not connection.internal:
                connection.close()  # what its consumers held unacknowledged is pending again
        waiters = []
        for queue in list(broker.queues.values()):
            if broker.temporary.is_temporary(queue.name.canonical):
                continue
            for ref in queue.take_pending():
                duplicate_id = f"{self.me}-{self._incarnation}-{next(self._ids)}"
                future = asyncio.get_running_loop().create_future()
                self._waiters[duplicate_id] = future
                waiters.append(future)
                link.send({"kind": "forward", "id": duplicate_id, "target": target, "queue": queue.name.name,
                           "why": "scale_down", "dedupe": True, "message": wire.message_to_wire(ref.message)})
        if waiters:
            done, pending = await asyncio.wait(waiters, timeout=_SCALE_DOWN_TIMEOUT)
            if pending:
                log.error("cluster node %s: scale-down to %s: %d of %d messages not acknowledged", self.me, target,
                          len(pending), len(waiters))
        broker.flush()
        log.info("cluster node %s scaled down %d messages to %s", self.me, len(waiters), target)
        return len(waiters)
