"""The fused engine gives the SQL engine's verdicts, stats and anomaly rows, on one tree that mixes
queue runs (fused checkers) with topic runs (topic fan-out and slow consumer delegated to SQL)."""

from __future__ import annotations

import json

import pytest

from reports.pipeline.analyze import analyze

from .test_checkers import LITERALS
from .test_spark_slow_consumer import RUNS
from .test_spark_topic_fanout import HISTORIES, write_history


@pytest.mark.slow
def test_fused_and_sql_agree_on_every_literal_run(spark, tmp_path):
    for h in LITERALS.values():
        h.write(tmp_path)
    for name, events in HISTORIES.items():
        write_history(tmp_path, f"topic-{name}", events)
    for name, (events, counters, slow) in RUNS.items():
        write_history(tmp_path, f"slow-{name}", events, counters, slow)
    sql, fused = (analyze(spark, tmp_path, engine=e) for e in ("sql", "fused"))
    as_json = lambda a: {v["run"]: json.loads(json.dumps(v, sort_keys=True, default=str)) for v in a.verdicts}  # noqa: E731
    want, got = as_json(sql), as_json(fused)
    assert sorted(got) == sorted(want)
    for run in want:
        assert got[run] == want[run], run
    assert sorted(map(str, fused.anomalies_df.collect())) == sorted(map(str, sql.anomalies_df.collect()))
