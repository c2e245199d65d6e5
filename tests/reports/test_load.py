"""Loading histories: files, run directories, trees of runs, Parquet; malformed lines."""

from __future__ import annotations

import json

import pytest

from reports.pipeline.analyze import analyze
from reports.pipeline.load import (HistoryNotFound, MalformedHistory, line_problem, load, messages,
                                   write_parquet)

from .histories import H, msg


def _lost(run: str = "lost") -> H:
    return H(run).send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0).drain(2, [])


def _with_bad_lines(tmp_path, bad: list[tuple[int, str]]):
    """The `_lost` history with ``bad`` lines inserted (at 1-based line numbers)."""
    path = _lost().write(tmp_path)
    lines = path.read_text().splitlines()
    for number, text in sorted(bad):
        lines.insert(number - 1, text)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_line_names_file_and_line(spark, tmp_path):
    path = _with_bad_lines(tmp_path, [(3, '{"index": 2, "time": 1, "process": 0, "type": "ok"')])
    with pytest.raises(MalformedHistory) as info:
        load(spark, path)
    message = str(info.value)
    assert f"{path}:3:" in message and "--skip-malformed" in message


@pytest.mark.parametrize("text, reason", [
    ("not json at all", "not a JSON object"),
    ("[1, 2]", "not a JSON object"),
    ('{"index": 1, "time": 2.5, "process": 0, "type": "ok", "f": "send"}', "not a JSON object"),
    ('{"index": 1, "time": 2, "process": 0, "type": "ok"}', "missing field(s) f"),
    ('{"index": 1, "time": 2, "process": 0, "type": "done", "f": "send"}', "type done is not one of"),
    ('{"index": 1, "time": 2, "process": "worker", "type": "ok", "f": "send"}', "process must be an integer"),
])
def test_line_problem(text, reason):
    assert reason in line_problem(text)


def test_valid_line_has_no_problem():
    assert line_problem('{"index": 1, "time": 2, "process": "nemesis", "type": "info", "f": "kill"}') is None
    assert line_problem("") is None


def test_skip_malformed_makes_every_verdict_unknown(spark, tmp_path):
    # The history loses a message (false) - but with a line skipped nobody can say so for sure.
    path = _with_bad_lines(tmp_path, [(2, "garbage"), (5, '{"index": 9, "time": 1, "process": 0, "type": "x", "f": "send"}')])
    histories = load(spark, path, skip_malformed=True)
    assert [(m.line, m.run) for m in histories.malformed] == [(2, "lost"), (5, "lost")]
    analysis = analyze(spark, path, skip_malformed=True, checkers=["total_queue"])
    assert [(m.line, m.run) for m in analysis.histories.malformed] == [(2, "lost"), (5, "lost")]
    [verdict] = analysis.verdicts
    assert verdict["valid"] == "unknown"
    check = verdict["checks"]["total_queue"]
    assert check["valid"] == "unknown" and check["stats"]["valid_without_skipped_lines"] is False
    assert f"{path}:2" in check["reason"] and len(verdict["skipped_lines"]) == 2


def test_drain_exploded_one_row_per_message(spark, tmp_path):
    path = (H("drained").send(0, "a").send(0, "b", seq=1)
            .drain(1, [msg("a"), msg("b", seq=1)]).write(tmp_path))
    rows = messages(load(spark, path).ops).where("f = 'drain'").orderBy("pos").collect()
    assert [(r["id"], r["pos"], r["seq"], r["index"]) for r in rows] == [("a", 0, 0, 5), ("b", 1, 1, 5)]


def test_value_kept_as_json_and_fields_extracted(spark, tmp_path):
    path = H("one").send(0, "a", producer=3, seq=7, group="g").write(tmp_path)
    ops = load(spark, path).ops
    [row] = ops.where("type = 'ok'").collect()
    assert json.loads(row["value"]) == msg("a", producer=3, seq=7, group="g")
    [m] = messages(ops).where("type = 'ok'").collect()
    assert (m["id"], m["producer"], m["seq"], m["destination"], m["group"]) == ("a", 3, 7, "queue://q", "g")


def test_tree_of_runs_and_run_directory(spark, tmp_path):
    _lost("run-1").write(tmp_path / "ci" / "job-1")
    _lost("run-2").write(tmp_path / "ci" / "job-2")
    tree = load(spark, tmp_path / "ci")
    assert sorted(r["run"] for r in tree.ops.select("run").distinct().collect()) == ["run-1", "run-2"]
    one = load(spark, tmp_path / "ci" / "job-1" / "run-1")
    assert [r["run"] for r in one.ops.select("run").distinct().collect()] == ["run-1"]


def test_run_without_run_field_named_after_its_directory(spark, tmp_path):
    path = _lost().write(tmp_path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        del line["run"]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [r["run"] for r in load(spark, path).ops.select("run").distinct().collect()] == ["lost"]


def test_parquet_round_trip(spark, tmp_path):
    path = _with_bad_lines(tmp_path / "in", [(2, "garbage")])
    histories = load(spark, path, skip_malformed=True)
    out = write_parquet(histories, tmp_path / "histories.parquet")
    assert (out / "run=lost").is_dir()
    again = load(spark, out)
    assert [(m.file, m.line) for m in again.malformed] == [(str(path.resolve()), 2)]
    assert sorted(again.ops.collect()) == sorted(histories.ops.collect())
    assert again.ops.columns == histories.ops.columns


def test_no_history_found(spark, tmp_path):
    with pytest.raises(HistoryNotFound, match="no history.jsonl"):
        load(spark, tmp_path)
    with pytest.raises(HistoryNotFound, match="no such file"):
        load(spark, tmp_path / "missing")
