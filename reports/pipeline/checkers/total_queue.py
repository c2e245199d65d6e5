"""Jepsen's total-queue checker as a Spark job; the same definitions as the pure-Python
reports/checkers/total_queue.py (and tested to agree with it):

* attempted: sends invoked, minus sends that completed ``fail`` (refused: never enqueued);
* enqueued: sends that completed ``ok``;
* dequeued: messages in ``receive`` and ``drain`` ops that completed ``ok``;
* lost = enqueued, never dequeued; unexpected = dequeued, never attempted; duplicated = dequeued
  more often than attempted; recovered = dequeued, attempted, not confirmed (an ``info`` send
  that arrived).
Messages on topics (``topic://``) are left out: fan-out delivers one send many times.
Valid iff nothing is lost or unexpected (and nothing duplicated unless duplicates are allowed:
by the analysis, else by the experiment that recorded the run, else not);
``unknown`` when the run has no completed drain, since messages still queued would look lost.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .common import UNKNOWN, CheckOutput, CheckResult, Context, collect_anomalies, count_by_run, describe_counts

NAME = "total_queue"
KINDS = ("lost", "unexpected", "duplicated", "recovered")


def queue_messages(ctx: Context) -> DataFrame:
    # Topics fan out: one send, a delivery per subscriber. That is topic fan-out's business, not
    # a queue's duplicate.
    return ctx.messages.where(~F.coalesce(F.col("destination"), F.lit("")).startswith("topic://"))


def per_message(m: DataFrame) -> DataFrame:
    """One row per message id of a run: attempted (clamped at 0), enqueued, dequeued."""
    attempt = (F.when((F.col("f") == "send") & (F.col("type") == "invoke"), 1)
               .when((F.col("f") == "send") & (F.col("type") == "fail"), -1).otherwise(0))
    enqueue = F.when((F.col("f") == "send") & (F.col("type") == "ok"), 1).otherwise(0)
    dequeue = F.when(F.col("f").isin("receive", "drain") & (F.col("type") == "ok"), 1).otherwise(0)
    relevant = m.where((F.col("f") == "send") | (F.col("f").isin("receive", "drain") & (F.col("type") == "ok")))
    agg = relevant.groupBy("run", "target", "id").agg(F.sum(attempt).alias("attempt_sum"),
                                                     F.max(enqueue).alias("enqueued"),
                                                     F.sum(dequeue).alias("dequeued"))
    # Python's Counter drops zero and negative counts (`+attempted`): a refused send that was
    # never invoked in this history leaves nothing attempted.
    return agg.withColumn("attempted", F.greatest(F.col("attempt_sum"), F.lit(0))).drop("attempt_sum")


def kind_of():
    return (F.when((F.col("enqueued") == 1) & (F.col("dequeued") == 0), "lost")
            .when((F.col("dequeued") > 0) & (F.col("attempted") == 0), "unexpected")
            .when((F.col("attempted") > 0) & (F.col("dequeued") > F.col("attempted")), "duplicated")
            .when((F.col("dequeued") > 0) & (F.col("attempted") > 0) & (F.col("enqueued") == 0), "recovered"))


def judge(key, counts: dict[str, int], totals: dict | None, drained: bool, duplicates_allowed: bool) -> CheckResult:
    """One run's result from its anomaly counts and totals (None: no queue traffic at all); the
    fused engine judges with this too, so the two engines cannot drift apart."""
    stats = {**(totals or {"attempted": 0, "enqueued": 0, "dequeued": 0}), **{k: counts.get(k, 0) for k in KINDS},
             "drained": drained, "duplicates_allowed": duplicates_allowed}
    # Without a final drain a message not received yet may still be queued: lost ones are only
    # candidates then (the Python checker, reports/checkers/total_queue.py, agrees).
    breaking = {k: counts.get(k, 0) for k in (("lost",) if drained else ()) + ("unexpected",)
                + (() if duplicates_allowed else ("duplicated",))}
    if totals is None:
        return CheckResult(NAME, *key, UNKNOWN, "no send or receive on a queue in this history", applicable=False,
                           stats=stats)
    if any(breaking.values()):
        return CheckResult(NAME, *key, False, describe_counts(breaking), stats=stats)
    if not drained:
        maybe = f" ({counts['lost']} confirmed sends not received, maybe still queued)" if counts.get("lost") else ""
        return CheckResult(NAME, *key, UNKNOWN,
                           "the history has no final drain: messages still queued would look lost" + maybe, stats=stats)
    return CheckResult(NAME, *key, True, stats=stats)


def check(ctx: Context, *, duplicates_allowed: bool | None = None) -> CheckOutput:
    m = queue_messages(ctx)
    rows = per_message(m).cache()
    totals = {(r["run"], r["target"]): r for r in rows.groupBy("run", "target").agg(
        F.sum("attempted").alias("attempted"), F.sum("enqueued").alias("enqueued"),
        F.sum("dequeued").alias("dequeued")).collect()}
    drained = ctx.drained
    flagged = rows.withColumn("kind", kind_of()).where(F.col("kind").isNotNull())
    # A duplicated message that was also not confirmed is both duplicated and recovered (the
    # Python checker lists it in both): one anomaly row per kind.
    also_recovered = flagged.where((F.col("kind") == "duplicated") & (F.col("enqueued") == 0)).withColumn(
        "kind", F.lit("recovered"))
    flagged = flagged.unionByName(also_recovered)
    ops = (m.join(flagged.select("run", "target", "id").distinct(), ["run", "target", "id"], "left_semi")
           .groupBy("run", "target", "id").agg(F.sort_array(F.collect_list("index")).alias("ops")))
    detail = (F.when(F.col("kind") == "lost", F.lit("confirmed send never received"))
              .when(F.col("kind") == "unexpected", F.lit("received but never sent"))
              .when(F.col("kind") == "duplicated", F.concat(F.lit("received "), F.col("dequeued").cast("string"),
                                                            F.lit(" times, sent "), F.col("attempted").cast("string")))
              .otherwise(F.lit("send outcome unknown (info), yet it arrived")))
    anomalies = (flagged.join(ops, ["run", "target", "id"], "left")
                 .select("run", "target", F.lit(NAME).alias("checker"), "kind", F.col("id").alias("message_id"),
                         F.coalesce("ops", F.array().cast("array<bigint>")).alias("ops"), detail.alias("detail"))).cache()
    rows_out = collect_anomalies(anomalies)
    counts = count_by_run(rows_out)
    results = []
    for key in ctx.runs:
        t = totals.get(key)
        allowed = ctx.checker_option(key, "duplicates_allowed", duplicates_allowed, False)
        results.append(judge(key, counts.get(key, {}), None if t is None else
                             {k: int(t[k]) for k in ("attempted", "enqueued", "dequeued")}, key in drained, allowed))
    rows.unpersist()
    return CheckOutput(results, anomalies, rows_out)
