"""What a run's history says about the run beyond its operations: the harness records
(chaos/history.py, "Harness records"): the experiment's settings, the broker's counters read at
the end, the run's outcome. Every judge reads them here, from the history itself, so a history
copied anywhere is judged as it was in its run directory.

A history written before these records existed has none: `RunRecord.missing` then says what is
unknown, and the judges call ``unknown`` what needs it (reports/judge.py), never guess. The header
(the experiment and the checker list) is parsed once, into `ExperimentHeader`
(reports/history_header.py), and read from there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import unquote, urlparse

from chaos.experiment_file import FAULT_KINDS
from chaos.history import HARNESS, HARNESS_BROKER_COUNTERS, HARNESS_EXPERIMENT, HARNESS_RUN_END, NEMESIS
from reports.checkers import registry
from reports.history_header import ExperimentHeader


@dataclass
class RunRecord:
    run: str
    target: str
    #: the history's header (the experiment as loaded, the checker list); None in an old history
    header: ExperimentHeader | None = None
    #: the broker's discarded counter per subscription; None when not read (or not readable)
    broker_discards: list[int] | None = None
    counters: dict | None = None  # the broker-counters record as written
    run_end: dict | None = None  # the run-end record; None: the harness did not finish the run
    #: subscribers the workload slowed, from the subscribe operations ("slow": true) and run-end
    slow_subscribers: set[str] = field(default_factory=set)
    nemesis_kinds: list[str] = field(default_factory=list)  # from the experiment, else the nemesis lines
    topic: bool = False  # a topic workload (the experiment's, else any topic:// destination)

    @property
    def self_contained(self) -> bool:
        return self.header is not None

    @property
    def checker_list(self) -> dict | None:
        """The run's checker list as `chaos run` wrote it in the header (reports/checker_list.py);
        None in a history written before runs wrote one."""
        return self.header.checker_list if self.header is not None else None

    @property
    def name(self) -> str:
        if self.header is not None and self.header.name is not None:
            return self.header.name
        # an old history: the run id is "<experiment>-<UTC time>" (chaos/experiment.py)
        head, sep, tail = self.run.rpartition("-")
        return head if sep and tail.endswith("Z") else self.run

    @property
    def seed(self) -> int | None:
        """The seed the run's schedule was drawn from (chaos/schedule.py): replay the run with
        ``brokerconf chaos run FILE --seed N``. None in an old history."""
        return self.header.seed if self.header is not None else None

    @property
    def checkers(self) -> dict:
        """The experiment's [checkers] section with the file format's defaults filled in (an old
        history: the defaults alone)."""
        defaults = registry.section_defaults()
        given = self.header.checkers if self.header is not None else {}
        return {**defaults, **{k: v for k, v in given.items() if k in defaults}}

    @property
    def checker_options(self) -> dict:
        """Every option the registered checkers take, as this run sets them (verdict.json shows
        them; the Spark driver reads them for an old history from a verdict.json beside it)."""
        section = self.checkers
        out: dict = {}
        for checker in registry.REGISTERED:
            out.update(registry.options_of(checker, section, self))
        return out

    @property
    def _cluster(self):
        return self.header.cluster if self.header is not None else None

    @property
    def load_balancing(self) -> str | None:
        """The cluster's message_load_balancing (a [topology] kind = "cluster"), else None: the
        redistribution checker's ON_DEMAND rule needs it (reports/checkers/redistribution.py)."""
        return self._cluster.load_balancing if self._cluster is not None else None

    @property
    def redistribution_delay_ms(self) -> int | None:
        """The cluster's redistribution delay (-1: never), else None."""
        return self._cluster.redistribution_delay_ms if self._cluster is not None else None

    @property
    def destination(self) -> str | None:
        return self.header.destination if self.header is not None else None

    def missing(self) -> list[str]:
        """What the history does not say that a judge may need, one sentence each."""
        out = []
        if self.header is None:
            out.append("the history has no harness records (written before histories carried them): the "
                       "experiment's settings (duplicates allowed, downtime bound), the broker's counters and the "
                       "harness's own errors are not in it; the checks ran with the default settings")
        elif self.run_end is None:
            out.append("the history has no run-end record: the harness stopped before the run ended, so whether "
                       "its nemesis schedule and workload completed is not known")
        return out

    def as_pipeline_record(self) -> dict:
        """The run record in the shape the Spark checkers read (``checker_options``; ``run_stats``
        with ``broker_discards`` and ``slow_subscribers``), {} for an old history."""
        if not self.self_contained:
            return {}
        stats = dict(self.run_end or {})
        stats["broker_discards"] = self.broker_discards
        stats["slow_subscribers"] = sorted(self.slow_subscribers, key=_as_sort_key)
        return {"checker_options": self.checker_options, "run_stats": stats, "_path": "history (harness records)"}


def _as_sort_key(name: str):
    return (0, int(name), "") if name.lstrip("-").isdigit() else (1, 0, name)


def record_of(events: Iterable[dict], *, run: str | None = None, target: str | None = None) -> RunRecord:
    """The run record of one run's events (all of them: the nemesis and subscribe lines count)."""
    record = RunRecord(run or "", target or "")
    kinds: list[str] = []
    destinations: set[str] = set()
    for e in events:
        if not record.run and e.get("run"):
            record.run = str(e["run"])
        if not record.target and e.get("target"):
            record.target = str(e["target"])
        process, f, value = e.get("process"), e.get("f"), e.get("value")
        if process == HARNESS:
            if f == HARNESS_EXPERIMENT and (header := ExperimentHeader.parse(value)) is not None:
                record.header = header
            elif f == HARNESS_BROKER_COUNTERS and isinstance(value, dict):
                record.counters = value
                discards = value.get("subscription_discards")
                if isinstance(discards, list) and all(isinstance(n, int) for n in discards):
                    record.broker_discards = discards
            elif f == HARNESS_RUN_END and isinstance(value, dict):
                record.run_end = value
        elif process == NEMESIS:
            if f in FAULT_KINDS:  # a fault's step (its kind's name), not a heal
                kinds.append(f)
        elif isinstance(value, dict):
            if f == "subscribe" and e.get("type") == "invoke" and value.get("slow") is True:
                record.slow_subscribers.add(str(value.get("subscriber", value.get("consumer"))))
            destination = value.get("destination")
            if isinstance(destination, str):
                destinations.add(destination)
    if record.header is not None:
        record.nemesis_kinds = list(record.header.nemesis_kinds)
        record.topic = record.header.topic
    else:
        record.nemesis_kinds = sorted(set(kinds))
        record.topic = any(d.startswith("topic://") for d in destinations)
    if record.run_end is not None:
        record.slow_subscribers |= {str(s) for s in record.run_end.get("slow_subscribers") or []}
    return record


#: how much of a history's end `read_record` reads for the final harness records
TAIL_BYTES = 1 << 20


def read_record(path: str | os.PathLike) -> RunRecord:
    """The run record of a history file from its harness records alone: the first line (the
    experiment) and the last ones (counters, run-end), so even a history of gigabytes costs two
    short reads. Without harness records (an old history) ``self_contained`` is False."""
    path = Path(path)
    events = []
    with open(path, "rb") as handle:
        first = handle.readline()
        size = os.fstat(handle.fileno()).st_size
        start = max(handle.tell(), size - TAIL_BYTES)
        handle.seek(start)
        tail = handle.read().split(b"\n")
    if start > len(first):
        tail = tail[1:]  # the first line read from the middle of the file is a part of one
    for raw in [first, *tail]:
        if b'"harness"' not in raw:
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("process") == HARNESS:
            events.append(event)
    run = events[0].get("run") if events else None
    target = events[0].get("target") if events else None
    return record_of(events, run=run, target=target)


def pipeline_record_of_file(history_file: str | None) -> dict:
    """The run record the Spark checkers read (``checker_options``, ``run_stats.broker_discards``,
    ``run_stats.slow_subscribers``) for a history file (a path or a file:// URI): from its harness
    records; for an old history without them, the verdict.json `brokerconf chaos run` wrote beside
    it while that is still there; {} otherwise. The drop-in for the lookup beside the file."""
    if not history_file:
        return {}
    path = history_path(history_file)
    try:
        record = read_record(path)
    except OSError:
        return {}
    if record.self_contained:
        return record.as_pipeline_record()
    beside = path.parent / "verdict.json"
    try:
        old = json.loads(beside.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(old, dict):
        return {}
    old["_path"] = str(beside)
    return old


def history_path(history_file: str) -> Path:
    """A history file given as a path or a file:// URI (what the Spark loader records)."""
    parsed = urlparse(history_file)
    return Path(unquote(parsed.path) if parsed.scheme == "file" else history_file)


def record_of_files(files: Iterable[str], *, run: str, target: str, nemesis_kinds: Iterable[str] = (),
                    topic: bool = False) -> RunRecord:
    """The run record of a run whose lines are in ``files`` (paths or file:// URIs), from the
    first with harness records. An old history has none: its record is built as `record_of`
    builds it from the events, from what the caller read of them (the Spark tasks read the
    nemesis steps' faults and whether the run touched a topic: ``nemesis_kinds``, ``topic``), so
    both judges plan its checks alike (reports/check_plan.py)."""
    for file in files:
        try:
            record = read_record(history_path(file))
        except OSError:
            continue
        if record.self_contained:
            record.run, record.target = run, target
            return record
    record = RunRecord(run, target)
    record.nemesis_kinds = sorted({k for k in nemesis_kinds if k in FAULT_KINDS})
    record.topic = topic
    return record


def harness_value(value: Any) -> Any:
    """A harness record's value as the Spark loader keeps it (JSON text), decoded."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value
