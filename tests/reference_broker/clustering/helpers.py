"""Clients of in-process cluster nodes: engine connections run on the node's loop (the cluster
links between the nodes are real loopback sockets), so the tests read exactly what each node
received without a protocol client in the way."""

from __future__ import annotations

import itertools
import threading

from conformance.targets.reference.clustering import ReferenceCluster
from conformance.topology import ClusterConnection, Topology
from machinery.waiting import poll
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.message import Message
from reference_broker.engine.names import QUEUE, DestinationName

_ids = itertools.count(1)


class NodeClient:
    """One connection to a node: ``send`` to a queue, ``subscribe`` with a list the node's loop
    appends received message bodies to."""

    def __init__(self, node) -> None:
        self.node = node
        self.connection = node.call(lambda: node.server.broker.connect())
        self.received: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def send(self, queue: str, body: str, properties: dict | None = None, group: str | None = None) -> None:
        connection = self.connection

        def send():
            message = Message(connection.new_message_id(), f"queue://{queue}", body.encode(),
                              properties=dict(properties or {}), group_id=group)
            connection.send(DestinationName(QUEUE, queue), message)
        self.node.call(send)

    def subscribe(self, queue: str, selector: str | None = None, ack: AckMode = AckMode.AUTO) -> str:
        consumer_id = f"c{next(_ids)}"
        bodies = self.received.setdefault(consumer_id, [])

        def deliver(consumer, ref):
            with self._lock:
                bodies.append(ref.message.body.decode())

        self.node.call(lambda: self.connection.subscribe(consumer_id, DestinationName(QUEUE, queue), deliver=deliver,
                                                         ack_mode=ack, selector=selector))
        return consumer_id

    def unsubscribe(self, consumer_id: str) -> None:
        self.node.call(lambda: self.connection.unsubscribe(consumer_id))

    def bodies(self, consumer_id: str) -> list[str]:
        with self._lock:
            return list(self.received[consumer_id])

    def close(self) -> None:
        if self.node.running:
            self.node.call(self.connection.close)


def launch(nodes=("A", "B"), **options) -> ReferenceCluster:
    cluster = ReferenceCluster(Topology(tuple(nodes), cluster=ClusterConnection(**options), prefix="clu"))
    cluster.start(timeout=15)
    return cluster


def remote_consumers(node, queue: str, on: str) -> int:
    """How many consumers of ``queue`` node ``node`` knows node ``on`` has (its binding table)."""
    def read(service):
        found = service.table.remote_queues(queue).get(on)
        return found[1].consumers if found else -1
    return node.cluster_call(read)


def wait_remote_consumers(node, queue: str, on: str, count: int) -> int:
    return poll(lambda: remote_consumers(node, queue, on), lambda n: n == count, timeout=10)
