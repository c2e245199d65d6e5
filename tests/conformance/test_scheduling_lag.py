"""suites/scheduling_lag.py sees this process's threads woken late: the margin a timing check of an
in-process client adds when the client's own threads could not run."""

from __future__ import annotations

import time

from suites.scheduling_lag import SchedulingLag


def test_a_stall_of_this_process_is_measured():
    with SchedulingLag() as lag:
        time.sleep(0.05)
        # one C call that holds the interpreter lock throughout (sum over a range runs in C, with no
        # bytecode boundary where the interpreter would switch threads): the probe cannot wake in it
        began = time.monotonic()
        sum(range(20_000_000))
        held_ms = (time.monotonic() - began) * 1000
        time.sleep(0.05)
    assert held_ms > 50, f"setup: the call held the interpreter only {held_ms:.0f} ms"
    assert lag.max_ms >= held_ms / 2, f"the probe saw {lag.max_ms:.0f} ms of a {held_ms:.0f} ms stall"


def test_stop_is_safe_before_start():
    lag = SchedulingLag()
    lag.stop()
    assert lag.max_ms == 0.0
