"""Waiting in suites and tests, defined once: poll a condition until a deadline, and the quiet window.

Two kinds of waiting, never mixed up:
- **for a condition** (a count reaches N, a log line appears, a daemon serves): poll it with
  `wait_until` (fails with what was awaited and the last value seen) or `poll` (returns the last
  value, for a caller that asserts with its own spec-ID message). A condition is never awaited by
  a fixed sleep: too short flakes on a loaded machine, too long wastes every run.
- **for nothing more to arrive** ("no duplicate, no stray arrives"): wherever the order guarantees
  allow, a **barrier** turns it into an event: a marker message sent after the messages of interest
  on the same ordered path (same producer session, same destination, and for message groups the
  same group, so the same consumer). Once the marker reached a consumer, nothing sent before it on
  that path is still on its way to that consumer: `receive_until_marker` /
  `receive_until_markers` collect what came before it. Markers are made by `new_marker`, told
  apart by `is_marker` and never count as messages of interest.
- **for nothing to happen** where nothing can tell (no ordered path reaches the consumer in
  question, or a consumer is full so a marker could not reach it): the check watches for `QUIET`
  seconds, the one quiet window of the project: `settle()` waits it out, `wait_stable` watches a
  reading stay unchanged for it, and a subscription's ``drain(QUIET)`` receives until nothing
  arrives for it. Each such use says why no barrier serves.

Deadlines are generous bounds for a loaded 2-core machine, never speed assertions: a condition
that holds early ends the wait early.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any, Callable, Collection, Hashable, Mapping, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

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



# --------------------------------------------------------------------------- barriers

#: What every marker body contains; a test's own bodies never do.
MARKER_TAG = "barrier-marker"
_marker_numbers = itertools.count()


def new_marker(prefix: str = "") -> str:
    """A unique marker body, ``prefix`` first (a groups suite puts ``"<group>:"`` there so its
    body parser still finds the group). Unique per process and call, so a marker left over from
    an earlier check is never taken for this one's."""
    return f"{prefix}{MARKER_TAG}-{os.getpid()}-{next(_marker_numbers)}"


def is_marker(text: str) -> bool:
    """Whether a body (as text) is a marker made by `new_marker`."""
    return MARKER_TAG in text


def _text(message: Any) -> str:
    return message.text if hasattr(message, "text") else str(message)


def receive_until_markers(subscriptions: Mapping[K, Any], markers: Collection[str], *,
                          timeout: float = TIMEOUT, interval: float = 0.02,
                          describe: str | None = None) -> tuple[dict[K, list], dict[K, list[str]]]:
    """Receive on every subscription until every body in ``markers`` arrived (on whichever
    subscription the broker routed it); return (what each subscription received apart from
    markers, in arrival order; which markers each got).

    Subscriptions are polled in turn (``receive(interval)``), so a message of interest that
    arrives on one subscription after that one's marker, while another marker is still awaited,
    is returned too: it only makes a stray easier to see. A marker body that is not among
    ``markers`` (a leftover of an earlier barrier) is dropped like a marker. A marker received
    on a ``client-individual`` subscription is acknowledged (it must not hold prefetch room or
    come back); ``client`` mode is left alone, since its ack would cover the messages before it.
    Raise `WaitTimeout` when some marker has not arrived after ``timeout`` s, with what was
    received so far as the last value."""
    waiting = set(markers)
    got: dict[K, list] = {key: [] for key in subscriptions}
    seen: dict[K, list[str]] = {key: [] for key in subscriptions}
    deadline = time.monotonic() + timeout
    while waiting:
        for key, subscription in subscriptions.items():
            message = subscription.receive(interval)
            if message is None:
                continue
            text = _text(message)
            if not is_marker(text):
                got[key].append(message)
                continue
            if getattr(subscription, "ack_mode", None) == "client-individual":
                subscription.ack(message)
            if text in waiting:
                waiting.discard(text)
                seen[key].append(text)
        if waiting and time.monotonic() >= deadline:
            what = describe or f"barrier marker(s) {sorted(waiting)} to arrive"
            raise WaitTimeout(what, timeout, {key: [_text(m) for m in messages] for key, messages in got.items()})
    # What is already here behind the markers is taken too, without waiting: it arrived, so it
    # counts (a duplicate sent right behind a marker is then still seen).
    for key, subscription in subscriptions.items():
        while (message := subscription.receive(0)) is not None:
            if is_marker(_text(message)):
                if getattr(subscription, "ack_mode", None) == "client-individual":
                    subscription.ack(message)
            else:
                got[key].append(message)
    return got, seen


def receive_until_marker(subscription: Any, marker: str, *, timeout: float = TIMEOUT,
                         describe: str | None = None) -> list:
    """Receive on one subscription until ``marker`` arrives; return everything before it (the
    marker itself excluded). Raise `WaitTimeout` when it has not arrived after ``timeout`` s."""
    got, _seen = receive_until_markers({0: subscription}, [marker], timeout=timeout,
                                       describe=describe or f"barrier marker {marker!r} to arrive")
    return got[0]


def receive_until_each_marked(subscriptions: Mapping[K, Any], send: Callable[[str], None], *,
                              limit: int, timeout: float = TIMEOUT) -> tuple[dict[K, list], dict[K, list[str]]]:
    """Per-consumer barriers on a destination that hands each message to whichever consumer has
    room (competing consumers, no pinning): send one marker at a time (``send(body)``, the test's
    own producer, so each is behind the messages of interest) and wait for it, until every
    subscription got one or ``limit`` markers were sent. Returns what `receive_until_markers`
    does, summed over the markers; a subscription without a marker in ``seen`` had no barrier,
    and the caller says what it does instead."""
    got: dict[K, list] = {key: [] for key in subscriptions}
    seen: dict[K, list[str]] = {key: [] for key in subscriptions}
    for _ in range(limit):
        if all(seen.values()):
            break
        marker = new_marker()
        send(marker)
        more, landed = receive_until_markers(subscriptions, [marker], timeout=timeout)
        for key in subscriptions:
            got[key].extend(more[key])
            seen[key].extend(landed[key])
    return got, seen
