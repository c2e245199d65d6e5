"""The broker-neutral topology model and the contract (conformance/topology.py): what a model
refuses, which capability a topology needs, and that the reference target's clusters have the one
node interface (start / stop / kill / pause / resume, serving, counters) without any broker-kind
switch in the caller."""

from __future__ import annotations

import socket

import pytest

from conformance.scenario import Scenario
from conformance.targets.mosquitto.target import MosquittoTarget
from conformance.targets.reference.target import ReferenceTarget
from conformance.topology import (Bridge, Cluster, NetworkConnectorOptions, Node, SharedStore, Topology,
                                  TopologyUnsupported, capability_of)
from reference_broker.cluster.network_config import NetworkConnectorConfig, NetworkConnectorProperties

FAST = NetworkConnectorOptions(initial_reconnect_delay=100, max_reconnect_delay=500, use_exponential_back_off=False)


def stomp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
            return s.recv(64).startswith(b"CONNECTED")
    except OSError:
        return False


def test_kind_and_capability_follow_the_model():
    assert Topology().kind == "single" and capability_of(Topology()) is None
    net = Topology(("A", "B"), (Bridge("A", "B"),))
    assert (net.kind, capability_of(net)) == ("network", "topology.network")
    store = Topology(("A", "B"), shared_store=SharedStore())
    assert (store.kind, capability_of(store)) == ("shared-store", "topology.shared-store")


@pytest.mark.parametrize("kwargs, message", [
    ({"nodes": ("A", "A")}, "distinct nodes"),
    ({"nodes": ("A", "B"), "bridges": (Bridge("A", "C"),)}, "names 'C'"),
    ({"nodes": ("A", "B"), "proxied": ("clients",)}, "proxied links"),
    ({"nodes": ("A", "B"), "bridges": (Bridge("A", "B"),), "shared_store": SharedStore()}, "one of them"),
])
def test_bad_topologies_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Topology(**kwargs)


def test_connector_properties_are_declared_once():
    """The harness's options and the reference broker's configuration share one declaration of the
    table's properties; the harness adds only the reconnect options of the static: URI."""
    props = set(NetworkConnectorProperties.model_fields)
    assert props <= set(NetworkConnectorOptions.model_fields)
    assert set(NetworkConnectorOptions.model_fields) - props == {
        "initial_reconnect_delay", "max_reconnect_delay", "use_exponential_back_off", "back_off_multiplier"}
    assert set(NetworkConnectorConfig.model_fields) - props == {"uri"}


def test_a_target_refuses_a_topology_it_does_not_declare(tmp_path):
    with pytest.raises(TopologyUnsupported, match="topology.network"):
        MosquittoTarget().launch_topology(Topology(("A", "B"), (Bridge("A", "B"),)), Scenario(name="t"), tmp_path)
    with pytest.raises(TopologyUnsupported, match="topology.shared-store"):
        MosquittoTarget().launch_topology(Topology(("A", "B"), shared_store=SharedStore()), Scenario(name="t"),
                                          tmp_path)


def test_reference_network_nodes_have_the_one_interface(tmp_path):
    topology = Topology(("A", "B"), (Bridge("A", "B", FAST),), prefix="topo-test")
    cluster = ReferenceTarget().launch_topology(topology, Scenario(name="topo", protocols=("stomp",)), tmp_path)
    try:
        assert isinstance(cluster, Cluster) and cluster.topology is topology
        a, b = cluster["A"], cluster["B"]
        assert all(isinstance(node, Node) for node in (a, b))
        assert cluster.serving() == ["A", "B"] and cluster.bridge_establishments() == 1
        host, port = b.address("stomp")
        assert cluster.addresses("stomp")[1] == (host, port) and stomp_answers(host, port)
        b.pause()
        assert not b.serving() and not stomp_answers(host, port, timeout=0.5), "a paused node must not answer"
        b.resume()
        assert b.serving() and stomp_answers(host, port)
        b.stop()
        assert not b.running and not stomp_answers(host, port, timeout=0.5)
        cluster.start_broker("B", timeout=20)
        assert b.running and stomp_answers(host, port), "a node starts again on the same port"
    finally:
        cluster.stop()


def test_a_single_in_process_broker_is_a_topology_of_one_node_not_ours_to_fault(tmp_path):
    cluster = ReferenceTarget().launch_topology(Topology(), Scenario(name="one", protocols=("stomp",)), tmp_path)
    try:
        assert isinstance(cluster, Cluster) and cluster.nodes == {}  # no process.kill: nothing to fault
        (address,) = cluster.addresses("stomp")
        assert stomp_answers(*address)
    finally:
        cluster.stop()


def test_reference_shared_store_group_has_the_one_interface(tmp_path):
    """The reference broker's shared-store group (conformance/targets/reference/shared_store.py):
    broker processes on one journal directory, A master, B a slave with its port closed."""
    import json

    from conformance.targets.runtime.probes import tcp_accepts

    store = SharedStore(lock_keep_alive_period_ms=700, lock_acquire_sleep_interval_ms=300)
    cluster = ReferenceTarget().launch_topology(Topology(("A", "B"), shared_store=store, prefix="ss-test"),
                                                Scenario(name="ss", protocols=("stomp",)), tmp_path)
    try:
        assert isinstance(cluster, Cluster) and all(isinstance(n, Node) for n in cluster.nodes.values())
        assert cluster.serving() == ["A"]
        assert cluster["B"].running and cluster["B"].process.waiting_for_lock()
        assert not tcp_accepts(cluster["B"].address("stomp")[1], 1.0), "FT-SHARED-1: the slave's port is open"
        assert cluster.lock_file.exists() and cluster.lock_file.parent == cluster.store
        configs = [json.loads(part.split("\n", 1)[1]) for part in cluster.config_text().split("--- node ")[1:]]
        assert {c["store"]["directory"] for c in configs} == {str(cluster.store)}
        assert {(c["store"]["lock_keep_alive_period"], c["store"]["locker"]["lock_acquire_sleep_interval"])
                for c in configs} == {(700, 300)}
    finally:
        cluster.stop()
    assert not any(node.running for node in cluster.nodes.values())


def test_a_jdbc_store_is_its_own_topology_kind_with_the_lease_inside_the_keep_alive():
    from conformance.topology import SharedStore, Topology, capability_of

    lease = SharedStore(kind="jdbc", lock_keep_alive_period_ms=500, lock_acquire_sleep_interval_ms=2000)
    topology = Topology(("A", "B"), shared_store=lease)
    assert topology.kind == "jdbc-store" and capability_of(topology) == "topology.jdbc-store"
    for keep_alive in (0, 2000, 3000):
        with pytest.raises(ValueError, match="renewed every lock_keep_alive_period_ms"):
            SharedStore(kind="jdbc", lock_keep_alive_period_ms=keep_alive, lock_acquire_sleep_interval_ms=2000)
    with pytest.raises(ValueError, match="'file' or 'jdbc'"):
        SharedStore(kind="nfs")


# ------------------------------------------------------------------ Artemis-style cluster connections

from conformance.topology import ClusterConnection, GroupingHandlers  # noqa: E402


def test_a_cluster_topology_is_its_own_kind_and_capability():
    topology = Topology(("A", "B", "C"), cluster=ClusterConnection())
    assert (topology.kind, topology.capability) == ("cluster", "topology.cluster")
    # symmetric by default: every node lists every other one
    assert set(topology.cluster.links(topology.nodes)) == {
        (a, b) for a in "ABC" for b in "ABC" if a != b}


def test_a_chain_lists_only_its_explicit_connections():
    chain = ClusterConnection(connections=(("A", "B"), ("B", "C")), max_hops=2)
    assert chain.links(("A", "B", "C")) == (("A", "B"), ("B", "C"))


@pytest.mark.parametrize("spec, address, applies", [
    ("", "anything", True),
    ("eu", "eu.news", True),
    ("eu", "us.news", False),
    ("!eu", "eu.news", False),
    ("!eu", "us.news", True),
    ("eu.uk,eu.de", "eu.de.x", True),
    ("eu.uk,eu.de", "eu.fr", False),
    ("eu,!eu.uk", "eu.fr", True),
    ("eu,!eu.uk", "eu.uk.london", False),  # exclusion wins over inclusion
    ("eu.*", "eu.fr", False),  # CLU-ADDR-4: a wildcard character is only itself in a prefix
    ("eu.*", "eu.*.x", True),
])
def test_cluster_connection_address_prefixes_and_exclusions(spec, address, applies):
    assert ClusterConnection(address=spec).matches(address) is applies


@pytest.mark.parametrize("kwargs, reason", [
    ({"message_load_balancing": "SOMETIMES"}, "message_load_balancing"),
    ({"max_hops": -1}, "max_hops"),
    ({"redistribution_delay_ms": -2}, "redistribution_delay_ms"),
    ({"discovery": "jgroups"}, "discovery"),
    ({"discovery": "udp", "connections": (("A", "B"),)}, "static"),
    ({"reconnect_attempts": -5}, "reconnect_attempts"),
    ({"redistribution_delays": (("a.#", -3),)}, "redistribution_delays"),
    ({"direct_connections_only": False}, "needs explicit connections"),
    ({"redistribution_delays": (("queue://a", 0),)}, "not an address match"),
    ({"redistribution_delays": (("", 0),)}, "not an address match"),
])
def test_bad_cluster_connections_are_refused_by_option(kwargs, reason):
    with pytest.raises(ValueError, match=reason):
        ClusterConnection(**kwargs)


@pytest.mark.parametrize("cluster, reason", [
    (ClusterConnection(connections=(("A", "Z"),)), "names"),
    (ClusterConnection(connections=(("A", "A"),)), "two different nodes"),
    (ClusterConnection(grouping=GroupingHandlers(local="Q")), "names"),
    (ClusterConnection(scale_down_groups={"X": "g"}), "names"),
])
def test_cluster_connections_name_only_the_topologys_nodes(cluster, reason):
    with pytest.raises(ValueError, match=reason):
        Topology(("A", "B"), cluster=cluster)


def test_a_cluster_needs_two_nodes_and_no_bridges():
    with pytest.raises(ValueError, match="two or more"):
        Topology(("A",), cluster=ClusterConnection())
    with pytest.raises(ValueError, match="one of them"):
        Topology(("A", "B"), bridges=(Bridge("A", "B"),), cluster=ClusterConnection())


@pytest.mark.parametrize("kwargs, reason", [
    ({"kind": "jdbc", "jdbc_adapter": "fast", "lock_keep_alive_period_ms": 500, "lock_acquire_sleep_interval_ms": 2000},
     "jdbc_adapter must be"),
    ({"kind": "file", "jdbc_adapter": "journaled"}, "jdbc_adapter applies to a kind 'jdbc'"),
])
def test_bad_jdbc_adapters_are_refused_by_option(kwargs, reason):
    with pytest.raises(ValueError, match=reason):
        SharedStore(**kwargs)
