"""The launchers' per-node cluster credentials hook (`use_cluster_credentials`, used by
suites/test_cluster_connection_options.py for CLU-CRED-1/-2): the Artemis fragment
leaves the elements out for the shipped defaults; the reference node's next start reads the pair."""

from __future__ import annotations

from conformance.targets.artemis.cluster import cluster_xml
from conformance.targets.reference.clustering import ReferenceCluster
from conformance.topology import ClusterConnection, Topology

TOPOLOGY = Topology(("A", "B"), cluster=ClusterConnection(), prefix="credhook")
PORTS = {"A": 1001, "B": 1002}


def test_artemis_fragment_carries_the_pair_or_leaves_the_defaults():
    given = cluster_xml(TOPOLOGY, "A", host="127.0.0.1", core_ports=PORTS, credentials=("u-x", "p-y"))
    assert "<cluster-user>u-x</cluster-user>" in given and "<cluster-password>p-y</cluster-password>" in given
    defaults = cluster_xml(TOPOLOGY, "A", host="127.0.0.1", core_ports=PORTS, credentials=None)
    assert "<cluster-user>" not in defaults and "<cluster-password>" not in defaults


def test_reference_node_config_takes_the_pair_or_the_defaults():
    from reference_broker.config import DEFAULT_CLUSTER_PASSWORD, build_config

    with ReferenceCluster(TOPOLOGY) as cluster:
        node = cluster["B"]
        cluster.use_cluster_credentials("B", ("u-x", "p-y"))
        section = node.config_data["cluster_connection"]
        assert (section["cluster_user"], section["cluster_password"]) == ("u-x", "p-y")
        cluster.use_cluster_credentials("B", None)
        assert build_config(node.config_data).cluster_connection.cluster_password == DEFAULT_CLUSTER_PASSWORD
