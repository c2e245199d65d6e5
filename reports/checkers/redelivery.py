"""No message is delivered again after its acknowledgement was confirmed.

A broker may redeliver a message whose ack it never confirmed (at-least-once: the consumer
crashed, or the ack was in doubt). Once an ``ack`` completed ``ok``, the message is consumed; a
later ``receive`` or ``drain`` of the same id is a duplicate the documented semantics forbid
(A-MQ fault-tolerant messaging guide, 2.1: failover resumes where the client left off; JMS 1.1,
4.4.11: acknowledged messages are not redelivered). Acks whose value says ``"confirmed": false``
were sent but never answered by the broker (AMQP settled dispositions) and do not count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable

from .protocol import Checker, Facts


@dataclass
class RedeliveryResult:
    valid: bool
    acknowledged: int
    redelivered_after_ack: dict[str, list[int]] = field(default_factory=dict)  # id -> indexes of the offending ops

    def to_json(self) -> dict:
        return asdict(self)


def _ids(value) -> list[str]:
    if isinstance(value, dict) and "id" in value:
        return [str(value["id"])]
    if isinstance(value, list):
        return [str(m["id"]) for m in value if isinstance(m, dict) and "id" in m]
    return []


def check_no_redelivery_after_ack(history: Iterable[dict]) -> RedeliveryResult:
    acked: set[str] = set()
    offending: dict[str, list[int]] = {}
    for op in history:
        if op.get("type") != "ok" or op.get("process") == "nemesis":
            continue
        if op.get("f") == "ack":
            value = op.get("value")
            # An ack the broker never answered (AMQP settles on send: "confirmed": false) may be
            # lost with a crash; redelivering that message is at-least-once, not a violation.
            if not (isinstance(value, dict) and value.get("confirmed") is False):
                acked.update(_ids(value))
        elif op.get("f") in ("receive", "drain"):
            for message_id in _ids(op.get("value")):
                if message_id in acked:
                    offending.setdefault(message_id, []).append(op.get("index", -1))
    return RedeliveryResult(not offending, len(acked), offending)


# ---------------------------------------------------------------------- columnar (the Spark pipeline)
# The same check over a run's columns, so that the Spark pipeline applies it where `brokerconf
# chaos run` does (reports/check_plan.py). The flat columns do not keep an ack's ``confirmed``
# field, so the columns find the candidates (a delivery after an ok ack of the same id) and the
# task reads the run's events again only when there is one (`exact`), rare by construction:
# a run without a candidate has no redelivery after any ack, confirmed or not.

NAME = "no_redelivery_after_ack"
#: the key that splits a run for this checker (reports/checkers/split.py): every fact is per id
SPLIT_KEY = "id"


def facts(c) -> dict:
    """``acknowledged``: ids with an ok ack (confirmed or not: the columns cannot tell);
    ``offending``: id -> indexes of its ok deliveries after its first ok ack (candidates until
    ``exact``); ``exact``: computed over the events, with the ack confirmations."""
    import numpy as np

    ok = c.msgs & c.type.eq("ok")
    acks = np.flatnonzero(ok & c.f.eq("ack") & (c.id.codes >= 0))
    deliveries = np.flatnonzero(ok & c.f.isin(("receive", "drain")) & (c.id.codes >= 0))
    first_ack = np.full(c.id.n_values, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_ack, c.id.codes[acks], c.index[acks])
    late = deliveries[c.index[deliveries] > first_ack[c.id.codes[deliveries]]]
    offending: dict[str, list[int]] = {}
    for code, index in sorted(zip(c.id.codes[late].tolist(), c.index[late].tolist())):
        offending.setdefault(str(c.id.value(code)), []).append(int(index))
    return {"acknowledged": int(len(np.unique(c.id.codes[acks]))), "offending": offending, "exact": not offending}


def exact_facts(events: Iterable[dict]) -> dict:
    """`facts` over the run's events: the acks the broker never confirmed do not count."""
    result = check_no_redelivery_after_ack(events)
    return {"acknowledged": result.acknowledged, "offending": result.redelivered_after_ack, "exact": True}


def combine(parts: list[dict]) -> dict:
    """Split by id, each id lies in one part."""
    offending = {k: v for p in parts for k, v in p["offending"].items()}
    return {"acknowledged": sum(p["acknowledged"] for p in parts), "offending": dict(sorted(offending.items())),
            "exact": all(p["exact"] for p in parts)}


def judge(key, facts_: dict):
    """One run's result and anomaly rows."""
    from .result import INVALID, UNKNOWN, VALID, CheckResult, anomaly

    offending = facts_["offending"]
    rows = [anomaly(key, NAME, "redelivered_after_ack", message_id, ops, "delivered again after its ack was confirmed")
            for message_id, ops in sorted(offending.items())]
    stats = {"acknowledged": facts_["acknowledged"], "redelivered_after_ack": len(offending)}
    if not offending:
        return CheckResult(NAME, *key, VALID, stats=stats), rows
    if not facts_["exact"]:
        # a split run: its events were not read whole, so whether those acks were confirmed
        # (AMQP settles on send) is not known here
        return CheckResult(NAME, *key, UNKNOWN, f"{len(offending)} message(s) delivered again after an ok ack whose "
                           "confirmation was not read (a run split into parts)", stats=stats), rows
    return CheckResult(NAME, *key, INVALID, f"{len(offending)} message(s) delivered again after a confirmed ack",
                       stats=stats), rows


def _as_registered(key, facts_: dict, options: dict):
    return (*judge(key, facts_[NAME], **options), [])


def _queue_run(record) -> str | None:
    return "a topic run" if record.topic else None


#: the queue workload's promise, judged with the total queue (one switch for both)
CHECKER = Checker(NAME, _as_registered, facts=(Facts(NAME, facts, SPLIT_KEY, combine),), switch="total_queue", applies=_queue_run)
