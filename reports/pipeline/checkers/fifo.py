"""Per-producer FIFO on a queue, where the topology promises it.

JMS 1.1 section 4.4.10 "Message Order" (catalogue entry Q-FIFO-1) promises that one producer's
messages reach a single consumer of a queue in the order they were sent. So the job judges only
a queue that the history shows with one consumer at a time (one logical ``consumer`` in its
receives, else one receiving process; the final drain runs after every consumer stopped) and on
one node. Across a network of brokers order is not kept: a bridge is a second consumer that
re-sends from the head of one broker's queue to the tail of another's
(activemq-classic-networks-of-brokers.md, "Ordering"). Queues outside that scope are reported
as not checked, with the reason.

Order is over first deliveries (a redelivery after a reconnect or a duplicate is not an
inversion; duplicates are total-queue's business), in delivery order: the op index, then the
place in a drain's list.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from .common import (CheckOutput, CheckResult, Context, collect_anomalies, count_by_run, describe_counts, first_deliveries,
                     order_inversions)

NAME = "fifo"


def scope(ctx: Context):
    """{(run, target): {destination: reason it is not checked, or "" when it is}}."""
    queue = ~F.coalesce(F.col("destination"), F.lit("")).startswith("topic://")
    m = ctx.messages.where(queue & F.col("destination").isNotNull())
    consumer = F.when((F.col("f") == "receive") & (F.col("type") == "ok"),
                      F.coalesce(F.col("consumer").cast("string"), F.concat(F.lit("process "), F.col("process"))))
    rows = m.groupBy("run", "target", "destination").agg(
        F.countDistinct(consumer).alias("consumers"), F.countDistinct("node").alias("nodes"),
        F.sum(F.when(F.col("f").isin("receive", "drain") & (F.col("type") == "ok"), 1).otherwise(0)).alias("deliveries"),
    ).collect()
    out: dict = {}
    for r in rows:
        if r["nodes"] > 1:
            reason = f"{r['nodes']} nodes: a network of brokers does not keep total order"
        elif r["consumers"] > 1:
            reason = f"{r['consumers']} consumers compete for the queue: order is promised to a single consumer"
        elif r["deliveries"] == 0:
            reason = "nothing was received"
        else:
            reason = ""
        out.setdefault((r["run"], r["target"]), {})[r["destination"]] = reason
    return out


def check(ctx: Context) -> CheckOutput:
    checked = scope(ctx)
    eligible = [(run, target, dest) for (run, target), dests in checked.items() for dest, why in dests.items() if not why]
    if not eligible:
        anomalies = ctx.empty_anomalies()
    else:
        keys = ctx.spark.createDataFrame(eligible, "run string, target string, destination string")
        first = first_deliveries(ctx.deliveries.join(F.broadcast(keys), ["run", "target", "destination"], "left_semi"))
        anomalies = order_inversions(first, ["destination"], NAME, "reordered", F.col("destination")).cache()
    rows = collect_anomalies(anomalies)
    counts = count_by_run(rows)
    results = [judge(key, checked.get(key, {}), counts.get(key, {})) for key in ctx.runs]
    return CheckOutput(results, anomalies, rows)


def judge(key, scope: dict[str, str], counts: dict[str, int]) -> CheckResult:
    """One run's result from its destinations (each with why it was not checked, "" when it was)
    and its anomaly counts; the fused engine judges with this too."""
    judged = sorted(d for d, why in scope.items() if not why)
    skipped = {d: why for d, why in scope.items() if why}
    stats = {"checked_destinations": judged, "not_checked": skipped, **counts}
    if not judged:
        reason = "; ".join(f"{d}: {why}" for d, why in sorted(skipped.items())) or "no queue in this history"
        return CheckResult(NAME, *key, True, reason, applicable=False, stats=stats)
    if counts:
        return CheckResult(NAME, *key, False, describe_counts(counts), stats=stats)
    return CheckResult(NAME, *key, True, stats=stats)
