"""Scale-down (artemis-clusters.md, "Scaling Down"), on every target with ``topology.cluster``:
a node stopped gracefully sends its messages to another node of its scale-down group, where they
go to the back of the queue in their order; a crash sends nothing.

One two-node cluster (ON_DEMAND, no redistribution, both nodes in scale-down group ``g``), A
brought back after each test. Messages are sent with no consumer anywhere, so each stays on the
node it was sent to.
"""

from __future__ import annotations

import pytest

from suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    FORMATION, StompClients, bodies, cluster_suite_marks, cluster_pool, clusters, declare, demand_crossed,
    parametrize_by_target, queue)
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll

pytestmark = cluster_suite_marks()

SCALE_DOWN = Topology(("A", "B"), cluster=ClusterConnection(scale_down=True, scale_down_groups={"A": "g", "B": "g"}),
                      prefix="scaledown")
MESSAGES = 5


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.fixture
def cluster(clusters):
    """The cluster with both nodes running (A restarted if the previous test left it down)."""
    cluster = clusters.get(SCALE_DOWN, disrupts=True)  # each test stops or kills A
    if not cluster["A"].running:
        cluster.start_broker("A", timeout=FORMATION)
    yield cluster
    if not cluster["A"].running:
        cluster.start_broker("A", timeout=FORMATION)


def fill(clients: StompClients, cluster, destination: str) -> tuple[list[str], list[str]]:
    """MESSAGES on B's queue (b0..) and MESSAGES on A's (a0..), no consumer anywhere."""
    for node in ("A", "B"):
        declare(clients, cluster[node], destination)
    # until the declaring consumers' departure has reached every node, ON_DEMAND may still send a
    # message to a node that had one: CI once saw all five in flight to another node, none counted
    demand_crossed(cluster, destination, ("A", "B"), ("B", "A"))
    on_b = [f"b{i}" for i in range(MESSAGES)]
    on_a = [f"a{i}" for i in range(MESSAGES)]
    for node, sent in (("B", on_b), ("A", on_a)):
        producer = clients.on(cluster[node])
        for body in sent:
            producer.send(destination, body)
    # read until every message is counted: Artemis counts a message already receipted a moment
    # later under load (test_cluster_scale_down_groups.py saw it); one on the wrong node still fails
    held = poll(lambda: {n: cluster[n].queue_size(destination) for n in ("A", "B")},
                lambda sizes: sum(sizes.values()) >= 2 * MESSAGES, timeout=10.0, interval=0.1)
    assert held == {"A": MESSAGES, "B": MESSAGES}, f"setup: each node should hold its own {MESSAGES} messages: {held}"
    return on_a, on_b


@pytest.mark.spec("CLU-SCALE-1", "CLU-SCALE-2")
def test_a_graceful_stop_moves_the_messages_to_the_back_of_the_other_nodes_queue(cluster):
    destination = queue()
    with StompClients() as clients:
        on_a, on_b = fill(clients, cluster, destination)
        cluster.stop_broker("A")
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="client-individual")
        got = consumer.receive_n(2 * MESSAGES, timeout=30) + consumer.drain(quiet=1.0)
        for message in got:
            consumer.ack(message)
    got_bodies = bodies(got)
    assert sorted(got_bodies) == sorted(on_a + on_b), (
        f"CLU-SCALE-1: after A's graceful stop with scale-down, B should hand out its own and A's messages once each; "
        f"got {got_bodies}\n{cluster.log_tail(30)}")
    assert got_bodies == on_b + on_a, (f"CLU-SCALE-2: A's messages should come after B's own, in their order "
                                       f"(appended to the back of B's queue): got {got_bodies}")


@pytest.mark.spec("CLU-SCALE-3")
def test_a_killed_node_does_not_scale_down(cluster):
    destination = queue()
    with StompClients() as clients:
        on_a, on_b = fill(clients, cluster, destination)
        cluster["A"].kill()
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="client-individual")
        got = consumer.receive_n(MESSAGES, timeout=20) + consumer.drain(quiet=5.0)
        for message in got:
            consumer.ack(message)
    assert bodies(got) == on_b, (f"CLU-SCALE-3: after A was killed (no graceful shutdown) B should have only its own "
                                 f"messages {on_b}, got {bodies(got)}")


@pytest.mark.spec("CLU-SCALE-7")
def test_a_node_joining_the_cluster_loses_nothing(cluster):
    """Scaling up: A leaves (it holds nothing, so its scale-down moves nothing), B takes the
    messages, then A joins again; B's messages are all still there and are consumed once each.
    (The topology's nodes are fixed, so the joining node is one that was stopped: the cluster sees
    a node arrive all the same.)"""
    destination = queue()
    with StompClients() as clients:
        cluster.stop_broker("A")
        declare(clients, cluster["B"], destination)
        sent = [f"b{i}" for i in range(2 * MESSAGES)]
        producer = clients.on(cluster["B"])
        for body in sent:
            producer.send(destination, body)
        before = poll(lambda: cluster["B"].queue_size(destination), lambda size: size >= len(sent), timeout=10.0)
        assert before == len(sent), f"setup: B should hold the {len(sent)} messages sent to it, holds {before}"
        cluster.start_broker("A", timeout=FORMATION)  # returns once A's cluster links are up again
        declare(clients, cluster["A"], destination)
        demand_crossed(cluster, destination, ("A", "B"), ("B", "A"))  # A has joined: both know the other
        after = {n: cluster[n].queue_size(destination) for n in ("A", "B")}
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="client-individual")
        got = consumer.receive_n(len(sent), timeout=30) + consumer.drain(quiet=1.0)
        for message in got:
            consumer.ack(message)
    assert sum(after.values()) == len(sent), (
        f"CLU-SCALE-7: after A joined, the cluster should still hold the {len(sent)} messages B had; it holds {after}"
        f"\n{cluster.log_tail(20)}")
    assert sorted(bodies(got)) == sorted(sent), (
        f"CLU-SCALE-7: every message B held before A joined should be consumed once; got {bodies(got)}")
