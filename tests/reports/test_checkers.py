"""The Spark checkers on small literal histories, each named after the anomaly it plants.

All literal histories are analysed in one pass (one run each: Spark jobs cost the same for one
run as for twenty); each test then reads its own run's verdict.
"""

from __future__ import annotations

import pytest

from reports.pipeline.analyze import analyze
from reports.checkers import failover_downtime as downtime
from reports.pipeline.session import LOCAL, get_session

from .histories import MS, H, Q, msg

G = "queue://grouped"


def _literals() -> dict[str, H]:
    hs = [
        # ---------------------------------------------------------------- total queue
        H("valid_queue").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0)
        .drain(2, [msg("b", seq=1)]),
        H("lost_message").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0).drain(2, []),
        H("duplicate_after_ack").send(0, "a").receive(1, "a", consumer=0).call(1, "ack", msg("a"))
        .receive(1, "a", consumer=0, redelivered=True).drain(2, []),
        H("unexpected_message").send(0, "a").receive(1, "a", consumer=0).receive(1, "zz", consumer=0).drain(2, []),
        H("recovered_info_send").send(0, "a", outcome="info").drain(1, [msg("a")]),
        H("failed_send_not_lost").send(0, "a", outcome="fail").drain(1, []),
        H("no_drain").send(0, "a").send(0, "b", seq=1, outcome="info").receive(1, "a", consumer=0),
        H("no_drain_unreceived").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0),
        # ---------------------------------------------------------------- FIFO
        H("fifo_reordered").send(0, "s0").send(0, "s1", seq=1).send(0, "s2", seq=2)
        .receive(1, "s0", consumer=0).receive(1, "s2", seq=2, consumer=0).receive(1, "s1", seq=1, consumer=0)
        .drain(2, []),
        H("fifo_redelivery_in_order").send(0, "s0").send(0, "s1", seq=1).send(0, "s2", seq=2)
        .receive(1, "s0", consumer=0).receive(1, "s1", seq=1, consumer=0)
        .call(1, "connect").receive(1, "s0", consumer=0, redelivered=True).receive(1, "s2", seq=2, consumer=0)
        .drain(2, []),
        H("fifo_competing_consumers").send(0, "s0").send(0, "s1", seq=1)
        .receive(1, "s1", seq=1, consumer=0).receive(2, "s0", consumer=1).drain(3, []),
        H("fifo_network_of_brokers").send(0, "s0", node="A").send(0, "s1", seq=1, node="A")
        .receive(1, "s1", seq=1, consumer=0, node="B").receive(1, "s0", consumer=0, node="B").drain(2, []),
        # a drain longer than the rows before it: the split test's pieces cut inside its list (a
        # piece renumbering its share alone once made the in-order list look reordered)
        H("fifo_long_drain_in_order").send(0, "s0")
        .drain(1, [msg("s0"), msg("s1", seq=1), msg("s2", seq=2), msg("s3", seq=3)]),
        # ---------------------------------------------------------------- groups
        H("group_stolen_while_owner_alive").send(0, "g0", dest=G, group="g").send(0, "g1", seq=1, dest=G, group="g")
        .receive(1, "g0", dest=G, group="g", consumer=0).receive(2, "g1", seq=1, dest=G, group="g", consumer=1)
        .drain(3, []),
        H("group_reassigned_after_owner_closed").send(0, "g0", dest=G, group="g").send(0, "g1", seq=1, dest=G, group="g")
        .receive(1, "g0", dest=G, group="g", consumer=0).call(1, "close")
        .receive(2, "g1", seq=1, dest=G, group="g", consumer=1).drain(3, []),
        H("group_reassigned_after_broker_killed").send(0, "g0", dest=G, group="g").send(0, "g1", seq=1, dest=G, group="g")
        .receive(1, "g0", dest=G, group="g", consumer=0).kill(at=100).restart(at=200, killed_at=100)
        .receive(2, "g1", seq=1, dest=G, group="g", consumer=1).drain(3, []),
        H("group_reordered").send(0, "g0", dest=G, group="g").send(0, "g1", seq=1, dest=G, group="g")
        .receive(1, "g1", seq=1, dest=G, group="g", consumer=0).receive(1, "g0", dest=G, group="g", consumer=0)
        .drain(2, []),
        # the drain takes the rest of a group after every consumer stopped: not a theft
        H("group_drained_after_stop").send(0, "g0", dest=G, group="g").send(0, "g1", seq=1, dest=G, group="g")
        .receive(1, "g0", dest=G, group="g", consumer=0).drain(2, [msg("g1", seq=1, dest=G, group="g")]),
        # ---------------------------------------------------------------- downtime, latency
        _downtime(),
        _invoked_while_injecting(),
        # ---------------------------------------------------------------- split brain (issue 18)
        *_split_brain(),
        # ---------------------------------------------------------------- clusters (issue 19)
        *_cluster(),
    ]
    return {h.run: h for h in hs}


def _downtime() -> H:
    """Broker killed at 1000 ms, back at 4000 ms. Process 0's first ok after the kill completes
    at 3500 ms (2.5 s), process 1's at 4000 ms (3 s); process 2 retired with an in-doubt send;
    the drain (process 3) starts after the fault and was never cut off."""
    h = H("failover_downtime")
    a, b, c, d = msg("a"), msg("b", producer=1), msg("c", seq=1), msg("d", seq=2)
    h.op(0, "invoke", "send", a, at=100), h.op(0, "ok", "send", a, at=101)   # normal: 1 ms
    h.op(1, "invoke", "receive", at=102), h.op(1, "fail", "receive", at=103)
    h.kill(at=1000)                                                        # indexes 4, 5
    h.op(2, "invoke", "send", b, at=1100), h.op(2, "info", "send", b, at=1200)
    h.op(0, "invoke", "send", c, at=1500)
    h.op(1, "invoke", "receive", at=1800)
    h.op(0, "fail", "send", c, at=2000)
    h.op(0, "invoke", "send", d, at=3000), h.op(0, "ok", "send", d, at=3500)  # in the fault: 500 ms
    h.op(1, "ok", "receive", msg("a", consumer=0), at=4000)                # index 13
    h.restart(at=4000, killed_at=1000)
    h.call(3, "drain", None, at=5000, done=5001, result=[msg("d", seq=2)])
    return h


def _invoked_while_injecting() -> H:
    """The kill step runs from 1000 ms to 1001 ms. Process 0's send invoked at 1000.5 ms, before the
    broker was surely down, completes ok: it may have gone through before the kill and is no
    recovery. Its first ok invoked after 1001 ms completes at 2600 ms: 1.6 s of downtime."""
    h = H("invoked_while_injecting")
    a, b, c, d = msg("a"), msg("b", seq=1), msg("c", seq=2), msg("d", seq=3)
    h.op(0, "invoke", "send", a, at=100), h.op(0, "ok", "send", a, at=101)
    h.nemesis("kill", "start", at=1000)
    h.op(0, "invoke", "send", b, at=1000.5)
    h.nemesis("kill", "end", at=1001, fault="down", started=1000 * MS, ended=1001 * MS)
    h.op(0, "ok", "send", b, at=1002)
    h.op(0, "invoke", "send", c, at=1500), h.op(0, "fail", "send", c, at=1600)
    h.op(0, "invoke", "send", d, at=2000), h.op(0, "ok", "send", d, at=2600)
    h.restart(at=3000, killed_at=1000)
    h.now = 4000 * MS
    return h.drain(1, [a, b, d])


def _served(h: H, process, f: str, value, node, *, at: float, done: float) -> H:
    """One operation served by ``node``, invoked at ``at`` ms and completed ``ok`` at ``done`` ms."""
    h.op(process, "invoke", f, None if f == "receive" else value, at=at, node=None)
    h.op(process, "ok", f, value, at=done, node=node)
    return h


def _split_brain() -> list[H]:
    """Master/slave pairs: A serves until it is killed at 1000 ms, then B."""
    def before_kill(run: str) -> H:
        h = H(run)
        _served(h, 0, "send", msg("a"), "A", at=100, done=101)
        return _served(h, 1, "receive", msg("a", consumer=0), "A", at=102, done=103).kill(at=1000)

    # both nodes accept: B took over, and A still confirms a send invoked after B's first one
    both = before_kill("split_brain_both_nodes_accept")
    _served(both, 0, "send", msg("b", seq=1), "B", at=1500, done=1510)
    _served(both, 0, "send", msg("c", seq=2), "A", at=1600, done=1601)
    _served(both, 1, "receive", msg("b", seq=1, consumer=0), "B", at=1700, done=1701)
    # a clean handover: A's last acceptance before B's first
    clean = before_kill("split_brain_clean_handover")
    _served(clean, 0, "send", msg("b", seq=1), "B", at=1500, done=1510)
    _served(clean, 1, "receive", msg("b", seq=1, consumer=0), "B", at=1520, done=1521)
    # the old master answers a send invoked before B's first acceptance after it: in flight, late
    late = before_kill("split_brain_old_master_answers_late")
    late.op(2, "invoke", "send", msg("x", producer=2), at=990, node=None)
    _served(late, 0, "send", msg("b", seq=1), "B", at=1500, done=1510)
    late.op(2, "ok", "send", msg("x", producer=2), at=1700, node="A")
    # A killed, B serves, B killed, A (restarted as slave) serves again: two clean handovers
    back = before_kill("split_brain_failback_after_second_fault")
    _served(back, 0, "send", msg("b", seq=1), "B", at=1500, done=1510)
    back.restart(at=2000, killed_at=1000).kill(at=3000)
    _served(back, 0, "send", msg("c", seq=2), "A", at=3500, done=3510)
    # a second master without any fault: A, B, A interleaved
    nofault = H("split_brain_without_a_fault")
    for i, node in enumerate("ABA"):
        _served(nofault, 0, "send", msg(f"n{i}", seq=i), node, at=100 + 10 * i, done=105 + 10 * i)
    # a history from before issue 18: no completion names its node
    unnamed = H("split_brain_nodes_unknown")
    _served(unnamed, 0, "send", msg("u"), None, at=100, done=101)
    _served(unnamed, 0, "send", msg("v", seq=1), None, at=200, done=201)
    return [both, clean, late, back, nofault, unnamed]


def _cluster() -> list[H]:
    """Artemis-style clusters of nodes A, B, C: producers send to A, consumers open and close on B
    and C (churn), the final drain reads each node. Redistribution and group pinning."""
    def drains(h: H, process: int, on: dict[str, list[dict]] | None = None) -> H:
        for n, node in enumerate("ABC"):
            h.call(process + n, "drain", None, result=(on or {}).get(node, []), node=node)
        return h

    def consumer(h: H, process: int, node: str, ids: list[str], *, close: bool = True, **m) -> H:
        h.call(process, "subscribe", {"destination": Q}, node=node)
        for i in ids:
            h.receive(process, i, consumer=process, node=node, **m)
            h.call(process, "ack", msg(i), node=node)
        return h.call(process, "close", None, node=node) if close else h

    # churn: a consumer on B takes a, closes; one on C takes b and c; c is taken again, flagged
    # redelivered, after C's consumer closed without acknowledging it (at-least-once)
    clean = H("redistribution_clean_churn")
    for i, m in enumerate("abc"):
        clean.send(0, m, seq=i)
    consumer(clean, 1, "B", ["a"])
    consumer(clean, 2, "C", ["b"], close=False)
    clean.receive(2, "c", seq=2, consumer=2, node="C").call(2, "close", None, node="C")
    consumer(clean, 3, "B", ["c"], seq=2, redelivered=True)
    drains(clean, 10)
    # a acknowledged on B, then delivered again on C as a fresh message (ARTEMIS-4527's shape)
    dup = H("redistribution_duplicate_after_redistribution").send(0, "a")
    consumer(dup, 1, "B", ["a"])
    consumer(dup, 2, "C", ["a"])
    drains(dup, 10)
    # b confirmed, never delivered anywhere
    lost = H("redistribution_lost_in_churn").send(0, "a").send(0, "b", seq=1)
    consumer(lost, 1, "B", ["a"])
    drains(lost, 10)
    # ON_DEMAND: B's only consumer closed at 0.2 s; b, sent to A at 5 s, is drained at B
    stranded = H("redistribution_forwarded_to_node_without_consumer")
    stranded.call(1, "subscribe", {"destination": Q}, node="B", at=100, done=101)
    stranded.call(1, "close", None, node="B", at=200, done=201)
    stranded.call(0, "send", msg("b"), node="A", at=5000, done=5001)
    stranded.now = 9000 * MS
    drains(stranded, 10, {"B": [msg("b")]})
    # the same drain while B's consumer was open when b was sent: redistribution's doing, fine
    served = H("redistribution_forwarded_to_node_with_consumer")
    served.call(1, "subscribe", {"destination": Q}, node="B", at=100, done=101)
    served.call(0, "send", msg("b"), node="A", at=5000, done=5001)
    served.call(1, "close", None, node="B", at=6000, done=6001)
    served.now = 9000 * MS
    drains(served, 10, {"B": [msg("b")]})
    # ---------------------------------------------------------------- clustered grouping
    def grouped(run: str) -> H:
        h = H(run)
        for i in range(3):
            h.send(0, f"g{i}", seq=i, dest=G, group="g")
        return h

    pinned = grouped("group_pinned_to_one_node")
    consumer(pinned, 1, "B", ["g0", "g1"], dest=G, group="g")
    drains(pinned, 10, {"B": [msg("g2", seq=2, dest=G, group="g")]})
    # B's consumer closed, yet the group's next message came from C: routed elsewhere
    moved = grouped("group_moved_after_consumer_closed")
    consumer(moved, 1, "B", ["g0"], dest=G, group="g")
    consumer(moved, 2, "C", ["g1"], seq=1, dest=G, group="g")
    drains(moved, 10, {"C": [msg("g2", seq=2, dest=G, group="g")]})
    # B killed: its queue gone, the group is routed anew to C
    killed = grouped("group_moved_after_node_killed")
    consumer(killed, 1, "B", ["g0"], close=False, dest=G, group="g")
    killed.op("nemesis", "info", "kill", {"nemesis": "process", "phase": "start"}, node="B")
    killed.op("nemesis", "info", "kill", {"nemesis": "process", "phase": "end", "fault": "down"}, node="B")
    consumer(killed, 2, "C", ["g1"], seq=1, dest=G, group="g")
    drains(killed, 10, {"C": [msg("g2", seq=2, dest=G, group="g")]})
    return [clean, dup, lost, stranded, served, pinned, moved, killed]


LITERALS = _literals()


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, _spark_lifetime, engine):
    spark = get_session(LOCAL)
    root = tmp_path_factory.mktemp("literals")
    for h in LITERALS.values():
        h.write(root)
    analysis = analyze(spark, root, engine=engine)
    return {v["run"]: v for v in analysis.verdicts}


def true_but_for_the_records(verdict: dict) -> bool:
    """These literals carry no harness records: like `brokerconf chaos run`, the analysis then
    calls the run unknown for that alone (reports/check_plan.py, history_records); every check
    it judged said true."""
    return (verdict["valid"] == "unknown" and verdict["unknown"] == ["history_records"] and not verdict["failed"]
            and "no harness records" in verdict["checks"]["history_records"]["reason"])


def check(analysed, run: str, checker: str) -> dict:
    return analysed[run]["checks"][checker]


def anomalies(analysed, run: str, checker: str) -> list[tuple[str, str]]:
    return sorted((a["kind"], a["message_id"]) for a in analysed[run]["anomalies"] if a["checker"] == checker)


# ---------------------------------------------------------------------- total queue


def test_valid_queue(analysed):
    assert true_but_for_the_records(analysed["valid_queue"]), analysed["valid_queue"]
    assert check(analysed, "valid_queue", "total_queue")["valid"] is True


def test_lost_message(analysed):
    result = check(analysed, "lost_message", "total_queue")
    assert result["valid"] is False and result["stats"]["lost"] == 1
    assert anomalies(analysed, "lost_message", "total_queue") == [("lost", "b")]
    assert analysed["lost_message"]["valid"] is False


def test_lost_message_names_its_operations(analysed):
    [lost] = [a for a in analysed["lost_message"]["anomalies"] if a["message_id"] == "b"]
    # the send of b: invoke at index 2, ok at index 3
    assert lost["ops"] == [2, 3]


def test_duplicate_after_ack(analysed):
    # without harness records nobody says whether the experiment allowed duplicates: the total
    # queue cannot call them false (as `brokerconf chaos run` says), but a delivery after the
    # confirmed ack is false either way (no_redelivery_after_ack, in both judges)
    total = check(analysed, "duplicate_after_ack", "total_queue")
    assert total["valid"] == "unknown" and "allowed" in total["reason"], total
    assert anomalies(analysed, "duplicate_after_ack", "total_queue") == [("duplicated", "a")]
    assert check(analysed, "duplicate_after_ack", "no_redelivery_after_ack")["valid"] is False
    assert anomalies(analysed, "duplicate_after_ack", "no_redelivery_after_ack") == [("redelivered_after_ack", "a")]
    assert analysed["duplicate_after_ack"]["valid"] is False


def test_unexpected_message(analysed):
    assert check(analysed, "unexpected_message", "total_queue")["valid"] is False
    assert anomalies(analysed, "unexpected_message", "total_queue") == [("unexpected", "zz")]


def test_recovered_info_send(analysed):
    result = check(analysed, "recovered_info_send", "total_queue")
    assert result["valid"] is True and result["stats"]["recovered"] == 1
    assert anomalies(analysed, "recovered_info_send", "total_queue") == [("recovered", "a")]


def test_failed_send_not_lost(analysed):
    result = check(analysed, "failed_send_not_lost", "total_queue")
    assert result["valid"] is True and result["stats"]["attempted"] == 0


def test_no_drain_is_unknown(analysed):
    result = check(analysed, "no_drain", "total_queue")
    assert result["valid"] == "unknown" and "drain" in result["reason"]
    assert analysed["no_drain"]["valid"] == "unknown"


def test_no_drain_unreceived_is_not_called_lost(analysed):
    result = check(analysed, "no_drain_unreceived", "total_queue")
    assert result["valid"] == "unknown" and "maybe still queued" in result["reason"]
    assert result["stats"]["lost"] == 1


# ---------------------------------------------------------------------- FIFO


def test_fifo_reordered(analysed):
    assert check(analysed, "fifo_reordered", "fifo")["valid"] is False
    assert anomalies(analysed, "fifo_reordered", "fifo") == [("reordered", "s1")]


def test_fifo_redelivery_is_not_an_inversion(analysed):
    result = check(analysed, "fifo_redelivery_in_order", "fifo")
    assert result["applicable"] and result["valid"] is True


def test_fifo_not_judged_with_competing_consumers(analysed):
    result = check(analysed, "fifo_competing_consumers", "fifo")
    assert result["applicable"] is False and "2 consumers" in result["reason"]
    assert true_but_for_the_records(analysed["fifo_competing_consumers"])


def test_fifo_long_drain_in_order(analysed):
    result = check(analysed, "fifo_long_drain_in_order", "fifo")
    assert result["applicable"] and result["valid"] is True
    assert anomalies(analysed, "fifo_long_drain_in_order", "fifo") == []


def test_fifo_not_judged_across_network_of_brokers(analysed):
    result = check(analysed, "fifo_network_of_brokers", "fifo")
    assert result["applicable"] is False and "nodes served it" in result["reason"] and "one broker only" in result["reason"]


# ---------------------------------------------------------------------- groups


def test_group_stolen_while_owner_alive(analysed):
    assert check(analysed, "group_stolen_while_owner_alive", "groups")["valid"] is False
    assert anomalies(analysed, "group_stolen_while_owner_alive", "groups") == [("stolen", "g1")]


def test_group_reassigned_after_owner_closed(analysed):
    result = check(analysed, "group_reassigned_after_owner_closed", "groups")
    assert result["valid"] is True and result["stats"]["handovers"] == 1


def test_group_reassigned_after_broker_killed(analysed):
    result = check(analysed, "group_reassigned_after_broker_killed", "groups")
    assert result["valid"] is True and result["stats"]["handovers"] == 1


def test_group_reordered(analysed):
    assert check(analysed, "group_reordered", "groups")["valid"] is False
    assert anomalies(analysed, "group_reordered", "groups") == [("reordered", "g0")]


def test_group_drained_after_stop(analysed):
    assert check(analysed, "group_drained_after_stop", "groups")["valid"] is True


def test_groups_not_applicable_without_groups(analysed):
    assert check(analysed, "lost_message", "groups")["applicable"] is False


# ---------------------------------------------------------------------- failover downtime


def test_failover_downtime_per_process(analysed):
    [fault] = check(analysed, "failover_downtime", "failover_downtime")["stats"]["faults"]
    assert fault["per_client_ms"]["producer-0"] == pytest.approx(2500.0)
    assert fault["per_client_ms"]["consumer-0"] == pytest.approx(3000.0)
    assert fault["max_downtime_ms"] == pytest.approx(3000.0)


def test_retired_process_is_not_unrecovered(analysed):
    [fault] = check(analysed, "failover_downtime", "failover_downtime")["stats"]["faults"]
    assert fault["retired"] == ["producer-1"] and fault["not_recovered"] == []


def test_failover_downtime_over_bound(spark, tmp_path, engine):
    path = LITERALS["failover_downtime"].write(tmp_path)
    slow = analyze(spark, path, checkers=[downtime.NAME], max_downtime_s=2.7, engine=engine)
    fast = analyze(spark, path, checkers=[downtime.NAME], max_downtime_s=3.5, engine=engine)
    assert [r.valid for r in slow.results] == [False]
    assert [r.valid for r in fast.results] == [True]
    # the anomaly names the operation that finally succeeded: process 1's receive ok
    assert [(r["kind"], r["ops"]) for r in slow.anomalies_df.collect()] == [("slow_failover", [13])]


def test_op_invoked_while_the_fault_was_injected_is_no_recovery(analysed):
    [fault] = check(analysed, "invoked_while_injecting", "failover_downtime")["stats"]["faults"]
    assert fault["per_client_ms"]["producer-0"] == pytest.approx(1600.0)


def test_no_fault_no_downtime_verdict(analysed):
    assert check(analysed, "lost_message", "failover_downtime")["applicable"] is False


# ---------------------------------------------------------------------- latency, throughput


def test_latency_split_into_normal_and_fault(analysed):
    send = check(analysed, "failover_downtime", "latency")["stats"]["by_f"]["send"]
    assert send["normal"]["ok"] == 1 and send["normal"]["p50_ms"] == pytest.approx(1.0)
    assert send["fault"]["ok"] == 1 and send["fault"]["p50_ms"] == pytest.approx(500.0)
    assert send["fault"]["fail"] == 1 and send["fault"]["info"] == 1


def test_throughput_split_into_normal_and_fault(analysed):
    stats = check(analysed, "failover_downtime", "throughput")["stats"]
    # run from 100 ms to 5001 ms; fault from 1000 ms to 4001 ms
    assert stats["fault_s"] == pytest.approx(3.001)
    assert stats["normal_s"] == pytest.approx(4.901 - 3.001)
    assert stats["by_f"]["send"]["ok_fault"] == 1 and stats["by_f"]["send"]["ok_normal"] == 1


def test_split_brain_is_judged_when_the_history_asks_for_it(spark, tmp_path, engine):
    """Issue 18: analyze takes the experiment's own [checkers] split_brain from the history's
    harness record; the overlap then makes the run's verdict false."""
    h = LITERALS["split_brain_both_nodes_accept"]
    record = {"index": -1, "time": 0, "process": "harness", "type": "info", "f": "experiment", "run": h.run,
              "target": h.target, "node": None, "value": {"format": 1, "experiment": {
                  "name": "sb", "workload": {"kind": "queue", "destination": "queue://q"}, "nemesis": [{"kind": "kill"}],
                  "checkers": {"split_brain": True}}}}
    asked = H(h.run)
    asked.lines = [record] + [{**e, "index": e["index"]} for e in h.lines]
    for i, e in enumerate(asked.lines):
        e["index"] = i
    path = asked.write(tmp_path / "asked")
    [result] = analyze(spark, path, checkers=["split_brain"], engine=engine).results
    assert (result.valid, result.applicable) == (False, True), result
    unasked = analyze(spark, h.write(tmp_path / "unasked"), checkers=["split_brain"], engine=engine).results
    assert [(r.valid, r.applicable) for r in unasked] == [(False, False)]


def _asked(h: H, checkers: dict, topology: dict | None = None) -> H:
    """``h`` with the harness record of an experiment asking for ``checkers``."""
    record = {"index": 0, "time": 0, "process": "harness", "type": "info", "f": "experiment", "run": h.run,
              "target": h.target, "node": None, "value": {"format": 1, "experiment": {
                  "name": h.run, "workload": {"kind": "queue", "destination": "queue://q"}, "nemesis": [],
                  "topology": topology or {"kind": "single"}, "checkers": checkers}}}
    asked = H(h.run)
    asked.lines = [record] + [{**e, "index": i + 1} for i, e in enumerate(h.lines)]
    return asked


def test_cluster_checkers_are_judged_when_the_history_asks_for_them(spark, tmp_path, engine):
    """Issue 19: analyze takes [checkers] redistribution / group_pinning and the cluster's
    message_load_balancing from the history's harness record."""
    cluster = {"kind": "cluster", "message_load_balancing": "ON_DEMAND", "redistribution_delay_ms": -1}
    stranded = _asked(LITERALS["redistribution_forwarded_to_node_without_consumer"], {"redistribution": True}, cluster)
    [result] = analyze(spark, stranded.write(tmp_path / "stranded"), checkers=["redistribution"], engine=engine).results
    assert (result.valid, result.applicable, result.reason) == (False, True, "1 no-consumer-node"), result
    strict = _asked(LITERALS["redistribution_forwarded_to_node_without_consumer"], {"redistribution": True},
                    {**cluster, "message_load_balancing": "STRICT"})
    [result] = analyze(spark, strict.write(tmp_path / "strict"), checkers=["redistribution"], engine=engine).results
    assert (result.valid, result.applicable) == (True, True), result
    moved = _asked(LITERALS["group_moved_after_consumer_closed"], {"group_pinning": True}, cluster)
    [result] = analyze(spark, moved.write(tmp_path / "moved"), checkers=["group_pinning"], engine=engine).results
    assert (result.valid, result.applicable, result.reason) == (False, True, "1 moved"), result


def test_cluster_checkers_unasked_are_shown_without_anomaly_rows(analysed):
    """A run whose experiment did not ask (these literals carry no harness record) lists no rows
    of the cluster checkers; their results say what they found, not applicable."""
    for run in ("redistribution_duplicate_after_redistribution", "group_moved_after_consumer_closed"):
        assert not [a for a in analysed[run]["anomalies"] if a["checker"] in ("redistribution", "group_pinning")]
    result = check(analysed, "redistribution_lost_in_churn", "redistribution")
    assert result["applicable"] is False and result["reason"].endswith("found: 1 lost")
    assert anomalies(analysed, "redistribution_lost_in_churn", "total_queue") == [("lost", "b")]
