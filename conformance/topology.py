"""The broker-neutral topology model and the contract every target implements for it.

A `Topology` describes what to launch, whatever the broker: its nodes; the bridges between them
(ActiveMQ network connectors: `Bridge` with `NetworkConnectorOptions`; an Artemis cluster
connection is the same shape, a later capability); a store the nodes share (`SharedStore`:
master/slave, one node serves at a time); and which links run through the fault proxy
(``proxied``: a `BridgeRoute` given at launch puts a proxy in front of each bridge's peer).
A single broker is a topology of one node.

The contract: a target has the topologies it can form as capabilities (`capability_of`:
``topology.network``, ``topology.shared-store``; every target launches a single broker), read from
the one table of the shapes it launches and whether it can here
(conformance/targets/runtime/shape_launch.py), and implements
``launch_topology(topology, scenario, workdir, *, bridge_route=None) -> Cluster``. A `Cluster`
holds `Node` handles with one small interface (name, address per protocol, start / stop / kill /
pause / resume, serving or not, counters, log tail). Callers (suites, chaos/) use only that, plus
the optional parts a deployment claims (conformance/deployment.py: connector renaming, formation,
shared storage, a node's forwards), asked for by type: what differs between brokers lives in the
broker's own folder under conformance/targets/.

The connector properties are declared once, in the reference broker's configuration
(reference_broker/cluster/network_config.py, the "NetworkConnector Properties" table);
`NetworkConnectorOptions` adds the "Static discovery" reconnect options that each broker renders
into its connector URI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from pydantic import model_validator

from reference_broker.cluster.network_config import NetworkConnectorProperties
from reference_broker.cluster.network_config import check_destination as _check_destination

if TYPE_CHECKING:
    from conformance.scenario import Scenario

__all__ = ["Bridge", "BridgeFilterPolicy", "BridgeRoute", "HeldBridgeRoute", "Cluster", "ClusterConnection",
           "ExtraClusterConnection",
           "GroupingHandlers",
           "CLUSTER_CONNECTION_DEFAULTS", "LOAD_BALANCING_MODES", "CompositeDestination", "Node",
           "NetworkConnectorOptions", "NfsOptions", "PEER_LIST_SCHEMES", "Shape", "SharedStore", "TOPOLOGY_CAPABILITIES",
           "Topology",
           "NodeError", "TopologyUnsupported", "capability_of", "check_destination", "check_duplex_names", "static_uri",
           "with_connector_renamed"]

#: the topology capabilities a target may declare, and what they promise
TOPOLOGY_CAPABILITIES: dict[str, str] = {
    "topology.network": "launches 2 to 4 brokers joined by network bridges (ActiveMQ network connectors)",
    "topology.shared-store": "launches 2 or more brokers on one shared store, one master at a time",
    "topology.jdbc-store": "launches 2 or more brokers on one database (a private PostgreSQL server), the lease "
                           "holder master",
    "topology.cluster": "launches 2 to 4 brokers joined by Artemis-style cluster connections (`ClusterConnection`)",
    # Networks the model does not describe yet; the target hands out rigs for them
    # (``discovery_pair(workdir, group)``, ``masterslave_rig(workdir, reconnect)``).
    "topology.discovery": "two brokers that find each other by multicast discovery (connectors list no peer)",
    "topology.masterslave-connector": "a broker bridging to a master/slave pair through a masterslave: connector",
}


class NodeError(RuntimeError):
    """A node cannot do what was asked (not running, not ours to signal)."""


class TopologyUnsupported(ValueError):
    """The target cannot form this topology (the message says which capability it lacks)."""


def check_destination(destination: str) -> None:
    """ValueError unless ``destination`` is ``queue://NAME`` or ``topic://NAME`` (wildcards allowed)."""
    _check_destination(destination)


class NetworkConnectorOptions(NetworkConnectorProperties):
    """One network connector: the "NetworkConnector Properties" table (declared once, in
    `NetworkConnectorProperties`), plus the "Static discovery" table's reconnect options, which
    the brokers carry on the connector's ``static:(...)`` URI (`static_uri`).

    Set and unset options differ: an option the scenario did not pass (not in pydantic's
    ``model_fields_set``; ``model_copy(update=...)`` adds the updated ones) is left out of every
    broker's configuration, so the broker's own default applies; the field's value is then the
    document's default, which is where code reasoning about the running bridge reads it (the
    field defaults are the tables' defaults, "NetworkConnector Properties" and "Static discovery")."""

    initial_reconnect_delay: int = 1000
    max_reconnect_delay: int = 30000
    use_exponential_back_off: bool = True
    back_off_multiplier: float = 2

    @model_validator(mode="after")
    def _reconnect(self) -> "NetworkConnectorOptions":
        if self.initial_reconnect_delay < 0 or self.max_reconnect_delay < 0 or self.back_off_multiplier <= 0:
            raise ValueError("reconnect delays must be >= 0 ms and back_off_multiplier > 0")
        return self


#: the options that go on the connector URI, not into the broker's connector properties
RECONNECT_URI_OPTIONS = {
    "initial_reconnect_delay": "initialReconnectDelay",
    "max_reconnect_delay": "maxReconnectDelay",
    "use_exponential_back_off": "useExponentialBackOff",
    "back_off_multiplier": "backOffMultiplier",
}


def _uri_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


#: connector URI schemes that list their peers in parentheses (document, "Static discovery" and
#: "MasterSlave Discovery": masterslave: takes the same options as static:)
PEER_LIST_SCHEMES = ("static", "masterslave")


def static_uri(peer_urls: list[str] | tuple[str, ...], options: NetworkConnectorOptions,
               scheme: str = "static") -> str:
    """``static:(tcp://...)`` with the reconnect options the scenario set (an unset one is left
    out: the transport's own default applies); ``scheme="masterslave"`` gives
    ``masterslave:(master,slave,...)`` with the same options."""
    if scheme not in PEER_LIST_SCHEMES:
        raise ValueError(f"scheme must be one of {PEER_LIST_SCHEMES}, not {scheme!r}")
    query = [f"{RECONNECT_URI_OPTIONS[f]}={_uri_value(getattr(options, f))}" for f in RECONNECT_URI_OPTIONS
             if f in options.model_fields_set]
    return f"{scheme}:({','.join(peer_urls)})" + ("?" + "&".join(query) if query else "")


#: transports a network connector may dial with ("Example with a fixed list of URIs": other
#: transports than tcp can carry a bridge)
BRIDGE_TRANSPORTS = ("tcp", "nio")


@dataclass(frozen=True)
class Bridge:
    """A network connector on broker ``source`` connecting to broker ``target``: messages flow
    source -> target on demand from target (both ways when ``options.duplex``)."""

    source: str
    target: str
    options: NetworkConnectorOptions = field(default_factory=NetworkConnectorOptions)
    #: False for a connector that is meant not to come up (e.g. wrong credentials, NOB-AUTH-1):
    #: the launchers' start() then does not wait for it
    expect_established: bool = True
    #: the transport the connector dials its peer with: tcp, or one of the broker's others
    #: (NOB-TRANSPORT-1: nio, ActiveMQ only; a launcher refuses a transport it does not have)
    transport: str = "tcp"

    def __post_init__(self) -> None:
        if self.source == self.target:
            raise ValueError(f"a bridge joins two brokers, not {self.source!r} to itself")
        if self.transport not in BRIDGE_TRANSPORTS:
            raise ValueError(f"a bridge's transport is one of {BRIDGE_TRANSPORTS}, not {self.transport!r}")


def check_duplex_names(bridges: tuple[Bridge, ...] | list[Bridge]) -> None:
    """Document, "Duplex network connectors": several duplex bridges between the same two brokers
    need unique names. A duplex connector is a bridge both ways, so A->B and B->A count as the same
    pair; raises ValueError naming the connectors and the ``name`` option to change."""
    seen: dict[tuple[frozenset, str], Bridge] = {}
    for bridge in bridges:
        if not bridge.options.duplex:
            continue
        key = (frozenset((bridge.source, bridge.target)), bridge.options.name)
        other = seen.get(key)
        if other is not None:
            raise ValueError(
                f"two duplex connectors between {bridge.source} and {bridge.target} are both named "
                f"{bridge.options.name!r} ({other.source}->{other.target} and {bridge.source}->{bridge.target}); "
                "give each a unique NetworkConnectorOptions(name=...) (document, 'Duplex network connectors')")
        seen[key] = bridge


def with_connector_renamed(bridges: tuple[Bridge, ...], source: str, old: str, new: str) -> tuple[Bridge, ...]:
    """``bridges`` with broker ``source``'s connector ``old`` named ``new`` (ValueError if none is)."""
    if not any(b.source == source and b.options.name == old for b in bridges):
        raise ValueError(f"broker {source} has no connector named {old!r} "
                         f"(its connectors: {[b.options.name for b in bridges if b.source == source]})")
    return tuple(replace(b, options=b.options.model_copy(update={"name": new})) if b.source == source and b.options.name == old
                 else b for b in bridges)


@dataclass(frozen=True)
class BridgeFilterPolicy:
    """A queue policy with a ``conditionalNetworkBridgeFilterFactory`` (document, "Stuck Messages"
    and "Throttling a network consumer"): ``queue`` is the policy entry's pattern (wildcards
    allowed), the rest the factory's attributes in snake_case. The document gives no defaults;
    these are ActiveMQ's (ConditionalNetworkBridgeFilterFactory). Every broker of a network gets
    the same policies."""

    queue: str
    replay_when_no_consumers: bool = False
    replay_delay: int = 0  # ms after the message entered the broker
    rate_limit: int = 0  # messages per rate_duration to network consumers; 0 = no limit
    rate_duration: int = 1000  # ms

    def __post_init__(self) -> None:
        if not self.queue or "://" in self.queue:
            raise ValueError(f"queue is a policy pattern such as 'TEST.>', not {self.queue!r}")
        if self.replay_delay < 0 or self.rate_limit < 0 or self.rate_duration <= 0:
            raise ValueError("replay_delay and rate_limit must be >= 0 and rate_duration > 0")


@dataclass(frozen=True)
class CompositeDestination:
    """ActiveMQ's ``<compositeTopic>`` / ``<compositeQueue>`` (document, "Virtual Destination
    consumers and Composite Destinations"): messages sent to ``name`` are copied to each
    ``forward_to`` destination (``queue://X`` / ``topic://Y``); with ``forward_only`` (ActiveMQ's
    default) the original destination does not get them. Every broker of a network gets the same list."""

    name: str
    forward_to: tuple[str, ...]
    kind: str = "topic"
    forward_only: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("topic", "queue") or not self.name or "://" in self.name:
            raise ValueError(f"a composite destination is kind 'topic' or 'queue' with a plain name, not "
                             f"{self.kind!r} {self.name!r}")
        if isinstance(self.forward_to, str) or not self.forward_to:
            raise ValueError(f"forward_to is a non-empty tuple of destinations, not {self.forward_to!r}")
        for destination in self.forward_to:
            check_destination(destination)  # raises on a malformed name




#: ``(bridge, peer host, peer port) -> (host, port)`` the bridge's connector dials instead of the
#: peer's own listener: a fault proxy in front of the peer, so the link alone can be cut (issue 7,
#: store and forward through a cut bridge). Called once per bridge when the ports are known.
BridgeRoute = Callable[[Bridge, str, int], tuple[str, int]]


@runtime_checkable
class HeldBridgeRoute(Protocol):
    """A `BridgeRoute` that can make the way to a peer refuse connections for a while, as a
    peer that is not up yet would. A launcher holds the links to a node closed until that node
    serves: a proxy in front of a node still starting accepts a link's connection and passes it on
    the moment the node's port opens, before the broker behind it is ready (Artemis 2.40: such a
    cluster-bridge connection got no answer to its first packet, timed out after 30 s, logged
    "Retrying" and never tried again: a CI run's cluster never formed, issue 25's note)."""

    def __call__(self, bridge: Bridge, host: str, port: int) -> tuple[str, int]: ...

    def refuse_towards(self, target: str) -> None:
        """Every link towards node ``target`` refuses connections until `accept_towards`."""

    def accept_towards(self, target: str) -> None:
        """Links towards ``target`` carry connections again."""


@dataclass(frozen=True)
class NfsOptions:
    """Put a ``file`` shared store on the simulated NFS (machinery/sharedstore): one store server, one
    FUSE mount per node whose link to the server runs through its own fault-proxy proxy, so the
    lock-loss nemesis can cut, slow or reset one node's storage link. ``mount_options``: the
    mount's options (machinery/sharedstore/mountopts.py; the A-MQ guide's 3.1 list is
    ``soft,timeo=20,retrans=2,lookupcache=none,sync``); ``version``: 4 (a client lease renewed by
    traffic, locks of a lapsed lease released) or 3 (locks never expire: the guide's negative);
    ``lease_s``: the server's NFSv4 lease."""

    mount_options: str = "soft,timeo=20,retrans=2,lookupcache=none,sync"
    version: int = 4
    lease_s: float = 10.0

    def __post_init__(self) -> None:
        if self.version not in (3, 4):
            raise ValueError(f"nfs version must be 3 or 4, not {self.version!r}")
        if not self.lease_s > 0:
            raise ValueError(f"nfs lease_s must be above 0, not {self.lease_s!r}")
        from machinery.sharedstore.mountopts import MountOptions

        vers = MountOptions.parse(self.mount_options).vers  # a bad option is refused here, by name
        if f"vers={vers}" in self.mount_options.replace("nfsvers", "vers") and vers != self.version:
            raise ValueError(f"nfs mount_options say vers={vers} but version is {self.version}: give one")


@dataclass(frozen=True)
class SharedStore:
    """A store every node of the topology opens; whichever holds its lock is master, the others
    wait as slaves (A-MQ fault-tolerant messaging guide, chapter 3). ``kind``: ``file`` (a shared
    directory, 3.1) or ``jdbc`` (one database, 3.2: the launcher starts a private PostgreSQL server
    for the group, `cluster.database`, stopped with it; the lock is a lease in it). The lock timings
    are the guide's ``lockKeepAlivePeriod`` and the locker's ``lockAcquireSleepInterval``; for a
    lease the latter is also how long a lease lasts, so the keep-alive (the renewal) must be shorter. A launched shared-store cluster also has ``store`` (where
    the store is) and ``lock_file`` (the file whose lock makes a node master, None when the harness
    cannot reach it, e.g. inside a container volume), ``master()`` and ``wait_for_master(timeout)``."""

    kind: str = "file"
    lock_keep_alive_period_ms: int = 2000
    lock_acquire_sleep_interval_ms: int = 1000
    #: a ``file`` store on the simulated NFS (`NfsOptions`); the cluster then has ``rig`` (a
    #: machinery.sharedstore.SharedStoreRig, stopped with the cluster) whose ``nemesis`` faults one
    #: node's storage link; None: a local directory
    nfs: NfsOptions | None = None
    #: a ``jdbc`` store whose every node reaches the database through its OWN proxy of a fault
    #: proxy the group starts (runtime/database_links.py): the cluster then has ``rig`` (a
    #: `DatabaseLinks`, closed with the cluster) whose ``nemesis`` cuts, slows or resets one
    #: node's database link, as the nfs ``rig`` does for a storage link; False: straight to it
    proxied_database: bool = False
    #: a ``jdbc`` store's adapter: ``direct`` (the guide's, 3.2) or ``journaled`` (ActiveMQ's
    #: journal in front of the database, each broker's journal in its own data directory: the
    #: adapter the guide rules out for a shared database, FT-JDBC-3; ActiveMQ only)
    jdbc_adapter: str = "direct"

    def __post_init__(self) -> None:
        if self.jdbc_adapter not in ("direct", "journaled"):
            raise ValueError(f"jdbc_adapter must be 'direct' or 'journaled', not {self.jdbc_adapter!r}")
        if self.jdbc_adapter != "direct" and self.kind != "jdbc":
            raise ValueError(f"jdbc_adapter applies to a kind 'jdbc' shared store, not {self.kind!r}")
        if self.kind not in ("file", "jdbc"):
            raise ValueError(f"shared store kind must be 'file' or 'jdbc', not {self.kind!r}")
        if self.nfs is not None and self.kind != "file":
            raise ValueError("nfs applies to a kind 'file' shared store, not 'jdbc'")
        if self.proxied_database and self.kind != "jdbc":
            raise ValueError(f"proxied_database applies to a kind 'jdbc' shared store (a database to proxy), "
                             f"not {self.kind!r}")
        if self.lock_keep_alive_period_ms < 0 or self.lock_acquire_sleep_interval_ms <= 0:
            raise ValueError("lock_keep_alive_period_ms must be >= 0 and lock_acquire_sleep_interval_ms > 0")
        if self.kind == "jdbc" and not 0 < self.lock_keep_alive_period_ms < self.lock_acquire_sleep_interval_ms:
            raise ValueError("a jdbc store's lease is renewed every lock_keep_alive_period_ms: it must be above 0 and "
                             "below lock_acquire_sleep_interval_ms (the lease)")


#: artemis-clusters.md, "Configuring Cluster Connections", ``message-load-balancing``; the fourth
#: (Artemis 2.x) also redistributes but never does initial distribution
LOAD_BALANCING_MODES = ("OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION")


#: The documented default of each cluster connection option a scenario may leave unset
#: (`ClusterConnection`, None = unset). An unset option is NOT written into any broker's
#: configuration, so a statement "X is the default" meets the broker's own default; this table is
#: the one place the harness reads the documented value from (`ClusterConnection.effective`).
#: Sections of artemis-clusters.md:
CLUSTER_CONNECTION_DEFAULTS: dict[str, object] = {
    # "Configuring Cluster Connections" (CLU-MLB-1, CLU-HOPS-2, CLU-CC-RETRY-1..4, CLU-CC-DUP-1, CLU-CC-PING-1)
    "message_load_balancing": "ON_DEMAND",
    "max_hops": 1,
    "retry_interval_ms": 500,
    "retry_interval_multiplier": 1.0,
    "max_retry_interval_ms": 2000,
    "initial_connect_attempts": -1,
    "reconnect_attempts": -1,
    "use_duplicate_detection": True,
    "check_period_ms": 30000,
    "connection_ttl_ms": 60000,
    # "Broadcast Groups" (CLU-DISC-2) and "Discovery Groups" (CLU-DISC-4)
    "broadcast_period_ms": 2000,
    "refresh_timeout_ms": 10000,
    # "Message Redistribution" (CLU-REDIST-4): -1, never
    "redistribution_delay_ms": -1,
}


@dataclass(frozen=True)
class GroupingHandlers:
    """Clustered message grouping (artemis-message-grouping.md, "Clustered Grouping"): node
    ``local`` has the LOCAL grouping handler that decides each group's route, every other node a
    REMOTE one that asks it. ``timeout_ms``: how long a handler waits for a decision before the
    send fails; ``group_timeout_ms`` (-1: never) and ``reaper_period_ms``: when an unused group's
    route is forgotten (the remote nodes get half the LOCAL node's group timeout, as the chapter's
    best practices advise). ``address``: the cluster connection address the handlers serve."""

    local: str
    timeout_ms: int = 5000
    group_timeout_ms: int = -1
    reaper_period_ms: int = 30000
    address: str = ""

    def __post_init__(self) -> None:
        if self.timeout_ms <= 0:
            raise ValueError(f"grouping timeout_ms must be above 0, not {self.timeout_ms!r}")
        if self.group_timeout_ms < -1 or self.group_timeout_ms == 0:
            raise ValueError(f"grouping group_timeout_ms is -1 (never) or above 0, not {self.group_timeout_ms!r}")
        if self.reaper_period_ms <= 0:
            raise ValueError(f"grouping reaper_period_ms must be above 0, not {self.reaper_period_ms!r}")


@dataclass(frozen=True)
class ExtraClusterConnection:
    """A further cluster connection some nodes declare besides the topology's main one
    (artemis-clusters.md, "Configuring Cluster Connections": a server may declare several, with
    different ``address`` values, and so belong to several clusters; CLU-ADDR-5). ``name``: its
    name on every node that declares it (what ``ClusterConnection.scale_down_cluster_name`` picks,
    CLU-SCALE-6); ``connections``: its ``(source, target)`` static connectors (explicit members,
    direct connections only), so only the nodes they name declare it; ``address`` and
    ``message_load_balancing`` as in `ClusterConnection`. The timing options are the main
    connection's. Artemis only: a reference node has one cluster connection."""

    name: str
    address: str
    connections: tuple[tuple[str, str], ...]
    #: None: unset, left out of the configuration (the broker's default applies)
    message_load_balancing: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "connections", tuple(tuple(link) for link in self.connections))
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name or ""):
            raise ValueError(f"an extra cluster connection's name is letters, digits, '_', '.', '-', not {self.name!r}")
        if not self.connections:
            raise ValueError(f"extra cluster connection {self.name!r} needs one (source, target) connection at least")
        if any(len(link) != 2 or link[0] == link[1] for link in self.connections):
            raise ValueError(f"extra cluster connection {self.name!r}: each connection joins two different nodes, "
                             f"not {self.connections!r}")
        if self.message_load_balancing is not None and self.message_load_balancing not in LOAD_BALANCING_MODES:
            raise ValueError(f"extra cluster connection {self.name!r}: message_load_balancing must be one of "
                             f"{LOAD_BALANCING_MODES}, not {self.message_load_balancing!r}")

    def members(self) -> tuple[str, ...]:
        """The nodes that declare this cluster connection (every node its connections name)."""
        return tuple(dict.fromkeys(end for link in self.connections for end in link))


@dataclass(frozen=True)
class ClusterConnection:
    """The cluster connection every node of an Artemis-style cluster declares (artemis-clusters.md,
    "Configuring Cluster Connections"). An option of `CLUSTER_CONNECTION_DEFAULTS` left None is
    unset: no broker's configuration mentions it, and `effective` gives the chapter's default.
    ``address``: comma-separated
    address prefixes, ``!prefix`` excludes and wins, "" matches every address; ``*`` or ``#`` in
    a prefix is a literal character (wildcards do not apply here: CLU-ADDR-4).
    ``connections``: ``(source, target)`` pairs, each a static connector ``source`` lists (with
    ``allow-direct-connections-only``: "Specifying Members of a Cluster Explicitly", e.g. a chain
    A->B->C); None: symmetric, every node lists every other. ``direct_connections_only`` (with
    ``connections``; Artemis's allow-direct-connections-only): False lets a node also connect to
    the members it learns of through the nodes it listed ("Discovery using static Connectors",
    CLU-STATIC-1). ``discovery``: ``static`` (the
    connector lists above) or ``udp`` (broadcast and discovery groups on a multicast address the
    launcher picks; ``broadcast_period_ms``, ``refresh_timeout_ms``). ``redistribution_delay_ms``
    is the address setting of "Message Redistribution" (-1: never, the default; 0: at once) for
    every address; ``redistribution_delays`` adds ``(match, delay_ms)`` address settings on top of
    it, ``match`` an address or an Artemis wildcard expression (the most specific match wins).
    ``scale_down``: a node shut down gracefully sends its messages to another node of its
    ``scale_down_groups`` group (node -> group name; a node not in the dict has no group name).
    ``scale_down_cluster_name``: the chapter's ``scale-down-clustername``, the name of the
    `ExtraClusterConnection` used for scaling down (None: not given). ``extra_connections``:
    further cluster connections of some nodes (`ExtraClusterConnection`; Artemis only).
    ``grouping``: clustered grouping handlers, or None."""

    address: str = ""
    # The options below are None when the scenario leaves them unset: the renderers then leave
    # them out of the broker's configuration, so the broker applies its own default (what a
    # statement "X is the default" is about). `effective` gives the documented value.
    message_load_balancing: str | None = None
    max_hops: int | None = None
    connections: tuple[tuple[str, str], ...] | None = None
    direct_connections_only: bool = True
    discovery: str = "static"
    retry_interval_ms: int | None = None
    retry_interval_multiplier: float | None = None
    max_retry_interval_ms: int | None = None
    initial_connect_attempts: int | None = None
    reconnect_attempts: int | None = None
    use_duplicate_detection: bool | None = None
    check_period_ms: int | None = None
    connection_ttl_ms: int | None = None
    broadcast_period_ms: int | None = None
    refresh_timeout_ms: int | None = None
    redistribution_delay_ms: int | None = None
    redistribution_delays: tuple[tuple[str, int], ...] = ()
    scale_down: bool = False
    scale_down_groups: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    scale_down_cluster_name: str | None = None
    grouping: GroupingHandlers | None = None
    extra_connections: tuple[ExtraClusterConnection, ...] = ()
    #: Artemis's deprecated ``forward-when-no-consumers`` (CLU-MLB-2), written instead of
    #: ``message-load-balancing`` when set (then that must stay unset); None: not written.
    #: Artemis only: the reference broker takes message_load_balancing alone
    forward_when_no_consumers: bool | None = None
    #: how often the broker looks for connections silent for their connection-ttl (Artemis's core
    #: ``connection-ttl-check-interval``, 2000 ms by default, from its "Detecting Dead Connections"
    #: chapter, not the clusters chapter): the granularity of a give-up after the ttl, which a test
    #: timing that give-up sets to the check period; None: not written. The reference broker checks
    #: at every check period, so it takes only that value
    ttl_check_interval_ms: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_connections", tuple(self.extra_connections))
        if self.forward_when_no_consumers is not None and self.message_load_balancing is not None:
            raise ValueError("forward_when_no_consumers replaces message_load_balancing: leave that unset")
        names = [extra.name for extra in self.extra_connections]
        if len(set(names)) != len(names):
            raise ValueError(f"extra cluster connections need distinct names, not {names}")
        if self.scale_down_cluster_name is not None:
            if not self.scale_down:
                raise ValueError("scale_down_cluster_name names the cluster connection used for scaling down: "
                                 "it needs scale_down=True")
            if self.scale_down_cluster_name not in names:
                raise ValueError(f"scale_down_cluster_name {self.scale_down_cluster_name!r} is not one of the "
                                 f"extra cluster connections {names}")
        if self.message_load_balancing is not None and self.message_load_balancing not in LOAD_BALANCING_MODES:
            raise ValueError(f"message_load_balancing must be one of {LOAD_BALANCING_MODES}, not "
                             f"{self.message_load_balancing!r}")
        if self.max_hops is not None and self.max_hops < 0:
            raise ValueError(f"max_hops must be 0 or more, not {self.max_hops!r}")
        if self.discovery not in ("static", "udp"):
            raise ValueError(f"discovery must be 'static' or 'udp', not {self.discovery!r}")
        if not self.direct_connections_only and self.connections is None:
            raise ValueError("direct_connections_only=False needs explicit connections (a symmetric cluster lists "
                             "every node already)")
        if self.discovery == "udp" and self.connections is not None:
            raise ValueError("connections list static connectors: give them with discovery 'static', not 'udp'")
        if self.redistribution_delay_ms is not None and self.redistribution_delay_ms < -1:
            raise ValueError(f"redistribution_delay_ms is -1 (never), 0 or more, not {self.redistribution_delay_ms!r}")
        for match, delay in self.redistribution_delays:
            if not isinstance(match, str) or not match.strip() or "://" in match:
                raise ValueError(f"redistribution_delays: {match!r} is not an address match (an address or a "
                                 "wildcard expression, without queue://)")
            if isinstance(delay, bool) or not isinstance(delay, int) or delay < -1:
                raise ValueError(f"redistribution_delays[{match!r}] is -1 (never), 0 or more, not {delay!r}")
        retry, most, multiplier = (self.effective(name) for name in ("retry_interval_ms", "max_retry_interval_ms",
                                                                      "retry_interval_multiplier"))
        if retry <= 0 or most <= 0 or multiplier < 1:
            raise ValueError("retry_interval_ms and max_retry_interval_ms must be above 0 and "
                             "retry_interval_multiplier at least 1")
        for name in ("check_period_ms", "connection_ttl_ms", "broadcast_period_ms", "refresh_timeout_ms"):
            if self.effective(name) <= 0:
                raise ValueError(f"{name} must be above 0, not {getattr(self, name)!r}")
        if self.ttl_check_interval_ms is not None and self.ttl_check_interval_ms <= 0:
            raise ValueError(f"ttl_check_interval_ms must be above 0, not {self.ttl_check_interval_ms!r}")
        for name in ("initial_connect_attempts", "reconnect_attempts"):
            if self.effective(name) < -1:
                raise ValueError(f"{name} is -1 (retry for ever) or 0 or more, not {getattr(self, name)!r}")
        # Wildcard characters are allowed and mean themselves: the chapter matches by prefix only
        # (CLU-ADDR-4), so "news.*" applies to addresses starting with the five characters "news.*".

    def effective(self, name: str):
        """Option ``name``'s value: what the scenario set, else the documented default
        (`CLUSTER_CONNECTION_DEFAULTS`): for code that reasons about the running cluster (waits
        from the retry interval, expected back-off), never for rendering."""
        value = getattr(self, name)
        return CLUSTER_CONNECTION_DEFAULTS[name] if value is None else value

    def options_set(self) -> tuple[str, ...]:
        """The options of `CLUSTER_CONNECTION_DEFAULTS` the scenario set (the ones rendered)."""
        return tuple(name for name in CLUSTER_CONNECTION_DEFAULTS if getattr(self, name) is not None)

    def links(self, nodes: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        """Every ``(source, target)`` static connector: the explicit ``connections`` or, for a
        symmetric cluster, every ordered pair of distinct nodes."""
        if self.connections is not None:
            return tuple(self.connections)
        return tuple((a, b) for a in nodes for b in nodes if a != b)

    def matches(self, address: str) -> bool:
        """Whether this cluster connection applies to ``address``: it begins with one included
        prefix (or none is given) and with no ``!`` excluded one; exclusion wins."""
        parts = [p.strip() for p in self.address.split(",") if p.strip()]
        excluded = [p[1:] for p in parts if p.startswith("!")]
        included = [p for p in parts if not p.startswith("!")]
        if any(address.startswith(prefix) for prefix in excluded):
            return False
        return not included or any(address.startswith(prefix) for prefix in included)


#: links a topology may route through the fault proxy: ``bridges`` (network connectors) or
#: ``cluster`` (cluster connections: the launcher calls ``bridge_route(Bridge(source, target), peer
#: host, peer port)`` for each of `ClusterConnection.links` and dials the address it returns)
PROXIED_LINKS = ("bridges", "cluster")


class Shape(Enum):
    """What a topology's nodes share or are joined by (`Topology.shape`), each with the capability
    a target has when it can launch it (`TOPOLOGY_CAPABILITIES`; none for one broker, which every
    target launches). A target declares the shapes it launches, each with its launcher and whether
    it can launch it here, in one table (conformance/targets/runtime/shape_launch.py); its topology
    capabilities follow from that table, never written beside it.

    ``rigs``: the capabilities of the networks the model does not describe yet (the target hands
    out rigs for them: ``discovery_pair``, ``masterslave_rig``). They stay capabilities of their
    own because a suite asks for them apart from a plain network, but each is a variant of one
    shape, launched by the same code as the target's networks (ActiveMQ's local JVMs, the
    reference broker's processes), so a target has them exactly where it launches that shape."""

    SINGLE = ("single", None)
    SHARED_STORE = ("shared-store", "topology.shared-store")
    JDBC_STORE = ("jdbc-store", "topology.jdbc-store")
    NETWORK = ("network", "topology.network", ("topology.discovery", "topology.masterslave-connector"))
    CLUSTER = ("cluster", "topology.cluster")

    def __init__(self, kind: str, capability: str | None, rigs: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.capability = capability
        self.rigs = rigs

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What a target that can launch this shape has: the shape's capability and its rigs'."""
        return (self.capability, *self.rigs) if self.capability is not None else ()

    @classmethod
    def of_capability(cls, capability: str) -> "Shape | None":
        """The shape whose capabilities include ``capability`` (None: not a topology's)."""
        return next((shape for shape in cls if capability in shape.capabilities), None)


@dataclass(frozen=True)
class Topology:
    """What to launch, broker-neutrally. ``nodes``: node names (``("A",)`` for one broker);
    ``bridges`` between them; ``shared_store`` when they share one; ``proxied``: the links that
    run through the fault proxy (``"bridges"``: each bridge dials a proxy in front of its peer,
    given as ``bridge_route`` at launch). The rest shapes every broker of a network alike:
    bridge filter policies, composite destinations, ``broker_attributes`` (ActiveMQ ``<broker>``
    attribute names, node -> {attribute: value}), ``users`` (node -> (user, password) pairs: that
    node refuses anonymous logins), ``persistent`` (nodes keep messages and durable subscriptions
    across a restart), ``prefix`` of the broker names (``<prefix>-<node>``)."""

    nodes: tuple[str, ...] = ("A",)
    bridges: tuple[Bridge, ...] = ()
    shared_store: SharedStore | None = None
    proxied: tuple[str, ...] = ()
    policies: tuple[BridgeFilterPolicy, ...] = ()
    composites: tuple[CompositeDestination, ...] = ()
    broker_attributes: dict[str, dict[str, str]] = field(default_factory=dict, hash=False, compare=False)
    users: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict, hash=False, compare=False)
    persistent: bool = False
    prefix: str = "nob"
    #: Artemis-style cluster connections joining the nodes (`ClusterConnection`), or None
    cluster: ClusterConnection | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "bridges", tuple(self.bridges))
        if not self.nodes or len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"a topology has one or more distinct nodes, not {self.nodes!r}")
        if sum(x is not None and x != () for x in (self.bridges, self.shared_store, self.cluster)) > 1:
            raise ValueError("a topology has bridges, a shared store or a cluster connection, one of them (yet)")
        if self.cluster is not None:
            if len(self.nodes) < 2:
                raise ValueError("a cluster has two or more nodes")
            named = [end for link in (self.cluster.connections or ()) for end in link]
            named += list(self.cluster.scale_down_groups)
            named += [self.cluster.grouping.local] if self.cluster.grouping else []
            named += [end for extra in self.cluster.extra_connections for end in extra.members()]
            unknown = sorted({n for n in named if n not in self.nodes})
            if unknown:
                raise ValueError(f"the cluster connection names {unknown}, not among the nodes {self.nodes}")
            if any(a == b for a, b in (self.cluster.connections or ())):
                raise ValueError("a cluster connection joins two different nodes")
        for bridge in self.bridges:
            for end in (bridge.source, bridge.target):
                if end not in self.nodes:
                    raise ValueError(f"bridge {bridge.source}->{bridge.target} names {end!r}, not one of "
                                     f"{self.nodes}")
        bad = [link for link in self.proxied if link not in PROXIED_LINKS]
        if bad:
            raise ValueError(f"proxied links are {PROXIED_LINKS}, not {bad}")

    @property
    def shape(self) -> "Shape":
        """What the nodes share or are joined by: the one place a topology's kind is told from its
        fields (a target launches by it: conformance/targets/runtime/shape_launch.py)."""
        if self.cluster is not None:
            return Shape.CLUSTER
        if self.shared_store is not None:
            return Shape.JDBC_STORE if self.shared_store.kind == "jdbc" else Shape.SHARED_STORE
        if len(self.nodes) > 1:
            return Shape.NETWORK
        return Shape.SINGLE

    @property
    def kind(self) -> str:
        """``single``, ``shared-store``, ``jdbc-store``, ``cluster`` or ``network``: the shape's
        name, for messages (ask `shape`, never compare this)."""
        return self.shape.kind

    @property
    def capability(self) -> str | None:
        return capability_of(self)

    def with_bridges(self, bridges: tuple[Bridge, ...]) -> "Topology":
        return replace(self, bridges=tuple(bridges))


def capability_of(topology: Topology) -> str | None:
    """The capability a target declares to launch ``topology`` (``topology.<kind>``); None for a
    single broker, which every target launches."""
    return topology.shape.capability


# --------------------------------------------------------------------------- the contract


@runtime_checkable
class Node(Protocol):
    """One broker of a launched topology: what every node has. What only some nodes have is a
    part (conformance/deployment.py: `Forwarding`, `InFlight`), asked for with ``part``."""

    name: str
    host: str

    @property
    def pid(self) -> int | None:
        """The broker's process id (None: not a process of ours, e.g. an in-process broker)."""

    @property
    def running(self) -> bool:
        """Started and not stopped or killed (a paused node is running)."""

    def address(self, protocol: str) -> tuple[str, int]:
        """(host, port) of this node's ``protocol`` listener; KeyError when it has none."""

    def start(self, timeout: float = 60) -> None:
        """Start again after stop / kill, on the same ports and data."""

    def stop(self) -> None:
        """Stop gracefully."""

    def kill(self) -> None:
        """Stop at once (SIGKILL for a process), losing what was not written."""

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP its process group); `resume` thaws it."""

    def resume(self) -> None: ...

    def serving(self) -> bool:
        """Whether the node accepts clients now (a waiting slave does not)."""

    def consumer_count(self, destination: str) -> int:
        """Consumers of ``destination`` here, local and network (bridge) consumers alike."""

    def queue_size(self, destination: str) -> int:
        """Messages held here for ``destination`` (0 when it does not exist here)."""

    def wait_for_consumers(self, destination: str, count: int, timeout: float = 10.0) -> int:
        """Poll until ``destination`` counts ``count`` consumers; returns the last count seen."""

    def log_tail(self, lines: int = 80) -> str: ...


@runtime_checkable
class Cluster(Protocol):
    """A launched topology: its nodes by name and what spans them. This is the core every
    launched deployment implements; what only some can do (rename a connector, wait for a
    cluster to form, the shared store's master and fault rig) is a part of its own
    (conformance/deployment.py), which a launcher claims among its bases and a caller asks for
    with ``part`` / ``require``."""

    topology: Topology
    nodes: dict[str, Node]

    def __getitem__(self, name: str) -> Node: ...

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        """Every node's ``protocol`` address in node order (a failover URL's order)."""

    def serving(self) -> list[str]:
        """The nodes that serve clients now (a shared store's master; every node of a network)."""

    def bridge_establishments(self) -> int:
        """How often the bridges have been established so far (each reconnect counting once)."""

    def subscription_discards(self, destination: str) -> list[int] | None:
        """The discarded counter of every subscription on ``destination`` (None: not readable)."""

    def restart(self, name: str, timeout: float = 90) -> None:
        """Stop node ``name`` and start it again; returns once its bridges are up again."""

    def stop_broker(self, name: str) -> None: ...

    def start_broker(self, name: str, timeout: float = 90) -> None:
        """Start node ``name`` again with its current bridges; returns once they are up."""

    def log_tail(self, lines: int = 40) -> str: ...

    def config_text(self) -> str: ...

    def stop(self) -> None: ...


def check_supported(target, topology: Topology) -> None:
    """TopologyUnsupported unless ``target`` declares ``topology``'s capability."""
    needed = capability_of(topology)
    if needed is not None and needed not in target.capabilities():
        raise TopologyUnsupported(f"target {target.name} lacks {needed} (it cannot launch a {topology.kind} "
                                  f"topology here)")
