"""Duplicate suppression for messages arriving over a network bridge (engine/audit.py), part of
NOB-RELIABLE-1 (store and forward keeps persistent messages across a bridge, and the suites and
the bridge-partition experiment allow no duplicates there).

Seen in the network-bridge-partition chaos run before this existed: the bridge's link broke after
the peer stored a message and before its receipt came back, the bridge sent it again, and a
consumer got it twice ("redelivered after a confirmed ack: 1")."""

from __future__ import annotations

from reference_broker.engine.audit import NETWORK_ORIGIN_PROPERTY, NetworkAudit
from reference_broker.engine.consumer import AckMode

from .test_engine_support import Client, make_broker, pending_ids

Q = "queue://orders"


def from_network(origin: str, path: str) -> dict:
    return {"properties": {NETWORK_ORIGIN_PROPERTY: origin, "brokerPath": path}}


def test_a_resent_network_message_is_enqueued_once():
    broker = make_broker()
    c = Client(broker)
    c.send(Q, "m1", **from_network("A/ID:A-x-1-1", "A"))
    c.send(Q, "m2", **from_network("A/ID:A-x-1-1", "A"))  # the same message again, new local id
    assert pending_ids(broker, Q) == ["m1"]
    assert broker.network_audit.duplicates == 1


def test_a_replayed_message_coming_back_by_a_longer_path_is_not_a_duplicate():
    # replay when no consumers: A -> B, back B -> A, and A -> B again when B's consumer returns
    broker = make_broker()
    c = Client(broker)
    c.subscribe("c", Q, ack_mode=AckMode.AUTO)
    c.send(Q, "first", **from_network("A/ID:A-x-1-1", "A"))
    c.send(Q, "again", **from_network("A/ID:A-x-1-1", "A,B,A"))
    assert c.got("c") == ["first", "again"]


def test_the_same_origin_on_other_destinations_is_not_a_duplicate():
    broker = make_broker()
    c = Client(broker)
    c.send(Q, "m1", **from_network("A/ID:A-x-1-1", "A"))
    c.send("queue://other", "m2", **from_network("A/ID:A-x-1-1", "A"))
    assert pending_ids(broker, Q) == ["m1"] and pending_ids(broker, "queue://other") == ["m2"]


def test_local_messages_are_never_audited():
    broker = make_broker()
    c = Client(broker)
    c.send(Q, "m1")
    c.send(Q, "m1")  # a client may reuse ids; only network deliveries are audited
    assert pending_ids(broker, Q) == ["m1", "m1"] and broker.network_audit.duplicates == 0


def test_the_audit_window_forgets_the_oldest():
    audit = NetworkAudit(depth=2)
    assert not audit.is_duplicate(Q, "a") and not audit.is_duplicate(Q, "b") and not audit.is_duplicate(Q, "c")
    assert not audit.is_duplicate(Q, "a")  # pushed out by c
    assert audit.is_duplicate(Q, "c")


def test_each_broker_incarnation_names_its_messages_differently():
    # A broker restarted on its journal must not give a new message a recovered one's id.
    first, second = make_broker(), make_broker()
    assert first.connect().new_message_id() != second.connect().new_message_id()
