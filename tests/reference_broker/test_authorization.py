"""Authorization per destination a message comes from (issue 20, item 2; engine/access.py).

ENG-AUTH-3: a subscription authorized on a wildcard pattern receives only what its reader may read,
message by message: with ``PUBLIC.>`` readable by users and ``PUBLIC.SECRET.>`` by admins only, a
user subscribed to ``PUBLIC.>`` gets ``PUBLIC.news`` and never ``PUBLIC.SECRET.plans``. Checked on
every path that delivers: routing to non-durable, durable (also after a restart) and shared
subscriptions, retained messages replayed on subscribe, and over STOMP, MQTT and AMQP.
"""

from __future__ import annotations

import pytest
from proton.utils import LinkDetached

from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.errors import NotAuthorized, UnknownSubscription
from reference_broker.engine.message import RETAIN_PROPERTY
from reference_broker.store.journal import JournalStore

from .amqp_fixtures import amqp_broker_factory, amqp_connect, pump  # noqa: F401 - fixtures by name
from .test_engine_support import Client, make_broker

SECURITY = {
    "users": [
        {"name": "alice", "password": "a", "groups": ["users"]},
        {"name": "boss", "password": "b", "groups": ["admins"]},
    ],
    "authorization": [
        {"topic": "PUBLIC.>", "read": ["users", "admins"], "write": ["users", "admins"]},
        {"topic": "PUBLIC.SECRET.>", "read": ["admins"], "write": ["admins"]},
        {"queue": "PUBLIC.>", "read": ["users", "admins"], "write": ["users", "admins"]},
        {"queue": "PUBLIC.SECRET.>", "read": ["admins"], "write": ["admins"]},
    ],
}


def _engine():
    broker = make_broker({"security": SECURITY})
    return broker, Client(broker, login="alice", passcode="a"), Client(broker, login="boss", passcode="b")


def test_wildcard_subscription_does_not_read_a_topic_its_user_may_not():
    """ENG-AUTH-3: non-durable subscription; the admin's own subscription of the same pattern
    still gets both messages (the check is the reader's, not a blanket drop)."""
    broker, alice, boss = _engine()
    alice.subscribe("all", "topic://PUBLIC.>")
    boss.subscribe("all", "topic://PUBLIC.>")
    boss.send("topic://PUBLIC.SECRET.plans", "secret-1")
    boss.send("topic://PUBLIC.news", "news-1")
    assert alice.got() == ["news-1"], "ENG-AUTH-3: the user's wildcard subscription got a secret message"
    assert boss.got() == ["secret-1", "news-1"], "ENG-AUTH-3: the admin's subscription lost messages"


def test_wildcard_subscription_gets_no_retained_message_its_user_may_not_read():
    """ENG-AUTH-3: retained messages replayed into a new wildcard subscription."""
    broker, alice, boss = _engine()
    boss.send("topic://PUBLIC.SECRET.plans", "secret-r", properties={RETAIN_PROPERTY: True}, body=b"s")
    boss.send("topic://PUBLIC.news", "news-r", properties={RETAIN_PROPERTY: True}, body=b"n")
    alice.subscribe("all", "topic://PUBLIC.>")
    assert alice.got() == ["news-r"], "ENG-AUTH-3: a retained secret was replayed to the user"
    boss.subscribe("all", "topic://PUBLIC.>")
    assert sorted(boss.got()) == ["news-r", "secret-r"]


def test_durable_wildcard_subscription_does_not_keep_what_its_user_may_not_read(tmp_path):
    """ENG-AUTH-3: a durable subscription collects, while its subscriber is away and after a
    restart, only what its user may read."""
    config = build_config({"stomp": None, "security": SECURITY})
    broker = Broker(config, JournalStore(tmp_path / "journal"))
    alice = Client(broker, login="alice", passcode="a", client_id="alice-app")
    boss = Client(broker, login="boss", passcode="b")
    alice.subscribe("d", "topic://PUBLIC.>", durable_name="everything")
    boss.send("topic://PUBLIC.SECRET.plans", "secret-1", persistent=True)
    boss.send("topic://PUBLIC.news", "news-1", persistent=True)
    alice.ack_all("d")
    assert alice.got() == ["news-1"], "ENG-AUTH-3: the durable subscription delivered a secret"
    alice.conn.close()
    broker.close()

    broker = Broker(config, JournalStore(tmp_path / "journal"))
    broker.recover()
    boss = Client(broker, login="boss", passcode="b")
    boss.send("topic://PUBLIC.SECRET.plans", "secret-2", persistent=True)  # nobody attached
    boss.send("topic://PUBLIC.news", "news-2", persistent=True)
    alice = Client(broker, login="alice", passcode="a", client_id="alice-app")
    alice.subscribe("d", "topic://PUBLIC.>", durable_name="everything")
    assert alice.got() == ["news-2"], "ENG-AUTH-3: after a restart the durable subscription kept a secret"
    broker.close()


def test_durable_subscription_taken_over_by_another_user_is_refused_what_it_may_not_read():
    """ENG-AUTH-3: a durable subscription is keyed by client id and name; another user reusing
    them does not receive what was kept for its first owner from topics it may not read."""
    broker = make_broker({"security": {**SECURITY, "users": SECURITY["users"] + [
        {"name": "carol", "password": "c", "groups": ["users"]}]}})
    boss = Client(broker, login="boss", passcode="b", client_id="shared-app")
    boss.subscribe("d", "topic://PUBLIC.>", durable_name="feed")
    boss.conn.close()
    Client(broker, login="boss", passcode="b").send("topic://PUBLIC.SECRET.plans", "secret-1")
    alice = Client(broker, login="alice", passcode="a", client_id="shared-app")
    with pytest.raises(NotAuthorized, match="PUBLIC.SECRET.plans"):
        alice.subscribe("d", "topic://PUBLIC.>", durable_name="feed")
    assert alice.got() == [], "ENG-AUTH-3: another user took over a durable subscription holding a secret"
    # What it holds is all readable to the next user: the takeover is allowed.
    alice.subscribe("n", "topic://PUBLIC.>", durable_name="news")
    alice.conn.close()
    Client(broker, login="boss", passcode="b").send("topic://PUBLIC.news", "news-1")
    carol = Client(broker, login="carol", passcode="c", client_id="shared-app")
    carol.subscribe("n", "topic://PUBLIC.>", durable_name="news")
    assert carol.got() == ["news-1"]


def test_shared_wildcard_subscription_does_not_hand_a_secret_to_a_member_who_may_not_read_it():
    """ENG-AUTH-3: consumers of one shared subscription compete for its messages: a message goes
    in only when every member may read its topic."""
    broker, alice, boss = _engine()
    boss.subscribe("s", "topic://PUBLIC.>", shared_name="g")
    alice.subscribe("s", "topic://PUBLIC.>", shared_name="g")
    for n in range(4):
        boss.send("topic://PUBLIC.SECRET.plans", f"secret-{n}")
        boss.send("topic://PUBLIC.news", f"news-{n}")
    assert not [m for m in alice.got() if m.startswith("secret")], "ENG-AUTH-3: a shared member got a secret"
    assert sorted(alice.got() + boss.got()) == [f"news-{n}" for n in range(4)]


def test_wildcard_queue_cannot_be_browsed_or_consumed():
    """A queue consumer reads the queue it was authorized on: wildcard queues are refused, so no
    queue pattern can reach PUBLIC.SECRET.* queues."""
    broker, alice, _ = _engine()
    with pytest.raises(UnknownSubscription, match="wildcard queue"):
        alice.subscribe("q", "queue://PUBLIC.>")
    with pytest.raises(NotAuthorized):
        alice.subscribe("q", "queue://PUBLIC.SECRET.plans")


# --------------------------------------------------------------------------- over the wire


def test_stomp_wildcard_subscription_does_not_read_a_topic_its_user_may_not(broker_factory, raw_factory):
    running = broker_factory(security=SECURITY)
    user = raw_factory(running.address)
    user.connect(login="alice", passcode="a")
    user.send_frame("SUBSCRIBE", [("id", "all"), ("destination", "/topic/PUBLIC.>"), ("receipt", "r1")])
    user.expect("RECEIPT")
    admin = raw_factory(running.address)
    admin.connect(login="boss", passcode="b")
    admin.send_frame("SEND", [("destination", "/topic/PUBLIC.SECRET.plans"), ("receipt", "s1")], b"secret")
    admin.expect("RECEIPT")
    admin.send_frame("SEND", [("destination", "/topic/PUBLIC.news"), ("receipt", "s2")], b"news")
    admin.expect("RECEIPT")
    got = user.expect("MESSAGE")
    assert got.get("destination") == "/topic/PUBLIC.news" and got.body == b"news", \
        f"ENG-AUTH-3: the STOMP user's wildcard subscription got {got.get('destination')}"
    user.no_frame()


def test_mqtt_wildcard_subscription_does_not_read_a_topic_its_user_may_not(broker_factory):
    """ENG-AUTH-3 over MQTT: PUBLIC/# neither replays the retained secret nor forwards a new one."""
    from reference_broker.protocols.mqtt.codec import Puback, Publish, Suback, Subscribe, Subscription

    from .mqtt_fixtures import RawMqtt, mqtt_address

    running = broker_factory(mqtt="127.0.0.1:0", security=SECURITY)
    with RawMqtt(mqtt_address(running)) as admin, RawMqtt(mqtt_address(running)) as user:
        admin.connect("boss-app", username="boss", password=b"b")
        admin.send(Publish("PUBLIC/SECRET/plans", b"retained-secret", 1, packet_id=1, retain=True))
        admin.expect(Puback)
        user.connect("alice-app", username="alice", password=b"a")
        user.send(Subscribe(1, [Subscription("PUBLIC/#", 1)]))
        user.expect(Suback)
        admin.send(Publish("PUBLIC/SECRET/plans", b"secret", 1, packet_id=2))
        admin.expect(Puback)
        admin.send(Publish("PUBLIC/news", b"news", 1, packet_id=3))
        admin.expect(Puback)
        got = user.expect(Publish)
        assert (got.topic, got.payload) == ("PUBLIC/news", b"news"), \
            f"ENG-AUTH-3: the MQTT user's PUBLIC/# subscription got {got.topic} {got.payload!r} first"
        user.send(Puback(got.packet_id))
        user.no_packet()


def test_amqp_wildcard_source_does_not_read_a_topic_its_user_may_not(amqp_broker_factory, amqp_connect):
    from proton import Message, Timeout

    broker = amqp_broker_factory(security=SECURITY)
    user = amqp_connect(broker, "alice", "a")
    receiver = user.create_receiver("topic://PUBLIC.>", name="all", credit=10)
    admin = amqp_connect(broker, "boss", "b")
    sender = admin.create_sender(None, name="relay")
    sender.send(Message(address="topic://PUBLIC.SECRET.plans", body="secret"))
    sender.send(Message(address="topic://PUBLIC.news", body="news"))
    got = receiver.receive(timeout=5)
    receiver.accept()
    assert got.body == "news", f"ENG-AUTH-3: the AMQP user's wildcard source got {got.body!r}"
    pump(user)
    with pytest.raises(Timeout):
        receiver.receive(timeout=0.3)  # the secret is not waiting behind it
    with pytest.raises(LinkDetached):
        user.create_receiver("topic://PUBLIC.SECRET.>", name="secret")
