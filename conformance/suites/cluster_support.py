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
from contextlib import contextmanager
from typing import Iterator

import pytest

from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from conformance.suites.attempt_recorder import AttemptRecorder
from conformance.suites.network_support import OneNetworkAtATime, StompClients, parametrize_by_target
from conformance.targets.base import why_missing
from conformance.topology import Topology, TopologyUnsupported
from conformance.waiting import poll, wait_stable

__all__ = ["CAPABILITY", "SETTLE", "FORMATION", "AttemptRecorder", "ClusterPool", "LinkFaults", "StompClients",
           "cluster_suite_marks", "declare", "drain", "parametrize_by_target", "queue", "settle", "bodies",
           "stream_across_a_fault", "wait_quiet_sizes"]

CAPABILITY = "topology.cluster"
#: seconds for a subscription's notification to reach the other nodes (see the module docstring)
SETTLE = 2.0
#: bound on a cluster's links coming up (JVMs on a shared two-core machine)
FORMATION = 120.0


def cluster_suite_marks() -> list:
    return [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]


class LinkFaults:
    """The fault proxy in front of a cluster's links (``"cluster"`` in ``topology.proxied``): the
    launcher dials, for each link ``(source, target)``, the proxy `chaos.topology.BridgeProxies`
    creates in front of ``target``; `proxy` names it, `nemesis` (a `ProxyNemesis`) cuts and heals
    it while every client keeps its own connection to its node."""

    def __init__(self) -> None:
        from chaos.nemesis.proxy import ProxyNemesis
        from chaos.proxy import start_fault_proxy

        self.server = start_fault_proxy()
        self.nemesis = ProxyNemesis(self.server.api_url)
        self.routes: dict = {}

    def route(self, topology: Topology):
        """The launcher's ``bridge_route`` for ``topology`` (its proxies named after its prefix)."""
        from chaos.topology import BridgeProxies

        return self.routes.setdefault(topology, BridgeProxies(self.server.api_url, prefix=f"clu-{topology.prefix}"))

    def proxy(self, topology: Topology, source: str, target: str) -> str:
        """The proxy ``source``'s link to ``target`` dials."""
        return self.routes[topology].name_of(source, target)

    @contextmanager
    def diverted(self, topology: Topology, source: str, target: str, address: tuple[str, int]) -> Iterator[None]:
        """While in the block, ``source``'s link to ``target`` reaches ``address`` instead of
        ``target`` (the proxy's upstream moved there, which drops the link's connection); moved
        back to ``target`` afterwards."""
        route = self.routes[topology]
        name = self.proxy(topology, source, target)
        upstream = route.client.proxy(name)["upstream"]  # the node, as BridgeProxies set it
        route.client.update_proxy(name, upstream=f"{address[0]}:{address[1]}")
        try:
            yield
        finally:
            route.client.update_proxy(name, upstream=upstream)

    def stop(self) -> None:
        try:
            self.nemesis.teardown()  # heals whatever a failed test left cut
        finally:
            self.server.stop()


class ClusterPool:
    """The module's clusters, keyed by topology: one runs at a time (the machine has two cores).
    A topology with ``"cluster"`` in ``proxied`` runs its links through `links` (`LinkFaults`,
    started on first use, stopped with the pool)."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 target_name: str) -> None:
        self.target = request.config.stash[STATE].targets.get(target_name)
        if self.target is None or CAPABILITY not in self.target.capabilities():
            why = why_missing(self.target, CAPABILITY) if self.target is not None else "unknown target"
            pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {CAPABILITY}" + (f" ({why})" if why else ""))
        self.target_name = target_name
        self.tmp_path_factory = tmp_path_factory
        self.pool = OneNetworkAtATime()
        self.links: LinkFaults | None = None

    def get(self, topology: Topology):
        """The running cluster for ``topology`` (started on first use, every link up)."""
        def start():
            workdir = self.tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_.-]", "_", f"clu-{topology.prefix}"))
            route = None
            if "cluster" in topology.proxied:
                if self.links is None:
                    self.links = LinkFaults()
                route = self.links.route(topology)
            try:
                cluster = self.target.launch_topology(topology, Scenario(name=f"cluster-{topology.prefix}",
                                                                         protocols=("stomp",)), workdir,
                                                      bridge_route=route)
            except TopologyUnsupported as exc:
                # the target has clusters, but not this shape of one (e.g. links through the fault
                # proxy or UDP discovery on artemis:container): raised before anything starts
                pytest.skip(f"{NOT_APPLICABLE}{self.target_name} cannot launch this cluster: {exc}")
            wait_formed = getattr(cluster, "wait_formed", None)
            if wait_formed is not None:
                wait_formed(FORMATION)
            return cluster
        return self.pool.get(topology, start)

    def stop(self) -> None:
        try:
            self.pool.stop()
        finally:
            if self.links is not None:
                self.links.stop()


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


def stream_across_a_fault(cluster, links: LinkFaults, topology: Topology, destination: str, *, per_phase: int,
                          crash_target: bool, cut_for: float) -> tuple[list[str], dict[str, list[str]]]:
    """A->B under STRICT with B's queue and A's own (declared before): ``per_phase`` messages sent
    to A before, during and after a fault of the A->B link, each confirmed by a receipt. The fault
    holds what B sends back over the link (its acknowledgements of A's forwards, its pings) for
    ``cut_for`` s, so B takes in the forwards A sends meanwhile while A never hears that it did: A
    gives the silent link up (connection-ttl), dials again, and once the fault is healed sends every
    unacknowledged forward again, with the duplicate ids they had (artemis-clusters.md,
    use-duplicate-detection). ``crash_target``: B is also killed while the fault holds and started
    again, so it must recognise the resent copies after a crash and a recovery (its journal).

    Returns (the bodies A confirmed, in order; the bodies a consumer on each node then got)."""
    proxy = links.proxy(topology, "A", "B")
    sent: list[str] = []
    with StompClients() as clients:
        producer = clients.on(cluster["A"])
        sent += send_numbered(clients, cluster["A"], destination, per_phase, "before")
        links.nemesis.invoke("partition", proxy=proxy, direction="downstream")  # B -> A: the acknowledgements
        try:
            for i in range(per_phase):
                producer.send(destination, f"cut{i}")
                sent.append(f"cut{i}")
            time.sleep(cut_for)  # no event to poll: A gives the link up and retries meanwhile
            if crash_target:
                cluster["B"].kill()
        finally:
            links.nemesis.invoke("heal", proxy=proxy)
        if crash_target:
            cluster.start_broker("B", timeout=FORMATION)
        else:
            cluster.wait_formed(FORMATION)
        sent += send_numbered(clients, cluster["A"], destination, per_phase, "after")
    sizes = wait_quiet_sizes(cluster, destination, ("A", "B"), len(sent))
    got: dict[str, list[str]] = {}
    with StompClients() as clients:
        for node in ("A", "B"):
            consumer = clients.on(cluster[node]).subscribe(destination, ack="auto") if sizes[node] else None
            got[node] = bodies(drain(consumer)) if consumer is not None else []
    return sent, got


def wait_quiet_sizes(cluster, destination: str, nodes: tuple[str, ...], total: int) -> dict[str, int]:
    """Each node's queue size once ``total`` messages are held between them (forwarded ones may
    still be on a cluster link when the producer's receipts came back) and no count has moved for
    two seconds (room for a stray resend), or the last reading after a generous bound."""
    def read() -> dict[str, int]:
        return {n: cluster[n].queue_size(destination) for n in nodes}
    poll(read, lambda sizes: sum(sizes.values()) >= total, timeout=60, interval=0.3)
    return wait_stable(read, quiet=2.0, timeout=60, interval=0.3)
