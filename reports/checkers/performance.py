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

import numpy as np

from .history import MS, SECOND, Columns, inside, merge_intervals, nearest_rank, slices
from .result import VALID, CheckResult, RunKey

LATENCY, THROUGHPUT = "latency", "throughput"
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def _label(q: float) -> str:
    return f"{q * 100:g}".replace(".", "")


def latency_facts(c: Columns) -> list[dict]:
    """Per (operation, phase): ok / fail / info counts and the ok latencies' max, mean and
    nearest-rank quantiles (ns)."""
    done, fr, to = c.done, c.fault_from, c.fault_to
    if not len(done):
        return []
    fault = inside(done.invoke_time, fr, to)
    has_f = np.flatnonzero(done.f >= 0)  # pandas' groupby drops a null key
    # (f in value order, then "fault" before "normal")
    names = done.r.f.sorted_values()
    key = done.r.f.rank()[done.f[has_f]] * 2 + ~fault[has_f]
    ok_code, fail_code, info_code = (done.r.type.code(t) for t in ("ok", "fail", "info"))
    rows = []
    for k, part in slices(key, 2 * done.r.f.n_values):
        g = has_f[part]
        ty = done.type[g]
        ok = np.sort(done.latency[g[ty == ok_code]])
        rows.append({"f": names[k // 2], "phase": "fault" if k % 2 == 0 else "normal", "ok": int(len(ok)),
                     "fail": int((ty == fail_code).sum()), "info": int((ty == info_code).sum()),
                     "max": int(ok[-1]) if len(ok) else None, "mean": float(ok.mean()) if len(ok) else None,
                     "quantiles": [nearest_rank(ok, q) for q in QUANTILES] if len(ok) else None})
    return rows



def throughput_facts(c: Columns) -> dict:
    """ok completions per (operation, second), each second marked when it overlaps a fault, and
    per (operation, phase) counts."""
    done, fr, to = c.done, c.fault_from, c.fault_to
    ok = np.flatnonzero((done.type == done.r.type.code("ok")) & (done.f >= 0))
    if not len(ok):
        return {"seconds": [], "phases": []}
    t = done.time[ok]
    f = done.r.f.rank()[done.f[ok]]
    second = np.floor_divide(t, SECOND)
    s0 = int(second.min())
    n_seconds = int(second.max()) - s0 + 1
    per, counts = np.unique(f * n_seconds + (second - s0), return_counts=True)
    per_f, per_second = per // n_seconds, per % n_seconds + s0
    lo, hi = per_second * SECOND, (per_second + 1) * SECOND
    if len(fr):
        # some merged interval overlaps [lo, hi): the first one ending after lo starts before hi
        k = np.searchsorted(to, lo, "right")
        fault = (k < len(fr)) & (fr[np.minimum(k, len(fr) - 1)] < hi)
    else:
        fault = np.zeros(len(per), dtype=bool)
    names = done.r.f.sorted_values()
    seconds = [{"f": names[a], "second": int(s), "ok": int(n), "fault": bool(x)}
               for a, s, n, x in zip(per_f.tolist(), per_second.tolist(), counts.tolist(), fault.tolist())]
    phase_key = f * 2 + ~inside(t, fr, to)
    keys, n = np.unique(phase_key, return_counts=True)
    phases = [{"f": names[k // 2], "phase": "fault" if k % 2 == 0 else "normal", "count": int(c)}
              for k, c in zip(keys.tolist(), n.tolist())]
    return {"seconds": seconds, "phases": phases}


def judge_latency(key: RunKey, facts_: list[dict]) -> tuple[CheckResult, list[tuple]]:
    """The result, and the table rows (run, target, f, phase, ok, fail, info, max, mean, p50..p999)."""
    stats: dict = {}
    table = []
    for r in facts_:
        quantiles = r["quantiles"] or []
        stats.setdefault(r["f"], {})[r["phase"]] = {
            "ok": r["ok"], "fail": r["fail"], "info": r["info"],
            "max_ms": r["max"] / MS if r["max"] is not None else None,
            "mean_ms": round(r["mean"] / MS, 3) if r["mean"] is not None else None,
            **{f"p{_label(q)}_ms": v / MS for q, v in zip(QUANTILES, quantiles)}}
        table.append((*key, r["f"], r["phase"], r["ok"], r["fail"], r["info"], r["max"], r["mean"],
                      *(r["quantiles"] or [None] * len(QUANTILES))))
    if not stats:
        return CheckResult(LATENCY, *key, VALID, "no completed client operation", applicable=False), table
    return CheckResult(LATENCY, *key, VALID, stats={"by_f": stats}), table


def judge_throughput(key: RunKey, facts_: dict, t0: int, t1: int, windows: list[tuple[int, int]]) -> tuple[CheckResult, list[tuple]]:
    """The result (ok operations per second in the normal and in the fault phase), and the table
    rows (run, target, f, second, ok, fault); ``windows``: the run's fault intervals."""
    table = [(*key, s["f"], s["second"], s["ok"], s["fault"]) for s in facts_["seconds"]]
    by_f: dict = {}
    for p in facts_["phases"]:
        by_f.setdefault(p["f"], {})[p["phase"]] = p["count"]
    faults = merge_intervals([(max(a, t0), min(b, t1)) for a, b in windows if b > t0])
    fault_ns = sum(b - a for a, b in faults if b > a)
    normal_ns = max(0, (t1 - t0) - fault_ns)
    per_f = {}
    for f, phases in sorted(by_f.items()):
        per_f[f] = {"normal_ok_per_s": round(phases.get("normal", 0) / (normal_ns / SECOND), 3) if normal_ns else None,
                    "fault_ok_per_s": round(phases.get("fault", 0) / (fault_ns / SECOND), 3) if fault_ns else None,
                    "ok_normal": phases.get("normal", 0), "ok_fault": phases.get("fault", 0)}
    stats = {"normal_s": normal_ns / SECOND, "fault_s": fault_ns / SECOND, "by_f": per_f}
    if not per_f:
        return CheckResult(THROUGHPUT, *key, VALID, "no ok client operation", applicable=False, stats=stats), table
    return CheckResult(THROUGHPUT, *key, VALID, stats=stats), table
