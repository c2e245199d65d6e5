"""The cluster workloads (chaos/workloads/cluster.py) against three in-process reference brokers
standing in for a cluster's nodes (not joined: what the workload records does not depend on the
links): every completion names its node, consumers churn (subscribe ... close, again), the
drain opens one consumer per node before reading any, and the cluster checkers judge the history."""

from __future__ import annotations

import functools
import time

import pytest

from chaos.history import History, read_history
from chaos.workloads.cluster import ClusterWorkload, GroupedClusterWorkload
from conformance.clients import connect
from conformance.scenario import Scenario
from conformance.targets.reference.target import InProcessReference
from reports.checkers.group_pinning import check_group_pinning
from reports.checkers.redistribution import check_redistribution

from .test_workloads import assert_well_formed

NODES = ("A", "B", "C")


@pytest.fixture
def brokers():
    handles = {}
    try:
        for node in NODES:
            handles[node] = InProcessReference(Scenario(name=f"cluster-{node}", protocols=("stomp",)))
        yield handles
    finally:
        for handle in handles.values():
            handle.stop()


def clients(brokers) -> dict:
    return {node: functools.partial(connect, "127.0.0.1", b.ports["stomp"], "stomp", timeout=5.0)
            for node, b in brokers.items()}


def names(brokers) -> dict[str, str]:
    return {f"127.0.0.1:{b.ports['stomp']}": node for node, b in brokers.items()}


def run(workload, seconds: float) -> list[dict]:
    workload.start()
    time.sleep(seconds)
    workload.stop()
    return workload.drain(quiet=0.5)


def test_consumer_churn_records_nodes_closes_and_a_drain_per_node(brokers, tmp_path):
    with History(tmp_path / "history.jsonl", run="churn", target="reference", node=None) as history:
        workload = ClusterWorkload(history, clients(brokers), producer_node="A", consumer_nodes=("A", "B", "C"),
                                   consumers=3, producers=1, rate=40, lifetime_s=(0.2, 0.4), pause_s=0.1,
                                   destination="queue://chaos.cluster", node_names=names(brokers))
        run(workload, 2.0)
    events = read_history(tmp_path / "history.jsonl")
    assert_well_formed(events)
    assert not workload.errors, workload.errors
    completions = [e for e in events if e["type"] != "invoke" and e["f"] in ("send", "receive", "subscribe", "close",
                                                                             "drain")]
    assert all(e["node"] in NODES for e in completions), [e for e in completions if e["node"] not in NODES][:3]
    assert {e["node"] for e in events if e["f"] == "send" and e["type"] == "ok"} == {"A"}
    # each consumer closed and opened again more than once on its own node
    closes = [e for e in events if e["f"] == "close" and e["type"] == "ok"]
    assert len(closes) >= 3 and {e["node"] for e in closes} == set(NODES)
    # one drain per node, every one invoked before any completed
    drains = [e for e in events if e["f"] == "drain"]
    invokes = [e["index"] for e in drains if e["type"] == "invoke"]
    oks = [e for e in drains if e["type"] == "ok"]
    assert sorted(e["node"] for e in oks) == list(NODES) and max(invokes) < min(e["index"] for e in oks)
    # the nodes are not joined: whatever was sent to A and not consumed there is drained at A
    result = check_redistribution(events, load_balancing="ON_DEMAND", redistribution_delay_ms=-1)
    assert result.valid is True, (result.reason, result.stats.get("anomalies"))
    assert result.stats["enqueued"] > 20 and result.stats["remote_drained"] == 0


def test_grouped_sends_are_pinned_to_the_node_that_received_them(brokers, tmp_path):
    with History(tmp_path / "history.jsonl", run="grouped", target="reference", node=None) as history:
        workload = GroupedClusterWorkload(history, clients(brokers), producer_node="A", consumer_nodes=("A", "B"),
                                          consumers=2, producers=1, rate=40, lifetime_s=None, groups=("g0", "g1"),
                                          destination="queue://chaos.grouped", node_names=names(brokers))
        run(workload, 1.5)
    events = read_history(tmp_path / "history.jsonl")
    assert_well_formed(events)
    grouped = [e for e in events if e["f"] == "receive" and e["type"] == "ok"]
    assert grouped and all(e["value"]["group"] in ("g0", "g1") and e["node"] == "A" for e in grouped)
    result = check_group_pinning(events)
    assert result.valid is True and result.stats["nodes"] == ["A"], result.reason


def test_producers_after_consumers_send_nothing_before_every_consumer_subscribed(brokers, tmp_path):
    # artemis-clustered-grouping: a group's route is proposed at its first message, so that
    # message must see every node's consumers for the groups to spread over the nodes
    with History(tmp_path / "history.jsonl", run="after", target="reference", node=None) as history:
        workload = GroupedClusterWorkload(history, clients(brokers), producer_node="A", consumer_nodes=("B", "C"),
                                          consumers=2, producers=1, rate=40, lifetime_s=None,
                                          producers_after_consumers_s=0.3, destination="queue://chaos.after",
                                          node_names=names(brokers))
        run(workload, 1.5)
    events = read_history(tmp_path / "history.jsonl")
    assert_well_formed(events)
    subscribed = [e["time"] for e in events if e["f"] == "subscribe" and e["type"] == "ok"]
    sends = [e["time"] for e in events if e["f"] == "send" and e["type"] == "invoke"]
    assert len(subscribed) == 2 and sends
    assert min(sends) - max(subscribed) >= 0.3e9, (min(sends), max(subscribed))


def test_a_bad_cluster_workload_is_refused_by_name(tmp_path):
    with History(tmp_path / "h.jsonl", run="bad", target="t", node=None) as history:
        with pytest.raises(ValueError, match=r"nodes \['Z'\]"):
            ClusterWorkload(history, {"A": None, "B": None}, producer_node="Z")
        with pytest.raises(ValueError, match="lifetime_s"):
            ClusterWorkload(history, {"A": None, "B": None}, producer_node="A", lifetime_s=(2.0, 1.0))
        with pytest.raises(ValueError, match="producers_after_consumers_s"):
            ClusterWorkload(history, {"A": None, "B": None}, producer_node="A", producers_after_consumers_s=-1)
