"""Per-producer FIFO on a queue, where the topology promises it.

JMS 1.1 section 4.4.10 "Message Order" (catalogue entry Q-FIFO-1) promises that one producer's
messages reach a single consumer of a queue in the order they were sent. So the job judges only
a queue that the history shows with one consumer at a time (one logical ``consumer`` in its
receives, else one receiving process; the final drain runs after every consumer stopped) and on
one node. Across a network of brokers order is not kept: a bridge is a second consumer that
re-sends from the head of one broker's queue to the tail of another's
(activemq-classic-networks-of-brokers.md, "Ordering"). Queues outside that scope are reported
as not checked, with the reason.

Order is over first deliveries (a redelivery after a reconnect or a duplicate is not an
inversion; duplicates are total-queue's business), in delivery order: the op index, then the
place in a drain's list.
"""

from __future__ import annotations

import numpy as np

from .history import Columns, dense, distinct_per, first_deliveries, in_order_of_appearance, order_inversions
from .result import INVALID, VALID, CheckResult, RunKey, anomaly, count_kinds, describe_counts

NAME = "fifo"


def facts(r: Columns) -> dict:
    """Each queue's scope (why it is not checked, "" when it is) and the order inversions found."""
    queue, delivered = r.queue, r.delivered
    m = queue & (r.destination.codes >= 0)
    rows = np.flatnonzero(m)
    if not len(rows):
        return {"scope": {}, "found": []}
    n_dest = r.destination.n_values
    dest = r.destination.codes[rows].astype(np.int64)
    nodes = distinct_per(dest, n_dest, r.node.codes[rows].astype(np.int64) + 1, r.node.n_values + 1,
                          r.node.codes[rows] >= 0)
    # the consumer of a receive: its number, else "process N" (a value of another kind)
    receive_ok = r.f.eq("receive")[rows] & r.type.eq("ok")[rows]
    has_consumer = r.has_consumer[rows]
    number, n_numbers = dense(np.where(has_consumer, r.consumer[rows], 0))
    consumer = np.where(has_consumer, number, n_numbers + r.process.codes[rows].astype(np.int64) + 1)
    consumers = distinct_per(dest, n_dest, consumer, n_numbers + r.process.n_values + 1, receive_ok)
    deliveries = np.bincount(dest[delivered[rows]], minlength=n_dest)
    scope: dict[str, str] = {}
    for d in in_order_of_appearance(dest):
        if nodes[d] > 1:
            reason = f"{nodes[d]} nodes: a network of brokers does not keep total order"
        elif consumers[d] > 1:
            reason = f"{consumers[d]} consumers compete for the queue: order is promised to a single consumer"
        elif deliveries[d] == 0:
            reason = "nothing was received"
        else:
            reason = ""
        scope[r.destination.value(d)] = reason
    found: list = []
    eligible = np.zeros(n_dest + 1, dtype=bool)
    for d in in_order_of_appearance(dest):
        eligible[d] = scope[r.destination.value(d)] == ""
    if eligible.any():
        first = first_deliveries(r, np.flatnonzero(m & delivered & eligible[r.destination.codes]))
        found = order_inversions(r, first, [r.destination], lambda a: r.destination.value(r.destination.codes[a]))
    return {"scope": scope, "found": found}



def judge(key: RunKey, facts_: dict) -> tuple[CheckResult, list[dict]]:
    """One run's result from its destinations (each with why it was not checked, "" when it was)
    and its order inversions."""
    rows = [anomaly(key, NAME, a["kind"], a["message_id"], a["ops"], a["detail"]) for a in facts_["found"]]
    counts = count_kinds(rows)
    scope = facts_["scope"]
    judged = sorted(d for d, why in scope.items() if not why)
    skipped = {d: why for d, why in scope.items() if why}
    stats = {"checked_destinations": judged, "not_checked": skipped, **counts}
    if not judged:
        reason = "; ".join(f"{d}: {why}" for d, why in sorted(skipped.items())) or "no queue in this history"
        return CheckResult(NAME, *key, VALID, reason, applicable=False, stats=stats), rows
    if counts:
        return CheckResult(NAME, *key, INVALID, describe_counts(counts), stats=stats), rows
    return CheckResult(NAME, *key, VALID, stats=stats), rows
