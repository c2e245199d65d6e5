"""Judge one chaos run from its history alone: the checks its plan names (reports/check_plan.py,
the Spark pipeline's plan too), computed with the checker functions (reports/checkers/, the
Spark pipeline's), and the merged verdict (reports/verdicts.py). What ``verdict.json``
holds (`brokerconf chaos run`, the main job) comes from here; the command line only calls it.

Beside the verdict, never merged into it, ``verdict.json`` holds what every registered
measurement found (``measurements``; reports/checkers/registry.py, `measure`), each described in
its summary lines by its own declaration.

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
from reports.checkers import redelivery, registry
from reports.checkers import slow_consumer as slow_checker
from reports.checkers import total_queue as total_queue_checker
from reports.checkers import topic_fanout as topic_checker
from reports.checkers.failover_downtime import failover_downtime
from reports.checkers.history import Columns
from reports.checkers.redelivery import check_no_redelivery_after_ack
from reports.checkers.topic_fanout import check_topic_fanout
from reports.checkers.topic_fanout import pair_discards as pair_broker_discards
from reports.checkers.total_queue import check_total_queue
from reports.run_record import RunRecord, record_of
from reports.verdicts import UNKNOWN, compose

VERDICT_FILE = "verdict.json"


def topic_checks(ops: list[dict], record: RunRecord) -> dict[str, dict]:
    """Topic fan-out (the per-subscriber report verdict.json and its page show) and the slow
    consumer's broker counters, judged through the registry as the Spark driver judges them, with
    the run record's broker counters and slow subscribers."""
    facts = _with_record({topic_checker.NAME: topic_checker.facts(ops)}, record)
    key = (record.run, record.target)
    shared, _, _ = registry.judge(topic_checker.NAME, key, facts)
    sc, _, _ = registry.judge(slow_checker.NAME, key, facts)
    return {topic_checker.NAME: _topic_report(ops, record, shared),
            slow_checker.NAME: _slow_report(ops, record, sc)}


def _with_record(facts: dict, record: RunRecord) -> dict:
    return registry.with_run_record(facts, broker_discards=record.broker_discards, slow=record.slow_subscribers)


# ---------------------------------------------------------------------- the report's shapes
# What verdict.json and its page show of some checks, beside the registry's result (whose
# ``valid``, ``applicable`` decide): the lists a reader wants to see (which messages, which
# clients), computed from the events. Presentation only: never a second verdict.

def _topic_report(ops: list[dict], record: RunRecord, shared) -> dict:
    slow = set(record.slow_subscribers)
    observed = check_topic_fanout(ops, discards_allowed_for=slow)
    losses = {name: report.observed_discards for name, report in observed.subscribers.items()}
    paired = None if record.broker_discards is None else pair_broker_discards(losses, record.broker_discards)
    fanout = observed if paired is None else check_topic_fanout(ops, broker_discards=paired,
                                                                discards_allowed_for=set(losses))
    return {**fanout.to_json(), "valid": shared.valid, "reason": shared.reason, "applicable": shared.applicable}


def _slow_report(ops: list[dict], record: RunRecord, sc) -> dict:
    slow = set(record.slow_subscribers)
    losses = {name: report.observed_discards
              for name, report in check_topic_fanout(ops, discards_allowed_for=slow).subscribers.items()}
    return {**sc.to_json(), "slow_subscribers": sorted(slow), "discards": sum(losses.get(name, 0) for name in slow),
            "broker": record.broker_discards, "observed": losses}


def _total_queue_report(c: Columns, ops: list[dict], options: dict) -> dict:
    return check_total_queue(c, duplicates_allowed=options["duplicates_allowed"]).to_json()


def _redelivery_report(c: Columns, ops: list[dict], options: dict) -> dict:
    return check_no_redelivery_after_ack(ops).to_json()


def _downtime_report(c: Columns, ops: list[dict], options: dict) -> dict:
    return failover_downtime(c, max_downtime_s=options["max_downtime_s"]).to_json()


_REPORTS = {"total_queue": _total_queue_report, "no_redelivery_after_ack": _redelivery_report,
            "failover_downtime": _downtime_report}


def _dispatched(name: str, key, facts: dict, options: dict, c: Columns, ops: list[dict]) -> dict:
    """Checker ``name``'s result through the registry (the Spark driver's dispatch), as
    verdict.json shows it: with its anomalies' details, or in the report's shape (`_REPORTS`)."""
    result, rows, _ = registry.judge(name, key, facts, **options)
    if name in _REPORTS:
        return {**_REPORTS[name](c, ops, options), "valid": result.valid, "applicable": result.applicable}
    out = result.to_json()
    out["stats"].setdefault("anomalies", [r["detail"] for r in rows])
    return out


def run_facts(ops: list[dict], record: RunRecord, c: Columns) -> dict:
    """Every checker's facts for the run, as a Spark task computes them (reports/pipeline/fused/
    engine.py, `run_unit`): the columns' facts, the topic facts from the events, the exact ack
    confirmations when the columns cannot tell, and the run record's inputs of the topic checks."""
    facts = registry.facts_of(c)
    facts[topic_checker.NAME] = topic_checker.facts(ops)
    if not facts[redelivery.NAME]["exact"]:
        facts[redelivery.NAME] = redelivery.exact_facts(ops)
    return _with_record(facts, record)


def judge_events(events: list[dict], *, record: RunRecord | None = None) -> dict[str, dict]:
    """Every check that counts in the run's verdict, by name (each with its ``valid``); which
    checks and with which options is the run's checker list (reports/check_plan.py), the Spark
    pipeline's too. A planned check that finds nothing to judge in the history is left out (`counts`)."""
    return judge_planned(events, record=record)[0]


def judge_planned(events: list[dict], *, record: RunRecord | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """(the checks that count, by name; the checks left out, with why)."""
    checks, left_out, _ = judge_and_measure(events, record=record)
    return checks, left_out


def judge_and_measure(events: list[dict], *,
                      record: RunRecord | None = None) -> tuple[dict[str, dict], dict[str, str], dict[str, dict]]:
    """(the checks that count, by name; the checks left out, with why; every registered
    measurement's result, by name: shown beside the verdict, never merged into it)."""
    record = record or record_of(events)
    ops = [e for e in events if not is_harness(e)]
    plan = plan_checks(record)
    left_out = dict(plan.skipped)
    key = (record.run, record.target)
    checks: dict[str, dict] = {}
    c = Columns.of_events(ops) if ops else None
    facts = run_facts(ops, record, c) if c is not None else None
    results: dict[str, dict] = {}
    for name, options in plan.options.items():
        if facts is None:
            results[name] = {"valid": UNKNOWN, "applicable": False, "reason": "the history has no operation"}
        elif name in (topic_checker.NAME, slow_checker.NAME):
            if name not in results:
                results.update(topic_checks(ops, record))
        else:
            results[name] = _dispatched(name, key, facts, options, c, ops)
        if name == total_queue_checker.NAME and facts is not None:
            _old_duplicates(results[name], record, key, facts)
    for name in plan.options:
        result = results[name]
        if counts(name, result.get("applicable", True), result["valid"]):
            checks[name] = result
        else:
            left_out[name] = f"nothing to judge: {result.get('reason') or 'the checker found nothing for it'}"
    checks.update(record_checks(record))
    measurements = registry.measure(key, facts) if facts is not None else {}
    return checks, left_out, measurements


def _old_duplicates(total: dict, record: RunRecord, key, facts: dict) -> None:
    """An old history does not say whether its experiment allowed duplicates: false only because
    of the duplicates turns on the missing setting, so it is unknown (reports/check_plan.py)."""
    allowed, _, _ = registry.judge(total_queue_checker.NAME, key, facts, duplicates_allowed=True)
    if duplicates_setting_unknown(record, total["valid"], allowed.valid, bool(total["duplicated"])):
        total["valid"] = UNKNOWN
        total["reason"] = DUPLICATES_SETTING_UNKNOWN + (f"; {total['reason']}" if total["reason"] else "")


def judge_history(path: str | os.PathLike) -> dict:
    """The verdict of the run whose history is ``path``: what ``verdict.json`` holds (without the
    report's path). Needs nothing but the file."""
    path = Path(path)
    events = read_history(path)
    record = record_of(events)
    checks, left_out, measurements = judge_and_measure(events, record=record)
    verdict = {
        "experiment": record.name,
        "target": record.target,
        "run": record.run,
        # what the run's schedule was drawn from: `brokerconf chaos run FILE --seed N` replays it
        "seed": record.seed,
        "valid": compose(checks)["valid"],
        "checks": checks,
        # the checks this run was not judged by, and why (reports/check_plan.py)
        "not_applied": left_out,
        # what the registered measurements found (latency, throughput, ...): never in "valid"
        "measurements": measurements,
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
    for name, measured in (verdict.get("measurements") or {}).items():
        lines += registry.describe(name, measured)
    transport = stats.get("transport_events")
    if transport:
        per = "; ".join(f"{worker} " + ", ".join(f"{kind} {n}" for kind, n in kinds.items())
                        for worker, kinds in transport.items())
        lines.append(f"failover transport events (transport.jsonl): {per}")
    return lines


def summary(verdict: dict) -> str:
    return "\n  ".join(verdict.get("summary") or summary_lines(verdict))
