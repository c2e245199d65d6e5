"""The main job's clock: each stage's wall time, and the lines and figures that show them
(printed at the end of `brokerconf run`, kept in results.json and the report's "Time" section)."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager


def setup_seconds_from_env() -> float | None:
    """The set-up's wall time, when scripts/main.sh measured it (BROKERCONF_SETUP_SECONDS)."""
    text = os.environ.get("BROKERCONF_SETUP_SECONDS", "")
    try:
        return float(text) if text else None
    except ValueError:
        return None


class StageClock:
    """Each stage's wall time, in the order they ran (the set-up's, measured by scripts/main.sh
    before this process started, first)."""

    def __init__(self, setup_seconds: float | None = None) -> None:
        self.stages: list[tuple[str, float]] = []
        self.setup = setup_seconds or 0.0
        if setup_seconds is not None:
            self.stages.append(("set-up (scripts/bootstrap.sh)", setup_seconds))

    def add(self, name: str, seconds: float) -> None:
        self.stages.append((name, seconds))

    @contextmanager
    def timed(self, name: str):
        began = time.monotonic()
        try:
            yield
        finally:
            self.stages.append((name, time.monotonic() - began))

    def to_json(self) -> list[dict]:
        return [{"stage": name, "seconds": round(seconds, 1)} for name, seconds in self.stages]


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} m {seconds % 60:04.1f} s"


def format_times(times: dict) -> list[str]:
    """The end-of-run lines: each stage's wall time and the run's (stages that ran side by side
    overlap, so the total is measured, not summed), then each target's (targets overlap on the
    workers: its wall time runs from its first test's start to its last's end; its test time is
    the sum of its tests' times; its CPU, where recorded, the sum of its tests' CPU seconds)."""
    lines = ["wall time by stage:"]
    for entry in times["stages"]:
        lines.append(f"  {entry['stage']:<40} {_minutes(entry['seconds'])}")
    lines.append(f"  {'total (set-up included)':<40} {_minutes(times['total_seconds'])}")
    if times.get("targets"):
        lines.append(f"conformance suites by target ({times.get('workers', 1)} workers):")
        for target, span in times["targets"].items():
            cpu = f", CPU {_minutes(span['cpu_seconds'])}" if "cpu_seconds" in span else ""
            lines.append(f"  {target:<40} wall {_minutes(span['wall_seconds'])}, tests {_minutes(span['test_seconds'])}{cpu}")
    speed = times.get("machine_speed") or {}
    if "start_seconds" in speed:  # brokerconf/machine_speed.py
        end = f", at the end {speed['end_seconds']:.2f} s" if "end_seconds" in speed else ""
        lines.append(f"machine speed (CPU time of a fixed piece of work; more is slower): at the start "
                     f"{speed['start_seconds']:.2f} s{end}")
    return lines
