"""Literal histories for the pipeline tests, written the way chaos/history.py writes them."""

from __future__ import annotations

import json
from pathlib import Path

Q = "queue://q"
MS = 1_000_000


def msg(id: str, *, producer: int = 0, seq: int = 0, dest: str = Q, group: str | None = None, **extra) -> dict:
    value = {"id": id, "producer": producer, "seq": seq, "destination": dest}
    if group is not None:
        value["group"] = group
    value.update(extra)
    return value


class H:
    """A history under construction: each op gets the next index; time advances 1 ms per op
    unless given (``at`` in milliseconds)."""

    def __init__(self, run: str, target: str = "t") -> None:
        self.run, self.target = run, target
        self.lines: list[dict] = []
        self.now = 0

    def op(self, process, type: str, f: str, value=None, *, at: float | None = None, node: str = "A", **extra) -> dict:
        self.now = int(at * MS) if at is not None else self.now + MS
        event = {"index": len(self.lines), "time": self.now, "process": process, "type": type, "f": f,
                 "value": value, "target": self.target, "node": node, "run": self.run, **extra}
        self.lines.append(event)
        return event

    def call(self, process, f: str, value=None, outcome: str = "ok", *, at: float | None = None,
             done: float | None = None, result=None, **kw) -> "H":
        self.op(process, "invoke", f, value, at=at, **kw)
        self.op(process, outcome, f, value if result is None else result, at=done, **kw)
        return self

    def send(self, process, id: str, outcome: str = "ok", **m) -> "H":
        node = m.pop("node", "A")
        return self.call(process, "send", msg(id, **m), outcome, node=node)

    def receive(self, process, id: str, **m) -> "H":
        node = m.pop("node", "A")
        self.op(process, "invoke", "receive", None, node=node)
        self.op(process, "ok", "receive", msg(id, **m), node=node)
        return self

    def drain(self, process, messages: list[dict]) -> "H":
        return self.call(process, "drain", None, result=messages)

    def nemesis(self, f: str, phase: str, *, at: float | None = None, **value) -> "H":
        self.op("nemesis", "info", f, {"nemesis": "process", "phase": phase, **value}, at=at)
        return self

    def kill(self, *, at: float) -> "H":
        """A kill step starting at ``at`` ms (the fault "down" starts then)."""
        self.nemesis("kill", "start", at=at)
        return self.nemesis("kill", "end", at=at + 1, fault="down", started=int(at * MS), ended=int((at + 1) * MS))

    def restart(self, *, at: float, killed_at: float) -> "H":
        self.nemesis("start", "start", at=at)
        return self.nemesis("start", "end", at=at + 1, started=int(at * MS), ended=int((at + 1) * MS),
                            fault_window=[{"fault": "down", "f": "kill", "start": int(killed_at * MS),
                                           "end": int((at + 1) * MS)}])

    def write(self, directory: Path) -> Path:
        path = Path(directory) / self.run / "history.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in self.lines))
        return path
