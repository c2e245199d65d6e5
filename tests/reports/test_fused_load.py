"""The fused engine's loader (reports/pipeline/fused/load.py): one typed JSON scan, flattened to
one row per message, with the SQL loader's messages and malformed-line rules."""

from __future__ import annotations

import json

import pytest

from reports.pipeline import load as sql_load
from reports.pipeline.analyze import analyze, write
from reports.pipeline.fused import load as fused
from reports.pipeline.load import HistoryNotFound, MalformedHistory

from .histories import H, msg


def _mixed(run: str = "mixed") -> H:
    """Every value shape the loader meets: messages, a drain's list, a wrapped list, nemesis steps
    with fault windows, a request without an id, a null value."""
    h = H(run).send(0, "a", group="g").send(0, "b", seq=1).receive(1, "a", consumer=0, group="g")
    h.kill(at=100).restart(at=200, killed_at=100)
    h.call(1, "subscribe", {"destination": "topic://t", "subscriber": 4, "slow": True})
    h.call(2, "receive", result={"messages": [msg("b", seq=1, consumer=1)], "subscriber": 4})
    return h.drain(3, [msg("c", producer=2, seq=5), msg("d", producer=2, seq=6)]).drain(3, [])


def _rows(df):
    return sorted(tuple((k, json.dumps(v, default=str, sort_keys=True)) for k, v in r.asDict(recursive=True).items())
                  for r in df.select(*fused.FLAT_COLUMNS).collect())


def test_flat_rows_match_the_sql_loaders_messages(spark, tmp_path):
    path = _mixed().write(tmp_path)
    typed = fused.load(spark, path).ops
    via_sql = fused.from_sql_ops(sql_load.load(spark, path).ops)
    assert _rows(typed) == _rows(via_sql)
    drain = typed.where("f = 'drain' and type = 'ok' and pos is not null").orderBy("index", "pos").collect()
    assert [(r["id"], r["pos"], r["seq"]) for r in drain] == [("c", 0, 5), ("d", 1, 6)]


def test_value_that_does_not_fit_the_struct_is_parsed_again(spark, tmp_path):
    # `seq` as text does not fit the typed struct: the line is re-read with the SQL loader's rules
    h = H("odd").send(0, "a")
    h.op(0, "invoke", "send", {"id": "x", "seq": "not a number", "destination": "queue://q"})
    path = h.write(tmp_path)
    assert _rows(fused.load(spark, path).ops) == _rows(fused.from_sql_ops(sql_load.load(spark, path).ops))


def test_malformed_line_names_file_and_line(spark, tmp_path):
    path = _mixed().write(tmp_path)
    lines = path.read_text().splitlines()
    lines.insert(3, '{"index": 2, "time": 1, "process": 0, "type": "ok"')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MalformedHistory) as info:
        fused.load(spark, path)
    assert f"{path}:4:" in str(info.value) and "--skip-malformed" in str(info.value)


def test_skip_malformed_lists_the_same_lines_as_the_sql_loader(spark, tmp_path):
    path = _mixed().write(tmp_path)
    lines = path.read_text().splitlines()
    lines.insert(1, "garbage")
    lines.insert(5, '{"index": 9, "time": 1, "process": "worker", "type": "ok", "f": "send"}')
    path.write_text("\n".join(lines) + "\n")
    got = fused.load(spark, path, skip_malformed=True)
    want = sql_load.load(spark, path, skip_malformed=True)
    assert got.malformed == want.malformed and [m.line for m in got.malformed] == [2, 6]
    assert _rows(got.ops) == _rows(fused.from_sql_ops(want.ops))


def test_lean_parquet_round_trip_has_no_json(spark, tmp_path):
    path = _mixed().write(tmp_path / "in")
    histories = fused.load(spark, path)
    out = fused.write_parquet(histories, tmp_path / "histories.parquet")
    again = fused.load(spark, out)
    assert "value" not in again.ops.columns and "msgs" not in again.ops.columns
    assert _rows(again.ops) == _rows(histories.ops)


def test_reads_parquet_written_by_the_sql_engine(spark, tmp_path):
    path = _mixed().write(tmp_path / "in")
    out = sql_load.write_parquet(sql_load.load(spark, path), tmp_path / "old.parquet")
    assert _rows(fused.load(spark, out).ops) == _rows(fused.load(spark, path).ops)


def test_sql_engine_refuses_lean_parquet_clearly(spark, tmp_path):
    path = _mixed().write(tmp_path / "in")
    out = fused.write_parquet(fused.load(spark, path), tmp_path / "lean.parquet")
    with pytest.raises(HistoryNotFound, match="without the history columns"):
        sql_load.load(spark, out)


def test_analysis_written_and_read_back_gives_the_same_verdicts(spark, tmp_path):
    path = _mixed().write(tmp_path / "in")
    first = analyze(spark, path, engine="fused")
    write(first, tmp_path / "out", spark=spark)
    second = analyze(spark, tmp_path / "out" / "histories.parquet", engine="fused")
    assert json.dumps(first.verdicts, sort_keys=True, default=str) == json.dumps(second.verdicts, sort_keys=True, default=str)
