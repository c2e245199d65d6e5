"""The history of a chaos run: one JSON object per line, like Jepsen's (see DESIGN.md, "History
format", and REFERENCES.md, "Jepsen").

Every operation is an ``invoke`` followed by exactly one completion: ``ok`` (it took effect),
``fail`` (it did not) or ``info`` (the outcome is unknown, e.g. a send whose receipt never came).
A process whose operation ended in ``info`` may still have it in flight, so it never invokes
again: the workload carries on under a new process id, as Jepsen does. Nemesis events are
``info`` lines with ``process: "nemesis"``.

Harness records make a history self-contained: what a checker needs that no client or nemesis
operation shows travels in the file, so a history copied anywhere (alone, onto a cluster) is
judged as it was beside its run directory. They are ``info`` lines of the harness's own process,
``process: "harness"`` (Jepsen keeps the test map beside the history; here it goes in it), never
invoked or completed, and a checker of operations skips them. Each ``f`` is one record
(chaos/experiment.py writes them):

* ``experiment`` (the first line): ``{"format": 1, "experiment": {...}}``, the experiment file's
  settings as run, command-line overrides applied (``checkers.duplicates_allowed``,
  ``checkers.max_downtime_s``, the workload, the nemesis entries, the target..., and ``seed``,
  the one the schedule was drawn from: chaos/schedule.py), and ``"checkers"``: the run's checker
  list, ``{"format": 1, "checks": [{"name", "options"}...], "skipped": {name: why}}``, planned by
  the caller when the run started (reports/checker_list.py; absent in histories written before);
* ``broker-counters`` (after the drain, before the subscriptions close; topic workloads):
  ``{"destination": "topic://...", "subscription_discards": [3, 0] | null, "error": "..."?}``,
  the broker's discarded counter of every subscription on the destination (null: not readable
  on this target);
* ``cluster-held`` (after each round of a cluster's drain): ``{"destination": "queue://...",
  "held": {"A": {"queue": 0, "forwarding": 540}, "B": {...}}, "round": 1}``, what each node still
  held then: messages of the destination's queue, and messages on their way to another node
  (``forwarding``: an Artemis store-and-forward queue; null when the launcher cannot tell; a node
  that could not be asked has ``"error"`` instead);
* ``run-end`` (the last line): the run's outcome as the harness saw it, ``{"seconds",
  "sent_ok", "received_ok", "drained", "faults", "topology", "slow_subscribers": [0, ...],
  "nemesis_errors": [...], "deployment_errors": [...] (a node that stopped on its own,
  chaos/exit_watch.py), "workload_errors": [...], "bridge_establishments",
  "transport_events"}``. A history without it ended before the harness finished the run.

Histories written before these records existed have none; readers judge them with default
settings and call ``unknown`` what needs the missing data, saying so (reports/judge.py).

Each line goes to the file with one ``write(2)`` on an ``O_APPEND`` descriptor before the call
returns: there is no user-space buffer, so a harness killed with SIGKILL loses no line whose call
returned (``flush()`` exists for callers that also want ``fsync``). The line being written when
the kill came may be cut short: Linux copies a write into the page cache page by page and stops
between pages once a fatal signal is pending. Measured here (150 kills of a writer of 450-byte
lines): 2 files ended in an unterminated part-line, both cut at a multiple of 4096 bytes. So a
killed writer can leave one unterminated last line, whose call never returned; readers drop it
with ``tolerate_torn_tail``. A *terminated* bad line is never a kill's trace and always raises.
The lock is held only for that one write, so recording stays cheap for the workload threads.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

OP_TYPES = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"
#: the harness's own process: its records carry what a checker needs beyond the operations
HARNESS = "harness"
#: the harness records (module docstring), and the format of their values
HARNESS_EXPERIMENT, HARNESS_BROKER_COUNTERS, HARNESS_RUN_END = "experiment", "broker-counters", "run-end"
HARNESS_CLUSTER_HELD = "cluster-held"
HARNESS_RECORDS = (HARNESS_EXPERIMENT, HARNESS_BROKER_COUNTERS, HARNESS_CLUSTER_HELD, HARNESS_RUN_END)
HARNESS_FORMAT = 1
REQUIRED_FIELDS = ("index", "time", "process", "type", "f")


class HistoryError(Exception):
    """A history was used against its rules (a retired process invoked again, an operation
    completed twice); the message names the process and operation."""


class HistoryFormatError(ValueError):
    """A history file line is not a valid operation; the message names file and line number."""


@dataclass
class Op:
    """A handle on an invoked operation, to complete with `History.ok/fail/info`."""

    process: int | str
    f: str
    value: Any
    index: int
    time: int
    node: str | None = None
    completed: str | None = field(default=None, repr=False)


def message_value(id: str, producer: int, seq: int, destination: str, group: str | None = None,
                  **extra: Any) -> dict:
    """The value of a message operation: its unique id, producer, per-producer sequence number,
    destination and group (only when there is one)."""
    value: dict[str, Any] = {"id": id, "producer": producer, "seq": seq, "destination": destination}
    if group is not None:
        value["group"] = group
    value.update(extra)
    return value


class History:
    """An append-only history file for one run.

    ``run``, ``target`` and ``node`` go on every line (``node`` may be overridden per
    operation). ``time`` is nanoseconds since ``start_ns`` (a `time.monotonic_ns()` reading;
    pass the same one to several histories of one run so their clocks agree).
    """

    def __init__(self, path: str | os.PathLike, *, run: str, target: str | None = None,
                 node: str | None = None, start_ns: int | None = None, fsync: bool = False) -> None:
        self.path = Path(path)
        self.run = run
        self.target = target
        self.node = node
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.path.stat().st_size > 0:
            raise HistoryError(f"history file {self.path} already has content: one file per run; "
                               "choose a new path (or delete the old one)")
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._index = 0
        self._pending: dict[int | str, Op] = {}
        self._retired: set[int | str] = set()

    # ------------------------------------------------------------------ low level

    def now(self) -> int:
        """Nanoseconds since the run started (the ``time`` field)."""
        return time.monotonic_ns() - self.start_ns

    def append(self, process: int | str, type: str, f: str, value: Any = None, *,
               error: str | None = None, node: str | None = None, **extra: Any) -> dict:
        """Write one event line and return it. Prefer invoke/ok/fail/info, which keep the
        invoke -> completion pairing; this is for events without a pair."""
        if type not in OP_TYPES:
            raise ValueError(f"operation type {type!r} is not one of {OP_TYPES}")
        with self._lock:
            return self._write(process, type, f, value, error, node, extra)

    def _write(self, process, type, f, value, error, node, extra) -> dict:
        # Called with the lock held: index order is file order.
        if self._fd is None:
            raise HistoryError(f"history {self.path} is closed; nothing more can be recorded")
        event: dict[str, Any] = {"index": self._index, "time": self.now(), "process": process, "type": type,
                                 "f": f, "value": value, "target": self.target,
                                 "node": node if node is not None else self.node, "run": self.run}
        if error is not None:
            event["error"] = error
        event.update(extra)
        # default=str: an odd value (bytes, an exception) must never stop the workload.
        data = (json.dumps(event, default=str, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        if self.fsync:
            os.fsync(self._fd)
        self._index += 1
        return event

    def flush(self) -> None:
        """Lines are already in the file when append returns; this also forces them to disk."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ operations

    def invoke(self, process: int | str, f: str, value: Any = None, *, node: str | None = None,
               **extra: Any) -> Op:
        """Record that ``process`` starts ``f``; returns the handle to complete."""
        with self._lock:
            if process in self._retired:
                raise HistoryError(
                    f"process {process} ended an operation in 'info' (outcome unknown) and may still have "
                    f"it in flight, so it cannot invoke {f!r}: continue under a new process id")
            if process in self._pending:
                pending = self._pending[process]
                raise HistoryError(f"process {process} invoked {f!r} while its {pending.f!r} (index "
                                   f"{pending.index}) is still open: complete that one first")
            event = self._write(process, "invoke", f, value, None, node, extra)
            op = Op(process, f, value, event["index"], event["time"], node)
            self._pending[process] = op
            return op

    def _complete(self, op: Op, type: str, value: Any, error: str | None, extra: dict,
                  node: str | None = None) -> dict:
        with self._lock:
            if op.completed is not None or self._pending.get(op.process) is not op:
                raise HistoryError(f"operation {op.f!r} of process {op.process} (index {op.index}) was "
                                   f"already completed ({op.completed or 'by another handle'}); "
                                   "complete each invoke exactly once")
            event = self._write(op.process, type, op.f, value, error, node if node is not None else op.node, extra)
            op.completed = type
            del self._pending[op.process]
            if type == "info":
                self._retired.add(op.process)
            return event

    # ``node`` on a completion: the node that served the operation, when the caller knows it
    # (the workloads: the endpoint their client is connected to, by name; the split-brain
    # checker reads it, reports/checkers/split_brain.py); else the invoke's node.

    def ok(self, op: Op, value: Any = None, *, node: str | None = None, **extra: Any) -> dict:
        """It took effect. ``value`` defaults to the invoked value."""
        return self._complete(op, "ok", op.value if value is None else value, None, extra, node)

    def fail(self, op: Op, error: str, value: Any = None, *, node: str | None = None, **extra: Any) -> dict:
        """It certainly did not take effect."""
        return self._complete(op, "fail", op.value if value is None else value, str(error), extra, node)

    def info(self, op: Op, error: str, value: Any = None, *, node: str | None = None, **extra: Any) -> dict:
        """The outcome is unknown; the process retires."""
        return self._complete(op, "info", op.value if value is None else value, str(error), extra, node)

    def retired(self, process: int | str) -> bool:
        with self._lock:
            return process in self._retired

    @property
    def pending(self) -> list[Op]:
        """Operations invoked and not yet completed."""
        with self._lock:
            return list(self._pending.values())

    # ------------------------------------------------------------------ nemesis

    def nemesis(self, f: str, value: Any = None, *, error: str | None = None,
                node: str | None = None) -> dict:
        """A nemesis event (always ``info``, ``process: "nemesis"``, as in Jepsen). Nemeses record
        one at the start and one at the end of each step; see chaos.nemesis."""
        return self.append(NEMESIS, "info", f, value, error=error, node=node)

    # ------------------------------------------------------------------ harness

    def harness(self, f: str, value: Any) -> dict:
        """A harness record (module docstring): an ``info`` line of ``process: "harness"``."""
        if f not in HARNESS_RECORDS:
            raise ValueError(f"harness record {f!r} is not one of {', '.join(HARNESS_RECORDS)}")
        return self.append(HARNESS, "info", f, value)


def is_harness(event: dict) -> bool:
    return event.get("process") == HARNESS


def harness_records(events: Iterable[dict]) -> dict[str, Any]:
    """The harness records of a history by ``f`` (their values); {} for a history without any."""
    return {e["f"]: e.get("value") for e in events if is_harness(e)}


# ---------------------------------------------------------------------- reading


def _check(event: Any, where: str) -> dict:
    if not isinstance(event, dict):
        raise HistoryFormatError(f"{where}: expected a JSON object, got {type(event).__name__}")
    missing = [k for k in REQUIRED_FIELDS if k not in event]
    if missing:
        raise HistoryFormatError(f"{where}: missing field(s) {', '.join(missing)}")
    if event["type"] not in OP_TYPES:
        raise HistoryFormatError(f"{where}: type {event['type']!r} is not one of {', '.join(OP_TYPES)}")
    if not isinstance(event["index"], int) or not isinstance(event["time"], int):
        raise HistoryFormatError(f"{where}: index and time must be integers")
    process = event["process"]
    if not (isinstance(process, int) or process in (NEMESIS, HARNESS)):
        raise HistoryFormatError(f"{where}: process must be an integer, \"nemesis\" or \"harness\", not {process!r}")
    return event


def iter_history(path: str | os.PathLike, *, tolerate_torn_tail: bool = False) -> Iterator[dict]:
    """The events of a history file in order. A malformed line raises HistoryFormatError naming
    the file and line. ``tolerate_torn_tail`` drops an unterminated, unparsable last line (a
    writer killed mid-line: see the module's note on SIGKILL)."""
    path = Path(path)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    last = len(lines)
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline
        last = None  # every line is terminated
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            event = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if tolerate_torn_tail and number == last:
                return
            raise HistoryFormatError(f"{where}: not valid JSON ({exc}); the line starts {raw[:60]!r}") from None
        yield _check(event, where)


def read_history(path: str | os.PathLike, *, tolerate_torn_tail: bool = False) -> list[dict]:
    """All events of a history file (see `iter_history`)."""
    return list(iter_history(path, tolerate_torn_tail=tolerate_torn_tail))
