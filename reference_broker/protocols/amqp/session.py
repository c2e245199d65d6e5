"""AMQP 1.0 session adapter: python-qpid-proton's protocol engine, driven sans-IO, mapped onto
the broker engine.

How proton is driven. One `proton.Transport` in server mode, bound to one `proton.Connection`
whose events go to a `proton.Collector`. Bytes from the socket are pushed into the transport
(`capacity()` / `push()`, `close_tail()` at EOF); after every push the collector's events are
dispatched to the `_on_*` handlers below; bytes to send are taken with `pending()` / `peek()` /
`pop()`, and `tick(now)` runs proton's timers (idle time-out, empty frames). No reactor, no
thread: the listener calls in from the event loop. The SASL exchange in front of the AMQP
header is this package's own small layer (`sasl.py`, see there for why).

Addresses (attach source/target, a message's `to` on an anonymous relay link): `queue://X`,
`topic://X`, or a bare name of `AmqpConfig.default_address_kind`. A dynamic source or target
(AMQP 3.5.3) gets a temporary destination of the connection (engine/temporary.py), whose name
the attach answers with; it is deleted when the connection closes, and sends to it after that
are refused with `amqp:not-found`.

Links. A link on which the client sends (a proton *Receiver* here) publishes with
`Connection.send`; a link on which the client receives (a proton *Sender* here) is an engine
`Consumer`:
- Credit. AMQP link credit is "how many more transfers may I send", not a window of unsettled
  messages. The consumer's prefetch window is kept at (its unsettled messages + the link's
  credit), and the consumer is marked unwritable while the link has no credit, so the engine
  dispatches exactly as many messages as the client granted. Pre-settled links
  (snd-settle-mode settled) use AckMode.AUTO, whose window is unbounded, so for them the
  writable flag alone carries the credit. Drain (AMQP 2.6.7) is honoured: after dispatching
  what is there, the rest of the credit is given back. The same flag carries the socket's
  back-pressure. One gap: the engine creates a consumer able to take one message before its
  flags can be set, so a link attached without credit may get one message queued in proton
  until credit arrives (if it detaches first, that message is redelivered with its delivery
  count raised; on a pre-settled link it is lost).
- Outcomes (AMQP 3.4): accepted -> ack; rejected -> the message goes to its dead-letter queue
  now (`Broker.dead_letter` + ack: the engine has no "dead-letter this in-flight message"
  call); released -> back to the queue without counting a delivery (the engine's nack always
  counts, so the count is taken back first); modified with delivery-failed -> nack (counted,
  and dead-lettered past `maximum_redeliveries`); modified without it -> like released.
  Settled without an outcome counts as accepted. `undeliverable-here` and modified's
  message-annotations are not supported (the engine cannot keep a message from one consumer).
- Producer flow control: while `Connection.send` says the destination is full, the link's
  credit is taken back (a flow with credit 0) and transfers already on the way wait, unsettled,
  until `wait_for_space` calls back; then they are routed and credit is granted again. Past
  the policy's send_fail_if_no_space_after_timeout, credit comes back and sends are rejected
  with amqp:resource-limit-exceeded while the destination stays full. A policy that refuses
  sends outright (send_fail_if_no_space) rejects the transfer the same way. Messages larger
  than `max_message_size` (announced in the attach) close the link.
- Anonymous relay (a sender link without a target address; offered as ANONYMOUS-RELAY): each
  message's `to` names its destination, checked per message.
- Durable topic subscriptions: a source on a topic with durability configuration or
  unsettled-state is a durable subscription named by the link name, for the client id that is
  the connection's container id (as ActiveMQ and Artemis do). Detaching the link keeps it,
  closing removes it. An attach with no source address looks the subscription up by link name
  (how JMS clients unsubscribe). A container id already connected is refused only when the
  client desires sole-connection-for-container (Artemis); otherwise that second connection
  has no client id, so no durable subscriptions.
- Selectors: the `jms-selector` source filter (descriptor apache.org:selector-filter:string,
  0x0000468C00000004); no-local: apache.org:no-local-filter:list (0x0000468C00000003).
  Accepted filters are echoed in the attach, as clients check for them.

Errors: engine errors become AMQP conditions (`condition_for`). A refused link gets an attach
with a null source/target followed by a detach carrying the error (AMQP 2.6.3); the connection
carries on. An undecodable message is rejected with amqp:decode-error. Protocol violations and
bytes that are not frames end the connection: with a close carrying the error once the
client's Open has arrived (proton writes nothing before that), else by closing the socket. A
bug in this module costs its connection (amqp:internal-error), never the broker or the
connection the engine was working for when it called back.

Durability: settlements leave only through the listener, which calls `Broker.flush()` before
writing, so `accepted` for a durable message is never sent before the store has it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from typing import Callable, Protocol

from proton import (
    Array,
    Collector,
    Condition,
    Connection as ProtonConnection,
    Delivery,
    Endpoint,
    Event,
    Link,
    Terminus,
    Transport,
    int32,
    symbol,
    ulong,
)

from ...config import AmqpConfig
from ...engine.broker import Broker, Connection
from ...engine.consumer import AckMode, Consumer
from ...engine.errors import (
    AuthenticationFailed,
    ClientIdInUse,
    EngineError,
    InvalidDestination,
    InvalidSelectorError,
    NotAuthorized,
    ResourceLimitError,
    TransactionError,
    UnknownMessage,
    UnknownSubscription,
)
from ...engine.message import MessageRef
from ...engine.names import QUEUE, TOPIC, DestinationName, parse_destination
from ...engine.queue import Queue
from ...engine.temporary import TemporaryDestinationError
from .convert import ConversionError, decode_message, encode_delivery, message_from_amqp
from .sasl import SaslServer, SaslState

log = logging.getLogger("reference_broker.amqp")

VERSION = "0.1"

# Condition names (AMQP 1.0 2.8.15, 2.8.17, 2.8.18).
NOT_FOUND = "amqp:not-found"
UNAUTHORIZED = "amqp:unauthorized-access"
INVALID_FIELD = "amqp:invalid-field"
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"
RESOURCE_LOCKED = "amqp:resource-locked"
INTERNAL_ERROR = "amqp:internal-error"
NOT_IMPLEMENTED = "amqp:not-implemented"
ILLEGAL_STATE = "amqp:illegal-state"
DECODE_ERROR = "amqp:decode-error"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
FRAMING_ERROR = "amqp:connection:framing-error"

_CONDITIONS: list[tuple[type, str]] = [
    (AuthenticationFailed, UNAUTHORIZED),
    (NotAuthorized, UNAUTHORIZED),
    (InvalidSelectorError, INVALID_FIELD),
    (ClientIdInUse, INVALID_FIELD),
    (InvalidDestination, NOT_FOUND),
    (TemporaryDestinationError, NOT_FOUND),
    (UnknownSubscription, NOT_FOUND),
    (ResourceLimitError, RESOURCE_LIMIT),
    (TransactionError, ILLEGAL_STATE),
    (UnknownMessage, ILLEGAL_STATE),
]

JMS_SELECTOR_KEY = symbol("jms-selector")
SELECTOR_DESCRIPTORS = frozenset({symbol("apache.org:selector-filter:string"), ulong(0x0000468C00000004)})
NO_LOCAL_DESCRIPTORS = frozenset({symbol("apache.org:no-local-filter:list"), ulong(0x0000468C00000003)})
SOLE_CONNECTION = symbol("sole-connection-for-container")
ANONYMOUS_RELAY = symbol("ANONYMOUS-RELAY")
PRIORITY = symbol("priority")


def condition_for(exc: BaseException) -> Condition:
    """The AMQP error condition for an engine error (amqp:internal-error for anything else)."""
    for cls, name in _CONDITIONS:
        if isinstance(exc, cls):
            return Condition(name, str(exc))
    return Condition(INTERNAL_ERROR, str(exc) or type(exc).__name__)


class SessionTransport(Protocol):
    def wake(self) -> None:
        """Output is waiting outside a read (an engine delivery): flush soon."""


def _symbols(data) -> set[str]:
    """A terminus's capabilities (one symbol, or an array or list of them) as strings."""
    if data is None:
        return set()
    data.rewind()
    if data.next() is None:
        return set()
    value = data.get_object()
    items = value.elements if isinstance(value, Array) else value if isinstance(value, (list, tuple)) else [value]
    return {str(item) for item in items}


class _Refused(Exception):
    """A link refused, or one message rejected, with this condition."""

    def __init__(self, condition: Condition) -> None:
        super().__init__(condition.description)
        self.condition = condition


class _Outgoing:
    """A link on which the broker sends (a consumer)."""

    __slots__ = ("link", "consumer", "presettled", "unsettled", "tags", "closed")

    def __init__(self, link: Link, presettled: bool) -> None:
        self.link = link
        self.consumer: Consumer | None = None
        self.presettled = presettled
        self.unsettled: dict[str, str] = {}  # delivery tag -> engine message id
        self.tags = itertools.count(1)
        self.closed = False


class _Incoming:
    """A link on which the client sends (a producer)."""

    __slots__ = ("link", "dest", "blocked", "blocked_dest", "blocked_since", "backlog", "fail_when_full", "closed")

    def __init__(self, link: Link, dest: DestinationName | None) -> None:
        self.link = link
        self.dest = dest  # None: anonymous relay, each message's `to` decides
        self.blocked = False
        self.blocked_dest: DestinationName | None = None
        self.blocked_since = 0.0
        self.backlog: deque[tuple[Delivery, bytes]] = deque()  # received while blocked
        # Set (to the error text) once a block outlasted send_fail_if_no_space_after_timeout:
        # sends are refused while the destination is full, until it has room again.
        self.fail_when_full: str | None = None
        self.closed = False


class AmqpSession:
    """One AMQP connection. `data_received` in; `data_to_send` out; `finished` when the socket
    should be closed once the output is written."""

    def __init__(
        self,
        broker: Broker,
        io: SessionTransport,
        options: AmqpConfig | None = None,
        failover_peers: list[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.io = io
        self.options = options or AmqpConfig()
        self.failover_peers = list(failover_peers if failover_peers is not None else broker.config.failover_peers)
        self.clock = clock
        self.opened_at = clock()
        mechanisms = ["PLAIN"]
        if broker.config.security.anonymous_allowed:
            mechanisms.append("ANONYMOUS")
        self.sasl = SaslServer(mechanisms, lambda login, passcode: broker.authenticate(login, passcode))
        self.transport: Transport | None = None
        self.pn_conn: ProtonConnection | None = None
        self.collector: Collector | None = None
        self.conn: Connection | None = None  # the engine connection, from the Open on
        self.opened = False
        self.closed = False  # socket gone, or we gave up on it
        self._finished = False
        self._end_output = False  # finish once the pending output is taken
        self._fatal: Condition | None = None  # close with this at the next output
        self.deadline = 0.0  # when proton next needs `tick` (monotonic seconds; 0: no deadline)
        self._writable = True
        self._links: dict[Link, _Outgoing | _Incoming] = {}
        self._consumer_numbers = itertools.count(1)
        self._batch_ms = 0

    # ------------------------------------------------------------ bytes in

    def data_received(self, data: bytes) -> None:
        if self.closed or self._finished:
            return
        self._batch_ms = self.broker.now_ms()
        if self.transport is None:
            self.sasl.feed(data)
            if self.sasl.state is SaslState.FAILED:
                log.info("AMQP connection refused during SASL: %s", self.sasl.error)
                self._finished = True
                return
            if self.sasl.state is not SaslState.DONE:
                return
            self._start_amqp()
            data = self.sasl.remainder
        self._push(data)

    def _start_amqp(self) -> None:
        transport = Transport(Transport.SERVER)
        transport.max_frame_size = self.options.max_frame_size
        if self.options.idle_timeout_ms:
            transport.idle_timeout = self.options.idle_timeout_ms / 1000
        connection = ProtonConnection()
        collector = Collector()
        connection.collect(collector)
        transport.bind(connection)
        self.transport, self.pn_conn, self.collector = transport, connection, collector

    def _push(self, data: bytes) -> None:
        transport = self.transport
        if 0 < len(data) <= transport.capacity():  # the usual case: all of it at once
            transport.push(data)
            self.process()
            return
        view = memoryview(data)
        while view and not self._finished:
            capacity = transport.capacity()
            if capacity < 0:  # the input side is closed (proton has seen a close or an error)
                break
            if capacity == 0:
                self.process()
                capacity = transport.capacity()
                if capacity <= 0:
                    log.warning("AMQP transport accepts no input; closing the connection")
                    self._abort()
                    return
            chunk = view[:capacity]
            transport.push(bytes(chunk))
            view = view[len(chunk):]
            self.process()
        self.process()

    def eof_received(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close_tail()
            self.process()

    # ------------------------------------------------------------ bytes out

    def data_to_send(self) -> bytes:
        out = self.sasl.take_output()  # SASL frames always precede proton's bytes
        transport = self.transport
        if transport is None or self.closed:
            return out
        if self._fatal is not None:
            fatal, self._fatal = self._fatal, None
            self._close_connection(fatal)
        self.process()
        # proton wants its timers run after the input and before the output is generated.
        self.deadline = transport.tick(self.clock())
        self.process()
        chunks = [out] if out else []
        while True:
            pending = transport.pending()
            if pending < 0:  # proton wrote its last frame (close): the socket can go
                self._finished = True
                break
            if pending == 0:
                break
            chunks.append(transport.peek(pending))
            transport.pop(pending)
        if self._end_output:
            self._finished = True
        return b"".join(chunks)

    @property
    def finished(self) -> bool:
        """Nothing more will be written: close the socket after writing what was taken."""
        return self._finished

    # ------------------------------------------------------------ events

    def process(self) -> None:
        """Dispatch proton's pending events."""
        collector = self.collector
        if collector is None:
            return
        while True:
            event = collector.peek()
            if event is None:
                return
            try:
                handler = self._handlers.get(event.type)
                if handler is not None and not self.closed:
                    handler(self, event)
            except Exception as exc:  # a bug must cost this connection, never the broker
                log.exception("internal error handling AMQP %s; closing the connection", event.type)
                self._close_connection(Condition(INTERNAL_ERROR, f"internal error: {exc}"))
            finally:
                collector.pop()

    def _on_connection_remote_open(self, event: Event) -> None:
        pn = self.pn_conn
        if pn.state & Endpoint.LOCAL_ACTIVE:
            return
        self.opened = True
        pn.container = self.broker.config.name
        pn.properties = self._open_properties()
        pn.offered_capabilities = [ANONYMOUS_RELAY]
        container_id = pn.remote_container or None
        try:
            try:
                self.conn = self.broker.connect(
                    login=self.sasl.login, passcode=self.sasl.passcode, client_id=container_id
                )
            except ClientIdInUse:
                desired = pn.remote_desired_capabilities or []
                if SOLE_CONNECTION in desired:
                    raise
                # Artemis enforces one connection per container id only when the client asks
                # for it (sole-connection-for-container); a proton Container opening two
                # connections shares one id. The second connection has no client id (so no
                # durable subscriptions).
                self.conn = self.broker.connect(login=self.sasl.login, passcode=self.sasl.passcode)
        except EngineError as exc:
            condition = condition_for(exc)
            if isinstance(exc, ClientIdInUse):
                condition = Condition(INVALID_FIELD, str(exc), {symbol("invalid-field"): symbol("container-id")})
            log.info("AMQP connection refused: %s", exc)
            pn.condition = condition
            pn.open()
            pn.close()
            return
        pn.open()

    def _open_properties(self) -> dict:
        props = {symbol("product"): self.options.product, symbol("version"): VERSION}
        if self.failover_peers:
            servers = []
            for peer in self.failover_peers:
                host, _, port = peer.rpartition(":")
                host = host.strip("[]")
                servers.append({
                    symbol("hostname"): host,
                    symbol("network-host"): host,
                    symbol("port"): int32(int(port)),
                    symbol("scheme"): "amqp",
                })
            props[symbol("failover-server-list")] = servers
        return props

    def _on_connection_remote_close(self, event: Event) -> None:
        self._release()
        pn = self.pn_conn
        if not (pn.state & Endpoint.LOCAL_CLOSED):
            pn.close()

    def _on_session_remote_open(self, event: Event) -> None:
        session = event.session
        if self.conn is None or not (session.state & Endpoint.LOCAL_UNINIT):
            return
        session.open()

    def _on_session_remote_close(self, event: Event) -> None:
        session = event.session
        # Ending a session detaches its links (AMQP 2.7.7); durable subscriptions stay.
        for link, state in list(self._links.items()):
            if link.session == session:
                self._end_link(link, remove=False)
        if not (session.state & Endpoint.LOCAL_CLOSED):
            session.close()

    def _on_link_remote_open(self, event: Event) -> None:
        link = event.link
        if self.conn is None or self.conn.closed or not (link.state & Endpoint.LOCAL_UNINIT):
            return
        try:
            if link.is_sender:
                self._attach_consumer(link)
            else:
                self._attach_producer(link)
        except _Refused as refused:
            self._refuse(link, refused.condition)
        except EngineError as exc:
            self._refuse(link, condition_for(exc))

    def _on_link_remote_detach(self, event: Event) -> None:
        link = event.link
        self._end_link(link, remove=False)
        if not (link.state & Endpoint.LOCAL_CLOSED):
            link.detach()

    def _on_link_remote_close(self, event: Event) -> None:
        link = event.link
        self._end_link(link, remove=True)
        if not (link.state & Endpoint.LOCAL_CLOSED):
            link.close()

    def _on_link_flow(self, event: Event) -> None:
        link = event.link
        state = self._links.get(link)
        if isinstance(state, _Outgoing) and not state.closed:
            self._credit_changed(state)

    def _on_delivery(self, event: Event) -> None:
        delivery = event.delivery
        state = self._links.get(delivery.link)
        if state is None:
            return
        if isinstance(state, _Outgoing):
            self._on_disposition(state, delivery)
        else:
            self._on_transfer(state, delivery)

    def _on_transport_tail_closed(self, event: Event) -> None:
        # No more input: the client went away, or proton stopped reading bytes it could not
        # decode (it does so without an error condition before the Open). Either way answer
        # with a close, so the output side ends and the socket is closed.
        pn = self.pn_conn
        if pn is not None and not (pn.state & Endpoint.REMOTE_CLOSED) and not (pn.state & Endpoint.LOCAL_CLOSED):
            condition = self.transport.condition or Condition(
                FRAMING_ERROR, "the connection ended without a close frame, or with bytes that are not AMQP frames")
            self._close_connection(condition)
        else:
            self._release()

    def _on_transport_closed(self, event: Event) -> None:
        self._release()
        self._finished = True

    def _on_transport_error(self, event: Event) -> None:
        condition = self.transport.condition
        log.info("AMQP transport error on %s: %s", self._name(), condition)

    _handlers = {
        Event.CONNECTION_REMOTE_OPEN: _on_connection_remote_open,
        Event.CONNECTION_REMOTE_CLOSE: _on_connection_remote_close,
        Event.SESSION_REMOTE_OPEN: _on_session_remote_open,
        Event.SESSION_REMOTE_CLOSE: _on_session_remote_close,
        Event.LINK_REMOTE_OPEN: _on_link_remote_open,
        Event.LINK_REMOTE_DETACH: _on_link_remote_detach,
        Event.LINK_REMOTE_CLOSE: _on_link_remote_close,
        Event.LINK_FLOW: _on_link_flow,
        Event.DELIVERY: _on_delivery,
        Event.TRANSPORT_ERROR: _on_transport_error,
        Event.TRANSPORT_TAIL_CLOSED: _on_transport_tail_closed,
        Event.TRANSPORT_CLOSED: _on_transport_closed,
    }

    # ------------------------------------------------------------ attach

    def _address(self, address: str) -> DestinationName:
        return parse_destination(address, self.options.default_address_kind)

    def _attach_producer(self, link: Link) -> None:
        target = link.remote_target
        if target.type == Terminus.COORDINATOR:
            raise _Refused(Condition(NOT_IMPLEMENTED, "transactions (a coordinator target) are not supported"))
        dest = None
        if target.dynamic:
            dest = self._create_dynamic(target)
        elif target.address is not None:
            dest = self._address(target.address)
            self._check_temporary_send(dest)
            self.conn.check_send(dest)
        link.target.copy(target)
        if target.dynamic:
            link.target.address = dest.canonical
        link.source.copy(link.remote_source)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = Link.RCV_FIRST
        link.max_message_size = self.options.max_message_size
        self._links[link] = _Incoming(link, dest)
        link.open()
        link.flow(self.options.producer_credit)

    def _attach_consumer(self, link: Link) -> None:
        conn = self.conn
        source = link.remote_source
        selector = None
        no_local = False
        accepted_filters = {}
        durable_name = None
        if source.dynamic:
            dest = self._create_dynamic(source)
        elif source.address is None:
            # No address: look the durable subscription up by link name (JMS unsubscribe).
            durable = self._durable(link.name)
            if durable is None:
                raise _Refused(Condition(
                    NOT_FOUND, f"no source address, and no durable subscription named {link.name!r}"
                    + ("" if conn.client_id else " (this connection has no container id of its own)")))
            dest = durable.pattern
            selector = durable.selector.text if durable.selector is not None else None
            no_local = durable.no_local
            durable_name = link.name
        else:
            dest = self._address(source.address)
            if self.broker.temporary.is_temporary(dest.canonical) or dest.canonical in self.broker.temporary.deleted:
                self.broker.temporary.check_consume(dest, conn, network=False)
            if dest.is_queue and source.distribution_mode == Terminus.DIST_MODE_COPY:
                raise _Refused(Condition(NOT_IMPLEMENTED, "browsing a queue (distribution-mode copy) is not supported"))
            selector, no_local, accepted_filters = self._filters(source)
            if dest.is_topic and source.durability in (Terminus.CONFIGURATION, Terminus.DELIVERIES):
                durable_name = link.name
                if conn.client_id is None:
                    raise _Refused(Condition(
                        INVALID_FIELD, "a durable subscription needs the connection's container id as its "
                        "client id, and another connection already uses this container id"))
        if durable_name is not None:
            existing = self._durable(durable_name)
            if existing is not None and existing.active is not None:
                raise _Refused(Condition(RESOURCE_LOCKED, f"durable subscription {durable_name!r} is already active"))
        priority = 0
        props = link.remote_properties
        if props and isinstance(props.get(PRIORITY), int):
            priority = int(props[PRIORITY])
        presettled = link.remote_snd_settle_mode == Link.SND_SETTLED
        out = _Outgoing(link, presettled)
        self._links[link] = out
        try:
            consumer = conn.subscribe(
                f"amqp-{next(self._consumer_numbers)}",
                dest,
                deliver=lambda consumer, ref: self._guarded(self._deliver, out, consumer, ref),
                ack_mode=AckMode.AUTO if presettled else AckMode.CLIENT_INDIVIDUAL,
                prefetch=max(1, link.credit),
                selector=selector,
                priority=priority,
                no_local=no_local,
                durable_name=durable_name,
            )
        except BaseException:
            del self._links[link]
            raise
        out.consumer = consumer
        # Echo what we do: the source (with the filters we apply), the settle modes.
        link.source.copy(source)
        if source.dynamic:
            link.source.address = dest.canonical  # the node's name: where replies are sent
        elif source.address is None:
            link.source.type = Terminus.SOURCE
            link.source.address = dest.canonical
            link.source.durability = Terminus.CONFIGURATION
            link.source.expiry_policy = Terminus.EXPIRE_NEVER
        link.source.filter.clear()
        if accepted_filters:
            link.source.filter.put_object(accepted_filters)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = Link.SND_SETTLED if presettled else Link.SND_UNSETTLED
        link.rcv_settle_mode = Link.RCV_FIRST
        link.open()
        self._sync_credit(out)

    def _create_dynamic(self, terminus: Terminus) -> DestinationName:
        """A dynamic node (AMQP 1.0, 3.5.3/3.5.4 ``dynamic``): a temporary destination of this
        connection (engine/temporary.py), a topic when the terminus asks for the
        ``temporary-topic`` capability (as Qpid JMS does) and a queue otherwise. It lives until the
        connection closes, like a temporary destination of the other protocols, whatever the
        terminus's expiry policy says."""
        wanted = _symbols(terminus.capabilities)
        kind = TOPIC if "temporary-topic" in wanted or "topic" in wanted else QUEUE
        return self.broker.temporary.create(self.conn, kind)

    def _check_temporary_send(self, dest: DestinationName) -> None:
        """A send to a temporary destination that no longer exists (its connection closed) is
        refused with ``amqp:not-found`` rather than creating an ordinary queue of that name."""
        temporary = self.broker.temporary
        if temporary.is_temporary(dest.canonical) or dest.canonical in temporary.deleted:
            temporary.check_send(dest)

    def _durable(self, name: str):
        client_id = self.conn.client_id
        if client_id is None:
            return None
        return self.broker.durable.get(f"durable://{client_id}:{name}")

    @staticmethod
    def _filters(source: Terminus) -> tuple[str | None, bool, dict]:
        """(selector, no_local, the filters to echo) from a source's filter set."""
        data = source.filter
        data.rewind()
        if data.next() is None:
            return None, False, {}
        try:
            filters = data.get_object()
        except Exception:
            raise _Refused(Condition(DECODE_ERROR, "undecodable source filter set")) from None
        if not isinstance(filters, dict):
            raise _Refused(Condition(INVALID_FIELD, "a source filter set must be a map"))
        selector = None
        no_local = False
        accepted = {}
        for key, value in filters.items():
            descriptor = getattr(value, "descriptor", None)
            if descriptor in SELECTOR_DESCRIPTORS or (descriptor is None and key == JMS_SELECTOR_KEY):
                text = getattr(value, "value", value)
                if not isinstance(text, str):
                    raise _Refused(Condition(INVALID_FIELD, "the jms-selector filter must be a string"))
                selector = str(text)
                accepted[key] = value
            elif descriptor in NO_LOCAL_DESCRIPTORS:
                no_local = True
                accepted[key] = value
            # Other filters are not applied and not echoed: the client sees they are absent
            # (AMQP 3.5.1, "filter": the receiving endpoint checks the sender's echo).
        return selector, no_local, accepted

    def _refuse(self, link: Link, condition: Condition) -> None:
        log.info("AMQP link %r refused on %s: %s %s", link.name, self._name(), condition.name, condition.description)
        # Our terminus stays unspecified, so the attach carries a null source/target: the
        # client knows the link was refused and the detach that follows says why (AMQP 2.6.3).
        link.condition = condition
        link.open()
        link.close()

    def _end_link(self, link: Link, remove: bool) -> None:
        state = self._links.pop(link, None)
        if state is None or state.closed:
            return
        state.closed = True
        conn = self.conn
        if isinstance(state, _Outgoing):
            consumer = state.consumer
            if consumer is not None and conn is not None and not conn.closed and not consumer.closed:
                try:
                    conn.unsubscribe(consumer.consumer_id, remove_durable=remove and consumer.durable_name is not None)
                except EngineError as exc:
                    log.info("closing AMQP link %r: %s", link.name, exc)
        else:
            # Transfers held back by flow control were never accepted: the client sees no
            # outcome for them, and they are not routed.
            state.backlog.clear()

    # ------------------------------------------------------------ consumers: credit and deliveries

    def _sync_credit(self, out: _Outgoing) -> None:
        """The consumer may take exactly as many messages as the link has credit."""
        consumer = out.consumer
        if consumer is None or consumer.closed:
            return
        credit = max(out.link.credit, 0)
        consumer.prefetch = len(consumer.in_flight) + credit
        consumer.writable = self._writable and credit > 0

    def _credit_changed(self, out: _Outgoing) -> None:
        self._sync_credit(out)
        consumer = out.consumer
        if consumer is not None and consumer.writable and consumer.source is not None:
            consumer.source.dispatch()
            if self.conn is not None:
                self.conn.pump_retained()  # retained messages a new subscription waits for
        link = out.link
        if link.drain_mode and link.credit > 0:
            link.drained()  # nothing more to send now: hand the rest of the credit back
            self._sync_credit(out)

    def _guarded(self, callback: Callable, *args) -> None:
        """Run a callback the engine makes (a delivery, room for a blocked producer) while it
        works for *another* connection: an error here must not escape into that connection.
        This connection is closed instead, once the engine is done (closing it now would
        detach consumers in the middle of a dispatch)."""
        try:
            callback(*args)
        except Exception as exc:
            log.exception("internal error in an AMQP engine callback on %s; closing the connection", self._name())
            for state in self._links.values():
                if isinstance(state, _Outgoing) and state.consumer is not None:
                    state.consumer.writable = False  # no more deliveries to this connection
            if self._fatal is None:
                self._fatal = Condition(INTERNAL_ERROR, f"internal error: {exc}")
            self.io.wake()

    def _deliver(self, out: _Outgoing, consumer: Consumer, ref: MessageRef) -> None:
        if out.consumer is None:
            out.consumer = consumer  # a delivery from inside `subscribe`, before it returned
        link = out.link
        extra = None
        if ref.first_for_consumer:
            # Artemis group-first-key: the first message of a group on this consumer says so.
            settings = getattr(consumer.source, "group_settings", None)
            if settings is not None and settings.first_key:
                extra = {settings.first_key: True}
        payload = encode_delivery(ref, self.broker.now_ms(), extra)
        tag = str(next(out.tags))
        delivery = link.delivery(tag)
        link.stream(payload)
        link.advance()
        if out.presettled:
            delivery.settle()
        else:
            out.unsettled[tag] = ref.message.message_id
        self._sync_credit(out)
        self.io.wake()

    def _on_disposition(self, out: _Outgoing, delivery: Delivery) -> None:
        state = delivery.remote_state
        settled = delivery.settled
        if not settled and state not in (Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED):
            return  # not an outcome (e.g. RECEIVED): wait for one
        message_id = out.unsettled.pop(delivery.tag, None)
        if message_id is not None and out.consumer is not None and not out.consumer.closed:
            self._apply_outcome(out.consumer, message_id, delivery)
        delivery.settle()

    def _apply_outcome(self, consumer: Consumer, message_id: str, delivery: Delivery) -> None:
        conn = self.conn
        state = delivery.remote_state
        try:
            if state == Delivery.REJECTED:
                self._reject_message(consumer, message_id, delivery.remote.condition)
            elif state == Delivery.RELEASED:
                self._release_message(consumer, message_id)
            elif state == Delivery.MODIFIED:
                if delivery.remote.failed:
                    conn.nack(consumer, message_id)
                else:
                    self._release_message(consumer, message_id)
            else:  # accepted, or settled without an outcome
                conn.ack(consumer, message_id)
        except UnknownMessage as exc:
            log.debug("outcome for a message no longer in flight: %s", exc)

    def _reject_message(self, consumer: Consumer, message_id: str, condition: Condition | None) -> None:
        """Rejected (AMQP 3.4.3): the message is unprocessable; it goes to the dead-letter
        queue now rather than being redelivered. Non-durable topic subscriptions have no DLQ
        (like the engine's own poison handling there), and a non-persistent message is dead-
        lettered only when the policy processes non-persistent messages."""
        ref = consumer.in_flight.get(message_id)
        source = consumer.source
        if ref is not None and isinstance(source, Queue):
            message = ref.message
            if message.persistent or source.policy.process_non_persistent:
                cause = "rejected by the AMQP client"
                if condition is not None and (condition.description or condition.name):
                    cause += f": {condition.description or condition.name}"
                self.broker.dead_letter(source, ref, cause)
        self.conn.ack(consumer, message_id)  # gone from this queue either way

    def _release_message(self, consumer: Consumer, message_id: str) -> None:
        """Released (AMQP 3.4.4): back to the queue, and the attempt does not count."""
        ref = consumer.in_flight.get(message_id)
        if ref is not None:
            ref.delivery_count -= 1  # the engine's nack counts a delivery; a release must not
        self.conn.nack(consumer, message_id)

    # ------------------------------------------------------------ producers

    def _on_transfer(self, inc: _Incoming, delivery: Delivery) -> None:
        link = inc.link
        if delivery.aborted:  # the client gave up on a multi-transfer message (AMQP 2.6.14)
            if delivery.readable:
                link.advance()
            delivery.settle()
            return
        if not delivery.readable:
            return  # an update to a delivery already taken (e.g. the client settled it)
        if delivery.pending > self.options.max_message_size:
            # The link announced max-message-size in its attach; a larger message is a link
            # error (AMQP 2.7.3, amqp:link:message-size-exceeded).
            self._close_link(inc, Condition(
                MESSAGE_SIZE_EXCEEDED, f"message larger than {self.options.max_message_size} bytes (max_message_size)"))
            return
        if delivery.partial:
            return  # wait for the rest of the message
        payload = link.recv(delivery.pending) or b""
        link.advance()
        if inc.blocked:
            inc.backlog.append((delivery, payload))
            return
        self._route(inc, delivery, payload)
        self._top_up(inc)

    def _route(self, inc: _Incoming, delivery: Delivery, payload: bytes) -> None:
        conn = self.conn
        try:
            decoded = decode_message(payload)
            dest = inc.dest
            if dest is None:
                to = decoded.to
                if not to:
                    raise _Refused(Condition(INVALID_FIELD, "a message on an anonymous relay link needs a 'to' address"))
                dest = self._address(to)
                self._check_temporary_send(dest)
            if inc.fail_when_full is not None and self.broker.usage_for(dest).full:
                raise _Refused(Condition(RESOURCE_LIMIT, inc.fail_when_full))
            message = message_from_amqp(decoded, message_id=conn.new_message_id(), destination=dest.canonical,
                                        now_ms=self._batch_ms or self.broker.now_ms())
            can_continue = conn.send(dest, message)
        except ConversionError as exc:
            self._settle(delivery, Delivery.REJECTED, Condition(DECODE_ERROR, str(exc)))
            return
        except _Refused as exc:
            self._settle(delivery, Delivery.REJECTED, exc.condition)
            return
        except EngineError as exc:
            self._settle(delivery, Delivery.REJECTED, condition_for(exc))
            return
        self._settle(delivery, Delivery.ACCEPTED)
        if not can_continue:
            self._block(inc, dest)

    @staticmethod
    def _settle(delivery: Delivery, outcome, condition: Condition | None = None) -> None:
        if not delivery.settled:
            if condition is not None:
                delivery.local.condition = condition
            delivery.update(outcome)
        elif condition is not None:
            # A pre-settled transfer gets no outcome: the client chose at-most-once.
            log.info("dropped a pre-settled message: %s %s", condition.name, condition.description)
        delivery.settle()

    def _top_up(self, inc: _Incoming) -> None:
        link = inc.link
        window = self.options.producer_credit
        if not inc.blocked and not inc.closed and link.credit < max(1, window // 3):
            link.flow(window - link.credit)

    def _block(self, inc: _Incoming, dest: DestinationName) -> None:
        """Producer flow control: take the credit back until the destination has room."""
        inc.blocked = True
        inc.blocked_dest = dest
        inc.blocked_since = self.clock()
        link = inc.link
        if link.credit > 0:
            link.flow(-link.credit)  # a flow with credit 0 (AMQP 2.6.7: the receiver may reduce credit)
        self.conn.wait_for_space(dest, lambda: self._guarded(self._unblock, inc))

    def _unblock(self, inc: _Incoming) -> None:
        inc.fail_when_full = None
        if self.closed or inc.closed or not inc.blocked:
            return
        inc.blocked = False
        inc.blocked_dest = None
        while inc.backlog and not inc.blocked:
            delivery, payload = inc.backlog.popleft()
            self._route(inc, delivery, payload)
        self._top_up(inc)
        self.io.wake()

    def _close_link(self, state: _Outgoing | _Incoming, condition: Condition) -> None:
        link = state.link
        self._end_link(link, remove=False)
        if not (link.state & Endpoint.LOCAL_CLOSED):
            link.condition = condition
            link.close()
        self.io.wake()

    # ------------------------------------------------------------ writability, timers, closing

    def set_writable(self, writable: bool) -> None:
        """Transport back-pressure: no dispatch while the socket's buffer is full."""
        self._writable = writable
        for state in list(self._links.values()):
            if isinstance(state, _Outgoing) and not state.closed:
                if writable:
                    self._credit_changed(state)
                else:
                    self._sync_credit(state)

    def tick(self, now: float) -> float:
        """Timers: proton's (empty frames to keep the client's idle time-out at bay, our own
        idle time-out), the open time-out, producers blocked too long. Returns when proton
        next needs a tick (monotonic seconds, 0 for no deadline)."""
        if self.closed or self._finished:
            return 0.0
        if not self.opened:
            timeout = self.options.open_timeout_ms
            if timeout and (now - self.opened_at) * 1000 > timeout:
                log.info("closing an AMQP connection that did not open within %d ms (open_timeout_ms)", timeout)
                if self.transport is None:
                    self._finished = True
                else:
                    self._close_connection(Condition(RESOURCE_LIMIT, f"no Open within {timeout} ms"))
                self.io.wake()
                return 0.0
        if self.transport is not None:
            self.deadline = self.transport.tick(now)
            self.process()
        for state in list(self._links.values()):
            if isinstance(state, _Incoming) and state.blocked:
                self._check_send_timeout(state, now)
        return self.deadline

    def _check_send_timeout(self, inc: _Incoming, now: float) -> None:
        """send_fail_if_no_space_after_timeout: a producer kept waiting longer than the policy
        allows gets errors instead: what it sent meanwhile is rejected, its credit comes back,
        and until the destination has room every send is rejected with
        amqp:resource-limit-exceeded (the link stays open; `_unblock` ends this)."""
        dest = inc.blocked_dest
        timeout = self.broker.policies.policy_for(dest).send_fail_if_no_space_after_timeout
        if timeout and (now - inc.blocked_since) * 1000 >= timeout:
            inc.fail_when_full = self._full_message(dest, timeout)
            for delivery, _ in inc.backlog:
                self._settle(delivery, Delivery.REJECTED, Condition(RESOURCE_LIMIT, inc.fail_when_full))
            inc.backlog.clear()
            inc.blocked = False
            self._top_up(inc)
            self.io.wake()

    @staticmethod
    def _full_message(dest: DestinationName, timeout: int) -> str:
        return f"{dest.canonical} stayed full for {timeout} ms (send_fail_if_no_space_after_timeout)"

    def _close_connection(self, condition: Condition) -> None:
        pn = self.pn_conn
        self._release()
        if pn is None:
            self._finished = True
            return
        if not self.opened:
            # proton holds every frame back until the peer's Open has arrived, so a close
            # would never be written: end the output side instead.
            log.info("closing AMQP connection before its Open: %s %s", condition.name, condition.description)
            self._end_output = True
            self.io.wake()
            return
        if not (pn.state & Endpoint.LOCAL_CLOSED):
            pn.condition = condition
            if pn.state & Endpoint.LOCAL_UNINIT:
                pn.open()
            pn.close()
        self.io.wake()

    def _abort(self) -> None:
        self._release()
        self._finished = True
        self.io.wake()

    def _release(self) -> None:
        for state in self._links.values():
            state.closed = True
        self._links.clear()
        if self.conn is not None:
            self.conn.close()

    def connection_lost(self) -> None:
        self.closed = True
        self._release()
        if self.transport is not None:
            try:
                self.transport.unbind()
            except Exception:  # noqa: BLE001 - best effort: the socket is gone anyway
                pass
        if self.collector is not None:
            self.collector.release()

    def _name(self) -> str:
        return self.conn.connection_id if self.conn is not None else "a new AMQP connection"
