"""The protocol-neutral message and its per-destination reference.

A `Message` is what a producer sent: immutable once the broker accepted it, shared by every
destination and subscription it reaches. Anything that differs per queue or subscription
(delivery count, position, the group-first flag) lives on a `MessageRef`, the way Artemis keeps
a MessageReference per queue, so a redelivery on one durable subscription never shows up on
another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

PropertyValue = Union[str, int, float, bool]

DEFAULT_PRIORITY = 4  # JMS default priority; valid range 0-9

# ActiveMQ's convention for retained messages (its MQTT transport and its retained-message
# subscription recovery policy): a message published with this property set to true becomes the
# topic's retained message; an empty body clears it.
RETAIN_PROPERTY = "ActiveMQ.Retain"


@dataclass(slots=True, eq=False)
class Message:
    message_id: str
    destination: str  # canonical name, e.g. "queue://ORDERS" or "topic://PRICES.IBM"
    body: bytes = b""
    properties: dict[str, PropertyValue] = field(default_factory=dict)
    persistent: bool = False
    priority: int = DEFAULT_PRIORITY
    timestamp: int = 0  # milliseconds since the epoch, set by the broker on arrival if 0
    expiration: int = 0  # milliseconds since the epoch; 0 means never expires
    correlation_id: str | None = None
    reply_to: str | None = None
    type: str | None = None
    group_id: str | None = None
    group_seq: int = 0
    content_type: str | None = None
    producer_id: str | None = None  # the connection that sent it (no-local subscriptions)
    # Opaque per-protocol cache of the encoded headers, so a message fanned out to many
    # subscribers of one protocol is encoded once. Never part of the message's identity.
    wire_cache: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        """Bytes charged against memory limits: the body plus a rough header estimate."""
        properties = self.properties
        return len(self.body) + (64 + 32 * len(properties) if properties else 64)

    def is_expired(self, now_ms: int) -> bool:
        return self.expiration > 0 and now_ms >= self.expiration

    def header(self, name: str) -> PropertyValue | None:
        """Value of a JMS header or property by its selector identifier (None when absent)."""
        getter = _HEADER_GETTERS.get(name)
        if getter is not None:
            return getter(self)
        return self.properties.get(name)


# Selector identifiers that name message headers rather than properties (JMS 1.1, 3.8.1.1).
_HEADER_GETTERS = {
    "JMSMessageID": lambda m: m.message_id,
    "JMSPriority": lambda m: m.priority,
    "JMSTimestamp": lambda m: m.timestamp,
    "JMSExpiration": lambda m: m.expiration,
    "JMSCorrelationID": lambda m: m.correlation_id,
    "JMSType": lambda m: m.type,
    "JMSReplyTo": lambda m: m.reply_to,
    "JMSDestination": lambda m: m.destination,
    "JMSDeliveryMode": lambda m: "PERSISTENT" if m.persistent else "NON_PERSISTENT",
    "JMSXGroupID": lambda m: m.group_id,
    "JMSXGroupSeq": lambda m: m.group_seq if m.group_id is not None else None,
}


class MessageRef:
    """A message's place in one queue or subscription, with that place's delivery state."""

    __slots__ = ("message", "sequence", "delivery_count", "first_for_consumer", "consumer", "retained")

    def __init__(self, message: Message, sequence: int, delivery_count: int = 0, retained: bool = False) -> None:
        self.message = message
        self.sequence = sequence  # arrival order within its queue: FIFO tie-breaker
        self.delivery_count = delivery_count  # times dispatched before this dispatch
        self.first_for_consumer = False  # set when this message opened a group on its consumer
        self.consumer = None  # the consumer it is in flight to, if any
        # Delivered from the topic's retained message because the subscription is new (MQTT
        # marks such deliveries), not because it was published while subscribed.
        self.retained = retained

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 0

    def selector_value(self, name: str) -> PropertyValue | None:
        if name == "JMSRedelivered":
            return self.delivery_count > 0
        if name == "JMSXDeliveryCount":
            return self.delivery_count + 1
        return self.message.header(name)
