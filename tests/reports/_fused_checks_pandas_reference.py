"""FROZEN ORACLE for tests/reports/test_fused_checks.py: the pandas implementation of the fused
engine's per-run pass (reports/pipeline/fused/checks.py) as it was before the numpy/pyarrow rewrite,
copied unchanged below this note. Do not edit or import it from production code: the tests compare
the new `facts_from_table` against `facts` here, record for record.

Original docstring:
The per-run pass of the fused engine: every checker's facts from one run's flat rows, vectorized.

Each function mirrors the Spark SQL checker of the same name (reports/pipeline/checkers/) and
keeps its definitions; read those docstrings for the rules and their sources. `run_pass` returns
records ``(kind, payload)``; engine.py turns them into CheckResults exactly as the SQL checkers do
(the parts that need the run record, a bound or the merge of several runs stay on the driver).

Percentiles are exact (nearest rank); the SQL engine's ``percentile_approx(..., 1000)`` returns
the same element while a group has fewer than about a thousand values and stays within its 0.1 %
rank error above that.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

NEMESIS = "nemesis"
_NOT_FAULTS = ("setup", "teardown")
_CLOSING_FS = ("close", "unsubscribe")
_REOPENING_FS = ("connect", "subscribe")
QUANTILES = (0.5, 0.9, 0.99, 0.999)
SECOND = 1_000_000_000

#: applyInPandas output: one row per record
OUTPUT_SCHEMA = "run string, target string, kind string, payload string"


def _none(v):
    """A pandas/numpy scalar as plain JSON-able Python (NaN/NA -> None)."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def run_pass(df: pd.DataFrame) -> pd.DataFrame:
    """applyInPandas entry: one run's flat rows -> its records."""
    run, target = str(df["run"].iloc[0]), str(df["target"].iloc[0])
    records = [(k, json.dumps(p, default=_none)) for k, p in facts(df)]
    return pd.DataFrame({"run": run, "target": target, "kind": [k for k, _ in records],
                         "payload": [p for _, p in records]})


#: few distinct values: as categoricals, every filter below copies small integer codes, not text
_CATEGORICAL = ("process", "type", "f", "node", "destination", "group", "phase", "fault")


def facts(df: pd.DataFrame) -> list[tuple[str, object]]:
    files = sorted(str(f) for f in df["file"].dropna().unique())
    df = df.drop(columns=["file", "error", "run", "target"])
    df = df.astype({c: "category" for c in _CATEGORICAL})
    df = df.sort_values(["index", "pos"], kind="stable", na_position="first").reset_index(drop=True)
    out: list[tuple[str, object]] = []
    is_op = df["pos"].isna() | (df["pos"] == 0)
    ops = df[is_op].reset_index(drop=True)
    out.append(("span", {"t0": int(ops["time"].min()), "t1": int(ops["time"].max()), "n": int(len(ops)),
                         "drained": bool(((ops["f"] == "drain") & (ops["type"] == "ok")).any()),
                         "files": files}))
    nem = ops[ops["process"] == NEMESIS]
    out.append(("nemesis", [{"index": int(r.index), "time": int(r.time), "f": r.f, "phase": _none(r.phase),
                             "fault": _none(r.fault), "started": _none(r.started),
                             "fault_window": None if r.fault_window is None else
                             [w.asDict() if hasattr(w, "asDict") else dict(w) for w in r.fault_window]}
                            for r in nem.itertuples()]))
    client = df[df["process"] != NEMESIS]
    msgs = client[client["pos"].notna()]
    dest = msgs["destination"]
    topic = dest.isin([c for c in dest.cat.categories if str(c).startswith("topic://")])
    out.append(("topic", bool(topic.any() or (client["f"] == "subscribe").any())))
    queue = msgs[~topic]
    delivered = queue["f"].isin(["receive", "drain"]) & (queue["type"] == "ok")
    out += total_queue(queue, delivered)
    out += fifo(queue, delivered)
    out += groups(queue[delivered], ops)
    done = completed(ops[ops["process"] != NEMESIS])
    out.append(("done", _completed_summary(done, ops, nem)))
    return out


# ---------------------------------------------------------------------- total queue


def total_queue(m: pd.DataFrame, delivered: pd.Series) -> list:
    is_send = m["f"] == "send"
    relevant = m[is_send | delivered]
    if relevant.empty:
        return [("tq_totals", None)]
    r_send = relevant["f"] == "send"
    per = pd.DataFrame({
        "id": relevant["id"],
        "attempt": np.where(r_send & (relevant["type"] == "invoke"), 1, np.where(r_send & (relevant["type"] == "fail"), -1, 0)),
        "enq": (r_send & (relevant["type"] == "ok")).astype(int),
        "deq": (~r_send).astype(int)})
    g = per.groupby("id", dropna=False, sort=False, observed=True).agg(attempt=("attempt", "sum"), enq=("enq", "max"), deq=("deq", "sum"))
    g["att"] = g["attempt"].clip(lower=0)
    totals = {"attempted": int(g["att"].sum()), "enqueued": int(g["enq"].sum()), "dequeued": int(g["deq"].sum())}
    enq, deq, att = g["enq"].to_numpy(), g["deq"].to_numpy(), g["att"].to_numpy()
    kind = np.select([(enq == 1) & (deq == 0), (deq > 0) & (att == 0), (att > 0) & (deq > att),
                      (deq > 0) & (att > 0) & (enq == 0)], ["lost", "unexpected", "duplicated", "recovered"], "")
    g["kind"] = kind
    flagged = g[g["kind"] != ""]
    extra = flagged[(flagged["kind"] == "duplicated") & (flagged["enq"] == 0)].assign(kind="recovered")
    flagged = pd.concat([flagged, extra])
    out: list = [("tq_totals", totals)]
    if flagged.empty:
        return out
    ids = set(flagged.index.dropna())
    sub = m[m["id"].isin(ids)]
    ops_of = {k: sorted(int(i) for i in v) for k, v in sub.groupby("id", observed=True)["index"]}
    for mid, row in flagged.iterrows():
        mid = _none(mid)
        detail = {"lost": "confirmed send never received", "unexpected": "received but never sent",
                  "duplicated": f"received {int(row['deq'])} times, sent {int(row['att'])}",
                  "recovered": "send outcome unknown (info), yet it arrived"}[row["kind"]]
        out.append(("anomaly", {"checker": "total_queue", "kind": row["kind"], "message_id": mid,
                                "ops": ops_of.get(mid, []) if mid is not None else [], "detail": detail}))
    return out


# ---------------------------------------------------------------------- order


def first_deliveries(d: pd.DataFrame) -> pd.DataFrame:
    """Each id's first delivery (d sorted by index, pos); one row for all null ids, like Spark's
    window partition over a null key."""
    return d[~d["id"].duplicated(keep="first")]


def order_inversions(first: pd.DataFrame, keys: list[str], checker: str, label) -> list:
    rows = first[first["producer"].notna() & first["seq"].notna()]
    if rows.empty:
        return []
    rows = rows.copy()
    rows["_n"] = np.arange(len(rows))
    out = []
    for _, g in rows.groupby([*keys, "producer"], sort=False, dropna=False, observed=True):
        seq = g["seq"].to_numpy(dtype=np.int64)
        before_max = np.maximum.accumulate(seq)
        late = np.nonzero(seq[1:] < before_max[:-1])[0] + 1
        if not len(late):
            continue
        # the row holding the running maximum: the latest one whose seq equals it
        holder = np.where(seq == before_max, np.arange(len(seq)), -1)
        holder = np.maximum.accumulate(holder)
        idx, ids = g["index"].to_numpy(), g["id"].to_numpy()
        for i in late:
            b = holder[i - 1]
            row = g.iloc[i]
            bid = _none(ids[b])
            text = label(row)
            detail = None if bid is None or text is None else (
                f"{text}: seq {int(seq[i])} of producer {int(row['producer'])} arrived after seq {int(seq[b])} ({bid})")
            out.append(("anomaly", {"checker": checker, "kind": "reordered", "message_id": _none(ids[i]),
                                    "ops": [int(idx[b]), int(idx[i])], "detail": detail}))
    return out


# ---------------------------------------------------------------------- FIFO


def fifo(m: pd.DataFrame, delivered: pd.Series) -> list:
    m = m[m["destination"].notna()]
    delivered = delivered[m.index]
    if m.empty:
        return [("fifo_scope", {})]
    receive_ok = (m["f"] == "receive") & (m["type"] == "ok")
    consumer = pd.Series(np.where(m["consumer"].notna(), m["consumer"].astype("Int64").astype(str),
                                  "process " + m["process"].astype(str)), index=m.index).where(receive_ok)
    scope: dict[str, str] = {}
    for dest, g in m.groupby("destination", sort=False, observed=True):
        nodes = g["node"].nunique()
        consumers = consumer[g.index].nunique()
        deliveries = int(delivered[g.index].sum())
        if nodes > 1:
            reason = f"{nodes} nodes: a network of brokers does not keep total order"
        elif consumers > 1:
            reason = f"{consumers} consumers compete for the queue: order is promised to a single consumer"
        elif deliveries == 0:
            reason = "nothing was received"
        else:
            reason = ""
        scope[dest] = reason
    out: list = [("fifo_scope", scope)]
    eligible = [d for d, why in scope.items() if not why]
    if eligible:
        d = m[delivered & m["destination"].isin(eligible)]
        out += order_inversions(first_deliveries(d), ["destination"], "fifo", lambda r: r["destination"])
    return out


# ---------------------------------------------------------------------- groups


def groups(deliveries: pd.DataFrame, ops: pd.DataFrame) -> list:
    g = deliveries[deliveries["group"].notna()]
    if g.empty:
        return [("groups_sizes", {"groups": 0, "n": 0, "handovers": 0})]
    g = g.sort_values(["destination", "group", "index", "pos"], kind="stable", na_position="last")
    same = (g["destination"].eq(g["destination"].shift()) | (g["destination"].isna() & g["destination"].shift().isna())) \
        & g["group"].eq(g["group"].shift())
    prev_process = g["process"].shift().where(same)
    prev_index = g["index"].shift().where(same)
    changed = prev_process.notna() & (g["process"] != prev_process)
    named = g[g["destination"].notna()]
    sizes = {"groups": int(len(named[["destination", "group"]].drop_duplicates())), "n": int(len(g)),
             "handovers": int(changed.sum())}
    out: list = [("groups_sizes", sizes)]
    changes = g[changed].assign(prev_process=prev_process[changed], prev_index=prev_index[changed].astype(np.int64))
    if not changes.empty:
        client = ops[ops["process"] != NEMESIS]
        own = client[(client["f"].isin(_REOPENING_FS) & (client["type"] == "invoke")) | client["f"].isin(_CLOSING_FS)
                     | (client["type"] == "info")]
        own_by = {p: np.sort(v.to_numpy()) for p, v in own.groupby("process", observed=True)["index"]}
        everyone = ops[((ops["process"] == NEMESIS) & ~ops["f"].isin(_NOT_FAULTS) & (ops["phase"] == "start"))
                       | (ops["f"] == "rebalance") | ((ops["f"] == "drain") & (ops["type"] == "invoke"))]
        e = np.sort(everyone["index"].to_numpy())
        lo, hi = changes["prev_index"].to_numpy(), changes["index"].to_numpy()
        by_all = np.searchsorted(e, lo, "right") < np.searchsorted(e, hi, "left")
        for (k, row), covered in zip(changes.iterrows(), by_all):
            if covered:
                continue
            mine = own_by.get(row["prev_process"])
            if mine is not None and np.searchsorted(mine, row["prev_index"], "right") < np.searchsorted(mine, row["index"], "left"):
                continue
            detail = None if row["destination"] is None or pd.isna(row["destination"]) else (
                f"{row['destination']} group {row['group']}: delivered to process {row['process']} while process "
                f"{row['prev_process']} still owned it (no close, fault or rebalance since op {int(row['prev_index'])})")
            out.append(("anomaly", {"checker": "groups", "kind": "stolen", "message_id": _none(row["id"]),
                                    "ops": [int(row["prev_index"]), int(row["index"])], "detail": detail}))
    first = first_deliveries(g.sort_values(["index", "pos"], kind="stable"))
    out += order_inversions(first, ["destination", "group"], "groups",
                            lambda r: None if pd.isna(r["destination"]) else f"{r['destination']} group {r['group']}")
    return out


# ---------------------------------------------------------------------- completed ops: downtime, latency, throughput


def completed(client_ops: pd.DataFrame) -> pd.DataFrame:
    """Each completed client op with its invoke (the process's previous line; chaos/history.py)."""
    c = client_ops.sort_values(["process", "index"], kind="stable")
    same = c["process"].eq(c["process"].shift())
    prev_type, prev_f = c["type"].shift().where(same), c["f"].shift().where(same)
    keep = (c["type"] != "invoke") & (prev_type == "invoke") & (prev_f == c["f"])
    done = c[keep].assign(invoke_index=c["index"].shift()[keep], invoke_time=c["time"].shift()[keep])
    done = done.astype({"invoke_index": np.int64, "invoke_time": np.int64})
    return done.assign(latency=done["time"] - done["invoke_time"])[
        ["process", "f", "type", "index", "time", "invoke_index", "invoke_time", "latency"]]


def _completed_summary(done: pd.DataFrame, ops: pd.DataFrame, nem: pd.DataFrame) -> dict:
    """Everything downtime, latency and throughput need from the completed ops, given the run's
    merged fault intervals (computed here from the nemesis rows as common.fault_windows does)."""
    from reports.pipeline.checkers.common import merge_intervals

    t1 = int(ops["time"].max())
    windows = fault_windows(nem, t1)
    merged = merge_intervals([(s, e) for s, e, _ in windows])
    fr = np.array([a for a, _ in merged], dtype=np.int64)
    to = np.array([b for _, b in merged], dtype=np.int64)
    # the in-place time of each merged interval: that of the latest-placed fault starting with it
    in_place = np.array([max(p for s, _, p in windows if s == a) for a in fr], dtype=np.int64)
    return {"downtime": downtime_rows(done, fr, to, in_place), "latency": latency_rows(done, fr, to),
            "throughput": throughput_rows(done, fr, to)}


def fault_windows(nem: pd.DataFrame, run_end: int) -> list[tuple[int, int, int]]:
    """(start, end, in place) of every fault: common.fault_windows over the typed nemesis fields."""
    open_faults: dict[str, tuple[int, int]] = {}
    windows: list[tuple[int, int, int]] = []
    for r in nem.itertuples():
        if r.phase != "end":
            continue
        for healed in (r.fault_window if r.fault_window is not None else []):
            opened = open_faults.pop(str(healed["fault"]), None)
            start = int(healed["start"])
            windows.append((start, int(healed["end"]), start if opened is None else opened[1]))
        if _none(r.fault) is not None and r.f not in _NOT_FAULTS:
            open_faults[str(r.fault)] = (int(r.started) if _none(r.started) is not None else int(r.time), int(r.time))
    for start, in_place in open_faults.values():
        windows.append((start, max(run_end, start), in_place))
    return windows


def _inside(t: np.ndarray, fr: np.ndarray, to: np.ndarray) -> np.ndarray:
    """True where t lies in a merged interval [fr, to) (intervals sorted, disjoint)."""
    if not len(fr):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(fr, t, "right") - 1
    return (k >= 0) & (t < to[np.maximum(k, 0)])


def downtime_rows(done: pd.DataFrame, fr: np.ndarray, to: np.ndarray, in_place: np.ndarray) -> list[dict]:
    if not len(fr) or done.empty:
        return []
    epoch = np.searchsorted(fr, done["invoke_time"].to_numpy(), "right")
    d = done.assign(epoch=epoch)
    d = d[d["epoch"] > 0]
    rows = []
    for (e, process), g in d.groupby(["epoch", "process"], sort=False, observed=True):
        if g["invoke_time"].min() >= to[e - 1]:
            continue
        ok = g[(g["type"] == "ok") & (g["invoke_time"] > in_place[e - 1])]
        start = int(fr[e - 1])
        if ok.empty:
            first_ok_time = first_ok_index = None
        else:
            best = ok.loc[ok["time"].idxmin()]
            first_ok_time, first_ok_index = int(best["time"]), int(best["index"])
        rows.append({"process": str(process), "fault_start": start,
                     "next_fault_start": int(fr[e]) if e < len(fr) else None,
                     "downtime": None if first_ok_time is None else first_ok_time - start,
                     "first_ok_index": first_ok_index, "ops": int(len(g)), "retired": bool((g["type"] == "info").any())})
    return rows


def _nearest_rank(values: np.ndarray, q: float) -> int:
    return int(values[max(0, min(len(values) - 1, math.ceil(q * len(values)) - 1))])


def latency_rows(done: pd.DataFrame, fr: np.ndarray, to: np.ndarray) -> list[dict]:
    if done.empty:
        return []
    phase = np.where(_inside(done["invoke_time"].to_numpy(), fr, to), "fault", "normal")
    d = done.assign(phase=phase)
    rows = []
    for (f, ph), g in d.groupby(["f", "phase"], sort=True, observed=True):
        ok = np.sort(g.loc[g["type"] == "ok", "latency"].to_numpy())
        rows.append({"f": f, "phase": ph, "ok": int(len(ok)), "fail": int((g["type"] == "fail").sum()),
                     "info": int((g["type"] == "info").sum()),
                     "max": int(ok[-1]) if len(ok) else None, "mean": float(ok.mean()) if len(ok) else None,
                     "quantiles": [_nearest_rank(ok, q) for q in QUANTILES] if len(ok) else None})
    return rows


def throughput_rows(done: pd.DataFrame, fr: np.ndarray, to: np.ndarray) -> dict:
    ok = done[done["type"] == "ok"]
    if ok.empty:
        return {"seconds": [], "phases": []}
    t = ok["time"].to_numpy()
    second = np.floor_divide(t, SECOND)
    per = ok.assign(second=second).groupby(["f", "second"], sort=True, observed=True).size().reset_index(name="ok")
    lo, hi = per["second"].to_numpy() * SECOND, (per["second"].to_numpy() + 1) * SECOND
    if len(fr):
        # some merged interval overlaps [lo, hi): the first one ending after lo starts before hi
        k = np.searchsorted(to, lo, "right")
        fault = (k < len(fr)) & (fr[np.minimum(k, len(fr) - 1)] < hi)
    else:
        fault = np.zeros(len(per), dtype=bool)
    seconds = [{"f": f, "second": int(s), "ok": int(n), "fault": bool(x)}
               for f, s, n, x in zip(per["f"], per["second"], per["ok"], fault)]
    phase = np.where(_inside(t, fr, to), "fault", "normal")
    phases = [{"f": f, "phase": p, "count": int(n)}
              for (f, p), n in ok.assign(phase=phase).groupby(["f", "phase"], observed=True).size().items()]
    return {"seconds": seconds, "phases": phases}
