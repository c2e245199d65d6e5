"""Comparison: runs' verdicts and conformance matrices joined into target x spec and target x checker."""

from __future__ import annotations

import json

import pytest

from reports.pipeline.compare import CompareError, compare, write


def _matrix(path, generated_at, cells):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"generated_at": generated_at, "matrix": {
        target: {spec: {"outcome": outcome, "reason": "", "tests": []} for spec, outcome in specs.items()}
        for target, specs in cells.items()}}))


def _verdicts(path, runs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": [
        {"run": run, "target": target, "checks": {name: {"valid": valid, "applicable": applicable}
                                                  for name, (valid, applicable) in checks.items()}}
        for run, target, checks in runs]}))


def test_compare_joins_matrices_and_verdicts(spark, tmp_path):
    _matrix(tmp_path / "ci-1" / "matrix.json", "2026-01-01T00:00:00Z",
            {"reference": {"Q-FIFO-1": "passed", "GRP-PIN-1": "passed"},
             "activemq": {"Q-FIFO-1": "passed", "GRP-PIN-1": "known deviation"}})
    _matrix(tmp_path / "ci-2" / "matrix.json", "2026-01-02T00:00:00Z",
            {"reference": {"Q-FIFO-1": "failed"}, "activemq": {"Q-FIFO-1": "not applicable"}})
    _verdicts(tmp_path / "ci-1" / "analysis" / "verdicts.json", [
        ("kill-1", "reference:process", {"total_queue": (True, True), "fifo": (True, False), "latency": (True, True)}),
        ("kill-2", "reference:process", {"total_queue": ("unknown", True)}),
        ("kill-3", "activemq", {"total_queue": (False, True), "groups": (True, True)}),
    ])
    result = compare(spark, [tmp_path])
    # a failure in any run shows: failed beats passed
    assert result["specs"]["Q-FIFO-1"] == {"activemq": "passed", "reference": "failed"}
    assert result["specs"]["GRP-PIN-1"] == {"activemq": "known deviation", "reference": "passed"}
    assert result["spec_runs"]["Q-FIFO-1"]["reference"] == {"ci-1@2026-01-01T00:00:00Z": "passed",
                                                           "ci-2@2026-01-02T00:00:00Z": "failed"}
    # unknown beats true; a check that did not apply (fifo) is left out; launch mode folded into the kind
    assert result["checkers"]["total_queue"] == {"activemq": False, "reference": "unknown"}
    assert "fifo" not in result["checkers"]
    # a measurement is a figure, not a check that passed: no cell of its own
    assert "latency" not in result["checkers"]
    assert result["targets"] == ["activemq", "reference"]
    path = write(result, tmp_path / "out")
    assert json.loads(path.read_text())["checkers"]["groups"] == {"activemq": True}
    rows = spark.read.parquet(str(tmp_path / "out" / "specs.parquet")).collect()
    assert {(r["target"], r["spec"], r["outcome"]) for r in rows} >= {("reference", "Q-FIFO-1", "failed")}


def test_compare_needs_inputs(spark, tmp_path):
    with pytest.raises(CompareError, match="no matrix.json or verdicts.json"):
        compare(spark, [tmp_path])


def test_compare_rejects_a_file_that_is_not_a_matrix(spark, tmp_path):
    (tmp_path / "matrix.json").write_text("[1, 2]")
    with pytest.raises(CompareError, match="not a conformance matrix"):
        compare(spark, [tmp_path])
