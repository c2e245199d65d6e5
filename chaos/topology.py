"""The brokers an experiment runs against ([topology] in the experiment file), behind one shape:
node handles the process nemesis can fault, each node's client address, who is master, and the
broker's own counters for the checkers.

* ``single``: one broker launched by its target (conformance.targets), node ``A``.
* ``shared-store``: ``nodes`` brokers on one store, one master at a time (A-MQ fault-tolerant
  messaging guide, 3.1); only targets with a ``launch_shared_store`` method have one (ActiveMQ
  Classic). Clients list every node in their failover URL (the guide's Example 3.2). With
  ``--target activemq:container`` the nodes are containers on one Docker volume holding the
  KahaDB directory (conformance.targets.activemq_container_network.SharedVolumePair); their
  nodes have the same pid / running / start / kill shape, so nothing below differs.
* ``network``: ``nodes`` brokers joined by network connectors (ActiveMQ "Networks of Brokers"):
  ActiveMQ Classic JVMs (conformance.targets.activemq_network) or in-process reference brokers
  (conformance.targets.reference_network). Each bridge dials a fault proxy in front of its peer
  (`BridgeProxies`), so a ``link = "bridges"`` nemesis cuts the brokers apart while every client
  keeps its own connection; producers and consumers each connect to their own node.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from chaos.experiment_file import Experiment, ExperimentError
from conformance.scenario import Scenario
from conformance.targets.base import TargetUnavailable


class BridgeProxies:
    """A `BridgeRoute` (conformance.targets.activemq_network) that puts one fault-proxy proxy in
    front of each bridge's peer, through the Toxiproxy API at ``api_url``: the bridge dials the
    proxy, clients still reach the brokers directly, so a partition of the proxy cuts the bridge
    alone. Idempotent per bridge (a launcher may render its configuration more than once); when
    the peer's port changed (a network started again on fresh ports), the proxy's upstream is
    moved to it and the bridge keeps dialling the same proxy address."""

    def __init__(self, api_url: str, prefix: str = "bridge") -> None:
        self.api_url = api_url.rstrip("/")
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
            listen = self._post("/proxies", {"name": name, "listen": "127.0.0.1:0", "upstream": upstream})["listen"]
            listen_host, _, listen_port = listen.rpartition(":")
            self._listen[name] = (listen_host.strip("[]"), int(listen_port))
        elif self._upstream[name] != upstream:
            self._post(f"/proxies/{name}", {"upstream": upstream})  # Toxiproxy API: update a proxy
        self._upstream[name] = upstream
        return self._listen[name]

    def _post(self, path: str, payload: dict) -> dict:
        request = urllib.request.Request(f"{self.api_url}{path}", data=json.dumps(payload).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)


class Topology:
    """Base shape; `launch_topology` returns one of the subclasses."""

    kind = "single"

    def __init__(self, nodes: dict[str, Any]) -> None:
        self.nodes = nodes  # name -> a handle with pid / running / start / stop / kill

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        raise NotImplementedError

    def master(self) -> str | None:
        """The node serving clients now (None while no node does)."""
        raise NotImplementedError

    def subscription_discards(self, destination: str) -> list[int] | None:
        """The broker's discarded counter of every subscription on ``destination`` (None when
        this topology cannot read it)."""
        return None

    def log_tail(self, lines: int = 60) -> str:
        return ""

    def stop(self) -> None:
        raise NotImplementedError


class SingleBroker(Topology):
    def __init__(self, handle) -> None:
        # Process faults drive the broker's own process handle (kill -9 its PID, start it again).
        super().__init__({"A": getattr(handle, "process", handle)})
        self.handle = handle

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [(self.handle.host, self.handle.ports[protocol])]

    def master(self) -> str | None:
        return "A"

    def subscription_discards(self, destination: str) -> list[int] | None:
        if "counters.subscription" not in getattr(self.handle, "capabilities", frozenset()):
            return None
        return sorted(c.discarded for c in self.handle.subscription_counters(destination))

    def log_tail(self, lines: int = 60) -> str:
        tail = getattr(self.handle, "log_tail", None)
        return tail(lines) if tail else ""

    def stop(self) -> None:
        self.handle.stop()


class SharedStore(Topology):
    kind = "shared-store"

    def __init__(self, group) -> None:
        super().__init__(dict(group.nodes))
        self.group = group

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return self.group.addresses(protocol)

    def master(self) -> str | None:
        node = self.group.master()
        return node.name if node else None

    def log_tail(self, lines: int = 60) -> str:
        return self.group.log_tail(lines)

    def stop(self) -> None:
        self.group.stop()


class NetworkTopology(Topology):
    """A network of brokers whose bridges run through the fault proxy it owns (started first: the
    bridges' addresses are the proxy's listeners)."""

    kind = "network"

    def __init__(self, network, proxy, routes: BridgeProxies) -> None:
        super().__init__(dict(network.nodes))
        self.network = network
        self.proxy = proxy
        self.routes = routes

    @property
    def bridge_proxies(self) -> list[str]:
        """The proxies a ``link = "bridges"`` fault acts on: one per bridge."""
        return list(self.routes.names.values())

    def bridge_establishments(self) -> int:
        """How many times the network's bridges have been established so far, each reconnect
        after a cut counting once: evidence that a cut really took the bridges down."""
        total = 0
        for node in self.network.nodes.values():
            if hasattr(node, "established_bridges"):  # ActiveMQ: one log line per establishment
                total += len(node.established_bridges())
            elif node.network is not None:  # reference: each Bridge counts its sessions
                total += node.call(lambda node=node: sum(b.connections for b in node.network.bridges))
        return total

    def address_of(self, node: str) -> tuple[str, int]:
        handle = self.network[node]
        return handle.host, handle.stomp_port

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        if protocol != "stomp":
            raise ExperimentError(f"a network topology's brokers listen for STOMP only, not {protocol}")
        return [self.address_of(node) for node in self.nodes]

    def master(self) -> str | None:
        return None  # every broker serves its own clients; none is master

    def log_tail(self, lines: int = 60) -> str:
        return self.network.log_tail(lines)

    def stop(self) -> None:
        try:
            self.network.stop()
        finally:
            self.proxy.stop()


def _launch_network(exp: Experiment, target, workdir: Path) -> NetworkTopology:
    from chaos.proxy import start_fault_proxy
    from conformance.targets.activemq_network import Bridge, NetworkConnectorOptions

    topo = exp.topology
    kind = getattr(target, "kind", None)
    if kind not in ("activemq", "reference"):
        raise ExperimentError(f"target {exp.target.name} has no network launcher (activemq and reference have)")
    if kind == "activemq" and getattr(target, "launch_mode", "process") != "process":
        raise ExperimentError(f"target {exp.target.name} runs ActiveMQ in a container; networks of ActiveMQ brokers "
                              "are launched as local processes: use [target] name = \"activemq:process\" with the "
                              "Debian package installed")
    if exp.policy:
        raise ExperimentError("[[policy]] is not supported with a network topology (its launchers take no "
                              "destination policies): remove the [[policy]] entries")
    options = dict(initial_reconnect_delay=topo.initial_reconnect_delay_ms,
                   max_reconnect_delay=topo.max_reconnect_delay_ms,
                   use_exponential_back_off=topo.use_exponential_back_off)
    bridges = tuple(Bridge(source, target_node, NetworkConnectorOptions(duplex=duplex, **options))
                    for source, target_node, duplex in topo.bridge_ends())
    names = tuple(topo.node_names)
    proxy = start_fault_proxy()
    routes = BridgeProxies(proxy.api_url)
    try:
        if kind == "activemq":
            from conformance.targets.activemq_network import ActiveMQNetwork
            network = ActiveMQNetwork(workdir, names, bridges, prefix="chaos", bridge_route=routes)
        else:
            from conformance.targets.reference_network import ReferenceNetwork
            network = ReferenceNetwork(workdir, names, bridges, prefix="chaos", bridge_route=routes)
        network.start()  # stops its brokers itself when it fails
    except Exception as exc:
        proxy.stop()
        raise ExperimentError(f"target {exp.target.name} could not start the network {topo.bridges}: {exc}") from None
    except BaseException:
        proxy.stop()
        raise
    return NetworkTopology(network, proxy, routes)


def launch_topology(exp: Experiment, target, workdir: Path) -> Topology:
    """Start what ``exp`` describes on ``target``; raises ExperimentError when it cannot."""
    scenario = Scenario(name=exp.name, protocols=(exp.target.protocol,),
                        policies=tuple(p.to_policy() for p in exp.policy))
    topo = exp.topology
    if topo.kind == "network":
        return _launch_network(exp, target, workdir)
    if topo.kind == "single":
        try:
            return SingleBroker(target.launch(scenario, workdir))
        except TargetUnavailable as exc:
            raise ExperimentError(f"target {exp.target.name} could not start: {exc}") from None
    launch = getattr(target, "launch_shared_store", None)
    if launch is None:
        raise ExperimentError(f"target {exp.target.name} has no shared-store master/slave launcher "
                              "(ActiveMQ Classic has one: [target] name = \"activemq\")")
    try:
        group = launch(scenario, workdir, nodes=topo.nodes, lock_keep_alive_period_ms=topo.lock_keep_alive_period_ms,
                       lock_acquire_sleep_interval_ms=topo.lock_acquire_sleep_interval_ms)
    except TargetUnavailable as exc:
        raise ExperimentError(f"target {exp.target.name} could not start a shared-store group: {exc}") from None
    return SharedStore(group)
