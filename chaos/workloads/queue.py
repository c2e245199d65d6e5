"""Queue workloads: producers with unique, traceable message ids and per-producer sequence
numbers; consumers with client-individual acknowledgements; a final drain.

Each message's id is ``{run}-{producer}-{seq}`` and travels as properties ``bc_id``,
``bc_producer``, ``bc_seq`` (and the group id when there is one). Producer index and sequence
numbers belong to the logical producer and survive process changes, so per-producer FIFO can be
checked across reconnects. History (chaos/history.py):

- ``send``: invoke -> ok (the broker confirmed) / fail (refused) / info (unknown: the process
  retires and the thread goes on under a new process id, as Jepsen does);
- ``receive``: invoke -> ok with the message, or fail when nothing came within the poll time;
- ``ack``: invoke -> ok / fail / info, value = the message acknowledged;
- ``drain`` after stop: one fresh consumer reads until nothing arrives for ``quiet`` seconds,
  acknowledging each message; ok with the list of messages (info with what it got, if cut off).
With client acks, a message counts as consumed when its ack is ok or it is in a drain's value
(the total-queue checker's dequeues; REFERENCES.md, "Jepsen").
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

from chaos.history import History, message_value
from conformance.clients import AckMode, Client, Subscription
from machinery.waiting import Deadline

from .base import (GROUP, ID, PRODUCER, SEQ, ClientFactory, NodeNames, Pacer, ProcessIds, close_quietly, outcome_of,
                   received_value)


class DrainIncomplete(RuntimeError):
    """The final drain never completed (the broker stayed unreachable). The run is still judged:
    with no completed drain in the history, the total-queue verdict is "unknown", since messages
    still queued cannot be told from lost ones (reports/checkers/total_queue.py)."""

    def __init__(self, message: str, drained: list[dict]):
        super().__init__(message)
        self.drained = drained  # what cut-off attempts did read (recorded as info in the history)


class QueueWorkload:
    """``producers`` threads send at ``rate`` messages/s each (None: unthrottled); ``consumers``
    threads receive. `start()`, `stop()`, `drain()`; also a context manager (stop on exit)."""

    kind = "queue"

    def __init__(self, history: History, make_client: ClientFactory, *, destination: str = "queue://bc.chaos",
                 producers: int = 2, consumers: int = 2, rate: float | None = 50.0,
                 groups: Sequence[str] = (), persistent: bool = True, ack: AckMode = "client-individual",
                 prefetch: int | None = None, receive_timeout: float = 0.5, reconnect_delay: float = 0.2,
                 join_timeout: float = 30.0, make_producer_client: ClientFactory | None = None,
                 node_names: dict[str, str] | None = None) -> None:
        if ack == "client":
            raise ValueError("ack='client' is cumulative and would hide which message an ack covers: "
                             "use 'client-individual' (or 'auto')")
        self.history = history
        self.make_client = make_client
        # Producers may connect elsewhere than consumers and the drain (a network of brokers: produce
        # on one broker, consume on another); None: everyone uses make_client.
        self.make_producer_client = make_producer_client
        self.destination = destination
        self.producers = producers
        self.consumers = consumers
        self.rate = rate
        self.groups = tuple(groups)
        self.persistent = persistent
        self.ack = ack
        self.prefetch = prefetch
        self.receive_timeout = receive_timeout
        self.reconnect_delay = reconnect_delay
        self.join_timeout = join_timeout
        # Every completion of send / receive / ack / drain names the node that served it
        # (``node``: the node's name from ``node_names``, client address -> name, else the
        # address; chaos/workloads/base.py NodeNames).
        self.node_of = NodeNames(node_names)
        self.ids = ProcessIds()
        self._stop_producers = threading.Event()
        self._stop_consumers = threading.Event()
        self._threads: list[threading.Thread] = []
        self.sent_ok = 0  # progress for displays; the history is the record
        self.received_ok = 0
        self.errors: list[str] = []  # unexpected exceptions inside worker threads

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "QueueWorkload":
        if self._threads:
            raise RuntimeError("workload already started: make a new one for another run")
        for c in range(self.consumers):
            self._spawn(f"consumer-{c}", self._consume, c)
        for p in range(self.producers):
            self._spawn(f"producer-{p}", self._produce, p)
        return self

    def _spawn(self, name: str, target, *args) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except Exception as exc:  # noqa: BLE001 - kept for the caller; the history stays valid
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

        thread = threading.Thread(target=guarded, name=f"bc-{self.kind}-{name}", daemon=True)
        self._threads.append(thread)
        # A signal handler may raise (SIGTERM -> SystemExit, brokerconf/cli.py) while start()
        # waits for the thread to run: stop() must then not join a thread that never started
        # (`_join` skips it; the stop events still reach it if it does run).
        thread.start()

    def stop(self) -> None:
        """Stop producers, then consumers (each finishes its operation in hand: nothing is left
        open in the history); bounded by ``join_timeout``."""
        self._stop_producers.set()
        self._join([t for t in self._threads if "producer" in t.name])
        self._stop_consumers.set()
        self._join(self._threads)

    def _join(self, threads) -> None:
        deadline = Deadline(self.join_timeout)
        for thread in threads:
            if thread.ident is None:  # never started (interrupted in start(), see `_spawn`)
                continue
            try:
                thread.join(deadline.remaining())
            except RuntimeError:  # started but not yet running when start() was interrupted
                continue
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            self.errors.append(f"threads still running after {self.join_timeout}s: {stuck}")

    def __enter__(self) -> "QueueWorkload":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ helpers

    def _connect(self, process: int, stop: threading.Event, make_client: ClientFactory | None = None) -> Client | None:
        """A client from ``make_client`` (default: `_client_maker`), retrying until ``stop``; each
        attempt recorded as ``connect``."""
        while not stop.is_set():
            op = self.history.invoke(process, "connect", None)
            try:
                client = (make_client or self._client_maker())()
            except Exception as exc:  # noqa: BLE001 - refused, timed out: try again
                # A failed connect changes no broker state that the checkers look at.
                self.history.fail(op, f"{type(exc).__name__}: {exc}")
                stop.wait(self.reconnect_delay)
                continue
            self.history.ok(op)
            return client
        return None

    def _client_maker(self) -> ClientFactory:
        """The factory for the calling consumer thread (subclasses route some workers elsewhere)."""
        return self.make_client

    def _subscribe_value(self) -> dict:
        """The ``subscribe`` operation's value in the history."""
        return {"destination": self.destination}

    def _group(self, seq: int) -> str | None:
        return self.groups[seq % len(self.groups)] if self.groups else None

    # ------------------------------------------------------------------ producers

    def _produce(self, producer: int) -> None:
        process = self.ids.take()
        pacer = Pacer(self.rate, self._stop_producers)
        client: Client | None = None
        seq = 0
        try:
            while pacer.wait():
                if client is None:
                    client = self._connect(process, self._stop_producers, self.make_producer_client)
                    if client is None:
                        return
                message_id = f"{self.history.run}-{producer}-{seq}"
                group = self._group(seq)
                value = message_value(message_id, producer, seq, self.destination, group)
                op = self.history.invoke(process, "send", value)
                try:
                    properties = {ID: message_id, PRODUCER: producer, SEQ: seq}
                    if group is not None:
                        properties[GROUP] = group
                    client.send(self.destination, message_id, properties, persistent=self.persistent,
                                group_id=group)
                except Exception as exc:  # noqa: BLE001 - every error is an outcome to record
                    node = self.node_of(client)
                    if outcome_of(exc) == "fail":
                        self.history.fail(op, str(exc), node=node)
                    else:
                        self.history.info(op, str(exc), node=node)
                        process = self.ids.take()  # the old one may still have the send in flight
                    close_quietly(client)
                    client = None
                else:
                    self.history.ok(op, node=self.node_of(client))
                    self.sent_ok += 1
                seq += 1  # never reused: an id names one attempt
        finally:
            close_quietly(client)

    # ------------------------------------------------------------------ consumers

    def _subscribe(self, client: Client) -> Subscription:
        return client.subscribe(self.destination, ack=self.ack, prefetch=self.prefetch)

    def _consume(self, consumer: int) -> None:
        process = self.ids.take()
        client: Client | None = None
        sub: Subscription | None = None
        try:
            while not self._stop_consumers.is_set():
                if sub is None:
                    client, sub = self._open_consumer(process)
                    if sub is None:
                        return
                process, still_open = self._receive_once(process, client, sub, consumer)
                if not still_open:
                    client = sub = None
        finally:
            self._finish_consumer(consumer, process, client, sub)

    def _receive_once(self, process: int, client: Client, sub: Subscription, consumer: int) -> tuple[int, bool]:
        """One ``receive`` (and its ``ack``) on an open subscription: (the process to go on with,
        whether the subscription is still open). A broken one is closed here."""
        op = self.history.invoke(process, "receive", None)
        try:
            message = sub.receive(self.receive_timeout)
        except Exception as exc:  # noqa: BLE001 - connection lost while waiting
            # With client acks, anything dispatched and not acked is redelivered: nothing was
            # consumed. With auto ack a message may have been lost in flight: unknown.
            node = self.node_of(client)
            if self.ack == "auto":
                self.history.info(op, str(exc), node=node)
                process = self.ids.take()
            else:
                self.history.fail(op, str(exc), node=node)
            close_quietly(client)
            return process, False
        if message is None:
            self.history.fail(op, f"nothing arrived within {self.receive_timeout}s", node=self.node_of(client))
            return process, True
        value = self._received(message, consumer)
        self.history.ok(op, value, node=self.node_of(client))
        if self.ack == "auto":
            self.received_ok += 1
            return process, True
        op = self.history.invoke(process, "ack", value)
        try:
            sub.ack(message)
        except Exception as exc:  # noqa: BLE001
            node = self.node_of(client)
            if outcome_of(exc) == "fail":
                self.history.fail(op, str(exc), node=node)
            else:
                self.history.info(op, str(exc), node=node)
                process = self.ids.take()
            close_quietly(client)
            return process, False
        node = self.node_of(client)
        if sub.ack_confirmed:
            self.history.ok(op, node=node)
        else:
            # Sent, never answered (AMQP settles on send): a broker crash may still
            # redeliver the message, so the checkers must not take this ack as
            # confirmed. The ack itself is done (nothing of it is left in flight),
            # so the process goes on: marking it `info` would retire the process
            # and with it, for the checkers, the subscription.
            self.history.ok(op, {**value, "confirmed": False}, node=node)
        self.received_ok += 1
        return process, True

    def _open_consumer(self, process: int) -> tuple[Client | None, Subscription | None]:
        while True:
            client = self._connect(process, self._stop_consumers)
            if client is None:
                return None, None
            op = self.history.invoke(process, "subscribe", self._subscribe_value())
            try:
                sub = self._subscribe(client)
            except Exception as exc:  # noqa: BLE001
                self.history.fail(op, str(exc))
                close_quietly(client)
                self._stop_consumers.wait(self.reconnect_delay)
                continue
            self.history.ok(op)
            return client, sub

    def _received(self, message, consumer: int) -> dict:
        return received_value(message, consumer=consumer)

    def _finish_consumer(self, consumer: int, process: int, client, sub) -> None:
        close_quietly(client)  # unacked messages go back to the queue for the drain

    # ------------------------------------------------------------------ drain

    def drain(self, *, quiet: float = 1.0, attempts: int = 3) -> list[dict]:
        """After `stop()`: read everything left until ``quiet`` seconds pass with nothing new;
        returns the drained message values. A cut-off attempt is recorded ``info`` with what it
        got, and the next attempt runs under a new process id."""
        if not self._stop_consumers.is_set():
            raise RuntimeError("call stop() before drain(): producers still running would never let it go quiet")
        drained: list[dict] = []
        for _ in range(attempts):
            process = self.ids.take()
            client = self._connect_once(process)
            if client is None:
                continue
            got: list[dict] = []
            op = self.history.invoke(process, "drain", None)
            try:
                sub = client.subscribe(self.destination, ack="client-individual", prefetch=self.prefetch)
                while (message := sub.receive(quiet)) is not None:
                    sub.ack(message)  # acked before counted: in the value means consumed
                    got.append(self._received(message, -1))
            except Exception as exc:  # noqa: BLE001
                self.history.info(op, f"drain cut off after {len(got)} messages: {exc}", value=got,
                                  node=self.node_of(client))
                drained += got
                continue
            finally:
                node = self.node_of(client)  # before the close: a failover client forgets its endpoint
                close_quietly(client)
            self.history.ok(op, got, node=node)
            return drained + got
        raise DrainIncomplete(f"drain of {self.destination} did not complete in {attempts} attempts: see the "
                              "history's 'drain' and 'connect' entries; is the broker up?", drained)

    def _connect_once(self, process: int) -> Client | None:
        op = self.history.invoke(process, "connect", None)
        try:
            client = self.make_client()
        except Exception as exc:  # noqa: BLE001
            self.history.fail(op, f"{type(exc).__name__}: {exc}")
            time.sleep(self.reconnect_delay)
            return None
        self.history.ok(op)
        return client


class GroupedQueueWorkload(QueueWorkload):
    """Producers spread their messages over message groups (``JMSXGroupID``), round robin."""

    kind = "grouped-queue"

    def __init__(self, history: History, make_client: ClientFactory, *, groups: Sequence[str] = ("g0", "g1", "g2"),
                 **options) -> None:
        if not groups:
            raise ValueError("a grouped workload needs at least one group id")
        super().__init__(history, make_client, groups=groups, **options)
