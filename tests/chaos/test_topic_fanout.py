"""The topic fan-out checker on literal histories named after the anomaly (Jepsen style), and on
histories the topic workload writes against the in-process reference broker."""

from __future__ import annotations

import functools
import time

import pytest

from chaos.history import History, read_history
from chaos.workloads import TopicFanoutWorkload
from conformance.clients import connect
from conformance.scenario import DestinationPolicy, Scenario
from conformance.targets.reference.target import InProcessReference
from reports.checkers.topic_fanout import check_topic_fanout

T = "topic://prices"


def ev(process, type_, f, value=None):
    return {"process": process, "type": type_, "f": f, "value": value}


def msg(producer, seq, **extra):
    return {"id": f"r-{producer}-{seq}", "producer": producer, "seq": seq, "destination": T, **extra}


def subscribe(process):
    return [ev(process, "invoke", "connect"), ev(process, "ok", "connect"),
            ev(process, "invoke", "subscribe", {"destination": T}), ev(process, "ok", "subscribe", {"destination": T})]


def send(process, producer, seq, outcome="ok"):
    return [ev(process, "invoke", "send", msg(producer, seq)), ev(process, outcome, "send", msg(producer, seq))]


def sends(process, producer, seqs, outcome="ok"):
    return [e for s in seqs for e in send(process, producer, s, outcome)]


def receive(process, subscriber, producer, seq):
    return [ev(process, "invoke", "receive"), ev(process, "ok", "receive", msg(producer, seq, subscriber=subscriber))]


def drain(process, subscriber, *messages):
    got = [dict(m, subscriber=subscriber) for m in messages]
    return [ev(process, "invoke", "drain", {"subscriber": subscriber}), ev(process, "ok", "drain", got)]


def two_subscribers_one_slow():
    """Subscriber 0 gets seq 0..3; subscriber 1 (slow) lost the two oldest, 0 and 1."""
    return (subscribe(0) + subscribe(1) + sends(9, 0, range(4))
            + receive(0, 0, 0, 0) + receive(0, 0, 0, 1)
            + drain(0, 0, msg(0, 2), msg(0, 3)) + drain(1, 1, msg(0, 2), msg(0, 3)))


def test_every_subscriber_got_everything():
    history = subscribe(0) + subscribe(1) + sends(9, 0, range(3)) + receive(0, 0, 0, 0) \
        + drain(0, 0, msg(0, 1), msg(0, 2)) + drain(1, 1, msg(0, 0), msg(0, 1), msg(0, 2))
    result = check_topic_fanout(history)
    assert result.valid is True, result.reason
    assert (result.attempted, result.acknowledged) == (3, 3)
    assert {s: (r.expected, r.received, r.missing) for s, r in result.subscribers.items()} == \
        {"0": (3, 3, []), "1": (3, 3, [])}


def test_subscriber_missed_message():
    history = subscribe(0) + subscribe(1) + sends(9, 0, range(3)) \
        + drain(0, 0, msg(0, 0), msg(0, 1), msg(0, 2)) + drain(1, 1, msg(0, 0), msg(0, 2))
    result = check_topic_fanout(history)
    assert result.valid is False
    assert result.subscribers["1"].missing == ["r-0-1"] and result.subscribers["1"].observed_discards == 1
    assert result.subscribers["1"].gaps == {"0": [[1, 1]]}
    assert result.subscribers["0"].missing == []
    assert "subscriber 1 missed 1" in result.reason


def test_slow_subscriber_discards_allowed():
    result = check_topic_fanout(two_subscribers_one_slow(), discards_allowed_for={"1"})
    assert result.valid is True, result.reason
    slow = result.subscribers["1"]
    assert (slow.observed_discards, slow.missing, slow.gaps) == (2, ["r-0-0", "r-0-1"], {"0": [[0, 1]]})


def test_slow_subscriber_discards_not_allowed_for_another_subscriber():
    result = check_topic_fanout(two_subscribers_one_slow(), discards_allowed_for={"0"})
    assert result.valid is False and "subscriber 1 missed 2" in result.reason


def test_discards_match_broker_counter():
    result = check_topic_fanout(two_subscribers_one_slow(), broker_discards={"1": 2, "0": 0},
                                discards_allowed_for={"1"})
    assert result.valid is True, result.reason
    assert result.subscribers["1"].broker_discards == 2 and result.subscribers["0"].broker_discards == 0


def test_discards_disagree_with_broker():
    result = check_topic_fanout(two_subscribers_one_slow(), broker_discards={"1": 3}, discards_allowed_for={"1"})
    assert result.valid is False
    assert "subscriber 1: the broker counted 3 discarded, the history shows 2 missing" in result.reason


def test_broker_discards_for_a_subscriber_that_missed_nothing():
    result = check_topic_fanout(two_subscribers_one_slow(), broker_discards={"0": 1, 1: 2},
                                discards_allowed_for={"1"})
    assert result.valid is False and "subscriber 0: the broker counted 1 discarded" in result.reason
    assert result.subscribers["1"].broker_discards == 2, "int keys name the same subscriber as str keys"


def test_broker_discards_for_an_unknown_subscriber():
    result = check_topic_fanout(two_subscribers_one_slow(), broker_discards={"7": 1}, discards_allowed_for={"1"})
    assert result.valid is False and "no such subscriber" in result.reason


def test_no_drain_is_unknown():
    history = subscribe(0) + sends(9, 0, range(3)) + receive(0, 0, 0, 0) + receive(0, 0, 0, 1)
    result = check_topic_fanout(history)
    assert result.valid == "unknown" and "no final ok drain" in result.reason
    assert result.subscribers["0"].missing == [] and result.subscribers["0"].cut_off == 1


def test_gap_in_cut_subscription_is_missing_even_without_drain():
    """seq 2 arrived, so seq 1 (acknowledged earlier, same producer) had to arrive before it."""
    history = subscribe(0) + sends(9, 0, range(3)) + receive(0, 0, 0, 0) + receive(0, 0, 0, 2) \
        + [ev(0, "invoke", "receive"), ev(0, "info", "receive", None)]
    result = check_topic_fanout(history)
    assert result.valid is False and result.subscribers["0"].missing == ["r-0-1"]


def test_messages_published_while_reconnecting_are_not_expected():
    """The subscriber retired (info) and resubscribed as process 4: what was published in
    between, or after its last delivery on the dead connection, may be gone (non-durable)."""
    history = (subscribe(0) + send(9, 0, 0) + receive(0, 0, 0, 0) + send(9, 0, 1)
               + [ev(0, "invoke", "receive"), ev(0, "info", "receive", None)]
               + send(9, 0, 2) + subscribe(4) + send(9, 0, 3) + drain(4, 0, msg(0, 3)))
    result = check_topic_fanout(history)
    assert result.valid is True, result.reason
    report = result.subscribers["0"]
    assert (report.windows, report.expected, report.cut_off, report.missing) == (2, 2, 1, [])


def test_reconnect_of_the_same_process_opens_a_new_window():
    """With client acks a lost connection is a `fail` and the same process reconnects."""
    history = (subscribe(0) + send(9, 0, 0) + receive(0, 0, 0, 0)
               + [ev(0, "invoke", "receive"), ev(0, "fail", "receive", None)]
               + subscribe(0) + send(9, 0, 1) + drain(0, 0))
    result = check_topic_fanout(history)
    assert result.valid is False and result.subscribers["0"].windows == 2
    assert result.subscribers["0"].missing == ["r-0-1"]


def test_unexpected_message():
    history = subscribe(0) + send(9, 0, 0) + drain(0, 0, msg(0, 0), {"id": "ghost", "producer": 5, "seq": 0})
    result = check_topic_fanout(history)
    assert result.valid is False and result.unexpected == ["ghost"] == result.subscribers["0"].unexpected


def test_foreign_message_without_id_is_unexpected():
    history = subscribe(0) + drain(0, 0, {"id": None, "body": "hello", "producer": None, "seq": None})
    result = check_topic_fanout(history)
    assert result.valid is False and result.unexpected[0].startswith("<no id: 'hello'")


def test_failed_send_that_arrives_is_unexpected():
    history = subscribe(0) + send(9, 0, 0, outcome="fail") + drain(0, 0, msg(0, 0))
    result = check_topic_fanout(history)
    assert result.valid is False and result.unexpected == ["r-0-0"]


def test_info_send_may_or_may_not_arrive():
    history = subscribe(0) + subscribe(1) + send(9, 0, 0, outcome="info") \
        + drain(0, 0, msg(0, 0)) + drain(1, 1)
    result = check_topic_fanout(history)
    assert result.valid is True, result.reason
    assert result.acknowledged == 0 and result.subscribers["1"].expected == 0


def test_message_published_before_subscription_is_reported_not_invalid():
    history = send(9, 0, 0) + subscribe(0) + send(9, 0, 1) + drain(0, 0, msg(0, 0), msg(0, 1))
    result = check_topic_fanout(history)
    assert result.valid is True and result.subscribers["0"].out_of_window == ["r-0-0"]
    assert result.subscribers["0"].expected == 1


def test_send_overlapping_the_subscribe_may_match_it():
    history = (subscribe(0)[:3] + [ev(9, "invoke", "send", msg(0, 0))] + subscribe(0)[3:]
               + [ev(9, "ok", "send", msg(0, 0))] + drain(0, 0, msg(0, 0)))
    result = check_topic_fanout(history)
    assert result.valid is True and result.subscribers["0"].out_of_window == []
    assert result.subscribers["0"].expected == 0, "not required either: it may have been routed before"


def test_duplicate_delivery_is_reported():
    history = subscribe(0) + send(9, 0, 0) + receive(0, 0, 0, 0) + drain(0, 0, msg(0, 0))
    result = check_topic_fanout(history)
    assert result.valid is True and result.subscribers["0"].duplicated == {"r-0-0": 2}


def test_gaps_are_ranges_per_producer():
    history = subscribe(0) + sends(8, 0, range(6)) + sends(9, 1, range(3)) \
        + drain(0, 0, msg(0, 2), msg(0, 5), msg(1, 0))
    report = check_topic_fanout(history, discards_allowed_for={"0"}).subscribers["0"]
    assert report.gaps == {"0": [[0, 1], [3, 4]], "1": [[1, 2]]}
    assert report.missing == ["r-0-0", "r-0-1", "r-0-3", "r-0-4", "r-1-1", "r-1-2"]


def test_nemesis_events_are_ignored_and_result_is_json():
    history = subscribe(0) + [{"process": "nemesis", "type": "info", "f": "kill", "value": {"phase": "start"}}] \
        + send(9, 0, 0) + drain(0, 0, msg(0, 0))
    result = check_topic_fanout(history)
    assert result.valid is True and result.to_json()["subscribers"]["0"]["expected"] == 1


# ---------------------------------------------------------------------- real histories


class SlowSecondSubscriber(TopicFanoutWorkload):
    """Subscriber 1 takes 50 ms per message: with a pending-message limit the broker drops its
    oldest messages ("Slow Consumer Handling", pending message limit strategy)."""

    def _received(self, message, consumer):
        if consumer == 1:
            time.sleep(0.05)
        return super()._received(message, consumer)


def run_fanout(broker, path, workload_class, destination, **options):
    make = functools.partial(connect, "127.0.0.1", broker.ports["stomp"], "stomp", timeout=5.0)
    with History(path, run="tf", target="reference", node="A") as history:
        workload = workload_class(history, make, destination=destination, subscribers=2, producers=1,
                                  receive_timeout=0.2, **options)
        workload.start()
        while workload.sent_ok < 40 and not workload.errors:
            workload._stop_producers.wait(0.02)
        workload.stop()
        # Read before the drain: the drain closes the subscriptions and their counters go with them.
        counters = broker.subscription_counters(destination)
        # A generous quiet time: on a busy machine the in-process broker's thread can stall.
        workload.drain(quiet=1.0)
    assert workload.errors == []
    return read_history(path), counters


@pytest.fixture
def broker():
    handle = InProcessReference(Scenario(name="tf", protocols=("stomp",), policies=(
        DestinationPolicy("topic://tf.slow", pending_message_limit=2),)))
    try:
        yield handle
    finally:
        handle.stop()


def test_reference_broker_fanout_is_complete(broker, tmp_path):
    events, _ = run_fanout(broker, tmp_path / "h.jsonl", TopicFanoutWorkload, "topic://tf.all", rate=200)
    result = check_topic_fanout(events)
    assert result.valid is True, result.reason
    assert sorted(result.subscribers) == ["0", "1"]
    assert all(r.expected == result.acknowledged >= 40 for r in result.subscribers.values()), result.to_json()


def test_reference_slow_subscriber_discards_match_broker_counter(broker, tmp_path):
    events, counters = run_fanout(broker, tmp_path / "h.jsonl", SlowSecondSubscriber, "topic://tf.slow",
                                  rate=100, ack="client-individual", prefetch=1)
    assert len(counters) == 2
    result = check_topic_fanout(events, discards_allowed_for={"0", "1"})
    assert result.subscribers["1"].observed_discards > 0, f"the slow subscriber lost nothing: {result.to_json()}"
    # The history does not record which broker connection a subscriber used, so pair them by
    # rank: the subscription the broker discarded most from belongs to the slower subscriber.
    by_loss = sorted(result.subscribers, key=lambda s: result.subscribers[s].observed_discards)
    broker_counts = dict(zip(by_loss, sorted(c.discarded for c in counters)))
    checked = check_topic_fanout(events, broker_discards=broker_counts, discards_allowed_for={"0", "1"})
    assert checked.valid is True, f"{checked.reason}; broker: {[c.raw for c in counters]}"
    assert broker_counts["1"] == result.subscribers["1"].observed_discards
    assert result.subscribers["1"].gaps, "oldest-first eviction leaves gaps"
