"""One message entering by one protocol and leaving by another (catalogue: cross_protocol.toml).

Each test names the protocols it crosses explicitly through ``client("mqtt")`` / ``client("amqp")``;
a target without that listener is reported not applicable by the plugin."""

from __future__ import annotations

import pytest

from conformance.scenario import Scenario

SCENARIO = Scenario(name="cross-protocol")


@pytest.mark.spec("XPROTO-MQTT-1")
@pytest.mark.requires("protocol.mqtt")
def test_mqtt_publish_reaches_stomp_subscriber(client, dest):
    topic = dest("topic", "xproto")
    subscription = client("stomp").subscribe(topic)
    client("mqtt").send(topic, b"from-mqtt")
    got = subscription.receive(5)
    assert got is not None, f"XPROTO-MQTT-1: STOMP subscriber of {topic} got nothing from an MQTT publish"
    assert got.body == b"from-mqtt", f"XPROTO-MQTT-1: payload changed on the way: {got.body!r}"


@pytest.mark.spec("XPROTO-MQTT-2")
@pytest.mark.requires("protocol.mqtt")
def test_mqtt5_user_property_becomes_a_header(client, dest):
    topic = dest("topic", "xproto")
    subscription = client("stomp").subscribe(topic)
    client("mqtt", mqtt_version=5).send(topic, b"props", {"color": "red", "JMSXGroupID": "G7"})
    got = subscription.receive(5)
    assert got is not None, "XPROTO-MQTT-2: STOMP subscriber got nothing from an MQTT 5 publish"
    assert got.properties.get("color") == "red", f"XPROTO-MQTT-2: user property lost: {got.properties}"
    assert got.group_id == "G7", f"XPROTO-MQTT-2: JMSXGroupID user property lost: {got.properties}"


@pytest.mark.spec("XPROTO-MQTT-3")
@pytest.mark.requires("protocol.mqtt")
def test_stomp_send_reaches_mqtt_wildcard_subscriber(client, dest):
    base = dest("topic", "xproto")
    exact = client("mqtt").subscribe(f"{base}.a.b")
    single = client("mqtt").subscribe(f"{base}.*.b")  # MQTT filter .../+/b
    multi = client("mqtt").subscribe(f"{base}.>")  # MQTT filter .../#
    client("stomp").send(f"{base}.a.b", b"to-mqtt")
    for name, subscription in (("exact", exact), ("'+'", single), ("'#'", multi)):
        got = subscription.receive(5)
        assert got is not None, f"XPROTO-MQTT-3: the {name} MQTT subscriber got nothing from a STOMP send"
        assert got.body == b"to-mqtt", f"XPROTO-MQTT-3: payload changed: {got.body!r}"


@pytest.mark.spec("XPROTO-AMQP-1")
@pytest.mark.requires("protocol.amqp")
def test_amqp_message_reaches_stomp_consumer(client, dest):
    queue = dest("queue", "xproto")
    client("amqp").send(queue, b"from-amqp", {"color": "blue"}, group_id="G1")
    got = client("stomp").subscribe(queue).receive(5)
    assert got is not None, f"XPROTO-AMQP-1: STOMP consumer of {queue} got nothing from an AMQP sender"
    assert got.body == b"from-amqp", f"XPROTO-AMQP-1: body changed: {got.body!r}"
    assert got.properties.get("color") == "blue", f"XPROTO-AMQP-1: application property lost: {got.properties}"


@pytest.mark.spec("XPROTO-AMQP-1")
@pytest.mark.requires("protocol.amqp", "stomp.group_header")
def test_amqp_group_id_reaches_stomp_consumer_as_jmsxgroupid(client, dest):
    # Its own test: the group id is visible to a STOMP consumer only where the broker's MESSAGE
    # frames carry JMSXGroupID (capability stomp.group_header; ActiveMQ Classic's do not).
    queue = dest("queue", "xproto")
    client("amqp").send(queue, b"from-amqp", group_id="G1")
    got = client("stomp").subscribe(queue).receive(5)
    assert got is not None, f"XPROTO-AMQP-1: STOMP consumer of {queue} got nothing from an AMQP sender"
    assert got.group_id == "G1", f"XPROTO-AMQP-1: group-id did not become JMSXGroupID: {got.properties}"


@pytest.mark.spec("XPROTO-AMQP-2")
@pytest.mark.requires("protocol.amqp")
def test_stomp_message_reaches_amqp_receiver(client, dest):
    queue = dest("queue", "xproto")
    client("stomp").send(queue, b"to-amqp", {"color": "green"}, priority=7, group_id="G2")
    got = client("amqp").subscribe(queue).receive(5)
    assert got is not None, f"XPROTO-AMQP-2: AMQP receiver of {queue} got nothing from a STOMP send"
    assert got.body == b"to-amqp", f"XPROTO-AMQP-2: body changed: {got.body!r}"
    assert got.priority == 7, f"XPROTO-AMQP-2: priority 7 arrived as {got.priority}"
    assert got.group_id == "G2", f"XPROTO-AMQP-2: JMSXGroupID did not become group-id: {got.properties}"
    assert got.properties.get("color") == "green", f"XPROTO-AMQP-2: header lost: {got.properties}"
