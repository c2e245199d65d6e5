"""The analysis on Spark: one job whose tasks each take one history (a JSON lines file, or one
run's flat Parquet), read it (the C scanner, pyarrow; fused/load.py) and compute every columnar
checker's facts for each run in it (reports/checkers/registry.py, `facts_of`); the tasks return
those small records and, when asked, write the flat Parquet back themselves. The driver then
judges each run with the same reports/checkers functions `brokerconf chaos run` uses (`judge`),
with each run's settings, and counts in its verdict the checks `brokerconf chaos run` counts
(reports/check_plan.py, from the run record): the others are shown as not applicable.

The unit of parallelism is a history: many runs spread over the executors, and within one task
pyarrow's reader and writer use the executor's cores. A run whose lines are in several files is
read by one task that takes all of them (`RunSplitAcrossFiles`, then `_joined`).

Topic fan-out and slow consumer: the task reads a topic run's lines again as events (their window
logic needs the raw values) and computes reports/checkers/topic_fanout.py's facts; the driver
judges them with the run record's broker counters and slow subscribers.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from typing import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from reports.checkers import redelivery, registry
from reports.checkers import total_queue as total_queue_checker
from reports.checkers.history import Columns
from reports.checkers.result import CheckResult
from reports.verdicts import UNKNOWN
from reports.pipeline import load as sql_load
from reports.checkers import topic_fanout as topic_checker
from reports.pipeline.anomaly_schema import ANOMALY_SCHEMA
from reports.check_plan import (DUPLICATES_SETTING_UNKNOWN, MEASUREMENTS, counts, duplicates_setting_unknown, plan_checks,
                                 record_checks)
from reports.run_record import pipeline_record_of_file, record_of_files
from reports.pipeline.load import Malformed, MalformedHistory, find_sources
from reports.pipeline.local_frame import LocalFrame

from . import load as fused_load
from . import split_job


class RunFacts:
    """What the tasks reported (`registry.facts_of`), per (run, target), and the run records."""

    def __init__(self, rows) -> None:
        self.by_key: dict = {(run, target): json.loads(payload) for run, target, _, payload in rows}
        self.runs = sorted(self.by_key)
        self.spans = {k: v["span"] for k, v in self.by_key.items()}

    @cached_property
    def records(self) -> dict:
        out = {}
        for key in self.runs:
            for file in self.spans[key]["files"] or [None]:
                out[key] = pipeline_record_of_file(file)
                if out[key]:
                    break
        return out

    @cached_property
    def run_records(self) -> dict:
        """(run, target) -> its RunRecord (reports/run_record.py), what `brokerconf chaos run`
        plans its checks with; an old history's from the facts its task read."""
        out = {}
        for key in self.runs:
            facts = self.by_key[key]
            windows = (facts.get("failover_downtime") or {}).get("windows") or []
            span = self.spans[key]
            # an old history is a topic run as record_of says from its events: a message on a
            # topic, or a subscription to one (topic_fanout's facts exist only then); a run split
            # into parts has no topic facts, so its subscriptions count
            topic = bool(span.get("topic_messages") or facts.get("topic_fanout") is not None
                         or (span["topic"] and facts.get("topic_unreadable")))
            out[key] = record_of_files(span["files"] or [], run=key[0], target=key[1],
                                       nemesis_kinds=[w["f"] for w in windows], topic=topic)
        return out

    @cached_property
    def plans(self) -> dict:
        """(run, target) -> the checks that judge it and their options (reports/check_plan.py):
        the same plan `brokerconf chaos run` judges the history with."""
        return {key: plan_checks(record) for key, record in self.run_records.items()}

    def with_record(self, key) -> dict:
        """The run's facts with what the topic checks read from its run record (the history's
        harness records, else the verdict.json beside an old history): the broker's discard
        counters and the slow subscribers."""
        record = self.records.get(key, {})
        stats = record.get("run_stats") if isinstance(record.get("run_stats"), dict) else {}
        discards = stats.get("broker_discards")
        if not isinstance(discards, list) or not all(isinstance(n, int) for n in discards):
            discards = None
        return registry.with_run_record(self.by_key[key], broker_discards=discards,
                                        slow=stats.get("slow_subscribers") or [], path=record.get("_path"))

    def checker_option(self, key, check, name, given, default):
        """The analysis's value, then the run's own setting: its plan's (from the history's
        harness records), else for an old history the verdict.json beside it, else the default."""
        if given is not None:
            return given
        if self.run_records[key].self_contained:
            value = self.plans[key].options.get(check, {}).get(name)
        else:
            value = (self.records.get(key, {}).get("checker_options") or {}).get(name)
        return default if value is None else value


class RunSplitAcrossFiles(ValueError):
    """One run's lines are in several history files: no single task sees the whole run."""


class NotLeanParquet(ValueError):
    """Parquet written by the SQL engine (``value`` and ``msgs``): the fused engine reads its own."""


@dataclass(frozen=True)
class Unit:
    """What one task reads: a history file, or one run's directory of flat Parquet."""
    kind: str  # "jsonl" | "parquet"
    path: str
    run: str = ""
    target: str = ""
    #: more history files read with ``path`` by the same task: they hold parts of one run
    more: tuple[str, ...] = ()


def plan(path: str | Path) -> tuple[str, list[Unit], list[Malformed]]:
    """The input's kind, its units, and the skipped lines recorded beside Parquet input."""
    kind, sources = find_sources(path)
    if kind == "jsonl":
        return kind, [Unit("jsonl", str(Path(f).resolve())) for f in sources], []
    directory = sources[0]
    if not fused_load.is_lean(directory):
        raise NotLeanParquet(f"{directory}: Parquet written by the SQL engine")
    units = [Unit("parquet", d, run, target) for run, target, d in fused_load.run_dirs(directory)]
    return kind, units, fused_load.malformed_beside(directory)


def run_unit(unit: Unit, skip_malformed: bool, parquet_out: str | None) -> list[tuple[str, str, str, str]]:
    """One task: read the unit, write its flat Parquet back (in a thread, beside the pass: pyarrow
    writes without the GIL while numpy works), and return (run, target, kind, payload) records.
    Errors a user must see (a malformed line) come back as records, not as a Spark failure."""
    # PySpark starts Python workers with OMP_NUM_THREADS set to the task's cores (1), and Arrow
    # sizes its thread pool from that variable: measured at 8M operations, the JSON read took 37 s
    # in a task against 22 s outside. One task per history is the unit here, so it gets the
    # machine's cores (tasks running side by side share them through the OS).
    pa.set_cpu_count(os.cpu_count() or 1)
    started = time.perf_counter()
    try:
        if unit.kind == "jsonl":
            reads = [fused_load.read_history_file(p, skip_malformed=skip_malformed) for p in (unit.path, *unit.more)]
            table = reads[0].table if len(reads) == 1 else pa.concat_tables([r.table for r in reads])
            malformed = [m for r in reads for m in r.malformed]
            note = "; ".join(r.note for r in reads if r.note)
        else:
            table, malformed, note = fused_load.read_run_parquet(unit.run, unit.target, unit.path), [], ""
    except MalformedHistory as exc:
        return [("", "", "_error", json.dumps(str(exc)))]
    timing = {"unit": unit.path, "rows": table.num_rows, "read_s": time.perf_counter() - started}
    out: list[tuple[str, str, str, str]] = [("", "", "_unit", json.dumps(unit.path))]
    out += [(m.run, "", "_malformed", json.dumps(m.__dict__)) for m in malformed]
    if note:
        out.append(("", "", "_note", json.dumps(note)))
    writer = None
    if parquet_out is not None and table.num_rows:
        writer = threading.Thread(target=_timed, args=(timing, "write_s", fused_load.write_runs, table, parquet_out),
                                  name="parquet-writer")
        writer.start()
    try:
        checked = time.perf_counter()
        for run, target, rows in fused_load.runs_of(table):
            c = Columns(rows)
            facts = registry.facts_of(c)
            events = _RunEvents(run, target, c, unit)
            facts[topic_checker.NAME], facts["topic_unreadable"] = (
                _topic_facts(events) if c.has_topic else (None, ""))
            if not facts[redelivery.NAME]["exact"]:
                # a delivery after an ok ack: whether that ack was confirmed is in its value only
                # (reports/checkers/redelivery.py); left as candidates when the lines are gone
                read = events.events()
                if read is not None:
                    facts[redelivery.NAME] = redelivery.exact_facts(read)
            out.append((run, target, "facts", json.dumps(facts, default=fused_load.json_plain)))
        timing["check_s"] = time.perf_counter() - checked
    finally:
        if writer is not None:
            writer.join()
    timing["task_s"] = time.perf_counter() - started
    out.append(("", "", "_timing", json.dumps(timing)))
    return out


class _RunEvents:
    """One run's events read again from its history lines (the topic window logic needs the raw
    values, and so do the ack confirmations), read once on first use; None when they cannot be
    read (Parquet whose run directories are gone), with `gone` saying why."""

    def __init__(self, run: str, target: str, c: Columns, unit: Unit) -> None:
        self.run, self.target = run, target
        self.files = ([unit.path, *unit.more] if unit.kind == "jsonl"
                      else [sql_load._uri_path(f) for f in c.files])  # pylint: disable=protected-access
        self._events: list[dict] | None = None

    @property
    def gone(self) -> str:
        missing = [f for f in self.files if not Path(f).is_file()]
        if missing or not self.files:
            return missing[0] if missing else "its file"
        return ""

    def events(self) -> list[dict] | None:
        if self.gone:
            return None
        if self._events is None:
            events = []
            for f in self.files:
                default_run = Path(f).parent.name
                with open(f, "rb") as handle:
                    for line in handle:
                        try:
                            e = json.loads(line)
                        except ValueError:
                            continue  # reported (or refused) by the reader already
                        if (isinstance(e, dict) and (e.get("run") or default_run) == self.run
                                and (e.get("target") or sql_load.UNKNOWN_TARGET) == self.target):
                            events.append(e)
            events.sort(key=lambda e: e.get("index", 0))
            self._events = events
        return self._events


def _topic_facts(events: _RunEvents) -> tuple[dict | None, str]:
    """topic_fanout.facts over the run's events; (None, why) when they cannot be read."""
    read = events.events()
    if read is None:
        return None, (f"the topic checks read the history lines again, and {events.gone} is gone: "
                      "analyse the run directory (history.jsonl) instead of its Parquet")
    return topic_checker.facts(read), ""


def _timed(timing: dict, key: str, function, *args) -> None:
    started = time.perf_counter()
    function(*args)
    timing[key] = time.perf_counter() - started


def analyze_fused(spark, path, names: list[str], options: dict, *, skip_malformed: bool = False,
                  parquet_out: str | Path | None = None, progress: Callable[[str], None] | None = None,
                  split_rows: int | None = None):
    """(histories, results, anomaly_rows, anomalies DataFrame, tables) for the checkers ``names``;
    ``progress`` hears how many histories are done while the job runs (every few seconds).
    ``split_rows``: a history estimated above this many rows is read in pieces and judged in
    parts split by each checker's key (split_job.py; default: BROKERCONF_SPLIT_ROWS, else what
    one task's memory holds)."""
    kind, units, malformed = plan(path)
    split_rows = split_job.split_rows_setting(spark, split_rows)
    try:
        return _analyze_units(spark, kind, units, malformed, names, options, skip_malformed, parquet_out, progress,
                              split_rows)
    except RunSplitAcrossFiles:
        # A run whose lines are in several files: one task reads all of them (and any file that
        # shares a run with them), so every run is still judged whole.
        return _analyze_units(spark, kind, _joined(units, _split_files(spark, units, skip_malformed)), list(malformed),
                              names, options, skip_malformed, parquet_out, progress, split_rows)


def _split_files(spark, units: list[Unit], skip_malformed: bool) -> list[set[str]]:
    """Groups of history files that share a run (connected through shared runs), of two or more."""
    runs_of = (spark.sparkContext.parallelize(units, max(1, len(units)))
               .map(lambda u: (u.path, fused_load.run_keys(fused_load.read_history_file(
                    u.path, skip_malformed=True).table))).collect())
    parent = {path: path for path, _ in runs_of}

    def root(path: str) -> str:
        while parent[path] != path:
            path = parent[path]
        return path

    first_file: dict = {}
    for path, keys in runs_of:
        for key in keys:
            if key in first_file:
                parent[root(path)] = root(first_file[key])
            else:
                first_file[key] = path
    groups: dict[str, set[str]] = {}
    for path in parent:
        groups.setdefault(root(path), set()).add(path)
    return [g for g in groups.values() if len(g) > 1]


def _joined(units: list[Unit], groups: list[set[str]]) -> list[Unit]:
    grouped = {p for g in groups for p in g}
    out = [u for u in units if u.path not in grouped]
    out += [Unit("jsonl", sorted(g)[0], more=tuple(sorted(g)[1:])) for g in groups]
    return out


def _analyze_units(spark, kind, units, malformed, names, options, skip_malformed, parquet_out, progress, split_rows):
    out = str(parquet_out) if parquet_out is not None and kind == "jsonl" else None
    if out is not None:
        fused_load.clear_parquet(out)  # the tasks add files: a previous analysis's must go first
    sc = spark.sparkContext
    group = f"brokerconf-fused-{uuid.uuid4().hex}"
    sc.setJobGroup(group, f"brokerconf analyze: {len(units)} histories")
    big = [u for u in units if split_job.estimated_rows(u) > split_rows]
    whole = [u for u in units if u not in big]
    records = []
    if whole:
        with _Progress(sc, group, len(whole), progress):
            records = (sc.parallelize(whole, max(1, len(whole)))
                       .flatMap(lambda unit: run_unit(unit, skip_malformed, out)).collect())
    for unit in big:
        if progress is not None:
            progress(f"  {unit.path}: above {split_rows:,} rows, read in pieces and judged in parts split by key")
        records += split_job.analyze_split(sc, unit, split_rows, skip_malformed, out)
    errors = [json.loads(r[3]) for r in records if r[2] == "_error"]
    if errors:
        if out is not None:  # what other tasks wrote back is part of an analysis that did not happen
            shutil.rmtree(out, ignore_errors=True)
        raise MalformedHistory(sorted(errors)[0])
    malformed += [Malformed(**json.loads(r[3])) for r in records if r[2] == "_malformed"]
    malformed.sort(key=lambda m: (m.file, m.line))
    notes = [json.loads(r[3]) for r in records if r[2] == "_note"]
    timings = [json.loads(r[3]) for r in records if r[2] == "_timing"]
    _refuse_split_runs(records)
    if out is not None:
        fused_load.finish_parquet(out, malformed)
    facts = RunFacts([r for r in records if not r[2].startswith("_")])
    histories = fused_load.FusedHistories(None, malformed, [u.path for u in units], parquet=out, notes=notes,
                                           timings=timings)
    results: list[CheckResult] = []
    anomalies: list[dict] = []
    tables: dict = {}
    for name in names:
        res, anom, tabs = CHECKS[name](spark, facts, histories, **options.get(name, {}))
        results += res
        anomalies += anom
        tables.update(tabs)
    if set(CHECKS) <= set(names):
        # a whole analysis judges the runs, as `brokerconf chaos run` does; one of some checkers
        # only (``checkers``: tests, a look at one checker) reports those
        results += _record_checks(facts)
    anomalies_df = LocalFrame(spark, [tuple(a[c] for c in ANOMALY_SCHEMA.fieldNames()) for a in anomalies],
                                         ANOMALY_SCHEMA)
    return histories, results, anomalies, anomalies_df, tables


class _Progress:
    """Reports "k/n histories done" from Spark's status tracker while the job runs, when it
    changes; quiet for jobs that end within the first interval."""

    INTERVAL_S = 5.0

    def __init__(self, sc, group: str, total: int, progress: Callable[[str], None] | None) -> None:
        self.sc, self.group, self.total, self.progress = sc, group, total, progress
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="analysis-progress", daemon=True)

    def __enter__(self):
        if self.progress is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _watch(self) -> None:
        tracker, last = self.sc.statusTracker(), -1
        while not self.stop.wait(self.INTERVAL_S):
            done = 0
            for job in tracker.getJobIdsForGroup(self.group):
                info = tracker.getJobInfo(job)
                for stage in (info.stageIds if info else []):
                    stage_info = tracker.getStageInfo(stage)
                    done += stage_info.numCompletedTasks if stage_info else 0
            if done != last:
                self.progress(f"  {done}/{self.total} histories read and checked")
                last = done


def _refuse_split_runs(records) -> None:
    """Each run must come from one unit (one task saw all of it)."""
    unit, seen = None, {}
    for run, target, kind, payload in records:
        if kind == "_unit":
            unit = json.loads(payload)
        elif kind == "facts":
            first = seen.setdefault((run, target), unit)
            if first != unit:
                raise RunSplitAcrossFiles(f"run {run!r} (target {target!r}) has lines in {first} and {unit}")


def _sorted(rows: list[dict]) -> list[dict]:
    # a total order: a run judged whole and one combined from parts list their anomalies alike
    rows.sort(key=lambda r: (r["run"], r["target"], r["checker"], r["kind"], r["message_id"] is not None,
                             r["message_id"] or "", r["ops"], r["detail"] or ""))
    return [{c: r[c] for c in ANOMALY_SCHEMA.fieldNames()} for r in rows]


def table_frames(spark, name: str, rows: list[tuple]) -> dict:
    """The table checker ``name`` fills, by the name its declaration gives it (reports/checkers/
    protocol.py, `Table`): what `brokerconf analyze` writes as ``<name>.parquet``. Read from the
    registry when judging, so a registered checker's table needs no list here; rows from a checker
    that declares no table are refused rather than dropped unseen."""
    table = registry.CHECKERS[name].table
    if table is None:
        if rows:
            raise ValueError(f"checker {name!r} returned {len(rows)} table rows but declares no table: give its "
                             "Checker(...) a table=Table(name, schema)")
        return {}
    return {table.name: LocalFrame(spark, rows, table.schema)}


def _judged(name: str):
    """The driver's half of a registered checker: `registry.judge` per run (the dispatch `brokerconf
    chaos run` uses too), with each run's settings and what its run record says."""
    def check(spark, facts: RunFacts, histories, **given):
        results, anomalies, table = [], [], []
        for key in facts.runs:
            options = {option: facts.checker_option(key, name, option, given.get(option), default)
                       for option, default in registry.OPTIONS.get(name, {}).items()}
            result, rows, table_rows = registry.judge(name, key, facts.with_record(key), **options)
            if name == total_queue_checker.NAME and given.get("duplicates_allowed") is None:
                _old_duplicates(result, facts, key, options)
            rows = _planned(result, rows, facts.plans[key])
            results.append(result)
            anomalies += rows
            table += table_rows
        return results, _sorted(anomalies), table_frames(spark, name, table)
    return check


def _planned(result: CheckResult, rows: list[dict], plan) -> list[dict]:
    """A check the run's plan leaves out (reports/check_plan.py: not asked for by the experiment,
    or not for this kind of run) is shown as not applicable, with why, and lists no anomaly: it
    does not count in the verdict, as in `brokerconf chaos run`. The measurements are never
    planned and never count (run_verdicts leaves them out)."""
    if result.checker in MEASUREMENTS:
        return rows
    if result.checker in plan.options:
        if not result.applicable and counts(result.checker, result.applicable, result.valid):
            # the experiment asked for its workload's check and the history has nothing for it:
            # no evidence, counted as unknown (reports/check_plan.py, `counts`)
            result.applicable = True
        return rows
    why = plan.skipped.get(result.checker, "not planned for this run")
    if result.applicable or not result.reason.startswith("not asked for"):
        result.reason = f"not applied: {why}" + (f"; found: {result.reason}" if result.reason else "")
    result.applicable = False
    return []


def _old_duplicates(result: CheckResult, facts: RunFacts, key, options: dict) -> None:
    """An old history whose setting nobody gave (no analysis option, no verdict.json beside it):
    false only because of duplicates is unknown, as `brokerconf chaos run` says
    (reports/check_plan.py, `duplicates_setting_unknown`)."""
    record = facts.run_records[key]
    if record.self_contained or (facts.records.get(key, {}).get("checker_options") or {}).get(
            "duplicates_allowed") is not None:
        return
    allowed, _ = registry.judge(total_queue_checker.NAME, key, facts.by_key[key], duplicates_allowed=True)[:2]
    if duplicates_setting_unknown(record, result.valid, allowed.valid, bool(result.stats.get("duplicated"))):
        result.valid = UNKNOWN
        result.reason = DUPLICATES_SETTING_UNKNOWN + (f"; {result.reason}" if result.reason else "")


def _record_checks(facts: RunFacts) -> list[CheckResult]:
    """What each run's harness records say against it (failed nemesis steps, crashed workers, an
    old or cut history): the checks `brokerconf chaos run` adds from the same records."""
    out = []
    for key in facts.runs:
        for name, check in record_checks(facts.run_records[key]).items():
            out.append(CheckResult(name, *key, check["valid"], check["reason"],
                                   stats={k: v for k, v in check.items() if k not in ("valid", "reason")}))
    return out


#: every registered checker's driver half, in the registry's order
CHECKS = {checker.name: _judged(checker.name) for checker in registry.REGISTERED}
