"""Topic fan-out: every subscriber should receive every message sent after it subscribed.

Subscribers subscribe before any producer starts. At `stop()` they stop polling but keep their
subscriptions, and `drain()` reads each one until quiet (``f: "drain"``, value = the messages,
each tagged with its ``subscriber``), so messages still in flight at stop are not missed. A
non-durable subscription that reconnected mid-run missed what was published meanwhile: the
``subscribe`` entries in the history show when each one was (re)made.
"""

from __future__ import annotations

import threading

from chaos.history import History
from conformance.clients import Subscription

from .base import ClientFactory, close_quietly
from .queue import QueueWorkload


class TopicFanoutWorkload(QueueWorkload):
    kind = "topic"

    def __init__(self, history: History, make_client: ClientFactory, *, destination: str = "topic://bc.chaos",
                 subscribers: int = 3, ack: str = "auto", subscribe_timeout: float = 10.0, **options) -> None:
        if not destination.startswith("topic://"):
            raise ValueError(f"fan-out needs a topic destination (topic://NAME), not {destination!r}")
        super().__init__(history, make_client, destination=destination, consumers=subscribers, ack=ack, **options)
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

    def _open_consumer(self, process: int):
        client, sub = super()._open_consumer(process)
        # Called on the subscriber's own thread, named bc-topic-consumer-<index> by _spawn.
        consumer = int(threading.current_thread().name.rsplit("-", 1)[1])
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

    def drain(self, *, quiet: float = 1.0, attempts: int = 1) -> list[dict]:
        """Each kept subscription read until quiet; returns all drained values."""
        if not self._stop_consumers.is_set():
            raise RuntimeError("call stop() before drain()")
        drained: list[dict] = []
        with self._kept_lock:
            kept, self._kept = self._kept, []
        for consumer, process, client, sub in sorted(kept, key=lambda k: k[0]):
            got: list[dict] = []
            op = self.history.invoke(process, "drain", {"subscriber": consumer})
            try:
                while (message := sub.receive(quiet)) is not None:
                    if self.ack != "auto":
                        sub.ack(message)
                    got.append(self._received(message, consumer))
            except Exception as exc:  # noqa: BLE001
                self.history.info(op, f"drain cut off after {len(got)} messages: {exc}", value=got)
            else:
                self.history.ok(op, got)
            finally:
                close_quietly(client)
            drained += got
        return drained
