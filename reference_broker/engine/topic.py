"""Publish/subscribe: topics, non-durable subscriptions with slow-consumer handling, and durable
subscriptions.

A non-durable subscription (ActiveMQ's TopicSubscription) delivers straight into its consumer's
prefetch window; what does not fit waits in `pending`, whose length is the `matched` statistic.
The destination policy's pending message limit bounds `pending`, evicting by the policy's
eviction strategy and counting `discarded` (ActiveMQ "Slow Consumer Handling").

A durable subscription is a queue fed by the topic: it keeps (and, for persistent messages,
stores) everything published while its subscriber is away.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping, Protocol

from ..config import PolicyEntry
from .access import ReadAccess, allows
from .consumer import AckMode, Consumer
from .message import Message, MessageRef
from .names import DestinationName
from .queue import Queue
from .selector import Selector
from .slow_consumer import NO_LIMIT, effective_limit, evictor_for, pending_limit
from .usage import MemoryUsage
from .wildcard import matches


class Topic:
    """A concrete topic name: its counters and the memory its pending messages use."""

    def __init__(self, name: DestinationName, policy: PolicyEntry, usage: MemoryUsage) -> None:
        self.name = name
        self.policy = policy
        self.usage = usage
        self.enqueued = 0  # published
        self.dispatched = 0  # copies handed to subscriptions


class SubscriptionHost(Protocol):
    """What a non-durable subscription asks of its broker (`broker.Broker` implements it).
    Declared here, by the subscription, so this module never imports the broker module."""

    def now_ms(self) -> int: ...

    @property
    def topics(self) -> Mapping[str, Topic]:
        """Topics by canonical name: a pending message's memory is charged to its topic."""
        ...


class TopicSubscription:
    """A non-durable subscription: exactly one consumer, lives as long as that consumer."""

    def __init__(self, broker: SubscriptionHost, consumer: Consumer, policy: PolicyEntry) -> None:
        self.broker = broker
        self.consumer = consumer
        self.pattern = consumer.destination.name
        self.policy = policy
        self.pending: deque[MessageRef] = deque()
        self.limit = effective_limit(
            pending_limit(policy.pending_message_limit_strategy, consumer.prefetch),
            consumer.maximum_pending_limit,
        )
        self._evict = evictor_for(policy.message_eviction_strategy)
        self._sequence = 0
        self.enqueued = 0  # messages that matched this subscription
        self.discarded = 0
        self.dispatched = 0
        self.dequeued = 0
        self._dispatching = False
        consumer.source = self

    @property
    def matched(self) -> int:
        """ActiveMQ's `matched`: messages waiting for room in the prefetch buffer."""
        return len(self.pending)

    def matches_topic(self, topic_name: str) -> bool:
        return matches(self.pattern, topic_name)

    def add(self, message: Message, topic: Topic, retained: bool = False) -> None:
        access = self.consumer.access
        if access is not None and not access.allows(topic.name):
            return  # a wildcard matched a topic its reader may not read (engine/access.py)
        self._sequence += 1
        ref = MessageRef(message, self._sequence, 0, retained)
        if not self.consumer.accepts(ref):
            return
        self.enqueued += 1
        topic.dispatched += 1
        if not self.pending and self.consumer.has_credit():
            if message.expiration and message.is_expired(self.broker.now_ms()):
                self.discarded += 1  # already expired on arrival: never delivered
                return
            self._hand_over(ref)
            return
        self.pending.append(ref)
        topic.usage.increase(message.size)
        if self.limit != NO_LIMIT and len(self.pending) > self.limit:
            self._enforce_limit()

    def _enforce_limit(self) -> None:
        while len(self.pending) > self.limit:
            evicted = self._evict(self.pending) if self.limit > 0 else [self.pending.popleft()]
            if not evicted:
                break
            for ref in evicted:
                self._release_memory(ref)
            self.discarded += len(evicted)

    def _release_memory(self, ref: MessageRef) -> None:
        topic = self.broker.topics.get(ref.message.destination)
        if topic is not None:
            topic.usage.decrease(ref.message.size)

    def _hand_over(self, ref: MessageRef) -> None:
        consumer = self.consumer
        consumer.dispatched += 1
        self.dispatched += 1
        if consumer.ack_mode is AckMode.AUTO:
            consumer.deliver(consumer, ref)
            consumer.acknowledged += 1
            self.dequeued += 1
        else:
            ref.consumer = consumer
            consumer.in_flight[ref.message.message_id] = ref
            consumer.connection.unacked += 1  # connection_limits.max_unacknowledged
            consumer.deliver(consumer, ref)

    def dispatch(self) -> None:
        if self._dispatching:
            # Re-entered from a delivery callback (an immediate ack): the loop below re-checks
            # credit after every delivery, so recursing would only grow the stack per message.
            return
        self._dispatching = True
        try:
            now = self.broker.now_ms()
            pending = self.pending
            consumer = self.consumer
            while pending and consumer.has_credit():
                ref = pending.popleft()
                self._release_memory(ref)
                if ref.message.expiration and ref.message.is_expired(now):
                    self.discarded += 1  # expired while waiting; non-durable topics have no DLQ
                    continue
                self._hand_over(ref)
        finally:
            self._dispatching = False

    def acknowledge(self, consumer: Consumer, refs: list[MessageRef]) -> None:
        consumer.acknowledged += len(refs)
        self.dequeued += len(refs)
        self.dispatch()

    def negative_acknowledge(self, consumer: Consumer, refs: list[MessageRef]) -> None:
        # A non-durable subscription redelivers in place until maximum_redeliveries, then drops
        # (non-persistent pub/sub messages have nowhere durable to go).
        limit = self.policy.maximum_redeliveries
        for ref in reversed(refs):
            ref.delivery_count += 1
            if limit >= 0 and ref.delivery_count > limit:
                self.discarded += 1
                continue
            ref.consumer = None
            self.pending.appendleft(ref)
            topic = self.broker.topics.get(ref.message.destination)
            if topic is not None:
                topic.usage.increase(ref.message.size)
        self.dispatch()
        if self.limit != NO_LIMIT and len(self.pending) > self.limit:
            self._enforce_limit()  # redeliveries count against the pending limit too

    def expire_sweep(self, now_ms: int) -> int:
        """Drop expired pending messages (non-durable topics have no dead-letter queue)."""
        if not any(ref.message.expiration for ref in self.pending):
            return 0
        keep = []
        expired = 0
        for ref in self.pending:
            if ref.message.expiration and ref.message.is_expired(now_ms):
                self._release_memory(ref)
                expired += 1
            else:
                keep.append(ref)
        self.pending.clear()
        self.pending.extend(keep)
        self.discarded += expired
        return expired

    def remove_consumer(self, consumer: Consumer) -> None:
        for ref in self.pending:
            self._release_memory(ref)
        self.pending.clear()
        consumer.in_flight.clear()
        consumer.tx_held.clear()

    def stats(self) -> dict:
        c = self.consumer
        return {
            "consumer": c.consumer_id,
            "connection": c.connection.connection_id,
            "destination": c.destination.canonical,
            "durable": False,
            "prefetch": c.prefetch,
            "pending_limit": self.limit,
            "enqueued": self.enqueued,
            "dispatched": self.dispatched,
            "dequeued": self.dequeued,
            "in_flight": len(c.in_flight) + len(c.tx_held),
            "matched": self.matched,
            "discarded": self.discarded,
        }


class DurableSubscription:
    """Keeps a topic's messages in its own queue while the subscriber is away."""

    def __init__(
        self,
        key: str,
        client_id: str,
        name: str,
        pattern: DestinationName,
        selector: Selector | None,
        no_local: bool,
        queue: Queue,
    ) -> None:
        self.key = key  # also the store key of its queue
        self.client_id = client_id
        self.name = name
        self.pattern = pattern
        self.selector = selector
        self.no_local = no_local
        self.queue = queue
        self.active: Consumer | None = None
        self.last_connection_id: str | None = None
        # Whose it is, and what that user may read (Broker.own_durable; engine/access.py).
        self.user: str | None = None
        self.access: ReadAccess | None = None

    def matches_topic(self, topic_name: str) -> bool:
        return matches(self.pattern.name, topic_name)

    def add(self, message: Message, topic: Topic, retained: bool = False) -> None:
        if not allows(self.access, topic.name):
            return  # kept for a reader who may not read this topic (engine/access.py)
        if self.no_local and message.producer_id is not None and message.producer_id == self.last_connection_id:
            return
        if self.selector is not None and not self.selector.matches(MessageRef(message, 0).selector_value):
            return
        topic.dispatched += 1
        self.queue.enqueue(message, retained=retained)

    def metadata(self) -> dict:
        return {
            "client_id": self.client_id,
            "name": self.name,
            "destination": self.pattern.canonical,
            "selector": self.selector.text if self.selector is not None else None,
            "no_local": self.no_local,
            "user": self.user,
        }

    def stats(self) -> dict:
        q = self.queue
        return {
            "client_id": self.client_id,
            "name": self.name,
            "destination": self.pattern.canonical,
            "durable": True,
            "active": self.active is not None,
            "enqueued": q.enqueued,
            "dispatched": q.dispatched,
            "dequeued": q.dequeued,
            "pending": q.pending_count,
            "in_flight": q.in_flight_count,
            # For a durable subscription nothing is discarded for slowness: it all waits.
            "matched": q.pending_count,
            "discarded": q.discarded,
        }


class SharedSubscription:
    """One subscription shared by several consumers (MQTT 5 `$share/group/filter`): the topic
    feeds one queue and its consumers compete for the messages, as on a queue. It lives while it
    has consumers and is never stored."""

    def __init__(self, key: str, group: str, pattern: DestinationName, queue: Queue) -> None:
        self.key = key
        self.group = group
        self.pattern = pattern
        self.queue = queue

    def matches_topic(self, topic_name: str) -> bool:
        return matches(self.pattern.name, topic_name)

    def add(self, message: Message, topic: Topic, retained: bool = False) -> None:
        # Its consumers compete for one stream: a message goes in only if every one of them may
        # read its topic, so none receives what it may not (engine/access.py).
        for consumer in self.queue.consumers:
            if not allows(consumer.access, topic.name):
                return
        topic.dispatched += 1
        self.queue.enqueue(message, retained=retained)

    def stats(self) -> dict:
        q = self.queue
        return {
            "shared": self.group,
            "destination": self.pattern.canonical,
            "durable": False,
            "consumers": len(q.consumers),
            "enqueued": q.enqueued,
            "dispatched": q.dispatched,
            "dequeued": q.dequeued,
            "pending": q.pending_count,
            "in_flight": q.in_flight_count,
            "matched": q.pending_count,
            "discarded": q.discarded,
        }
