"""Demand: which network consumers a bridge keeps, from a peer's consumer announcement.

Pure functions (no I/O), after ActiveMQ "Networks of Brokers":
* a destination crosses only if the connector's destination lists allow it ("excludedDestinations"
  wins over "dynamicallyIncludedDestinations"; an empty included list means every destination;
  wildcards . * > as in ActiveMQ "Wildcards"); statically included destinations are not subject to
  the exclusions (the N.B. under "Example Configuration using NetworkConnector properties");
* a remote consumer creates demand unless its announcement already passed through this broker
  (loop) or has crossed consumer_ttl brokers ("consumerTTL");
* conduitSubscriptions: all of a peer's consumers on one destination are one network consumer,
  ignoring their selectors ("Conduit subscriptions and consumer selectors"); without it, one
  network consumer per remote consumer, carrying its selector;
* decreaseNetworkConsumerPriority: the network consumer's priority drops with the hops;
* a durable topic subscriber behind the peer makes the network subscription durable, one per topic
  and bridge ("Reliability": durable topic subscriptions keep their durability across the network;
  the N.B. on names under "Example Configuration": the bridge names it from the connector and
  broker names, `durable_subscription_name` / `bridge_client_id`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.wildcard import matches
from .network_config import NetworkConnectorConfig
from .paths import network_priority


def _split(destination: str) -> tuple[str, str]:
    kind, _, name = destination.partition("://")
    return kind, name


def destination_matches(pattern: str, destination: str) -> bool:
    pattern_kind, pattern_name = _split(pattern)
    kind, name = _split(destination)
    return kind == pattern_kind and matches(pattern_name, name)


def dynamically_forwarded(config: NetworkConnectorConfig, destination: str) -> bool:
    """Whether demand for ``destination`` may cross this connector."""
    if any(destination_matches(p, destination) for p in config.excluded_destinations):
        return False
    included = config.dynamically_included_destinations
    return not included or any(destination_matches(p, destination) for p in included)


@dataclass(frozen=True)
class RemoteConsumer:
    """One consumer as a broker announces it: ``path`` is the brokers its demand already crossed
    before reaching the announcing broker (empty for a local client)."""

    consumer_id: str
    path: tuple[str, ...] = ()
    priority: int = 0
    selector: str | None = None
    durable: bool = False  # a durable topic subscriber (or a durable network subscription)


@dataclass(frozen=True)
class NetworkDemand:
    """One network consumer to keep on the forwarding broker."""

    key: str
    path: tuple[str, ...]  # announcing broker first, then the brokers behind it
    priority: int
    selector: str | None
    durable: bool = False


#: key of a bridge's durable network subscription of a topic (one per topic and bridge)
DURABLE_KEY = "durable"
#: ActiveMQ's prefix of a networked durable subscription's name (DurableConduitBridge: NC-DS_)
DURABLE_SUB_PREFIX = "NC-DS_"


def durable_subscription_name(forwarder: str, destination: str) -> str:
    """The name of the durable subscription a bridge on ``forwarder`` keeps for ``destination``
    (a topic): repeatable, so a restarted bridge finds it again (document, N.B. on names under
    "Example Configuration"); ActiveMQ's scheme, prefix + broker name + topic name."""
    return f"{DURABLE_SUB_PREFIX}{forwarder}_{destination.partition('://')[2]}"


def bridge_client_id(connector: str, forwarder: str, peer: str) -> str:
    """The client id of a bridge's connection on its own broker: the connector name and both
    broker names, so durable network subscriptions (keyed by client id and name) belong to one
    connector; another connector name means other subscriptions (the same N.B.). ActiveMQ's
    order, peer before forwarder: on 5.17.2 broker A's connector "keep" to B subscribes as
    client id ``keep_B_inbound_A`` (JMX, measured for NOB-DURNAME-1)."""
    return f"{connector}_{peer}_inbound_{forwarder}"


def eligible(consumer: RemoteConsumer, announcer: str, forwarder: str, consumer_ttl: int) -> bool:
    path = consumer.path
    return forwarder not in path and announcer not in path and len(path) < consumer_ttl


def desired_consumers(config: NetworkConnectorConfig, destination: str, announcer: str, forwarder: str,
                      consumers: list[RemoteConsumer]) -> dict[str, NetworkDemand]:
    """The network consumers ``forwarder`` should have for ``destination`` given what
    ``announcer`` (the peer the bridge connects them to) says its consumers are."""
    if config.static_bridge or not dynamically_forwarded(config, destination):
        return {}
    ttl = config.effective_consumer_ttl
    live = [c for c in consumers if eligible(c, announcer, forwarder, ttl)]
    if not live:
        return {}
    decrease = config.decrease_network_consumer_priority
    if destination.startswith("topic://") and any(c.durable for c in live):
        # One durable network subscription carries every consumer of the topic behind the peer
        # (a conduit: durable and non-durable ones alike, so none gets a message twice).
        nearest = min(live, key=lambda c: len(c.path))
        path = (announcer, *nearest.path)
        return {DURABLE_KEY: NetworkDemand(DURABLE_KEY, path, network_priority(path, decrease), None, durable=True)}
    if config.conduit_subscriptions:
        nearest = min(live, key=lambda c: len(c.path))
        path = (announcer, *nearest.path)
        return {"conduit": NetworkDemand("conduit", path, network_priority(path, decrease), None)}
    wanted = {}
    for c in live:
        path = (announcer, *c.path)
        wanted[c.consumer_id] = NetworkDemand(c.consumer_id, path, network_priority(path, decrease), c.selector)
    return wanted


def static_demand(config: NetworkConnectorConfig, announcer: str) -> dict[str, NetworkDemand]:
    """staticallyIncludedDestinations: always forwarded, consumers or not (exclusions do not apply)."""
    path = (announcer,)
    priority = network_priority(path, config.decrease_network_consumer_priority)
    return {d: NetworkDemand("static", path, priority, None) for d in config.statically_included_destinations}
