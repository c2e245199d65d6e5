"""MQTT 3.1.1 / 5.0 session adapter: decoded MQTT packets become engine calls, engine deliveries
become PUBLISH packets. No sockets: bytes come in through `data_received`, bytes go out through
the `SessionTransport` the listener provides (which batches them, after `Broker.flush`).

Section numbers are those of the OASIS standards MQTT 3.1.1 ("3.1.1 3.x") and MQTT 5.0
("5.0 3.x"); where both number a rule alike only one number is given. Topic and property
mapping onto the engine is in `mapping.py`.

Sessions (3.1.1 3.1.2.4, 5.0 4.1). The MQTT Session outlives its network connection; the
`MqttSessionRegistry` (one per broker, in memory) keeps it by client identifier:

* 3.1.1: CleanSession=1 sessions end with the connection; CleanSession=0 sessions never expire
  (bounded by `max_session_expiry` when configured). 5.0: Clean Start=1 discards any previous
  session, and the Session Expiry Interval (0 when absent) says how long the session outlives
  the connection (0xFFFFFFFF: never); a DISCONNECT may change it, but not from 0 (3.14.2.2.2).
* A persistent session's QoS 1/2 subscriptions are engine *durable* subscriptions named
  `mqtt:<topic filter>` on the client identifier (like ActiveMQ, which names them
  `<QoS>:<filter>`), so the engine queues - and for QoS 1/2 messages stores - what arrives while
  the client is away. QoS 0 subscriptions and shared subscriptions stay non-durable (nothing
  needs queueing for QoS 0; the engine has no durable shared subscriptions) and are re-created
  when the session resumes. QoS 0 messages queued on a durable subscription while the client
  was away are dropped at resume: only QoS 1/2 messages belong to the session state (3.1.2.4).
* Session state also holds: the inbound QoS 2 packet ids awaiting PUBREL (exactly-once across
  reconnects), the outbound QoS 2 packet ids awaiting PUBCOMP (PUBREL is resent on resume), and
  the packet ids of QoS 1/2 PUBLISHes unacknowledged at disconnect: the engine puts those
  messages back on the durable subscription with a higher delivery count when the connection
  closes, and at resume they come back first, under their original packet id with DUP=1 (4.4).
* The registry lives in broker memory only: after a broker restart the engine still has the
  durable subscriptions (and their stored messages) but not the MQTT session, so a client
  reconnecting gets session_present=0 and the orphaned `mqtt:` durable subscriptions of its
  client id are removed.
* A second connection with a client id that is connected takes the session over (3.1.4, 5.0
  3.1.4): the old connection is closed, with DISCONNECT 0x8E in 5.0.

QoS and acknowledgement (4.3). Each subscription is one engine consumer whose consumer id is
the topic filter. QoS 0 subscriptions consume with AckMode.AUTO; QoS 1/2 ones with
CLIENT_INDIVIDUAL and a prefetch equal to the in-flight window (5.0: the client's Receive
Maximum; 3.1.1: `max_inflight_messages`). A delivery goes out with min(publish QoS, subscription
QoS); QoS 0 deliveries are acknowledged to the engine when written. PUBACK acknowledges a QoS 1
delivery; PUBREC a QoS 2 one (the message is then the client's: only PUBREL/PUBCOMP remain,
4.3.3), and the packet id stays in flight until PUBCOMP. The window counts every QoS 1/2 packet
id in flight across all subscriptions; deliveries beyond it wait in the session, in order. (A
QoS 0 message on a QoS 1/2 subscription waits behind that subscription's unacknowledged
messages in the engine: one subscription keeps one order, 4.6.) DUP is set on a redelivery the
client may have seen before: a packet id kept from the previous connection, or an engine
redelivery (delivery count > 0, e.g. from a shared subscription) that this session did not
hold back unsent.
Inbound QoS 1 is acknowledged once the engine accepted the message (the listener flushes the
store before writing, so a PUBACK for a persistent message follows the journal write); inbound
QoS 2 is routed on receipt and its packet id kept until PUBREL, so a resend of the same id
(DUP or not) before PUBREL is answered with PUBREC but not published again (4.3.3, method B).

Will messages (3.1.2.5): published when the network connection closes other than by a client
DISCONNECT (5.0: other than DISCONNECT with reason 0x00), after the 5.0 Will Delay Interval or
when the session ends, whichever comes first; a resumption of the session before then cancels it.
The will topic is authorized when the client connects; the will is then routed by the broker
itself (the connection is gone by the time it is published).

Shared subscriptions (`$share/group/filter`, 5.0 4.8.2) are accepted from 3.1.1 clients too,
as Mosquitto and HiveMQ do. A 3.1.1 PUBLISH above `maximum_qos` is accepted (3.1.1 cannot be
told the maximum); 5.0 clients are told and held to it.

Not supported: enhanced authentication (a CONNECT with an Authentication Method is refused with
0x8C), server-to-client topic aliases (allowed: the broker may always send full topic names),
PUBACK reason 0x10 "no matching subscribers" (the engine does not report it).
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol

from ...config import MqttConfig
from ...engine.broker import Broker, Connection
from ...engine.consumer import AckMode, Consumer
from ...engine.errors import (
    AuthenticationFailed,
    ClientIdInUse,
    EngineError,
    InvalidDestination,
    NotAuthorized,
    ResourceLimitError,
)
from ...engine.message import Message, MessageRef
from ...engine.names import TOPIC, DestinationName, parse_destination
from .codec import (
    CONNACK_REASON_CODES,
    DISCONNECT_REASON_CODES,
    MQTT_5,
    MQTT_311,
    Auth,
    Connack,
    ConnackReturn311,
    Connect,
    Disconnect,
    MqttParser,
    MqttProtocolError,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    encode,
    parse_shared,
)
from .mapping import (
    filter_destination,
    filter_starts_with_wildcard,
    message_from_mqtt,
    message_qos,
    mqtt_topic_of,
    outbound_fields,
    published_with_retain,
    remaining_expiry,
    topic_destination,
)

log = logging.getLogger("reference_broker.mqtt")

NEVER_EXPIRES = 0xFFFFFFFF  # Session Expiry Interval meaning "never" (5.0 3.1.2.11.2)
DURABLE_PREFIX = "mqtt:"  # engine durable subscription names of MQTT sessions
KEEP_ALIVE_GRACE = 1.5  # 3.1.2.10: one and a half times the keep alive


class SessionTransport(Protocol):
    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class MqttError(Exception):
    """Ends the connection: in 5.0 with a DISCONNECT carrying `reason` and the message as its
    reason string (4.13), in 3.1.1 by closing the network connection (4.8)."""

    def __init__(self, message: str, reason: ReasonCode = ReasonCode.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class ConnectRefused(Exception):
    """CONNECT refused with a CONNACK: `reason` in 5.0, `return_311` in 3.1.1 (None: 3.1.1 has
    no code for it and just closes)."""

    def __init__(self, message: str, reason: ReasonCode, return_311: ConnackReturn311 | None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.return_311 = return_311


def durable_key(client_id: str, name: str) -> str:
    """The engine's key for a durable subscription (engine/broker.py Connection.subscribe)."""
    return f"durable://{client_id}:{name}"


# --------------------------------------------------------------------------- session state


@dataclass(slots=True)
class SubscriptionState:
    topic_filter: str  # as the client wrote it, `$share/group/` included; the engine consumer id
    qos: int  # granted
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    share_group: str | None = None
    destination: DestinationName | None = None
    durable: bool = False
    subscription_identifier: int | None = None
    dollar_guard: bool = False  # filter starts with a wildcard: `$` topics are not for it (4.7.2)

    @property
    def durable_name(self) -> str:
        return DURABLE_PREFIX + self.topic_filter

    @property
    def engine_key(self) -> tuple:
        """What the engine subscription depends on; a re-SUBSCRIBE that changes none of it keeps
        the engine subscription (and the flow of messages, 3.8.4) and only updates options."""
        return (self.destination, self.durable, self.no_local, self.share_group, self.qos > 0)


@dataclass(slots=True)
class OutboundFlight:
    consumer_id: str
    message_id: str
    qos: int
    released: bool = False  # QoS 2: PUBREC received, PUBREL sent, PUBCOMP awaited


class Resend(NamedTuple):
    """An unacknowledged delivery to send again when the session resumes: [MQTT-4.4.0-1] resends
    the PUBLISH packet itself, so under its packet id and at the QoS it went out with, whatever a
    re-SUBSCRIBE has since changed of the subscription's QoS."""

    packet_id: int
    qos: int


@dataclass(slots=True)
class PendingWill:
    will: Will
    connection_id: str
    deadline: float  # registry clock


@dataclass(eq=False)
class SessionState:
    """The MQTT Session (3.1.1 3.1.2.4, 5.0 4.1): what outlives a network connection."""

    client_id: str
    expiry_interval: int = 0  # seconds; NEVER_EXPIRES = never
    subscriptions: dict[str, SubscriptionState] = field(default_factory=dict)
    inbound_qos2: set[int] = field(default_factory=set)  # PUBREC sent, PUBREL awaited
    outbound: dict[int, OutboundFlight] = field(default_factory=dict)  # packet id -> flight
    # Unacknowledged at the last disconnect: (consumer id, message id) -> how to send it again.
    resends: dict[tuple[str, str], Resend] = field(default_factory=dict)
    # Delivered by the engine but never written (held back by the window) at the last
    # disconnect: their redelivery is not a duplicate for the client (no DUP).
    held_back: set[tuple[str, str]] = field(default_factory=set)
    next_packet_id: int = 1
    live: "MqttSession | None" = None
    expires_at: float | None = None  # when disconnected and expiring
    will: PendingWill | None = None  # a delayed will waiting to be published

    def allocate_packet_id(self) -> int:
        reserved = {resend.packet_id for resend in self.resends.values()} if self.resends else ()
        for _ in range(65535):
            pid = self.next_packet_id
            self.next_packet_id = pid % 65535 + 1
            if pid not in self.outbound and pid not in reserved:
                return pid
        raise MqttError("no free packet identifier: 65535 messages in flight", ReasonCode.QUOTA_EXCEEDED)


class MqttSessionRegistry:
    """Every MQTT session of one broker, by client identifier, with their expiry and delayed
    wills (driven by `tick`, which the server calls periodically)."""

    def __init__(self, broker: Broker, options: MqttConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.broker = broker
        self.options = options or MqttConfig()
        self.clock = clock
        self.sessions: dict[str, SessionState] = {}
        self.closed = False
        self._will_numbers = itertools.count(1)

    def get(self, client_id: str) -> SessionState | None:
        return self.sessions.get(client_id)

    def create(self, client_id: str) -> SessionState:
        # A session unknown here but with `mqtt:` durable subscriptions in the engine is left
        # over from before a broker restart (the registry is in memory): it cannot be resumed
        # (its QoS and options are gone), so its subscriptions are removed, not leaked.
        for key, durable in list(self.broker.durable.items()):
            if durable.client_id == client_id and durable.name.startswith(DURABLE_PREFIX) and durable.active is None:
                self._remove_durable(key)
        state = SessionState(client_id)
        self.sessions[client_id] = state
        return state

    def resume(self, state: SessionState) -> None:
        state.expires_at = None
        if state.will is not None:
            # 5.0 3.1.2.5: a new connection to the session before the Will Delay Interval
            # passed cancels the will.
            log.info("MQTT session %r resumed: delayed will cancelled", state.client_id)
            state.will = None

    def disconnected(self, state: SessionState, will: Will | None, connection_id: str,
                     version: int) -> None:
        """The session's network connection is gone (for whatever reason)."""
        if self.closed:
            return  # broker shutting down: no wills, nothing to expire
        now = self.clock()
        pending = PendingWill(will, connection_id, now) if will is not None else None
        if state.expiry_interval == 0:
            state.will = pending
            self.end(state)  # the session ends with the connection; so does the will's delay
            return
        state.expires_at = None if state.expiry_interval == NEVER_EXPIRES else now + state.expiry_interval
        if pending is not None:
            delay = (will.properties.will_delay_interval or 0) if version == MQTT_5 else 0
            if delay:
                pending.deadline = now + delay
                state.will = pending
            else:
                self.publish_will(pending)

    def end(self, state: SessionState) -> None:
        """The session ends (expired, replaced by a clean start, or ended with its connection):
        its durable subscriptions go, and a will still waiting is published now (5.0 3.1.2.5)."""
        if self.sessions.get(state.client_id) is state:
            del self.sessions[state.client_id]
        for sub in state.subscriptions.values():
            if sub.durable:
                self._remove_durable(durable_key(state.client_id, sub.durable_name))
        state.subscriptions.clear()
        pending, state.will = state.will, None
        if pending is not None and not self.closed:
            self.publish_will(pending)

    def _remove_durable(self, key: str) -> None:
        try:
            self.broker.remove_durable(key)
        except EngineError as exc:
            log.debug("durable subscription %s not removed: %s", key, exc)

    def publish_will(self, pending: PendingWill) -> None:
        will = pending.will
        props = will.properties
        dest = topic_destination(will.topic)
        message = message_from_mqtt(
            message_id=f"ID:{pending.connection_id}-will-{next(self._will_numbers)}",
            destination=dest,
            payload=will.payload,
            qos=will.qos,
            retain=will.retain and self.options.retain_available,
            now_ms=self.broker.now_ms(),
            expiry_interval=props.message_expiry_interval,
            content_type=props.content_type,
            response_topic=props.response_topic,
            correlation_data=props.correlation_data,
            user_properties=props.user_properties,
            payload_format=props.payload_format_indicator,
        )
        message.producer_id = pending.connection_id
        log.info("publishing the will of %s to %s", pending.connection_id, dest.canonical)
        # Authorized when the client connected; routed by the broker as the connection is gone.
        self.broker.route(dest, message)

    def tick(self, now: float | None = None) -> None:
        if self.closed:
            return
        now = self.clock() if now is None else now
        for state in list(self.sessions.values()):
            if state.live is not None:
                continue
            if state.will is not None and now >= state.will.deadline:
                pending, state.will = state.will, None
                self.publish_will(pending)
            if state.expires_at is not None and now >= state.expires_at:
                log.info("MQTT session %r expired", state.client_id)
                self.end(state)

    def close(self) -> None:
        """Broker shutdown: connections closing from now on publish no wills."""
        self.closed = True


# --------------------------------------------------------------------------- the session


class MqttSession:
    def __init__(
        self,
        broker: Broker,
        transport: SessionTransport,
        registry: MqttSessionRegistry,
        options: MqttConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.transport = transport
        self.registry = registry
        self.options = options or registry.options
        self.clock = clock
        self.parser = MqttParser(max_packet_size=self.options.max_packet_size)
        self.version: int | None = None
        self.connection: Connection | None = None
        self.state: SessionState | None = None
        self.client_id: str | None = None
        self.closing = False
        self._released = False
        self.will: Will | None = None
        self.keep_alive = 0
        self.window = self.options.max_inflight_messages  # outbound QoS 1/2 packet ids in flight
        self.client_max_packet: int | None = None
        self.problem_information = True  # 5.0 3.1.2.11.7
        self.topic_aliases: dict[int, str] = {}
        self.opened_at = clock()
        self.last_received = self.opened_at
        self._held: deque[tuple[Consumer, MessageRef]] = deque()  # waiting for the window
        self._offline_qos0: dict[str, set[str]] = {}  # consumer id -> ids queued while away
        self._deferred: list[bytes] | None = None
        self._paused = False
        self._backlog: list = []

    @property
    def v5(self) -> bool:
        return self.version == MQTT_5

    # ------------------------------------------------------------ bytes in

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_received = self.clock()
        try:
            packets = self.parser.feed(data)
        except MqttProtocolError as exc:
            # Packets that parsed cleanly before the bad bytes still count (as in STOMP).
            if exc.packets and not self._paused:
                self._process(exc.packets)
            if not self.closing:
                self._protocol_error(exc)
            return
        if self._paused:
            self._backlog.extend(packets)
            return
        self._process(packets)

    def _process(self, packets: list) -> None:
        for index, packet in enumerate(packets):
            if self.closing:
                return
            try:
                blocked = self._handle(packet)
            except MqttError as exc:
                self._fail(exc.message, exc.reason)
                return
            except ConnectRefused as exc:
                self._refuse(exc)
                return
            except EngineError as exc:
                self._fail(str(exc), ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR)
                return
            if blocked:
                self._backlog.extend(packets[index + 1 :])
                return

    def _handle(self, packet) -> bool:
        """Handle one packet; True when the producer must now pause (flow control)."""
        if self.connection is None:
            if isinstance(packet, Connect):
                self._on_connect(packet)
                return False
            # The parser refuses anything else before CONNECT; this is a second line.
            raise MqttError(f"expected CONNECT as the first packet, got {type(packet).__name__.upper()}")
        handler = self._handlers.get(type(packet))
        if handler is None:
            raise MqttError(f"{type(packet).__name__.upper()} is a server packet; a client may not send it")
        return bool(handler(self, packet))

    def _protocol_error(self, exc: MqttProtocolError) -> None:
        """Bad bytes: before CONNECT was accepted, answer with a CONNACK where the version has a
        code for it; afterwards 5.0 gets a DISCONNECT with the reason (4.13), 3.1.1 a close."""
        if self.connection is None:
            level = exc.protocol_level
            if exc.reason == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION:
                # 3.1.1 3.1.2.2: return code 1 then close; 5.0 3.1.2.2: reason 0x84 then close.
                # Answered in the client's own format: 0x84 only to a level-5 CONNECT.
                self.version = MQTT_5 if level == MQTT_5 else MQTT_311
                self._refuse(ConnectRefused(exc.message, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
                                            ConnackReturn311.UNACCEPTABLE_PROTOCOL_VERSION))
                return
            if level == MQTT_5:
                self.version = MQTT_5
                self._refuse(ConnectRefused(exc.message, exc.reason, None))
                return
            log.info("MQTT: closing a connection that sent bad bytes before CONNECT: %s", exc.message)
            self._shutdown(send_will=False)
            return
        self._fail(exc.message, exc.reason)

    # ------------------------------------------------------------ connect

    def _on_connect(self, p: Connect) -> None:
        self.version = p.protocol_level
        o = self.options
        v5 = self.v5
        props = p.properties
        if v5 and props.authentication_method is not None:
            # 5.0 4.12: enhanced authentication is optional; refusing is what the spec offers.
            raise ConnectRefused(f"authentication method {props.authentication_method!r} is not supported",
                                 ReasonCode.BAD_AUTHENTICATION_METHOD, None)
        client_id = p.client_id
        assigned = None
        if not client_id:
            if not v5 and not p.clean_start:
                # 3.1.1 3.1.3.1: a zero-length client id needs CleanSession=1.
                raise ConnectRefused("an empty client identifier needs CleanSession=1",
                                     ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, ConnackReturn311.IDENTIFIER_REJECTED)
            # 3.1.3.1 / 5.0 3.1.3.1: the server assigns a unique one (and tells a 5.0 client).
            client_id = f"auto-{uuid.uuid4().hex}"
            assigned = client_id if v5 else None
        keep_alive = p.keep_alive
        server_keep_alive = None
        if v5 and o.server_keep_alive is not None:
            keep_alive = server_keep_alive = o.server_keep_alive  # 5.0 3.2.2.3.14
        elif o.max_keep_alive < 65535 and (keep_alive == 0 or keep_alive > o.max_keep_alive):
            if not v5:
                # 3.1.1 cannot tell the client to use less: refused as Mosquitto's
                # max_keepalive does.
                raise ConnectRefused(f"keep alive {keep_alive} s exceeds the maximum of {o.max_keep_alive} s",
                                     ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, ConnackReturn311.IDENTIFIER_REJECTED)
            keep_alive = server_keep_alive = o.max_keep_alive
        will = p.will
        if will is not None and v5:
            if will.qos > o.maximum_qos:
                raise ConnectRefused(f"will QoS {will.qos} exceeds the maximum QoS {o.maximum_qos}",
                                     ReasonCode.QOS_NOT_SUPPORTED, None)  # 5.0 3.2.2.3.4
            if will.retain and not o.retain_available:
                raise ConnectRefused("retained wills are not supported (retain_available = false)",
                                     ReasonCode.RETAIN_NOT_SUPPORTED, None)  # 5.0 3.2.2.3.5
        password = p.password.decode("utf-8", "replace") if p.password is not None else None
        try:
            # Before any takeover: a client with wrong credentials must not kick out the owner.
            self.broker.authenticate(p.username, password)
        except AuthenticationFailed as exc:
            if p.username is None:
                raise ConnectRefused(str(exc), ReasonCode.NOT_AUTHORIZED, ConnackReturn311.NOT_AUTHORIZED) from None
            raise ConnectRefused(str(exc), ReasonCode.BAD_USER_NAME_OR_PASSWORD,
                                 ConnackReturn311.BAD_USER_NAME_OR_PASSWORD) from None
        if will is not None and self.broker.authorization_enabled:
            # The will topic must be writable (checked now, published later by the broker); on
            # a probe connection, so a refused CONNECT never takes a session over.
            probe = self.broker.connect(login=p.username, passcode=password)
            try:
                probe.check_send(topic_destination(will.topic))
            except NotAuthorized as exc:
                raise ConnectRefused(f"will topic: {exc}", ReasonCode.NOT_AUTHORIZED,
                                     ConnackReturn311.NOT_AUTHORIZED) from None
            finally:
                probe.close()
        if will is not None and will.retain and not o.retain_available:
            will.retain = False  # 3.1.1 has no way to refuse it (5.0 was refused above)
        if v5:
            expiry = props.session_expiry_interval or 0
        else:
            expiry = 0 if p.clean_start else NEVER_EXPIRES
        announced_expiry = None
        if o.max_session_expiry is not None and expiry > o.max_session_expiry:
            expiry = o.max_session_expiry
            announced_expiry = expiry if v5 else None  # 5.0 3.2.2.3.2

        registry = self.registry
        existing = registry.get(client_id)
        if existing is not None and existing.live is not None:
            existing.live.take_over()
            existing = registry.get(client_id)  # a session that ended with its connection is gone
        try:
            conn = self.broker.connect(login=p.username, passcode=password, client_id=client_id)
        except ClientIdInUse as exc:  # held by a client of another protocol
            raise ConnectRefused(str(exc), ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                                 ConnackReturn311.IDENTIFIER_REJECTED) from None
        if p.clean_start or existing is None:
            if existing is not None:
                registry.end(existing)
            state = registry.create(client_id)
            session_present = False
        else:
            state = existing
            registry.resume(state)
            session_present = True
        state.expiry_interval = expiry
        state.live = self
        self.state = state
        self.connection = conn
        self.client_id = client_id
        self.will = will
        self.keep_alive = keep_alive
        if v5:
            self.window = props.receive_maximum or 65535
            self.client_max_packet = props.maximum_packet_size
            self.problem_information = props.request_problem_information != 0
        connack_props = Properties()
        if v5:
            if o.receive_maximum != 65535:
                connack_props.receive_maximum = o.receive_maximum
            if o.maximum_qos < 2:
                connack_props.maximum_qos = o.maximum_qos
            if not o.retain_available:
                connack_props.retain_available = 0
            connack_props.maximum_packet_size = o.max_packet_size
            connack_props.assigned_client_identifier = assigned
            if o.topic_alias_maximum:
                connack_props.topic_alias_maximum = o.topic_alias_maximum
            connack_props.server_keep_alive = server_keep_alive
            connack_props.session_expiry_interval = announced_expiry
        self._write_packet(Connack(session_present, 0, connack_props))
        log.debug("MQTT %s connected as %r (level %d, session present %s)", conn.connection_id,
                  client_id, self.version, session_present)
        if session_present:
            self._resume()

    def _resume(self) -> None:
        """Continue a session (4.4): PUBRELs for QoS 2 flows past PUBREC, then the
        subscriptions, whose engine-side redeliveries come first and carry DUP=1."""
        state = self.state
        for pid, flight in list(state.outbound.items()):
            if flight.released:
                self._write_packet(Pubrel(pid))
        for sub in list(state.subscriptions.values()):
            try:
                self._attach(sub, receive_retained=False, resuming=True)
            except EngineError as exc:  # e.g. permissions changed since: drop that subscription
                log.info("MQTT %r: subscription %r not resumed: %s", state.client_id, sub.topic_filter, exc)
                del state.subscriptions[sub.topic_filter]
        # Ids kept for messages that did not come back (shared or QoS 0 subscriptions, or
        # expired meanwhile) are no longer needed.
        durable_ids = {s.topic_filter for s in state.subscriptions.values() if s.durable}
        for key in [k for k in state.resends if k[0] not in durable_ids]:
            del state.resends[key]

    def _refuse(self, exc: ConnectRefused) -> None:
        """CONNACK with a failure code, then close (3.2.2.3; 5.0 3.2.2.2, 4.13)."""
        log.info("MQTT CONNECT refused: %s", exc.message)
        if self.version == MQTT_5:
            reason = exc.reason if exc.reason in CONNACK_REASON_CODES else ReasonCode.UNSPECIFIED_ERROR
            self._write_packet(Connack(False, reason, Properties(reason_string=exc.message[:200])))
        elif exc.return_311 is not None:
            self._write(encode(Connack(False, exc.return_311), MQTT_311))
        self._shutdown(send_will=False)

    def take_over(self) -> None:
        """Another connection claims this client id (3.1.4; 5.0 DISCONNECT 0x8E)."""
        if self.closing:
            return
        log.info("MQTT %r: session taken over by a new connection", self.client_id)
        if self.v5:
            self._write_packet(Disconnect(ReasonCode.SESSION_TAKEN_OVER))
        self._shutdown(send_will=True)

    # ------------------------------------------------------------ publish in

    def _on_publish(self, p: Publish) -> bool:
        o = self.options
        state = self.state
        topic = p.topic
        if self.v5:
            alias = p.properties.topic_alias
            if alias is not None:
                if alias > o.topic_alias_maximum:
                    # 5.0 3.3.2.3.4: above the Topic Alias Maximum the server announced.
                    raise MqttError(f"topic alias {alias} exceeds the topic alias maximum "
                                    f"{o.topic_alias_maximum}", ReasonCode.TOPIC_ALIAS_INVALID)
                if topic:
                    self.topic_aliases[alias] = topic
                else:
                    topic = self.topic_aliases.get(alias)
                    if topic is None:
                        raise MqttError(f"topic alias {alias} was never set on this connection "
                                        "(5.0 3.3.2.3.4)", ReasonCode.PROTOCOL_ERROR)
            if p.properties.subscription_identifiers:
                # 5.0 3.3.4: subscription identifiers go from server to client only.
                raise MqttError("PUBLISH from a client with a subscription identifier")
            if p.qos > o.maximum_qos:
                raise MqttError(f"QoS {p.qos} exceeds the maximum QoS {o.maximum_qos}",
                                ReasonCode.QOS_NOT_SUPPORTED)  # 5.0 3.2.2.3.4
            if p.retain and not o.retain_available:
                raise MqttError("retained messages are not supported", ReasonCode.RETAIN_NOT_SUPPORTED)
        if p.qos == 2:
            if p.packet_id in state.inbound_qos2:
                # 4.3.3: until PUBREL the id names the same message: acknowledge, never re-route.
                self._write_packet(Pubrec(p.packet_id))
                return False
            if len(state.inbound_qos2) >= o.receive_maximum:
                # 5.0 3.3.4: past the Receive Maximum it announced, the server disconnects with
                # 0x93. 3.1.1 has no such announcement, yet the ids awaiting PUBREL are session
                # state the broker keeps: the same bound applies, and the connection is closed.
                raise MqttError(f"more than receive maximum {o.receive_maximum} QoS 2 messages "
                                "unacknowledged", ReasonCode.RECEIVE_MAXIMUM_EXCEEDED)
        props = p.properties
        dest = topic_destination(topic)
        conn = self.connection
        message = message_from_mqtt(
            message_id=conn.new_message_id(),
            destination=dest,
            payload=p.payload,
            qos=p.qos,
            retain=p.retain and o.retain_available,
            now_ms=self.broker.now_ms(),
            expiry_interval=props.message_expiry_interval,
            content_type=props.content_type,
            response_topic=props.response_topic,
            correlation_data=props.correlation_data,
            user_properties=props.user_properties,
            payload_format=props.payload_format_indicator,
        )
        try:
            accepted = conn.send(dest, message)
        except NotAuthorized as exc:
            return self._publish_refused(p, ReasonCode.NOT_AUTHORIZED, str(exc))
        except ResourceLimitError as exc:
            return self._publish_refused(p, ReasonCode.QUOTA_EXCEEDED, str(exc))
        except InvalidDestination as exc:
            return self._publish_refused(p, ReasonCode.TOPIC_NAME_INVALID, str(exc))
        if p.qos == 1:
            self._write_packet(Puback(p.packet_id))
        elif p.qos == 2:
            state.inbound_qos2.add(p.packet_id)
            self._write_packet(Pubrec(p.packet_id))
        if not accepted:
            self._pause(dest)
            return True
        return False

    def _publish_refused(self, p: Publish, reason: ReasonCode, text: str) -> bool:
        log.info("MQTT %r: PUBLISH to %r refused: %s", self.client_id, p.topic, text)
        if self.v5:
            if p.qos:
                props = Properties(reason_string=text[:200]) if self.problem_information else Properties()
                cls = Puback if p.qos == 1 else Pubrec  # a PUBREC >= 0x80 ends the QoS 2 flow
                self._write_packet(cls(p.packet_id, reason, props))
            return False
        # 3.1.1 3.3.5: no way to tell the client; acknowledge as usual or close. Unauthorized
        # messages are acknowledged and dropped (as Mosquitto does); a full destination closes
        # the connection, so the client does not mistake a lost message for a delivered one.
        if reason != ReasonCode.NOT_AUTHORIZED and p.qos:
            raise MqttError(text, reason)
        if p.qos == 1:
            self._write_packet(Puback(p.packet_id))
        elif p.qos == 2:
            self.state.inbound_qos2.add(p.packet_id)
            self._write_packet(Pubrec(p.packet_id))
        return False

    def _on_pubrel(self, p: Pubrel) -> None:
        state = self.state
        if p.packet_id in state.inbound_qos2:
            state.inbound_qos2.discard(p.packet_id)
            self._write_packet(Pubcomp(p.packet_id))
        else:
            # 4.3.3: answer every PUBREL; 5.0 says the id was unknown (0x92).
            self._write_packet(Pubcomp(p.packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if self.v5 else 0))

    # ------------------------------------------------------------ acknowledgements of deliveries

    def _on_puback(self, p: Puback) -> None:
        flight = self.state.outbound.get(p.packet_id)
        if flight is None or flight.qos != 1:
            log.debug("MQTT %r: PUBACK for unknown packet id %d ignored", self.client_id, p.packet_id)
            return
        del self.state.outbound[p.packet_id]
        self._engine_ack(flight)
        self._drain()

    def _on_pubrec(self, p: Pubrec) -> None:
        state = self.state
        flight = state.outbound.get(p.packet_id)
        if flight is None or flight.qos != 2:
            if self.v5:
                self._write_packet(Pubrel(p.packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
            return
        if p.reason_code >= 0x80:
            # 5.0 4.3.3: a PUBREC with a failure code ends the flow; the client refused it.
            del state.outbound[p.packet_id]
            self._engine_ack(flight)
            self._drain()
            return
        if not flight.released:
            flight.released = True
            self._engine_ack(flight)  # the message is the client's now; only ids remain
        self._write_packet(Pubrel(p.packet_id))

    def _on_pubcomp(self, p: Pubcomp) -> None:
        flight = self.state.outbound.get(p.packet_id)
        if flight is None or not flight.released:
            log.debug("MQTT %r: PUBCOMP for unknown packet id %d ignored", self.client_id, p.packet_id)
            return
        del self.state.outbound[p.packet_id]
        self._drain()

    def _engine_ack(self, flight: OutboundFlight) -> None:
        conn = self.connection
        consumer = conn.consumers.get(flight.consumer_id)
        if consumer is None or consumer.ack_mode is AckMode.AUTO:
            return  # unsubscribed (or replaced) since: nothing left to acknowledge
        try:
            conn.ack(consumer, flight.message_id)
        except EngineError as exc:
            log.debug("MQTT %r: ack of %s not applied: %s", self.client_id, flight.message_id, exc)

    # ------------------------------------------------------------ subscriptions

    def _on_subscribe(self, p: Subscribe) -> None:
        # Retained messages of new subscriptions are written after the SUBACK (the spec allows
        # either order, 3.8.4; clients find this one easier).
        self._deferred = []
        conn = self.connection
        conn.hold_retained = True  # released below, after the SUBACK
        try:
            ids = p.properties.subscription_identifiers
            codes = [self._subscribe_one(s, ids[0] if ids else None) for s in p.subscriptions]
        finally:
            deferred, self._deferred = self._deferred, None
            conn.hold_retained = False
        self._write_packet(Suback(p.packet_id, codes))
        for data in deferred:
            self._write(data)
        # Retained messages go out as the transport takes them (engine/retained.py), not all
        # at once: a `#` subscriber that never reads must not hold every one of them.
        conn.pump_retained()

    def _subscribe_one(self, s: Subscription, subscription_identifier: int | None) -> int:
        v5 = self.v5
        failure = 0x80  # 3.1.1 3.9.3 "Failure"
        try:
            # Shared subscriptions (5.0 4.8.2) are accepted from 3.1.1 clients too, as
            # Mosquitto and HiveMQ do.
            group, inner = parse_shared(s.topic_filter)
        except MqttProtocolError as exc:
            log.info("MQTT %r: SUBSCRIBE %r refused: %s", self.client_id, s.topic_filter, exc.message)
            return ReasonCode.TOPIC_FILTER_INVALID if v5 else failure
        if group is not None and s.no_local:
            raise MqttError("no local on a shared subscription (5.0 3.8.3.1)")
        state = self.state
        qos = min(s.qos, self.options.maximum_qos)
        sub = SubscriptionState(
            topic_filter=s.topic_filter,
            qos=qos,
            no_local=s.no_local,
            retain_as_published=s.retain_as_published,
            retain_handling=s.retain_handling,
            share_group=group,
            destination=filter_destination(inner),
            durable=state.expiry_interval > 0 and qos > 0 and group is None,
            subscription_identifier=subscription_identifier,
            dollar_guard=filter_starts_with_wildcard(inner),
        )
        existing = state.subscriptions.get(s.topic_filter)
        if existing is not None and existing.engine_key == sub.engine_key:
            # 3.8.4: same filter: replace the options, keep the flow; retained messages again
            # unless Retain Handling says otherwise (5.0 3.3.1.3).
            if s.retain_handling == 0 and group is None:
                try:
                    self._replay_retained(sub)
                except ResourceLimitError as exc:
                    log.info("MQTT %r: SUBSCRIBE %r refused: %s", self.client_id, s.topic_filter, exc)
                    return ReasonCode.QUOTA_EXCEEDED if v5 else failure
            state.subscriptions[s.topic_filter] = sub
            return qos
        if existing is not None:
            self._detach(existing, remove_durable=True)
            del state.subscriptions[s.topic_filter]
        state.subscriptions[s.topic_filter] = sub
        # 5.0 3.8.3.1 Retain Handling: 0 send, 1 only for a new subscription, 2 never.
        # Shared subscriptions never get retained messages (5.0 4.8.2).
        receive_retained = group is None and (s.retain_handling == 0 or (s.retain_handling == 1 and existing is None))
        try:
            self._attach(sub, receive_retained=receive_retained)
        except NotAuthorized as exc:
            del state.subscriptions[s.topic_filter]
            log.info("MQTT %r: SUBSCRIBE %r refused: %s", self.client_id, s.topic_filter, exc)
            return ReasonCode.NOT_AUTHORIZED if v5 else failure
        except ResourceLimitError as exc:
            # connection_limits (subscriptions, consumers, pending retained): 5.0 Quota exceeded.
            del state.subscriptions[s.topic_filter]
            log.info("MQTT %r: SUBSCRIBE %r refused: %s", self.client_id, s.topic_filter, exc)
            return ReasonCode.QUOTA_EXCEEDED if v5 else failure
        except EngineError as exc:
            del state.subscriptions[s.topic_filter]
            log.info("MQTT %r: SUBSCRIBE %r refused: %s", self.client_id, s.topic_filter, exc)
            return ReasonCode.UNSPECIFIED_ERROR if v5 else failure
        return qos

    def _attach(self, sub: SubscriptionState, *, receive_retained: bool, resuming: bool = False) -> None:
        conn = self.connection
        if resuming and sub.durable:
            durable = self.broker.durable.get(durable_key(self.client_id, sub.durable_name))
            if durable is not None:
                queued_qos0 = {ref.message.message_id for ref in durable.queue.pending_refs()
                               if message_qos(ref.message) == 0}
                if queued_qos0:
                    self._offline_qos0[sub.topic_filter] = queued_qos0
        conn.subscribe(
            sub.topic_filter,
            sub.destination,
            deliver=self._deliver,
            ack_mode=AckMode.CLIENT_INDIVIDUAL if sub.qos else AckMode.AUTO,
            prefetch=self.window,
            no_local=sub.no_local,
            durable_name=sub.durable_name if sub.durable else None,
            shared_name=sub.share_group,
            receive_retained=receive_retained,
        )

    def _detach(self, sub: SubscriptionState, remove_durable: bool) -> None:
        consumer_id = sub.topic_filter
        self._held = deque(item for item in self._held if item[0].consumer_id != consumer_id)
        self._offline_qos0.pop(consumer_id, None)
        state = self.state
        for key in [k for k in state.resends if k[0] == consumer_id]:
            del state.resends[key]
        try:
            self.connection.unsubscribe(consumer_id, remove_durable=remove_durable and sub.durable)
        except EngineError as exc:
            log.debug("MQTT %r: unsubscribe %r: %s", self.client_id, consumer_id, exc)

    def _replay_retained(self, sub: SubscriptionState) -> None:
        """Retained messages for a subscription the engine already has (a re-SUBSCRIBE)."""
        broker = self.broker
        consumer = self.connection.consumers.get(sub.topic_filter)
        if consumer is None:
            return
        if sub.durable:
            target = broker.durable.get(durable_key(self.client_id, sub.durable_name))
        else:
            target = consumer.source
        if target is None:
            return
        self.connection.replay_retained(sub.topic_filter, target)

    def _on_unsubscribe(self, p: Unsubscribe) -> None:
        state = self.state
        codes = []
        for topic_filter in p.topic_filters:
            sub = state.subscriptions.pop(topic_filter, None)
            if sub is None:
                codes.append(ReasonCode.NO_SUBSCRIPTION_EXISTED)  # 5.0 3.11.3
                continue
            # Ending a subscription ends its queued messages too (a durable one is removed).
            self._detach(sub, remove_durable=True)
            codes.append(ReasonCode.SUCCESS)
        self._write_packet(Unsuback(p.packet_id, codes if self.v5 else []))

    # ------------------------------------------------------------ deliveries out

    def _deliver(self, consumer: Consumer, ref: MessageRef) -> None:
        state = self.state
        message = ref.message
        sub = state.subscriptions.get(consumer.consumer_id)
        topic = mqtt_topic_of(message.destination)
        if sub is None or (sub.dollar_guard and topic[:1] == "$"):
            # 4.7.2: `#` and `+/...` do not match `$` topics, though the engine's `>` does.
            self._settle_unsent(consumer, ref)
            return
        offline = self._offline_qos0.get(consumer.consumer_id)
        if offline and message.message_id in offline:
            offline.discard(message.message_id)
            # 3.1.2.4: a QoS 0 message that arrived while the client was away is not session
            # state; the durable subscription queued it regardless.
            if min(message_qos(message), sub.qos) == 0:
                self._settle_unsent(consumer, ref)
                return
        qos = self._delivery_qos(consumer, message, sub)
        if qos and (self._held or len(state.outbound) >= self.window):
            self._held.append((consumer, ref))  # the window is full: keep order, wait
            return
        self._emit(consumer, ref, sub, topic, qos)

    def _settle_unsent(self, consumer: Consumer, ref: MessageRef) -> None:
        if consumer.ack_mode is not AckMode.AUTO and not consumer.closed:
            try:
                self.connection.ack(consumer, ref.message.message_id)
            except EngineError:
                pass

    def _drain(self) -> None:
        state = self.state
        held = self._held
        while held and len(state.outbound) < self.window and not self.closing:
            consumer, ref = held.popleft()
            sub = state.subscriptions.get(consumer.consumer_id)
            if sub is None or consumer.closed:
                continue
            topic = mqtt_topic_of(ref.message.destination)
            self._emit(consumer, ref, sub, topic, self._delivery_qos(consumer, ref.message, sub))

    def _delivery_qos(self, consumer: Consumer, message: Message, sub: SubscriptionState) -> int:
        """The QoS a delivery goes out with: min(publish, subscription) (3.1.1 3.8.4, 5.0 3.8.4),
        but a resent one keeps the QoS it first went out with (`Resend`)."""
        resend = self.state.resends.get((consumer.consumer_id, message.message_id))
        return resend.qos if resend is not None else min(message_qos(message), sub.qos)

    def _emit(self, consumer: Consumer, ref: MessageRef, sub: SubscriptionState, topic: str, qos: int) -> None:
        message = ref.message
        state = self.state
        expiry = remaining_expiry(message, self.broker.now_ms())
        if expiry == 0:
            self._settle_unsent(consumer, ref)  # 5.0 3.3.2.3.3: expired, not delivered
            return
        v5 = self.v5
        props = Properties()
        if v5:
            fields = outbound_fields(message)
            props.payload_format_indicator = fields.payload_format
            props.message_expiry_interval = expiry
            props.content_type = fields.content_type
            props.response_topic = fields.response_topic
            props.correlation_data = fields.correlation_data
            props.user_properties = fields.user_properties
            if sub.subscription_identifier is not None:
                props.subscription_identifiers = [sub.subscription_identifier]
            retain = published_with_retain(message) if sub.retain_as_published else ref.retained
        else:
            retain = ref.retained  # 3.3.1.3: set only when sent because of a new subscription
        pid = None
        dup = False
        if qos:
            key = (consumer.consumer_id, message.message_id)
            resend = state.resends.pop(key, None)
            pid = resend.packet_id if resend is not None else None
            dup = resend is not None or (ref.redelivered and key not in state.held_back)
            state.held_back.discard(key)
            if pid is None or pid in state.outbound:
                pid = state.allocate_packet_id()
        data = encode(Publish(topic, message.body, qos, retain, dup, pid, props), self.version)
        if self.client_max_packet is not None and len(data) > self.client_max_packet:
            # 5.0 3.1.2.11.4: never send a packet over the client's Maximum Packet Size; such a
            # message is discarded as if it had been delivered.
            log.info("MQTT %r: message %s (%d bytes) dropped: over the client's maximum packet size %d",
                     self.client_id, message.message_id, len(data), self.client_max_packet)
            self._settle_unsent(consumer, ref)
            return
        if qos:
            state.outbound[pid] = OutboundFlight(consumer.consumer_id, message.message_id, qos)
        self._write(data)
        if not qos and consumer.ack_mode is not AckMode.AUTO:
            self.connection.ack(consumer, message.message_id)  # delivered at QoS 0: done

    # ------------------------------------------------------------ the rest

    def _on_pingreq(self, p: Pingreq) -> None:
        self._write_packet(Pingresp())

    def _on_disconnect(self, p: Disconnect) -> None:
        state = self.state
        if self.v5:
            expiry = p.properties.session_expiry_interval
            if expiry is not None:
                if state.expiry_interval == 0 and expiry > 0:
                    # 5.0 3.14.2.2.2: a session that was to end cannot be made to persist now.
                    raise MqttError("DISCONNECT sets a session expiry interval, but CONNECT had 0")
                cap = self.options.max_session_expiry
                state.expiry_interval = min(expiry, cap) if cap is not None else expiry
            if p.reason_code != ReasonCode.DISCONNECT_WITH_WILL:
                self.will = None  # 5.0 3.14.4: normal disconnection discards the will
        else:
            self.will = None  # 3.1.1 3.14.4
        self._shutdown(send_will=self.will is not None)

    def _on_auth(self, p: Auth) -> None:
        # 5.0 4.12: only after CONNECT named an authentication method, which we never accept.
        raise MqttError("AUTH without an authentication method in CONNECT")

    def _on_connect_again(self, p: Connect) -> None:
        raise MqttError("a second CONNECT on one connection (3.1.0)")  # 3.1.1 [MQTT-3.1.0-2]

    def _on_server_packet(self, p) -> None:
        raise MqttError(f"{type(p).__name__.upper()} is a server packet; a client may not send it")

    _handlers = {
        Publish: _on_publish,
        Puback: _on_puback,
        Pubrec: _on_pubrec,
        Pubrel: _on_pubrel,
        Pubcomp: _on_pubcomp,
        Subscribe: _on_subscribe,
        Unsubscribe: _on_unsubscribe,
        Pingreq: _on_pingreq,
        Disconnect: _on_disconnect,
        Auth: _on_auth,
        Connect: _on_connect_again,
        Connack: _on_server_packet,
        Suback: _on_server_packet,
        Unsuback: _on_server_packet,
        Pingresp: _on_server_packet,
    }

    # ------------------------------------------------------------ output and closing

    def _write_packet(self, packet) -> None:
        self._write(encode(packet, self.version or MQTT_311))

    def _write(self, data: bytes) -> None:
        if self._deferred is not None:
            self._deferred.append(data)
        else:
            self.transport.write(data)

    def _fail(self, message: str, reason: ReasonCode) -> None:
        """End the connection for a client error (4.13): DISCONNECT with the reason in 5.0."""
        if self.closing:
            return
        log.info("MQTT %r: closing the connection: %s (0x%02X)", self.client_id, message, reason)
        self._deferred = None
        if self.v5 and self.connection is not None:
            code = reason if reason in DISCONNECT_REASON_CODES else ReasonCode.UNSPECIFIED_ERROR
            data = encode(Disconnect(code, Properties(reason_string=message[:200])), MQTT_5)
            if self.client_max_packet is not None and len(data) > self.client_max_packet:
                data = encode(Disconnect(code), MQTT_5)  # 5.0 3.1.2.11.4: drop the reason string
            self._write(data)
        self._shutdown(send_will=True)

    def _shutdown(self, send_will: bool) -> None:
        self.closing = True
        self._release(send_will)
        self.transport.close()

    def _release(self, send_will: bool) -> None:
        if self._released:
            return
        self._released = True
        state = self.state
        conn = self.connection
        if state is None or conn is None:
            return
        if state.live is self:
            state.live = None
        # What was sent but not acknowledged: the engine returns those messages to their durable
        # subscriptions when the connection closes; their packet ids are kept to resend under.
        for pid, flight in list(state.outbound.items()):
            if not flight.released:
                del state.outbound[pid]
                state.resends[(flight.consumer_id, flight.message_id)] = Resend(pid, flight.qos)
        for consumer, ref in self._held:
            state.held_back.add((consumer.consumer_id, ref.message.message_id))
        self._held.clear()
        conn.close()
        self.registry.disconnected(state, self.will if send_will else None, conn.connection_id, self.version)

    def connection_lost(self) -> None:
        """The network connection is gone; without a DISCONNECT that publishes the will."""
        self.closing = True
        self._release(send_will=True)

    # ------------------------------------------------------------ flow control

    def _pause(self, dest: DestinationName) -> None:
        """Producer flow control: stop reading until the destination has room."""
        self._paused = True
        self.transport.pause_reading()
        self.connection.wait_for_space(dest, self._resume_reading)

    def _resume_reading(self) -> None:
        if not self._paused or self.closing:
            return
        self._paused = False
        self.last_received = self.clock()  # the silence was ours: keep-alive restarts
        backlog, self._backlog = self._backlog, []
        self._process(backlog)
        if not self._paused and not self.closing:
            self.transport.resume_reading()

    def set_writable(self, writable: bool) -> None:
        if self.connection is not None and not self.closing:
            self.connection.set_writable(writable)

    # ------------------------------------------------------------ timers

    def tick(self, now: float, period: float = 0.0) -> None:
        """Keep-alive (3.1.2.10): nothing from the client for 1.5 x keep alive closes the
        connection (5.0 with DISCONNECT 0x8D); and a connection that never sends CONNECT."""
        if self.closing:
            return
        if self.connection is None:
            timeout = self.options.connect_timeout_ms
            if timeout and (now - self.opened_at) * 1000 > timeout:
                log.info("MQTT: no CONNECT within %d ms (connect_timeout_ms); closing", timeout)
                self._shutdown(send_will=False)
            return
        if self.keep_alive and not self._paused and now - self.last_received > KEEP_ALIVE_GRACE * self.keep_alive:
            self._fail(f"nothing received for {now - self.last_received:.1f} s; keep alive is "
                       f"{self.keep_alive} s", ReasonCode.KEEP_ALIVE_TIMEOUT)
