"""The one checker registry (reports/checkers/registry.py) and the run's checker list written into
the history's header (reports/checker_list.py, reports/check_plan.py): what a checker needs to be
judged everywhere is its own declaration and one registration."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from chaos.experiment_file import CheckersSection, load_experiment
from reports import check_plan
from reports.checker_list import CheckerListError
from reports.checkers import registry
from reports.checkers.history import Columns
from reports.checkers.protocol import Checker, Table
from reports.checkers.result import CheckResult
from reports.judge import judge_history
from reports.run_record import read_record, record_of
from tests.reports.experiment_histories import experiment_files, synthetic_history
from tests.reports.histories import H

FILES = experiment_files()


def _record(**experiment) -> dict:
    return {"process": "harness", "type": "info", "f": "experiment", "value": {"format": 1, "experiment": experiment}}


def test_every_registered_checker_is_reachable_from_the_experiment_files_section():
    """Each checker's switch and settings are keys of the file's [checkers], and every key there
    is some checker's: a checker registered without a way to ask for it, or a key nothing reads,
    fails here."""
    section = set(CheckersSection.model_fields)
    used = set()
    for checker in registry.REGISTERED:
        keys = ({checker.switch} if checker.switch else set()) | set(checker.settings)
        assert keys <= section, f"{checker.name} reads {sorted(keys - section)}, not keys of [checkers]"
        used |= keys
    assert used == section, f"[checkers] keys no registered checker reads: {sorted(section - used)}"


@pytest.mark.parametrize("topic", [False, True])
def test_every_verdict_checker_is_planned_when_everything_is_asked(topic):
    """With every switch on, a fault that takes the broker away and the run's workload kind, every
    registered verdict checker of that kind of run is planned: none is unreachable."""
    on = {name: True for name, field in CheckersSection.model_fields.items() if field.annotation is bool}
    record = record_of([_record(checkers={**on, "duplicates_allowed": False}, nemesis=[{"kind": "kill"}],
                                workload={"kind": "topic" if topic else "queue"})])
    plan = check_plan.derive_plan(record)
    fits = {c.name for c in registry.REGISTERED if not c.measurement and c.applies(record) is None}
    assert set(plan.options) == fits and fits, (plan.options, plan.skipped)
    assert set(plan.options) | set(plan.skipped) == set(registry.VERDICT_CHECKS)


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_the_list_written_at_the_start_is_the_one_read_back(tmp_path, file):
    """`chaos run` plans the list from the experiment before the run; read back from the history
    it is the plan, and it equals what the judges would derive from the header alone."""
    exp = load_experiment(file)
    listed = check_plan.checker_list_for(exp.model_dump(mode="json"))
    json.dumps(listed)  # the header is JSON
    path = synthetic_history(exp, tmp_path / "history.jsonl", checkers=listed)
    record = read_record(path)
    plan = check_plan.plan_checks(record)
    assert plan.source == "history" and record.checker_list == listed
    derived = check_plan.derive_plan(record)
    assert (plan.options, plan.skipped) == (derived.options, derived.skipped)


def test_a_history_without_a_list_is_planned_as_before(tmp_path):
    exp = load_experiment(FILES[0])
    record = read_record(synthetic_history(exp, tmp_path / "history.jsonl"))
    assert record.checker_list is None and check_plan.plan_checks(record).source == "derived"


def test_the_judges_follow_the_list_not_their_own_rules(tmp_path):
    """A list that leaves fifo out: chaos run's judge does not apply fifo, though its rules would."""
    exp = load_experiment(next(f for f in FILES if f.stem == "reference-kill-restart"))
    listed = check_plan.checker_list_for(exp.model_dump(mode="json"))
    assert "fifo" in [c["name"] for c in listed["checks"]]
    listed["checks"] = [c for c in listed["checks"] if c["name"] != "fifo"]
    listed["skipped"]["fifo"] = "left out by this run's list"
    verdict = judge_history(synthetic_history(exp, tmp_path / "history.jsonl", checkers=listed))
    assert "fifo" not in verdict["checks"] and verdict["not_applied"]["fifo"] == "left out by this run's list"


@pytest.mark.parametrize("bad, message", [
    ({"format": 1, "checks": [{"name": "no_such_check", "options": {}}]}, "not registered"),
    ({"format": 1, "checks": [{"name": "fifo", "options": {"max_downtime_s": 3}}]}, "options it does not take"),
    ({"format": 2, "checks": []}, "malformed"),
])
def test_a_list_naming_what_this_version_lacks_is_refused(tmp_path, bad, message):
    exp = load_experiment(FILES[0])
    record = read_record(synthetic_history(exp, tmp_path / "history.jsonl", checkers=bad))
    with pytest.raises(CheckerListError, match=message):
        check_plan.plan_checks(record)


def test_adding_a_checker_is_its_declaration_and_one_registration(tmp_path, monkeypatch):
    """A new checker (here: the history recorded at least one drain) declared once and registered:
    it is planned into the list `chaos run` writes, dispatched by the judge and composed into the
    verdict, with nothing else touched."""
    def judge(key, facts, options):
        drained = facts["span"]["drained"]
        return CheckResult("drained_something", *key, bool(drained), "" if drained else "no drain"), [], []

    def queue_run(record):
        return "a topic run" if record.topic else None

    new = Checker("drained_something", judge, applies=queue_run)
    registered = (*registry.REGISTERED, new)  # the one registration line
    monkeypatch.setattr(registry, "REGISTERED", registered)
    monkeypatch.setattr(registry, "CHECKERS", {c.name: c for c in registered})

    exp = load_experiment(next(f for f in FILES if f.stem == "reference-kill-restart"))
    listed = check_plan.checker_list_for(exp.model_dump(mode="json"))
    assert {"name": "drained_something", "options": {}} in listed["checks"]
    verdict = judge_history(synthetic_history(exp, tmp_path / "history.jsonl", checkers=listed))
    assert verdict["checks"]["drained_something"]["valid"] is True
    # and it counts: the same history with the checker failing makes the verdict false
    failing = replace(new, judge=lambda key, facts, options: (CheckResult("drained_something", *key, False), [], []))
    monkeypatch.setattr(registry, "CHECKERS", {**registry.CHECKERS, "drained_something": failing})
    topic_free = load_experiment(next(f for f in FILES if f.stem == "network-bridge-partition"))
    verdict = judge_history(synthetic_history(topic_free, tmp_path / "b" / "history.jsonl",
                                              checkers=check_plan.checker_list_for(topic_free.model_dump(mode="json"))))
    assert verdict["checks"]["drained_something"]["valid"] is False and verdict["valid"] is False


def _killed_queue_run() -> list[dict]:
    """A queue run with a kill, a send in doubt, a failed receive and a drain: something for every
    queue measurement's table."""
    h = H("tables").send(0, "a").receive(1, "a", consumer=0)
    h.kill(at=10)
    h.send(0, "b", outcome="info", seq=1)
    h.call(1, "receive", None, "fail", result=None, error="connection refused")
    h.restart(at=20, killed_at=10)
    h.send(2, "c", seq=2).receive(1, "c", seq=2, consumer=0).drain(3, [])
    return h.lines


def test_each_declared_table_has_the_columns_its_judge_fills():
    """A checker's table is declared beside its judge (protocol.Table): the Spark driver writes
    the judge's tuples under the declared columns, so they must be as many."""
    c = Columns.of_events(_killed_queue_run())
    facts = {**registry.facts_of(c), "topic_fanout": None}
    filled = set()
    for checker in registry.REGISTERED:
        if checker.table is None or not checker.facts:
            continue
        _, _, rows = registry.judge(checker.name, ("tables", "t"), facts, **registry.OPTIONS.get(checker.name, {}))
        columns = [part.split()[0] for part in checker.table.schema.split(",")]
        assert all(len(row) == len(columns) for row in rows), (checker.name, columns, rows[:1])
        filled |= {checker.name} if rows else set()
    assert {"latency", "throughput", "failover_downtime"} <= filled, filled


def test_the_spark_driver_writes_the_table_a_checker_declares(spark, monkeypatch):
    """The table's name and columns come from the checker's declaration, looked up when judging
    (no list in the engine to join); rows from a checker declaring no table are refused, never
    dropped unseen."""
    from reports.pipeline.fused import engine

    def judge(key, facts, options):
        return CheckResult("counted", *key, True), [], [(*key, facts["span"]["n"])]

    declared = Checker("counted", judge, measurement=True,
                       table=Table("counted_ops", "run string, target string, n bigint"))
    monkeypatch.setattr(registry, "CHECKERS", {**registry.CHECKERS, "counted": declared})
    frames = engine.table_frames(spark, "counted", [("r", "t", 3)])
    assert list(frames) == ["counted_ops"]
    assert frames["counted_ops"].to_arrow().to_pylist() == [{"run": "r", "target": "t", "n": 3}]
    monkeypatch.setattr(registry, "CHECKERS", {**registry.CHECKERS, "counted": replace(declared, table=None)})
    with pytest.raises(ValueError, match="declares no table"):
        engine.table_frames(spark, "counted", [("r", "t", 3)])
    assert engine.table_frames(spark, "counted", []) == {}


def test_a_measurement_is_shown_by_every_report_from_its_declaration(tmp_path, monkeypatch):
    """A measurement registered with its own words (``describe``) appears in verdict.json beside
    the verdict, in the summary lines, on the run's page and in the Spark stage's report, and
    never changes the verdict, even when its result is false; no report knows it by name."""
    from reports.judge import judge_run
    from reports.pipeline.main_job import _compact
    from reports.render.run_report import _spark_html

    exp = load_experiment(next(f for f in FILES if f.stem == "reference-kill-restart"))
    listed = check_plan.checker_list_for(exp.model_dump(mode="json"))
    plain = judge_history(synthetic_history(exp, tmp_path / "plain" / "history.jsonl", checkers=listed))

    def judge(key, facts, options):
        return CheckResult("ops_counted", *key, False, stats={"n": facts["span"]["n"]}), [], []

    new = Checker("ops_counted", judge, measurement=True, describe=lambda r: [f"{r['stats']['n']} operations counted"])
    registered = (*registry.REGISTERED, new)  # the one registration line
    monkeypatch.setattr(registry, "REGISTERED", registered)
    monkeypatch.setattr(registry, "CHECKERS", {c.name: c for c in registered})
    run_dir = tmp_path / "measured"
    synthetic_history(exp, run_dir / "history.jsonl", checkers=listed)
    verdict = judge_run(run_dir)
    line = f"{plain['operations']} operations counted"
    assert verdict["measurements"]["ops_counted"]["stats"]["n"] == plain["operations"]
    assert line in verdict["summary"]
    # (the synthetic histories take their times from the clock: the checks' numbers differ a little)
    assert verdict["valid"] == plain["valid"]
    assert {n: c["valid"] for n, c in verdict["checks"].items()} == {n: c["valid"] for n, c in plain["checks"].items()}
    assert line in json.loads((run_dir / "verdict.json").read_text())["summary"]
    assert line in (run_dir / "report.html").read_text()
    # the Spark stage's report: its verdicts.json lists every result under checks
    spark_verdict = {"run": verdict["run"], "target": verdict["target"], "valid": True, "failed": [], "unknown": [],
                     "checks": {"ops_counted": verdict["measurements"]["ops_counted"],
                                "fifo": {"valid": True, "reason": "", "applicable": True}}}
    compact = _compact(spark_verdict)
    assert compact["measurements"] == {"ops_counted": [line]} and set(compact["checks"]) == {"fifo"}
    assert line in _spark_html({"engine": "fused", "master": "local[1]", "histories": [], "dir": "spark",
                                "verdicts": [compact]})
