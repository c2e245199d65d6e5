"""Clustered message grouping: every message of a group is delivered by the one node its group
was routed to (issue 19; artemis-message-grouping.md, "Clustered Grouping" and its best
practices; catalogue GRP-CLUSTER-3, -4, -6).

What the chapter promises, and so what this judges: the first message of a group is routed by a
proposal the LOCAL grouping handler accepts, and from then on every node routes that group's
messages to the same queue "indefinitely" (GRP-CLUSTER-3); there the single-broker rules pin the
group to one consumer (GRP-CLUSTER-4: reports/checkers/groups.py judges that, by consumer
process, across nodes too). The pinned queue keeps receiving the group even when its consumers
close (GRP-CLUSTER-6, the best practices' warning), so a consumer closing does not move a group
between nodes. Only the node itself going away can: a node killed, stopped or paused (its queue
and its bindings gone for the other nodes), or a cluster link cut (the history cannot tell which
node lost sight of which, so a link fault counts for every node: generously, as groups.py counts
faults).

From a history: the node of a delivery is the node its ``receive`` or ``drain`` completion names
(chaos/workloads/cluster.py records it; the final drain reads each node on its own). Within a
(destination, group), in delivery order (op index, then place in a drain), a delivery at another
node than the previous one is a ``moved`` anomaly unless, between the two, a process step (kill,
stop, pause or their heals) named the previous node or the new one, or any other nemesis step
ran (a link fault through the fault proxy). A group timeout (``group-timeout``, -1 by default: never) would let an unused
group's route be forgotten; the experiments keep the default, and so does this check.

A delivery that names no node makes the verdict ``unknown`` (nothing found among the others).
"""

from __future__ import annotations

import numpy as np

from .history import NOT_FAULTS, Columns, in_canonical_order, small_uint
from .protocol import Checker, Facts
from .result import INVALID, UNKNOWN, VALID, CheckResult, RunKey, anomaly, count_kinds, describe_counts

NAME = "group_pinning"
KIND = "moved"
#: a group's deliveries stay together; the nemesis steps go to every part (split.py, "group")
SPLIT_KEY = "group"
#: nemesis steps on one broker's process (chaos/nemesis/process.py), naming that node; any other
#: step (a cut or slowed link through the fault proxy) may isolate any node
PROCESS_STEPS = ("kill", "stop", "pause", "start", "resume", "restart")


def facts(c: Columns) -> dict:
    """Group sizes, how many deliveries name no node, how many times a group changed node, and the
    moves nothing explains."""
    rows = np.flatnonzero(c.delivered & (c.group.codes >= 0) & (c.destination.codes >= 0))
    out = {"sizes": {"groups": 0, "n": int(len(rows)), "moves": 0, "nodes": []}, "unnamed": 0, "found": []}
    if not len(rows):
        return out
    out["unnamed"] = int((c.node.codes[rows] < 0).sum())
    rows = rows[c.node.codes[rows] >= 0]
    if not len(rows):
        return out
    key = c.destination.codes[rows].astype(np.int64) * c.group.n_values + c.group.codes[rows]
    by = np.argsort(small_uint(key), kind="stable")
    g, key = rows[by], key[by]
    same = np.zeros(len(g), dtype=bool)
    same[1:] = key[1:] == key[:-1]
    node = c.node.codes[g]
    moved = same & (node != np.concatenate([[-1], node[:-1]]))
    cluster_nodes = {c.node.value(n) for n in np.unique(node).tolist()}
    out["sizes"] = {"groups": int(len(np.unique(key))), "n": int(len(g)), "moves": int(moved.sum()),
                    "nodes": sorted(cluster_nodes)}
    steps = [(n["index"], n["f"], n["node"]) for n in c.nemesis if n["f"] not in NOT_FAULTS]
    found = []
    for at in np.flatnonzero(moved):
        a, b = g[at - 1], g[at]
        old, new = c.node.value(c.node.codes[a]), c.node.value(c.node.codes[b])
        lo, hi = int(c.index[a]), int(c.index[b])
        if any(lo < i < hi and (n in (old, new) or f not in PROCESS_STEPS) for i, f, n in steps):
            continue
        dest, group = c.destination.value(c.destination.codes[b]), c.group.value(c.group.codes[b])
        found.append({"kind": KIND, "message_id": c.id.value(c.id.codes[b]), "ops": [lo, hi],
                      "detail": f"{dest} group {group}: delivered at node {new} after node {old} had it "
                                f"(op {lo}), and no fault or heal of either node or of a cluster link in between"})
    out["found"] = in_canonical_order(found)
    return out


def combine(parts: list[dict]) -> dict:
    """The facts of a run from its parts split by group: every group lies in one part."""
    return {"sizes": {"groups": sum(p["sizes"]["groups"] for p in parts), "n": sum(p["sizes"]["n"] for p in parts),
                      "moves": sum(p["sizes"]["moves"] for p in parts),
                      "nodes": sorted({n for p in parts for n in p["sizes"]["nodes"]})},
            "unnamed": sum(p["unnamed"] for p in parts),
            "found": in_canonical_order([f for p in parts for f in p["found"]])}


def judge(key: RunKey, facts_: dict, *, group_pinning: bool = False) -> tuple[CheckResult, list[dict]]:
    """One run's result. ``group_pinning``: the experiment asked for it ([checkers] group_pinning):
    a single broker or a network of brokers promises no pinning to a node, so unasked the result
    is shown as not applicable, with what it found."""
    rows = [anomaly(key, NAME, f["kind"], f["message_id"], f["ops"], f["detail"]) for f in facts_["found"]]
    counts = count_kinds(rows)
    s = facts_["sizes"]
    stats = {"groups": s["groups"], "deliveries": s["n"], "moves": s["moves"], "nodes": s["nodes"],
             "unnamed": facts_["unnamed"], **counts}
    if counts:
        result = CheckResult(NAME, *key, INVALID, describe_counts(counts), stats=stats)
    elif not s["n"]:
        result = CheckResult(NAME, *key, UNKNOWN, "no grouped message was delivered from a queue", stats=stats)
    elif facts_["unnamed"]:
        result = CheckResult(NAME, *key, UNKNOWN, f"{facts_['unnamed']} of {s['n']} grouped deliveries name no node",
                             stats=stats)
    else:
        moves = f", {s['moves']} moves, each after a fault" if s["moves"] else ", none moved"
        result = CheckResult(NAME, *key, VALID, f"{s['groups']} groups over nodes {', '.join(s['nodes'])}{moves}",
                             stats=stats)
    if not group_pinning:
        # shown, not counted: a run that did not ask lists no anomaly rows of this checker (a lost
        # message is total_queue's row there; a group moving between networked brokers breaks nothing)
        rows = []
        result.applicable = False
        result.reason = "not asked for by the experiment ([checkers] group_pinning)" + (
            f"; found: {result.reason}" if result.reason else "")
    return result, rows


def check_group_pinning(history, *, group_pinning: bool = True) -> CheckResult:
    """The result for one run's events (`brokerconf chaos run`, tests): the same facts and judge as
    the Spark pipeline's; the anomaly details are in ``stats["anomalies"]``."""
    c = history if isinstance(history, Columns) else Columns.of_events(history)
    result, rows = judge(("", ""), facts(c), group_pinning=group_pinning)
    result.stats["anomalies"] = [r["detail"] for r in rows]
    return result


def _as_registered(key: RunKey, facts_: dict, options: dict):
    return (*judge(key, facts_[NAME], **options), [])


#: runs with its switch as an option: unasked, it shows what it found as not applicable
CHECKER = Checker(NAME, _as_registered, facts=(Facts(NAME, facts, SPLIT_KEY, combine),), switch="group_pinning", switch_is_option=True)
