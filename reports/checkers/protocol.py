"""What a checker declares about itself, once, in its own module (Jepsen's ``checker`` protocol:
one thing that judges a history; here split in two halves so Spark can run them apart).

A checker module ends with ``CHECKER = Checker(...)``; reports/checkers/registry.py lists each
once. Everything else is derived from that declaration: which checks a run plans and with which
options (reports/check_plan.py), the checker list `brokerconf chaos run` writes into the history,
what both judges dispatch (reports/judge.py, the Spark driver in reports/pipeline/fused/engine.py),
and the defaults an old history is judged with.

Adding a checker touches two files: ``reports/checkers/<name>.py`` (its facts, its judge and its
``CHECKER`` declaration: name, applicability, switch and settings, its table and, for a
measurement, its words) and registry.py: its entry in `registry.REGISTERED`, and the module's
name in the import above it (a static import, so tests/test_import_graph.py sees the edge).
Both judges, the Spark tasks, the split path of big runs, the checker list in the history and the
reports follow from them (tests/reports/test_checker_registry.py adds one that way).
Only a checker that needs a new key in the experiment file's [checkers] also adds that key to
chaos/experiment_file.py's CheckersSection: the file format is declared there, in chaos/, below
reports/ (chaos never imports reports), and the registry reads the keys' types and defaults from
it; a test fails while a registered checker's switch or setting is not a key there, or a key
there is nobody's.

The judging half takes the run's facts (every checker's ``facts`` for the run, by name, as
`registry.facts_of` returns them) and the options the plan gave it, and returns a
`CheckResult`, its anomaly rows and, for checkers with a measurement table, the table's rows.
Such a checker declares the table (`Table`: its name and columns) beside its judge, so the Spark
driver writes it without a list of its own that a new checker would have to join. A measurement
also says in words what it found (``describe``): every report shows it by those lines, beside the
verdict, and none knows a measurement by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .result import CheckResult, RunKey

#: (key, the run's facts by checker name, options) -> (result, anomaly rows, table rows)
Judge = Callable[[RunKey, dict, dict], tuple[CheckResult, list[dict], list[tuple]]]


@dataclass(frozen=True)
class Facts:
    """One family of facts a Spark task computes over a run's columns (small, JSON-able), and how
    a run too big for one task gets them: computed over parts of the run split by ``split_key``
    (reports/checkers/split.py: "id", "producer", "group" or "client") and combined."""
    name: str
    compute: Callable
    split_key: str
    combine: Callable[[list], Any]
    #: over one part, when it differs from ``compute`` (latency keeps its distribution to merge)
    compute_part: Callable | None = None


@dataclass(frozen=True)
class Table:
    """The table a checker's judge fills (its third return value): `brokerconf analyze` writes it
    as ``<name>.parquet``; ``schema`` is the rows' columns in Spark's DDL, in the tuples' order."""
    name: str
    schema: str


def fits_every_run(record: Any) -> str | None:
    return None


def no_record_options(record: Any) -> dict:
    return {}


@dataclass(frozen=True)
class Checker:
    name: str
    #: the driver's half (module docstring)
    judge: Judge
    #: the task's half: the fact families it judges from, its own (named as the checker) first;
    #: none when the facts are read elsewhere (the topic checks read the history's events again,
    #: reports/pipeline/fused/engine.py)
    facts: tuple[Facts, ...] = ()
    #: the experiment file's [checkers] key that asks for it; None: asked for in every run
    switch: str | None = None
    #: the [checkers] keys it takes as options (their types and defaults are the file's section's)
    settings: tuple[str, ...] = ()
    #: the checker takes its switch as an option too (it shows what it found when not asked for)
    switch_is_option: bool = False
    #: the run record -> why this kind of run has nothing for it (None: it fits)
    applies: Callable[[Any], str | None] = fits_every_run
    #: when the switch is off and the run does not fit either, the reason shown is the switch's
    #: (default: the run's kind, the more basic reason)
    switch_first: bool = False
    #: the run record -> options that come from the run's settings beyond [checkers] (the cluster's)
    record_options: Callable[[Any], dict] = no_record_options
    #: shown beside the verdict, never merged into it, never planned (latency, throughput)
    measurement: bool = False
    #: asked for and nothing to judge is ``unknown``, not a check left out (the workload's own check)
    evidence_required: bool = False
    #: the table its judge's rows fill (None: its judge returns none)
    table: Table | None = None
    #: a measurement's result (`CheckResult.to_json`) -> lines saying what it found, for the
    #: console and the reports (None: its reason, when it has one)
    describe: Callable[[dict], list[str]] | None = None
