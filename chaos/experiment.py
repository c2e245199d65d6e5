"""Run one chaos experiment: launch the target, run the workload under the nemesis schedule,
heal, drain, and leave a history (Jepsen's roles: the harness records; checkers judge later).

`run_experiment` never judges the history itself: chaos/ does not import reports/. Whoever ran
it (the CLI, a test) hands ``result.history_path`` to the checkers (reports/judge.py). The
history is self-contained: the experiment's settings go in as its first line, the broker's
counters read after the drain and the run's outcome as its last ones (harness records,
chaos/history.py), so a checker needs nothing from the run directory.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from chaos.experiment_file import (ClusterTopology, Experiment, ExperimentError, FaultPlane, NemesisSection,
                                   NetworkTopology, SharedStoreTopology, SingleTopology)
from chaos.exit_watch import ExitWatch, nodes_a_fault_may_stop
from chaos.history import (HARNESS_BROKER_COUNTERS, HARNESS_CLUSTER_HELD, HARNESS_EXPERIMENT, HARNESS_FORMAT,
                           HARNESS_RUN_END, History)
from chaos.lockloss_fault import LockLossFault
from chaos.nemesis.base import NemesisError
from chaos.nemesis.master import CurrentMasterNemesis
from chaos.nemesis.process import ProcessNemesis
from chaos.nemesis.proxy import ProxyNemesis
from machinery.faultproxy import FaultProxyHandle, start_fault_proxy
from machinery.faultproxy.client import ToxiproxyClient, split_address
from chaos.schedule import build_schedule, postpone
from chaos.topology import RunningTopology, launch_topology
from chaos.transport_log import TransportLog, worker_of_thread
from chaos.workloads.cluster import ClusterWorkload, GroupedClusterWorkload
from chaos.workloads.queue import DrainIncomplete, GroupedQueueWorkload, QueueWorkload
from chaos.workloads.topic import TopicFanoutWorkload
from conformance.targets.registry import UnknownTarget, resolve
from conformance.clients import connect, connect_failover
from machinery.waiting import Deadline

@dataclass
class ExperimentResult:
    name: str
    run_id: str
    history_path: Path
    seconds: float
    sent_ok: int
    received_ok: int
    drained: int
    faults: int
    target: str
    workload_errors: list[str] = field(default_factory=list)
    topology: str = "single"
    #: the broker's discarded counter of every subscription on a topic workload's destination,
    #: read after the drain and before the subscriptions closed (None: not readable here)
    broker_discards: list[int] | None = None
    #: the subscribers that connected through the slow proxy (topic workloads)
    slow_subscribers: list[int] = field(default_factory=list)
    #: nemesis steps that failed (the schedule did not happen as written)
    nemesis_errors: list[str] = field(default_factory=list)
    #: a node no fault of the experiment stops that stopped anyway (chaos/exit_watch.py); the run
    #: ended there and was not drained
    deployment_errors: list[str] = field(default_factory=list)
    #: network topology: how many times its bridges were established, first time included (a
    #: run whose cuts took the bridges down shows more than one per bridge); None elsewhere
    bridge_establishments: int | None = None
    #: failover clients: worker -> {transport event kind: count}, from ``transport.jsonl`` beside
    #: the history (chaos/transport_log.py); None when the clients do not fail over
    transport_events: dict[str, dict[str, int]] | None = None
    #: lock-loss faults: per fault, the node, detection_s / takeover_s / overlap_s and the timeline
    #: of serving nodes (chaos/lockloss_fault.py); None without a lock-loss nemesis
    lock_loss: list[dict] | None = None


#: start-up attempts of a drain's failover client when the experiment's options set none: with
#: failover's defaults retrying for ever, a run in which no broker came back (e.g. both nodes of a
#: shared-store pair stopped after their leases expired) would drain for ever instead of ending
#: with "drain incomplete". At the reconnect delay's usual cap (1-30 s) this is minutes.
DRAIN_STARTUP_ATTEMPTS = 60


def _bounded_startup(options: str) -> str:
    """``options`` with startupMaxReconnectAttempts set, unless the experiment set it itself."""
    if "startupmaxreconnectattempts=" in options.lower():
        return options
    return "&".join(filter(None, (options, f"startupMaxReconnectAttempts={DRAIN_STARTUP_ATTEMPTS}")))


def _client_factory(exp: Experiment, addresses: list[tuple[str, int]],
                    transport_log: TransportLog | None = None, *, for_drain: bool = False) -> Callable:
    protocol = exp.target.protocol
    # Workload messages carry their id, producer and sequence as properties: MQTT 5 user
    # properties (3.1.1 has none).
    options = {"mqtt_version": 5} if protocol == "mqtt" else {}
    if exp.target.failover:
        uris = ",".join(f"tcp://{host}:{port}" for host, port in addresses)
        query = _bounded_startup(exp.target.failover_options) if for_drain else exp.target.failover_options
        uri = f"failover:({uris})?{query}"
        if transport_log is None:
            return lambda: connect_failover(uri, protocol, **options)

        def make_logged():
            # Workers create their clients on their own threads: the thread names the worker.
            worker = worker_of_thread(threading.current_thread().name)
            return connect_failover(uri, protocol, listener=transport_log.listener(worker), **options)
        return make_logged
    if len(addresses) > 1:
        raise ExperimentError(f"a {exp.topology.kind} topology has {len(addresses)} brokers: clients need "
                              "[target] failover = true to find the master")
    host, port = addresses[0]
    return lambda: connect(host, port, protocol, **options)


class _ProxyGroupFault:
    """One [[nemesis]] entry acting through the fault proxy on a group of proxies (one per broker
    node): every client's proxies ("all") or the slow subscribers' ("slow")."""

    name = "proxy"

    def __init__(self, api_url: str, proxies: list[str], history: History) -> None:
        self.nemesis = ProxyNemesis(api_url, history, node="proxy")
        self.proxies = proxies

    def setup(self) -> None:
        self.nemesis.setup()

    def invoke(self, f: str, **params) -> None:
        for proxy in self.proxies:
            self.nemesis.invoke(f, proxy=proxy, **params)

    def teardown(self) -> None:
        self.nemesis.teardown()


@dataclass
class _Faulted:
    """What the nemeses of a run act on: the deployment, the history they record into, and the
    fault proxy in front of the clients with its proxies per client group (None and empty when no
    fault acts on the clients)."""

    topology: RunningTopology
    history: History
    client_proxy: FaultProxyHandle | None
    client_proxies: dict[str, list[str]]


def _process_nemesis(n: NemesisSection, faulted: _Faulted) -> ProcessNemesis | CurrentMasterNemesis:
    """A process fault: on the node named, or on whichever node serves when it is ``master``."""
    topology = faulted.topology
    if n.node == "master":
        return CurrentMasterNemesis(topology.nodes, topology.master, faulted.history)
    return ProcessNemesis(topology.nodes[n.node], faulted.history, node=n.node)


def _proxy_nemesis(n: NemesisSection, faulted: _Faulted) -> _ProxyGroupFault:
    """A proxy fault: on the bridges' or cluster links' proxies (the deployment's own fault proxy),
    else on the proxies of the client group it names."""
    if n.link in ("bridges", "cluster"):
        return _ProxyGroupFault(faulted.topology.proxy.api_url, faulted.topology.bridge_proxies, faulted.history)
    return _ProxyGroupFault(faulted.client_proxy.api_url, faulted.client_proxies[n.clients], faulted.history)


def _lock_loss_fault(n: NemesisSection, faulted: _Faulted) -> LockLossFault:
    """A store fault: on the named node's link to the shared store (the deployment's rig)."""
    topology, history = faulted.topology, faulted.history
    nemesis = topology.lock_nemesis(history)
    if nemesis is None:
        raise ExperimentError("a lock-loss nemesis needs the store on the simulated NFS or in a database behind the "
                              "fault proxy ([topology] store = \"nfs\" or \"jdbc\")")
    return LockLossFault(nemesis, topology.answering_nodes, listening_nodes=topology.listening_nodes, fault=n.fault,
                         node=n.node, params=n.store_fault_params())


#: the nemesis that runs a [[nemesis]] entry, by what its kind acts on (chaos/experiment_file.py
#: declares each kind's plane): one builder per plane, never a switch on the kind's name
NEMESIS_OF_PLANE: dict[FaultPlane, Callable[[NemesisSection, _Faulted], object]] = {
    FaultPlane.PROCESS: _process_nemesis,
    FaultPlane.PROXY: _proxy_nemesis,
    FaultPlane.STORE: _lock_loss_fault,
}


class _Progress:
    """One status line per second on a terminal, one every 5 s otherwise (CI logs)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.tty = sys.stdout.isatty()
        self.last = 0.0

    def show(self, elapsed: float, duration: float, workload: QueueWorkload, faults: int) -> None:
        now = time.monotonic()
        if now - self.last < (1.0 if self.tty else 5.0):
            return
        self.last = now
        line = (f"  {elapsed:5.1f}/{duration:.0f} s  sent ok {workload.sent_ok:>6}  "
                f"received {workload.received_ok:>6}  faults {faults}")
        if self.tty:
            sys.stdout.write("\r" + line)
            sys.stdout.flush()
        else:
            self.write(line)

    def done(self) -> None:
        if self.tty:
            sys.stdout.write("\n")


def run_experiment(exp: Experiment, out_dir: Path, *, progress: Callable[[str], None] = print,
                   checkers: dict | None = None) -> ExperimentResult:
    """Run ``exp``; the history goes to ``out_dir/history.jsonl``. Raises ExperimentError when the
    target cannot run it (unknown, not installed, cannot be killed for a kill schedule).
    ``checkers``: the run's checker list, written into the history's header as given (the caller
    plans it: reports/check_plan.py `checker_list_for`; chaos/ never decides what judges a run)."""
    try:
        target = resolve(exp.target.name)
    except UnknownTarget as exc:
        raise ExperimentError(f"[target] name: {exc}") from None
    ok, reason = target.availability()
    if not ok:
        raise ExperimentError(f"target {exp.target.name} cannot run here: {reason}")
    process_faults = [n for n in exp.nemesis if n.plane is FaultPlane.PROCESS]
    if process_faults and exp.topology.launched_by_every_target and "process.kill" not in target.capabilities():
        raise ExperimentError(f"target {exp.target.name} cannot be killed or paused by the harness "
                              "(it lacks process.kill); use e.g. 'reference:process'")
    run_id = f"{exp.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    out_dir.mkdir(parents=True, exist_ok=True)
    history_path = out_dir / "history.jsonl"
    with tempfile.TemporaryDirectory(prefix="brokerconf-chaos-") as workdir:
        progress(f"experiment {exp.name}: starting {exp.topology.kind} topology on {exp.target.name}")
        topology = launch_topology(exp, target, Path(workdir))
        proxy = None
        try:
            if _proxy_groups(exp):
                proxy = start_fault_proxy()
            return _run(exp, topology, run_id, history_path, progress, proxy, checkers)
        finally:
            if proxy is not None:
                proxy.stop()
            topology.stop()
            _keep_broker_log(topology, out_dir)


#: the broker log lines kept beside the history (the broker's own workdir is temporary)
BROKER_LOG_LINES = 400


def _keep_broker_log(topology: RunningTopology, out_dir: Path) -> None:
    """The end of the brokers' logs as ``broker-log-tail.txt`` beside the history: the broker's
    side of a finding (its kills, restarts and journal reloads) outlives the run's temporary
    workdir. Brokers that keep no log file (in-process) write nothing."""
    try:
        tail = topology.log_tail(BROKER_LOG_LINES)
    except OSError as exc:
        tail = f"(the broker log could not be read: {exc})"
    if tail.strip():
        (out_dir / "broker-log-tail.txt").write_text(tail, encoding="utf-8")


def _wait_consumers_gone(topology: RunningTopology, destination: str, progress) -> None:
    """Before the drain: the workload's closed consumers gone on the broker too, so that the drain
    is the destination's only consumer (fifo judges one consumer at a time). A broker whose counts
    cannot be read, or that still counts consumers after the wait, is said and drained anyway."""
    try:
        counts = topology.wait_consumers_gone(destination)
    except Exception as exc:  # noqa: BLE001 - the drain goes on; the line says why it did not wait
        progress(f"  could not read {destination}'s consumer count before the drain: {type(exc).__name__}: {exc}")
        return
    left = {node: n for node, n in counts.items() if n}
    if left:
        progress(f"  {destination} still counts consumers before the drain: {left}")


def _drain_network(exp: Experiment, topology: RunningTopology, workload, progress) -> tuple[list[dict], list[str]]:
    """Drain the consumer node until the rest of the network holds nothing for the destination.

    A quiet consumer node is not enough: messages still on the producer node (waiting for the
    healed bridge to re-form, or for the drain's own consumer to create demand there) would look
    lost. So each round drains until quiet, then asks the other brokers how many messages they
    still hold; another round follows while any do, up to a deadline long enough for a bridge to
    reconnect (the reconnect delays) and its backlog to cross. Messages still held then are
    reported, and the run's verdict cannot be true (they were never consumed)."""
    destination = exp.workload.destination
    others = [n for n in topology.names if n != exp.topology.consumer_node]
    deadline = Deadline(30.0 + 2 * exp.topology.effective("max_reconnect_delay_ms") / 1000)
    drained: list[dict] = []
    # rounds, not a `wait_until`: each round drains, and what it drained is kept
    while True:
        try:
            drained += workload.drain(quiet=exp.drain_quiet_s)
        except DrainIncomplete as exc:
            return drained + exc.drained, [str(exc)]
        held = {n: topology.held(n, destination) for n in others}
        if not any(held.values()):
            return drained, []
        if deadline.expired():
            message = (f"after the drain other brokers still hold messages of {destination}: {held} (the healed "
                       "bridges did not deliver them to the consumer node in time); see the broker logs")
            progress(f"  {message}")
            return drained, [message]
        progress(f"  brokers {held} still hold messages of {destination}: draining again")


#: Artemis's call-timeout, its default (artemis-clusters.md, "Configuring Cluster Connections";
#: CLU-CC-CALL-1): a cluster bridge whose connection attempt gets no answer (its peer killed
#: behind the fault proxy, then the link cut) waits this long before it retries. Measured on
#: artemis-clustered-grouping (group pinned to B, B killed, link cut and healed): A's bridge
#: logged a failed attempt, then nothing for 30.0 s, then reconnected, while 540 messages waited
#: in A's store-and-forward queue; with call-timeout 5000 the same gap was 5.5 s. One run had two
#: such waits in a row (61 s from B's kill to the bridge reconnecting), so the drain allows two.
CLUSTER_CALL_TIMEOUT_S = 30.0
#: how many call-timeouts the cluster drain waits out (see above)
CLUSTER_CALL_TIMEOUTS = 2


def _cluster_held(topology: RunningTopology, destination: str) -> dict[str, dict]:
    """Node -> what it still holds: ``queue`` (messages of ``destination``) and ``forwarding``
    (messages on their way to another node; None when the launcher cannot tell), or ``error``."""
    held: dict[str, dict] = {}
    for node in topology.names:
        try:
            held[node] = {"queue": topology.held(node, destination), "forwarding": topology.forwarding(node)}
        except Exception as exc:  # noqa: BLE001 - recorded: a node not asked may hold anything
            held[node] = {"error": f"{type(exc).__name__}: {exc}"}
    return held


def _still_held(held: dict[str, dict]) -> dict[str, dict]:
    return {n: h for n, h in held.items() if "error" in h or h["queue"] or h["forwarding"]}


def _drain_cluster(exp: Experiment, topology: RunningTopology, workload: ClusterWorkload, history: History,
                   progress, *, wait_s: float | None = None, poll_s: float = 0.5) -> tuple[list[dict], list[str]]:
    """Drain every node until no node holds anything for the destination, in its queue or on its
    way to another node.

    A quiet drain is not enough on a cluster: a message routed to a node whose cluster bridge is
    still reconnecting waits in the sending node's store-and-forward queue, where no consumer
    reads it, and would look lost (artemis-clustered-grouping lost 361 of 750 that way before this
    existed; 30 s later they were all in B's queue). So after each drain round every node is asked
    (the ``cluster-held`` harness record keeps the answers); while messages are on their way the
    next round waits for them to land, up to ``wait_s`` (default: two of Artemis's call-timeouts
    and two retry intervals, plus 10 s). What is still held then is reported: the run cannot be
    valid."""
    destination = exp.workload.destination
    if wait_s is None:
        retry_s = exp.topology.effective("max_retry_interval_ms") / 1000
        wait_s = CLUSTER_CALL_TIMEOUTS * CLUSTER_CALL_TIMEOUT_S + 2 * retry_s + 10.0
    deadline = time.monotonic() + wait_s
    drained: list[dict] = []
    rounds = 0
    while True:
        try:
            drained += workload.drain(quiet=exp.drain_quiet_s)
        except DrainIncomplete as exc:
            return drained + exc.drained, [str(exc)]
        rounds += 1
        held = _cluster_held(topology, destination)
        history.harness(HARNESS_CLUSTER_HELD, {"destination": destination, "held": held, "round": rounds})
        waiting = _still_held(held)
        if not waiting:
            return drained, []
        # messages on their way: wait until they have landed in a queue a drain can read
        if any(h.get("forwarding") for h in waiting.values()):
            progress(f"  cluster nodes still forward messages of {destination}: {waiting}; waiting for them to land")
        while any(h.get("forwarding") for h in waiting.values()) and time.monotonic() < deadline:
            time.sleep(poll_s)
            held = _cluster_held(topology, destination)
            waiting = _still_held(held)
        if time.monotonic() >= deadline:
            if waiting:
                history.harness(HARNESS_CLUSTER_HELD, {"destination": destination, "held": held, "round": rounds})
                message = (f"after the drain ({rounds} rounds, {wait_s:.0f} s) cluster nodes still hold messages of "
                           f"{destination}: {waiting} (queue: in the node's queue; forwarding: in its store-and-"
                           "forward queues towards another node); see the cluster-held records and the broker logs")
                progress(f"  {message}")
                return drained, [message]
        progress(f"  cluster nodes hold messages of {destination}: {waiting}: draining again")


def _proxy_groups(exp: Experiment) -> set[str]:
    """Which client groups connect through the fault proxy: "all" when a proxy fault acts on every
    client, "slow" when the workload has slow subscribers."""
    groups = {n.clients for n in exp.nemesis if n.plane is FaultPlane.PROXY and n.link == "clients"}
    if exp.workload.slow_subscribers:
        groups.add("slow")
    return groups


def _route_through_proxy(proxy, name: str, host: str, port: int) -> tuple[str, int]:
    """Create proxy ``name`` in front of one broker address; clients connect to its listen address."""
    created = ToxiproxyClient(proxy.api_url).create_proxy(name, upstream=f"{host}:{port}")
    return split_address(created["listen"])


def _proxied(exp: Experiment, topology: RunningTopology, proxy, group: str) -> tuple[list[str], list[tuple[str, int]]]:
    """One proxy per broker node for a client group: (proxy names, the addresses clients use)."""
    names, addresses = [], []
    for node, (host, port) in zip(topology.names, topology.addresses(exp.target.protocol)):
        name = f"{group}-{node}"
        names.append(name)
        addresses.append(_route_through_proxy(proxy, name, host, port))
    return names, addresses


def node_names(names, *address_lists: list[tuple[str, int]]) -> dict[str, str]:
    """Client address ``host:port`` -> node name, for the history's ``node`` of each operation
    (chaos/workloads/base.py NodeNames): each list holds one address per node, in the order of
    ``names`` (the brokers' own, or the fault proxy's in front of each)."""
    out: dict[str, str] = {}
    for addresses in address_lists:
        if len(addresses) != len(names):
            raise ValueError(f"{len(addresses)} addresses for {len(names)} nodes {list(names)}")
        for name, (host, port) in zip(names, addresses):
            out[f"{host}:{port}"] = name
    return out


def _make_workload(exp: Experiment, history: History, make_client, make_slow_client, make_producer_client=None,
                   names: dict[str, str] | None = None):
    w = exp.workload
    common = dict(destination=w.destination, producers=w.producers, rate=w.rate, persistent=w.persistent,
                  ack=w.ack, prefetch=w.prefetch, node_names=names)
    if make_producer_client is not None:  # network topology: producers on one broker, consumers on another
        common["make_producer_client"] = make_producer_client
    if w.fans_out:
        return TopicFanoutWorkload(history, make_client, subscribers=w.subscribers, slow_subscribers=w.slow_subscribers,
                                   make_slow_client=make_slow_client, **common)
    if w.grouped:
        return GroupedQueueWorkload(history, make_client, consumers=w.consumers, groups=w.groups, **common)
    return QueueWorkload(history, make_client, consumers=w.consumers, **common)


def _cluster_workload(exp: Experiment, history: History, make_clients: dict, names: dict[str, str]) -> ClusterWorkload:
    w = exp.workload
    options = dict(producer_node=exp.topology.producer_node, consumer_nodes=exp.topology.consumer_nodes or None,
                   lifetime_s=tuple(w.consumer_lifetime_s) if w.consumer_lifetime_s else None,
                   pause_s=w.consumer_pause_s, producers_after_consumers_s=w.producers_after_consumers_s,
                   seed=exp.seed, destination=w.destination, producers=w.producers,
                   consumers=w.consumers, rate=w.rate, persistent=w.persistent, ack=w.ack, prefetch=w.prefetch,
                   node_names=names)
    if w.grouped:
        return GroupedClusterWorkload(history, make_clients, groups=w.groups, **options)
    return ClusterWorkload(history, make_clients, **options)


@dataclass(frozen=True)
class _RunContext:
    """What a run's workload and drain are built from: the experiment, the launched deployment,
    the history, and the clients' addresses (``all`` and ``slow``: direct or through the fault
    proxy) with the node each address is."""

    exp: Experiment
    topology: RunningTopology
    history: History
    transport_log: TransportLog | None
    addresses: dict[str, list[tuple[str, int]]]
    names: dict[str, str]
    progress: Callable[[str], None]

    def client_of(self, node: str) -> Callable:
        """A client factory for node ``node``'s own address."""
        return _client_factory(self.exp, [self.topology.address_of(node, self.exp.target.protocol)],
                               self.transport_log)


def _workload_over_every_node(run: _RunContext):
    # every client lists every node (failover finds whoever serves); slow subscribers through
    # their own proxies
    return _make_workload(run.exp, run.history, _client_factory(run.exp, run.addresses["all"], run.transport_log),
                          _client_factory(run.exp, run.addresses["slow"], run.transport_log), names=run.names)


def _drain_over_every_node(run: _RunContext, workload) -> tuple[list[dict], list[str]]:
    exp = run.exp
    if exp.target.failover:
        # the drain's new clients give up if no broker answers (DRAIN_STARTUP_ATTEMPTS)
        workload.make_client = _client_factory(exp, run.addresses["all"], run.transport_log, for_drain=True)
    _wait_consumers_gone(run.topology, exp.workload.destination, run.progress)
    try:
        return workload.drain(quiet=exp.drain_quiet_s), []
    except DrainIncomplete as exc:
        # Judged anyway: the history shows no completed drain, so the verdict cannot be "true".
        run.progress(f"  {exc}")
        return exc.drained, [str(exc)]


def _network_workload(run: _RunContext):
    # Consumers (and the drain) on the consumer node, producers on the producer node: the
    # messages must cross the bridges to be consumed.
    consumer_client = run.client_of(run.exp.topology.consumer_node)
    return _make_workload(run.exp, run.history, consumer_client, consumer_client,
                          run.client_of(run.exp.topology.producer_node), run.names)


def _cluster_run_workload(run: _RunContext):
    # Producers on the producer node, consumers spread over the consumer nodes, the drain on
    # every node (chaos/workloads/cluster.py)
    return _cluster_workload(run.exp, run.history, {node: run.client_of(node) for node in run.topology.names},
                             run.names)


@dataclass(frozen=True)
class _ShapeRun:
    """How a run of one [topology] shape places its workload's clients, and drains its queue (a
    topic workload drains itself before any of these; only a single broker and a shared store run
    topics, chaos/experiment_file.py)."""

    workload: Callable[[_RunContext], object]
    drain: Callable[[_RunContext, object], tuple[list[dict], list[str]]]


#: the runner's one dispatch on the [topology] shape (issue 27: keyed by the section's class, no
#: kind names); tests/chaos/test_topology_shapes.py checks every shape has its entry
SHAPE_RUNS: dict[type, _ShapeRun] = {
    SingleTopology: _ShapeRun(_workload_over_every_node, _drain_over_every_node),
    SharedStoreTopology: _ShapeRun(_workload_over_every_node, _drain_over_every_node),
    NetworkTopology: _ShapeRun(_network_workload,
                               lambda run, workload: _drain_network(run.exp, run.topology, workload, run.progress)),
    ClusterTopology: _ShapeRun(_cluster_run_workload,
                               lambda run, workload: _drain_cluster(run.exp, run.topology, workload, run.history,
                                                                    run.progress)),
}


def _run(exp: Experiment, topology: RunningTopology, run_id: str, history_path: Path, progress, proxy,
         checkers: dict | None = None) -> ExperimentResult:
    # No default node: the workloads name the node that served each completion (issue 18), the
    # nemeses the node they fault; a line that names none says nothing about a node.
    history = History(history_path, run=run_id, target=exp.target.name, node=None)
    # The settings the checkers apply (duplicates allowed, downtime bound, which checks) travel in
    # the history: chaos/history.py, harness records; with them the run's checker list, when the
    # caller planned one, on the same first line (the record readers read the header from it).
    header = experiment_record(exp)
    if checkers is not None:
        header["checkers"] = checkers
    history.harness(HARNESS_EXPERIMENT, header)
    transport_log = (TransportLog(history_path.with_name("transport.jsonl"), start_ns=history.start_ns)
                     if exp.target.failover else None)
    try:
        return _run_with_history(exp, topology, run_id, history, transport_log, progress, proxy)
    finally:
        if transport_log is not None:
            transport_log.close()


def _run_with_history(exp: Experiment, topology: RunningTopology, run_id: str, history: History,
                      transport_log: TransportLog | None, progress, proxy) -> ExperimentResult:
    history_path = history.path
    groups = _proxy_groups(exp)
    direct = topology.addresses(exp.target.protocol)
    proxies: dict[str, list[str]] = {}
    addresses = {"all": direct, "slow": direct}
    for group in sorted(groups):
        proxies[group], addresses[group] = _proxied(exp, topology, proxy, group)
    names = node_names(topology.names, *{tuple(a): a for a in addresses.values()}.values())
    run = _RunContext(exp, topology, history, transport_log, addresses, names, progress)
    shape = SHAPE_RUNS[type(exp.topology)]
    workload = shape.workload(run)
    faulted = _Faulted(topology, history, proxy, proxies)
    nemeses = [NEMESIS_OF_PLANE[n.plane](n, faulted) for n in exp.nemesis]
    schedule = build_schedule(exp)
    watch = ExitWatch(topology.nodes, set(topology.nodes) - nodes_a_fault_may_stop(exp.nemesis, topology.nodes))
    deployment_errors: list[str] = []
    display = _Progress(progress)
    scheduled = sum(1 for _, step, index, _ in schedule if step != exp.nemesis[index].heal_step)
    # the seed on the line that starts the run: `brokerconf chaos run FILE --seed N` replays its schedule
    progress(f"experiment {exp.name}: {exp.workload.kind} workload on {exp.target.name} ({topology.kind}) for "
             f"{exp.duration_s:.0f} s, {scheduled} faults scheduled, seed {exp.seed}; history {history_path}")
    started = time.monotonic()
    faults = 0
    nemesis_errors: list[str] = []
    # The workload runs for duration_s, and at least recovery_s after the last heal finished:
    # a heal that takes long (a JVM broker's restart) still gets its quiet time.
    end = exp.duration_s
    try:
        for nemesis in nemeses:
            nemesis.setup()
        workload.start()
        while (elapsed := time.monotonic() - started) < end:
            while schedule and schedule[0][0] <= elapsed:
                at, step, index, params = schedule.pop(0)
                try:
                    nemeses[index].invoke(step, **params)
                except NemesisError as exc:
                    # The run goes on (teardown still heals); the verdict cannot be "valid" for
                    # a schedule that did not happen as written.
                    nemesis_errors.append(f"{step} at {elapsed:.1f} s: {exc}")
                    progress(f"  nemesis step failed: {nemesis_errors[-1]}")
                    continue
                healed = step == exp.nemesis[index].heal_step
                faults += not healed
                if healed:
                    done = time.monotonic() - started
                    end = max(end, done + exp.recovery_s)
                    if done > at:
                        schedule = postpone(schedule, exp, index, done - at)
            if (stopped := watch.stopped()) is not None:
                deployment_errors.append(f"at {elapsed:.1f} s: {stopped}")
                progress(f"  {deployment_errors[-1]}")
                break
            display.show(elapsed, exp.duration_s, workload, faults)
            time.sleep(0.05)
    finally:
        display.done()
        for nemesis in nemeses:
            nemesis.teardown()  # heals: the brokers are up and the links clean before the drain
        workload.stop()
    if not deployment_errors:
        progress(f"  healed; draining {exp.workload.destination} until {exp.drain_quiet_s:.1f} s of quiet")
    discards: list[list[int] | None] = []

    def read_broker_counters() -> None:
        # Non-durable subscriptions and their counters vanish when the subscribers close.
        destination = exp.workload.destination
        try:
            discards.append(topology.subscription_discards(destination))
        except Exception as exc:  # noqa: BLE001 - recorded: the verdict says the counters are unknown
            discards.append(None)
            history.harness(HARNESS_BROKER_COUNTERS, {"destination": destination, "subscription_discards": None,
                                                      "error": f"{type(exc).__name__}: {exc}"})
            raise
        history.harness(HARNESS_BROKER_COUNTERS, {"destination": destination, "subscription_discards": discards[-1]})

    drain_errors: list[str] = []
    try:
        if deployment_errors:
            # nothing to drain from: what the history holds is judged, and the verdict says why it is short
            drained = []
            progress("  not drained: a node of the deployment stopped on its own")
        elif exp.workload.fans_out:
            drained = workload.drain(quiet=exp.drain_quiet_s, before_close=read_broker_counters)
        else:
            drained, drain_errors = shape.drain(run, workload)
    finally:
        for nemesis in nemeses:
            if isinstance(nemesis, LockLossFault):
                nemesis.end_watch()  # an expired lease's watch went on through the drain (LockLossFault.teardown)
    result = ExperimentResult(exp.name, run_id, history_path, round(time.monotonic() - started, 1), workload.sent_ok,
                              workload.received_ok, len(drained), faults, exp.target.name,
                              topology=topology.kind, broker_discards=discards[0] if discards else None,
                              slow_subscribers=list(range(exp.workload.slow_subscribers)),
                              nemesis_errors=nemesis_errors, deployment_errors=deployment_errors,
                              workload_errors=list(workload.errors) + drain_errors,
                              bridge_establishments=topology.bridge_establishments(),
                              transport_events=transport_log.summary() if transport_log is not None else None,
                              lock_loss=[r for n in nemeses if isinstance(n, LockLossFault) for r in n.results]
                              if any(isinstance(n, LockLossFault) for n in nemeses) else None)
    history.harness(HARNESS_RUN_END, run_end_record(result))
    history.close()
    return result


def experiment_record(exp: Experiment) -> dict:
    """The ``experiment`` harness record, the history's first line (chaos/history.py): the
    settings as run, overrides applied, so its ``seed`` is the one the schedule was drawn from
    (the file's, or ``--seed``'s) and the run replays from it."""
    return {"format": HARNESS_FORMAT, "experiment": exp.model_dump(mode="json")}


def run_end_record(result: ExperimentResult) -> dict:
    """The ``run-end`` harness record: the run's outcome as the harness saw it (chaos/history.py)."""
    return {k: v for k, v in asdict(result).items() if k not in ("history_path", "name", "run_id", "target")}
