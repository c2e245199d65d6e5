"""Retained messages for a new subscription, handed over as its consumer can take them.

A subscription that matches many retained messages used to get all of them at once, whatever
its socket could take: ten `#` subscribers that never read held every retained message each in
their output buffers (issue 20, item 5). A `RetainedReplay` keeps only the names still to send
(the messages stay in the broker's retained map, counted once against the memory limit) and
hands the next one over only while the consumer has credit (its transport is writable, its
prefetch window has room) and nothing else is waiting for it; the connection pumps it again
when credit comes back (writable again, an acknowledgement, AMQP link credit).
"""

from __future__ import annotations

from collections import deque
from typing import Mapping, Protocol

from .consumer import Consumer
from .message import Message
from .names import TOPIC, DestinationName, parse_destination


class RetainedHost(Protocol):
    """What a replay asks of its broker (`broker.Broker` implements it). Declared here so this
    module never imports the broker module."""

    @property
    def retained(self) -> Mapping[str, Message]: ...

    def topic(self, dest: DestinationName): ...


class RetainedReplay:
    __slots__ = ("consumer", "target", "names")

    def __init__(self, consumer: Consumer, target, names: list[str]) -> None:
        self.consumer = consumer
        self.target = target  # a TopicSubscription or DurableSubscription (has add(message, topic, retained))
        self.names: deque[str] = deque(names)

    def __len__(self) -> int:
        return len(self.names)

    def _idle(self) -> bool:
        """Nothing of the subscription's own is waiting for the consumer: a retained message
        handed over now would not pile up behind it."""
        target = self.target
        pending = getattr(target, "pending", None)
        if pending is not None:
            return not pending
        queue = getattr(target, "queue", None)
        return queue is None or queue.pending_count == 0

    def pump(self, broker: RetainedHost) -> bool:
        """Hand over what the consumer can take now; True once every name was handled."""
        consumer = self.consumer
        names = self.names
        retained = broker.retained
        while names and not consumer.closed and consumer.has_credit() and self._idle():
            name = names.popleft()
            message = retained.get(name)
            if message is None:
                continue  # cleared since the subscription was made
            topic = broker.topic(parse_destination(name, TOPIC))
            self.target.add(message, topic, retained=True)
        return not names or consumer.closed
