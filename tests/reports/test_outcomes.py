"""The ``outcomes`` measurement (reports/checkers/outcomes.py, Jepsen's stats): literal histories
with known counts of ok / fail / info per operation, error texts and in-doubt sends delivered or
not, judged by `brokerconf chaos run`'s judge (events), over the C scanner's columns (what a Spark
task reads), by the Spark driver, and split into parts: every way gives the same result."""

from __future__ import annotations

import json

import pytest

from reports.checkers import outcomes, registry, split
from reports.checkers.history import Columns, flat_table
from reports.judge import judge_history
from reports.pipeline.fused.load import read_history_file

from .histories import H, msg

KEY = ("outcomes", "t")


def _completed(h: H, process, f: str, outcome: str, value=None, error: str | None = None) -> None:
    h.op(process, "invoke", f, value)
    h.op(process, outcome, f, value, **({"error": error} if error is not None else {}))


def sends_in_doubt() -> H:
    """Five sends: a confirmed, b / c / e in doubt, d refused. b arrives at a receive, e in the
    drain, c never; the nemesis's kill is not an operation of the clients. Two receives poll in
    vain; the only ack ends in doubt."""
    h = H("outcomes").send(0, "a")
    _completed(h, 0, "send", "info", msg("b", seq=1), "connection reset")
    _completed(h, 10, "send", "info", msg("c", seq=2), "connection reset")
    _completed(h, 11, "send", "fail", msg("d", seq=3), "refused: queue full")
    _completed(h, 11, "send", "info", msg("e", seq=4), "timed out waiting for a receipt")
    h.kill(at=20)
    h.receive(1, "a", consumer=0).receive(1, "b", seq=1, consumer=0)
    for _ in range(2):
        _completed(h, 1, "receive", "fail", None, "nothing arrived within 0.5s")
    _completed(h, 1, "ack", "info", msg("b", seq=1, consumer=0), "broken pipe")
    h.restart(at=40, killed_at=20)
    return h.drain(2, [msg("e", seq=4)])


EXPECTED = {
    "by_f": {
        "ack": {"ok": 0, "fail": 0, "info": 1, "fail_errors": [], "info_errors": [["broken pipe", 1]]},
        "drain": {"ok": 1, "fail": 0, "info": 0, "fail_errors": [], "info_errors": []},
        "receive": {"ok": 2, "fail": 2, "info": 0, "fail_errors": [["nothing arrived within 0.5s", 2]],
                    "info_errors": []},
        "send": {"ok": 1, "fail": 1, "info": 3, "fail_errors": [["refused: queue full", 1]],
                 "info_errors": [["connection reset", 2], ["timed out waiting for a receipt", 1]]},
    },
    "never_ok": ["ack"],
    "in_doubt_sends": {"messages": 3, "delivered": 2, "never_delivered": 1},
}


def _judged(facts: dict):
    return registry.judge(outcomes.NAME, KEY, facts)


def test_counts_errors_and_in_doubt_sends_on_the_event_judge(tmp_path):
    """`brokerconf chaos run`'s judge: the counts in verdict.json's measurements, never a check."""
    verdict = judge_history(sends_in_doubt().write(tmp_path))
    assert verdict["measurements"][outcomes.NAME]["stats"] == EXPECTED
    assert outcomes.NAME not in verdict["checks"] and outcomes.NAME not in verdict["not_applied"]
    assert "sends in doubt: 3 messages, 2 delivered nevertheless, 1 never" in verdict["summary"]
    assert any(line.startswith("outcomes of send: 1 ok, 1 fail, 3 info; info: 'connection reset' x2")
               for line in verdict["summary"]), verdict["summary"]


def test_the_columns_a_spark_task_reads_give_the_same_result(tmp_path):
    """The C scanner's columns (fused/load.py, what a Spark task judges from) and the events'
    give one result and one table."""
    path = sends_in_doubt().write(tmp_path)
    scanned = _judged(registry.facts_of(Columns(read_history_file(path).table)))
    from_events = _judged(registry.facts_of(Columns(flat_table(sends_in_doubt().lines))))
    assert scanned[0].to_json() == from_events[0].to_json() and scanned[0].stats == EXPECTED
    assert sorted(scanned[2]) == sorted(from_events[2]) == [
        (*KEY, "ack", 0, 0, 1, None, None), (*KEY, "drain", 1, 0, 0, None, None),
        (*KEY, "receive", 2, 2, 0, None, None), (*KEY, "send", 1, 1, 3, 2, 1)]


def test_the_spark_driver_agrees_with_chaos_runs_judge(spark, tmp_path):
    """`brokerconf analyze` on the same history: the same stats, shown beside the verdict (never
    merged into it), and its rows in the ``outcomes`` table."""
    from reports.pipeline.analyze import analyze

    path = sends_in_doubt().write(tmp_path)
    analysis = analyze(spark, tmp_path)
    [result] = [r for r in analysis.results if r.checker == outcomes.NAME]
    assert json.loads(json.dumps(result.stats)) == judge_history(path)["measurements"][outcomes.NAME]["stats"]
    assert result.valid is True and result.applicable
    [verdict] = analysis.verdicts
    assert outcomes.NAME not in verdict["failed"] + verdict["unknown"]
    rows = sorted(tuple(r.values()) for r in analysis.tables[outcomes.NAME].to_arrow().to_pylist())
    assert rows[-1] == (*KEY, "send", 1, 1, 3, 2, 1), rows


def many_clients_failing() -> H:
    """Eight client processes, each sending twice: the first send ok, the second in doubt with
    the same error; the even ones' messages arrive later. Split by client or by id, each part
    sees some processes and some messages only."""
    h = H("outcomes")
    for p in range(8):
        h.send(p, f"ok-{p}", producer=p)
        _completed(h, p, "send", "info", msg(f"doubt-{p}", producer=p, seq=1), "connection refused")
    for p in range(0, 8, 2):
        h.receive(20 + p, f"doubt-{p}", producer=p, seq=1, consumer=p)
    return h.drain(30, [msg(f"ok-{p}", producer=p) for p in range(8)])


@pytest.mark.parametrize("k, pieces", [(2, 1), (3, 3), (5, 2)])
def test_a_split_run_gives_the_result_of_the_whole(k, pieces):
    table = flat_table(many_clients_failing().lines)
    whole = _judged(registry.facts_of(Columns(table)))
    parts = _judged(split.facts_split(table, k, pieces))
    assert parts[0].to_json() == whole[0].to_json()
    assert sorted(parts[2]) == sorted(whole[2])
    assert whole[0].stats["by_f"]["send"] == {"ok": 8, "fail": 0, "info": 8, "fail_errors": [],
                                               "info_errors": [["connection refused", 8]]}
    assert whole[0].stats["in_doubt_sends"] == {"messages": 8, "delivered": 4, "never_delivered": 4}


def test_only_the_three_most_frequent_error_texts_are_shown():
    """Ties go by the text, so both judges and every split list the same three."""
    h = H("outcomes")
    for n, text in ((1, "w"), (2, "z"), (3, "x"), (2, "y")):
        for _ in range(n):
            _completed(h, 1, "ack", "fail", msg("m"), text)
    result, _, _ = _judged(registry.facts_of(Columns(flat_table(h.lines))))
    assert result.stats["by_f"]["ack"]["fail_errors"] == [["x", 3], ["y", 2], ["z", 2]]
    assert result.stats["by_f"]["ack"]["fail"] == 8


def test_a_run_without_client_operations_has_nothing_to_measure():
    h = H("outcomes").kill(at=1)
    result, _, table = _judged(registry.facts_of(Columns(flat_table(h.lines))))
    assert (result.applicable, result.reason, table) == (False, "no completed client operation", [])
