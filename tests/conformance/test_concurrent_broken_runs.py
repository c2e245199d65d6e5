"""`ConcurrentRuns` (tests/conformance/fault_batches.py): the broken suite runs of
test_suite_can_fail.py, several at a time, each made once, and none left running."""

from __future__ import annotations

import time

import pytest

from machinery.waiting import poll
from tests.conformance.fault_batches import ConcurrentRuns

pytestmark = pytest.mark.slow


def test_a_run_asked_for_twice_is_made_once_and_fails_as_a_broken_run_must(tmp_path):
    runs = ConcurrentRuns(tmp_path, parallel=2)
    try:
        runs.submit("test_core_ack.py", "nack_acks_earlier")
        first = runs.result("test_core_ack.py", "nack_acks_earlier")
        assert runs.result("test_core_ack.py", "nack_acks_earlier") is first
        assert first.exit_code == 1, first.output_tail
        assert first.matrix["matrix"]["reference"]["ACK-NACK-1"]["outcome"] == "failed"
        assert [p.name for p in tmp_path.iterdir()] == ["run0-core_ack"]
    finally:
        runs.close()


def test_close_stops_the_runs_still_going_by_their_handles(tmp_path):
    runs = ConcurrentRuns(tmp_path, parallel=1)
    runs.submit("test_networks.py", "static_includes_wait_for_demand")  # minutes when left alone
    runs.submit("test_core_ack.py", "nack_acks_earlier")  # queued behind it: never started
    (proc,) = poll(runs.running, timeout=60, interval=0.1)
    time.sleep(3)  # inside the suite by now: its brokers are up
    started = time.monotonic()
    runs.close()
    assert proc.poll() is not None, "the run still going was not stopped"
    assert time.monotonic() - started < 45
    assert [p.name for p in tmp_path.iterdir()] == ["run0-networks"], "the queued run must not start"
