"""The event-loop lag gauge (reference_broker/loop_lag.py) the HTTP statistics show and
`brokerconf bench soak` watches."""

from __future__ import annotations

import asyncio
import time

from reference_broker.loop_lag import LoopLag


def test_recent_maximum_forgets_what_left_the_window():
    lag = LoopLag(interval=0.1, window=10)
    lag.record(100.0, 250.0)
    lag.record(105.0, 3.0)
    assert lag.snapshot()["lag_max_recent_ms"] == 250.0
    lag.record(111.0, 1.0)
    snap = lag.snapshot()
    assert snap["lag_max_recent_ms"] == 3.0, "a probe older than the window still counted"
    assert snap["lag_max_ms"] == 250.0 and snap["lag_ms"] == 1.0 and snap["samples"] == 3


def test_a_blocked_loop_shows_as_lag():
    """A callback that holds the loop for 0.3 s: the next probe wakes at least that late."""

    async def scenario() -> dict:
        lag = LoopLag(interval=0.02)
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0.1)
        time.sleep(0.3)  # the loop is held here, as by a selector stuck in a regular expression
        await asyncio.sleep(0.1)
        task.cancel()
        return lag.snapshot()

    snap = asyncio.run(scenario())
    assert snap["samples"] >= 3
    assert snap["lag_max_ms"] >= 250, snap


def test_health_shows_the_running_brokers_loop_lag():
    """/health carries the gauge of the broker's own loop (what `brokerconf bench soak` reads)."""
    import json
    import urllib.request

    from conformance.targets.reference.process import ReferenceBrokerProcess
    from machinery.waiting import poll

    with ReferenceBrokerProcess(http=True) as broker:
        def health() -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/health", timeout=5) as response:
                return json.loads(response.read())

        answer = poll(health, lambda h: h["loop"]["samples"] >= 3, timeout=10)
        assert answer["loop"]["samples"] >= 3, f"the loop-lag task is not probing: {answer}"
        assert answer["status"] == "ok" and answer["connections"] == 0
        assert set(answer["loop"]) >= {"lag_ms", "lag_max_recent_ms", "lag_max_ms", "samples"}
        assert answer["loop"]["lag_ms"] >= 0
