"""Failover downtime: how long each client was unable to work after each fault.

The A-MQ fault-tolerant messaging guide (2.1, the failover protocol) promises that clients
reconnect and carry on after a broker goes away; this measures how long that took, per client
and per disturbance, from the history alone (DESIGN.md, "History format"; chaos/nemesis/base.py).

Definitions (one implementation since issue 17; where the earlier copies disagreed, the choice
and the reason are given):
* disturbance: the faults of reports/checkers/history.py `fault_windows` (kill, stop, pause,
  partition, a restart of a running broker...), overlapping ones merged into one, from the first
  start (`disturbances`). A kill while a partition holds is one outage for a client, and a toxic
  on each stream of a link is one fault: measuring each step on its own would count the same
  outage twice (the per-step copy did).
* client: a worker of the workload. A process that ended an operation ``info`` retired, and its
  worker carries on under a new process id (chaos/history.py), so processes are grouped back into
  their worker through what the history records: sends carry the ``producer`` index, received
  values the ``consumer`` / ``subscriber`` index (the queue workload's final drain, ``consumer:
  -1``, is not a worker). A process the history never ties to a worker is a client of its own,
  ``process-N``. (Per process, a worker whose process retired during the fault and whose
  successor first connected after the heal would not be measured at all: seen on a reference
  broker pause, tests/chaos/test_failover_downtime.py.) A client whose last operation ended
  ``info`` with no process carrying on was stopped by the harness: listed as retired.
* in scope for a disturbance: a client with an operation in flight at its start (invoked
  before, completed after or never), one that invoked something from its start until it ended,
  or one that was working before the start and carries on after it. One that first appears
  after the fault ended (the final drain) was never cut off. (The per-step copy measured a
  client once per overlapping step; the Spark copy missed a process stuck in one operation
  across the whole fault, the worst case of all.)
* downtime: from the disturbance's start to the completion of the client's first ``ok``
  ``send`` or ``receive`` invoked after the fault was in place (the end event of the step that
  injected it) and before the next disturbance. An operation invoked while the step was still
  injecting may have gone through before the fault took hold (seen in CI: a send 6 ms into a
  proxy partition) and proves nothing about reconnecting; a ``connect`` that succeeds is not
  yet work done. A receive can succeed without the broker (the client library may hold messages
  dispatched before the fault, its prefetch), so a consumer's downtime can be near zero; sends
  wait for the broker's receipt.
* never recovered: in scope, not retired, and no such operation. It was down at least until its
  last operation completed (until the end of the history when one is still open).

Verdict: ``false`` when a bound is given (``max_downtime_s``: the analysis's option, else the
experiment's own setting) and some downtime, or some never-recovered lower bound, exceeds it.
Otherwise ``unknown`` when some client never recovered: with no bound, or a lower bound still
within it, nobody can say it recovered in time (the Spark copy said ``true`` here; no evidence is
not a pass). Otherwise ``true``; without a bound the numbers are the result. A run without faults
has nothing to measure (not applicable).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable

import numpy as np

from chaos.experiment_file import OUTAGE_FAULTS, takes_broker_away

from .history import Columns, open_ops
from .protocol import Checker, Facts, Table
from .result import INVALID, UNKNOWN, VALID, CheckResult, RunKey

NAME = "failover_downtime"
MS = NS_PER_MS = 1_000_000
#: the operations whose success means the client works again
RECOVERY_FS = ("send", "receive")


# ---------------------------------------------------------------------- facts (inside a Spark task)


def facts(c: Columns) -> dict:
    """The run's fault windows and, per (disturbance, client in scope): its downtime in
    ns (None: not recovered), the op that ended it, whether it retired, the lower bound of a
    never-recovered one and what it did after the start."""
    windows = [{"fault": w.fault, "f": w.f, "start": w.start, "end": w.end, "open_at_end": w.open_at_end,
                "node": w.node} for w in c.windows]
    out = {"windows": windows, "run_end": c.t1, "rows": []}
    fr, to, in_place = c.fault_from, c.fault_to, c.fault_in_place
    if not len(fr):
        return out
    d = c.done
    k = len(fr)
    ok, info = c.type.code("ok"), c.type.code("info")
    recovery = np.isin(d.f, [c.f.code(f) for f in RECOVERY_FS])
    # clients: each process code (shifted by one: -1 is null) to its worker's number
    names = _worker_names(c)
    labels = [names.get(p, f"process-{c.process.value(p)}") for p in range(c.process.n_values)]
    numbers = {label: i for i, label in enumerate(dict.fromkeys(labels))}
    client_of = np.array([0] + [numbers[label] + 1 for label in labels], dtype=np.int64)
    clients = ["process-None", *numbers]
    n_cl = len(clients)
    cl = client_of[d.process + 1]
    # each completed op belongs to the disturbance it was invoked in (epoch; -1: before any)
    # and may be in flight at the start of the next one
    epoch = np.searchsorted(fr, d.invoke_time, "right") - 1
    nxt = epoch + 1
    in_flight = (nxt < k) & (d.time >= fr[np.minimum(nxt, k - 1)])
    opened = open_ops(c, c.is_op & c.client)
    o_cl, o_time = client_of[c.process.codes[opened] + 1], c.time[opened]
    # a client that was working before the start and carries on after it is in scope even if it
    # invoked nothing during the fault (its next op waits for it); one that first appears after
    # the fault ended (the final drain, a client that joined late) was never cut off
    first_seen = np.full(n_cl, np.iinfo(np.int64).max)
    np.minimum.at(first_seen, cl, d.invoke_time)
    np.minimum.at(first_seen, o_cl, o_time)
    e0 = np.maximum(epoch, 0)
    inside = (epoch >= 0) & ((d.invoke_time < to[e0]) | (first_seen[cl] < fr[e0]))
    o_epoch = np.searchsorted(fr, o_time, "right") - 1
    o_nxt = o_epoch + 1
    o_e0 = np.maximum(o_epoch, 0)
    o_open_in = (o_epoch >= 0) & ((o_time < to[o_e0]) | (first_seen[o_cl] < fr[o_e0]))
    # (disturbance, client) pairs in scope
    keys = np.concatenate([epoch[inside] * n_cl + cl[inside], nxt[in_flight] * n_cl + cl[in_flight],
                           o_epoch[o_open_in] * n_cl + o_cl[o_open_in], o_nxt[o_nxt < k] * n_cl + o_cl[o_nxt < k]])
    scope = np.unique(keys)
    if not len(scope):
        return out
    # per pair: first recovering completion, last completion, last info (vectorized over the ops)
    member = epoch >= 0
    op_key = np.where(member, epoch * n_cl + cl, -1)
    at = np.searchsorted(scope, op_key)
    hit = member & (at < len(scope)) & (scope[np.minimum(at, len(scope) - 1)] == op_key)
    good = hit & (d.type == ok) & recovery & (d.invoke_time > in_place[e0])
    first_ok = np.full(len(scope), np.iinfo(np.int64).max)
    np.minimum.at(first_ok, at[good], d.time[good])
    last_done = np.full(len(scope), -1, dtype=np.int64)
    last_info = np.full(len(scope), -2, dtype=np.int64)
    flight_key = nxt * n_cl + cl
    f_at = np.searchsorted(scope, flight_key)
    f_hit = in_flight & (f_at < len(scope)) & (scope[np.minimum(f_at, len(scope) - 1)] == flight_key)
    n_ops = np.bincount(at[hit], minlength=len(scope)) + np.bincount(f_at[f_hit], minlength=len(scope))
    for where, pos in ((hit, at), (f_hit, f_at)):
        np.maximum.at(last_done, pos[where], d.time[where])
        np.maximum.at(last_info, pos[where & (d.type == info)], d.time[where & (d.type == info)])
    still_open = np.zeros(len(scope), dtype=bool)
    for e in (o_epoch, o_nxt):
        o_key = e * n_cl + o_cl
        o_at = np.searchsorted(scope, o_key)
        o_hit = (e >= 0) & (e < k) & (o_at < len(scope)) & (scope[np.minimum(o_at, len(scope) - 1)] == o_key)
        still_open[o_at[o_hit]] = True
    first_row = _first_ok_rows(d, good, at, first_ok)
    processes_of: dict[int, list[str]] = {}
    for p, label in enumerate(labels):
        processes_of.setdefault(numbers[label] + 1, []).append(str(c.process.value(p)))
    for i, key in enumerate(scope.tolist()):
        e, client = divmod(key, n_cl)
        start = int(fr[e])
        recovered = first_ok[i] != np.iinfo(np.int64).max
        # retired: its last operation ended "info" and no process of its worker carried on
        # (the harness stopped it, chaos/history.py): no downtime to measure, not a failure
        retired = not recovered and not still_open[i] and last_info[i] >= last_done[i]
        row = {"client": clients[client], "processes": sorted(processes_of.get(client, []), key=_by_number),
               "fault_start": start, "next_fault_start": int(fr[e + 1]) if e + 1 < k else None,
               "downtime": int(first_ok[i]) - start if recovered else None,
               "first_ok_index": first_row.get(i), "ops": int(n_ops[i]), "retired": bool(retired)}
        if not recovered and not retired:
            until = c.t1 if still_open[i] else int(last_done[i])
            row["at_least"] = max(0, until - start)
            row["after"] = _after_the_fault(c, [p for p in range(c.process.n_values) if client_of[p + 1] == client],
                                            start)
        out["rows"].append(row)
    # in a fixed order (codes follow the order of appearance, which the input's chunking changes)
    out["rows"].sort(key=lambda r: (r["fault_start"], r["client"]))
    return out


#: the key that splits a run for this checker (reports/checkers/split.py): every row of a
#: client's processes (`worker_claims`) stays together; the nemesis steps go to every part
SPLIT_KEY = "client"


def combine(parts: list[dict]) -> dict:
    """The facts of a run from the facts of its parts split by client: every part saw the same
    fault windows (the nemesis steps and the run's bounds go to all of them), each client lies
    in one part."""
    if not parts:
        return {"windows": [], "run_end": None, "rows": []}
    rows = sorted((r for p in parts for r in p["rows"]), key=lambda r: (r["fault_start"], r["client"]))
    return {"windows": parts[0]["windows"], "run_end": parts[0]["run_end"], "rows": rows}


def client_names(claims: dict[str, tuple]) -> dict[str, str]:
    """process -> its client's name, from `worker_claims` (merged over a run's pieces)."""
    return {p: claim[2] for p, claim in claims.items()}


def worker_claims(c_rows) -> dict[str, tuple[int, int, str]]:
    """process -> (index, pos, name) of the first row naming its worker ("producer-N",
    "consumer-N", "subscriber-N"), over rows of a run (`history.Rows`): what `_worker_names`
    decides, in a shape that merges over pieces of a run (the earliest claim wins)."""
    out: dict[str, tuple[int, int, str]] = {}
    for code, row, label in _claims(c_rows):
        process = c_rows.process.value(code)
        claim = (int(c_rows.index[row]), int(c_rows.pos[row]), label)
        if process not in out or claim < out[process]:
            out[process] = claim
    return out


def merge_claims(pieces: list[dict]) -> dict:
    out: dict = {}
    for piece in pieces:
        for process, claim in piece.items():
            if process not in out or tuple(claim) < tuple(out[process]):
                out[process] = tuple(claim)
    return out


def _claims(c):
    """(process code, row, name) of the first row naming each process's worker."""
    f = c.f
    client = c.has_pos & ~c.process.eq("nemesis")
    candidates = [(client & f.eq("send") & c.has_producer, "producer", c.producer)]
    received = client & f.isin(("receive", "ack", "drain"))
    candidates.append((received & c.has_subscriber & (c.subscriber != -1), "subscriber", c.subscriber))
    candidates.append((received & c.has_consumer & (c.consumer != -1), "consumer", c.consumer))
    best: dict[int, tuple[int, str]] = {}
    for mask, label, values in candidates:
        rows = np.flatnonzero(mask)
        procs, first = np.unique(c.process.codes[rows], return_index=True)
        for p, r in zip(procs.tolist(), rows[first].tolist()):
            if p >= 0 and (p not in best or r < best[p][0]):
                best[p] = (r, f"{label}-{int(values[r])}")
    return [(p, r, name) for p, (r, name) in best.items()]


def _first_ok_rows(d, good: np.ndarray, at: np.ndarray, first_ok: np.ndarray) -> dict[int, int]:
    """The op index of each pair's first recovering completion."""
    rows = np.flatnonzero(good & (d.time == first_ok[np.where(good, at, 0)]))
    out: dict[int, int] = {}
    for r in rows.tolist():
        out.setdefault(int(at[r]), int(d.index[r]))
    return out


def _worker_names(c: Columns) -> dict[int, str]:
    """process code -> "producer-N" / "consumer-N" / "subscriber-N", from the first value that
    names the worker (the history does not name it on connect or an empty receive)."""
    return {p: name for p, _, name in _claims(c)}


def _most_common(counts: Counter, n: int) -> list[tuple]:
    """Counter.most_common with ties broken by the key, not by first appearance: the text must not
    change with the order the rows arrive in (tests/reports/test_columnar_invariance.py)."""
    return sorted(counts.items(), key=lambda item: (-item[1], str(item[0])))[:n]


def _after_the_fault(c: Columns, processes: list[int], start: int) -> str:
    """What a client (its ``processes``) that never recovered did after the disturbance began, e.g. "28 receive fail
    (most often 'nothing arrived within 0.5s'), last ok 0.21 s before the fault"."""
    d = c.done
    mine = np.isin(d.process, processes)
    after = np.flatnonzero(mine & (d.invoke_time > start))
    counts = Counter((c.f.value(d.f[i]), c.type.value(d.type[i])) for i in after.tolist())
    opened = open_ops(c, c.is_op & c.client & c.process.isin([c.process.value(p) for p in processes]))
    for r in opened[c.time[opened] > start].tolist():
        counts[(c.f.value(c.f.codes[r]), "still open")] += 1
    text = ", ".join(f"{n} {f} {outcome}" for (f, outcome), n in _most_common(counts, 3)) or "no operation after it"
    if len(counts) > 3:
        text += ", ..."
    errors = Counter(str(e)[:80] for e in c.values_at("error", d.rows[after]) if e)
    if errors:
        text += f" (most often {_most_common(errors, 1)[0][0]!r})"
    before = np.flatnonzero(mine & (d.type == c.type.code("ok")) & (d.time <= start))
    if len(before):
        text += f", last ok {(start - int(d.time[before].max())) / 1e9:.2f} s before the fault"
    return text


# ---------------------------------------------------------------------- judging (on the driver)


def judge(key: RunKey, facts_: dict, *, max_downtime_s: float | None = None) -> tuple[CheckResult, list[dict]]:
    """One run's result and anomaly rows from its `facts`."""
    result, anomalies, _ = _judged(key, facts_, max_downtime_s)
    return result, anomalies


def _judged(key: RunKey, facts_: dict, max_downtime_s: float | None):
    bound = None if max_downtime_s is None else int(max_downtime_s * 1e9)
    windows, rows = facts_["windows"], facts_["rows"]
    if not windows:
        return CheckResult(NAME, *key, VALID, "no fault in this history", applicable=False), [], []
    faults, anomalies, unsure, verdicts = [], [], [], []
    for start, end in _merged([(w["start"], w["end"]) for w in windows]):
        inside = [w for w in windows if start <= w["start"] <= end]
        mine = [r for r in rows if r["fault_start"] == start]
        recovered = sorted(r["downtime"] for r in mine if r["downtime"] is not None)
        stuck = sorted(r["client"] for r in mine if r["downtime"] is None and not r["retired"])
        retired = sorted(r["client"] for r in mine if r["retired"])
        label = ", ".join(sorted({w["fault"] for w in inside}))
        fault = {"fault": label, "f": ", ".join(sorted({w["f"] for w in inside})), "start": start, "end": end,
                 "healed": not any(w["open_at_end"] for w in inside), "clients": len(mine),
                 "recovered": len(recovered), "not_recovered": stuck, "retired": retired,
                 "max_downtime_ms": recovered[-1] / MS if recovered else None,
                 "median_downtime_ms": recovered[len(recovered) // 2] / MS if recovered else None,
                 "per_client_ms": {r["client"]: (None if r["downtime"] is None else r["downtime"] / MS)
                                   for r in sorted(mine, key=lambda r: r["client"])}}
        faults.append(fault)
        too_long, not_sure = [], []
        for r in mine:
            where = (f"{r['client']} (process {', '.join(r['processes'])}) after the {label} fault at "
                     f"{start / 1e9:.3f}s")
            if r["downtime"] is not None:
                if bound is not None and r["downtime"] > bound:
                    too_long.append(r["client"])
                    anomalies.append(_anomaly(key, "slow_failover", r, f"{where}: first ok after "
                                              f"{r['downtime'] / 1e9:.3f}s (bound {max_downtime_s}s)"))
            elif not r["retired"]:
                if bound is not None and r["at_least"] > bound:
                    too_long.append(r["client"])
                    anomalies.append(_anomaly(key, "not_recovered", r, f"{where}: no ok operation in "
                                              f"{r['at_least'] / 1e9:.3f}s (bound {max_downtime_s}s)"))
                else:
                    not_sure.append(r)
        if too_long:
            verdicts.append((INVALID, f"down longer than {max_downtime_s}s: {', '.join(sorted(too_long))}"))
        elif not_sure:
            unsure += not_sure
            verdicts.append((UNKNOWN, "never recovered before the history ended: "
                             + ", ".join(sorted(r["client"] for r in not_sure)) + " ("
                             + "; ".join(f"{r['client']}: {r['after']}" for r in not_sure)
                             + "); run longer after the heal to measure them"))
        else:
            verdicts.append((VALID, ""))
    all_downtimes = [f["max_downtime_ms"] for f in faults if f["max_downtime_ms"] is not None]
    stats = {"faults": faults, "max_downtime_ms": max(all_downtimes) if all_downtimes else None, "bound_s": max_downtime_s}
    bad = [(f, why) for f, (v, why) in zip(faults, verdicts) if v is INVALID]
    maybe = [(f, why) for f, (v, why) in zip(faults, verdicts) if v == UNKNOWN]
    if bad:
        result = CheckResult(NAME, *key, INVALID, "; ".join(f"{f['f']} at {f['start'] / 1e9:.3f}s: {why}"
                                                             for f, why in bad), stats=stats)
    elif maybe:
        result = CheckResult(NAME, *key, UNKNOWN, "; ".join(f"{f['f']} at {f['start'] / 1e9:.3f}s: {why}"
                                                             for f, why in maybe), stats=stats)
    else:
        result = CheckResult(NAME, *key, VALID, stats=stats)
    return result, anomalies, verdicts


def _anomaly(key: RunKey, kind: str, r: dict, detail: str) -> dict:
    return {"run": key[0], "target": key[1], "checker": NAME, "kind": kind, "message_id": None,
            "ops": [r["first_ok_index"]] if r.get("first_ok_index") is not None else [], "detail": detail}


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    from .history import merge_intervals

    return merge_intervals(intervals)


def _by_number(process: str):
    return (0, int(process), "") if str(process).lstrip("-").isdigit() else (1, 0, str(process))


# ---------------------------------------------------------------------- over a list of events


@dataclass
class FaultDowntime:
    f: str  # the step(s) that started it (kill, pause, partition...)
    faults: list[str]  # the nemesis's own keys (down, paused, proxy/disabled...)
    nemesis: str | None
    node: str | None
    start_ns: int
    healed_ns: int | None  # None: never healed before the history ended
    in_place_ns: int | None = None
    downtime_ms: dict[str, float] = field(default_factory=dict)  # client -> ms
    never_recovered: dict[str, float] = field(default_factory=dict)  # client -> at least this many ms
    min_ms: float | None = None
    median_ms: float | None = None
    max_ms: float | None = None
    valid: bool | str = VALID
    reason: str = ""


@dataclass
class FailoverDowntimeResult:
    """The shape `brokerconf chaos run` writes to verdict.json and its HTML report draws."""
    valid: bool | str
    faults: list[FaultDowntime] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    identity: str = "worker"  # or "process" when some process could not be tied to a worker
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def failover_downtime(history: Iterable[dict] | Columns, *, max_downtime_s: float | None = None) -> FailoverDowntimeResult:
    """`judge` over a history given as events (or as `Columns`), in verdict.json's shape: one
    entry per disturbance, clients named after their workers."""
    c = history if isinstance(history, Columns) else Columns.of_events(history)
    f = facts(c)
    result, _, verdicts = _judged(("", ""), f, max_downtime_s)
    out = FailoverDowntimeResult(result.valid, reason=result.reason)
    if not f["windows"]:
        out.reason = "the history has no nemesis faults: nothing to measure"
        return out
    for fault, (valid, why) in zip(result.stats["faults"], verdicts):
        inside = [w for w in f["windows"] if fault["start"] <= w["start"] <= fault["end"]]
        mine = [r for r in f["rows"] if r["fault_start"] == fault["start"]]
        entry = FaultDowntime(fault["f"], list(dict.fromkeys(w["fault"] for w in inside)), None,
                              ", ".join(sorted({w["node"] for w in inside if w["node"]})) or None, fault["start"],
                              fault["end"] if fault["healed"] else None, valid=valid, reason=why)
        entry.downtime_ms = {r["client"]: round(r["downtime"] / MS, 3) for r in mine if r["downtime"] is not None}
        entry.never_recovered = {r["client"]: round(r["at_least"] / MS, 3) for r in mine
                                 if r["downtime"] is None and not r["retired"]}
        measured = list(entry.downtime_ms.values())
        if measured:
            entry.min_ms, entry.max_ms = min(measured), max(measured)
            entry.median_ms = round(statistics.median(measured), 3)
        out.faults.append(entry)
    if any(name.startswith("process-") for e in out.faults for name in (*e.downtime_ms, *e.never_recovered)):
        out.identity = "process"
    every = [(ms, e.f, name) for e in out.faults for name, ms in e.downtime_ms.items()]
    out.summary = {
        "faults": len(out.faults), "measured": len(every),
        "never_recovered": sum(len(e.never_recovered) for e in out.faults),
        "min_ms": min(every)[0] if every else None,
        "median_ms": round(statistics.median(ms for ms, _, _ in every), 3) if every else None,
        "max_ms": max(every)[0] if every else None,
        "worst": {"ms": max(every)[0], "fault": max(every)[1], "client": max(every)[2]} if every else None,
    }
    return out


def _after_an_outage(record) -> str | None:
    # which kinds take a client's broker away is a trait of the fault kind, declared with it
    # (chaos/experiment_file.py FAULT_KINDS: `takes_broker_away`)
    if any(takes_broker_away(kind) for kind in record.nemesis_kinds):
        return None
    return f"no fault that takes a client's broker away ({', '.join(OUTAGE_FAULTS)}) in the nemesis schedule"


def _judged_with_table(key: RunKey, facts_: dict, options: dict):
    result, rows = judge(key, facts_[NAME], **options)
    table = [(*key, r["client"], r["fault_start"], r["next_fault_start"], r["downtime"], r["first_ok_index"],
              r["ops"], r["retired"]) for r in facts_[NAME]["rows"]] if facts_[NAME]["windows"] else []
    return result, rows, table


CHECKER = Checker(NAME, _judged_with_table, facts=(Facts(NAME, facts, SPLIT_KEY, combine),), switch="failover_downtime", settings=("max_downtime_s",),
                  applies=_after_an_outage, switch_first=True, table=Table(
                      "downtime", "run string, target string, client string, fault_start bigint, next_fault_start "
                                  "bigint, downtime bigint, first_ok_index bigint, ops bigint, retired boolean"))
