"""File operations with a deadline, for a store whose files may sit on a network file system.

The broker drives its store from the event loop. A write or fsync on a local disk returns in
milliseconds, but on an NFS mount whose server is cut off it blocks in the kernel: until the soft
mount's retransmissions are spent (``timeo`` x ``retrans``, tens of seconds with the A-MQ guide's
options, 3.1) or, on a hard mount, until the link heals. Done on the event loop, that wait stops
the whole broker: it answers no client, keeps its listeners open (clients connect and hang) and
cannot even notice that it lost the store's lock (issue 18).

`BoundedIO.call(operation, what)` runs ``operation`` on one worker thread and waits at most
``timeout_s`` for it, as store/bounded_db.py does for a database call. Past the deadline it raises
`IOStalled` and the executor is *stalled* for good: the thread is still blocked in the kernel and
nothing can wake it (unlike a database socket, a file descriptor has nothing to shut down), so every
later call fails at once, `checkpoint` (called by the operation between system calls) stops an
operation that comes back late from issuing more, and what must happen to the files after the
stuck call returns (closing its descriptors: closing them now could let their numbers be reused
under the still-running call) is queued behind it with `after_stall`. The store that owns the
executor then counts itself failed; nothing it was writing is confirmed to anyone.

One worker for all operations keeps them in the caller's order, and the thread is started once.
The fast path pays two queue hand-offs per flush: 30-50 us here, measured by
benchmarks/journal_io_bench.py (one message per flush, the worst case); the broker flushes once
per network read batch, so per message it is lost in the noise of ``brokerconf bench stomp
--persistent`` (broker CPU per message unchanged).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

__all__ = ["BoundedIO", "IOStalled"]


class IOStalled(Exception):
    """A file operation did not return within the deadline (or an earlier one never did)."""


class BoundedIO:
    """``call(operation, what)`` -> ``operation()``, run on a worker thread within ``timeout_s``."""

    def __init__(self, timeout_s: float, *, name: str = "store-io") -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be above 0, not {timeout_s!r}")
        self.timeout_s = timeout_s
        self.name = name
        #: what the call that did not come back was doing, once one did not
        self.stalled: str | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # outcomes, one per call (calls never overlap: the caller waits). Two SimpleQueues: the
        # hand-off both ways stays in C (an Event's wait allocates a lock per call in Python)
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False

    def call(self, operation: Callable[[], Any], what: str) -> Any:
        """Run ``operation()`` on the worker; its result or its exception. `IOStalled` when it
        did not return within ``timeout_s``, or when an earlier call never did."""
        if self.stalled is not None:
            raise IOStalled(f"{what}: an earlier {self.stalled} has not returned after {self.timeout_s:g} s: "
                            "the file system is not answering")
        if self._closed:
            raise IOStalled(f"{what}: the executor is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put(operation)
        try:
            ok, value = self._results.get(timeout=self.timeout_s)
        except queue.Empty:
            self.stalled = what
            raise IOStalled(f"{what} did not return within {self.timeout_s:g} s: the file system is not answering") \
                from None
        if ok:
            return value
        raise value

    def checkpoint(self) -> None:
        """For an operation between two system calls: stop here if its caller gave up waiting."""
        if self.stalled is not None:
            raise IOStalled(f"{self.stalled} came back after its deadline: nothing more is written")

    def after_stall(self, cleanup: Callable[[], Any]) -> None:
        """Run ``cleanup()`` now, or, when a call is stuck, on the worker once that call returns
        (never while it may still be using what ``cleanup`` releases). Errors are ignored."""
        if self.stalled is None or self._thread is None:
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - best effort, like a close on a failed file
                pass
            return
        self._jobs.put(cleanup)

    def close(self) -> None:
        """Let the worker end (after whatever is queued, a stuck call included); never waits."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            operation = self._jobs.get()
            if operation is None:
                return
            try:
                outcome = (True, operation())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome = (False, exc)
            if self.stalled is None:
                self._results.put(outcome)
