"""Names of networked durable subscriptions (ActiveMQ "Networks of Brokers", the N.B. on names under
"Example Configuration using NetworkConnector properties"; NOB-DURNAME-1) and the launchers'
connector renaming that the conformance test uses."""

import pytest

from conformance.targets.activemq.network import Bridge, NetworkConnectorOptions, with_connector_renamed
from conformance.targets.reference.network import ReferenceNetwork
from reference_broker.cluster.demand import bridge_client_id, durable_subscription_name


def test_bridge_client_id_follows_activemq_order():
    # 5.17.2 over JMX: broker A's connector "keep" to B subscribes as keep_B_inbound_A.
    assert bridge_client_id("keep", "A", "B") == "keep_B_inbound_A"


def test_durable_subscription_name_leaves_out_the_connector():
    # The subscription name is broker + topic; the connector name lives in the client id.
    assert durable_subscription_name("A", "topic://t.x") == "NC-DS_A_t.x"


def _bridges():
    return (Bridge("A", "B", NetworkConnectorOptions(name="one")),
            Bridge("A", "B", NetworkConnectorOptions(name="two")),
            Bridge("B", "A", NetworkConnectorOptions(name="one")))


def test_rename_touches_only_the_named_connector_of_the_broker():
    renamed = with_connector_renamed(_bridges(), "A", "one", "uno")
    assert [(b.source, b.options.name) for b in renamed] == [("A", "uno"), ("A", "two"), ("B", "one")]


def test_rename_of_an_unknown_connector_says_which_exist():
    with pytest.raises(ValueError, match=r"no connector named 'three'.*\['one', 'two'\]"):
        with_connector_renamed(_bridges(), "A", "three", "x")


def test_rename_to_a_name_in_use_is_refused():
    network = ReferenceNetwork(None, ("A", "B"), _bridges())
    with pytest.raises(ValueError, match="already has a connector named 'two'"):
        network.rename_connector("A", "one", "two")


def test_rename_then_start_broker_uses_the_new_name():
    network = ReferenceNetwork(None, ("A", "B"), (Bridge("A", "B", NetworkConnectorOptions(name="one")),))
    network.start()
    try:
        network.stop_broker("A")
        network.rename_connector("A", "one", "uno")
        network.start_broker("A")
        names = network["A"].call(lambda: [b.config.name for b in network["A"].network.bridges])
        assert names == ["uno"]
        assert network["A"].bridges_up() == 1
    finally:
        network.stop()


def test_refused_rename_leaves_the_connectors_as_they_were():
    network = ReferenceNetwork(None, ("A", "B"), _bridges())
    with pytest.raises(ValueError):
        network.rename_connector("A", "one", "two")
    assert network.bridges == _bridges()
