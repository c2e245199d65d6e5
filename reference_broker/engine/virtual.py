"""Virtual destinations: virtual topics and composite destinations (ActiveMQ "Virtual
Destinations", and the uses ActiveMQ "Networks of Brokers" makes of them in "Dynamic networks and
Virtual Destinations").

* A virtual topic (config ``virtual_topics``; by default ActiveMQ's ``VirtualTopic.>`` with
  consumer queues ``Consumer.*.``) behaves as a topic for its subscribers, and in addition every
  message sent to it is copied to each *existing* queue named ``<prefix><topic>``, e.g.
  ``Consumer.A.VirtualTopic.X``; those queues are ordinary queues (load balanced, persistent).
* A composite destination (config ``composite_destinations``, ActiveMQ's ``<compositeTopic>`` /
  ``<compositeQueue>``) copies each message to its ``forward_to`` list; with ``forward_only`` (the
  default) the original destination itself gets nothing.

Copies keep the message id (as ActiveMQ's do) and re-enter routing, so a composite may forward to a
virtual topic; `MAX_DEPTH` stops a configuration that forwards in a circle.

`sources_for` answers the reverse question for networks: which virtual destinations send
messages to this queue or topic -- a consumer there is demand for them (``use_virtual_dest_subs``).
"""

from __future__ import annotations

import dataclasses
import logging

from ..config import BrokerConfig
from .message import Message
from .names import QUEUE, TOPIC, DestinationName, parse_destination
from .routing import NameIndex
from .wildcard import has_wildcards, matches

log = logging.getLogger("reference_broker.engine")

#: nesting limit for forwarding (a composite forwarding to itself through others)
MAX_DEPTH = 8


class VirtualDestinations:
    def __init__(self, config: BrokerConfig) -> None:
        self.virtual_topics = list(config.virtual_topics)
        self.composites = {(c.kind, c.name): c for c in config.composite_destinations}
        self._depth = 0
        # topic name -> the virtual topics it matches. Every topic message asks, and almost every
        # answer is "none" (MQTT publishes are topic messages), so remember the answers.
        self._virtual_of: dict[str, list] = {}

    def _virtual_topics_of(self, topic: str) -> list:
        found = self._virtual_of.get(topic)
        if found is None:
            if len(self._virtual_of) >= 10_000:  # many distinct topic names: start over, stay small
                self._virtual_of.clear()
            found = self._virtual_of[topic] = [vt for vt in self.virtual_topics if matches(vt.name, topic)]
        return found

    # ------------------------------------------------------------ sending

    def forward(self, dest: DestinationName, existing_queues: NameIndex) -> tuple[bool, list[DestinationName]]:
        """Where a message sent to ``dest`` goes besides (or instead of) ``dest`` itself:
        ``(deliver_to_dest, copies)``. ``existing_queues``: the plain names of the broker's queues
        (a virtual topic copies only to consumer queues that exist), looked up by pattern so the
        broker's other queues cost nothing."""
        composite = self.composites.get((dest.kind, dest.name))
        if composite is not None:
            return (not composite.forward_only,
                    [parse_destination(d) for d in composite.forward_to])
        copies: list[DestinationName] = []
        if dest.is_topic:
            for vt in self._virtual_topics_of(dest.name):
                pattern = vt.prefix + dest.name
                copies += [DestinationName(QUEUE, name) for name in existing_queues.matching(pattern)]
        return True, copies

    def route_copies(self, broker, dest: DestinationName, message: Message) -> bool:
        """Route the copies of ``message`` (sent to ``dest``) through ``broker``; returns whether
        ``dest`` itself should still get the message."""
        deliver, copies = self.forward(dest, broker.queues.names)
        if not copies:
            return deliver
        if self._depth >= MAX_DEPTH:
            log.warning("virtual destinations forward %s in a circle (more than %d levels); not forwarding further",
                        dest.canonical, MAX_DEPTH)
            return deliver
        self._depth += 1
        try:
            for target in copies:
                copy = dataclasses.replace(message, destination=target.canonical, wire_cache=None,
                                           properties=dict(message.properties))
                broker.route(target, copy)
        finally:
            self._depth -= 1
        return deliver

    # ------------------------------------------------------------ demand (networks)

    def sources_for(self, dest: DestinationName) -> list[DestinationName]:
        """The virtual destinations whose messages reach ``dest``: for a consumer queue
        ``Consumer.A.VirtualTopic.X`` the topic ``VirtualTopic.X``; for a composite's forward_to
        entry the composite itself. ActiveMQ "Networks of Brokers", "Virtual Destination consumers
        and Composite Destinations": such a consumer is demand for these destinations."""
        found: list[DestinationName] = []
        for composite in self.composites.values():
            if dest.canonical in composite.forward_to:
                found.append(DestinationName(QUEUE if composite.kind == "queue" else TOPIC, composite.name))
        if dest.is_queue and not has_wildcards(dest.name):
            for vt in self.virtual_topics:
                prefix_parts = vt.prefix.rstrip(".").split(".")
                parts = dest.name.split(".")
                if len(parts) <= len(prefix_parts):
                    continue
                head, topic = ".".join(parts[:len(prefix_parts)]), ".".join(parts[len(prefix_parts):])
                if matches(".".join(prefix_parts), head) and matches(vt.name, topic):
                    found.append(DestinationName(TOPIC, topic))
        return found
