"""Durable network subscriptions in demand (reference_broker/cluster/demand.py) and their
announcement (advisories.py), after ActiveMQ "Networks of Brokers" (dynamicOnly row; the N.B. on
names under "Example Configuration")."""

from reference_broker.cluster.advisories import decode_consumers, encode_consumers
from reference_broker.cluster.demand import (DURABLE_KEY, RemoteConsumer, bridge_client_id, desired_consumers,
                                             durable_subscription_name)
from reference_broker.cluster.network_config import NetworkConnectorConfig

T = "topic://nob.t"


def config(**options) -> NetworkConnectorConfig:
    return NetworkConnectorConfig(uri="static:(tcp://127.0.0.1:1)", **options)


def test_a_durable_subscriber_makes_one_durable_network_subscription_for_the_topic():
    consumers = [RemoteConsumer("c1", durable=True), RemoteConsumer("c2")]
    wanted = desired_consumers(config(), T, "B", "A", consumers)
    assert list(wanted) == [DURABLE_KEY]
    assert wanted[DURABLE_KEY].durable and wanted[DURABLE_KEY].path == ("B",)


def test_non_durable_topic_subscribers_make_an_ordinary_conduit():
    wanted = desired_consumers(config(), T, "B", "A", [RemoteConsumer("c1")])
    assert list(wanted) == ["conduit"] and not wanted["conduit"].durable


def test_durable_flag_survives_the_advisory_encoding():
    consumers = [RemoteConsumer("c1", ("C",), -5, None, durable=True), RemoteConsumer("c2")]
    assert decode_consumers(encode_consumers(consumers)) == consumers


def test_durable_names_depend_on_connector_and_broker_names_only():
    assert durable_subscription_name("A", T) == durable_subscription_name("A", T) == "NC-DS_A_nob.t"
    assert bridge_client_id("bridge", "A", "B") != bridge_client_id("renamed", "A", "B")
    assert bridge_client_id("bridge", "A", "B") != bridge_client_id("bridge", "A", "C")
