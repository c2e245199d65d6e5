"""Memory accounting behind producer flow control.

Every pending message is charged to its destination's usage and, through it, to the broker-wide
usage. When a usage is full, the destination's policy decides: block the producer (the protocol
adapter stops reading from its socket until space frees) or refuse the send with an error.
Nothing is dropped silently.
"""

from __future__ import annotations

from typing import Callable


class _Waiter:
    """A `wait_for_space` callback that runs at most once, however many usages it waits on."""

    __slots__ = ("callback", "done")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            self.callback()


class MemoryUsage:
    __slots__ = ("name", "limit", "used", "parent", "_waiters", "high_water")

    def __init__(self, name: str, limit: int | None, parent: "MemoryUsage | None" = None) -> None:
        self.name = name
        self.limit = limit  # None: only the parent's limit applies
        self.used = 0
        self.high_water = 0
        self.parent = parent
        self._waiters: list[_Waiter] = []

    @property
    def full(self) -> bool:
        usage = self
        while usage is not None:  # checked on every send: a loop, not recursion
            if usage.limit is not None and usage.used >= usage.limit:
                return True
            usage = usage.parent
        return False

    def increase(self, amount: int) -> None:
        usage = self
        while usage is not None:  # per message on the hot path: a loop, not recursion
            usage.used += amount
            if usage.used > usage.high_water:
                usage.high_water = usage.used
            usage = usage.parent

    def decrease(self, amount: int) -> None:
        self.used -= amount
        if self.parent is not None:
            self.parent.decrease(amount)
        if not self._waiters:
            return
        if not self.full:
            self._wake()
        elif self.parent is not None and (self.limit is None or self.used < self.limit):
            # Only the parent is in the way now: its next decrease (from any destination)
            # must wake these waiters, not only a decrease of this usage.
            for waiter in self._waiters:
                if waiter not in self.parent._waiters:
                    self.parent._waiters.append(waiter)

    def wait_for_space(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when this usage (and its parents) has room again."""
        if not self.full:
            callback()
            return
        waiter = _Waiter(callback)
        self._waiters = [w for w in self._waiters if not w.done]  # woken through the parent
        self._waiters.append(waiter)
        own_full = self.limit is not None and self.used >= self.limit
        if not own_full and self.parent is not None and self.parent.full:
            # Only the parent is full: a decrease anywhere under it may make room. (When this
            # usage is full itself, `decrease` hands the waiter to the parent once it is not.)
            self.parent._waiters.append(waiter)

    def cancel(self, callback: Callable[[], None]) -> None:
        for usage in (self, self.parent):
            if usage is not None:
                usage._waiters = [w for w in usage._waiters if w.callback is not callback]

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter()

    def percent(self) -> float:
        return 100.0 * self.used / self.limit if self.limit else 0.0
