"""Server-side message load balancing in an Artemis-style cluster (artemis-clusters.md,
"Server-Side Message Load Balancing" and "Configuring Cluster Connections": message-load-balancing
OFF / STRICT / ON_DEMAND, selectors under ON_DEMAND, the ``address`` prefix list with ``!``
exclusions), on every target with ``topology.cluster``.

Three clusters, one at a time, each started once for the module: ON_DEMAND (three nodes, cluster
address ``clu.,!clu.ex.``: so the address tests need no cluster of their own), STRICT (three
nodes) and OFF (two nodes). Every test uses its own queue; a queue exists on a node once a client
subscribed there (`declare`). Messages are sent to node A over STOMP, each confirmed by a receipt.
"""

from __future__ import annotations

import pytest

from suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    StompClients, bodies, cluster_suite_marks, cluster_pool, clusters, declare, demand_crossed, drain, drain_each,
    parametrize_by_target, queue, settle)
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll

pytestmark = cluster_suite_marks()

#: "wild.*" is a literal prefix (CLU-ADDR-4): it covers no address this suite sends to
ON_DEMAND = Topology(("A", "B", "C"), cluster=ClusterConnection(address="clu.,!clu.ex.,wild.*"), prefix="lbod")
STRICT = Topology(("A", "B", "C"), cluster=ClusterConnection(message_load_balancing="STRICT"), prefix="lbstrict")
OFF = Topology(("A", "B"), cluster=ClusterConnection(message_load_balancing="OFF"), prefix="lboff")
#: Artemis's deprecated forward-when-no-consumers in place of message-load-balancing (CLU-MLB-2)
LEGACY = {flag: Topology(("A", "B"), cluster=ClusterConnection(forward_when_no_consumers=flag),
                         prefix=f"lblegacy{str(flag).lower()}") for flag in (True, False)}
MESSAGES = 12


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def send(clients: StompClients, node, destination: str, count: int, **properties) -> list[str]:
    producer = clients.on(node)
    sent = [f"m{i}" for i in range(count)]
    for body in sent:
        producer.send(destination, body, properties or None)
    return sent


@pytest.mark.spec("CLU-LB-1", "CLU-LB-2")
def test_on_demand_round_robins_over_nodes_with_consumers_and_skips_one_without(clusters):
    cluster = clusters.get(ON_DEMAND)
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["C"], destination)  # C has the queue, no consumer
        on_a = clients.on(cluster["A"]).subscribe(destination, ack="auto")
        on_b = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"), ("A", "C"))
        sent = send(clients, cluster["A"], destination, MESSAGES)
        got = drain_each({"A": on_a, "B": on_b})
        got_a, got_b = bodies(got["A"]), bodies(got["B"])
        on_c = cluster["C"].queue_size(destination)
        assert on_c == 0, (f"CLU-LB-2: under ON_DEMAND node C, whose queue has no consumer, got {on_c} of "
                           f"{MESSAGES} messages sent to A")
        assert sorted(got_a + got_b, key=lambda b: int(b[1:])) == sent, \
            f"CLU-LB-1: A's and B's consumers got {got_a} and {got_b}, not each message once\n{cluster.log_tail(20)}"
        # round robin over the two instances with consumers: the messages, in the order sent, go
        # alternately to A's queue and B's; which of the two comes first follows the start-up
        # order, so either alternation is the documented one
        alternations = [(sent[0::2], sent[1::2]), (sent[1::2], sent[0::2])]
        assert (got_a, got_b) in alternations, (
            f"CLU-LB-1: ON_DEMAND should round-robin the messages sent to A between A's and B's queues (both with "
            f"consumers), every second message to each; A got {got_a}, B got {got_b}")


@pytest.mark.spec("CLU-LB-3")
def test_on_demand_forwards_only_where_a_selector_matches(clusters):
    cluster = clusters.get(ON_DEMAND)
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        reds = clients.on(cluster["B"]).subscribe(destination, ack="auto", selector="color = 'red'")
        blues = clients.on(cluster["C"]).subscribe(destination, ack="auto", selector="color = 'blue'")
        demand_crossed(cluster, destination, ("A", "B"), ("A", "C"))
        producer = clients.on(cluster["A"])
        for i in range(MESSAGES):
            producer.send(destination, f"{'red' if i % 2 else 'blue'}-{i}", {"color": "red" if i % 2 else "blue"})
        got = drain_each({"red": reds, "blue": blues})
        got_red, got_blue = bodies(got["red"]), bodies(got["blue"])
        left_on_a = cluster["A"].queue_size(destination)
    wrong = [b for b in got_red if not b.startswith("red")] + [b for b in got_blue if not b.startswith("blue")]
    assert not wrong, f"CLU-LB-3: consumers got messages their selector does not match: {wrong}"
    assert got_red and got_blue, (f"CLU-LB-3: ON_DEMAND did not forward to the node whose consumer's selector matches "
                                  f"(B red: {got_red}, C blue: {got_blue}, left on A: {left_on_a})")
    assert len(got_red) + len(got_blue) + left_on_a == MESSAGES, \
        f"CLU-LB-3: {MESSAGES} sent, B got {len(got_red)}, C got {len(got_blue)}, A holds {left_on_a}"


def sent_to_a_with_a_consumer_on_b(cluster, destination: str) -> tuple[list[str], int]:
    """MESSAGES sent to A while B has the only consumer: what B's consumer got, and what A holds.
    ``destination`` is outside the cluster address: the probe crosses on a clustered queue, over
    the same link that would carry B's demand for ``destination`` were it clustered."""
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        remote = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"), probe_base=queue("clu"))
        send(clients, cluster["A"], destination, MESSAGES)
        got = bodies(drain(remote))
        return got, cluster["A"].queue_size(destination)


@pytest.mark.spec("CLU-ADDR-1")
def test_an_address_outside_the_cluster_prefix_is_not_forwarded(clusters):
    destination = queue("other")
    got, held = sent_to_a_with_a_consumer_on_b(clusters.get(ON_DEMAND), destination)
    assert got == [], f"CLU-ADDR-1: address {destination} does not begin with 'clu.' yet B got {got}"
    assert held == MESSAGES, \
        f"CLU-ADDR-1: A should hold all {MESSAGES} messages of the unclustered address, holds {held}"


@pytest.mark.spec("CLU-ADDR-1", "CLU-ADDR-2")
def test_an_included_prefix_is_forwarded_and_an_excluded_one_is_not(clusters):
    cluster = clusters.get(ON_DEMAND)
    included, excluded = queue("clu"), queue("clu.ex")
    with StompClients() as clients:
        for destination in (included, excluded):
            declare(clients, cluster["A"], destination)
        remote_in = clients.on(cluster["B"]).subscribe(included, ack="auto")
        remote_ex = clients.on(cluster["B"]).subscribe(excluded, ack="auto")
        demand_crossed(cluster, included, ("A", "B"))  # B's demand for both, announced in that order
        send(clients, cluster["A"], included, MESSAGES)
        send(clients, cluster["A"], excluded, MESSAGES)
        got = drain_each({"in": remote_in, "ex": remote_ex})
        got_in, got_ex = bodies(got["in"]), bodies(got["ex"])
    assert got_in, f"CLU-ADDR-1: {included} begins with the cluster prefix 'clu.' yet B's consumer got none of it"
    assert got_ex == [], (f"CLU-ADDR-2: {excluded} begins with 'clu.' and with the excluded 'clu.ex.': exclusion "
                          f"wins, yet B got {got_ex}")


@pytest.mark.spec("CLU-ADDR-4")
def test_a_wildcard_in_the_cluster_address_is_not_a_wildcard(clusters):
    """The prefix "wild.*" would cover "wild.<name>" as a wildcard (one word after "wild."); as the
    prefix the chapter says it is, it covers no such address, so nothing is forwarded."""
    destination = queue("wild")
    got, held = sent_to_a_with_a_consumer_on_b(clusters.get(ON_DEMAND), destination)
    assert got == [], (f"CLU-ADDR-4: the cluster address 'wild.*' is a prefix, not a wildcard, so {destination} is "
                       f"not clustered; yet B's consumer got {got}")
    assert held == MESSAGES, f"CLU-ADDR-4: A should hold all {MESSAGES} messages of the unclustered address, holds {held}"


@pytest.mark.spec("CLU-LB-4")
def test_strict_round_robins_to_a_node_without_consumers(clusters):
    cluster = clusters.get(STRICT)
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["C"], destination)
        on_a = clients.on(cluster["A"]).subscribe(destination, ack="auto")
        on_b = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"), ("A", "C"))  # STRICT: A knows both queues
        send(clients, cluster["A"], destination, MESSAGES)
        got = drain_each({"A": on_a, "B": on_b})
        got_a, got_b = got["A"], got["B"]
        on_c = cluster["C"].queue_size(destination)
    assert on_c == MESSAGES // 3, (f"CLU-LB-4: under STRICT each of three nodes' queues gets every third message, "
                                   f"consumers or not: C (no consumer) holds {on_c}, A's consumer got {len(got_a)}, "
                                   f"B's {len(got_b)} of {MESSAGES}")
    assert len(got_a) + len(got_b) + on_c == MESSAGES


@pytest.mark.spec("CLU-LB-5")
def test_off_never_forwards(clusters):
    cluster = clusters.get(OFF)
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        remote = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        # no probe: under OFF nothing crosses the cluster, a probe neither; the room B's demand
        # would need to reach A
        settle()
        send(clients, cluster["A"], destination, MESSAGES)
        got = bodies(drain(remote))
        held = cluster["A"].queue_size(destination)
    assert got == [], f"CLU-LB-5: with message-load-balancing OFF, B's consumer got {got} sent to A"
    assert held == MESSAGES, f"CLU-LB-5: A should keep all {MESSAGES} messages, holds {held}"


@pytest.mark.spec("CLU-MLB-2")
@pytest.mark.parametrize("flag", [True, False], ids=["forward", "no-forward"])
def test_forward_when_no_consumers_keeps_its_legacy_meaning(clusters, flag):
    """The queue on both nodes, no consumer anywhere, messages sent to A: true behaves as STRICT
    (every other message goes to B's queue), false as ON_DEMAND (A keeps them all)."""
    cluster = clusters.get(LEGACY[flag])
    destination = queue()
    with StompClients() as clients:
        for node in ("A", "B"):
            declare(clients, cluster[node], destination)
        demand_crossed(cluster, destination, ("A", "B"))  # A knows B's queue and its consumer's departure
        send(clients, cluster["A"], destination, MESSAGES)
        # a forwarded message is counted on B a moment after A's receipt: read until all are counted
        held = poll(lambda: {n: cluster[n].queue_size(destination) for n in ("A", "B")},
                    lambda sizes: sum(sizes.values()) >= MESSAGES, timeout=10.0, interval=0.1)
    expected = {"A": MESSAGES // 2, "B": MESSAGES // 2} if flag else {"A": MESSAGES, "B": 0}
    assert held == expected, (
        f"CLU-MLB-2: forward-when-no-consumers={str(flag).lower()} should act as {'STRICT' if flag else 'ON_DEMAND'}: "
        f"with no consumer anywhere the queues should hold {expected}, they hold {held}\n{cluster.log_tail(20)}")
