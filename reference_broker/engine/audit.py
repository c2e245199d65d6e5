"""Duplicate suppression for messages that arrive over a network bridge.

A bridge forwards a message and waits for the peer's receipt before dropping its own copy (store
and forward, ActiveMQ "Networks of Brokers", "Reliability"). When the link breaks after the peer
stored the message but before the receipt came back, the bridge sends it again on the next link.
ActiveMQ keeps the original MessageId across the bridge and its destinations' message audit
(``enableAudit``, on by default) drops the second copy; the reference broker's STOMP bridge cannot
carry a message id in a SEND, so it carries the origin broker's id in `NETWORK_ORIGIN_PROPERTY`
and `NetworkAudit` remembers the most recent ones per destination.

The audit is in memory, like ActiveMQ's producer audit window: a receiving broker restarted
between storing a message and the resend does not recognise it.
"""

from __future__ import annotations

from collections import OrderedDict

#: set by a bridge on every message it forwards: ``<origin broker>/<its message id>``; kept as the
#: message crosses further brokers, so every hop recognises the same message
NETWORK_ORIGIN_PROPERTY = "networkOriginId"

#: the broker names a network message passed through (reference_broker/cluster/paths.py)
BROKER_PATH_PROPERTY = "brokerPath"


def audit_key(properties: dict) -> str | None:
    """What identifies one delivery over the network: the origin id *and* the path. A resend after
    a lost receipt repeats both; a message replayed back and forwarded again (replay when no
    consumers) has a longer path, so it is not taken for a duplicate -- the mistake ActiveMQ's
    audit made before 5.9 (Networks of Brokers, note under "Stuck Messages")."""
    origin = properties.get(NETWORK_ORIGIN_PROPERTY)
    if origin is None:
        return None
    return f"{origin}|{properties.get(BROKER_PATH_PROPERTY, '')}"


#: ids remembered per destination (ActiveMQ's default maxAuditDepth is 2048 per producer; a bridge
#: is one producer per destination here, so the same order of magnitude)
AUDIT_DEPTH = 2048
#: destinations audited at once; the least recently used one is forgotten beyond it (the
#: property is only a header: a client can put it on messages to ever new names)
AUDIT_DESTINATIONS = 10_000


class NetworkAudit:
    def __init__(self, depth: int = AUDIT_DEPTH, destinations: int = AUDIT_DESTINATIONS) -> None:
        self.depth = depth
        self.destinations = destinations
        self._seen: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()
        self.duplicates = 0  # dropped so far (tests and logs)

    def is_duplicate(self, destination: str, origin_id: str) -> bool:
        """Record ``origin_id`` for ``destination``; True when it was already there."""
        seen = self._seen.get(destination)
        if seen is None:
            seen = self._seen[destination] = OrderedDict()
            if len(self._seen) > self.destinations:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(destination)
        if origin_id in seen:
            seen.move_to_end(origin_id)
            self.duplicates += 1
            return True
        seen[origin_id] = None
        if len(seen) > self.depth:
            seen.popitem(last=False)
        return False
