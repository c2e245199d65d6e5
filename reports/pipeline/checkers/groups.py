"""Message groups on a queue: one owner at a time, order kept within a group, and a new owner
only after the old one closed (or a rebalance).

The rules (artemis-message-grouping.md, "Message Grouping" and "Rebalancing Message Groups";
catalogue GRP-PIN-1, GRP-ORDER-1, GRP-REASSIGN-1, GRP-REBAL-1): every message of a group goes
to the consumer the group is pinned to; the group's messages reach it in send order; when that
consumer closes another one takes the group over (and gets what the old owner left
unacknowledged); a rebalance may move a group.

From a history:
* the owner of a delivery is the client process that received it (a drain is its own process);
* a group changes hands when a delivery's owner differs from the previous delivery's owner of
  that group. That is allowed only when, between the two deliveries, the previous owner shows it
  closed its subscription - it invoked ``connect`` or ``subscribe`` again, ran ``close`` or
  ``unsubscribe``, or ended an op ``info`` (the workloads close the client then) - or something
  closed every subscription: a nemesis fault step (a killed broker or cut connection ends the
  session; counted generously, since the history cannot show which connections a fault really
  broke), a ``rebalance`` op, or a ``drain`` (the workloads stop every consumer before draining).
  Anything else is ``stolen``: two consumers held the group while the first was still open;
* order: within a group, per producer, first deliveries must follow ``seq`` (``reordered``).
"""

from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from reports.pipeline.load import NEMESIS

from .common import (CheckOutput, CheckResult, Context, collect_anomalies, count_by_run, describe_counts,
                     first_deliveries, order_inversions)

NAME = "groups"

#: ops of a process after which its subscriptions are closed
_CLOSING_FS = ("close", "unsubscribe")
_REOPENING_FS = ("connect", "subscribe")
_NOT_FAULTS = ("setup", "teardown")


def grouped_deliveries(ctx: Context):
    queue = ~F.coalesce(F.col("destination"), F.lit("")).startswith("topic://")
    return ctx.deliveries.where(F.col("group").isNotNull() & queue)


def check(ctx: Context) -> CheckOutput:
    grouped = grouped_deliveries(ctx).cache()
    keys = ["destination", "group"]
    w = Window.partitionBy("run", "target", *keys).orderBy("index", "pos")
    # cached: the handovers and the stats both read it, and the window is the expensive part
    seq = grouped.select("run", "target", *keys, "process", "index", "pos", "id",
                         F.lag("process").over(w).alias("prev_process"),
                         F.lag("index").over(w).alias("prev_index")).cache()
    changes = seq.where(F.col("prev_process").isNotNull() & (F.col("process") != F.col("prev_process")))

    ops = ctx.ops
    own_close = ops.where((F.col("process") != NEMESIS) & (
        (F.col("f").isin(*_REOPENING_FS) & (F.col("type") == "invoke")) | F.col("f").isin(*_CLOSING_FS)
        | (F.col("type") == "info"))).select("run", "target", F.col("process").alias("closer"), F.col("index").alias("m"))
    everyone_close = ops.where(
        ((F.col("process") == NEMESIS) & ~F.col("f").isin(*_NOT_FAULTS) & (F.get_json_object("value", "$.phase") == "start"))
        | (F.col("f") == "rebalance") | ((F.col("f") == "drain") & (F.col("type") == "invoke"))
    ).select("run", "target", F.col("index").alias("m"))

    c, o, e = changes.alias("c"), own_close.alias("o"), everyone_close.alias("e")
    by_owner = c.join(o, (F.col("c.run") == F.col("o.run")) & (F.col("c.target") == F.col("o.target"))
                      & (F.col("o.closer") == F.col("c.prev_process"))
                      & (F.col("o.m") > F.col("c.prev_index")) & (F.col("o.m") < F.col("c.index")), "left_anti")
    stolen = by_owner.alias("c").join(F.broadcast(e), (F.col("c.run") == F.col("e.run")) & (F.col("c.target") == F.col("e.target"))
                                      & (F.col("e.m") > F.col("c.prev_index")) & (F.col("e.m") < F.col("c.index")), "left_anti")
    stolen_rows = stolen.select(
        "run", "target", F.lit(NAME).alias("checker"), F.lit("stolen").alias("kind"), F.col("id").alias("message_id"),
        F.array("prev_index", "index").alias("ops"),
        F.concat(F.col("destination"), F.lit(" group "), F.col("group"), F.lit(": delivered to process "), F.col("process"),
                 F.lit(" while process "), F.col("prev_process"), F.lit(" still owned it (no close, fault or rebalance since op "),
                 F.col("prev_index").cast("string"), F.lit(")")).alias("detail"))

    reordered = order_inversions(first_deliveries(grouped), keys, NAME, "reordered",
                                 F.concat(F.col("destination"), F.lit(" group "), F.col("group")))
    anomalies = stolen_rows.unionByName(reordered).cache()
    rows = collect_anomalies(anomalies)
    counts = count_by_run(rows)
    changed = F.col("prev_process").isNotNull() & (F.col("process") != F.col("prev_process"))
    sizes = {(r["run"], r["target"]): (r["groups"], r["n"], r["handovers"]) for r in seq.groupBy("run", "target").agg(
        F.countDistinct("destination", "group").alias("groups"), F.count(F.lit(1)).alias("n"),
        F.sum(changed.cast("int")).alias("handovers")).collect()}
    results = [judge(key, *sizes.get(key, (0, 0, 0)), counts.get(key, {})) for key in ctx.runs]
    grouped.unpersist()
    seq.unpersist()
    return CheckOutput(results, anomalies, rows)


def judge(key, groups: int, deliveries: int, handovers: int, counts: dict[str, int]) -> CheckResult:
    """One run's result from its group sizes and anomaly counts; the fused engine judges with this too."""
    stats = {"groups": groups, "deliveries": deliveries, "handovers": handovers, **counts}
    if not deliveries:
        return CheckResult(NAME, *key, True, "no grouped message on a queue in this history", applicable=False,
                           stats=stats)
    if counts:
        return CheckResult(NAME, *key, False, describe_counts(counts), stats=stats)
    return CheckResult(NAME, *key, True, stats=stats)
