"""Split brain: two nodes accepted sends or deliveries in overlapping time windows (issue 18, 5).

A shared-store (or JDBC) master/slave pair promises one master at a time (A-MQ fault-tolerant
messaging guide, 3.1 and 3.2: only the master opens its connectors); Artemis's shared-store
documentation even calls it immune to split brain, which its own tracker disputes
(ARTEMIS-4143, ARTEMIS-2421). This judges the promise from the history alone: every completion
names the node that served it (``node``, chaos/workloads/base.py NodeNames).

What counts, and why (the reasoning is Jepsen's for concurrent histories: an operation took
effect at some instant between its invoke and its completion, so only real-time order, one
operation completing before another was invoked, proves which came first; REFERENCES.md,
"Jepsen"):
* accepted: an ``ok`` ``send`` (the node confirmed it), an ``ok`` ``receive`` or an ``ok``
  ``drain`` that carried messages (the node delivered). A failed or in-doubt operation proves
  nothing about who served; an ``ack`` is left out as the brief of issue 18 asks (deliveries and
  sends are what a second master would corrupt).
* epochs: a master may change only when something made it: each disturbance (the merged fault
  windows of the nemesis steps, reports/checkers/history.py) opens an epoch at its start, and
  an operation belongs to the epoch it was *invoked* in. Before the first fault is epoch -1.
* within an epoch the nodes are ordered by who served first: the incumbent (the node whose
  accepted operation of an earlier epoch completed last: the master the fault acted on), then
  the others by their first accepted operation's completion in the epoch. A clean
  handover from A to B: no operation accepted by A was invoked after B's first accepted one had
  completed. An A operation invoked earlier but answered later is in flight across the switch
  (A may simply have answered late: the old master finishing what it had) and is no evidence.
  One invoked after B's first completion and accepted by A proves that A accepted work while B
  already did: split brain, reported as the window from B's first acceptance to the completion
  of the latest-invoked such A operation, with the two operations that prove it. Only a send or
  a drain can be that A operation: a receive may return a message the node dispatched before
  the receive was invoked (the client's prefetch buffer), so its invoke bounds nothing. Any
  accepted operation's completion shows that its node served by then (B's side).
Verdict: ``false`` with the windows when any epoch has such an overlap; ``unknown`` when no
accepted operation names its node (a history from before issue 18), or when some do not and
nothing was found among the others; ``true`` when two or more nodes served and every switch was
clean. One node serving everything (or nothing accepted) leaves nothing to judge: not
applicable, unless the experiment asked for this check and the history names no node at all.
The check is a master/slave topology's promise (a network of brokers serves on every node at
once), so a run counts it only when its experiment asks for it (``[checkers] split_brain``);
`brokerconf analyze` shows it for every other run as not applicable, with what it found.

Facts decompose by any split of the clients (SPLIT_KEY ``client``: an operation's invoke and
completion stay together, the nemesis steps go to every part): per (epoch, node) the first
completion, the last invoke and the last completion, merged by min / max (`combine`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .history import SECOND, Columns
from .protocol import Checker, Facts
from .result import INVALID, UNKNOWN, VALID, CheckResult, RunKey, anomaly

NAME = "split_brain"
KIND = "split-brain"
#: the key that splits a run for this checker (reports/checkers/split.py)
SPLIT_KEY = "client"
#: the operations whose ``ok`` shows a node accepting work (``receive``/``drain`` only with messages)
ACCEPTING = ("send", "receive", "drain")


# ---------------------------------------------------------------------- facts (inside a Spark task)


def facts(c: Columns) -> dict:
    """Per (epoch, node): how many accepted operations, the first completion (time, op index,
    its invoke time), the last invoke of a send or drain (time, op index, its completion time,
    its invoke's index; None without one) and the last completion (time, op index); how many
    accepted operations name no node; the epochs' starts."""
    out = {"accepted": 0, "unnamed": 0, "tenures": [], "epochs": [int(t) for t in c.fault_from.tolist()]}
    d = c.done
    if not len(d):
        return out
    ok = d.type == c.type.code("ok")
    is_send = d.f == c.f.code("send")
    delivers = np.isin(d.f, [c.f.code("receive"), c.f.code("drain")]) & c.has_pos[d.rows]
    accepted = ok & (is_send | delivers)
    node = c.node.codes[d.rows]
    named = accepted & (node >= 0)
    out["accepted"], out["unnamed"] = int(accepted.sum()), int((accepted & (node < 0)).sum())
    if not named.any():
        return out
    at = np.flatnonzero(named)
    epoch = np.searchsorted(c.fault_from, d.invoke_time[at], "right") - 1
    n_nodes = c.node.n_values
    key = (epoch + 1) * n_nodes + node[at]
    # a receive may hand over a message the node dispatched before it was invoked (the client's
    # prefetch buffer): its invoke bounds nothing, so it never shows a node serving *after* a time
    bounded = d.f[at] != c.f.code("receive")
    for k in np.unique(key).tolist():
        rows = at[key == k]
        first = rows[np.lexsort((d.index[rows], d.time[rows]))[0]]
        last = rows[np.lexsort((d.index[rows], d.time[rows]))[-1]]
        tenure = {"epoch": int(k // n_nodes) - 1, "node": c.node.value(k % n_nodes), "n": int(len(rows)),
                  "first": [int(d.time[first]), int(d.index[first]), int(d.invoke_time[first])],
                  "last_invoke": None, "last": [int(d.time[last]), int(d.index[last])]}
        since = at[(key == k) & bounded]
        if len(since):
            li = since[np.lexsort((d.invoke_index[since], d.invoke_time[since]))[-1]]
            # its invoke's index goes along: `combine` must break a tie on the invoke time as here
            # (two ops invoked at the same instant complete in either order, in different parts)
            tenure["last_invoke"] = [int(d.invoke_time[li]), int(d.index[li]), int(d.time[li]),
                                     int(d.invoke_index[li])]
        out["tenures"].append(tenure)
    out["tenures"].sort(key=lambda t: (t["epoch"], t["node"]))
    return out


def combine(parts: list[dict]) -> dict:
    """A run's facts from the facts of its parts (any split of the clients): counts add, each
    (epoch, node)'s first / last are the min / max over the parts."""
    merged: dict[tuple, dict] = {}
    for p in parts:
        for t in p["tenures"]:
            k = (t["epoch"], t["node"])
            m = merged.get(k)
            if m is None:
                merged[k] = {**t, "first": list(t["first"]), "last": list(t["last"]),
                             "last_invoke": None if t["last_invoke"] is None else list(t["last_invoke"])}
                continue
            m["n"] += t["n"]
            m["first"] = min(m["first"], list(t["first"]), key=lambda x: (x[0], x[1]))
            mine, theirs = m["last_invoke"], t["last_invoke"]
            # by (invoke time, invoke index), as `facts` picks it: not by the completion's index
            if theirs is not None and (mine is None or (theirs[0], theirs[3]) > (mine[0], mine[3])):
                m["last_invoke"] = list(theirs)
            m["last"] = max(m["last"], list(t["last"]))
    epochs = max((p["epochs"] for p in parts), key=len, default=[])
    return {"accepted": sum(p["accepted"] for p in parts), "unnamed": sum(p["unnamed"] for p in parts),
            "tenures": [merged[k] for k in sorted(merged)], "epochs": epochs}


# ---------------------------------------------------------------------- judging (the driver)


def in_serving_order(facts_: dict) -> list[tuple[int, list[dict]]]:
    """Each epoch's (epoch, node) facts in the order the nodes took up serving: the incumbent (the
    node whose acceptance in an earlier epoch completed last) first, then by first acceptance."""
    by_epoch: dict[int, list[dict]] = {}
    for t in facts_["tenures"]:
        by_epoch.setdefault(t["epoch"], []).append(t)
    out = []
    for epoch, tenures in sorted(by_epoch.items()):
        before = [t for t in facts_["tenures"] if t["epoch"] < epoch]
        incumbent = max(before, key=lambda t: t["last"])["node"] if before else None
        out.append((epoch, sorted(tenures, key=lambda t: (t["node"] != incumbent, t["first"][0], t["first"][1]))))
    return out


def handovers(facts_: dict) -> int:
    """How many times the serving node changed, epoch after epoch."""
    nodes = [t["node"] for _, tenures in in_serving_order(facts_) for t in tenures]
    return sum(1 for a, b in zip(nodes, nodes[1:]) if a != b)


def overlaps(facts_: dict) -> list[dict]:
    """The split-brain windows: per epoch, each pair of nodes where the one serving first (the
    incumbent: the node whose acceptance before the epoch completed last; then by first acceptance
    in the epoch) accepted an operation invoked after the other's first acceptance had completed."""
    found = []
    for epoch, tenures in in_serving_order(facts_):
        for i, earlier in enumerate(tenures):
            for later in tenures[i + 1:]:
                if earlier["last_invoke"] is not None and earlier["last_invoke"][0] > later["first"][0]:
                    found.append({"epoch": epoch, "nodes": [earlier["node"], later["node"]],
                                  "start": later["first"][0], "end": max(earlier["last_invoke"][2], later["first"][0]),
                                  "ops": [later["first"][1], earlier["last_invoke"][1]],
                                  "evidence_invoked": earlier["last_invoke"][0]})
    return found


def _epoch_name(epoch: int, starts: list[int]) -> str:
    if epoch < 0 or epoch >= len(starts):
        return "before any fault"
    return f"after the fault at {starts[epoch] / SECOND:.3f} s"


def judge(key: RunKey, facts_: dict, *, split_brain: bool = False) -> tuple[CheckResult, list[dict]]:
    """One run's result and its anomaly rows. ``split_brain``: the experiment asked for this
    check (its [checkers] setting, the analysis's option). Only then does the result count in
    the run's verdict: a network of brokers serves on every node at once by design, so the
    check is the promise of a master/slave topology, not of every run `brokerconf analyze`
    reads; unasked, the result is shown as not applicable, with what it found."""
    result, rows = _judged(key, facts_, split_brain)
    if not split_brain:
        result.applicable = False
        result.reason = ("not asked for by the experiment ([checkers] split_brain)"
                         + (f"; found: {result.reason}" if result.reason else ""))
    return result, rows


def _judged(key: RunKey, facts_: dict, split_brain: bool) -> tuple[CheckResult, list[dict]]:
    found = overlaps(facts_)
    nodes = sorted({t["node"] for t in facts_["tenures"]})
    windows = [{"nodes": w["nodes"], "start": w["start"], "end": w["end"], "ops": w["ops"],
                "epoch": _epoch_name(w["epoch"], facts_["epochs"])} for w in found]
    stats = {"accepted": facts_["accepted"], "unnamed": facts_["unnamed"], "nodes": nodes,
             "handovers": handovers(facts_), "windows": windows}
    rows = [anomaly(key, NAME, KIND, None, w["ops"],
                    f"nodes {w['nodes'][0]} and {w['nodes'][1]} both accepted operations from "
                    f"{w['start'] / SECOND:.3f} s to {w['end'] / SECOND:.3f} s "
                    f"({_epoch_name(w['epoch'], facts_['epochs'])}): "
                    f"{w['nodes'][1]} had accepted op {w['ops'][0]} by {w['start'] / SECOND:.3f} s, and "
                    f"{w['nodes'][0]} then accepted op {w['ops'][1]}, invoked at {w['evidence_invoked'] / SECOND:.3f} s")
            for w in found]
    if found:
        pairs = sorted({" and ".join(w["nodes"]) for w in found})
        return CheckResult(NAME, *key, INVALID, f"{len(found)} overlapping windows: nodes {', '.join(pairs)} "
                                                 "accepted operations at the same time", stats=stats), rows
    if not facts_["accepted"]:
        return CheckResult(NAME, *key, UNKNOWN if split_brain else VALID,
                           "no send or delivery was accepted: nothing shows who served",
                           applicable=split_brain, stats=stats), rows
    if not nodes:
        return CheckResult(NAME, *key, UNKNOWN, f"none of the {facts_['accepted']} accepted operations names the node "
                           "that served it (a history from before issue 18?)", applicable=split_brain,
                           stats=stats), rows
    if facts_["unnamed"]:
        return CheckResult(NAME, *key, UNKNOWN, f"{facts_['unnamed']} of {facts_['accepted']} accepted operations name "
                           "no node: an overlap among them cannot be ruled out", stats=stats), rows
    if len(nodes) == 1:
        return CheckResult(NAME, *key, VALID, f"node {nodes[0]} served every accepted operation",
                           applicable=split_brain, stats=stats), rows
    return CheckResult(NAME, *key, VALID, f"nodes {', '.join(nodes)} served in turn; every switch was clean",
                       stats=stats), rows


def check_split_brain(history: Iterable[dict] | Columns, *, split_brain: bool = True) -> CheckResult:
    """The result for one run's events (`brokerconf chaos run`, tests): the same facts and judge
    as the Spark pipeline's; the anomaly details are in ``stats["windows"]``."""
    c = history if isinstance(history, Columns) else Columns.of_events(history)
    result, rows = judge(("", ""), facts(c), split_brain=split_brain)
    result.stats["anomalies"] = [r["detail"] for r in rows]
    return result


def _as_registered(key: RunKey, facts_: dict, options: dict):
    return (*judge(key, facts_[NAME], **options), [])


#: runs with its switch as an option: unasked, it shows what it found as not applicable
CHECKER = Checker(NAME, _as_registered, facts=(Facts(NAME, facts, SPLIT_KEY, combine),), switch="split_brain", switch_is_option=True)
