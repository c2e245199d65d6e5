"""`--seed` on `brokerconf chaos run` (and `--chaos-seed` on the main job): it replaces the file's
seed in the experiment that runs, and a bad value is a usage error naming the option."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from brokerconf import chaos_job, chaos_stage, cli
from chaos.experiment_file import load_experiment, with_overrides

KILL_RESTART = Path(__file__).resolve().parents[2] / "chaos" / "experiments" / "reference-kill-restart.toml"


def test_the_parser_takes_a_seed_and_leaves_the_files_when_absent():
    args = cli.build_parser().parse_args(["chaos", "run", str(KILL_RESTART), "--seed", "7"])
    assert args.seed == 7
    assert cli.build_parser().parse_args(["chaos", "run", str(KILL_RESTART)]).seed is None
    assert cli.build_parser().parse_args(["run", "--chaos-seed", "-4"]).chaos_seed == -4


@pytest.mark.parametrize("argv", [["chaos", "run", str(KILL_RESTART), "--seed", "x"], ["run", "--chaos-seed", "1.5"]])
def test_a_seed_that_is_no_integer_is_a_usage_error_naming_the_option(argv):
    proc = subprocess.run([sys.executable, "-m", "brokerconf.cli", *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert ("--seed" if "--seed" in argv else "--chaos-seed") in proc.stderr and "invalid int value" in proc.stderr


def runs_recorded(monkeypatch) -> list:
    """The experiments `chaos run` hands to run_and_judge, which stands in for the run (no broker)."""
    ran = []

    def run_and_judge(exp, out_dir, progress=print):
        ran.append(exp)
        return {"valid": True, "summary": [f"{exp.name}: valid = True"], "report": str(out_dir / "report.html")}

    monkeypatch.setattr(chaos_job, "run_and_judge", run_and_judge)
    return ran


@pytest.mark.parametrize(("given", "used"), [([], 1), (["--seed", "7"], 7)])
def test_the_experiment_that_runs_has_the_seed_given_else_the_files(monkeypatch, tmp_path, capsys, given, used):
    ran = runs_recorded(monkeypatch)
    status = cli.main(["chaos", "run", str(KILL_RESTART), "--out", str(tmp_path), *given])
    assert status == 0, capsys.readouterr()
    assert [exp.seed for exp in ran] == [used]


def test_the_main_jobs_chaos_stage_passes_its_seed_to_every_run(tmp_path):
    runs, _ = chaos_stage.plan(20.0, ["reference"], tmp_path, lambda line: None, seed=7)
    assert runs and all(run.seed == 7 for run in runs)
    assert all(run.command()[-2:] == ["--seed", "7"] for run in runs)
    own, _ = chaos_stage.plan(20.0, ["reference"], tmp_path, lambda line: None)
    assert all(run.seed is None and "--seed" not in run.command() for run in own)


def test_the_replay_line_runs_the_same_experiment_with_the_same_seed(monkeypatch, tmp_path, capsys):
    """The command `chaos run` prints after a run, parsed again, gives the very experiment that ran
    (seed and overrides), so its schedule is drawn the same."""
    ran = runs_recorded(monkeypatch)
    cli.main(["chaos", "run", str(KILL_RESTART), "--out", str(tmp_path), "--duration", "12.5", "--set",
              "nemesis.0.every_max_s=7", "--set", 'workload.destination="queue://a b"'])
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("replay: ")]
    argv = shlex.split(line.removeprefix("replay: "))
    assert argv[:5] == ["brokerconf", "chaos", "run", str(KILL_RESTART), "--seed"] and argv[5] == "1"
    again = cli.build_parser().parse_args(argv[1:])
    replayed = with_overrides(load_experiment(again.file[0]), duration_s=again.duration, target=again.target,
                              settings=again.set or (), seed=again.seed)
    assert replayed == ran[0]
