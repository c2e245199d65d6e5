"""The main job's chaos stage runs its experiments side by side (brokerconf/chaos_stage.py)."""

import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from brokerconf import chaos_stage


@dataclass(frozen=True)
class ScriptRun(chaos_stage.PlannedRun):
    """A planned run whose process is a short script instead of `brokerconf chaos run`."""

    script: str = ""

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.script]


def _run(tmp_path: Path, name: str, script: str) -> ScriptRun:
    return ScriptRun(Path(f"{name}.toml"), None, (), 1.0, name, "reference", tmp_path / name, script=script)


def _writes_verdict(barrier: Path, others: int, name: str) -> str:
    """Marks itself started, waits until ``others`` more have (so it passes only when they run at
    the same time), then writes its verdict into its run directory (the current one's name)."""
    return textwrap.dedent(f"""
        import json, pathlib, sys, time
        barrier = pathlib.Path({str(barrier)!r})
        (barrier / {name!r}).touch()
        deadline = time.monotonic() + 30
        while len(list(barrier.iterdir())) < {others + 1} and time.monotonic() < deadline:
            time.sleep(0.05)
        together = len(list(barrier.iterdir())) >= {others + 1}
        print("progress line of", {name!r})
        pathlib.Path({str(barrier.parent / name)!r}, "verdict.json").write_text(
            json.dumps({{"experiment": {name!r}, "valid": together}}))
    """)


def test_runs_go_side_by_side_and_come_back_in_their_order(tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    names = ["one", "two", "three"]
    runs = [_run(tmp_path, n, _writes_verdict(barrier, len(names) - 1, n)) for n in names]
    lines: list[str] = []
    verdicts = chaos_stage.run_all(runs, parallel=3, progress=lines.append)
    assert [v["experiment"] for v in verdicts] == names
    # each saw the other two started while it waited: they ran at the same time
    assert all(v["valid"] is True for v in verdicts), verdicts
    assert "[one on reference] progress line of one" in lines
    assert (tmp_path / "two" / "console.log").read_text() == "progress line of two\n"


def test_a_run_without_a_verdict_is_unknown_with_its_exit_status_and_last_lines(tmp_path):
    broken = _run(tmp_path, "broken", "import sys; print('could not start the broker'); sys.exit(3)")
    [verdict] = chaos_stage.run_all([broken], parallel=2, progress=lambda line: None)
    assert verdict["valid"] == "unknown"
    assert "exited with 3" in verdict["error"] and "could not start the broker" in verdict["error"]


def test_the_run_command_is_brokerconf_chaos_run_into_its_directory(tmp_path):
    run = chaos_stage.PlannedRun(Path("/x/artemis-nfs-lock-loss.toml"), "artemis:process", ("recovery_s=6",),
                                 20.0, "artemis-nfs-lock-loss", "artemis:process", tmp_path / "r")
    command = run.command()
    assert command[1:5] == ["-m", "brokerconf.cli", "chaos", "run"]
    assert command[command.index("--run-dir") + 1] == str(tmp_path / "r")
    assert command[command.index("--target") + 1] == "artemis:process"
    assert command[command.index("--set") + 1] == "recovery_s=6"
    assert command[command.index("--duration") + 1] == "20"


def test_stage_times_total_is_measured_not_summed_and_each_target_is_shown():
    from brokerconf.stage_times import StageClock, format_times

    clock = StageClock(setup_seconds=30.0)
    clock.add("conformance suites", 540.0)
    clock.add("chaos experiments (beside the suites)", 200.0)
    lines = format_times({"stages": clock.to_json(), "total_seconds": 600.0, "workers": 4,
                          "targets": {"artemis": {"wall_seconds": 530.0, "test_seconds": 1050.0}}})
    assert lines[1].split() == ["set-up", "(scripts/bootstrap.sh)", "0", "m", "30.0", "s"]
    assert "total (set-up included)" in lines[4] and lines[4].endswith("10 m 00.0 s")  # not 12 m 50 s
    assert "artemis" in lines[6] and "wall 8 m 50.0 s, tests 17 m 30.0 s" in lines[6]
