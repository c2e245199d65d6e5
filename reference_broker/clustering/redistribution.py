"""Message redistribution (artemis-clusters.md, "Message Redistribution"): after the last
consumer of a queue closed and ``redistribution_delay`` ms passed with none back, the queue's
messages move to nodes whose queue of that name has consumers, filters ignored (the chapter's
myProperty example: a local consumer, matching or not, keeps them here). Only with
message-load-balancing ON_DEMAND or OFF_WITH_REDISTRIBUTION; -1 (the default) never.

A queue stays "redistributing" from then until a local consumer arrives: messages reaching it
later, and remote consumers appearing later, move on too.
"""

from __future__ import annotations

import asyncio
from typing import Callable

REDISTRIBUTING_MODES = ("ON_DEMAND", "OFF_WITH_REDISTRIBUTION")


class Redistributor:
    """``move(queue_name) -> int`` does one pass (the service's: take the pending messages and
    forward them); this class decides when."""

    def __init__(self, mode: str, delay_for: Callable[[str], int], move: Callable[[str], int]) -> None:
        self.enabled = mode in REDISTRIBUTING_MODES
        self.delay_for = delay_for  # queue name -> redistribution_delay (ms, -1 never)
        self.move = move
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.active: set[str] = set()
        self.moved = 0

    def consumer_left(self, queue: str, remaining: int) -> None:
        if not self.enabled or remaining:
            return
        delay = self.delay_for(queue)
        if delay < 0:
            return
        self.cancel(queue)
        if delay == 0:
            self._begin(queue)
        else:
            self.timers[queue] = asyncio.get_running_loop().call_later(delay / 1000, self._begin, queue)

    def consumer_arrived(self, queue: str) -> None:
        """A local consumer is back: what waits for it stays (a pending delay is cancelled)."""
        self.cancel(queue)
        self.active.discard(queue)

    def cancel(self, queue: str) -> None:
        timer = self.timers.pop(queue, None)
        if timer is not None:
            timer.cancel()

    def _begin(self, queue: str) -> None:
        self.timers.pop(queue, None)
        self.active.add(queue)
        self.moved += self.move(queue)

    def poke(self, queue: str | None = None) -> None:
        """Something changed (a message arrived, remote consumers changed): move again."""
        for name in ([queue] if queue is not None else list(self.active)):
            if name in self.active:
                self.moved += self.move(name)

    def close(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        self.active.clear()
