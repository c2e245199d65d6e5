"""`DeadlineTimer`: the fault proxy's timers never fire before their deadline.

uvloop's ``call_later`` counts whole milliseconds from a cached loop time and can run a callback
up to ~1.5 ms early (CI saw a 120 ms latency toxic deliver after 119.75 ms). Toxiproxy's toxics
promise at least the configured delay, so every proxy timer goes through `DeadlineTimer`.
"""
from __future__ import annotations

import asyncio
import time

from machinery.faultproxy.link import DeadlineTimer
from machinery.faultproxy.server import new_event_loop


class _Handle:
    def cancel(self) -> None:
        pass


class EarlyLoop:
    """A loop stand-in whose timers fire at once, however long they were asked to wait."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.pending: list = []

    def call_later(self, delay, callback):
        self.asked.append(delay)
        self.pending.append(callback)
        return _Handle()

    def fire_all_now(self) -> None:
        while self.pending:
            self.pending.pop(0)()


def test_a_timer_fired_early_rearms_instead_of_calling_back():
    loop = EarlyLoop()
    calls: list[float] = []
    deadline = time.monotonic() + 0.05
    DeadlineTimer(loop, deadline, lambda: calls.append(time.monotonic()))
    loop.pending.pop(0)()  # the loop fires the first timer long before the deadline
    assert calls == [] and len(loop.asked) == 2, "an early wake-up must re-arm, not call back"
    assert 0 < loop.asked[1] <= 0.05
    time.sleep(max(0.0, deadline - time.monotonic()))
    loop.fire_all_now()
    assert len(calls) == 1 and calls[0] >= deadline


def test_a_cancelled_timer_never_calls_back():
    loop = new_event_loop()
    try:
        calls = []
        timer = DeadlineTimer(loop, time.monotonic() + 0.01, lambda: calls.append(1))
        timer.cancel()
        loop.run_until_complete(asyncio.sleep(0.03))
        assert calls == []
    finally:
        loop.close()


def test_callbacks_on_the_proxy_loop_never_run_before_their_deadline():
    # The proxy's own loop (uvloop where installed), deadlines at sub-millisecond offsets so the
    # millisecond rounding of the loop's timers would show.
    loop = new_event_loop()
    try:
        async def one(offset: float) -> tuple[float, float]:
            deadline = time.monotonic() + offset
            done = loop.create_future()
            DeadlineTimer(loop, deadline, lambda: done.set_result(time.monotonic()))
            return deadline, await done

        async def many():
            return await asyncio.gather(*(one(0.001 + 0.00037 * i) for i in range(60)))

        results = loop.run_until_complete(many())
        early = [(d, t) for d, t in results if t < d]
        assert early == []
    finally:
        loop.close()
