"""A node with several cluster connections (artemis-clusters.md, "Configuring Cluster
Connections", ``address``; "Scaling Down", its closing warning), on every target with
``topology.cluster`` whose statements apply (Artemis: a reference node has one cluster
connection, so these are not applicable there).

Three nodes. The topology's main cluster connection joins A and B; an `ExtraClusterConnection`
joins A and C. So A belongs to two clusters, and B and C know nothing of each other.

* CLU-ADDR-5: the main connection covers the addresses beginning with ``east``, the extra one
  those beginning with ``west``. Both queues exist on every node with a consumer on B and on C and
  none on A; messages sent to A go only where the cluster connection of their address leads.
  (The statement's second half, that overlapping address values *can* deliver a message more than
  once, is a possibility, not a rule: either outcome conforms, so nothing here asserts it.)
* CLU-SCALE-6: both connections cover every address; A scales down on a graceful stop through
  the connection named by ``scale_down_cluster_name`` (the extra one, to C), so its messages must
  end up on C, not on B.
"""

from __future__ import annotations

import pytest

from suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    StompClients, bodies, cluster_suite_marks, cluster_pool, clusters, declare, drain_each, parametrize_by_target,
    queue, send_numbered, demand_crossed, wait_quiet_sizes)
from conformance.targets.base import TargetUnavailable
from conformance.topology import ClusterConnection, ExtraClusterConnection, Topology
from machinery.waiting import poll

pytestmark = cluster_suite_marks()

NODES = ("A", "B", "C")
A_AND_B = (("A", "B"), ("B", "A"))
A_AND_C = (("A", "C"), ("C", "A"))
#: A in two clusters split by address (CLU-ADDR-5)
BY_ADDRESS = Topology(NODES, cluster=ClusterConnection(
    address="east", connections=A_AND_B,
    extra_connections=(ExtraClusterConnection("west-cluster", "west", A_AND_C),)), prefix="twocc")
#: A in two clusters covering every address, scaling down through the one to C (CLU-SCALE-6)
SCALE_DOWN_VIA_C = Topology(NODES, cluster=ClusterConnection(
    connections=A_AND_B, scale_down=True, scale_down_cluster_name="to-c",
    extra_connections=(ExtraClusterConnection("to-c", "", A_AND_C),)), prefix="sdname")
MESSAGES = 10
SCALE_DOWN_WAIT = 30.0  # seconds for A's messages to reach a node once A stopped (a bound)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.mark.spec("CLU-ADDR-5")
def test_each_cluster_connection_balances_only_its_own_addresses(clusters):
    cluster = clusters.get(BY_ADDRESS)
    east, west = queue("east"), queue("west")
    with StompClients() as clients:
        consumers = {}
        for destination in (east, west):
            declare(clients, cluster["A"], destination)
            for node in ("B", "C"):
                consumers[(destination, node)] = clients.on(cluster[node]).subscribe(destination, ack="auto")
        # each over the connection that covers it: A-B carries 'east', A-C 'west'
        demand_crossed(cluster, east, ("A", "B"))
        demand_crossed(cluster, west, ("A", "C"))
        sent = {destination: send_numbered(clients, cluster["A"], destination, MESSAGES) for destination in (east, west)}
        got = {key: bodies(messages) for key, messages in drain_each(consumers, quiet=3.0).items()}
        held = {destination: cluster["A"].queue_size(destination) for destination in (east, west)}
    shown = {f"{destination.split('//')[1].split('.')[0]} on {node}": len(messages)
             for (destination, node), messages in got.items()}
    assert sorted(got[(east, "B")], key=lambda b: int(b[1:])) == sent[east] and got[(east, "C")] == [], (
        f"CLU-ADDR-5: A's cluster connection for 'east' joins it to B only, so every 'east' message sent to A "
        f"should reach B's consumer and none C's; received {shown}, A holds {held}\n{cluster.log_tail(20)}")
    assert sorted(got[(west, "C")], key=lambda b: int(b[1:])) == sent[west] and got[(west, "B")] == [], (
        f"CLU-ADDR-5: A's second cluster connection, for 'west', joins it to C only, so every 'west' message "
        f"sent to A should reach C's consumer and none B's; received {shown}, A holds {held}\n{cluster.log_tail(20)}")


@pytest.mark.spec("CLU-SCALE-6")
def test_scale_down_goes_through_the_cluster_connection_it_names(clusters):
    refused = None
    try:
        cluster = clusters.get(SCALE_DOWN_VIA_C, disrupts=True)  # A is stopped
    except TargetUnavailable as exc:
        if "scale-down-clustername" not in str(exc):
            raise
        refused = str(exc)  # the broker refused the configuration over the option itself
    assert refused is None, (
        f"CLU-SCALE-6: a node configured with scale-down-clustername (naming its cluster connection to C) should "
        f"start and scale down through it; it did not start: {refused}")
    destination = queue("sdname")
    with StompClients() as clients:
        for node in NODES:
            declare(clients, cluster[node], destination)
        demand_crossed(cluster, destination, ("A", "B"), ("A", "C"))
        send_numbered(clients, cluster["A"], destination, MESSAGES)
    before = wait_quiet_sizes(cluster, destination, NODES, MESSAGES)
    assert before == {"A": MESSAGES, "B": 0, "C": 0}, (
        f"setup: with no consumer anywhere A should keep the {MESSAGES} messages sent to it; sizes {before}")
    cluster.stop_broker("A")

    after = poll(lambda: {node: cluster[node].queue_size(destination) for node in ("B", "C")},
                 lambda sizes: sum(sizes.values()) >= MESSAGES, timeout=SCALE_DOWN_WAIT, interval=0.5)
    assert after == {"B": 0, "C": MESSAGES}, (
        f"CLU-SCALE-6: A scales down through the cluster connection named by scale-down-clustername (its "
        f"connection to C), so its {MESSAGES} messages should be on C alone after its graceful stop; sizes "
        f"{after}\n{cluster.log_tail(30)}")
