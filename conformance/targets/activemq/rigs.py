"""ActiveMQ Classic networks that the topology model does not describe yet, for the
network-topology suite (suites/test_network_topologies.py): two brokers finding each
other by multicast discovery (page "Networks of Brokers", multicast example, on loopback), and a
broker bridging to a shared-store master/slave pair through a ``masterslave:`` connector. The
suite gets them through `ActiveMQTarget.discovery_pair` / `masterslave_rig` (capabilities
``topology.discovery`` and ``topology.masterslave-connector``); and a broker whose one plain
``static:`` connector lists two independent brokers (`static_fan_rig`)."""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from conformance.topology import NetworkConnectorOptions

from conformance.targets.activemq.process import ActiveMQProcess
from conformance.targets.activemq.network import NetworkNode, render_network_connector
from conformance.targets.activemq.shared_store import SharedStoreGroup
from conformance.targets.runtime.host_pair import HostPairQueries
from machinery.process import free_ports
from reference_broker.cluster.discovery import activemq_loopback_uri


class DiscoveryPair:
    """Two ActiveMQ brokers, each with a ``multicast://`` network connector and a transport
    connector announcing itself in the same group (the page's multicast example, on loopback)."""

    def __init__(self, workdir, group: str) -> None:
        uri = activemq_loopback_uri(group)
        connector = f'      <networkConnector name="mcast" uri={quoteattr(uri)}/>'
        self.nodes = {name: NetworkNode(name, ActiveMQProcess(
            workdir / name, name=f"nob-mcast-{name}", jmx=True, jvm_heap_mb=256, memory_limit_mb=96,
            discovery_uri=uri, network_connectors_xml=connector)) for name in ("A", "B")}

    def start(self) -> None:
        for node in self.nodes.values():
            node.process.start()

    def bridged(self, name: str, other: str) -> bool:
        return self.nodes[other].process.name in self.nodes[name].established_bridges()

    def log_tail(self) -> str:
        return "\n".join(f"--- {n} ---\n{node.log_tail(30)}" for n, node in self.nodes.items())

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


class MasterSlaveRig:
    """A shared-store pair (M, S) and a broker F whose connector is ``masterslave:(M, S)``."""

    def __init__(self, workdir, reconnect: dict) -> None:
        self.reconnect = reconnect
        self.workdir = workdir
        self.group = SharedStoreGroup(workdir / "group", nodes=2, broker_name="nob-ms", jvm_heap_mb=256,
                                      lock_keep_alive_period_ms=1000, lock_acquire_sleep_interval_ms=500)
        self.forwarder = None

    def start(self) -> None:
        self.group.start()  # node A takes the lock first: the master; B waits as its slave
        urls = [node.process.openwire_url for node in self.group.nodes.values()]
        connector = render_network_connector(urls, NetworkConnectorOptions(name="ms", **self.reconnect),
                                             scheme="masterslave")
        self.forwarder = NetworkNode("F", ActiveMQProcess(
            self.workdir / "F", name="nob-ms-F", jmx=True, jvm_heap_mb=256, memory_limit_mb=96,
            network_connectors_xml=connector))
        self.forwarder.process.start()

    @property
    def members(self):
        return list(self.group.nodes.values())  # in the URI's order: master first

    def live(self):
        return self.group.master()

    def bridged_to(self):
        """Members F logged an established bridge to, in order (a new line per (re)connection)."""
        names = {node.process.name: node for node in self.members}
        return [names[r] for r in self.forwarder.established_bridges() if r in names]

    def kill(self, member) -> None:
        member.kill()

    def wait_for_live(self, timeout: float):
        return self.group.wait_for_master(timeout)

    def log_tail(self) -> str:
        return f"{self.group.log_tail(20)}\n--- F ---\n{self.forwarder.log_tail(30) if self.forwarder else ''}"

    def stop(self) -> None:
        try:
            if self.forwarder is not None:
                self.forwarder.stop()
        finally:
            self.group.stop()


class StaticFanRig:
    """Two independent brokers M, S and a broker F with ONE ``static:(M, S)`` connector (A-MQ FT
    guide chapter 4: the plain connector the masterslave: scheme exists to avoid)."""

    def __init__(self, workdir, reconnect: dict) -> None:
        self.reconnect = reconnect
        self.workdir = workdir
        self.nodes = {name: NetworkNode(name, ActiveMQProcess(
            workdir / name, name=f"nob-fan-{name}", jmx=True, jvm_heap_mb=256, memory_limit_mb=96))
            for name in ("M", "S")}
        self.forwarder = None

    def start(self) -> None:
        for node in self.nodes.values():
            node.process.start()
        urls = [node.process.openwire_url for node in self.nodes.values()]
        connector = render_network_connector(urls, NetworkConnectorOptions(name="fan", **self.reconnect))
        self.forwarder = NetworkNode("F", ActiveMQProcess(
            self.workdir / "F", name="nob-fan-F", jmx=True, jvm_heap_mb=256, memory_limit_mb=96,
            network_connectors_xml=connector))
        self.forwarder.process.start()

    @property
    def members(self):
        return list(self.nodes.values())

    def bridged_to(self):
        """The listed brokers F logged an established bridge to."""
        established = set(self.forwarder.established_bridges())
        return [node for node in self.members if node.process.name in established]

    def log_tail(self) -> str:
        return "\n".join(f"--- {n} ---\n{node.log_tail(30)}" for n, node in
                         [*self.nodes.items(), ("F", self.forwarder)] if node is not None)

    def stop(self) -> None:
        for node in [self.forwarder, *self.nodes.values()]:
            if node is not None:
                node.stop()


class HostPairRig(HostPairQueries):
    """A-MQ FT guide chapter 4, "Host pair with master/slave groups": two shared-store groups GA
    (nodes A1, A2) and GB (B1, B2) spread over two hosts, host1 = {A1, B2} and host2 = {B1, A2},
    so each host runs one group's master (A1, B1: started first) and the other's slave. Each
    node's one network connector is ``masterslave:`` to the OTHER group (never its own, FT-NOB-2).
    One machine plays both hosts: a host "fails" when the harness kills its two JVMs."""

    def __init__(self, workdir, reconnect: dict) -> None:
        options = dict(nodes=2, jvm_heap_mb=256, lock_keep_alive_period_ms=1000, lock_acquire_sleep_interval_ms=500)
        self.groups = {"A": SharedStoreGroup(workdir / "GA", broker_name="hp-a", **options),
                       "B": SharedStoreGroup(workdir / "GB", broker_name="hp-b", **options)}
        # ports fixed before any start: each group's connector names the other group's brokers (the
        # broker keeps what is set and picks the rest, its JMX port among them, at its start)
        for group in self.groups.values():
            for node in group.nodes.values():
                node.process.stomp_port, node.process.openwire_port = free_ports(2)
        urls = {g: [f"tcp://127.0.0.1:{n.process.openwire_port}" for n in group.nodes.values()]
                for g, group in self.groups.items()}
        for g, other in (("A", "B"), ("B", "A")):
            connector = render_network_connector(urls[other], NetworkConnectorOptions(name=f"to-{other}", **reconnect),
                                                 scheme="masterslave")
            for node in self.groups[g].nodes.values():
                node.process.network_connectors_xml = connector
        a1, a2 = self.groups["A"].nodes.values()
        b1, b2 = self.groups["B"].nodes.values()
        self.hosts = {"host1": (a1, b2), "host2": (b1, a2)}
        self.named = {"A1": a1, "A2": a2, "B1": b1, "B2": b2}

    def start(self) -> None:
        for group in self.groups.values():
            group.start()  # its first node (A1, B1) is the master

    def bridged(self, source, target) -> bool:
        """Whether ``source`` logged an established bridge to ``target`` (since its last start)."""
        return target.process.name in source.established_bridges()

    def stop(self) -> None:
        for group in self.groups.values():
            group.stop()
