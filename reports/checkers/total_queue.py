"""Jepsen's total-queue checker over a brokerconf history (DESIGN.md, "History format").

Definitions (jepsen checker.clj `total-queue`, as summarised in REFERENCES.md):
* attempted: every send that was invoked, minus sends that completed ``fail`` (refused: never
  enqueued; Jepsen counts only sends whose outcome is not `fail` as possibly enqueued);
* enqueued: sends that completed ``ok`` (the broker confirmed them);
* dequeued: messages in ``receive`` and ``drain`` ops that completed ``ok``;
* lost: enqueued but never dequeued;
* unexpected: dequeued but never attempted;
* duplicated: dequeued more times than attempted;
* recovered: dequeued, attempted, but not confirmed (an ``info`` send that did arrive).
Messages on topics (``topic://``) are left out: fan-out delivers one send many times
(topic_fanout.py judges them).

Valid iff nothing is lost and nothing unexpected. Duplicates are reported; whether they break the
documented semantics is the caller's decision (``duplicates_allowed``: the analysis's option,
else the experiment's own setting, else not). Without a final drain a message not received yet
may still be in the broker, so lost ones are only candidates: the verdict is ``unknown`` unless
something unexpected (or a disallowed duplicate) makes it false.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable

import numpy as np

from .history import Columns, in_canonical_order, ops_by_id
from .protocol import Checker, Facts
from .result import INVALID, UNKNOWN, VALID, CheckResult, RunKey, anomaly, count_kinds, describe_counts

NAME = "total_queue"
KINDS = ("lost", "unexpected", "duplicated", "recovered")
_DETAIL = {"lost": "confirmed send never received", "unexpected": "received but never sent",
           "recovered": "send outcome unknown (info), yet it arrived"}


def facts(c: Columns) -> dict:
    """The run's totals (None: no send or receive on a queue) and one finding per anomalous id:
    kind, message id, the indexes of its ops, times dequeued and attempted."""
    send = c.queue & c.f.eq("send")
    rel = np.flatnonzero(send | c.delivered)
    if not len(rel):
        return {"totals": None, "drained": c.drained, "found": []}
    key = c.id.codes[rel] + 1  # one bin per id code, bin 0 for every null id
    bins = c.id.n_values + 1
    s, ty = send[rel], c.type.codes[rel]

    def count(where):
        return np.bincount(key[where], minlength=bins)

    deq = count(~s)
    present = (count(s) > 0) | (deq > 0)
    att = np.maximum(count(s & (ty == c.type.code("invoke"))) - count(s & (ty == c.type.code("fail"))), 0)
    enq = (count(s & (ty == c.type.code("ok"))) > 0).astype(np.int64)
    totals = {"attempted": int(att[present].sum()), "enqueued": int(enq[present].sum()),
              "dequeued": int(deq[present].sum())}
    lost = present & (enq == 1) & (deq == 0)
    unexpected = present & ~lost & (deq > 0) & (att == 0)
    duplicated = present & ~lost & ~unexpected & (att > 0) & (deq > att)
    recovered = present & ~lost & ~unexpected & (deq > 0) & (att > 0) & (enq == 0)  # a duplicate may be one too
    flagged = [(k, b) for k, mask in (("lost", lost), ("unexpected", unexpected), ("duplicated", duplicated),
                                      ("recovered", recovered)) for b in np.flatnonzero(mask)]
    ops_of = ops_by_id(c, c.queue, [b - 1 for _, b in flagged if b > 0]) if flagged else {}
    found = [{"kind": kind, "id": c.id.value(b - 1), "ops": ops_of.get(b - 1, []), "dequeued": int(deq[b]),
              "attempted": int(att[b])} for kind, b in flagged]
    return {"totals": totals, "drained": c.drained, "found": in_canonical_order(found)}


#: the key that splits a run for this checker (reports/checkers/split.py): every fact is per id
SPLIT_KEY = "id"


def combine(parts: list[dict]) -> dict:
    """The facts of a run from the facts of its parts split by message id: totals add up (every id
    lies in one part), a drain seen by any part was the run's, the findings side by side."""
    totals = [p["totals"] for p in parts if p["totals"] is not None]
    return {"totals": {k: sum(t[k] for t in totals) for k in ("attempted", "enqueued", "dequeued")} if totals else None,
            "drained": any(p["drained"] for p in parts),
            "found": in_canonical_order([f for p in parts for f in p["found"]])}


def judge(key: RunKey, facts_: dict, *, duplicates_allowed: bool = False) -> tuple[CheckResult, list[dict]]:
    """One run's result and anomaly rows from its `facts`."""
    rows = [anomaly(key, NAME, f["kind"], f["id"], f["ops"], _DETAIL.get(f["kind"])
                    or f"received {f['dequeued']} times, sent {f['attempted']}") for f in facts_["found"]]
    counts = count_kinds(rows)
    totals, drained = facts_["totals"], facts_["drained"]
    stats = {**(totals or {"attempted": 0, "enqueued": 0, "dequeued": 0}), **{k: counts.get(k, 0) for k in KINDS},
             "drained": drained, "duplicates_allowed": duplicates_allowed}
    # Without a final drain a confirmed send not received yet may still sit in the queue, so
    # "lost" is only a candidate then; unexpected and (disallowed) duplicated messages are
    # certain either way.
    breaking = {k: counts.get(k, 0) for k in (("lost",) if drained else ()) + ("unexpected",)
                + (() if duplicates_allowed else ("duplicated",))}
    if totals is None:
        return CheckResult(NAME, *key, UNKNOWN, "no send or receive on a queue in this history", applicable=False,
                           stats=stats), rows
    if any(breaking.values()):
        return CheckResult(NAME, *key, INVALID, describe_counts(breaking), stats=stats), rows
    if not drained:
        maybe = f" ({counts['lost']} confirmed sends not received, maybe still queued)" if counts.get("lost") else ""
        return CheckResult(NAME, *key, UNKNOWN, "the history has no final drain: messages still queued would look "
                           "lost" + maybe, stats=stats), rows
    return CheckResult(NAME, *key, VALID, stats=stats), rows


# ---------------------------------------------------------------------- over a list of events


@dataclass
class TotalQueueResult:
    """The shape `brokerconf chaos run` writes to verdict.json (ids listed, duplicates counted)."""
    valid: bool | str
    attempted: int
    enqueued: int
    dequeued: int
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    recovered: list[str] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def check_total_queue(history: Iterable[dict] | Columns, *, duplicates_allowed: bool = False) -> TotalQueueResult:
    """`judge` over a history given as events (or as `Columns`), in verdict.json's shape."""
    c = history if isinstance(history, Columns) else Columns.of_events(history)
    f = facts(c)
    result, _ = judge(("", ""), f, duplicates_allowed=duplicates_allowed)
    ids = {k: sorted(str(x["id"]) for x in f["found"] if x["kind"] == k) for k in KINDS}
    totals = f["totals"] or {"attempted": 0, "enqueued": 0, "dequeued": 0}
    return TotalQueueResult(result.valid, totals["attempted"], totals["enqueued"], totals["dequeued"], ids["lost"],
                            ids["unexpected"],
                            {str(x["id"]): x["dequeued"] for x in sorted(f["found"], key=lambda x: str(x["id"]))
                             if x["kind"] == "duplicated"},
                            ids["recovered"], "" if result.valid is VALID else result.reason)


def _as_registered(key: RunKey, facts_: dict, options: dict):
    return (*judge(key, facts_[NAME], **options), [])


def _queue_run(record) -> str | None:
    return "a topic run" if record.topic else None


#: the workload's own check on a queue run: asked for by [checkers] total_queue
CHECKER = Checker(NAME, _as_registered, facts=(Facts(NAME, facts, SPLIT_KEY, combine),), switch="total_queue", settings=("duplicates_allowed",),
                  applies=_queue_run, evidence_required=True)
