"""suites/syn_watch.py: the times it gives connection attempts are when the kernel delivered their
SYNs, not when the watch got round to reading them (a starved watch thread once measured four
attempts 150 ms apart as 0.0 ms apart)."""

import socket
import time

import pytest

from conformance.requirements import skip_or_fail
from machinery.waiting import poll
from suites import syn_watch


@pytest.fixture
def closed_port():
    ok, reason = syn_watch.available()
    if not ok:
        skip_or_fail("netns", reason)  # a packet socket needs what the netns nemesis needs: root on Linux
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed once the socket is: every connect is refused at once


#: the wall clock -> monotonic conversion of a kernel time (syn_watch reads the offset when it reads)
CLOCK_SLACK = 0.001


def _refused_connects(port: int, count: int, spacing: float) -> list[tuple[float, float]]:
    """``count`` refused connects to ``port``, ``spacing`` s apart; each one's (start, end) on the
    monotonic clock: its SYN crosses ``lo`` in between."""
    windows = []
    for _ in range(count):
        began = time.monotonic()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        windows.append((began, time.monotonic()))
        time.sleep(spacing)
    return windows


def test_attempts_read_late_keep_the_times_they_were_made(closed_port):
    watch = syn_watch.SynWatch(closed_port)
    try:
        windows = _refused_connects(closed_port, 4, 0.08)
        time.sleep(0.3)  # the watch reads nothing until long after the last attempt
        watch.start()
    finally:
        watch.stop()
    assert len(watch.times) == 4, f"one SYN per attempt: {watch.times}"
    # Each SYN is timed inside its own connect call, however loaded the machine (a time taken when
    # the watch read it would be 300 ms late); so the calls' 80 ms spacing shows between the times.
    outside = [(began, seen, ended) for (began, ended), seen in zip(windows, watch.times)
               if not began - CLOCK_SLACK <= seen <= ended + CLOCK_SLACK]
    assert not outside, f"SYNs timed outside their connect call (start, SYN, end): {outside}"
    gaps = [b - a for a, b in zip(watch.times, watch.times[1:])]
    assert all(gap >= 0.08 - 2 * CLOCK_SLACK for gap in gaps), f"the attempts' 80 ms spacing is kept: {gaps}"


def test_only_the_watched_ports_syns_are_kept(closed_port):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other_port = other.getsockname()[1]
    with syn_watch.SynWatch(closed_port) as watch:
        _refused_connects(other_port, 2, 0.0)
        _refused_connects(closed_port, 1, 0.0)
        poll(lambda: watch.times, timeout=5, interval=0.01)
    assert len(watch.times) == 1, f"only the attempt on port {closed_port}: {watch.times}"
