"""Judge one chaos run from its history alone: the checks its plan names (reports/check_plan.py,
the Spark pipeline's plan too), computed with the checker functions (reports/checkers/, the
Spark pipeline's), and the merged verdict (reports/verdicts.py). What ``verdict.json``
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
from reports.check_plan import (DUPLICATES_SETTING_UNKNOWN, counts, duplicates_setting_unknown, plan_checks,
                                 record_checks)
from reports.checkers import registry
from reports.checkers import slow_consumer as slow_checker
from reports.checkers import topic_fanout as topic_checker
from reports.checkers.failover_downtime import failover_downtime
from reports.checkers.history import Columns
from reports.checkers.redelivery import check_no_redelivery_after_ack
from reports.checkers.topic_fanout import check_topic_fanout
from reports.checkers.topic_fanout import pair_discards as pair_broker_discards
from reports.checkers.total_queue import check_total_queue
from reports.run_record import RunRecord, record_of
from reports.verdicts import UNKNOWN, merge

VERDICT_FILE = "verdict.json"


def topic_checks(ops: list[dict], record: RunRecord) -> dict[str, dict]:
    """Topic fan-out (the per-subscriber report verdict.json and its page show) and the slow
    consumer's broker counters, each judged by the same function as the Spark pipeline's
    (reports/checkers/topic_fanout.py `judge`, slow_consumer.py `judge`), with the run record's
    broker counters and slow subscribers."""
    slow = set(record.slow_subscribers)
    key = (record.run, record.target)
    facts = topic_checker.facts(ops)
    shared, _ = topic_checker.judge(key, facts, broker_discards=record.broker_discards, slow=slow)
    sc, _, _ = slow_checker.judge(key, facts, broker_discards=record.broker_discards, slow=slow)
    # The report's shape: what each subscriber lost, with the broker's counter paired with it.
    observed = check_topic_fanout(ops, discards_allowed_for=slow)
    losses = {name: report.observed_discards for name, report in observed.subscribers.items()}
    paired = None if record.broker_discards is None else pair_broker_discards(losses, record.broker_discards)
    fanout = observed if paired is None else check_topic_fanout(ops, broker_discards=paired,
                                                                discards_allowed_for=set(losses))
    checks: dict[str, dict] = {"topic_fanout": {**fanout.to_json(), "valid": shared.valid, "reason": shared.reason,
                                                "applicable": shared.applicable}}
    lost_by_slow = sum(losses.get(name, 0) for name in slow)
    checks["slow_consumer"] = {**sc.to_json(), "slow_subscribers": sorted(slow), "discards": lost_by_slow,
                               "broker": record.broker_discards, "observed": losses}
    return checks


def _columnar(name: str, key, facts: dict, options: dict) -> dict:
    """A columnar checker's result (reports/checkers/registry.py), as the Spark pipeline judges
    it, with its anomalies' details."""
    result, rows, _ = registry.judge(name, key, facts, **options)
    out = result.to_json()
    out["stats"].setdefault("anomalies", [r["detail"] for r in rows])
    return out


def judge_events(events: list[dict], *, record: RunRecord | None = None) -> dict[str, dict]:
    """Every check that counts in the run's verdict, by name (each with its ``valid``); which
    checks and with which options is reports/check_plan.py's answer, the Spark pipeline's too.
    A planned check that finds nothing to judge in the history is left out (`counts`)."""
    return judge_planned(events, record=record)[0]


def judge_planned(events: list[dict], *, record: RunRecord | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """(the checks that count, by name; the checks left out, with why)."""
    record = record or record_of(events)
    ops = [e for e in events if not is_harness(e)]
    plan = plan_checks(record)
    left_out = dict(plan.skipped)
    key = (record.run, record.target)
    checks: dict[str, dict] = {}
    c = Columns.of_events(ops) if ops else None
    facts = registry.facts_of(c) if c is not None else None
    results: dict[str, dict] = {}
    for name, options in plan.options.items():
        if facts is None:
            results[name] = {"valid": UNKNOWN, "applicable": False, "reason": "the history has no operation"}
        elif name == "total_queue":
            total = check_total_queue(c, duplicates_allowed=options["duplicates_allowed"]).to_json()
            total["applicable"] = facts["total_queue"]["totals"] is not None
            if duplicates_setting_unknown(record, total["valid"], check_total_queue(c, duplicates_allowed=True).valid,
                                          bool(total["duplicated"])):
                # An old history does not say whether its experiment allowed duplicates, and only
                # the duplicates made this false: the verdict turns on the missing setting.
                total["valid"] = UNKNOWN
                total["reason"] = DUPLICATES_SETTING_UNKNOWN + (f"; {total['reason']}" if total["reason"] else "")
            results[name] = total
        elif name == "no_redelivery_after_ack":
            results[name] = check_no_redelivery_after_ack(ops).to_json()
        elif name in ("topic_fanout", "slow_consumer"):
            if "topic_fanout" not in results:
                results.update(topic_checks(ops, record))
        elif name == "failover_downtime":
            shared = _columnar(name, key, facts, options)
            results[name] = {**failover_downtime(c, max_downtime_s=options["max_downtime_s"]).to_json(),
                             "applicable": shared["applicable"]}
        else:  # fifo, groups, split_brain, redistribution, group_pinning
            results[name] = _columnar(name, key, facts, options)
    for name in plan.options:
        result = results[name]
        if counts(name, result.get("applicable", True), result["valid"]):
            checks[name] = result
        else:
            left_out[name] = f"nothing to judge: {result.get('reason') or 'the checker found nothing for it'}"
    checks.update(record_checks(record))
    return checks, left_out


def judge_history(path: str | os.PathLike) -> dict:
    """The verdict of the run whose history is ``path``: what ``verdict.json`` holds (without the
    report's path). Needs nothing but the file."""
    path = Path(path)
    events = read_history(path)
    record = record_of(events)
    checks, left_out = judge_planned(events, record=record)
    verdict = {
        "experiment": record.name,
        "target": record.target,
        "run": record.run,
        # what the run's schedule was drawn from: `brokerconf chaos run FILE --seed N` replays it
        "seed": record.seed,
        "valid": merge(c["valid"] for c in checks.values()),
        "checks": checks,
        # the checks this run was not judged by, and why (reports/check_plan.py)
        "not_applied": left_out,
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
    seed = f"seed {verdict['seed']}, " if verdict.get("seed") is not None else ""
    lines = [f"{verdict['experiment']} on {verdict['target']}: valid = {verdict['valid']}  ({seed}{verdict['operations']} "
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
    for name in ("slow_consumer", "fifo", "groups", "nemesis_schedule", "workload", "history_records"):
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
