"""`brokerconf analyze`: exit status, what it writes, what it prints."""

from __future__ import annotations

import json

import pytest

from brokerconf.cli import build_parser, cmd_analyze
from reports.pipeline import analyze as analyze_module

from .histories import H


def _args(*argv: str):
    args = build_parser().parse_args(["analyze", *argv])
    assert args.func is cmd_analyze
    return args


def _run(*argv: str) -> int:
    # `run`, not the command's `run_and_stop`: the tests share one Spark session.
    return analyze_module.run(_args(*argv), progress=lambda line: print(line))


def test_lost_message_exits_1_and_names_the_message(spark, tmp_path, capsys, engine):
    history = (H("cli-lost").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0)
               .drain(2, []).write(tmp_path / "runs"))
    out = tmp_path / "out"
    assert _run(str(history), "--out", str(out), "--engine", engine) == 1
    printed = capsys.readouterr().out
    assert "cli-lost [t]: INVALID" in printed and "total_queue FAILED (1 lost)" in printed
    verdicts = json.loads((out / "verdicts.json").read_text())
    assert verdicts["valid"] is False
    [run] = verdicts["runs"]
    assert [(a["checker"], a["kind"], a["message_id"]) for a in run["anomalies"]] == [("total_queue", "lost", "b")]
    rows = spark.read.parquet(str(out / "anomalies.parquet")).collect()
    assert [(r["kind"], r["message_id"], r["ops"]) for r in rows] == [("lost", "b", [2, 3])]
    assert {r["checker"] for r in spark.read.parquet(str(out / "verdicts.parquet")).collect()} >= {"total_queue", "fifo"}
    for table in ("latency", "throughput", "downtime"):
        assert (out / f"{table}.parquet").is_dir()

    # The Parquet written back is an input too, and gives the same verdict.
    again = tmp_path / "again"
    assert _run(str(out / "histories.parquet"), "--out", str(again), "--engine", engine) == 1
    assert json.loads((again / "verdicts.json").read_text())["runs"][0]["anomalies"] == run["anomalies"]
    assert not (again / "histories.parquet").exists()


def test_skip_malformed_exits_0_with_unknown(spark, tmp_path, capsys, engine):
    path = H("cli-skip").send(0, "a").receive(1, "a", consumer=0).drain(2, []).write(tmp_path)
    path.write_text(path.read_text() + "{broken\n")
    assert _run(str(path), "--out", str(tmp_path / "bad"), "--engine", engine) == 2
    assert f"{path}:7" in capsys.readouterr().err
    assert _run(str(path), "--out", str(tmp_path / "out"), "--skip-malformed", "--engine", engine) == 0
    printed = capsys.readouterr().out
    assert "cli-skip [t]: unknown" in printed and f"skipped {path}:7" in printed


@pytest.mark.parametrize("argv, message", [
    (["/nonexistent/history.jsonl"], "no such file or directory"),
    (["{tmp}", "--master", "yarn"], "unsupported Spark master 'yarn'"),
    (["{tmp}"], "no history.jsonl in it or below it"),
])
def test_bad_input_exits_2(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert _run(*argv) == 2
    assert message in capsys.readouterr().err
