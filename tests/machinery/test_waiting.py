"""machinery/waiting.py, the condition waits of the whole tree: a `Deadline` shared between steps, a
caller's own exception on a timeout, a predicate that ends the wait by raising. (The behaviour the
suites rely on, re-exported by conformance/waiting.py, is in tests/conformance/test_waiting.py.)
No timing is asserted beyond "a deadline that passed has passed"; only what is returned or raised."""
from __future__ import annotations

import itertools
import time

import pytest

from machinery.waiting import Deadline, WaitTimeout, deadline_of, poll, wait_until


class StartError(RuntimeError):
    pass


def test_a_deadline_counts_down_and_expires():
    deadline = Deadline(0.05)
    assert 0 < deadline.remaining() <= 0.05 and not deadline.expired()
    time.sleep(0.06)
    assert deadline.expired() and deadline.remaining() == 0.0
    assert "0.05 s" in repr(deadline)


def test_a_deadline_sleeps_no_longer_than_what_is_left():
    deadline = Deadline(0.02)
    started = time.monotonic()
    deadline.sleep(30)  # would hang the test if the deadline did not cut it
    assert time.monotonic() - started < 5 and deadline.expired()


def test_deadline_of_keeps_a_running_deadline_and_makes_one_from_seconds():
    running = Deadline(10)
    assert deadline_of(running) is running
    made = deadline_of(3)
    assert isinstance(made, Deadline) and made.timeout == 3


def test_steps_sharing_a_deadline_share_its_bound():
    """A start-up that waits for two things in turn is bounded once: the second wait gets only
    what the first left, and its timeout message names the whole bound."""
    deadline = Deadline(0.05)
    assert wait_until(lambda: True, deadline) is True
    time.sleep(0.06)
    calls = itertools.count()
    with pytest.raises(WaitTimeout, match=r"timed out after 0\.05 s waiting for the port"):
        wait_until(lambda: next(calls) < 0, deadline, 0.001, describe="the port")
    assert next(calls) == 1  # read once, at the deadline already passed, and not again


def test_on_timeout_raises_the_callers_exception_with_the_last_value():
    values = iter(["starting", "still starting"])
    with pytest.raises(StartError, match="not ready: 'still starting'"):
        wait_until(lambda: next(values, "still starting") == "up", 0.03, 0.001,
                   on_timeout=lambda _last: StartError("not ready: 'still starting'"))
    seen = []
    with pytest.raises(StartError):
        wait_until(lambda: "", 0.01, 0.001, on_timeout=lambda last: StartError(seen.append(last)))
    assert seen == [""]


def test_on_timeout_is_not_called_when_the_condition_holds():
    assert wait_until(lambda: "up", 1, on_timeout=lambda last: pytest.fail("called")) == "up"


def test_a_predicate_that_raises_ends_the_wait_at_once():
    rounds = itertools.count()

    def exited():
        next(rounds)
        raise StartError("exited with code 1")

    with pytest.raises(StartError, match="exited with code 1"):
        wait_until(exited, 30, 0.001)
    assert next(rounds) == 1


def test_poll_takes_a_deadline_and_returns_the_last_value():
    read = itertools.count().__next__
    assert poll(read, lambda n: n == 3, timeout=Deadline(5), interval=0.001) == 3
    assert poll(lambda: "stuck", lambda v: v == "done", timeout=Deadline(0.01), interval=0.001) == "stuck"
