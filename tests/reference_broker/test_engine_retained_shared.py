"""Retained messages and shared subscriptions in the engine (used by the MQTT front-end, and
visible to every protocol, as with ActiveMQ's retained-message recovery policy)."""

from __future__ import annotations

from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.message import RETAIN_PROPERTY, Message
from reference_broker.engine.names import parse_destination
from reference_broker.store.journal import JournalStore

T = parse_destination("topic://sensors.kitchen.temp")


def _publish(conn, dest, mid, body=b"v", retain=False, persistent=False):
    props = {RETAIN_PROPERTY: True} if retain else {}
    conn.send(dest, Message(message_id=mid, destination=dest.canonical, body=body, properties=props,
                            persistent=persistent))


def _subscriber(conn, sub_id, dest, **kw):
    got = []
    conn.subscribe(sub_id, dest, deliver=lambda c, r: got.append((r.message.message_id, r.retained)), **kw)
    return got


def test_ret_1_new_subscription_gets_the_retained_message_first():
    """RET-1 (MQTT 3.1.1 3.3.1.3; ActiveMQ retained messages): the last retained message of a
    topic goes to each new matching subscription, marked as retained; later publishes are
    delivered normally."""
    broker = Broker(build_config({}))
    pub = broker.connect()
    _publish(pub, T, "old", retain=True)
    _publish(pub, T, "new", retain=True)
    _publish(pub, T, "plain")  # not retained: does not replace the retained one
    got = _subscriber(broker.connect(), "s", parse_destination("topic://sensors.*.temp"))
    assert got == [("new", True)], "RET-1: only the latest retained message, flagged"
    _publish(pub, T, "live")
    assert got[-1] == ("live", False), "RET-1"


def test_ret_2_empty_retained_message_clears_and_is_still_delivered():
    """RET-2 (MQTT 3.1.1 3.3.1.3): a retained publish with an empty payload removes the retained
    message, and is itself delivered to current subscribers as normal."""
    broker = Broker(build_config({}))
    pub = broker.connect()
    _publish(pub, T, "r1", retain=True)
    current = _subscriber(broker.connect(), "s", T)
    _publish(pub, T, "clear", body=b"", retain=True)
    assert current == [("r1", True), ("clear", False)], "RET-2"
    assert _subscriber(broker.connect(), "s2", T) == [], "RET-2: nothing retained any more"


def test_ret_3_subscriber_may_decline_retained_messages():
    broker = Broker(build_config({}))
    pub = broker.connect()
    _publish(pub, T, "r1", retain=True)
    assert _subscriber(broker.connect(), "s", T, receive_retained=False) == [], "RET-3"


def test_ret_4_persistent_retained_message_survives_restart(tmp_path):
    """RET-4: a persistent retained message is stored like any persistent message."""
    store = JournalStore(tmp_path / "j")
    broker = Broker(build_config({}), store)
    _publish(broker.connect(), T, "keep", retain=True, persistent=True)
    broker.close()
    restarted = Broker(build_config({}), JournalStore(tmp_path / "j"))
    restarted.recover()
    assert _subscriber(restarted.connect(), "s", T) == [("keep", True)], "RET-4"
    restarted.close()


def test_shared_1_consumers_of_a_shared_subscription_compete():
    """SHARED-1 (MQTT 5.0 4.8.2): each message goes to one consumer of a shared subscription,
    while an ordinary subscription on the same topic still gets every message."""
    broker = Broker(build_config({}))
    a = _subscriber(broker.connect(), "a", T, shared_name="g", ack_mode=AckMode.AUTO)
    b = _subscriber(broker.connect(), "b", T, shared_name="g", ack_mode=AckMode.AUTO)
    everyone = _subscriber(broker.connect(), "all", T)
    pub = broker.connect()
    for i in range(10):
        _publish(pub, T, f"m{i}")
    assert sorted(a + b) == sorted((f"m{i}", False) for i in range(10)), "SHARED-1: each once"
    assert a and b, "SHARED-1: both consumers get some"
    assert len(everyone) == 10


def test_shared_2_retained_messages_are_not_sent_to_shared_subscriptions():
    broker = Broker(build_config({}))
    _publish(broker.connect(), T, "r", retain=True)
    assert _subscriber(broker.connect(), "a", T, shared_name="g") == [], "SHARED-2 (MQTT 5.0 4.8.2)"


def test_shared_3_last_consumer_leaving_removes_it_and_releases_memory():
    broker = Broker(build_config({}))
    conn = broker.connect()
    conn.subscribe("a", T, deliver=lambda c, r: None, shared_name="g", ack_mode=AckMode.CLIENT_INDIVIDUAL, prefetch=1)
    pub = broker.connect()
    for i in range(5):
        _publish(pub, T, f"m{i}")
    assert broker.system_usage.used > 0
    conn.close()
    assert broker.shared == {} and broker.subscriptions == []
    assert broker.system_usage.used == 0, "SHARED-3: nothing left charged to memory"
    assert broker.tick() == 0
