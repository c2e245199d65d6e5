"""The MQTT adapter, over paho-mqtt 2.x (MQTT 3.1.1 by default, 5.0 with ``mqtt_version=5``).

Names follow ActiveMQ's MQTT transport: the canonical ``topic://a.b`` is the MQTT topic ``a/b``
(``.`` and ``/`` swap; wildcards ``*`` <-> ``+`` and ``>`` <-> ``#``), the same mapping the
reference broker implements (``reference_broker/protocols/mqtt/mapping.py``). MQTT has no
queues, selectors, prefetch, exclusive or prioritised consumers, transactions, negative
acknowledgements or client-chosen acknowledgement: those raise `Unsupported` with the reason.

Sends are QoS 1 unless told otherwise (``persistent=False`` is QoS 0, ActiveMQ's mapping) and
wait for PUBACK (MQTT 3.1.1 section 4.3.2; a 5.0
PUBACK reason code of 0x80 or more is a refusal and raises ClientError). Message properties
travel as MQTT 5.0 user properties; MQTT 3.1.1 has nowhere to put them.

Durable subscriptions are MQTT sessions: a client connected with a fixed ``client_id`` keeps its
session (``clean_session=False``; on 5.0 ``clean_start=False`` with a session expiry), so its
subscriptions and their queued messages outlive the connection (3.1.1 section 3.1.2.4). The
broker may deliver queued messages as soon as the session resumes, before this client has
subscribed again; those wait here and go to the first subscription whose filter matches.

paho runs the network loop on its own thread (``loop_start``); callbacks hand results to the
caller's thread under one Condition.
"""

from __future__ import annotations

import itertools
import math
import threading
import uuid

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from .base import (
    GROUP_ID,
    GROUP_SEQ,
    AckMode,
    ClientError,
    ConnectFailed,
    ExchangeLog,
    Inbox,
    Received,
    Unsupported,
    preview,
    split_destination,
)
from .tls import ClientTls

#: 5.0 session expiry for kept sessions: the largest value, "never expires" (5.0 section 3.1.2.11.2)
KEEP_SESSION = 0xFFFFFFFF


def mqtt_topic(destination: str) -> str:
    """``topic://a.b.*`` -> ``a/b/+`` (ActiveMQ's mapping); queues raise Unsupported."""
    kind, name = split_destination(destination)
    if kind != "topic":
        raise Unsupported(f"MQTT has no queues: {destination} cannot be sent to or consumed over MQTT")
    levels = []
    for level in name.split("."):
        if level == "*":
            levels.append("+")
        elif level == ">":
            levels.append("#")
        else:
            levels.append(level.replace("/", "."))
    return "/".join(levels)


def canonical_topic(topic: str) -> str:
    """MQTT topic name -> ``topic://...``; inverse of `mqtt_topic`."""
    levels = []
    for level in topic.split("/"):
        if level == "+":
            levels.append("*")
        elif level == "#":
            levels.append(">")
        else:
            levels.append(level.replace(".", "/"))
    return "topic://" + ".".join(levels)


def _failed(reason) -> bool:
    """paho hands reason codes as ReasonCode (5.0 and 2.x API) or ints."""
    is_failure = getattr(reason, "is_failure", None)
    if is_failure is not None:
        return bool(is_failure)
    return int(reason) >= 0x80


class MqttSubscription:
    ack_confirmed = False  # no client acknowledgement at all (ack() raises Unsupported)

    def __init__(self, client: "MqttClient", destination: str, topic_filter: str, qos: int, durable: bool) -> None:
        self.client = client
        self.destination = destination
        self.topic_filter = topic_filter
        self.qos = qos
        self.durable = durable
        self.ack_mode: AckMode = "auto"
        self.inbox = Inbox()
        self.closed = False

    def receive(self, timeout: float = 5.0) -> Received | None:
        return self.inbox.get(timeout)

    def receive_n(self, n: int, timeout: float = 5.0) -> list[Received]:
        return self.inbox.get_n(n, timeout)

    def drain(self, quiet: float = 0.5) -> list[Received]:
        return self.inbox.drain(quiet)

    def ack(self, message: Received, **_: object) -> None:
        raise Unsupported("MQTT acknowledges each message itself (PUBACK / PUBREC on receipt); "
                          "there is no client acknowledgement to send")

    def nack(self, message: Received, **_: object) -> None:
        raise Unsupported("MQTT has no negative acknowledgement: a received message cannot be handed back")

    def close(self) -> None:
        """UNSUBSCRIBE; a durable one (kept session) is only detached here, since an MQTT
        UNSUBSCRIBE would delete it from the session (use unsubscribe_durable for that)."""
        if self.closed:
            return
        self.closed = True
        self.client._detach(self)
        if not self.durable and self.client.connected:
            self.client._unsubscribe(self.topic_filter)


class MqttClient:
    protocol = "mqtt"

    def __init__(self, host: str, port: int, *, login: str | None = None, passcode: str | None = None,
                 client_id: str | None = None, mqtt_version: int = 3, qos: int = 1,
                 clean_session: bool | None = None, keepalive: int = 60, timeout: float = 5.0,
                 tls: ClientTls | None = None) -> None:
        if mqtt_version not in (3, 5):
            raise ValueError(f"mqtt_version must be 3 (MQTT 3.1.1) or 5 (MQTT 5.0), not {mqtt_version!r}")
        if qos not in (0, 1, 2):
            raise ValueError(f"qos must be 0, 1 or 2, not {qos!r}")
        self.address = (host, port)
        self.mqtt_version = mqtt_version
        self.qos = qos
        self.timeout = timeout
        # A client that names itself keeps its session (that is how MQTT does durable
        # subscriptions); an anonymous one gets a fresh id and a clean session.
        self.clean_session = (client_id is None) if clean_session is None else clean_session
        self.client_id = client_id or f"brokerconf-{uuid.uuid4().hex[:12]}"
        self.exchange = ExchangeLog()
        self.session_present: bool | None = None
        self._cond = threading.Condition()
        self._connack = None
        self._lost: str | None = None
        self._closed = False
        self._acks: dict[int, object] = {}  # mid -> reason code (PUBACK, SUBACK, UNSUBACK)
        self._subscriptions: list[MqttSubscription] = []
        self._unrouted: list[Received] = []
        self._ids = itertools.count(1)
        self._acked_since_round_trip = False  # a PUBACK went out that no later answer has confirmed

        protocol = paho.MQTTv5 if mqtt_version == 5 else paho.MQTTv311
        kwargs = {} if mqtt_version == 5 else {"clean_session": self.clean_session}
        # No reconnecting behind the test's back: a lost connection is an observation.
        # manual_ack: _on_message queues the PUBACK itself *before* the message reaches the caller.
        # With paho's automatic ack the PUBACK is sent after on_message returns, so a caller that
        # took the message and closed at once could put its DISCONNECT on the wire first, and the
        # broker then rightly redelivers that QoS 1 message (seen on Artemis, DUR-KEEP-1 over MQTT).
        self._paho = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=protocol,
                                 reconnect_on_failure=False, manual_ack=True, **kwargs)
        if login is not None:
            self._paho.username_pw_set(login, passcode)
        self.tls = tls
        if tls is not None:
            self._paho.tls_set_context(tls.context())
        self._paho.on_connect = self._on_connect
        self._paho.on_disconnect = self._on_disconnect
        self._paho.on_publish = self._on_ack
        self._paho.on_subscribe = self._on_ack
        self._paho.on_unsubscribe = self._on_ack
        self._paho.on_message = self._on_message
        self._connect(keepalive)

    # ------------------------------------------------------------------ session

    def _connect(self, keepalive: int) -> None:
        where = f"MQTT{'+TLS' if self.tls else ''} {self.address[0]}:{self.address[1]}"
        self.exchange.note(f"-> CONNECT {where} v{'5.0' if self.mqtt_version == 5 else '3.1.1'} "
                           f"client-id={self.client_id} clean={self.clean_session}"
                           + (f" {self.tls.describe()}" if self.tls else ""))
        kwargs: dict = {}
        if self.mqtt_version == 5:
            kwargs["clean_start"] = self.clean_session
            if not self.clean_session:
                props = Properties(PacketTypes.CONNECT)
                props.SessionExpiryInterval = KEEP_SESSION
                kwargs["properties"] = props
        try:
            self._paho.connect(self.address[0], self.address[1], keepalive=keepalive, **kwargs)
        except OSError as exc:
            raise ConnectFailed(f"cannot open a socket to {where}: {exc} (is the broker running and is that "
                                "its MQTT port?" + (" is it a TLS port, and does its certificate chain to the CA "
                                                    "given?" if self.tls else "") + ")") from None
        self._paho.loop_start()
        with self._cond:
            self._cond.wait_for(lambda: self._connack is not None or self._lost is not None, self.timeout)
            connack = self._connack
        if connack is None or _failed(connack[0]):
            self._stop_loop()
            if connack is not None:
                raise ConnectFailed(f"{where} refused CONNECT: {connack[0]} (check login/passcode and client id)")
            raise ConnectFailed(f"{where} did not answer CONNECT within {self.timeout}s ({self._lost or 'no CONNACK'})")
        self.session_present = connack[1]
        self.exchange.note(f"<- CONNACK session-present={self.session_present}")

    @property
    def connected(self) -> bool:
        return self._connack is not None and self._lost is None and not self._closed

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        with self._cond:
            self._connack = (reason_code, bool(getattr(flags, "session_present", False)))
            self._cond.notify_all()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        reason = "closed by the client" if self._closed else f"the broker closed the connection ({reason_code})"
        with self._cond:
            if self._lost is None:
                self._lost = reason
            self._cond.notify_all()
            subscriptions = list(self._subscriptions)
        self.exchange.note(f"-- {reason}")
        for sub in subscriptions:
            sub.inbox.connection_lost(reason)

    def _on_ack(self, client, userdata, mid, reason, properties) -> None:
        with self._cond:
            self._acks[mid] = reason
            self._cond.notify_all()

    def _await_ack(self, mid: int, note: str):
        with self._cond:
            self._cond.wait_for(lambda: mid in self._acks or self._lost is not None, self.timeout)
            if mid in self._acks:
                return self._acks.pop(mid)
            if self._lost is not None:
                raise ClientError(f"{note}: connection lost before the acknowledgement: {self._lost}")
        raise ClientError(f"{note}: no acknowledgement within {self.timeout}s; the outcome is unknown")

    def _check_connected(self, note: str) -> None:
        if not self.connected:
            raise ClientError(f"{note}: not connected ({self._lost or 'closed'})")

    # ------------------------------------------------------------------ producing

    def send(self, destination: str, body: bytes | str = b"", properties: dict[str, object] | None = None, *,
             persistent: bool = True, priority: int | None = None, ttl_ms: int | None = None,
             group_id: str | None = None, group_seq: int | None = None,
             transaction: str | None = None, qos: int | None = None, retain: bool = False) -> None:
        topic = mqtt_topic(destination)
        if transaction:
            raise Unsupported("MQTT has no transactions")
        if priority is not None:
            raise Unsupported("MQTT has no message priority")
        if not persistent and qos:
            raise ValueError(f"persistent=False is QoS 0 over MQTT, but qos={qos} was asked for: give one of them")
        user = [(str(k), "true" if v is True else "false" if v is False else str(v))
                for k, v in (properties or {}).items()]
        if group_id is not None:
            user.append((GROUP_ID, group_id))
        if group_seq is not None:
            user.append((GROUP_SEQ, str(group_seq)))
        props = None
        if self.mqtt_version == 5:
            if user or ttl_ms is not None:
                props = Properties(PacketTypes.PUBLISH)
                if user:
                    props.UserProperty = user
                if ttl_ms is not None:
                    # Message Expiry Interval is in whole seconds (5.0 section 3.3.2.3.3).
                    props.MessageExpiryInterval = max(1, math.ceil(ttl_ms / 1000))
        elif user:
            raise Unsupported("MQTT 3.1.1 has no message properties (group id, user properties); "
                              "connect with mqtt_version=5")
        elif ttl_ms is not None:
            raise Unsupported("MQTT 3.1.1 has no message expiry; connect with mqtt_version=5")
        if qos is None:
            # ActiveMQ maps QoS 0 to non-persistent and QoS 1/2 to persistent messages (and back),
            # as the reference broker does (reference_broker/protocols/mqtt/mapping.py).
            qos = self.qos if persistent else 0
        data = body.encode() if isinstance(body, str) else bytes(body)
        note = f"PUBLISH {topic} qos={qos} retain={retain} props={user} body={preview(data)}"
        self._check_connected(note)
        self.exchange.note(f"-> {note}")
        info = self._paho.publish(topic, data, qos=qos, retain=retain, properties=props)
        if info.rc not in (paho.MQTT_ERR_SUCCESS, paho.MQTT_ERR_NO_CONN):
            raise ClientError(f"{note}: paho could not queue it: {paho.error_string(info.rc)}")
        # QoS 0 has no acknowledgement; paho reports it published once written to the socket.
        reason = self._await_ack(info.mid, note)
        if _failed(reason):
            raise ClientError(f"{note}: the broker refused it: {reason}")

    # ------------------------------------------------------------------ consuming

    def subscribe(self, destination: str, *, ack: AckMode = "auto", prefetch: int | None = None,
                  selector: str | None = None, durable_name: str | None = None,
                  exclusive: bool = False, priority: int | None = None,
                  headers: dict[str, str] | None = None, qos: int | None = None) -> MqttSubscription:
        topic_filter = mqtt_topic(destination)
        if ack != "auto":
            raise Unsupported(f"MQTT acknowledges automatically; ack mode {ack!r} cannot be expressed")
        if selector:
            raise Unsupported("MQTT has no message selectors")
        if prefetch is not None:
            raise Unsupported("MQTT has no consumer prefetch (only the broker's in-flight window)")
        if exclusive:
            raise Unsupported("MQTT has no exclusive consumers")
        if priority is not None:
            raise Unsupported("MQTT has no consumer priority")
        if headers:
            raise Unsupported(f"MQTT SUBSCRIBE carries no headers ({sorted(headers)})")
        if durable_name and self.clean_session:
            raise ValueError(f"durable subscription {durable_name!r} over MQTT needs a kept session: connect with "
                             "client_id=... (and clean_session=False, the default when a client id is given)")
        qos = self.qos if qos is None else qos
        sub = MqttSubscription(self, destination, topic_filter, qos, durable=bool(durable_name))
        with self._cond:
            # Messages of a resumed session that arrived before this subscription are its own.
            mine = [r for r in self._unrouted if paho.topic_matches_sub(topic_filter, str(r.headers["topic"]))]
            self._unrouted = [r for r in self._unrouted if r not in mine]
            self._subscriptions.append(sub)
        for received in mine:
            received.subscription = sub
            sub.inbox.put(received)
        note = f"SUBSCRIBE {topic_filter} qos={qos}"
        try:
            self._check_connected(note)
            self.exchange.note(f"-> {note}")
            result, mid = self._paho.subscribe(topic_filter, qos)
            if result != paho.MQTT_ERR_SUCCESS:
                raise ClientError(f"{note}: paho could not send it: {paho.error_string(result)}")
            reasons = self._await_ack(mid, note)
            failed = [r for r in reasons if _failed(r)]
            if failed:
                raise ClientError(f"{note}: the broker refused it: {failed[0]}")
        except ClientError:
            self._detach(sub)
            raise
        self.exchange.note(f"<- SUBACK {[str(r) for r in reasons]}")
        return sub

    def _detach(self, sub: MqttSubscription) -> None:
        with self._cond:
            if sub in self._subscriptions:
                self._subscriptions.remove(sub)

    def _unsubscribe(self, topic_filter: str) -> None:
        note = f"UNSUBSCRIBE {topic_filter}"
        self._check_connected(note)
        self.exchange.note(f"-> {note}")
        result, mid = self._paho.unsubscribe(topic_filter)
        if result != paho.MQTT_ERR_SUCCESS:
            raise ClientError(f"{note}: paho could not send it: {paho.error_string(result)}")
        reasons = self._await_ack(mid, note)
        # 3.1.1 UNSUBACK has no reason codes (paho hands an empty list or Success).
        reasons = reasons if isinstance(reasons, list) else [reasons]
        failed = [r for r in reasons if _failed(r)]
        if failed:
            raise ClientError(f"{note}: the broker refused it: {failed[0]}")

    def _round_trip(self, why: str) -> None:
        """A barrier on this connection: UNSUBSCRIBE from a filter nothing subscribes to and wait for
        its UNSUBACK (the broker answers it, matching or not: MQTT 3.1.1 § 3.10.4, 5.0 § 3.11).
        The broker handles a connection's packets in order, so everything sent before it has been
        processed once the answer is here. Used before a DISCONNECT that follows PUBACKs, where two
        things can give the acknowledged message to the session again when it comes back:
        a caller coming back at once with the same client id opens a new connection, whose CONNECT
        the broker may take before it has read the old connection's PUBACK (then the session
        takeover of MQTT 3.1.1 § 3.1.4 ends the old connection and the resend is right; through a
        wire tap all three brokers, the reference included, did it); and Artemis 2.40 was also seen
        resending it, DUP 0, after it had itself closed the old connection (rare; issue 25's note).
        DUR-KEEP-1 over MQTT failed so in a main job and a CI run; repeated on one Artemis 160
        times, 3 redeliveries without this round trip, 0 of 240 with it (2026-11-29). DUR-KEEP-1 is
        about the messages sent while away, so its client leaves cleanly."""
        self.exchange.note(f"-- round trip ({why})")
        try:
            self._unsubscribe(f"brokerconf/round-trip/{uuid.uuid4().hex}")
        except ClientError as exc:
            self.exchange.note(f"-- round trip failed: {exc}")  # the DISCONNECT still goes out
        self._acked_since_round_trip = False

    def unsubscribe_durable(self, destination: str, durable_name: str) -> None:
        """Remove the subscription from this client's kept session (UNSUBSCRIBE)."""
        topic_filter = mqtt_topic(destination)
        for sub in [s for s in self._subscriptions if s.topic_filter == topic_filter]:
            sub.closed = True
            self._detach(sub)
        self._unsubscribe(topic_filter)

    def _on_message(self, client, userdata, message) -> None:
        props = getattr(message, "properties", None)
        user = dict(getattr(props, "UserProperty", None) or [])
        received = Received(
            body=bytes(message.payload),
            destination=canonical_topic(message.topic),
            properties=user,
            message_id=None,  # the packet id is per session and reused; it identifies nothing
            redelivered=bool(message.dup),
            persistent=message.qos > 0,
            headers={"topic": message.topic, "qos": message.qos, "retain": bool(message.retain),
                     "dup": bool(message.dup), "mid": message.mid},
        )
        if message.qos > 0:
            client.ack(message.mid, message.qos)  # before anyone can see it (manual_ack above)
            self._acked_since_round_trip = True
            # queued on paho's one outgoing queue: on the wire before anything the caller sends next
            self.exchange.note(f"-> {'PUBACK' if message.qos == 1 else 'PUBCOMP'} mid={message.mid}")
        with self._cond:
            sub = next((s for s in self._subscriptions
                        if paho.topic_matches_sub(s.topic_filter, message.topic)), None)
            if sub is None:
                self._unrouted.append(received)
        self.exchange.note(f"<- PUBLISH {message.topic} qos={message.qos} dup={bool(message.dup)} "
                           f"retain={bool(message.retain)} props={user} body={preview(received.body)}"
                           + ("" if sub else " (no subscription yet: kept)"))
        if sub is not None:
            received.subscription = sub
            sub.inbox.put(received)

    # ------------------------------------------------------------------ not in MQTT

    def begin(self) -> str:
        raise Unsupported("MQTT has no transactions")

    def commit(self, transaction: str) -> None:
        raise Unsupported("MQTT has no transactions")

    def abort(self, transaction: str) -> None:
        raise Unsupported("MQTT has no transactions")

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """DISCONNECT (a clean one: no will message) and stop paho's thread. Idempotent."""
        if self._closed:
            return
        was_connected = self.connected
        if was_connected and self._acked_since_round_trip:
            self._round_trip("before DISCONNECT: the broker has processed every PUBACK sent")
        self._closed = True
        if was_connected:
            self.exchange.note("-> DISCONNECT")
            self._paho.disconnect()
        self._stop_loop()
        with self._cond:
            subscriptions = list(self._subscriptions)
        for sub in subscriptions:
            sub.inbox.connection_lost("closed by the client")

    def _stop_loop(self) -> None:
        self._paho.disconnect()  # makes loop_forever return even when the CONNECT never completed
        self._paho.loop_stop()

    def __enter__(self) -> "MqttClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MqttClient({self.address[0]}:{self.address[1]}, client_id={self.client_id!r})"
