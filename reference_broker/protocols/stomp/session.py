"""STOMP session adapter: maps decoded STOMP frames onto engine calls and engine deliveries onto
MESSAGE frames. No sockets here: bytes come in through `data_received`, bytes go out through the
`SessionTransport` the listener provides, which batches them into one write per read.

Protocol references are to the STOMP 1.2 specification (stomp.github.io) by section, and to
ActiveMQ's STOMP extension headers ("ActiveMQ STOMP" page).
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache
from typing import Callable, Protocol

from ...config import StompConfig
from ...engine.broker import Broker, Connection
from ...engine.consumer import AckMode, Consumer
from ...engine.errors import EngineError, InvalidDestination
from ...engine.message import DEFAULT_PRIORITY, Message, MessageRef
from ...engine.names import QUEUE, TOPIC, DestinationName, parse_destination
from .codec import (
    HEARTBEAT,
    Frame,
    FrameLimits,
    StompParser,
    StompProtocolError,
    escape_header,
    serialize_frame,
)

log = logging.getLogger("reference_broker.stomp")

SUPPORTED_VERSIONS = ("1.0", "1.1", "1.2")
SERVER_NAME = "brokerconf-reference/0.1"

# SEND headers that describe the message rather than being application properties.
_SEND_CONTROL = frozenset(
    {
        "destination", "content-length", "receipt", "transaction", "persistent", "priority",
        "expires", "correlation-id", "reply-to", "type", "JMSXGroupID", "JMSXGroupSeq",
        "content-type", "message-id", "timestamp", "subscription", "ack", "redelivered",
    }
)
# Control headers nearly every SEND carries, and the others (which need parsing); a SEND with
# only everyday headers takes the fast path in _message_from.
_EVERYDAY_CONTROL = frozenset({"destination", "content-length", "receipt", "transaction", "persistent", "content-type"})
_RARE_CONTROL = _SEND_CONTROL - _EVERYDAY_CONTROL
_ACK_MODES = {"auto": AckMode.AUTO, "client": AckMode.CLIENT, "client-individual": AckMode.CLIENT_INDIVIDUAL}
_TRUE = ("true", "1", "yes")


class SessionTransport(Protocol):
    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class FrameError(Exception):
    """A client error answered with an ERROR frame, after which the connection closes."""

    def __init__(self, message: str, detail: str = "", headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.headers = headers or []  # extra ERROR headers, e.g. `version` after a failed negotiation


#: (subscription, destination) pairs whose MESSAGE frame start a session remembers
MESSAGE_PREFIX_CACHE_SIZE = 1024


@lru_cache(maxsize=4096)
def stomp_destination(name: str) -> DestinationName:
    """`/queue/X`, `/topic/X` (ActiveMQ's STOMP names) or `queue://X`, `topic://X`."""
    if name.startswith("/queue/"):
        return parse_destination("queue://" + name[7:])
    if name.startswith("/topic/"):
        return parse_destination("topic://" + name[7:])
    if name.startswith(("queue://", "topic://")):
        return parse_destination(name)
    raise InvalidDestination(
        f"unsupported destination {name!r}: use /queue/NAME or /topic/NAME"
    )


# ActiveMQ "Stomp" page, "Working with Destinations with Stomp" (engine/temporary.py): a client's
# own temporary destinations, and other clients' ones as shown in reply-to headers.
TEMP_PREFIXES = {"/temp-queue/": QUEUE, "/temp-topic/": TOPIC}
REMOTE_TEMP_PREFIXES = {"/remote-temp-queue/": QUEUE, "/remote-temp-topic/": TOPIC}
# Network subscription ids start so (reference_broker/cluster/paths.py NETWORK_ID_PREFIX): a bridge
# may pull from its peer's temporary destinations (ActiveMQ's TempQueue lets network consumers in).
_NETWORK_ID_PREFIX = "NC|"


def remote_temp_wire(dest: DestinationName) -> str:
    return f"/remote-temp-{dest.kind}/{dest.name}"


def wire_destination(canonical: str) -> str:
    kind, _, name = canonical.partition("://")
    return f"/{kind}/{name}"


def negotiate_version(accept: str | None) -> str | None:
    """STOMP 1.2 "Protocol Negotiation": no accept-version means 1.0; else the highest common."""
    if accept is None:
        return "1.0"
    offered = {v.strip() for v in accept.split(",")}
    for version in reversed(SUPPORTED_VERSIONS):
        if version in offered:
            return version
    return None


def negotiate_heartbeat(client: str | None, server_send: int, server_receive: int) -> tuple[int, int]:
    """(ms between our heart-beats, ms within which we must hear from the client); 0 = off.
    STOMP 1.2 "Heart-beating": each direction uses the larger of what one side can do and the
    other wants, and is off when either side says 0."""
    if client is None:
        return 0, 0
    try:
        cx, cy = (int(part) for part in client.split(","))
    except ValueError:
        raise FrameError(f"invalid heart-beat header {client!r}: expected two integers 'cx,cy'") from None
    if cx < 0 or cy < 0:
        raise FrameError(f"invalid heart-beat header {client!r}: values must not be negative")
    send = max(server_send, cy) if server_send and cy else 0
    receive = max(server_receive, cx) if server_receive and cx else 0
    return send, receive


class StompSession:
    def __init__(
        self,
        broker: Broker,
        transport: SessionTransport,
        options: StompConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.transport = transport
        self.options = options or StompConfig()
        self.clock = clock
        o = self.options
        self.parser = StompParser(
            FrameLimits(o.max_frame_size, o.max_header_block, o.max_headers, o.max_header_length)
        )
        self.version = "1.2"
        self.connection: Connection | None = None
        self.closing = False
        self.heartbeat_send_ms = 0
        self.heartbeat_receive_ms = 0
        self.opened_at = clock()
        self.last_received = clock()
        self.last_sent = clock()
        self._backlog: list = []  # frames parsed while the producer was paused by flow control
        self._paused = False
        self._blocked_since: float | None = None
        self._blocked_dest: DestinationName | None = None
        self._message_prefixes: dict[tuple[int, str], bytes] = {}
        self._batch_time_ms = 0
        # "/temp-queue/x" -> the temporary destination made for it, and back (canonical -> name)
        self._temp_by_name: dict[str, DestinationName] = {}
        self._temp_names: dict[str, str] = {}

    # ------------------------------------------------------------ bytes in

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_received = self.clock()
        # One wall-clock reading per read batch stamps every message in it (JMSTimestamp).
        self._batch_time_ms = self.broker.now_ms()
        try:
            events = self.parser.feed(data)
        except StompProtocolError as exc:
            # Frames that parsed cleanly before the bad bytes (in this same read) still count:
            # act on them first, then answer the garbage with an ERROR.
            if exc.frames and not self._paused:
                self._process(exc.frames)
            self._error(exc.message if hasattr(exc, "message") else str(exc))
            return
        if self._paused:
            self._backlog.extend(events)
            return
        self._process(events)

    def _process(self, events: list) -> None:
        for index, event in enumerate(events):
            if self.closing:
                return
            if event is HEARTBEAT:
                continue
            try:
                blocked = self._handle(event)
            except FrameError as exc:
                self._error(exc.message, exc.detail, event, exc.headers)
                return
            except EngineError as exc:
                self._error(str(exc), "", event)
                return
            if blocked:
                self._backlog.extend(events[index + 1 :])
                return

    def _handle(self, frame: Frame) -> bool:
        """Handle one frame; True when the producer must now pause (flow control)."""
        command = frame.command
        if self.connection is None:
            if command in ("CONNECT", "STOMP"):
                self._on_connect(frame)
                return False
            raise FrameError(f"expected CONNECT or STOMP as the first frame, got {command}")
        handler = self._handlers.get(command)
        if handler is None:
            raise FrameError(f"{command} is not a frame a client may send")
        return bool(handler(self, frame))

    # ------------------------------------------------------------ frames

    def _on_connect(self, frame: Frame) -> None:
        version = negotiate_version(frame.get("accept-version"))
        if version is None:
            self.version = "1.2"
            raise FrameError(
                "no common protocol version",
                f"this broker speaks STOMP {', '.join(SUPPORTED_VERSIONS)}; "
                f"the client accepts {frame.get('accept-version')}",
                # "Protocol Negotiation": the ERROR names the versions the server does support.
                headers=[("version", ",".join(SUPPORTED_VERSIONS))],
            )
        self.version = version
        self.parser.version = version
        o = self.options
        self.heartbeat_send_ms, self.heartbeat_receive_ms = negotiate_heartbeat(
            frame.get("heart-beat"), o.heart_beat_send_ms, o.heart_beat_receive_ms
        )
        self.connection = self.broker.connect(
            login=frame.get("login"), passcode=frame.get("passcode"), client_id=frame.get("client-id")
        )
        headers = [("version", version), ("server", SERVER_NAME), ("session", self.connection.connection_id)]
        if version != "1.0":
            headers.append(("heart-beat", f"{self.heartbeat_send_ms},{self.heartbeat_receive_ms}"))
        self._write(serialize_frame("CONNECTED", headers, b"", version, content_length=False))

    def _on_send(self, frame: Frame) -> bool:
        conn = self.connection
        headers = frame.header_dict()  # one pass; first occurrence wins (STOMP 1.2)
        name = headers.get("destination")
        if not name:
            raise FrameError("SEND needs a destination header")
        dest = self._resolve(name, sending=True)
        message = self._message_from(frame, headers, dest, conn)
        can_continue = conn.send(dest, message, headers.get("transaction"))
        receipt = headers.get("receipt")
        deferred = conn.take_deferred_send()
        if deferred is not None:
            # routed later (a clustered grouping decision): the receipt, or the ERROR, waits for
            # it, and so do the frames after this one
            self._await_routing(deferred, frame, receipt)
            return True
        if receipt is not None:
            self._write_receipt(receipt)
        if not can_continue:
            self._pause(dest)
            return True
        return False

    @staticmethod
    def _int_value(headers: dict, name: str, default: int, expected: str) -> int:
        raw = headers.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise FrameError(f"invalid {name} header {raw!r}: expected {expected}") from None

    def _message_from(self, frame: Frame, headers: dict, dest: DestinationName, conn: Connection) -> Message:
        properties = {}
        rare = False  # any message-describing header beyond the everyday ones?
        if not headers.keys() <= _EVERYDAY_CONTROL:  # one C-level set test for plain SENDs
            for name, value in headers.items():
                if name in _SEND_CONTROL:
                    if name in _RARE_CONTROL:
                        rare = True
                else:
                    properties[name] = value
        persistent = headers.get("persistent")
        persistent = persistent is not None and persistent.lower() in _TRUE
        if not rare:
            return Message(
                message_id=conn.new_message_id(), destination=dest.canonical, body=frame.body,
                properties=properties, persistent=persistent, timestamp=self._batch_time_ms,
                content_type=headers.get("content-type"),
            )
        get = headers.get
        priority = DEFAULT_PRIORITY
        if "priority" in headers:
            priority = self._int_value(headers, "priority", DEFAULT_PRIORITY, "an integer 0-9")
            if not 0 <= priority <= 9:
                raise FrameError(f"invalid priority {priority}: JMS priorities are 0-9")
        return Message(
            message_id=conn.new_message_id(),
            destination=dest.canonical,
            body=frame.body,
            properties=properties,
            persistent=persistent,
            priority=priority,
            timestamp=self._batch_time_ms,
            expiration=self._int_value(headers, "expires", 0, "milliseconds since the epoch"),
            correlation_id=get("correlation-id"),
            reply_to=self._reply_to(get("reply-to")),
            type=get("type"),
            group_id=get("JMSXGroupID"),
            group_seq=self._int_value(headers, "JMSXGroupSeq", 0, "an integer"),
            content_type=get("content-type"),
        )

    def _on_subscribe(self, frame: Frame) -> None:
        dest = self._destination(frame)
        sub_id = frame.get("id")
        if sub_id is None:
            if self.version != "1.0":
                raise FrameError("SUBSCRIBE needs an id header (STOMP 1.1 and later)")
            sub_id = frame.get("destination")
        network = sub_id.startswith(_NETWORK_ID_PREFIX)
        if network and not self.connection.network:
            # Privileges come from how the connection logged in, never from a name the client picks
            # (engine/network_principal.py).
            raise FrameError(
                f"subscription id {sub_id!r}: ids starting with {_NETWORK_ID_PREFIX!r} are reserved for network "
                "bridges of peer brokers (a login in the group security.network_group)")
        temporary = self.broker.temporary
        if temporary.is_temporary(dest.canonical) or frame.get("destination", "").startswith(
                tuple(REMOTE_TEMP_PREFIXES)):
            temporary.check_consume(dest, self.connection, network)
            if network and not temporary.is_local(dest.canonical):
                # A peer's bridge pulls for its broker's temporary destination: announced here
                # while the pull lasts (bridge_temp_destinations; engine/temporary.py).
                temporary.announce(dest, self.connection.connection_id)
        ack_name = frame.get("ack", "auto")
        ack_mode = _ACK_MODES.get(ack_name)
        if ack_mode is None or (self.version == "1.0" and ack_mode is AckMode.CLIENT_INDIVIDUAL):
            raise FrameError(f"invalid ack mode {ack_name!r}: use auto, client or client-individual")
        prefetch = self._int_header(frame, "activemq.prefetchSize", self.options.default_prefetch, minimum=1)
        priority = self._int_header(frame, "activemq.priority", 0, minimum=0)
        # ActiveMQ's per-consumer slow-consumer limit; 0 is accepted and ignored, as documented.
        pending_limit = self._int_header(frame, "activemq.maximumPendingMessageLimit", 0, minimum=0)
        durable_name = frame.get("activemq.subscriptionName") or frame.get("durable-subscription-name")
        self.connection.subscribe(
            sub_id,
            dest,
            deliver=self._deliver,
            ack_mode=ack_mode,
            prefetch=prefetch,
            selector=self._selector(frame),
            priority=priority,
            exclusive=(frame.get("activemq.exclusive") or "").lower() in _TRUE,
            no_local=(frame.get("activemq.noLocal") or "").lower() in _TRUE,
            durable_name=durable_name if dest.is_topic else None,
            maximum_pending_limit=pending_limit or None,
        )
        self._receipt(frame)

    def _selector(self, frame: Frame) -> str | None:
        selector = frame.get("selector")
        if selector and self.options.convert_string_expressions:
            # STOMP headers are strings: like ActiveMQ's STOMP transport, let `price > 5`
            # compare a string property numerically.
            return "convert_string_expressions:" + selector
        return selector

    def _on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.get("id")
        if sub_id is None and self.version == "1.0":
            sub_id = frame.get("destination")
        if sub_id is None:
            raise FrameError("UNSUBSCRIBE needs an id header")
        durable_name = frame.get("activemq.subscriptionName") or frame.get("durable-subscription-name")
        if durable_name and sub_id not in self.connection.consumers:
            # Removing a durable subscription nobody consumes right now: ActiveMQ's STOMP transport
            # removes it by client-id and name whatever the id says (ProtocolConverter.onStompUnsubscribe).
            self.connection.remove_durable(durable_name)
        else:
            consumer = self.connection.consumer(sub_id)
            self.connection.unsubscribe(sub_id, remove_durable=bool(durable_name))
            if sub_id.startswith(_NETWORK_ID_PREFIX) and self.connection.network:
                self.broker.temporary.withdraw(consumer.destination, self.connection.connection_id)
        self._receipt(frame)

    def _on_ack(self, frame: Frame, outcome: str = "ack") -> None:
        conn = self.connection
        if self.version == "1.2":
            ack_id = frame.get("id")
            if ack_id is None:
                raise FrameError(f"{frame.command} needs an id header (STOMP 1.2)")
            consumer, message_id = self._resolve_ack_id(ack_id)
        else:
            message_id = frame.get("message-id")
            if message_id is None:
                raise FrameError(f"{frame.command} needs a message-id header (STOMP {self.version})")
            sub_id = frame.get("subscription")
            consumer = conn.consumer(sub_id) if sub_id is not None else conn.find_consumer_for(message_id)
        if outcome == "ack":
            conn.ack(consumer, message_id, frame.get("transaction"))
        else:
            conn.nack(consumer, message_id, frame.get("transaction"))
        self._receipt(frame)

    def _on_nack(self, frame: Frame) -> None:
        if self.version == "1.0":
            raise FrameError("NACK is not part of STOMP 1.0")
        self._on_ack(frame, "nack")

    def _resolve_ack_id(self, ack_id: str) -> tuple[Consumer, str]:
        # Our ack ids are "<consumer number>:<message id>" so one message delivered to two
        # subscriptions of the same connection is acked on the right one.
        number, sep, message_id = ack_id.partition(":")
        if sep and number.isdigit():
            for consumer in self.connection.consumers.values():
                if consumer.number == int(number):
                    return consumer, message_id
        raise FrameError(f"unknown ack id {ack_id!r}: not a message awaiting acknowledgement on this connection")

    def _tx_id(self, frame: Frame) -> str:
        tx = frame.get("transaction")
        if tx is None:
            raise FrameError(f"{frame.command} needs a transaction header")
        return tx

    def _on_begin(self, frame: Frame) -> None:
        self.connection.begin(self._tx_id(frame))
        self._receipt(frame)

    def _on_commit(self, frame: Frame) -> None:
        self.connection.commit(self._tx_id(frame))
        self._receipt(frame)

    def _on_abort(self, frame: Frame) -> None:
        self.connection.abort(self._tx_id(frame))
        self._receipt(frame)

    def _on_disconnect(self, frame: Frame) -> None:
        self._receipt(frame)
        self._shutdown()

    def _on_server_frame(self, frame: Frame) -> None:
        raise FrameError(f"{frame.command} is a server frame; clients may not send it")

    _handlers = {
        "SEND": _on_send,
        "SUBSCRIBE": _on_subscribe,
        "UNSUBSCRIBE": _on_unsubscribe,
        "ACK": _on_ack,
        "NACK": _on_nack,
        "BEGIN": _on_begin,
        "COMMIT": _on_commit,
        "ABORT": _on_abort,
        "DISCONNECT": _on_disconnect,
        "CONNECT": lambda self, f: self._already_connected(),
        "STOMP": lambda self, f: self._already_connected(),
        "CONNECTED": _on_server_frame,
        "MESSAGE": _on_server_frame,
        "RECEIPT": _on_server_frame,
        "ERROR": _on_server_frame,
    }

    def _already_connected(self) -> None:
        raise FrameError("already connected: CONNECT may only be the first frame")

    # ------------------------------------------------------------ helpers

    def _destination(self, frame: Frame) -> DestinationName:
        name = frame.get("destination")
        if not name:
            raise FrameError(f"{frame.command} needs a destination header")
        return self._resolve(name)

    def _resolve(self, name: str, sending: bool = False) -> DestinationName:
        """A STOMP destination, including temporary ones: ``/temp-queue/x`` is this connection's
        (made on first use), ``/remote-temp-queue/ID:...`` another connection's, which must exist
        for a send (ActiveMQ "Stomp" page, "Working with Destinations with Stomp")."""
        if name[:1] != "/" or not name.startswith(("/temp-", "/remote-temp-")):
            return stomp_destination(name)
        for prefix, kind in TEMP_PREFIXES.items():
            if name.startswith(prefix):
                if len(name) == len(prefix):
                    raise InvalidDestination(f"empty temporary destination name in {name!r}")
                dest = self._temp_by_name.get(name)
                if dest is None:
                    dest = self.broker.temporary.create(self.connection, kind)
                    self._temp_by_name[name] = dest
                    self._temp_names[dest.canonical] = name
                return dest
        for prefix, kind in REMOTE_TEMP_PREFIXES.items():
            if name.startswith(prefix):
                dest = parse_destination(f"{kind}://{name[len(prefix):]}")
                if sending:
                    self.broker.temporary.check_send(dest)
                return dest
        return stomp_destination(name)

    def _reply_to(self, value: str | None) -> str | None:
        """A reply-to naming this connection's ``/temp-queue/x`` reaches the receiver as the
        ``/remote-temp-queue/ID:...`` it can send to (LegacyFrameTranslator.convertDestination)."""
        if value is None or not value.startswith(tuple(TEMP_PREFIXES)):
            return value
        return remote_temp_wire(self._resolve(value))

    def _wire_name(self, canonical: str) -> str:
        """The destination header of a MESSAGE: this connection's own temporary destinations by
        the name it gave them, others' in their remote form."""
        own = self._temp_names.get(canonical)
        if own is not None:
            return own
        if self.broker.temporary.is_temporary(canonical):
            kind, _, name = canonical.partition("://")
            return f"/remote-temp-{kind}/{name}"
        return wire_destination(canonical)

    @staticmethod
    def _int_header(frame: Frame, name: str, default: int, minimum: int) -> int:
        raw = frame.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise FrameError(f"invalid {name} header {raw!r}: expected an integer") from None
        if value < minimum:
            raise FrameError(f"invalid {name} header {raw!r}: must be at least {minimum}")
        return value

    def _receipt(self, frame: Frame) -> None:
        receipt = frame.get("receipt")
        if receipt is not None:
            self._write_receipt(receipt)

    def _write_receipt(self, receipt: str) -> None:
        # Sent in the same flush as the store's group commit, so a receipt for a persistent
        # send means the message is in the journal (see listeners/stomp.py).
        if self.version == "1.0":  # no header escapes in 1.0: see _error
            receipt = receipt.replace("\r", " ").replace("\n", " ")
        self._write(serialize_frame("RECEIPT", [("receipt-id", receipt)], b"", self.version, content_length=False))

    def _write(self, data: bytes) -> None:
        self.last_sent = self.clock()
        self.transport.write(data)

    def _error(self, message: str, detail: str = "", frame: Frame | None = None,
               extra_headers: list[tuple[str, str]] | None = None) -> None:
        """STOMP 1.2 "ERROR": send the error, then close the connection."""
        if self.closing:
            return
        log.info("STOMP error on %s: %s", self.connection.connection_id if self.connection else "new connection", message)
        headers = [("message", message.replace("\n", " ")), ("content-type", "text/plain")]
        if extra_headers:
            headers += extra_headers
        if frame is not None and frame.get("receipt") is not None:
            headers.append(("receipt-id", frame.get("receipt")))
        if self.version == "1.0":
            # STOMP 1.0 has no header escapes: a value the client sent escaped (a receipt id with a
            # newline, found by the stomp-session fuzz target) cannot go back as it was
            headers = [(k, v.replace("\r", " ").replace("\n", " ")) for k, v in headers]
        body = (detail or message).encode()
        if frame is not None:
            body += f"\n\nThe offending frame was {frame.command}.".encode()
        self._write(serialize_frame("ERROR", headers, body, self.version))
        self._shutdown()

    def _shutdown(self) -> None:
        self.closing = True
        self._release()
        self.transport.close()

    def _release(self) -> None:
        if self.connection is not None:
            self.connection.close()

    def connection_lost(self) -> None:
        self.closing = True
        self._release()

    # ------------------------------------------------------------ flow control

    def _await_routing(self, deferred, frame: Frame, receipt: str | None) -> None:
        self._paused = True
        self.transport.pause_reading()

        def routed(future) -> None:
            if self.closing:
                return
            failure = None if future.cancelled() else future.exception()
            if future.cancelled() or failure is not None:
                self._error(str(failure) if failure is not None else "the send was not routed", "", frame)
                return
            if receipt is not None:
                self._write_receipt(receipt)
            self._resume()
        deferred.add_done_callback(routed)

    def _pause(self, dest: DestinationName) -> None:
        """Producer flow control: stop reading until the destination has room."""
        self._paused = True
        self._blocked_since = self.clock()
        self._blocked_dest = dest
        self.transport.pause_reading()
        self.connection.wait_for_space(dest, self._resume)

    def _resume(self) -> None:
        if not self._paused or self.closing:
            return
        self._paused = False
        self._blocked_since = None
        self.last_received = self.clock()  # heart-beat grace restarts once we read again
        backlog, self._backlog = self._backlog, []
        self._process(backlog)
        if not self._paused and not self.closing:
            self.transport.resume_reading()

    def set_writable(self, writable: bool) -> None:
        if self.connection is not None:
            self.connection.set_writable(writable)

    # ------------------------------------------------------------ deliveries out

    def _deliver(self, consumer: Consumer, ref: MessageRef) -> None:
        self._write(self.encode_message(consumer, ref))

    def encode_message(self, consumer: Consumer, ref: MessageRef) -> bytes:
        message = ref.message
        version = self.version
        # Cache the shared headers for the next delivery of this message (topic fan-out):
        # one (protocol version, bytes) pair; a message is rarely seen by two STOMP versions.
        cache = message.wire_cache
        if cache is not None and cache[0] == version:
            common = cache[1]
        else:
            common = self._encode_common(message, version)
            message.wire_cache = (version, common)
        prefix_key = (consumer.number, message.destination)
        prefix = self._message_prefixes.get(prefix_key)
        if prefix is None:
            sub = consumer.consumer_id if version == "1.0" else escape_header(consumer.consumer_id, version)
            dest = self._wire_name(message.destination)
            if version != "1.0":
                dest = escape_header(dest, version)
            prefix = f"MESSAGE\nsubscription:{sub}\ndestination:{dest}\n".encode()
            if len(self._message_prefixes) >= MESSAGE_PREFIX_CACHE_SIZE:
                # a wildcard subscriber sees ever new destinations: start over, stay small
                self._message_prefixes.clear()
            self._message_prefixes[prefix_key] = prefix
        extra = ""
        if consumer.ack_mode is not AckMode.AUTO and version == "1.2":
            extra = f"ack:{escape_header(f'{consumer.number}:{message.message_id}', version)}\n"
        if ref.delivery_count:
            extra += f"redelivered:true\nJMSXDeliveryCount:{ref.delivery_count + 1}\n"
        if ref.first_for_consumer:
            key_name = consumer.source.group_settings.first_key
            extra += f"{escape_header(key_name, version) if version != '1.0' else key_name}:true\n"
        body = message.body
        return b"".join((prefix, extra.encode() if extra else b"", common, b"content-length:%d\n\n" % len(body), body, b"\0"))

    @staticmethod
    def _encode_common(message: Message, version: str) -> bytes:
        """The headers every delivery of `message` shares, encoded once per protocol version."""
        # 1.0 has no escaping ("Value Encoding"), so a LF (from a 1.1/1.2 producer) cannot be
        # carried: written raw it would end the header early and forge header lines or corrupt
        # the frame. It goes out as a space instead.
        esc = (lambda v: v.replace("\n", " ")) if version == "1.0" else (lambda v: escape_header(v, version))
        text = (f"message-id:{esc(message.message_id)}\ntimestamp:{message.timestamp}\n"
                f"expires:{message.expiration}\npriority:{message.priority}\n")
        if message.persistent:
            text += "persistent:true\n"
        for name, value in (("correlation-id", message.correlation_id), ("reply-to", message.reply_to),
                            ("type", message.type), ("content-type", message.content_type),
                            ("JMSXGroupID", message.group_id)):
            if value is not None:
                text += f"{name}:{esc(value)}\n"
        if message.group_id is not None and message.group_seq:
            text += f"JMSXGroupSeq:{message.group_seq}\n"
        for name, value in message.properties.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            text += f"{esc(name)}:{esc(str(value))}\n"
        return text.encode()

    # ------------------------------------------------------------ timers

    def tick(self, now: float, period: float = 0.0) -> None:
        """Heart-beats both ways (STOMP 1.2 "Heart-beating") and flow-control timeouts.

        `period` is how long until the next tick (seconds): a heart-beat is sent now if waiting
        for the next tick would leave the client without data for longer than the negotiated
        interval, since the spec asks for data at least that often."""
        if self.closing:
            return
        if self.connection is None:
            # A socket that never says CONNECT must not hold a connection slot forever.
            timeout = self.options.connect_timeout_ms
            if timeout and (now - self.opened_at) * 1000 > timeout:
                self._error(f"no CONNECT frame within {timeout} ms (connect_timeout_ms)")
            return
        if self.heartbeat_send_ms and (now - self.last_sent + period) * 1000 >= self.heartbeat_send_ms:
            self._write(b"\n")
        # Allow twice the negotiated period for network delay before giving up on the client.
        # Not while flow control has stopped reading from it: its heart-beats are then waiting
        # unread in the socket, and the silence is ours, not the client's.
        if (self.heartbeat_receive_ms and not self._paused
                and (now - self.last_received) * 1000 > 2 * self.heartbeat_receive_ms):
            log.info("closing %s: no data from the client for %.1f s (heart-beat %d ms)",
                     self.connection.connection_id, now - self.last_received, self.heartbeat_receive_ms)
            self._shutdown()
            return
        if self._paused and self._blocked_since is not None:
            self._check_send_timeout(now)

    def _check_send_timeout(self, now: float) -> None:
        # send_fail_if_no_space_after_timeout: a producer blocked longer than the policy allows
        # gets an error instead of waiting forever.
        dest = self._blocked_dest
        timeout = self.broker.policies.policy_for(dest).send_fail_if_no_space_after_timeout
        if timeout and (now - self._blocked_since) * 1000 >= timeout:
            self._paused = False
            self._error(f"{dest.canonical} stayed full for {timeout} ms (send_fail_if_no_space_after_timeout)")
