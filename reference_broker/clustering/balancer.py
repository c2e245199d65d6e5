"""Initial distribution of one message sent to a clustered queue (artemis-clusters.md,
"Server-Side Message Load Balancing" and message-load-balancing): round robin over the nodes
that may have it.

- OFF, OFF_WITH_REDISTRIBUTION: never forwarded; the local queue gets it.
- STRICT: this node and every node with a queue of that name, consumers or not.
- ON_DEMAND: the nodes (this one included) whose queue has a consumer without a selector or
  with one matching the message; when none has, the local queue gets it.
A node without a queue of that name never gets it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

from ..engine.message import Message
from .bindings import RemoteQueue


#: queues whose round-robin position is kept (the engine's idle-queue limit)
TURNS_REMEMBERED = 10_000


class LoadBalancer:
    def __init__(self, me: str, mode: str) -> None:
        self.me = me
        self.mode = mode
        # each queue's round-robin position, for the most recently used queues only (queue names
        # come from clients); a forgotten queue starts again at the first node
        self._turn: OrderedDict[str, int] = OrderedDict()
        self.remembered = TURNS_REMEMBERED

    def candidates(self, message: Message, local_matches: bool, remotes: Iterable[RemoteQueue]) -> list[str]:
        """The nodes this message may go to, in a fixed order (node names sorted)."""
        if self.mode in ("OFF", "OFF_WITH_REDISTRIBUTION"):
            return [self.me]
        remotes = list(remotes)
        if self.mode == "STRICT":
            return sorted({self.me, *(r.node for r in remotes)})
        chosen = {r.node for r in remotes if r.has_matching_consumer(message)}
        if local_matches:
            chosen.add(self.me)
        return sorted(chosen) or [self.me]

    def choose(self, queue: str, message: Message, local_matches: bool, remotes: Iterable[RemoteQueue]) -> str:
        """The node the next message of ``queue`` goes to (round robin per queue)."""
        nodes = self.candidates(message, local_matches, remotes)
        if len(nodes) == 1:
            return nodes[0]
        turn = self._turn.pop(queue, 0)
        self._turn[queue] = turn + 1
        if len(self._turn) > self.remembered:
            self._turn.popitem(last=False)
        return nodes[turn % len(nodes)]
