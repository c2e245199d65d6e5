"""Which checks judge a run, and with which options: the one answer both judges use.

`brokerconf chaos run` (reports/judge.py, over the history's events) and the Spark pipeline
(reports/pipeline/fused/engine.py, over its columns) compute each check with the same functions
(reports/checkers/). They used to decide separately *which* checks apply: the Spark side
measured failover downtime on a run whose experiment said ``failover_downtime = false`` (the
cluster runs, whose churning consumers close on purpose), and called it ``unknown`` where
`chaos run` said ``true`` (issue: the main job exited 1 on the cluster experiments). So the
decision lives here, from the run record (reports/run_record.py) alone, and both call it.

A check is planned when the run asks for it (its experiment's [checkers], else the defaults) and
its kind of run fits; a planned check may still find nothing to judge in the history (no queue
message, no fault): the checker says so itself (``applicable`` False) and both judges leave it
out of the verdict alike. A check not planned is listed with the reason, never merged.

The measurements (latency, throughput) never decide a verdict: the Spark pipeline shows them,
`chaos run` does not compute them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reports.run_record import OUTAGE_FAULTS, RunRecord
from reports.verdicts import UNKNOWN

#: every check whose result counts in a run's verdict, in the order the judges list them
VERDICT_CHECKS = ("total_queue", "no_redelivery_after_ack", "fifo", "groups", "topic_fanout", "slow_consumer",
                  "failover_downtime", "split_brain", "redistribution", "group_pinning")
#: checks of the harness's own records (the run's outcome, what the history lacks), no checker
RECORD_CHECKS = ("nemesis_schedule", "workload", "history_records")
#: shown beside the verdict, never merged into it (their result is always true)
MEASUREMENTS = ("latency", "throughput")


@dataclass
class CheckPlan:
    """``options``: check -> the options it runs with, for every planned check;
    ``skipped``: check -> why it is not planned for this run."""
    options: dict[str, dict] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def __contains__(self, name: str) -> bool:
        return name in self.options


def plan_checks(record: RunRecord) -> CheckPlan:
    """The verdict checks that apply to the run of ``record``, each with its options."""
    checkers, options = record.checkers, record.checker_options
    plan = CheckPlan()

    def add(name: str, applies: bool, why_not: str, **opts) -> None:
        if applies:
            plan.options[name] = opts
        else:
            plan.skipped[name] = why_not

    queue = not record.topic
    asked_queue = checkers["total_queue"]
    add("total_queue", queue and asked_queue, "a topic run" if not queue else "[checkers] total_queue = false",
        duplicates_allowed=checkers["duplicates_allowed"])
    # a message acknowledged and then delivered again is the queue workload's promise, checked
    # with the total queue (judge.py has run them together since the first chaos runs)
    add("no_redelivery_after_ack", queue and asked_queue,
        "a topic run" if not queue else "[checkers] total_queue = false")
    # order per producer and group ownership on a queue: documented for every queue (the checker
    # decides itself which destinations it can judge: one consumer, no fault...); no switch
    add("fifo", queue, "a topic run")
    add("groups", queue, "a topic run")
    asked_topic = checkers["topic_fanout"]
    add("topic_fanout", record.topic and asked_topic,
        "not a topic run" if not record.topic else "[checkers] topic_fanout = false")
    add("slow_consumer", record.topic and asked_topic,
        "not a topic run" if not record.topic else "[checkers] topic_fanout = false")
    outage = [kind for kind in record.nemesis_kinds if kind in OUTAGE_FAULTS]
    add("failover_downtime", bool(checkers["failover_downtime"] and outage),
        "[checkers] failover_downtime = false" if not checkers["failover_downtime"] else
        f"no fault that takes a client's broker away ({', '.join(OUTAGE_FAULTS)}) in the nemesis schedule",
        max_downtime_s=checkers["max_downtime_s"])
    # asked for or not, these three run with their switch: unasked, the checker shows what it
    # found as not applicable (reports/checkers/split_brain.py, redistribution.py, group_pinning.py)
    add("split_brain", bool(checkers["split_brain"]), "[checkers] split_brain = false", split_brain=True)
    add("redistribution", bool(checkers["redistribution"]), "[checkers] redistribution = false",
        redistribution=True, load_balancing=options["load_balancing"],
        redistribution_delay_ms=options["redistribution_delay_ms"])
    add("group_pinning", bool(checkers["group_pinning"]), "[checkers] group_pinning = false", group_pinning=True)
    return plan


#: the workload's own check: asked for and nothing to judge (no queue message in a queue run, no
#: subscription in a topic run) is no evidence, ``unknown``, not a check left out
EVIDENCE_REQUIRED = ("total_queue", "topic_fanout")


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
