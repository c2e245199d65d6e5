"""How fast a reference cluster node forwards queue messages to another (reference_broker/clustering),
beside the same node keeping them (message-load-balancing OFF), no assertions.

Two in-process nodes on loopback; N messages of S bytes are sent to node A's queue in batches on
A's loop; a consumer on B (ON_DEMAND: every message is forwarded A -> B over the cluster link,
acknowledged by B) or on A (OFF: nothing crosses) takes them. Prints messages/s from the first
send to the last delivery, best of R rounds.

    python3 benchmarks/cluster_forwarding_bench.py [--messages 5000] [--size 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from conformance.targets.reference.clustering import ReferenceCluster  # noqa: E402
from conformance.topology import ClusterConnection, Topology  # noqa: E402
from machinery.waiting import wait_until  # noqa: E402
from reference_broker.engine.message import Message  # noqa: E402
from reference_broker.engine.names import QUEUE, DestinationName  # noqa: E402


def one_round(mode: str, messages: int, size: int) -> float:
    cluster = ReferenceCluster(Topology(("A", "B"), cluster=ClusterConnection(message_load_balancing=mode),
                                        prefix="bench"))
    cluster.start(timeout=20)
    try:
        consumer_node = cluster["B"] if mode == "ON_DEMAND" else cluster["A"]
        done = threading.Event()
        count = [0]

        def deliver(consumer, ref):
            count[0] += 1
            if count[0] == messages:
                done.set()

        def subscribe():
            consumer_node.server.broker.connect().subscribe("c", DestinationName(QUEUE, "bench"), deliver=deliver)
        consumer_node.call(subscribe)
        if mode == "ON_DEMAND":
            wait_until(lambda: cluster["A"].cluster_call(lambda s: s.table.remote_queues("bench").get("B")), 10, 0.02,
                       on_timeout=lambda _: RuntimeError("A never learned B's consumer"))
        a = cluster["A"]
        connection = a.call(lambda: a.server.broker.connect())
        body = b"x" * size

        def send_batch(first: int, n: int):
            for i in range(first, first + n):
                connection.send(DestinationName(QUEUE, "bench"), Message(f"ID:{i}", "queue://bench", body))
        started = time.perf_counter()
        for first in range(0, messages, 500):
            a.call(lambda first=first: send_batch(first, min(500, messages - first)), timeout=60)
        if not done.wait(120):
            raise RuntimeError(f"{mode}: only {count[0]} of {messages} delivered")
        return messages / (time.perf_counter() - started)
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("reference_broker").setLevel(logging.WARNING)
    print(f"{args.messages} messages of {args.size} bytes, best of {args.rounds}")
    print(f"{'mode':<28}{'messages/s':>12}")
    for mode, label in (("OFF", "OFF (kept on A)"), ("ON_DEMAND", "ON_DEMAND (forwarded to B)")):
        best = max(one_round(mode, args.messages, args.size) for _ in range(args.rounds))
        print(f"{label:<28}{best:>12.0f}")


if __name__ == "__main__":
    main()
