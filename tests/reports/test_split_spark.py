"""The split path of the Spark job (reports/pipeline/fused/split_job.py): a history above the
threshold is read in pieces and judged in parts split by each checker's key, and its verdicts,
anomalies and measurement tables are those of the same history judged whole, from JSON lines and
from the Parquet written back. The benchmark's generated history at a small size, with anomalies
planted on top, and a tiny threshold force the split."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from reports.pipeline.analyze import analyze
from reports.pipeline.fused import split_job

from .histories import msg

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pipeline_bench import generate  # noqa: E402  (the benchmark's own history generator)

NEVER = 10**12


def _bench_history(directory: Path, ops: int = 12_000) -> Path:
    """The benchmark's history, then planted: a lost message, an unexpected one, a duplicate, a
    group stolen between two consumers with no close or fault between, a reordered pair."""
    path = directory / "bench" / "history.jsonl"
    path.parent.mkdir(parents=True)
    generate(path, ops, kill_every=3_000, run="bench")
    last = [json.loads(line) for line in path.read_text().splitlines()[-1:]][0]
    index, now = last["index"] + 1, last["time"]
    head = {"target": "bench", "node": "A", "run": "bench"}
    planted = []

    def op(process, type_, f, value):
        nonlocal index, now
        now += 50_000
        planted.append({"index": index, "time": now, "process": process, "type": type_, "f": f, "value": value, **head})
        index += 1

    lost = msg("planted-lost", producer=9, seq=0, dest="queue://bench")
    op(90, "invoke", "send", lost)
    op(90, "ok", "send", lost)
    for message_id, group, consumer_process in (("planted-u", None, 91), ("planted-g1", "gx", 92),
                                                 ("planted-g2", "gx", 93)):
        op(consumer_process, "invoke", "receive", None)
        op(consumer_process, "ok", "receive", msg(message_id, producer=8, seq=5 if message_id == "planted-g1" else 1,
                                                  dest="queue://bench", group=group))
    with path.open("a") as out:
        out.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in planted)
    return path


def _outcome(analysis) -> dict:
    tables = {name: sorted(map(tuple, (r.asDict().values() if hasattr(r, "asDict") else r
                                        for r in table.collect())), key=repr)
              for name, table in analysis.tables.items()}
    return {"verdicts": json.loads(json.dumps(analysis.verdicts, sort_keys=True, default=str)),
            "results": sorted(json.dumps(r.to_json(), sort_keys=True, default=str) for r in analysis.results),
            "anomalies": analysis.anomalies, "tables": tables}


def test_a_run_split_by_key_gives_the_verdicts_of_the_whole_run(spark, tmp_path):
    path = _bench_history(tmp_path)
    whole = analyze(spark, path, split_rows=NEVER, histories_out=tmp_path / "whole.parquet")
    assert not [t for t in whole.histories.timings if "split" in t]
    parted = analyze(spark, path, split_rows=2_000, histories_out=tmp_path / "split.parquet")
    timing = [t for t in parted.histories.timings if "split" in t]
    assert timing and timing[0]["split"] >= 2 and timing[0]["pieces"] >= 2, parted.histories.timings
    expected = _outcome(whole)
    kinds = {(a["checker"], a["kind"]) for a in whole.anomalies}
    # the comparison is over something: planted and generated anomalies, downtime rows, latencies
    assert {("total_queue", "lost"), ("total_queue", "unexpected"), ("groups", "stolen")} <= kinds, kinds
    assert expected["tables"]["downtime"] and expected["tables"]["latency"]
    assert _outcome(parted) == expected
    # the Parquet the split path wrote back, read in pieces again, gives the same too
    again = analyze(spark, tmp_path / "split.parquet", split_rows=2_000)
    assert [t for t in again.histories.timings if "split" in t]
    assert _outcome(again) == expected


def test_a_malformed_line_in_a_piece_keeps_its_line_number(spark, tmp_path):
    path = _bench_history(tmp_path, ops=6_000)
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(4_000, "{not json\n")
    path.write_text("".join(lines))
    whole = analyze(spark, path, split_rows=NEVER, skip_malformed=True)
    parted = analyze(spark, path, split_rows=1_000, skip_malformed=True)
    assert [m.describe() for m in parted.histories.malformed] == [m.describe() for m in whole.histories.malformed]
    assert [m.line for m in whole.histories.malformed] == [4_001]
    assert _outcome(parted) == _outcome(whole)


def test_a_bad_split_threshold_is_refused_naming_the_setting(spark, monkeypatch):
    monkeypatch.setenv(split_job.ENV, "lots")
    with pytest.raises(ValueError, match="BROKERCONF_SPLIT_ROWS='lots'"):
        split_job.split_rows_setting(spark, None)
    with pytest.raises(ValueError, match="split_rows must be a positive"):
        split_job.split_rows_setting(spark, 0)
