"""End-to-end tests of the reference broker's MQTT front-end over real sockets.

paho-mqtt 2.x (MQTTv311 and MQTTv5) drives the ordinary paths; `RawMqtt` (mqtt_fixtures.py)
sends exact or malformed packets and keeps silent where paho would ping. Cross-protocol tests use
the raw STOMP client from conftest.py against the same in-process broker.

Section numbers are those of MQTT 3.1.1 and MQTT 5.0 (OASIS).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter

import pytest

from conformance.waiting import settle
from machinery.waiting import poll
from reference_broker.protocols.mqtt.codec import (
    Connack,
    Connect,
    Disconnect,
    Properties,
    Publish,
    ReasonCode,
    Subscribe,
    Subscription,
    encode,
    encode_raw,
)
from tests.reference_broker.conftest import REPO_ROOT, RawStomp
from tests.reference_broker.mqtt_fixtures import (  # noqa: F401 - fixtures
    MQTT_5,
    MQTT_311,
    TIMEOUT,
    PacketTypes,
    mqtt_address,
    mqtt_broker,
    mqtt_broker_factory,
    paho_factory,
    props,
    raw_mqtt,
    unique,
)

pytestmark = pytest.mark.timeout(60)

VERSIONS = pytest.mark.parametrize("version", [MQTT_311, MQTT_5], ids=["v311", "v5"])


def persistent_connect(version: int) -> dict:
    """connect() arguments for a session that outlives the connection."""
    if version == MQTT_5:
        return {"clean_start": False, "properties": props(PacketTypes.CONNECT, SessionExpiryInterval=3600)}
    return {}


def make(paho_factory, broker, version, client_id="", persistent=False, **kwargs):
    if version == MQTT_311 and persistent:
        kwargs["clean_session"] = False
    return paho_factory(mqtt_address(broker), version, client_id, **kwargs)


# =============================================================================== round trips


@VERSIONS
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_round_trip_each_qos(mqtt_broker, paho_factory, version, qos):
    """4.3: QoS 0/1/2 flows both ways complete with paho on both protocol versions."""
    sub = make(paho_factory, mqtt_broker, version, unique("sub"))
    sub.connect()
    topic = unique("rt")
    granted = sub.subscribe(topic, qos)
    assert [int(getattr(g, "value", g)) for g in granted] == [qos]
    pub = make(paho_factory, mqtt_broker, version, unique("pub"))
    pub.connect()
    for i in range(3):
        pub.publish(topic, b"m%d" % i, qos)
    got = sub.get_n(3)
    assert [(m.topic, m.payload, m.qos) for m in got] == [(topic, b"m%d" % i, qos) for i in range(3)]
    sub.assert_no_message(0.2)


@VERSIONS
def test_wildcards_and_retained(mqtt_broker, paho_factory, version):
    """4.7 wildcards; 3.3.1.3 retained messages (RETAIN=1 only when sent for a new
    subscription)."""
    base = unique("home")
    pub = make(paho_factory, mqtt_broker, version, unique("pub"))
    pub.connect()
    pub.publish(f"{base}/kitchen/temp", b"21", 1, retain=True)
    pub.publish(f"{base}/hall/temp", b"19", 1, retain=True)
    sub = make(paho_factory, mqtt_broker, version, unique("sub"))
    sub.connect()
    sub.subscribe(f"{base}/+/temp", 1)
    retained = sorted((m.topic, m.payload, m.retain) for m in sub.get_n(2))
    assert retained == [(f"{base}/hall/temp", b"19", True), (f"{base}/kitchen/temp", b"21", True)]
    everything = make(paho_factory, mqtt_broker, version, unique("all"))
    everything.connect()
    everything.subscribe(f"{base}/#", 0)
    assert len(everything.get_n(2)) == 2
    pub.publish(f"{base}/kitchen/temp", b"22", 1)
    live = sub.get()
    assert (live.payload, live.retain) == (b"22", False)
    assert everything.get().payload == b"22"
    pub.publish(f"{base}/hall/temp", b"", 1, retain=True)  # clears the retained message
    assert sub.get().payload == b""
    late = make(paho_factory, mqtt_broker, version, unique("late"))
    late.connect()
    late.subscribe(f"{base}/#", 1)
    assert [(m.topic, m.payload) for m in late.get_n(1)] == [(f"{base}/kitchen/temp", b"21")]
    late.assert_no_message(0.2)


# =============================================================================== will, keep alive, takeover


@VERSIONS
def test_will_on_abnormal_close_only(mqtt_broker, paho_factory, version):
    """3.1.2.5: the will is published when the socket closes without DISCONNECT; a DISCONNECT
    discards it."""
    topic = unique("will")
    watcher = make(paho_factory, mqtt_broker, version, unique("w"))
    watcher.connect()
    watcher.subscribe(f"{topic}/#", 1)
    crasher = make(paho_factory, mqtt_broker, version, unique("crash"))
    crasher.connect(will=(f"{topic}/crash", b"offline", 1, False))
    crasher.kill()
    msg = watcher.get()
    assert (msg.topic, msg.payload, msg.qos) == (f"{topic}/crash", b"offline", 1)
    polite = make(paho_factory, mqtt_broker, version, unique("polite"))
    polite.connect(will=(f"{topic}/polite", b"offline", 1, False))
    polite.disconnect()
    watcher.assert_no_message(0.4)


@VERSIONS
def test_keep_alive_timeout_closes(mqtt_broker, raw_mqtt, version):
    """3.1.2.10: silence for 1.5 x keep alive closes the connection (5.0: DISCONNECT 0x8D)."""
    client = raw_mqtt(mqtt_address(mqtt_broker), version)
    assert client.connect(unique("ka"), keep_alive=1).reason_code == 0
    started = time.monotonic()
    packets = client.wait_closed(timeout=4)
    elapsed = time.monotonic() - started
    assert elapsed >= 1.4 and elapsed < 3.0, elapsed
    if version == MQTT_5:
        assert [p.reason_code for p in packets] == [ReasonCode.KEEP_ALIVE_TIMEOUT]
    else:
        assert packets == []


@VERSIONS
def test_takeover(mqtt_broker, paho_factory, raw_mqtt, version):
    """3.1.4: a new connection with the same client id takes the session over; the old one is
    closed (5.0: DISCONNECT 0x8E); the session's subscriptions carry on."""
    client_id = unique("dev")
    old = raw_mqtt(mqtt_address(mqtt_broker), version)
    expiry = {"properties": Properties(session_expiry_interval=3600)} if version == MQTT_5 else {}
    assert old.connect(client_id, clean=False, **expiry).reason_code == 0
    topic = unique("tk")
    old.send(Subscribe(1, [Subscription(topic, 1)]))
    old.read()  # SUBACK
    new = make(paho_factory, mqtt_broker, version, client_id, persistent=True)
    flags, _, _ = new.connect(**persistent_connect(version))
    packets = old.wait_closed()
    if version == MQTT_5:
        assert [p.reason_code for p in packets] == [ReasonCode.SESSION_TAKEN_OVER]
    else:
        assert packets == []
    assert flags.session_present, "the session was taken over, not replaced"
    pub = make(paho_factory, mqtt_broker, version, unique("pub"))
    pub.connect()
    pub.publish(topic, b"after takeover", 1)
    assert new.get().payload == b"after takeover"


# =============================================================================== sessions


@VERSIONS
def test_persistent_session_queues_offline_and_clean_session_does_not(mqtt_broker, paho_factory, version):
    """3.1.2.4: a persistent session keeps subscriptions and queues QoS 1/2 messages while
    offline (not QoS 0); a clean session starts empty."""
    topic = unique("offline")
    client_id = unique("p")
    sub = make(paho_factory, mqtt_broker, version, client_id, persistent=True)
    sub.connect(**persistent_connect(version))
    sub.subscribe(topic, 2)
    sub.disconnect()
    pub = make(paho_factory, mqtt_broker, version, unique("pub"))
    pub.connect()
    pub.publish(topic, b"q0", 0)
    pub.publish(topic, b"q1", 1)
    pub.publish(topic, b"q2", 2)
    back = make(paho_factory, mqtt_broker, version, client_id, persistent=True)
    flags, _, _ = back.connect(**persistent_connect(version))
    assert flags.session_present
    assert [(m.payload, m.qos) for m in back.get_n(2)] == [(b"q1", 1), (b"q2", 2)]
    back.assert_no_message(0.2)
    back.disconnect()
    clean = make(paho_factory, mqtt_broker, version, client_id)
    flags, _, _ = clean.connect()
    assert not flags.session_present
    pub.publish(topic, b"after clean", 1)
    clean.assert_no_message(0.3)


@VERSIONS
def test_unacknowledged_messages_come_back_with_dup(mqtt_broker, paho_factory, version):
    """4.4: after a reconnect to the session, unacknowledged PUBLISHes are resent with DUP=1
    and their original packet identifier."""
    topic = unique("dup")
    client_id = unique("d")
    first = make(paho_factory, mqtt_broker, version, client_id, persistent=True, manual_ack=True)
    first.connect(**persistent_connect(version))
    first.subscribe(topic, 1)
    pub = make(paho_factory, mqtt_broker, version, unique("pub"))
    pub.connect()
    pub.publish(topic, b"unacked", 1)
    original = first.get()
    assert not original.dup
    first.kill()  # never acknowledged
    second = make(paho_factory, mqtt_broker, version, client_id, persistent=True)
    flags, _, _ = second.connect(**persistent_connect(version))
    assert flags.session_present
    again = second.get()
    assert (again.payload, again.dup, again.mid) == (b"unacked", True, original.mid)
    second.sync()
    second.assert_no_message(0.2)
    stats = mqtt_broker.stats()
    durable = [s for s in stats["subscriptions"] if s.get("client_id") == client_id]
    assert durable and durable[0]["in_flight"] == 0 and durable[0]["pending"] == 0, "acked after resume"


# =============================================================================== 5.0 features


def test_v5_shared_subscription_load_balancing(mqtt_broker, paho_factory):
    """5.0 4.8.2: members of a share group each get a part of the messages, none twice."""
    topic = unique("jobs")
    members = []
    for i in range(3):
        member = make(paho_factory, mqtt_broker, MQTT_5, unique(f"m{i}"))
        member.connect()
        member.subscribe(f"$share/workers/{topic}", 1)
        members.append(member)
    watcher = make(paho_factory, mqtt_broker, MQTT_5, unique("watch"))
    watcher.connect()
    watcher.subscribe(topic, 1)
    pub = make(paho_factory, mqtt_broker, MQTT_5, unique("pub"))
    pub.connect()
    for i in range(30):
        pub.publish(topic, b"%d" % i, 1)
    assert len(watcher.get_n(30)) == 30, "an ordinary subscription still gets everything"
    per_member = [[] for _ in members]

    def collect() -> int:
        for got, member in zip(per_member, members):
            while not member.messages.empty():
                got.append(member.messages.get().payload)
        return sum(map(len, per_member))

    poll(collect, lambda n: n >= 30, timeout=TIMEOUT, interval=0.01)
    settle()  # room for a duplicate to show up
    collect()
    received = Counter(payload for got in per_member for payload in got)
    assert sorted(received) == sorted(b"%d" % i for i in range(30)), "every message, once"
    assert set(received.values()) == {1}
    assert [len(got) for got in per_member] == [10, 10, 10], "round robin among the members"


def test_v5_no_local(mqtt_broker, paho_factory):
    topic = unique("chat")
    me = make(paho_factory, mqtt_broker, MQTT_5, unique("me"))
    me.connect()
    me.subscribe(topic, 1, noLocal=True)
    other = make(paho_factory, mqtt_broker, MQTT_5, unique("other"))
    other.connect()
    me.publish(topic, b"from me", 1)
    other.publish(topic, b"from other", 1)
    assert me.get().payload == b"from other"
    me.assert_no_message(0.2)


def test_v5_topic_alias(mqtt_broker, paho_factory):
    """5.0 3.3.2.3.4: an alias set with a topic name stands for it afterwards."""
    topic = unique("alias")
    sub = make(paho_factory, mqtt_broker, MQTT_5, unique("sub"))
    sub.connect()
    sub.subscribe(topic, 1)
    pub = make(paho_factory, mqtt_broker, MQTT_5, unique("pub"))
    _, _, connack = pub.connect()
    assert connack.TopicAliasMaximum == 10
    pub.publish(topic, b"named", 1, properties=props(TopicAlias=1))
    pub.publish("", b"aliased", 1, properties=props(TopicAlias=1))
    assert [(m.topic, m.payload) for m in sub.get_n(2)] == [(topic, b"named"), (topic, b"aliased")]


def test_v5_bad_topic_alias_disconnects(mqtt_broker, raw_mqtt, paho_factory):
    client = raw_mqtt(mqtt_address(mqtt_broker), MQTT_5)
    client.connect(unique("bad"))
    client.send(Publish("x", b"", 0, properties=Properties(topic_alias=11)))
    assert [p.reason_code for p in client.wait_closed()] == [ReasonCode.TOPIC_ALIAS_INVALID]


def test_v5_user_properties_and_request_response(mqtt_broker, paho_factory):
    topic = unique("req")
    sub = make(paho_factory, mqtt_broker, MQTT_5, unique("sub"))
    sub.connect()
    sub.subscribe(topic, 1)
    pub = make(paho_factory, mqtt_broker, MQTT_5, unique("pub"))
    pub.connect()
    p = props(ResponseTopic=f"{topic}/reply", CorrelationData=b"\x00\xffid", ContentType="text/plain")
    p.UserProperty = ("region", "eu")
    p.UserProperty = ("JMSXGroupID", "order-7")
    pub.publish(topic, b"ask", 1, properties=p)
    msg = sub.get()
    got = msg.properties
    assert got.UserProperty == [("region", "eu"), ("JMSXGroupID", "order-7")]
    assert got.ResponseTopic == f"{topic}/reply" and got.CorrelationData == b"\x00\xffid"
    assert got.ContentType == "text/plain"


def test_v5_message_expiry(mqtt_broker, paho_factory):
    """5.0 3.3.2.3.3: an expired message is not delivered; the rest carry the remaining time."""
    topic = unique("exp")
    client_id = unique("e")
    sub = make(paho_factory, mqtt_broker, MQTT_5, client_id)
    sub.connect(**persistent_connect(MQTT_5))
    sub.subscribe(topic, 1)
    sub.disconnect()
    pub = make(paho_factory, mqtt_broker, MQTT_5, unique("pub"))
    pub.connect()
    pub.publish(topic, b"short", 1, properties=props(MessageExpiryInterval=1))
    pub.publish(topic, b"long", 1, properties=props(MessageExpiryInterval=100))
    time.sleep(1.2)
    back = make(paho_factory, mqtt_broker, MQTT_5, client_id)
    back.connect(**persistent_connect(MQTT_5))
    msg = back.get()
    assert msg.payload == b"long" and 97 <= msg.properties.MessageExpiryInterval <= 99
    back.assert_no_message(0.2)


def test_v5_bad_credentials(mqtt_broker_factory, paho_factory):
    broker = mqtt_broker_factory(security={"users": [{"name": "u", "password": "p"}]})
    client = paho_factory(mqtt_address(broker), MQTT_5, unique("c"))
    client.client.username_pw_set("u", "nope")
    _, rc, _ = client.connect(expect_success=False)
    assert rc.value == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    good = paho_factory(mqtt_address(broker), MQTT_311, unique("g"))
    good.client.username_pw_set("u", "p")
    good.connect()


# =============================================================================== bad input


@VERSIONS
@pytest.mark.parametrize(
    "bad, reason",
    [
        (encode_raw(0, 0), ReasonCode.MALFORMED_PACKET),  # reserved packet type
        (encode_raw(8, 0, b"\x00\x01\x00\x01a\x00"), ReasonCode.MALFORMED_PACKET),  # SUBSCRIBE flags
        (encode_raw(3, 0, b"\x00\x03a/", remaining_length=5), None),  # truncated, then garbage
    ],
    ids=["reserved-type", "bad-flags", "garbage"],
)
def test_bad_packets_end_only_that_connection(mqtt_broker, raw_mqtt, paho_factory, version, bad, reason):
    """3.1.1 4.8: a protocol violation closes the connection; 5.0 4.13: with DISCONNECT and a
    reason code first. Other clients carry on."""
    survivor = make(paho_factory, mqtt_broker, version, unique("ok"))
    survivor.connect()
    topic = unique("alive")
    survivor.subscribe(topic, 1)
    client = raw_mqtt(mqtt_address(mqtt_broker), version)
    assert client.connect(unique("bad")).reason_code == 0
    if reason is None:  # a length claiming more than comes, then a bad next packet start
        client.send_bytes(bad + b"\xff" * 8)
        reason = ReasonCode.MALFORMED_PACKET
    else:
        client.send_bytes(bad)
    packets = client.wait_closed()
    if version == MQTT_5:
        assert [p.reason_code for p in packets] == [reason], packets
        assert isinstance(packets[0], Disconnect)
    else:
        assert packets == []
    survivor.publish(topic, b"still here", 1)
    assert survivor.get().payload == b"still here"


def test_bad_protocol_level_gets_connack_1(mqtt_broker, raw_mqtt):
    """3.1.1 3.1.2.2: CONNACK return code 1 (unacceptable protocol version), then close."""
    client = raw_mqtt(mqtt_address(mqtt_broker), MQTT_311)
    client.send_bytes(encode(Connect(protocol_level=3, client_id="x"), MQTT_311))
    assert client.wait_closed() == [Connack(False, 1)]


def test_oversized_packet(mqtt_broker_factory, raw_mqtt):
    broker = mqtt_broker_factory(mqtt_options={"max_packet_size": 1024})
    client = raw_mqtt(mqtt_address(broker), MQTT_5)
    assert client.connect(unique("big")).properties.maximum_packet_size == 1024
    client.send(Publish("t", b"x" * 2000, 0))
    assert [p.reason_code for p in client.wait_closed()] == [ReasonCode.PACKET_TOO_LARGE]


# =============================================================================== other protocols


def test_mqtt_publish_reaches_stomp_subscriber_with_user_properties(mqtt_broker, paho_factory):
    """Cross-protocol: MQTT `a/b` is the engine (and STOMP) topic `a.b`; user properties arrive
    as STOMP headers and JMSXGroupID as the message's group."""
    level = unique("x").replace("/", "_")
    with RawStomp(mqtt_broker.address) as stomp:
        assert stomp.connect("1.2").command == "CONNECTED"
        stomp.send_frame("SUBSCRIBE", [("id", "s"), ("destination", f"/topic/{level}.b"), ("receipt", "r")])
        stomp.expect("RECEIPT")
        pub = make(paho_factory, mqtt_broker, MQTT_5, unique("pub"))
        pub.connect()
        p = props()
        p.UserProperty = ("colour", "red")
        p.UserProperty = ("JMSXGroupID", "g1")
        pub.publish(f"{level}/b", b"to stomp", 1, properties=p)
        frame = stomp.expect("MESSAGE")
        assert frame.body == b"to stomp"
        assert frame.get("destination") == f"/topic/{level}.b"
        assert frame.get("colour") == "red" and frame.get("JMSXGroupID") == "g1"
        assert frame.get("ActiveMQ.MQTT.QoS") == "1" and frame.get("persistent") == "true"


@VERSIONS
def test_stomp_send_reaches_mqtt_subscriber(mqtt_broker, paho_factory, version):
    level = unique("y").replace("/", "_")
    sub = make(paho_factory, mqtt_broker, version, unique("sub"))
    sub.connect()
    sub.subscribe(f"{level}/b", 1)
    with RawStomp(mqtt_broker.address) as stomp:
        stomp.connect("1.2")
        stomp.send_frame("SEND", [("destination", f"/topic/{level}.b"), ("persistent", "true"), ("colour", "blue"),
                                  ("receipt", "r")], b"from stomp", content_length=True)
        stomp.expect("RECEIPT")
    msg = sub.get()
    assert (msg.topic, msg.payload, msg.qos) == (f"{level}/b", b"from stomp", 1)
    if version == MQTT_5:
        assert ("colour", "blue") in msg.properties.UserProperty


# =============================================================================== command line


def test_command_line_mqtt_listener(tmp_path, paho_factory):
    """`python -m reference_broker --mqtt HOST:PORT` listens and names it on the ready line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "reference_broker", "--stomp", "127.0.0.1:0", "--mqtt", "127.0.0.1:0"],
        cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 15
        ready = None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if "ready:" in line:
                ready = line
                break
        assert ready, "no ready line"
        match = re.search(r"mqtt=([\d.]+):(\d+)", ready)
        assert match, ready
        client = paho_factory((match.group(1), int(match.group(2))), MQTT_5, unique("cli"))
        client.connect()
        topic = unique("cli")
        client.subscribe(topic, 1)
        client.publish(topic, b"hi", 1)
        assert client.get().payload == b"hi"
    finally:
        proc.terminate()
        proc.wait(10)
