"""How late this process's threads wake up, measured while a timing check runs (not a suite).

A client that runs inside the test process (brokerconf's own failover client) sleeps its reconnect
waits on this process's threads: when the machine or the interpreter keeps them from running, its
attempts come late through no decision of its own. `SchedulingLag` measures exactly that, beside
the check: a thread sleeps `PERIOD` again and again and keeps the largest overshoot (wake-up later
than asked), which a too-long check adds to its margin. A client that really waits too long is
still caught: its excess shows on a quiet machine, where the lag is a few milliseconds.
"""

from __future__ import annotations

import threading
import time

#: how often the probe wakes: short enough to see a stall of tens of milliseconds
PERIOD = 0.01


class SchedulingLag:
    """Context manager: ``max_ms`` is the largest wake-up delay of this process seen inside it."""

    def __init__(self, period: float = PERIOD) -> None:
        self.period = period
        self.max_ms = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduling-lag", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            asked = time.monotonic()
            time.sleep(self.period)
            late = (time.monotonic() - asked - self.period) * 1000
            self.max_ms = max(self.max_ms, late)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the probe (also when it never started)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(1.0)

    def __enter__(self) -> "SchedulingLag":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
