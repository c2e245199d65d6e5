"""Judge one chaos run from its history alone: which checks apply, the checker functions
(reports/checkers/), the broker's discard counters paired with the subscribers, whether the slow
consumers were exercised, and the merged verdict (reports/verdicts.py). What ``verdict.json``
holds (`brokerconf chaos run`, the main job) comes from here; the command line only calls it.

Everything judging needs is in the history (chaos/history.py, harness records; read by
reports/run_record.py), so a history copied anywhere is judged as in its run directory. An old
history without those records is judged with the default settings, and the verdict is
``unknown`` with the reason (a ``history_records`` check): no evidence is not a pass.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from chaos.history import is_harness, read_history
from reports.checkers.failover_downtime import failover_downtime
from reports.checkers.redelivery import check_no_redelivery_after_ack
from reports.checkers.group_pinning import check_group_pinning
from reports.checkers.redistribution import check_redistribution
from reports.checkers.split_brain import check_split_brain
from reports.checkers.topic_fanout import check_topic_fanout
from reports.checkers.topic_fanout import pair_discards as pair_broker_discards
from reports.checkers.total_queue import check_total_queue
from reports.run_record import OUTAGE_FAULTS, RunRecord, record_of
from reports.verdicts import UNKNOWN, merge

VERDICT_FILE = "verdict.json"


def topic_checks(ops: list[dict], record: RunRecord) -> dict[str, dict]:
    """Topic fan-out, the broker's discard counters and whether the slow consumers were exercised."""
    slow = set(record.slow_subscribers)
    # First pass without the broker's counters: what each subscriber lost, seen from the history.
    observed = check_topic_fanout(ops, discards_allowed_for=slow)
    losses = {name: report.observed_discards for name, report in observed.subscribers.items()}
    checks: dict[str, dict] = {}
    if record.broker_discards is None:
        fanout = observed
    else:
        paired = pair_broker_discards(losses, record.broker_discards)
        if paired is None:
            fanout = observed
            checks["broker_discards"] = {
                "valid": False, "broker": record.broker_discards, "observed": losses,
                "reason": f"the broker reports {len(record.broker_discards)} subscriptions on "
                          f"{record.destination or 'the destination'}, the history {len(losses)} subscribers"}
        else:
            # The broker accounts for every discard it made: any subscriber may lose messages as
            # long as the broker's counter for it says exactly how many.
            fanout = check_topic_fanout(ops, broker_discards=paired, discards_allowed_for=set(losses))
    checks["topic_fanout"] = fanout.to_json()
    if slow:
        lost_by_slow = sum(losses.get(name, 0) for name in slow)
        checks["slow_consumer_exercised"] = {
            "valid": True if lost_by_slow else UNKNOWN, "slow_subscribers": sorted(slow),
            "discards": lost_by_slow,
            "reason": "" if lost_by_slow else "the slow subscribers lost nothing: the faults did not make them slow "
                                              "enough to reach the pending-message limit, so nothing was compared"}
    return checks


def judge_events(events: list[dict], *, record: RunRecord | None = None) -> dict[str, dict]:
    """Every applicable check of one run's events, by name (each with its ``valid``)."""
    record = record or record_of(events)
    ops = [e for e in events if not is_harness(e)]
    checkers = record.checkers
    checks: dict[str, dict] = {}
    if record.topic:
        if checkers["topic_fanout"]:
            checks.update(topic_checks(ops, record))
    elif checkers["total_queue"]:
        total = check_total_queue(ops, duplicates_allowed=checkers["duplicates_allowed"]).to_json()
        if not record.self_contained and total["duplicated"] and total["valid"] is False \
                and check_total_queue(ops, duplicates_allowed=True).valid is not False:
            # An old history does not say whether its experiment allowed duplicates, and only
            # the duplicates made this false: the verdict turns on the missing setting.
            total["valid"] = UNKNOWN
            total["reason"] = ("duplicated deliveries, and the history does not say whether the experiment allowed "
                               "them (no harness records)" + (f"; {total['reason']}" if total["reason"] else ""))
        checks["total_queue"] = total
        checks["no_redelivery_after_ack"] = check_no_redelivery_after_ack(ops).to_json()
    if checkers["failover_downtime"] and any(kind in OUTAGE_FAULTS for kind in record.nemesis_kinds):
        checks["failover_downtime"] = failover_downtime(ops, max_downtime_s=checkers["max_downtime_s"]).to_json()
    if checkers["split_brain"]:
        checks["split_brain"] = check_split_brain(ops).to_json()
    if checkers["redistribution"]:
        checks["redistribution"] = check_redistribution(
            ops, load_balancing=record.checker_options["load_balancing"],
            redistribution_delay_ms=record.checker_options["redistribution_delay_ms"]).to_json()
    if checkers["group_pinning"]:
        checks["group_pinning"] = check_group_pinning(ops).to_json()
    end = record.run_end or {}
    if end.get("nemesis_errors"):
        checks["nemesis_schedule"] = {"valid": UNKNOWN, "errors": end["nemesis_errors"],
                                      "reason": f"{len(end['nemesis_errors'])} nemesis steps failed: the faults did "
                                                "not happen as the experiment says"}
    if end.get("workload_errors"):
        # A worker thread that crashed, or a final drain that never completed: the history is
        # incomplete in a way the checkers cannot see, so the run cannot be called valid.
        checks["workload"] = {"valid": UNKNOWN, "errors": end["workload_errors"],
                              "reason": "; ".join(end["workload_errors"])}
    missing = record.missing()
    if missing:
        checks["history_records"] = {"valid": UNKNOWN, "reason": "; ".join(missing)}
    return checks


def judge_history(path: str | os.PathLike) -> dict:
    """The verdict of the run whose history is ``path``: what ``verdict.json`` holds (without the
    report's path). Needs nothing but the file."""
    path = Path(path)
    events = read_history(path)
    record = record_of(events)
    checks = judge_events(events, record=record)
    verdict = {
        "experiment": record.name,
        "target": record.target,
        "run": record.run,
        "valid": merge(c["valid"] for c in checks.values()),
        "checks": checks,
        # the settings the checks applied, from the history's experiment record
        "checker_options": record.checker_options,
        "run_stats": {**(record.run_end or {}), "broker_discards": record.broker_discards,
                      "slow_subscribers": sorted(int(s) if s.lstrip("-").isdigit() else s
                                                 for s in record.slow_subscribers)}
        if record.run_end is not None else {},
        "history": path.name,
        "operations": sum(1 for e in events if not is_harness(e)),
        "self_contained": record.self_contained,
    }
    verdict["summary"] = summary_lines(verdict)
    return verdict


def judge_run(run_dir: str | os.PathLike, *, history: str = "history.jsonl", render: bool = True) -> dict:
    """Judge ``run_dir/history.jsonl``, write ``verdict.json`` beside it and (``render``) the run's
    page, ``report.html`` (reports/render/chaos_report.py); returns the verdict with ``report``."""
    run_dir = Path(run_dir)
    verdict = judge_history(run_dir / history)
    (run_dir / VERDICT_FILE).write_text(json.dumps(verdict, indent=2, default=str))
    if render:
        from reports.render.chaos_report import render_chaos_report

        verdict["report"] = str(render_chaos_report(run_dir))
    return verdict


def summary_lines(verdict: dict) -> list[str]:
    """What the verdict says, a line per check (the console and the HTML report show these)."""
    stats = verdict.get("run_stats") or {}
    checks = verdict["checks"]
    lines = [f"{verdict['experiment']} on {verdict['target']}: valid = {verdict['valid']}  ({verdict['operations']} "
             f"operations, {stats.get('faults', '?')} faults, {stats.get('sent_ok', '?')} sends acknowledged, "
             f"{stats.get('drained', '?')} drained)"]
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
    for name in ("broker_discards", "slow_consumer_exercised", "nemesis_schedule", "workload", "history_records"):
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
    split_brain = checks.get("split_brain")
    if split_brain:
        served = ", ".join(split_brain["stats"].get("nodes") or []) or "no node named"
        lines.append(f"split brain: {split_brain['valid']} (served by {served}; "
                     f"handovers: {split_brain['stats'].get('handovers', 0)})"
                     + (f" - {split_brain['reason']}" if split_brain["reason"] else ""))
        lines += [f"  {detail}" for detail in split_brain["stats"].get("anomalies", [])[:5]]
    for name in ("redistribution", "group_pinning"):
        check = checks.get(name)
        if check:
            counts = ", ".join(f"{k} {v}" for k, v in check["stats"].items() if isinstance(v, (int, str)) and v != ""
                               and not isinstance(v, bool))
            lines.append(f"{name.replace('_', ' ')}: {check['valid']} ({counts})"
                         + (f" - {check['reason']}" if check["reason"] else ""))
            lines += [f"  {detail}" for detail in check["stats"].get("anomalies", [])[:5]]
    transport = stats.get("transport_events")
    if transport:
        per = "; ".join(f"{worker} " + ", ".join(f"{kind} {n}" for kind, n in kinds.items())
                        for worker, kinds in transport.items())
        lines.append(f"failover transport events (transport.jsonl): {per}")
    return lines


def summary(verdict: dict) -> str:
    return "\n  ".join(verdict.get("summary") or summary_lines(verdict))
