"""Core topic semantics: fan-out to every subscriber, and durable subscriptions that keep
messages while their subscriber is away. Checked over STOMP, MQTT and AMQP (a protocol a target
does not speak is reported not applicable). Rules: conformance/spec/core.toml.
"""

from __future__ import annotations

import uuid

import pytest

from conformance.scenario import Scenario
from conformance.waiting import QUIET, new_marker, receive_until_marker

SCENARIO = Scenario(name="core-topics")


def texts(messages) -> list[str]:
    return [m.text for m in messages]


@pytest.mark.spec("TOPIC-FANOUT-1")
@pytest.mark.protocols("stomp", "mqtt", "amqp")
def test_every_subscriber_gets_every_message(client, dest):
    topic = dest("topic", "core.fanout")
    subscriptions = [client().subscribe(topic, ack="auto") for _ in range(3)]
    producer = client()
    sent = [f"t{i}" for i in range(30)]
    for body in sent:
        producer.send(topic, body)
    # Barrier: a topic hands every subscriber a copy of each message in publish order, so one
    # marker published behind t29 reaches each subscriber after everything sent before it -
    # duplicates and strays included; each subscriber reads up to its own copy.
    marker = new_marker()
    producer.send(topic, marker)
    got = [texts(receive_until_marker(s, marker)) for s in subscriptions]
    wrong = {n: g for n, g in enumerate(got) if g != sent}
    assert not wrong, ("TOPIC-FANOUT-1: 3 subscribers, 30 messages published; subscribers that did not get "
                       "exactly t0..t29 in order: " + "; ".join(f"#{n}: {len(g)} messages {g[:8]}..."
                                                                for n, g in wrong.items()))


@pytest.mark.spec("DUR-KEEP-1")
@pytest.mark.protocols("stomp", "mqtt", "amqp")
@pytest.mark.requires("durable_subscriptions")
def test_durable_subscription_keeps_messages_while_away(client, dest):
    topic = dest("topic", "core.durable")
    client_id = f"core-durable-{uuid.uuid4().hex[:8]}"
    name = "keeper"
    subscriber = client(client_id=client_id)
    # The first message is acknowledged explicitly (STOMP ACK with a receipt, AMQP accepted), so
    # the broker has recorded it before the subscriber leaves. In auto mode the broker records it
    # on its own time after sending: CI saw Artemis's STOMP adapter redeliver "while-here" on the
    # return when the DISCONNECT came right after the MESSAGE. That is ACK-AUTO-1's subject; here
    # only the messages sent while away count. MQTT acknowledges itself (PUBACK before DISCONNECT).
    explicit_ack = subscriber.protocol != "mqtt"
    subscription = subscriber.subscribe(topic, ack="client-individual" if explicit_ack else "auto",
                                        durable_name=name)
    producer = client()
    producer.send(topic, "while-here")
    first = subscription.receive(timeout=5)
    assert first is not None and first.text == "while-here", (
        f"DUR-KEEP-1: the durable subscriber did not get a message published while it was connected (got {first})")
    if explicit_ack:
        subscription.ack(first)
    subscriber.close()  # away: the connection goes, the durable subscription must stay

    away = [f"away{i}" for i in range(3)]
    for body in away:
        producer.send(topic, body, persistent=True)

    returning = client(client_id=client_id)
    resumed = returning.subscribe(topic, ack="auto", durable_name=name)
    # Quiet window, no barrier: the earlier session's unacknowledged "while-here" (MQTT, below)
    # is put back whenever the broker ends that session, which may be after a marker published
    # now; an unflagged copy must still fail the check, so the window stays.
    received = resumed.receive_n(len(away), timeout=5) + resumed.drain(QUIET)
    if not explicit_ack:
        # MQTT QoS 1 is at least once: a PUBLISH whose PUBACK the broker had not processed when the
        # session left is sent again, flagged DUP (MQTT 3.1.1 § 4.3.2). CI saw Artemis do that with
        # "while-here"; only such a flagged resend is set aside, anything else still fails.
        received = [m for m in received if not (m.text == "while-here" and m.redelivered)]
    got = texts(received)
    assert got == away, (
        f"DUR-KEEP-1: 3 persistent messages published while the durable subscriber was away; on its return "
        f"(same client id {client_id!r}, subscription {name!r}) it got {got}")
    returning.unsubscribe_durable(topic, name)  # leave no subscription behind on the broker
