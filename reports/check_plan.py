"""Which checks judge a run, and with which options: the one answer both judges use.

`brokerconf chaos run` (reports/judge.py, over the history's events) and the Spark pipeline
(reports/pipeline/fused/engine.py, over its columns) compute each check with the same functions
(reports/checkers/). They used to decide separately *which* checks apply: the Spark side
measured failover downtime on a run whose experiment said ``failover_downtime = false`` (the
cluster runs, whose churning consumers close on purpose), and called it ``unknown`` where
`chaos run` said ``true`` (issue: the main job exited 1 on the cluster experiments). So the
decision is made once per run: `brokerconf chaos run` plans it from the experiment when the run
starts and writes the list into the history's header (reports/checker_list.py); every judge reads
that list back (`plan_checks`). The rules themselves are each checker's own declaration
(reports/checkers/protocol.py, registered in reports/checkers/registry.py).

A check is planned when the run asks for it (its experiment's [checkers] switch, else the
defaults) and its kind of run fits (the checker's ``applies``); a planned check may still find nothing to judge in the history (no queue
message, no fault): the checker says so itself (``applicable`` False) and both judges leave it
out of the verdict alike. A check not planned is listed with the reason, never merged.

The measurements (latency, throughput, every checker declared ``measurement``) never decide a
verdict and are never planned: both judges compute every registered one and show it beside the
verdict (verdict.json's ``measurements``; the Spark pipeline's results).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chaos.history import HARNESS, HARNESS_EXPERIMENT
from reports.checker_list import CheckerList, PlannedCheck
from reports.checkers import registry
from reports.run_record import RunRecord, record_of
from reports.verdicts import UNKNOWN

#: every check whose result counts in a run's verdict, in the order the judges list them
VERDICT_CHECKS = registry.VERDICT_CHECKS
#: checks of the harness's own records (the run's outcome, what the history lacks), no checker
RECORD_CHECKS = ("nemesis_schedule", "workload", "history_records")
#: shown beside the verdict, never merged into it (their result is always true)
MEASUREMENTS = registry.MEASUREMENTS


@dataclass
class CheckPlan:
    """``options``: check -> the options it runs with, for every planned check;
    ``skipped``: check -> why it is not planned for this run; ``source``: where the plan came
    from (the history's checker list, or derived for a history written before runs had one)."""
    options: dict[str, dict] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    source: str = "derived"

    def __contains__(self, name: str) -> bool:
        return name in self.options


def plan_checks(record: RunRecord) -> CheckPlan:
    """The verdict checks that judge the run of ``record``, each with its options: the checker
    list its history's header carries (written by `brokerconf chaos run` when the run started).
    A history written before runs wrote one has none: its list is derived here with the same
    rules the run would have used (`derive_plan`), so old histories are judged as before."""
    if record.checker_list is None:
        return derive_plan(record)
    listed = CheckerList.parse(record.checker_list)
    return CheckPlan({c.name: dict(c.options) for c in listed.checks}, dict(listed.skipped), source="history")


def derive_plan(record: RunRecord) -> CheckPlan:
    """Every registered verdict checker, planned when its kind of run fits (its ``applies``) and
    the run asks for it (its [checkers] switch, else the defaults), with its options."""
    section = record.checkers
    plan = CheckPlan()
    for checker in registry.REGISTERED:
        if checker.measurement:
            continue
        unasked = f"[checkers] {checker.switch} = false" if checker.switch and not section[checker.switch] else None
        misfit = checker.applies(record)
        why_not = (unasked or misfit) if checker.switch_first else (misfit or unasked)
        if why_not is None:
            plan.options[checker.name] = registry.options_of(checker, section, record)
        else:
            plan.skipped[checker.name] = why_not
    return plan


def checker_list_for(experiment: dict) -> dict:
    """The checker list of a run of ``experiment`` (the experiment file as loaded, as JSON): what
    `brokerconf chaos run` writes into the history's header before the run starts. The plan needs
    nothing the run produces, so the list read back later equals the one the judges would derive."""
    header = {"process": HARNESS, "type": "info", "f": HARNESS_EXPERIMENT,
              "value": {"format": 1, "experiment": experiment}}
    plan = derive_plan(record_of([header]))
    listed = CheckerList(checks=[PlannedCheck(name=name, options=options) for name, options in plan.options.items()],
                         skipped=plan.skipped)
    return listed.model_dump(mode="json")


#: the workload's own check: asked for and nothing to judge (no queue message in a queue run, no
#: subscription in a topic run) is no evidence, ``unknown``, not a check left out
EVIDENCE_REQUIRED = tuple(c.name for c in registry.REGISTERED if c.evidence_required)


def counts(name: str, applicable: bool, valid) -> bool:
    """Whether a planned check's result counts in the verdict: when its checker found something
    to judge; the workload's own check (`EVIDENCE_REQUIRED`) also when it found nothing, as
    ``unknown`` (its checker says so)."""
    return bool(applicable) or (name in EVIDENCE_REQUIRED and valid == UNKNOWN)


def record_checks(record: RunRecord) -> dict[str, dict]:
    """What the harness records themselves say against the run: nemesis steps or workers that
    failed, and what an old or cut history does not say (each ``unknown`` with the reason)."""
    checks: dict[str, dict] = {}
    end = record.run_end or {}
    if end.get("nemesis_errors"):
        checks["nemesis_schedule"] = {"valid": UNKNOWN, "errors": end["nemesis_errors"],
                                      "reason": f"{len(end['nemesis_errors'])} nemesis steps failed: the faults did "
                                                "not happen as the experiment says"}
    if end.get("deployment_errors"):
        # chaos/exit_watch.py: a broker stopped that no fault stops; the run was cut short there
        checks["deployment"] = {"valid": UNKNOWN, "errors": end["deployment_errors"],
                                "reason": "a node stopped on its own during the run: " + "; ".join(end["deployment_errors"])}
    if end.get("workload_errors"):
        # A worker thread that crashed, or a final drain that never completed: the history is
        # incomplete in a way the checkers cannot see, so the run cannot be called valid.
        checks["workload"] = {"valid": UNKNOWN, "errors": end["workload_errors"],
                              "reason": "; ".join(end["workload_errors"])}
    missing = record.missing()
    if missing:
        checks["history_records"] = {"valid": UNKNOWN, "reason": "; ".join(missing)}
    return checks


def duplicates_setting_unknown(record: RunRecord, valid, valid_with_duplicates_allowed, duplicated: bool) -> bool:
    """The total queue is false only because of duplicates, and the history does not say whether
    its experiment allowed them (an old history): the verdict turns on a missing setting, so it
    is ``unknown``, not ``false``."""
    return (not record.self_contained and duplicated and valid is False
            and valid_with_duplicates_allowed is not False)


DUPLICATES_SETTING_UNKNOWN = ("duplicated deliveries, and the history does not say whether the experiment allowed "
                              "them (no harness records)")
