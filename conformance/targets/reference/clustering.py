"""Artemis-style clusters of reference brokers (reference_broker/clustering), launched from
``Topology(nodes, cluster=ClusterConnection(...))`` and handed out as a `Cluster` of nodes, like
`ArtemisCluster` (conformance/targets/artemis/cluster.py) for the same topology.

Each broker runs in-process on its own loop thread (`ReferenceNode`, as the networks of brokers
do): `kill` and `pause` act on that loop (a kill stops it without scale-down; a pause freezes it,
connections stay open). Every node listens on STOMP, AMQP and MQTT and on its cluster acceptor
(port 0 first, the same ports again after a restart); once every acceptor is bound, each node
dials the acceptors of ``ClusterConnection.links(nodes)`` (through ``bridge_route`` when
``"cluster"`` is in ``topology.proxied``). The options the `ClusterConnection` sets become each
node's ``[cluster_connection]`` (an unset one is left out: the reference broker applies the
chapter's default itself, as Artemis does); the cluster user and password are generated per
cluster, never the chapter's defaults.

Queues: a node has a queue once a client sent to or subscribed on it there (auto-creation), as
the Artemis launcher's nodes do; a node gets forwards only for queues it has.
"""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path

from conformance.deployment import Formation, Forwarding
from conformance.topology import Bridge, BridgeRoute, Cluster, ClusterConnection, Topology, TopologyUnsupported
from conformance.targets.reference.network import ANY_PORT, ReferenceNode, _Logs
from machinery.process import free_ports
from reference_broker.clustering.service import ClusterService
from reference_broker.config import build_config
from reference_broker.server import BrokerServer
from machinery.waiting import poll

__all__ = ["ClusterFormationError", "ReferenceCluster", "ReferenceClusterNode", "cluster_connection_config",
           "redistribution_settings"]

_TIMEOUT = 10.0
#: a loopback multicast group for discovery "udp" (the port is picked per cluster)
UDP_GROUP = "231.7.7.7"


class ClusterFormationError(RuntimeError):
    """The cluster links did not all come up in time."""


#: `ClusterConnection` option -> key of the reference broker's ``[cluster_connection]``
_CONNECTION_KEYS = {
    "message_load_balancing": "message_load_balancing", "max_hops": "max_hops",
    "retry_interval_ms": "retry_interval", "retry_interval_multiplier": "retry_interval_multiplier",
    "max_retry_interval_ms": "max_retry_interval", "initial_connect_attempts": "initial_connect_attempts",
    "reconnect_attempts": "reconnect_attempts", "use_duplicate_detection": "use_duplicate_detection",
    "check_period_ms": "check_period", "connection_ttl_ms": "connection_ttl",
}
#: ... and of its ``discovery`` table
_DISCOVERY_KEYS = {"broadcast_period_ms": "broadcast_period", "refresh_timeout_ms": "refresh_timeout"}


def cluster_connection_config(cluster: ClusterConnection, node: str, *, user: str, password: str,
                              udp_port: int | None = None) -> dict:
    """The reference broker's ``cluster_connection`` section of ``node`` (its static connectors
    are added once the acceptors are bound)."""
    section: dict = {
        "node_name": node, "address": cluster.address,
        "cluster_user": user, "cluster_password": password, "scale_down": cluster.scale_down,
        "scale_down_group_name": cluster.scale_down_groups.get(node),
    }
    # only the options the scenario set: the reference broker applies the documented default to
    # an absent one itself (reference_broker/config.py, ClusterConnectionConfig), so a statement
    # about a default meets the broker's own default, as on Artemis
    section.update({key: getattr(cluster, option) for option, key in _CONNECTION_KEYS.items()
                    if getattr(cluster, option) is not None})
    if "retry_interval" in section and section["retry_interval"] > cluster.effective("max_retry_interval_ms"):
        # the reference broker refuses a max_retry_interval below retry_interval; a retry interval
        # set above the maximum means a constant wait of that interval
        section["max_retry_interval"] = section["retry_interval"]
    if cluster.discovery == "udp":
        section["discovery"] = {"group_address": UDP_GROUP, "group_port": udp_port}
        section["discovery"].update({key: getattr(cluster, option) for option, key in _DISCOVERY_KEYS.items()
                                     if getattr(cluster, option) is not None})
    grouping = cluster.grouping
    if grouping is not None:
        local = grouping.local == node
        group_timeout = grouping.group_timeout_ms
        if not local and group_timeout > 0:
            # artemis-message-grouping.md, "Clustered Grouping Best Practices": a REMOTE handler's
            # group timeout is half the LOCAL one's
            group_timeout = max(1, group_timeout // 2)
        section["grouping_handler"] = {
            "type": "LOCAL" if local else "REMOTE", "timeout": grouping.timeout_ms, "group_timeout": group_timeout,
            "reaper_period": grouping.reaper_period_ms, "address": grouping.address,
            **({} if local else {"local_node": grouping.local})}
    return section


def redistribution_settings(cluster: ClusterConnection) -> list[dict]:
    """The reference broker's ``address_settings`` for the cluster's redistribution delays
    ("Message Redistribution"): ``#`` only when the scenario set ``redistribution_delay_ms`` (unset:
    the broker's own default applies), then each of ``redistribution_delays``."""
    settings = [{"match": match, "redistribution_delay": delay} for match, delay in cluster.redistribution_delays]
    if cluster.redistribution_delay_ms is not None:
        settings.insert(0, {"match": "#", "redistribution_delay": cluster.redistribution_delay_ms})
    return settings


class ReferenceClusterNode(ReferenceNode, Forwarding):
    """A reference broker with a cluster connection (`ClusterService`) instead of network connectors."""

    def __init__(self, name: str, broker_name: str, extra_config: dict) -> None:
        super().__init__(name, broker_name, extra_config=extra_config)
        self.config_data.pop("policy_entries", None)
        self.config_data.update({"amqp": ANY_PORT, "mqtt": ANY_PORT, "advisory_support": False})
        self.cluster: ClusterService | None = None
        self.ports: dict[str, int] = {}

    def listen(self) -> None:
        """Start the broker and its cluster service (dialing the static connectors it has), on the
        ports of its first start (picked below the ephemeral range: `ANY_PORT`)."""
        if not self.ports:
            self.ports = dict(zip(("stomp", "amqp", "mqtt", "cluster"), free_ports(4)))
        for protocol in ("stomp", "amqp", "mqtt"):
            if protocol in self.ports:
                self.config_data[protocol] = f"127.0.0.1:{self.ports[protocol]}"
        if "cluster" in self.ports:
            self.config_data["cluster_connection"]["acceptor"] = f"127.0.0.1:{self.ports['cluster']}"
        config = build_config(self.config_data)

        async def start():
            self.server = BrokerServer(config)
            await self.server.start()
            self.cluster = ClusterService(self.server.broker, config)
            await self.cluster.start()

        self.run_coroutine(start(), timeout=30)
        self._stopped = False
        server = self.server
        self.ports.update(stomp=server.stomp_address[1], amqp=server.amqp_address[1], mqtt=server.mqtt_address[1],
                          cluster=self.cluster.acceptor_address[1])
        self.stomp_port = self.ports["stomp"]

    def dial(self, host: str, port: int) -> None:
        """Add a static connector to the node at ``host:port`` (kept for restarts)."""
        self.config_data["cluster_connection"].setdefault("static_connectors", []).append(f"{host}:{port}")
        self.call(lambda: self.cluster.add_connector(host, port))

    @property
    def cluster_address(self) -> tuple[str, int]:
        return self.host, self.ports["cluster"]

    def address(self, protocol: str) -> tuple[str, int]:
        if protocol not in ("stomp", "amqp", "mqtt") or not self.ports.get(protocol):
            raise KeyError(f"node {self.name} has no {protocol} listener (open: ['stomp', 'amqp', 'mqtt'])")
        return self.host, self.ports[protocol]

    def links_up(self) -> set[str]:
        """The nodes this one's outbound cluster links reach now."""
        if self.cluster is None or not self.running or self._loop.paused:
            return set()  # a frozen node answers nothing (as a SIGSTOPped one)
        return self.call(lambda: {c.peer for c in self.cluster.connectors if c.up})

    def forwarding_count(self) -> int:
        """Messages this node holds for other nodes: forwards its cluster links have not had
        acknowledged yet (kept and resent while a link is down; reference_broker/clustering/link.py)."""
        if self.cluster is None or not self.running:
            return 0
        return self.call(lambda: sum(len(c.pending) for c in self.cluster.connectors))

    def cluster_call(self, fn):
        """Run ``fn(cluster_service)`` on the node's loop."""
        return self.call(lambda: fn(self.cluster))

    def halt(self, *, scale_down: bool = True) -> None:
        """Stop: cluster service (scaling down first when configured and ``scale_down``), then
        the broker. `start` brings the node back on the same ports."""
        self.resume()
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            self.run_coroutine(cluster.stop(scale_down=None if scale_down else False), timeout=30)
        if self.server is not None:
            server, self.server = self.server, None
            self.run_coroutine(server.stop())
        self._stopped = True

    def stop(self) -> None:
        """A graceful stop (scale-down when configured)."""
        self.halt(scale_down=True)

    def kill(self) -> None:
        """In-process, a crash: no scale-down, the node's messages go with it (in memory)."""
        self.halt(scale_down=False)

    def start(self, timeout: float = 30, connectors=None) -> None:
        self.listen()

    def close(self) -> None:
        if not self._stopped or self.server is not None:
            try:
                self.halt(scale_down=False)
            finally:
                self._loop.stop(_TIMEOUT)
        else:
            self._loop.stop(_TIMEOUT)


class ReferenceCluster(Cluster, Formation):
    """Reference brokers ``topology.nodes`` joined by ``topology.cluster`` (implements
    `conformance.topology.Cluster`)."""

    host = "127.0.0.1"

    def __init__(self, topology: Topology, workdir: Path | None = None, *, bridge_route: BridgeRoute | None = None) -> None:
        if topology.cluster is None:
            raise ValueError("ReferenceCluster launches a topology with a cluster connection")
        if not 2 <= len(topology.nodes) <= 4:
            raise ValueError(f"a cluster here has 2 to 4 nodes, not {topology.nodes!r}")
        self.topology = topology
        self.workdir = workdir
        self.bridge_route = bridge_route if "cluster" in topology.proxied else None
        self.nodes: dict[str, ReferenceClusterNode] = {}
        self._logs = _Logs()
        self._user = "cluster-" + secrets.token_hex(3)
        self._password = secrets.token_urlsafe(12)

    def __getitem__(self, name: str) -> ReferenceClusterNode:
        return self.nodes[name]

    def start(self, timeout: float = 30) -> None:
        logger = logging.getLogger("reference_broker")
        logger.addHandler(self._logs)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        cluster = self.topology.cluster
        udp_port = None
        if cluster.discovery == "udp":
            udp_port = free_ports(1)[0]
        try:
            for name in self.topology.nodes:
                extra = {"cluster_connection": cluster_connection_config(
                    cluster, name, user=self._user, password=self._password, udp_port=udp_port)}
                if self.topology.persistent:
                    # nodes keep their messages across stop_broker / start_broker (and a kill)
                    if self.workdir is None:
                        raise ValueError("a persistent cluster topology needs a workdir for the nodes' journals")
                    extra["store"] = {"kind": "journal", "directory": str(Path(self.workdir) / "stores" / name)}
                settings = redistribution_settings(cluster)
                if settings:
                    extra["address_settings"] = settings
                node = ReferenceClusterNode(name, f"{self.topology.prefix}-{name}", extra)
                node.logs = self._logs
                self.nodes[name] = node
                node.listen()
            if cluster.discovery == "static":
                for source, target in cluster.links(self.topology.nodes):
                    self.nodes[source].dial(*self.peer_address(source, target))
            self.wait_formed(timeout)
        except BaseException:
            self.stop()
            raise

    def peer_address(self, source: str, target: str) -> tuple[str, int]:
        """What ``source``'s connector to ``target`` dials: its cluster acceptor or the proxy
        ``bridge_route`` puts in front of it."""
        host, port = self.nodes[target].cluster_address
        if self.bridge_route is not None:
            host, port = self.bridge_route(Bridge(source, target), host, port)
        return host, port

    def missing_links(self) -> list[tuple[str, str]]:
        """Links of ``ClusterConnection.links`` (between running nodes) that are not up now."""
        up = {name: node.links_up() for name, node in self.nodes.items()}
        return [(s, t) for s, t in self.topology.cluster.links(self.topology.nodes)
                if self.nodes[s].running and self.nodes[t].running and t not in up[s]]

    def wait_formed(self, timeout: float = 30) -> None:
        """Return once every link between running nodes is up; ClusterFormationError otherwise."""
        missing = poll(self.missing_links, lambda missing: not missing, timeout=timeout, interval=0.05)
        if missing:
            raise ClusterFormationError(f"cluster links not up within {timeout:.0f} s: {missing}\n"
                                        + self.log_tail(30))

    def stop(self) -> None:
        errors = []
        for name, node in self.nodes.items():
            try:
                node.close()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
                errors.append(f"{name}: {exc}")
        logging.getLogger("reference_broker").removeHandler(self._logs)
        if errors:
            raise RuntimeError(f"could not stop every node of the reference cluster: {errors}")

    # ------------------------------------------------------------ the Cluster contract

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [node.address(protocol) for node in self.nodes.values()]

    def serving(self) -> list[str]:
        return [name for name, node in self.nodes.items() if node.serving()]

    def bridge_establishments(self) -> int:
        """Cluster links established so far, each reconnect counting once."""
        return sum(node.cluster_call(lambda c: sum(k.connections for k in c.connectors))
                   for node in self.nodes.values()
                   if node.cluster is not None and node.running and not node._loop.paused)

    def subscription_discards(self, destination: str) -> list[int] | None:
        return None

    def use_cluster_credentials(self, name: str, credentials: tuple[str, str] | None) -> None:
        """From its next start node ``name`` authenticates its cluster links with ``credentials``
        (user, password) instead of the cluster's generated pair; None: the broker's shipped
        defaults (config.py's DEFAULT_CLUSTER_USER / _PASSWORD)."""
        cc = self.nodes[name].config_data["cluster_connection"]
        if credentials is None:
            cc.pop("cluster_user", None)
            cc.pop("cluster_password", None)
        else:
            cc["cluster_user"], cc["cluster_password"] = credentials

    def use_discovery_port(self, name: str, port: int) -> None:
        """From its next start node ``name`` announces itself and listens on UDP port ``port`` of
        the cluster's multicast group instead of the cluster's (CLU-DISC-10). Discovery "udp" only."""
        discovery = self.nodes[name].config_data["cluster_connection"].get("discovery")
        if discovery is None:
            raise ValueError("use_discovery_port needs a cluster with discovery 'udp'")
        discovery["group_port"] = port

    def stop_broker(self, name: str) -> None:
        """A graceful stop of node ``name``: what triggers scale-down."""
        self.nodes[name].stop()

    def start_broker(self, name: str, timeout: float = 30) -> None:
        self.nodes[name].start()
        self.wait_formed(timeout)

    def restart(self, name: str, timeout: float = 30) -> None:
        self.stop_broker(name)
        self.start_broker(name, timeout)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self._logs.lines[-lines:])

    def config_text(self) -> str:
        return "\n".join(f"--- node {n} ---\n{node.config_data}" for n, node in self.nodes.items())

    def __enter__(self) -> "ReferenceCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ReferenceCluster {list(self.nodes)} {self.topology.cluster.message_load_balancing}>"


def launch_cluster(topology: Topology, workdir: Path | None = None, *, bridge_route: BridgeRoute | None = None,
                   timeout: float = 30) -> ReferenceCluster:
    if topology.cluster is not None and not topology.cluster.direct_connections_only:
        # CLU-STATIC-1 applies to Artemis only: our nodes announce no cluster topology to learn from
        raise TopologyUnsupported("the reference broker's cluster nodes connect only to the nodes they list "
                                  "(no members learnt through another node: direct_connections_only=False)")
    if topology.cluster is not None and topology.cluster.extra_connections:
        # CLU-ADDR-5 and CLU-SCALE-6 apply to Artemis only (catalogue notes)
        raise TopologyUnsupported("a reference cluster node has one cluster connection: extra_connections "
                                  f"{[extra.name for extra in topology.cluster.extra_connections]} cannot be launched")
    if topology.cluster is not None and topology.cluster.forward_when_no_consumers is not None:
        # CLU-MLB-2 applies to Artemis only: the reference broker has message_load_balancing alone
        raise TopologyUnsupported("the reference broker has no forward-when-no-consumers (Artemis's deprecated "
                                  "name): give message_load_balancing instead")
    if topology.cluster is not None and topology.cluster.ttl_check_interval_ms not in (
            None, topology.cluster.effective("check_period_ms")):
        # reference_broker/clustering/service.py looks for silent links at every check period
        raise TopologyUnsupported("a reference cluster node checks its links' connection-ttl at every check period: "
                                  "ttl_check_interval_ms can only equal check_period_ms")
    cluster = ReferenceCluster(topology, workdir, bridge_route=bridge_route)
    cluster.start(timeout)
    return cluster
