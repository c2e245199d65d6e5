"""Issue 26, "Defaults are never exercised": an option the scenario leaves unset must not appear in
the configuration the harness renders, in any of the three renderers (Artemis broker.xml,
ActiveMQ activemq.xml, the reference broker's configuration), so that a statement "X is the
default" runs against the broker's own default and not against a value the harness wrote. An
option the scenario sets, even to the documented default, is written with that value.

Each renderer is checked both ways: a topology with no option set renders none of the option
elements / attributes / keys, and one with every option set renders each with its value (the
documented default values are used on purpose: setting a value is what makes it appear, not it
differing from the default). All without starting a broker."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from conformance.scenario import Scenario
from conformance.targets.activemq.network import render_network_connector
from conformance.targets.artemis.cluster import CLUSTER_NAME, UdpGroup, cluster_xml
from conformance.targets.artemis.config import render
from conformance.targets.reference.clustering import cluster_connection_config, redistribution_settings
from conformance.targets.reference.network import connector_config
from conformance.topology import (CLUSTER_CONNECTION_DEFAULTS, ClusterConnection, ExtraClusterConnection,
                                  NetworkConnectorOptions, Topology)
from reference_broker.cluster.network_config import NetworkConnectorConfig
from reference_broker.config import build_config
from reference_broker.engine.names import QUEUE, DestinationName
from reference_broker.engine.policy import Policies

NS = {"c": "urn:activemq:core"}
PORTS = {"A": 1001, "B": 1002}
PEER = "tcp://127.0.0.1:61616"

#: every ClusterConnection option with a documented default, set to that default, and the text
#: its Artemis element must then carry (artemis-clusters.md, "Configuring Cluster Connections",
#: "Broadcast Groups", "Discovery Groups", "Message Redistribution")
CLUSTER_OPTIONS_AT_DEFAULT = {
    "message_load_balancing": ("ON_DEMAND", "message-load-balancing", "ON_DEMAND"),
    "max_hops": (1, "max-hops", "1"),
    "retry_interval_ms": (500, "retry-interval", "500"),
    "retry_interval_multiplier": (1.0, "retry-interval-multiplier", "1"),
    "max_retry_interval_ms": (2000, "max-retry-interval", "2000"),
    "initial_connect_attempts": (-1, "initial-connect-attempts", "-1"),
    "reconnect_attempts": (-1, "reconnect-attempts", "-1"),
    "use_duplicate_detection": (True, "use-duplicate-detection", "true"),
    "check_period_ms": (30000, "check-period", "30000"),
    "connection_ttl_ms": (60000, "connection-ttl", "60000"),
    "broadcast_period_ms": (2000, "broadcast-period", "2000"),
    "refresh_timeout_ms": (10000, "refresh-timeout", "10000"),
    "redistribution_delay_ms": (-1, "redistribution-delay", "-1"),
}
#: where each element lives in <core>
_CC = f"c:cluster-connections/c:cluster-connection[@name='{CLUSTER_NAME}']"
_PLACE = {"broadcast-period": "c:broadcast-groups/c:broadcast-group",
          "refresh-timeout": "c:discovery-groups/c:discovery-group",
          "redistribution-delay": "c:address-settings/c:address-setting[@match='#']"}

#: the "NetworkConnector Properties" and "Static discovery" tables' defaults, set explicitly,
#: and the attribute (or URI parameter) each must then be written as
NETWORK_OPTIONS_AT_DEFAULT = {
    "dynamic_only": (False, "dynamicOnly", "false"),
    "decrease_network_consumer_priority": (True, "decreaseNetworkConsumerPriority", "true"),
    "network_ttl": (1, "networkTTL", "1"),
    "conduit_subscriptions": (True, "conduitSubscriptions", "true"),
    "use_virtual_dest_subs": (False, "useVirtualDestSubs", "false"),
    "duplex": (False, "duplex", "false"),
    "prefetch_size": (1000, "prefetchSize", "1000"),
    "suppress_duplicate_queue_subscriptions": (False, "suppressDuplicateQueueSubscriptions", "false"),
    "bridge_temp_destinations": (True, "bridgeTempDestinations", "true"),
    "always_sync_send": (False, "alwaysSyncSend", "false"),
    "static_bridge": (False, "staticBridge", "false"),
}
RECONNECT_AT_DEFAULT = {
    "initial_reconnect_delay": (1000, "initialReconnectDelay=1000"),
    "max_reconnect_delay": (30000, "maxReconnectDelay=30000"),
    "use_exponential_back_off": (True, "useExponentialBackOff=true"),
    "back_off_multiplier": (2, "backOffMultiplier=2"),
}


def test_the_defaults_table_covers_every_cluster_option_checked_here():
    assert set(CLUSTER_OPTIONS_AT_DEFAULT) == set(CLUSTER_CONNECTION_DEFAULTS)
    assert {k: v[0] for k, v in CLUSTER_OPTIONS_AT_DEFAULT.items()} == CLUSTER_CONNECTION_DEFAULTS


# --------------------------------------------------------------------------- Artemis


def artemis_core(cc: ClusterConnection, node: str = "A") -> ET.Element:
    topology = Topology(("A", "B"), cluster=cc)
    fragment = cluster_xml(topology, node, host="127.0.0.1", core_ports=PORTS, credentials=("u", "p"),
                           udp=UdpGroup("231.1.2.3", 9999) if cc.discovery == "udp" else None)
    config = render(Scenario(name="x", protocols=("stomp",)), name=f"n-{node}", host="127.0.0.1",
                    ports={"core": PORTS[node], "stomp": 2000}, admin=("adm", "pw"))
    xml = replace(config, cluster_xml=fragment, redistribution_delay_ms=cc.redistribution_delay_ms,
                  redistribution_delays=cc.redistribution_delays).broker_xml()
    return ET.fromstring(xml).find("c:core", NS)


def _artemis_element(core: ET.Element, element: str) -> ET.Element | None:
    return core.find(f"{_PLACE.get(element, _CC)}/c:{element}", NS)


@pytest.mark.parametrize("discovery", ["static", "udp"])
def test_artemis_leaves_out_every_cluster_option_not_set(discovery):
    core = artemis_core(ClusterConnection(discovery=discovery))
    assert core.find(_CC, NS) is not None
    written = {element: _artemis_element(core, element).text for _, element, _ in CLUSTER_OPTIONS_AT_DEFAULT.values()
               if _artemis_element(core, element) is not None}
    assert written == {}, f"unset options written into broker.xml: {written}"


def test_artemis_leaves_the_options_out_of_an_extra_cluster_connection_too():
    extra = ExtraClusterConnection("west", "west", (("A", "B"),))
    core = artemis_core(ClusterConnection(connections=(("A", "B"), ("B", "A")), extra_connections=(extra,)))
    west = core.find("c:cluster-connections/c:cluster-connection[@name='west']", NS)
    assert west is not None
    assert [child.tag.split("}")[1] for child in west] == ["address", "connector-ref", "static-connectors"]


@pytest.mark.parametrize("discovery", ["static", "udp"])
def test_artemis_writes_every_cluster_option_set_even_to_the_default(discovery):
    options = {k: v[0] for k, v in CLUSTER_OPTIONS_AT_DEFAULT.items()}
    core = artemis_core(ClusterConnection(discovery=discovery, **options))
    for option, (_, element, text) in CLUSTER_OPTIONS_AT_DEFAULT.items():
        if discovery == "static" and element in ("broadcast-period", "refresh-timeout"):
            continue  # no broadcast or discovery group without udp discovery
        found = _artemis_element(core, element)
        assert found is not None and found.text == text, (option, None if found is None else found.text)


def test_artemis_writes_an_extra_connections_load_balancing_when_set():
    extra = ExtraClusterConnection("west", "west", (("A", "B"),), message_load_balancing="ON_DEMAND")
    core = artemis_core(ClusterConnection(connections=(("A", "B"), ("B", "A")), extra_connections=(extra,)))
    west = core.find("c:cluster-connections/c:cluster-connection[@name='west']", NS)
    assert west.find("c:message-load-balancing", NS).text == "ON_DEMAND"


# --------------------------------------------------------------------------- ActiveMQ


def test_activemq_leaves_out_every_connector_option_not_set():
    element = ET.fromstring(render_network_connector([PEER], NetworkConnectorOptions()))
    # the name is the connector's identity (the harness finds connectors by it), always written
    assert element.attrib == {"uri": f"static:({PEER})", "name": "bridge"}
    assert list(element) == []


def test_activemq_writes_every_connector_option_set_even_to_the_default():
    options = NetworkConnectorOptions(**{k: v[0] for k, v in NETWORK_OPTIONS_AT_DEFAULT.items()},
                                      **{k: v[0] for k, v in RECONNECT_AT_DEFAULT.items()})
    element = ET.fromstring(render_network_connector([PEER], options))
    assert {attribute: element.get(attribute) for _, attribute, _ in NETWORK_OPTIONS_AT_DEFAULT.values()} == {
        attribute: text for _, attribute, text in NETWORK_OPTIONS_AT_DEFAULT.values()}
    uri = element.get("uri")
    assert uri.startswith(f"static:({PEER})?")
    assert set(uri.split("?", 1)[1].split("&")) == {param for _, param in RECONNECT_AT_DEFAULT.values()}


def test_activemq_a_copy_keeps_the_options_unset_that_were():
    # with_connector_renamed and the suites copy options with model_copy(update=...)
    options = NetworkConnectorOptions(duplex=True).model_copy(update={"name": "other"})
    assert ET.fromstring(render_network_connector([PEER], options)).attrib == {
        "uri": f"static:({PEER})", "name": "other", "duplex": "true"}


# --------------------------------------------------------------------------- reference broker


def test_reference_cluster_section_leaves_out_every_option_not_set():
    cc = ClusterConnection(discovery="udp")
    section = cluster_connection_config(cc, "A", user="u", password="p", udp_port=9999)
    keys = {"message_load_balancing", "max_hops", "retry_interval", "retry_interval_multiplier",
            "max_retry_interval", "initial_connect_attempts", "reconnect_attempts", "use_duplicate_detection",
            "check_period", "connection_ttl"}
    assert keys.isdisjoint(section), sorted(keys & set(section))
    assert set(section["discovery"]) == {"group_address", "group_port"}
    assert redistribution_settings(cc) == []
    # ... and the reference broker then applies the documented defaults itself
    config = build_config({"cluster_connection": section}).cluster_connection
    applied = {"message_load_balancing": config.message_load_balancing, "max_hops": config.max_hops,
               "retry_interval_ms": config.retry_interval, "retry_interval_multiplier": config.retry_interval_multiplier,
               "max_retry_interval_ms": config.max_retry_interval,
               "initial_connect_attempts": config.initial_connect_attempts,
               "reconnect_attempts": config.reconnect_attempts,
               "use_duplicate_detection": config.use_duplicate_detection, "check_period_ms": config.check_period,
               "connection_ttl_ms": config.connection_ttl, "broadcast_period_ms": config.discovery.broadcast_period,
               "refresh_timeout_ms": config.discovery.refresh_timeout,
               "redistribution_delay_ms": Policies(build_config({"cluster_connection": section})).redistribution_delay_for(
                   DestinationName(QUEUE, "any.queue"))}
    assert applied == CLUSTER_CONNECTION_DEFAULTS


def test_reference_cluster_section_writes_every_option_set_even_to_the_default():
    options = {k: v[0] for k, v in CLUSTER_OPTIONS_AT_DEFAULT.items()}
    cc = ClusterConnection(discovery="udp", **options)
    section = cluster_connection_config(cc, "A", user="u", password="p", udp_port=9999)
    assert {key: section[key] for key in ("message_load_balancing", "max_hops", "retry_interval",
                                          "retry_interval_multiplier", "max_retry_interval",
                                          "initial_connect_attempts", "reconnect_attempts",
                                          "use_duplicate_detection", "check_period", "connection_ttl")} == {
        "message_load_balancing": "ON_DEMAND", "max_hops": 1, "retry_interval": 500, "retry_interval_multiplier": 1.0,
        "max_retry_interval": 2000, "initial_connect_attempts": -1, "reconnect_attempts": -1,
        "use_duplicate_detection": True, "check_period": 30000, "connection_ttl": 60000}
    assert (section["discovery"]["broadcast_period"], section["discovery"]["refresh_timeout"]) == (2000, 10000)
    assert redistribution_settings(cc) == [{"match": "#", "redistribution_delay": -1}]


def test_reference_network_connector_leaves_out_every_option_not_set():
    entry = connector_config(PEER, NetworkConnectorOptions())
    assert entry == {"name": "bridge", "uri": f"static:({PEER})"}
    # ... and the reference broker then applies the table's defaults itself
    assert NetworkConnectorConfig(**entry).model_dump(exclude={"uri"}) == \
        NetworkConnectorOptions().model_dump(exclude={"initial_reconnect_delay", "max_reconnect_delay",
                                                      "use_exponential_back_off", "back_off_multiplier"})


def test_reference_network_connector_writes_every_option_set_even_to_the_default():
    options = NetworkConnectorOptions(**{k: v[0] for k, v in NETWORK_OPTIONS_AT_DEFAULT.items()},
                                      **{k: v[0] for k, v in RECONNECT_AT_DEFAULT.items()})
    entry = connector_config(PEER, options)
    assert {k: entry[k] for k in NETWORK_OPTIONS_AT_DEFAULT} == {k: v[0] for k, v in NETWORK_OPTIONS_AT_DEFAULT.items()}
    assert set(entry["uri"].split("?", 1)[1].split("&")) == {param for _, param in RECONNECT_AT_DEFAULT.values()}
