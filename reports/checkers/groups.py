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

import numpy as np

from .history import NEMESIS, NOT_FAULTS, Columns, first_deliveries, in_canonical_order, order_inversions, small_uint
from .protocol import Checker, Facts
from .result import INVALID, VALID, CheckResult, RunKey, anomaly, count_kinds, describe_counts

NAME = "groups"
#: ops of a process after which its subscriptions are closed
_CLOSING_FS = ("close", "unsubscribe")
_REOPENING_FS = ("connect", "subscribe")


def facts(r: Columns) -> dict:
    """Group sizes and handovers, and the stolen and reordered deliveries found."""
    delivered, is_op, nem = r.delivered, r.is_op, r.nemesis
    gm = delivered & (r.group.codes >= 0)
    rows = np.flatnonzero(gm)
    if not len(rows):
        return {"sizes": {"groups": 0, "n": 0, "handovers": 0}, "found": []}
    # consecutive deliveries of one (destination, group), a null destination sorted last
    n_dest = r.destination.n_values
    dest = r.destination.codes[rows].astype(np.int64)
    key = np.where(dest < 0, n_dest, dest) * r.group.n_values + r.group.codes[rows]
    by = np.argsort(small_uint(key), kind="stable")
    g, key = rows[by], key[by]
    same = np.zeros(len(g), dtype=bool)
    same[1:] = key[1:] == key[:-1]
    proc = r.process.codes[g]
    prev_proc = np.concatenate([[-1], proc[:-1]])
    changed = same & (prev_proc >= 0) & (proc != prev_proc)
    named_keys = key[r.destination.codes[g] >= 0]
    sizes = {"groups": int((np.bincount(named_keys) > 0).sum()), "n": int(len(g)), "handovers": int(changed.sum())}
    found: list = []
    at = np.flatnonzero(changed)
    if len(at):
        found += _stolen(r, g[at], g[at - 1], is_op, nem)
    first = first_deliveries(r, rows)

    def label(a):
        d = r.destination.codes[a]
        return None if d < 0 else f"{r.destination.value(d)} group {r.group.value(r.group.codes[a])}"

    found += order_inversions(r, first, [r.destination, r.group], label)
    return {"sizes": sizes, "found": in_canonical_order(found)}


#: the key that splits a run for this checker (reports/checkers/split.py): a group's deliveries
#: stay together; what releases a group (a close, a reconnect, an in-doubt op, a rebalance, a
#: drain, a fault: `RELEASING`) goes to every part
SPLIT_KEY = "group"
#: (f, type) of the ops `_stolen` reads besides the group's deliveries (None: any type); ops
#: ending ``info`` and nemesis steps too
RELEASING = (*((f, "invoke") for f in _REOPENING_FS), *((f, None) for f in _CLOSING_FS), ("rebalance", None),
             ("drain", "invoke"))


def combine(parts: list[dict]) -> dict:
    """The facts of a run from the facts of its parts split by group: every group lies in one part."""
    return {"sizes": {k: sum(p["sizes"][k] for p in parts) for k in ("groups", "n", "handovers")},
            "found": in_canonical_order([f for p in parts for f in p["found"]])}


def _stolen(r: Columns, cur: np.ndarray, prev: np.ndarray, is_op: np.ndarray, nem: list[dict]) -> list:
    """Handovers (delivery ``prev`` then ``cur`` to another process) that nothing explains: no
    fault, rebalance or drain by anyone, no close/reconnect/in-doubt op by the previous owner."""
    client = is_op & ~r.process.eq(NEMESIS)
    own = client & ((r.f.isin(_REOPENING_FS) & r.type.eq("invoke")) | r.f.isin(_CLOSING_FS) | r.type.eq("info"))
    everyone = is_op & (r.f.eq("rebalance") | (r.f.eq("drain") & r.type.eq("invoke")))
    faults = [n["index"] for n in nem if n["f"] not in NOT_FAULTS and n["phase"] == "start"]
    e = np.sort(np.concatenate([r.index[everyone], np.array(faults, dtype=np.int64)]))
    lo, hi = r.index[prev], r.index[cur]
    covered = np.searchsorted(e, lo, "right") < np.searchsorted(e, hi, "left")
    # the previous owner's own ops, keyed (process, index) in one sorted integer
    base = int(r.index.min())
    width = int(r.index.max()) - base + 2
    own_key = np.sort(r.process.codes[own].astype(np.int64) * width + (r.index[own] - base))
    owner = r.process.codes[prev].astype(np.int64) * width
    released = np.searchsorted(own_key, owner + lo - base, "right") < np.searchsorted(own_key, owner + hi - base, "left")
    out = []
    for a, b in zip(cur[~covered & ~released], prev[~covered & ~released]):
        d = r.destination.codes[a]
        detail = None if d < 0 else (
            f"{r.destination.value(d)} group {r.group.value(r.group.codes[a])}: delivered to process "
            f"{r.process.value(r.process.codes[a])} while process {r.process.value(r.process.codes[b])} still owned it "
            f"(no close, fault or rebalance since op {int(r.index[b])})")
        out.append({"kind": "stolen", "message_id": r.id.value(r.id.codes[a]),
                    "ops": [int(r.index[b]), int(r.index[a])], "detail": detail})
    return out



def judge(key: RunKey, facts_: dict) -> tuple[CheckResult, list[dict]]:
    """One run's result from its group sizes and findings."""
    rows = [anomaly(key, NAME, a["kind"], a["message_id"], a["ops"], a["detail"]) for a in facts_["found"]]
    counts = count_kinds(rows)
    s = facts_["sizes"]
    stats = {"groups": s["groups"], "deliveries": s["n"], "handovers": s["handovers"], **counts}
    if not s["n"]:
        return CheckResult(NAME, *key, VALID, "no grouped message on a queue in this history", applicable=False,
                           stats=stats), rows
    if counts:
        return CheckResult(NAME, *key, INVALID, describe_counts(counts), stats=stats), rows
    return CheckResult(NAME, *key, VALID, stats=stats), rows


def _as_registered(key: RunKey, facts_: dict, options: dict):
    return (*judge(key, facts_[NAME], **options), [])


def _queue_run(record) -> str | None:
    return "a topic run" if record.topic else None


#: group ownership on a queue: documented for every queue, no switch (as fifo)
CHECKER = Checker(NAME, _as_registered, facts=(Facts(NAME, facts, SPLIT_KEY, combine),), applies=_queue_run)
