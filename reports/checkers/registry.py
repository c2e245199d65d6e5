"""Every columnar checker by name: what a Spark task computes for one run (`facts_of`, small and
JSON-able) and how the driver turns it into results (`judge`, which needs the run's settings:
the analysis's options, else the experiment's own from the history or its run record).

`brokerconf analyze` (reports/pipeline/fused/engine.py) and the tests call these same functions;
splitting the two steps lets the judging wait for settings the task does not have.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from . import (failover_downtime, fifo, group_pinning, groups, performance, redelivery, redistribution, split_brain,
               total_queue)
from .history import THREADS, Columns
from .result import CheckResult, RunKey

#: in the order `brokerconf analyze` runs them (topic fan-out and slow consumer: see engine.py)
NAMES = (total_queue.NAME, redelivery.NAME, fifo.NAME, groups.NAME, failover_downtime.NAME, performance.LATENCY,
         performance.THROUGHPUT, split_brain.NAME, redistribution.NAME, group_pinning.NAME)
#: the options each checker takes, with their defaults
OPTIONS = {total_queue.NAME: {"duplicates_allowed": False}, failover_downtime.NAME: {"max_downtime_s": None},
           split_brain.NAME: {"split_brain": False},
           redistribution.NAME: {"redistribution": False, "load_balancing": None,
                                 "redistribution_delay_ms": None},
           group_pinning.NAME: {"group_pinning": False}}

_FACTS = {
    total_queue.NAME: total_queue.facts,
    redelivery.NAME: redelivery.facts,
    fifo.NAME: fifo.facts,
    groups.NAME: groups.facts,
    failover_downtime.NAME: failover_downtime.facts,
    performance.LATENCY: performance.latency_facts,
    performance.THROUGHPUT: performance.throughput_facts,
    split_brain.NAME: split_brain.facts,
    redistribution.NAME: redistribution.facts,
    # facts only (no result of its own): the consumers' open intervals redistribution judges with
    redistribution.CONSUMERS: redistribution.consumer_facts,
    group_pinning.NAME: group_pinning.facts,
}


def facts_of(c: Columns) -> dict:
    """Every checker's facts for one run, and the run's span (the checkers share nothing but the
    read-only arrays; numpy releases the GIL in its loops, so they run side by side)."""
    c.done  # noqa: B018 - computed once here, before the threads share it
    with ThreadPoolExecutor(THREADS) as pool:
        parts = {name: pool.submit(f, c) for name, f in _FACTS.items()}
        out = {name: part.result() for name, part in parts.items()}
    out["span"] = {"t0": c.t0, "t1": c.t1, "n": c.n_ops, "drained": c.drained, "files": c.files,
                   "topic": c.has_topic, "topic_messages": bool((c.msgs & c.topic).any())}
    return out


def judge(name: str, key: RunKey, facts: dict, **options) -> tuple[CheckResult, list[dict], list[tuple]]:
    """(result, anomaly rows, measurement table rows) of checker ``name`` for one run."""
    if name == performance.LATENCY:
        result, table = performance.judge_latency(key, facts[name])
        return result, [], table
    if name == performance.THROUGHPUT:
        windows = [(w["start"], w["end"]) for w in facts[failover_downtime.NAME]["windows"]]
        result, table = performance.judge_throughput(key, facts[name], facts["span"]["t0"], facts["span"]["t1"],
                                                     windows)
        return result, [], table
    if name == failover_downtime.NAME:
        result, rows = failover_downtime.judge(key, facts[name], **options)
        table = [(*key, r["client"], r["fault_start"], r["next_fault_start"], r["downtime"], r["first_ok_index"],
                  r["ops"], r["retired"]) for r in facts[name]["rows"]] if facts[name]["windows"] else []
        return result, rows, table
    if name == redistribution.NAME:
        result, rows = redistribution.judge(key, facts[name], facts[redistribution.CONSUMERS], **options)
        return result, rows, []
    module = {group_pinning.NAME: group_pinning, total_queue.NAME: total_queue, redelivery.NAME: redelivery, fifo.NAME: fifo,
              groups.NAME: groups, split_brain.NAME: split_brain}[name]
    result, rows = module.judge(key, facts[name], **options)
    return result, rows, []


def check_all(c: Columns, key: RunKey = ("", ""), **options) -> dict[str, CheckResult]:
    """Every checker's result for one run, in one call (tests, small histories)."""
    facts = facts_of(c)
    return {name: judge(name, key, facts, **{k: options.get(k, v) for k, v in OPTIONS.get(name, {}).items()})[0]
            for name in NAMES}
