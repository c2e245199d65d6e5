"""The history's header is parsed once into a typed record (reports/history_header.py
`ExperimentHeader`), with defaults for what an older harness did not write, and every reader of
the run record reads that record, not the header's dict."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import chaos
from chaos.experiment import experiment_record
from chaos.experiment_file import load_experiment
from chaos.history import HARNESS, HARNESS_EXPERIMENT
from reports.check_plan import checker_list_for
from reports.checkers import redistribution
from reports.history_header import ClusterSettings, ExperimentHeader
from reports.run_record import record_of

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"

#: a header as the harness wrote it before runs had a seed, a checker list or a [topology]
#: (the experiment's keys of that time; an unknown key, ``drain_s``, is ignored)
OLD_HEADER = {"format": 1, "experiment": {
    "name": "reference-kill-restart", "duration_s": 20.0, "drain_s": 2.0,
    "target": {"name": "reference:process", "protocol": "stomp"},
    "workload": {"kind": "queue", "producers": 2, "consumers": 2, "destination": "queue://chaos.kill"},
    "nemesis": [{"kind": "kill", "every_s": 5.0, "down_s": 1.0, "node": "A"}],
    "checkers": {"duplicates_allowed": True, "max_downtime_s": 30.0}}}


def _header_of(file_name: str) -> dict:
    """The header `brokerconf chaos run` writes for experiment file ``file_name`` (chaos/experiment.py)."""
    exp = load_experiment(EXPERIMENTS / file_name)
    header = experiment_record(exp)
    header["checkers"] = checker_list_for(header["experiment"])
    return header


def _event(header: dict) -> dict:
    return {"process": HARNESS, "type": "info", "f": HARNESS_EXPERIMENT, "value": header, "run": "r", "target": "t"}


def test_an_old_header_parses_with_defaults_for_what_it_does_not_say():
    assert ExperimentHeader.parse(OLD_HEADER) == ExperimentHeader(
        name="reference-kill-restart", seed=None, checkers={"duplicates_allowed": True, "max_downtime_s": 30.0},
        destination="queue://chaos.kill", topic=False, nemesis_kinds=("kill",), cluster=None, checker_list=None)
    record = record_of([_event(OLD_HEADER)])
    assert record.self_contained and record.name == "reference-kill-restart" and record.seed is None
    assert record.checker_list is None and record.load_balancing is None and record.redistribution_delay_ms is None
    assert record.checkers["duplicates_allowed"] is True and record.checkers["max_downtime_s"] == 30.0
    assert record.checkers["split_brain"] is False  # a key the old header lacks: today's default


def test_a_new_cluster_header_parses_to_its_settings_and_checker_list():
    header = _header_of("reference-cluster-redistribution.toml")
    parsed = ExperimentHeader.parse(header)
    assert parsed == ExperimentHeader(
        name="reference-cluster-redistribution", seed=19, checkers=header["experiment"]["checkers"],
        destination=header["experiment"]["workload"]["destination"], topic=False, nemesis_kinds=("kill", "partition"),
        cluster=ClusterSettings(load_balancing="ON_DEMAND", redistribution_delay_ms=2000),
        checker_list=header["checkers"])
    assert "redistribution" in [c["name"] for c in parsed.checker_list["checks"]]
    record = record_of([_event(header)])
    assert (record.load_balancing, record.redistribution_delay_ms) == ("ON_DEMAND", 2000)
    assert redistribution.CHECKER.record_options(record) == {"load_balancing": "ON_DEMAND",
                                                             "redistribution_delay_ms": 2000}


def test_a_cluster_option_the_file_left_unset_is_the_documented_default():
    header = _header_of("reference-cluster-redistribution.toml")
    header["experiment"]["topology"].update(message_load_balancing=None, redistribution_delay_ms=None)
    assert ExperimentHeader.parse(header).cluster == ClusterSettings("ON_DEMAND", -1)  # CLUSTER_CONNECTION_DEFAULTS


@pytest.mark.parametrize("file_name, topic, kinds", [
    ("slow-topic-subscriber.toml", True, ("latency", "bandwidth")),
    ("activemq-shared-store-failover.toml", False, ("kill",)),
    ("network-bridge-partition.toml", False, ("partition",)),
])
def test_a_new_header_of_another_shape_has_no_cluster_settings(file_name, topic, kinds):
    parsed = ExperimentHeader.parse(_header_of(file_name))
    assert (parsed.topic, parsed.nemesis_kinds, parsed.cluster) == (topic, kinds, None)
    assert parsed.name == file_name.removesuffix(".toml") and isinstance(parsed.seed, int)


def test_a_value_without_an_experiment_is_no_header_and_wrong_types_count_as_absent():
    assert ExperimentHeader.parse({"format": 1}) is None and ExperimentHeader.parse("text") is None
    odd = ExperimentHeader.parse({"experiment": {"name": "x", "seed": True, "workload": "queue", "topology": [],
                                                 "nemesis": [{"kind": "kill"}, "stray"]}, "checkers": []})
    assert odd == ExperimentHeader(name="x", nemesis_kinds=("kill",))
    # an old history (no harness records): no header, the run id names the experiment
    record = record_of([{"process": 0, "type": "invoke", "f": "send", "value": {"destination": "topic://t"},
                         "run": "reference-kill-restart-20261122T052126Z"}])
    assert record.header is None and record.name == "reference-kill-restart" and record.topic is True


# --------------------------------------------------------------------------- read once

#: the header's tables: read from its dict in reports/history_header.py only
HEADER_KEYS = {"experiment", "topology", "workload", "nemesis"}
PARSER = ROOT / "reports" / "history_header.py"
#: the modules that read a history and decide its checks (the renderers and verdict.json's
#: writer read verdicts, whose "experiment" is the run's name, not the header's table)
JUDGES = ("reports/run_record.py", "reports/check_plan.py", "reports/checkers", "reports/pipeline")


def header_reads(source: str) -> list[str]:
    """``x.get("topology")`` or ``x["workload"]`` (read, not assigned) of a header table's key."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            key = node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        if key in HEADER_KEYS:
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_no_judge_reads_the_headers_dict():
    modules = sorted({path for where in JUDGES for path in
                      ([ROOT / where] if where.endswith(".py") else (ROOT / where).rglob("*.py"))})
    assert len(modules) > 20, modules  # the checkers and the pipeline were found
    wrong = [f"{path.relative_to(ROOT)}:{hit}" for path in modules
             for hit in header_reads(path.read_text(encoding="utf-8"))]
    assert not wrong, "the header's dict read outside reports/history_header.py:\n" + "\n".join(wrong)


def test_the_scan_finds_the_old_readers():
    source = ('topology = (self.experiment or {}).get("topology") or {}\n'
              'kind = (record.experiment.get("workload") or {}).get("kind")\n'
              'record.experiment = value["experiment"]\n'
              'checks["workload"] = {}\n')
    assert [hit.split(":")[0] for hit in header_reads(source)] == ["1", "2", "3"]
