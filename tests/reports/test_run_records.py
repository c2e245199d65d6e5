"""`brokerconf analyze` judges a run with its experiment's own checker settings, read from the
verdict.json that `brokerconf chaos run` writes beside the history (``checker_options``); a
setting given to the analysis overrides them, and a run without a record gets the defaults."""

from __future__ import annotations

import json

from reports.pipeline.analyze import analyze
from reports.checkers import failover_downtime as downtime
from reports.checkers import total_queue

from .test_checkers import LITERALS


def _with_record(tmp_path, name: str, options: dict | None):
    history = LITERALS[name].write(tmp_path)
    if options is not None:
        (history.parent / "verdict.json").write_text(json.dumps({"experiment": "x", "checker_options": options}))
    return history


def _results(spark, path, checker: str, engine: str, **options):
    return analyze(spark, path, checkers=[checker], engine=engine, **options).results


def test_duplicates_allowed_by_the_experiment(spark, tmp_path, engine):
    path = _with_record(tmp_path, "duplicate_after_ack", {"duplicates_allowed": True})
    [result] = _results(spark, path, total_queue.NAME, engine)
    assert result.valid is True and result.stats["duplicated"] == 1 and result.stats["duplicates_allowed"] is True


def test_duplicates_not_allowed_without_a_record(spark, tmp_path, engine):
    # judged with the default (not allowed), but only the duplicates make it false and nothing
    # says whether the experiment allowed them: unknown, as `brokerconf chaos run` says
    [result] = _results(spark, _with_record(tmp_path, "duplicate_after_ack", None), total_queue.NAME, engine)
    assert result.valid == "unknown" and result.stats["duplicates_allowed"] is False
    assert "does not say whether the experiment allowed" in result.reason


def test_the_analysis_setting_overrides_the_record(spark, tmp_path, engine):
    path = _with_record(tmp_path, "duplicate_after_ack", {"duplicates_allowed": True})
    [result] = _results(spark, path, total_queue.NAME, engine, duplicates_allowed=False)
    assert result.valid is False


def test_downtime_bound_from_the_experiment(spark, tmp_path, engine):
    # the literal run's client is back 3 s after the kill (test_checkers.test_failover_downtime_over_bound)
    path = _with_record(tmp_path, "failover_downtime", {"max_downtime_s": 2.7})
    [result] = _results(spark, path, downtime.NAME, engine)
    assert result.valid is False and result.stats["bound_s"] == 2.7
    [overridden] = _results(spark, path, downtime.NAME, engine, max_downtime_s=3.5)
    assert overridden.valid is True
