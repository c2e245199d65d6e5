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
from reports.checkers.failover_downtime import failover_downtime
from reports.checkers.redelivery import check_no_redelivery_after_ack
from reports.checkers.topic_fanout import check_topic_fanout
from reports.checkers.total_queue import check_total_queue
from reports.render.chaos_report import render_chaos_report


def merge_validity(values: list) -> bool | str:
    """Jepsen's merge: false beats unknown beats true."""
    if any(v is False for v in values):
        return False
    if any(v == "unknown" for v in values):
        return "unknown"
    return True


def pair_broker_discards(observed: dict[str, int], broker: list[int]) -> dict[str, int] | None:
    """Give each subscriber one of the broker's per-subscription discard counters. The broker does
    not say which connection a subscription belongs to, so counters pair with subscribers by rank
    (most discards with most discards). When the two multisets are equal every pair agrees; when
    they differ, at least one pair disagrees and the checker reports both numbers. None when the
    counts of subscriptions differ (the broker saw other subscribers, or lost some)."""
    if len(broker) != len(observed):
        return None
    ranked = sorted(observed, key=lambda name: (observed[name], name))
    return dict(zip(ranked, sorted(broker)))


def _topic_checks(exp: Experiment, result, history: list[dict]) -> dict[str, dict]:
    slow = {str(s) for s in result.slow_subscribers}
    # First pass without the broker's counters: what each subscriber lost, seen from the history.
    observed = check_topic_fanout(history, discards_allowed_for=slow)
    losses = {name: report.observed_discards for name, report in observed.subscribers.items()}
    checks: dict[str, dict] = {}
    if result.broker_discards is None:
        fanout = observed
    else:
        paired = pair_broker_discards(losses, result.broker_discards)
        if paired is None:
            fanout = observed
            checks["broker_discards"] = {
                "valid": False, "broker": result.broker_discards, "observed": losses,
                "reason": f"the broker reports {len(result.broker_discards)} subscriptions on "
                          f"{exp.workload.destination}, the history {len(losses)} subscribers"}
        else:
            # The broker accounts for every discard it made: any subscriber may lose messages as
            # long as the broker's counter for it says exactly how many.
            fanout = check_topic_fanout(history, broker_discards=paired, discards_allowed_for=set(losses))
    checks["topic_fanout"] = fanout.to_json()
    if slow:
        lost_by_slow = sum(losses.get(name, 0) for name in slow)
        checks["slow_consumer_exercised"] = {
            "valid": True if lost_by_slow else "unknown", "slow_subscribers": sorted(slow),
            "discards": lost_by_slow,
            "reason": "" if lost_by_slow else "the slow subscribers lost nothing: the faults did not make them slow "
                                              "enough to reach the pending-message limit, so nothing was compared"}
    return checks


def run_and_judge(exp: Experiment, out_dir: Path, progress=print) -> dict:
    # stomp.py logs every refused reconnect and failed write; under a nemesis those are expected,
    # and the history records each operation's outcome, so keep the console to the progress lines.
    logging.getLogger("stomp.py").setLevel(logging.CRITICAL)
    result = run_experiment(exp, out_dir, progress=progress)
    history = read_history(result.history_path)
    checks: dict[str, dict] = {}
    if exp.workload.kind == "topic":
        if exp.checkers.topic_fanout:
            checks.update(_topic_checks(exp, result, history))
    elif exp.checkers.total_queue:
        checks["total_queue"] = check_total_queue(history, duplicates_allowed=exp.checkers.duplicates_allowed).to_json()
        checks["no_redelivery_after_ack"] = check_no_redelivery_after_ack(history).to_json()
    if exp.checkers.failover_downtime and any(n.kind in ("kill", "stop", "pause", "partition") for n in exp.nemesis):
        checks["failover_downtime"] = failover_downtime(history, max_downtime_s=exp.checkers.max_downtime_s).to_json()
    if result.nemesis_errors:
        checks["nemesis_schedule"] = {"valid": "unknown", "errors": result.nemesis_errors,
                                      "reason": f"{len(result.nemesis_errors)} nemesis steps failed: the faults did not "
                                                "happen as the experiment says"}
    if result.workload_errors:
        # A worker thread that crashed, or a final drain that never completed: the history is
        # incomplete in a way the checkers cannot see, so the run cannot be called valid.
        checks["workload"] = {"valid": "unknown", "errors": result.workload_errors,
                              "reason": "; ".join(result.workload_errors)}
    verdict = {
        "experiment": exp.name,
        "target": exp.target.name,
        "run": result.run_id,
        "valid": merge_validity([c["valid"] for c in checks.values()]),
        "checks": checks,
        # what the experiment file set for the checkers: `brokerconf analyze` applies the same
        # settings when it re-judges this run (reports/pipeline/checkers/common.py, run records)
        "checker_options": {"duplicates_allowed": exp.checkers.duplicates_allowed,
                            "max_downtime_s": exp.checkers.max_downtime_s},
        "run_stats": {k: v for k, v in asdict(result).items() if k != "history_path"},
        "history": result.history_path.name,
        "operations": len(history),
    }
    verdict["summary"] = summary_lines(verdict)
    (out_dir / "verdict.json").write_text(json.dumps(verdict, indent=2, default=str))
    # The page with the timeline, latency / throughput plots and anomalies (reports/render).
    verdict["report"] = str(render_chaos_report(out_dir))
    return verdict


def summary_lines(verdict: dict) -> list[str]:
    """What the verdict says, a line per check (the console and the HTML report show these)."""
    stats = verdict["run_stats"]
    checks = verdict["checks"]
    lines = [f"{verdict['experiment']} on {verdict['target']}: valid = {verdict['valid']}  ({verdict['operations']} "
             f"operations, {stats['faults']} faults, {stats['sent_ok']} sends acknowledged, {stats['drained']} drained)"]
    total = checks.get("total_queue")
    if total:
        lines.append(f"total queue: lost {len(total['lost'])}, unexpected {len(total['unexpected'])}, "
                     f"duplicated {len(total['duplicated'])}, recovered {len(total['recovered'])}"
                     + (f" - {total['reason']}" if total["reason"] else ""))
    redelivery = checks.get("no_redelivery_after_ack")
    if redelivery:
        lines.append(f"redelivered after a confirmed ack: {len(redelivery['redelivered_after_ack'])} "
                     f"of {redelivery['acknowledged']} acknowledged")
    fanout = checks.get("topic_fanout")
    if fanout:
        per = ", ".join(f"subscriber {name}: lost {r['observed_discards']}"
                        + (f" (broker says {r['broker_discards']})" if r["broker_discards"] is not None else "")
                        for name, r in sorted(fanout["subscribers"].items()))
        lines.append(f"topic fan-out: {fanout['acknowledged']} acknowledged sends; {per}"
                     + (f" - {fanout['reason']}" if fanout["reason"] else ""))
    for name in ("broker_discards", "slow_consumer_exercised", "nemesis_schedule", "workload"):
        if checks.get(name, {}).get("reason"):
            lines.append(f"{name.replace('_', ' ')}: {checks[name]['reason']}")
    downtime = checks.get("failover_downtime")
    if downtime:
        for fault in downtime["faults"]:
            measured = (f"min {fault['min_ms']:.0f} / median {fault['median_ms']:.0f} / max {fault['max_ms']:.0f} ms "
                        f"over {len(fault['downtime_ms'])} clients") if fault["downtime_ms"] else "no client measured"
            never = ""
            if fault["never_recovered"]:
                # the reason says what each such client did after the fault (reports/checkers)
                never = f"; {fault['reason']}" if fault["reason"] else f"; never recovered: {sorted(fault['never_recovered'])}"
            lines.append(f"failover downtime after {fault['f']}" + (f" of node {fault['node']}" if fault["node"] else "")
                         + f": {measured}{never}")
    transport = stats.get("transport_events")
    if transport:
        per = "; ".join(f"{worker} " + ", ".join(f"{kind} {n}" for kind, n in kinds.items())
                        for worker, kinds in transport.items())
        lines.append(f"failover transport events (transport.jsonl): {per}")
    return lines


def summary(verdict: dict) -> str:
    return "\n  ".join(verdict.get("summary") or summary_lines(verdict))
