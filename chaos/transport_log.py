"""The failover transport's own events for a chaos run, beside its history (``transport.jsonl``).

The history holds operations only (DESIGN.md, "History format"). When a client loses its broker,
what its failover transport did meanwhile (interrupted, resumed on which broker, gave up) is what
tells a client that never tried to reconnect from one that reconnected and was never dispatched
to. The container run of the shared-store experiment could not be told apart from its history
alone: a consumer showed nothing but empty receives after the kill.

One JSON object per line, on the history's clock:
``{"time": ns since the run started, "worker": "consumer-0", "kind": "interrupted|resumed|
switched|failed|warning", "uri": "...", "reason": "...", "attempts": N}``. ``kind`` and the
other fields are `conformance.clients.failover.TransportEvent`'s. Like the history, each line is
written and flushed as it happens, so a crashed run keeps what it saw.
"""
from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Callable

#: worker threads are named ``bc-<workload kind>-<role>-<index>`` (chaos/workloads, ``_spawn``)
_WORKER_THREAD_PREFIX = "bc-"


def worker_of_thread(thread_name: str) -> str:
    """``bc-grouped-queue-consumer-0`` -> ``consumer-0``. The only clients an experiment makes
    outside its worker threads are the final drain's, on the caller's thread: ``drain``."""
    if thread_name.startswith(_WORKER_THREAD_PREFIX) and thread_name.count("-") >= 3:
        return "-".join(thread_name.rsplit("-", 2)[-2:])
    return "drain"


class TransportLog:
    """Appends transport events of many clients to one file; thread-safe (events come from every
    client's monitor thread)."""

    def __init__(self, path: str | Path, *, start_ns: int) -> None:
        self.path = Path(path)
        self.start_ns = start_ns
        self._lock = threading.Lock()
        self._counts: dict[str, Counter] = {}
        self._file = open(self.path, "a", encoding="utf-8")

    def listener(self, worker: str) -> Callable[[object], None]:
        """The ``listener=`` for one client of ``worker`` (`connect_failover`)."""
        return lambda event: self.record(worker, event)

    def record(self, worker: str, event) -> None:
        line = {"time": round(event.time * 1e9) - self.start_ns, "worker": worker, "kind": event.kind,
                "uri": event.uri, "reason": event.reason, "attempts": event.attempts}
        data = json.dumps(line, default=str, separators=(",", ":")) + "\n"
        with self._lock:
            self._counts.setdefault(worker, Counter())[event.kind] += 1
            if self._file.closed:
                return  # a client's monitor still reporting after the run ended: nothing to keep it for
            self._file.write(data)
            self._file.flush()

    def summary(self) -> dict[str, dict[str, int]]:
        """worker -> {event kind: how many}, workers and kinds sorted."""
        with self._lock:
            return {worker: dict(sorted(counts.items())) for worker, counts in sorted(self._counts.items())}

    def close(self) -> None:
        with self._lock:
            self._file.close()
