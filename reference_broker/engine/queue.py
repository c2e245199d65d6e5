"""A point-to-point queue: competing consumers, FIFO within a priority level, message groups,
exclusive consumers, consumer priority, redelivery, expiry and dead letters.

The same class backs durable topic subscriptions (a durable subscription is a queue fed by a
topic that keeps messages while its subscriber is away).

Dispatch order (why it looks the way it does):
- Messages are taken in priority order, FIFO within a priority level.
- A grouped message whose owning consumer has no room blocks everything behind it: Artemis
  "Message Grouping" warns that grouped messages at the head of a queue hold back ungrouped
  ones behind them, and the reference broker reproduces that head-of-line behaviour.
- A message that no current consumer's selector accepts is skipped (it stays in place), looking
  at most `max_page_size` messages ahead, like ActiveMQ's paged dispatch.
- Among consumers that may take a message: the exclusive consumer if there is one; otherwise the
  highest consumer priority with room, round robin within a priority.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Protocol

from ..config import PolicyEntry
from ..store.base import MessageStore
from .consumer import AckMode, Consumer
from .groups import GroupTable
from .message import Message, MessageRef
from .names import DestinationName
from .policy import GroupSettings
from .usage import MemoryUsage

PRIORITY_LEVELS = 10


class QueueHost(Protocol):
    """What a queue asks of the broker that owns it (`broker.Broker` implements it). Declared
    here, by the queue, so the queue never imports the broker module that creates queues."""

    @property
    def store(self) -> MessageStore: ...

    def now_ms(self) -> int: ...

    def dead_letter(self, source: "Queue", ref: MessageRef, cause: str) -> None:
        """Take a message the queue gives up on (expired, or redelivered too often)."""
        ...


class Queue:
    def __init__(
        self,
        broker: QueueHost,
        name: DestinationName,
        store_key: str,
        policy: PolicyEntry,
        groups: GroupSettings,
        usage: MemoryUsage,
        stored: bool = True,
    ) -> None:
        self.broker = broker
        # False for queues that must not outlive the broker process (non-durable shared
        # subscriptions): their messages are never written to the store.
        self.stored = stored
        self.name = name
        self.store_key = store_key
        self.policy = policy
        self.group_settings = groups
        self.usage = usage
        self.groups: GroupTable[Consumer] = GroupTable(groups.buckets)
        self._levels: list[deque[MessageRef]] = [
            deque() for _ in range(PRIORITY_LEVELS if policy.prioritized_messages else 1)
        ]
        self._pending_count = 0
        self.consumers: list[Consumer] = []  # highest priority first, round-robin order within
        self._next_sequence = 0
        self._dispatching = False
        self._redispatch = False
        # Counters operators watch (ActiveMQ's QueueViewMBean names).
        self.enqueued = 0
        self.dequeued = 0
        self.dispatched = 0
        self.expired = 0
        self.dead_lettered = 0
        self.discarded = 0  # poisoned or expired messages dropped rather than dead-lettered

    # ---------------------------------------------------------------- messages in

    @property
    def pending_count(self) -> int:
        return self._pending_count

    @property
    def in_flight_count(self) -> int:
        return sum(len(c.in_flight) + len(c.tx_held) for c in self.consumers)

    def enqueue(self, message: Message, delivery_count: int = 0, persist: bool = True,
                retained: bool = False) -> MessageRef:
        self._next_sequence += 1
        ref = MessageRef(message, self._next_sequence, delivery_count, retained)
        self.enqueued += 1
        if persist and message.persistent and self.stored:
            self.broker.store.add(self.store_key, message)
        # Fast path: nothing waiting and a plain consumer free: hand it over without queueing.
        if not self._pending_count and self.consumers and not self._dispatching:
            consumer = self._pick_simple(ref)
            if consumer is not None:
                self._hand_over(consumer, ref, new_group=False)
                return ref
        self._push(ref)
        self.dispatch()
        return ref

    def _pick_simple(self, ref: MessageRef) -> Consumer | None:
        """A consumer for `ref` when no groups or exclusivity are involved, else None."""
        if ref.message.group_id is not None and self.group_settings.enabled:
            return None
        if ref.message.expiration and ref.message.is_expired(self.broker.now_ms()):
            return None  # let dispatch expire (dead-letter or drop) it instead of delivering it
        if len(self.consumers) != 1:
            return None
        first = self.consumers[0]
        if first.exclusive or not first.has_credit() or not first.accepts(ref):
            return None
        return first

    def _level(self, ref: MessageRef) -> int:
        if len(self._levels) == 1:
            return 0
        priority = ref.message.priority
        if 0 <= priority < PRIORITY_LEVELS:
            return priority
        # JMS priorities are 0-9; protocols with a wider range (AMQP's ubyte) clamp, as
        # ActiveMQ does, instead of indexing past the levels.
        return 0 if priority < 0 else PRIORITY_LEVELS - 1

    def _push(self, ref: MessageRef) -> None:
        level = self._level(ref)
        self._levels[level].append(ref)
        self._pending_count += 1
        self.usage.increase(ref.message.size)

    def _return(self, refs: Iterable[MessageRef]) -> None:
        """Put refs back in their original place (by sequence) for redelivery."""
        by_level: dict[int, list[MessageRef]] = {}
        for ref in refs:
            ref.consumer = None
            level = self._level(ref)
            by_level.setdefault(level, []).append(ref)
            self._pending_count += 1
            self.usage.increase(ref.message.size)
        for level, returned in by_level.items():
            returned.sort(key=lambda r: r.sequence)
            dq = self._levels[level]
            if not dq or returned[-1].sequence < dq[0].sequence:
                dq.extendleft(reversed(returned))
            else:
                merged = sorted([*dq, *returned], key=lambda r: r.sequence)
                dq.clear()
                dq.extend(merged)

    # ---------------------------------------------------------------- consumers

    def add_consumer(self, consumer: Consumer) -> None:
        consumer.source = self
        # Stable insert: after every consumer of the same or higher priority.
        index = len(self.consumers)
        for i, existing in enumerate(self.consumers):
            if existing.priority < consumer.priority:
                index = i
                break
        self.consumers.insert(index, consumer)
        if self.group_settings.rebalance and len(self.groups):
            # Artemis group-rebalance: adding a consumer resets every group. Messages already
            # in flight to the previous owner stay there (the documented caveat), so for a
            # moment two consumers can hold messages of the same group.
            self.groups.reset()
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a closing consumer: release its groups, redeliver what it had not acked."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.groups.release_consumer(consumer)
        unacked = list(consumer.in_flight.values()) + list(consumer.tx_held.values())
        consumer.in_flight.clear()
        consumer.tx_held.clear()
        for ref in unacked:
            ref.delivery_count += 1
            if ref.message.persistent:
                self.broker.store.update_redelivery(self.store_key, ref.message.message_id, ref.delivery_count)
        if unacked:
            self._return(unacked)
        self.dispatch()

    def reset_groups(self) -> int:
        """The management operation `resetAllGroups`."""
        count = self.groups.reset()
        self.dispatch()
        return count

    # ---------------------------------------------------------------- dispatch

    def dispatch(self) -> None:
        if self._dispatching:
            # A delivery callback re-entered (e.g. an auto-ack freed credit): loop again after.
            self._redispatch = True
            return
        if not self._pending_count:
            return
        for consumer in self.consumers:  # a loop, not any(genexpr): this runs per message
            if consumer.has_credit():
                break
        else:
            return  # nobody can take anything (or no consumers): don't walk the queue
        self._dispatching = True
        try:
            while True:
                self._redispatch = False
                self._dispatch_once()
                if not self._redispatch or not self._pending_count:
                    break
        finally:
            self._dispatching = False

    def _dispatch_once(self) -> None:
        now = self.broker.now_ms()
        max_skip = self.policy.max_page_size
        for dq in reversed(self._levels):  # highest priority first
            if not dq:
                continue
            if len(self.consumers) == 1 and self._drain_to_single(dq, now):
                continue
            skipped: list[MessageRef] = []
            stop = False
            while dq:
                ref = dq[0]
                if ref.message.expiration and ref.message.is_expired(now):
                    dq.popleft()
                    self._unpend(ref)
                    self._expire(ref)
                    continue
                consumer, blocked, new_group = self._choose(ref)
                if consumer is None:
                    if blocked:
                        stop = True
                        break
                    skipped.append(dq.popleft())
                    if len(skipped) >= max_skip:
                        stop = True
                        break
                    continue
                dq.popleft()
                self._unpend(ref)
                self._hand_over(consumer, ref, new_group)
            if skipped:
                dq.extendleft(reversed(skipped))
            if stop:
                return

    def _drain_to_single(self, dq: deque, now: int) -> bool:
        """Fast path for the common shape (one plain consumer, no groups): hand over messages
        in order while it has room. Returns True when `dq` was emptied, False to let the
        general loop look at what is left (a grouped, expiring or unwanted message, or no room).
        """
        consumer = self.consumers[0]
        if consumer.exclusive or consumer.selector is not None or consumer.no_local:
            return False
        grouping = self.group_settings.enabled
        hand_over = self._hand_over
        usage = self.usage
        while dq and consumer.has_credit():
            message = dq[0].message
            if message.expiration or (grouping and message.group_id is not None):
                return False
            ref = dq.popleft()
            self._pending_count -= 1
            usage.decrease(message.size)
            hand_over(consumer, ref, False)
        return not dq

    def _unpend(self, ref: MessageRef) -> None:
        self._pending_count -= 1
        self.usage.decrease(ref.message.size)

    def _choose(self, ref: MessageRef) -> tuple[Consumer | None, bool, bool]:
        """(consumer, blocked, new_group): who takes `ref`; if nobody, whether to stop looking;
        and whether this dispatch makes the consumer the group's new owner."""
        message = ref.message
        group_key = None
        if message.group_id is not None and self.group_settings.enabled:
            group_key = self.groups.key(message.group_id)
            owner = self.groups.owner(group_key)
            if owner is not None:
                if not owner.accepts(ref):
                    # The owner's selector refuses it and nobody else may take a pinned
                    # message: it waits (as in Artemis and ActiveMQ), without blocking others.
                    return None, False, False
                if owner.has_credit():
                    return owner, False, False
                return None, True, False  # head-of-line: the owner must take it first
        candidates = self.consumers
        exclusive = next((c for c in candidates if c.exclusive), None)
        if exclusive is not None:
            candidates = [exclusive]
        any_credit = False
        wanted = False
        chosen = None
        for consumer in candidates:
            credit = consumer.has_credit()
            any_credit = any_credit or credit
            if not consumer.accepts(ref):
                continue
            wanted = True
            if credit:
                chosen = consumer
                break
        if chosen is None:
            # Nobody with room wants it. Stop when nobody has room at all; otherwise look past
            # it for messages the consumers with room do want.
            return None, (not any_credit) or (wanted and exclusive is not None), False
        if exclusive is None:
            # Round robin only among competing consumers: rotating an exclusive consumer would
            # hand the exclusivity to the next exclusive consumer of the same priority.
            self._rotate(chosen)
        if group_key is not None:
            self.groups.assign(group_key, chosen)
            return chosen, False, True
        return chosen, False, False

    def _rotate(self, consumer: Consumer) -> None:
        """Round robin within a priority: move the chosen consumer behind its equals."""
        consumers = self.consumers
        if len(consumers) < 2:
            return
        index = consumers.index(consumer)
        end = index
        while end + 1 < len(consumers) and consumers[end + 1].priority == consumer.priority:
            end += 1
        if end != index:
            consumers.pop(index)
            consumers.insert(end, consumer)

    def _hand_over(self, consumer: Consumer, ref: MessageRef, new_group: bool) -> None:
        message = ref.message
        ref.first_for_consumer = new_group and self.group_settings.first_key is not None
        if message.group_id is not None and message.group_seq < 0 and self.group_settings.enabled:
            # A negative JMSXGroupSeq closes the group: the next message picks a new owner.
            self.groups.close(self.groups.key(message.group_id))
        consumer.dispatched += 1
        self.dispatched += 1
        if consumer.ack_mode is AckMode.AUTO:
            consumer.deliver(consumer, ref)
            self._remove_acked(ref)
            consumer.acknowledged += 1
        else:
            ref.consumer = consumer
            consumer.in_flight[message.message_id] = ref
            consumer.connection.unacked += 1  # connection_limits.max_unacknowledged
            consumer.deliver(consumer, ref)

    # ---------------------------------------------------------------- outcomes

    def _remove_acked(self, ref: MessageRef) -> None:
        self.dequeued += 1
        if ref.message.persistent:
            self.broker.store.remove(self.store_key, ref.message.message_id)

    def acknowledge(self, consumer: Consumer, refs: list[MessageRef]) -> None:
        for ref in refs:
            ref.consumer = None
            self._remove_acked(ref)
        consumer.acknowledged += len(refs)
        self.dispatch()

    def negative_acknowledge(self, consumer: Consumer, refs: list[MessageRef]) -> None:
        """Redeliver, or dead-letter once the delivery count passes maximum_redeliveries."""
        returned = []
        limit = self.policy.maximum_redeliveries
        for ref in refs:
            ref.delivery_count += 1
            if limit >= 0 and ref.delivery_count > limit:
                self._dead_letter(ref, f"delivery count {ref.delivery_count} exceeds maximum_redeliveries {limit}")
            else:
                if ref.message.persistent:
                    self.broker.store.update_redelivery(self.store_key, ref.message.message_id, ref.delivery_count)
                returned.append(ref)
        if returned:
            self._return(returned)
        self.dispatch()

    def _expire(self, ref: MessageRef) -> None:
        self.expired += 1
        if self.policy.process_expired and (ref.message.persistent or self.policy.process_non_persistent):
            self._dead_letter(ref, "expired")
        else:
            self._drop(ref)

    def _dead_letter(self, ref: MessageRef, cause: str) -> None:
        message = ref.message
        if not message.persistent and not self.policy.process_non_persistent:
            # ActiveMQ's dead-letter strategies skip non-persistent messages by default
            # (processNonPersistent=false): they are discarded, and counted here.
            self._drop(ref)
            return
        self.dequeued += 1
        self.dead_lettered += 1
        if message.persistent:
            self.broker.store.remove(self.store_key, message.message_id)
        self.broker.dead_letter(self, ref, cause)

    def _drop(self, ref: MessageRef) -> None:
        self.dequeued += 1
        self.discarded += 1
        if ref.message.persistent:
            self.broker.store.remove(self.store_key, ref.message.message_id)

    def expire_sweep(self, now_ms: int) -> int:
        """Remove expired pending messages (called periodically, not only at dispatch)."""
        count = 0
        for dq in self._levels:
            if not dq or not any(r.message.expiration for r in dq):
                continue
            keep = []
            for ref in dq:
                if ref.message.expiration and ref.message.is_expired(now_ms):
                    self._unpend(ref)
                    self._expire(ref)
                    count += 1
                else:
                    keep.append(ref)
            dq.clear()
            dq.extend(keep)
        return count

    def purge(self) -> int:
        """Drop every pending message (counted as discarded), releasing its memory."""
        count = 0
        for dq in self._levels:
            while dq:
                ref = dq.popleft()
                self._unpend(ref)
                self._drop(ref)
                count += 1
        return count

    def take_pending(self) -> list[MessageRef]:
        """Remove every pending message, in arrival order, for another node of an Artemis-style
        cluster to have (reference_broker/clustering: redistribution, scale-down). Counted as
        dequeued here and removed from the store; the caller hands them on."""
        taken = sorted((ref for dq in self._levels for ref in dq), key=lambda r: r.sequence)
        for dq in self._levels:
            dq.clear()
        for ref in taken:
            self._unpend(ref)
            self.dequeued += 1
            if ref.message.persistent and self.stored:
                self.broker.store.remove(self.store_key, ref.message.message_id)
        return taken

    def pending_refs(self) -> list[MessageRef]:
        return [ref for dq in reversed(self._levels) for ref in dq]

    def stats(self) -> dict:
        return {
            "name": self.name.canonical,
            "kind": "queue",
            "enqueued": self.enqueued,
            "dequeued": self.dequeued,
            "dispatched": self.dispatched,
            "in_flight": self.in_flight_count,
            "pending": self._pending_count,
            "expired": self.expired,
            "dead_lettered": self.dead_lettered,
            "discarded": self.discarded,
            "consumers": [
                {
                    "id": c.consumer_id,
                    "connection": c.connection.connection_id,
                    "priority": c.priority,
                    "exclusive": c.exclusive,
                    "prefetch": c.prefetch,
                    "dispatched": c.dispatched,
                    "acknowledged": c.acknowledged,
                    "in_flight": len(c.in_flight) + len(c.tx_held),
                }
                for c in self.consumers
            ],
            "groups": len(self.groups),
            "memory_usage": self.usage.used,
            "memory_limit": self.usage.limit,
        }
