"""Core queue semantics: FIFO per producer, receipts, competing consumers, exclusive consumers,
consumer and message priority, selectors, expiry, and STOMP's answer to a bad frame.

Rules and their sources are in conformance/spec/core.toml. Every check observes outcomes on the
wire (which consumer got which message, in which order, flagged how), never the broker's own
bookkeeping, so the same test runs against the reference broker and ActiveMQ Classic.
"""

from __future__ import annotations

import socket
import time

import pytest

from conformance.clients.base import ClientError
from conformance.scenario import DestinationPolicy, Scenario
# "Nothing more arrives" is a barrier: a marker sent by the test's producer behind its messages
# on the same queue (and matching the consumer's selector); a queue hands its messages out in
# order, so once the marker is in, nothing sent before it is still on its way to that consumer.
# The marker is sent only after the expected messages arrived, so redeliveries the broker queued
# before them are ahead of it too. The quiet window stays where no marker can reach the consumer.
from conformance.waiting import QUIET, new_marker, receive_until_each_marked, receive_until_marker

# Message prioritisation is off by default in Classic: "How can I support priority queues" asks
# for prioritizedMessages on the destination's policy entry, which the ActiveMQ target writes for
# every queue policy of a scenario. (The reference broker orders by priority by default.)
PRIORITY_QUEUES = "queue://core.prio.>"

SCENARIO = Scenario(name="core-queues", policies=(DestinationPolicy(PRIORITY_QUEUES),))


def texts(messages) -> list[str]:
    return [m.text for m in messages]


def up_to_marker(subscription, producer, queue: str, properties: dict | None = None) -> list:
    """What reaches ``subscription`` before a marker sent now by ``producer`` to ``queue`` (with
    ``properties``, to match a selector); the subscription must be the one the marker goes to."""
    marker = new_marker()
    producer.send(queue, marker, properties, persistent=False)
    return receive_until_marker(subscription, marker)


@pytest.mark.spec("Q-FIFO-1")
@pytest.mark.protocols("stomp", "amqp")
def test_single_producer_order_kept(client, dest):
    queue = dest("queue", "core.fifo")
    consumer = client().subscribe(queue, ack="auto")
    producer = client()
    sent = [f"m{i}" for i in range(100)]
    for body in sent:
        producer.send(queue, body, persistent=False)
    got = texts(consumer.receive_n(len(sent), timeout=10))
    assert got == sent, (f"Q-FIFO-1: one producer's 100 messages reached the single consumer as "
                         f"{len(got)} messages in a different order; first difference at index "
                         f"{next((i for i, (a, b) in enumerate(zip(got, sent)) if a != b), len(got))}: {got[:12]}...")


@pytest.mark.spec("STORE-RECEIPT-1")
def test_persistent_send_confirmed_by_receipt_then_consumed(client, dest):
    queue = dest("queue", "core.receipt")
    producer = client()
    for i in range(20):
        try:
            # The adapter sends each SEND with a receipt header and returns once the RECEIPT
            # naming it arrives (STOMP 1.2 "Header receipt").
            producer.send(queue, f"p{i}", persistent=True)
        except ClientError as exc:
            pytest.fail(f"STORE-RECEIPT-1: persistent SEND #{i} was not confirmed by a RECEIPT: {exc}")
    consumer = client().subscribe(queue, ack="client-individual")
    got = consumer.receive_n(20, timeout=5)
    for message in got:
        consumer.ack(message)
    assert texts(got) == [f"p{i}" for i in range(20)], (
        f"STORE-RECEIPT-1: 20 receipted persistent messages, consumer got {texts(got)}")
    assert all(m.persistent for m in got), (
        "STORE-RECEIPT-1: messages sent with persistent:true came back without persistent:true: "
        f"{[m.headers.get('persistent') for m in got]}")


@pytest.mark.spec("Q-COMPETE-1")
@pytest.mark.protocols("stomp", "amqp")
def test_competing_consumers_each_message_exactly_once(client, dest):
    queue = dest("queue", "core.compete")
    # prefetch 1: neither consumer can take the whole queue into its buffer, so both compete.
    first = client().subscribe(queue, ack="auto", prefetch=1)
    second = client().subscribe(queue, ack="auto", prefetch=1)
    producer = client()
    sent = [f"c{i}" for i in range(100)]
    for body in sent:
        producer.send(queue, body, persistent=False)
    got_first: list[str] = []
    got_second: list[str] = []
    deadline = time.monotonic() + 10
    while len(got_first) + len(got_second) < len(sent) and time.monotonic() < deadline:
        got_first += texts(first.receive_n(len(sent), timeout=0.05))
        got_second += texts(second.receive_n(len(sent), timeout=0.05))
    # Markers one at a time until each consumer got one (both have room, so they take turns);
    # a consumer the markers missed (limit reached) is watched for the quiet window instead.
    more, seen = receive_until_each_marked({"first": first, "second": second},
                                           lambda body: producer.send(queue, body, persistent=False), limit=8)
    got_first += texts(more["first"]) + ([] if seen["first"] else texts(first.drain(QUIET)))
    got_second += texts(more["second"]) + ([] if seen["second"] else texts(second.drain(QUIET)))
    both = got_first + got_second
    duplicated = sorted({b for b in both if both.count(b) > 1})
    missing = sorted(set(sent) - set(both))
    assert not duplicated and not missing, (
        f"Q-COMPETE-1: 100 messages to two competing consumers: duplicated {duplicated}, missing {missing} "
        f"(split {len(got_first)}/{len(got_second)})")
    assert len(both) == len(sent), f"Q-COMPETE-1: {len(both)} deliveries for {len(sent)} messages"


@pytest.mark.spec("Q-EXCL-1")
@pytest.mark.requires("exclusive_consumers")
def test_exclusive_consumer_receives_everything(client, dest):
    queue = dest("queue", "core.excl")
    plain = client().subscribe(queue, ack="client-individual")
    exclusive = client().subscribe(queue, ack="client-individual", exclusive=True)
    producer = client()
    sent = [f"e{i}" for i in range(6)]
    for body in sent:
        producer.send(queue, body)
    got = exclusive.receive_n(len(sent), timeout=5)
    for message in got:
        exclusive.ack(message)  # confirmed by a receipt: nothing of it can come back
    # Per-consumer barrier for the plain consumer: with the exclusive one gone, a marker behind
    # e5 goes to it, so anything that leaked to it (or a duplicate) arrived before the marker.
    exclusive.close()
    leaked = texts(up_to_marker(plain, producer, queue))
    assert texts(got) == sent and not leaked, (
        f"Q-EXCL-1: with an exclusive consumer attached, it got {texts(got)} and the other consumer {leaked}; "
        f"expected the exclusive one to get all of {sent}")


@pytest.mark.spec("Q-EXCL-2")
@pytest.mark.requires("exclusive_consumers")
def test_exclusive_consumer_fails_over_with_its_unacked_messages(client, dest):
    queue = dest("queue", "core.exclfail")
    plain = client().subscribe(queue, ack="client-individual")
    owner_client = client()
    owner = owner_client.subscribe(queue, ack="client-individual", exclusive=True)
    producer = client()
    for i in range(4):
        producer.send(queue, f"x{i}")
    held = owner.receive_n(4, timeout=5)
    assert texts(held) == ["x0", "x1", "x2", "x3"], f"Q-EXCL-2: the exclusive consumer got {texts(held)} before failing over"
    owner_client.close()  # the exclusive consumer goes away without acknowledging
    producer.send(queue, "x4")
    got = plain.receive_n(5, timeout=5)
    got += up_to_marker(plain, producer, queue)  # sent once the redeliveries came, so behind them
    for message in got:
        plain.ack(message)
    assert sorted(texts(got)) == ["x0", "x1", "x2", "x3", "x4"], (
        f"Q-EXCL-2: after the exclusive consumer closed, the remaining consumer got {texts(got)}; "
        "expected its 4 unacknowledged messages plus the new one")
    not_flagged = [m.text for m in got if m.text != "x4" and not m.redelivered]
    assert not not_flagged, f"Q-EXCL-2: messages taken over from the exclusive consumer not flagged redelivered: {not_flagged}"


@pytest.mark.spec("Q-CPRIO-1")
@pytest.mark.requires("consumer_priority")
def test_highest_priority_consumer_served_until_its_prefetch_is_full(client, dest):
    queue = dest("queue", "core.cprio")
    # The low-priority consumer subscribes first and has plenty of room: only priority can
    # explain the high one getting the first messages.
    low = client().subscribe(queue, ack="client-individual", prefetch=100)
    high = client().subscribe(queue, ack="client-individual", prefetch=5, priority=10)
    producer = client()
    for i in range(10):
        producer.send(queue, f"k{i}")
    # Quiet window for the high one: its prefetch is full (5 unacknowledged), so no marker can
    # reach it without an acknowledgement that would change what is checked.
    got_high = high.receive_n(5, timeout=5) + high.drain(QUIET)
    # The low one has room and the high one none, so a marker behind k9 goes to the low one.
    got_low = low.receive_n(5, timeout=5)
    got_low += up_to_marker(low, producer, queue)
    assert texts(got_high) == [f"k{i}" for i in range(5)] and texts(got_low) == [f"k{i}" for i in range(5, 10)], (
        f"Q-CPRIO-1: priority-10 consumer (prefetch 5) got {texts(got_high)}, priority-0 consumer got "
        f"{texts(got_low)}; expected k0-k4 to the high one until its prefetch was full, then k5-k9 to the low one")


@pytest.mark.spec("Q-PRIO-1")
@pytest.mark.requires("message_priority", "scenario.policies")
def test_waiting_messages_delivered_highest_priority_first(client, dest):
    queue = dest("queue", "core.prio")
    producer = client()
    priorities = [1, 1, 9, 4, 9, 0, 4, 7]
    sent = [(f"p{i}-prio{p}", p) for i, p in enumerate(priorities)]
    for body, priority in sent:
        producer.send(queue, body, priority=priority)
    # Only now a consumer: every message is waiting, so the broker chooses the order.
    consumer = client().subscribe(queue, ack="client-individual")
    got = consumer.receive_n(len(sent), timeout=5)
    for message in got:
        consumer.ack(message)
    expected = [body for body, _ in sorted(sent, key=lambda s: -s[1])]  # stable: FIFO within a priority
    assert texts(got) == expected, (
        f"Q-PRIO-1: messages sent with priorities {priorities} before anyone consumed came out as {texts(got)}; "
        f"expected highest priority first, send order within a priority: {expected}")


@pytest.mark.spec("SEL-MATCH-1")
@pytest.mark.protocols("stomp", "amqp")
@pytest.mark.requires("selectors")
def test_selector_delivers_exactly_the_matching_messages(client, dest):
    queue = dest("queue", "core.sel")
    consumer = client().subscribe(queue, ack="auto", selector="color = 'red' AND shape <> 'square'")
    producer = client()
    sent = [("red", "circle"), ("blue", "circle"), ("red", "square"), ("red", "star"), ("green", "star")]
    for i, (color, shape) in enumerate(sent):
        producer.send(queue, f"{color}-{shape}-{i}", {"color": color, "shape": shape}, persistent=False)
    got = consumer.receive_n(2, timeout=5)
    got = texts(got + up_to_marker(consumer, producer, queue, {"color": "red", "shape": "marker"}))
    assert got == ["red-circle-0", "red-star-3"], (
        f"SEL-MATCH-1: selector \"color = 'red' AND shape <> 'square'\" delivered {got}; "
        "expected exactly red-circle-0 and red-star-3")


@pytest.mark.spec("SEL-QUEUE-1")
@pytest.mark.protocols("stomp", "amqp")
@pytest.mark.requires("selectors")
def test_message_rejected_by_selector_stays_for_another_consumer(client, dest):
    queue = dest("queue", "core.selq")
    picky = client().subscribe(queue, ack="auto", selector="color = 'red'")
    producer = client()
    for i, color in enumerate(["red", "blue", "red", "blue"]):
        producer.send(queue, f"{color}{i}", {"color": color})
    picked = picky.receive_n(2, timeout=5)
    picked = texts(picked + up_to_marker(picky, producer, queue, {"color": "red"}))
    assert picked == ["red0", "red2"], f"SEL-QUEUE-1: the red-only consumer got {picked}"
    anyone = client().subscribe(queue, ack="auto")
    rest = anyone.receive_n(2, timeout=5)
    rest = texts(rest + up_to_marker(anyone, producer, queue, {"color": "blue"}))  # blue: not for picky
    assert rest == ["blue1", "blue3"], (
        f"SEL-QUEUE-1: messages the red-only selector skipped should wait for another consumer; "
        f"a consumer without selector then got {rest}")


@pytest.mark.spec("EXP-1")
@pytest.mark.protocols("stomp", "amqp")
@pytest.mark.requires("expiry")
def test_expired_message_not_delivered(client, dest):
    queue = dest("queue", "core.exp")
    producer = client()
    producer.send(queue, "expires-soon", ttl_ms=200, persistent=False)
    producer.send(queue, "no-expiry", persistent=False)
    time.sleep(0.6)  # well past the 200 ms time to live, no consumer meanwhile
    consumer = client().subscribe(queue, ack="auto")
    got = texts(consumer.receive_n(1, timeout=5) + up_to_marker(consumer, producer, queue))
    assert got == ["no-expiry"], (
        f"EXP-1: a message with a 200 ms time to live, consumed 600 ms later, and an unexpiring one: got {got}")


@pytest.mark.spec("EXP-DLQ-1")
@pytest.mark.requires("expiry", "dead_letter")
def test_expired_persistent_message_dead_lettered(client, dest):
    queue = dest("queue", "core.expdlq")
    marker = queue.rpartition(".")[2]
    producer = client()
    producer.send(queue, "expires-to-dlq", {"core_marker": marker}, ttl_ms=200, persistent=True)
    time.sleep(0.6)
    # A consumer makes the broker look at the message (Classic expires on dispatch, or on its
    # periodic sweep); it must not get it.
    consumer = client().subscribe(queue, ack="auto")
    # The marker queues behind the expired message: had that been delivered, it came first.
    delivered = texts(up_to_marker(consumer, producer, queue))
    assert delivered == [], f"EXP-DLQ-1: the expired message was delivered: {delivered}"
    dlq = client().subscribe("queue://ActiveMQ.DLQ", ack="client-individual", selector=f"core_marker = '{marker}'")
    dead = dlq.receive(timeout=5)
    if dead is not None:
        dlq.ack(dead)
    assert dead is not None and dead.text == "expires-to-dlq", (
        f"EXP-DLQ-1: the expired persistent message did not reach ActiveMQ.DLQ within 5 s (got {dead})")


@pytest.mark.spec("STOMP-ERROR-1")
def test_unknown_command_answered_with_error_and_close(broker, client, dest):
    queue = dest("queue", "core.err")
    bystander = client()
    inbox = bystander.subscribe(queue, ack="auto")
    host, port = broker.host, broker.ports["stomp"]
    login, passcode = broker.credentials
    credentials = f"login:{login}\npasscode:{passcode}\n" if login else ""
    received = b""
    closed = False
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"CONNECT\naccept-version:1.2\nhost:localhost\n{credentials}\n\0".encode())
        sock.sendall(b"BOGUS\n\n\0")
        deadline = time.monotonic() + 5
        sock.settimeout(0.5)
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                closed = True
                break
            received += chunk
    frames = [f.lstrip(b"\r\n") for f in received.split(b"\0") if f.strip(b"\r\n")]
    commands = [f.split(b"\n", 1)[0].strip() for f in frames]
    assert commands[:1] == [b"CONNECTED"] and b"ERROR" in commands, (
        f"STOMP-ERROR-1: an unknown command got no ERROR frame; frames received: {commands} ({received[:300]!r})")
    assert closed, "STOMP-ERROR-1: the server kept the connection open for 5 s after sending ERROR"
    bystander.send(queue, "still-served", persistent=False)
    message = inbox.receive(timeout=5)
    assert message is not None and message.text == "still-served", (
        "STOMP-ERROR-1: another client's connection stopped working after the bad frame")
