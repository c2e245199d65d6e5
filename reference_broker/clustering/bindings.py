"""Who has which queue, with which consumers, how many hops away (artemis-clusters.md, "Symmetric
cluster": each node knows the queues of the others and their consumers; "Chain cluster": with
``max-hops`` 2 what C has is propagated from C to B to A).

A node announces a table to each node that dials it (the dialer is the one forwarding to it):
its own queues at 1 hop, and what it learned from the nodes it dials itself, one hop further, as
long as that stays within its ``max_hops``. The dialer keeps the table per link; the entries of a
link go with the link.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..engine.message import Message, MessageRef
from ..engine.selector import SelectorError, parse_selector


@dataclass(frozen=True)
class RemoteQueue:
    """Queue ``queue`` (plain name) on node ``node``, ``hops`` away, with one entry per consumer:
    its selector text or None."""

    node: str
    queue: str
    selectors: tuple[str | None, ...]
    hops: int

    @property
    def consumers(self) -> int:
        return len(self.selectors)

    def has_matching_consumer(self, message: Message) -> bool:
        """ON_DEMAND: a consumer without a selector, or one whose selector matches."""
        ref = MessageRef(message, 0)
        return any(text is None or _matches(text, ref) for text in self.selectors)

    def to_wire(self) -> dict:
        return {"node": self.node, "queue": self.queue, "selectors": list(self.selectors), "hops": self.hops}

    @classmethod
    def from_wire(cls, data: dict) -> "RemoteQueue":
        return cls(str(data["node"]), str(data["queue"]), tuple(data.get("selectors") or ()), int(data["hops"]))


@lru_cache(maxsize=1024)
def _compiled(text: str):
    return parse_selector(text)


def _matches(text: str, ref: MessageRef) -> bool:
    try:
        return _compiled(text).matches(ref.selector_value)
    except SelectorError:
        return False


class BindingTable:
    """The remote queues this node can forward to, by the link (peer node) that announced them."""

    def __init__(self, me: str, max_hops: int) -> None:
        self.me = me
        self.max_hops = max_hops
        self._by_link: dict[str, dict[tuple[str, str], RemoteQueue]] = {}

    def replace(self, link_peer: str, entries: list[RemoteQueue]) -> bool:
        """The table ``link_peer`` announced (its whole view, replacing the previous one); whether
        it differs from what that link had announced before (a first table always does)."""
        table = {(e.node, e.queue): e for e in entries if e.node != self.me}
        changed = self._by_link.get(link_peer) != table
        self._by_link[link_peer] = table
        return changed

    def drop(self, link_peer: str) -> None:
        self._by_link.pop(link_peer, None)

    def remote_queues(self, queue: str) -> dict[str, tuple[str, RemoteQueue]]:
        """node -> (next hop, entry) for every node within max_hops that has ``queue``; the
        nearest route to a node wins."""
        found: dict[str, tuple[str, RemoteQueue]] = {}
        for peer, entries in self._by_link.items():
            for (node, name), entry in entries.items():
                if name != queue or entry.hops > self.max_hops:
                    continue
                known = found.get(node)
                if known is None or entry.hops < known[1].hops:
                    found[node] = (peer, entry)
        return found

    def next_hop(self, node: str) -> str | None:
        """The peer to forward through to reach ``node`` (the nearest route), or None."""
        best = None
        for peer, entries in self._by_link.items():
            if peer == node:
                return peer
            for (n, _), entry in entries.items():
                if n == node and entry.hops <= self.max_hops and (best is None or entry.hops < best[1]):
                    best = (peer, entry.hops)
        return best[0] if best else None

    def announce(self, own: list[RemoteQueue], to_peer: str) -> list[RemoteQueue]:
        """What to tell ``to_peer``: ``own`` queues (1 hop), plus learned ones one hop further
        while within max_hops, never what ``to_peer`` itself has or told us."""
        table = {(e.node, e.queue): e for e in own}
        for peer, entries in self._by_link.items():
            if peer == to_peer:
                continue
            for key, entry in entries.items():
                hops = entry.hops + 1
                if entry.node == to_peer or hops > self.max_hops:
                    continue
                known = table.get(key)
                if known is None or hops < known.hops:
                    table[key] = RemoteQueue(entry.node, entry.queue, entry.selectors, hops)
        return list(table.values())

    def nodes(self) -> set[str]:
        return {node for entries in self._by_link.values() for node, _ in entries} | set(self._by_link)
