"""The one implementation of each checker (reports/checkers) on literal histories named after the
anomaly, without Spark: the same functions `brokerconf chaos run` calls on its events and the
Spark tasks of `brokerconf analyze` call on the rows they read. Where the earlier copies of a
checker disagreed, the test names the case and the semantics kept (issue 17)."""

from __future__ import annotations

from reports.checkers.failover_downtime import failover_downtime
from reports.checkers.history import Columns
from reports.checkers.registry import check_all
from reports.checkers.total_queue import check_total_queue

from .histories import MS, H, msg


def judged(h: H, **options) -> dict:
    return {name: r for name, r in check_all(Columns.of_events(h.lines), (h.run, h.target), **options).items()}


def partition(h: H, *, at: float, healed: float, key: str = "proxy/disabled") -> H:
    h.nemesis("partition", "start", at=at)
    h.nemesis("partition", "end", at=at + 1, fault=key, started=int(at * MS))
    h.nemesis("heal", "start", at=healed - 1)
    return h.nemesis("heal", "end", at=healed, fault_window=[{"fault": key, "f": "partition", "start": int(at * MS),
                                                              "end": int(healed * MS)}])


# ---------------------------------------------------------------------- total queue


def test_lost_message_after_partition_is_reported():
    h = H("lost_after_partition").send(0, "a").receive(1, "a", consumer=0)
    partition(h, at=10, healed=20)
    h.send(0, "b", seq=1).drain(2, [])
    r = judged(h)["total_queue"]
    assert r.valid is False and r.reason == "1 lost"
    events = check_total_queue(h.lines)
    assert (events.valid, events.lost) == (False, ["b"])


def test_duplicate_delivery_is_invalid_unless_the_semantics_allow_it():
    h = H("dup").send(0, "a").receive(1, "a", consumer=0).receive(1, "a", consumer=0).drain(2, [])
    assert judged(h)["total_queue"].valid is False
    assert judged(h, duplicates_allowed=True)["total_queue"].valid is True


def test_topic_messages_are_not_queue_duplicates():
    t = "topic://t"
    h = (H("fanout").send(0, "a", dest=t).receive(1, "a", dest=t, subscriber=0)
         .receive(2, "a", dest=t, subscriber=1).drain(3, []))
    assert judged(h)["total_queue"].applicable is False


# ---------------------------------------------------------------------- order and groups


def test_reordered_queue_is_reported_with_both_operations():
    h = (H("reordered").send(0, "s0").send(0, "s1", seq=1).receive(1, "s1", seq=1, consumer=0)
         .receive(1, "s0", consumer=0).drain(2, []))
    r = judged(h)["fifo"]
    assert r.valid is False and r.stats["reordered"] == 1


def test_group_stolen_while_its_owner_is_open():
    g = "queue://grouped"
    h = (H("stolen").send(0, "g0", dest=g, group="x").send(0, "g1", seq=1, dest=g, group="x")
         .receive(1, "g0", dest=g, group="x", consumer=0).receive(2, "g1", seq=1, dest=g, group="x", consumer=1)
         .drain(3, []))
    assert judged(h)["groups"].valid is False and judged(h)["groups"].stats["stolen"] == 1


# ---------------------------------------------------------------------- failover downtime


def _producer_after_kill(h: H, *, recovers_at: float | None, last_try: float = 2000) -> H:
    a = msg("a")
    h.op(0, "invoke", "send", a, at=100), h.op(0, "ok", "send", a, at=101)
    h.kill(at=1000)
    h.op(0, "invoke", "send", msg("b", seq=1), at=1100)
    h.op(0, "fail", "send", msg("b", seq=1), at=last_try)
    if recovers_at is not None:
        h.op(0, "invoke", "send", msg("c", seq=2), at=recovers_at - 10)
        h.op(0, "ok", "send", msg("c", seq=2), at=recovers_at)
    return h


def test_client_that_never_recovered_without_a_bound_is_unknown_not_valid():
    # The Spark copy called this valid (no bound: informational); no evidence is not a pass.
    h = _producer_after_kill(H("never_recovered"), recovers_at=None)
    r = judged(h)["failover_downtime"]
    assert r.valid == "unknown" and "producer-0" in r.reason, r.reason
    assert failover_downtime(h.lines).valid == "unknown"


def test_client_that_never_recovered_within_the_bound_so_far_is_unknown():
    h = _producer_after_kill(H("never_recovered_short"), recovers_at=None, last_try=1500)
    assert judged(h, max_downtime_s=5.0)["failover_downtime"].valid == "unknown"


def test_client_that_never_recovered_for_longer_than_the_bound_is_invalid():
    h = _producer_after_kill(H("never_recovered_long"), recovers_at=None, last_try=4000)
    r = judged(h, max_downtime_s=1.0)["failover_downtime"]
    assert r.valid is False and "producer-0" in r.reason


def test_recovered_client_is_measured_from_the_fault_start():
    h = _producer_after_kill(H("recovered"), recovers_at=2500)
    r = judged(h)["failover_downtime"]
    assert r.valid is True and r.stats["faults"][0]["per_client_ms"] == {"producer-0": 1500.0}


def test_overlapping_faults_are_one_disturbance_per_client():
    # A kill while a partition holds: the per-step copy measured the client twice (once per step).
    h = H("overlap")
    a, b = msg("a"), msg("b", seq=1)
    h.op(0, "invoke", "send", a, at=100), h.op(0, "ok", "send", a, at=101)
    h.nemesis("partition", "start", at=1000)
    h.nemesis("partition", "end", at=1001, fault="proxy/disabled", started=1000 * MS)
    h.kill(at=1200)
    h.op(0, "invoke", "send", b, at=1300)
    h.nemesis("heal", "start", at=1999)
    h.nemesis("heal", "end", at=2000, fault_window=[{"fault": "proxy/disabled", "f": "partition",
                                                     "start": 1000 * MS, "end": 2000 * MS}])
    h.restart(at=2100, killed_at=1200)
    h.op(0, "ok", "send", b, at=2500)
    r = judged(h)["failover_downtime"]
    [fault] = r.stats["faults"]
    assert fault["fault"] == "down, proxy/disabled" and fault["per_client_ms"] == {"producer-0": 1500.0}
    assert [f.downtime_ms for f in failover_downtime(h.lines).faults] == [{"producer-0": 1500.0}]


def test_client_stuck_in_one_operation_across_the_fault_is_not_recovered():
    # The Spark copy left such a process out of scope (nothing invoked during the fault).
    h = H("stuck")
    a = msg("a")
    h.op(0, "invoke", "send", a, at=100), h.op(0, "ok", "send", a, at=101)
    h.op(0, "invoke", "send", msg("b", seq=1), at=900)  # never completes
    h.kill(at=1000).restart(at=1500, killed_at=1000)
    h.call(1, "send", msg("x", producer=1), at=1600, done=3000)
    r = judged(h, max_downtime_s=1.0)["failover_downtime"]
    assert r.valid is False and "producer-0" in r.reason, r.reason


def test_process_that_first_appears_after_the_fault_is_not_measured():
    h = _producer_after_kill(H("late_joiner"), recovers_at=2500)
    h.restart(at=3000, killed_at=1000)
    h.call(7, "drain", None, at=4000, done=4001, result=[])
    [fault] = judged(h)["failover_downtime"].stats["faults"]
    assert set(fault["per_client_ms"]) == {"producer-0"}


def test_failed_fault_step_opens_no_fault():
    h = H("failed_step").send(0, "a")
    h.nemesis("pause", "start", at=10)
    h.op("nemesis", "info", "pause", {"nemesis": "process", "phase": "end", "fault": "paused"}, at=11,
         error="NemesisError: not running")
    h.send(0, "b", seq=1).drain(1, [msg("a"), msg("b", seq=1)])
    assert judged(h)["failover_downtime"].applicable is False


def test_worker_whose_process_retired_in_the_fault_is_measured_through_its_successor():
    # Seen on a reference broker pause: producer 0's send in the pause ended "info", its worker
    # carried on as a new process that first connected after the heal. Per process, nobody
    # would have been measured for producer 0.
    h = H("successor")
    a, b, c = msg("a"), msg("b", seq=1), msg("c", seq=2)
    h.op(1, "invoke", "send", a, at=100), h.op(1, "ok", "send", a, at=101)
    h.kill(at=1000)
    h.op(1, "invoke", "send", b, at=1100), h.op(1, "info", "send", b, at=1600)
    h.restart(at=2000, killed_at=1000)
    h.call(4, "connect", at=2100, done=2150)
    h.op(4, "invoke", "send", c, at=2200), h.op(4, "ok", "send", c, at=2300)
    r = judged(h)["failover_downtime"]
    [fault] = r.stats["faults"]
    assert r.valid is True and fault["per_client_ms"] == {"producer-0": 1300.0} and fault["retired"] == []
    assert failover_downtime(h.lines).faults[0].downtime_ms == {"producer-0": 1300.0}


# ---------------------------------------------------------------------- split brain (issue 18)


def _split_brain(run: str, split_brain: bool = True):
    from .test_checkers import LITERALS
    return judged(LITERALS[run], split_brain=split_brain)["split_brain"]


def test_split_brain_both_nodes_accept_is_invalid_with_the_window():
    r = _split_brain("split_brain_both_nodes_accept")
    assert r.valid is False and r.applicable
    (window,) = r.stats["windows"]
    # B accepted op 7 at 1510 ms; A then accepted op 9, invoked at 1600 ms, completed 1601 ms
    assert window["nodes"] == ["A", "B"] and window["ops"] == [7, 9]
    assert (window["start"], window["end"]) == (1510 * MS, 1601 * MS)
    assert window["epoch"] == "after the fault at 1.000 s"


def test_split_brain_clean_handover_is_valid():
    r = _split_brain("split_brain_clean_handover")
    assert (r.valid, r.applicable, r.stats["nodes"], r.stats["windows"]) == (True, True, ["A", "B"], [])


def test_split_brain_old_master_answering_late_is_no_evidence():
    """A's send was invoked before B's first acceptance: A may simply have answered late."""
    r = _split_brain("split_brain_old_master_answers_late")
    assert r.valid is True and r.stats["windows"] == []


def test_split_brain_failback_after_a_second_fault_is_valid():
    r = _split_brain("split_brain_failback_after_second_fault")
    assert r.valid is True and r.stats["handovers"] == 2 and r.stats["nodes"] == ["A", "B"]


def test_split_brain_interleaved_masters_without_a_fault_is_invalid():
    r = _split_brain("split_brain_without_a_fault")
    assert r.valid is False
    assert [w["nodes"] for w in r.stats["windows"]] == [["A", "B"]]
    assert r.stats["windows"][0]["epoch"] == "before any fault"


def test_split_brain_without_node_names_is_unknown_when_asked_for():
    asked = _split_brain("split_brain_nodes_unknown")
    assert (asked.valid, asked.applicable) == ("unknown", True) and "names the node" in asked.reason
    # analyze runs every checker: a run that did not ask for it and names no node is left out
    assert _split_brain("split_brain_nodes_unknown", split_brain=False).applicable is False


def test_split_brain_not_asked_for_is_shown_but_left_out_of_the_verdict():
    """A network of brokers serves on every node at once: only an experiment that promises one
    master at a time ([checkers] split_brain) is judged by it."""
    r = _split_brain("split_brain_both_nodes_accept", split_brain=False)
    assert (r.valid, r.applicable) == (False, False)
    assert r.reason.startswith("not asked for by the experiment ([checkers] split_brain); found: 1 overlapping")


def test_split_brain_one_node_serving_everything_kept_the_promise():
    h = H("one_node").send(0, "a").receive(1, "a", consumer=0).drain(2, [])
    r = judged(h, split_brain=True)["split_brain"]
    assert (r.valid, r.applicable, r.reason) == (True, True, "node A served every accepted operation")
    assert judged(h)["split_brain"].applicable is False  # not asked for: nothing to show


def test_split_brain_some_unnamed_operations_make_a_clean_run_unknown():
    h = H("partly_named").send(0, "a", node="A").send(0, "b", seq=1, node="B")
    h.op(0, "invoke", "send", msg("c", seq=2), node=None)
    h.op(0, "ok", "send", msg("c", seq=2), node=None)
    r = judged(h, split_brain=True)["split_brain"]
    assert r.valid == "unknown" and r.reason.startswith("1 of 3 accepted operations name no node")


def test_split_brain_events_and_columns_agree():
    from reports.checkers.split_brain import check_split_brain
    from .test_checkers import LITERALS
    h = LITERALS["split_brain_both_nodes_accept"]
    events = check_split_brain(h.lines)
    assert events.valid is False and events.stats["windows"] == _split_brain(h.run).stats["windows"]
    assert events.stats["anomalies"][0].startswith("nodes A and B both accepted operations from 1.510 s to 1.601 s")


def test_split_brain_old_master_accepting_after_the_takeover_is_invalid():
    """The killed master's node A served before the fault; B accepted first after it, then A
    confirmed a send invoked after that: A is still a master (the brief's case, issue 18)."""
    from .test_checkers import _served
    h = H("old_master_still_serving")
    _served(h, 0, "send", msg("a"), "A", at=100, done=101).kill(at=1000)
    _served(h, 0, "send", msg("b", seq=1), "B", at=1500, done=1510)
    _served(h, 0, "send", msg("c", seq=2), "A", at=1600, done=1601)
    r = judged(h, split_brain=True)["split_brain"]
    assert r.valid is False and [w["nodes"] for w in r.stats["windows"]] == [["A", "B"]]
    assert r.stats["windows"][0]["ops"] == [5, 7]  # B's first acceptance, A's later one


def test_split_brain_old_master_delivery_from_the_prefetch_buffer_is_no_evidence():
    """A receive invoked after B's first acceptance may return a message A dispatched earlier (the
    client's prefetch buffer): it proves A served at some time before, not after."""
    from .test_checkers import _served
    h = H("prefetched_from_old_master")
    _served(h, 0, "send", msg("a"), "A", at=100, done=101)
    _served(h, 0, "send", msg("b", seq=1), "A", at=102, done=103).kill(at=1000)
    _served(h, 0, "send", msg("c", seq=2), "B", at=1500, done=1510)
    _served(h, 1, "receive", msg("b", seq=1, consumer=0), "A", at=1600, done=1601)
    r = judged(h, split_brain=True)["split_brain"]
    assert r.valid is True and r.stats["windows"] == [], r.stats
