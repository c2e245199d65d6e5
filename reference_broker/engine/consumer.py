"""A consumer: one subscription of one connection, with its prefetch window and in-flight set."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Callable

from .message import MessageRef
from .names import DestinationName

if TYPE_CHECKING:  # pragma: no cover
    from .selector import Selector


class AckMode(enum.Enum):
    AUTO = "auto"  # acknowledged when dispatched
    CLIENT = "client"  # cumulative: acking a message acks everything delivered before it
    CLIENT_INDIVIDUAL = "client-individual"  # each message acked on its own


DeliverCallback = Callable[["Consumer", MessageRef], None]


class Consumer:
    __slots__ = (
        "connection",
        "consumer_id",
        "number",
        "destination",
        "ack_mode",
        "prefetch",
        "selector",
        "priority",
        "exclusive",
        "no_local",
        "deliver",
        "source",
        "in_flight",
        "tx_held",
        "writable",
        "closed",
        "dispatched",
        "acknowledged",
        "durable_name",
        "maximum_pending_limit",
        "access",
    )

    def __init__(
        self,
        connection,
        consumer_id: str,
        number: int,
        destination: DestinationName,
        *,
        deliver: DeliverCallback,
        ack_mode: AckMode = AckMode.AUTO,
        prefetch: int = 1000,
        selector: "Selector | None" = None,
        priority: int = 0,
        exclusive: bool = False,
        no_local: bool = False,
        durable_name: str | None = None,
        maximum_pending_limit: int | None = None,
    ) -> None:
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {prefetch}")
        self.connection = connection
        self.consumer_id = consumer_id
        self.number = number  # unique within the connection; used in ack ids
        self.destination = destination
        self.ack_mode = ack_mode
        self.prefetch = prefetch
        self.selector = selector
        self.priority = priority
        self.exclusive = exclusive
        self.no_local = no_local
        self.deliver = deliver
        self.durable_name = durable_name
        # What the client asked for as its slow-consumer pending limit (None: policy only).
        self.maximum_pending_limit = maximum_pending_limit
        self.source = None  # the Queue or TopicSubscription dispatching to this consumer
        # What its connection may read, checked per topic a message comes from (engine/access.py);
        # None: no authorization configured.
        self.access = None
        # Delivered, not yet acknowledged, in delivery order (cumulative acks walk it).
        self.in_flight: dict[str, MessageRef] = {}
        # Acknowledged inside a transaction that is still open: no longer counted against the
        # prefetch (so a transacted consumer can go past its window) but not yet removed.
        self.tx_held: dict[str, MessageRef] = {}
        self.writable = True  # cleared by the transport while its write buffer is full
        self.closed = False
        self.dispatched = 0
        self.acknowledged = 0

    def has_credit(self) -> bool:
        if not self.writable or self.closed:
            return False
        if self.ack_mode is AckMode.AUTO:
            return True
        connection = self.connection  # connection_limits.max_unacknowledged, across its consumers
        return len(self.in_flight) < self.prefetch and connection.unacked < connection.unacked_limit

    def accepts(self, ref: MessageRef) -> bool:
        """Whether this consumer may ever receive `ref` (selector and no-local), credit aside."""
        if self.no_local and ref.message.producer_id == self.connection.connection_id:
            return False
        selector = self.selector
        return selector is None or selector.matches(ref.selector_value)

    def __repr__(self) -> str:
        return f"<Consumer {self.consumer_id!r} on {self.destination} in_flight={len(self.in_flight)}>"
