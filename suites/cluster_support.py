"""What the Artemis-style cluster suites share (test_cluster_*.py): one run per target, the
not-applicable verdict for targets without ``topology.cluster``, one cluster per module at a time
(launched through the topology contract), STOMP clients on nodes, queue creation on a node, and
collecting what consumers got.

Not a suite (no ``test_`` prefix). Written against the `Cluster` contract only
(conformance/topology.py), so the suites run on every target that declares ``topology.cluster``
(Artemis JVMs, the reference broker's clusters).

Demand crossing the cluster. Under ON_DEMAND a node forwards to another only once it knows that
node's queue has consumers (a notification over the cluster link); under STRICT, once it knows the
queue exists. No node counter says when that notification has arrived: Artemis 2.40's management
lists a remote binding (``listBindingsForAddress``, ``getRemoteQueueNames``) without its consumer
count (``RemoteQueueBindingImpl.toManagementString`` leaves it out; read with javap from the 2.40
jar). So `demand_crossed` proves it with a fact instead: after the test's subscriptions, a probe
consumer subscribes on the node whose demand must be known, on a probe queue of its own whose
address the same cluster connection covers, and probes are sent to the sending node until one
arrives. A node learns another's bindings and consumers in the order that node announced them (one
notification stream per link on Artemis, whole binding tables in order on the reference), so a probe
that crossed means every announcement made before the probe consumer's (the test's consumers, the
departure of `declare`'s) has been taken in. Where nothing can cross (load balancing OFF, a node
that must not join) there is no such fact and `settle` still waits `SETTLE` seconds; each such
call says why.

Sharing clusters. `ClusterPool` launches a topology once per module and hands it to every test of
the module that asks for it (tests of one topology are grouped, so each starts once and one runs at
a time). A test that stops, kills, pauses, cuts or reconfigures a node says so
(``clusters.get(T, disrupts=True)``): once it ran, the next test that does not disrupt gets a freshly
launched cluster, and disruptive tests run after the quiet ones of their topology. After each test
that did not disrupt, the `clusters` fixture checks it left nothing behind on the shared cluster
(`ClusterPool.check_left_clean`): no consumer on the queues it made, nothing waiting to be
forwarded. No two modules launch the same topology (each has its own prefix and options), so the
pool is per module; a session-wide cache would never hit.
"""

from __future__ import annotations

import re
import time
import uuid
from contextlib import contextmanager, suppress
from typing import Iterator

import pytest

from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from suites.attempt_recorder import AttemptRecorder
from suites.network_support import OneNetworkAtATime, StompClients, parametrize_by_target
from conformance.targets.base import why_missing
from conformance.deployment import Formation, Forwarding, part, require
from conformance.topology import Topology, TopologyUnsupported
from conformance.waiting import wait_stable
from machinery.waiting import poll

__all__ = ["CAPABILITY", "SETTLE", "FORMATION", "DEMAND_BOUND", "AttemptRecorder", "ClusterPool", "LinkFaults",
           "StompClients", "cluster_pool", "cluster_suite_marks", "clusters", "declare", "demand_crossed", "drain",
           "drain_each",
           "parametrize_by_target", "queue", "restarted_after", "settle", "bodies", "stream_across_a_fault",
           "wait_quiet_sizes"]

CAPABILITY = "topology.cluster"
#: seconds for a subscription's notification to reach the other nodes, where no probe can show it
#: arrived (see the module docstring)
SETTLE = 2.0
#: bound on a probe crossing the cluster once demand is announced (generous: JVMs on a loaded
#: two-core machine; a probe that crosses early ends the wait early)
DEMAND_BOUND = 30.0
#: seconds each probe is waited for before the next is sent (a probe sent before the demand was
#: known stays on the sender's probe queue: the next one is routed with what it knows by then)
PROBE_EVERY = 0.25
#: bound on a test's consumers leaving its queues and the forwards draining, after the test
LEFT_CLEAN_BOUND = 15.0
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
        from machinery.faultproxy import start_fault_proxy

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

    def dialled_port(self, topology: Topology, source: str, target: str) -> int:
        """The loopback port ``source``'s link to ``target`` dials (its proxy's listener)."""
        listen = self.routes[topology].client.proxy(self.proxy(topology, source, target))["listen"]
        return int(listen.rpartition(":")[2])

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
    started on first use, stopped with the pool). What the current test asked for is noted
    (`get`) so the `clusters` fixture can check, after it, that it left the cluster clean, or
    retire a cluster a test disrupted (see the module docstring)."""

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
        #: topologies whose running cluster a test disrupted: relaunched before a quiet test uses it
        self.disrupted: set[Topology] = set()
        #: what the current test used: topology -> whether it said it disrupts the cluster
        self.used: dict[Topology, bool] = {}

    def get(self, topology: Topology, *, disrupts: bool = False):
        """The running cluster for ``topology`` (started on first use, every link up). ``disrupts``:
        the test stops, kills, pauses, cuts or reconfigures a node (it may be handed a cluster an
        earlier disruptive test left as it was; a quiet test never is)."""
        self.used[topology] = self.used.get(topology, False) or disrupts
        if not disrupts and topology in self.disrupted:
            self.retire(topology)

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
            try:  # a test starts on a formed cluster: a node that does not know its peers keeps messages local
                require(cluster, Formation, "wait until the cluster formed").wait_formed(FORMATION)
            except BaseException:
                with suppress(Exception):  # the formation error is the one to report
                    cluster.stop()
                raise
            return cluster
        return self.pool.get(topology, start)

    def retire(self, topology: Topology) -> None:
        """Stop ``topology``'s cluster if it runs: the next `get` launches a fresh one."""
        self.disrupted.discard(topology)
        cluster = self.pool.current.pop(topology, None)
        if cluster is not None:
            cluster.stop()

    def begin_test(self) -> None:
        self.used = {}
        _made_queues.clear()

    def end_test(self, failed: bool) -> None:
        """After a test: a cluster it disrupted is marked so; one a quiet test used is checked
        (`check_left_clean`) and retired when it is not clean. A test that passed and left something
        behind fails in its teardown; one that failed, or reproduced a known deviation, may well
        have (the broker did what the test did not expect), so its cluster is only retired."""
        used, self.used = self.used, {}
        for topology, disrupted in used.items():
            if topology not in self.pool.current:
                continue
            if disrupted:
                self.disrupted.add(topology)
                continue
            left = self.check_left_clean(self.pool.current[topology], topology.nodes, list(_made_queues))
            if left:
                self.retire(topology)
                if not failed:
                    pytest.fail(f"the test left the shared {topology.prefix} cluster unclean (it was discarded): "
                                f"{left}", pytrace=False)

    @staticmethod
    def check_left_clean(cluster, names: tuple[str, ...], destinations: list[str]) -> list[str]:
        """What a test left behind on ``cluster`` (nodes ``names``): a node down, consumers on the
        queues it made, forwards still waiting on a node (read from the nodes' counters; [] when
        clean). Closed clients leave their queues a moment after the test: polled up to
        `LEFT_CLEAN_BOUND`."""

        def read() -> list[str]:
            found = []
            for name in names:
                node = cluster[name]
                if not node.running:
                    found.append(f"node {name} is down")
                    continue
                for destination in destinations:
                    consumers = node.consumer_count(destination)
                    if consumers:
                        found.append(f"{consumers} consumer(s) of {destination} on {name}")
                forwarding = part(node, Forwarding)  # None: the node cannot tell
                waiting = forwarding.forwarding_count() if forwarding is not None else 0
                if waiting:
                    found.append(f"{waiting} forward(s) waiting on {name}")
            return found
        return poll(read, lambda found: not found, timeout=LEFT_CLEAN_BOUND, interval=0.2)

    def stop(self) -> None:
        try:
            self.pool.stop()
        finally:
            if self.links is not None:
                self.links.stop()


#: the queues `queue` made during the current test (checked after it by `ClusterPool.end_test`)
_made_queues: list[str] = []


def queue(prefix: str = "clu") -> str:
    """A fresh queue destination (``queue://<prefix>.<random>``): one per test, on every node."""
    destination = f"queue://{prefix}.{uuid.uuid4().hex[:10]}"
    _made_queues.append(destination)
    return destination


def declare(clients: StompClients, node, destination: str) -> None:
    """Make ``destination``'s queue exist on ``node`` with no consumer: subscribe once and leave
    (queues are auto-created and kept once their consumer goes)."""
    subscription = clients.on(node).subscribe(destination, ack="auto")
    subscription.close()


@contextmanager
def restarted_after(cluster, name: str, timeout: float = FORMATION) -> Iterator[None]:
    """Start node ``name`` again (and wait for its links) when the block ends, failed or not, so
    the module's next test finds the cluster whole; not when the run is being interrupted (Ctrl-C,
    SIGTERM, SIGHUP: conformance/signals.py), which stops every broker: starting one again would
    only hold that stop up (up to ``timeout`` s)."""
    interrupted = False
    try:
        yield
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if not interrupted:
            cluster.start_broker(name, timeout=timeout)


def settle() -> None:
    """Wait `SETTLE` s for subscriptions to be known across the cluster, where no probe can show
    they are (`demand_crossed`; see the module docstring). Callers say why they cannot probe."""
    time.sleep(SETTLE)


def demand_crossed(cluster, destination: str, *pairs: tuple[str, str], probe_base: str | None = None) -> None:
    """Return once, for each ``(source, target)`` in ``pairs``, node ``source`` has taken in every
    binding and consumer announcement ``target`` made so far (the module docstring): a probe
    consumer on ``target``, on a queue of its own named after ``probe_base`` (default
    ``destination``: the same cluster connection covers it), gets a probe sent to ``source``.
    ``probe_base``: a clustered queue name, for a ``destination`` no cluster connection covers
    (the announcements still travel the same link). Fails the test's setup after `DEMAND_BOUND`."""
    base = probe_base or destination
    with StompClients() as clients:
        for source, target in pairs:
            probe = f"{base}.probe{uuid.uuid4().hex[:6]}"
            producer = clients.on(cluster[source])
            watcher = clients.on(cluster[target]).subscribe(probe, ack="auto")
            deadline = time.monotonic() + DEMAND_BOUND
            sent = 0
            while True:
                producer.send(probe, f"probe{sent}")
                sent += 1
                if watcher.receive(timeout=PROBE_EVERY) is not None:
                    break
                assert time.monotonic() < deadline, (
                    f"setup: none of {sent} probes sent to {source} on {probe} reached the consumer on {target} "
                    f"within {DEMAND_BOUND:.0f} s: {source} never learnt {target}'s demand\n{cluster.log_tail(20)}")
            watcher.close()


def drain(subscription, quiet: float = 2.0, ack: bool = True) -> list:
    """Every message ``subscription`` gets until none came for ``quiet`` s (acked when asked)."""
    messages = subscription.drain(quiet=quiet)
    if ack and subscription.ack_mode != "auto":
        for message in messages:
            subscription.ack(message)
    return messages


def drain_each(subscriptions: dict, quiet: float = 2.0) -> dict:
    """`drain` for several subscriptions at once, with one quiet window: everything each got until
    none of them got anything for ``quiet`` s (auto-acknowledged subscriptions only). Draining them
    one after the other waited a quiet window per subscription although their messages arrive side
    by side (each subscription's inbox fills in the background)."""
    got: dict = {key: [] for key in subscriptions}
    last = time.monotonic()
    while time.monotonic() - last < quiet:
        for key, subscription in subscriptions.items():
            message = subscription.receive(timeout=0.02)
            while message is not None:
                got[key].append(message)
                last = time.monotonic()
                message = subscription.receive(timeout=0)
    return got


def bodies(messages) -> list[str]:
    return [m.text for m in messages]


@pytest.fixture(scope="module")
def cluster_pool(request, target_name, tmp_path_factory):
    """One `ClusterPool` per suite module (each module imports this fixture and `clusters`): one
    cluster at a time, stopped when the module ends."""
    pool = ClusterPool(request, tmp_path_factory, target_name)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def clusters(request, cluster_pool):
    """The module's `ClusterPool` for one test; after it, the shared clusters it used are checked
    clean or retired (`ClusterPool.end_test`)."""
    cluster_pool.begin_test()
    failures = request.session.testsfailed
    yield cluster_pool
    # the call's report is logged before teardown: a failure counted, or a known deviation
    # (a strict xfail, which the count leaves out), means the cluster's state is not to be judged
    failed = request.session.testsfailed > failures or request.node.get_closest_marker("xfail") is not None
    cluster_pool.end_test(failed)


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
            require(cluster, Formation, "wait for the healed link").wait_formed(FORMATION)
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
