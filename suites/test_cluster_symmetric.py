"""A symmetric cluster (artemis-clusters.md, "Symmetric cluster"), the ``address`` list of
"Configuring Cluster Connections" and initial distribution with selectors ("Redistribution and
filters (selectors)"), on every target with ``topology.cluster``.

One three-node symmetric cluster (every node lists every other, max-hops 1, ON_DEMAND,
redistribution-delay 0: the chapter's selector scenario) whose cluster connection serves two
address prefixes, ``clsa.`` and ``clsb.``. Every test uses its own queues; a queue exists on a
node once a client subscribed there (`declare`).
"""

from __future__ import annotations

from itertools import permutations

import pytest

from suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    StompClients, bodies, cluster_suite_marks, cluster_pool, clusters, declare, drain, drain_each,
    parametrize_by_target, queue, demand_crossed, send_numbered)
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll

pytestmark = cluster_suite_marks()

NODES = ("A", "B", "C")
SYMMETRIC = Topology(NODES, cluster=ClusterConnection(address="clsa.,clsb.", redistribution_delay_ms=0),
                     prefix="sym")
MESSAGES = 6


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.mark.spec("CLU-SYM-1")
def test_every_node_reaches_a_consumer_on_every_other_node_in_one_hop(clusters):
    """For each ordered pair of nodes: the queue on all three, one consumer on the target only,
    messages sent to the source. max-hops 1: only a direct link can carry them."""
    cluster = clusters.get(SYMMETRIC)
    failures = []
    with StompClients() as clients:
        for source, target in permutations(NODES, 2):
            destination = queue("clsa")
            for node in NODES:
                if node != target:
                    declare(clients, cluster[node], destination)
            consumer = clients.on(cluster[target]).subscribe(destination, ack="auto")
            # the source knows the target's consumer and the third node's departed one
            demand_crossed(cluster, destination, *((source, n) for n in NODES if n != source))
            sent = send_numbered(clients, cluster[source], destination, MESSAGES, tag=f"{source}{target}-")
            got = bodies(drain(consumer))
            held = {n: cluster[n].queue_size(destination) for n in NODES if n != target}
            consumer.close()
            # Under ON_DEMAND only the target's queue has a consumer: every message belongs there
            if sorted(got) != sorted(sent):
                failures.append(f"{source}->{target}: consumer got {got}, other queues hold {held}")
    assert not failures, ("CLU-SYM-1: in a symmetric cluster (max-hops 1) a message sent to any node should reach "
                          "the only consumer, on any other node, once: " + "; ".join(failures)
                          + f"\n{cluster.log_tail(20)}")


@pytest.mark.spec("CLU-BRIDGE-1")
def test_cluster_connections_run_over_bridges_nobody_declared(clusters):
    """Artemis's machinery (the statement applies to Artemis only): no node's broker.xml declares a
    bridge, yet each node keeps one store-and-forward queue per other node
    ($.artemis.internal.sf.<cluster>.<node id>) with the internal bridge consuming it, and a
    message A forwards to B goes through A's queue towards B."""
    cluster = clusters.get(SYMMETRIC)
    config = cluster.config_text()
    assert "<bridges>" not in config and "<bridge " not in config, "setup: the generated broker.xml declares a bridge"
    ids = {name: cluster[name].process.node_id() for name in NODES}
    for name in NODES:
        bridged = cluster[name].process.bridged_nodes()
        others = {ids[n] for n in NODES if n != name}
        assert bridged == others, (f"CLU-BRIDGE-1: node {name} should run an internal bridge (a consumed "
                                   f"store-and-forward queue) to each other node {sorted(others)}; it has {sorted(bridged)}")
    towards_b = next(q for q in cluster["A"].process.store_and_forward_added() if q.endswith(ids["B"]))
    destination = queue("clsa")
    with StompClients() as clients:
        for node in ("A", "C"):
            declare(clients, cluster[node], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"), ("A", "C"))
        before = cluster["A"].process.store_and_forward_added()[towards_b]
        sent = send_numbered(clients, cluster["A"], destination, MESSAGES, tag="sf-")
        got = bodies(drain(consumer))
        after = cluster["A"].process.store_and_forward_added()[towards_b]
    assert sorted(got) == sorted(sent), f"setup: B's consumer should get what was sent to A, got {got}"
    assert after - before == len(sent), (
        f"CLU-BRIDGE-1: the {len(sent)} messages A forwarded to B should have gone through A's store-and-forward "
        f"queue towards B ({towards_b}); its MessagesAdded went from {before} to {after}")


@pytest.mark.spec("CLU-ADDR-3")
def test_an_address_list_serves_every_listed_prefix_and_no_other(clusters):
    cluster = clusters.get(SYMMETRIC)
    destinations = {prefix: queue(prefix) for prefix in ("clsa", "clsb", "clsc")}
    with StompClients() as clients:
        subscriptions = {}
        for prefix, destination in destinations.items():
            declare(clients, cluster["A"], destination)
            subscriptions[prefix] = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        # after B's last subscription (clsc's, which no prefix covers): on a clustered queue
        demand_crossed(cluster, destinations["clsc"], ("A", "B"), probe_base=destinations["clsa"])
        for destination in destinations.values():
            send_numbered(clients, cluster["A"], destination, MESSAGES)
        got = {prefix: bodies(messages) for prefix, messages in drain_each(subscriptions).items()}
        held_c = cluster["A"].queue_size(destinations["clsc"])
    for prefix in ("clsa", "clsb"):
        assert sorted(got[prefix]) == sorted(f"m{i}" for i in range(MESSAGES)), (
            f"CLU-ADDR-3: {destinations[prefix]} begins with {prefix}., one of the listed prefixes 'clsa.,clsb.', "
            f"so A should forward every message to B's only consumer; B got {got[prefix]}")
    assert got["clsc"] == [] and held_c == MESSAGES, (
        f"CLU-ADDR-3: {destinations['clsc']} begins with none of 'clsa.,clsb.': B got {got['clsc']}, A holds "
        f"{held_c} of {MESSAGES}")


@pytest.mark.spec("CLU-REDIST-FILTER-2")
def test_consumers_attached_before_the_send_get_it_across_nodes_by_selector(clusters):
    """The chapter's myProperty scenario with the consumers created first: A's consumer selects
    myProperty=5, B's myProperty=10; a myProperty=10 message sent to A goes to B (initial
    distribution honours selectors). STOMP headers are strings, and Artemis compares a string
    property with a number as no match, so the selectors compare with the string '10' / '5'."""
    cluster = clusters.get(SYMMETRIC)
    destination = queue("clsa")
    with StompClients() as clients:
        declare(clients, cluster["C"], destination)
        local = clients.on(cluster["A"]).subscribe(destination, ack="auto", selector="myProperty = '5'")
        remote = clients.on(cluster["B"]).subscribe(destination, ack="auto", selector="myProperty = '10'")
        demand_crossed(cluster, destination, ("A", "B"), ("A", "C"))
        clients.on(cluster["A"]).send(destination, "ten", {"myProperty": 10})
        got_remote = remote.receive(timeout=20)
        got_local = bodies(local.drain(quiet=1.0))
        held = {n: cluster[n].queue_size(destination) for n in NODES}
    assert got_remote is not None and got_remote.text == "ten", (
        f"CLU-REDIST-FILTER-2: with B's myProperty=10 consumer attached before the send, the myProperty=10 message "
        f"sent to A should reach it; it did not (A's myProperty=5 consumer got {got_local}, queues hold {held})"
        f"\n{cluster.log_tail(20)}")
    assert got_local == [], f"CLU-REDIST-FILTER-2: A's myProperty=5 consumer got {got_local}"


@pytest.mark.spec("CLU-REDIST-FILTER-1")
def test_redistribution_leaves_a_message_where_a_non_matching_consumer_is(clusters):
    """The chapter's myProperty scenario, message first: a myProperty '10' message on A with no
    consumer anywhere, then a consumer selecting '5' on A and one selecting '10' on B: the message
    stays on A (redistribution-delay 0). String comparisons, as in the test above: with numbers
    neither selector would match a STOMP header, and the message would stay on A for that reason
    alone."""
    cluster = clusters.get(SYMMETRIC)
    destination = queue("clsa")
    with StompClients() as clients:
        for node in ("B", "C"):
            declare(clients, cluster[node], destination)
        # A has taken in B's and C's announcements, the declaring consumers' departure included:
        # else A may still count C's and route the message there (seen in a loaded main job: on C)
        demand_crossed(cluster, destination, ("A", "B"), ("A", "C"))
        clients.on(cluster["A"]).send(destination, "ten", {"myProperty": 10})
        # Artemis counts a receipted message a moment after the receipt (seen in CI: all 0): wait
        # for the count; a message on another node still fails the check
        before = poll(lambda: {n: cluster[n].queue_size(destination) for n in NODES},
                      lambda sizes: sizes == {"A": 1, "B": 0, "C": 0})
        assert before == {"A": 1, "B": 0, "C": 0}, \
            f"setup: with no consumer anywhere the message should be on A, where it was sent: {before}"
        local = clients.on(cluster["A"]).subscribe(destination, ack="auto", selector="myProperty = '5'")
        # barrier: a '5' message sent after 'ten' reaches A's consumer only once A's queue has
        # offered it what lies before, 'ten' included; so the scenario's order holds (A's consumer
        # there and passed over 'ten' before B's consumer appears). Without it the order was a race
        # and Artemis's outcome changed with it (XPASS in one main job of five)
        clients.on(cluster["A"]).send(destination, "five", {"myProperty": 5})
        barrier = local.receive(timeout=20)
        assert barrier is not None and barrier.text == "five", \
            f"setup: A's '5' consumer did not get the '5' message sent to A: {barrier}"
        remote = clients.on(cluster["B"]).subscribe(destination, ack="auto", selector="myProperty = '10'")
        demand_crossed(cluster, destination, ("A", "B"))
        got_remote, got_local = bodies(remote.drain(quiet=5.0)), bodies(local.drain(quiet=0.5))
        held = {n: cluster[n].queue_size(destination) for n in NODES}
        local.close()  # now A's queue has no consumer: redistribution (delay 0) may move it to B
        after = remote.receive(timeout=20)
    assert got_remote == [] and got_local == [] and held == {"A": 1, "B": 0, "C": 0}, (
        f"CLU-REDIST-FILTER-1: redistribution does not follow selectors: while A's queue has a consumer (selecting "
        f"'5') the message stays on A, yet B's '10' consumer got {got_remote}, A's got {got_local}, queues hold {held}"
        f"\n{cluster.log_tail(20)}")
    # The control: the '10' selector does match the message, so the test above could fail
    assert after is not None and after.text == "ten", (
        "CLU-REDIST-FILTER-1: control: once A's consumer closed, redistribution should bring the message to B's "
        f"matching consumer, which got nothing (the selector may not match what the broker made of the header)")
