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
from .protocol import Checker, Facts, Table
from .result import VALID, CheckResult, RunKey

LATENCY, THROUGHPUT = "latency", "throughput"
QUANTILES = (0.5, 0.9, 0.99, 0.999)


def _label(q: float) -> str:
    return f"{q * 100:g}".replace(".", "")


def latency_facts(c: Columns, *, mergeable: bool = False) -> list[dict]:
    """Per (operation, phase): ok / fail / info counts and the ok latencies' max, mean and
    nearest-rank quantiles (ns). ``mergeable``: each row also keeps its ok latencies as sorted
    distinct values and their counts (numpy arrays), what `combine_latency` needs to give the
    exact quantiles of a run split into parts."""
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
        row = _latency_row(names[k // 2], "fault" if k % 2 == 0 else "normal", ok, int((ty == fail_code).sum()),
                           int((ty == info_code).sum()))
        if mergeable:
            row["values"], row["counts"] = np.unique(ok, return_counts=True)
        rows.append(row)
    return rows


def _latency_row(f: str, phase: str, ok: np.ndarray, fail: int, info: int) -> dict:
    """``ok``: the sorted ok latencies. The mean is the exact integer sum over the count (the same
    whether the latencies were summed at once or in parts)."""
    return {"f": f, "phase": phase, "ok": int(len(ok)), "fail": fail, "info": info,
            "max": int(ok[-1]) if len(ok) else None, "mean": int(ok.sum()) / len(ok) if len(ok) else None,
            "quantiles": [nearest_rank(ok, q) for q in QUANTILES] if len(ok) else None}


#: the key that splits a run for latency and throughput (reports/checkers/split.py): an
#: operation's invoke and completion are a process's consecutive lines, so whole processes go
#: together; the client (failover_downtime.py) keeps its processes together too
SPLIT_KEY = "client"


def combine_latency(parts: list[list[dict]]) -> list[dict]:
    """The latency facts of a run from its parts' mergeable facts (`latency_facts(mergeable=True)`):
    counts add up, and the quantiles come from the merged distinct values and counts (exact)."""
    by: dict[tuple[str, str], list[dict]] = {}
    for part in parts:
        for row in part:
            by.setdefault((row["f"], row["phase"]), []).append(row)
    out = []
    for (f, phase), rows in sorted(by.items()):
        values = np.concatenate([r["values"] for r in rows]).astype(np.int64)
        counts = np.concatenate([r["counts"] for r in rows]).astype(np.int64)
        ok = np.repeat(values, counts)
        ok.sort(kind="stable")
        out.append(_latency_row(f, phase, ok, sum(r["fail"] for r in rows), sum(r["info"] for r in rows)))
    return out


def without_distributions(rows: list[dict]) -> list[dict]:
    """Mergeable latency facts as plain ones."""
    return [{k: v for k, v in r.items() if k not in ("values", "counts")} for r in rows]


def combine_throughput(parts: list[dict]) -> dict:
    """The throughput facts of a run from its parts': ok completions per (operation, second) and
    per (operation, phase) add up (every part saw the same fault windows)."""
    seconds: dict[tuple[str, int], list] = {}
    phases: dict[tuple[str, str], int] = {}
    for p in parts:
        for s in p["seconds"]:
            into = seconds.setdefault((s["f"], s["second"]), [0, s["fault"]])
            into[0] += s["ok"]
        for ph in p["phases"]:
            phases[(ph["f"], ph["phase"])] = phases.get((ph["f"], ph["phase"]), 0) + ph["count"]
    return {"seconds": [{"f": f, "second": s, "ok": n, "fault": x} for (f, s), (n, x) in sorted(seconds.items())],
            "phases": [{"f": f, "phase": ph, "count": n} for (f, ph), n in sorted(phases.items())]}


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


def _latency(key: RunKey, facts_: dict, options: dict):
    result, table = judge_latency(key, facts_[LATENCY])
    return result, [], table


def _throughput(key: RunKey, facts_: dict, options: dict):
    # the fault windows are failover_downtime's facts (both read the same nemesis lines)
    windows = [(w["start"], w["end"]) for w in facts_["failover_downtime"]["windows"]]
    result, table = judge_throughput(key, facts_[THROUGHPUT], facts_["span"]["t0"], facts_["span"]["t1"], windows)
    return result, [], table


def describe_latency(result: dict) -> list[str]:
    """A line per operation: the ok latencies' p50 / p99 / max in each phase, over how many."""
    lines = []
    for f, phases in sorted(result["stats"]["by_f"].items()):
        parts = [f"{phase}: p50 {_ms(p.get('p50_ms'))} / p99 {_ms(p.get('p99_ms'))} / max {_ms(p.get('max_ms'))} ms "
                 f"over {p['ok']} ok" for phase, p in sorted(phases.items(), key=lambda item: item[0] != "normal")]
        lines.append(f"latency of {f}: " + "; ".join(parts))
    return lines


def describe_throughput(result: dict) -> list[str]:
    """A line per operation: ok completions per second outside and during the faults."""
    stats = result["stats"]
    lines = []
    for f, rates in sorted(stats["by_f"].items()):
        during = (f", {rates['fault_ok_per_s']:g} ok/s during faults ({stats['fault_s']:.1f} s)"
                  if rates["fault_ok_per_s"] is not None else "")
        normal = f"{rates['normal_ok_per_s']:g} ok/s" if rates["normal_ok_per_s"] is not None else "no time"
        lines.append(f"throughput of {f}: {normal} outside faults ({stats['normal_s']:.1f} s){during}")
    return lines


def _ms(value) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


#: measurements: shown beside the verdict, never merged into it
LATENCY_CHECKER = Checker(LATENCY, _latency, measurement=True, facts=(
    Facts(LATENCY, latency_facts, SPLIT_KEY, combine_latency, compute_part=lambda c: latency_facts(c, mergeable=True)),),
    table=Table(LATENCY, "run string, target string, f string, phase string, ok bigint, fail bigint, info bigint, "
                         "max bigint, mean double, p50 bigint, p90 bigint, p99 bigint, p999 bigint"),
    describe=describe_latency)
THROUGHPUT_CHECKER = Checker(THROUGHPUT, _throughput, measurement=True,
                             facts=(Facts(THROUGHPUT, throughput_facts, SPLIT_KEY, combine_throughput),),
                             table=Table(THROUGHPUT, "run string, target string, f string, second bigint, ok bigint, "
                                                     "fault boolean"),
                             describe=describe_throughput)
