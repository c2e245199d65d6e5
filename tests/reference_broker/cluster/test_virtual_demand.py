"""Virtual destination demand across a network (ActiveMQ "Networks of Brokers", "Dynamic networks
and Virtual Destinations"): the advisories a broker with use_virtual_dest_subs publishes, and the
bridge that listens to them only with the connector's use_virtual_dest_subs. In-process engine, the
peer's STOMP link replaced by a recorder (as in test_bridge.py)."""

from reference_broker.cluster.advisories import AdvisoryPublisher, decode_consumers, virtual_advisory_topic
from reference_broker.cluster.bridge import Bridge
from reference_broker.cluster.network_config import NetworkConnectorConfig
from reference_broker.cluster.uris import Peer
from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.names import parse_destination
from reference_broker.protocols.stomp.codec import Frame

from .test_bridge import RecordingLink

VT = "topic://VirtualTopic.X"


def announcing_broker(**options):
    broker = Broker(build_config({"name": "B", "use_virtual_dest_subs": True, "composite_destinations": [
        {"name": "include.bar", "forward_to": ["queue://include.bar.forward"], "forward_only": False}], **options}))
    return broker, AdvisoryPublisher(broker)


def retained(broker, destination):
    message = broker.retained.get(f"topic://{virtual_advisory_topic(destination)}")
    return decode_consumers(message.body) if message is not None else []


def test_consumer_of_a_virtual_topic_queue_is_announced_as_demand_for_the_topic():
    broker, _ = announcing_broker()
    conn = broker.connect()
    conn.subscribe("c1", parse_destination("queue://Consumer.A.VirtualTopic.X"), deliver=lambda c, r: None)
    conn.subscribe("c2", parse_destination("queue://include.bar.forward"), deliver=lambda c, r: None)
    assert len(retained(broker, VT)) == 1
    assert len(retained(broker, "topic://include.bar")) == 1
    conn.unsubscribe("c1")
    assert retained(broker, VT) == [], "the demand goes with the consumer"


def test_without_use_virtual_dest_subs_nothing_is_announced():
    broker, _ = announcing_broker(use_virtual_dest_subs=False)
    broker.connect().subscribe("c1", parse_destination("queue://Consumer.A.VirtualTopic.X"), deliver=lambda c, r: None)
    assert retained(broker, VT) == []


def test_on_creation_the_target_queue_alone_is_demand():
    broker, _ = announcing_broker(use_virtual_dest_subs_on_creation=True)
    conn = broker.connect()
    conn.subscribe("c1", parse_destination("queue://include.bar.forward"), deliver=lambda c, r: None)
    conn.unsubscribe("c1")
    assert [c.consumer_id for c in retained(broker, "topic://include.bar")] == ["created:queue://include.bar.forward"]


def forwarding_bridge(use_virtual_dest_subs):
    broker = Broker(build_config({"name": "A"}))
    bridge = Bridge(broker, AdvisoryPublisher(broker), NetworkConnectorConfig(
        uri="static:(tcp://127.0.0.1:1)", use_virtual_dest_subs=use_virtual_dest_subs,
        dynamically_included_destinations=("topic://VirtualTopic.>",)), (Peer("127.0.0.1", 1),))
    bridge.link, bridge.remote_name, bridge.local = RecordingLink(), "B", broker.connect(internal=True)
    return broker, bridge


def virtual_advisory(body=b'[{"id": "B-1/c1", "path": [], "priority": 0, "selector": null}]'):
    return Frame("MESSAGE", [("subscription", "virtual-advisories"),
                             ("destination", f"/topic/{virtual_advisory_topic(VT)}")], body)


def test_bridge_turns_virtual_demand_into_a_network_subscription_of_the_topic():
    broker, bridge = forwarding_bridge(True)
    bridge._on_frame(virtual_advisory())
    assert len(bridge._forward.get(VT, {})) == 1, "one (conduit) network consumer of the virtual topic"
    bridge._on_frame(virtual_advisory(b""))
    assert VT not in bridge._forward, "demand withdrawn with the last consumer"


def test_bridge_merges_virtual_and_plain_demand_into_one_conduit_subscription():
    broker, bridge = forwarding_bridge(True)
    bridge._on_frame(virtual_advisory())
    bridge._on_frame(Frame("MESSAGE", [("subscription", "advisories"),
                                       ("destination", "/topic/ActiveMQ.Advisory.Consumer.Topic.VirtualTopic.X")],
                           b'[{"id": "B-2/t1", "path": [], "priority": 0, "selector": null}]'))
    assert len(bridge._forward[VT]) == 1
    bridge._on_frame(virtual_advisory(b""))
    assert len(bridge._forward[VT]) == 1, "the plain topic subscriber still wants the topic"
