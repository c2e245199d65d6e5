"""The load balancer on its own (artemis-clusters.md, message-load-balancing)."""

from __future__ import annotations

from reference_broker.clustering.balancer import LoadBalancer
from reference_broker.clustering.bindings import BindingTable, RemoteQueue
from reference_broker.engine.message import Message


def _message(**properties) -> Message:
    return Message("ID:1", "queue://q", b"", properties)


def test_round_robin_order_and_modes():
    remotes = [RemoteQueue("B", "q", (None,), 1), RemoteQueue("C", "q", (), 1)]
    strict = LoadBalancer("A", "STRICT")
    assert [strict.choose("q", _message(), False, remotes) for _ in range(4)] == ["A", "B", "C", "A"]
    on_demand = LoadBalancer("A", "ON_DEMAND")
    assert [on_demand.choose("q", _message(), True, remotes) for _ in range(3)] == ["A", "B", "A"]
    assert on_demand.candidates(_message(), False, [RemoteQueue("C", "q", (), 1)]) == ["A"], \
        "no consumer anywhere: stays local"
    for mode in ("OFF", "OFF_WITH_REDISTRIBUTION"):
        assert LoadBalancer("A", mode).candidates(_message(), False, remotes) == ["A"]


def test_on_demand_selectors():
    remotes = [RemoteQueue("B", "q", ("colour = 'red'",), 1), RemoteQueue("C", "q", ("colour = 'blue'", None), 1)]
    balancer = LoadBalancer("A", "ON_DEMAND")
    assert balancer.candidates(_message(colour="red"), False, remotes) == ["B", "C"], "C has a consumer without selector"
    assert balancer.candidates(_message(colour="green"), False, remotes[:1]) == ["A"]


def test_round_robin_positions_are_bounded():
    balancer = LoadBalancer("A", "STRICT")
    balancer.remembered = 3
    remotes = [RemoteQueue("B", "x", (), 1)]
    for i in range(10):
        balancer.choose(f"q{i}", _message(), False, remotes)
    assert len(balancer._turn) == 3


def test_binding_table_hops_and_announcements():
    table = BindingTable("B", max_hops=2)
    table.replace("C", [RemoteQueue("C", "q", (None,), 1), RemoteQueue("D", "q", (None,), 1)])
    assert {n: (hop, e.hops) for n, (hop, e) in table.remote_queues("q").items()} == {"C": ("C", 1), "D": ("C", 1)}
    told_a = {(e.node, e.hops) for e in table.announce([RemoteQueue("B", "q", (), 1)], "A")}
    assert told_a == {("B", 1), ("C", 2), ("D", 2)}
    assert ("C", 2) not in {(e.node, e.hops) for e in table.announce([], "C")}, "never tell a node about itself"
    one_hop = BindingTable("B", max_hops=1)
    one_hop.replace("C", [RemoteQueue("C", "q", (None,), 1)])
    assert {e.node for e in one_hop.announce([], "A")} == set(), "max_hops 1: nothing learned is passed on"
