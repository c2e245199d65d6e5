"""The contract between the conformance plugin and the brokers it tests.

A `Target` is a kind of broker this machine may be able to run (reference, activemq,
rabbitmq, mosquitto, or an already running broker named in a targets file). It says whether it
can run here and why not, which capabilities it has, and launches a `BrokerHandle` for a
`Scenario`. A handle is a running broker: its addresses per protocol, the configuration the
launcher generated (evidence), its log, the counters a suite reads (matched / discarded per
subscription, memory), and `stop()`.

Capabilities are plain strings, so a suite can ask for anything without a registry:
``protocol.stomp`` / ``protocol.mqtt`` / ``protocol.amqp`` for the listeners, and feature names
documented in `CAPABILITIES`. A test marked ``@pytest.mark.requires(...)`` with a capability the
target lacks is reported as not applicable, with the reason, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from conformance.scenario import Scenario
from conformance.topology import TOPOLOGY_CAPABILITIES, BridgeRoute, Cluster, Topology

#: feature capabilities and what they promise (protocol.* are the listeners)
CAPABILITIES: dict[str, str] = {
    "protocol.stomp": "a STOMP 1.2 listener",
    "protocol.mqtt": "an MQTT 3.1.1 / 5.0 listener",
    "protocol.amqp": "an AMQP 1.0 listener",
    "scenario.policies": "applies a scenario's destination policies (launcher-generated configuration)",
    "counters.subscription": "reads a topic subscription's matched / discarded / pending counters",
    "counters.destination": "reads a destination's enqueued / dequeued / memory counters",
    "groups": "JMSXGroupID message groups: a group is pinned to one consumer",
    "stomp.group_header": "a STOMP MESSAGE frame carries the message's JMSXGroupID as a header",
    "groups.close": "a message with JMSXGroupSeq -1 closes its group",
    "groups.reassign_on_close": "a group moves to another consumer when its owner closes",
    "groups.first_key": "the first message of a group carries a configurable header (group-first-key)",
    "groups.rebalance": "group-rebalance: groups are redistributed when a consumer is added",
    "groups.buckets": "group-buckets: -1 / 0 / N hash buckets for group ids",
    "groups.reset": "the resetAllGroups management operation on a queue (the handle's reset_all_groups)",
    "slow_consumer.pending_limit": "topic pending message limit strategies (constant, prefetch rate)",
    "slow_consumer.eviction": "message eviction strategies for slow topic subscribers",
    "memory.limits": "per-destination memory limits with producer flow control",
    "durable_subscriptions": "durable topic subscriptions that keep messages while the subscriber is away",
    "transactions": "local transactions over sends and acknowledgements",
    "selectors": "JMS selectors on subscriptions",
    "exclusive_consumers": "exclusive queue consumers",
    "consumer_priority": "consumer priority on queues",
    "message_priority": "message priority ordering on queues",
    "nack": "negative acknowledgement with redelivery",
    "dead_letter": "dead-letter queue after maximum redeliveries",
    "expiry": "message expiry (TTL)",
    "process.kill": "the broker runs as a process the harness can kill and restart",
    "tls": ("a TLS listener per protocol with certificates made at run time (Scenario(tls=True)); the "
            "handle's ports are the TLS ones and its client_options carry the clients' TLS settings"),
    **TOPOLOGY_CAPABILITIES,  # a target's come from its shape table (runtime/shape_launch.py)
}


class UnknownTarget(ValueError):
    """No target has that name (the message lists the known ones, with a did-you-mean)."""


class TargetUnavailable(RuntimeError):
    """The target cannot run here (not installed, no permission, port taken...); the message
    says why and what to do, and includes the broker's own log excerpt when it got that far."""


@dataclass
class SubscriptionCounters:
    """A topic subscription as the broker reports it (ActiveMQ's TopicSubscriptionView)."""

    destination: str
    matched: int  # messages waiting beyond the prefetch (ActiveMQ "MatchedCount"/pending)
    discarded: int
    dispatched: int
    pending: int = 0
    raw: dict = field(default_factory=dict)


@dataclass
class DestinationCounters:
    destination: str
    enqueued: int
    dequeued: int
    consumers: int
    memory_usage: int  # bytes
    memory_limit: int  # bytes
    raw: dict = field(default_factory=dict)


@runtime_checkable
class BrokerHandle(Protocol):
    target: str  # the target name the user selected ("reference", "activemq", "my-broker")
    kind: str  # reference | activemq | rabbitmq | mosquitto | external
    launch: str  # in-process | process | container | external
    host: str
    ports: dict[str, int]  # protocol -> port, only for listeners that are open
    capabilities: frozenset[str]
    scenario: Scenario
    credentials: tuple[str | None, str | None]  # (login, passcode) the clients use
    # Per-protocol options the `client` fixture passes to conformance.clients.connect (e.g.
    # RabbitMQ's STOMP virtual host); {} when the clients' defaults serve.
    client_options: dict[str, dict]
    # Where the broker moves a message whose redeliveries ran out when no policy names another
    # place, as a destination (``queue://ActiveMQ.DLQ``); None for a broker with no dead-letter
    # queue of its own (it lacks the ``dead_letter`` capability).
    dead_letter_queue: str | None
    # Scenario(tls=True): protocol -> port of the plain listener that stays open beside each TLS
    # one (the handle's ``ports`` are then the TLS ports); {} otherwise, and for a broker whose
    # plain listeners the harness is not told (a targets file's)
    plain_ports: dict[str, int]

    def config_text(self) -> str:
        """The broker's own configuration as the launcher generated it (evidence)."""

    def log_tail(self, lines: int = 80) -> str:
        """The last lines of the broker's log (evidence)."""

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        """Counters of every non-durable subscription on ``topic://...`` (needs counters.subscription)."""

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        """Counters of one destination, None when the broker does not know it (needs counters.destination)."""

    def stop(self) -> None:
        """Stop the broker and everything its launcher started."""


class Target(Protocol):
    name: str
    kind: str
    # how `launch` runs the broker: process | container | in-process | external (for messages and
    # the matrix: what differs between modes is asked of the target, not decided on this name)
    launch_mode: str
    # True when its brokers run from this machine's install, as a process here or inside this one;
    # False for a container's or an external broker
    launches_locally: bool
    # capability -> the requirement (conformance/requirements.py) of the extra it depends on, e.g.
    # ActiveMQ's protocol.amqp on "activemq-amqp": with that requirement in BROKERCONF_REQUIRE a
    # test needing the capability fails instead of being not applicable; {} when none depends on one
    capability_requirements: dict[str, str]

    def why_missing(self, capability: str) -> str | None:
        """Why this target lacks ``capability``, when it can say more than the capability's
        description (None otherwise)."""

    def availability(self) -> tuple[bool, str]:
        """(True, "") when this target can run here, else (False, why not and how to fix it)."""

    def capabilities(self) -> frozenset[str]:
        """What a launched broker of this target can do (protocol.* included)."""

    def launch(self, scenario: Scenario, workdir: Path) -> BrokerHandle:
        """Start a broker configured for ``scenario``; raises TargetUnavailable with the reason."""

    def launch_topology(self, topology: Topology, scenario: Scenario, workdir: Path, *,
                        bridge_route: BridgeRoute | None = None) -> Cluster:
        """Start ``topology`` (conformance/topology.py) configured for ``scenario``, started; its
        capability (``topology.<kind>``) must be declared. ``bridge_route``: where each bridge dials
        when the topology routes its bridges through the fault proxy. Raises TopologyUnsupported
        (a ValueError) for a topology the target cannot form, TargetUnavailable when it cannot start."""


def address(handle: BrokerHandle, protocol: str) -> tuple[str, int]:
    """(host, port) of the handle's listener for ``protocol``; KeyError names what is open."""
    try:
        return handle.host, handle.ports[protocol]
    except KeyError:
        raise KeyError(f"{handle.target} has no {protocol} listener (open: {sorted(handle.ports)})") from None


def why_missing(target: Target, capability: str) -> str | None:
    """Why ``target`` lacks ``capability``, when the target says (`Target.why_missing`)."""
    return target.why_missing(capability)


#: the kind of brokerconf's own reference broker; every other kind is a real broker
REFERENCE_KIND = "reference"


def is_real_broker(target: Target) -> bool:
    """True for every target but the reference broker (`-m "not real_broker"` keeps the fast loop
    to the reference broker). The one place outside a broker's folder that knows a kind's name."""
    return target.kind != REFERENCE_KIND
