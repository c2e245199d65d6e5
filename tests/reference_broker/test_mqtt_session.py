"""Sans-IO tests of the MQTT session adapter: packets are encoded with the project's codec and
fed to `MqttSession.data_received`; what the session writes to a fake transport is parsed back.
Clocks are fake, so keep-alive, session expiry, will delay and message expiry are exact.

Section numbers are those of MQTT 3.1.1 and MQTT 5.0 (OASIS); spec IDs in assertion messages
name the rule checked.
"""

from __future__ import annotations

import pytest

from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.message import Message
from reference_broker.engine.names import parse_destination
from reference_broker.protocols.mqtt.codec import (
    MQTT_5,
    MQTT_311,
    Connack,
    Connect,
    Disconnect,
    MqttParser,
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
    encode_raw,
)
from reference_broker.protocols.mqtt.mapping import QOS_PROPERTY
from reference_broker.protocols.mqtt.session import MqttSession, MqttSessionRegistry

BOTH = pytest.mark.parametrize("version", [MQTT_311, MQTT_5], ids=["v311", "v5"])


class FakeTransport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.out += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Env:
    """One engine broker, one session registry, fake clocks (wall for the engine, monotonic
    for the sessions)."""

    def __init__(self, **config) -> None:
        self.wall = 1_700_000_000.0
        self.mono = 1_000.0
        cfg = build_config({"stomp": None, **config})
        self.broker = Broker(cfg, clock=lambda: self.wall)
        self.registry = MqttSessionRegistry(self.broker, cfg.mqtt_options, clock=lambda: self.mono)
        self.clients: list[Client] = []

    def client(self, version: int = MQTT_311) -> "Client":
        client = Client(self, version)
        self.clients.append(client)
        return client

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds
        for client in self.clients:
            client.session.tick(self.mono)
        self.registry.tick()


class Client:
    def __init__(self, env: Env, version: int) -> None:
        self.env = env
        self.version = version
        self.transport = FakeTransport()
        self.session = MqttSession(env.broker, self.transport, env.registry, clock=lambda: env.mono)
        self.parser = MqttParser(protocol_level=version, max_packet_size=1 << 28)
        self._read = 0
        self._next_id = 0
        self._pending: list = []  # parsed, not yet looked at

    def pid(self) -> int:
        self._next_id += 1
        return self._next_id

    def send(self, *packets) -> None:
        self.session.data_received(b"".join(encode(p, self.version) for p in packets))

    def packets(self) -> list:
        new = bytes(self.transport.out[self._read:])
        self._read = len(self.transport.out)
        got = self._pending + (self.parser.feed(new) if new else [])
        self._pending = []
        return got

    def one(self, cls=None):
        got = self.packets()
        assert len(got) == 1, f"expected one packet, got {got!r}"
        if cls is not None:
            assert isinstance(got[0], cls), f"expected {cls.__name__}, got {got[0]!r}"
        return got[0]

    def connect(self, client_id: str = "", clean: bool = True, keep_alive: int = 0, **kwargs) -> Connack:
        self.send(Connect(protocol_level=self.version, clean_start=clean, keep_alive=keep_alive,
                          client_id=client_id, **kwargs))
        got = self.packets()
        assert got and isinstance(got[0], Connack), got
        self._pending = got[1:]  # a resumed session's redeliveries follow the CONNACK
        return got[0]

    def subscribe(self, topic_filter: str, qos: int = 0, properties: Properties | None = None, **options) -> list[int]:
        pid = self.pid()
        self.send(Subscribe(pid, [Subscription(topic_filter, qos, **options)], properties or Properties()))
        got = self.packets()
        suback = [p for p in got if isinstance(p, Suback)]
        assert suback and suback[0].packet_id == pid, got
        self.after_suback = [p for p in got if not isinstance(p, Suback)]
        return suback[0].reason_codes

    def publish(self, topic: str, payload: bytes = b"x", qos: int = 0, **kwargs) -> int | None:
        """PUBLISH; for QoS 1 and 2 check the acknowledgement; returns the packet id."""
        pid = self.pid() if qos else None
        self.send(Publish(topic, payload, qos, packet_id=pid, **kwargs))
        if qos == 1:
            ack = self.one(Puback)
            assert ack.packet_id == pid and ack.reason_code == 0
        elif qos == 2:
            rec = self.one(Pubrec)
            assert rec.packet_id == pid and rec.reason_code == 0
            self.send(Pubrel(pid))
            assert self.one(Pubcomp).packet_id == pid
        return pid

    def publishes(self) -> list[Publish]:
        got = self.packets()
        assert all(isinstance(p, Publish) for p in got), got
        return got

    def lost(self) -> None:
        """The network connection broke (no DISCONNECT)."""
        self.session.connection_lost()
        self.transport.closed = True

    def closed_with(self) -> list:
        assert self.transport.closed, "connection still open"
        return self.packets()


@pytest.fixture
def env() -> Env:
    return Env()


def stomp_like_send(env: Env, topic_name: str, body: bytes, persistent: bool, **fields) -> None:
    conn = env.broker.connect()
    dest = parse_destination("topic://" + topic_name)
    conn.send(dest, Message(conn.new_message_id(), dest.canonical, body, persistent=persistent, **fields))
    conn.close()


# =============================================================================== CONNECT


@BOTH
def test_connect_accepted(env, version):
    client = env.client(version)
    connack = client.connect("c1")
    assert connack.reason_code == 0 and not connack.session_present
    if version == MQTT_5:
        p = connack.properties
        # 5.0 3.2.2.3: the server announces its limits
        assert p.receive_maximum == 100 and p.maximum_packet_size == 10 * 1024 * 1024
        assert p.topic_alias_maximum == 10 and p.assigned_client_identifier is None
    client.send(Pingreq())
    assert isinstance(client.one(), Pingresp), "3.12: PINGREQ is answered with PINGRESP"


def test_unsupported_protocol_level_gets_return_code_1(env):
    """3.1.1 3.1.2.2 [MQTT-3.1.2-2]: an unsupported level gets CONNACK 0x01, then close."""
    client = env.client(MQTT_311)
    client.session.data_received(encode(Connect(protocol_level=3, client_id="old"), MQTT_311))
    assert client.closed_with() == [Connack(False, 1)]


def test_unsupported_protocol_version_in_v5_gets_0x84(env):
    """5.0 3.1.2.1-2: a level-5 CONNECT this server refuses gets reason 0x84 in 5.0 format."""
    client = env.client(MQTT_5)
    client.session.data_received(encode(Connect(protocol_name="MQTX", protocol_level=5, client_id="x"), MQTT_5))
    [connack] = client.closed_with()
    assert connack.reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION


@BOTH
def test_bad_credentials(version):
    env = Env(security={"users": [{"name": "alice", "password": "secret"}]})
    client = env.client(version)
    connack = client.connect("c", username="alice", password=b"wrong")
    # 3.1.1 3.2.2.3 return code 4; 5.0 reason 0x86
    assert connack.reason_code == (4 if version == MQTT_311 else ReasonCode.BAD_USER_NAME_OR_PASSWORD)
    assert client.transport.closed
    anonymous = env.client(version)
    assert anonymous.connect("d").reason_code == (5 if version == MQTT_311 else ReasonCode.NOT_AUTHORIZED)
    good = env.client(version)
    assert good.connect("e", username="alice", password=b"secret").reason_code == 0
    assert env.broker.connections, "the engine connection exists for the accepted client"


def test_311_empty_client_id_needs_clean_session(env):
    """3.1.1 3.1.3.1 [MQTT-3.1.3-8]: empty id with CleanSession=0 -> 0x02 identifier rejected."""
    refused = env.client(MQTT_311)
    assert refused.connect("", clean=False).reason_code == 2
    assert refused.transport.closed
    accepted = env.client(MQTT_311)
    assert accepted.connect("", clean=True).reason_code == 0


def test_v5_empty_client_id_is_assigned(env):
    """5.0 3.1.3.1 / 3.2.2.3.7: the server assigns an id and returns it in CONNACK."""
    a, b = env.client(MQTT_5), env.client(MQTT_5)
    ida = a.connect("").properties.assigned_client_identifier
    idb = b.connect("", clean=False).properties.assigned_client_identifier
    assert ida and idb and ida != idb
    assert a.session.client_id == ida


def test_v5_authentication_method_is_refused(env):
    client = env.client(MQTT_5)
    connack = client.connect("c", properties=Properties(authentication_method="SCRAM-SHA-1"))
    assert connack.reason_code == ReasonCode.BAD_AUTHENTICATION_METHOD and client.transport.closed


@BOTH
def test_takeover_closes_the_old_connection(env, version):
    """3.1.4 [MQTT-3.1.4-2]: a second connection with the same client id takes over; 5.0 tells
    the old one with DISCONNECT 0x8E."""
    old = env.client(version)
    old.connect("same")
    new = env.client(version)
    assert new.connect("same").reason_code == 0
    got = old.closed_with()
    if version == MQTT_5:
        assert [p.reason_code for p in got] == [ReasonCode.SESSION_TAKEN_OVER]
    else:
        assert got == []
    assert env.registry.get("same").live is new.session


def test_takeover_publishes_the_old_will(env):
    watcher = env.client()
    watcher.connect("w")
    watcher.subscribe("wills/#")
    old = env.client()
    old.connect("dev", will=Will("wills/dev", b"gone", 0))
    env.client().connect("dev")
    [will] = watcher.publishes()
    assert will.topic == "wills/dev" and will.payload == b"gone"


def test_second_connect_is_a_protocol_error(env):
    client = env.client(MQTT_5)
    client.connect("c")
    client.send(Connect(protocol_level=5, client_id="c"))
    [disconnect] = client.closed_with()
    assert disconnect.reason_code == ReasonCode.PROTOCOL_ERROR


# =============================================================================== keep alive


@BOTH
def test_keep_alive_timeout_closes(env, version):
    """3.1.2.10 [MQTT-3.1.2-24]: nothing for 1.5 x keep alive closes the connection (5.0:
    DISCONNECT 0x8D)."""
    client = env.client(version)
    client.connect("ka", keep_alive=10)
    env.advance(9)
    client.send(Pingreq())
    assert isinstance(client.one(), Pingresp)
    env.advance(14)  # 14 s of silence < 15 s
    assert not client.transport.closed
    env.advance(1.5)
    got = client.closed_with()
    if version == MQTT_5:
        assert [p.reason_code for p in got] == [ReasonCode.KEEP_ALIVE_TIMEOUT]
    else:
        assert got == []


def test_v5_server_keep_alive_overrides():
    """5.0 3.2.2.3.14: the server's keep alive is announced and used."""
    env = Env(mqtt_options={"server_keep_alive": 4})
    client = env.client(MQTT_5)
    assert client.connect("c", keep_alive=0).properties.server_keep_alive == 4
    env.advance(6.1)
    assert client.transport.closed


def test_max_keep_alive():
    env = Env(mqtt_options={"max_keep_alive": 30})
    v5 = env.client(MQTT_5)
    assert v5.connect("a", keep_alive=0).properties.server_keep_alive == 30
    v311 = env.client(MQTT_311)
    assert v311.connect("b", keep_alive=600).reason_code == 2, "Mosquitto max_keepalive: refused"


def test_connection_without_connect_times_out():
    env = Env(mqtt_options={"connect_timeout_ms": 2000})
    client = env.client()
    env.advance(2.5)
    assert client.transport.closed and client.packets() == []


# =============================================================================== will


@BOTH
def test_will_published_on_abnormal_close_not_on_disconnect(env, version):
    """3.1.2.5 [MQTT-3.1.2-8/10]: the will is published when the connection closes without a
    DISCONNECT, and discarded by a DISCONNECT."""
    watcher = env.client(version)
    watcher.connect("w")
    watcher.subscribe("will/+", 1)
    crashing = env.client(version)
    crashing.connect("crash", will=Will("will/crash", b"bye", 1, False))
    crashing.lost()
    [will] = watcher.publishes()
    assert (will.topic, will.payload, will.qos, will.retain) == ("will/crash", b"bye", 1, False)
    polite = env.client(version)
    polite.connect("polite", will=Will("will/polite", b"bye"))
    polite.send(Disconnect())
    assert polite.transport.closed
    assert watcher.packets() == []


def test_will_published_on_protocol_error(env):
    watcher = env.client()
    watcher.connect("w")
    watcher.subscribe("will/#")
    bad = env.client()
    bad.connect("bad", will=Will("will/bad", b"x"))
    bad.session.data_received(encode_raw(0, 0))  # packet type 0 is reserved
    assert bad.transport.closed
    assert [p.topic for p in watcher.publishes()] == ["will/bad"]


def test_v5_disconnect_with_will_message(env):
    """5.0 3.14.2.1: reason 0x04 disconnects and still publishes the will."""
    watcher = env.client(MQTT_5)
    watcher.connect("w")
    watcher.subscribe("will/#")
    client = env.client(MQTT_5)
    client.connect("c", will=Will("will/c", b"w"))
    client.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL))
    assert [p.payload for p in watcher.publishes()] == [b"w"]


def test_v5_will_delay_and_cancellation(env):
    """5.0 3.1.2.5 / 3.1.3.2.2: the will waits for the Will Delay Interval; a reconnection to
    the session before then cancels it."""
    watcher = env.client(MQTT_5)
    watcher.connect("w")
    watcher.subscribe("will/#")
    expiry = Properties(session_expiry_interval=100)
    will = Will("will/d", b"late", properties=Properties(will_delay_interval=5))
    first = env.client(MQTT_5)
    first.connect("d", properties=expiry, will=will)
    first.lost()
    env.advance(4)
    assert watcher.packets() == []
    env.advance(1.5)
    assert [p.payload for p in watcher.publishes()] == [b"late"], "published after the delay"
    second = env.client(MQTT_5)
    second.connect("d", clean=False, properties=expiry, will=will)
    second.lost()
    env.advance(2)
    resumed = env.client(MQTT_5)
    assert resumed.connect("d", clean=False, properties=expiry).session_present
    env.advance(10)
    assert watcher.packets() == [], "a resumed session cancels the delayed will"


def test_v5_will_published_when_session_ends_before_delay(env):
    watcher = env.client(MQTT_5)
    watcher.connect("w")
    watcher.subscribe("will/#")
    client = env.client(MQTT_5)
    client.connect("e", properties=Properties(session_expiry_interval=2),
                   will=Will("will/e", b"end", properties=Properties(will_delay_interval=60)))
    client.lost()
    env.advance(2.5)
    assert [p.payload for p in watcher.publishes()] == [b"end"], "5.0 3.1.2.5: session end publishes it"
    assert env.registry.get("e") is None


def test_will_topic_must_be_authorized():
    env = Env(security={"authorization": [{"topic": "allowed.>", "write": ["anonymous"], "read": ["anonymous"]}]})
    client = env.client(MQTT_5)
    assert client.connect("c", will=Will("forbidden/x", b"")).reason_code == ReasonCode.NOT_AUTHORIZED


# =============================================================================== sessions


@BOTH
def test_persistent_session_queues_qos1_not_qos0(env, version):
    """3.1.2.4 / 5.0 4.1: a persistent session keeps its subscriptions and queues QoS 1/2
    messages while the client is away; QoS 0 ones are not part of the session state."""
    persistent = {"clean": False} if version == MQTT_311 else {"clean": False, "properties": Properties(session_expiry_interval=3600)}
    sub = env.client(version)
    sub.connect("p", **persistent)
    assert sub.subscribe("news/#", 1) == [1]
    sub.send(Disconnect())
    pub = env.client(version)
    pub.connect("pub")
    pub.publish("news/a", b"q1", 1)
    pub.publish("news/b", b"q0", 0)
    pub.publish("news/c", b"q2", 2)
    back = env.client(version)
    assert back.connect("p", **persistent).session_present, "3.2.2.2: session present"
    got = back.publishes()
    assert [(p.topic, p.payload, p.qos) for p in got] == [("news/a", b"q1", 1), ("news/c", b"q2", 1)]
    assert not any(p.dup for p in got)
    for p in got:
        back.send(Puback(p.packet_id))
    pub.publish("news/d", b"live0", 0)
    assert [p.payload for p in back.publishes()] == [b"live0"], "the subscription lives on"


@BOTH
def test_clean_session_discards_state(env, version):
    persistent = {"clean": False} if version == MQTT_311 else {"clean": False, "properties": Properties(session_expiry_interval=3600)}
    sub = env.client(version)
    sub.connect("c", **persistent)
    sub.subscribe("x/#", 1)
    sub.send(Disconnect())
    assert "durable://c:mqtt:x/#" in env.broker.durable
    clean = env.client(version)
    assert not clean.connect("c", clean=True).session_present
    assert "durable://c:mqtt:x/#" not in env.broker.durable, "3.1.2.4: old session discarded"
    env.client(version).connect("pub")
    env.clients[-1].publish("x/y", b"m", 1)
    assert clean.packets() == [], "no subscription survives a clean start"


def test_v5_session_expiry(env):
    """5.0 3.1.2.11.2: the session is deleted once the expiry interval has passed."""
    client = env.client(MQTT_5)
    client.connect("s", properties=Properties(session_expiry_interval=10))
    client.subscribe("t", 1)
    client.lost()
    env.advance(9)
    assert env.registry.get("s") is not None
    env.advance(2)
    assert env.registry.get("s") is None and "durable://s:mqtt:t" not in env.broker.durable
    again = env.client(MQTT_5)
    assert not again.connect("s", clean=False).session_present


def test_v5_zero_expiry_session_ends_with_connection(env):
    client = env.client(MQTT_5)
    client.connect("z", clean=False)  # no Session Expiry Interval: 0
    client.subscribe("t", 1)
    assert "durable://z:mqtt:t" not in env.broker.durable, "not persistent: no durable subscription"
    client.send(Disconnect())
    assert env.registry.get("z") is None


def test_v5_disconnect_cannot_make_a_session_persistent(env):
    client = env.client(MQTT_5)
    client.connect("z")
    client.send(Disconnect(0, Properties(session_expiry_interval=60)))
    [disconnect] = client.closed_with()
    assert disconnect.reason_code == ReasonCode.PROTOCOL_ERROR  # 5.0 3.14.2.2.2


def test_v5_disconnect_may_end_a_persistent_session(env):
    client = env.client(MQTT_5)
    client.connect("y", properties=Properties(session_expiry_interval=60))
    client.subscribe("t", 1)
    client.send(Disconnect(0, Properties(session_expiry_interval=0)))
    assert env.registry.get("y") is None and "durable://y:mqtt:t" not in env.broker.durable


def test_max_session_expiry_is_announced():
    env = Env(mqtt_options={"max_session_expiry": 30})
    client = env.client(MQTT_5)
    assert client.connect("m", properties=Properties(session_expiry_interval=3600)).properties.session_expiry_interval == 30


@BOTH
def test_unacknowledged_messages_redelivered_with_dup_and_same_packet_id(env, version):
    """4.4 [MQTT-4.4.0-1]: on resume, unacknowledged PUBLISHes are resent with their original
    packet identifiers and DUP=1; a QoS 2 flow past PUBREC resumes with PUBREL."""
    persistent = {"clean": False} if version == MQTT_311 else {"clean": False, "properties": Properties(session_expiry_interval=3600)}
    sub = env.client(version)
    sub.connect("r", **persistent)
    sub.subscribe("d/1", 1)
    sub.subscribe("d/2", 2)
    pub = env.client(version)
    pub.connect("pub")
    pub.publish("d/1", b"one", 1)
    pub.publish("d/2", b"two", 2)
    first = {p.topic: p for p in sub.publishes()}
    assert not first["d/1"].dup and first["d/2"].qos == 2
    sub.send(Pubrec(first["d/2"].packet_id))
    assert sub.one(Pubrel).packet_id == first["d/2"].packet_id
    sub.lost()
    back = env.client(version)
    assert back.connect("r", **persistent).session_present
    got = back.packets()
    assert got[0] == Pubrel(first["d/2"].packet_id), "PUBREL resent first"
    [again] = got[1:]
    assert isinstance(again, Publish) and again.payload == b"one"
    assert again.dup and again.packet_id == first["d/1"].packet_id
    back.send(Puback(again.packet_id), Pubcomp(first["d/2"].packet_id))
    assert back.packets() == []
    sub_state = env.registry.get("r")
    assert not sub_state.outbound and not sub_state.resends


def test_held_back_messages_are_not_duplicates(env):
    """Messages the window held back were never sent: after resume they go out with DUP=0."""
    persistent = Properties(session_expiry_interval=3600, receive_maximum=1)
    sub = env.client(MQTT_5)
    sub.connect("h", properties=persistent)
    sub.subscribe("w", 1)
    pub = env.client(MQTT_5)
    pub.connect("pub")
    pub.publish("w", b"a", 1)
    pub.publish("w", b"b", 1)
    [a] = sub.publishes()  # 5.0 3.3.4: no more than Receive Maximum in flight
    sub.lost()
    back = env.client(MQTT_5)
    back.connect("h", clean=False, properties=persistent)
    [a2] = back.publishes()
    assert a2.payload == b"a" and a2.dup and a2.packet_id == a.packet_id
    back.send(Puback(a2.packet_id))
    [b] = back.publishes()
    assert b.payload == b"b" and not b.dup


# =============================================================================== publish flows


@BOTH
def test_inbound_qos2_is_exactly_once(env, version):
    """4.3.3: a resend of an unreleased packet id (DUP) is acknowledged, not published again."""
    sub = env.client(version)
    sub.connect("s")
    sub.subscribe("e/1", 2)
    pub = env.client(version)
    pub.connect("p")
    pub.send(Publish("e/1", b"once", 2, packet_id=7))
    assert pub.one(Pubrec).packet_id == 7
    pub.send(Publish("e/1", b"once", 2, dup=True, packet_id=7))
    assert pub.one(Pubrec).packet_id == 7
    [delivered] = sub.publishes()
    assert delivered.payload == b"once"
    pub.send(Pubrel(7))
    assert pub.one(Pubcomp) == Pubcomp(7)
    pub.send(Pubrel(7))  # unknown now
    assert pub.one(Pubcomp).reason_code == (ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if version == MQTT_5 else 0)
    pub.send(Publish("e/1", b"again", 2, packet_id=7))  # the id is free again: a new message
    assert pub.one(Pubrec).packet_id == 7
    assert [p.payload for p in sub.publishes()] == [b"again"]


def test_inbound_qos2_state_survives_reconnect(env):
    persistent = {"clean": False}
    pub = env.client()
    pub.connect("q2", **persistent)
    pub.send(Publish("e/2", b"m", 2, packet_id=3))
    pub.one(Pubrec)
    pub.lost()
    sub = env.client()
    sub.connect("s")
    sub.subscribe("e/2", 2)
    back = env.client()
    back.connect("q2", **persistent)
    back.send(Publish("e/2", b"m", 2, dup=True, packet_id=3))
    assert back.one(Pubrec).packet_id == 3
    back.send(Pubrel(3))
    assert back.one(Pubcomp).reason_code == 0
    assert sub.packets() == [], "not published a second time"


@pytest.mark.parametrize("pub_qos, sub_qos", [(0, 2), (1, 2), (2, 2), (2, 1), (2, 0), (1, 0)])
def test_delivery_qos_is_the_minimum(env, pub_qos, sub_qos):
    """3.8.4 / 4.3: delivered with min(publish QoS, subscription QoS); each flow completes and
    settles the engine delivery."""
    sub = env.client()
    sub.connect("s")
    sub.subscribe("q", sub_qos)
    pub = env.client()
    pub.connect("p")
    pub.publish("q", b"m", pub_qos)
    [got] = sub.publishes()
    assert got.qos == min(pub_qos, sub_qos)
    consumer = sub.session.connection.consumers["q"]
    if got.qos == 1:
        assert len(consumer.in_flight) == 1
        sub.send(Puback(got.packet_id))
    elif got.qos == 2:
        sub.send(Pubrec(got.packet_id))
        assert sub.one(Pubrel).packet_id == got.packet_id
        assert got.packet_id in sub.session.state.outbound, "id in use until PUBCOMP"
        sub.send(Pubcomp(got.packet_id))
    assert not consumer.in_flight and not sub.session.state.outbound


def test_v5_receive_maximum_limits_outbound_window(env):
    """5.0 3.3.4 [MQTT-3.3.4-7]: no more QoS 1/2 PUBLISHes in flight than the client's Receive
    Maximum; the rest follow, in order, as acknowledgements come."""
    sub = env.client(MQTT_5)
    sub.connect("s", properties=Properties(receive_maximum=2))
    sub.subscribe("win/#", 2)
    pub = env.client(MQTT_5)
    pub.connect("p")
    for i in range(5):
        pub.publish(f"win/{i % 2}", b"%d" % i, 1)
    first = sub.publishes()
    assert [p.payload for p in first] == [b"0", b"1"]
    sub.send(Puback(first[0].packet_id))
    [third] = sub.publishes()
    assert third.payload == b"2"
    sub.send(Puback(first[1].packet_id), Puback(third.packet_id))
    assert [p.payload for p in sub.publishes()] == [b"3", b"4"]


def test_311_window_is_configured():
    env = Env(mqtt_options={"max_inflight_messages": 1})
    sub = env.client()
    sub.connect("s")
    sub.subscribe("w", 1)
    pub = env.client()
    pub.connect("p")
    pub.publish("w", b"a", 1)
    pub.publish("w", b"b", 1)
    pub.publish("w", b"c", 0)  # waits behind b: one subscription keeps its order (4.6)
    got = sub.publishes()
    assert [(p.payload, p.qos) for p in got] == [(b"a", 1)]
    sub.send(Puback(got[0].packet_id))
    [b] = sub.publishes()
    assert (b.payload, b.qos) == (b"b", 1)
    sub.send(Puback(b.packet_id))
    assert [(p.payload, p.qos) for p in sub.publishes()] == [(b"c", 0)]


def test_v5_inbound_receive_maximum_exceeded():
    env = Env(mqtt_options={"receive_maximum": 2})
    pub = env.client(MQTT_5)
    assert pub.connect("p").properties.receive_maximum == 2
    for pid in (1, 2):
        pub.send(Publish("r", b"", 2, packet_id=pid))
        pub.one(Pubrec)
    pub.send(Publish("r", b"", 2, packet_id=3))
    [disconnect] = pub.closed_with()
    assert disconnect.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED


# =============================================================================== retained


@BOTH
def test_retained_messages(env, version):
    """3.3.1.3: the retained message goes to new subscriptions with RETAIN=1; live deliveries
    have RETAIN=0; an empty retained payload clears it (and is delivered as a live message)."""
    pub = env.client(version)
    pub.connect("p")
    pub.publish("ret/a", b"r1", 1, retain=True)
    sub = env.client(version)
    sub.connect("s")
    sub.subscribe("ret/+", 1)
    [replayed] = sub.after_suback
    assert replayed.retain and replayed.payload == b"r1" and replayed.qos == 1
    sub.send(Puback(replayed.packet_id))
    pub.publish("ret/a", b"r2", 0, retain=True)
    [live] = sub.publishes()
    assert not live.retain and live.payload == b"r2"
    pub.publish("ret/a", b"", 0, retain=True)
    [cleared] = sub.publishes()
    assert cleared.payload == b"" and not cleared.retain
    late = env.client(version)
    late.connect("l")
    late.subscribe("ret/#")
    assert late.after_suback == []


def test_v5_retain_as_published_and_retain_handling(env):
    """5.0 3.8.3.1: Retain As Published keeps the publisher's flag on live deliveries; Retain
    Handling 0/1/2 = send / only for a new subscription / never."""
    pub = env.client(MQTT_5)
    pub.connect("p")
    pub.publish("rh/t", b"kept", 0, retain=True)
    rap = env.client(MQTT_5)
    rap.connect("rap")
    rap.subscribe("rh/t", 0, retain_as_published=True)
    assert [p.retain for p in rap.after_suback] == [True]
    pub.publish("rh/t", b"kept2", 0, retain=True)
    assert [p.retain for p in rap.publishes()] == [True], "live, but published with RETAIN"
    never = env.client(MQTT_5)
    never.connect("never")
    never.subscribe("rh/t", 0, retain_handling=2)
    assert never.after_suback == []
    once = env.client(MQTT_5)
    once.connect("once")
    once.subscribe("rh/t", 0, retain_handling=1)
    assert len(once.after_suback) == 1
    once.subscribe("rh/t", 0, retain_handling=1)
    assert once.after_suback == [], "existing subscription: not sent again"
    once.subscribe("rh/t", 0, retain_handling=0)
    assert [p.payload for p in once.after_suback] == [b"kept2"], "3.8.4: re-subscribe resends"


def test_retain_not_available():
    env = Env(mqtt_options={"retain_available": False, "maximum_qos": 1})
    client = env.client(MQTT_5)
    props = client.connect("c").properties
    assert props.retain_available == 0 and props.maximum_qos == 1
    assert client.subscribe("q", 2) == [1], "granted at most the maximum QoS"
    client.send(Publish("q", b"", 0, retain=True))
    [disconnect] = client.closed_with()
    assert disconnect.reason_code == ReasonCode.RETAIN_NOT_SUPPORTED
    other = env.client(MQTT_5)
    other.connect("o")
    other.send(Publish("q", b"", 2, packet_id=1))
    assert other.closed_with()[0].reason_code == ReasonCode.QOS_NOT_SUPPORTED


# =============================================================================== topics


def test_dollar_topics_not_matched_by_leading_wildcards(env):
    """4.7.2 [MQTT-4.7.2-1]: '#' and '+/...' do not match topics starting with '$'."""
    everything = env.client()
    everything.connect("all")
    everything.subscribe("#", 1)
    plus = env.client()
    plus.connect("plus")
    plus.subscribe("+/info", 1)
    sys = env.client()
    sys.connect("sys")
    sys.subscribe("$SYS/#", 1)
    pub = env.client()
    pub.connect("p")
    pub.publish("$SYS/info", b"s", 1)
    assert everything.packets() == [] and plus.packets() == []
    assert [p.topic for p in sys.publishes()] == ["$SYS/info"]
    assert not everything.session.connection.consumers["#"].in_flight, "dropped deliveries are settled"


def test_topic_levels_with_dots_map_to_distinct_engine_topics(env):
    sub = env.client()
    sub.connect("s")
    sub.subscribe("a/+", 0)
    pub = env.client()
    pub.connect("p")
    pub.publish("a.b", b"dotted", 0)  # one level 'a.b': engine topic a/b
    pub.publish("a/b", b"two levels", 0)
    assert [p.payload for p in sub.publishes()] == [b"two levels"]
    assert {"topic://a/b", "topic://a.b"} <= set(env.broker.topics)


def test_invalid_topic_filter_in_subscribe(env):
    for version, code in ((MQTT_311, 0x80), (MQTT_5, ReasonCode.TOPIC_FILTER_INVALID)):
        client = env.client(version)
        client.connect("")
        assert client.subscribe("a/#/b", 1) == [code]
        assert client.subscribe("ok/+", 1) == [1]


def test_unsubscribe(env):
    client = env.client(MQTT_5)
    client.connect("u", properties=Properties(session_expiry_interval=60))
    client.subscribe("u/1", 1)
    pid = client.pid()
    client.send(Unsubscribe(pid, ["u/1", "never"]))
    unsuback = client.one(Unsuback)
    assert unsuback.reason_codes == [0, ReasonCode.NO_SUBSCRIPTION_EXISTED]  # 5.0 3.11.3
    assert "durable://u:mqtt:u/1" not in env.broker.durable


def test_v5_subscription_identifier_is_echoed(env):
    sub = env.client(MQTT_5)
    sub.connect("s")
    sub.subscribe("sid/#", 0, properties=Properties(subscription_identifiers=[42]))
    pub = env.client(MQTT_5)
    pub.connect("p")
    pub.publish("sid/x", b"", 0)
    [got] = sub.publishes()
    assert got.properties.subscription_identifiers == [42]  # 5.0 3.3.2.3.8


# =============================================================================== 5.0 features


def test_v5_message_expiry(env):
    """5.0 3.3.2.3.3: the message expires after the interval; a delivery carries what is left."""
    sub = env.client(MQTT_5)
    sub.connect("s", properties=Properties(session_expiry_interval=3600))
    sub.subscribe("exp/#", 1)
    sub.send(Disconnect())
    pub = env.client(MQTT_5)
    pub.connect("p")
    pub.publish("exp/short", b"short", 1, properties=Properties(message_expiry_interval=3))
    pub.publish("exp/long", b"long", 1, properties=Properties(message_expiry_interval=10))
    env.advance(4)
    back = env.client(MQTT_5)
    back.connect("s", clean=False, properties=Properties(session_expiry_interval=3600))
    [got] = back.publishes()
    assert got.payload == b"long" and got.properties.message_expiry_interval == 6


def test_v5_topic_alias(env):
    """5.0 3.3.2.3.4: an alias set with a topic may replace the topic; an alias above the
    server's maximum is a DISCONNECT 0x94; an alias never set is a protocol error."""
    sub = env.client(MQTT_5)
    sub.connect("s")
    sub.subscribe("alias/#")
    pub = env.client(MQTT_5)
    assert pub.connect("p").properties.topic_alias_maximum == 10
    pub.send(Publish("alias/one", b"1", properties=Properties(topic_alias=3)),
             Publish("", b"2", properties=Properties(topic_alias=3)))
    assert [(p.topic, p.payload) for p in sub.publishes()] == [("alias/one", b"1"), ("alias/one", b"2")]
    pub.send(Publish("alias/x", b"", properties=Properties(topic_alias=11)))
    assert pub.closed_with()[0].reason_code == ReasonCode.TOPIC_ALIAS_INVALID
    other = env.client(MQTT_5)
    other.connect("o")
    other.send(Publish("", b"", properties=Properties(topic_alias=4)))
    assert other.closed_with()[0].reason_code == ReasonCode.PROTOCOL_ERROR


def test_v5_properties_round_trip_and_map_to_the_engine(env):
    sub5 = env.client(MQTT_5)
    sub5.connect("s5")
    sub5.subscribe("props/#")
    sub3 = env.client(MQTT_311)
    sub3.connect("s3")
    sub3.subscribe("props/#")
    seen = []
    engine_conn = env.broker.connect()
    engine_conn.subscribe("spy", parse_destination("topic://props.>"), deliver=lambda c, r: seen.append(r.message))
    pub = env.client(MQTT_5)
    pub.connect("p")
    user = [("colour", "red"), ("JMSXGroupID", "g-7")]
    pub.publish("props/a", b"{}", 0, properties=Properties(
        content_type="application/json", response_topic="replies/p", correlation_data=b"\x01\x02",
        user_properties=user, payload_format_indicator=1))
    [message] = seen
    assert message.group_id == "g-7" and message.properties["colour"] == "red"  # groups across protocols
    assert message.content_type == "application/json" and message.reply_to == "topic://replies.p"
    [got] = sub5.publishes()
    p = got.properties
    assert p.content_type == "application/json" and p.response_topic == "replies/p"
    assert p.correlation_data == b"\x01\x02" and p.payload_format_indicator == 1
    assert p.user_properties == [("colour", "red"), ("JMSXGroupID", "g-7")]
    [plain] = sub3.publishes()
    assert plain.payload == b"{}" and plain.properties == Properties(), "3.1.1 has no properties"


def test_v5_no_local(env):
    """5.0 3.8.3.1: No Local: not sent the messages the same connection published."""
    me = env.client(MQTT_5)
    me.connect("me")
    me.subscribe("chat", 0, no_local=True)
    other = env.client(MQTT_5)
    other.connect("other")
    other.subscribe("chat", 0)
    me.publish("chat", b"mine", 0)
    other.publish("chat", b"theirs", 0)
    assert [p.payload for p in me.publishes()] == [b"theirs"]
    assert [p.payload for p in other.publishes()] == [b"mine", b"theirs"]


@BOTH
def test_shared_subscription_load_balances(env, version):
    """5.0 4.8.2: each message to one member of the share group; no retained replay."""
    env.client(version).connect("retainer")
    env.clients[-1].publish("jobs/x", b"old", 0, retain=True)
    members = []
    for i in range(2):
        member = env.client(version)
        member.connect(f"m{i}")
        member.subscribe("$share/workers/jobs/#", 0)
        assert member.after_suback == []
        members.append(member)
    pub = env.client(version)
    pub.connect("p")
    for i in range(6):
        pub.publish(f"jobs/{i}", b"%d" % i, 0)
    counts = [len(m.publishes()) for m in members]
    assert counts == [3, 3]


def test_v5_no_local_on_shared_subscription_is_a_protocol_error(env):
    client = env.client(MQTT_5)
    client.connect("c")
    client.send(Subscribe(1, [Subscription("$share/g/t", 0, no_local=True)]))
    assert client.closed_with()[-1].reason_code == ReasonCode.PROTOCOL_ERROR  # 5.0 3.8.3.1


# =============================================================================== packet size, bad input


@BOTH
def test_oversized_packet_closes(version):
    env = Env(mqtt_options={"max_packet_size": 100})
    client = env.client(version)
    client.connect("big")
    client.send(Publish("t", b"x" * 200, 0))
    got = client.closed_with()
    if version == MQTT_5:
        assert [p.reason_code for p in got] == [ReasonCode.PACKET_TOO_LARGE]
    else:
        assert got == []


def test_v5_client_maximum_packet_size_drops_big_messages(env):
    """5.0 3.1.2.11.4 [MQTT-3.1.2-25]: a message too big for the client is discarded, as if
    delivered."""
    sub = env.client(MQTT_5)
    sub.connect("s", properties=Properties(maximum_packet_size=64))
    sub.subscribe("mp", 1)
    pub = env.client(MQTT_5)
    pub.connect("p")
    pub.publish("mp", b"x" * 100, 1)
    pub.publish("mp", b"small", 1)
    [got] = sub.publishes()
    assert got.payload == b"small"
    sub.send(Puback(got.packet_id))
    assert not sub.session.connection.consumers["mp"].in_flight


@BOTH
def test_malformed_packet_after_connect(env, version):
    """3.1.1 4.8: a protocol violation closes; 5.0 4.13: DISCONNECT with the reason first."""
    client = env.client(version)
    client.connect("m")
    client.session.data_received(encode_raw(8, 0, b"\x00\x01"))  # SUBSCRIBE flags must be 0b0010
    got = client.closed_with()
    if version == MQTT_5:
        assert [p.reason_code for p in got] == [ReasonCode.MALFORMED_PACKET]
        assert got[0].properties.reason_string, "5.0: a reason string says what was wrong"
    else:
        assert got == []
    assert env.registry.get("m") is None and not env.broker.connections


def test_packets_before_connect_close(env):
    client = env.client()
    client.session.data_received(encode(Pingreq(), MQTT_311))
    assert client.transport.closed and client.packets() == []


def test_valid_packets_before_a_bad_one_are_processed(env):
    sub = env.client()
    sub.connect("s")
    sub.subscribe("v")
    pub = env.client()
    pub.connect("p")
    pub.session.data_received(encode(Publish("v", b"ok", 0), MQTT_311) + encode_raw(0, 0))
    assert [p.payload for p in sub.publishes()] == [b"ok"]
    assert pub.transport.closed


# =============================================================================== authorization, other protocols


def test_publish_and_subscribe_authorization():
    env = Env(security={"authorization": [{"topic": "open.>", "read": ["anonymous"], "write": ["anonymous"]}]})
    v5 = env.client(MQTT_5)
    v5.connect("a")
    v5.send(Publish("closed/x", b"", 1, packet_id=1))
    assert v5.one(Puback).reason_code == ReasonCode.NOT_AUTHORIZED
    assert v5.subscribe("closed/#", 1) == [ReasonCode.NOT_AUTHORIZED]
    assert v5.subscribe("open/#", 1) == [1]
    v311 = env.client(MQTT_311)
    v311.connect("b")
    v311.send(Publish("closed/x", b"", 1, packet_id=1))
    assert v311.one(Puback).reason_code == 0, "3.1.1 3.3.5: acknowledged (and dropped)"
    assert not v311.transport.closed
    assert v311.subscribe("closed/#", 1) == [0x80]


def test_messages_from_other_protocols(env):
    """A message with no MQTT QoS counts as QoS 2 when persistent, QoS 0 when not."""
    sub = env.client(MQTT_5)
    sub.connect("s")
    sub.subscribe("x/#", 1)
    stomp_like_send(env, "x.persistent", b"p", True, group_id="g", correlation_id="c-1", reply_to="/topic/r.s")
    stomp_like_send(env, "x.fleeting", b"f", False)
    got = sub.publishes()
    assert [(p.topic, p.qos) for p in got] == [("x/persistent", 1), ("x/fleeting", 0)]
    p = got[0].properties
    assert ("JMSXGroupID", "g") in p.user_properties
    assert p.correlation_data == b"c-1" and p.response_topic == "r/s"
    sub.send(Puback(got[0].packet_id))


def test_qos_property_lets_other_protocols_downgrade(env):
    seen = []
    conn = env.broker.connect()
    conn.subscribe("spy", parse_destination("topic://d.>"), deliver=lambda c, r: seen.append(r.message),
                   ack_mode=AckMode.AUTO)
    pub = env.client()
    pub.connect("p")
    pub.publish("d/0", b"", 0)
    pub.publish("d/2", b"", 2)
    assert [(m.properties[QOS_PROPERTY], m.persistent) for m in seen] == [(0, False), (2, True)]


# =============================================================================== robustness


def test_refused_connect_does_not_take_the_session_over():
    env = Env(security={"users": [{"name": "owner", "password": "pw"}]})
    owner = env.client(MQTT_5)
    owner.connect("dev", username="owner", password=b"pw")
    intruder = env.client(MQTT_5)
    assert intruder.connect("dev", username="owner", password=b"guess").reason_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    assert not owner.transport.closed and env.registry.get("dev").live is owner.session


def test_orphaned_durable_subscriptions_are_removed(env):
    """The registry is in memory: durable subscriptions of an MQTT session the broker no longer
    knows (e.g. after a restart) are removed when that client id starts a new session."""
    conn = env.broker.connect(client_id="orphan")
    conn.subscribe("x", parse_destination("topic://left.over"), deliver=lambda c, r: None,
                   durable_name="mqtt:left/over")
    conn.close()
    assert "durable://orphan:mqtt:left/over" in env.broker.durable
    client = env.client()
    assert not client.connect("orphan", clean=False).session_present
    assert "durable://orphan:mqtt:left/over" not in env.broker.durable


def test_v5_client_must_not_send_subscription_identifiers(env):
    client = env.client(MQTT_5)
    client.connect("c")
    client.send(Publish("t", b"", 0, properties=Properties(subscription_identifiers=[3])))
    assert client.closed_with()[0].reason_code == ReasonCode.PROTOCOL_ERROR  # 5.0 3.3.4


def test_producer_flow_control_pauses_reading_until_there_is_room():
    """A full destination (memory limit, producer flow control) stops reading from the
    publisher after acknowledging what was accepted; room resumes it and its queued packets."""
    env = Env(policy_entries=[{"topic": ">", "memory_limit": 1000}])
    sub = env.client(MQTT_5)
    sub.connect("slow", properties=Properties(receive_maximum=1))
    sub.subscribe("fc", 1)
    pub = env.client(MQTT_5)
    pub.connect("fast")
    for i in range(4):  # one in flight to the subscriber, three pending (~400 bytes each)
        pub.publish("fc", b"%d" % i + b"x" * 299, 1)
    assert pub.transport.paused, "the fourth message filled the topic: reading stops"
    pub.send(Publish("fc", b"late", 1, packet_id=99))
    assert pub.packets() == [], "not read while paused"
    delivered = sub.publishes()
    while True:
        for p in delivered:
            sub.send(Puback(p.packet_id))
        more = sub.publishes()
        if not more:
            break
        delivered = more
    assert not pub.transport.paused
    assert pub.one(Puback).packet_id == 99, "the packet read before the pause is processed now"
