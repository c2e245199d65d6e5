"""Slow-consumer discards: the gaps each subscription shows against the broker's ``discarded``
counter for it.

ActiveMQ Classic lets a broker drop the oldest messages of a slow non-durable topic subscriber
once its pending-message limit is reached, and counts them per subscription ("Slow Consumer
Handling": the limit strategies, and "Monitoring the Status of Slow Consumers" for the
``discarded`` statistic). A chaos run reads those counters just before its subscriptions close
and keeps them in its run record (``run_stats.broker_discards``; chaos/experiment.py). This
checker pairs them with the subscribers' observed losses (topic_fanout.py's facts, by rank:
`topic_fanout.pair_discards`).

Per run with a topic subscription:
* false: the broker reports a different number of subscriptions than the history has, or a
  subscriber's counter differs from what it lost (anomaly ``discards_disagree``, one row per
  message it lost, naming the send and the window; a counter above zero for a subscriber that
  lost nothing gives one row without a message id, naming the window);
* unknown: slow subscribers but no counters recorded, or the slow subscribers lost nothing (the
  run never reached the pending-message limit: nothing was compared);
* true: every counter matches; not applicable without counters and without slow subscribers.
Every observed gap (per subscriber and producer, first and last missing ``seq``) goes into the
``discard_gaps`` table.
"""

from __future__ import annotations

from . import topic_fanout
from .protocol import Checker, Table
from .result import INVALID, UNKNOWN, VALID, CheckResult, RunKey

NAME = "slow_consumer"
GAPS_TABLE = "discard_gaps"


def verdict(facts: dict, broker_discards: list[int] | None, slow: set[str]) -> tuple[bool | str, str, bool]:
    """(valid, reason, applicable) for one run's topic facts."""
    losses = topic_fanout.losses(facts)
    if broker_discards is None:
        if not slow:
            return UNKNOWN, "no broker discard counters and no slow subscriber: nothing to compare", False
        return UNKNOWN, (f"slow subscriber(s) {', '.join(sorted(slow))} but no broker discard counters beside "
                         f"the history (verdict.json run_stats.broker_discards): run it with `brokerconf chaos run`"), True
    paired = topic_fanout.pair_discards(losses, broker_discards)
    if paired is None:
        return INVALID, (f"the broker reports {len(broker_discards)} subscriptions, the history "
                         f"{len(losses)} subscribers"), True
    wrong = [f"subscriber {name}: the broker counted {count} discarded, the history shows {losses[name]} missing"
             for name, count in sorted(paired.items()) if count != losses[name]]
    if wrong:
        return INVALID, "; ".join(wrong), True
    if slow and not sum(losses.get(name, 0) for name in slow):
        return UNKNOWN, ("the slow subscribers lost nothing: the faults did not make them slow enough to reach the "
                         "pending-message limit, so nothing was compared"), True
    return VALID, "", True


def judge(key: RunKey, facts: dict | None, *, broker_discards: list[int] | None = None, slow: set[str] = frozenset(),
          record: str | None = None, unreadable: str = "") -> tuple[CheckResult, list[dict], list[tuple]]:
    """One run's result, anomaly rows and gap rows (run, target, subscriber, producer, first_seq,
    last_seq, missing)."""
    if unreadable:
        return CheckResult(NAME, *key, UNKNOWN, unreadable, stats={"anomalies": {}}), [], []
    if facts is None:
        return CheckResult(NAME, *key, UNKNOWN, "no topic subscription in this history", applicable=False,
                           stats={"anomalies": {}}), [], []
    slow = set(slow) | set(facts["slow"])
    valid, reason, applicable = verdict(facts, broker_discards, slow)
    paired = None if broker_discards is None else topic_fanout.pair_discards(topic_fanout.losses(facts), broker_discards)
    rows: list[dict] = []
    if valid is INVALID:
        for name, count in sorted((paired or {}).items()):
            sub = facts["subscribers"][name]
            if count == len(sub["missing"]):
                continue
            detail = (f"subscriber {name}: the broker counted {count} discarded, the history shows "
                      f"{len(sub['missing'])} missing")
            if sub["missing"]:
                rows += [topic_fanout.anomaly(key, NAME, "discards_disagree", {**m, "subscriber": name}, detail)
                         for m in sub["missing"]]
            else:
                rows.append({"run": key[0], "target": key[1], "checker": NAME, "kind": "discards_disagree",
                             "message_id": None, "ops": sub["window_ops"], "detail": detail})
    rows.sort(key=lambda r: (r["kind"], r["message_id"] or ""))
    gaps = [(*key, name, producer, a, b, b - a + 1) for name, sub in sorted(facts["subscribers"].items())
            for producer, ranges in topic_fanout.gaps(sub).items() for a, b in ranges]
    stats = {"broker_discards": broker_discards, "broker_record": record, "slow_subscribers": sorted(slow),
             "subscribers": {name: {"observed_discards": len(s["missing"]), "broker_discards": (paired or {}).get(name),
                                    "gaps": topic_fanout.gaps(s)} for name, s in sorted(facts["subscribers"].items())},
             "anomalies": {"discards_disagree": len(rows)} if rows else {}}
    return CheckResult(NAME, *key, valid, reason, applicable=applicable, stats=stats), rows, gaps


def _judged_with_gaps(key: RunKey, facts_: dict, options: dict):
    """The result, anomaly rows and the gap table's rows (GAPS_TABLE)."""
    return judge(key, facts_.get(topic_fanout.NAME), **topic_fanout.run_inputs(facts_), **options)


def _topic_run(record) -> str | None:
    return None if record.topic else "not a topic run"


#: judged with topic fan-out (one switch), from its facts
CHECKER = Checker(NAME, _judged_with_gaps, switch="topic_fanout", applies=_topic_run, table=Table(
    GAPS_TABLE, "run string, target string, subscriber string, producer string, first_seq bigint, last_seq bigint, "
                "missing bigint"))
