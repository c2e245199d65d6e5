"""An Artemis cluster: 2 to 4 local JVMs joined by cluster connections, launched from
``Topology(nodes, cluster=ClusterConnection(...))`` (conformance/topology.py) and handed out as a
`Cluster` of `Node`s (artemis-clusters.md; artemis-message-grouping.md, "Clustered Grouping").

What each node's broker.xml gets besides a single broker's (artemis/config.py), rendered by
`cluster_xml`:

* ``<connectors>``: the node's own core acceptor (its ``connector-ref``, what it announces to the
  others) and one connector per static peer it dials (``.links(nodes)``: every other node for a
  symmetric cluster, the explicit ``connections`` otherwise);
* ``<cluster-user>`` / ``<cluster-password>``: a generated pair, never Artemis's default (chapter,
  "Cluster User Credentials": the default lets anyone in and is warned about at every start);
* ``<cluster-connection>`` with the `ClusterConnection` options the scenario set (address,
  message-load-balancing, max-hops, retry-interval, retry-interval-multiplier, max-retry-interval,
  initial-connect-attempts, reconnect-attempts, use-duplicate-detection, check-period,
  connection-ttl; likewise broadcast-period, refresh-timeout and redistribution-delay): an unset
  option is left out, so Artemis's own default is what runs (issue 26: a statement about a
  default is checked against the broker, not against a value the harness wrote), and
  ``<static-connectors>`` (``allow-direct-connections-only`` when the topology lists its
  connections explicitly, "Specifying Members of a Cluster Explicitly"), or a ``<broadcast-group>``
  + ``<discovery-group>`` on a loopback multicast group for discovery "udp";
  a node that dials nobody (the end of a chain) lists its own connector (the XSD needs one
  connector-ref at least; Artemis skips itself), else it announces nothing and no bridge to it forms;
* the ``redistribution-delay`` of every address (ArtemisConfig.redistribution_delay_ms), when set;
* ``<ha-policy><primary-only><scale-down>`` (2.40's name for the chapter's ``live-only``, which
  the 2.40 XSD marks deprecated for removal) with the node's ``group-name`` and connectors to the
  nodes of its group, when ``scale_down``;
* ``<grouping-handler>`` LOCAL on ``grouping.local``, REMOTE on the others; a REMOTE node's
  ``group-timeout`` is half the LOCAL one ("Clustered Grouping Best Practices").

Queues: every address is auto-created (config.py), so a queue exists on a node once a client sent
to or subscribed on it there; the suites create a node's queue by subscribing once.

Formation (`ArtemisCluster.wait_formed`): read over Jolokia, per node, the broker's ``NodeID`` and
the cluster connection MBean's ``Nodes`` (node id -> remote address of each cluster bridge that is
connected now) and which store-and-forward queues have a consumer; formed when, for every link
``(source, target)`` (of the main and the extra cluster connections), ``target``'s node id is among
``source``'s connected nodes and the bridge to it consumes its store-and-forward queue.
Management rather than the log's AMQ221027 "bridge is connected" lines: the log keeps lines of
links that have gone down since. ``Nodes`` alone is not enough either: after a cut that sends no
reset (iptables DROP between containers; a link whose answers the fault proxy held) 2.40 keeps the
peer in ``Nodes`` while its bridge retries (`ClusterManagement.bridged_nodes`).

UDP discovery on loopback (measured here, Linux, no route or interface flag changed): with
``local-bind-address`` 127.0.0.1 the broadcast socket is bound to lo's address, and the kernel
sends a multicast datagram without an explicit interface out of the device owning its source
address, so the packets stay on lo (an AF_PACKET count during a two-node formation: 50 packets to
the group on lo, 0 on eth0) and the cluster forms (about 20 s with broadcast-period 500 ms).
Each launch picks a random group and port (`UdpGroup.fresh`) so concurrent clusters stay apart.

``"cluster"`` in ``topology.proxied``: a link's static connector dials ``bridge_route(Bridge(source,
target), host, port)``. Artemis then bridges to the connector the target announces (its
``connector-ref``), not to the static one, so the target announces its proxy: each node may be
the target of one link only (a two-node cluster, or a chain).
"""

from __future__ import annotations

import re
import secrets
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable
from xml.sax.saxutils import escape, quoteattr

from conformance.scenario import Scenario
from conformance.targets.artemis.process import ArtemisProcess, JolokiaError, _object_name_value
from conformance.targets.artemis.node import ArtemisNode
from machinery.process import free_ports
from conformance.deployment import Formation, Forwarding
from conformance.topology import (Bridge, Cluster, ClusterConnection, ExtraClusterConnection, HeldBridgeRoute,
                                 Topology, TopologyUnsupported)
from machinery.waiting import Deadline, poll

__all__ = ["CLUSTER_NAME", "ArtemisCluster", "ClusterManagement", "ClusterFormationError", "UdpGroup", "cluster_xml", "launch_cluster"]

#: the cluster connection's name on every node (the MBean `wait_formed` reads)
CLUSTER_NAME = "brokerconf-cluster"
#: the grouping handler's name (any name: one handler per node)
GROUPING_NAME = "brokerconf-grouping"
#: the name prefix of a cluster connection's store-and-forward queues (Artemis 2.40:
#: ``$.artemis.internal.sf.<cluster-connection>.<target node id>``, one per peer)
SF_QUEUE_PREFIX = "$.artemis.internal.sf."


class ClusterFormationError(RuntimeError):
    """The cluster's links did not all come up in time (the message names the missing ones)."""


@dataclass(frozen=True)
class UdpGroup:
    """The multicast group of discovery "udp": broadcast and discovery groups bound to
    ``local_bind_address`` (loopback: traffic stays on the machine)."""

    group_address: str = "231.7.7.7"
    group_port: int = 9876
    local_bind_address: str = "127.0.0.1"

    @classmethod
    def fresh(cls) -> "UdpGroup":
        """A random group and port, so clusters started at once on this machine (other suites,
        other users) do not discover each other."""
        rng = secrets.SystemRandom()
        return cls(f"231.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}",
                   rng.randrange(20000, 30000))


def _connector(name: str, host: str, port: int) -> str:
    return f"         <connector name={quoteattr(name)}>tcp://{escape(host)}:{int(port)}</connector>"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def cluster_xml(topology: Topology, node: str, *, host: str | None = None, core_ports: dict[str, int] | None = None,
                addresses: dict[str, tuple[str, int]] | None = None,
                dial: dict[tuple[str, str], tuple[str, int]] | None = None, announce: tuple[str, int] | None = None,
                credentials: tuple[str, str], udp: UdpGroup | None = None) -> str:
    """The ``<core>`` elements node ``node`` adds for ``topology.cluster``. Where each node's core
    acceptor is reached: ``host`` with ``core_ports`` (every node's port on one host: local JVMs),
    or ``addresses`` (node -> (host, port): containers, each its network alias and 61616); one of
    the two. ``dial``: (source, target) -> the address a link's static connector dials (default:
    the target's own core acceptor); ``announce``: the address this node announces (default its
    own core acceptor; a proxy in front of it when its one incoming link is proxied);
    ``credentials``: the cluster user and password."""
    cc: ClusterConnection = topology.cluster
    if cc is None:
        raise ValueError("cluster_xml needs a topology with a cluster connection")
    if node not in topology.nodes:
        raise ValueError(f"node {node!r} is not one of {topology.nodes}")
    if (addresses is None) == (host is None or core_ports is None):
        raise ValueError("cluster_xml needs either host and core_ports or addresses (node -> (host, port))")
    if addresses is None:
        addresses = {name: (host, port) for name, port in core_ports.items()}
    missing = [n for n in topology.nodes if n not in addresses]
    if missing:
        raise ValueError(f"cluster_xml: no core address for node(s) {missing}")
    dial = dial or {}
    own_host, own_port = announce or addresses[node]
    targets = [t for s, t in cc.links(topology.nodes) if s == node]
    lines = ["      <!-- cluster member (conformance/targets/artemis/cluster.py) -->", "      <connectors>",
             _connector(f"node-{node}", own_host, own_port)]
    for target in targets:
        peer_host, peer_port = dial.get((node, target), addresses[target])
        lines.append(_connector(f"link-{node}-{target}", peer_host, peer_port))
    extras = [extra for extra in cc.extra_connections if node in extra.members()]
    for extra in extras:
        for target in (t for s, t in extra.connections if s == node):
            lines.append(_connector(f"extra-{extra.name}-{node}-{target}", *addresses[target]))
    scale_peers = []
    if cc.scale_down and cc.scale_down_cluster_name is None:
        group = cc.scale_down_groups.get(node)
        scale_peers = [n for n in topology.nodes if n != node and cc.scale_down_groups.get(n) == group]
        for peer in scale_peers:
            lines.append(_connector(f"scale-down-{peer}", *addresses[peer]))
    lines.append("      </connectors>")
    if credentials is not None:  # None: left out, so Artemis runs with its shipped defaults
        user, password = credentials
        lines += [f"      <cluster-user>{escape(user)}</cluster-user>",
                  f"      <cluster-password>{escape(password)}</cluster-password>"]
    if cc.ttl_check_interval_ms is not None:
        lines.append(f"      <connection-ttl-check-interval>{int(cc.ttl_check_interval_ms)}</connection-ttl-check-interval>")
    if cc.discovery == "udp":
        if udp is None:
            raise ValueError("discovery 'udp' needs the multicast group (UdpGroup)")
        lines += ["      <broadcast-groups>", f"         <broadcast-group name=\"bg-{escape(node)}\">",
                  f"            <local-bind-address>{escape(udp.local_bind_address)}</local-bind-address>",
                  f"            <group-address>{escape(udp.group_address)}</group-address>",
                  f"            <group-port>{udp.group_port}</group-port>",
                  *([f"            <broadcast-period>{cc.broadcast_period_ms}</broadcast-period>"]
                    if cc.broadcast_period_ms is not None else []),
                  f"            <connector-ref>node-{escape(node)}</connector-ref>",
                  "         </broadcast-group>", "      </broadcast-groups>",
                  "      <discovery-groups>", "         <discovery-group name=\"dg\">",
                  f"            <local-bind-address>{escape(udp.local_bind_address)}</local-bind-address>",
                  f"            <group-address>{escape(udp.group_address)}</group-address>",
                  f"            <group-port>{udp.group_port}</group-port>",
                  *([f"            <refresh-timeout>{cc.refresh_timeout_ms}</refresh-timeout>"]
                    if cc.refresh_timeout_ms is not None else []),
                  "         </discovery-group>", "      </discovery-groups>"]
    lines += ["      <cluster-connections>"]
    lines += _cluster_connection_head(cc, CLUSTER_NAME, cc.address, node, cc.message_load_balancing, cc.max_hops)
    if cc.discovery == "udp":
        lines.append("            <discovery-group-ref discovery-group-name=\"dg\"/>")
    else:
        direct = f" allow-direct-connections-only=\"{_bool(cc.connections is not None and cc.direct_connections_only)}\""
        lines.append(f"            <static-connectors{direct}>")
        lines += [f"               <connector-ref>link-{escape(node)}-{escape(t)}</connector-ref>" for t in targets]
        if not targets:
            # a node that dials nobody (a chain's end) still needs its cluster connection, or it
            # announces nothing and the bridges reaching it never form; the XSD asks one
            # connector-ref at least: its own, which Artemis skips (it is this node)
            lines.append(f"               <connector-ref>node-{escape(node)}</connector-ref>")
        lines.append("            </static-connectors>")
    lines.append("         </cluster-connection>")
    for extra in extras:
        lines += _extra_cluster_connection_xml(cc, extra, node)
    lines.append("      </cluster-connections>")
    if cc.scale_down:
        group = cc.scale_down_groups.get(node)
        inner = [f"<group-name>{escape(group)}</group-name>"] if group is not None else []
        if cc.scale_down_cluster_name is not None:
            # the chapter's element name ("Scaling Down"); the 2.40 XSD's scaleDownType has no
            # such element (nor any cluster-name), see the CLU-SCALE-6 known deviation
            inner.append(f"<scale-down-clustername>{escape(cc.scale_down_cluster_name)}</scale-down-clustername>")
        if scale_peers:
            inner.append("<connectors>" + "".join(f"<connector-ref>scale-down-{escape(p)}</connector-ref>"
                                                  for p in scale_peers) + "</connectors>")
        lines.append("      <ha-policy><primary-only><scale-down><enabled>true</enabled>" + "".join(inner)
                     + "</scale-down></primary-only></ha-policy>")
    if cc.grouping is not None:
        grouping = cc.grouping
        local = grouping.local == node
        group_timeout = grouping.group_timeout_ms
        if not local and group_timeout > 0:
            group_timeout = max(1, group_timeout // 2)  # "Clustered Grouping Best Practices": half the LOCAL one
        lines += [f"      <grouping-handler name=\"{GROUPING_NAME}\">",
                  f"         <type>{'LOCAL' if local else 'REMOTE'}</type>",
                  f"         <address>{escape(grouping.address)}</address>",
                  f"         <timeout>{grouping.timeout_ms}</timeout>",
                  f"         <group-timeout>{group_timeout}</group-timeout>",
                  f"         <reaper-period>{grouping.reaper_period_ms}</reaper-period>",
                  "      </grouping-handler>"]
    return "\n".join(lines) + "\n"


#: `ClusterConnection` option -> its ``<cluster-connection>`` element (artemis-clusters.md,
#: "Configuring Cluster Connections"), in the XSD's order; written only when the scenario set it
_CONNECTION_ELEMENTS = (
    ("check_period_ms", "check-period"),
    ("connection_ttl_ms", "connection-ttl"),
    ("retry_interval_ms", "retry-interval"),
    ("retry_interval_multiplier", "retry-interval-multiplier"),
    ("max_retry_interval_ms", "max-retry-interval"),
    ("initial_connect_attempts", "initial-connect-attempts"),
    ("reconnect_attempts", "reconnect-attempts"),
    ("use_duplicate_detection", "use-duplicate-detection"),
)


def _element_value(value: object) -> str:
    return _bool(value) if isinstance(value, bool) else _number(value)


def _cluster_connection_head(cc: ClusterConnection, name: str, address: str, node: str, load_balancing: str | None,
                             max_hops: int | None) -> list[str]:
    """A ``<cluster-connection>``'s opening and options up to its members: ``name``, ``address``,
    this node's connector-ref, load balancing and max hops as given, the timing, retry and
    duplicate-detection options from ``cc`` (shared by the main and the extra connections). An
    option left unset (None) is not written: Artemis applies its own default, which is what a
    statement about the default is checked against."""
    lines = [f"         <cluster-connection name=\"{escape(name)}\">",
             f"            <address>{escape(address)}</address>",
             f"            <connector-ref>node-{escape(node)}</connector-ref>"]
    lines += [f"            <{element}>{_element_value(getattr(cc, option))}</{element}>"
              for option, element in _CONNECTION_ELEMENTS if getattr(cc, option) is not None]
    if cc.forward_when_no_consumers is not None and name == CLUSTER_NAME:
        # the legacy element instead of message-load-balancing (CLU-MLB-2): Artemis reads either
        lines.append(f"            <forward-when-no-consumers>{_bool(cc.forward_when_no_consumers)}"
                     f"</forward-when-no-consumers>")
    elif load_balancing is not None:
        lines.append(f"            <message-load-balancing>{load_balancing}</message-load-balancing>")
    if max_hops is not None:
        lines.append(f"            <max-hops>{max_hops}</max-hops>")
    return lines


def _extra_cluster_connection_xml(cc: ClusterConnection, extra: ExtraClusterConnection, node: str) -> list[str]:
    """The ``<cluster-connection>`` of `ExtraClusterConnection` ``extra`` on ``node``: its own name,
    address, load balancing and static members; the timing options are the main connection's."""
    targets = [t for s, t in extra.connections if s == node]
    lines = _cluster_connection_head(cc, extra.name, extra.address, node, extra.message_load_balancing,
                                     max_hops=None)
    lines.append("            <static-connectors allow-direct-connections-only=\"true\">")
    lines += [f"               <connector-ref>extra-{escape(extra.name)}-{escape(node)}-{escape(t)}</connector-ref>"
              for t in targets]
    if not targets:  # a member that dials nobody still declares it, to announce itself (see cluster_xml)
        lines.append(f"               <connector-ref>node-{escape(node)}</connector-ref>")
    lines += ["            </static-connectors>", "         </cluster-connection>"]
    return lines


class ClusterManagement:
    """What the cluster reads of one member over Jolokia (``self.jolokia(request, timeout)``, broker
    ``self.name``): its node id, the nodes its cluster connection is connected to now, its
    store-and-forward queues. Shared by the local JVM (`ArtemisClusterProcess`) and the container
    (artemis/container_cluster.py)."""

    name: str

    def node_id(self) -> str:
        return str(self.jolokia({"type": "read", "mbean": f"org.apache.activemq.artemis:broker="
                                 f"{_object_name_value(self.name)}", "attribute": "NodeID"}))

    def connected_nodes(self, cluster_name: str = CLUSTER_NAME) -> dict[str, str]:
        """Node id -> remote address of each bridge of cluster connection ``cluster_name`` connected
        now ({} without that cluster connection)."""
        mbean = (f"org.apache.activemq.artemis:broker={_object_name_value(self.name)},component=cluster-connections,"
                 f"name={_object_name_value(cluster_name)}")
        try:
            value = self.jolokia({"type": "read", "mbean": mbean, "attribute": "Nodes"}, timeout=5.0)
        except JolokiaError as exc:
            if "InstanceNotFound" in str(exc):
                return {}
            raise
        return dict(value or {})

    def _store_and_forward_queues(self, attribute: str, cluster_name: str = CLUSTER_NAME) -> dict[str, int]:
        """Store-and-forward queue name -> ``attribute`` (a count), for each queue cluster connection
        ``cluster_name`` keeps here towards another node (``$.artemis.internal.sf.<cluster>.<node id>``)."""
        pattern = (f"org.apache.activemq.artemis:broker={_object_name_value(self.name)},component=addresses,"
                   "address=*,subcomponent=queues,routing-type=*,queue=*")
        value = self.jolokia({"type": "read", "mbean": pattern, "attribute": ["Name", attribute]}, timeout=5.0)
        prefix = f"{SF_QUEUE_PREFIX}{cluster_name}."
        return {str(attrs["Name"]): int(attrs.get(attribute) or 0) for attrs in (value or {}).values()
                if isinstance(attrs, dict) and str(attrs.get("Name", "")).startswith(prefix)}

    def bridged_nodes(self, cluster_name: str = CLUSTER_NAME) -> set[str]:
        """Node ids whose store-and-forward queue of ``cluster_name`` here has a consumer now: the
        cluster bridge to that node, which consumes the queue while it is connected and leaves it
        while it retries (measured on 2.40 in containers, tests/docker/test_artemis_container_cluster.py:
        after an iptables cut the queue's ConsumerCount fell from 1 to 0 once connection-ttl ran out
        and came back within seconds of the heal, while ``Nodes`` kept listing the cut peer throughout)."""
        prefix = f"{SF_QUEUE_PREFIX}{cluster_name}."
        return {name[len(prefix):] for name, consumers in self._store_and_forward_queues("ConsumerCount",
                                                                                          cluster_name).items()
                if consumers > 0}

    def store_and_forward_counts(self) -> dict[str, int]:
        """Store-and-forward queue name -> MessageCount, for each queue this node's cluster
        connection keeps towards another node: what was routed to that node and not yet handed over
        by the cluster bridge ("Architecture" of the chapter: each cluster connection forwards
        through such a queue per peer)."""
        return self._store_and_forward_queues("MessageCount")

    def store_and_forward_added(self) -> dict[str, int]:
        """Store-and-forward queue name -> MessagesAdded: every message this node has routed to the
        queue's node through it so far (CLU-BRIDGE-1: the cluster's traffic goes over that bridge)."""
        return self._store_and_forward_queues("MessagesAdded")


class ArtemisClusterProcess(ClusterManagement, ArtemisProcess):
    """An `ArtemisProcess` whose ports are chosen by the launcher (every node must know every
    other's core port before any broker.xml is written) and whose broker.xml carries the cluster
    elements."""

    def __init__(self, *args, cluster_xml_of: Callable[[], str], redistribution_delay_ms: int | None,
                 redistribution_delays: tuple[tuple[str, int], ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._cluster_xml_of = cluster_xml_of
        self._redistribution_delay_ms = redistribution_delay_ms
        self._redistribution_delays = redistribution_delays
        self._preassigned: tuple[dict[str, int], int] | None = None

    def assign_ports(self, ports: list[int]) -> None:
        self._preassigned = (dict(zip(self.listeners, ports)), ports[len(self.listeners)])
        self.ports, self.http_port = dict(self._preassigned[0]), self._preassigned[1]

    def port_count(self) -> int:
        return len(self.listeners) + 1

    def _pick_ports(self) -> None:
        if self._preassigned is None:
            super()._pick_ports()
            return
        self.ports, self.http_port = dict(self._preassigned[0]), self._preassigned[1]

    def _write_config(self) -> None:
        self.config = replace(self.config, cluster_xml=self._cluster_xml_of(),
                              redistribution_delay_ms=self._redistribution_delay_ms,
                              redistribution_delays=self._redistribution_delays)
        super()._write_config()
        trace_discovery_expiry(self.instance / "etc" / "log4j2.properties")


#: the discovery group's one record of dropping a silent server's entry (artemis-clusters.md,
#: "Discovery Groups", refresh-timeout: CLU-DISC-4) is a TRACE line, "Timed out node on
#: discovery:<entry>"; its logger at TRACE (it also traces each announcement received: a line a
#: broadcast-period per node, on clusters with UDP discovery only)
DISCOVERY_TRACE_LOGGER = ("logger.brokerconf_discovery.name=org.apache.activemq.artemis.core.cluster.DiscoveryGroup\n"
                          "logger.brokerconf_discovery.level=TRACE\n")


def trace_discovery_expiry(properties: Path) -> None:
    """Add `DISCOVERY_TRACE_LOGGER` to an instance's log4j2.properties (once)."""
    text = properties.read_text(encoding="utf-8") if properties.exists() else ""
    if "logger.brokerconf_discovery." not in text:
        properties.write_text(text.rstrip("\n") + "\n\n" + DISCOVERY_TRACE_LOGGER, encoding="utf-8")


class ArtemisClusterNode(ArtemisNode, Forwarding):
    """A cluster member: `ProcessNode` with the queue's own message count (MessageCount) as its
    size, since redistribution and scale-down move messages out of a queue without a consumer
    acknowledging them (added - acknowledged would overcount)."""

    def queue_size(self, destination: str) -> int:
        counters = self._counters(destination)
        return int(counters.raw["MessageCount"]) if counters else 0

    def forwarding_count(self) -> int:
        """Messages this node holds for other nodes: the sum of its store-and-forward queues (every
        address; a message waits there while the cluster bridge to its node is down)."""
        return sum(self.process.store_and_forward_counts().values())


class ArtemisCluster(Cluster, Formation):
    """A launched Artemis cluster (implements `conformance.topology.Cluster`)."""

    host = "127.0.0.1"

    def __init__(self, topology: Topology, nodes: dict[str, ArtemisClusterNode], workdir: Path,
                 proxied: dict[tuple[str, str], tuple[str, int]]) -> None:
        self.topology = topology
        self.nodes = nodes
        self.workdir = workdir
        #: link -> the proxy address its connector dials ({} when no link is proxied)
        self.proxied = proxied
        #: node -> the (user, password) it uses instead of the generated pair (None: the defaults)
        self.credentials_of: dict[str, tuple[str, str] | None] = {}
        self.udp: UdpGroup | None = None  # discovery "udp": the cluster's group (launch_cluster sets it)
        self.udp_of: dict[str, UdpGroup] = {}  # nodes moved to another group port (use_discovery_port)
        #: the proxied links' route, when it can hold the way to a node closed (`start`)
        self.held_route: HeldBridgeRoute | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 240) -> None:
        deadline = Deadline(timeout)
        try:
            # the JVMs start side by side: the machine is slow, and each waits for its own STOMP CONNECTED
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                for future in [pool.submit(self._start_node, name, timeout) for name in self.nodes]:
                    future.result()
            self.wait_formed(max(10.0, deadline.remaining()))
        except BaseException:
            self.stop()
            raise

    def _start_node(self, name: str, timeout: float) -> None:
        """Start node ``name``; with a `held_route`, the links towards it refuse connections
        until it serves (its STOMP CONNECTED: the broker is active), so no peer's bridge meets it
        half started (`HeldBridgeRoute`). Opened again whatever happens: a node that failed to
        start must not leave its links cut for a later launch on the same proxies."""
        if self.held_route is None:
            self.nodes[name].start(timeout)
            return
        self.held_route.refuse_towards(name)
        try:
            self.nodes[name].start(timeout)
        finally:
            self.held_route.accept_towards(name)

    def _node_id(self, name: str) -> str:
        # read each time rather than cached: a node id is kept in the journal, but a restarted
        # node whose journal was moved away (scale-down, a wiped instance) may come back with another
        return self.nodes[name].process.node_id()

    def missing_links(self) -> list[tuple[str, str]]:
        """The links of ``.links()`` and of the extra cluster connections whose cluster bridge is
        not connected now: the target is not in the cluster connection's ``Nodes``, or the bridge
        does not consume its store-and-forward queue (`ClusterManagement.bridged_nodes`). ``Nodes`` alone is not enough on 2.40: after a cut
        without a TCP reset (an iptables partition; a link whose answers the fault proxy held) it
        keeps listing the peer while the bridge retries, and a suite starting then would find
        messages stranded on the source."""
        cc = self.topology.cluster
        missing = []
        connected: dict[tuple[str, str], dict[str, str]] = {}
        bridged: dict[tuple[str, str], set[str]] = {}
        links = [(CLUSTER_NAME, link) for link in cc.links(self.topology.nodes)]
        links += [(extra.name, link) for extra in cc.extra_connections for link in extra.connections]
        for name, (source, target) in links:
            if not (self.nodes[source].running and self.nodes[target].running):
                missing.append((source, target))
                continue
            process = self.nodes[source].process
            try:
                if (name, source) not in connected:
                    connected[(name, source)] = process.connected_nodes(name)
                if (name, source) not in bridged:
                    bridged[(name, source)] = process.bridged_nodes(name)
                target_id = self._node_id(target)
                if target_id not in connected[(name, source)] or target_id not in bridged[(name, source)]:
                    missing.append((source, target))
            except JolokiaError:
                missing.append((source, target))
        return missing

    def wait_formed(self, timeout: float = 120) -> None:
        """Return once every link of ``topology.cluster.links()`` has its cluster bridge connected
        (read over Jolokia, see the module's docstring); ClusterFormationError naming the missing
        links otherwise."""
        missing = poll(self.missing_links, lambda missing: not missing, timeout=timeout, interval=0.3)
        if missing:
            raise ClusterFormationError(
                f"Artemis cluster links not connected after {timeout:.0f} s: "
                f"{', '.join(f'{s}->{t}' for s, t in missing)}\n{self.log_tail(30)}")

    def __getitem__(self, name: str) -> ArtemisClusterNode:
        return self.nodes[name]

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [node.address(protocol) for node in self.nodes.values()]

    def serving(self) -> list[str]:
        return [name for name, node in self.nodes.items() if node.running and node.serving()]

    def bridge_establishments(self) -> int:
        """AMQ221027 ("Bridge ... is connected") lines in every node's log: each cluster bridge
        connection counts once."""
        return sum(len(re.findall(r"AMQ221027", node.process.log_tail(100000))) for node in self.nodes.values())

    def subscription_discards(self, destination: str) -> list[int] | None:
        return None

    def use_cluster_credentials(self, name: str, credentials: tuple[str, str] | None) -> None:
        """From its next start node ``name`` authenticates its cluster links with ``credentials``
        (user, password) instead of the cluster's generated pair; None: Artemis's shipped defaults
        (the elements left out). For the "Cluster User Credentials" checks: a node the others do
        not accept, a node left with the defaults."""
        self.credentials_of[name] = credentials
        process = self.nodes[name].process
        if process._created:  # set by every Artemis process handle when it is made
            # broker.xml is written when the instance is created; Artemis reads the cluster
            # credentials only at start, so rewrite it now for the next start
            process._write_config()

    def use_discovery_port(self, name: str, port: int) -> None:
        """From its next start node ``name``'s broadcast and discovery groups use UDP port ``port``
        of the cluster's multicast address instead of the cluster's (CLU-DISC-10: an endpoint the
        others do not share). Discovery "udp" only."""
        if self.udp is None:
            raise ValueError("use_discovery_port needs a cluster with discovery 'udp'")
        self.udp_of[name] = replace(self.udp, group_port=port)
        process = self.nodes[name].process
        if process._created:  # set by every Artemis process handle when it is made
            process._write_config()  # broker.xml is read at start: rewritten for the next one

    def stop_broker(self, name: str) -> None:
        """Stop node ``name`` gracefully (SIGTERM: Artemis's shutdown hook stops the server, which
        is what triggers scale-down)."""
        self.nodes[name].stop()

    def start_broker(self, name: str, timeout: float = 90) -> None:
        # held like a launch's start (`_start_node`): a restarted node's peers kept retrying their
        # links all along, and one that reached it through the proxy while it was still starting
        # waited 30 s for its first answer (the formation wait after a restart: 30-32 s in 2 of 3
        # restarts of a test_cluster_link_faults run, 2.5 s otherwise)
        self._start_node(name, timeout)
        self.wait_formed(timeout)

    def restart(self, name: str, timeout: float = 90) -> None:
        self.stop_broker(name)
        self.start_broker(name, timeout)

    def copy_node_data(self, source: str, target: str, timeout: float = 90) -> None:
        """Artemis only (CLU-NODEID-1: data directories must not be copied between nodes): stop
        both, replace ``target``'s data directory (journal with the node id in its server.lock,
        bindings, paging, large messages) by a copy of ``source``'s, and start both again without
        waiting for the cluster to form (it is not expected to)."""
        for name in (target, source):
            self.nodes[name].stop()
        data = {name: self.nodes[name].process.instance / "data" for name in (source, target)}
        shutil.rmtree(data[target], ignore_errors=True)
        shutil.copytree(data[source], data[target])
        for name in (source, target):
            self._start_node(name, timeout)

    def config_text(self) -> str:
        return "\n".join(f"--- node {name} ---\n{node.process.render_config()}" for name, node in self.nodes.items())

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(f"--- node {name} ---\n{node.log_tail(lines)}" for name, node in self.nodes.items())

    def stop(self) -> None:
        errors = []
        for node in self.nodes.values():
            try:
                node.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
                errors.append(f"{node.name}: {exc}")
        if errors:
            raise RuntimeError(f"could not stop every Artemis cluster node: {errors}")

    def __repr__(self) -> str:
        return f"<ArtemisCluster {list(self.nodes)} {self.topology.cluster.message_load_balancing}>"


def _proxy_plan(topology: Topology, host: str, core_ports: dict[str, int],
                bridge_route) -> tuple[dict[tuple[str, str], tuple[str, int]], dict[str, tuple[str, int]]]:
    """(link -> address its connector dials, node -> address it announces) for ``"cluster"`` in
    ``topology.proxied``; ({}, {}) otherwise."""
    if "cluster" not in topology.proxied:
        return {}, {}
    if bridge_route is None:
        raise ValueError("topology.proxied has 'cluster': launch_topology needs a bridge_route")
    links = topology.cluster.links(topology.nodes)
    incoming: dict[str, list[str]] = {}
    for source, target in links:
        incoming.setdefault(target, []).append(source)
    crowded = {t: s for t, s in incoming.items() if len(s) > 1}
    if crowded:
        raise TopologyUnsupported(
            "an Artemis cluster bridge dials the connector its target announces, one per node, so each node can "
            f"sit behind one proxied link only; these nodes are the target of several: {crowded} (use two nodes or "
            "a chain)")
    dial = {(s, t): tuple(bridge_route(Bridge(s, t), host, core_ports[t])) for s, t in links}
    announce = {t: dial[(s, t)] for s, t in links}
    return dial, announce


def launch_cluster(topology: Topology, scenario: Scenario, workdir: Path, *,
                   counters: Callable[[ArtemisProcess], Any], bridge_route=None, jvm_heap_mb: int = 256,
                   timeout: float = 240, udp: UdpGroup | None = None) -> ArtemisCluster:
    """Start ``topology``'s nodes as an Artemis cluster and wait until every link is connected.
    ``counters``: the broker handle of a node's process (host, ports, ``destination_counters``),
    artemis/handles.py's ArtemisProcessHandle, passed in (launch_modes.py imports this module)."""
    cc = topology.cluster
    if cc is None:
        raise ValueError("launch_cluster needs a topology with a cluster connection")
    if not 2 <= len(topology.nodes) <= 4:
        raise TopologyUnsupported(f"an Artemis cluster here has 2 to 4 nodes, not {len(topology.nodes)}")
    if cc.discovery == "udp" and udp is None:
        udp = UdpGroup.fresh()
    workdir = Path(workdir).absolute() / "artemis-cluster"
    credentials = ("brokerconf-cluster", secrets.token_hex(12))
    state: dict[str, object] = {"credentials": {}, "udp": {}}
    processes: dict[str, ArtemisClusterProcess] = {}
    for name in topology.nodes:
        processes[name] = ArtemisClusterProcess(
            workdir / f"node-{name}", scenario, name=f"{topology.prefix}-{name}", jvm_heap_mb=jvm_heap_mb,
            cluster_xml_of=lambda name=name: cluster_xml(
                topology, name, host=ArtemisProcess.host, core_ports=state["core"], dial=state["dial"],
                announce=state["announce"].get(name), udp=state["udp"].get(name, udp),
                credentials=state["credentials"][name] if name in state["credentials"] else credentials),
            redistribution_delay_ms=cc.redistribution_delay_ms, redistribution_delays=cc.redistribution_delays)
    ports = free_ports(sum(p.port_count() for p in processes.values()))
    for process in processes.values():
        process.assign_ports(ports[:process.port_count()])
        ports = ports[process.port_count():]
    state["core"] = {name: p.ports["core"] for name, p in processes.items()}
    state["dial"], state["announce"] = _proxy_plan(topology, ArtemisProcess.host, state["core"], bridge_route)
    nodes = {name: ArtemisClusterNode(name, process, counters(process)) for name, process in processes.items()}
    cluster = ArtemisCluster(topology, nodes, workdir, state["dial"])
    if state["dial"] and isinstance(bridge_route, HeldBridgeRoute):
        cluster.held_route = bridge_route
    cluster.credentials_of = state["credentials"]
    cluster.udp_of, cluster.udp = state["udp"], udp
    cluster.start(timeout=timeout)
    return cluster



def start_configured_node(workdir: Path, fragment_of: Callable[[dict[str, int]], str], *, free: int = 0,
                          timeout: float = 120) -> tuple[ArtemisClusterProcess, list[int]]:
    """One Artemis JVM whose broker.xml carries ``fragment_of(ports)`` where the cluster elements go
    (``ports``: its own, "core" among them), for checks of how Artemis takes a cluster
    configuration the topology model would never render (a cluster connection without
    connector-ref, a broadcast group without group address: CLU-CC-1, CLU-DISC-3). ``free``:
    that many further free ports, returned with the started process. ArtemisStartError when it
    does not start (the message carries the log's key lines)."""
    process = ArtemisClusterProcess(Path(workdir).absolute() / "node", Scenario(name="cluster-config",
                                                                               protocols=("stomp",)),
                                    name="brokerconf-cfg", jvm_heap_mb=256,
                                    cluster_xml_of=lambda: fragment_of(process.ports), redistribution_delay_ms=-1)
    ports = free_ports(process.port_count() + free)
    process.assign_ports(ports[:process.port_count()])
    process.start(timeout=timeout)
    return process, ports[process.port_count():]
