"""One small synthetic history per experiment file, built from the file's parsed header alone
(its workload, nemeses and checkers), for tests that compare the judges without a real run.

A real short run of every file launches JVMs (ActiveMQ, Artemis, PostgreSQL, FUSE mounts) and
takes minutes; the judges only read the history, so a history of the file's *shape* exercises the
same plan and dispatch: the experiment record as `chaos run` writes it, the workload's operations
(sends, receives and acks, a drain; subscriptions on a topic), one step per [[nemesis]] entry and
the run-end record. On the single-broker and shared-store files one acknowledged send is never
delivered (a loss the total queue must find), on the others every message arrives, and one
subscriber of the topic run misses a message: so the verdicts compared are not all alike.
"""

from __future__ import annotations

from pathlib import Path

import chaos
from chaos.experiment_file import (ClusterTopology, Experiment, NetworkTopology, SharedStoreTopology, SingleTopology,
                                   load_experiment)
from chaos.history import History

EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"
#: the per-node nemeses a node field names (a shared-store "master" is node A here)
_PROCESS = ("kill", "pause", "stop")


def experiment_files() -> list[Path]:
    return sorted(EXPERIMENTS.glob("*.toml"))


def synthetic_history(exp: Experiment, path: Path, *, checkers: dict | None = None) -> Path:
    """A history of ``exp``'s shape at ``path``; ``checkers``: the checker list to write in its
    header (what `brokerconf chaos run` writes), None for a history written before it."""
    run = f"{exp.name}-20260101T000000Z"
    header = {"format": 1, "experiment": exp.model_dump(mode="json")}
    if checkers is not None:
        header["checkers"] = checkers
    path.parent.mkdir(parents=True, exist_ok=True)
    w = exp.workload
    producer_node, consumer_node = _client_nodes(exp.topology)
    with History(path, run=run, target=exp.target.name) as h:
        h.harness("experiment", header)
        faults = 0
        if w.kind == "topic":
            _topic(h, run, w)
        else:
            faults = _queue(h, run, exp, producer_node, consumer_node)
        h.harness("run-end", {"seconds": 1.0, "sent_ok": 4, "received_ok": 2, "drained": 1, "faults": faults,
                              "topology": exp.topology.kind, "broker_discards": None, "slow_subscribers": [],
                              "nemesis_errors": [], "workload_errors": [], "bridge_establishments": None,
                              "transport_events": None})
    return path


def _client_nodes(topology) -> tuple[str, str]:
    """Where the run's producers and consumers connect: a network's and a cluster's own nodes
    (each shape has only its own keys), else node A."""
    if isinstance(topology, NetworkTopology):
        return topology.producer_node, topology.consumer_node
    if isinstance(topology, ClusterTopology):
        return topology.producer_node, (topology.consumer_nodes or ["B"])[0]
    return "A", "A"


def _message(run: str, producer: int, seq: int, destination: str, group: str | None) -> dict:
    m = {"id": f"{run}-{producer}-{seq}", "producer": producer, "seq": seq, "destination": destination}
    if group is not None:
        m["group"] = group
    return m


def _queue(h: History, run: str, exp: Experiment, producer_node: str, consumer_node: str) -> int:
    w = exp.workload
    group = w.groups[0] if w.kind == "grouped" else None
    messages = [_message(run, 0, seq, w.destination, group) for seq in range(4)]
    consumer = 1
    op = h.invoke(consumer, "connect", node=consumer_node)
    h.ok(op, node=consumer_node)
    for m in messages[:2]:
        op = h.invoke(0, "send", m, node=producer_node)
        h.ok(op, node=producer_node)
    op = h.invoke(consumer, "receive", node=consumer_node)
    h.ok(op, {**messages[0], "consumer": 0}, node=consumer_node)
    op = h.invoke(consumer, "ack", {**messages[0], "consumer": 0}, node=consumer_node)
    h.ok(op, node=consumer_node)
    faults = _nemeses(h, exp)
    for m in messages[2:]:
        op = h.invoke(0, "send", m, node=producer_node)
        h.ok(op, node=producer_node)
    op = h.invoke(consumer, "receive", node=consumer_node)
    h.ok(op, {**messages[1], "consumer": 0}, node=consumer_node)
    op = h.invoke(consumer, "ack", {**messages[1], "consumer": 0}, node=consumer_node)
    h.ok(op, node=consumer_node)
    # the drain takes what is left; on a single broker or a shared store, not the last send: lost
    lost = 1 if isinstance(exp.topology, (SingleTopology, SharedStoreTopology)) else 0
    op = h.invoke(2, "drain", {"consumer": -1}, node=consumer_node)
    h.ok(op, [{**m, "consumer": -1} for m in messages[2:len(messages) - lost]], node=consumer_node)
    return faults


def _nemeses(h: History, exp: Experiment) -> int:
    """One fault and its heal per [[nemesis]] entry, as the nemeses write them."""
    for entry in exp.nemesis:
        node = "A" if entry.node == "master" else entry.node
        if entry.kind in _PROCESS:
            h.nemesis(entry.kind, {"nemesis": "process", "phase": "start"}, node=node)
            h.nemesis(entry.kind, {"nemesis": "process", "phase": "end", "fault": "down"}, node=node)
            started = h.now()
            h.nemesis("start", {"nemesis": "process", "phase": "start"}, node=node)
            h.nemesis("start", {"nemesis": "process", "phase": "end", "fault_window": [
                {"fault": "down", "f": entry.kind, "start": started, "end": h.now()}]}, node=node)
        else:
            f = entry.kind if entry.kind != "lock-loss" else "lock-loss"
            h.nemesis(f, {"nemesis": "proxy", "phase": "start"}, node=node)
            h.nemesis(f, {"nemesis": "proxy", "phase": "end"}, node=node)
    return len(exp.nemesis)


def _topic(h: History, run: str, w) -> None:
    subscribers = range(w.subscribers)
    for s in subscribers:
        op = h.invoke(10 + s, "subscribe", {"subscriber": s, "destination": w.destination,
                                            "slow": s < w.slow_subscribers})
        h.ok(op, {"subscriber": s, "destination": w.destination})
    messages = [_message(run, 0, seq, w.destination, None) for seq in range(3)]
    for m in messages:
        op = h.invoke(0, "send", m)
        h.ok(op)
    for s in subscribers:
        # the last subscriber misses the last message: a gap the fan-out check must judge
        got = messages if s < w.subscribers - 1 else messages[:-1]
        for m in got:
            op = h.invoke(10 + s, "receive")
            h.ok(op, {**m, "subscriber": s})


def all_file_histories(root: Path, *, checkers_of=None) -> dict[str, Path]:
    """file stem -> its synthetic history under ``root/<stem>/history.jsonl``; ``checkers_of``:
    experiment -> the checker list to write in the header (None: none written)."""
    out = {}
    for file in experiment_files():
        exp = load_experiment(file)
        out[file.stem] = synthetic_history(exp, root / file.stem / "history.jsonl",
                                           checkers=checkers_of(exp) if checkers_of else None)
    return out
