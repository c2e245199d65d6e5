"""What one client connection may hold, and memory no consumer drains (issue 20, items 4 and 5).

* Sends inside a transaction are charged to the broker's memory limit until COMMIT or ABORT; a
  full broker refuses them (a transaction cannot drain before its own COMMIT, so blocking the
  producer would wait forever).
* Retained messages are charged too; a new subscription gets them as its transport takes them.
* `connection_limits`: consumers, topic subscriptions, unacknowledged deliveries, open
  transactions and their size, retained messages waiting for new subscriptions; MQTT's inbound
  QoS 2 ids are bounded by `mqtt_options.receive_maximum`. Past a limit the client gets its
  protocol's error and the broker carries on.

Section numbers are MQTT 3.1.1 / 5.0 (OASIS), STOMP 1.2 headings and AMQP 1.0 sections.
"""

from __future__ import annotations

import socket
import time

import pytest
from proton import Message as AmqpMessage
from proton.utils import LinkDetached

from machinery.waiting import poll
from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.errors import ResourceLimitError
from reference_broker.engine.message import Message
from reference_broker.engine.names import parse_destination
from reference_broker.listeners.batched import WRITE_BUFFER_HIGH
from reference_broker.protocols.mqtt.codec import (
    MQTT_5,
    MQTT_311,
    Connect,
    MqttParser,
    Puback,
    Publish,
    Pubrec,
    ReasonCode,
    Subscribe,
    Subscription,
    Will,
    encode,
)
from tests.reference_broker.amqp_fixtures import (  # noqa: F401 - fixtures are used by name
    amqp_broker,
    amqp_broker_factory,
    amqp_connect,
    wait_until,
)
from tests.reference_broker.conftest import TIMEOUT, assert_broker_works
from tests.reference_broker.mqtt_fixtures import mqtt_broker_factory  # noqa: F401 - fixture
from tests.reference_broker.test_mqtt_session import BOTH, Env, FakeTransport

pytestmark = pytest.mark.timeout(120)

BODY = b"x" * 1024


def stomp_send(client, dest: str, body: bytes = BODY, **headers: str) -> None:
    client.send_frame("SEND", [("destination", dest), *headers.items()], body, content_length=True)


def engine_broker(**config) -> Broker:
    return Broker(build_config({"stomp": None, **config}))


def message(conn, dest, body: bytes = BODY, **fields) -> Message:
    return Message(conn.new_message_id(), dest.canonical, body, **fields)


# =============================================================================== item 4: transactions


def test_uncommitted_transaction_sends_are_refused_past_the_memory_limit(broker_factory, raw_factory):
    """The attack at small scale: BEGIN, then 1 KB sends never committed, under a 64 KB limit.
    They used to be receipted forever with the usage counter at 0."""
    limit = 64 * 1024
    broker = broker_factory(system_usage={"memory_limit": limit})
    attacker = raw_factory(broker.address)
    attacker.connect()
    attacker.send_frame("BEGIN", [("transaction", "tx1"), ("receipt", "b")])
    attacker.expect("RECEIPT")
    for i in range(20):
        stomp_send(attacker, "/queue/tx.attack", transaction="tx1", receipt=f"r{i}")
        attacker.expect("RECEIPT")
    memory = broker.stats()["memory"]
    assert memory["used"] >= 20 * len(BODY), (
        f"issue 20 item 4: 20 uncommitted 1 KB sends must count against the memory limit, usage is {memory}")
    refused_at = None
    for i in range(20, 1000):  # 1 MB: sixteen times the limit
        stomp_send(attacker, "/queue/tx.attack", transaction="tx1", receipt=f"r{i}")
        frame = attacker.read_frame()
        if frame.command == "ERROR":
            refused_at = i
            assert "memory limit" in frame.get("message"), frame
            break
        assert frame.command == "RECEIPT", frame
    assert refused_at is not None, "issue 20 item 4: 1000 uncommitted 1 KB sends accepted under a 64 KB limit"
    size = len(BODY) + 64  # Message.size: body plus the header estimate
    assert refused_at * size <= limit + size, (
        f"issue 20 item 4: the refusal came after {refused_at} sends, past the {limit} byte limit")
    attacker.wait_closed()
    # The ERROR closed the connection, which aborted the transaction: its bytes are released.
    assert poll(lambda: broker.stats()["memory"]["used"], lambda used: used == 0, timeout=TIMEOUT) == 0
    assert broker.queue_stats("/queue/tx.attack") is None or broker.queue_stats("/queue/tx.attack")["enqueued"] == 0
    assert_broker_works(broker.address)


def test_transaction_buffer_is_counted_until_commit_or_abort():
    broker = engine_broker()
    conn = broker.connect()
    dest = parse_destination("queue://tx.count")
    conn.begin("t1")
    sent = [message(conn, dest) for _ in range(3)]
    for m in sent:
        conn.send(dest, m, "t1")
    total = sum(m.size for m in sent)
    assert broker.transaction_usage.used == total and broker.system_usage.used == total
    conn.commit("t1")
    assert broker.transaction_usage.used == 0, "COMMIT releases the transaction's charge"
    assert broker.queue(dest).usage.used == total, "the committed sends are now pending on the queue"
    conn.begin("t2")
    conn.send(dest, message(conn, dest), "t2")
    assert broker.transaction_usage.used > 0
    conn.abort("t2")
    assert broker.transaction_usage.used == 0, "ABORT releases the transaction's charge"
    assert broker.system_usage.used == total
    conn.begin("t3")
    conn.send(dest, message(conn, dest), "t3")
    conn.close()
    assert broker.transaction_usage.used == 0, "closing a connection aborts and releases its transactions"


def test_transacted_send_refused_when_the_broker_is_full_of_pending_messages():
    """A full broker refuses a transacted send instead of pausing its producer."""
    broker = engine_broker(system_usage={"memory_limit": 2000})
    conn = broker.connect()
    dest = parse_destination("queue://full")
    conn.send(dest, message(conn, dest, b"y" * 1500))
    conn.begin("t")
    with pytest.raises(ResourceLimitError, match="memory limit"):
        conn.send(dest, message(conn, dest), "t")


@pytest.mark.parametrize("limit, frames, expected", [
    ({"max_transaction_messages": 3}, ["SEND"] * 4, "max_transaction_messages"),
    ({"max_transaction_bytes": 2000}, ["SEND"] * 2, "max_transaction_bytes"),
    ({"max_transactions": 2}, ["BEGIN"] * 2, "max_transactions"),
], ids=["messages", "bytes", "open"])
def test_stomp_transaction_limits(broker_factory, raw_factory, limit, frames, expected):
    broker = broker_factory(connection_limits=limit)
    client = raw_factory(broker.address)
    client.connect()
    client.send_frame("BEGIN", [("transaction", "t0"), ("receipt", "b0")])
    client.expect("RECEIPT")
    for i, command in enumerate(frames):
        if command == "SEND":
            stomp_send(client, "/queue/tx.limit", transaction="t0", receipt=f"r{i}")
        else:
            client.send_frame("BEGIN", [("transaction", f"t{i + 1}"), ("receipt", f"r{i}")])
        if i < len(frames) - 1:
            client.expect("RECEIPT")
    error = client.expect_error_and_close()
    assert expected in error.get("message"), f"STOMP 1.2 ERROR: the message names the limit: {error!r}"
    assert_broker_works(broker.address)


# =============================================================================== item 5: retained


def test_retained_messages_count_against_the_memory_limit():
    env = Env(system_usage={"memory_limit": 4096})
    pub = env.client(MQTT_5)
    pub.connect("p")
    pub.publish("r/1", BODY, qos=1, retain=True)
    broker = env.broker
    assert broker.retained_usage.used == broker.retained["topic://r.1"].size, (
        "issue 20 item 5: a retained message is counted against the memory limit")
    pub.publish("r/1", b"smaller", qos=1, retain=True)
    assert broker.retained_usage.used == broker.retained["topic://r.1"].size, "a replaced one is released"
    pub.publish("r/1", b"", qos=1, retain=True)
    assert broker.retained_usage.used == 0 and broker.system_usage.used == 0, "3.3.1.3: an empty payload clears it"
    for i in range(3):
        pub.publish(f"r/{i}", BODY, qos=1, retain=True)  # 3 x 1088 bytes: no room for a fourth
    pid = pub.pid()
    pub.send(Publish("r/9", BODY, 1, retain=True, packet_id=pid))
    ack = pub.one(Puback)
    assert (ack.packet_id, ack.reason_code) == (pid, ReasonCode.QUOTA_EXCEEDED), (
        f"5.0 3.4.2.1: a retained message past the memory limit is refused with Quota exceeded: {ack!r}")
    assert "topic://r.9" not in broker.retained
    pub.publish("live/1", b"not retained", qos=1)  # ordinary sends are flow-controlled, not refused


def test_retained_message_past_the_memory_limit_closes_a_311_connection():
    env = Env(system_usage={"memory_limit": 2048})
    pub = env.client(MQTT_311)
    pub.connect("p")
    pub.publish("r/0", BODY, qos=1, retain=True)
    pub.send(Publish("r/9", BODY, 1, retain=True, packet_id=pub.pid()))
    assert pub.closed_with() == [], "3.1.1 3.3.5: no way to refuse a QoS 1 PUBLISH but closing"
    assert "topic://r.9" not in env.broker.retained


class BackPressureTransport(FakeTransport):
    """A transport whose peer takes `room` PUBLISH packets, then stops reading."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room
        self.session = None
        self.writes = 0

    def write(self, data: bytes) -> None:
        super().write(data)
        if data[0] >> 4 == 3:  # PUBLISH
            self.writes += 1
            if self.writes >= self.room:
                self.session.set_writable(False)


@BOTH
def test_retained_messages_follow_the_subscribers_back_pressure(version):
    """issue 20 item 5: a new `#` subscriber gets retained messages as its transport takes them."""
    env = Env()
    pub = env.client(version)
    pub.connect("p")
    for i in range(10):
        pub.publish(f"r/{i}", b"%d" % i, qos=1, retain=True)
    sub = env.client(version)
    transport = BackPressureTransport(room=3)
    sub.transport = transport
    sub.session.transport = transport
    transport.session = sub.session
    sub.connect("s")
    assert sub.subscribe("#") == [0]
    first = sub.after_suback
    assert [p.payload for p in first] == [b"0", b"1", b"2"], (
        f"issue 20 item 5: only what the transport took is sent, got {len(first)} packets")
    assert sub.session.connection.pending_retained == 7
    got = list(first)
    while len(got) < 10:
        transport.room += 3
        sub.session.set_writable(True)
        more = sub.publishes()
        assert more, "writable again: the replay goes on"
        got += more
    assert [p.payload for p in got] == [b"%d" % i for i in range(10)] and all(p.retain for p in got)
    assert sub.session.connection.pending_retained == 0


def _queued_bytes(server) -> dict[str, int]:
    """Bytes each MQTT connection's session has written that its peer has not read."""
    out = {}
    for protocol in server._connections:
        session = protocol.session
        if getattr(session, "client_id", None) and session.client_id.startswith("idle-"):
            out[session.client_id] = sum(map(len, protocol._out)) + (
                protocol.transport.get_write_buffer_size() if protocol.transport is not None else 0)
    return out


def _replay_stalled(server, subscribers: int) -> bool:
    """Every idle subscriber has subscribed and either had all its retained messages, or its
    transport is full (asyncio has paused writing to it)."""
    seen = 0
    for protocol in server._connections:
        session = protocol.session
        if not (getattr(session, "client_id", None) or "").startswith("idle-"):
            continue
        conn = session.connection
        if conn is None or "#" not in conn.consumers:
            return False
        transport = protocol.transport
        if getattr(conn, "replays", None) and (transport is None or transport.get_write_buffer_size() <= WRITE_BUFFER_HIGH):
            return False  # still taking retained messages: its transport has room
        seen += 1
    return seen == subscribers


@pytest.mark.slow
def test_ten_idle_hash_subscribers_do_not_buffer_every_retained_message(mqtt_broker_factory):
    """The attack at small scale: 10,000 retained 1 KB messages (11 MB) and ten `#` subscribers
    that never read, under a 16 MB limit. Each used to get all 11 MB queued at once."""
    limit = 16 * 1024 * 1024
    running = mqtt_broker_factory(system_usage={"memory_limit": limit})
    address = tuple(running.server.mqtt_address)
    count = 10_000
    with socket.create_connection(address, timeout=TIMEOUT) as pub:
        pub.sendall(encode(Connect(protocol_level=MQTT_311, client_id="pub", clean_start=True), MQTT_311))
        pub.sendall(b"".join(encode(Publish(f"ret/{i}", BODY, 0, retain=True), MQTT_311) for i in range(count)))
        pub.sendall(encode(Subscribe(1, [Subscription("none", 0)]), MQTT_311))  # SUBACK: all were read
        buffered = b""
        while len(buffered) < 4 + 5:
            buffered += pub.recv(64)
    assert poll(lambda: len(running.call(lambda: running.server.broker.retained)), lambda n: n == count,
                timeout=TIMEOUT) == count
    memory = running.stats()["memory"]
    assert memory["used"] >= count * len(BODY), (
        f"issue 20 item 5: {count} retained 1 KB messages must be counted against the memory limit: {memory}")
    idle = []
    try:
        for n in range(10):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a peer that reads nothing
            sock.settimeout(TIMEOUT)
            sock.connect(address)
            sock.sendall(encode(Connect(protocol_level=MQTT_311, client_id=f"idle-{n}", clean_start=True), MQTT_311))
            sock.sendall(encode(Subscribe(1, [Subscription("#", 0)]), MQTT_311))
            idle.append(sock)
        assert poll(lambda: running.call(lambda: _replay_stalled(running.server, 10)), bool, timeout=30), (
            "the idle subscribers never got as far as their transports allow")
        queued = running.call(lambda: _queued_bytes(running.server))
        assert len(queued) == 10, queued
        bound = 2 * WRITE_BUFFER_HIGH
        worst = max(queued.values())
        print(f"\nretained replay: bytes queued per idle `#` subscriber {sorted(queued.values())}, bound {bound}")
        assert worst <= bound, (
            f"issue 20 item 5: an idle subscriber has {worst} bytes queued in the broker (bound {bound}): "
            "retained messages must follow the socket's back-pressure")
        memory = running.stats()["memory"]
        assert memory["used"] <= limit, memory
        # A subscriber that does read gets every retained message, paced or not.
        with socket.create_connection(address, timeout=TIMEOUT) as reader:
            reader.sendall(encode(Connect(protocol_level=MQTT_311, client_id="reader", clean_start=True), MQTT_311))
            reader.sendall(encode(Subscribe(1, [Subscription("ret/#", 0)]), MQTT_311))
            parser = MqttParser(protocol_level=MQTT_311, max_packet_size=1 << 20)
            publishes = 0
            deadline = time.monotonic() + 30
            while publishes < count and time.monotonic() < deadline:
                data = reader.recv(1 << 16)
                if not data:
                    break
                publishes += sum(isinstance(p, Publish) for p in parser.feed(data))
            assert publishes == count, f"a reading subscriber got {publishes} of {count} retained messages"
    finally:
        for sock in idle:
            sock.close()


@BOTH
def test_mqtt_max_pending_retained_refuses_the_subscribe(version):
    env = Env(connection_limits={"max_pending_retained": 3})
    pub = env.client(version)
    pub.connect("p")
    for i in range(5):
        pub.publish(f"r/{i}", b"%d" % i, qos=1, retain=True)
    sub = env.client(version)
    sub.connect("s")
    expected = ReasonCode.QUOTA_EXCEEDED if version == MQTT_5 else 0x80
    assert sub.subscribe("#") == [expected], (
        "5.0 3.9.3 (0x97 Quota exceeded) / 3.1.1 3.9.3 (0x80): a subscription matching more "
        "retained messages than max_pending_retained is refused")
    assert sub.subscribe("r/1") == [0] and [p.payload for p in sub.after_suback] == [b"1"]
    assert not sub.transport.closed, "the connection carries on"


# =============================================================================== per-connection limits


def test_stomp_max_consumers(broker_factory, raw_factory):
    broker = broker_factory(connection_limits={"max_consumers": 2})
    client = raw_factory(broker.address)
    client.connect()
    for i in range(2):
        client.send_frame("SUBSCRIBE", [("id", f"s{i}"), ("destination", f"/queue/c{i}"), ("receipt", f"r{i}")])
        client.expect("RECEIPT")
    client.send_frame("SUBSCRIBE", [("id", "s2"), ("destination", "/queue/c2"), ("receipt", "r2")])
    error = client.expect_error_and_close()
    assert "max_consumers" in error.get("message"), error
    assert_broker_works(broker.address)


def test_stomp_max_subscriptions_counts_topic_subscriptions(broker_factory, raw_factory):
    broker = broker_factory(connection_limits={"max_subscriptions": 1})
    client = raw_factory(broker.address)
    client.connect()
    client.send_frame("SUBSCRIBE", [("id", "t0"), ("destination", "/topic/a.>"), ("receipt", "r0")])
    client.expect("RECEIPT")
    client.send_frame("SUBSCRIBE", [("id", "q0"), ("destination", "/queue/q"), ("receipt", "r1")])
    client.expect("RECEIPT")  # a queue consumer is not a topic subscription
    client.send_frame("SUBSCRIBE", [("id", "t1"), ("destination", "/topic/b"), ("receipt", "r2")])
    error = client.expect_error_and_close()
    assert "max_subscriptions" in error.get("message"), error
    assert_broker_works(broker.address)


@BOTH
def test_mqtt_max_subscriptions(version):
    env = Env(connection_limits={"max_subscriptions": 2})
    sub = env.client(version)
    sub.connect("s")
    assert sub.subscribe("a") == [0] and sub.subscribe("b/#") == [0]
    expected = ReasonCode.QUOTA_EXCEEDED if version == MQTT_5 else 0x80
    assert sub.subscribe("c") == [expected], "5.0 3.9.3 Quota exceeded / 3.1.1 3.9.3 Failure"
    assert sub.subscribe("a", qos=1) == [1], "re-subscribing an existing filter is not a new subscription"
    pub = env.client(version)
    pub.connect("p")
    pub.publish("b/x", b"still served")
    assert [p.payload for p in sub.publishes()] == [b"still served"]


def test_amqp_max_consumers_and_subscriptions(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(connection_limits={"max_consumers": 2, "max_subscriptions": 1})
    connection = amqp_connect(broker)
    connection.create_receiver("topic://t1", name="t1")
    with pytest.raises(LinkDetached) as info:
        connection.create_receiver("topic://t2", name="t2")
    assert info.value.condition == "amqp:resource-limit-exceeded", "AMQP 1.0 2.8.15: resource-limit-exceeded"
    assert "max_subscriptions" in str(info.value)
    connection.create_receiver("queue://q1", name="q1")
    with pytest.raises(LinkDetached) as info:
        connection.create_receiver("queue://q2", name="q2")
    assert info.value.condition == "amqp:resource-limit-exceeded"
    assert "max_consumers" in str(info.value)
    connection.create_sender("queue://q1", name="s").send(AmqpMessage(body="the connection carries on"))


def test_stomp_max_unacknowledged_across_subscriptions(broker_factory, raw_factory):
    broker = broker_factory(connection_limits={"max_unacknowledged": 3})
    producer = raw_factory(broker.address)
    producer.connect()
    for queue in ("ua", "ub"):
        for i in range(5):
            stomp_send(producer, f"/queue/{queue}", b"%s-%d" % (queue.encode(), i), receipt=f"{queue}{i}")
            producer.expect("RECEIPT")
    client = raw_factory(broker.address)
    client.connect()
    for queue in ("ua", "ub"):
        client.send_frame("SUBSCRIBE", [("id", queue), ("destination", f"/queue/{queue}"),
                                        ("ack", "client-individual"), ("activemq.prefetchSize", "100")])
    got = [client.expect("MESSAGE") for _ in range(3)]

    def in_flight() -> int:
        return sum(broker.queue_stats(f"/queue/{q}")["in_flight"] for q in ("ua", "ub"))

    assert in_flight() == 3
    client.no_frame(0.3)
    assert in_flight() == 3, "max_unacknowledged: nothing more is delivered until an acknowledgement"
    client.send_frame("ACK", [("id", got[0].get("ack"))])
    client.expect("MESSAGE")
    assert poll(in_flight, lambda n: n == 3, timeout=TIMEOUT) == 3


def test_amqp_max_unacknowledged(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(connection_limits={"max_unacknowledged": 2})
    connection = amqp_connect(broker)
    sender = connection.create_sender("queue://unacked")
    for i in range(5):
        sender.send(AmqpMessage(body=f"m{i}"))
    receiver = connection.create_receiver("queue://unacked", credit=10)

    def stats() -> tuple:
        q = broker.queue_stats("queue://unacked")
        return q["in_flight"], q["pending"]

    assert wait_until(connection, lambda: stats() == (2, 3)), stats()
    receiver.receive(TIMEOUT)
    receiver.accept()
    assert wait_until(connection, lambda: stats() == (2, 2)), (
        f"an accepted delivery makes room for exactly one more: {stats()}")


@BOTH
def test_mqtt_inbound_qos2_ids_are_bounded_by_receive_maximum(version):
    """5.0 3.3.4 (Receive Maximum exceeded, 0x93); 3.1.1 has no such code: the broker closes the
    connection rather than keep unbounded QoS 2 state."""
    env = Env(mqtt_options={"receive_maximum": 2})
    pub = env.client(version)
    pub.connect("p")
    for pid in (1, 2):
        pub.send(Publish("r", b"", 2, packet_id=pid))
        pub.one(Pubrec)
    pub.send(Publish("r", b"", 2, packet_id=3))
    closing = pub.closed_with()
    if version == MQTT_5:
        assert [p.reason_code for p in closing] == [ReasonCode.RECEIVE_MAXIMUM_EXCEEDED]
    else:
        assert closing == []
    other = env.client(version)
    assert other.connect("o").reason_code == 0, "the broker carries on"


def test_limits_do_not_apply_to_the_brokers_own_connections():
    broker = engine_broker(connection_limits={"max_consumers": 1})
    internal = broker.connect(internal=True)
    for i in range(3):
        internal.subscribe(f"c{i}", parse_destination(f"queue://i{i}"), deliver=lambda c, r: None)
    client = broker.connect()
    client.subscribe("c0", parse_destination("queue://x"), deliver=lambda c, r: None)
    with pytest.raises(ResourceLimitError, match="max_consumers"):
        client.subscribe("c1", parse_destination("queue://y"), deliver=lambda c, r: None)


def test_connection_limit_options_are_validated():
    from reference_broker.config import ConfigError
    with pytest.raises(ConfigError, match="connection_limits.max_consumers"):
        build_config({"connection_limits": {"max_consumers": 0}})
    with pytest.raises(ConfigError, match="max_transaction_messages"):
        build_config({"connection_limits": {"max_transaction_message": 5}})
    defaults = build_config({}).connection_limits
    assert (defaults.max_consumers, defaults.max_subscriptions, defaults.max_unacknowledged,
            defaults.max_transactions, defaults.max_transaction_messages, defaults.max_transaction_bytes,
            defaults.max_pending_retained) == (1000, 1000, 10_000, 100, 10_000, 16 * 1024 * 1024, 10_000)



def test_unacknowledged_count_follows_acks_transactions_and_detach():
    """The connection's count behind max_unacknowledged stays the number of deliveries its
    consumers hold (in flight, or acknowledged in a transaction not yet committed)."""
    broker = engine_broker(connection_limits={"max_unacknowledged": 4})
    producer = broker.connect()
    conn = broker.connect()
    got: list = []
    queue = parse_destination("queue://count")
    topic = parse_destination("topic://count")
    q = conn.subscribe("q", queue, deliver=lambda c, r: got.append((c, r.message.message_id)),
                       ack_mode=AckMode.CLIENT, prefetch=100)
    t = conn.subscribe("t", topic, deliver=lambda c, r: got.append((c, r.message.message_id)),
                       ack_mode=AckMode.CLIENT_INDIVIDUAL, prefetch=100)

    def held() -> int:
        return sum(len(c.in_flight) + len(c.tx_held) for c in conn.consumers.values())

    for i in range(3):
        producer.send(queue, message(producer, queue))
        producer.send(topic, message(producer, topic))
    assert conn.unacked == held() == 4, "max_unacknowledged: four of six delivered"
    conn.begin("tx")
    queue_ids = [mid for c, mid in got if c is q]
    conn.ack(q, queue_ids[-1], "tx")  # cumulative: every queue delivery so far
    assert conn.unacked == held() == 4, "acknowledged in an open transaction: still counted"
    conn.abort("tx")
    assert conn.unacked == held() == 4
    conn.ack(q, queue_ids[-1])
    assert conn.unacked == held() and len(got) == 6, "room again: the rest is delivered"
    conn.begin("tx2")
    conn.ack(t, [mid for c, mid in got if c is t][0], "tx2")
    conn.commit("tx2")
    assert conn.unacked == held()
    conn.unsubscribe("t")
    assert conn.unacked == held() == len(q.in_flight)
    conn.close()
    assert conn.unacked == 0


def test_a_retained_will_past_the_memory_limit_is_delivered_but_not_kept():
    """A will is routed by the broker itself, after its connection is gone: nobody to refuse, so
    it is delivered as usual but not kept as the retained message past the limit."""
    env = Env(system_usage={"memory_limit": 2048})
    pub = env.client(MQTT_311)
    pub.connect("p")
    pub.publish("r/0", BODY, qos=1, retain=True)
    watcher = env.client(MQTT_311)
    watcher.connect("w")
    watcher.subscribe("will/#")
    dying = env.client(MQTT_311)
    dying.connect("d", will=Will("will/d", BODY, 0, True))
    dying.lost()
    assert [p.payload for p in watcher.publishes()] == [BODY], "3.1.2.5: the will is published"
    assert "topic://will.d" not in env.broker.retained, "issue 20 item 5: not kept past the memory limit"
    assert env.broker.system_usage.used <= 2048


def _publish_retained(running, topics: list[str]) -> None:
    """Retained messages from an MQTT client of `running` (a RunningBroker with an MQTT listener)."""
    address = tuple(running.server.mqtt_address)
    with socket.create_connection(address, timeout=TIMEOUT) as pub:
        pub.sendall(encode(Connect(protocol_level=MQTT_311, client_id="retainer", clean_start=True), MQTT_311))
        pub.sendall(b"".join(encode(Publish(t, t.encode(), 0, retain=True), MQTT_311) for t in topics))
    assert poll(lambda: running.call(lambda: len(running.server.broker.retained)), lambda n: n == len(topics),
                timeout=TIMEOUT) == len(topics)


def test_stomp_max_pending_retained(broker_factory, raw_factory):
    """STOMP topic subscribers get retained messages too (ActiveMQ's retained-message recovery)."""
    broker = broker_factory(mqtt="127.0.0.1:0", connection_limits={"max_pending_retained": 2})
    _publish_retained(broker, ["r/0", "r/1", "r/2"])
    client = raw_factory(broker.address)
    client.connect()
    client.send_frame("SUBSCRIBE", [("id", "one"), ("destination", "/topic/r.1"), ("receipt", "s1")])
    frames = [client.read_frame(), client.read_frame()]
    assert sorted(f.command for f in frames) == ["MESSAGE", "RECEIPT"], frames
    client.send_frame("SUBSCRIBE", [("id", "all"), ("destination", "/topic/r.>"), ("receipt", "s2")])
    error = client.expect_error_and_close()
    assert "max_pending_retained" in error.get("message"), error
    assert_broker_works(broker.address)


def test_amqp_max_pending_retained(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(mqtt="127.0.0.1:0", connection_limits={"max_pending_retained": 2})
    _publish_retained(broker.running, ["r/0", "r/1", "r/2"])
    connection = amqp_connect(broker)
    with pytest.raises(LinkDetached) as info:
        connection.create_receiver("topic://r.>", name="all")
    assert info.value.condition == "amqp:resource-limit-exceeded", "AMQP 1.0 2.8.15: resource-limit-exceeded"
    assert "max_pending_retained" in str(info.value)
    receiver = connection.create_receiver("topic://r.1", name="one")
    assert bytes(receiver.receive(TIMEOUT).body) == b"r/1", "the connection carries on"
