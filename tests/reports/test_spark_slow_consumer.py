"""The slow-consumer checker through `brokerconf analyze`: observed gaps per subscription against the broker's discarded
counters kept in the run's verdict.json (literal histories named after the anomaly)."""

from __future__ import annotations

import pytest

from reports.checkers import slow_consumer, topic_fanout
from reports.pipeline.session import LOCAL, get_session

from .test_spark_topic_fanout import analyse, python_side, assert_agree, subscribe, sends, drain, msg, \
    two_subscribers_one_slow, write_history

#: run name -> (history, broker counters or None, slow subscribers from the run record)
RUNS = {
    # subscriber 1 lost seq 0 and 1; the broker counted 2 for one subscription, 0 for the other
    "broker_discards_agree": (two_subscribers_one_slow(), [0, 2], [1]),
    "broker_discards_disagree": (two_subscribers_one_slow(), [0, 3], [1]),
    # paired by rank: subscriber 0 (lost nothing) gets 1, subscriber 1 (lost 2) gets 2
    "broker_counts_a_subscriber_that_lost_nothing": (two_subscribers_one_slow(), [1, 2], [1]),
    "broker_has_other_subscriptions": (two_subscribers_one_slow(), [0, 0, 2], [1]),
    "slow_subscriber_lost_nothing": (subscribe(0, 0, slow=True) + sends(9, 0, range(2)) + drain(0, 0, msg(0, 0), msg(0, 1)),
                                     [0], [0]),
    "slow_subscriber_without_counters": (two_subscribers_one_slow(), None, None),
    "no_slow_subscriber_no_counters": (subscribe(0, 0) + sends(9, 0, range(2)) + drain(0, 0, msg(0, 0), msg(0, 1)),
                                       None, None),
}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, _spark_lifetime):
    root = tmp_path_factory.mktemp("slow")
    for name, (events, counters, slow) in RUNS.items():
        write_history(root, name, events, counters, slow)
    return analyse(get_session(LOCAL), root)


def result(analysed, run, checker=slow_consumer.NAME):
    return analysed[run][checker]["result"]


def rows(analysed, run):
    return analysed[run][slow_consumer.NAME]["anomalies"]


def test_broker_discards_agree(analysed):
    r = result(analysed, "broker_discards_agree")
    assert r.valid is True, r.reason
    assert r.stats["subscribers"]["1"] == {"observed_discards": 2, "broker_discards": 2, "gaps": {"0": [[0, 1]]}}
    assert r.stats["broker_record"].endswith("verdict.json")
    assert result(analysed, "broker_discards_agree", topic_fanout.NAME).valid is True
    assert rows(analysed, "broker_discards_agree") == []


def test_broker_discards_disagree(analysed):
    r = result(analysed, "broker_discards_disagree")
    assert r.valid is False and "subscriber 1: the broker counted 3 discarded, the history shows 2 missing" in r.reason
    found = rows(analysed, "broker_discards_disagree")
    assert sorted((a["kind"], a["message_id"]) for a in found) == [("discards_disagree", "r-0-0"),
                                                                   ("discards_disagree", "r-0-1")]
    assert all(len(a["ops"]) == 3 for a in found), "send invoke, subscribe ok, drain"
    assert result(analysed, "broker_discards_disagree", topic_fanout.NAME).valid is False


def test_broker_counts_a_subscriber_that_lost_nothing(analysed):
    r = result(analysed, "broker_counts_a_subscriber_that_lost_nothing")
    assert r.valid is False and "subscriber 0: the broker counted 1 discarded, the history shows 0 missing" in r.reason
    [row] = rows(analysed, "broker_counts_a_subscriber_that_lost_nothing")
    assert row["message_id"] is None and row["ops"], "no message to name: the row names the subscription's window"


def test_broker_has_other_subscriptions(analysed):
    r = result(analysed, "broker_has_other_subscriptions")
    assert r.valid is False and "3 subscriptions" in r.reason and "2 subscribers" in r.reason
    # without a pairing the counters document nothing: only the slow subscriber may lose messages
    assert result(analysed, "broker_has_other_subscriptions", topic_fanout.NAME).valid is True


def test_slow_subscriber_lost_nothing_is_unknown(analysed):
    r = result(analysed, "slow_subscriber_lost_nothing")
    assert r.valid == "unknown" and "lost nothing" in r.reason


def test_slow_subscriber_without_counters_is_unknown(analysed):
    r = result(analysed, "slow_subscriber_without_counters")
    assert r.valid == "unknown" and r.applicable and "no broker discard counters" in r.reason


def test_nothing_to_compare_is_not_applicable(analysed):
    r = result(analysed, "no_slow_subscriber_no_counters")
    assert r.applicable is False


def test_gaps_table(analysed):
    gaps = {(g["run"], g["subscriber"], g["producer"], g["first_seq"], g["last_seq"], g["missing"])
            for g in analysed["_tables"][slow_consumer.GAPS_TABLE].collect()}
    assert ("broker_discards_agree", "1", "0", 0, 1, 2) in gaps
    assert not any(g[0] == "no_slow_subscriber_no_counters" for g in gaps)


def test_agrees_with_chaos_job(analysed, tmp_path):
    for name, (events, counters, slow) in RUNS.items():
        path = write_history(tmp_path, name, events, counters, slow)
        assert_agree(analysed[name], python_side(path), name)
