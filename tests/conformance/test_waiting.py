"""The one waiting helper (conformance/waiting.py): conditions polled to a deadline, the quiet window.
No timing is asserted; only what is returned or raised."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from conformance.waiting import (QUIET, is_marker, new_marker, receive_until_marker, receive_until_each_marked,
                                 receive_until_markers, settle, wait_stable)
from machinery.waiting import WaitTimeout, poll, poll_async, wait_until, wait_until_async


def counter():
    return itertools.count().__next__


def test_wait_until_returns_the_first_truthy_value():
    read = counter()
    assert wait_until(lambda: (n := read()) >= 3 and n, timeout=5, interval=0.001) == 3


def test_wait_until_names_what_it_awaited_and_the_last_value():
    values = iter([[], [1], [1, 2]])
    last = []

    def read():
        nonlocal last
        last = next(values, last)
        return len(last) == 5 and last

    with pytest.raises(WaitTimeout, match=r"timed out after 0\.05 s waiting for five messages; last value seen: False"):
        wait_until(read, timeout=0.05, interval=0.001, describe="five messages")


def test_wait_timeout_is_an_assertion_error_with_its_parts():
    with pytest.raises(AssertionError) as caught:
        wait_until(lambda: 0, timeout=0.01, describe="zero to turn true")
    assert (caught.value.describe, caught.value.timeout, caught.value.last) == ("zero to turn true", 0.01, 0)


def test_poll_returns_the_last_value_either_way():
    read = counter()
    assert poll(read, lambda n: n == 2, timeout=5, interval=0.001) == 2
    stuck = poll(lambda: "stuck", lambda v: v == "done", timeout=0.02, interval=0.001)
    assert stuck == "stuck"


def test_wait_until_async_keeps_the_loop_running():
    async def scenario():
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, done.set)
        assert await wait_until_async(done.is_set, timeout=5, interval=0.001) is True
        with pytest.raises(WaitTimeout, match="never"):
            await wait_until_async(lambda: None, timeout=0.01, interval=0.001, describe="never")
        assert await poll_async(lambda: "stuck", lambda v: v == "done", timeout=0.01, interval=0.001) == "stuck"

    asyncio.run(scenario())


def test_wait_stable_returns_once_the_value_stops_changing():
    values = iter([1, 2, 3])
    assert wait_stable(lambda: next(values, 3), quiet=0.02, interval=0.001) == 3


def test_wait_stable_fails_on_a_value_that_keeps_changing():
    read = counter()
    with pytest.raises(WaitTimeout, match=r"the count to settle; last value seen: \d+"):
        wait_stable(read, quiet=0.05, timeout=0.03, interval=0.001, describe="the count to settle")


def test_the_quiet_window_is_positive_and_settle_waits_it(monkeypatch):
    slept = []
    monkeypatch.setattr("conformance.waiting.time.sleep", slept.append)
    settle()
    settle(0.2)
    assert QUIET > 0 and slept == [QUIET, 0.2]


# --------------------------------------------------------------------------- barriers


class FakeSubscription:
    """A subscription whose messages are already queued (bodies as texts), in arrival order."""

    def __init__(self, bodies, ack_mode="auto"):
        self.queue = list(bodies)
        self.ack_mode = ack_mode
        self.acked = []

    def receive(self, timeout=5.0):
        return FakeMessage(self.queue.pop(0)) if self.queue else None

    def ack(self, message):
        self.acked.append(message.text)


class FakeMessage:
    def __init__(self, text):
        self.text = text


def test_a_stray_before_the_marker_is_returned():
    """The barrier's point: whatever arrived before the marker is handed back, so a check on it
    sees a stray or a duplicate."""
    marker = new_marker("G:")
    sub = FakeSubscription(["G:1", "G:1", "stray", marker])
    got = receive_until_marker(sub, marker, timeout=1)
    assert [m.text for m in got] == ["G:1", "G:1", "stray"]
    with pytest.raises(AssertionError):  # as a suite asserts "exactly G:1": the stray fails it
        assert [m.text for m in got] == ["G:1"]


def test_what_is_already_buffered_behind_the_marker_counts_too():
    marker = new_marker()
    sub = FakeSubscription(["a", marker, "late duplicate a"])
    assert [m.text for m in receive_until_marker(sub, marker, timeout=1)] == ["a", "late duplicate a"]


def test_a_marker_that_never_comes_is_a_wait_timeout_naming_it():
    marker = new_marker()
    sub = FakeSubscription(["a", "b"])
    with pytest.raises(WaitTimeout, match=rf"waiting for barrier marker '{marker}' to arrive; last value seen: "
                                          r"\{0: \['a', 'b'\]\}"):
        receive_until_marker(sub, marker, timeout=0.05)


def test_markers_are_filtered_wherever_they_land_and_acknowledged_one_by_one():
    first, second, old = new_marker("G:"), new_marker("H:"), new_marker()
    a = FakeSubscription(["G:1", old, first, "H:9"], ack_mode="client-individual")
    b = FakeSubscription(["H:1", second], ack_mode="client")
    got, seen = receive_until_markers({"A": a, "B": b}, [first, second], timeout=1)
    assert {k: [m.text for m in v] for k, v in got.items()} == {"A": ["G:1", "H:9"], "B": ["H:1"]}
    assert seen == {"A": [first], "B": [second]}
    assert a.acked == [old, first]  # client-individual: markers are settled; client mode: left alone
    assert b.acked == []
    assert is_marker(first) and not is_marker("G:1")


def test_each_subscription_is_marked_until_the_limit():
    subs = {"A": FakeSubscription([]), "B": FakeSubscription(["b0"])}
    turn = iter(["A", "A", "B"])  # where the "broker" routes each marker

    def send(body):
        subs[next(turn)].queue.append(body)

    got, seen = receive_until_each_marked(subs, send, limit=5, timeout=1)
    assert [len(seen["A"]), len(seen["B"])] == [2, 1]
    assert {k: [m.text for m in v] for k, v in got.items()} == {"A": [], "B": ["b0"]}
    lonely = {"A": FakeSubscription([]), "B": FakeSubscription([])}
    got, seen = receive_until_each_marked(lonely, lonely["A"].queue.append, limit=2, timeout=1)
    assert len(seen["A"]) == 2 and seen["B"] == []  # the limit reached: B had no barrier
