"""Waiting in suites and tests, defined once: poll a condition until a deadline, and the quiet window.

Two kinds of waiting, never mixed up:
- **for a condition** (a count reaches N, a log line appears, a daemon serves): poll it with
  `wait_until` (fails with what was awaited and the last value seen) or `poll` (returns the last
  value, for a caller that asserts with its own spec-ID message). A condition is never awaited by
  a fixed sleep: too short flakes on a loaded machine, too long wastes every run.
- **for nothing to happen** ("no duplicate, no stray arrives"): there is no event to poll, so the
  check watches for `QUIET` seconds, the one quiet window of the project: `settle()` waits it out,
  `wait_stable` watches a reading stay unchanged for it, and a subscription's ``drain(QUIET)``
  receives until nothing arrives for it.

Deadlines are generous bounds for a loaded 2-core machine, never speed assertions: a condition
that holds early ends the wait early.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: The quiet window, in seconds: a broker on loopback delivers a message still in flight well
#: within it, so "nothing more arrived for QUIET seconds" is taken as "nothing more will arrive".
#: One second, the groups suites' window: the core queue, ack and topic suites watched 0.5 s and
#: the groups suite's "extra messages" check 0.3 s; every quiet check now watches at least as
#: long as it did (a longer window costs time, a too short one lets a stray pass unseen).
QUIET = 1.0
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


def poll(read: Callable[[], T], until: Callable[[T], Any] = bool, *, timeout: float = TIMEOUT,
         interval: float = INTERVAL) -> T:
    """Call ``read()`` every ``interval`` s until ``until(value)`` holds or ``timeout`` s have
    passed; return the last value read, either way (read at least once, and once more at the
    deadline). For callers that assert on the value with their own message."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if until(value):
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return value
        time.sleep(min(interval, remaining))


def wait_until(predicate: Callable[[], T], timeout: float = TIMEOUT, interval: float = INTERVAL, *,
               describe: str = "the condition") -> T:
    """Poll ``predicate()`` until it returns something truthy, and return that; raise `WaitTimeout`
    naming ``describe`` and the last value when ``timeout`` s pass first."""
    value = poll(predicate, bool, timeout=timeout, interval=interval)
    if not value:
        raise WaitTimeout(describe, timeout, value)
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


def settle(quiet: float = QUIET) -> None:
    """Wait out the quiet window: room for anything still in flight (a duplicate, a stray) to
    arrive before a check that nothing more did."""
    time.sleep(quiet)


def wait_stable(read: Callable[[], T], *, quiet: float = QUIET, timeout: float | None = None,
                interval: float = INTERVAL, describe: str = "the value to stop changing") -> T:
    """Poll ``read()`` until it has returned the same value for ``quiet`` s; return that value.
    Raise `WaitTimeout` when it still changes after ``timeout`` s (default: the quiet window
    plus `TIMEOUT`)."""
    limit = quiet + TIMEOUT if timeout is None else timeout
    deadline = time.monotonic() + limit
    value = read()
    since = time.monotonic()
    while True:
        now = time.monotonic()
        if now - since >= quiet:
            return value
        if now >= deadline:
            raise WaitTimeout(describe, limit, value)
        time.sleep(min(interval, max(0.0, deadline - now)))
        current = read()
        if current != value:
            value, since = current, time.monotonic()

