"""Memory accounting behind producer flow control.

Every pending message is charged to its destination's usage and, through it, to the broker-wide
usage. When a usage is full, the destination's policy decides: block the producer (the protocol
adapter stops reading from its socket until space frees) or refuse the send with an error.
Nothing is dropped silently.
"""

from __future__ import annotations

from typing import Callable


class MemoryUsage:
    __slots__ = ("name", "limit", "used", "parent", "_waiters", "high_water")

    def __init__(self, name: str, limit: int | None, parent: "MemoryUsage | None" = None) -> None:
        self.name = name
        self.limit = limit  # None: only the parent's limit applies
        self.used = 0
        self.high_water = 0
        self.parent = parent
        self._waiters: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        if self.limit is not None and self.used >= self.limit:
            return True
        return self.parent is not None and self.parent.full

    def increase(self, amount: int) -> None:
        self.used += amount
        if self.used > self.high_water:
            self.high_water = self.used
        if self.parent is not None:
            self.parent.increase(amount)

    def decrease(self, amount: int) -> None:
        self.used -= amount
        if self.parent is not None:
            self.parent.decrease(amount)
        if self._waiters and not self.full:
            self._wake()
        elif self.parent is not None and self.parent._waiters and not self.parent.full:
            self.parent._wake()

    def wait_for_space(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when this usage (and its parents) has room again."""
        if not self.full:
            callback()
            return
        self._waiters.append(callback)
        if self.parent is not None and self.parent.full:
            self.parent._waiters.append(callback)

    def cancel(self, callback: Callable[[], None]) -> None:
        for usage in (self, self.parent):
            if usage is not None and callback in usage._waiters:
                usage._waiters.remove(callback)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for callback in waiters:
            callback()

    def percent(self) -> float:
        return 100.0 * self.used / self.limit if self.limit else 0.0
