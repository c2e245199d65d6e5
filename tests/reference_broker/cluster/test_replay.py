"""The conditional network bridge filter (reference_broker/cluster/replay.py): replay when no
consumers, replay delay and rate limit, on an in-process engine with a hand-driven clock. A
network consumer is what a bridge creates: an ``NC|`` id naming the broker it forwards to."""

import pytest

from reference_broker.cluster.advisories import AdvisoryPublisher
from reference_broker.cluster.paths import network_id, remote_message_selector, split_remote_selector
from reference_broker.cluster.replay import RateWindow
from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.message import Message
from reference_broker.engine.names import parse_destination

Q = "queue://TEST.stuck"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def broker_with(policy: dict | None, clock: Clock):
    entries = [{"queue": "TEST.>", "conditional_network_bridge_filter": policy}] if policy is not None else []
    broker = Broker(build_config({"name": "B", "policy_entries": entries}), clock=clock)
    timers = []
    AdvisoryPublisher(broker, later=lambda delay, fn: timers.append((delay, fn)))
    return broker, timers


def came_from_a(broker, n: int):
    """``n`` messages that A forwarded here (brokerPath ",A,")."""
    producer = broker.connect()
    for i in range(n):
        producer.send(parse_destination(Q), Message(producer.new_message_id(), Q, f"m{i}".encode(),
                                                    properties={"brokerPath": ",A,"}, persistent=True))


def network_consumer_to_a(broker, received, selector: str | None = None):
    connection = broker.connect(internal=True)  # a connection trusted as a bridge (engine/network_principal.py)
    return connection.subscribe(
        network_id(("A",), -5, 1), parse_destination(Q), deliver=lambda c, ref: received.append(ref.message.body),
        ack_mode=AckMode.CLIENT_INDIVIDUAL, selector=remote_message_selector("A", 1, selector))


def test_without_the_filter_messages_never_go_back_to_their_origin():
    broker, _ = broker_with(None, Clock())
    came_from_a(broker, 3)
    received = []
    network_consumer_to_a(broker, received)
    assert received == []


def test_filter_without_replay_keeps_loop_suppression():
    broker, _ = broker_with({"replay_when_no_consumers": False}, Clock())
    came_from_a(broker, 3)
    received = []
    network_consumer_to_a(broker, received)
    assert received == []


def test_replay_when_no_local_consumer():
    broker, _ = broker_with({"replay_when_no_consumers": True}, Clock())
    came_from_a(broker, 3)
    received = []
    network_consumer_to_a(broker, received)
    assert received == [b"m0", b"m1", b"m2"]


def test_no_replay_while_a_local_consumer_is_there():
    broker, _ = broker_with({"replay_when_no_consumers": True}, Clock())
    local_connection = broker.connect()
    local = local_connection.subscribe("local", parse_destination(Q), deliver=lambda c, ref: None,
                                       ack_mode=AckMode.CLIENT_INDIVIDUAL, prefetch=1)
    came_from_a(broker, 3)  # the local consumer holds m0 unacknowledged; m1, m2 wait
    received = []
    network_consumer_to_a(broker, received)
    assert received == []
    local_connection.unsubscribe(local.consumer_id)  # gone: m0 comes back, all three replay
    assert sorted(received) == [b"m0", b"m1", b"m2"]


def test_replay_keeps_the_remote_consumers_selector():
    broker, _ = broker_with({"replay_when_no_consumers": True}, Clock())
    came_from_a(broker, 2)
    received = []
    network_consumer_to_a(broker, received, selector="JMSMessageID LIKE '%-2'")
    assert len(received) == 1


def test_replay_delay_counts_from_the_arrival_here():
    clock = Clock()
    broker, timers = broker_with({"replay_when_no_consumers": True, "replay_delay": 5000}, clock)
    came_from_a(broker, 2)
    received = []
    network_consumer_to_a(broker, received)
    assert received == [] and len(timers) == 1
    delay, wake = timers.pop()
    assert delay == pytest.approx(5.0)
    clock.now += 5.001
    wake()
    assert received == [b"m0", b"m1"]


def test_rate_limit_throttles_network_consumers_per_window():
    clock = Clock()
    broker, timers = broker_with({"replay_when_no_consumers": True, "rate_limit": 2, "rate_duration": 1000}, clock)
    came_from_a(broker, 5)
    received = []
    network_consumer_to_a(broker, received)
    assert received == [b"m0", b"m1"]
    clock.now += 1.0
    timers.pop()[1]()
    assert received == [b"m0", b"m1", b"m2", b"m3"]


def test_rate_window():
    window = RateWindow(2, 1000)
    assert [window.take(0), window.take(10), window.take(20)] == [True, True, False]
    assert window.reopens_in_ms(20) == 980
    assert window.take(1000)
    assert RateWindow(0, 1000).take(0)  # 0: no limit


@pytest.mark.parametrize("own", [None, "colour = 'red'", "convert_string_expressions:price > 5"])
def test_split_remote_selector_round_trip(own):
    rule = remote_message_selector("A", 2)
    assert split_remote_selector(remote_message_selector("A", 2, own)) == (rule, own)
