"""Topic fan-out: every subscriber should receive every message sent after it subscribed.

Subscribers subscribe before any producer starts. At `stop()` they stop polling but keep their
subscriptions, and `drain()` reads each one until quiet (``f: "drain"``, value = the messages,
each tagged with its ``subscriber``), so messages still in flight at stop are not missed. A
non-durable subscription that reconnected mid-run missed what was published meanwhile: the
``subscribe`` entries in the history show when each one was (re)made.
"""

from __future__ import annotations

import threading
from typing import Callable

from chaos.history import History
from conformance.clients import Subscription

from .base import ClientFactory, close_quietly
from .queue import QueueWorkload


class TopicFanoutWorkload(QueueWorkload):
    kind = "topic"

    def __init__(self, history: History, make_client: ClientFactory, *, destination: str = "topic://bc.chaos",
                 subscribers: int = 3, ack: str = "auto", subscribe_timeout: float = 10.0,
                 slow_subscribers: int = 0, make_slow_client: ClientFactory | None = None, **options) -> None:
        if not destination.startswith("topic://"):
            raise ValueError(f"fan-out needs a topic destination (topic://NAME), not {destination!r}")
        if not 0 <= slow_subscribers <= subscribers:
            raise ValueError(f"slow_subscribers must be between 0 and subscribers ({subscribers}), not {slow_subscribers}")
        if slow_subscribers and make_slow_client is None:
            raise ValueError("slow subscribers need make_slow_client (e.g. a client through a slowed fault proxy)")
        super().__init__(history, make_client, destination=destination, consumers=subscribers, ack=ack, **options)
        # Subscribers 0 .. slow_subscribers-1 connect with make_slow_client: the experiment routes
        # them through the fault proxy, whose latency / bandwidth toxics make them slow consumers.
        self.slow_subscribers = slow_subscribers
        self.make_slow_client = make_slow_client
        self.subscribe_timeout = subscribe_timeout
        self._subscribed = [threading.Event() for _ in range(subscribers)]
        self._kept: list[tuple[int, int, object, Subscription]] = []
        self._kept_lock = threading.Lock()

    def start(self) -> "TopicFanoutWorkload":
        for c in range(self.consumers):
            self._spawn(f"consumer-{c}", self._consume, c)
        for c, event in enumerate(self._subscribed):
            if not event.wait(self.subscribe_timeout):
                self.stop()
                raise RuntimeError(f"subscriber {c} did not subscribe to {self.destination} within "
                                   f"{self.subscribe_timeout}s: see the history's 'connect'/'subscribe' entries")
        for p in range(self.producers):
            self._spawn(f"producer-{p}", self._produce, p)
        return self

    @staticmethod
    def _current_subscriber() -> int | None:
        """The subscriber index of the calling thread (named bc-topic-consumer-<index> by _spawn)."""
        name = threading.current_thread().name
        return int(name.rsplit("-", 1)[1]) if name.startswith("bc-topic-consumer-") else None

    def _is_slow(self, consumer: int | None) -> bool:
        return consumer is not None and consumer < self.slow_subscribers

    def _client_maker(self):
        return self.make_slow_client if self._is_slow(self._current_subscriber()) else self.make_client

    def _subscribe_value(self) -> dict:
        consumer = self._current_subscriber()
        value = {**super()._subscribe_value(), "subscriber": consumer}
        if self._is_slow(consumer):
            value["slow"] = True
        return value

    def _open_consumer(self, process: int):
        client, sub = super()._open_consumer(process)
        consumer = self._current_subscriber()
        if sub is not None:
            self._subscribed[consumer].set()
        return client, sub

    def _received(self, message, consumer: int) -> dict:
        value = super()._received(message, consumer)
        value["subscriber"] = value.pop("consumer")
        return value

    def _finish_consumer(self, consumer: int, process: int, client, sub) -> None:
        if sub is None:
            close_quietly(client)
            return
        with self._kept_lock:
            self._kept.append((consumer, process, client, sub))

    def drain(self, *, quiet: float = 1.0, attempts: int = 1,
              before_close: Callable[[], None] | None = None) -> list[dict]:
        """Each kept subscription read until quiet; returns all drained values. ``before_close``
        runs after every subscription is drained and before any closes (the broker's counters of a
        non-durable subscription go with it)."""
        if not self._stop_consumers.is_set():
            raise RuntimeError("call stop() before drain()")
        drained: list[dict] = []
        with self._kept_lock:
            kept, self._kept = self._kept, []
        try:
            for consumer, process, client, sub in sorted(kept, key=lambda k: k[0]):
                got: list[dict] = []
                op = self.history.invoke(process, "drain", {"subscriber": consumer})
                try:
                    while (message := sub.receive(quiet)) is not None:
                        if self.ack != "auto":
                            sub.ack(message)
                        got.append(self._received(message, consumer))
                except Exception as exc:  # noqa: BLE001
                    self.history.info(op, f"drain cut off after {len(got)} messages: {exc}", value=got,
                                      node=self.node_of(client))
                else:
                    self.history.ok(op, got, node=self.node_of(client))
                drained += got
            if before_close is not None:
                before_close()
        finally:
            for _, _, client, _ in kept:
                close_quietly(client)
        return drained
