"""Failover downtime: from the start of a fault to each client process's first successful
operation after it.

A fault starts when its nemesis step starts (the ``started`` of the step that began it;
chaos/nemesis/base.py); faults that overlap (a toxic on each stream, a kill while a partition
holds) count as one disturbance, from the first start. For every client process that invoked
anything between that start and the end of the disturbance, the downtime is the time from the
start to the completion of the process's first ``ok`` operation invoked after the fault was in
place (after the end event of the step that injected it): an operation invoked while the step was
still injecting may have gone through before the fault took hold, and proves nothing about
recovering (the Python checker's rule, reports/checkers/failover_downtime.py). A process that kept
trying and never succeeded before the next fault is ``not recovered``, unless it ended an
operation ``info``: then it retired and its client carries on under a new process id
(chaos/history.py), whose own first ok is what counts.

The numbers are the result; the verdict judges them only against a bound the caller gives
(``max_downtime_s`` given to the analysis, else the experiment's own setting from the run record,
e.g. the documented failover settings): a
downtime above it, or a process that never recovered while the run went on longer than the
bound, is ``false``. Without a bound the check is informational (valid ``true``). A run without
faults has nothing to measure and is left out of the merge.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from .common import CheckOutput, CheckResult, Context, merge_intervals

NAME = "failover_downtime"
MS = 1_000_000


def per_process(ctx: Context):
    """One row per (run, target, fault start, client process) with the downtime in ns (null: not recovered)."""
    windows = ctx.windows_df.select("run", "target", F.col("fault_from").alias("fault_starts"), "fault_to",
                                    "fault_in_place")
    done = ctx.completed.join(F.broadcast(windows), ["run", "target"])
    epoch = F.size(F.filter("fault_starts", lambda s: s <= F.col("invoke_time")))
    done = done.withColumn("epoch", epoch).where(F.col("epoch") > 0)
    recovers = (F.col("type") == "ok") & (F.col("invoke_time") > F.element_at("fault_in_place", F.col("epoch")))
    rows = done.groupBy("run", "target", "epoch", "process").agg(
        F.first("fault_starts").alias("fault_starts"), F.first("fault_to").alias("fault_to"),
        F.min("invoke_time").alias("first_invoke"),
        F.min(F.when(recovers, F.col("time"))).alias("first_ok_time"),
        F.min_by("index", F.when(recovers, F.col("time"))).alias("first_ok_index"),
        F.count(F.lit(1)).alias("ops"), F.max(F.col("type") == "info").alias("retired"))
    start = F.element_at("fault_starts", F.col("epoch"))
    # A process that first invoked after the fault was over was never cut off (a drain started at
    # the end, a client that joined late): it has no downtime to measure.
    rows = rows.where(F.col("first_invoke") < F.element_at("fault_to", F.col("epoch")))
    return rows.select("run", "target", "process", start.alias("fault_start"),
                       F.element_at("fault_starts", F.col("epoch") + 1).alias("next_fault_start"),
                       (F.col("first_ok_time") - start).alias("downtime"), "first_ok_index", "ops", "retired")


def judge(key, windows: list, rows: list, run_end: int, max_downtime_s: float | None) -> tuple[CheckResult, list[dict]]:
    """One run's result and anomalies from its fault windows and per-process rows (``process``,
    ``fault_start``, ``next_fault_start``, ``downtime``, ``first_ok_index``, ``retired``); the
    fused engine judges with this too, so the two engines cannot drift apart."""
    bound = None if max_downtime_s is None else int(max_downtime_s * 1e9)
    if not windows:
        return CheckResult(NAME, *key, True, "no fault in this history", applicable=False), []
    faults, anomalies = [], []
    for start, end in merge_intervals([(w.start, w.end) for w in windows]):
        inside = [w for w in windows if start <= w.start <= end]
        mine = [r for r in rows if r["fault_start"] == start]
        recovered = sorted(r["downtime"] for r in mine if r["downtime"] is not None)
        stuck = sorted((r["process"] for r in mine if r["downtime"] is None and not r["retired"]), key=int)
        retired = sorted((r["process"] for r in mine if r["downtime"] is None and r["retired"]), key=int)
        names = sorted({w.fault for w in inside})
        faults.append({"fault": ", ".join(names), "f": ", ".join(sorted({w.f for w in inside})), "start": start,
                       "end": end, "processes": len(mine), "recovered": len(recovered), "not_recovered": stuck,
                       "retired": retired,
                       "max_downtime_ms": recovered[-1] / MS if recovered else None,
                       "median_downtime_ms": recovered[len(recovered) // 2] / MS if recovered else None,
                       "per_process_ms": {r["process"]: (None if r["downtime"] is None else r["downtime"] / MS)
                                          for r in sorted(mine, key=lambda r: int(r["process"]))}})
        if bound is None:
            continue
        for r in mine:
            until = r["next_fault_start"] if r["next_fault_start"] is not None else run_end
            too_slow = r["downtime"] is not None and r["downtime"] > bound
            never = r["downtime"] is None and not r["retired"] and until - start > bound
            if too_slow or never:
                anomalies.append({"run": key[0], "target": key[1], "checker": NAME,
                                  "kind": "slow_failover" if too_slow else "not_recovered", "message_id": None,
                                  "ops": [r["first_ok_index"]] if r["first_ok_index"] is not None else [],
                                  "detail": f"process {r['process']} after the {faults[-1]['fault']} fault at "
                                            f"{start / 1e9:.3f}s: "
                                            + (f"first ok after {r['downtime'] / 1e9:.3f}s" if too_slow else "no ok operation")
                                            + f" (bound {max_downtime_s}s)"})
    all_downtimes = [f["max_downtime_ms"] for f in faults if f["max_downtime_ms"] is not None]
    stats = {"faults": faults, "max_downtime_ms": max(all_downtimes) if all_downtimes else None, "bound_s": max_downtime_s}
    if anomalies:
        return CheckResult(NAME, *key, False, f"{len(anomalies)} client(s) over the {max_downtime_s}s bound",
                           stats=stats), anomalies
    return CheckResult(NAME, *key, True, stats=stats), []


def check(ctx: Context, *, max_downtime_s: float | None = None) -> CheckOutput:
    has_faults = [key for key in ctx.runs if ctx.windows.get(key)]
    if not has_faults:
        table = ctx.spark.createDataFrame([], "run string, target string, process string, fault_start bigint, "
                                              "next_fault_start bigint, downtime bigint, first_ok_index bigint, ops bigint, "
                                              "retired boolean")
        rows = []
    else:
        table = per_process(ctx).cache()
        rows = table.collect()
    by_run: dict = {}
    for r in rows:
        by_run.setdefault((r["run"], r["target"]), []).append(r)
    given = max_downtime_s
    results, anomalies = [], []
    for key in ctx.runs:
        result, found = judge(key, ctx.windows.get(key, []), by_run.get(key, []), ctx.spans[key][1],
                              ctx.checker_option(key, "max_downtime_s", given, None))
        results.append(result)
        anomalies += [tuple(a.values()) for a in found]
    schema = ctx.empty_anomalies().schema
    anomaly_df = ctx.spark.createDataFrame(anomalies, schema) if anomalies else ctx.empty_anomalies()
    rows = [dict(zip(schema.fieldNames(), a)) for a in anomalies]
    return CheckOutput(results, anomaly_df, rows, {"downtime": table})
