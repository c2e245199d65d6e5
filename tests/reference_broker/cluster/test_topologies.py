"""Connector names, masterslave: connector entries and the broker's own (unauthenticated) internal
connection: the reference-broker side of suites/test_network_topologies.py (ActiveMQ
"Networks of Brokers": NetworkConnector Properties "name", "Duplex network connectors",
"MasterSlave Discovery", userName / password)."""

from __future__ import annotations

import pytest

from conformance.targets.activemq.network import Bridge, NetworkConnectorOptions, check_duplex_names
from conformance.targets.reference.network import connector_config, security_config
from reference_broker.cluster.advisories import internal_connection
from reference_broker.cluster.network_config import NetworkConnectorConfig
from reference_broker.cluster.service import NetworkService, check_connector_names
from reference_broker.cluster.uris import Peer
from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.errors import AuthenticationFailed


def connector(uri: str, name: str = "bridge", **options) -> NetworkConnectorConfig:
    return NetworkConnectorConfig(uri=uri, name=name, **options)


def test_same_name_to_the_same_peer_is_refused_naming_the_option():
    with pytest.raises(ValueError, match=r"both named 'twin'.*'name'"):
        check_connector_names([connector("static:(tcp://127.0.0.1:1)", "twin", duplex=True),
                               connector("static:(tcp://127.0.0.1:2,tcp://127.0.0.1:1)", "twin", duplex=True)])


def test_same_name_to_different_peers_or_different_names_are_fine():
    check_connector_names([connector("static:(tcp://127.0.0.1:1)", "twin"), connector("static:(tcp://127.0.0.1:2)", "twin"),
                           connector("static:(tcp://127.0.0.1:1)", "other")])


def test_same_name_in_the_same_discovery_group_is_refused():
    with pytest.raises(ValueError, match="unique"):
        check_connector_names([connector("multicast://default?group=g1", "d"), connector("multicast://default?group=g1", "d")])
    check_connector_names([connector("multicast://default?group=g1", "d"), connector("multicast://default?group=g2", "d")])


def test_network_service_refuses_duplicate_names_before_starting():
    config = build_config({"name": "A", "network_connectors": [
        {"uri": "static:(tcp://127.0.0.1:1)", "name": "twin", "duplex": True},
        {"uri": "static:(tcp://127.0.0.1:1)", "name": "twin", "duplex": True}]})
    with pytest.raises(ValueError, match="twin"):
        NetworkService(Broker(config), config)


def test_launcher_duplex_names_count_both_directions():
    def duplex(source, target):
        return Bridge(source, target, NetworkConnectorOptions(name="x", duplex=True))
    with pytest.raises(ValueError, match=r"name=\.\.\."):
        check_duplex_names((duplex("A", "B"), duplex("B", "A")))
    check_duplex_names((duplex("A", "B"), duplex("A", "C")))
    # not duplex: A->B and B->A named alike are two separate one-way connectors on two brokers
    check_duplex_names((Bridge("A", "B", NetworkConnectorOptions(name="x")),
                        Bridge("B", "A", NetworkConnectorOptions(name="x"))))


def test_masterslave_connector_entry_keeps_the_order_and_options():
    entry = connector_config(["tcp://127.0.0.1:5001", "tcp://127.0.0.1:5002"],
                             NetworkConnectorOptions(name="ms", initial_reconnect_delay=500), scheme="masterslave")
    uri = NetworkConnectorConfig(**entry).parsed_uri
    assert uri.master_slave
    assert uri.peers == (Peer("127.0.0.1", 5001), Peer("127.0.0.1", 5002))
    assert uri.reconnect.initial_reconnect_delay == 500


def test_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="scheme"):
        connector_config("tcp://127.0.0.1:1", NetworkConnectorOptions(), scheme="failover")


def test_internal_connection_needs_no_login_on_a_broker_with_users():
    broker = Broker(build_config({"name": "A", "security": security_config((("u", "p"),))}))
    with pytest.raises(AuthenticationFailed):
        broker.connect()  # clients must log in...
    connection = internal_connection(broker)  # ...the broker's own advisories and bridge ends do not
    assert connection.user is None and connection.connection_id.startswith("A-")
    assert connection.connection_id in broker.connections
    assert broker.connect(login="u", passcode="p").connection_id != connection.connection_id
