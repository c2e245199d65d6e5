"""Latency percentiles and throughput, split into normal and fault windows.

Latency is an operation's completion time minus its invoke time; an operation belongs to the
fault phase when it was invoked inside a fault window (chaos/nemesis/base.py records them),
else to the normal phase. Throughput counts ``ok`` completions per second of the run, each
second marked when it overlaps a fault; the per-phase rate is the ok operations completed in the
phase divided by the phase's length.

These are measurements, not rules: valid is ``true`` when there was something to measure, and
the checks are left out of the verdict merge (``applicable`` false) when there was not.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from .common import CheckOutput, CheckResult, Context, in_fault, merge_intervals

LATENCY, THROUGHPUT = "latency", "throughput"
QUANTILES = (0.5, 0.9, 0.99, 0.999)
SECOND = 1_000_000_000
MS = 1_000_000


def _with_windows(ctx: Context):
    return ctx.completed.join(F.broadcast(ctx.windows_df), ["run", "target"], "left")


def check_latency(ctx: Context) -> CheckOutput:
    ops = _with_windows(ctx).withColumn(
        "phase", F.when(F.coalesce(in_fault(F.col("invoke_time")), F.lit(False)), "fault").otherwise("normal"))
    ok = ops.where(F.col("type") == "ok")
    table = ok.groupBy("run", "target", "f", "phase").agg(
        F.count(F.lit(1)).alias("ok"),
        F.percentile_approx("latency", list(QUANTILES), 1000).alias("quantiles"),
        F.max("latency").alias("max"), F.avg("latency").alias("mean"))
    outcomes = ops.groupBy("run", "target", "f", "phase").pivot("type", ["ok", "fail", "info"]).count().na.fill(0)
    table = table.join(outcomes.drop("ok"), ["run", "target", "f", "phase"], "right").na.fill(0, ["ok"]).cache()
    rows = table.collect()
    by_run: dict = {}
    for r in rows:
        quantiles = r["quantiles"] or []
        entry = {"ok": r["ok"], "fail": r["fail"], "info": r["info"],
                 "max_ms": r["max"] / MS if r["max"] is not None else None,
                 "mean_ms": round(r["mean"] / MS, 3) if r["mean"] is not None else None,
                 **{f"p{_label(q)}_ms": v / MS for q, v in zip(QUANTILES, quantiles)}}
        by_run.setdefault((r["run"], r["target"]), {}).setdefault(r["f"], {})[r["phase"]] = entry
    results = []
    for key in ctx.runs:
        stats = by_run.get(key, {})
        if stats:
            results.append(CheckResult(LATENCY, *key, True, stats={"by_f": stats}))
        else:
            results.append(CheckResult(LATENCY, *key, True, "no completed client operation", applicable=False))
    flat = table.select("run", "target", "f", "phase", "ok", "fail", "info", "max", "mean",
                        *[F.col("quantiles")[i].alias(f"p{_label(q)}") for i, q in enumerate(QUANTILES)])
    return CheckOutput(results, ctx.empty_anomalies(), [], {"latency": flat})


def _label(q: float) -> str:
    return f"{q * 100:g}".replace(".", "")  # 0.5 -> 50, 0.999 -> 999


def check_throughput(ctx: Context) -> CheckOutput:
    ok = _with_windows(ctx).where(F.col("type") == "ok").withColumn("second", F.floor(F.col("time") / SECOND))
    lo, hi = F.col("second") * SECOND, (F.col("second") + 1) * SECOND
    overlaps = F.exists(F.arrays_zip("fault_from", "fault_to"), lambda w: (w["fault_from"] < hi) & (w["fault_to"] > lo))
    table = (ok.groupBy("run", "target", "f", "second").agg(F.count(F.lit(1)).alias("ok"),
                                                           F.first("fault_from").alias("fault_from"),
                                                           F.first("fault_to").alias("fault_to"))
             .withColumn("fault", F.coalesce(overlaps, F.lit(False))).drop("fault_from", "fault_to").cache())
    in_phase = ok.withColumn("phase", F.when(F.coalesce(in_fault(F.col("time")), F.lit(False)), "fault").otherwise("normal"))
    counts = in_phase.groupBy("run", "target", "f", "phase").count().collect()
    by_run: dict = {}
    for r in counts:
        by_run.setdefault((r["run"], r["target"]), {}).setdefault(r["f"], {})[r["phase"]] = r["count"]
    results = []
    for key in ctx.runs:
        t0, t1, _ = ctx.spans[key]
        faults = merge_intervals([(max(w.start, t0), min(w.end, t1)) for w in ctx.windows.get(key, []) if w.end > t0])
        fault_ns = sum(b - a for a, b in faults if b > a)
        normal_ns = max(0, (t1 - t0) - fault_ns)
        per_f = {}
        for f, phases in sorted(by_run.get(key, {}).items()):
            per_f[f] = {"normal_ok_per_s": round(phases.get("normal", 0) / (normal_ns / SECOND), 3) if normal_ns else None,
                        "fault_ok_per_s": round(phases.get("fault", 0) / (fault_ns / SECOND), 3) if fault_ns else None,
                        "ok_normal": phases.get("normal", 0), "ok_fault": phases.get("fault", 0)}
        stats = {"normal_s": normal_ns / SECOND, "fault_s": fault_ns / SECOND, "by_f": per_f}
        if per_f:
            results.append(CheckResult(THROUGHPUT, *key, True, stats=stats))
        else:
            results.append(CheckResult(THROUGHPUT, *key, True, "no ok client operation", applicable=False, stats=stats))
    return CheckOutput(results, ctx.empty_anomalies(), [], {"throughput": table})
