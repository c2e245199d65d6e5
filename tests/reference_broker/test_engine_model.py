"""Model-based test of one queue (hypothesis.stateful): a shadow model tracks where every sent
message must be, and invariants compare it with the engine after every step.

Rules: send (optionally in one of three groups, random priority, persistent or not), add a
client-individual consumer (prefetch 1-5), close a consumer (unsubscribe or connection close),
ack or nack a random in-flight message, reset the groups, toggle a connection's writability;
maximum_redeliveries is 2; the queue is created with group-rebalance on or off.

Invariants (spec IDs in the assertion messages):
- MODEL-PLACE-1: every sent message is in exactly one place - pending, in flight at exactly one
  consumer, acknowledged, in the DLQ, or discarded (non-persistent past its redeliveries);
  nothing lost, nothing duplicated, no delivery of a message that was not pending.
- ENG-PREFETCH-1: each consumer's in-flight count <= its prefetch.
- GRP-PIN-1 / GRP-REBAL-1: a group's in-flight messages dispatched since the last rebalance or
  reset are all at one consumer (its owner); older ones may still sit at a previous owner
  (the documented in-flight caveat).
- ENG-FIFO-1: each consumer's first deliveries of one priority arrive in send order.
- ENG-NACK-1 / ENG-DLQ-1: delivery_count and the redelivered flag match the model.
- GRP-REASSIGN-1 / GRP-RESET-1: a group's owner is a live consumer that was given a message of
  the group since the last rebalance or reset.
- ENG-FIFO-1: pending messages are in priority order and, within a priority, in send order
  (a redelivered message goes back to its original place).
- MODEL-LIVE-1: dispatch never stalls: if messages are pending while a consumer has room, the
  head is a grouped message whose (live) owner is full (GRP-HOL-1).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reference_broker.engine.consumer import AckMode
from reference_broker.engine.message import Message
from reference_broker.engine.names import parse_destination

from .test_engine_support import make_broker

MAX_REDELIVERIES = 2
GROUPS = ["G0", "G1", "G2"]
MAX_CONSUMERS = 4
PENDING, ACKED, DLQ, DISCARDED = "pending", "acked", "dlq", "discarded"


class QueueMachine(RuleBasedStateMachine):
    @initialize(rebalance=st.booleans())
    def start(self, rebalance: bool) -> None:
        self.broker = make_broker({"policy_entries": [{"queue": ">", "maximum_redeliveries": MAX_REDELIVERIES}]})
        self.rebalance = rebalance
        self.dest = parse_destination("queue://Q?group-rebalance=true" if rebalance else "queue://Q")
        self.queue = self.broker.queue(self.dest)
        self.producer = self.broker.connect()
        self.place: dict[str, object] = {}          # mid -> PENDING | ("flight", cid) | ACKED | DLQ | DISCARDED
        self.count: dict[str, int] = {}             # mid -> expected delivery_count
        self.info: dict[str, tuple] = {}            # mid -> (group, priority, persistent, seq)
        self.consumers: dict[str, tuple] = {}       # cid -> (connection, consumer)
        self.epoch = 0                              # bumped by every rebalance / reset
        self.epoch_of: dict[str, int] = {}          # mid -> epoch of its latest delivery
        self.last_first: dict[str, dict[int, int]] = defaultdict(dict)  # cid -> priority -> seq
        self.received: dict[tuple, set[str]] = defaultdict(set)  # (epoch, group) -> cids given it
        self.seq = itertools.count(1)
        self.cids = itertools.count(1)

    # ------------------------------------------------------------------ delivery callback

    def deliver(self, consumer, ref) -> None:
        mid = ref.message.message_id
        cid = consumer.consumer_id
        assert not consumer.closed, f"MODEL-PLACE-1: {mid} delivered to closed consumer {cid}"
        assert self.place[mid] == PENDING, f"MODEL-PLACE-1: {mid} delivered to {cid} while {self.place[mid]}"
        assert ref.delivery_count == self.count[mid], (
            f"ENG-NACK-1: {mid} delivery_count {ref.delivery_count}, model {self.count[mid]}")
        assert ref.redelivered == (self.count[mid] > 0), "ENG-NACK-1: redelivered flag"
        assert len(consumer.in_flight) <= consumer.prefetch, "ENG-PREFETCH-1"
        self.place[mid] = ("flight", cid)
        self.epoch_of[mid] = self.epoch
        if self.info[mid][0] is not None:
            self.received[(self.epoch, self.info[mid][0])].add(cid)
        if ref.delivery_count == 0:
            _, priority, _, seq = self.info[mid]
            previous = self.last_first[cid].get(priority)
            assert previous is None or previous < seq, (
                f"ENG-FIFO-1: {cid} got seq {seq} after seq {previous} at priority {priority}")
            self.last_first[cid][priority] = seq

    # ------------------------------------------------------------------ rules

    @rule(group=st.sampled_from([None, *GROUPS]), priority=st.sampled_from([0, 4, 4, 9]), persistent=st.booleans())
    def send(self, group, priority, persistent) -> None:
        seq = next(self.seq)
        mid = f"m{seq}"
        self.place[mid] = PENDING
        self.count[mid] = 0
        self.info[mid] = (group, priority, persistent, seq)
        message = Message(message_id=mid, destination="queue://Q", group_id=group, priority=priority,
                          persistent=persistent)
        assert self.producer.send(self.dest, message) is True

    @precondition(lambda self: len(self.consumers) < MAX_CONSUMERS)
    @rule(prefetch=st.integers(1, 5))
    def add_consumer(self, prefetch) -> None:
        cid = f"c{next(self.cids)}"
        conn = self.broker.connect()
        if self.rebalance:
            self.epoch += 1  # group-rebalance resets groups before the new consumer's dispatch
        consumer = conn.subscribe(cid, self.dest, deliver=self.deliver, ack_mode=AckMode.CLIENT_INDIVIDUAL,
                                  prefetch=prefetch)
        self.consumers[cid] = (conn, consumer)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), how=st.sampled_from(["unsubscribe", "close"]))
    def close_consumer(self, data, how) -> None:
        cid = data.draw(st.sampled_from(sorted(self.consumers)), label="consumer")
        conn, _ = self.consumers.pop(cid)
        for mid, where in self.place.items():
            if where == ("flight", cid):
                self.place[mid] = PENDING
                self.count[mid] += 1  # returned for redelivery
        if how == "close":
            conn.close()
        else:
            conn.unsubscribe(cid)

    def _in_flight(self) -> list[str]:
        return sorted((m for m, w in self.place.items() if isinstance(w, tuple)), key=lambda m: int(m[1:]))

    @precondition(lambda self: any(isinstance(w, tuple) for w in self.place.values()))
    @rule(data=st.data())
    def ack(self, data) -> None:
        mid = data.draw(st.sampled_from(self._in_flight()), label="ack")
        conn, consumer = self.consumers[self.place[mid][1]]
        self.place[mid] = ACKED
        conn.ack(consumer, mid)

    @precondition(lambda self: any(isinstance(w, tuple) for w in self.place.values()))
    @rule(data=st.data())
    def nack(self, data) -> None:
        mid = data.draw(st.sampled_from(self._in_flight()), label="nack")
        conn, consumer = self.consumers[self.place[mid][1]]
        self.count[mid] += 1
        if self.count[mid] > MAX_REDELIVERIES:
            self.place[mid] = DLQ if self.info[mid][2] else DISCARDED
        else:
            self.place[mid] = PENDING
        conn.nack(consumer, mid)

    @rule()
    def reset_groups(self) -> None:
        self.epoch += 1
        self.queue.reset_groups()

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), writable=st.booleans())
    def set_writable(self, data, writable) -> None:
        cid = data.draw(st.sampled_from(sorted(self.consumers)), label="consumer")
        self.consumers[cid][0].set_writable(writable)

    # ------------------------------------------------------------------ invariants

    def _expected(self, where) -> set[str]:
        return {m for m, w in self.place.items() if w == where}

    @invariant()
    def every_message_in_exactly_one_place(self) -> None:
        pending = [r.message.message_id for r in self.queue.pending_refs()]
        assert len(pending) == len(set(pending)), f"MODEL-PLACE-1: duplicated in pending {pending}"
        assert set(pending) == self._expected(PENDING), (
            f"MODEL-PLACE-1 pending: engine {sorted(pending)} model {sorted(self._expected(PENDING))}")
        assert self.queue.pending_count == len(pending)
        seen = set(pending)
        for cid, (_, consumer) in self.consumers.items():
            held = set(consumer.in_flight)
            assert held == self._expected(("flight", cid)), f"MODEL-PLACE-1 in flight at {cid}"
            assert not (held & seen), f"MODEL-PLACE-1: {held & seen} in two places"
            assert not consumer.tx_held
            seen |= held
        dlq_queue = self.broker.queues.get("queue://ActiveMQ.DLQ")
        dead = [r.message.message_id for r in dlq_queue.pending_refs()] if dlq_queue else []
        assert sorted(dead) == sorted(self._expected(DLQ)), "MODEL-PLACE-1 DLQ"
        stats = self.queue.stats()
        assert stats["discarded"] == len(self._expected(DISCARDED)), "MODEL-PLACE-1 discarded"
        assert stats["dequeued"] == len(self._expected(ACKED)) + len(dead) + stats["discarded"], "MODEL-PLACE-1"
        assert stats["enqueued"] == len(self.place), "MODEL-PLACE-1 enqueued"

    @invariant()
    def prefetch_respected(self) -> None:
        for cid, (_, consumer) in self.consumers.items():
            assert len(consumer.in_flight) <= consumer.prefetch, f"ENG-PREFETCH-1 {cid}"

    @invariant()
    def groups_pinned_within_an_epoch(self) -> None:
        holders: dict[str, set[str]] = defaultdict(set)
        for mid, where in self.place.items():
            group = self.info[mid][0]
            if group is not None and isinstance(where, tuple) and self.epoch_of[mid] == self.epoch:
                holders[group].add(where[1])
        for group, cids in holders.items():
            assert len(cids) == 1, f"GRP-PIN-1: group {group} in flight at {cids} within one epoch"
            owner = self.queue.groups.owner(group)
            assert owner is not None and owner.consumer_id in cids, f"GRP-PIN-1: owner of {group}"
        live = {cid for cid in self.consumers}
        for group in GROUPS:
            owner = self.queue.groups.owner(group)
            if owner is not None:
                assert owner.consumer_id in live, f"GRP-REASSIGN-1: {group} still owned by closed {owner}"
                assert owner.consumer_id in self.received[(self.epoch, group)], (
                    f"GRP-REBAL-1/GRP-RESET-1: {group} owned by {owner.consumer_id}, not assigned since the reset")
        if not self.rebalance and self.epoch == 0:
            for group in GROUPS:
                at = {w[1] for m, w in self.place.items() if isinstance(w, tuple) and self.info[m][0] == group}
                assert len(at) <= 1, f"GRP-PIN-1: {group} at {at} without any rebalance"

    @invariant()
    def pending_in_send_order_within_priority(self) -> None:
        by_priority: dict[int, list[int]] = defaultdict(list)
        for ref in self.queue.pending_refs():
            by_priority[ref.message.priority].append(self.info[ref.message.message_id][3])
        for priority, seqs in by_priority.items():
            assert seqs == sorted(seqs), (
                f"ENG-FIFO-1/ENG-NACK-1: pending at priority {priority} out of send order "
                f"(redeliveries go back to their place): {seqs}")
        levels = [ref.message.priority for ref in self.queue.pending_refs()]
        assert levels == sorted(levels, reverse=True), "ENG-FIFO-1: priority order"

    @invariant()
    def dispatch_does_not_stall(self) -> None:
        refs = self.queue.pending_refs()
        if not refs:
            return
        with_room = [c for _, c in self.consumers.values() if c.has_credit()]
        if not with_room:
            return
        head = refs[0].message
        assert head.group_id is not None, f"MODEL-LIVE-1: ungrouped head {head.message_id} stuck"
        owner = self.queue.groups.owner(head.group_id)
        assert owner is not None and not owner.has_credit() and not owner.closed, (
            f"MODEL-LIVE-1: head {head.message_id} of {head.group_id} stuck (owner {owner})")


QueueMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestQueueModel = QueueMachine.TestCase
