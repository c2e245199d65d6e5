"""Point-to-point basics of the engine: ordering, competing consumers, prefetch, acknowledgement
modes, redelivery and dead letters, transactions, exclusive consumers, consumer priority,
selectors and expiry.

Spec IDs here are ENG-* (proposed for the catalogue). Where a rule comes from a documented
broker default, the docstring names it; the reference documents are ActiveMQ Classic's (JMS
semantics, RedeliveryPolicy / DeadLetterStrategy defaults) as summarised in
reference_broker/config.py and ../shared/DESIGN.md.
"""

from __future__ import annotations

import pytest

from reference_broker.engine.consumer import AckMode
from reference_broker.engine.errors import InvalidSelectorError, TransactionError, UnknownMessage

from .test_engine_support import Client, dlq, make_broker, pending_ids

Q = "queue://Q"


def setup(config=None, clock=None):
    broker = make_broker(config, clock)
    return broker, Client(broker)


# --------------------------------------------------------------------------- ordering


def test_eng_fifo_1_fifo_within_priority_and_priority_order():
    """ENG-FIFO-1: pending messages are dispatched highest priority first and first-in
    first-out within one priority level."""
    broker, c = setup()
    for mid, prio in [("a4", 4), ("b4", 4), ("c9", 9), ("d0", 0), ("e9", 9), ("f4", 4), ("g0", 0)]:
        c.send(Q, mid, priority=prio)
    assert pending_ids(broker, Q) == ["c9", "e9", "a4", "b4", "f4", "d0", "g0"]
    c.subscribe("A", Q, prefetch=100)
    assert c.got("A") == ["c9", "e9", "a4", "b4", "f4", "d0", "g0"], "ENG-FIFO-1"


def test_eng_fifo_1_without_prioritized_messages_plain_fifo():
    """ENG-FIFO-1: with prioritized_messages off, arrival order alone decides."""
    broker, c = setup({"policy_entries": [{"queue": ">", "prioritized_messages": False}]})
    for mid, prio in [("a", 1), ("b", 9), ("c", 4)]:
        c.send(Q, mid, priority=prio)
    c.subscribe("A", Q)
    assert c.got("A") == ["a", "b", "c"], "ENG-FIFO-1"


def test_eng_fifo_2_out_of_range_priority_is_clamped_not_a_crash():
    """ENG-FIFO-2: a priority outside 0-9 (AMQP allows 0-255) is treated as the nearest JMS
    priority instead of breaking the queue."""
    broker, c = setup()
    c.send(Q, "low", priority=-3)
    c.send(Q, "mid", priority=5)
    c.send(Q, "high", priority=200)
    c.subscribe("A", Q)
    assert c.got("A") == ["high", "mid", "low"], "ENG-FIFO-2"


def test_eng_rr_1_competing_consumers_round_robin():
    """ENG-RR-1: consumers of equal priority with room take turns."""
    broker, c = setup()
    for cid in "ABC":
        c.subscribe(cid, Q, prefetch=100)
    for i in range(9):
        c.send(Q, f"m{i}")
    assert [c.got(x) for x in "ABC"] == [["m0", "m3", "m6"], ["m1", "m4", "m7"], ["m2", "m5", "m8"]], "ENG-RR-1"


def test_eng_prefetch_1_prefetch_window_is_honoured():
    """ENG-PREFETCH-1: a client-ack consumer never holds more unacknowledged messages than its
    prefetch; each acknowledgement lets exactly one more through; the rest goes to others."""
    broker, c = setup()
    c.subscribe("A", Q, prefetch=3)
    for i in range(10):
        c.send(Q, f"m{i}")
    assert c.got("A") == ["m0", "m1", "m2"] and len(pending_ids(broker, Q)) == 7, "ENG-PREFETCH-1"
    c.ack("A", "m1")
    assert c.got("A") == ["m0", "m1", "m2", "m3"] and len(c.in_flight("A")) == 3, "ENG-PREFETCH-1"
    c.subscribe("B", Q, prefetch=2)
    assert c.got("B") == ["m4", "m5"], "ENG-PREFETCH-1"


def test_eng_prefetch_2_unwritable_transport_pauses_dispatch():
    """ENG-PREFETCH-2: while the transport is not writable nothing is dispatched, even to an
    auto-ack consumer; dispatch resumes when it is."""
    broker, c = setup()
    c.subscribe("A", Q, ack_mode=AckMode.AUTO)
    c.conn.set_writable(False)
    c.send_many(Q, ["m0", "m1"])
    assert c.got() == [] and pending_ids(broker, Q) == ["m0", "m1"]
    c.conn.set_writable(True)
    assert c.got() == ["m0", "m1"], "ENG-PREFETCH-2"


# --------------------------------------------------------------------------- ack modes


def test_eng_ack_1_auto_ack_removes_on_dispatch():
    """ENG-ACK-1: auto acknowledgement removes the message as it is delivered; there is nothing
    to acknowledge afterwards and prefetch does not limit delivery."""
    broker, c = setup()
    c.subscribe("A", Q, ack_mode=AckMode.AUTO, prefetch=1)
    c.send_many(Q, ["m0", "m1", "m2"])
    assert c.got("A") == ["m0", "m1", "m2"] and c.in_flight("A") == []
    stats = broker.queues[Q].stats()
    assert (stats["dequeued"], stats["pending"], stats["in_flight"]) == (3, 0, 0), "ENG-ACK-1"
    with pytest.raises(UnknownMessage):
        c.ack("A", "m0")


def test_eng_ack_2_client_ack_is_cumulative():
    """ENG-ACK-2: in client mode acknowledging a message also acknowledges everything delivered
    to that consumer before it."""
    broker, c = setup()
    c.subscribe("A", Q, ack_mode=AckMode.CLIENT, prefetch=10)
    c.send_many(Q, ["m0", "m1", "m2", "m3"])
    c.ack("A", "m2")
    assert c.in_flight("A") == ["m3"], "ENG-ACK-2"
    assert broker.queues[Q].stats()["dequeued"] == 3


def test_eng_ack_3_client_individual_acks_one_message():
    """ENG-ACK-3: in client-individual mode an acknowledgement covers exactly its message."""
    broker, c = setup()
    c.subscribe("A", Q, prefetch=10)
    c.send_many(Q, ["m0", "m1", "m2"])
    c.ack("A", "m1")
    assert c.in_flight("A") == ["m0", "m2"], "ENG-ACK-3"
    with pytest.raises(UnknownMessage):
        c.ack("A", "m1")  # already acknowledged
    with pytest.raises(UnknownMessage):
        c.ack("A", "nope")


def test_eng_close_1_unacked_messages_redelivered_on_consumer_close():
    """ENG-CLOSE-1: messages a consumer had not acknowledged when it closed are redelivered,
    flagged redelivered, in their original order, before newer messages."""
    broker, c = setup()
    c.subscribe("A", Q, prefetch=10)
    c.send_many(Q, ["m0", "m1", "m2"])
    c.send(Q, "m3")
    c.ack("A", "m1")
    c.conn.unsubscribe("A")
    c.subscribe("B", Q, prefetch=10)
    assert c.got("B") == ["m0", "m2", "m3"], "ENG-CLOSE-1"
    flags = [(d.message_id, d.redelivered, d.delivery_count) for d in c.deliveries if d.consumer_id == "B"]
    assert flags == [("m0", True, 1), ("m2", True, 1), ("m3", True, 1)], "ENG-CLOSE-1"


def test_eng_close_2_closing_a_connection_does_not_bounce_messages_between_its_consumers():
    """ENG-CLOSE-2: when a connection with several consumers closes, what one of them held is
    not redispatched to a sibling that is closing too (which would count a second delivery)."""
    broker = make_broker()
    closing, other = Client(broker), Client(broker)
    closing.subscribe("A", Q, prefetch=1)
    closing.subscribe("B", Q, prefetch=5)
    closing.send_many(Q, ["m0", "m1"])
    assert closing.got("A") == ["m0"] and closing.got("B") == ["m1"]
    closing.conn.close()
    assert closing.got() == ["m0", "m1"], "ENG-CLOSE-2: nothing redispatched inside the closing connection"
    other.subscribe("C", Q, prefetch=5)
    assert [(d.message_id, d.delivery_count) for d in other.deliveries] == [("m0", 1), ("m1", 1)], "ENG-CLOSE-2"


# --------------------------------------------------------------------------- redelivery / DLQ


def test_eng_nack_1_redelivered_flag_and_delivery_count():
    """ENG-NACK-1: a negatively acknowledged message comes back (to the head of the queue)
    with the redelivered flag set and its delivery count raised by one."""
    broker, c = setup()
    c.subscribe("A", Q, prefetch=1)
    c.send_many(Q, ["m0", "m1"])
    assert (c.last().message_id, c.last().redelivered, c.last().delivery_count) == ("m0", False, 0)
    c.nack("A", "m0")
    assert (c.last().message_id, c.last().redelivered, c.last().delivery_count) == ("m0", True, 1), "ENG-NACK-1"
    c.nack("A", "m0")
    assert (c.last().message_id, c.last().delivery_count) == ("m0", 2), "ENG-NACK-1"
    c.ack("A", "m0")
    assert (c.last().message_id, c.last().redelivered) == ("m1", False), "ENG-NACK-1"


def test_eng_dlq_1_maximum_redeliveries_then_dlq_with_original_destination():
    """ENG-DLQ-1: after maximum_redeliveries redeliveries, the next failure moves a persistent
    message to ActiveMQ.DLQ (ActiveMQ's shared dead letter queue), carrying its original
    destination; the queue forgets it."""
    broker, c = setup({"policy_entries": [{"queue": ">", "maximum_redeliveries": 2}]})
    c.subscribe("A", Q, prefetch=1)
    c.send(Q, "poison", persistent=True, properties={"k": "v"})
    counts = []
    for _ in range(3):
        counts.append(c.last().delivery_count)
        c.nack("A", "poison")
    assert counts == [0, 1, 2], "ENG-DLQ-1: one delivery plus two redeliveries"
    assert c.in_flight("A") == [] and pending_ids(broker, Q) == []
    dead = dlq(broker)
    assert [m.message_id for m in dead] == ["poison"], "ENG-DLQ-1"
    assert dead[0].properties["originalDestination"] == "queue://Q"
    assert dead[0].properties["k"] == "v" and dead[0].persistent and dead[0].expiration == 0
    assert "maximum_redeliveries" in dead[0].properties["dlqDeliveryFailureCause"]
    assert broker.queues[Q].stats()["dead_lettered"] == 1


def test_eng_dlq_2_default_is_six_redeliveries():
    """ENG-DLQ-2: ActiveMQ's RedeliveryPolicy default, maximumRedeliveries=6: seven deliveries
    in all, then the DLQ."""
    broker, c = setup()
    c.subscribe("A", Q, prefetch=1)
    c.send(Q, "p", persistent=True)
    deliveries = 0
    while c.in_flight("A"):
        deliveries += 1
        c.nack("A", "p")
    assert deliveries == 7 and [m.message_id for m in dlq(broker)] == ["p"], "ENG-DLQ-2"


def test_eng_dlq_3_non_persistent_poison_is_discarded():
    """ENG-DLQ-3: ActiveMQ's dead letter strategy defaults to processNonPersistent=false, so a
    non-persistent message past its redeliveries is dropped (and counted), not dead-lettered;
    turning process_non_persistent on sends it to the DLQ."""
    broker, c = setup({"policy_entries": [{"queue": ">", "maximum_redeliveries": 0}]})
    c.subscribe("A", Q, prefetch=1)
    c.send(Q, "np", persistent=False)
    c.nack("A", "np")
    assert dlq(broker) == [] and broker.queues[Q].stats()["discarded"] == 1, "ENG-DLQ-3"

    broker, c = setup({"policy_entries": [{"queue": ">", "maximum_redeliveries": 0, "process_non_persistent": True}]})
    c.subscribe("A", Q, prefetch=1)
    c.send(Q, "np", persistent=False)
    c.nack("A", "np")
    assert [m.message_id for m in dlq(broker)] == ["np"], "ENG-DLQ-3"


def test_eng_dlq_4_unlimited_redeliveries_and_custom_dlq_name():
    """ENG-DLQ-4: maximum_redeliveries -1 redelivers forever; dead_letter_queue names the DLQ."""
    broker, c = setup({"policy_entries": [
        {"queue": "FOREVER", "maximum_redeliveries": -1},
        {"queue": "ORDERS.>", "maximum_redeliveries": 0, "dead_letter_queue": "DLQ.ORDERS"},
    ]})
    c.subscribe("A", "queue://FOREVER", prefetch=1)
    c.send("queue://FOREVER", "f", persistent=True)
    for _ in range(50):
        c.nack("A", "f")
    assert c.in_flight("A") == ["f"] and c.last().delivery_count == 50 and dlq(broker) == [], "ENG-DLQ-4"
    c.subscribe("B", "queue://ORDERS.EU", prefetch=1)
    c.send("queue://ORDERS.EU", "o", persistent=True)
    c.nack("B", "o")
    assert [m.message_id for m in dlq(broker, "DLQ.ORDERS")] == ["o"], "ENG-DLQ-4"


# --------------------------------------------------------------------------- transactions


def test_eng_tx_1_sends_invisible_until_commit_abort_discards():
    """ENG-TX-1: messages sent in a transaction reach the queue only at commit, in send order;
    an aborted transaction's sends are discarded."""
    broker, c = setup()
    consumer = Client(broker)
    consumer.subscribe("A", Q, prefetch=10)
    c.conn.begin("tx1")
    c.send(Q, "t1", transaction="tx1")
    c.send(Q, "t2", transaction="tx1")
    assert consumer.got() == [] and pending_ids(broker, Q) == [], "ENG-TX-1: invisible before commit"
    c.conn.commit("tx1")
    assert consumer.got() == ["t1", "t2"], "ENG-TX-1"
    c.conn.begin("tx2")
    c.send(Q, "t3", transaction="tx2")
    c.conn.abort("tx2")
    assert consumer.got() == ["t1", "t2"] and pending_ids(broker, Q) == [], "ENG-TX-1: abort discards"
    with pytest.raises(TransactionError):
        c.conn.commit("tx2")
    with pytest.raises(TransactionError):
        c.send(Q, "x", transaction="never-begun")


def test_eng_tx_2_acks_applied_at_commit_undone_by_abort():
    """ENG-TX-2: acknowledgements inside a transaction take effect at commit; abort undoes them,
    leaving the messages unacknowledged on the consumer (to be acked again, or redelivered
    when the consumer closes)."""
    broker, c = setup()
    c.subscribe("A", Q, prefetch=10)
    c.send_many(Q, ["m0", "m1", "m2"])
    q = broker.queues[Q]
    c.conn.begin("tx")
    c.ack("A", "m0", transaction="tx")
    c.ack("A", "m1", transaction="tx")
    assert q.stats()["dequeued"] == 0 and q.in_flight_count == 3, "ENG-TX-2: not yet applied"
    c.conn.commit("tx")
    assert q.stats()["dequeued"] == 2 and c.in_flight("A") == ["m2"], "ENG-TX-2: applied at commit"

    c.conn.begin("tx")
    c.ack("A", "m2", transaction="tx")
    c.conn.abort("tx")
    assert q.stats()["dequeued"] == 2 and c.in_flight("A") == ["m2"], "ENG-TX-2: abort undoes the ack"
    c.conn.unsubscribe("A")
    c.subscribe("B", Q)
    assert (c.last().message_id, c.last().redelivered) == ("m2", True), "ENG-TX-2"


def test_eng_tx_3_nack_in_transaction_and_close_aborts():
    """ENG-TX-3: a nack inside a transaction is applied at commit too; closing the connection
    aborts open transactions (their acks are undone and the messages redelivered)."""
    broker, c = setup()
    c.subscribe("A", Q, prefetch=10)
    c.send_many(Q, ["m0", "m1"])
    c.conn.begin("tx")
    c.nack("A", "m0", transaction="tx")
    assert c.got() == ["m0", "m1"], "ENG-TX-3: not redelivered before commit"
    c.conn.commit("tx")
    assert (c.last().message_id, c.last().delivery_count) == ("m0", 1), "ENG-TX-3"
    c.conn.begin("tx")
    c.ack("A", "m1", transaction="tx")
    c.conn.close()
    other = Client(broker)
    other.subscribe("B", Q)
    assert sorted(other.got()) == ["m0", "m1"], "ENG-TX-3: close aborts the open transaction"


# --------------------------------------------------------------------------- exclusive / priority


def test_eng_excl_1_exclusive_consumer_gets_everything_backup_takes_over():
    """ENG-EXCL-1: the (first) exclusive consumer receives every message; other consumers,
    exclusive or not, get nothing while it is there; when it closes the next exclusive
    consumer takes over, with the unacknowledged messages."""
    broker, c = setup()
    c.subscribe("E1", Q, exclusive=True, prefetch=100)
    c.subscribe("E2", Q, exclusive=True, prefetch=100)
    c.subscribe("N", Q, prefetch=100)
    for i in range(6):
        c.send(Q, f"m{i}")
    assert c.got("E1") == [f"m{i}" for i in range(6)], "ENG-EXCL-1"
    assert c.got("E2") == [] and c.got("N") == [], "ENG-EXCL-1"
    c.ack("E1", "m0")
    c.conn.unsubscribe("E1")
    c.send(Q, "m6")
    assert c.got("E2") == ["m1", "m2", "m3", "m4", "m5", "m6"] and c.got("N") == [], "ENG-EXCL-1 failover"


def test_eng_excl_2_full_exclusive_consumer_blocks_rather_than_sharing():
    """ENG-EXCL-2: when the exclusive consumer's prefetch is full, messages wait for it."""
    broker, c = setup()
    c.subscribe("E", Q, exclusive=True, prefetch=1)
    c.subscribe("N", Q, prefetch=100)
    c.send_many(Q, ["m0", "m1"])
    assert c.got("E") == ["m0"] and c.got("N") == [] and pending_ids(broker, Q) == ["m1"], "ENG-EXCL-2"


def test_eng_cprio_1_higher_priority_consumer_first_while_it_has_room():
    """ENG-CPRIO-1: a higher-priority consumer receives messages while it has prefetch room;
    lower-priority consumers only get the overflow."""
    broker, c = setup()
    c.subscribe("low", Q, priority=1, prefetch=100)
    c.subscribe("high", Q, priority=9, prefetch=3)
    for i in range(5):
        c.send(Q, f"m{i}")
    assert c.got("high") == ["m0", "m1", "m2"] and c.got("low") == ["m3", "m4"], "ENG-CPRIO-1"
    c.ack("high", "m0")
    c.send(Q, "m5")
    assert c.got("high")[-1] == "m5", "ENG-CPRIO-1"


# --------------------------------------------------------------------------- selectors


def test_eng_sel_1_queue_selectors_filter_without_blocking_others():
    """ENG-SEL-1: a queue consumer with a selector only receives matching messages; a message
    no consumer selects stays on the queue without holding back the ones behind it."""
    broker, c = setup()
    c.subscribe("red", Q, selector="color = 'red'", prefetch=10)
    c.subscribe("blue", Q, selector="color = 'blue' AND size > 2", prefetch=10)
    c.send(Q, "r1", properties={"color": "red"})
    c.send(Q, "g1", properties={"color": "green"})
    c.send(Q, "b1", properties={"color": "blue", "size": 3})
    c.send(Q, "b2", properties={"color": "blue", "size": 1})
    c.send(Q, "r2", properties={"color": "red"})
    assert c.got("red") == ["r1", "r2"] and c.got("blue") == ["b1"], "ENG-SEL-1"
    assert pending_ids(broker, Q) == ["g1", "b2"], "ENG-SEL-1"
    c.subscribe("all", Q, prefetch=10)
    assert c.got("all") == ["g1", "b2"], "ENG-SEL-1"


def test_eng_sel_1_selector_on_headers_and_delivery_count():
    """ENG-SEL-1: selectors see JMS headers (JMSPriority) and JMSRedelivered."""
    broker, c = setup()
    c.subscribe("hi", Q, selector="JMSPriority > 6", prefetch=10)
    c.subscribe("redo", Q, selector="JMSRedelivered = TRUE", prefetch=10)
    c.send(Q, "p9", priority=9)
    c.send(Q, "p1", priority=1)
    assert c.got("hi") == ["p9"] and c.got("redo") == []
    c.subscribe("any", Q, prefetch=10)
    assert c.got("any") == ["p1"]
    c.nack("any", "p1")
    assert c.got("redo") == ["p1"], "ENG-SEL-1: redelivered copy matches JMSRedelivered"


def test_eng_sel_2_invalid_selector_is_refused():
    """ENG-SEL-2: an invalid selector is a clear error and creates no subscription."""
    broker, c = setup()
    with pytest.raises(InvalidSelectorError):
        c.subscribe("A", Q, selector="color = ")
    c.subscribe("A", Q)  # the id was not taken by the failed attempt


# --------------------------------------------------------------------------- expiry


def test_eng_exp_1_expired_persistent_messages_go_to_dlq_non_persistent_dropped():
    """ENG-EXP-1: a message past its expiration is never delivered; the periodic sweep moves a
    persistent one to the DLQ (ActiveMQ processExpired=true) and drops a non-persistent one
    (processNonPersistent=false)."""
    t = [1000.0]
    broker, c = setup(clock=lambda: t[0])
    c.send(Q, "p", persistent=True, expiration=1_005_000)
    c.send(Q, "np", persistent=False, expiration=1_005_000)
    c.send(Q, "keep", persistent=True)
    t[0] = 1006.0
    assert broker.tick() == 2, "ENG-EXP-1"
    assert pending_ids(broker, Q) == ["keep"]
    dead = dlq(broker)
    assert [m.message_id for m in dead] == ["p"] and dead[0].properties["dlqDeliveryFailureCause"] == "expired"
    assert dead[0].properties["originalDestination"] == "queue://Q"
    stats = broker.queues[Q].stats()
    assert (stats["expired"], stats["dead_lettered"], stats["discarded"]) == (2, 1, 1), "ENG-EXP-1"


def test_eng_exp_2_expired_messages_skipped_at_dispatch():
    """ENG-EXP-2: a consumer arriving after expiry never sees the expired message, and neither
    does a consumer already waiting when an already-expired message is sent."""
    t = [1000.0]
    broker, c = setup(clock=lambda: t[0])
    c.send(Q, "old", persistent=True, expiration=1_001_000)
    c.send(Q, "fresh", persistent=True, expiration=2_000_000)
    t[0] = 1002.0
    c.subscribe("A", Q, prefetch=10)
    assert c.got("A") == ["fresh"], "ENG-EXP-2"
    c.send(Q, "dead-on-arrival", persistent=True, expiration=1_000_000)
    assert c.got("A") == ["fresh"], "ENG-EXP-2: not delivered on the fast path"
    assert [m.message_id for m in dlq(broker)] == ["old", "dead-on-arrival"]


def test_eng_exp_3_expiry_disabled_drops_instead():
    """ENG-EXP-3: with process_expired off, expired persistent messages are dropped, not
    dead-lettered."""
    t = [1000.0]
    broker, c = setup({"policy_entries": [{"queue": ">", "process_expired": False}]}, clock=lambda: t[0])
    c.send(Q, "p", persistent=True, expiration=1_000_500)
    t[0] = 1001.0
    broker.tick()
    assert dlq(broker) == [] and broker.queues[Q].stats()["discarded"] == 1, "ENG-EXP-3"


def test_eng_sel_4_group_owner_never_gets_a_message_its_selector_refuses():
    """ENG-SEL-4 (with GRP-PIN-1, AMG §Message Grouping): pinning does not override the owner's
    selector. A grouped message the owner does not select is not delivered to it, nor to
    another consumer (the group stays pinned); it waits without holding back other messages."""
    broker, c = setup()
    c.subscribe("red", Q, selector="color = 'red'", prefetch=10)
    c.subscribe("any", Q, prefetch=10)
    c.send(Q, "r1", group_id="G", properties={"color": "red"})
    c.send(Q, "b1", group_id="G", properties={"color": "blue"})
    c.send(Q, "u1", properties={"color": "blue"})
    c.send(Q, "r2", group_id="G", properties={"color": "red"})
    assert c.got("red") == ["r1", "r2"], "ENG-SEL-4: owner only gets what it selects"
    assert c.got("any") == ["u1"], "ENG-SEL-4: the refused grouped message is not handed elsewhere"
    assert pending_ids(broker, Q) == ["b1"]
    c.conn.unsubscribe("red")   # group released: now 'any' may take it
    assert c.got("any") == ["u1", "r1", "b1", "r2"], "ENG-SEL-4: released group, original order"


def test_eng_tx_4_cumulative_ack_after_abort_covers_restored_messages():
    """ENG-TX-4: acks undone by ABORT are unacknowledged again *in delivery order*, so a later
    cumulative (client mode) ack of a newer message covers them too."""
    from reference_broker.config import build_config
    from reference_broker.engine.broker import Broker
    from reference_broker.engine.consumer import AckMode
    from reference_broker.engine.message import Message
    from reference_broker.engine.names import parse_destination

    broker = Broker(build_config({}))
    conn = broker.connect()
    dest = parse_destination("queue://Q")
    got = []
    consumer = conn.subscribe("c", dest, deliver=lambda c, r: got.append(r.message.message_id),
                              ack_mode=AckMode.CLIENT, prefetch=10)
    for i in range(4):
        conn.send(dest, Message(message_id=f"m{i}", destination=dest.canonical))
    assert got == ["m0", "m1", "m2", "m3"]
    conn.begin("tx")
    conn.ack(consumer, "m1", "tx")  # cumulative: m0 and m1 held by the transaction
    conn.abort("tx")
    assert list(consumer.in_flight) == ["m0", "m1", "m2", "m3"], "ENG-TX-4: delivery order restored"
    conn.ack(consumer, "m2")
    assert list(consumer.in_flight) == ["m3"], "ENG-TX-4"
    assert broker.queues["queue://Q"].dequeued == 3
