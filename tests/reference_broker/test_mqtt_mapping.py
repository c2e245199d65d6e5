"""MQTT <-> engine mapping (reference_broker/protocols/mqtt/mapping.py): topic names, filters and
message properties."""

from __future__ import annotations

import pytest

from reference_broker.engine.message import RETAIN_PROPERTY, Message
from reference_broker.engine.wildcard import matches
from reference_broker.protocols.mqtt.codec import topic_matches
from reference_broker.protocols.mqtt.mapping import (
    CORRELATION_DATA_PROPERTY,
    QOS_PROPERTY,
    engine_to_topic,
    filter_to_engine,
    message_from_mqtt,
    message_qos,
    mqtt_topic_of,
    outbound_fields,
    remaining_expiry,
    response_topic_from_reply_to,
    topic_destination,
    topic_to_engine,
)


@pytest.mark.parametrize(
    "mqtt, engine",
    [
        ("a/b/c", "a.b.c"),
        ("v1.2/x", "v1/2.x"),  # '.' and '/' swap (ActiveMQ MQTTProtocolSupport)
        ("/lead", ".lead"),
        ("a//b", "a..b"),
        ("$SYS/broker", "$SYS.broker"),
        ("a b/c", "a%20b.c"),  # white space is not allowed in engine names
        ("lit/*/>", "lit.%2A.%3E"),  # literal characters, not engine wildcards
        ("q?x", "q%3Fx"),  # '?' would start destination parameters
        ("100%", "100%25"),
        ("tab\there", "tab%09here"),
    ],
)
def test_topic_names_map_reversibly(mqtt, engine):
    assert topic_to_engine(mqtt) == engine
    assert engine_to_topic(engine) == mqtt


@pytest.mark.parametrize(
    "topic_filter, pattern",
    [("#", ">"), ("a/+/c", "a.*.c"), ("a/#", "a.>"), ("+/x.y", "*.x/y"), ("a/*", "a.%2A"), ("+", "*")],
)
def test_filters_map_wildcards_level_by_level(topic_filter, pattern):
    assert filter_to_engine(topic_filter) == pattern


@pytest.mark.parametrize(
    "topic_filter, topic",
    [
        ("sport/#", "sport"),  # 4.7.1.2: '#' includes the parent level
        ("sport/#", "sport/tennis/player1"),
        ("sport/+", "sport/"),  # '+' matches an empty level
        ("+/+", "/finance"),
        ("a/+/c", "a/b/c"),
        ("a/+/c", "a/b/d"),
        ("a/*", "a/x"),  # a literal '*' is not a wildcard
        ("a/*", "a/*"),
        ("x.y/#", "x.y/z"),
        ("x.y/#", "x/y/z"),
    ],
)
def test_engine_matching_agrees_with_mqtt_matching(topic_filter, topic):
    """The engine's wildcard matching on mapped names gives MQTT's answer (4.7), except for `$`
    topics, which the session filters itself."""
    assert matches(filter_to_engine(topic_filter), topic_to_engine(topic)) == topic_matches(topic_filter, topic)


def test_engine_names_from_other_protocols():
    assert mqtt_topic_of("topic://x/y.z") == "x.y/z"  # a STOMP /topic/x/y.z
    assert engine_to_topic("a+b") == "a%2Bb"  # '+' cannot appear in an MQTT topic name
    assert engine_to_topic("c#") == "c%23"
    assert engine_to_topic("a%41") == "a%41"  # only escapes the mapping makes are decoded
    assert response_topic_from_reply_to("/topic/a.b") == "a/b"
    assert response_topic_from_reply_to("/queue/replies") == "/queue/replies"


def test_publish_properties_become_message_fields():
    msg = message_from_mqtt(
        message_id="m1", destination=topic_destination("a/b"), payload=b"x", qos=1, retain=True, now_ms=10_000,
        expiry_interval=5, content_type="text/plain", response_topic="re/ply", correlation_data=b"\xff\x00",
        user_properties=[("k", "v"), ("JMSXGroupID", "g1"), ("JMSXGroupSeq", "3"), ("JMSType", "t"),
                         (RETAIN_PROPERTY, "forged"), ("k", "v2")],
        payload_format=1,
    )
    assert msg.destination == "topic://a.b"
    assert msg.persistent and msg.properties[QOS_PROPERTY] == 1 and msg.properties[RETAIN_PROPERTY] is True
    assert msg.expiration == 15_000
    assert (msg.group_id, msg.group_seq, msg.type) == ("g1", 3, "t")
    assert msg.reply_to == "topic://re.ply"
    assert msg.properties["k"] == "v2"  # repeated names: the last value wins (a map)
    assert msg.properties[CORRELATION_DATA_PROPERTY] == "ff00"
    out = outbound_fields(msg)
    assert out.correlation_data == b"\xff\x00"
    assert out.response_topic == "re/ply"
    assert out.payload_format == 1
    assert ("k", "v2") in out.user_properties and ("JMSXGroupID", "g1") in out.user_properties
    assert ("JMSXGroupSeq", "3") in out.user_properties and ("JMSType", "t") in out.user_properties
    assert not any(name in (RETAIN_PROPERTY, QOS_PROPERTY) for name, _ in out.user_properties)


def test_utf8_correlation_data_is_the_correlation_id():
    msg = message_from_mqtt(message_id="m", destination=topic_destination("a"), payload=b"", qos=0, retain=False,
                            now_ms=0, correlation_data=b"req-42")
    assert msg.correlation_id == "req-42" and not msg.persistent
    assert outbound_fields(msg).correlation_data == b"req-42"


def test_qos_of_foreign_messages_and_expiry():
    assert message_qos(Message("m", "topic://a", persistent=True)) == 2
    assert message_qos(Message("m", "topic://a", persistent=False)) == 0
    assert message_qos(Message("m", "topic://a", properties={QOS_PROPERTY: "1"})) == 1  # from STOMP
    assert remaining_expiry(Message("m", "topic://a"), 0) is None
    assert remaining_expiry(Message("m", "topic://a", expiration=5_500), 1_000) == 5
    assert remaining_expiry(Message("m", "topic://a", expiration=5_500), 5_500) == 0
