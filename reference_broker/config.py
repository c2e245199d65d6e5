"""One typed configuration model for the reference broker.

Option names follow the documents they come from, in snake_case, with the documented defaults:
- ActiveMQ Classic destination policies (`policy_entries`): pending message limit and eviction
  strategies ("Slow Consumer Handling"), memory limits and producer flow control, dead-letter
  and redelivery settings.
- Artemis address settings (`address_settings`): the message grouping defaults
  (`default_group_rebalance`, `default_group_buckets`, `default_group_first_key`) from
  "Message Grouping".

A bad configuration is refused with an error naming the option (and a suggestion for a typo),
never half-applied.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import tomllib
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .cluster.network_config import NetworkConnectorConfig
from .cluster.discovery import parse_discovery_uri


class ConfigError(ValueError):
    """A configuration the broker refuses to run with; the message names the option."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --- Slow consumer handling (ActiveMQ "Slow Consumer Handling", "Pending Message Limit Strategy")


class ConstantPendingMessageLimit(_Strict):
    """The same limit for every consumer, counted above its prefetch buffer."""

    type: Literal["constant"] = "constant"
    limit: int = Field(ge=-1)  # -1 disables discarding; 0 keeps nothing beyond the prefetch


class PrefetchRatePendingMessageLimit(_Strict):
    """The limit is the consumer's prefetch size times a multiplier."""

    type: Literal["prefetch_rate"] = "prefetch_rate"
    multiplier: float = Field(ge=0)


PendingMessageLimitStrategy = Annotated[
    Union[ConstantPendingMessageLimit, PrefetchRatePendingMessageLimit], Field(discriminator="type")
]


class OldestEviction(_Strict):
    """ActiveMQ's default eviction: drop the oldest pending message."""

    type: Literal["oldest"] = "oldest"


class OldestWithLowestPriorityEviction(_Strict):
    type: Literal["oldest_with_lowest_priority"] = "oldest_with_lowest_priority"


class UniquePropertyEviction(_Strict):
    """Keep only the newest pending message per value of a property (e.g. a stock symbol)."""

    type: Literal["unique_property"] = "unique_property"
    property_name: str = Field(min_length=1)


MessageEvictionStrategy = Annotated[
    Union[OldestEviction, OldestWithLowestPriorityEviction, UniquePropertyEviction],
    Field(discriminator="type"),
]


class ConditionalNetworkBridgeFilter(_Strict):
    """ActiveMQ "Networks of Brokers", "Stuck Messages" and "Throttling a network consumer": the
    ``conditionalNetworkBridgeFilterFactory`` of a queue policy (used by reference_broker/cluster/
    replay.py). The document gives no defaults; these are ActiveMQ's own (its
    ConditionalNetworkBridgeFilterFactory: replay off, no delay, no rate limit, 1000 ms window)."""

    replay_when_no_consumers: bool = False
    replay_delay: int = Field(default=0, ge=0)  # ms after the message entered this broker
    rate_limit: int = Field(default=0, ge=0)  # messages per rate_duration to network consumers; 0 = none
    rate_duration: int = Field(default=1000, gt=0)  # ms


class PolicyEntry(_Strict):
    """ActiveMQ-style `policyEntry`: applies to the queues or topics its wildcard matches."""

    queue: str | None = None
    topic: str | None = None
    # Memory and producer flow control (bytes; None = only the broker-wide limit applies).
    memory_limit: int | None = Field(default=None, gt=0)
    producer_flow_control: bool = True
    send_fail_if_no_space: bool = False
    send_fail_if_no_space_after_timeout: int = Field(default=0, ge=0)  # ms; 0 = wait forever
    # Slow consumers on non-durable topics. ActiveMQ's default keeps every pending message
    # (no strategy configured); memory limits and flow control then bound the broker.
    pending_message_limit_strategy: PendingMessageLimitStrategy | None = None
    message_eviction_strategy: MessageEvictionStrategy = Field(default_factory=OldestEviction)
    # Dispatch.
    max_page_size: int = Field(default=200, ge=1)  # how far dispatch looks past blocked messages
    # ActiveMQ's own default is false; the reference broker orders by priority by default
    # because its queues promise FIFO *within* a priority level (DESIGN: engine).
    prioritized_messages: bool = True
    # Redelivery and dead letters (ActiveMQ RedeliveryPolicy / DeadLetterStrategy defaults).
    maximum_redeliveries: int = Field(default=6, ge=-1)  # -1 = redeliver forever
    dead_letter_queue: str = "ActiveMQ.DLQ"
    process_non_persistent: bool = False  # ActiveMQ discards poisoned non-persistent messages
    process_expired: bool = True
    # Networks of brokers: how network consumers of matching queues filter (cluster/replay.py).
    conditional_network_bridge_filter: ConditionalNetworkBridgeFilter | None = None

    @model_validator(mode="after")
    def _one_destination(self) -> "PolicyEntry":
        if (self.queue is None) == (self.topic is None):
            raise ValueError("a policy entry needs exactly one of 'queue' or 'topic'")
        return self

    @property
    def pattern(self) -> str:
        return self.queue if self.queue is not None else self.topic  # type: ignore[return-value]

    @property
    def kind(self) -> str:
        return "queue" if self.queue is not None else "topic"


class AddressSetting(_Strict):
    """Artemis `address-setting` group defaults, matched by wildcard against destination names."""

    match: str
    default_group_rebalance: bool = False
    default_group_buckets: int = Field(default=-1, ge=-1)  # -1 every group, 0 grouping off
    default_group_first_key: str | None = None
    # artemis-clusters.md, "Message Redistribution": ms after the last consumer of a queue closed
    # before its messages move to a node of the cluster whose queue has consumers; 0 at once,
    # -1 never (the default). Read by reference_broker/clustering/redistribution.py.
    redistribution_delay: int = Field(default=-1, ge=-1)


# --- Security


class User(_Strict):
    name: str = Field(min_length=1)
    password: str
    groups: list[str] = Field(default_factory=list)


class AuthorizationEntry(_Strict):
    """ActiveMQ `authorizationEntry`: which groups may read / write matching destinations."""

    queue: str | None = None
    topic: str | None = None
    read: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_destination(self) -> "AuthorizationEntry":
        if (self.queue is None) == (self.topic is None):
            raise ValueError("an authorization entry needs exactly one of 'queue' or 'topic'")
        return self


class Security(_Strict):
    users: list[User] = Field(default_factory=list)
    # ActiveMQ's simple authentication refuses anonymous logins unless allowed; a broker with no
    # users configured has no authentication at all. None picks between the two.
    allow_anonymous: bool | None = None
    anonymous_groups: list[str] = Field(default_factory=lambda: ["anonymous"])
    authorization: list[AuthorizationEntry] = Field(default_factory=list)
    # Networks of brokers: a peer's bridge logs in (its connector's user_name / password) as a user
    # of this group; only such connections may use network subscription ids (NC|...), which read
    # other connections' temporary destinations (engine/network_principal.py). Bridges between
    # brokers of one process need no user. Never one of anonymous_groups.
    network_group: str = Field(default="network-bridges", min_length=1)

    @model_validator(mode="after")
    def _network_group_is_not_anonymous(self) -> "Security":
        if self.network_group in self.anonymous_groups:
            raise ValueError(f"network_group {self.network_group!r} is also in anonymous_groups: anonymous "
                             "clients would be trusted as network bridges; use another group")
        return self

    @property
    def anonymous_allowed(self) -> bool:
        return self.allow_anonymous if self.allow_anonymous is not None else not self.users


# --- Store, limits, listeners


class SharedFileLockerConfig(_Strict):
    """ActiveMQ's ``<shared-file-locker>`` (A-MQ "Fault Tolerant Messaging" guide, 3.1, Example
    3.1): the write lock on the store directory's ``lock`` file (reference_broker/ha/locker.py).
    ``lock_acquire_sleep_interval``: how often (ms) a slave tries the lock again; ActiveMQ's
    default is 10 s (AbstractLocker.DEFAULT_LOCK_ACQUIRE_SLEEP_INTERVAL)."""

    kind: Literal["shared_file"] = "shared_file"
    lock_acquire_sleep_interval: int = Field(default=10_000, gt=0)


class LeaseDatabaseLockerConfig(_Strict):
    """ActiveMQ's ``<lease-database-locker>`` (guide 3.2; reference_broker/ha/lease.py): a lease in
    the store's database. ``lock_acquire_sleep_interval`` is both how often a slave tries and how
    long a lease lasts, as in ActiveMQ; the master renews it every ``lock_keep_alive_period``,
    which must therefore be shorter. ``max_allowable_diff_from_db_time`` (ms; ActiveMQ's
    maxAllowableDiffFromDBTime, default 0 = trust our clock): past that difference from the
    database's clock, the broker measures leases by the database's time."""

    kind: Literal["lease_database"] = "lease_database"
    lock_acquire_sleep_interval: int = Field(default=10_000, gt=0)
    max_allowable_diff_from_db_time: int = Field(default=0, ge=0)


class StoreConfig(_Strict):
    kind: Literal["memory", "journal", "database"] = "memory"
    directory: str | None = None  # defaults to <data>/journal
    # kind = "database" (guide 3.2, JDBC master/slave; store/database.py): a libpq connection
    # string for PostgreSQL, e.g. "host=127.0.0.1 port=5432 user=u password=p dbname=broker"
    dsn: str | None = None
    # Master/slave on a shared journal directory (guide 3.1, "File locking requirements"): the
    # master re-checks its lock and the lock file every lock_keep_alive_period ms and gives up
    # being master when either is gone; a slave that gets the lock waits one period before
    # serving. 0 turns the check off, ActiveMQ's default (LockableServiceSupport.lockKeepAlivePeriod).
    # Only the journal store is shared; the memory store takes no lock.
    lock_keep_alive_period: int = Field(default=0, ge=0)
    # the journal's default is the shared-file locker, the database's the lease (see _pick_locker)
    locker: Annotated[Union[SharedFileLockerConfig, LeaseDatabaseLockerConfig], Field(discriminator="kind")] = \
        Field(default_factory=SharedFileLockerConfig)
    sync: Literal["always", "interval", "never"] = "always"
    sync_interval_ms: int = Field(default=1000, gt=0)
    segment_size: int = Field(default=32 * 1024 * 1024, gt=4096)
    # Rewrite the journal when live data falls below this fraction of its bytes.
    compact_ratio: float = Field(default=0.5, gt=0, lt=1)
    # A newest journal segment that is empty or has no valid header (damage that may have
    # lost confirmed messages) stops start-up with an error naming the file; true deletes it
    # instead, with an error in the log, and starts without what it held.
    discard_damaged: bool = False
    # The longest a journal write, sync or read may take (ms; store/bounded_io.py). Past it the
    # store is failed and the broker stops serving (closes its listeners and client connections)
    # instead of hanging its event loop on a file system that stopped answering: an NFS mount cut
    # from its server blocks in the kernel (soft: timeo x retrans, 12 s with the A-MQ guide's
    # options; hard: until the link heals). 5000: a healthy local fsync takes milliseconds and a
    # busy disk's rarely a second, so 5 s does not fail a slow but working disk, and it is well
    # inside the time before a slave can take over (an NFSv4 lease: 90 s by default on Linux),
    # so the stalled master stops before another broker serves the store.
    io_timeout_ms: int = 5000

    @model_validator(mode="before")
    @classmethod
    def _pick_locker(cls, data):
        # A locker without a kind is the store's own: a lease in a database store's database, the
        # shared-file lock otherwise (what a [store.locker] table meant before leases existed).
        if isinstance(data, dict):
            default = "lease_database" if data.get("kind") == "database" else "shared_file"
            locker = data.get("locker")
            if locker is None and default == "lease_database":
                data = {**data, "locker": {"kind": default}}
            elif isinstance(locker, dict) and "kind" not in locker:
                data = {**data, "locker": {**locker, "kind": default}}
        return data

    @field_validator("io_timeout_ms")
    @classmethod
    def _check_io_timeout(cls, value: int) -> int:
        if value < 100:
            raise ValueError(f"store.io_timeout_ms must be at least 100 (ms), not {value}: a journal write "
                             "that may not take a tenth of a second would fail a working disk")
        return value

    @model_validator(mode="after")
    def _check_database(self) -> "StoreConfig":
        if self.kind == "database":
            if not self.dsn:
                raise ValueError("store.kind = 'database' needs store.dsn (a PostgreSQL connection string)")
            if self.locker.kind != "lease_database":
                raise ValueError("a database store is locked by a lease: store.locker.kind must be 'lease_database'")
        elif self.locker.kind == "lease_database":
            raise ValueError("store.locker.kind = 'lease_database' needs store.kind = 'database'")
        # the master renews at the keep-alive period and stops serving 500 ms before its lease ends
        # (ha/lease.py STOP_MARGIN_S), so a renewal must come before that
        if self.locker.kind == "lease_database" and \
                not 0 < self.lock_keep_alive_period <= self.locker.lock_acquire_sleep_interval - 500:
            raise ValueError(
                f"store.lock_keep_alive_period ({self.lock_keep_alive_period} ms) must be above 0 and below the lease, "
                f"store.locker.lock_acquire_sleep_interval ({self.locker.lock_acquire_sleep_interval} ms), by at least "
                "500 ms: the master renews its lease at the keep-alive period and stops 500 ms before it ends")
        return self


class StompConfig(_Strict):
    max_frame_size: int = Field(default=10 * 1024 * 1024, gt=0)
    max_header_block: int = Field(default=64 * 1024, gt=0)
    max_headers: int = Field(default=1000, gt=0)
    max_header_length: int = Field(default=16 * 1024, gt=0)
    # Heart-beats the broker offers (ms); the negotiated value follows the STOMP 1.1+ rules.
    heart_beat_send_ms: int = Field(default=10_000, ge=0)
    heart_beat_receive_ms: int = Field(default=10_000, ge=0)
    default_prefetch: int = Field(default=1000, gt=0)
    # A connection that has not sent CONNECT within this time is closed (0 = wait forever).
    connect_timeout_ms: int = Field(default=30_000, ge=0)
    # STOMP headers are strings; ActiveMQ can convert them for numeric selector comparisons.
    convert_string_expressions: bool = True


class AmqpConfig(_Strict):
    """The AMQP 1.0 listener (protocols/amqp). Defaults follow Artemis' acceptor where it has one."""

    # Kind of a bare address (no queue:// or topic:// prefix) on attach and in a message's `to`.
    default_address_kind: Literal["queue", "topic"] = "queue"
    # A client that sends nothing for this long (ms) is closed with
    # amqp:resource-limit-exceeded; proton announces half of it in the Open so clients send
    # empty frames in time. 0: never. The client's own idle time-out is honoured either way.
    idle_timeout_ms: int = Field(default=30_000, ge=0)
    # Largest frame the broker accepts; AMQP 1.0 (2.7.1 Open) sets 512 as the minimum.
    max_frame_size: int = Field(default=128 * 1024, ge=512)
    # Largest message (all transfers of one delivery) accepted from a producer.
    max_message_size: int = Field(default=10 * 1024 * 1024, gt=0)
    # Credit granted to a producer's link, topped up when it falls below a third (Artemis'
    # amqpCredits / amqpLowCredits are 1000 / 300).
    producer_credit: int = Field(default=1000, gt=0)
    # A connection that has not finished SASL and Open within this time is closed (0 = never).
    open_timeout_ms: int = Field(default=30_000, ge=0)
    # Announced in the Open frame's connection properties.
    product: str = Field(default="brokerconf-reference", min_length=1)


class MqttConfig(_Strict):
    """The MQTT 3.1.1 / 5.0 listener (protocols/mqtt). Names follow the MQTT 5.0 CONNACK
    properties they are announced as; 3.1.1 clients get the same limits, unannounced."""

    # Largest packet accepted (5.0 3.2.2.3.6 Maximum Packet Size); a bigger one ends the
    # connection (5.0: DISCONNECT 0x95). The protocol limit is 268,435,460 bytes.
    max_packet_size: int = Field(default=10 * 1024 * 1024, ge=64, le=268_435_460)
    # Inbound QoS 1/2 publications a client may have unacknowledged (5.0 3.2.2.3.3). It also
    # bounds the QoS 2 packet ids a 3.1.1 client leaves awaiting PUBREL (closed past it).
    receive_maximum: int = Field(default=100, ge=1, le=65_535)
    # Outbound QoS 1/2 messages in flight to a 3.1.1 client (Mosquitto's option name); an MQTT
    # 5.0 client's own Receive Maximum is used instead.
    max_inflight_messages: int = Field(default=100, ge=1, le=65_535)
    # Longest keep-alive (s) a client may ask for; 0 (keep-alive off) counts as longer. 5.0
    # clients are told to use this instead (Server Keep Alive); 3.1.1 clients asking for more
    # are refused with CONNACK 0x02, as Mosquitto's max_keepalive does. 65535 = no limit.
    max_keep_alive: int = Field(default=65_535, ge=1, le=65_535)
    # When set, every 5.0 client is told to use this keep-alive (s) (5.0 3.2.2.3.14).
    server_keep_alive: int | None = Field(default=None, ge=0, le=65_535)
    # Upper bound (s) on session expiry; also bounds 3.1.1 persistent sessions, which
    # otherwise never expire. None = no bound.
    max_session_expiry: int | None = Field(default=None, ge=0, le=4_294_967_295)
    # Topic aliases a 5.0 client may use towards the broker (5.0 3.2.2.3.8); 0 = none.
    topic_alias_maximum: int = Field(default=10, ge=0, le=65_535)
    retain_available: bool = True
    maximum_qos: int = Field(default=2, ge=0, le=2)
    # A connection that has not sent CONNECT within this time is closed (0 = wait forever).
    connect_timeout_ms: int = Field(default=30_000, ge=0)


class VirtualTopicConfig(_Strict):
    """ActiveMQ "Virtual Destinations": a topic matching ``name`` also copies each message to every
    existing queue named ``<prefix><topic>`` (``prefix`` may hold wildcards, so
    ``Consumer.*.VirtualTopic.X`` collects every consumer group's queue)."""

    name: str = Field(default="VirtualTopic.>", min_length=1)
    prefix: str = Field(default="Consumer.*.", min_length=1)


class CompositeDestinationConfig(_Strict):
    """ActiveMQ's ``<compositeTopic>`` / ``<compositeQueue>``: a message sent to ``name`` is copied
    to each ``forward_to`` destination (``queue://X`` / ``topic://Y``); ``forward_only`` (ActiveMQ's
    default, true) means the original destination itself does not get it."""

    kind: Literal["topic", "queue"] = "topic"
    name: str = Field(min_length=1)
    forward_to: list[str] = Field(min_length=1)
    forward_only: bool = True

    @field_validator("forward_to")
    @classmethod
    def _canonical(cls, value: list[str]) -> list[str]:
        for destination in value:
            kind, sep, name = destination.partition("://")
            if not sep or kind not in ("queue", "topic") or not name:
                raise ValueError(f"forward_to entries are queue://NAME or topic://NAME, not {destination!r}")
        return value


class SystemUsage(_Strict):
    memory_limit: int = Field(default=256 * 1024 * 1024, gt=0)  # bytes, across all destinations


def is_loopback_address(address: str) -> bool:
    """Whether a listener's HOST:PORT only accepts connections from this machine (127.0.0.0/8,
    ::1 or localhost; an empty host or 0.0.0.0 listens everywhere)."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


class ConnectionLimits(_Strict):
    """What one client connection may hold (issue 20: a hostile client must not exhaust the
    broker). The broker's own connections (advisories, in-process bridges) and peer bridges trusted
    as network connections (engine/network_principal.py) are exempt. Past a limit the
    client gets its protocol's error (STOMP ERROR, MQTT reason code, AMQP
    amqp:resource-limit-exceeded) and the broker carries on; deliveries are the exception:
    past `max_unacknowledged` the broker simply stops dispatching to that connection until it
    acknowledges, as prefetch does."""

    # Consumers of any kind: STOMP SUBSCRIBE, AMQP receiving link, MQTT subscription.
    max_consumers: int = Field(default=1000, gt=0)
    # Topic subscriptions among them (non-durable, durable, shared): what every publish routes by.
    max_subscriptions: int = Field(default=1000, gt=0)
    # Delivered, not yet acknowledged, across the connection's consumers (STOMP client acks,
    # AMQP unsettled deliveries; MQTT's own window is mqtt_options.max_inflight_messages).
    max_unacknowledged: int = Field(default=10_000, gt=0)
    # Local transactions open at once (STOMP BEGIN), and what one may buffer until COMMIT. Sends
    # in a transaction are charged to the memory limit too; a full broker refuses them rather
    # than block, since nothing can drain a transaction but its own COMMIT.
    max_transactions: int = Field(default=100, gt=0)
    max_transaction_messages: int = Field(default=10_000, gt=0)
    max_transaction_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    # Retained messages a connection's new subscriptions may still be waiting for: a SUBSCRIBE
    # that would go past it is refused (MQTT SUBACK 0x97 / 0x80).
    max_pending_retained: int = Field(default=10_000, gt=0)


def _host_port(value: str | None) -> str | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not (0 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return value


def _readable_file(value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise ValueError(f"no such file: {value}" if not path.exists() else f"not a file: {value}")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot read {value}: {exc.strerror}") from None
    return value


# --- Artemis clustering (artemis-clusters.md; reference_broker/clustering)

#: artemis-clusters.md, "Configuring Cluster Connections", message-load-balancing (the fourth is
#: Artemis 2.x's: no initial distribution, but redistribution)
MESSAGE_LOAD_BALANCING = ("OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION")


class ClusterDiscoveryConfig(_Strict):
    """A broadcast group and a discovery group on one UDP group address (artemis-clusters.md,
    "Broadcast Groups" and "Discovery Groups"): the node announces its cluster acceptor every
    ``broadcast_period`` ms; a node not heard for ``refresh_timeout`` ms is dropped."""

    group_address: str = "231.7.7.7"
    group_port: int = Field(default=9876, gt=0, le=65535)
    broadcast_period: int = Field(default=2000, gt=0)
    refresh_timeout: int = Field(default=10000, gt=0)

    @field_validator("group_address")
    @classmethod
    def _is_ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"group_address must be an IP address (a multicast group or a loopback "
                             f"address), not {value!r}") from None
        return value


class GroupingHandlerConfig(_Strict):
    """artemis-message-grouping.md, "Clustered Grouping": this node's handler, LOCAL (decides each
    group's route) or REMOTE (asks the LOCAL node); ``timeout`` ms for a decision before the send
    fails; ``group_timeout`` ms unused before a group's route is forgotten (-1: never), checked
    every ``reaper_period`` ms. ``address``: the cluster connection address it serves."""

    type: Literal["LOCAL", "REMOTE"]
    timeout: int = Field(default=5000, gt=0)
    group_timeout: int = Field(default=-1, ge=-1)
    reaper_period: int = Field(default=30000, gt=0)
    address: str = ""
    # the node with the LOCAL handler, which a REMOTE one asks (its cluster node name)
    local_node: str | None = None

    @model_validator(mode="after")
    def _remote_asks_someone(self) -> "GroupingHandlerConfig":
        if self.type == "REMOTE" and not self.local_node:
            raise ValueError("a REMOTE grouping_handler needs local_node: the node whose LOCAL handler it asks")
        return self

    @field_validator("group_timeout")
    @classmethod
    def _not_zero(cls, value: int) -> int:
        if value == 0:
            raise ValueError("group_timeout is -1 (never) or above 0 ms")
        return value


def address_matches(prefixes: str, address: str) -> bool:
    """artemis-clusters.md, the cluster connection's ``address``: ``address`` begins with one of
    the comma-separated prefixes (or none is given) and with no ``!`` excluded one; exclusion wins."""
    parts = [p.strip() for p in prefixes.split(",") if p.strip()]
    if any(address.startswith(p[1:]) for p in parts if p.startswith("!")):
        return False
    included = [p for p in parts if not p.startswith("!")]
    return not included or any(address.startswith(p) for p in included)


#: artemis-clusters.md, "Cluster User Credentials": the shipped defaults, which must be changed
DEFAULT_CLUSTER_USER = "ACTIVEMQ.CLUSTER.ADMIN.USER"
DEFAULT_CLUSTER_PASSWORD = "CHANGE ME!!"


class ClusterConnectionConfig(_Strict):
    """One Artemis-style cluster connection (artemis-clusters.md, "Configuring Cluster
    Connections"; the options in snake_case with the chapter's defaults). ``acceptor``: HOST:PORT of
    this node's cluster link listener (port 0 picks one); ``node_name``: its name in the cluster
    (default: the broker name); ``static_connectors``: HOST:PORT of the nodes it connects to (with
    ``discovery`` too, both are used)."""

    acceptor: str = "127.0.0.1:0"
    node_name: str | None = None
    address: str = ""
    message_load_balancing: Literal["OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION"] = "ON_DEMAND"
    max_hops: int = Field(default=1, ge=0)
    static_connectors: list[str] = Field(default_factory=list)
    discovery: ClusterDiscoveryConfig | None = None
    retry_interval: int = Field(default=500, gt=0)
    retry_interval_multiplier: float = Field(default=1.0, ge=1.0)
    max_retry_interval: int = Field(default=2000, gt=0)
    initial_connect_attempts: int = Field(default=-1, ge=-1)
    reconnect_attempts: int = Field(default=-1, ge=-1)
    use_duplicate_detection: bool = True
    # every check_period ms each end of a link sends a ping; a link that heard nothing for
    # connection_ttl ms is closed (and, from the dialing end, reconnected as retry_interval says)
    check_period: int = Field(default=30000, gt=0)
    connection_ttl: int = Field(default=60000, gt=0)
    cluster_user: str = DEFAULT_CLUSTER_USER
    cluster_password: str = DEFAULT_CLUSTER_PASSWORD
    scale_down: bool = False
    scale_down_group_name: str | None = None
    grouping_handler: GroupingHandlerConfig | None = None
    # queues (plain names) this node creates at start, as broker.xml declares anycast queues: a
    # node gets forwards only for queues it has (artemis-clusters.md, message-load-balancing)
    queues: list[str] = Field(default_factory=list)

    _check_acceptor = field_validator("acceptor")(_host_port)

    @field_validator("static_connectors")
    @classmethod
    def _connectors(cls, connectors: list[str]) -> list[str]:
        for connector in connectors:
            host, sep, port = connector.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise ValueError(f"a static connector is HOST:PORT of a node's cluster acceptor, not {connector!r}")
        return connectors

    def literal_wildcards(self) -> list[str]:
        """The address prefixes holding a wildcard character, which is taken literally: the
        chapter matches cluster connection addresses by prefix only (CLU-ADDR-4), so ``news.*``
        does not cover ``news.sport``. The service warns about them at start."""
        return [p for p in (p.strip().lstrip("!") for p in self.address.split(",")) if any(c in p for c in "*#>")]

    @model_validator(mode="after")
    def _retry(self) -> "ClusterConnectionConfig":
        if self.max_retry_interval < self.retry_interval:
            raise ValueError(f"max_retry_interval ({self.max_retry_interval} ms) is below retry_interval "
                             f"({self.retry_interval} ms)")
        return self

    def matches(self, address: str) -> bool:
        """Whether this cluster connection applies to ``address`` (`address_matches`)."""
        return address_matches(self.address, address)


class TlsListenerConfig(_Strict):
    """A TLS listener beside the plain one (`stomp_ssl`, `mqtt_ssl`, `amqp_ssl`, `https`), on its own
    port as ActiveMQ's ``stomp+ssl://`` / ``mqtt+ssl://`` / ``amqp+ssl://`` connectors are. Files are
    PEM, relative paths from the broker's working directory (reference_broker/tls.py loads them)."""

    address: str  # HOST:PORT; port 0 picks a free one
    tls_cert_file: str  # the broker's certificate (chain: the certificate first, then intermediates)
    tls_key_file: str  # its private key, unencrypted
    # CAs whose client certificates are accepted; with it a client certificate, when sent, is verified.
    tls_ca_file: str | None = None
    # Refuse clients without a certificate signed by tls_ca_file (ActiveMQ's needClientAuth).
    tls_require_client_cert: bool = False
    # A client that has not finished the handshake by then is dropped (asyncio's own default is 60 s).
    tls_handshake_timeout_ms: int = Field(default=10_000, gt=0)

    _check_address = field_validator("address")(_host_port)
    _check_files = field_validator("tls_cert_file", "tls_key_file", "tls_ca_file")(_readable_file)

    @model_validator(mode="after")
    def _client_certs_need_a_ca(self) -> "TlsListenerConfig":
        if self.tls_require_client_cert and self.tls_ca_file is None:
            raise ValueError("tls_require_client_cert needs tls_ca_file (the CAs client certificates are checked "
                             "against)")
        return self


class BrokerConfig(_Strict):
    name: str = "reference"
    stomp: str | None = "127.0.0.1:61613"
    amqp: str | None = None
    mqtt: str | None = None
    http: str | None = None
    # TLS listeners, each on its own port beside the plain ones (off by default; reference_broker/tls.py)
    stomp_ssl: TlsListenerConfig | None = None
    mqtt_ssl: TlsListenerConfig | None = None
    amqp_ssl: TlsListenerConfig | None = None
    https: TlsListenerConfig | None = None
    data: str = "data"
    store: StoreConfig = Field(default_factory=StoreConfig)
    stomp_options: StompConfig = Field(default_factory=StompConfig)
    amqp_options: AmqpConfig = Field(default_factory=AmqpConfig)
    mqtt_options: MqttConfig = Field(default_factory=MqttConfig)
    # Other brokers a client may fail over to (HOST:PORT), announced to AMQP clients in the
    # Open frame's `failover-server-list` as Artemis does.
    failover_peers: list[str] = Field(default_factory=list)
    system_usage: SystemUsage = Field(default_factory=SystemUsage)
    connection_limits: ConnectionLimits = Field(default_factory=ConnectionLimits)
    security: Security = Field(default_factory=Security)
    policy_entries: list[PolicyEntry] = Field(default_factory=list)
    address_settings: list[AddressSetting] = Field(default_factory=list)
    expiry_check_period_ms: int = Field(default=1000, gt=0)
    # ActiveMQ "Networks of Brokers": the broker's <networkConnectors> (reference_broker/cluster),
    # and "Starting network connectors": start them in parallel, not before the broker is up.
    network_connectors: list[NetworkConnectorConfig] = Field(default_factory=list)
    network_connector_start_async: bool = False
    # ActiveMQ's advisorySupport: publish consumer advisories, which is how a peer's bridge sees this
    # broker's demand ("Configuration Pitfalls"). ActiveMQ defaults it to true; here it is on
    # whenever network_connectors are configured, and a broker that is only a bridge's target
    # sets it (off otherwise, so a lone broker's destinations are only its clients').
    advisory_support: bool = False
    # ActiveMQ "Networks of Brokers", "Example using multicast discovery": the transportConnector's
    # discoveryUri. Set, the broker announces its STOMP listener (stomp://HOST:PORT, the listener a
    # reference bridge speaks to) in that multicast group (reference_broker/cluster/discovery.py);
    # announcing makes it a bridge target, so advisory_support defaults to on with it.
    discovery_uri: str | None = None

    # ActiveMQ "Virtual Destinations" (engine/virtual.py): by default the one virtual topic
    # ActiveMQ's default interceptor has (VirtualTopic.> with consumer queues Consumer.*.), no
    # composite destinations. Networks of Brokers, "Dynamic networks and Virtual Destinations":
    # use_virtual_dest_subs makes this broker announce consumers of a virtual destination's target
    # queues as demand for the virtual destination itself; ..._on_creation announces that demand as
    # soon as such a queue exists, consumers or not. Both off by default, as on <broker>.
    virtual_topics: list[VirtualTopicConfig] = Field(default_factory=lambda: [VirtualTopicConfig()])
    composite_destinations: list[CompositeDestinationConfig] = Field(default_factory=list)
    use_virtual_dest_subs: bool = False
    use_virtual_dest_subs_on_creation: bool = False
    # artemis-clusters.md: an Artemis-style cluster connection (reference_broker/clustering), or None
    cluster_connection: ClusterConnectionConfig | None = None

    _check_stomp = field_validator("stomp", "amqp", "mqtt", "http")(_host_port)

    @model_validator(mode="before")
    @classmethod
    def _discovery_needs_advisories(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("discovery_uri") and "advisory_support" not in data:
            data = {**data, "advisory_support": True}
        return data

    @field_validator("discovery_uri")
    @classmethod
    def _check_discovery_uri(cls, value: str | None) -> str | None:
        if value is not None:
            parse_discovery_uri(value)  # DiscoveryUriError (a ValueError) says what to write
        return value

    @model_validator(mode="after")
    def _discovery_needs_stomp(self) -> "BrokerConfig":
        if self.discovery_uri is not None and self.stomp is None:
            raise ValueError("discovery_uri announces the STOMP listener (what peers bridge to); "
                             "set 'stomp' too or remove discovery_uri")
        return self

    @model_validator(mode="after")
    def _secure_by_default(self) -> "BrokerConfig":
        # Mosquitto 2.0's rule: with no users configured, clients from the network are not taken in
        # anonymously by default; only loopback listeners accept them, unless the operator says
        # allow_anonymous = true. The HTTP statistics have no anonymous mode off loopback at all:
        # with users configured they ask for one of them (HTTP Basic; listeners/http.py).
        # TLS listeners alike: encryption says nothing about who may connect.
        security = self.security
        for option in ("stomp", "mqtt", "amqp", "http", "stomp_ssl", "mqtt_ssl", "amqp_ssl", "https"):
            listener = getattr(self, option)
            address = listener.address if isinstance(listener, TlsListenerConfig) else listener
            if address is None or is_loopback_address(address) or security.users:
                continue
            if option in ("http", "https"):
                raise ValueError(
                    f"listener '{option}' = {address!r} is not a loopback address and no [security] users are "
                    "configured: the statistics would be public; listen on 127.0.0.1, or configure "
                    "users (requests then need HTTP Basic credentials of one of them)")
            if security.allow_anonymous is not True:
                raise ValueError(
                    f"listener '{option}' = {address!r} is not a loopback address and no [security] users are "
                    "configured: anyone who can reach it would connect anonymously; configure users, "
                    "listen on 127.0.0.1, or set security.allow_anonymous = true to accept that on purpose")
        return self

    @field_validator("failover_peers")
    @classmethod
    def _check_peers(cls, peers: list[str]) -> list[str]:
        for peer in peers:
            _host_port(peer)
        return peers


def _describe(loc: tuple) -> str:
    path = ".".join(str(p) for p in loc[:-1])
    return f"[{path}]" if path else "the top level"


def _field_names(model: type[BaseModel], loc: tuple) -> list[str]:
    """Names valid at `loc` (walks nested models and lists of models) for 'did you mean'."""
    current: object = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        info = current.model_fields.get(str(part))
        if info is None:
            return []
        current = _model_in(info.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _model_in(annotation: object) -> object:
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _explain(error: ValidationError, model: type[BaseModel]) -> str:
    lines = []
    for err in error.errors():
        loc = tuple(err["loc"])
        name = str(loc[-1]) if loc else ""
        if err["type"] == "extra_forbidden":
            guess = difflib.get_close_matches(name, _field_names(model, loc), n=1)
            hint = f": did you mean '{guess[0]}'?" if guess else ""
            lines.append(f"unknown option '{name}' in {_describe(loc)}{hint}")
        else:
            where = ".".join(str(p) for p in loc) or "configuration"
            message = err["msg"].removeprefix("Value error, ")  # pydantic's prefix adds nothing
            lines.append(f"invalid value for '{where}': {message}")
    return "; ".join(lines)


def build_config(data: dict) -> BrokerConfig:
    try:
        return BrokerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, BrokerConfig)) from None


def load_config(path: str | Path) -> BrokerConfig:
    """Read a TOML configuration file (or JSON, by its `.json` suffix: what launchers generate)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    except UnicodeDecodeError as exc:  # TOML and JSON files are UTF-8 (TOML 1.0 "Spec"; RFC 8259 8.1)
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:  # a directory, no permission: the same clear refusal, not a traceback
        raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    try:
        return build_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
