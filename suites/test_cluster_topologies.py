"""Cluster topologies (artemis-clusters.md, "Chain cluster", ``max-hops`` under "Configuring
Cluster Connections", "Specifying Members of a Cluster Explicitly") and discovery by UDP
("Broadcast Groups", "Discovery Groups"), on every target with ``topology.cluster``.

The chain: three nodes, A's only cluster connection goes to B and B's to C (explicit members,
direct connections only), consumers only on C, messages sent to A. With ``max-hops`` 2 C's
consumers are known two hops away at A, so A forwards to B, which forwards to C; with 1 (the
default) A knows only B, whose queue has no consumer, and keeps the messages.
"""

from __future__ import annotations

import time

import pytest

from suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    FORMATION, StompClients, bodies, cluster_suite_marks, cluster_pool, clusters, declare, demand_crossed, drain,
    parametrize_by_target, queue, settle)
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll

pytestmark = cluster_suite_marks()

CHAIN = (("A", "B"), ("B", "C"))
TWO_HOPS = Topology(("A", "B", "C"), cluster=ClusterConnection(connections=CHAIN, max_hops=2), prefix="hops2")
#: max-hops not set: CLU-HOPS-2 is about its default (1 by the chapter), so the broker's own must show
ONE_HOP = Topology(("A", "B", "C"), cluster=ClusterConnection(connections=CHAIN), prefix="hops1")
#: the one-hop chain, but each node may also connect to the members it learns of (CLU-STATIC-1)
LEARNING = Topology(("A", "B", "C"), cluster=ClusterConnection(connections=CHAIN, direct_connections_only=False),
                    prefix="learn")
LEARN_WAIT = 60.0  # seconds for A to learn C through B and connect to it (a bound, not a speed check)
#: formed normally, then B's data replaced by a copy of A's (CLU-NODEID-1; Artemis only)
COPIED = Topology(("A", "B"), cluster=ClusterConnection(), prefix="nodeid")
#: seconds the copied pair is given to (not) form before messages are sent. Shortened from 20 s: the
#: statement is about the pair never forming; a two-node pair forms within seconds of its nodes
#: serving (the launch waits for serving), so 10 s is still room for it to form were it able to
COPIED_WATCH = 10.0
UDP = Topology(("A", "B"), cluster=ClusterConnection(discovery="udp", broadcast_period_ms=500,
                                                     refresh_timeout_ms=5000), prefix="udp")
MESSAGES = 10
#: seconds a node on a discovery port of its own is given to (not) find the others: many of the
#: UDP cluster's broadcast periods (500 ms); nodes sharing the endpoint form within a few
APART_WAIT = 10.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def send_to_a_consume_on_c(cluster) -> tuple[list[str], dict[str, int]]:
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        declare(clients, cluster["B"], destination)
        consumer = clients.on(cluster["C"]).subscribe(destination, ack="auto")
        # B has taken in C's consumer, then A what B announced after that (B passes C's on to A
        # when max-hops allows, before the probe consumer's own announcement). A probe from A to
        # C would cross only with two hops, so it could not serve the one-hop chain
        demand_crossed(cluster, destination, ("B", "C"), ("A", "B"))
        producer = clients.on(cluster["A"])
        for i in range(MESSAGES):
            producer.send(destination, f"m{i}")
        got = bodies(drain(consumer, quiet=3.0))
        held = {n: cluster[n].queue_size(destination) for n in ("A", "B")}
    return got, held


@pytest.mark.spec("CLU-HOPS-1", "CLU-CHAIN-1")
def test_chain_with_two_hops_reaches_consumers_on_the_far_node(clusters):
    cluster = clusters.get(TWO_HOPS)
    got, held = send_to_a_consume_on_c(cluster)
    assert got, (f"CLU-HOPS-1: chain A->B->C with max-hops 2: C's consumer got none of the {MESSAGES} messages sent to "
                 f"A (A holds {held['A']}, B {held['B']})\n{cluster.log_tail(20)}")
    assert len(got) + held["A"] + held["B"] == MESSAGES and len(set(got)) == len(got), \
        f"CLU-HOPS-1: {MESSAGES} sent, C got {got}, A holds {held['A']}, B {held['B']}"


@pytest.mark.spec("CLU-HOPS-2")
def test_chain_with_one_hop_does_not_see_the_far_node(clusters):
    cluster = clusters.get(ONE_HOP)
    got, held = send_to_a_consume_on_c(cluster)
    assert got == [], (f"CLU-HOPS-2: chain A->B->C with max-hops left at its default (1): A knows only B (no "
                       f"consumer there), yet C's consumer got {got}")
    assert held["A"] == MESSAGES, f"CLU-HOPS-2: A should keep all {MESSAGES} messages, holds {held}"


@pytest.mark.spec("CLU-CHAIN-2")
def test_a_chain_carries_nothing_back_towards_its_head(clusters):
    """The two-hop chain again, with the only consumer on A, the chain's head, and messages sent
    to C and to B: no cluster connection leads from C or B to A, so they keep their messages."""
    cluster = clusters.get(TWO_HOPS)
    destination = queue()
    with StompClients() as clients:
        for node in ("B", "C"):
            declare(clients, cluster[node], destination)
        consumer = clients.on(cluster["A"]).subscribe(destination, ack="auto")
        # nothing may cross towards A, so no probe can show A's consumer became known anywhere:
        # the settle window that consumer's announcement would need, were there a link to carry it
        settle()
        for node in ("C", "B"):
            producer = clients.on(cluster[node])
            for i in range(MESSAGES):
                producer.send(destination, f"{node}{i}")
        got = bodies(drain(consumer, quiet=3.0))
        held = {n: cluster[n].queue_size(destination) for n in ("B", "C")}
    assert got == [], (f"CLU-CHAIN-2: the chain's cluster connections run A->B->C only, yet A's consumer got {got} of "
                       f"the messages sent to C and B (B holds {held['B']}, C {held['C']})")
    assert held == {"B": MESSAGES, "C": MESSAGES}, \
        f"CLU-CHAIN-2: B and C should each keep the {MESSAGES} messages sent to them; they hold {held}"


@pytest.mark.spec("CLU-STATIC-1")
def test_a_node_connects_to_the_members_it_learns_through_the_one_it_listed(clusters):
    """A lists only B and B only C, max-hops 1; without direct-connections-only A learns C through
    B and connects to it, so C's consumer is one hop from A (CLU-HOPS-2 shows the same chain with
    direct connections only keeping A's messages). A probe queue is sent to until the first probe
    arrives (A learning C takes a while); then the checked queue."""
    cluster = clusters.get(LEARNING)
    probe, destination = queue("learn.probe"), queue()
    with StompClients() as clients:
        for node in ("A", "B"):
            declare(clients, cluster[node], probe)
            declare(clients, cluster[node], destination)
        watcher = clients.on(cluster["C"]).subscribe(probe, ack="auto")
        consumer = clients.on(cluster["C"]).subscribe(destination, ack="auto")
        # until the declaring consumers' departure reached A, ON_DEMAND may still send to B's queue
        # (CI once saw m0 go missing that way when the first probe already arrived)
        demand_crossed(cluster, destination, ("A", "B"))
        producer = clients.on(cluster["A"])
        deadline, learnt = time.monotonic() + LEARN_WAIT, None
        while learnt is None and time.monotonic() < deadline:
            producer.send(probe, "probe")
            learnt = watcher.receive(timeout=2.0)
        assert learnt is not None, (f"CLU-STATIC-1: within {LEARN_WAIT:.0f} s A never reached C's consumer: A lists "
                                    f"only B and did not connect to C, which it can learn of through B\n"
                                    f"{cluster.log_tail(20)}")
        sent = [f"m{i}" for i in range(MESSAGES)]
        for body in sent:
            producer.send(destination, body)
        got = bodies(drain(consumer, quiet=3.0))
    assert sorted(got, key=lambda b: int(b[1:])) == sent, \
        f"CLU-STATIC-1: C's consumer should get every message sent to A once A connected to C; got {got}"


@pytest.mark.spec("CLU-NODEID-1")
def test_nodes_sharing_copied_data_do_not_form_a_cluster(clusters):
    """The chapter's warning: configuration may be copied between nodes, data may not. A and B
    formed a cluster (the fixture waits for it); then B's data directory becomes a copy of A's, so
    both carry A's node id. Messages sent to A while B has the only consumer must then stay on A:
    what the formed cluster would have forwarded at once (CLU-LB-1) it no longer can."""
    cluster = clusters.get(COPIED, disrupts=True)  # both nodes stopped, B's data replaced
    cluster.copy_node_data("A", "B")  # an Artemis launcher hook: the statement is Artemis's
    time.sleep(COPIED_WATCH)  # time the pair would need to form, were it able to
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        # no probe: the pair must not form, so nothing crosses; the room B's demand would need
        settle()
        producer = clients.on(cluster["A"])
        for i in range(MESSAGES):
            producer.send(destination, f"m{i}")
        got = bodies(drain(consumer, quiet=5.0))
        held = cluster["A"].queue_size(destination)
    assert got == [] and held == MESSAGES, (
        f"CLU-NODEID-1: B runs on a copy of A's data (the same node id), so the two should not form a working "
        f"cluster; yet B's consumer got {got} of the {MESSAGES} messages sent to A (A holds {held})\n"
        f"{cluster.log_tail(20)}")


@pytest.mark.spec("CLU-DISC-1", "CLU-DISC-5")
def test_udp_discovery_forms_the_cluster_and_forwards(clusters):
    cluster = clusters.get(UDP)  # formed: every link up (wait_formed), found through the discovery group
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"))
        clients.on(cluster["A"]).send(destination, "found")
        got = consumer.receive(timeout=20)
    assert got is not None and got.text == "found", \
        f"CLU-DISC-1: nodes that found each other by UDP discovery did not forward A -> B\n{cluster.log_tail(20)}"


@pytest.mark.spec("CLU-DISC-10")
def test_a_node_on_another_discovery_port_finds_no_one(clusters):
    """The UDP cluster, then B restarted with its broadcast and discovery groups on a port of its
    own (the same multicast address): A and B no longer share an endpoint, so neither hears the
    other and no link forms; messages sent to A stay there although B has the consumer. Before B
    comes back, A is given the refresh timeout to drop B's entry (B's graceful stop also tells A)."""
    from machinery.process import free_ports

    cluster = clusters.get(UDP, disrupts=True)
    cluster.stop_broker("B")
    time.sleep(UDP.cluster.refresh_timeout_ms / 1000 + 2.0)  # A's discovery entry for B runs out
    cluster.use_discovery_port("B", free_ports(1)[0])
    cluster["B"].start(timeout=FORMATION)  # serving; not start_broker, which waits for the links
    missing = set(poll(cluster.missing_links, lambda m: not {("A", "B"), ("B", "A")} <= set(m),
                       timeout=APART_WAIT, interval=0.5))
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        # no probe: B's demand could only reach A over a link that must not exist; the room a
        # found B's announcement would need
        settle()
        producer = clients.on(cluster["A"])
        for i in range(MESSAGES):
            producer.send(destination, f"m{i}")
        got = bodies(drain(consumer, quiet=3.0))
        kept = cluster["A"].queue_size(destination)
    assert {("A", "B"), ("B", "A")} <= missing, (
        f"CLU-DISC-10: B broadcasts and listens on another port than A, yet a link between them came up within "
        f"{APART_WAIT:.0f} s (links still missing: {sorted(missing)})\n{cluster.log_tail(20)}")
    assert got == [] and kept == MESSAGES, (
        f"CLU-DISC-10: B shares no discovery endpoint with A, yet B's consumer got {got} of the {MESSAGES} messages "
        f"sent to A (A keeps {kept})")
