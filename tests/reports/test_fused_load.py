"""The fused engine's loader (reports/pipeline/fused/load.py): a history file read with pyarrow into
flat rows (one per message), by the SQL loader's message and malformed-line rules; the slow
line-by-line path gives the same rows as the typed one; lean Parquet round trips."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reports.pipeline import load as sql_load
from reports.pipeline.analyze import analyze
from reports.pipeline.fused import load as fused
from reports.pipeline.load import MESSAGE_SCHEMA, HistoryNotFound, MalformedHistory

from .histories import H, msg

_FAULT_WINDOW = T.ArrayType(T.StructType([T.StructField(n, t) for n, t in (
    ("fault", T.StringType()), ("f", T.StringType()), ("start", T.LongType()), ("end", T.LongType()))]))
_NEMESIS = T.StructType([T.StructField("phase", T.StringType()), T.StructField("fault", T.StringType()),
                         T.StructField("started", T.LongType()), T.StructField("fault_window", _FAULT_WINDOW)])
_OP_KEYS = ("run", "target", "node", "file", "index", "time", "process", "type", "f", "error")


def from_sql_ops(ops):
    """The oracle: the SQL loader's ops (``value`` text, ``msgs``) as flat rows, in Spark."""
    nemesis = F.when(F.substring(F.ltrim(F.col("value")), 1, 1) == "{", F.from_json("value", _NEMESIS))
    flat = ops.select(*_OP_KEYS, F.posexplode_outer("msgs").alias("pos", "m"),
                      *[nemesis[c].alias(c) for c in _NEMESIS.fieldNames()])
    return flat.select(*_OP_KEYS, "pos", *[F.col(f"m.{c}").alias(c) for c in MESSAGE_SCHEMA.fieldNames()],
                       *_NEMESIS.fieldNames())


def _mixed(run: str = "mixed") -> H:
    """Every value shape the loader meets: messages, a drain's list, a wrapped list, nemesis steps
    with fault windows, a request without an id, a null value."""
    h = H(run).send(0, "a", group="g").send(0, "b", seq=1).receive(1, "a", consumer=0, group="g")
    h.kill(at=100).restart(at=200, killed_at=100)
    h.call(1, "subscribe", {"destination": "topic://t", "subscriber": 4, "slow": True})
    h.call(2, "receive", result={"messages": [msg("b", seq=1, consumer=1)], "subscriber": 4})
    return h.drain(3, [msg("c", producer=2, seq=5), msg("d", producer=2, seq=6)]).drain(3, [])


def _key(row: dict) -> tuple:
    return tuple((k, json.dumps(row[k], default=str, sort_keys=True)) for k in fused.FLAT_COLUMNS)


def _arrow_rows(table, *, file: bool = True) -> list[tuple]:
    rows = [dict(r, file=sql_load._uri_path(r["file"]) if file else None) for r in table.to_pylist()]  # pylint: disable=protected-access
    return sorted(_key(r) for r in rows)


def _spark_rows(df, *, file: bool = True) -> list[tuple]:
    rows = [dict(r.asDict(recursive=True)) for r in df.collect()]
    return sorted(_key(dict(r, file=sql_load._uri_path(r["file"]) if file else None)) for r in rows)  # pylint: disable=protected-access


@pytest.fixture(params=["scanner", "pyarrow"])
def reader(request, monkeypatch) -> str:
    """Both ways the loader parses: the C scanner (built by ``pip install -e .``) and pyarrow's
    reader (used where the scanner could not be compiled)."""
    if request.param == "pyarrow":
        monkeypatch.setattr(fused, "SCANNER", None)
    else:
        assert fused.SCANNER is not None, "the C scanner (reports/pipeline/fused/_scan.c) is not built: pip install -e ."
    return request.param


def test_flat_rows_match_the_sql_loaders_messages(spark, tmp_path, reader):
    path = _mixed().write(tmp_path)
    read = fused.read_history_file(path)
    assert read.note == "" and read.malformed == []
    assert _arrow_rows(read.table) == _spark_rows(from_sql_ops(sql_load.load(spark, path).ops))
    rows = sorted((r for r in read.table.to_pylist() if r["f"] == "drain" and r["pos"] is not None),
                  key=lambda r: (r["index"], r["pos"]))
    assert [(r["id"], r["pos"], r["seq"]) for r in rows] == [("c", 0, 5), ("d", 1, 6)]


def test_typed_and_line_by_line_reads_give_the_same_rows(tmp_path, reader):
    path = _mixed().write(tmp_path)
    typed = fused.read_history_file(path).table
    slow, malformed = fused._line_by_line(path.read_bytes(), path, False)  # pylint: disable=protected-access
    assert malformed == [] and _arrow_rows(typed) == _arrow_rows(slow)


def test_value_that_does_not_fit_the_types_is_read_by_the_reference_rules(spark, tmp_path, reader):
    # `seq` as text fits neither fast read: pyarrow's sends the whole file line by line, the
    # scanner hands just that line to the reference rules (seq becomes null, as in the SQL loader)
    h = H("odd").send(0, "a")
    h.op(0, "invoke", "send", {"id": "x", "seq": "not a number", "destination": "queue://q"})
    path = h.write(tmp_path)
    read = fused.read_history_file(path)
    assert ("read line by line" in read.note) == (reader == "pyarrow")
    assert _arrow_rows(read.table) == _spark_rows(from_sql_ops(sql_load.load(spark, path).ops))


def test_malformed_line_names_file_and_line(tmp_path, reader):
    path = _mixed().write(tmp_path)
    lines = path.read_text().splitlines()
    lines.insert(3, '{"index": 2, "time": 1, "process": 0, "type": "ok"')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MalformedHistory) as info:
        fused.read_history_file(path)
    assert f"{path}:4:" in str(info.value) and "--skip-malformed" in str(info.value)


def test_skip_malformed_lists_the_same_lines_as_the_sql_loader(spark, tmp_path, reader):
    path = _mixed().write(tmp_path)
    lines = path.read_text().splitlines()
    lines.insert(1, "garbage")
    lines.insert(5, '{"index": 9, "time": 1, "process": "worker", "type": "ok", "f": "send"}')
    path.write_text("\n".join(lines) + "\n")
    got = fused.read_history_file(path, skip_malformed=True)
    want = sql_load.load(spark, path, skip_malformed=True)
    assert got.malformed == want.malformed and [m.line for m in got.malformed] == [2, 6]
    assert _arrow_rows(got.table) == _spark_rows(from_sql_ops(want.ops))


def test_lean_parquet_round_trip_has_no_json(tmp_path, reader):
    path = _mixed().write(tmp_path / "in")
    table = fused.read_history_file(path).table
    [written] = fused.write_runs(table, tmp_path / "histories.parquet")
    fused.finish_parquet(tmp_path / "histories.parquet", [])
    [(run, target, directory)] = fused.run_dirs(tmp_path / "histories.parquet")
    assert (run, target) == ("mixed", "t") and written.startswith(directory)
    again = fused.read_run_parquet(run, target, directory)
    assert "value" not in again.column_names and "msgs" not in again.column_names
    assert _arrow_rows(again) == _arrow_rows(table)


def test_parquet_written_by_the_former_sql_engine_is_refused_with_the_way_out(spark, tmp_path):
    path = _mixed().write(tmp_path / "in")
    out = sql_load.write_parquet(sql_load.load(spark, path), tmp_path / "old.parquet")
    with pytest.raises(HistoryNotFound, match="former SQL engine; analyse the run's history.jsonl"):
        analyze(spark, out, engine="fused")


def test_sql_engine_refuses_lean_parquet_clearly(spark, tmp_path):
    path = _mixed().write(tmp_path / "in")
    analyze(spark, path, engine="fused", histories_out=tmp_path / "lean.parquet")
    with pytest.raises(HistoryNotFound, match="written by the fused engine"):
        sql_load.load(spark, tmp_path / "lean.parquet")


def test_analysis_written_and_read_back_gives_the_same_verdicts(spark, tmp_path):
    path = _mixed().write(tmp_path / "in")
    first = analyze(spark, path, engine="fused", histories_out=tmp_path / "out" / "histories.parquet")
    second = analyze(spark, tmp_path / "out" / "histories.parquet", engine="fused")
    assert second.notes == []
    assert json.dumps(first.verdicts, sort_keys=True, default=str) == json.dumps(second.verdicts, sort_keys=True, default=str)


def test_run_split_over_two_files_is_judged_whole_by_one_task(spark, tmp_path):
    h = H("split").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0).drain(2, [])
    path = h.write(tmp_path / "one")
    lines = path.read_text().splitlines(keepends=True)
    other = tmp_path / "two" / "split" / "history.jsonl"
    other.parent.mkdir(parents=True)
    other.write_text("".join(lines[3:]))
    path.write_text("".join(lines[:3]))
    result = analyze(spark, tmp_path, engine="fused")
    [verdict] = result.verdicts  # one run, not one per file
    assert verdict["valid"] is False  # "b" was confirmed and never received
    assert [(a["kind"], a["message_id"]) for a in verdict["anomalies"]] == [("lost", "b")]


def test_progress_reports_finished_histories_while_the_job_runs():
    """The analysis of a long history says how far it got (Spark's status tracker, polled)."""
    import threading
    from types import SimpleNamespace

    from reports.pipeline.fused import engine

    done = {"n": 0}
    tracker = SimpleNamespace(getJobIdsForGroup=lambda group: [7] if group == "g" else [],
                              getJobInfo=lambda job: SimpleNamespace(stageIds=[1]),
                              getStageInfo=lambda stage: SimpleNamespace(numCompletedTasks=done["n"]))
    heard: list[str] = []
    step = threading.Event()

    def progress(line: str) -> None:
        heard.append(line)
        step.set()

    watcher = engine._Progress(SimpleNamespace(statusTracker=lambda: tracker), "g", 3, progress)  # pylint: disable=protected-access
    watcher.INTERVAL_S = 0.01
    with watcher:
        assert step.wait(5)
        step.clear()
        done["n"] = 2
        assert step.wait(5)
    assert heard[:2] == ["  0/3 histories read and checked", "  2/3 histories read and checked"]
    assert not watcher.thread.is_alive()


def test_malformed_line_leaves_no_half_written_parquet(spark, tmp_path):
    good = H("good").send(0, "a").receive(1, "a", consumer=0).drain(2, []).write(tmp_path / "runs")
    bad = H("bad").send(0, "a").write(tmp_path / "runs")
    bad.write_text(bad.read_text() + "{broken\n")
    out = tmp_path / "out" / "histories.parquet"
    with pytest.raises(MalformedHistory, match="bad/history.jsonl:3"):
        analyze(spark, tmp_path / "runs", engine="fused", histories_out=out)
    assert good.exists() and not out.exists()


def test_cli_will_not_overwrite_a_directory_it_did_not_write(spark, tmp_path, capsys):
    from brokerconf.cli import build_parser
    from reports.pipeline import analyze as analyze_module

    path = H("mine").send(0, "a").receive(1, "a", consumer=0).drain(2, []).write(tmp_path / "runs")
    precious = tmp_path / "out" / "histories.parquet" / "notes.txt"
    precious.parent.mkdir(parents=True)
    precious.write_text("not ours")
    args = build_parser().parse_args(["analyze", str(path), "--out", str(tmp_path / "out"), "--engine", "fused"])
    assert analyze_module.run(args, progress=print) == 2
    assert "is not histories Parquet written by `brokerconf analyze`" in capsys.readouterr().err
    assert precious.read_text() == "not ours"


def test_a_line_too_long_for_the_scanner_goes_to_pyarrows_reader(tmp_path, monkeypatch):
    # The scanner's string offsets are 32-bit: a span it cannot take (made small here) is left to
    # pyarrow's reader, which gives the same rows.
    path = _mixed().write(tmp_path)
    calls = []
    typed = fused._typed  # pylint: disable=protected-access
    monkeypatch.setattr(fused, "_typed", lambda p: calls.append(p) or typed(p))
    monkeypatch.setattr(fused, "_MAX_SPAN", 100)
    read = fused.read_history_file(path)
    slow, _ = fused._line_by_line(path.read_bytes(), path, False)  # pylint: disable=protected-access
    assert calls == [path] and _arrow_rows(read.table) == _arrow_rows(slow)


def test_integers_beyond_64_bits_and_lone_surrogates_read_as_the_sql_loader_reads_them(spark, tmp_path, reader):
    # They once crashed the reference rules (OverflowError, UnicodeEncodeError): an index beyond
    # 64 bits is a malformed line (named by number), a message field beyond 64 bits is null, and a
    # lone surrogate escape reads as "?", as Spark's reader gives them.
    path = tmp_path / "r" / "history.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join([
        '{"index":0,"time":1,"process":1,"type":"invoke","f":"send","value":{"id":"a","producer":1}}',
        '{"index":12345678901234567890123,"time":2,"process":1,"type":"ok","f":"send","value":{"id":"a"}}',
        '{"index":2,"time":3,"process":1,"type":"invoke","f":"send","value":{"id":"b","producer":123456789012345678901234}}',
        '{"index":3,"time":4,"process":1,"type":"ok","f":"send","value":{"id":"b\\ud83d","producer":1},"error":"x\\udc00"}',
    ]) + "\n")
    got = fused.read_history_file(path, skip_malformed=True)
    want = sql_load.load(spark, path, skip_malformed=True)
    assert [m.line for m in got.malformed] == [m.line for m in want.malformed] == [2]
    assert _arrow_rows(got.table) == _spark_rows(from_sql_ops(want.ops))
    assert {(r["id"], r["producer"], r["error"]) for r in got.table.to_pylist()} == {
        ("a", 1, None), ("b", None, None), ("b?", 1, "x?")}


def test_files_sharing_a_run_are_read_by_one_task():
    """Files connected through shared runs form one unit (engine._split_files, engine._joined)."""
    from types import SimpleNamespace

    from reports.pipeline.fused import engine

    keys = {"a": [("r1", "t")], "b": [("r2", "t")], "c": [("r1", "t"), ("r3", "t")], "d": [("r3", "t")]}
    units = [engine.Unit("jsonl", p) for p in "abcd"]

    class Context:
        def parallelize(self, items, n):
            return SimpleNamespace(map=lambda f: SimpleNamespace(collect=lambda: [(u.path, keys[u.path]) for u in items]))

    groups = engine._split_files(SimpleNamespace(sparkContext=Context()), units, False)  # pylint: disable=protected-access
    assert groups == [{"a", "c", "d"}]
    joined = engine._joined(units, groups)  # pylint: disable=protected-access
    assert sorted((u.path, u.more) for u in joined) == [("a", ("c", "d")), ("b", ())]
