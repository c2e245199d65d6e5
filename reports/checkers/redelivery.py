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
