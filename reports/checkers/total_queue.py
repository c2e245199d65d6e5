"""Jepsen's total-queue checker over a brokerconf history (DESIGN.md, "History format").

Definitions (jepsen checker.clj `total-queue`, as summarised in REFERENCES.md):
* attempted: every send that was invoked (ok, info or fail — a failed send may still have
  been stored, but Jepsen counts only sends whose outcome is not `fail` as possibly enqueued);
* enqueued: sends that completed `ok` (the broker confirmed them);
* dequeued: messages received `ok` (by a consumer or by the final drain);
* lost: enqueued but never dequeued;
* unexpected: dequeued but never attempted;
* duplicated: dequeued more times than attempted;
* recovered: dequeued, attempted, but not confirmed (an `info` send that did arrive).
Valid iff nothing is lost and nothing unexpected. Duplicates are reported; whether they break the
documented semantics is the caller's decision (`duplicates_allowed`). Without a final drain a
message not received yet may still be in the broker, so lost ones are only candidates: the
verdict is "unknown" unless something unexpected (or a disallowed duplicate) makes it false.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable

VALID, INVALID, UNKNOWN = True, False, "unknown"


@dataclass
class TotalQueueResult:
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


def _message_ids(value) -> list[str]:
    """Ids carried by an op value: one message {"id": ...}, or a drain's list of messages."""
    if isinstance(value, dict):
        if "id" in value:
            return [str(value["id"])]
        if "messages" in value:
            return [str(m["id"]) for m in value["messages"]]
    if isinstance(value, list):
        return [str(m["id"]) for m in value]
    return []


def check_total_queue(history: Iterable[dict], *, duplicates_allowed: bool = False,
                      send_f: str = "send", receive_fs: tuple[str, ...] = ("receive", "drain")) -> TotalQueueResult:
    attempted: Counter[str] = Counter()
    enqueued: set[str] = set()
    dequeued: Counter[str] = Counter()
    drained = False
    for op in history:
        if op.get("process") == "nemesis":
            continue
        f, kind = op.get("f"), op.get("type")
        if f == send_f:
            ids = _message_ids(op.get("value"))
            if kind == "invoke":
                attempted.update(ids)
            elif kind == "ok":
                enqueued.update(ids)
            elif kind == "fail":
                # a refused send was never enqueued: no longer an attempt that may show up
                attempted.subtract(ids)
        elif f in receive_fs and kind == "ok":
            dequeued.update(_message_ids(op.get("value")))
            if f == "drain":
                drained = True
    attempted = +attempted  # drop zero / negative counts left by failed sends
    lost = sorted(m for m in enqueued if dequeued[m] == 0)
    unexpected = sorted(m for m in dequeued if attempted[m] == 0)
    duplicated = {m: n for m, n in sorted(dequeued.items()) if attempted[m] and n > attempted[m]}
    recovered = sorted(m for m in dequeued if attempted[m] and m not in enqueued)
    result = TotalQueueResult(VALID, sum(attempted.values()), len(enqueued), sum(dequeued.values()),
                              lost, unexpected, duplicated, recovered)
    # Without a final drain a confirmed send not received yet may still sit in the queue, so
    # "lost" is only a candidate then; unexpected and (disallowed) duplicated messages are
    # certain either way.
    certain_lost = lost if drained else []
    if unexpected or certain_lost or (duplicated and not duplicates_allowed):
        result.valid = INVALID
        parts = [f"{len(certain_lost)} lost" if certain_lost else "",
                 f"{len(unexpected)} unexpected" if unexpected else "",
                 f"{len(duplicated)} duplicated" if duplicated and not duplicates_allowed else ""]
        result.reason = ", ".join(p for p in parts if p)
    elif not drained:
        result.valid = UNKNOWN
        result.reason = "the history has no final drain: messages still queued would look lost"
        if lost:
            result.reason += f" ({len(lost)} confirmed sends not received, maybe still queued)"
    return result
