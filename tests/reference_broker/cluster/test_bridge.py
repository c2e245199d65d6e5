"""The bridge's store-and-forward and the consumer advisories, on an in-process engine with the
peer's STOMP link replaced by a recorder (no sockets)."""

import json

from reference_broker.cluster.advisories import AdvisoryPublisher, decode_consumers
from reference_broker.cluster.bridge import Bridge
from reference_broker.cluster.demand import NetworkDemand
from reference_broker.cluster.network_config import NetworkConnectorConfig
from reference_broker.cluster.uris import Peer
from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.message import Message
from reference_broker.engine.names import parse_destination
from reference_broker.protocols.stomp.codec import Frame

Q = "queue://orders"


class RecordingLink:
    is_open = True

    def __init__(self):
        self.frames = []

    def write(self, command, headers, body=b""):
        self.frames.append((command, dict(headers), body))
        return True

    def close(self):
        self.is_open = False


def make_bridge(**options):
    broker = Broker(build_config({"name": "A"}))
    publisher = AdvisoryPublisher(broker)
    bridge = Bridge(broker, publisher, NetworkConnectorConfig(uri="static:(tcp://127.0.0.1:1)", **options),
                    (Peer("127.0.0.1", 1),))
    # the local end is the broker's own connection, as internal_connection() makes it
    bridge.link, bridge.remote_name, bridge.local = RecordingLink(), "B", broker.connect(internal=True)
    return broker, publisher, bridge


def produce(broker, body="hello", persistent=True, properties=None):
    conn = broker.connect()
    conn.send(parse_destination(Q), Message(conn.new_message_id(), Q, body.encode(), persistent=persistent,
                                              properties=dict(properties or {})))


def test_persistent_message_leaves_only_after_the_peer_receipt():
    broker, _, bridge = make_bridge()
    bridge._add_forward(Q, NetworkDemand("conduit", ("B",), -5, None))
    produce(broker)
    queue = broker.queues[Q]
    sends = [f for f in bridge.link.frames if f[0] == "SEND"]
    assert len(sends) == 1 and sends[0][1]["brokerPath"] == ",A," and sends[0][1]["persistent"] == "true"
    assert queue.pending_count + queue.in_flight_count == 1, "removed before the peer confirmed it"
    bridge._on_frame(Frame("RECEIPT", [("receipt-id", sends[0][1]["receipt"])]))
    assert queue.pending_count + queue.in_flight_count == 0 and queue.dequeued == 1


def test_lost_link_returns_unconfirmed_messages_to_the_queue():
    broker, _, bridge = make_bridge()
    bridge._add_forward(Q, NetworkDemand("conduit", ("B",), -5, None))
    produce(broker)
    bridge._teardown()  # the connection dropped before the receipt
    queue = broker.queues[Q]
    assert queue.pending_count == 1 and not queue.consumers


def test_message_that_came_from_the_peer_is_not_sent_back():
    broker, _, bridge = make_bridge()
    bridge._add_forward(Q, NetworkDemand("conduit", ("B",), -5, None))
    produce(broker, properties={"brokerPath": ",B,"})
    assert not [f for f in bridge.link.frames if f[0] == "SEND"]
    assert broker.queues[Q].pending_count == 1


def test_network_consumer_priority_prefers_local_consumers():
    broker, _, bridge = make_bridge()
    got = []
    local = broker.connect()
    local.subscribe("mine", parse_destination(Q), deliver=lambda c, ref: got.append(ref), ack_mode=AckMode.AUTO)
    bridge._add_forward(Q, NetworkDemand("conduit", ("B",), -5, None))
    for _ in range(5):
        produce(broker)
    assert len(got) == 5 and not [f for f in bridge.link.frames if f[0] == "SEND"]


def test_advisory_announces_local_and_network_consumers():
    broker, publisher, bridge = make_bridge()
    seen = []
    publisher.watch(lambda destination, consumers: seen.append((destination, consumers)))
    client = broker.connect()
    client.subscribe("s1", parse_destination(Q), deliver=lambda c, r: None, selector="x = 1")
    bridge._add_forward(Q, NetworkDemand("conduit", ("B", "C"), -6, None))
    destination, consumers = seen[-1]
    assert destination == Q
    by_path = {c.path: c for c in consumers}
    assert by_path[()].selector == "x = 1" and by_path[("B", "C")].priority == -6
    retained = broker.retained["topic://ActiveMQ.Advisory.Consumer.Queue.orders"]
    assert {c.path for c in decode_consumers(retained.body)} == {(), ("B", "C")}
    client.close()
    bridge._teardown()
    assert seen[-1] == (Q, [])
    assert "topic://ActiveMQ.Advisory.Consumer.Queue.orders" not in broker.retained  # empty body clears it


def test_stomp_network_subscription_gets_its_negative_priority():
    broker, publisher, _ = make_bridge()
    client = broker.connect(internal=True)  # trusted as a network bridge (engine/network_principal.py)
    first = client.subscribe("plain", parse_destination(Q), deliver=lambda c, r: None)
    network = client.subscribe("NC|B|-5|1", parse_destination(Q), deliver=lambda c, r: None)
    assert network.priority == -5
    assert broker.queues[Q].consumers == [first, network]
    later = client.subscribe("plain2", parse_destination(Q), deliver=lambda c, r: None)
    assert broker.queues[Q].consumers.index(later) < broker.queues[Q].consumers.index(network)


def test_duplex_pull_subscribes_on_the_peer_for_local_demand_and_acks_after_storing():
    broker, publisher, bridge = make_bridge(duplex=True)
    publisher.watch(bridge._local_demand)
    got = []
    client = broker.connect()
    client.subscribe("s1", parse_destination(Q), deliver=lambda c, ref: got.append(ref))
    subscribes = [f for f in bridge.link.frames if f[0] == "SUBSCRIBE"]
    assert len(subscribes) == 1
    headers = subscribes[0][1]
    assert headers["id"].startswith("NC|A|-5|") and headers["destination"] == "/queue/orders"
    assert "NOT LIKE '%,A,%'" in headers["selector"] and headers["ack"] == "client-individual"
    bridge._on_frame(Frame("MESSAGE", [("subscription", headers["id"]), ("destination", "/queue/orders"),
                                       ("message-id", "m1"), ("ack", "7:m1"), ("persistent", "true"),
                                       ("colour", "red")], b"pulled"))
    assert [r.message.body for r in got] == [b"pulled"]
    assert got[0].message.properties["brokerPath"] == ",B," and got[0].message.properties["colour"] == "red"
    assert bridge.link.frames[-1][:2] == ("ACK", {"id": "7:m1"})
    client.close()
    assert bridge.link.frames[-1][0] == "UNSUBSCRIBE"


def test_advisory_body_is_json_list():
    from reference_broker.cluster.advisories import encode_consumers
    from reference_broker.cluster.demand import RemoteConsumer

    body = encode_consumers([RemoteConsumer("x", ("B",), -5, None)])
    assert json.loads(body) == [{"id": "x", "path": ["B"], "priority": -5, "selector": None}]
    assert encode_consumers([]) == b""
