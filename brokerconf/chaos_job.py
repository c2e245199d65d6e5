"""`brokerconf chaos run`: run an experiment (chaos/), then judge its history (reports/checkers)
and write the verdict beside it. The CLI chains the two so chaos/ never imports reports/."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

from chaos.experiment import run_experiment
from chaos.experiment_file import Experiment
from chaos.history import read_history
from reports.checkers.redelivery import check_no_redelivery_after_ack
from reports.checkers.total_queue import check_total_queue


def merge_validity(values: list) -> bool | str:
    """Jepsen's merge: false beats unknown beats true."""
    if any(v is False for v in values):
        return False
    if any(v == "unknown" for v in values):
        return "unknown"
    return True


def run_and_judge(exp: Experiment, out_dir: Path, progress=print) -> dict:
    # stomp.py logs every refused reconnect and failed write; under a nemesis those are expected,
    # and the history records each operation's outcome, so keep the console to the progress lines.
    logging.getLogger("stomp.py").setLevel(logging.CRITICAL)
    result = run_experiment(exp, out_dir, progress=progress)
    history = read_history(result.history_path)
    checks: dict[str, dict] = {}
    if exp.checkers.total_queue:
        checks["total_queue"] = check_total_queue(history, duplicates_allowed=exp.checkers.duplicates_allowed).to_json()
        checks["no_redelivery_after_ack"] = check_no_redelivery_after_ack(history).to_json()
    verdict = {
        "experiment": exp.name,
        "run": result.run_id,
        "valid": merge_validity([c["valid"] for c in checks.values()]),
        "checks": checks,
        "run_stats": {k: v for k, v in asdict(result).items() if k != "history_path"},
        "history": result.history_path.name,
        "operations": len(history),
    }
    (out_dir / "verdict.json").write_text(json.dumps(verdict, indent=2, default=str))
    return verdict


def summary(verdict: dict) -> str:
    stats = verdict["run_stats"]
    lines = [f"{verdict['experiment']}: valid = {verdict['valid']}  ({verdict['operations']} operations, "
             f"{stats['faults']} faults, {stats['sent_ok']} sends acknowledged, {stats['drained']} drained)"]
    total = verdict["checks"].get("total_queue")
    if total:
        lines.append(f"  total queue: lost {len(total['lost'])}, unexpected {len(total['unexpected'])}, "
                     f"duplicated {len(total['duplicated'])}, recovered {len(total['recovered'])}"
                     + (f" - {total['reason']}" if total["reason"] else ""))
    redelivery = verdict["checks"].get("no_redelivery_after_ack")
    if redelivery:
        lines.append(f"  redelivered after a confirmed ack: {len(redelivery['redelivered_after_ack'])} "
                     f"of {redelivery['acknowledged']} acknowledged")
    return "\n".join(lines)
