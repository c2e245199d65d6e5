"""`brokerconf chaos run`: run an experiment (chaos/), then have reports/ judge its history and
write the verdict beside it. The CLI chains the two so chaos/ never imports reports/; the judging
itself (which checks apply, discard pairing, the verdict merge) lives in reports/judge.py."""

from __future__ import annotations

import logging
from pathlib import Path

from chaos.experiment import run_experiment
from chaos.experiment_file import Experiment
from reports.check_plan import checker_list_for
from reports.judge import judge_run, summary

__all__ = ["run_and_judge", "summary"]


def run_and_judge(exp: Experiment, out_dir: Path, progress=print) -> dict:
    # stomp.py logs every refused reconnect and failed write; under a nemesis those are expected,
    # and the history records each operation's outcome, so keep the console to the progress lines.
    logging.getLogger("stomp.py").setLevel(logging.CRITICAL)
    # The run's checker list, planned now from the experiment and written into the history's
    # header: every judge of this history (this one, Spark, the main job's) reads it back.
    result = run_experiment(exp, out_dir, progress=progress, checkers=checker_list_for(exp.model_dump(mode="json")))
    # The history carries everything judging needs (chaos/history.py, harness records).
    return judge_run(out_dir, history=result.history_path.name)
