"""Virtual topics and composite destinations in the engine (reference_broker/engine/virtual.py;
ActiveMQ "Virtual Destinations", as ActiveMQ "Networks of Brokers" uses them in "Dynamic networks
and Virtual Destinations"). Spec IDs ENG-VIRT-* (proposed for the catalogue)."""

from __future__ import annotations

import pytest

from reference_broker.config import ConfigError
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.names import parse_destination

from .test_engine_support import Client, make_broker, pending_ids

VT = "topic://VirtualTopic.Orders"


def test_eng_virt_1_virtual_topic_copies_to_each_consumer_group_queue():
    """ENG-VIRT-1: with the default configuration (ActiveMQ's default interceptor), a message sent
    to VirtualTopic.X goes to every existing queue Consumer.<group>.VirtualTopic.X, and still to the
    topic's own subscribers."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("a1", "queue://Consumer.A.VirtualTopic.Orders")
    c.subscribe("b1", "queue://Consumer.B.VirtualTopic.Orders")
    c.subscribe("topic", VT, ack_mode=AckMode.AUTO)
    c.subscribe("other", "queue://Consumer.A.VirtualTopic.Other")
    c.send(VT, "m1")
    assert c.got("a1") == ["m1"] and c.got("b1") == ["m1"], "ENG-VIRT-1: each consumer group gets a copy"
    assert c.got("topic") == ["m1"], "ENG-VIRT-1: the virtual topic is still a topic for its subscribers"
    assert c.got("other") == [], "ENG-VIRT-1: a queue of another virtual topic gets nothing"
    assert c.last("a1").ref.message.destination == "queue://Consumer.A.VirtualTopic.Orders"


def test_eng_virt_2_consumer_queue_is_an_ordinary_queue():
    """ENG-VIRT-2: consumers of one group share its queue (each message to one of them), and the
    queue keeps messages while nobody consumes; a group whose queue does not exist yet gets nothing."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("a1", "queue://Consumer.A.VirtualTopic.Orders", ack_mode=AckMode.AUTO)
    c.subscribe("a2", "queue://Consumer.A.VirtualTopic.Orders", ack_mode=AckMode.AUTO)
    for i in range(4):
        c.send(VT, f"m{i}", persistent=True)
    assert sorted(c.got("a1") + c.got("a2")) == ["m0", "m1", "m2", "m3"], "ENG-VIRT-2: load balanced, once each"
    assert c.got("a1") and c.got("a2")
    c.conn.unsubscribe("a1")
    c.conn.unsubscribe("a2")
    c.send(VT, "kept", persistent=True)
    assert pending_ids(broker, "queue://Consumer.A.VirtualTopic.Orders") == ["kept"], "ENG-VIRT-2: held for the group"
    assert "queue://Consumer.C.VirtualTopic.Orders" not in broker.queues


def test_eng_virt_3_composite_topic_forward_only_and_not():
    """ENG-VIRT-3: a composite topic copies each message to its forward_to list; forward_only
    (ActiveMQ's default) keeps it from its own subscribers, forward_only=false does not."""
    broker = make_broker({"composite_destinations": [
        {"name": "include.bar", "forward_to": ["queue://include.bar.forward", "topic://audit"], "forward_only": False},
        {"name": "only.bar", "forward_to": ["queue://only.bar.forward"]},
    ]})
    c = Client(broker)
    c.subscribe("fwd", "queue://include.bar.forward")
    c.subscribe("audit", "topic://audit", ack_mode=AckMode.AUTO)
    c.subscribe("bar", "topic://include.bar", ack_mode=AckMode.AUTO)
    c.subscribe("only", "topic://only.bar", ack_mode=AckMode.AUTO)
    c.send("topic://include.bar", "x1")
    c.send("topic://only.bar", "y1")
    assert c.got("fwd") == ["x1"] and c.got("audit") == ["x1"], "ENG-VIRT-3: copied to every forward_to entry"
    assert c.got("bar") == ["x1"], "ENG-VIRT-3: forward_only=false also delivers to the topic itself"
    assert c.got("only") == [], "ENG-VIRT-3: forward_only (default) keeps the message from the topic itself"
    assert pending_ids(broker, "queue://only.bar.forward") == ["y1"]


def test_eng_virt_4_composite_forwarding_in_a_circle_stops():
    """ENG-VIRT-4: composites that forward to each other do not loop forever."""
    broker = make_broker({"composite_destinations": [
        {"name": "ping", "forward_to": ["topic://pong"], "forward_only": False},
        {"name": "pong", "forward_to": ["topic://ping"], "forward_only": False},
    ]})
    c = Client(broker)
    c.subscribe("ping", "topic://ping", ack_mode=AckMode.AUTO)
    c.send("topic://ping", "p")
    assert 1 <= len(c.got("ping")) <= 10


def test_eng_virt_5_sources_for_names_the_virtual_destinations_feeding_a_queue():
    """ENG-VIRT-5: the reverse lookup networks use for use_virtual_dest_subs."""
    broker = make_broker({"composite_destinations": [
        {"name": "include.bar", "forward_to": ["queue://include.bar.forward"]}]})
    sources = broker.virtual.sources_for
    assert [d.canonical for d in sources(parse_destination("queue://Consumer.A.VirtualTopic.X.Y"))] == [
        "topic://VirtualTopic.X.Y"]
    assert [d.canonical for d in sources(parse_destination("queue://include.bar.forward"))] == ["topic://include.bar"]
    assert sources(parse_destination("queue://Consumer.A.Other")) == []
    assert sources(parse_destination("queue://VirtualTopic.X")) == []


def test_eng_virt_6_configuration_errors_say_what_to_write():
    with pytest.raises(ConfigError, match="queue://NAME or topic://NAME"):
        make_broker({"composite_destinations": [{"name": "x", "forward_to": ["x.forward"]}]})
    with pytest.raises(ConfigError, match="forward_to"):
        make_broker({"composite_destinations": [{"name": "x", "forward_to": []}]})
    broker = make_broker({"virtual_topics": []})
    c = Client(broker)
    c.subscribe("a1", "queue://Consumer.A.VirtualTopic.Orders")
    c.send(VT, "m1")
    assert c.got("a1") == [], "no virtual topics configured: VirtualTopic.X is a plain topic"
