"""The one waiting helper (conformance/waiting.py): conditions polled to a deadline, the quiet window.
No timing is asserted; only what is returned or raised."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from conformance.waiting import (QUIET, WaitTimeout, poll, poll_async, settle, wait_stable, wait_until,
                                wait_until_async)


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
