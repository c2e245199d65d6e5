"""What the Artemis-style cluster suites share (test_cluster_*.py): one run per target, the
not-applicable verdict for targets without ``topology.cluster``, one cluster per module at a time
(launched through the topology contract), STOMP clients on nodes, queue creation on a node, and
collecting what consumers got.

Not a suite (no ``test_`` prefix). Written against the `Cluster` contract only
(conformance/topology.py), so the suites run on every target that declares ``topology.cluster``
(Artemis JVMs, the reference broker's clusters).

Demand crossing the cluster. Under ON_DEMAND a node forwards to another only once it knows that
node's queue has consumers (a notification over the cluster link). No node counter says when that
notification has arrived (Artemis's management lists remote bindings without their consumer
counts), so after subscribing, `settle` waits `SETTLE` seconds. A slow machine can only make a
test wait in vain (a false failure), never pass a broker that does not forward.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from conformance.suites.network_support import OneNetworkAtATime, StompClients, parametrize_by_target
from conformance.targets.base import why_missing
from conformance.topology import Topology

__all__ = ["CAPABILITY", "SETTLE", "FORMATION", "ClusterPool", "StompClients", "cluster_suite_marks", "declare",
           "drain", "parametrize_by_target", "queue", "settle", "bodies"]

CAPABILITY = "topology.cluster"
#: seconds for a subscription's notification to reach the other nodes (see the module docstring)
SETTLE = 2.0
#: bound on a cluster's links coming up (JVMs on a shared two-core machine)
FORMATION = 120.0


def cluster_suite_marks() -> list:
    return [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]


class ClusterPool:
    """The module's clusters, keyed by topology: one runs at a time (the machine has two cores)."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 target_name: str) -> None:
        self.target = request.config.stash[STATE].targets.get(target_name)
        if self.target is None or CAPABILITY not in self.target.capabilities():
            why = why_missing(self.target, CAPABILITY) if self.target is not None else "unknown target"
            pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {CAPABILITY}" + (f" ({why})" if why else ""))
        self.target_name = target_name
        self.tmp_path_factory = tmp_path_factory
        self.pool = OneNetworkAtATime()

    def get(self, topology: Topology):
        """The running cluster for ``topology`` (started on first use, every link up)."""
        def start():
            workdir = self.tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_.-]", "_", f"clu-{topology.prefix}"))
            cluster = self.target.launch_topology(topology, Scenario(name=f"cluster-{topology.prefix}",
                                                                     protocols=("stomp",)), workdir)
            wait_formed = getattr(cluster, "wait_formed", None)
            if wait_formed is not None:
                wait_formed(FORMATION)
            return cluster
        return self.pool.get(topology, start)

    def stop(self) -> None:
        self.pool.stop()


def queue(prefix: str = "clu") -> str:
    """A fresh queue destination (``queue://<prefix>.<random>``): one per test, on every node."""
    return f"queue://{prefix}.{uuid.uuid4().hex[:10]}"


def declare(clients: StompClients, node, destination: str) -> None:
    """Make ``destination``'s queue exist on ``node`` with no consumer: subscribe once and leave
    (queues are auto-created and kept once their consumer goes)."""
    subscription = clients.on(node).subscribe(destination, ack="auto")
    subscription.close()


def settle() -> None:
    """Wait for subscriptions to be known across the cluster (see the module docstring)."""
    time.sleep(SETTLE)


def drain(subscription, quiet: float = 2.0, ack: bool = True) -> list:
    """Every message ``subscription`` gets until none came for ``quiet`` s (acked when asked)."""
    messages = subscription.drain(quiet=quiet)
    if ack and subscription.ack_mode != "auto":
        for message in messages:
            subscription.ack(message)
    return messages


def bodies(messages) -> list[str]:
    return [m.text for m in messages]


@pytest.fixture(scope="module")
def clusters(request, target_name, tmp_path_factory):
    """One `ClusterPool` per suite module (each module imports this fixture): one cluster at a
    time, stopped when the module ends."""
    pool = ClusterPool(request, tmp_path_factory, target_name)
    try:
        yield pool
    finally:
        pool.stop()


def send_numbered(clients: StompClients, node, destination: str, count: int, tag: str = "m") -> list[str]:
    """Send ``count`` messages ``<tag>0`` .. to ``destination`` on ``node``; their bodies, in order."""
    producer = clients.on(node)
    sent = [f"{tag}{i}" for i in range(count)]
    for body in sent:
        producer.send(destination, body)
    return sent
