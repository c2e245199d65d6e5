"""The experiment file: a TOML description of one chaos experiment, checked up front.

    name = "reference-kill-restart"
    duration_s = 20                 # how long the workload runs under faults
    min_duration_s = 20             # a runner that shortens the run (the main job) keeps it this long at least
    recovery_s = 3                  # quiet seconds after the last heal before the workload stops
    seed = 1                        # draws the drawn timings (every_max_s, down_max_s) and cluster churn

    [target]
    name = "reference:process"      # a target name (`brokerconf targets list`); must be killable for kill faults
    protocol = "stomp"
    failover = true                 # clients use failover:(...) over every node's address
    failover_options = "randomize=false&initialReconnectDelay=100&maxReconnectDelay=1000"

    [topology]                      # each kind has only its own keys: one of another kind is refused, naming
                                    # the kinds that have it (SingleTopology, SharedStoreTopology, ...)
    kind = "single"                 # single (no other key) | shared-store (N brokers on one store: master/slave)
                                    # | network | cluster (below); left out: single
    nodes = 2                       # shared-store, network and cluster (these two: 2 to 4)
    lock_keep_alive_period_ms = 2000
    lock_acquire_sleep_interval_ms = 1000
    store = "local"                 # shared-store: "local" directory, or "nfs": the simulated NFS
                                    # (machinery/sharedstore), each node through its own mount and proxy,
                                    # or "jdbc": one PostgreSQL database (guide 3.2, a lease in it),
                                    # each node's database link through its own proxy; the lease lasts
                                    # lock_acquire_sleep_interval_ms, renewed every lock_keep_alive_period_ms
    nfs_mount_options = "soft,timeo=20,retrans=2,lookupcache=none,sync"
    nfs_version = 4                 # 4: leases (a lapsed client's locks released); 3: locks never expire
    nfs_lease_s = 10.0              # the store server's NFSv4 lease
    # kind = "network": `nodes` brokers joined by network connectors (ActiveMQ "Networks of
    # Brokers"), each bridge's link through the fault proxy; clients reach the brokers directly
    bridges = ["A->B"]              # "X->Y" (one-way) or "X<->Y" (duplex)
    initial_reconnect_delay_ms = 1000   # the static: transport's reconnect options ("Static discovery");
    max_reconnect_delay_ms = 30000      # left out, an option is unset: no broker's configuration
    use_exponential_back_off = true     # mentions it (the values shown are the table's defaults)
    producer_node = "A"             # network and cluster: producers connect here ...
    consumer_node = "B"             # ... network: consumers and the final drain there

    # kind = "cluster": `nodes` brokers (2 to 4) joined by Artemis-style cluster connections
    # (artemis-clusters.md), options as the chapter names them; the values shown are its defaults,
    # and an option left out is unset (the brokers apply their own default)
    message_load_balancing = "ON_DEMAND"   # OFF | STRICT | ON_DEMAND | OFF_WITH_REDISTRIBUTION
    max_hops = 1
    redistribution_delay_ms = -1    # -1: never; 0: at once; N ms after a queue's last consumer closed
    retry_interval_ms = 500
    max_retry_interval_ms = 2000
    reconnect_attempts = -1
    grouping_local = "A"            # clustered grouping: the LOCAL handler's node (others REMOTE)
    grouping_timeout_ms = 5000
    consumer_nodes = ["B", "C"]     # cluster: consumers connect here (producers: producer_node)

    [[policy]]                      # destination policies of the broker (conformance.scenario)
    pattern = "topic://chaos.slow.>"
    pending_message_limit = 10

    [workload]
    kind = "queue"                  # queue | grouped | topic
    producers = 2
    consumers = 2                   # queue and grouped
    subscribers = 3                 # topic
    slow_subscribers = 1            # topic: the first N subscribers connect through the fault proxy
    rate = 100                      # sends per second per producer
    persistent = true
    destination = "queue://chaos.kill"
    groups = ["g0", "g1"]           # grouped
    ack = "client-individual"       # or auto
    prefetch = 10                   # consumer prefetch (omit: the client's default)
    consumer_lifetime_s = [1.0, 3.0]    # cluster: consumer churn, each open this long, then closed ...
    consumer_pause_s = 0.5              # ... this long
    producers_after_consumers_s = 2.0   # cluster: producers start once every consumer subscribed, + this

    [[nemesis]]
    kind = "kill"                   # kill | pause | stop (each followed by a restart / resume) |
                                    # partition (clients cut off through the fault proxy, then healed) |
                                    # latency | bandwidth | reset_peer (a toxic on the fault proxy, then removed) |
                                    # lock-loss (store = "nfs" or "jdbc": a fault of one node's storage or
                                    # database link, then healed)
    fault = "partition"             # lock-loss: partition | latency | reset | expire (of the node's NFS lease; nfs only)
    every_s = 5                     # seconds of quiet before each fault (the first after N s, the next N s after a heal)
    down_s = 1                      # how long the fault lasts
    every_max_s = 9                 # optional: each quiet gap drawn from [every_s, every_max_s] with the seed
    down_max_s = 3                  # optional: each fault's length drawn from [down_s, down_max_s] with the seed
    node = "master"                 # process faults: a node name (A, B, ...) or "master" (whoever serves then)
    clients = "all"                 # proxy faults: "all" clients, or only the "slow" subscribers
    link = "clients"                # proxy faults: cut the "clients", (network) the "bridges", (cluster) the "cluster" links
    latency_ms = 100                # latency (with jitter_ms); bandwidth: rate_kbps; reset_peer: timeout_ms

    [checkers]
    total_queue = true              # queue and grouped workloads
    duplicates_allowed = false      # at-least-once systems may redeliver unacknowledged messages
    topic_fanout = true             # topic workloads; slow subscribers' gaps must equal the broker's discards
    failover_downtime = true        # per fault, each client's time to its first successful operation
    max_downtime_s = 30             # optional bound: a longer downtime makes the verdict false
    split_brain = false             # two nodes accepting sends/deliveries at once (master/slave topologies)
    redistribution = false          # cluster: none lost or delivered twice; ON_DEMAND: only to nodes with consumers
    group_pinning = false           # cluster: a group's messages delivered by one node (moved only by a fault)

A bad file is refused before anything starts, naming the offending key (with a did-you-mean).
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from conformance.scenario import DestinationPolicy
from conformance.topology import (CLUSTER_CONNECTION_DEFAULTS, Bridge, ClusterConnection, GroupingHandlers,
                                  NetworkConnectorOptions, NfsOptions, SharedStore, Topology)


class ExperimentError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TargetSection(_Strict):
    name: str = "reference:process"
    protocol: Literal["stomp", "mqtt", "amqp"] = "stomp"
    failover: bool = True
    failover_options: str = "randomize=false&initialReconnectDelay=100&maxReconnectDelay=1000"


#: NetworkTopology's reconnect options -> NetworkConnectorOptions' fields
_RECONNECT_FIELDS = {"initial_reconnect_delay_ms": "initial_reconnect_delay", "max_reconnect_delay_ms": "max_reconnect_delay",
                     "use_exponential_back_off": "use_exponential_back_off"}


def _one_of(names: list[str]) -> str:
    """``"a", "b" or "c"``: the names a message offers."""
    quoted = [f'"{name}"' for name in names]
    return " or ".join(filter(None, (", ".join(quoted[:-1]), quoted[-1])))


# ------------------------------------------------------------ [topology]: one shape per kind
# The section is a tagged union (issue 27): each shape has its own keys, defaults and checks, and
# answers what the harness used to ask by comparing `kind` with a name: its node names, the
# broker-neutral `Topology` it launches (conformance/topology.py), which faults of [[nemesis]] it
# takes, and what it asks of the rest of the experiment. `kind` is read here and nowhere else in
# chaos/ (tests/test_topology_kind_dispatch.py fails on a comparison of it with a name).


class _TopologyShape(_Strict):
    """What every [topology] shape answers."""

    #: the [[nemesis]] `link` this shape's proxy faults cut: "clients" (each client's connection)
    #: unless the shape has links of its own between brokers
    fault_link: ClassVar[str] = "clients"
    #: one node serves clients at a time (a single broker; a shared store's master): the runner
    #: asks who serves now (chaos/topology.py `RunningTopology.master`); in a network or a
    #: cluster every broker serves its own clients
    one_serves_at_a_time: ClassVar[bool] = True
    #: the target's own broker, which every target launches (no topology capability): a process
    #: fault needs the target's process.kill
    launched_by_every_target: ClassVar[bool] = False

    @classmethod
    def kind_name(cls) -> str:
        """The `kind` that selects this shape."""
        return cls.model_fields["kind"].default

    @property
    def node_names(self) -> list[str]:
        return list("ABCDEFGH"[:self.nodes])

    @property
    def on_simulated_nfs(self) -> bool:
        """The brokers' store lives on the simulated NFS (machinery/sharedstore: needs FUSE)."""
        return False

    def conformance_topology(self, nemeses: list[NemesisSection]) -> Topology:
        """The broker-neutral model the target launches (chaos/topology.py)."""
        return Topology(tuple(self.node_names))

    @model_validator(mode="before")
    @classmethod
    def _refuse_other_shapes_keys(cls, data):
        # A key of another shape names the kind that has it (an unknown key is refused by pydantic,
        # with a did-you-mean: `_explain`)
        if isinstance(data, dict):
            for key, value in data.items():
                owners = [shape.kind_name() for shape in TOPOLOGY_SHAPES if key in shape.model_fields]
                if key not in cls.model_fields and owners:
                    raise ValueError(f"{key} = {json.dumps(value)} needs kind = {_one_of(owners)}, "
                                     f"not {cls.kind_name()!r}")
        return data

    # --------------------------------------------------- what the shape asks of the experiment

    def check_experiment(self, exp: "Experiment") -> None:
        """ValueError when the rest of ``exp`` does not fit this shape. Only a cluster churns
        consumers, delays its producers or is judged by the cluster checkers."""
        if exp.workload.consumer_lifetime_s is not None:
            raise ValueError("[workload] consumer_lifetime_s (consumer churn) needs a cluster topology "
                             "([topology] kind = \"cluster\")")
        if exp.workload.producers_after_consumers_s is not None:
            raise ValueError("[workload] producers_after_consumers_s needs a cluster topology "
                             "([topology] kind = \"cluster\")")
        if exp.checkers.redistribution or exp.checkers.group_pinning:
            raise ValueError("[checkers] redistribution and group_pinning judge cluster topologies: set "
                             "[topology] kind = \"cluster\" or turn them off")

    def check_nemesis(self, index: int, nemesis: NemesisSection) -> None:
        """ValueError when [[nemesis]] entry ``index`` cannot fault this shape."""
        if nemesis.plane is FaultPlane.STORE:
            self._check_store_fault(index, nemesis)
        if nemesis.plane is FaultPlane.PROCESS:
            allowed = self.process_fault_nodes()
            if nemesis.node not in allowed:
                raise ValueError(f"nemesis[{index}].node {nemesis.node!r} is not a node of this "
                                 f"{self.kind_name()} topology (one of {allowed})")
        self._check_link(index, nemesis)

    def process_fault_nodes(self) -> list[str]:
        """What a process fault's `node` may name."""
        return self.node_names

    def _check_store_fault(self, index: int, nemesis: NemesisSection) -> None:
        raise ValueError(f"nemesis[{index}]: a lock-loss fault needs a shared store on the simulated "
                         f"NFS or in a database ([topology] kind = \"shared-store\", store = \"nfs\" "
                         f"or \"jdbc\")")

    def _check_link(self, index: int, nemesis: NemesisSection) -> None:
        owner = LINK_OWNERS.get(nemesis.link)
        if owner is not None and owner is not type(self):
            raise ValueError(f"nemesis[{index}].link = \"{nemesis.link}\" needs a {owner.kind_name()} topology "
                             f"([topology] kind = \"{owner.kind_name()}\"), not {self.kind_name()!r}")
        if owner is not None and nemesis.plane is not FaultPlane.PROXY:
            raise ValueError(f"nemesis[{index}].link = \"{nemesis.link}\" applies to proxy faults "
                             f"{PROXY_FAULTS}, not {nemesis.kind!r}")


class SingleTopology(_TopologyShape):
    """One broker, node ``A``: the target's own."""

    kind: Literal["single"] = "single"
    launched_by_every_target: ClassVar[bool] = True

    @property
    def node_names(self) -> list[str]:
        return ["A"]


class SharedStoreTopology(_TopologyShape):
    """``nodes`` brokers on one store, one master at a time (A-MQ fault-tolerant messaging guide,
    3.1); the lock settings are that section's."""

    kind: Literal["shared-store"] = "shared-store"
    nodes: int = Field(default=2, ge=2, le=8)
    lock_keep_alive_period_ms: int = Field(default=2000, ge=0)
    lock_acquire_sleep_interval_ms: int = Field(default=1000, gt=0)
    # where the store lives; "nfs" puts it on the simulated NFS (machinery/sharedstore, issue 18
    # section 4) with these mount options (nfs(5); the A-MQ guide's 3.1 list by default); "jdbc" in
    # one PostgreSQL database (guide 3.2), each node's link to it through its own proxy of the fault
    # proxy (conformance/targets/runtime/database_links.py), the lock a lease lasting
    # lock_acquire_sleep_interval_ms and renewed every lock_keep_alive_period_ms
    store: Literal["local", "nfs", "jdbc"] = "local"
    nfs_mount_options: str = "soft,timeo=20,retrans=2,lookupcache=none,sync"
    nfs_version: Literal[3, 4] = 4
    nfs_lease_s: float = Field(default=10.0, gt=0)

    @property
    def on_simulated_nfs(self) -> bool:
        return self.store == "nfs"

    def conformance_topology(self, nemeses: list[NemesisSection]) -> Topology:
        nfs = (NfsOptions(mount_options=self.nfs_mount_options, version=self.nfs_version, lease_s=self.nfs_lease_s)
               if self.store == "nfs" else None)
        # a jdbc store's database links always run through the fault proxy: a lock-loss fault cuts one
        jdbc = self.store == "jdbc"
        return Topology(tuple(self.node_names), shared_store=SharedStore(
            kind="jdbc" if jdbc else "file", lock_keep_alive_period_ms=self.lock_keep_alive_period_ms,
            lock_acquire_sleep_interval_ms=self.lock_acquire_sleep_interval_ms, nfs=nfs, proxied_database=jdbc))

    def process_fault_nodes(self) -> list[str]:
        return self.node_names + ["master"]  # "master": whoever serves when the fault comes

    def _check_store_fault(self, index: int, nemesis: NemesisSection) -> None:
        if self.store not in ("nfs", "jdbc"):
            super()._check_store_fault(index, nemesis)
        if nemesis.fault == "expire" and self.store != "nfs":
            raise ValueError(f"nemesis[{index}].fault = \"expire\" ends a host's lease on the simulated NFS "
                             f"store; a {self.store} store has none to end: use partition, latency or reset")
        if nemesis.node not in self.process_fault_nodes():
            raise ValueError(f"nemesis[{index}].node {nemesis.node!r} is not a node of this shared-store "
                             f"topology (one of {self.process_fault_nodes()})")

    @model_validator(mode="after")
    def _store_fits(self) -> "SharedStoreTopology":
        if self.store == "jdbc":
            # a lease renewed less often than it lasts lapses under a healthy master (SharedStore's rule)
            if not 0 < self.lock_keep_alive_period_ms < self.lock_acquire_sleep_interval_ms:
                raise ValueError(f"store = \"jdbc\": the lease lasts lock_acquire_sleep_interval_ms "
                                 f"({self.lock_acquire_sleep_interval_ms}) and is renewed every "
                                 f"lock_keep_alive_period_ms ({self.lock_keep_alive_period_ms}), which must be above "
                                 "0 and below it")
        if self.store == "nfs":
            from machinery.sharedstore.mountopts import MountOptions, MountOptionError

            try:
                MountOptions.parse(self.nfs_mount_options)
            except MountOptionError as exc:
                raise ValueError(f"nfs_mount_options: {exc}") from None
        return self


class NetworkTopology(_TopologyShape):
    """``nodes`` brokers (2 to 4) joined by `bridges` (ActiveMQ "Networks of Brokers"); the
    reconnect options are the "Static discovery" table's. One left out stays None (unset): the
    brokers' configurations do not mention it and their own defaults apply; `effective` gives the
    documented value (NetworkConnectorOptions' field defaults)."""

    kind: Literal["network"] = "network"
    fault_link: ClassVar[str] = "bridges"
    one_serves_at_a_time: ClassVar[bool] = False
    nodes: int = Field(default=2, ge=2, le=8)
    bridges: list[str] = Field(default_factory=lambda: ["A->B"])
    initial_reconnect_delay_ms: int | None = Field(default=None, ge=0)
    max_reconnect_delay_ms: int | None = Field(default=None, ge=0)
    use_exponential_back_off: bool | None = None
    producer_node: str = "A"
    consumer_node: str = "B"

    def effective(self, name: str):
        """Reconnect option ``name``'s value: the file's, else the "Static discovery" table's
        default (NetworkConnectorOptions' field default), for waits computed from it; never rendered."""
        value = getattr(self, name)
        if value is not None:
            return value
        return NetworkConnectorOptions.model_fields[_RECONNECT_FIELDS[name]].default

    def bridge_ends(self) -> list[tuple[str, str, bool]]:
        """``bridges`` as (source, target, duplex)."""
        ends = []
        for text in self.bridges:
            duplex = "<->" in text
            source, sep, target = text.replace(" ", "").partition("<->" if duplex else "->")
            ends.append((source, target, duplex))
        return ends

    def conformance_topology(self, nemeses: list[NemesisSection]) -> Topology:
        options = {field: getattr(self, name) for name, field in _RECONNECT_FIELDS.items()}
        # only the options the file set: an unset one stays unset (its broker's default applies)
        options = {key: value for key, value in options.items() if value is not None}
        bridges = tuple(Bridge(source, target_node, NetworkConnectorOptions(duplex=duplex, **options))
                        for source, target_node, duplex in self.bridge_ends())
        return Topology(tuple(self.node_names), bridges, proxied=("bridges",), prefix="chaos")

    def check_experiment(self, exp: "Experiment") -> None:
        # The network launchers (conformance/targets/activemq/network.py, reference/network.py)
        # give each broker a STOMP listener only.
        if exp.target.protocol != "stomp":
            raise ValueError(f"a network topology's brokers listen for STOMP only: set [target] protocol = "
                             f"\"stomp\", not {exp.target.protocol!r}")
        # Only durable sources keep their messages across a failing bridge (ActiveMQ "Networks of
        # Brokers", "Reliability"): the network topology runs queue workloads.
        if exp.workload.fans_out:
            raise ValueError("a network topology runs queue or grouped workloads (a non-durable topic may lose "
                             "in-flight messages across a failing bridge, as documented): set [workload] kind")
        super().check_experiment(exp)

    def _check_link(self, index: int, nemesis: NemesisSection) -> None:
        super()._check_link(index, nemesis)
        if nemesis.link != self.fault_link:
            raise ValueError(f"nemesis[{index}]: a network topology's faults cut its bridges (set link = "
                             f"\"bridges\" with a proxy fault {PROXY_FAULTS}); its brokers' processes and "
                             "clients are not faulted")

    @model_validator(mode="after")
    def _network_fits(self) -> "NetworkTopology":
        if self.nodes > 4:
            raise ValueError(f"a network topology has 2 to 4 brokers, not {self.nodes}")
        nodes = self.node_names
        if not self.bridges:
            raise ValueError("a network topology needs at least one bridge, e.g. bridges = [\"A->B\"]")
        for text, (source, target, _) in zip(self.bridges, self.bridge_ends()):
            if source not in nodes or target not in nodes or source == target:
                raise ValueError(f"bridge {text!r} must join two different nodes of {nodes} as \"X->Y\" (one-way) "
                                 "or \"X<->Y\" (duplex)")
        if len({(s, t) for s, t, _ in self.bridge_ends()}) != len(self.bridges):
            raise ValueError(f"bridges {self.bridges} name the same pair twice")
        for label in ("producer_node", "consumer_node"):
            if getattr(self, label) not in nodes:
                raise ValueError(f"{label} {getattr(self, label)!r} is not a node of this network ({nodes})")
        return self


class ClusterTopology(_TopologyShape):
    """``nodes`` brokers (2 to 4) joined by Artemis-style cluster connections (artemis-clusters.md;
    conformance.topology.ClusterConnection), options as the chapter names them (snake_case). One
    left out stays None (unset): the brokers apply their own default; `effective` gives the
    documented value (CLUSTER_CONNECTION_DEFAULTS)."""

    kind: Literal["cluster"] = "cluster"
    fault_link: ClassVar[str] = "cluster"
    one_serves_at_a_time: ClassVar[bool] = False
    nodes: int = Field(default=2, ge=2, le=8)
    message_load_balancing: Literal["OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION"] | None = None
    max_hops: int | None = Field(default=None, ge=0)
    redistribution_delay_ms: int | None = Field(default=None, ge=-1)
    retry_interval_ms: int | None = Field(default=None, gt=0)
    max_retry_interval_ms: int | None = Field(default=None, gt=0)
    reconnect_attempts: int | None = Field(default=None, ge=-1)
    # clustered grouping: the node with the LOCAL handler (None: no grouping handlers)
    grouping_local: str | None = None
    grouping_timeout_ms: int = Field(default=5000, gt=0)
    # where the workload's producers and consumers connect (consumers: empty, every node but the
    # producer's)
    producer_node: str = "A"
    consumer_nodes: list[str] = Field(default_factory=list)

    def effective(self, name: str):
        """Cluster option ``name``'s value: the file's, else the chapter's default
        (CLUSTER_CONNECTION_DEFAULTS), for waits computed from it; never rendered."""
        value = getattr(self, name)
        return CLUSTER_CONNECTION_DEFAULTS[name] if value is None else value

    def conformance_topology(self, nemeses: list[NemesisSection]) -> Topology:
        grouping = (GroupingHandlers(local=self.grouping_local, timeout_ms=self.grouping_timeout_ms)
                    if self.grouping_local else None)
        cluster = ClusterConnection(message_load_balancing=self.message_load_balancing, max_hops=self.max_hops,
                                    redistribution_delay_ms=self.redistribution_delay_ms,
                                    retry_interval_ms=self.retry_interval_ms,
                                    max_retry_interval_ms=self.max_retry_interval_ms,
                                    reconnect_attempts=self.reconnect_attempts, grouping=grouping)
        # the cluster links run through the fault proxy only when a fault cuts them
        proxied = (self.fault_link,) if any(n.link == self.fault_link for n in nemeses) else ()
        # persistent: a killed node keeps the messages routed or redistributed to it (its journal)
        return Topology(tuple(self.node_names), cluster=cluster, proxied=proxied, prefix="chaos", persistent=True)

    def check_experiment(self, exp: "Experiment") -> None:
        if exp.workload.fans_out:
            raise ValueError("a cluster topology runs queue or grouped workloads (the cluster checkers judge "
                             "queues): set [workload] kind")
        if exp.policy:
            raise ValueError("[[policy]] is not supported with a cluster topology (its launchers take no "
                             "destination policies): remove the [[policy]] entries")
        if self.grouping_local and not exp.workload.grouped:
            raise ValueError("[topology] grouping_local sets up clustered grouping: use [workload] kind = \"grouped\"")

    def _check_link(self, index: int, nemesis: NemesisSection) -> None:
        if nemesis.plane is FaultPlane.PROXY and nemesis.link != self.fault_link:
            raise ValueError(f"nemesis[{index}]: a cluster topology's proxy faults cut its cluster links (set "
                             "link = \"cluster\"); its clients are not proxied")
        super()._check_link(index, nemesis)

    @model_validator(mode="after")
    def _cluster_fits(self) -> "ClusterTopology":
        if self.nodes > 4:
            raise ValueError(f"a cluster topology has 2 to 4 brokers, not {self.nodes}")
        nodes = self.node_names
        for label, named in (("producer_node", [self.producer_node]), ("consumer_nodes", self.consumer_nodes),
                             ("grouping_local", [self.grouping_local] if self.grouping_local else [])):
            unknown = [n for n in named if n not in nodes]
            if unknown:
                raise ValueError(f"{label} {unknown} names no node of this cluster ({nodes})")
        return self


#: the [topology] shapes, the file's default (single) first
TOPOLOGY_SHAPES: tuple[type[_TopologyShape], ...] = (SingleTopology, SharedStoreTopology, NetworkTopology,
                                                     ClusterTopology)
#: a [[nemesis]] link between brokers -> the shape that has it
LINK_OWNERS: dict[str, type[_TopologyShape]] = {
    shape.fault_link: shape for shape in TOPOLOGY_SHAPES if shape.fault_link != _TopologyShape.fault_link}


def _topology_kind(value) -> str | None:
    # a table without `kind` is the file format's default shape
    return value.get("kind", SingleTopology.kind_name()) if isinstance(value, dict) else getattr(value, "kind", None)


#: the [topology] section: the shape its `kind` names
TopologySection = Annotated[
    Union[tuple(Annotated[shape, Tag(shape.kind_name())] for shape in TOPOLOGY_SHAPES)],  # type: ignore[valid-type]
    Discriminator(_topology_kind, custom_error_type="topology_kind",
                  custom_error_message="kind should be " + _one_of([s.kind_name() for s in TOPOLOGY_SHAPES]))]


class PolicySection(_Strict):
    """A destination policy of the broker (the fields of conformance.scenario.DestinationPolicy
    that chaos experiments use)."""
    pattern: str
    pending_message_limit: int | None = None
    prefetch_rate_multiplier: float | None = Field(default=None, gt=0)
    eviction: Literal["oldest", "oldest_with_lowest_priority"] | None = None
    memory_limit: int | None = Field(default=None, gt=0)
    producer_flow_control: bool | None = None
    maximum_redeliveries: int | None = None

    def to_policy(self) -> DestinationPolicy:
        return DestinationPolicy(**self.model_dump())

    @model_validator(mode="after")
    def _valid_policy(self) -> "PolicySection":
        self.to_policy()  # DestinationPolicy's own checks (pattern shape, exclusive limits)
        return self


# ------------------------------------------------------------ what each kind means, declared once
# The [workload] and [[nemesis]] kinds are named here and nowhere else, each with what it means to
# the rest of the harness (issue 27: no branch on a workload's or a nemesis's kind outside the place
# it is parsed). The runner (chaos/experiment.py), the schedule (chaos/schedule.py), the exit watch
# (chaos/exit_watch.py) and the run record (reports/run_record.py) ask a section for these traits
# and never compare its kind with a name: tests/chaos/test_kind_dispatch.py fails on such a
# comparison. A new kind that behaves like an existing one is one entry here; one that behaves
# differently adds the trait, and the code the trait selects.


@dataclass(frozen=True)
class WorkloadKind:
    """What a [workload] kind means."""

    #: the scheme the workload's destination has
    scheme: str
    #: every subscriber is sent every message (a topic): the workload has subscribers, some may be
    #: slow, and the broker's per-subscription discards are read before its drain closes them
    fans_out: bool = False
    #: each message carries one of the workload's groups, a group delivered to one consumer at a time
    grouped: bool = False


WORKLOAD_KINDS: dict[str, WorkloadKind] = {
    "queue": WorkloadKind("queue://"),
    "grouped": WorkloadKind("queue://", grouped=True),
    "topic": WorkloadKind("topic://", fans_out=True),
}
#: the [workload] kind's values, from the table (Literal of a tuple: one argument per value)
WorkloadKindName = Literal[tuple(WORKLOAD_KINDS)]  # type: ignore[valid-type]


class FaultPlane(Enum):
    """What a fault acts on, which decides the nemesis that runs it (chaos/experiment.py)."""

    #: a broker's process, by signals: a node named, or whichever serves ("master")
    PROCESS = "process"
    #: links through the fault proxy: the clients', a network's bridges or a cluster's links
    PROXY = "proxy"
    #: one node's link to its shared store (the simulated NFS, or a database behind the proxy)
    STORE = "store"


class Stops(Enum):
    """Which nodes a fault may stop (chaos/exit_watch.py watches the others)."""

    #: none: a proxy fault cuts or slows links, and a paused broker keeps its process
    NOTHING = "nothing"
    #: the node it names, any node when it names "master" (whoever serves then)
    ITS_NODE = "its node"
    #: any node: a master that loses its store's lock stops, as the fault-tolerance guide says it
    #: must, and the slave it hands over to is another node
    ANY_NODE = "any node"


def _no_params(nemesis: NemesisSection) -> dict:
    return {}


@dataclass(frozen=True)
class FaultKind:
    """What a [[nemesis]] kind means."""

    plane: FaultPlane
    #: the step that ends the fault (the step names are its nemesis's: chaos/nemesis/)
    heal: str
    stops: Stops = Stops.NOTHING
    #: what the fault's step passes to its nemesis (a proxy fault: the toxic's attributes)
    params: Callable[[NemesisSection], dict] = _no_params
    #: a client's broker is gone while it lasts (killed, stopped, frozen, or the client cut off):
    #: its clients fail over or wait, and the failover-downtime checker measures how long
    #: (reports/checkers/failover_downtime.py applies after such a fault). The kinds step names in
    #: a history are the same names, so an old history's nemesis lines are read with this trait too
    takes_broker_away: bool = False


FAULT_KINDS: dict[str, FaultKind] = {
    "kill": FaultKind(FaultPlane.PROCESS, heal="start", stops=Stops.ITS_NODE, takes_broker_away=True),
    "pause": FaultKind(FaultPlane.PROCESS, heal="resume", takes_broker_away=True),
    "stop": FaultKind(FaultPlane.PROCESS, heal="start", stops=Stops.ITS_NODE, takes_broker_away=True),
    "partition": FaultKind(FaultPlane.PROXY, heal="heal", params=lambda n: {"direction": n.direction},
                           takes_broker_away=True),
    "latency": FaultKind(FaultPlane.PROXY, heal="heal",
                         params=lambda n: {"latency": n.latency_ms, "jitter": n.jitter_ms, "stream": n.direction}),
    "bandwidth": FaultKind(FaultPlane.PROXY, heal="heal", params=lambda n: {"rate": n.rate_kbps, "stream": n.direction}),
    "reset_peer": FaultKind(FaultPlane.PROXY, heal="heal",
                            params=lambda n: {"timeout": n.timeout_ms, "stream": n.direction}),
    # the store's fault (cut, slowed, reset, lease expired) is the entry's `fault`, given to its
    # nemesis when the runner builds it (chaos/experiment.py), not with each step. It does not
    # take the broker away by itself: whether the master stops when it loses its lock is what the
    # lock-loss checks judge (as the checker's own list of outage kinds had it before this trait)
    "lock-loss": FaultKind(FaultPlane.STORE, heal="heal", stops=Stops.ANY_NODE),
}
#: the [[nemesis]] kind's values, from the table
FaultKindName = Literal[tuple(FAULT_KINDS)]  # type: ignore[valid-type]
#: a lock-loss entry's `fault` (what happens to the node's link to its store), each with what it
#: passes to the store's nemesis (chaos/nemesis/lock.py) when the runner builds it
STORE_FAULTS: dict[str, Callable[[NemesisSection], dict]] = {
    "partition": _no_params,
    "latency": lambda n: {"latency": n.latency_ms, "jitter": n.jitter_ms},
    "reset": lambda n: {"timeout": n.timeout_ms},
    "expire": _no_params,
}
StoreFaultName = Literal[tuple(STORE_FAULTS)]  # type: ignore[valid-type]
#: the kinds of each plane, in the table's order (named in the messages of a refused file)
PROCESS_FAULTS = tuple(name for name, kind in FAULT_KINDS.items() if kind.plane is FaultPlane.PROCESS)
PROXY_FAULTS = tuple(name for name, kind in FAULT_KINDS.items() if kind.plane is FaultPlane.PROXY)
#: the kinds that take a client's broker away (`FaultKind.takes_broker_away`)
OUTAGE_FAULTS = tuple(name for name, kind in FAULT_KINDS.items() if kind.takes_broker_away)


def takes_broker_away(kind: str) -> bool:
    """Whether a fault of ``kind`` (a [[nemesis]] kind, or the same name on a history's nemesis
    line) takes a client's broker away; False for a name that is no fault kind (a heal step)."""
    declared = FAULT_KINDS.get(kind)
    return declared is not None and declared.takes_broker_away


class WorkloadSection(_Strict):
    kind: WorkloadKindName = "queue"
    producers: int = Field(default=2, ge=1, le=64)
    consumers: int = Field(default=2, ge=1, le=64)
    subscribers: int = Field(default=3, ge=1, le=64)
    slow_subscribers: int = Field(default=0, ge=0, le=64)
    rate: float = Field(default=100, gt=0)
    persistent: bool = True
    destination: str = "queue://chaos.queue"
    groups: list[str] = Field(default_factory=lambda: ["g0", "g1", "g2"], min_length=1)
    ack: Literal["client-individual", "auto"] = "client-individual"
    prefetch: int | None = Field(default=None, ge=1)
    # cluster topologies: consumer churn, each consumer open for [min, max] seconds (drawn per
    # opening) then closed for pause_s (chaos/workloads/cluster.py); omit for consumers that stay
    consumer_lifetime_s: list[float] | None = Field(default=None, min_length=2, max_length=2)
    consumer_pause_s: float = Field(default=0.5, ge=0)
    # cluster topologies: producers start once every consumer has subscribed, plus this many
    # seconds (their demand crossing the cluster), so each group's first message sees every
    # node's consumers (chaos/workloads/cluster.py); omit to start everyone at once
    producers_after_consumers_s: float | None = Field(default=None, ge=0)

    @property
    def fans_out(self) -> bool:
        """Every subscriber is sent every message (`WorkloadKind.fans_out`)."""
        return WORKLOAD_KINDS[self.kind].fans_out

    @property
    def grouped(self) -> bool:
        """Each message carries one of `groups` (`WorkloadKind.grouped`)."""
        return WORKLOAD_KINDS[self.kind].grouped

    @model_validator(mode="after")
    def _destination_fits_kind(self) -> "WorkloadSection":
        wanted = WORKLOAD_KINDS[self.kind].scheme
        if not self.destination.startswith(wanted):
            raise ValueError(f"a {self.kind} workload needs destination {wanted}NAME, not {self.destination!r}")
        if self.slow_subscribers > self.subscribers:
            raise ValueError(f"slow_subscribers ({self.slow_subscribers}) exceeds subscribers ({self.subscribers})")
        if self.slow_subscribers and not self.fans_out:
            raise ValueError("slow_subscribers applies to topic workloads only")
        if self.consumer_lifetime_s is not None and not 0 < self.consumer_lifetime_s[0] <= self.consumer_lifetime_s[1]:
            raise ValueError(f"consumer_lifetime_s is [min, max] seconds with 0 < min <= max, not "
                             f"{self.consumer_lifetime_s}")
        return self


class NemesisSection(_Strict):
    # kill | pause | stop act on a broker's process; partition cuts clients off through the fault
    # proxy (both ways, or one stream: upstream = client -> broker); latency | bandwidth |
    # reset_peer add that Toxiproxy toxic to the proxy for down_s seconds (FAULT_KINDS).
    kind: FaultKindName
    # lock-loss (a shared store on the simulated NFS): what happens to `node`'s storage link
    # (chaos/nemesis/lock.py): cut, slowed (latency_ms, jitter_ms), reset, or its lease expired
    fault: StoreFaultName = "partition"
    every_s: float = Field(gt=0)
    down_s: float = Field(default=1.0, ge=0)
    # drawn timing (chaos/schedule.py): with every_max_s each quiet gap is drawn from [every_s,
    # every_max_s], with down_max_s each fault's length from [down_s, down_max_s], from the
    # experiment's seed; left out, every_s and down_s are the fixed gap and length
    every_max_s: float | None = Field(default=None, gt=0)
    down_max_s: float | None = Field(default=None, ge=0)
    direction: Literal["both", "upstream", "downstream"] = "both"
    node: str = "A"
    clients: Literal["all", "slow"] = "all"
    # clients: the proxies clients connect through; bridges: those in front of every bridge's
    # peer (network topology), so the brokers lose each other and keep their clients; cluster:
    # those in front of every cluster connection's peer (cluster topology), likewise
    link: Literal["clients", "bridges", "cluster"] = "clients"
    latency_ms: int = Field(default=100, ge=0)
    jitter_ms: int = Field(default=0, ge=0)
    rate_kbps: int = Field(default=64, ge=0)
    timeout_ms: int = Field(default=0, ge=0)

    @property
    def plane(self) -> FaultPlane:
        """What the fault acts on (`FaultKind.plane`)."""
        return FAULT_KINDS[self.kind].plane

    @property
    def heal_step(self) -> str:
        """The step that ends the fault (`FaultKind.heal`)."""
        return FAULT_KINDS[self.kind].heal

    def fault_params(self) -> dict:
        """What the fault's step passes to its nemesis (`FaultKind.params`)."""
        return FAULT_KINDS[self.kind].params(self)

    def store_fault_params(self) -> dict:
        """A lock-loss entry: what its `fault` passes to the store's nemesis (`STORE_FAULTS`)."""
        return STORE_FAULTS[self.fault](self)

    @model_validator(mode="after")
    def _ranges_fit(self) -> "NemesisSection":
        for low, high in (("every_s", "every_max_s"), ("down_s", "down_max_s")):
            top = getattr(self, high)
            if top is not None and top < getattr(self, low):
                raise ValueError(f"{high} ({top:g}) is below {low} ({getattr(self, low):g}): the value is drawn "
                                 f"from [{low}, {high}], so {high} must be at least {low}")
        return self


class CheckersSection(_Strict):
    # The file format's [checkers] keys, declared once: each registered checker (reports/checkers/
    # registry.py) names its switch and settings among them and reads their defaults from here;
    # tests/reports/test_checker_registry.py fails on a key no checker reads or a checker's key
    # missing here.
    total_queue: bool = True
    duplicates_allowed: bool = False
    topic_fanout: bool = True
    failover_downtime: bool = True
    max_downtime_s: float | None = Field(default=None, gt=0)
    split_brain: bool = False
    # cluster topologies (issue 19): no confirmed message lost or delivered twice, and under
    # ON_DEMAND none carried to a node without consumers (reports/checkers/redistribution.py);
    # every message of a group delivered by the one node it is pinned to (group_pinning.py)
    redistribution: bool = False
    group_pinning: bool = False


class Experiment(_Strict):
    name: str = Field(min_length=1)
    duration_s: float = Field(gt=0, le=24 * 3600)
    # the shortest run that still holds the schedule's first faults and their recovery: a runner
    # that shortens the run (the main job's chaos stage, brokerconf/chaos_stage.py) gives it at
    # least this long. Declared by the file, whose author knows which faults make the experiment;
    # 0: any length will do (a run with no fault in it still judges its workload)
    min_duration_s: float = Field(default=0.0, ge=0, le=24 * 3600)
    # draws the nemesis entries' drawn timings (chaos/schedule.py) and the cluster workload's
    # consumer churn: a run replays from it (`brokerconf chaos run FILE --seed N` overrides it)
    seed: int = 0
    drain_quiet_s: float = Field(default=2.0, gt=0)
    # Quiet time the schedule keeps after the last heal, so that clients recover before the
    # workload stops (Jepsen's final heal-then-wait phase); a fault that cannot heal this early
    # is not scheduled.
    recovery_s: float = Field(default=3.0, ge=0)
    target: TargetSection = Field(default_factory=TargetSection)
    topology: TopologySection = Field(default_factory=SingleTopology)
    policy: list[PolicySection] = Field(default_factory=list)
    workload: WorkloadSection = Field(default_factory=WorkloadSection)
    nemesis: list[NemesisSection] = Field(default_factory=list)
    checkers: CheckersSection = Field(default_factory=CheckersSection)

    @model_validator(mode="after")
    def _workload_fits_protocol(self) -> "Experiment":
        if self.target.protocol == "mqtt":
            # MQTT has topics only, and the client acknowledges nothing itself (PUBACK/PUBREC
            # are sent on receipt by the library): see conformance/clients/mqtt_client.py.
            if not self.workload.fans_out:
                raise ValueError(f"a {self.workload.kind} workload needs queues, which MQTT does not have: "
                                 "use [workload] kind = \"topic\" or another protocol")
            if self.workload.ack != "auto":
                raise ValueError("MQTT subscribers acknowledge on receipt: set [workload] ack = \"auto\"")
            if self.workload.prefetch is not None:
                raise ValueError("MQTT has no consumer prefetch (the broker's in-flight window is its own): "
                                 "remove [workload] prefetch")
        return self

    @model_validator(mode="after")
    def _rest_fits_topology(self) -> "Experiment":
        # the shape says what it asks of the workload, the checkers and each fault (`_TopologyShape`)
        self.topology.check_experiment(self)
        for index, nemesis in enumerate(self.nemesis):
            self.topology.check_nemesis(index, nemesis)
            if nemesis.clients == "slow" and not self.workload.slow_subscribers:
                raise ValueError(f"nemesis[{index}] acts on the slow subscribers' proxy, but the workload "
                                 "has slow_subscribers = 0")
        return self


def _tagged_members(annotation) -> dict[str, type[BaseModel]]:
    """A tagged union's members by their tag (the [topology] shapes by kind); {} for any other field."""
    members = {}
    for arg in get_args(annotation):
        if get_origin(arg) is Annotated:
            arg = get_args(arg)[0]
        if isinstance(arg, type) and issubclass(arg, _TopologyShape):
            members[arg.kind_name()] = arg
    return members


def _resolve(loc: tuple) -> tuple[tuple, type[BaseModel] | None]:
    """``loc`` as the file spells it, without a tagged union's tag (pydantic's
    ``topology.shared-store.store`` is the file's ``topology.store``), and the model of its last
    part (None past a key that holds no section)."""
    model: type[BaseModel] | None = Experiment
    shown: list = []
    union: dict[str, type[BaseModel]] = {}
    for part in loc:
        if part in union:
            model, union = union[part], {}
            continue
        union = {}
        shown.append(part)
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        union = _tagged_members(annotation)
        inner = getattr(annotation, "__args__", (annotation,))[0]
        model = inner if not union and isinstance(inner, type) and issubclass(inner, BaseModel) else None
    return tuple(shown), model


def _explain(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc, _ = _resolve(err["loc"])
        where = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden":
            section, model = _resolve(err["loc"][:-1])
            hint = difflib.get_close_matches(str(loc[-1]), list(model.model_fields) if model else [], n=1)
            section_name = ".".join(str(p) for p in section) or "the top level"
            lines.append(f"unknown key {loc[-1]!r} in {section_name}" + (f": did you mean {hint[0]!r}?" if hint else ""))
        else:
            message = err["msg"].removeprefix("Value error, ")
            lines.append(f"invalid value for {where!r}: {message}" if where else message)
    return "; ".join(lines)


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExperimentError(f"experiment file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from None
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(f"{path}: {_explain(exc)}") from None


def apply_setting(data: dict, setting: str) -> None:
    """One ``--set SECTION.KEY=VALUE`` (VALUE in TOML: 0, 3, "text", true) into ``data``, the
    experiment as a dict: a top-level key (``duration_s=20``) or a key of a table
    (``topology.nfs_version=3``); ``nemesis.N.KEY`` sets one [[nemesis]] entry's key."""
    path, sep, value = setting.partition("=")
    if not sep or not path.strip():
        raise ExperimentError(f"--set {setting!r}: give KEY=VALUE, e.g. topology.lock_keep_alive_period_ms=0")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()  # a bare word: a string
    keys = path.strip().split(".")
    node = data
    for key in keys[:-1]:
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise ExperimentError(f"--set {setting!r}: {key!r} is not an entry (0..{len(node) - 1})")
            node = node[int(key)]
        elif isinstance(node, dict) and isinstance(node.get(key), (dict, list)):
            node = node[key]
        else:
            raise ExperimentError(f"--set {setting!r}: {key!r} is not a table of the experiment")
    node[keys[-1]] = parsed


def with_overrides(exp: Experiment, *, duration_s: float | None = None, target: str | None = None,
                   settings: list[str] | tuple[str, ...] = (), seed: int | None = None) -> Experiment:
    """``exp`` with the command line's overrides (``--duration``, ``--target``, ``--set``,
    ``--seed``), checked again (an unknown key is refused by name, as in the file)."""
    data = exp.model_dump()
    for setting in settings:
        apply_setting(data, setting)
    if duration_s is not None:
        data["duration_s"] = duration_s
    if seed is not None:
        data["seed"] = seed
    if target is not None:
        data["target"]["name"] = target
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(f"{exp.name}: {_explain(exc)}") from None
