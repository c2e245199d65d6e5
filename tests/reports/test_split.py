"""A run split by each checker's own key (reports/checkers/split.py) gives the facts of the whole
run: ``combine(facts of the parts) == facts of the whole``, for the literal histories, for
hypothesis-generated histories with planted anomalies and for the benchmark's generated history,
for several numbers of parts and of pieces the rows arrive in. No Spark here (test_split_spark.py
runs the split path of the engine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.checkers import split
from reports.checkers.history import Columns
from reports.checkers.registry import check_all, facts_of

from .histories import H, msg
from .test_checkers import LITERALS
from .test_columnar_invariance import flat_table, histories, normalised

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pipeline_bench import generate  # noqa: E402  (the benchmark's own history generator)

KS = (1, 2, 3, 5)


def assert_split_gives_whole(table, ks=KS, pieces=(1, 3)) -> dict:
    whole = facts_of(Columns(table))
    expected = normalised(whole)
    for k in ks:
        for n in pieces:
            assert normalised(split.facts_split(table, k, n)) == expected, f"k={k} pieces={n}"
    return whole


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_literal_history_split_gives_the_facts_of_the_whole(name):
    assert_split_gives_whole(flat_table(LITERALS[name].lines))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(2, 6), st.integers(1, 4))
def test_generated_history_split_gives_the_facts_of_the_whole(events, k, pieces):
    assert_split_gives_whole(flat_table(events), ks=(k,), pieces=(pieces,))


def test_bench_history_split_gives_the_facts_of_the_whole(tmp_path):
    path = tmp_path / "bench" / "history.jsonl"
    path.parent.mkdir()
    generate(path, 20_000, kill_every=4_000)
    from reports.pipeline.fused.load import read_history_file

    whole = assert_split_gives_whole(read_history_file(path).table, ks=(2, 7), pieces=(1, 4))
    # the split is checked on something: kills to recover from, in-doubt sends, latencies
    assert whole["failover_downtime"]["rows"] and whole["latency"] and whole["total_queue"]["totals"]["dequeued"]


def _producers_in_different_parts(k: int) -> tuple[int, int]:
    by_part: dict[int, int] = {}
    for producer in range(50):
        by_part.setdefault(split._hash(f"#{producer}", k), producer)
    first, second = sorted(by_part.values())[:2]
    return first, second


def test_fifo_drops_an_inversion_on_a_queue_only_a_part_sees_with_one_consumer():
    """Two consumers share the queue (order is not promised), each sees one producer's messages
    out of order: a part with one producer sees a single consumer and an inversion; the combined
    scope leaves the queue out, as the whole run does."""
    a, b = _producers_in_different_parts(2)
    h = H("two-consumers")
    for producer, consumer in ((a, 0), (b, 1)):
        h.send(producer, f"p{producer}-1", producer=producer, seq=1).send(producer, f"p{producer}-0", producer=producer, seq=0)
        h.receive(10 + consumer, f"p{producer}-1", producer=producer, seq=1, consumer=consumer)
        h.receive(10 + consumer, f"p{producer}-0", producer=producer, seq=0, consumer=consumer)
    table = flat_table(h.lines)
    parts = split.parts(table, "producer", 2)
    assert len(parts) == 2
    seen = [split.part_facts(Columns(t), "producer")["fifo"] for t in parts.values()]
    assert all(len(p["found"]) == 1 for p in seen)  # each part alone would call it reordered
    whole = assert_split_gives_whole(table, ks=(2,))
    assert whole["fifo"]["found"] == [] and "2 consumers" in whole["fifo"]["scope"]["queue://q"]


def test_a_drain_spread_over_parts_is_renumbered_and_still_drains():
    h = H("drain").send(0, "a").send(0, "b", seq=1).send(0, "c", seq=2)
    h.drain(5, [msg("a"), msg("b", seq=1), msg("c", seq=2)])
    table = flat_table(h.lines)
    parts = split.parts(table, "id", 3)
    assert sum(t.num_rows for t in parts.values()) == 9  # the sends' two rows each and the drain's three
    for t in parts.values():
        t = split.gathered([t])
        drained = [p for p, f, ty in zip(t["pos"].to_pylist(), t["f"].to_pylist(), t["type"].to_pylist())
                   if f == "drain" and ty == "ok"]
        assert drained == list(range(len(drained)))
    whole = assert_split_gives_whole(table, ks=(3,))
    assert check_all(Columns(table))["total_queue"].valid is True and whole["total_queue"]["drained"]


def test_a_drain_cut_between_pieces_keeps_its_order_in_each_part():
    """A piece boundary inside a drain's list: the part of producer 0 gets m1 (seq 3) and m7 from
    the first piece, m6 (seq 0) from the second. Renumbered piece by piece, m6 became place 0 like
    the other piece's first message and moved ahead of m1, and the split run lost the inversion
    the whole run finds (hypothesis seed 148514896915532063364195756646210062297, reduced by hand)."""
    h = H("drain-cut")
    h.drain(0, [msg("m4", producer=None, seq=None), msg("m1", seq=3), msg("m7", seq=None), msg("m6", seq=0)])
    h.call(1, "rebalance")
    events = [e for e in h.lines if not (e["f"] == "drain" and e["type"] == "invoke")]  # as the example had it
    table = flat_table(events)
    producer_part = split._hash("#0", 2)
    assert split._hashed(Columns(table).id, 2)[0] == producer_part  # m4 (by its id) shares producer 0's part
    whole = assert_split_gives_whole(table, ks=(2,), pieces=(1, 2, 3))
    assert [(f["message_id"], f["ops"]) for f in whole["fifo"]["found"]] == [("m6", [1, 1])]


def test_a_delivery_without_an_id_is_judged_alike_whole_and_split():
    """Deliveries without an id of two producers (of two groups) that split puts in different
    parts: when one of them stood for all null ids, the whole run judged the first only and each
    part its own first, so a part found an inversion (seq 1 after 5) the whole run did not. Now
    neither judges an id-less delivery: nothing tells its first delivery from a redelivery."""
    a, b = _producers_in_different_parts(2)
    h = H("null-ids").receive(1, "x", producer=b, seq=5, consumer=0)
    h.drain(2, [msg(None, producer=a, seq=1), msg(None, producer=b, seq=1)])
    h.receive(1, "y", seq=5, consumer=0, dest="queue://g", group="g2")
    h.drain(2, [msg(None, seq=1, dest="queue://g", group="g1"), msg(None, seq=1, dest="queue://g", group="g2")])
    whole = assert_split_gives_whole(flat_table(h.lines), ks=(2, 3, 5))
    assert whole["fifo"]["scope"]["queue://q"] == "" and whole["fifo"]["found"] == []
    assert whole["groups"]["found"] == [] and whole["groups"]["sizes"]["n"] == 3


def test_an_unknown_split_key_is_refused():
    table = flat_table(H("x").send(0, "a").lines)
    with pytest.raises(ValueError, match="unknown split key 'message'"):
        split.parts(table, "message", 2)


def _kill_window(index: int, start: int) -> list[dict]:
    """A nemesis kill window on node A from ``start`` ms to one ms later (two events)."""
    base = {"process": "nemesis", "type": "info", "f": "kill", "target": "t", "node": "A", "run": "generated"}
    return [
        {**base, "index": index, "time": start * 1_000_000, "value": {"nemesis": "process", "phase": "start"}},
        {**base, "index": index + 1, "time": (start + 1) * 1_000_000,
         "value": {"nemesis": "process", "phase": "end", "fault": "down",
                   "started": start * 1_000_000, "ended": (start + 1) * 1_000_000}},
    ]


def test_back_to_back_kill_windows_split_give_the_facts_of_the_whole():
    """The falsifying example of CI (ci2.log, k=3, pieces=1): a receive invoked at 0, then back-to-back
    kill windows on node A (each starts at the instant the previous one ends) and, at 24 and 25 ms,
    a receive's ok and two sends of m0 around the window of 24..25 ms. The sends are invoked at the
    same instant (process 1 at index 50, process 0 at 51) and complete in the other order (54, 55);
    processes 0 and 1 are different clients, in different parts. split_brain's last invoke of node
    A is the op invoked last (index 51, completed at 54) in the whole run, but its combine broke the
    tie on the invoke time by the completion's index and took the other one (55)."""
    op = {"target": "t", "node": "A", "run": "generated"}
    m0 = {"id": "m0", "producer": 0, "seq": 0, "destination": "queue://a"}
    events = [{**op, "index": 0, "time": 0, "process": 0, "type": "invoke", "f": "receive", "value": None}]
    for w in range(24):  # windows 0..1 ms .. 23..24 ms, indices 1..48
        events += _kill_window(1 + 2 * w, w)
    t24, t25 = 24_000_000, 25_000_000
    events += [
        {**op, "index": 49, "time": t24, "process": 0, "type": "ok", "f": "receive", "value": {**m0, "consumer": 0}},
        {**op, "index": 50, "time": t24, "process": 1, "type": "invoke", "f": "send", "value": dict(m0)},
        {**op, "index": 51, "time": t24, "process": 0, "type": "invoke", "f": "send", "value": dict(m0)},
    ]
    events += _kill_window(52, 24)
    events += [
        {**op, "index": 54, "time": t25, "process": 0, "type": "ok", "f": "send", "value": dict(m0)},
        {**op, "index": 55, "time": t25, "process": 1, "type": "ok", "f": "send", "value": dict(m0)},
    ]
    for w in range(25, 33):  # windows 25..26 ms .. 32..33 ms, indices 56..71
        events += _kill_window(56 + 2 * (w - 25), w)
    assert [e["index"] for e in events] == list(range(72))
    whole = assert_split_gives_whole(flat_table(events), ks=(3,), pieces=(1,))
    assert [t["last_invoke"][:3] for t in whole["split_brain"]["tenures"]] == [[t24, 54, t25]]
    assert_split_gives_whole(flat_table(events))
