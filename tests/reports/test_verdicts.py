"""Merging verdicts (no Spark): false beats unknown beats true, and skipped lines make unknown."""

from __future__ import annotations

import pytest

from reports.checkers.history import fault_windows, merge_intervals
from reports.checkers.result import CheckResult
from reports.pipeline.load import Malformed
from reports.pipeline.verdicts import apply_skipped_lines, merge, run_verdicts


@pytest.mark.parametrize("values, merged", [
    ([True, True], True),
    ([True, "unknown"], "unknown"),
    (["unknown", False, True], False),
    ([False, True], False),
    ([], "unknown"),
])
def test_merge_false_beats_unknown_beats_true(values, merged):
    assert merge(values) == merged


def test_merge_rejects_other_values():
    with pytest.raises(ValueError, match="true, false or 'unknown'"):
        merge([True, "maybe"])


def test_not_applicable_checks_left_out_of_the_run_verdict():
    results = [CheckResult("total_queue", "r", "t", True),
               CheckResult("fifo", "r", "t", True, "2 consumers", applicable=False),
               CheckResult("groups", "r", "t", "unknown", applicable=False)]
    [verdict] = run_verdicts(results)
    assert verdict["valid"] is True and verdict["not_applicable"] == ["fifo", "groups"]


def test_skipped_lines_turn_false_into_unknown():
    results = [CheckResult("total_queue", "r", "t", False, "1 lost"), CheckResult("total_queue", "other", "t", True)]
    skipped = {"r": [Malformed("/x/history.jsonl", 7, "r", "not a JSON object", "garbage")]}
    apply_skipped_lines(results, skipped)
    verdicts = {v["run"]: v for v in run_verdicts(results, skipped)}
    assert verdicts["r"]["valid"] == "unknown" and "/x/history.jsonl:7" in verdicts["r"]["checks"]["total_queue"]["reason"]
    assert verdicts["r"]["checks"]["total_queue"]["stats"]["valid_without_skipped_lines"] is False
    assert verdicts["other"]["valid"] is True


def test_fault_window_never_healed_lasts_until_the_end():
    steps = [{"f": "kill", "time": 10, "phase": "start"},
             {"f": "kill", "time": 12, "phase": "end", "fault": "down", "started": 10}]
    [window] = fault_windows(steps, run_end=100)
    assert (window.start, window.end, window.open_at_end) == (10, 100, True)


def test_fault_window_from_heal():
    steps = [{"f": "kill", "time": 10, "phase": "end", "fault": "down", "started": 10},
             {"f": "start", "time": 50, "phase": "end",
              "fault_window": [{"fault": "down", "f": "kill", "start": 10, "end": 50}]}]
    [window] = fault_windows(steps, run_end=100)
    assert (window.fault, window.start, window.end, window.open_at_end) == ("down", 10, 50, False)


def test_fault_step_that_failed_opens_no_fault():
    steps = [{"f": "pause", "time": 10, "phase": "end", "fault": "paused", "started": 10,
              "error": "NemesisError: not running"}]
    assert fault_windows(steps, run_end=100) == []


def test_overlapping_faults_merge():
    assert merge_intervals([(5, 9), (1, 3), (2, 4), (9, 12)]) == [(1, 4), (5, 12)]
