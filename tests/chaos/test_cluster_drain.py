"""The cluster drain waits for what the nodes still hold (chaos/experiment.py `_drain_cluster`).

Regression: artemis-clustered-grouping "lost" 361 of 750 acknowledged messages whose group was
pinned to node B. They were in node A's store-and-forward queue towards B when the drain went
quiet (A's cluster bridge was waiting out Artemis's 30 s call-timeout after B's kill and the link
cut); the drain read only the destination's queue on each node and stopped. These tests drive
the drain with a fake workload and fake nodes: the cluster's state is a script, so they need no
broker."""

from __future__ import annotations

import types

import pytest

import chaos.experiment as experiment_module
from chaos.experiment import _drain_cluster
from chaos.experiment_file import Experiment
from chaos.history import HARNESS_CLUSTER_HELD, History, read_history
from chaos.workloads.queue import DrainIncomplete


def experiment() -> Experiment:
    return Experiment.model_validate({
        "name": "drain", "duration_s": 5, "drain_quiet_s": 0.1,
        "topology": {"kind": "cluster", "nodes": 2},
        "workload": {"kind": "grouped", "destination": "queue://q", "groups": ["g0"]}})


class ScriptedCluster:
    """``states``: what (queue, forwarding) each node holds, one dict per look at the cluster (a
    read of every node); the last repeats. A drain takes what the queues held at the last look."""

    names = ("A", "B")

    def __init__(self, states: list[dict[str, tuple[int, int | None]]]) -> None:
        self.states = states
        self.reads = 0

    def _state(self, at: int | None = None):
        return self.states[min(self.reads if at is None else at, len(self.states) - 1)]

    def last_seen(self):
        return self._state(max(self.reads - 1, 0))

    def held(self, node, destination):
        assert destination == "queue://q"
        return self._state()[node][0]

    def forwarding(self, node):
        value = self._state()[node][1]
        if node == self.names[-1]:
            self.reads += 1  # one read of every node is one look at the cluster
        return value


class FakeDrain:
    def __init__(self, cluster: ScriptedCluster, fail_on: int | None = None) -> None:
        self.cluster, self.rounds, self.fail_on = cluster, 0, fail_on

    def drain(self, *, quiet):
        self.rounds += 1
        if self.fail_on == self.rounds:
            raise DrainIncomplete("node B cut off", [{"id": "late"}])
        state = self.cluster.last_seen()
        return [{"id": f"{node}-{self.rounds}-{i}"} for node, (queue, _) in state.items() for i in range(queue)]


def run(tmp_path, cluster, workload=None, **options):
    history = History(tmp_path / "history.jsonl", run="r", target="t", node=None)
    lines: list[str] = []
    drained, errors = _drain_cluster(experiment(), cluster, workload or FakeDrain(cluster), history, lines.append,
                                     poll_s=0.01, **options)
    history.close()
    records = [e["value"] for e in read_history(tmp_path / "history.jsonl") if e["f"] == HARNESS_CLUSTER_HELD]
    return drained, errors, records, lines


def test_messages_on_their_way_to_another_node_are_waited_for_and_drained_there(tmp_path):
    # after the first round A still forwards 540 to B (its bridge reconnecting), then they land
    # in B's queue, and the second round drains them there
    cluster = ScriptedCluster([{"A": (0, 540), "B": (0, 0)}, {"A": (0, 540), "B": (0, 0)},
                               {"A": (0, 0), "B": (540, 0)}, {"A": (0, 0), "B": (0, 0)}])
    workload = FakeDrain(cluster)
    drained, errors, records, lines = run(tmp_path, cluster, workload, wait_s=30)
    assert errors == [] and workload.rounds == 2
    assert sum(1 for m in drained if m["id"].startswith("B-2-")) == 540
    assert records[0]["held"]["A"] == {"queue": 0, "forwarding": 540} and records[0]["round"] == 1
    assert records[-1]["held"] == {"A": {"queue": 0, "forwarding": 0}, "B": {"queue": 0, "forwarding": 0}}
    assert any("still forward" in line for line in lines)


def test_a_quiet_cluster_is_drained_once(tmp_path):
    cluster = ScriptedCluster([{"A": (0, 0), "B": (0, None)}])  # B's launcher cannot tell: None
    workload = FakeDrain(cluster)
    drained, errors, records, _ = run(tmp_path, cluster, workload, wait_s=30)
    assert (drained, errors, workload.rounds, len(records)) == ([], [], 1, 1)


def test_messages_still_held_at_the_deadline_are_reported_naming_the_node(tmp_path):
    cluster = ScriptedCluster([{"A": (0, 361), "B": (0, 0)}])  # A's bridge never comes back
    drained, errors, records, _ = run(tmp_path, cluster, wait_s=0.2)
    [error] = errors
    assert "still hold messages of queue://q" in error and "'A': {'queue': 0, 'forwarding': 361}" in error
    assert "'B'" not in error
    assert records[-1]["held"]["A"]["forwarding"] == 361


def test_a_node_that_cannot_be_asked_is_not_taken_for_empty(tmp_path):
    class Unreadable(ScriptedCluster):
        def held(self, node, destination):
            if node == "B":
                raise ConnectionError("Jolokia refused")
            return super().held(node, destination)

    cluster = Unreadable([{"A": (0, 0), "B": (0, 0)}])
    _, errors, records, _ = run(tmp_path, cluster, wait_s=0.1)
    assert records[0]["held"]["B"] == {"error": "ConnectionError: Jolokia refused"}
    assert len(errors) == 1 and "'B': {'error': 'ConnectionError: Jolokia refused'}" in errors[0]


def test_a_drain_cut_off_returns_what_it_got_with_the_reason(tmp_path):
    cluster = ScriptedCluster([{"A": (1, 0), "B": (0, 0)}])
    drained, errors, _, _ = run(tmp_path, cluster, FakeDrain(cluster, fail_on=2), wait_s=30)
    assert [m["id"] for m in drained] == ["A-1-0", "late"] and errors == ["node B cut off"]


def test_the_default_wait_covers_two_of_artemiss_call_timeouts_and_two_retry_intervals(monkeypatch):
    # CLU-CC-CALL-1: a cluster bridge's blocking call waits 30 s by default before it retries; a
    # run of artemis-clustered-grouping saw two such waits in a row (61 s from kill to reconnect)
    assert (experiment_module.CLUSTER_CALL_TIMEOUT_S, experiment_module.CLUSTER_CALL_TIMEOUTS) == (30.0, 2)
    clock = {"now": 100.0}
    monkeypatch.setattr(experiment_module, "time", types.SimpleNamespace(
        monotonic=lambda: clock["now"], sleep=lambda s: clock.__setitem__("now", clock["now"] + s)))

    class Records:
        def harness(self, f, value):
            assert f == HARNESS_CLUSTER_HELD

    exp = experiment()
    cluster = ScriptedCluster([{"A": (0, 5), "B": (0, 0)}])  # never lands
    _, errors = _drain_cluster(exp, cluster, FakeDrain(cluster), Records(), lambda *_: None, poll_s=1.0)
    assert len(errors) == 1
    expected = 2 * 30.0 + 2 * exp.topology.effective("max_retry_interval_ms") / 1000 + 10.0
    assert expected > 61.0
    assert clock["now"] - 100.0 == pytest.approx(expected, abs=1.0)
