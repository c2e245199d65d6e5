"""A store-and-forward bridge from this broker to one peer, over STOMP (see the package docstring).

Forwarding half (always): the bridge subscribes to the peer's consumer advisories and keeps, per
destination, the network consumers `demand.desired_consumers` asks for on *this* broker. What one
receives is sent to the peer with a receipt, and acknowledged here -- removed from this broker's
queue and store -- only when the receipt arrives, i.e. once the peer has stored it (ActiveMQ
"Networks of Brokers", "Reliability": a durable source keeps its durability across the network).
A message is never forwarded to a broker in its ``brokerPath`` nor past message_ttl (`paths`).
Non-persistent messages go one-way and are acknowledged here at once, unless ``always_sync_send``
(`forwarded_with_receipt`). At most ``prefetch_size`` messages are in flight to the peer per
network consumer (its prefetch).

Duplex half (``duplex``): ActiveMQ "Duplex network connectors" -- the same connection carries the
opposite direction too. The bridge watches this broker's own consumers and, for the demand they
create, subscribes on the peer (a network subscription whose id carries path and priority); what
arrives is stored here first and only then acknowledged to the peer.

When the connection drops, the local network consumers close (what they had in flight goes back
to their queues, unacknowledged) and the bridge reconnects after the connector's back-off.

Durable topic subscribers behind the peer (ActiveMQ "Networks of Brokers"; `demand`): the bridge's
network subscription of their topic is itself durable, named from the connector and broker names
(the N.B. on names under "Example Configuration"). It stays when the subscriber goes offline
(ActiveMQ 5.17 does the same: its network consumer does not follow the remote consumer's
removal), so messages published meanwhile reach the peer and wait there; while the bridge is down
they wait here, in the durable subscription. When the bridge starts, the durable network
subscriptions it owns are re-activated at once (``dynamic_only`` false, the default) or only once
a durable subscriber of the topic shows up on the peer again (``dynamic_only`` true; table,
dynamicOnly). Not done: removing the network subscription when the peer's subscriber unsubscribes.

suppress_duplicate_queue_subscriptions (table): a queue's network consumer whose demand comes,
through an intermediary, from a broker this broker already has a shorter route to (another
bridge's network consumer ending at the same broker) is not created, and is removed when such a
shorter one appears.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from ..engine.audit import NETWORK_ORIGIN_PROPERTY
from ..engine.broker import Broker, Connection, broker_name_of
from ..engine.consumer import AckMode, Consumer
from ..engine.message import Message, MessageRef
from ..engine.names import parse_destination
from ..engine.network_principal import bridge_login
from ..protocols.stomp.codec import Frame
from .advisories import (TEMPORARY_PROPERTY, VIRTUAL_ADVISORY_PREFIX, VIRTUAL_ADVISORY_WILDCARD, AdvisoryPublisher,
                         advisory_subscriptions, decode_consumers, destination_of_advisory, internal_connection)
from .demand import (DURABLE_KEY, DURABLE_SUB_PREFIX, NetworkDemand, RemoteConsumer, bridge_client_id,
                     desired_consumers, durable_subscription_name, dynamically_forwarded, static_demand)
from .network_config import NetworkConnectorConfig
from .paths import (PATH_PROPERTY, extend_path, network_id, network_priority, network_subscription, parse_path,
                    remote_message_selector, without_convert_prefix)
from .stomp_link import StompLink
from .uris import Peer

log = logging.getLogger("reference_broker.cluster")

# MESSAGE headers that describe the delivery or the message, not application properties.
_CONTROL_HEADERS = frozenset({
    "message-id", "destination", "subscription", "ack", "content-length", "redelivered", "JMSXDeliveryCount",
    "timestamp", "expires", "priority", "persistent", "correlation-id", "reply-to", "type", "content-type",
    "JMSXGroupID", "JMSXGroupSeq",
})


def wire(destination: str, temporary: bool = False) -> str:
    """STOMP name; a temporary destination in ActiveMQ's remote form, so the peer registers it."""
    kind, _, name = destination.partition("://")
    return f"/remote-temp-{kind}/{name}" if temporary else f"/{kind}/{name}"


def canonical(wire_name: str) -> str:
    """``/queue/X`` (STOMP) -> ``queue://X``; a peer's temporary ``/remote-temp-queue/X`` too."""
    for kind in ("queue", "topic"):
        if wire_name.startswith(f"/{kind}/"):
            return f"{kind}://{wire_name[len(kind) + 2:]}"
        if wire_name.startswith(f"/remote-temp-{kind}/"):
            return f"{kind}://{wire_name[len(kind) + 14:]}"
    return parse_destination(wire_name).canonical


def send_headers(message: Message, path: str, receipt: str | None) -> list[tuple[str, str]]:
    """The forwarded SEND's headers; ``receipt`` None sends it one-way (no RECEIPT asked)."""
    headers = [("destination", wire(message.destination))]
    if receipt is not None:
        headers.append(("receipt", receipt))
    headers += [("persistent", "true" if message.persistent else "false"), ("priority", str(message.priority))]
    if message.expiration:
        headers.append(("expires", str(message.expiration)))
    for name, value in (("correlation-id", message.correlation_id), ("reply-to", message.reply_to),
                        ("type", message.type), ("content-type", message.content_type),
                        ("JMSXGroupID", message.group_id)):
        if value is not None:
            headers.append((name, value))
    if message.group_id is not None and message.group_seq:
        headers.append(("JMSXGroupSeq", str(message.group_seq)))
    for name, value in message.properties.items():
        if name != PATH_PROPERTY:
            headers.append((name, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    if NETWORK_ORIGIN_PROPERTY not in message.properties:
        # First hop: name the message, so the peer's audit recognises a resend (engine/audit.py).
        headers.append((NETWORK_ORIGIN_PROPERTY, origin_id(parse_path(path)[0], message.message_id)))
    headers.append((PATH_PROPERTY, path))
    return headers


def origin_id(broker: str, message_id: str) -> str:
    return f"{broker}/{message_id}"


def message_from_frame(frame: Frame, message_id: str, path: str) -> Message:
    h = frame.header_dict()
    properties = {k: v for k, v in h.items() if k not in _CONTROL_HEADERS}
    properties[PATH_PROPERTY] = path
    group_seq = h.get("JMSXGroupSeq")
    return Message(
        message_id=message_id, destination=canonical(h["destination"]), body=bytes(frame.body),
        properties=properties, persistent=h.get("persistent") == "true", priority=int(h.get("priority", 4)),
        expiration=int(h.get("expires", 0) or 0), correlation_id=h.get("correlation-id"),
        reply_to=h.get("reply-to"), type=h.get("type"), group_id=h.get("JMSXGroupID"),
        group_seq=int(group_seq) if group_seq else 0, content_type=h.get("content-type"))


def forwarded_with_receipt(message: Message, config: NetworkConnectorConfig) -> bool:
    """Whether the bridge forwards ``message`` as a request/reply (a SEND with a receipt, acked
    here only once the peer confirms): persistent messages always, non-persistent ones only with
    ``always_sync_send`` (document, NetworkConnector Properties, alwaysSyncSend; NOB-SYNC-1)."""
    return message.persistent or config.always_sync_send


class Bridge:
    """One connector's bridge to one peer (or, for masterslave:, to the first live peer of a
    group). `run()` connects, serves, and reconnects until `stop()`."""

    def __init__(self, broker: Broker, publisher: AdvisoryPublisher, config: NetworkConnectorConfig,
                 peers: tuple[Peer, ...]) -> None:
        self.broker = broker
        self.publisher = publisher
        self.config = config
        self.peers = peers
        self.local_name = broker.config.name
        self.remote_name: str | None = None
        self.link: StompLink | None = None
        self.local: Connection | None = None
        self.connected_peer: Peer | None = None
        self.connections = 0  # sessions established so far (tests and logs)
        self.first_attempt: asyncio.Future | None = None
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._numbers = itertools.count(1)
        # forwarding half: destination -> key -> network consumer on this broker
        self._forward: dict[str, dict[str, Consumer]] = {}
        self._receipts: dict[str, tuple[Consumer, str]] = {}
        # what the peer last announced per destination: its consumers, and (use_virtual_dest_subs)
        # the consumers of the virtual destination's targets; demand is the union of both
        self._announced: dict[str, list[RemoteConsumer]] = {}
        self._announced_virtual: dict[str, list[RemoteConsumer]] = {}
        # duplex half: destination -> key -> (subscription id on the peer, its demand)
        self._pull: dict[str, dict[str, tuple[str, NetworkDemand]]] = {}
        self._pull_by_id: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<Bridge {self.config.name} {self.local_name}->{self.remote_name or self.peers}>"

    # ------------------------------------------------------------ lifecycle

    def start(self) -> asyncio.Task:
        self.first_attempt = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self.run(), name=repr(self))
        return self._task

    async def stop(self) -> None:
        self._stopping = True
        if self.link is not None:
            self.link.close()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping anyway
                pass
        self._teardown()

    async def run(self) -> None:
        failures = 0
        reconnect = self.config.parsed_uri.reconnect
        while not self._stopping:
            try:
                await self._connect()
            except (OSError, asyncio.TimeoutError) as exc:
                failures += 1
                self._first_attempt_done()
                delay = reconnect.delay_ms(failures) / 1000
                log.info("network connector %s on %s: no peer of %s reachable (%s); retrying in %.3f s",
                         self.config.name, self.local_name, [str(p) for p in self.peers], exc, delay)
                await asyncio.sleep(delay)
                continue
            failures = 0
            self._first_attempt_done()
            try:
                await self.link.closed
            finally:
                self._teardown()
            if not self._stopping:
                log.info("network bridge %s -> %s lost; reconnecting", self.local_name, self.remote_name)
                failures = 1
                await asyncio.sleep(reconnect.delay_ms(failures) / 1000)

    def _first_attempt_done(self) -> None:
        if self.first_attempt is not None and not self.first_attempt.done():
            self.first_attempt.set_result(None)

    async def _connect(self) -> None:
        last: Exception | None = None
        # masterslave: the URIs are master, slave1, ... in order: connect to the first live one
        # (ActiveMQ "MasterSlave Discovery"); static: makes one Bridge per peer, so one peer here.
        for peer in self.peers:
            # The connector's credentials; without them, a broker of this process is told by the
            # process's secret that this is a bridge (engine/network_principal.py).
            login, passcode = bridge_login(peer.host, peer.port, self.config.user_name, self.config.password)
            try:
                link, connected = await StompLink.open(peer.host, peer.port, self._on_frame,
                                                       login=login, passcode=passcode)
            except (OSError, asyncio.TimeoutError) as exc:
                last = exc
                continue
            self.link, self.connected_peer = link, peer
            break
        else:
            raise last if last is not None else OSError("no peer")
        # The peer's connection ids are "<broker name>-<n>" (engine.broker.Broker.connect).
        session = connected.get("session") or ""
        self.remote_name = (broker_name_of(session) if session.count("-") >= 2 else "") or str(self.connected_peer)
        # no login, as ActiveMQ's in-VM local end; the client id keys this bridge's durable network
        # subscriptions (`demand.bridge_client_id`)
        self.local = internal_connection(self.broker, bridge_client_id(self.config.name, self.local_name,
                                                                       self.remote_name))
        self.connections += 1
        log.info("Network connection between %s and %s (%s) has been established (connector %s%s)",
                 self.local_name, self.connected_peer, self.remote_name, self.config.name,
                 ", duplex" if self.config.duplex else "")
        for destination, demand in static_demand(self.config, self.remote_name).items():
            self._add_forward(destination, demand)
        if not self.config.dynamic_only:
            self._reactivate_durable_subscriptions()
        if self.config.suppress_duplicate_queue_subscriptions:
            self.publisher.watch(self._recheck_suppressed)
        if not self.config.static_bridge:
            # staticBridge: "will not subscribe to any advisory topics on the remote broker".
            # destinationFilter narrows which consumer advisories are heard (NOB-DESTFILTER-1/2)
            for n, topic in enumerate(advisory_subscriptions(self.config.destination_filter)):
                self.link.write("SUBSCRIBE", [("id", "advisories" if n == 0 else f"advisories.{n}"),
                                              ("destination", topic), ("ack", "auto")])
            if self.config.use_virtual_dest_subs:
                # The table's useVirtualDestSubs: listen to the virtual destination consumer advisories.
                self.link.write("SUBSCRIBE", [("id", "virtual-advisories"), ("destination", VIRTUAL_ADVISORY_WILDCARD),
                                              ("ack", "auto")])
        if self.config.duplex:
            self.publisher.watch(self._local_demand)
            for destination in self.publisher.destinations():
                self._local_demand(destination, self.publisher.snapshot(destination))

    def _teardown(self) -> None:
        self.publisher.unwatch(self._local_demand)
        self.publisher.unwatch(self._recheck_suppressed)
        if self.link is not None:
            self.link.close()
        if self.local is not None:
            self.local.close()  # network consumers close; unacknowledged messages return to their queues
            self.local = None
        self._forward.clear()
        self._receipts.clear()
        self._announced.clear()
        self._announced_virtual.clear()
        self._pull.clear()
        self._pull_by_id.clear()

    # ------------------------------------------------------------ frames from the peer

    def _on_frame(self, frame: Frame) -> None:
        if frame.command == "RECEIPT":
            pending = self._receipts.pop(frame.get("receipt-id") or "", None)
            if pending is not None and self.local is not None:
                consumer, message_id = pending
                if not consumer.closed:
                    # The peer has the message (stored, for a persistent one): remove it here.
                    self.local.ack(consumer, message_id)
        elif frame.command == "MESSAGE":
            subscription = frame.get("subscription") or ""
            if subscription == "advisories" or subscription.startswith("advisories."):
                self._on_advisory(frame)
            elif subscription == "virtual-advisories":
                self._on_advisory(frame, virtual=True)
            elif subscription in self._pull_by_id:
                self._on_pulled(frame)
        elif frame.command == "ERROR":
            log.warning("network bridge %s -> %s: peer error %s %r", self.local_name, self.remote_name,
                        frame.get("message"), bytes(frame.body[:200]))

    def _on_advisory(self, frame: Frame, virtual: bool = False) -> None:
        topic = canonical(frame.get("destination") or "").partition("://")[2]
        if virtual:
            destination = destination_of_advisory(topic, VIRTUAL_ADVISORY_PREFIX)
        else:
            destination = destination_of_advisory(topic)
        if destination is None or self.remote_name is None:
            return
        (self._announced_virtual if virtual else self._announced)[destination] = decode_consumers(bytes(frame.body))
        wanted = self._wanted(destination)
        if frame.get(TEMPORARY_PROPERTY) == "true" and self.local is not None:
            # The peer's temporary destination (bridgeTempDestinations, NOB-TEMP-1): known here,
            # so local clients may reply to it, only while this bridge carries it.
            dest = parse_destination(destination)
            if not self.config.bridge_temp_destinations:
                wanted = {}
            elif wanted:
                self.broker.temporary.announce(dest, self.local.connection_id)
            else:
                self.broker.temporary.withdraw(dest, self.local.connection_id)
        self._reconcile_forward(destination, wanted)

    def _wanted(self, destination: str) -> dict[str, NetworkDemand]:
        consumers = self._announced.get(destination, []) + self._announced_virtual.get(destination, [])
        wanted = desired_consumers(self.config, destination, self.remote_name, self.local_name, consumers)
        if self.config.suppress_duplicate_queue_subscriptions and destination.startswith("queue://"):
            wanted = {k: d for k, d in wanted.items() if not self._has_shorter_route(destination, d)}
        return wanted

    # ------------------------------------------------------------ duplicate suppression

    def _has_shorter_route(self, destination: str, demand: NetworkDemand) -> bool:
        """Whether another bridge's network consumer of ``destination`` on this broker reaches the
        broker ``demand`` leads to (the last of its path) in fewer hops."""
        ours = set(self._forward.get(destination, {}).values())
        for consumer in self.publisher.consumers.get(destination, {}):
            if consumer in ours:
                continue
            path = self.publisher.network_paths.get(consumer)
            if path is None:
                parsed = network_subscription(consumer)
                path = parsed[0] if parsed else ()
            if path and path[-1] == demand.path[-1] and len(path) < len(demand.path):
                return True
        return False

    def _recheck_suppressed(self, destination: str, _consumers: list[RemoteConsumer]) -> None:
        """This broker's consumers of ``destination`` changed: another bridge may now offer a
        shorter route (drop ours) or have lost it (restore ours)."""
        if destination.startswith("queue://") and destination in self._announced and self.local is not None:
            self._reconcile_forward(destination, self._wanted(destination))

    # ------------------------------------------------------------ forwarding half

    def _reconcile_forward(self, destination: str, wanted: dict[str, NetworkDemand]) -> None:
        current = self._forward.get(destination, {})
        if DURABLE_KEY in current or DURABLE_KEY in wanted:
            # The durable network subscription outlives its subscriber's absence (module
            # docstring) and carries the topic's non-durable demand too: nothing else is needed.
            wanted = {DURABLE_KEY: wanted[DURABLE_KEY]} if DURABLE_KEY in wanted else {}
        for key in [k for k in current if k not in ("static", DURABLE_KEY) and k not in wanted]:
            consumer = current.pop(key)
            if self.local is not None and consumer.consumer_id in self.local.consumers:
                self.local.unsubscribe(consumer.consumer_id)
        for key, demand in wanted.items():
            if key not in current:
                self._add_forward(destination, demand)
        if destination in self._forward and not self._forward[destination]:
            del self._forward[destination]

    def _add_forward(self, destination: str, demand: NetworkDemand) -> None:
        local = self.local
        if local is None or self.remote_name is None:
            return
        dest = parse_destination(destination)
        if dest.is_queue and any(part in ("*", ">") for part in dest.name.split(".")):
            return  # nobody consumes from a wildcard queue
        # The id carries path and priority, so the advisory announces it as a network consumer;
        # the selector (loop suppression, message_ttl, a non-conduit consumer's own selector) is in
        # place before the first dispatch.
        consumer = local.subscribe(
            network_id(demand.path, demand.priority, next(self._numbers)), dest, deliver=self._forward_one,
            ack_mode=AckMode.CLIENT_INDIVIDUAL, prefetch=self.config.prefetch_size, priority=demand.priority,
            selector=remote_message_selector(self.remote_name, self.config.effective_message_ttl, demand.selector),
            durable_name=durable_subscription_name(self.local_name, destination) if demand.durable else None)
        self.publisher.register_network(consumer, demand.path)
        self._forward.setdefault(destination, {})[demand.key] = consumer

    def _reactivate_durable_subscriptions(self) -> None:
        """dynamicOnly false (the table's default): at bridge start, re-activate the durable network
        subscriptions this connector left on this broker, subscriber on the peer or not."""
        client_id = self.local.client_id if self.local is not None else None
        path = (self.remote_name,)
        priority = network_priority(path, self.config.decrease_network_consumer_priority)
        for durable in list(self.broker.durable.values()):
            destination = durable.pattern.canonical
            if (durable.client_id != client_id or durable.active is not None
                    or not durable.name.startswith(DURABLE_SUB_PREFIX)
                    or durable.name != durable_subscription_name(self.local_name, destination)
                    or not dynamically_forwarded(self.config, destination)):
                continue
            if DURABLE_KEY not in self._forward.get(destination, {}):
                self._add_forward(destination, NetworkDemand(DURABLE_KEY, path, priority, None, durable=True))

    def _forward_one(self, consumer: Consumer, ref: MessageRef) -> None:
        link = self.link
        if link is None or not link.is_open:
            return  # stays in flight; returned to the queue when the local connection closes
        message = ref.message
        path = extend_path(message.properties.get(PATH_PROPERTY), self.local_name)
        if not forwarded_with_receipt(message, self.config):
            # One-way, as ActiveMQ forwards a non-persistent message without alwaysSyncSend: removed
            # here once written, so it is lost if the link fails before the peer has it (document,
            # NetworkConnector Properties, alwaysSyncSend; "Reliability"). The ack is deferred out
            # of the queue's dispatch loop that called us.
            link.write("SEND", send_headers(message, path, None), message.body)
            asyncio.get_running_loop().call_soon(self._ack_forwarded, consumer, message.message_id)
            return
        receipt = f"fwd-{next(self._numbers)}"
        self._receipts[receipt] = (consumer, message.message_id)
        link.write("SEND", send_headers(message, path, receipt), message.body)

    def _ack_forwarded(self, consumer: Consumer, message_id: str) -> None:
        if self.local is not None and not consumer.closed:
            self.local.ack(consumer, message_id)

    # ------------------------------------------------------------ duplex half

    def _local_demand(self, destination: str, consumers: list[RemoteConsumer]) -> None:
        """This broker's consumers of ``destination`` changed: keep the pull subscriptions on the
        peer that carry that demand (the reverse direction of a duplex bridge)."""
        if self.link is None or self.remote_name is None:
            return
        wanted = desired_consumers(self.config, destination, self.local_name, self.remote_name, consumers)
        temporary = self.broker.temporary.is_temporary(destination)
        if temporary and not self.config.bridge_temp_destinations:
            wanted = {}  # bridgeTempDestinations=false: the peer never hears of them (NOB-TEMP-1)
        current = self._pull.setdefault(destination, {})
        for key in [k for k in current if k not in wanted]:
            sub_id, _ = current.pop(key)
            self._pull_by_id.pop(sub_id, None)
            self.link.write("UNSUBSCRIBE", [("id", sub_id)])
        for key, demand in wanted.items():
            if key in current:
                continue
            sub_id = network_id(demand.path, demand.priority, next(self._numbers))
            selector = remote_message_selector(self.local_name, self.config.effective_message_ttl, demand.selector)
            self.link.write("SUBSCRIBE", [
                ("id", sub_id), ("destination", wire(destination, temporary)), ("ack", "client-individual"),
                ("activemq.prefetchSize", str(self.config.prefetch_size)),
                ("selector", without_convert_prefix(selector))])
            current[key] = (sub_id, demand)
            self._pull_by_id[sub_id] = destination
        if not current:
            del self._pull[destination]

    def _on_pulled(self, frame: Frame) -> None:
        local, link = self.local, self.link
        if local is None or link is None:
            return
        path = extend_path(frame.get(PATH_PROPERTY), self.remote_name or "?")
        message = message_from_frame(frame, local.new_message_id(), path)
        if NETWORK_ORIGIN_PROPERTY not in message.properties and frame.get("message-id"):
            # pulled straight from the broker it was sent to: the peer's id names it
            message.properties[NETWORK_ORIGIN_PROPERTY] = origin_id(self.remote_name or "?", frame.get("message-id"))
        dest = parse_destination(message.destination)
        local.send(dest, message)
        # Store and forward: ours is durable before the peer may drop its copy.
        self.broker.flush()
        ack = frame.get("ack")
        if ack is not None:
            link.write("ACK", [("id", ack)])

