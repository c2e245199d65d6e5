"""Durable store-and-forward of a node's forwards, and of the duplicate ids it received (Artemis keeps what a cluster bridge has not had
acknowledged in a store-and-forward queue per target node, so a restart resends it with the same
duplicate ids; artemis-clusters.md, use-duplicate-detection).

A persistent message handed to a link is also written to the store under the key of the queue
``$cluster.sf.<next hop>``, with its forward's duplicate id as the stored message's id and the
forward's fields as properties; the ack removes it. At start the broker's recovery has made those
keys queues again: `recover` takes their messages back as forward frames, per next hop, and drops
the queues. Non-persistent messages are not written (as everywhere, a crash may lose them).
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.broker import Broker
from ..engine.message import Message
from ..engine.names import QUEUE, DestinationName
from . import wire

#: the queue-name prefix of store-and-forward queues (never clustered, never announced)
INTERNAL_PREFIX = "$cluster."
SF_PREFIX = INTERNAL_PREFIX + "sf."
#: where a receiving node keeps the duplicate ids of the persistent forwards it took
IDS_KEY = DestinationName(QUEUE, INTERNAL_PREFIX + "ids").canonical
_FIELDS = ("target", "queue", "why", "dedupe")
_PROPERTY = "_cluster.forward."


def sf_key(hop: str) -> str:
    return DestinationName(QUEUE, SF_PREFIX + hop).canonical


class StoreAndForward:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.stored: dict[str, str] = {}  # duplicate id -> store key

    def keep(self, hop: str, frame: dict, message: Message) -> None:
        """Write ``message`` (forwarded as ``frame`` through ``hop``) to the store if persistent."""
        if not message.persistent or frame["id"] in self.stored:
            return
        key = sf_key(hop)
        properties = dict(message.properties)
        properties.update({_PROPERTY + name: frame[name] for name in _FIELDS if name in frame})
        properties[_PROPERTY + "message_id"] = message.message_id
        self.broker.store.add(key, replace(message, message_id=frame["id"], properties=properties,
                                           destination=key, wire_cache=None))
        self.stored[frame["id"]] = key

    def done(self, duplicate_id: str) -> None:
        """Acknowledged (or kept locally instead): no longer to be resent."""
        key = self.stored.pop(duplicate_id, None)
        if key is not None:
            self.broker.store.remove(key, duplicate_id)

    def recover(self) -> dict[str, list[dict]]:
        """The forwards a previous run of this node never had acknowledged, by next hop (kept in
        the store until acknowledged now)."""
        found: dict[str, list[dict]] = {}
        for key in [k for k in self.broker.queues if k.startswith(sf_key(""))]:
            queue = self.broker.queues[key]
            hop = key[len(sf_key("")):]
            for ref in queue.take_pending():  # removes them from the store: written again below
                stored = ref.message
                properties = dict(stored.properties)
                fields = {name: properties.pop(_PROPERTY + name) for name in _FIELDS if _PROPERTY + name in properties}
                original_id = properties.pop(_PROPERTY + "message_id", stored.message_id)
                message = replace(stored, message_id=original_id, properties=properties,
                                  destination=DestinationName(QUEUE, fields.get("queue", "")).canonical)
                frame = {"kind": "forward", "id": stored.message_id, **fields, "message": wire.message_to_wire(message)}
                self.keep(hop, frame, message)
                found.setdefault(hop, []).append(frame)
            del self.broker.queues[key]
        return found


class PersistentIds:
    """The duplicate ids of persistent forwards a node received, in the store under `IDS_KEY`
    (one empty stored message per id), so they outlive a crash of the node."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.kept: set[str] = set()

    def keep(self, duplicate_id: str) -> None:
        self.kept.add(duplicate_id)
        self.broker.store.add(IDS_KEY, Message(duplicate_id, IDS_KEY, b"", persistent=True))

    def forget(self, duplicate_id: str) -> None:
        if duplicate_id in self.kept:
            self.kept.discard(duplicate_id)
            self.broker.store.remove(IDS_KEY, duplicate_id)

    def recover(self) -> list[str]:
        """The ids a previous run kept, oldest first (kept in the store)."""
        queue = self.broker.queues.get(IDS_KEY)
        if queue is None:
            return []
        ids = [ref.message.message_id for ref in queue.take_pending()]
        del self.broker.queues[IDS_KEY]
        for duplicate_id in ids:
            self.keep(duplicate_id)
        return ids
