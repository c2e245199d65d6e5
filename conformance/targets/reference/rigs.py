"""The reference broker's counterparts of conformance/targets/activemq/rigs.py: two in-process
brokers finding each other by multicast discovery, a broker F whose ``masterslave:(M, S)``
connector follows whichever of M, S is live, and a broker F whose one plain ``static:(M, S)``
connector lists two independent brokers."""

from __future__ import annotations

from conformance.topology import NetworkConnectorOptions

from conformance.targets.reference.network import ReferenceNode, connector_config


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
