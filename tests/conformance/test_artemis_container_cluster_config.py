"""The Artemis container cluster's configuration (conformance/targets/artemis/container_cluster.py),
without an engine: each node's broker.xml dials its peers by network alias, listens on 0.0.0.0
on the image's ports, carries the cluster's address settings; the shapes a container cluster does
not form are refused by name before anything starts; the target wires ``topology.cluster`` for
``artemis:container``. The real containers: tests/docker/test_artemis_container_cluster.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from conformance.scenario import Scenario
from conformance.targets.artemis.cluster import cluster_xml
from conformance.targets.artemis.config import render
from conformance.targets.artemis.container_cluster import (ArtemisClusterContainer, check_container_topology,
                                                           launch_container_cluster)
from conformance.targets.artemis.target import CONTAINER_CLUSTER_CAPABILITIES, ArtemisTarget
from conformance.topology import ClusterConnection, Topology, TopologyUnsupported

NS = {"c": "urn:activemq:core"}
CREDS = ("cluster-u", "s3cret")


def test_cluster_xml_takes_a_connector_address_per_node():
    top = Topology(("A", "B", "C"), cluster=ClusterConnection(scale_down=True, scale_down_groups={"A": "g", "C": "g"}))
    fragment = cluster_xml(top, "A", addresses={n: (n, 61616) for n in top.nodes}, credentials=CREDS)
    core = ET.fromstring(f"<core xmlns='urn:activemq:core'>{fragment}</core>")
    connectors = {c.get("name"): c.text for c in core.findall("c:connectors/c:connector", NS)}
    assert connectors == {"node-A": "tcp://A:61616", "link-A-B": "tcp://B:61616", "link-A-C": "tcp://C:61616",
                          "scale-down-C": "tcp://C:61616"}
    # the same nodes on one host with ports give the process launcher's fragment, unchanged
    same = cluster_xml(top, "A", addresses={n: ("127.0.0.1", p) for n, p in zip(top.nodes, (1, 2, 3))},
                       credentials=CREDS)
    assert same == cluster_xml(top, "A", host="127.0.0.1", core_ports={"A": 1, "B": 2, "C": 3}, credentials=CREDS)
    with pytest.raises(ValueError, match="either host and core_ports or addresses"):
        cluster_xml(top, "A", credentials=CREDS)
    with pytest.raises(ValueError, match=r"no core address for node\(s\) \['C'\]"):
        cluster_xml(top, "A", addresses={"A": ("A", 1), "B": ("B", 1)}, credentials=CREDS)


def _node(tmp_path, topology: Topology, scenario: Scenario) -> ArtemisClusterContainer:
    def config_of():
        base = render(scenario, name="p-A", host="0.0.0.0", ports={"core": 61616, "stomp": 61613}, admin=("adm", "pw"))
        return replace(base, cluster_xml=cluster_xml(topology, "A", addresses={n: (n, 61616) for n in topology.nodes},
                                                     credentials=CREDS),
                       redistribution_delay_ms=topology.cluster.redistribution_delay_ms)
    return ArtemisClusterContainer(tmp_path / "node-A", scenario, name="p-A", alias="A", config_of=config_of,
                                   admin=("adm", "pw"), jvm_heap_mb=192)


def test_a_node_container_gets_the_whole_broker_xml_and_its_console_published(tmp_path):
    top = Topology(("A", "B"), cluster=ClusterConnection(redistribution_delay_ms=0), prefix="p")
    node = _node(tmp_path, top, Scenario(name="s", protocols=("stomp",)))
    assert node.listeners() == ["core", "stomp", "console"] and set(node.ports) == {"core", "stomp", "console"}
    assert node.network_aliases == ("p-A", "A")
    env = node.environment()
    assert (env["ARTEMIS_USER"], env["ARTEMIS_PASSWORD"], env["ANONYMOUS_LOGIN"]) == ("adm", "pw", "true")
    node._write_config()
    conf = tmp_path / "node-A" / "conf"
    core = ET.fromstring((conf / "broker.xml").read_text()).find("c:core", NS)
    acceptors = {a.get("name"): a.text for a in core.findall("c:acceptors/c:acceptor", NS)}
    assert acceptors["core"].startswith("tcp://0.0.0.0:61616?") and acceptors["stomp"].startswith("tcp://0.0.0.0:61613?")
    assert core.find("c:connectors/c:connector[@name='link-A-B']", NS).text == "tcp://B:61616"
    assert core.find("c:address-settings/c:address-setting[@match='#']/c:redistribution-delay", NS).text == "0"
    assert (conf / "artemis-users.properties").read_text() == "adm = pw\n"
    assert (conf / "heap-mb").read_text() == "192\n"
    script = (conf / "start-artemis.sh").read_text()
    assert "/docker-run.sh version" in script and "cp /etc/brokerconf/$f etc/$f" in script
    assert node.render_config() == (conf / "broker.xml").read_text()


@pytest.mark.parametrize("topology, match", [
    (Topology(("A", "B"), cluster=ClusterConnection(discovery="udp")), "discovery 'udp'"),
    (Topology(("A", "B"), cluster=ClusterConnection(), proxied=("cluster",)), "fault proxy"),
    (Topology(("A", "B", "C", "D", "E"), cluster=ClusterConnection()), "2 to 4 nodes"),
    (Topology(("A", "b_1"), cluster=ClusterConnection()), "network aliases"),
])
def test_shapes_a_container_cluster_does_not_form_are_refused_by_name(topology, match, tmp_path):
    with pytest.raises(TopologyUnsupported, match=match):
        check_container_topology(topology)
    with pytest.raises(TopologyUnsupported, match=match):  # before any container or network exists
        launch_container_cluster(topology, Scenario(name="s"), tmp_path, counters=lambda c: None)
    assert not any(tmp_path.iterdir())


def test_artemis_container_declares_clusters_and_their_nodes_read_counters():
    target = ArtemisTarget(launch="container", image_check=lambda image: (True, ""))
    assert "topology.cluster" in target.capabilities() and target.why_missing("topology.cluster") is None
    assert "counters.destination" not in target.capabilities()  # a single container reads none
    assert "counters.destination" in CONTAINER_CLUSTER_CAPABILITIES
