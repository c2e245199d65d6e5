"""Slow-consumer discards as a Spark job: the gaps each subscription shows against the broker's
``discarded`` counter for it.

ActiveMQ Classic lets a broker drop the oldest messages of a slow non-durable topic subscriber
once its pending-message limit is reached, and counts them per subscription ("Slow Consumer
Handling": the limit strategies, and "Monitoring the Status of Slow Consumers" for the
``discarded`` statistic). A chaos run reads those counters just before its subscriptions close
and keeps them in its verdict.json (``run_stats.broker_discards``; chaos/experiment.py). This
checker pairs them with the subscribers' observed losses (the topic fan-out facts, computed once
and shared with topic_fanout.py), by rank as brokerconf/chaos_job.py does.

Per run with a topic subscription:
* false: the broker reports a different number of subscriptions than the history has, or a
  subscriber's counter differs from what it lost (anomaly ``discards_disagree``, one row per
  message it lost, naming the send and the window; a counter above zero for a subscriber that
  lost nothing gives one row without a message id, naming the window);
* unknown: slow subscribers but no counters recorded, or the slow subscribers lost nothing (the
  run never reached the pending-message limit: nothing was compared);
* true: every counter matches; not applicable without counters and without slow subscribers.
Every observed gap (per subscriber and producer, first and last missing ``seq``) goes into the
``discard_gaps`` table, so the eviction pattern can be looked at next to the counters.
"""

from __future__ import annotations

from pyspark.sql import types as T

from . import topic_fanout
from .common import UNKNOWN, CheckOutput, CheckResult, Context, count_by_run

NAME = "slow_consumer"
GAPS_TABLE = "discard_gaps"
GAPS_SCHEMA = T.StructType([
    T.StructField("run", T.StringType()), T.StructField("target", T.StringType()),
    T.StructField("subscriber", T.StringType()), T.StructField("producer", T.StringType()),
    T.StructField("first_seq", T.LongType()), T.StructField("last_seq", T.LongType()),
    T.StructField("missing", T.LongType()),
])


def judge(run: topic_fanout.RunFacts) -> tuple[bool | str, str, bool]:
    """(valid, reason, applicable) for one run's facts."""
    losses = run.losses
    if run.broker_discards is None:
        if not run.slow:
            return UNKNOWN, "no broker discard counters and no slow subscriber: nothing to compare", False
        return UNKNOWN, (f"slow subscriber(s) {', '.join(sorted(run.slow))} but no broker discard counters beside "
                         f"the history (verdict.json run_stats.broker_discards): run it with `brokerconf chaos run`"), True
    paired = run.paired
    if paired is None:
        return False, (f"the broker reports {len(run.broker_discards)} subscriptions, the history "
                       f"{len(losses)} subscribers"), True
    wrong = [f"subscriber {name}: the broker counted {count} discarded, the history shows {losses[name]} missing"
             for name, count in sorted(paired.items()) if count != losses[name]]
    if wrong:
        return False, "; ".join(wrong), True
    lost_by_slow = sum(losses.get(name, 0) for name in run.slow)
    if run.slow and not lost_by_slow:
        # brokerconf/chaos_job.py, "slow_consumer_exercised"
        return UNKNOWN, ("the slow subscribers lost nothing: the faults did not make them slow enough to reach the "
                         "pending-message limit, so nothing was compared"), True
    return True, "", True


def _disagreements(run: topic_fanout.RunFacts) -> list[dict]:
    rows: list[dict] = []
    for name, count in sorted((run.paired or {}).items()):
        sub = run.subscribers[name]
        if count == sub.observed_discards:
            continue
        detail = (f"subscriber {name}: the broker counted {count} discarded, the history shows "
                  f"{sub.observed_discards} missing")
        if sub.missing:
            rows += [topic_fanout.anomaly(run, NAME, "discards_disagree", m, detail) for m in sub.missing]
        else:
            rows.append({"run": run.key[0], "target": run.key[1], "checker": NAME, "kind": "discards_disagree",
                         "message_id": None, "ops": sub.window_ops, "detail": detail})
    return rows


def check(ctx: Context) -> CheckOutput:
    runs = topic_fanout.facts(ctx)
    results: list[CheckResult] = []
    rows: list[dict] = []
    gaps: list[tuple] = []
    for key in ctx.runs:
        run = runs.get(key)
        if run is None:
            results.append(CheckResult(NAME, *key, UNKNOWN, "no topic subscription in this history", applicable=False))
            continue
        valid, reason, applicable = judge(run)
        if valid is False:
            rows += _disagreements(run)
        paired = run.paired or {}
        for name, sub in sorted(run.subscribers.items()):
            for producer, ranges in sub.gaps().items():
                gaps += [(*key, name, producer, a, b, b - a + 1) for a, b in ranges]
        stats = {"broker_discards": run.broker_discards, "broker_record": run.record, "slow_subscribers": sorted(run.slow),
                 "subscribers": {name: {"observed_discards": s.observed_discards, "broker_discards": paired.get(name),
                                        "gaps": s.gaps()} for name, s in sorted(run.subscribers.items())}}
        results.append(CheckResult(NAME, *key, valid, reason, applicable=applicable, stats=stats))
    rows.sort(key=lambda r: (r["run"], r["target"], r["kind"], r["message_id"] or ""))
    counts = count_by_run(rows)
    for result in results:
        result.stats["anomalies"] = counts.get((result.run, result.target), {})
    anomalies = ctx.spark.createDataFrame(rows, ctx.empty_anomalies().schema) if rows else ctx.empty_anomalies()
    return CheckOutput(results, anomalies, rows, {GAPS_TABLE: ctx.spark.createDataFrame(gaps, GAPS_SCHEMA)})
