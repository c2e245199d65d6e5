"""The cluster checkers (issue 19) on the literal histories of test_checkers.py, without Spark:
reports/checkers/redistribution.py (none lost, none delivered twice unless flagged redelivered,
ON_DEMAND: only to nodes with consumers) and reports/checkers/group_pinning.py (a group's messages
delivered by one node, moved only by a fault). Each fails on a bad history and passes on a good
one, through the same functions `brokerconf chaos run` and the Spark tasks call."""

from __future__ import annotations

from reports.checkers.group_pinning import check_group_pinning
from reports.checkers.history import Columns
from reports.checkers.redistribution import NOTIFICATION_GRACE_NS, check_redistribution
from reports.checkers.registry import check_all

from .histories import MS, H, Q, msg
from .test_checkers import LITERALS

ASKED = {"redistribution": True, "load_balancing": "ON_DEMAND", "redistribution_delay_ms": -1, "group_pinning": True}


def judged(run: str, **options) -> dict:
    h = LITERALS[run]
    return check_all(Columns.of_events(h.lines), (h.run, h.target), **{**ASKED, **options})


# ---------------------------------------------------------------------- redistribution


def test_consumer_churn_with_a_flagged_redelivery_is_valid():
    r = judged("redistribution_clean_churn")["redistribution"]
    assert r.valid is True and r.applicable, r.reason
    assert (r.stats["enqueued"], r.stats["delivered"], r.stats["duplicated"]) == (3, 4, 0)


def test_a_redelivery_before_anyone_consumed_the_message_is_no_duplicate_flagged_or_not():
    """At-least-once: C's consumer closed (or its node died) before its ack; Artemis may lose the
    redelivered flag across a crash (persist-delivery-count-before-delivery is false by default)."""
    h = H("unflagged")
    h.send(0, "c").receive(2, "c", consumer=2, node="C").call(2, "close", None, node="C")
    h.receive(3, "c", consumer=3, node="B").call(3, "ack", msg("c"), node="B")
    for n, node in enumerate("ABC"):
        h.call(10 + n, "drain", None, result=[], node=node)
    r = check_redistribution(h.lines)
    assert r.valid is True and r.stats["redelivered"] == 1, r.reason


def test_a_message_consumed_on_two_nodes_is_a_duplicate_whatever_the_order():
    """ARTEMIS-4527's shape: both deliveries came before either ack completed."""
    h = H("twice").send(0, "a")
    h.receive(1, "a", consumer=1, node="B").receive(2, "a", consumer=2, node="C", redelivered=True)
    h.call(1, "ack", msg("a"), node="B").call(2, "ack", msg("a"), node="C")
    for n, node in enumerate("ABC"):
        h.call(10 + n, "drain", None, result=[], node=node)
    r = check_redistribution(h.lines)
    assert r.valid is False and r.stats["duplicated"] == 1, r.reason
    assert r.stats["anomalies"] == ["consumed 2 times, delivered 2 times (0 after it was first consumed at node B)"]


def test_a_message_acked_twice_is_a_duplicate_even_in_rows_holding_only_its_acks():
    """A run split by message id may hand one part nothing but a message's acks; the part must
    still find the duplicate the whole run finds (a hypothesis example of tests/reports/test_split.py
    once lost it: the checker returned early on rows without sends or deliveries)."""
    h = H("acks_only").call(1, "ack", msg("a"), node="A").call(1, "ack", msg("a"), node="A")
    r = check_redistribution(h.lines)
    assert r.valid is False and r.stats["duplicated"] == 1, r.reason


def test_a_flagged_delivery_after_the_message_was_consumed_is_a_duplicate():
    h = H("flagged_after_ack").send(0, "a")
    h.receive(1, "a", consumer=1, node="B").call(1, "ack", msg("a"), node="B")
    h.receive(2, "a", consumer=2, node="C", redelivered=True)
    for n, node in enumerate("ABC"):
        h.call(10 + n, "drain", None, result=[], node=node)
    assert check_redistribution(h.lines).reason == "1 duplicated"


def test_a_message_acknowledged_then_delivered_again_on_another_node_is_a_duplicate():
    r = judged("redistribution_duplicate_after_redistribution")["redistribution"]
    assert r.valid is False and r.reason == "1 duplicated"
    events = check_redistribution(LITERALS["redistribution_duplicate_after_redistribution"].lines)
    assert events.valid is False and "after it was first consumed at node B" in events.stats["anomalies"][0]


def test_a_confirmed_send_never_delivered_is_lost():
    r = judged("redistribution_lost_in_churn")["redistribution"]
    assert r.valid is False and r.reason == "1 lost"


def test_lost_is_only_a_candidate_without_a_drain():
    h = H("no_drain").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=1, node="B")
    r = check_redistribution(h.lines)
    assert r.valid == "unknown" and "no final drain" in r.reason


def test_on_demand_forbids_a_message_reaching_a_node_that_had_no_consumer():
    r = judged("redistribution_forwarded_to_node_without_consumer")["redistribution"]
    assert r.valid is False and r.reason == "1 no-consumer-node"
    # the same history under STRICT (round robin regardless of consumers) breaks nothing
    assert judged("redistribution_forwarded_to_node_without_consumer",
                  load_balancing="STRICT")["redistribution"].valid is True


def test_with_redistribution_on_only_drains_before_the_delay_are_evidence():
    """The drains start at 9 s; a node's consumerless queue may move messages to a drain's node
    once the delay has passed after the first drain opened ("Message Redistribution")."""
    run = "redistribution_forwarded_to_node_without_consumer"
    assert judged(run, redistribution_delay_ms=2000)["redistribution"].reason == "1 no-consumer-node"
    assert judged(run, redistribution_delay_ms=0)["redistribution"].valid is True
    # a delay the history does not say counts as 0: no finding the settings cannot back
    assert judged(run, redistribution_delay_ms=None)["redistribution"].valid is True


def test_on_demand_allows_a_node_whose_consumer_was_open_after_the_send():
    r = judged("redistribution_forwarded_to_node_with_consumer")["redistribution"]
    assert r.valid is True and r.stats["remote_drained"] == 1, r.reason


def test_a_consumer_closed_within_the_notification_grace_still_counts():
    def history(closed_before_send_ns: int) -> H:
        h = H("grace")
        h.call(1, "subscribe", {"destination": Q}, node="B", at=100, done=101)
        close = 5000 * MS - closed_before_send_ns
        h.call(1, "close", None, node="B", at=close / MS - 1, done=close / MS)
        h.call(0, "send", msg("b"), node="A", at=5000, done=5001)
        h.now = 9000 * MS
        h.call(10, "drain", None, result=[msg("b")], node="B")
        return h.call(11, "drain", None, result=[], node="A")

    assert check_redistribution(history(NOTIFICATION_GRACE_NS // 2).lines, load_balancing="ON_DEMAND",
                                redistribution_delay_ms=-1).valid is True
    assert check_redistribution(history(2 * NOTIFICATION_GRACE_NS).lines, load_balancing="ON_DEMAND",
                                redistribution_delay_ms=-1).valid is False


def test_redistribution_not_asked_for_is_shown_but_left_out_of_the_verdict():
    r = judged("redistribution_lost_in_churn", redistribution=False)["redistribution"]
    assert r.applicable is False and r.valid is False
    assert r.reason.startswith("not asked for by the experiment ([checkers] redistribution); found: 1 lost")


# ---------------------------------------------------------------------- group pinning


def test_a_group_delivered_by_one_node_is_pinned():
    r = judged("group_pinned_to_one_node")["group_pinning"]
    assert r.valid is True and r.stats["nodes"] == ["B"] and r.stats["moves"] == 0, r.reason


def test_a_group_that_moved_when_its_consumer_closed_was_not_pinned():
    """GRP-CLUSTER-6: the pinned queue keeps the group after its consumers close."""
    r = judged("group_moved_after_consumer_closed")["group_pinning"]
    assert r.valid is False and r.reason == "1 moved"
    events = check_group_pinning(LITERALS["group_moved_after_consumer_closed"].lines)
    assert "delivered at node C after node B had it" in events.stats["anomalies"][0]
    # the single-broker rule alone (groups.py) calls the same history fine: the consumer closed
    assert judged("group_moved_after_consumer_closed")["groups"].valid is True


def test_a_group_may_move_when_its_node_is_killed():
    r = judged("group_moved_after_node_killed")["group_pinning"]
    assert r.valid is True and r.stats["moves"] == 1 and r.stats["nodes"] == ["B", "C"], r.reason


def test_a_fault_of_an_unrelated_node_does_not_release_the_group():
    h = H("unrelated_fault", target="t")
    g = "queue://grouped"
    h.send(0, "g0", dest=g, group="g").send(0, "g1", seq=1, dest=g, group="g")
    h.receive(1, "g0", dest=g, group="g", consumer=1, node="B")
    h.op("nemesis", "info", "kill", {"nemesis": "process", "phase": "start"}, node="D")
    h.op("nemesis", "info", "kill", {"nemesis": "process", "phase": "end", "fault": "down"}, node="D")
    h.receive(2, "g1", seq=1, dest=g, group="g", consumer=2, node="C")
    assert check_group_pinning(h.lines).valid is False


def test_a_cluster_link_cut_releases_every_group():
    h = H("link_cut")
    g = "queue://grouped"
    h.send(0, "g0", dest=g, group="g").send(0, "g1", seq=1, dest=g, group="g")
    h.receive(1, "g0", dest=g, group="g", consumer=1, node="B")
    h.op("nemesis", "info", "partition", {"nemesis": "proxy", "phase": "start"}, node="proxy")
    h.op("nemesis", "info", "partition", {"nemesis": "proxy", "phase": "end", "fault": "proxy/disabled"}, node="proxy")
    h.receive(2, "g1", seq=1, dest=g, group="g", consumer=2, node="C")
    assert check_group_pinning(h.lines).valid is True


def test_grouped_deliveries_without_node_names_are_unknown():
    h = H("unnamed")
    g = "queue://grouped"
    h.send(0, "g0", dest=g, group="g").receive(1, "g0", dest=g, group="g", consumer=1, node=None)
    r = check_group_pinning(h.lines)
    assert r.valid == "unknown" and "name no node" in r.reason


def test_group_pinning_not_asked_for_is_not_applicable():
    r = judged("group_moved_after_consumer_closed", group_pinning=False)["group_pinning"]
    assert r.applicable is False and r.reason.startswith("not asked for by the experiment ([checkers] group_pinning)")
