"""Publish/subscribe in the engine: fan-out, wildcards, durable versus non-durable
subscriptions, selectors on topics, no-local. Spec IDs ENG-TOPIC-*, ENG-DURABLE-*, ENG-SEL-3
(proposed for the catalogue)."""

from __future__ import annotations

import pytest

from reference_broker.engine.consumer import AckMode
from reference_broker.engine.errors import UnknownSubscription

from .test_engine_support import Client, make_broker

T = "topic://PRICES.IBM"


def test_eng_topic_1_every_subscriber_gets_every_message_wildcards_included():
    """ENG-TOPIC-1: each subscription receives its own copy of each published message; `*`
    matches one name element and `>` any number of trailing elements."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("exact", T, ack_mode=AckMode.AUTO)
    c.subscribe("star", "topic://PRICES.*", ack_mode=AckMode.AUTO)
    c.subscribe("all", "topic://PRICES.>", ack_mode=AckMode.AUTO)
    c.subscribe("other", "topic://ORDERS.>", ack_mode=AckMode.AUTO)
    c.send(T, "ibm")
    c.send("topic://PRICES.EU.SAP", "sap")
    c.send("topic://PRICES", "bare")
    assert c.got("exact") == ["ibm"], "ENG-TOPIC-1"
    assert c.got("star") == ["ibm"], "ENG-TOPIC-1: * is exactly one element"
    assert c.got("all") == ["ibm", "sap", "bare"], "ENG-TOPIC-1: > matches the rest (ActiveMQ: also none)"
    assert c.got("other") == [], "ENG-TOPIC-1"


def test_eng_topic_2_non_durable_subscription_keeps_nothing_while_away():
    """ENG-TOPIC-2: a non-durable subscription exists only while its subscriber does: messages
    published before it subscribes, or after it leaves, are not kept for it."""
    broker = make_broker()
    c = Client(broker)
    c.send(T, "before")
    c.subscribe("s", T)
    c.send(T, "during")
    c.conn.unsubscribe("s")
    c.send(T, "away")
    c.subscribe("s", T)
    c.send(T, "back")
    assert c.got() == ["during", "back"], "ENG-TOPIC-2"


def test_eng_topic_3_client_ack_and_nack_on_a_topic_subscription():
    """ENG-TOPIC-3: a non-durable subscription honours prefetch and redelivers a nacked message
    ahead of later ones."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("s", T, prefetch=2)
    for i in range(4):
        c.send(T, f"p{i}")
    assert c.got() == ["p0", "p1"]
    c.nack("s", "p0")
    assert c.got() == ["p0", "p1", "p0"], "ENG-TOPIC-3: redelivered ahead of p2"
    assert (c.last().redelivered, c.last().delivery_count) == (True, 1), "ENG-TOPIC-3"
    c.ack("s", "p1")
    assert c.got()[-1] == "p2", "ENG-TOPIC-3"


def test_eng_topic_4_immediate_ack_from_the_callback_does_not_recurse_per_message():
    """ENG-TOPIC-4: a subscriber acknowledging inside the delivery callback, with a large
    backlog, is served iteratively (no stack growth per message)."""
    broker = make_broker()
    c = Client(broker)
    c.on_deliver = lambda consumer, ref: c.conn.ack(consumer, ref.message.message_id)
    c.subscribe("s", T, prefetch=1)
    c.conn.set_writable(False)
    for i in range(5000):
        c.send(T, f"p{i}")
    c.conn.set_writable(True)
    assert len(c.got()) == 5000 and c.got()[-1] == "p4999", "ENG-TOPIC-4"


def test_eng_durable_1_durable_subscription_keeps_messages_while_away():
    """ENG-DURABLE-1: a durable subscription keeps what is published while its subscriber is
    disconnected and delivers it, in order, when the same client id and subscription name
    come back; unacknowledged messages are redelivered."""
    broker = make_broker()
    first = Client(broker, client_id="app")
    first.subscribe("d", T, durable_name="prices", prefetch=10)
    first.send(T, "p0")
    first.send(T, "p1")
    first.ack("d", "p0")
    first.conn.close()
    producer = Client(broker)
    producer.send_many(T, ["p2", "p3"])
    stats = next(s for s in broker.stats()["subscriptions"] if s["durable"])
    assert (stats["active"], stats["pending"]) == (False, 3), "ENG-DURABLE-1"
    again = Client(broker, client_id="app")
    again.subscribe("d", T, durable_name="prices", prefetch=10)
    assert again.got() == ["p1", "p2", "p3"], "ENG-DURABLE-1"
    assert [d.redelivered for d in again.deliveries] == [True, False, False]


def test_eng_durable_2_needs_client_id_and_only_one_active_subscriber():
    """ENG-DURABLE-2: a durable subscription needs a client id, and only one subscriber may be
    attached to it at a time."""
    broker = make_broker()
    with pytest.raises(UnknownSubscription):
        Client(broker).subscribe("d", T, durable_name="x")
    c = Client(broker, client_id="app")
    c.subscribe("d1", T, durable_name="x")
    with pytest.raises(UnknownSubscription):
        c.subscribe("d2", T, durable_name="x")


def test_eng_durable_3_unsubscribe_with_remove_deletes_the_subscription():
    """ENG-DURABLE-3: removing a durable subscription drops what it kept; a new subscription of
    the same name starts empty."""
    broker = make_broker()
    c = Client(broker, client_id="app")
    c.subscribe("d", T, durable_name="x")
    c.conn.unsubscribe("d")
    c.send(T, "kept")
    c.subscribe("d", T, durable_name="x")
    assert c.got() == ["kept"]
    c.conn.unsubscribe("d", remove_durable=True)
    c.send(T, "lost")
    c.subscribe("d", T, durable_name="x")
    assert c.got() == ["kept"], "ENG-DURABLE-3"


def test_eng_sel_3_selectors_on_topic_subscriptions():
    """ENG-SEL-3: selectors filter what a topic subscription receives, durable (filtering at
    the time messages are kept for it) or not."""
    broker = make_broker()
    c = Client(broker, client_id="app")
    c.subscribe("big", T, selector="qty >= 100", ack_mode=AckMode.AUTO)
    c.subscribe("d", T, selector="side = 'BUY'", durable_name="buys")
    c.conn.unsubscribe("d")
    c.send(T, "o1", properties={"qty": 150, "side": "SELL"})
    c.send(T, "o2", properties={"qty": 10, "side": "BUY"})
    c.send(T, "o3", properties={"qty": 500, "side": "BUY"})
    c.send(T, "o4", properties={"side": "BUY"})
    assert c.got("big") == ["o1", "o3"], "ENG-SEL-3 non-durable"
    c.subscribe("d", T, selector="side = 'BUY'", durable_name="buys")
    assert c.got("d") == ["o2", "o3", "o4"], "ENG-SEL-3 durable"


def test_eng_topic_5_no_local():
    """ENG-TOPIC-5: a no-local subscriber does not receive what its own connection published."""
    broker = make_broker()
    me, other = Client(broker), Client(broker)
    me.subscribe("s", T, no_local=True, ack_mode=AckMode.AUTO)
    me.send(T, "mine")
    other.send(T, "theirs")
    assert me.got() == ["theirs"], "ENG-TOPIC-5"


def test_expired_pending_topic_messages_are_swept_by_tick():
    """ENG-TOPIC-EXP-1: a non-durable subscription's pending messages that expire are dropped
    by the periodic sweep (and counted as discarded), not only when dispatch reaches them."""
    from reference_broker.config import build_config
    from reference_broker.engine.broker import Broker
    from reference_broker.engine.consumer import AckMode
    from reference_broker.engine.message import Message
    from reference_broker.engine.names import parse_destination

    now = [1000.0]
    broker = Broker(build_config({}), clock=lambda: now[0])
    conn = broker.connect()
    dest = parse_destination("topic://T")
    delivered = []
    conn.subscribe("s", dest, deliver=lambda c, r: delivered.append(r), ack_mode=AckMode.CLIENT_INDIVIDUAL, prefetch=1)
    for i in range(3):
        conn.send(dest, Message(message_id=f"m{i}", destination=dest.canonical, expiration=1_000_500))
    (subscription,) = broker.subscriptions
    assert len(delivered) == 1 and subscription.matched == 2
    assert broker.topics["topic://T"].usage.used > 0
    now[0] = 1001.0
    assert broker.tick() == 2
    assert subscription.matched == 0 and subscription.discarded == 2
    assert broker.topics["topic://T"].usage.used == 0
