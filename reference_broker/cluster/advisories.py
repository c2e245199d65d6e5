"""Consumer advisories: each broker announces, per destination, the consumers it has.

ActiveMQ "Networks of Brokers", "Networks of brokers and advisories": a bridge learns the remote
consumers from ``ActiveMQ.Advisory.Consumer.>`` topics. The reference broker publishes, on
``topic://ActiveMQ.Advisory.Consumer.Queue.<name>`` (``.Topic.<name>`` for topics), one *retained*
message holding the destination's whole current consumer set (JSON), so a bridge that subscribes
later gets every destination's state at once (retained replay) and each update replaces the last;
an empty body means "no consumers" (and clears the retained message).

Network consumers are announced with the path their demand crossed (`paths`), so peers can apply
consumer_ttl and suppress loops; network consumers created over STOMP (a duplex peer's pull
subscription) get the priority their id asks for, as STOMP cannot carry a negative one.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

from ..engine.broker import Broker, Connection
from ..engine.consumer import Consumer
from ..engine.message import RETAIN_PROPERTY, Message
from ..engine.names import TOPIC, DestinationName, parse_destination
from .demand import RemoteConsumer
from .paths import network_subscription
from .replay import RateWindow, install as install_bridge_filter

ADVISORY_PREFIX = "ActiveMQ.Advisory."
CONSUMER_ADVISORY_PREFIX = "ActiveMQ.Advisory.Consumer."
ADVISORY_WILDCARD = "/topic/ActiveMQ.Advisory.Consumer.>"


def publishes_advisories(config) -> bool:
    """ActiveMQ's advisorySupport: on unless the configuration switches it off explicitly (a broker
    with network connectors and no say has it on, as ActiveMQ's default)."""
    return config.advisory_support if "advisory_support" in config.model_fields_set else True


def advisory_subscriptions(destination_filter: str | None) -> list[str]:
    """The STOMP destinations a bridge subscribes to for the peer's consumer advisories: every one
    by default, else those of ``destination_filter`` ("Dynamic networks": ActiveMQ's
    destinationFilter, appended to the consumer advisory prefix unless an entry has it already)."""
    if destination_filter is None:
        return [ADVISORY_WILDCARD]
    return ["/topic/" + (entry if entry.startswith(CONSUMER_ADVISORY_PREFIX) else CONSUMER_ADVISORY_PREFIX + entry)
            for entry in destination_filter.split(",")]
# ActiveMQ "Networks of Brokers", "Dynamic networks and Virtual Destinations": with
# use_virtual_dest_subs a broker also announces consumers of a virtual destination's target queues
# as consumers of the virtual destination itself, on advisory topics of their own (ActiveMQ's
# names), which only connectors with use_virtual_dest_subs listen to.
VIRTUAL_ADVISORY_PREFIX = "ActiveMQ.Advisory.VirtualDestination.Consumer."
VIRTUAL_ADVISORY_WILDCARD = "/topic/ActiveMQ.Advisory.VirtualDestination.Consumer.>"
# Advisory property marking a temporary destination of the announcing broker (engine/temporary.py):
# a peer with bridge_temp_destinations lets its clients reply to it (NOB-TEMP-1).
TEMPORARY_PROPERTY = "temporaryDestination"
_KINDS = {"queue": "Queue", "topic": "Topic"}
_KINDS_BACK = {v: k for k, v in _KINDS.items()}


def advisory_topic(destination: str) -> str:
    kind, _, name = destination.partition("://")
    return f"{CONSUMER_ADVISORY_PREFIX}{_KINDS[kind]}.{name}"


def virtual_advisory_topic(destination: str) -> str:
    kind, _, name = destination.partition("://")
    return f"{VIRTUAL_ADVISORY_PREFIX}{_KINDS[kind]}.{name}"


def destination_of_advisory(topic_name: str, prefix: str = CONSUMER_ADVISORY_PREFIX) -> str | None:
    """``ActiveMQ.Advisory.Consumer.Queue.X`` -> ``queue://X`` (None for anything else); pass
    ``VIRTUAL_ADVISORY_PREFIX`` for the virtual destination consumer advisories."""
    if not topic_name.startswith(prefix):
        return None
    kind, _, name = topic_name[len(prefix):].partition(".")
    return f"{_KINDS_BACK[kind]}://{name}" if kind in _KINDS_BACK and name else None


def encode_consumers(consumers: list[RemoteConsumer]) -> bytes:
    if not consumers:
        return b""
    return json.dumps([{"id": c.consumer_id, "path": list(c.path), "priority": c.priority,
                        "selector": c.selector, **({"durable": True} if c.durable else {})}
                       for c in consumers]).encode()


def decode_consumers(body: bytes) -> list[RemoteConsumer]:
    if not body.strip():
        return []
    return [RemoteConsumer(e["id"], tuple(e.get("path") or ()), int(e.get("priority", 0)), e.get("selector"),
                           bool(e.get("durable", False)))
            for e in json.loads(body)]


Watcher = Callable[[str, list[RemoteConsumer]], None]



def internal_connection(broker: Broker, client_id: str | None = None) -> Connection:
    """The broker's own connection, for its advisories and its bridges' local end. ActiveMQ
    publishes advisories from inside the broker and a bridge's local end is an in-VM connection;
    neither logs in, so a broker whose users exclude anonymous clients (NOB-AUTH-1) still networks.
    ``client_id`` keys the connection's durable subscriptions (a bridge's durable network ones)."""
    return broker.connect(client_id=client_id, internal=True)


class AdvisoryPublisher:
    """Tracks every consumer of the broker by destination and publishes the advisories.

    ``schedule`` runs a callback later (the event loop's ``call_soon``) so a burst of changes on
    one destination is published once and never from inside a dispatch; tests pass one that runs
    at once. Bridges register the in-process network consumers they create (`register_network`)
    and, for the duplex half, watch the local consumer sets (`watch`)."""

    def __init__(self, broker: Broker, schedule: Callable[[Callable[[], None]], object] | None = None,
                 later: Callable[[float, Callable[[], None]], object] | None = None) -> None:
        self.broker = broker
        self.name = broker.config.name
        self._schedule = schedule or (lambda fn: fn())
        # Runs a callback after a delay in seconds (the loop's call_later): the conditional
        # network bridge filter's replay delay and rate window (`replay`).
        self._later = later or (lambda delay, fn: None)
        self._rate_windows: dict[str, RateWindow] = {}
        self.consumers: dict[str, dict[Consumer, None]] = {}
        self.network_paths: dict[Consumer, tuple[str, ...]] = {}
        self._dirty: set[str] = set()
        self._watchers: list[Watcher] = []
        self._connection = None
        # use_virtual_dest_subs: virtual destination -> consumers of its target queues/topics, and
        # (..._on_creation) -> its target queues that exist, each announced as one consumer.
        self.virtual_consumers: dict[str, dict[Consumer, None]] = {}
        self.virtual_created: dict[str, dict[str, None]] = {}
        broker.consumer_listeners.append(self._on_consumer)
        if broker.config.use_virtual_dest_subs and broker.config.use_virtual_dest_subs_on_creation:
            broker.queue_listeners.append(self._on_queue_created)
            for queue in list(broker.queues):
                self._on_queue_created(queue)

    def close(self) -> None:
        if self._on_consumer in self.broker.consumer_listeners:
            self.broker.consumer_listeners.remove(self._on_consumer)
        if self._on_queue_created in self.broker.queue_listeners:
            self.broker.queue_listeners.remove(self._on_queue_created)

    # ------------------------------------------------------------ bridges

    def register_network(self, consumer: Consumer, path: tuple[str, ...]) -> None:
        """Called right before a bridge subscribes its network consumer (so the add event sees it)."""
        self.network_paths[consumer] = path

    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def _describe(self, consumer: Consumer) -> RemoteConsumer:
        path = self.network_paths.get(consumer)
        if path is None:
            parsed = network_subscription(consumer)
            path = parsed[0] if parsed else ()
        selector = consumer.selector.text if consumer.selector is not None and not path else None
        return RemoteConsumer(f"{consumer.connection.connection_id}/{consumer.consumer_id}",
                              path, consumer.priority, selector, durable=consumer.durable_name is not None)

    def snapshot(self, destination: str) -> list[RemoteConsumer]:
        return [self._describe(consumer) for consumer in self.consumers.get(destination, {})]

    def virtual_snapshot(self, destination: str) -> list[RemoteConsumer]:
        """Demand for virtual destination ``destination``: its targets' consumers (a selector on a
        target queue is not the virtual destination's, so none is announced), and with
        use_virtual_dest_subs_on_creation one placeholder per existing target queue."""
        found = [dataclasses.replace(self._describe(c), selector=None)
                 for c in self.virtual_consumers.get(destination, {})]
        found += [RemoteConsumer(f"created:{queue}") for queue in self.virtual_created.get(destination, {})]
        return found

    def destinations(self) -> list[str]:
        return [d for d, consumers in self.consumers.items() if consumers]

    # ------------------------------------------------------------ engine events

    def _on_consumer(self, event: str, consumer: Consumer) -> None:
        destination = consumer.destination.canonical
        if consumer.destination.name.startswith(ADVISORY_PREFIX):
            return  # advisory subscribers are not demand (and announcing them would loop)
        consumers = self.consumers.setdefault(destination, {})
        if event == "add":
            consumers[consumer] = None
            parsed = network_subscription(consumer)
            if parsed is not None and consumer.priority != parsed[1]:
                _reprioritize(consumer, parsed[1])
            if parsed is not None:
                install_bridge_filter(self.broker, consumer, self._later, self._rate_windows)
        else:
            consumers.pop(consumer, None)
            self.network_paths.pop(consumer, None)
            if not consumers:
                del self.consumers[destination]
        self._mark(destination)
        if self.broker.config.use_virtual_dest_subs:
            for source in self.broker.virtual.sources_for(consumer.destination):
                targets = self.virtual_consumers.setdefault(source.canonical, {})
                if event == "add":
                    targets[consumer] = None
                else:
                    targets.pop(consumer, None)
                    if not targets:
                        del self.virtual_consumers[source.canonical]
                self._mark(source.canonical, virtual=True)

    def _on_queue_created(self, queue: str) -> None:
        for source in self.broker.virtual.sources_for(parse_destination(queue)):
            self.virtual_created.setdefault(source.canonical, {})[queue] = None
            self._mark(source.canonical, virtual=True)

    def _mark(self, destination: str, virtual: bool = False) -> None:
        key = ("virtual:" if virtual else "") + destination
        if key not in self._dirty:
            self._dirty.add(key)
            self._schedule(lambda: self._publish(destination, virtual))

    def _publish(self, destination: str, virtual: bool = False) -> None:
        self._dirty.discard(("virtual:" if virtual else "") + destination)
        if virtual:
            snapshot, topic = self.virtual_snapshot(destination), virtual_advisory_topic(destination)
        else:
            snapshot, topic = self.snapshot(destination), advisory_topic(destination)
            for watcher in list(self._watchers):
                watcher(destination, snapshot)
        if not publishes_advisories(self.broker.config):
            return  # "Configuration Pitfalls": no advisories, so no peer's bridge hears of this demand
        if self._connection is None or self._connection.closed:
            self._connection = internal_connection(self.broker)
        message = Message(message_id=self._connection.new_message_id(), destination=f"topic://{topic}",
                          body=encode_consumers(snapshot), properties={RETAIN_PROPERTY: True, "broker": self.name})
        if not virtual and self.broker.temporary.is_local(destination):
            message.properties[TEMPORARY_PROPERTY] = True
        self._connection.send(DestinationName(TOPIC, topic), message)


def _reprioritize(consumer: Consumer, priority: int) -> None:
    """Give a queue consumer a priority its protocol could not express, keeping the queue's
    order (highest priority first, arrival order within one)."""
    consumer.priority = priority
    queue = consumer.source
    consumers = getattr(queue, "consumers", None)
    if not isinstance(consumers, list) or consumer not in consumers:
        return
    consumers.remove(consumer)
    index = next((i for i, c in enumerate(consumers) if c.priority < priority), len(consumers))
    consumers.insert(index, consumer)
