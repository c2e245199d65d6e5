"""Messages on an Artemis-style cluster (issue 19): none lost, none delivered twice, and under
ON_DEMAND load balancing none carried to a node that had no consumer.

The promises (artemis-clusters.md, "Server-Side Message Load Balancing" and "Message
Redistribution"; catalogue CLU-*): a cluster moves a message between nodes, it does not copy it,
so each confirmed send reaches consumers once; ON_DEMAND forwards a message only to a node whose
matching queue has consumers, and redistribution moves messages only towards a node that has
consumers. ARTEMIS-4527 and ARTEMIS-4312 reported duplicates when consumers came and went during
redistribution: the workload that provokes it is chaos/workloads/cluster.py (consumer churn).

From a history (each completion names the node that served it, chaos/history.py ``node``):
* ``lost``: a send completed ``ok`` and no ``receive`` or ``drain`` ever delivered the message.
  Without a completed drain a message may still be queued somewhere: the verdict is then
  ``unknown`` rather than false (as total_queue.py says why).
* ``duplicated``: a message consumed twice, or delivered again after it was consumed. Consumed:
  an ``ack`` completed ``ok`` (or a drain took it: drains acknowledge before they record). A
  message delivered again before anyone consumed it is redelivered (at-least-once: a consumer
  closed or its node died before its ack), flagged or not: Artemis documents that the
  redelivered flag may be lost across a crash (``persist-delivery-count-before-delivery``
  false by default), and redelivery.py judges what follows a confirmed ack the same way. What
  ARTEMIS-4527 and ARTEMIS-4312 reported, one message acknowledged by consumers on two nodes,
  is found whatever the order of the two deliveries. The columnar rows do not keep an ack's
  ``confirmed: false`` (AMQP settling on send): every ``ok`` ack counts as consumed.
* ``no-consumer-node`` (only when the cluster's ``message_load_balancing`` is ON_DEMAND): a
  message delivered at node N, sent to another node S, while no consumer was open on N at any
  time from the send's invoke to that delivery. ON_DEMAND routing and redistribution both need a
  consumer on N, so the message could not have reached N. A receive proves its own consumer, so
  only drains (run after every consumer closed) can show it. A consumer on N is open from its
  first ``subscribe``/``receive``/``ack``/``close`` op naming N to its last one, extended by
  `NOTIFICATION_GRACE_NS`: a node learns that a remote consumer closed by a cluster notification,
  and a send routed by a view a moment old is no evidence. The final drain is itself a consumer
  on its node: with redistribution on, messages drained after its demand could have drawn them
  are no evidence either (`without_consumer`).

Facts split two ways (reports/checkers/split.py): the per-message facts by message ``id`` (this
module's `facts`), the consumers' open intervals by client (`consumer_facts`, registered as
`CONSUMERS`); the driver judges with both (`judge`).
"""

from __future__ import annotations

import numpy as np

from .history import SECOND, Columns, in_canonical_order, ops_by_id
from .protocol import Checker, Facts
from .result import INVALID, UNKNOWN, VALID, CheckResult, RunKey, anomaly, count_kinds, describe_counts

NAME = "redistribution"
#: the facts of the consumers' open intervals (split by client); judged as part of NAME
CONSUMERS = "redistribution_consumers"
SPLIT_KEY = "id"
CONSUMERS_SPLIT_KEY = "client"
KINDS = ("lost", "duplicated", "no-consumer-node")
#: how long after a consumer's last op on a node other nodes may still route to it: Artemis
#: propagates a consumer's close to the other nodes as a cluster notification (artemis-clusters.md,
#: "Server-Side Message Load Balancing": a node forwards by the remote bindings it knows). One
#: second covers a notification on a loaded 2-core machine; a message stranded longer is evidence.
NOTIFICATION_GRACE_NS = 1 * SECOND
#: the consumer ops that show a consumer open on the node they name
CONSUMER_FS = ("subscribe", "receive", "ack", "close")


def facts(c: Columns) -> dict:
    """Per message: confirmed sends, deliveries, the duplicates and losses found; every delivery by
    a drain at a node other than the one its send was confirmed by (the ON_DEMAND candidates); how
    many deliveries name no node."""
    out = {"totals": None, "drained": c.drained, "found": [], "remote_drained": [], "unnamed": 0}
    send = c.queue & c.f.eq("send")
    delivered = c.delivered
    ack = c.queue & c.f.eq("ack")
    # acks alone still count: a message acked twice is a duplicate even when its send and
    # deliveries are not in these rows (a part of a run split by id may hold only its acks)
    if not (send | delivered | ack).any():
        return out
    bins = c.id.n_values + 1
    send_ok = np.flatnonzero(send & c.type.eq("ok") & (c.id.codes >= 0))
    send_invoke = np.flatnonzero(send & c.type.eq("invoke") & (c.id.codes >= 0))
    enqueued = np.zeros(bins, dtype=bool)
    enqueued[c.id.codes[send_ok]] = True
    # each id's confirmed send: its node and the op index; its (first) invoke time
    send_node = np.full(bins, -1, dtype=np.int64)
    send_node[c.id.codes[send_ok]] = c.node.codes[send_ok]
    send_index = np.full(bins, -1, dtype=np.int64)
    send_index[c.id.codes[send_ok]] = c.index[send_ok]
    sent_at = np.full(bins, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(sent_at, c.id.codes[send_invoke], c.time[send_invoke])
    d = np.flatnonzero(delivered & (c.id.codes >= 0))  # in (index, pos) order: delivery order
    codes = c.id.codes[d]
    count = np.bincount(codes, minlength=bins)
    out["totals"] = {"enqueued": int(enqueued.sum()), "delivered": int(len(d)),
                     "messages": int(((count > 0) | enqueued).sum()), "redelivered": int((count[count > 1] - 1).sum())}
    out["unnamed"] = int((c.node.codes[d] < 0).sum())
    found = []
    for b in np.flatnonzero(enqueued & (count == 0)):
        found.append({"kind": "lost", "id": c.id.value(b), "ops": [int(send_index[b])],
                      "detail": "confirmed send never delivered" + _at(c, send_node[b])})
    # consumed: an ack that completed ok, or a drain (it acks before it records); a message
    # consumed twice, or delivered after it was consumed, is a duplicate
    ack_ok = np.flatnonzero(ack & c.type.eq("ok") & (c.id.codes >= 0))
    drained_rows = d[c.f.eq("drain")[d]]
    consumed = np.concatenate([ack_ok, drained_rows])
    n_consumed = np.bincount(c.id.codes[consumed], minlength=bins)
    first_consumed = np.full(bins, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_consumed, c.id.codes[consumed], consumed)  # row positions: (index, pos) order
    after = np.bincount(codes[d > first_consumed[codes]], minlength=bins)
    duplicated = np.flatnonzero((n_consumed > 1) | (after > 0))
    if len(duplicated):
        ops_of = ops_by_id(c, c.queue & (delivered | c.f.eq("ack")), duplicated.tolist())
        for b in duplicated:
            found.append({"kind": "duplicated", "id": c.id.value(b), "ops": ops_of.get(int(b), []),
                          "detail": f"consumed {int(n_consumed[b])} times, delivered {int(count[b])} times "
                                    f"({int(after[b])} after it was first consumed"
                                    f"{_at(c, c.node.codes[first_consumed[b]])})"})
    out["found"] = in_canonical_order(found)
    # drained at a named node other than the confirming one: ON_DEMAND candidates
    drains = d[c.f.eq("drain")[d] & (c.node.codes[d] >= 0)]
    remote = drains[(send_node[c.id.codes[drains]] >= 0) & (c.node.codes[drains] != send_node[c.id.codes[drains]])]
    out["remote_drained"] = sorted(
        [c.id.value(c.id.codes[r]), c.node.value(c.node.codes[r]), c.node.value(send_node[c.id.codes[r]]),
         int(sent_at[c.id.codes[r]]), int(c.time[r]), int(send_index[c.id.codes[r]]), int(c.index[r])]
        for r in remote)
    return out


def _at(c: Columns, node_code) -> str:
    return "" if node_code < 0 else f" at node {c.node.value(node_code)}"


def consumer_facts(c: Columns) -> dict:
    """Each consumer's open interval per node: [node, process, first op time, last op time] of the
    ops of `CONSUMER_FS` (drains left out: they run after every consumer closed); when the first
    drain was invoked (None: no drain)."""
    drains = c.time[c.is_op & c.client & c.f.eq("drain") & c.type.eq("invoke")]
    first_drain = int(drains.min()) if len(drains) else None
    rows = np.flatnonzero(c.is_op & c.client & c.f.isin(CONSUMER_FS) & (c.node.codes >= 0))
    out = []
    if len(rows):
        width = c.node.n_values
        key = c.process.codes[rows].astype(np.int64) * width + c.node.codes[rows]
        for k in np.unique(key).tolist():
            t = c.time[rows[key == k]]
            out.append([c.node.value(k % width), c.process.value(k // width), int(t.min()), int(t.max())])
    return {"consumers": sorted(out), "first_drain": first_drain}


def combine(parts: list[dict]) -> dict:
    """The facts of a run from its parts split by message id: every id lies in one part."""
    totals = [p["totals"] for p in parts if p["totals"] is not None]
    return {"totals": {k: sum(t[k] for t in totals) for k in ("enqueued", "delivered", "messages", "redelivered")}
            if totals else None,
            "drained": any(p["drained"] for p in parts),
            "found": in_canonical_order([f for p in parts for f in p["found"]]),
            "remote_drained": sorted(r for p in parts for r in p["remote_drained"]),
            "unnamed": sum(p["unnamed"] for p in parts)}


def combine_consumers(parts: list[dict]) -> dict:
    """Split by client, a process lies in one part: the intervals side by side."""
    drains = [p["first_drain"] for p in parts if p["first_drain"] is not None]
    return {"consumers": sorted(x for p in parts for x in p["consumers"]), "first_drain": min(drains) if drains else None}


def without_consumer(facts_: dict, consumers: dict, redistribution_delay_ms: int | None = None) -> list[dict]:
    """The ``no-consumer-node`` findings: remote drains whose node had no consumer open (with the
    grace) at any time from the send's invoke to the drain, and that the drains' own demand does
    not explain: with redistribution on (a delay of 0 or more; None: unknown, taken as 0), once
    the first drain's consumer opened, another node's consumerless queue may move its messages
    to it after the delay ("Message Redistribution"), so a message drained from then on may have
    come that way. The cluster workload opens every node's drain before reading any (within the
    delay: a node with its own drain consumer redistributes nothing)."""
    delay = -1 if redistribution_delay_ms == -1 else max(0, redistribution_delay_ms or 0)
    first_drain = consumers.get("first_drain")
    drawn_from = None if delay < 0 or first_drain is None else first_drain + delay * 1_000_000
    open_on: dict[str, list[tuple[int, int]]] = {}
    for node, _process, start, end in consumers["consumers"]:
        open_on.setdefault(node, []).append((start, end + NOTIFICATION_GRACE_NS))
    found = []
    for message_id, node, sent_node, sent_at, drained_at, send_index, drain_index in facts_["remote_drained"]:
        if any(start <= drained_at and end >= sent_at for start, end in open_on.get(node, ())):
            continue
        if drawn_from is not None and drained_at >= drawn_from:
            continue
        found.append({"kind": "no-consumer-node", "id": message_id, "ops": [send_index, drain_index],
                      "detail": f"sent to node {sent_node}, drained at node {node}, which had no consumer open "
                                f"from the send to the drain (ON_DEMAND forwards only to nodes with consumers)"})
    return found


def judge(key: RunKey, facts_: dict, consumers: dict | None = None, *, redistribution: bool = False,
          load_balancing: str | None = None, redistribution_delay_ms: int | None = None
          ) -> tuple[CheckResult, list[dict]]:
    """One run's result. ``redistribution``: the experiment asked for this check ([checkers]
    redistribution); unasked, the result is shown as not applicable with what it found (a queue
    on one broker is total_queue's business). ``load_balancing``: the cluster's
    message_load_balancing (the node check runs for ON_DEMAND only); ``redistribution_delay_ms``:
    its address setting (-1: never; `without_consumer` says why it matters)."""
    found = list(facts_["found"])
    on_demand = load_balancing == "ON_DEMAND"
    if on_demand:
        found = in_canonical_order(found + without_consumer(facts_, consumers or {"consumers": []},
                                                            redistribution_delay_ms))
    rows = [anomaly(key, NAME, f["kind"], f["id"], f["ops"], f["detail"]) for f in found]
    counts = count_kinds(rows)
    totals, drained = facts_["totals"], facts_["drained"]
    stats = {**(totals or {"enqueued": 0, "delivered": 0, "messages": 0, "redelivered": 0}), **{k: counts.get(k, 0) for k in KINDS},
             "drained": drained, "unnamed": facts_["unnamed"], "load_balancing": load_balancing,
             "remote_drained": len(facts_["remote_drained"]),
             "redistribution_delay_ms": redistribution_delay_ms}
    result = _judged(key, facts_, counts, stats, on_demand)
    if not redistribution:
        # shown, not counted: a run that did not ask lists no anomaly rows of this checker (a lost
        # message is total_queue's row there; a group moving between networked brokers breaks nothing)
        rows = []
        result.applicable = False
        result.reason = "not asked for by the experiment ([checkers] redistribution)" + (
            f"; found: {result.reason}" if result.reason else "")
    return result, rows


def _judged(key: RunKey, facts_: dict, counts: dict, stats: dict, on_demand: bool) -> CheckResult:
    if facts_["totals"] is None:
        return CheckResult(NAME, *key, UNKNOWN, "no send or delivery on a queue in this history", stats=stats)
    breaking = {k: counts.get(k, 0) for k in (("lost",) if facts_["drained"] else ()) + ("duplicated", "no-consumer-node")}
    if any(breaking.values()):
        return CheckResult(NAME, *key, INVALID, describe_counts(breaking), stats=stats)
    if not facts_["drained"]:
        return CheckResult(NAME, *key, UNKNOWN, "the history has no final drain: messages still queued on some node "
                           f"would look lost ({counts.get('lost', 0)} confirmed sends not delivered yet)", stats=stats)
    if on_demand and facts_["unnamed"]:
        return CheckResult(NAME, *key, UNKNOWN, f"{facts_['unnamed']} deliveries name no node: where they were "
                           "delivered, and so the ON_DEMAND rule, cannot be judged", stats=stats)
    return CheckResult(NAME, *key, VALID, stats=stats)


def check_redistribution(history, *, redistribution: bool = True, load_balancing: str | None = None,
                         redistribution_delay_ms: int | None = None) -> CheckResult:
    """The result for one run's events (`brokerconf chaos run`, tests): the same facts and judge as
    the Spark pipeline's; the anomaly details are in ``stats["anomalies"]``."""
    c = history if isinstance(history, Columns) else Columns.of_events(history)
    result, rows = judge(("", ""), facts(c), consumer_facts(c), redistribution=redistribution,
                         load_balancing=load_balancing, redistribution_delay_ms=redistribution_delay_ms)
    result.stats["anomalies"] = [r["detail"] for r in rows]
    return result


def _as_registered(key: RunKey, facts_: dict, options: dict):
    return (*judge(key, facts_[NAME], facts_[CONSUMERS], **options), [])


def _cluster_settings(record) -> dict:
    """The cluster's settings the ON_DEMAND rule needs (None outside a cluster, or without a record)."""
    if record is None:
        return {"load_balancing": None, "redistribution_delay_ms": None}
    return {"load_balancing": record.load_balancing, "redistribution_delay_ms": record.redistribution_delay_ms}


#: runs with its switch as an option: unasked, it shows what it found as not applicable; its
#: second fact family (the consumers' open intervals) is computed beside its own
CHECKER = Checker(NAME, _as_registered, facts=(Facts(NAME, facts, SPLIT_KEY, combine),
                                                Facts(CONSUMERS, consumer_facts, CONSUMERS_SPLIT_KEY, combine_consumers)),
                  switch="redistribution", switch_is_option=True, record_options=_cluster_settings)
