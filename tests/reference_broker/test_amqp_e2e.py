"""End-to-end tests of the AMQP 1.0 front-end, driven by python-qpid-proton's client API
against an in-process broker (AMQP listener on 127.0.0.1:0)."""

from __future__ import annotations

import socket
import time

import pytest
from proton import Connection as ProtonConnection, ConnectionException, Delivery, Message, Transport, symbol
from proton.reactor import AtMostOnce, DurableSubscription, LinkOption, Selector
from proton.utils import ConnectionClosed, LinkDetached, SendException

from machinery.waiting import poll

from .amqp_fixtures import (  # noqa: F401 - fixtures are used by name
    amqp_broker,
    amqp_broker_factory,
    amqp_connect,
    pump,
    raw_exchange,
    settle_with,
    wait_until,
)
from .conftest import TIMEOUT

USERS = {"users": [
    {"name": "alice", "password": "secret", "groups": ["users"]},
    {"name": "admin", "password": "admin", "groups": ["admins"]},
]}


def receive_bytes(receiver) -> bytes:
    """The body of the next message as bytes. (proton's Message.body for a Data section is a
    memoryview into the Message, so the Message must stay alive while it is copied.)"""
    message = receiver.receive(TIMEOUT)
    return bytes(message.body)


def assert_stats(connection, broker, queue: str, **expected) -> None:
    """Pump `connection` (so settlements go out) until the queue's statistics match."""
    def current() -> dict:
        stats = broker.queue_stats(queue) or {}
        return {k: stats.get(k) for k in expected}

    wait_until(connection, lambda: current() == expected)
    assert current() == expected


def receive_all(connection, receivers, count: int) -> list[tuple[int, Message]]:
    """Pop `count` messages from blocking receivers: (receiver index, message) in arrival order."""
    got: list[tuple[int, Message]] = []

    def collect() -> bool:
        for index, receiver in enumerate(receivers):
            while receiver.fetcher.has_message:
                got.append((index, receiver.fetcher.pop()))
        return len(got) >= count

    assert wait_until(connection, collect), f"only {len(got)} of {count} messages arrived"
    return got


def wait_until_count(broker, expected: int) -> bool:
    """Wait until the broker has `expected` engine connections (closes are asynchronous)."""
    return poll(broker.connection_count, lambda n: n == expected, timeout=TIMEOUT, interval=0.01) == expected


def client_preamble(container: str = "raw-client", idle_timeout: float = 0) -> bytes:
    """The bytes a proton client writes first without SASL: the AMQP header and its Open."""
    client = Transport()
    if idle_timeout:
        client.idle_timeout = idle_timeout
    pn = ProtonConnection()
    client.bind(pn)
    pn.container = container
    pn.open()
    return bytes(client.peek(client.pending()))


# --------------------------------------------------------------------------- SASL and Open


def test_sasl_anonymous_allowed_without_users(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://anon")
    sender.send(Message(body="hi"))
    receiver = connection.create_receiver("queue://anon")
    assert receiver.receive(TIMEOUT).body == "hi"
    receiver.accept()
    users = amqp_broker.call(lambda: [c.user for c in amqp_broker.engine.connections.values()])
    assert users == [None]
    connection.close()
    assert wait_until_count(amqp_broker, 0)


def test_sasl_anonymous_refused_when_users_are_configured(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(security=USERS)
    with pytest.raises(ConnectionException) as info:
        amqp_connect(broker)
    assert "unauthorized-access" in str(info.value)
    # Skipping SASL altogether is anonymous too: the Open is answered with a close.
    with pytest.raises(ConnectionClosed) as closed:
        amqp_connect(broker, sasl_enabled=False)
    assert closed.value.condition == "amqp:unauthorized-access"
    assert broker.connection_count() == 0


def test_sasl_plain_good_and_bad_credentials(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(security=USERS)
    with pytest.raises(ConnectionException) as info:
        amqp_connect(broker, "alice", "wrong")
    assert "unauthorized-access" in str(info.value)
    with pytest.raises(ConnectionException):
        amqp_connect(broker, "mallory", "secret")
    connection = amqp_connect(broker, "alice", "secret")
    users = broker.call(lambda: [c.user for c in broker.engine.connections.values()])
    assert users == ["alice"]
    sender = connection.create_sender("queue://plain")
    sender.send(Message(body="authenticated"))
    assert broker.queue_stats("queue://plain")["pending"] == 1


def test_open_frame_carries_product_and_version(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    props = connection.conn.remote_properties
    assert props[symbol("product")] == "brokerconf-reference"
    assert props[symbol("version")]
    assert symbol("failover-server-list") not in props
    assert connection.conn.remote_container == "reference"


def test_open_frame_announces_failover_peers(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(failover_peers=["backup-1:5673", "10.0.0.7:5674"])
    connection = amqp_connect(broker)
    servers = connection.conn.remote_properties[symbol("failover-server-list")]
    assert servers == [
        {symbol("hostname"): "backup-1", symbol("network-host"): "backup-1", symbol("port"): 5673, symbol("scheme"): "amqp"},
        {symbol("hostname"): "10.0.0.7", symbol("network-host"): "10.0.0.7", symbol("port"): 5674, symbol("scheme"): "amqp"},
    ]


# --------------------------------------------------------------------------- queues and topics


def test_send_and_receive_on_a_queue_keeps_the_message(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://orders")
    sender.send(Message(body="text body", properties={"i": 7, "f": 2.5, "b": True, "s": "x"},
                        subject="order", correlation_id="corr-1", reply_to="queue://replies",
                        content_type="text/plain", id="client-id-1", durable=True))
    sender.send(Message(body=b"\x00\x01binary", inferred=True))
    receiver = connection.create_receiver("queue://orders", credit=10)
    first = receiver.receive(TIMEOUT)
    assert first.body == "text body"  # AmqpValue(string) comes back as a string
    assert first.properties == {"i": 7, "f": 2.5, "b": True, "s": "x"}
    assert (first.subject, first.correlation_id, first.reply_to) == ("order", "corr-1", "queue://replies")
    assert first.content_type == "text/plain"
    assert first.id == "client-id-1"  # the producer's message-id reaches the consumer
    assert first.durable is True and first.address == "queue://orders"
    assert first.delivery_count == 0 and first.first_acquirer is True
    second = receiver.receive(TIMEOUT)
    assert second.inferred is True and bytes(second.body) == b"\x00\x01binary"  # a Data section
    receiver.accept()
    receiver.accept()
    assert_stats(connection, amqp_broker, "queue://orders", pending=0, in_flight=0, dequeued=2)


def test_bare_address_uses_the_default_kind(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(amqp_options={"default_address_kind": "topic"})
    connection = amqp_connect(broker)
    receiver = connection.create_receiver("prices", credit=5)
    connection.create_sender("prices").send(Message(body="1.5"))
    assert receiver.receive(TIMEOUT).address == "topic://prices"
    assert broker.queue_stats("queue://prices") is None


def test_topic_fans_out_to_every_subscriber(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    receivers = [connection.create_receiver("topic://news", name=f"sub-{i}", credit=10) for i in range(3)]
    sender = connection.create_sender("topic://news")
    for i in range(4):
        sender.send(Message(body=f"n{i}"))
    got = receive_all(connection, receivers, 12)
    for index in range(3):
        assert [m.body for i, m in got if i == index] == ["n0", "n1", "n2", "n3"]


def test_anonymous_relay_routes_by_the_to_address(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    assert symbol("ANONYMOUS-RELAY") in connection.conn.remote_offered_capabilities
    relay = connection.create_sender(None)
    relay.send(Message(address="queue://relayed", body="via relay"))
    with pytest.raises(SendException) as info:
        relay.send(Message(body="no address"))
    assert info.value.state == Delivery.REJECTED
    receiver = connection.create_receiver("queue://relayed")
    assert receiver.receive(TIMEOUT).body == "via relay"


# --------------------------------------------------------------------------- credit


def test_link_credit_limits_what_the_broker_sends(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://credit")
    for i in range(6):
        sender.send(Message(body=f"m{i}"))
    receiver = connection.create_receiver("queue://credit", credit=None)  # no credit yet
    fetcher = receiver.fetcher
    pump(connection)
    assert fetcher.has_message == 0, "messages arrived without credit"
    receiver.link.flow(2)
    assert wait_until(connection, lambda: fetcher.has_message == 2)
    pump(connection)
    assert fetcher.has_message == 2, "more messages than credit"
    assert_stats(connection, amqp_broker, "queue://credit", pending=4, in_flight=2)
    # Settling does not grant credit in AMQP: nothing more comes until the client flows.
    fetcher.pop(), receiver.accept(), fetcher.pop(), receiver.accept()
    pump(connection)
    assert fetcher.has_message == 0
    receiver.link.flow(3)
    assert wait_until(connection, lambda: fetcher.has_message == 3)
    assert [fetcher.pop().body for _ in range(3)] == ["m2", "m3", "m4"]


def test_presettled_receiver_without_credit_takes_no_backlog(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://backlog")
    for i in range(4):
        sender.send(Message(body=f"b{i}"))
    receiver = connection.create_receiver("queue://backlog", credit=None, options=AtMostOnce())
    pump(connection)
    assert receiver.fetcher.has_message == 0
    # At most one message waits in the link for credit (see the session's docstring); the
    # rest stay in the queue.
    assert amqp_broker.queue_stats("queue://backlog")["pending"] >= 3
    receiver.link.flow(2)
    assert wait_until(connection, lambda: receiver.fetcher.has_message == 2)
    pump(connection)
    assert receiver.fetcher.has_message == 2
    assert [receiver.fetcher.pop().body for _ in range(2)] == ["b0", "b1"]
    assert_stats(connection, amqp_broker, "queue://backlog", pending=2)


def test_drain_returns_unused_credit(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    connection.create_sender("queue://drain").send(Message(body="only one"))
    receiver = connection.create_receiver("queue://drain", credit=None)
    receiver.link.drain(5)
    assert wait_until(connection, lambda: receiver.fetcher.has_message == 1 and not receiver.link.draining())
    assert receiver.link.credit == 0


# --------------------------------------------------------------------------- outcomes


def test_outcomes_accept_release_modified_and_delivery_count(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    connection.create_sender("queue://outcomes").send(Message(body="work"))
    receiver = connection.create_receiver("queue://outcomes", credit=1)

    first = receiver.receive(TIMEOUT)
    assert (first.delivery_count, first.first_acquirer) == (0, True)
    settle_with(receiver, Delivery.RELEASED)  # not a delivery attempt: the count stays
    again = receiver.receive(TIMEOUT)
    assert (again.delivery_count, again.first_acquirer) == (0, True)

    settle_with(receiver, Delivery.MODIFIED, failed=True)  # delivery-failed: counted
    failed = receiver.receive(TIMEOUT)
    assert (failed.delivery_count, failed.first_acquirer) == (1, False)

    settle_with(receiver, Delivery.MODIFIED, failed=False)  # modified without failure: not counted
    modified = receiver.receive(TIMEOUT)
    assert modified.delivery_count == 1

    receiver.accept()
    assert_stats(connection, amqp_broker, "queue://outcomes", pending=0, in_flight=0, dequeued=1, dead_lettered=0)


def test_rejected_message_goes_to_the_dead_letter_queue(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    connection.create_sender("queue://poison").send(Message(body="bad", durable=True, properties={"k": 1}))
    receiver = connection.create_receiver("queue://poison")
    assert receiver.receive(TIMEOUT).body == "bad"
    receiver.reject()
    dlq = connection.create_receiver("queue://ActiveMQ.DLQ")
    dead = dlq.receive(TIMEOUT)
    assert dead.body == "bad" and dead.properties["k"] == 1
    assert dead.properties["originalDestination"] == "queue://poison"
    assert "rejected" in dead.properties["dlqDeliveryFailureCause"]
    dlq.accept()
    assert_stats(connection, amqp_broker, "queue://poison", pending=0, in_flight=0)
    pump(connection)
    assert receiver.fetcher.has_message == 0, "a rejected message must not be redelivered"


def test_modified_delivery_failed_dead_letters_after_maximum_redeliveries(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(policy_entries=[{"queue": "retry", "maximum_redeliveries": 1}])
    connection = amqp_connect(broker)
    connection.create_sender("queue://retry").send(Message(body="flaky", durable=True))
    receiver = connection.create_receiver("queue://retry", credit=1)
    for expected_count in (0, 1):
        assert receiver.receive(TIMEOUT).delivery_count == expected_count
        settle_with(receiver, Delivery.MODIFIED, failed=True)
    assert wait_until(connection, lambda: broker.queue_stats("queue://retry")["dead_lettered"] == 1)
    assert broker.queue_stats("queue://ActiveMQ.DLQ")["pending"] == 1


def test_presettled_sends_and_receives(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://fast", options=AtMostOnce())
    assert sender.link.remote_snd_settle_mode == sender.link.SND_SETTLED
    for i in range(3):
        delivery = sender.send(Message(body=f"p{i}"))
        assert delivery.settled or sender.link.snd_settle_mode == sender.link.SND_SETTLED
    receiver = connection.create_receiver("queue://fast", credit=10, options=AtMostOnce())
    assert receiver.link.remote_snd_settle_mode == receiver.link.SND_SETTLED
    got = receive_all(connection, [receiver], 3)
    assert [m.body for _, m in got] == ["p0", "p1", "p2"]
    assert not receiver.fetcher.unsettled  # the broker sent them settled
    assert_stats(connection, amqp_broker, "queue://fast", pending=0, in_flight=0, dequeued=3)


# --------------------------------------------------------------------------- durable subscriptions


def test_durable_subscription_survives_detach_and_close_removes_it(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker, container_id="durable-client")
    key = "durable://durable-client:news-sub"
    receiver = connection.create_receiver("topic://news.eu", name="news-sub", credit=10, options=DurableSubscription())
    assert receiver.link.remote_source.durability == receiver.link.source.durability
    assert amqp_broker.call(lambda: key in amqp_broker.engine.durable)
    receiver.link.detach()
    assert wait_until(connection, lambda: amqp_broker.call(lambda: amqp_broker.engine.durable[key].active is None))

    sender = connection.create_sender("topic://news.eu")
    sender.send(Message(body="while away", durable=True))
    assert amqp_broker.call(lambda: amqp_broker.engine.durable[key].queue.pending_count) == 1

    # Reattach by link name with no address (how JMS clients unsubscribe): it is found.
    found = connection.create_receiver(None, name="news-sub", credit=10)
    assert found.link.remote_source.address == "topic://news.eu"
    message = found.receive(TIMEOUT)
    assert message.body == "while away"
    found.accept()
    found.close()  # closing (not detaching) the link removes the subscription
    assert wait_until(connection, lambda: not amqp_broker.call(lambda: key in amqp_broker.engine.durable))

    sender.send(Message(body="nobody keeps this"))
    again = connection.create_receiver("topic://news.eu", name="news-sub-2", credit=10, options=DurableSubscription())
    pump(connection)
    assert again.fetcher.has_message == 0


def test_durable_subscription_lookup_of_an_unknown_name_is_not_found(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker, container_id="lookup-client")
    with pytest.raises(LinkDetached) as info:
        connection.create_receiver(None, name="never-created")
    assert info.value.condition == "amqp:not-found"


# --------------------------------------------------------------------------- selectors and groups


def test_jms_selector_filter(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://colors")
    for color, size in (("red", 1), ("blue", 2), ("red", 3)):
        sender.send(Message(body=f"{color}{size}", properties={"color": color, "size": size}))
    receiver = connection.create_receiver("queue://colors", credit=10,
                                          options=Selector("color = 'red' AND size > 0", name="jms-selector"))
    echoed = receiver.link.remote_source.filter
    echoed.rewind()
    echoed.next()
    assert symbol("jms-selector") in echoed.get_object()  # the broker says it applies the filter
    got = receive_all(connection, [receiver], 2)
    assert [m.body for _, m in got] == ["red1", "red3"]
    pump(connection)
    assert receiver.fetcher.has_message == 0
    assert_stats(connection, amqp_broker, "queue://colors", pending=1, in_flight=2)


def test_invalid_selector_refuses_the_link_not_the_connection(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    with pytest.raises(LinkDetached) as info:
        connection.create_receiver("queue://colors", name="bad", options=Selector("color = = 'red'", name="jms-selector"))
    assert info.value.condition == "amqp:invalid-field"
    assert "selector" in str(info.value)
    receiver = connection.create_receiver("queue://colors", name="good")
    connection.create_sender("queue://colors").send(Message(body="still works"))
    assert receiver.receive(TIMEOUT).body == "still works"


def test_message_group_is_pinned_to_one_receiver(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    receivers = [connection.create_receiver("queue://grouped", name=f"g{i}", credit=20) for i in range(2)]
    sender = connection.create_sender("queue://grouped")
    for seq in range(1, 6):
        for group in ("A", "B", "C"):
            sender.send(Message(body=f"{group}{seq}", group_id=group, group_sequence=seq))
    got = receive_all(connection, receivers, 15)
    owners: dict[str, set[int]] = {}
    for index, message in got:
        owners.setdefault(message.group_id, set()).add(index)
    assert all(len(v) == 1 for v in owners.values()), f"a group went to two receivers: {owners}"
    assert len({next(iter(v)) for v in owners.values()}) == 2, "groups should spread over both receivers"
    for group in ("A", "B", "C"):
        assert [m.group_sequence for _, m in got if m.group_id == group] == [1, 2, 3, 4, 5]


# --------------------------------------------------------------------------- priority and TTL


def test_priority_orders_delivery_and_is_kept(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://prio")
    sender.send(Message(body="low", priority=1))
    sender.send(Message(body="high", priority=8))
    sender.send(Message(body="default"))
    receiver = connection.create_receiver("queue://prio", credit=10)
    got = receive_all(connection, [receiver], 3)
    assert [(m.body, m.priority) for _, m in got] == [("high", 8), ("default", 4), ("low", 1)]


def test_ttl_expires_messages_and_is_carried(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    sender = connection.create_sender("queue://ttl")
    sender.send(Message(body="short", ttl=0.2))
    sender.send(Message(body="long", ttl=60))
    time.sleep(0.4)
    receiver = connection.create_receiver("queue://ttl", credit=10)
    message = receiver.receive(TIMEOUT)
    assert message.body == "long"
    assert 50 < message.ttl <= 60  # the time left
    assert abs(message.expiry_time - (message.creation_time + 60)) < 1
    pump(connection)
    assert receiver.fetcher.has_message == 0
    assert amqp_broker.queue_stats("queue://ttl")["expired"] == 1


# --------------------------------------------------------------------------- errors


def test_unknown_address_is_not_found(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    with pytest.raises(LinkDetached) as info:
        connection.create_receiver("exchange://nope", name="r1")
    assert info.value.condition == "amqp:not-found"
    with pytest.raises(LinkDetached) as info:
        connection.create_sender("exchange://nope", name="s1")
    assert info.value.condition == "amqp:not-found"
    with pytest.raises(LinkDetached) as info:  # consuming from a wildcard queue
        connection.create_receiver("queue://orders.>", name="r2")
    assert info.value.condition == "amqp:not-found"
    assert connection.create_sender("queue://fine", name="s2")  # the connection carries on


def test_unauthorized_address_is_refused(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(security={**USERS, "authorization": [
        {"queue": "app.>", "read": ["users"], "write": ["users"]},
        {"queue": ">", "read": ["admins"], "write": ["admins"]},
    ]})
    connection = amqp_connect(broker, "alice", "secret")
    with pytest.raises(LinkDetached) as info:
        connection.create_sender("queue://admin.audit", name="s1")
    assert info.value.condition == "amqp:unauthorized-access"
    with pytest.raises(LinkDetached) as info:
        connection.create_receiver("queue://admin.audit", name="r1")
    assert info.value.condition == "amqp:unauthorized-access"
    # An anonymous relay link checks each message: refused ones are rejected.
    relay = connection.create_sender(None, name="relay")
    with pytest.raises(SendException):
        relay.send(Message(address="queue://admin.audit", body="no"))
    relay.send(Message(address="queue://app.orders", body="yes"))
    assert broker.queue_stats("queue://app.orders")["pending"] == 1
    assert broker.queue_stats("queue://admin.audit") is None or broker.queue_stats("queue://admin.audit")["pending"] == 0


def test_full_destination_rejects_with_resource_limit_exceeded(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(policy_entries=[
        {"queue": "strict", "memory_limit": 1000, "send_fail_if_no_space": True}])
    connection = amqp_connect(broker)
    sender = connection.create_sender("queue://strict")
    sender.send(Message(body=b"x" * 1500, inferred=True))
    delivery = sender.link.send(Message(body=b"y" * 10, inferred=True))
    assert wait_until(connection, lambda: delivery.remote_state == Delivery.REJECTED)
    assert delivery.remote.condition.name == "amqp:resource-limit-exceeded"
    assert broker.queue_stats("queue://strict")["pending"] == 1


def test_producer_flow_control_withholds_credit(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(policy_entries=[{"queue": "slow", "memory_limit": 2000}])
    connection = amqp_connect(broker)
    sender = connection.create_sender("queue://slow")
    sender.send(Message(body=b"a" * 1500, inferred=True))
    sender.send(Message(body=b"b" * 1500, inferred=True))  # accepted; the queue is now full
    assert wait_until(connection, lambda: sender.link.credit == 0), "credit was not taken back"
    blocked = sender.link.send(Message(body=b"c" * 10, inferred=True))
    pump(connection)
    assert not blocked.settled and broker.queue_stats("queue://slow")["pending"] == 2
    receiver = connection.create_receiver("queue://slow", credit=10)
    for _ in range(2):
        receiver.receive(TIMEOUT)
        receiver.accept()
    assert wait_until(connection, lambda: blocked.remote_state == Delivery.ACCEPTED)
    assert wait_until(connection, lambda: sender.link.credit > 0), "credit was not restored"
    assert receive_bytes(receiver) == b"c" * 10


def test_garbage_bytes_close_only_that_connection(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    receiver = connection.create_receiver("queue://survivor", credit=5)
    # Not AMQP at all: the broker answers with the header it speaks and closes (AMQP 2.2).
    reply = raw_exchange(amqp_broker.amqp_address, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply == b"AMQP\x03\x01\x00\x00"
    # A good AMQP header, then a frame that is not one: closed (before an Open, AMQP has no
    # frame to say why).
    reply = raw_exchange(amqp_broker.amqp_address, b"AMQP\x00\x01\x00\x00" + b"\x00\x00\x00\x0c\x02\x00\x00\x00\xff\xff\xff\xff")
    assert reply == b"AMQP\x00\x01\x00\x00"
    # A frame larger than max-frame-size (proton's own check).
    reply = raw_exchange(amqp_broker.amqp_address, b"AMQP\x00\x01\x00\x00" + b"\x7f\x00\x00\x00\x02\x00\x00\x00")
    assert reply.startswith(b"AMQP\x00\x01\x00\x00") and b"amqp:" in reply
    # SASL, then garbage instead of a sasl-init.
    reply = raw_exchange(amqp_broker.amqp_address, b"AMQP\x03\x01\x00\x00" + b"\x00\x00\x00\x10\x02\x01\x00\x00garbage!")
    assert reply.startswith(b"AMQP\x03\x01\x00\x00")
    # A truncated stream: the socket closes half way through a frame.
    with socket.create_connection(amqp_broker.amqp_address, timeout=TIMEOUT) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00\x00\x00\x01\x00\x02\x00")
    # The existing connection and new ones carry on.
    connection.create_sender("queue://survivor").send(Message(body="alive"))
    assert receiver.receive(TIMEOUT).body == "alive"
    other = amqp_connect(amqp_broker)
    other.create_sender("queue://survivor").send(Message(body="new client"))
    assert receiver.receive(TIMEOUT).body == "new client"
    assert wait_until_count(amqp_broker, 2)


# --------------------------------------------------------------------------- cross-protocol


def test_stomp_to_amqp_keeps_properties_and_group(amqp_broker, amqp_connect, stomp_client):
    connection = amqp_connect(amqp_broker)
    receiver = connection.create_receiver("queue://bridge", credit=5)
    stomp = stomp_client(amqp_broker.stomp_address)
    stomp.send("/queue/bridge", "from stomp", content_type="text/plain", JMSXGroupID="g-1", JMSXGroupSeq="2",
               region="eu", priority="6", persistent="true", correlation_id="c-9", type="order")
    message = receiver.receive(TIMEOUT)
    assert bytes(message.body) == b"from stomp" and message.inferred  # a Data section
    assert message.content_type == "text/plain"
    assert (message.group_id, message.group_sequence) == ("g-1", 2)
    assert message.properties == {"region": "eu"}
    assert (message.priority, message.durable) == (6, True)
    assert (message.correlation_id, message.subject) == ("c-9", "order")
    assert message.address == "queue://bridge"
    receiver.accept()


def test_amqp_to_stomp_keeps_properties_and_group(amqp_broker, amqp_connect, stomp_client):
    stomp = stomp_client(amqp_broker.stomp_address)
    stomp.subscribe("/queue/bridge.back", "s1", ack="client-individual")
    connection = amqp_connect(amqp_broker)
    connection.create_sender("queue://bridge.back").send(Message(
        body="from amqp", group_id="g-2", group_sequence=3, properties={"n": 5, "ok": True, "s": "x"},
        subject="invoice", correlation_id="c-1", priority=7, durable=True))
    frame = stomp.listener.get()
    headers = frame.headers
    assert frame.body == "from amqp"
    assert (headers["JMSXGroupID"], headers["JMSXGroupSeq"]) == ("g-2", "3")
    assert (headers["n"], headers["ok"], headers["s"]) == ("5", "true", "x")
    assert (headers["type"], headers["correlation-id"], headers["priority"]) == ("invoice", "c-1", "7")
    assert headers["persistent"] == "true"
    assert headers["destination"] == "/queue/bridge.back"


# --------------------------------------------------------------------------- more edges


def test_container_id_is_the_client_id(amqp_broker, amqp_connect):
    first = amqp_connect(amqp_broker, container_id="shared-container")
    ids = amqp_broker.call(lambda: sorted(str(c.client_id) for c in amqp_broker.engine.connections.values()))
    assert ids == ["shared-container"]
    # A second connection from the same container (a proton Container opening two) is let in
    # without a client id, so it cannot own durable subscriptions...
    second = amqp_connect(amqp_broker, container_id="shared-container")
    with pytest.raises(LinkDetached) as info:
        second.create_receiver("topic://t", name="dur", options=DurableSubscription())
    assert info.value.condition == "amqp:invalid-field"
    # ...unless the client asks to be the container's only connection (Artemis' capability).
    with pytest.raises(ConnectionClosed) as closed:
        amqp_connect(amqp_broker, container_id="shared-container",
                     desired_capabilities=[symbol("sole-connection-for-container")])
    assert closed.value.condition == "amqp:invalid-field"
    assert first.create_receiver("topic://t", name="dur", options=DurableSubscription())


def test_large_messages_span_many_frames(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)
    body = bytes(range(256)) * 2000  # 512 KB: many 128 KiB / 32 KiB frames each way
    connection.create_sender("queue://big").send(Message(body=body, inferred=True))
    receiver = connection.create_receiver("queue://big")
    assert receive_bytes(receiver) == body


def test_message_larger_than_max_message_size_closes_the_link(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(amqp_options={"max_message_size": 1000})
    connection = amqp_connect(broker)
    sender = connection.create_sender("queue://small")
    assert sender.link.remote_max_message_size == 1000
    with pytest.raises(LinkDetached) as info:
        sender.send(Message(body=b"z" * 5000, inferred=True))
    assert info.value.condition == "amqp:link:message-size-exceeded"
    assert broker.queue_stats("queue://small") is None
    connection.create_sender("queue://small", name="again").send(Message(body="fits"))


def test_send_fail_if_no_space_after_timeout_rejects_sends(amqp_broker_factory, amqp_connect):
    broker = amqp_broker_factory(policy_entries=[
        {"queue": "timed", "memory_limit": 2000, "send_fail_if_no_space_after_timeout": 300}])
    connection = amqp_connect(broker)
    sender = connection.create_sender("queue://timed")
    sender.send(Message(body=b"a" * 1500, inferred=True))
    sender.send(Message(body=b"b" * 1500, inferred=True))
    assert wait_until(connection, lambda: sender.link.credit == 0)
    # After the timeout the credit comes back, and sends are refused while the queue is full.
    assert wait_until(connection, lambda: sender.link.credit > 0), "credit not restored after the timeout"
    refused = sender.link.send(Message(body=b"c", inferred=True))
    assert wait_until(connection, lambda: refused.remote_state == Delivery.REJECTED)
    assert refused.remote.condition.name == "amqp:resource-limit-exceeded"
    receiver = connection.create_receiver("queue://timed", credit=10)
    for _ in range(2):
        receiver.receive(TIMEOUT)
        receiver.accept()
    assert_stats(connection, broker, "queue://timed", pending=0, in_flight=0)
    sender.send(Message(body=b"d", inferred=True))  # room again: accepted
    assert receive_bytes(receiver) == b"d"


def test_durable_message_survives_a_restart(broker_factory, amqp_connect, tmp_path):
    from .amqp_fixtures import AmqpBroker

    config = {"amqp": "127.0.0.1:0", "store": {"kind": "journal", "directory": str(tmp_path / "journal")}}
    first = AmqpBroker(broker_factory(**config))
    connection = amqp_connect(first)
    connection.create_sender("queue://kept").send(Message(body="persistent", durable=True))  # accepted = stored
    connection.close()
    first.running.stop()
    second = AmqpBroker(broker_factory(**config))
    receiver = amqp_connect(second).create_receiver("queue://kept")
    message = receiver.receive(TIMEOUT)
    assert (message.body, message.durable) == ("persistent", True)
    receiver.accept()


def test_garbage_after_open_closes_with_an_error(amqp_broker, amqp_connect):
    # A valid header and Open, as a client transport writes them (no SASL), then garbage.
    reply = raw_exchange(amqp_broker.amqp_address, client_preamble() + b"\x00\x00\x00\x0c\x02\x00\x00\x00\x00\x53\x99\x45")
    assert reply.startswith(b"AMQP\x00\x01\x00\x00")
    assert b"amqp:connection:framing-error" in reply  # the close says why
    assert wait_until_count(amqp_broker, 0)
    connection = amqp_connect(amqp_broker)
    connection.create_sender("queue://after-garbage").send(Message(body="fine"))


def test_silent_client_is_closed_after_the_idle_timeout(amqp_broker_factory):
    broker = amqp_broker_factory(amqp_options={"idle_timeout_ms": 400})
    started = time.monotonic()
    reply = raw_exchange(broker.amqp_address, client_preamble())  # then silence
    assert b"amqp:resource-limit-exceeded" in reply  # proton: local-idle-timeout expired
    assert 0.3 < time.monotonic() - started < 3
    assert wait_until_count(broker, 0)


def test_empty_frames_keep_a_short_client_idle_timeout_alive(amqp_broker, amqp_connect):
    # The client expects a frame at least every 0.2 s; housekeeping ticks every 0.25 s, so the
    # broker must tick proton at proton's own deadlines to keep the connection.
    connection = amqp_connect(amqp_broker, heartbeat=0.2)
    assert connection.conn.transport.remote_idle_timeout == 15.0  # half of idle_timeout_ms (proton)
    pump(connection, 1.0)
    connection.create_sender("queue://alive").send(Message(body="still open"))
    assert amqp_broker.queue_stats("queue://alive")["pending"] == 1


def test_connection_that_never_opens_is_closed(amqp_broker_factory):
    broker = amqp_broker_factory(amqp_options={"open_timeout_ms": 300})
    started = time.monotonic()
    assert raw_exchange(broker.amqp_address, b"") == b""  # nothing sent, nothing answered
    assert raw_exchange(broker.amqp_address, b"AMQP\x03\x01\x00\x00").startswith(b"AMQP\x03\x01\x00\x00")  # stuck in SASL
    assert time.monotonic() - started < 4


def test_a_failing_delivery_closes_only_the_consumer_connection(amqp_broker, amqp_connect, monkeypatch):
    from reference_broker.protocols.amqp import session as amqp_session

    real = amqp_session.encode_delivery
    failures = []

    def encode_once_broken(ref, now_ms, extra=None):
        if ref.message.body == b"boom" and not failures:
            failures.append(ref)
            raise RuntimeError("simulated encoder bug")
        return real(ref, now_ms, extra)

    monkeypatch.setattr(amqp_session, "encode_delivery", encode_once_broken)
    consumer = amqp_connect(amqp_broker)
    consumer.create_receiver("queue://fragile", credit=5)
    producer = amqp_connect(amqp_broker)
    sender = producer.create_sender("queue://fragile")
    sender.send(Message(body=b"boom", inferred=True))  # the producer is not hurt
    with pytest.raises(ConnectionClosed) as closed:
        wait_until(consumer, lambda: False, TIMEOUT)
    assert closed.value.condition == "amqp:internal-error"
    sender.send(Message(body=b"after", inferred=True))
    # The message the broken connection held goes back to the queue for the next consumer.
    again = amqp_connect(amqp_broker).create_receiver("queue://fragile", credit=5)
    assert [receive_bytes(again) for _ in range(2)] == [b"boom", b"after"]


# ------------------------------------------------------------ dynamic (temporary) nodes


def test_dynamic_receiver_gets_a_temporary_queue_others_can_reply_to(amqp_broker, amqp_connect):
    requester = amqp_connect(amqp_broker)
    receiver = requester.create_receiver(None, dynamic=True, credit=10)
    address = receiver.link.remote_source.address
    assert address and address.startswith("queue://ID:"), address  # named by the broker
    responder = amqp_connect(amqp_broker)
    responder.create_sender(address).send(Message(body="reply"))
    assert receiver.receive(TIMEOUT).body == "reply"
    receiver.accept()
    with pytest.raises(LinkDetached) as info:  # only its connection may consume from it
        responder.create_receiver(address)
    assert info.value.condition == "amqp:not-found"


def test_dynamic_sender_and_topic_capability(amqp_broker, amqp_connect):
    connection = amqp_connect(amqp_broker)

    class DynamicTarget(LinkOption):  # proton's BlockingConnection has no dynamic= for senders
        def apply(self, link):
            link.target.dynamic = True

    sender = connection.create_sender(None, options=DynamicTarget())
    assert sender.link.remote_target.address.startswith("queue://ID:")

    class TemporaryTopic(LinkOption):  # what Qpid JMS asks for with createTemporaryTopic()
        def apply(self, link):
            link.source.capabilities.put_object([symbol("temporary-topic")])

    receiver = connection.create_receiver(None, dynamic=True, options=TemporaryTopic())
    assert receiver.link.remote_source.address.startswith("topic://ID:")


def test_temporary_queue_is_gone_when_its_connection_closes(amqp_broker, amqp_connect):
    owner = amqp_connect(amqp_broker)
    address = owner.create_receiver(None, dynamic=True).link.remote_source.address
    other = amqp_connect(amqp_broker)
    sender = other.create_sender(None)  # anonymous relay: refused per message
    owner.close()
    with pytest.raises(LinkDetached) as info:
        other.create_sender(address, name="late")
    assert info.value.condition == "amqp:not-found"
    with pytest.raises(SendException) as sent:
        sender.send(Message(address=address, body="too late"))
    assert sent.value.state == Delivery.REJECTED
