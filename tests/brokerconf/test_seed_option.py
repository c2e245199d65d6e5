"""`--seed` on `brokerconf chaos run` (and `--chaos-seed` on the main job): it replaces the file's
seed in the experiment that runs, and a bad value is a usage error naming the option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from brokerconf import chaos_job, chaos_stage, cli

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


@pytest.mark.parametrize(("given", "used"), [([], 1), (["--seed", "7"], 7)])
def test_the_experiment_that_runs_has_the_seed_given_else_the_files(monkeypatch, tmp_path, capsys, given, used):
    ran = []

    def run_and_judge(exp, out_dir, progress=print):  # stands in for the run: no broker here
        ran.append(exp)
        return {"valid": True, "summary": [f"{exp.name}: valid = True"], "report": str(out_dir / "report.html")}

    monkeypatch.setattr(chaos_job, "run_and_judge", run_and_judge)
    status = cli.main(["chaos", "run", str(KILL_RESTART), "--out", str(tmp_path), *given])
    assert status == 0, capsys.readouterr()
    assert [exp.seed for exp in ran] == [used]


def test_the_main_jobs_chaos_stage_passes_its_seed_to_every_run(tmp_path):
    runs, _ = chaos_stage.plan(20.0, ["reference"], tmp_path, lambda line: None, seed=7)
    assert runs and all(run.seed == 7 for run in runs)
    assert all(run.command()[-2:] == ["--seed", "7"] for run in runs)
    own, _ = chaos_stage.plan(20.0, ["reference"], tmp_path, lambda line: None)
    assert all(run.seed is None and "--seed" not in run.command() for run in own)
