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

    @property
    def anonymous_allowed(self) -> bool:
        return self.allow_anonymous if self.allow_anonymous is not None else not self.users


# --- Store, limits, listeners


class StoreConfig(_Strict):
    kind: Literal["memory", "journal"] = "memory"
    directory: str | None = None  # defaults to <data>/journal
    sync: Literal["always", "interval", "never"] = "always"
    sync_interval_ms: int = Field(default=1000, gt=0)
    segment_size: int = Field(default=32 * 1024 * 1024, gt=4096)
    # Rewrite the journal when live data falls below this fraction of its bytes.
    compact_ratio: float = Field(default=0.5, gt=0, lt=1)


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
    # Inbound QoS 1/2 publications a client may have unacknowledged (5.0 3.2.2.3.3).
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


def _host_port(value: str | None) -> str | None:
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not (0 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return value


class BrokerConfig(_Strict):
    name: str = "reference"
    stomp: str | None = "127.0.0.1:61613"
    amqp: str | None = None
    mqtt: str | None = None
    http: str | None = None
    data: str = "data"
    store: StoreConfig = Field(default_factory=StoreConfig)
    stomp_options: StompConfig = Field(default_factory=StompConfig)
    amqp_options: AmqpConfig = Field(default_factory=AmqpConfig)
    mqtt_options: MqttConfig = Field(default_factory=MqttConfig)
    # Other brokers a client may fail over to (HOST:PORT), announced to AMQP clients in the
    # Open frame's `failover-server-list` as Artemis does.
    failover_peers: list[str] = Field(default_factory=list)
    system_usage: SystemUsage = Field(default_factory=SystemUsage)
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
