"""chaos/exit_watch.py: a broker that stops although no fault of the experiment stops it ends the
run at once, and the verdict says why (it was seen running 264 s against no broker)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

import chaos
from chaos.exit_watch import ExitWatch, nodes_a_fault_may_stop
from chaos.experiment import run_experiment
from chaos.experiment_file import load_experiment, with_overrides
from reports.check_plan import checker_list_for
from reports.judge import judge_run
from reports.run_record import read_record
from tests.interrupting import command_line, listening

EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"
NODES = ("A", "B", "C")


def section(kind: str, node: str = "A"):
    return SimpleNamespace(kind=kind, node=node)


@pytest.mark.parametrize("sections, may_stop", [
    ([section("partition"), section("latency", "B")], set()),
    ([section("kill", "B")], {"B"}),
    ([section("stop", "C"), section("pause", "A")], {"C"}),
    ([section("kill", "master")], set(NODES)),
    ([section("lock-loss", "A")], set(NODES)),
], ids=["proxy-faults", "kill-B", "stop-C-pause-A", "kill-master", "lock-loss"])
def test_which_nodes_a_fault_may_stop(sections, may_stop):
    assert nodes_a_fault_may_stop(sections, NODES) == may_stop


class FakeNode:
    def __init__(self, running: bool) -> None:
        self.running = running

    def log_tail(self, lines: int = 80) -> str:
        return "AMQ221002: stopped"


def test_the_watch_names_a_watched_node_that_stopped_and_ignores_the_others():
    nodes = {"A": FakeNode(True), "B": FakeNode(False)}
    assert ExitWatch(nodes, {"A"}, every_s=0).stopped() is None  # B may be stopped by a fault
    said = ExitWatch(nodes, {"A", "B"}, every_s=0).stopped()
    assert said is not None and said.startswith("node B stopped on its own") and "AMQ221002" in said


def _kill_the_broker_once_it_listens(killed: list[float]) -> None:
    """The reference broker process the experiment launched (a child of this process), SIGKILLed
    by its PID once it listens, as a broker that dies by itself would go."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for proc in psutil.Process(os.getpid()).children(recursive=True):
            try:
                if "reference_broker" in command_line(proc) and listening(proc):
                    time.sleep(2.0)  # the workload is running by then
                    proc.kill()
                    killed.append(time.monotonic())
                    return
            except psutil.Error:
                continue
        time.sleep(0.1)


@pytest.mark.slow
def test_a_broker_that_dies_without_a_fault_ends_the_run_with_an_unknown_verdict(tmp_path):
    # Plain clients, not failover: a failover client blocked reconnecting cannot be stopped from
    # outside, so the workload's stop would wait out its join budget (up to 60 s) after the watch
    # ended the run; the point here is the watch, not that budget.
    exp = with_overrides(load_experiment(EXPERIMENTS / "client-partition.toml"), duration_s=60,
                         target="reference:process", settings=["target.failover=false"])
    killed: list[float] = []
    killer = threading.Thread(target=_kill_the_broker_once_it_listens, args=(killed,), daemon=True)
    killer.start()
    started = time.monotonic()
    result = run_experiment(exp, tmp_path, progress=lambda line: None,
                            checkers=checker_list_for(exp.model_dump(mode="json")))
    killer.join(5)
    assert killed, "setup: the reference broker process was never seen listening, so nothing was killed"
    # ended by the watch, not by the 60 s duration (the check runs every second)
    assert result.seconds < 20, f"the run went on for {result.seconds} s after its broker died"
    assert time.monotonic() - started < 60
    assert len(result.deployment_errors) == 1 and "node A stopped on its own" in result.deployment_errors[0], \
        result.deployment_errors
    end = read_record(tmp_path / "history.jsonl").run_end
    assert end["deployment_errors"] == result.deployment_errors
    verdict = judge_run(tmp_path)
    assert verdict["valid"] == "unknown", verdict["summary"]
    assert "stopped on its own" in verdict["checks"]["deployment"]["reason"]
