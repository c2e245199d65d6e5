"""The reference broker's counterparts of conformance/targets/activemq/rigs.py: two in-process
brokers finding each other by multicast discovery, a broker F whose ``masterslave:(M, S)``
connector follows whichever of M, S is live, a broker F whose one plain ``static:(M, S)``
connector lists two independent brokers, and a host pair of two shared-store groups of broker
processes whose masters bridge to each other."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Callable

from conformance.topology import NetworkConnectorOptions, SharedStore, Topology

from conformance.targets.reference.network import ReferenceNode, connector_config
from conformance.targets.reference.shared_store import launch_shared_store
from conformance.targets.runtime.host_pair import HostPairQueries
from machinery.process import free_ports
from reference_broker.config import Security

#: the group whose users the reference broker trusts as network bridges (its default)
NETWORK_GROUP = Security.model_fields["network_group"].default


class DiscoveryPair:
    """The same with two reference brokers (``discovery_uri`` announces the STOMP listener)."""

    def __init__(self, workdir, group: str) -> None:
        self.uri = f"multicast://default?group={group}"
        self.group = group
        self.nodes = {}

    def start(self) -> None:
        for name in ("A", "B"):
            node = ReferenceNode(name, f"nob-mcast-{name}", extra_config={"discovery_uri": self.uri})
            self.nodes[name] = node
            node.listen()
        for node in self.nodes.values():
            node.start_network([{"uri": self.uri, "name": "mcast"}])

    def bridged(self, name: str, other: str) -> bool:
        node, port = self.nodes[name], self.nodes[other].stomp_port
        return node.call(lambda: any(b.local is not None and b.connected_peer is not None
                                     and b.connected_peer.port == port for b in node.network.bridges))

    def log_tail(self) -> str:
        return f"(reference brokers in group {self.group}: {self.nodes})"

    def stop(self) -> None:
        for node in self.nodes.values():
            node.close()


class MasterSlaveRig:
    """Two independent reference brokers M, S (both listening) and F with ``masterslave:(M, S)``."""

    def __init__(self, workdir, reconnect: dict) -> None:
        self.reconnect = reconnect
        self.nodes = {}
        self.forwarder = None

    def start(self) -> None:
        for name in ("M", "S", "F"):
            self.nodes[name] = ReferenceNode(name, f"nob-ms-{name}")
            self.nodes[name].listen()
        urls = [f"tcp://127.0.0.1:{self.nodes[n].stomp_port}" for n in ("M", "S")]
        self.nodes["M"].start_network([])  # consumer advisories: how F's bridge sees their demand
        self.nodes["S"].start_network([])
        self.forwarder = self.nodes["F"]
        self.forwarder.start_network([connector_config(urls, NetworkConnectorOptions(name="ms", **self.reconnect),
                                                       scheme="masterslave")])

    @property
    def members(self):
        return [self.nodes["M"], self.nodes["S"]]

    def live(self):
        return next((n for n in self.members if n.running), None)

    def bridged_to(self):
        f = self.forwarder

        def peer():
            bridge = f.network.bridges[0]
            return bridge.connected_peer.port if bridge.local is not None and bridge.connected_peer else None
        port = f.call(peer)
        return [n for n in self.members if n.stomp_port == port]

    def kill(self, member) -> None:
        member.stop()

    def wait_for_live(self, timeout: float):
        return self.live()

    def log_tail(self) -> str:
        f = self.forwarder
        return f.call(lambda: repr([(b, b.connected_peer, b.connections) for b in f.network.bridges])) if f else ""

    def stop(self) -> None:
        for node in self.nodes.values():
            node.close()


class StaticFanRig:
    """Two independent reference brokers M, S and F with ONE ``static:(M, S)`` connector (A-MQ FT
    guide chapter 4: the plain connector the masterslave: scheme exists to avoid)."""

    def __init__(self, workdir, reconnect: dict) -> None:
        self.reconnect = reconnect
        self.nodes = {}
        self.forwarder = None

    def start(self) -> None:
        for name in ("M", "S", "F"):
            self.nodes[name] = ReferenceNode(name, f"nob-fan-{name}")
            self.nodes[name].listen()
        urls = [f"tcp://127.0.0.1:{self.nodes[n].stomp_port}" for n in ("M", "S")]
        self.nodes["M"].start_network([])  # consumer advisories: how F's bridges see their demand
        self.nodes["S"].start_network([])
        self.forwarder = self.nodes["F"]
        self.forwarder.start_network([connector_config(urls, NetworkConnectorOptions(name="fan", **self.reconnect))])

    @property
    def members(self):
        return [self.nodes["M"], self.nodes["S"]]

    def bridged_to(self):
        """The listed brokers F has an established bridge to now."""
        f = self.forwarder
        ports = f.call(lambda: {b.connected_peer.port for b in f.network.bridges
                                if b.local is not None and b.connected_peer is not None})
        return [n for n in self.members if n.stomp_port in ports]

    def log_tail(self) -> str:
        f = self.forwarder
        return f.call(lambda: repr([(b, b.connected_peer) for b in f.network.bridges])) if f else ""

    def stop(self) -> None:
        for node in self.nodes.values():
            node.close()


class HostPairRig(HostPairQueries):
    """A-MQ FT guide chapter 4, "Host pair with master/slave groups", as conformance/targets/
    activemq/rigs.py builds it, with reference broker processes: two shared-store groups GA (A1,
    A2) and GB (B1, B2) spread over two hosts, host1 = {A1, B2} and host2 = {B1, A2}, so each host
    runs one group's master (A1, B1: started first) and the other's slave. Every node's one
    network connector is ``masterslave:`` to the OTHER group (never its own, FT-NOB-2); only a
    master runs it (reference_broker/ha/runner.py). One machine plays both hosts: a host "fails"
    when the harness kills its two processes. ``node_config(broker_name)``: a node's configuration
    before its connector and store (the target's).

    The brokers are separate processes, so a bridge is trusted as one only when it logs in as a
    user of the peer's network group (reference_broker/engine/network_principal.py): every node
    has that one bridge user, and still lets clients in anonymously, as the ActiveMQ rig does."""

    #: the lock timings of both groups: a slave takes over about a second after its master died
    LOCKS = SharedStore(lock_keep_alive_period_ms=1000, lock_acquire_sleep_interval_ms=500)

    def __init__(self, workdir, reconnect: dict, node_config: Callable[[str], dict]) -> None:
        self.workdir = Path(workdir)
        self.reconnect = reconnect
        self.node_config = node_config
        # STOMP ports fixed before any start: each group's connector names the other group's nodes
        self.ports = dict(zip(("A1", "A2", "B1", "B2"), free_ports(4)))
        self.bridge_user = ("hostpair-bridge", secrets.token_urlsafe(12))
        self.groups: dict = {}
        self.named: dict = {}
        self.hosts: dict = {}

    def _connector(self, other: str) -> dict:
        """The ``masterslave:`` connector to group ``other``: its master's URI first, then its slave's."""
        urls = [f"tcp://127.0.0.1:{self.ports[f'{other}{n}']}" for n in (1, 2)]
        user, password = self.bridge_user
        return connector_config(urls, NetworkConnectorOptions(name=f"to-{other}", user_name=user, password=password,
                                                              **self.reconnect), scheme="masterslave")

    def _config(self, broker_name: str, connector: dict) -> dict:
        """A node's configuration: the target's, its connector, the bridge user in its network group."""
        user, password = self.bridge_user
        security = {"users": [{"name": user, "password": password, "groups": [NETWORK_GROUP]}],
                    "allow_anonymous": True}
        return {**self.node_config(broker_name), "security": security, "network_connectors": [connector]}

    def start(self) -> None:
        try:
            for group, other in (("A", "B"), ("B", "A")):
                topology = Topology((f"{group}1", f"{group}2"), shared_store=self.LOCKS, prefix=f"hp{group.lower()}")
                connector = self._connector(other)
                self.groups[group] = launch_shared_store(
                    topology, lambda name, c=connector: self._config(name, c),
                    ("stomp",), self.workdir / f"G{group}",
                    stomp_ports={name: self.ports[name] for name in topology.nodes})
        except BaseException:
            self.stop()
            raise
        self.named = {name: self.groups[name[0]][name] for name in self.ports}
        self.hosts = {"host1": (self.named["A1"], self.named["B2"]), "host2": (self.named["B1"], self.named["A2"])}

    def bridged(self, source, target) -> bool:
        """Whether ``source`` logged an established bridge to ``target``'s STOMP port (the bridge's
        INFO line, reference_broker/cluster/bridge.py; the process keeps its log across restarts,
        and no node of the rig is restarted)."""
        line = f"Network connection between {source.process.name} and tcp://127.0.0.1:{target.address('stomp')[1]} ("
        return line in source.process.log_tail(2000)

    def stop(self) -> None:
        errors = []
        for group in self.groups.values():
            try:
                group.stop()
            except Exception as exc:  # noqa: BLE001 - stop the other group whatever happens
                errors.append(str(exc))
        if errors:
            raise RuntimeError(f"host pair: could not stop every group: {errors}")
