"""Shared helpers for the engine tests (no tests of its own).

`Client` wraps one engine `Connection` and records every delivery synchronously, so a test can
assert exactly which consumer got which message, in which order, with which delivery state.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from reference_broker.config import build_config
from reference_broker.engine.broker import Broker
from reference_broker.engine.consumer import AckMode, Consumer
from reference_broker.engine.message import Message, MessageRef
from reference_broker.engine.names import DestinationName, parse_destination

_ids = itertools.count(1)


def make_broker(config: dict | None = None, clock=None) -> Broker:
    cfg = build_config({"stomp": None, **(config or {})})
    return Broker(cfg, clock=clock) if clock is not None else Broker(cfg)


def dest(text: str | DestinationName) -> DestinationName:
    return parse_destination(text) if isinstance(text, str) else text


def message(destination: str, message_id: str | None = None, **kw) -> Message:
    return Message(
        message_id=message_id or f"m{next(_ids)}",
        destination=dest(destination).canonical,
        **kw,
    )


@dataclass
class Delivery:
    consumer_id: str
    ref: MessageRef
    message_id: str
    delivery_count: int
    redelivered: bool
    first_for_consumer: bool


class Client:
    def __init__(self, broker: Broker, **connect_kw) -> None:
        self.broker = broker
        self.conn = broker.connect(**connect_kw)
        self.deliveries: list[Delivery] = []
        self.on_deliver = None  # optional hook(consumer, ref) run after recording

    # -- consuming
    def _deliver(self, consumer: Consumer, ref: MessageRef) -> None:
        # Snapshot the per-delivery state: the ref object is reused on redelivery.
        self.deliveries.append(
            Delivery(consumer.consumer_id, ref, ref.message.message_id, ref.delivery_count,
                     ref.redelivered, ref.first_for_consumer)
        )
        if self.on_deliver is not None:
            self.on_deliver(consumer, ref)

    def subscribe(self, consumer_id: str, destination, ack_mode=AckMode.CLIENT_INDIVIDUAL, **kw) -> Consumer:
        return self.conn.subscribe(consumer_id, dest(destination), deliver=self._deliver,
                                   ack_mode=ack_mode, **kw)

    def got(self, consumer_id: str | None = None) -> list[str]:
        return [d.message_id for d in self.deliveries if consumer_id is None or d.consumer_id == consumer_id]

    def last(self, consumer_id: str | None = None) -> Delivery:
        return [d for d in self.deliveries if consumer_id is None or d.consumer_id == consumer_id][-1]

    def consumer(self, consumer_id: str) -> Consumer:
        return self.conn.consumer(consumer_id)

    def in_flight(self, consumer_id: str) -> list[str]:
        return list(self.conn.consumer(consumer_id).in_flight)

    def ack(self, consumer_id: str, message_id: str, transaction: str | None = None) -> None:
        self.conn.ack(self.conn.consumer(consumer_id), message_id, transaction)

    def nack(self, consumer_id: str, message_id: str, transaction: str | None = None) -> None:
        self.conn.nack(self.conn.consumer(consumer_id), message_id, transaction)

    def ack_all(self, consumer_id: str) -> None:
        for mid in self.in_flight(consumer_id):
            self.ack(consumer_id, mid)

    # -- producing
    def send(self, destination, message_id: str | None = None, transaction: str | None = None, **kw) -> bool:
        d = dest(destination)
        return self.conn.send(d, message(d.canonical, message_id, **kw), transaction)

    def send_many(self, destination, ids, **kw) -> None:
        for mid in ids:
            self.send(destination, mid, **kw)


def pending_ids(broker: Broker, queue: str) -> list[str]:
    """Pending message ids of a queue in dispatch order (priority, then FIFO)."""
    q = broker.queues.get(dest(queue).canonical)
    return [] if q is None else [r.message.message_id for r in q.pending_refs()]


def dlq(broker: Broker, name: str = "ActiveMQ.DLQ") -> list[Message]:
    q = broker.queues.get(f"queue://{name}")
    return [] if q is None else [r.message for r in q.pending_refs()]


def subscription_stats(broker: Broker, consumer_id: str) -> dict:
    return next(s for s in broker.stats()["subscriptions"] if s.get("consumer") == consumer_id)
