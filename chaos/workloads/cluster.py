"""Workloads on an Artemis-style cluster (issue 19): producers on one node, consumers spread over
the nodes, each op's completion naming the node that served it (``node``; the checkers
reports/checkers/redistribution.py and group_pinning.py read it).

* consumer churn: each consumer opens on its node, receives (and acks) for a while, closes and
  opens again after a pause, so queues keep losing and regaining their last consumer. That is
  what drives redistribution ("Message Redistribution": a queue without consumers hands its
  messages to nodes that have some, after the redistribution delay) and what ARTEMIS-4527 and
  ARTEMIS-4312 reported duplicates under. History: ``subscribe`` (value: destination and node),
  ``receive``/``ack`` as the queue workload, and ``close`` when a consumer closes on purpose.
* grouped sends: the same with ``JMSXGroupID`` on every message (the groups round robin), for
  clustered grouping ("Clustered Grouping": each group pinned to one node's queue). Churn is
  optional there (``lifetime_s=None``: consumers stay open).
* ``producers_after_consumers_s``: producers start once every consumer has subscribed, and that
  many seconds more (the consumers' demand crossing the cluster), so the first message of each
  group sees every node's consumers and its route may go to any of them (GRP-CLUSTER-3); None:
  everyone starts at once, and a group sent before a consumer's demand is known stays on the
  nodes seen so far. Bounded: producers start anyway after ``CONSUMERS_WAIT_S``.
* the drain reads every node: it opens one drain consumer per node (each its own process) before
  reading any, then reads them all until ``quiet`` seconds pass with nothing new on any of them.
  Opening them all first matters: a node whose queue has its own drain consumer redistributes
  nothing, so every message is drained on the node it was on (redistribution.py relies on it,
  together with the redistribution delay).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Sequence

from chaos.history import History
from conformance.clients import Client, Subscription
from machinery.waiting import Deadline, poll

from .base import ClientFactory, close_quietly
from .queue import DrainIncomplete, QueueWorkload


#: how long producers wait for every consumer to subscribe (``producers_after_consumers_s``)
#: before they start anyway: a consumer whose node is down would otherwise hold the run back
CONSUMERS_WAIT_S = 30.0


class ClusterWorkload(QueueWorkload):
    """``make_clients``: node name -> client factory for that node (in node order). Producers
    connect to ``producer_node``; consumer ``i`` to ``consumer_nodes[i % len]`` (default: every
    node but the producer's, so messages must cross the cluster). ``lifetime_s``: (min, max)
    seconds a consumer stays open before it closes (drawn per opening; None: no churn);
    ``pause_s``: how long it stays closed."""

    kind = "cluster-queue"

    def __init__(self, history: History, make_clients: dict[str, ClientFactory], *, producer_node: str,
                 consumer_nodes: Sequence[str] | None = None, lifetime_s: tuple[float, float] | None = (1.0, 3.0),
                 pause_s: float = 0.5, seed: int = 0, producers_after_consumers_s: float | None = None,
                 **options) -> None:
        if not make_clients:
            raise ValueError("a cluster workload needs a client factory per node")
        unknown = [n for n in (producer_node, *(consumer_nodes or ())) if n not in make_clients]
        if unknown:
            raise ValueError(f"nodes {unknown} are not among the cluster's {list(make_clients)}")
        if lifetime_s is not None and not 0 < lifetime_s[0] <= lifetime_s[1]:
            raise ValueError(f"lifetime_s is (min, max) seconds with 0 < min <= max, not {lifetime_s!r}")
        self.make_clients = dict(make_clients)
        self.producer_node = producer_node
        others = [n for n in make_clients if n != producer_node]
        self.consumer_nodes = tuple(consumer_nodes or others or [producer_node])
        self.lifetime_s = lifetime_s
        self.pause_s = pause_s
        self.seed = seed
        if producers_after_consumers_s is not None and producers_after_consumers_s < 0:
            raise ValueError(f"producers_after_consumers_s is 0 or more seconds, not {producers_after_consumers_s!r}")
        self.producers_after_consumers_s = producers_after_consumers_s
        self._subscribed: set[int] = set()
        self._all_subscribed = threading.Event()
        super().__init__(history, make_clients[producer_node], make_producer_client=make_clients[producer_node],
                         **options)

    def node_of_consumer(self, consumer: int) -> str:
        return self.consumer_nodes[consumer % len(self.consumer_nodes)]

    # ------------------------------------------------------------------ producers

    def _produce(self, producer: int) -> None:
        if self.producers_after_consumers_s is not None:
            stop = self._stop_producers
            # the event's own wait is the poll interval: it returns the moment the last consumer
            # subscribed; after CONSUMERS_WAIT_S the producers start anyway
            poll(lambda: self._all_subscribed.wait(0.1) or stop.is_set(), timeout=CONSUMERS_WAIT_S, interval=0)
            if stop.wait(self.producers_after_consumers_s):
                return
        super()._produce(producer)

    def _mark_subscribed(self, consumer: int) -> None:
        self._subscribed.add(consumer)  # set.add is atomic under the GIL
        if len(self._subscribed) >= self.consumers:
            self._all_subscribed.set()

    # ------------------------------------------------------------------ churning consumers

    def _consume(self, consumer: int) -> None:
        node = self.node_of_consumer(consumer)
        rng = random.Random(self.seed * 7919 + consumer)  # a run's churn is repeatable from its seed
        process = self.ids.take()
        stop = self._stop_consumers
        while not stop.is_set():
            client = self._connect(process, stop, self.make_clients[node])
            if client is None:
                return
            sub = self._subscribe_on(process, client, node)
            if sub is None:
                stop.wait(self.reconnect_delay)
                continue
            self._mark_subscribed(consumer)
            until = None if self.lifetime_s is None else Deadline(rng.uniform(*self.lifetime_s))
            still_open = True
            # a consumer's life, not a wait: each round receives, until its lifetime is over
            while still_open and not stop.is_set() and (until is None or not until.expired()):
                process, still_open = self._receive_once(process, client, sub, consumer)
            if still_open:
                # closed on purpose: what is dispatched and not acknowledged goes back to the queue
                op = self.history.invoke(process, "close", {"destination": self.destination, "node": node})
                close_quietly(client)
                self.history.ok(op, node=node)
            if until is not None:
                stop.wait(self.pause_s)

    def _subscribe_on(self, process: int, client: Client, node: str) -> Subscription | None:
        op = self.history.invoke(process, "subscribe", {"destination": self.destination, "node": node})
        try:
            sub = self._subscribe(client)
        except Exception as exc:  # noqa: BLE001 - refused or cut: try again on a new connection
            self.history.fail(op, str(exc), node=node)
            close_quietly(client)
            return None
        self.history.ok(op, node=self.node_of(client) or node)
        return sub

    # ------------------------------------------------------------------ drain of every node

    def drain(self, *, quiet: float = 1.0, attempts: int = 3, poll: float = 0.1) -> list[dict]:
        """After `stop()`: one drain per node, all opened before any is read, read round robin
        until ``quiet`` seconds pass with nothing new on any; each node's drain completes ``ok``
        with its messages (``node``: that node). A node whose drain cannot open or is cut off is
        tried again (``attempts`` rounds); raises DrainIncomplete when one never completes."""
        if not self._stop_consumers.is_set():
            raise RuntimeError("call stop() before drain(): producers still running would never let it go quiet")
        drained: list[dict] = []
        pending = list(self.make_clients)
        for _ in range(attempts):
            opened = []
            for node in pending:
                process = self.ids.take()
                client = self._connect_to(process, node)
                if client is None:
                    continue
                op = self.history.invoke(process, "drain", {"node": node})
                try:
                    sub = client.subscribe(self.destination, ack="client-individual", prefetch=self.prefetch)
                except Exception as exc:  # noqa: BLE001
                    self.history.info(op, f"drain could not subscribe: {exc}", value=[], node=node)
                    close_quietly(client)
                    continue
                opened.append((node, client, sub, op, []))
            done = self._read_all(opened, quiet, poll)
            for node, client, _sub, op, got in opened:
                close_quietly(client)
                drained += got
                if node in done:
                    self.history.ok(op, got, node=node)
                else:
                    self.history.info(op, f"drain of node {node} cut off after {len(got)} messages: {done.get(node)}",
                                      value=got, node=node)
            pending = [n for n in pending if done.get(n) is not True]
            if not pending:
                return drained
        raise DrainIncomplete(f"drain of {self.destination} did not complete on nodes {pending} in {attempts} "
                              "attempts: see the history's 'drain' and 'connect' entries", drained)

    def _read_all(self, opened: list, quiet: float, poll: float) -> dict:
        """Read every opened drain round robin until ``quiet`` seconds without a message on any:
        node -> True (read to the end) or the error that cut it off."""
        result: dict = {}
        last = time.monotonic()
        live = list(opened)
        while live and time.monotonic() - last < quiet:
            for entry in list(live):
                node, _client, sub, _op, got = entry
                try:
                    # each node read until it has nothing within ``poll``, then the next: a
                    # node's backlog never waits on the others' empty polls
                    while (message := sub.receive(poll)) is not None:
                        sub.ack(message)  # acked before counted: in the value means consumed
                        got.append(self._received(message, -1))
                        last = time.monotonic()
                except Exception as exc:  # noqa: BLE001
                    result[node] = f"{type(exc).__name__}: {exc}"
                    live.remove(entry)
        for node, *_ in live:
            result[node] = True
        return result

    def _connect_to(self, process: int, node: str) -> Client | None:
        op = self.history.invoke(process, "connect", {"node": node})
        try:
            client = self.make_clients[node]()
        except Exception as exc:  # noqa: BLE001
            self.history.fail(op, f"{type(exc).__name__}: {exc}", node=node)
            time.sleep(self.reconnect_delay)
            return None
        self.history.ok(op, node=node)
        return client


class GroupedClusterWorkload(ClusterWorkload):
    """Producers spread their messages over message groups (``JMSXGroupID``), round robin."""

    kind = "grouped-cluster-queue"

    def __init__(self, history: History, make_clients: dict[str, ClientFactory], *,
                 groups: Sequence[str] = ("g0", "g1", "g2"), **options) -> None:
        if not groups:
            raise ValueError("a grouped workload needs at least one group id")
        super().__init__(history, make_clients, groups=groups, **options)


