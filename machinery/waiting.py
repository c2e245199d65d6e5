"""Waiting for a condition, defined once for the whole tree (issue 27): readiness of a process,
formation of a cluster, a drain, a test's condition.

The ground floor holds it so that machinery, the targets, chaos, reports and the command line
all wait the same way; `conformance/waiting.py` adds the waits that are about messages
(barriers, markers, the quiet window) on top of it.

- `wait_until` polls a predicate until it returns something truthy and returns that; when the
  deadline passes first it raises `WaitTimeout` naming what was awaited and the last value, or
  the caller's own exception (``on_timeout``: a start error with the process's log, say).
- `poll` returns the last value either way, for a caller that decides itself what a miss means.
- `Deadline` is one bound shared by the steps of one wait (a start-up that launches, then waits
  for the port, then for the log line), and the bound of a loop that does work each round (a
  reader that accumulates, a retry that sends): such a loop asks ``remaining()`` / ``expired()``
  instead of doing the clock arithmetic itself.

A predicate may raise to end the wait at once (a process that exited will never become ready).
Deadlines are generous bounds for a loaded 2-core machine, never speed assertions: a condition
that holds early ends the wait early.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: How often a condition is polled unless the caller says otherwise.
INTERVAL = 0.05
#: Default deadline for a condition, for things that happen within milliseconds when all is well.
TIMEOUT = 5.0


class WaitTimeout(AssertionError):
    """A condition did not hold by its deadline; the message says what was awaited and the last
    value seen. An AssertionError, so a test reports it as a failure, not an error."""

    def __init__(self, describe: str, timeout: float, last: Any) -> None:
        super().__init__(f"timed out after {timeout:g} s waiting for {describe}; last value seen: {last!r}")
        self.describe, self.timeout, self.last = describe, timeout, last


class Deadline:
    """A bound ``timeout`` seconds from when it is made, on the monotonic clock (a wall clock
    may jump). Pass it wherever a timeout in seconds is taken, to share one bound between the
    steps of one wait."""

    __slots__ = ("timeout", "at")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.at = time.monotonic() + timeout

    def remaining(self) -> float:
        """Seconds left, never below zero."""
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def sleep(self, interval: float) -> None:
        """Sleep ``interval`` s, or only what is left of the deadline when that is less."""
        time.sleep(min(interval, self.remaining()))

    def __repr__(self) -> str:
        return f"Deadline({self.timeout:g} s, {self.remaining():.3f} s left)"


def deadline_of(timeout: float | Deadline) -> Deadline:
    """A timeout in seconds from now as a `Deadline`; a `Deadline` as it is (its time runs on)."""
    return timeout if isinstance(timeout, Deadline) else Deadline(timeout)


def poll(read: Callable[[], T], until: Callable[[T], Any] = bool, *, timeout: float | Deadline = TIMEOUT,
         interval: float = INTERVAL) -> T:
    """Call ``read()`` every ``interval`` s until ``until(value)`` holds or ``timeout`` (seconds,
    or a `Deadline`) has passed; return the last value read, either way (read at least once, and
    once more at the deadline). For callers that decide on the value themselves."""
    deadline = deadline_of(timeout)
    while True:
        value = read()
        if until(value):
            return value
        if deadline.expired():
            return value
        deadline.sleep(interval)


def wait_until(predicate: Callable[[], T], timeout: float | Deadline = TIMEOUT, interval: float = INTERVAL, *,
               describe: str = "the condition", on_timeout: Callable[[T], BaseException] | None = None) -> T:
    """Poll ``predicate()`` until it returns something truthy, and return that. When ``timeout``
    (seconds, or a `Deadline`) passes first, raise ``on_timeout(last value)`` if given, else
    `WaitTimeout` naming ``describe`` and the last value."""
    bound = deadline_of(timeout)
    value = poll(predicate, bool, timeout=bound, interval=interval)
    if not value:
        if on_timeout is not None:
            raise on_timeout(value)
        raise WaitTimeout(describe, bound.timeout, value)
    return value


async def poll_async(read: Callable[[], T], until: Callable[[T], Any] = bool, *, timeout: float = TIMEOUT,
                     interval: float = INTERVAL) -> T:
    """`poll` inside an event loop: sleeps with ``asyncio.sleep`` so the loop keeps running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = read()
        if until(value):
            return value
        remaining = deadline - loop.time()
        if remaining <= 0:
            return value
        await asyncio.sleep(min(interval, remaining))


async def wait_until_async(predicate: Callable[[], T], timeout: float = TIMEOUT, interval: float = INTERVAL, *,
                           describe: str = "the condition") -> T:
    """`wait_until` inside an event loop."""
    value = await poll_async(predicate, bool, timeout=timeout, interval=interval)
    if not value:
        raise WaitTimeout(describe, timeout, value)
    return value
