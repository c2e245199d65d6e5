"""Failover downtime: how long each client was unable to work after each fault.

The A-MQ fault-tolerant messaging guide (2.1, the failover protocol) promises that clients
reconnect and carry on after a broker goes away; this measures how long that took, per client
and per fault, from the history alone (DESIGN.md, "History format"; chaos/nemesis/base.py).

Definitions:
* fault: a nemesis step that recorded a fault (its end event carries ``fault`` or ``toxics``:
  kill, stop, pause, partition, latency... from chaos/nemesis), from the time of the step's
  ``start`` event to the end of its heal (the ``fault_window`` entries a later ``start``,
  ``resume``, ``heal``, ``restart`` or ``teardown`` step records). A ``restart`` of a running
  broker also takes it down, so it counts as a fault lasting the step. A step that ended with
  an error injected nothing we can rely on and is skipped.
* client: a worker. Retired processes (an ``info`` completion makes the worker carry on under a
  new process id, chaos/history.py) are grouped back into their worker through what the history
  records: send values carry the ``producer`` index, received values (and a topic drain's
  invoke) the ``consumer`` / ``subscriber`` index. The history does not name the worker on
  connect, subscribe or a receive that got nothing, so a process that never sent or received
  anything is reported on its own as ``process-N``. The queue workload's final drain
  (``consumer: -1``) is not a worker and is left as its process.
* in scope for a fault: a client that had invoked something by the fault's start and was still
  active then (an operation in flight, or more operations invoked after it).
* downtime: from the fault's start to the completion of the client's first ``ok`` operation in
  ``ops`` (send, receive) that was invoked after the fault was in place (the completion of the
  step that injected it). An operation invoked before that, even one completing after it, may
  have gone through before the fault took hold and says nothing about reconnecting.
  A receive can succeed without the broker: the client library may already hold messages the
  broker dispatched before the fault (its prefetch), so a consumer's downtime can be near zero.
  Sends wait for the broker's receipt and never succeed while it is unreachable.
* never recovered: in scope, but no such operation in the history. Its downtime is at least the
  time to its last event (or to the end of the history when an operation is still open); the
  fault's verdict is "unknown" unless ``max_downtime_s`` is given and that lower bound already
  exceeds it (then False: it certainly was down too long). The reason says, per such client,
  what its operations after the fault did (counts by operation and outcome, the commonest error)
  and when its last ``ok`` before the fault completed, so a client that kept failing can be
  told from one that sat waiting.

``valid`` is True unless ``max_downtime_s`` is given and some client's downtime exceeds it
(False, naming the clients), or "unknown" when a client never recovered (see above).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable

import numpy as np

from .history import Columns, dense, merge_intervals, slices
from .result import CheckResult, RunKey

VALID, INVALID, UNKNOWN = True, False, "unknown"
NS_PER_MS = MS = 1_000_000


@dataclass
class FaultDowntime:
    f: str  # the step that started it (kill, pause, partition...)
    faults: list[str]  # the nemesis's own keys (down, paused, proxy/disabled...)
    nemesis: str | None
    node: str | None
    start_ns: int
    healed_ns: int | None  # None: never healed before the history ended
    #: when the step that injected it completed: from then on the fault is surely in place, so
    #: only operations invoked after this count as recovery (None: the start, e.g. a restart)
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
    valid: bool | str
    faults: list[FaultDowntime] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    identity: str = "worker"  # or "process" when some process could not be tied to a worker
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def _worker_of(f: str, value) -> str | None:
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, dict):
        return None
    if f == "send" and value.get("producer") is not None:
        return f"producer-{value['producer']}"
    if f in ("receive", "ack", "drain"):
        for key in ("subscriber", "consumer"):
            if value.get(key) is not None and value[key] != -1:  # -1: the queue drain, not a worker
                return f"{key}-{value[key]}"
    return None


def _faults(nemesis_events: list[dict]) -> list[FaultDowntime]:
    faults: list[FaultDowntime] = []
    step_started: dict[tuple, int] = {}
    # (nemesis, node, key) -> (fault, its keys not healed yet, heal times so far)
    open_keys: dict[tuple, tuple[FaultDowntime, set[str], list[int]]] = {}
    for e in nemesis_events:
        value = e.get("value") if isinstance(e.get("value"), dict) else {}
        who = (value.get("nemesis"), e.get("node"))
        if value.get("phase") == "start":
            step_started[who] = e["time"]  # a nemesis runs one step at a time
            continue
        start = step_started.pop(who, value.get("started", e["time"]))
        for window in value.get("fault_window") or ():
            entry = open_keys.pop((*who, window.get("fault")), None)
            if entry is None:
                continue  # healed a fault started before the history did
            fault, left, ends = entry
            left.discard(window.get("fault"))
            ends.append(window.get("end", e["time"]))
            if not left:  # healed once every key of the step is (a two-stream toxic has two)
                fault.healed_ns = max(ends)
        if e.get("error"):
            continue  # the step failed: no fault it reports can be trusted to have started
        keys = [value["fault"]] if value.get("fault") else list(value.get("toxics") or ())
        if keys:
            fault = FaultDowntime(e["f"], keys, who[0], who[1], start, None, in_place_ns=e["time"])
            faults.append(fault)
            left, ends = set(keys), []
            for key in keys:
                open_keys[(*who, key)] = (fault, left, ends)
        elif e["f"] == "restart" and value.get("old_pid") is not None:
            # A restart of a running broker is down for the step, and heals when the step ends.
            faults.append(FaultDowntime("restart", ["restart"], who[0], who[1], start, e["time"]))
    return faults


def _after_the_fault(ops_of: list[list], start: int) -> str:
    """What a client that never recovered did after the fault began, e.g. "28 receive fail
    (most often 'nothing arrived within 0.5s'), last ok 0.21 s before the fault"."""
    after = [op for op in ops_of if op[0] > start]
    counts = Counter((op[2], op[3] or "still open") for op in after)
    text = ", ".join(f"{n} {f} {outcome}" for (f, outcome), n in counts.most_common(3)) or "no operation after it"
    if len(counts) > 3:
        text += ", ..."
    errors = Counter(str(op[4])[:80] for op in after if op[4])
    if errors:
        text += f" (most often {errors.most_common(1)[0][0]!r})"
    last_ok = max((op[1] for op in ops_of if op[3] == "ok" and op[1] is not None and op[1] <= start), default=None)
    if last_ok is not None:
        text += f", last ok {(start - last_ok) / 1e9:.2f} s before the fault"
    return text


def failover_downtime(history: Iterable[dict], *, max_downtime_s: float | None = None,
                      ops: tuple[str, ...] = ("send", "receive")) -> FailoverDowntimeResult:
    events = sorted(history, key=lambda e: (e["time"], e.get("index", 0)))
    nemesis_events = [e for e in events if e.get("process") == "nemesis"]
    client_events = [e for e in events if e.get("process") != "nemesis"]
    history_end = events[-1]["time"] if events else 0

    worker: dict[object, str] = {}
    for e in client_events:
        if e["process"] not in worker and (w := _worker_of(e.get("f"), e.get("value"))) is not None:
            worker[e["process"]] = w

    def client(process) -> str:
        return worker.get(process, f"process-{process}")

    # Per client: each operation as (invoked, completed or None, f, outcome, error).
    operations: dict[str, list[list]] = {}
    pending: dict[object, list] = {}
    for e in client_events:
        if e["type"] == "invoke":
            op = [e["time"], None, e.get("f"), None, None]
            operations.setdefault(client(e["process"]), []).append(op)
            pending[e["process"]] = op
        elif e["process"] in pending:
            op = pending.pop(e["process"])
            op[1], op[3], op[4] = e["time"], e["type"], e.get("error")

    faults = _faults(nemesis_events)
    limit_ms = None if max_downtime_s is None else max_downtime_s * 1000.0
    for fault in faults:
        start = fault.start_ns
        for name, ops_of in sorted(operations.items()):
            before = [op for op in ops_of if op[0] <= start]
            after = [op for op in ops_of if op[0] > start]
            in_flight = any(op[1] is None or op[1] >= start for op in before)
            if not before or not (after or in_flight):
                continue  # not working when the fault began (not started yet, or finished)
            # An operation invoked while the step was still injecting the fault may have gone
            # through before it took hold (seen in CI: a send 6 ms into a proxy partition): it
            # proves nothing about recovering, so only later invocations count.
            in_place = fault.in_place_ns if fault.in_place_ns is not None else start
            recovered = [op[1] for op in after if op[3] == "ok" and op[2] in ops and op[0] > in_place]
            if recovered:
                fault.downtime_ms[name] = round((min(recovered) - start) / NS_PER_MS, 3)
            else:
                last = history_end if any(op[1] is None for op in ops_of) else max(op[1] for op in ops_of)
                fault.never_recovered[name] = round((last - start) / NS_PER_MS, 3)
        measured = list(fault.downtime_ms.values())
        if measured:
            fault.min_ms, fault.max_ms = min(measured), max(measured)
            fault.median_ms = round(statistics.median(measured), 3)
        too_long = sorted(n for n, ms in fault.downtime_ms.items() if limit_ms is not None and ms > limit_ms)
        too_long += sorted(n for n, ms in fault.never_recovered.items() if limit_ms is not None and ms > limit_ms)
        unsure = sorted(n for n in fault.never_recovered if n not in too_long)
        if too_long:
            fault.valid = INVALID
            fault.reason = f"down longer than {max_downtime_s}s: {', '.join(too_long)}"
        elif unsure:
            fault.valid = UNKNOWN
            fault.reason = (f"never recovered before the history ended: {', '.join(unsure)} ("
                            + "; ".join(f"{n}: {_after_the_fault(operations[n], start)}" for n in unsure)
                            + "); run longer after the heal to measure them")

    result = FailoverDowntimeResult(VALID, faults)
    if any(w.startswith("process-") for f in faults for w in (*f.downtime_ms, *f.never_recovered)):
        result.identity = "process"
    every = [(ms, f.f, name) for f in faults for name, ms in f.downtime_ms.items()]
    result.summary = {
        "faults": len(faults),
        "measured": len(every),
        "never_recovered": sum(len(f.never_recovered) for f in faults),
        "min_ms": min(every)[0] if every else None,
        "median_ms": round(statistics.median(ms for ms, _, _ in every), 3) if every else None,
        "max_ms": max(every)[0] if every else None,
        "worst": {"ms": max(every)[0], "fault": max(every)[1], "client": max(every)[2]} if every else None,
    }
    bad = [f for f in faults if f.valid is INVALID]
    unsure_faults = [f for f in faults if f.valid == UNKNOWN]
    if bad:
        result.valid = INVALID
        result.reason = "; ".join(f"{f.f} at {f.start_ns / 1e9:.3f}s: {f.reason}" for f in bad)
    elif unsure_faults:
        result.valid = UNKNOWN
        result.reason = "; ".join(f"{f.f} at {f.start_ns / 1e9:.3f}s: {f.reason}" for f in unsure_faults)
    elif not faults:
        result.reason = "the history has no nemesis faults: nothing to measure"
    return result


# ---------------------------------------------------------------------- the pipeline's form, over Columns
#
# Per client process, overlapping faults merged into one disturbance (reports/checkers/history.py,
# `disturbances`): what a user means by "how long was the client down after the fault". The rules:
# Failover downtime: from the start of a fault to each client process's first successful
# operation after it.
#
# A fault starts when its nemesis step starts (the ``started`` of the step that began it;
# chaos/nemesis/base.py); faults that overlap (a toxic on each stream, a kill while a partition
# holds) count as one disturbance, from the first start. For every client process that invoked
# anything between that start and the end of the disturbance, the downtime is the time from the
# start to the completion of the process's first ``ok`` operation invoked after the fault was in
# place (after the end event of the step that injected it): an operation invoked while the step was
# still injecting may have gone through before the fault took hold, and proves nothing about
# recovering (the Python checker's rule, reports/checkers/failover_downtime.py). A process that kept
# trying and never succeeded before the next fault is ``not recovered``, unless it ended an
# operation ``info``: then it retired and its client carries on under a new process id
# (chaos/history.py), whose own first ok is what counts.
#
# The numbers are the result; the verdict judges them only against a bound the caller gives
# (``max_downtime_s`` given to the analysis, else the experiment's own setting from the run record,
# e.g. the documented failover settings): a
# downtime above it, or a process that never recovered while the run went on longer than the
# bound, is ``false``. Without a bound the check is informational (valid ``true``). A run without
# faults has nothing to measure and is left out of the merge.
#
# One difference from the text above, decided for issue 17: a process that never recovered is
# never a pass. Without a bound, or while its lower bound (until its last operation completed)
# is still within the bound, the verdict is "unknown"; only a lower bound above the bound is
# "false" (the event form above said so too; the earlier Spark form called it "true").

NAME = "failover_downtime"


def facts(c: Columns) -> dict:
    """The run's fault windows and, per (disturbance, client process), its first ok operation
    invoked after the fault was in place (None: none), how many ops it ran, whether it retired,
    and when its last op in the disturbance's epoch completed (a never-recovered process was down
    at least that long)."""
    windows = [{"fault": w.fault, "f": w.f, "start": w.start, "end": w.end, "open_at_end": w.open_at_end}
               for w in c.windows]
    return {"windows": windows, "run_end": c.t1,
            "rows": _per_process(c.done, c.fault_from, c.fault_to, c.fault_in_place)}


def _per_process(done, fr: np.ndarray, to: np.ndarray, in_place: np.ndarray) -> list[dict]:
    """Per (disturbance, process): its first ok op invoked after the fault was in place
    (reports/pipeline/checkers/downtime.py)."""
    if not len(fr) or not len(done):
        return []
    epoch = np.searchsorted(fr, done.invoke_time, "right")
    sel = np.flatnonzero(epoch > 0)
    if not len(sel):
        return []
    # groups (epoch, process) in order of first appearance, as pandas' groupby(sort=False)
    n_proc = done.r.process.n_values + 1
    key = epoch[sel].astype(np.int64) * n_proc + (done.process[sel].astype(np.int64) + 1)
    key, n_keys = dense(key)
    groups_ = sorted(slices(key, n_keys), key=lambda kv: kv[1][0])
    ok_code, info_code = done.r.type.code("ok"), done.r.type.code("info")
    rows = []
    for _, part in groups_:
        g = sel[part]
        e = int(epoch[g[0]])
        if done.invoke_time[g].min() >= to[e - 1]:
            continue
        ok = g[(done.type[g] == ok_code) & (done.invoke_time[g] > in_place[e - 1])]
        if len(ok):
            best = ok[np.argmin(done.time[ok])]
            first_ok_time, first_ok_index = int(done.time[best]), int(done.index[best])
        else:
            first_ok_time = first_ok_index = None
        start = int(fr[e - 1])
        rows.append({"process": str(done.r.process.value(done.process[g[0]])), "fault_start": start,
                     "next_fault_start": int(fr[e]) if e < len(fr) else None,
                     "downtime": None if first_ok_time is None else first_ok_time - start,
                     "first_ok_index": first_ok_index, "ops": int(len(g)),
                     "retired": bool((done.type[g] == info_code).any()),
                     "last_done": int(done.time[g].max())})
    return rows



def judge(key: RunKey, facts_: dict, *, max_downtime_s: float | None = None) -> tuple[CheckResult, list[dict]]:
    """One run's result and anomaly rows from its `facts`."""
    bound = None if max_downtime_s is None else int(max_downtime_s * 1e9)
    windows, rows = facts_["windows"], facts_["rows"]
    if not windows:
        return CheckResult(NAME, *key, VALID, "no fault in this history", applicable=False), []
    faults, anomalies, unsure = [], [], []
    for start, end in merge_intervals([(w["start"], w["end"]) for w in windows]):
        inside = [w for w in windows if start <= w["start"] <= end]
        mine = [r for r in rows if r["fault_start"] == start]
        recovered = sorted(r["downtime"] for r in mine if r["downtime"] is not None)
        stuck = sorted((r["process"] for r in mine if r["downtime"] is None and not r["retired"]), key=_by_number)
        retired = sorted((r["process"] for r in mine if r["downtime"] is None and r["retired"]), key=_by_number)
        names = sorted({w["fault"] for w in inside})
        faults.append({"fault": ", ".join(names), "f": ", ".join(sorted({w["f"] for w in inside})), "start": start,
                       "end": end, "processes": len(mine), "recovered": len(recovered), "not_recovered": stuck,
                       "retired": retired,
                       "max_downtime_ms": recovered[-1] / MS if recovered else None,
                       "median_downtime_ms": recovered[len(recovered) // 2] / MS if recovered else None,
                       "per_process_ms": {r["process"]: (None if r["downtime"] is None else r["downtime"] / MS)
                                          for r in sorted(mine, key=lambda r: _by_number(r["process"]))}})
        for r in mine:
            at_least = r["last_done"] - start  # a never-recovered process was down at least this long
            too_slow = bound is not None and r["downtime"] is not None and r["downtime"] > bound
            never = r["downtime"] is None and not r["retired"]
            if never and (bound is None or at_least <= bound):
                unsure.append(f"process {r['process']} after the {faults[-1]['fault']} fault at {start / 1e9:.3f}s "
                              f"(no ok operation in {at_least / 1e9:.3f}s)")
                continue
            if too_slow or never:
                anomalies.append({"run": key[0], "target": key[1], "checker": NAME,
                                  "kind": "slow_failover" if too_slow else "not_recovered", "message_id": None,
                                  "ops": [r["first_ok_index"]] if r["first_ok_index"] is not None else [],
                                  "detail": f"process {r['process']} after the {faults[-1]['fault']} fault at "
                                            f"{start / 1e9:.3f}s: "
                                            + (f"first ok after {r['downtime'] / 1e9:.3f}s" if too_slow
                                               else f"no ok operation in {at_least / 1e9:.3f}s")
                                            + f" (bound {max_downtime_s}s)"})
    all_downtimes = [f["max_downtime_ms"] for f in faults if f["max_downtime_ms"] is not None]
    stats = {"faults": faults, "max_downtime_ms": max(all_downtimes) if all_downtimes else None, "bound_s": max_downtime_s}
    if anomalies:
        return CheckResult(NAME, *key, INVALID, f"{len(anomalies)} client(s) over the {max_downtime_s}s bound",
                           stats=stats), anomalies
    if unsure:
        return CheckResult(NAME, *key, UNKNOWN, "never recovered before the history ended: " + "; ".join(unsure)
                           + ("" if bound is None else f" (within the {max_downtime_s}s bound so far)")
                           + "; run longer after the heal to measure them", stats=stats), []
    return CheckResult(NAME, *key, VALID, stats=stats), []


def _by_number(process: str):
    return (0, int(process), "") if str(process).lstrip("-").isdigit() else (1, 0, str(process))
