"""The one registry of checkers: each registers itself once here, by the declaration at the end
of its own module (reports/checkers/protocol.py, ``CHECKER``). Adding a checker is its module
plus its entry in `REGISTERED` (and its module's name in the import); the plan
(reports/check_plan.py), both judges (reports/judge.py, the Spark driver in
reports/pipeline/fused/engine.py), the reports and the defaults an old history is judged with all
read it from here.

`facts_of` is what a Spark task computes for one run (every registered checker's facts, small
and JSON-able); `judge` is the driver's half of one checker. `brokerconf analyze` and the tests
call these same functions; splitting the two steps lets the judging wait for settings the task
does not have.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from . import (failover_downtime, fifo, group_pinning, groups, performance, redelivery, redistribution, slow_consumer,
               split_brain, topic_fanout, total_queue, outcomes)
from .history import THREADS, Columns
from .protocol import Checker, Facts
from .result import CheckResult, RunKey

#: every checker, in the order the judges list them (the verdict's checks, then the measurements)
REGISTERED: tuple[Checker, ...] = (
    total_queue.CHECKER,
    redelivery.CHECKER,
    fifo.CHECKER,
    groups.CHECKER,
    topic_fanout.CHECKER,
    slow_consumer.CHECKER,
    failover_downtime.CHECKER,
    split_brain.CHECKER,
    redistribution.CHECKER,
    group_pinning.CHECKER,
    performance.LATENCY_CHECKER,
    performance.THROUGHPUT_CHECKER,
    outcomes.CHECKER,
)
CHECKERS: dict[str, Checker] = {checker.name: checker for checker in REGISTERED}
assert len(CHECKERS) == len(REGISTERED), "a checker is registered twice"

#: the checks whose result counts in a run's verdict, and the measurements shown beside it
VERDICT_CHECKS = tuple(c.name for c in REGISTERED if not c.measurement)
MEASUREMENTS = tuple(c.name for c in REGISTERED if c.measurement)
#: the checkers judged from the columns' facts, in the order `brokerconf analyze` runs them (the
#: topic checks read their facts from the events: reports/pipeline/fused/engine.py)
NAMES = tuple(c.name for c in REGISTERED if c.facts)
#: every fact family a Spark task computes, by name (reports/checkers/split.py splits them by key)
FACTS: dict[str, Facts] = {f.name: f for c in REGISTERED for f in c.facts}


def section_defaults() -> dict:
    """The experiment file's [checkers] keys with their defaults (chaos/experiment_file.py's
    CheckersSection, the file format's one declaration): what a run that sets none is judged with."""
    from chaos.experiment_file import CheckersSection

    return CheckersSection().model_dump()


def option_defaults(checker: Checker) -> dict:
    """The options ``checker`` takes and their defaults: its [checkers] settings (and its switch,
    when it takes it), and the settings it reads from the run record (None without one)."""
    defaults = section_defaults()
    out = {name: defaults[name] for name in checker.settings}
    if checker.switch_is_option:
        out[checker.switch] = defaults[checker.switch]
    out.update(checker.record_options(None))
    return out


def options_of(checker: Checker, section: dict, record) -> dict:
    """The options ``checker`` runs with in a run whose [checkers] section is ``section`` (with
    the defaults filled in) and whose run record is ``record``."""
    out = {name: section[name] for name in checker.settings}
    if checker.switch_is_option:
        out[checker.switch] = section[checker.switch]
    out.update(checker.record_options(record))
    return out


#: the options each columnar checker takes, with their defaults (the Spark driver's fallback)
OPTIONS = {c.name: option_defaults(c) for c in REGISTERED if c.facts and option_defaults(c)}


def facts_of(c: Columns) -> dict:
    """Every checker's facts for one run, and the run's span (the checkers share nothing but the
    read-only arrays; numpy releases the GIL in its loops, so they run side by side)."""
    c.done  # noqa: B018 - computed once here, before the threads share it
    with ThreadPoolExecutor(THREADS) as pool:
        parts = {name: pool.submit(f.compute, c) for name, f in FACTS.items()}
        out = {name: part.result() for name, part in parts.items()}
    out["span"] = {"t0": c.t0, "t1": c.t1, "n": c.n_ops, "drained": c.drained, "files": c.files,
                   "topic": c.has_topic, "topic_messages": bool((c.msgs & c.topic).any())}
    return out


def with_run_record(facts: dict, *, broker_discards, slow, path: str | None = None) -> dict:
    """``facts`` with what the topic checks read from the run record (topic_fanout.run_inputs)."""
    return {**facts, "run_record": {"broker_discards": broker_discards, "slow": sorted(str(s) for s in slow),
                                    "path": path}}


def judge(name: str, key: RunKey, facts: dict, **options) -> tuple[CheckResult, list[dict], list[tuple]]:
    """(result, anomaly rows, measurement table rows) of checker ``name`` for one run: the one
    dispatch both judges use."""
    return CHECKERS[name].judge(key, facts, options)


def measure(key: RunKey, facts: dict) -> dict[str, dict]:
    """Every registered measurement's result for one run (`CheckResult.to_json`), by name, with
    its default options: what verdict.json shows beside the verdict, never merged into it."""
    return {c.name: c.judge(key, facts, option_defaults(c))[0].to_json() for c in REGISTERED if c.measurement}


def is_measurement(name: str) -> bool:
    """Whether ``name`` (a key of a run's results) is a registered measurement, not a check."""
    return name in CHECKERS and CHECKERS[name].measurement


def describe(name: str, result: dict) -> list[str]:
    """What measurement ``name`` found, in words (its declaration's ``describe``), for the console
    and every report; a measurement with nothing to measure says why."""
    checker = CHECKERS.get(name)
    if checker is None or checker.describe is None or not result.get("applicable", True):
        return [result["reason"]] if result.get("reason") else []
    return checker.describe(result)


def check_all(c: Columns, key: RunKey = ("", ""), **options) -> dict[str, CheckResult]:
    """Every columnar checker's result for one run, in one call (tests, small histories)."""
    facts = facts_of(c)
    return {name: judge(name, key, facts, **{k: options.get(k, v) for k, v in OPTIONS.get(name, {}).items()})[0]
            for name in NAMES}
