"""What a suite needs from a broker, in one target-neutral model.

A suite module declares one `Scenario` (module variable ``SCENARIO``); each target's launcher
translates it into the broker's own configuration (the reference broker's config model,
ActiveMQ's ``activemq.xml`` policy entries, ...). Destinations in policies use the canonical
ActiveMQ names with wildcards (``queue://grp.>``, ``topic://slow.*``), so one broker per suite
module serves every test in it: each test picks destination names under the patterns it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Eviction = Literal["oldest", "oldest_with_lowest_priority", "unique_property"]
PROTOCOLS = ("stomp", "mqtt", "amqp")


@dataclass(frozen=True)
class DestinationPolicy:
    """Settings for the destinations matching ``pattern`` (``queue://...`` or ``topic://...``).

    ``None`` leaves the broker's default. Slow-consumer settings follow the ActiveMQ Classic
    slow-consumer document (pending message limit strategies, eviction strategies); group
    settings follow the Artemis grouping document (address settings ``default-group-*``).
    """

    pattern: str
    # slow consumers (topics): constant limit, or a multiple of the subscriber's prefetch
    pending_message_limit: int | None = None
    prefetch_rate_multiplier: float | None = None
    eviction: Eviction | None = None
    eviction_property: str | None = None  # for eviction = "unique_property"
    # bytes of broker memory the destination may hold before producer flow control
    memory_limit: int | None = None
    producer_flow_control: bool | None = None
    # redelivery and dead letters
    maximum_redeliveries: int | None = None
    # message groups (Artemis address settings)
    group_buckets: int | None = None  # -1 every group distinct, 0 grouping off, N buckets
    group_rebalance: bool | None = None
    group_first_key: str | None = None

    def __post_init__(self) -> None:
        kind, sep, name = self.pattern.partition("://")
        if not sep or kind not in ("queue", "topic") or not name:
            raise ValueError(f"policy pattern {self.pattern!r} must be queue://NAME or topic://NAME")
        if self.pending_message_limit is not None and self.prefetch_rate_multiplier is not None:
            raise ValueError(f"policy {self.pattern!r}: give pending_message_limit or prefetch_rate_multiplier, not both")
        if self.eviction == "unique_property" and not self.eviction_property:
            raise ValueError(f"policy {self.pattern!r}: eviction 'unique_property' needs eviction_property")

    @property
    def kind(self) -> str:
        return self.pattern.partition("://")[0]

    @property
    def name(self) -> str:
        return self.pattern.partition("://")[2]


@dataclass(frozen=True)
class Scenario:
    """One broker configuration for a suite module.

    ``protocols`` are the listeners to open (every target opens what it can; a test needing a
    protocol the target lacks is not applicable). ``memory_limit`` is the broker-wide memory
    limit in bytes (ActiveMQ ``systemUsage/memoryUsage``), ``None`` for the default.
    """

    name: str
    policies: tuple[DestinationPolicy, ...] = ()
    protocols: tuple[str, ...] = PROTOCOLS
    memory_limit: int | None = None
    users: tuple[tuple[str, str], ...] = field(default=())  # (name, password); empty = anonymous
    # Clients speak TLS: the launcher makes certificates (conformance/certificates.py), opens a TLS
    # listener per protocol beside the plain one, and its handle's ``ports`` are the TLS ones, with
    # a ClientTls in ``client_options`` (needs the ``tls`` capability).
    tls: bool = False

    def __post_init__(self) -> None:
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if unknown:
            raise ValueError(f"scenario {self.name!r}: unknown protocol(s) {unknown} (known: {list(PROTOCOLS)})")

    @property
    def key(self) -> "Scenario":
        """Hashable identity used to share one running broker between modules with equal scenarios."""
        return self


DEFAULT_SCENARIO = Scenario(name="default")
