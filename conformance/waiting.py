"""Waiting in suites and tests: polling a condition to a deadline (defined in machinery/waiting.py,
the ground floor, for the whole tree), and the waits about messages: barriers and the quiet window.

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

import itertools
import os
import time
from typing import Any, Callable, Collection, Hashable, Mapping, TypeVar

from machinery.waiting import INTERVAL, TIMEOUT, Deadline, WaitTimeout

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

#: The quiet window, in seconds: a broker on loopback delivers a message still in flight well
#: within it, so "nothing more arrived for QUIET seconds" is taken as "nothing more will arrive".
#: One second, the groups suites' window: the core queue, ack and topic suites watched 0.5 s and
#: the groups suite's "extra messages" check 0.3 s; every quiet check now watches at least as
#: long as it did (a longer window costs time, a too short one lets a stray pass unseen).
QUIET = 1.0


def settle(quiet: float = QUIET) -> None:
    """Wait out the quiet window: room for anything still in flight (a duplicate, a stray) to
    arrive before a check that nothing more did."""
    time.sleep(quiet)


def wait_stable(read: Callable[[], T], *, quiet: float = QUIET, timeout: float | None = None,
                interval: float = INTERVAL, describe: str = "the value to stop changing") -> T:
    """Poll ``read()`` until it has returned the same value for ``quiet`` s; return that value.
    Raise `WaitTimeout` when it still changes after ``timeout`` s (default: the quiet window
    plus `TIMEOUT`)."""
    deadline = Deadline(quiet + TIMEOUT if timeout is None else timeout)
    value = read()
    since = time.monotonic()
    # not a `wait_until`: the condition is how long the value has stayed the same, a quiet window
    while True:
        if time.monotonic() - since >= quiet:
            return value
        if deadline.expired():
            raise WaitTimeout(describe, deadline.timeout, value)
        deadline.sleep(interval)
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
    deadline = Deadline(timeout)
    # not a `wait_until`: every round receives, and what arrives is kept
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
        if waiting and deadline.expired():
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
