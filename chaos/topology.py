"""The brokers an experiment runs against ([topology] in the experiment file), through the
topology contract (conformance/topology.py): the experiment's section becomes a broker-neutral
`Topology`, the target launches it (``target.launch_topology``) if it declares the capability
(``topology.shared-store`` / ``topology.network``; every target launches one broker), and the run sees one
shape, `RunningTopology`: node handles the process nemesis can fault, each node's client address,
who serves now, and the brokers' own counters for the checkers. What differs between brokers
lives in their folders under conformance/targets/.

* ``single``: one broker, node ``A``.
* ``shared-store``: ``nodes`` brokers on one store, one master at a time (A-MQ fault-tolerant
  messaging guide, 3.1). Clients list every node in their failover URL (the guide's Example 3.2).
  ``store = "jdbc"``: the store is one database (3.2; ``topology.jdbc-store``), each node's link
  to it through its own fault proxy, so a lock-loss fault cuts one node's database link.
* ``network``: ``nodes`` brokers joined by network connectors (ActiveMQ "Networks of Brokers").
  Each bridge dials a fault proxy in front of its peer (`BridgeProxies`), so a
  ``link = "bridges"`` nemesis cuts the brokers apart while every client keeps its own
  connection; producers and consumers each connect to their own node.
* ``cluster``: ``nodes`` brokers joined by Artemis-style cluster connections (a symmetric
  cluster, `ClusterConnection` with the experiment's options; ``topology.cluster``). When a
  nemesis cuts the ``cluster`` links, each link dials a fault proxy in front of its peer (the
  launcher calls ``bridge_route(Bridge(source, target), host, port)`` per link, `BridgeProxies`);
  producers connect to ``producer_node``, consumers to ``consumer_nodes``, the drain to each node.
"""

from __future__ import annotations


from pathlib import Path

from chaos.experiment_file import Experiment, ExperimentError
from chaos.nemesis.lock import lock_loss_nemesis
from machinery.faultproxy import start_fault_proxy
from machinery.faultproxy.client import ToxiproxyClient, split_address
from conformance.deployment import Formation, Forwarding, SharedStorage, part
from conformance.scenario import Scenario
from conformance.targets.runtime.probes import stomp_handshake, tcp_accepts
from conformance.targets.base import TargetUnavailable, why_missing
from machinery.waiting import Deadline
from conformance.topology import Cluster, Topology, TopologyUnsupported, capability_of


class BridgeProxies:
    """A `BridgeRoute` (conformance.targets.activemq.network) that puts one fault-proxy proxy in
    front of each bridge's peer, through the Toxiproxy API at ``api_url``: the bridge dials the
    proxy, clients still reach the brokers directly, so a partition of the proxy cuts the bridge
    alone. Idempotent per bridge (a launcher may render its configuration more than once); when
    the peer's port changed (a network started again on fresh ports), the proxy's upstream is
    moved to it and the bridge keeps dialling the same proxy address."""

    def __init__(self, api_url: str, prefix: str = "bridge") -> None:
        self.api_url = api_url.rstrip("/")
        self.client = ToxiproxyClient(self.api_url)
        self.prefix = prefix
        self.names: dict[tuple[str, str, str], str] = {}  # (source, target, connector) -> proxy name
        self._listen: dict[str, tuple[str, int]] = {}
        self._upstream: dict[str, str] = {}

    def name_of(self, source: str, target: str, connector: str = "bridge") -> str:
        return f"{self.prefix}-{source}-{target}-{connector}"

    def __call__(self, bridge, host: str, port: int) -> tuple[str, int]:
        key = (bridge.source, bridge.target, bridge.options.name)
        name = self.names.setdefault(key, self.name_of(*key))
        upstream = f"{host}:{port}"
        if name not in self._listen:
            self._listen[name] = split_address(self.client.create_proxy(name, upstream=upstream)["listen"])
        elif self._upstream[name] != upstream:
            self.client.update_proxy(name, upstream=upstream)
        self._upstream[name] = upstream
        return self._listen[name]

    def _towards(self, target: str) -> list[str]:
        return [name for (_, peer, _), name in self.names.items() if peer == target]

    def refuse_towards(self, target: str) -> None:
        """`conformance.topology.HeldBridgeRoute`: the proxies in front of ``target`` stop
        listening (a connection is refused, as by a node not started yet)."""
        for name in self._towards(target):
            self.client.disable(name)

    def accept_towards(self, target: str) -> None:
        for name in self._towards(target):
            self.client.enable(name)


class RunningTopology:
    """A launched `Cluster` and what the experiment added around it (the bridges' fault proxy)."""

    def __init__(self, cluster: Cluster, proxy=None, routes: BridgeProxies | None = None, *,
                 one_serves_at_a_time: bool = True) -> None:
        self.cluster = cluster
        self.kind = cluster.topology.kind
        self.names = tuple(cluster.topology.nodes)  # every node, in order (failover URLs, proxies)
        #: name -> Node the nemeses may fault (start / stop / kill / pause / resume); empty for a
        #: broker the harness cannot fault (no process.kill)
        self.nodes = dict(cluster.nodes)
        self.proxy = proxy
        self.routes = routes
        #: the section's shape says whether one node serves at a time (`master` asks who)
        self.one_serves_at_a_time = one_serves_at_a_time

    @property
    def bridge_proxies(self) -> list[str]:
        """The proxies a ``link = "bridges"`` (or, on a cluster, ``"cluster"``) fault acts on: one
        per bridge or cluster link."""
        return list(self.routes.names.values()) if self.routes is not None else []

    def bridge_establishments(self) -> int | None:
        """How many times the bridges have been established so far, each reconnect after a cut
        counting once (evidence that a cut really took them down); None without bridges."""
        return self.cluster.bridge_establishments() if self.cluster.topology.bridges else None

    def address_of(self, node: str, protocol: str) -> tuple[str, int]:
        return self.cluster[node].address(protocol)

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        try:
            return self.cluster.addresses(protocol)
        except KeyError as exc:
            raise ExperimentError(f"the {self.kind} topology has no {protocol} listener: {exc.args[0]}") from None

    def master(self) -> str | None:
        """The node serving clients now when only one does (a shared store's master); None while
        no node does, and for a network or a cluster, where every broker serves its own clients."""
        if not self.one_serves_at_a_time:
            return None
        serving = self.cluster.serving()
        if len(serving) > 1:
            raise RuntimeError(f"more than one master: {serving}")
        return serving[0] if serving else None

    def lock_nemesis(self, history=None):
        """A `LockLossNemesis` recording into ``history`` over the nodes' links to their store (host
        names are the node names): the storage links of a store on the simulated NFS, or the
        database links of a JDBC store behind the fault proxy (the `SharedStorage` part's ``rig``);
        None for any other store, and for a deployment without a shared store."""
        storage = part(self.cluster, SharedStorage)
        if storage is None or storage.rig is None:
            return None
        return lock_loss_nemesis(storage.rig, history, node="store")

    def serving_nodes(self) -> list[str]:
        """Every node whose listeners accept clients now, asked node by node through the node
        handle's own probe: two masters show as two (a lock lost under a master that goes on
        serving), where `master` would raise."""
        return [name for name, node in self.nodes.items() if node.running and node.serving()]

    def listening_nodes(self) -> list[str]:
        """Every node whose STOMP listener accepts a TCP connection now (the kernel accepts for a
        process stuck in I/O): a master that has not closed its connectors."""
        return [name for name, node in self.nodes.items() if node.running and tcp_accepts(self._stomp_port(node), 1.0)]

    def answering_nodes(self) -> list[str]:
        """Every node that answers a STOMP CONNECT within 1 s now: a master that really serves,
        the same question for every broker."""
        return [name for name, node in self.nodes.items()
                if node.running and stomp_handshake(self._stomp_port(node), 1.0)[0]]

    @staticmethod
    def _stomp_port(node) -> int:
        try:
            return node.address("stomp")[1]
        except (KeyError, ValueError):
            raise ExperimentError("the lock-loss watch asks each node's STOMP listener: the topology has none") \
                from None

    def wait_consumers_gone(self, destination: str, timeout: float = 10.0) -> dict[str, int]:
        """Wait until no serving node counts a consumer of ``destination`` (at most ``timeout`` s);
        returns each serving node's last count. The drain after a workload waits for this: a
        consumer the client closed still holds its prefetched messages until the broker has
        closed it, and a drain subscribing meanwhile is a second consumer, served the newer
        messages first (seen on Artemis under load: a drain got seq 547..555, then 536..546
        handed back by the closed consumer)."""
        deadline = Deadline(timeout)
        counts: dict[str, int] = {}
        for name in self.serving_nodes():
            counts[name] = self.cluster[name].wait_for_consumers(
                destination, 0, timeout=deadline.remaining())
        return counts

    def held(self, node: str, destination: str) -> int:
        """Messages node ``node`` still holds for ``destination``."""
        return self.cluster[node].queue_size(destination)

    def forwarding(self, node: str) -> int | None:
        """Messages node ``node`` holds on their way to another node of a cluster (an Artemis
        store-and-forward queue, a reference link's unacknowledged forwards); None when its
        launcher cannot tell (a node without the `Forwarding` part)."""
        counter = part(self.cluster[node], Forwarding)
        return None if counter is None else counter.forwarding_count()

    def subscription_discards(self, destination: str) -> list[int] | None:
        return self.cluster.subscription_discards(destination)

    def log_tail(self, lines: int = 60) -> str:
        return self.cluster.log_tail(lines)

    def stop(self) -> None:
        try:
            self.cluster.stop()
        finally:
            if self.proxy is not None:
                self.proxy.stop()


def topology_of(exp: Experiment) -> Topology:
    """The experiment's [topology] section as the broker-neutral model (each shape builds its own:
    chaos/experiment_file.py `conformance_topology`)."""
    return exp.topology.conformance_topology(exp.nemesis)


def launch_topology(exp: Experiment, target, workdir: Path) -> RunningTopology:
    """Start what ``exp`` describes on ``target``; raises ExperimentError when it cannot."""
    scenario = Scenario(name=exp.name, protocols=(exp.target.protocol,),
                        policies=tuple(p.to_policy() for p in exp.policy))
    topology = topology_of(exp)
    needed = capability_of(topology)
    if needed is not None and needed not in target.capabilities():
        why = why_missing(target, needed)
        raise ExperimentError(f"target {exp.target.name} lacks {needed}: it cannot launch a {topology.kind} topology"
                              + (f" ({why})" if why else ""))
    if topology.bridges and exp.policy:
        raise ExperimentError("[[policy]] is not supported with a network topology (its launchers take no "
                              "destination policies): remove the [[policy]] entries")
    proxy = routes = None
    if "bridges" in topology.proxied or "cluster" in topology.proxied:
        proxy = start_fault_proxy()
        routes = BridgeProxies(proxy.api_url)
    try:
        cluster = target.launch_topology(topology, scenario, workdir, bridge_route=routes)
    except (TargetUnavailable, TopologyUnsupported) as exc:
        if proxy is not None:
            proxy.stop()
        raise ExperimentError(f"target {exp.target.name} could not start the {topology.kind} topology: {exc}") \
            from None
    except Exception as exc:
        if proxy is not None:
            proxy.stop()
        if topology.cluster is not None:
            raise ExperimentError(f"target {exp.target.name} could not start the {len(topology.nodes)}-node cluster: "
                                  f"{exc}") from None
        if not topology.bridges:
            raise
        raise ExperimentError(f"target {exp.target.name} could not start the network {exp.topology.bridges}: "
                              f"{exc}") from None
    except BaseException:
        if proxy is not None:
            proxy.stop()
        raise
    running = RunningTopology(cluster, proxy, routes, one_serves_at_a_time=exp.topology.one_serves_at_a_time)
    if topology.cluster is not None:
        _wait_formed(running, exp)
    return running


#: how long a cluster gets to form every link before the workload starts (JVMs on a loaded
#: 2-core machine; the reference brokers form in about a second)
CLUSTER_FORMATION_TIMEOUT_S = 90.0


def _wait_formed(running: RunningTopology, exp: Experiment) -> None:
    """Start the workload on a formed cluster (every link of ``ClusterConnection.links`` up): a
    node that does not know its peers' consumers yet keeps every message local, and the run
    would not exercise routing or redistribution at all. A cluster launcher has the `Formation`
    part (conformance/deployment.py); one without it cannot say when the run may start."""
    formation = part(running.cluster, Formation)
    if formation is None:
        running.stop()
        raise ExperimentError(f"target {exp.target.name}: its cluster ({type(running.cluster).__name__}) has no "
                              "Formation part, so the run cannot wait until every cluster link is up")
    try:
        formed = formation.wait_formed(CLUSTER_FORMATION_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - a launcher's own timeout or node error: the reason
        running.stop()
        raise ExperimentError(f"target {exp.target.name}: the cluster did not form: {exc}") from None
    if formed is False:
        running.stop()
        raise ExperimentError(f"target {exp.target.name}: the cluster did not form within "
                              f"{CLUSTER_FORMATION_TIMEOUT_S:.0f} s (not every cluster link came up); see the broker logs")
