"""Event-loop lag gauge: how late the loop runs a timer, which is how long any client may wait
for the broker to look at its socket. A task sleeps `INTERVAL` seconds over and over; the time
it wakes past that is the lag. The HTTP statistics (`/health`, `/stats`) show the last value and
the largest over the last `WINDOW` seconds and since start, so a soak run can watch it from
outside (`brokerconf bench soak`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

INTERVAL = 0.1  # seconds between probes: lag below this resolution reads as about zero
WINDOW = 10.0  # seconds the recent maximum covers


class LoopLag:
    def __init__(self, interval: float = INTERVAL, window: float = WINDOW) -> None:
        self.interval = interval
        self.window = window
        self.last_ms = 0.0
        self.max_ms = 0.0
        self.samples = 0
        self._recent: deque[tuple[float, float]] = deque()  # (monotonic time, lag ms), one window

    def record(self, now: float, lag_ms: float) -> None:
        self.last_ms = lag_ms
        self.max_ms = max(self.max_ms, lag_ms)
        self.samples += 1
        recent = self._recent
        recent.append((now, lag_ms))
        while recent and recent[0][0] < now - self.window:
            recent.popleft()

    async def run(self) -> None:
        interval = self.interval
        while True:
            started = time.monotonic()
            await asyncio.sleep(interval)
            now = time.monotonic()
            self.record(now, max(0.0, (now - started - interval) * 1000))

    def snapshot(self) -> dict:
        recent_max = max((lag for _, lag in self._recent), default=0.0)
        return {
            "lag_ms": round(self.last_ms, 3),
            "lag_max_recent_ms": round(recent_max, 3),
            "recent_window_s": self.window,
            "lag_max_ms": round(self.max_ms, 3),
            "samples": self.samples,
        }
