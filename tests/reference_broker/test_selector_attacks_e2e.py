"""Hostile selectors and sends to wildcard destinations, end to end (issue 20 items 1 and 7).

A client may write any selector; none may hold the broker's event loop, and a bad one gets the
protocol's error (a STOMP ERROR frame, an AMQP attach refused with a condition) while the
broker and its other clients carry on. A wildcard destination names many destinations: sending
to one is refused with the protocol's error, without a receipt and without routing anything.
"""

from __future__ import annotations

import time

import pytest
from proton import Delivery, Message
from proton.reactor import Selector
from proton.utils import LinkDetached, SendException

from reference_broker.cluster.advisories import AdvisoryPublisher, advisory_topic, decode_consumers
from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.errors import InvalidDestination
from reference_broker.engine.message import Message as EngineMessage
from reference_broker.engine.names import parse_destination
from reference_broker.engine.selector import MAX_NESTING, MAX_SELECTOR_LENGTH
from reference_broker.protocols.mqtt.codec import Disconnect, Publish, ReasonCode

from .amqp_fixtures import amqp_broker, amqp_broker_factory, amqp_connect, pump  # noqa: F401
from .conftest import TIMEOUT, RawStomp, assert_broker_works
from .mqtt_fixtures import (  # noqa: F401 - fixtures are used by name
    MQTT_5,
    MQTT_311,
    mqtt_address,
    mqtt_broker,
    mqtt_broker_factory,
    paho_factory,
    raw_mqtt,
    unique,
)

pytestmark = pytest.mark.timeout(90)

BACKTRACKING_LIKE = "p LIKE '" + "%a" * 12 + "%b'"  # issue 20: froze the loop on 100 'a's


def connected(address) -> RawStomp:
    client = RawStomp(address)
    assert client.connect("1.2").command == "CONNECTED"
    return client


def subscribe(client: RawStomp, dest: str, sub_id: str, **headers: str) -> None:
    client.send_frame("SUBSCRIBE", [("id", sub_id), ("destination", dest), ("receipt", "sub-" + sub_id),
                                    *headers.items()])
    frame = client.read_frame()
    assert frame.command == "RECEIPT", frame


# =============================================================================== item 1


def test_like_with_many_wildcards_does_not_block_the_loop(broker_process_factory):
    """A subscriber's LIKE selector that a backtracking regex needs hours to reject must not
    stop the broker: a bystander on another queue gets its messages while the attacker's
    subscription is being matched against ever longer values. The broker is a child process so
    that, when the loop does spin, this test fails on its time-out instead of hanging with it."""
    proc = broker_process_factory().start()
    address = proc.stomp_address
    with connected(address) as attacker, connected(address) as producer, \
            connected(address) as bystander:
        topic = f"/topic/attack.{time.monotonic_ns()}"
        subscribe(attacker, topic, "a", selector=BACKTRACKING_LIKE)
        mine = f"/queue/bystander.{time.monotonic_ns()}"
        subscribe(bystander, mine, "b")
        for n, size in enumerate((100, 1000, 10_000)):
            producer.send_frame("SEND", [("destination", topic), ("p", "a" * size),
                                         ("receipt", f"attack-{n}")], b"no match")
            producer.send_frame("SEND", [("destination", mine), ("receipt", f"mine-{n}")],
                                f"mine {n}".encode())
            receipts = [producer.read_frame(timeout=TIMEOUT), producer.read_frame(timeout=TIMEOUT)]
            assert [f.command for f in receipts] == ["RECEIPT", "RECEIPT"], receipts
            got = bystander.read_frame(timeout=TIMEOUT)
            assert got.command == "MESSAGE" and got.body == f"mine {n}".encode(), got
        # the selector still selects: a value that does match arrives
        producer.send_frame("SEND", [("destination", topic), ("p", "a" * 100 + "b")], b"match")
        got = attacker.read_frame(timeout=TIMEOUT)
        assert got.command == "MESSAGE" and got.body == b"match", got
        attacker.no_frame(0.3)  # and none of the non-matching ones did
    assert_broker_works(address)


# =============================================================================== item 7: selectors


HOSTILE_SELECTORS = [
    pytest.param("a = " + "9" * 5000, "must fit in a Java long", id="5000-digit-integer"),
    pytest.param("a IN (" + "1" * 300 + ")", "must fit in a Java long", id="long-integer-in-list"),
    pytest.param("a > 1e99999", "range of a Java double", id="huge-exponent"),
    pytest.param("a = 0x" + "F" * 1000, "must fit in a Java long", id="long-hex"),
    pytest.param("NOT " * (MAX_NESTING + 10) + "a", "nested too deeply", id="deep-not"),
    pytest.param("a = " + "- " * (MAX_NESTING + 10) + "b", "nested too deeply", id="deep-unary"),
    pytest.param("(" * 3000 + "a = 1", "expected", id="unclosed-deep-parentheses"),
    pytest.param("v LIKE '%" + "_" * 300 + "%'", "MAX_LIKE_UNDERSCORE_RUN", id="long-underscore-run"),
]


@pytest.mark.parametrize("selector, fragment", HOSTILE_SELECTORS)
def test_hostile_stomp_selector_gets_an_error_frame_and_the_broker_carries_on(
        broker, raw_factory, selector, fragment):
    bystander = raw_factory(broker.address)
    bystander.connect("1.2")
    mine = f"/queue/bystander.{time.monotonic_ns()}"
    subscribe(bystander, mine, "b")
    bad = raw_factory(broker.address)
    bad.connect("1.2")
    bad.send_frame("SUBSCRIBE", [("id", "x"), ("destination", "/queue/x"), ("selector", selector),
                                 ("receipt", "r")])
    error = bad.expect_error_and_close()
    message = error.get("message")
    assert message.startswith("invalid selector") and fragment in message, message
    assert len(message) < 1000, "the ERROR shows a long selector cut short"
    assert broker.call(lambda: broker.server.broker.stats()["queues"]) is not None
    bystander.send_frame("SEND", [("destination", mine)], b"still served")
    assert bystander.expect("MESSAGE").body == b"still served"
    assert_broker_works(broker.address)


def test_deep_parentheses_within_the_length_limit_compile(broker, raw_factory):
    """Parentheses do not nest the compiled selector, and the parser does not recurse: a
    STOMP header's worth of them is an ordinary selector."""
    depth = 7000  # 14 K of parentheses: under stomp_options.max_header_length (16 K)
    client = raw_factory(broker.address)
    client.connect("1.2")
    dest = f"/queue/parens.{time.monotonic_ns()}"
    subscribe(client, dest, "s", selector="(" * depth + "color = 'red'" + ")" * depth)
    client.send_frame("SEND", [("destination", dest), ("color", "blue")], b"blue")
    client.send_frame("SEND", [("destination", dest), ("color", "red")], b"red")
    assert client.expect("MESSAGE").body == b"red"


def test_hostile_amqp_selector_refuses_the_attach_and_the_connection_carries_on(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    for n, (selector, fragment) in enumerate([
            ("a = " + "9" * 5000, "must fit in a Java long"),
            ("a > 1e99999", "range of a Java double"),
            ("a = 1 OR " * (MAX_SELECTOR_LENGTH // 9 + 1) + "a = 2", "MAX_SELECTOR_LENGTH"),
            (BACKTRACKING_LIKE.replace("%b", "%" + "_" * 300), "MAX_LIKE_UNDERSCORE_RUN")]):
        with pytest.raises(LinkDetached) as info:
            connection.create_receiver("queue://hostile", name=f"bad-{n}",
                                       options=Selector(selector, name="jms-selector"))
        assert info.value.condition == "amqp:invalid-field", info.value
        assert fragment in str(info.value), str(info.value)
    receiver = connection.create_receiver("queue://hostile", name="good",
                                          options=Selector(BACKTRACKING_LIKE, name="jms-selector"))
    sender = connection.create_sender("queue://hostile")
    sender.send(Message(body="no", properties={"p": "a" * 10_000}))
    sender.send(Message(body="yes", properties={"p": "a" * 10_000 + "b"}))
    assert receiver.receive(TIMEOUT).body == "yes"


# =============================================================================== item 7: sends


WILDCARDS = ["/topic/A.>", "/queue/A.*", "/topic/A.*.B", "/queue/>", "/topic/A.#"]


@pytest.mark.parametrize("dest", WILDCARDS)
@pytest.mark.parametrize("transacted", [False, True], ids=["plain", "in-transaction"])
def test_stomp_send_to_a_wildcard_is_refused_without_receipt(broker, raw_factory, dest, transacted):
    watcher = raw_factory(broker.address)
    watcher.connect("1.2")
    subscribe(watcher, "/topic/A.>", "t")
    subscribe(watcher, "/queue/A.x", "q")
    bad = raw_factory(broker.address)
    bad.connect("1.2")
    headers = [("destination", dest), ("receipt", "r")]
    if transacted:
        bad.send_frame("BEGIN", [("transaction", "tx")])
        headers.append(("transaction", "tx"))
    bad.send_frame("SEND", headers, b"to everyone")
    frames = bad.wait_closed()
    assert [f.command for f in frames] == ["ERROR"], frames  # no RECEIPT
    message = frames[0].get("message")
    assert "wildcard" in message and dest.split("/")[-1] in message, message
    watcher.no_frame(0.3)
    queues = {q["name"]: q for q in broker.stats()["queues"]}
    assert all(q["enqueued"] == 0 for q in queues.values()), queues
    assert_broker_works(broker.address)


def test_amqp_sender_to_a_wildcard_is_refused(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    for n, address in enumerate(["topic://A.>", "queue://A.*"]):
        with pytest.raises(LinkDetached) as info:
            connection.create_sender(address, name=f"wild-{n}")
        assert info.value.condition == "amqp:not-found", info.value
        assert "wildcard" in str(info.value)
    # anonymous relay: the transfer itself is rejected, and nothing is routed
    watcher = connection.create_receiver("topic://A.>", name="watcher")
    relay = connection.create_sender(None)
    with pytest.raises(SendException) as info:
        relay.send(Message(address="topic://A.>", body="to everyone"))
    assert info.value.state == Delivery.REJECTED
    pump(connection)
    assert watcher.fetcher.has_message == 0
    relay.send(Message(address="topic://A.fine", body="one"))
    assert watcher.receive(TIMEOUT).body == "one"


@pytest.mark.parametrize("version", [MQTT_311, MQTT_5], ids=["3.1.1", "5.0"])
@pytest.mark.parametrize("topic", ["a/#", "a/+/b", "+", "#"])
def test_mqtt_publish_to_a_wildcard_topic_is_refused(mqtt_broker, raw_mqtt, paho_factory, version, topic):
    """MQTT 3.1.1 3.3.2.1 and 4.7.3 (5.0 3.3.2.1): a PUBLISH topic name holds no wildcard; the
    server treats it as a protocol violation and closes the connection (5.0: DISCONNECT
    0x90 Topic Name invalid first). No PUBACK, and nothing reaches a `#` subscriber."""
    watcher = paho_factory(mqtt_address(mqtt_broker), version, unique("watch").replace("/", "-"))
    watcher.connect()
    watcher.subscribe("#", 1)
    client = raw_mqtt(mqtt_address(mqtt_broker), version)
    assert client.connect(unique("bad").replace("/", "-")).reason_code == 0
    client.send(Publish(topic, b"to everyone", qos=1, packet_id=7))
    packets = client.wait_closed()
    if version == MQTT_5:
        assert packets == [Disconnect(ReasonCode.TOPIC_NAME_INVALID)] or (
            len(packets) == 1 and isinstance(packets[0], Disconnect)
            and packets[0].reason_code == ReasonCode.TOPIC_NAME_INVALID), packets
    else:
        assert packets == [], packets  # 3.1.1 has no way to say why: the connection just closes
    watcher.assert_no_message()
    watcher.publish("still/served", b"ok", 1)
    assert watcher.get().payload == b"ok"


def test_the_broker_itself_still_publishes_advisories_named_after_wildcard_subscriptions():
    """Only clients are refused: ActiveMQ names a consumer advisory after the consumer's
    destination, wildcard included, and the broker's own connection publishes it."""
    broker = Broker(build_config({"name": "B"}))
    AdvisoryPublisher(broker)
    client = broker.connect()
    client.subscribe("c1", parse_destination("topic://A.>"), deliver=lambda c, r: None)
    advisory = broker.retained.get("topic://" + advisory_topic("topic://A.>"))
    assert advisory is not None and [c.consumer_id for c in decode_consumers(advisory.body)]
    with pytest.raises(InvalidDestination, match="wildcard"):
        client.send(parse_destination("topic://A.>"),
                    EngineMessage(message_id="m", destination="topic://A.>", body=b""))
