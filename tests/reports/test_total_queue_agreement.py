"""The Spark total-queue job agrees with the pure-Python checker (reports/checkers/total_queue.py)
on literal histories and on real ones: a committed excerpt of a real run (the reference broker
killed twice under load, cut around the first kill so that sends and receives fall outside it),
a short run made for the session, and every history under reports/out when there are any."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chaos.history import read_history
from reports.checkers.total_queue import check_total_queue
from reports.pipeline.checkers import total_queue
from reports.pipeline.checkers.common import Context
from reports.pipeline.load import load

from .test_checkers import LITERALS

DATA = Path(__file__).parent / "data"
REAL_OUT = Path(__file__).resolve().parents[2] / "reports" / "out"


def _spark_side(spark, paths: list[Path]) -> dict[str, dict]:
    ctx = Context(spark, load(spark, paths[0].parent if len(paths) == 1 else paths[0].parents[1]).ops)
    output = total_queue.check(ctx)
    found: dict[str, dict] = {}
    for row in output.anomalies.collect():
        found.setdefault(row["run"], {}).setdefault(row["kind"], []).append(row["message_id"])
    return {r.run: {"valid": r.valid, "stats": r.stats, "ids": {k: sorted(v) for k, v in found.get(r.run, {}).items()}}
            for r in output.results}


def _python_side(path: Path) -> dict:
    result = check_total_queue(read_history(path))
    return {"valid": result.valid, "attempted": result.attempted, "enqueued": result.enqueued,
            "dequeued": result.dequeued, "lost": sorted(result.lost), "unexpected": sorted(result.unexpected),
            "duplicated": sorted(result.duplicated), "recovered": sorted(result.recovered)}


def _assert_agree(spark_result: dict, python: dict, where: str) -> None:
    stats = spark_result["stats"]
    assert spark_result["valid"] == python["valid"], where
    for key in ("attempted", "enqueued", "dequeued"):
        assert stats[key] == python[key], f"{where}: {key}"
    for kind in ("lost", "unexpected", "duplicated", "recovered"):
        assert spark_result["ids"].get(kind, []) == python[kind], f"{where}: {kind}"


def test_agrees_on_literal_histories(spark, tmp_path):
    queue_runs = {name: h for name, h in LITERALS.items() if any(e["f"] == "send" for e in h.lines)}
    paths = {name: h.write(tmp_path / "runs") for name, h in queue_runs.items()}
    spark_results = _spark_side(spark, list(paths.values()))
    assert set(spark_results) == set(paths)
    for name, path in paths.items():
        _assert_agree(spark_results[name], _python_side(path), name)


def test_agrees_on_real_run_excerpt(spark, tmp_path):
    path = tmp_path / "excerpt" / "history.jsonl"
    path.parent.mkdir()
    shutil.copy(DATA / "kill_restart_excerpt.jsonl", path)
    python = _python_side(path)
    assert python["lost"] and python["unexpected"]  # the excerpt is a demanding case, not a clean one
    [(run, result)] = _spark_side(spark, [path]).items()
    _assert_agree(result, python, run)


def _real_histories(limit: int = 4, max_bytes: int = 20_000_000) -> list[Path]:
    """A few queue runs from reports/out (the smallest: this must stay a quick test)."""
    if not REAL_OUT.is_dir():
        return []
    found = []
    for path in REAL_OUT.rglob("history.jsonl"):
        size = path.stat().st_size
        if 0 < size <= max_bytes:
            with open(path, "rb") as handle:
                if b'"queue://' in handle.read(200_000):
                    found.append((size, path))
    return [path for _, path in sorted(found)[:limit]]


@pytest.mark.slow
def test_agrees_on_real_histories(spark, tmp_path, fresh_queue_run):
    """A queue run made for this session (conftest's fresh_queue_run), and the smallest queue
    runs under reports/out when there are any."""
    # Copies: a run still being written must not change between the two readings.
    copies = []
    for i, source in enumerate([fresh_queue_run / "history.jsonl", *_real_histories()]):
        target = tmp_path / "real" / f"r{i}" / "history.jsonl"
        target.parent.mkdir(parents=True)
        shutil.copy(source, target)
        # a run cut off mid-line (still being written) is not a history yet
        if not target.read_bytes().endswith(b"\n"):
            target.unlink()
            continue
        copies.append(target)
    spark_results = _spark_side(spark, copies)
    compared = 0
    for path in copies:
        python = _python_side(path)
        run = read_history(path)[0]["run"]
        _assert_agree(spark_results[run], python, str(path))
        compared += 1
    assert compared
