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

from .history import Columns, dense, first_deliveries, in_canonical_order, order_inversions
from .protocol import Checker, Facts
from .result import INVALID, VALID, CheckResult, RunKey, anomaly, count_kinds, describe_counts

NAME = "fifo"


def facts(r: Columns) -> dict:
    """Each queue's scope (why it is not checked, "" when it is), what decided it (its nodes,
    its consumers, how many deliveries), and the order inversions found."""
    queue, delivered = r.queue, r.delivered
    m = queue & (r.destination.codes >= 0)
    rows = np.flatnonzero(m)
    if not len(rows):
        return {"scope": {}, "destinations": {}, "found": []}
    dest = r.destination.codes[rows].astype(np.int64)
    width = 1 << 32
    # the consumer of a receive: its number, else "process N" (a value of another kind)
    receive_ok = rows[r.f.eq("receive")[rows] & r.type.eq("ok")[rows]]
    destinations: dict[str, dict] = {}
    for d in np.unique(dest).tolist():
        destinations[r.destination.value(d)] = {"nodes": [], "consumers": [], "deliveries": 0}
    named = rows[r.node.codes[rows] >= 0]
    for key in np.unique(r.destination.codes[named].astype(np.int64) * width + r.node.codes[named]).tolist():
        destinations[r.destination.value(key // width)]["nodes"].append(r.node.value(key % width))
    numbered = receive_ok[r.has_consumer[receive_ok]]
    number, n_numbers = dense(r.consumer[numbered])
    for key in np.unique(r.destination.codes[numbered].astype(np.int64) * max(n_numbers, 1) + number).tolist():
        at = numbered[np.argmax(number == key % max(n_numbers, 1))]
        destinations[r.destination.value(key // max(n_numbers, 1))]["consumers"].append(int(r.consumer[at]))
    unnumbered = receive_ok[~r.has_consumer[receive_ok]]
    for key in np.unique(r.destination.codes[unnumbered].astype(np.int64) * width
                         + (r.process.codes[unnumbered].astype(np.int64) + 1)).tolist():
        destinations[r.destination.value(key // width)]["consumers"].append(
            f"process {r.process.value(key % width - 1)}")
    counts = np.bincount(dest[delivered[rows]], minlength=r.destination.n_values)
    for d in np.flatnonzero(counts).tolist():
        destinations[r.destination.value(d)]["deliveries"] = int(counts[d])
    for facts_ in destinations.values():
        facts_["nodes"].sort()
        facts_["consumers"].sort(key=lambda c: (isinstance(c, str), str(c) if isinstance(c, str) else c))
    scope = _scope(destinations)
    found: list = []
    eligible = np.zeros(r.destination.n_values + 1, dtype=bool)
    for d, why in scope.items():
        eligible[r.destination.code(d)] = why == ""
    if eligible.any():
        first = first_deliveries(r, np.flatnonzero(m & delivered & eligible[r.destination.codes]))
        found = order_inversions(r, first, [r.destination], lambda a: r.destination.value(r.destination.codes[a]))
    return {"scope": scope, "destinations": destinations, "found": in_canonical_order(found)}


def _scope(destinations: dict[str, dict]) -> dict[str, str]:
    """Why each queue is not checked ("" when it is)."""
    scope = {}
    for d, seen in destinations.items():
        nodes, consumers = len(seen["nodes"]), len(seen["consumers"])
        if nodes > 1:
            # a network of brokers re-sends through bridges (not ordered by design); a master/slave
            # run records the node that served each completion, so a failover shows two nodes too:
            # order is judged on one broker only, whatever joined the nodes
            scope[d] = (f"{nodes} nodes served it ({', '.join(map(str, seen['nodes']))}): order is judged on one "
                        "broker only (a network's bridges re-send out of order; a failover moves to another node)")
        elif consumers > 1:
            scope[d] = f"{consumers} consumers compete for the queue: order is promised to a single consumer"
        elif seen["deliveries"] == 0:
            scope[d] = "nothing was received"
        else:
            scope[d] = ""
    return scope


#: the key that splits a run for this checker (reports/checkers/split.py): order is per
#: (queue, producer), so a producer's messages stay together (rows without one: by message id)
SPLIT_KEY = "producer"


def combine(parts: list[dict]) -> dict:
    """The facts of a run from the facts of its parts split by producer. A queue's scope needs
    all of it (its nodes and consumers over every part): a part may see one consumer where the
    run had two, so the inversions a part found on a queue the whole run leaves out are dropped."""
    destinations: dict[str, dict] = {}
    for p in parts:
        for d, seen in p["destinations"].items():
            into = destinations.setdefault(d, {"nodes": set(), "consumers": set(), "deliveries": 0})
            into["nodes"] |= set(seen["nodes"])
            into["consumers"] |= set(seen["consumers"])
            into["deliveries"] += seen["deliveries"]
    for seen in destinations.values():
        seen["nodes"] = sorted(seen["nodes"])
        seen["consumers"] = sorted(seen["consumers"], key=lambda c: (isinstance(c, str), str(c) if isinstance(c, str) else c))
    scope = _scope(destinations)
    found = [f for p in parts for f in p["found"] if scope.get(f["destination"]) == ""]
    return {"scope": scope, "destinations": destinations, "found": in_canonical_order(found)}


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


def _as_registered(key: RunKey, facts_: dict, options: dict):
    return (*judge(key, facts_[NAME], **options), [])


def _queue_run(record) -> str | None:
    return "a topic run" if record.topic else None


#: documented for every queue; which destinations it can judge the checker decides itself: no switch
CHECKER = Checker(NAME, _as_registered, facts=(Facts(NAME, facts, SPLIT_KEY, combine),), applies=_queue_run)
