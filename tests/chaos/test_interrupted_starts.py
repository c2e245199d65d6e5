"""A signal that arrives while a handle's ``start()`` waits for its process to be ready must not
leave that process behind: the caller never received the handle, so nobody else can stop it.

Seen in CI: ``brokerconf run`` got SIGTERM while a master/slave suite's store server was starting
(its "listening" line not read yet), and the store server outlived the run. Each test makes the
wait itself raise KeyboardInterrupt (what SIGINT raises; cli turns SIGTERM into SystemExit the same
way), so the moment is exact rather than a race against a timer. The launch each start makes is
watched by wrapping the module's `launch` (machinery/tether.py), not ``subprocess.Popen``, which
the tether's own watchdog goes through too."""

from __future__ import annotations

import subprocess

import pytest

import machinery.faultproxy as fault_proxy
from machinery.process import stop_if_interrupted
from machinery.sharedstore import harness
from machinery.tether import launch
from conformance.targets.reference.process import ReferenceBrokerProcess


class _InterruptedReads:
    """A process's stdout whose first read is interrupted by a signal."""

    def __init__(self, real) -> None:
        self.real = real

    def readline(self):
        raise KeyboardInterrupt

    def close(self) -> None:
        self.real.close()


def test_store_server_interrupted_before_it_listens_is_stopped(monkeypatch):
    started: list[subprocess.Popen] = []

    def popen(*args, **kwargs):
        process = launch(*args, **kwargs)
        started.append(process)
        process.stdout = _InterruptedReads(process.stdout)
        return process

    monkeypatch.setattr(harness, "launch", popen)
    server = harness.StoreServerProcess()
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert len(started) == 1
    assert started[0].poll() is not None, "the store server still runs after an interrupted start"


class _InterruptedEvent:
    """The reference process's readiness event, interrupted while start() waits on it."""

    def clear(self) -> None:
        pass

    def set(self) -> None:
        pass

    def is_set(self) -> bool:
        return False

    def wait(self, timeout=None):
        raise KeyboardInterrupt


def test_reference_process_interrupted_before_ready_is_stopped():
    broker = ReferenceBrokerProcess(name="interrupted-start")
    broker._ready = _InterruptedEvent()
    with pytest.raises(KeyboardInterrupt):
        broker.start()
    assert broker.proc is not None
    assert broker.proc.poll() is not None, "the reference broker still runs after an interrupted start"


@pytest.mark.parametrize("signal_error", [KeyboardInterrupt, SystemExit])
def test_stop_if_interrupted_stops_on_a_signal_and_lets_it_go_on(signal_error):
    stopped = []

    def wait():
        raise signal_error

    with pytest.raises(signal_error):
        stop_if_interrupted(wait, lambda: stopped.append(True))
    assert stopped == [True]


def test_stop_if_interrupted_leaves_results_and_other_errors_to_the_start():
    stopped = []
    assert stop_if_interrupted(lambda: "ready", lambda: stopped.append(True)) == "ready"

    def fails():
        raise RuntimeError("not ready")

    with pytest.raises(RuntimeError, match="not ready"):
        stop_if_interrupted(fails, lambda: stopped.append(True))
    assert stopped == [], "a start's own failure is its own to clean up, not a signal's"


def _sleeper(tmp_path):
    """An executable that ignores its arguments and sleeps: stands in for a server or a mount."""
    script = tmp_path / "sleeper"
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    script.chmod(0o755)
    return str(script)


def test_real_toxiproxy_server_interrupted_before_it_answers_is_stopped(monkeypatch, tmp_path):
    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(fault_proxy.ToxiproxyClient, "version", interrupted)
    server = fault_proxy.RealToxiproxyServer(_sleeper(tmp_path))
    started: list[subprocess.Popen] = []

    def popen(*args, **kwargs):
        started.append(launch(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(fault_proxy, "launch", popen)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert len(started) == 1
    assert started[0].poll() is not None, "the fault proxy server still runs after an interrupted start"


def test_mount_interrupted_before_it_appears_is_stopped(monkeypatch, tmp_path):
    started: list[subprocess.Popen] = []
    sleeper = _sleeper(tmp_path)

    def popen(command, **kwargs):
        started.append(launch([sleeper], **kwargs))  # no FUSE needed: the client never mounts
        return started[-1]

    checks = []

    def mounted(path):
        checks.append(path)
        if len(checks) == 1:   # the start's first look: a signal arrives then
            raise KeyboardInterrupt
        return False

    monkeypatch.setattr(harness, "launch", popen)
    monkeypatch.setattr(harness, "mounted", mounted)
    mount = harness.MountProcess(str(tmp_path / "mnt"), "127.0.0.1:1", "A")
    with pytest.raises(KeyboardInterrupt):
        mount.start(timeout=5)
    assert len(started) == 1
    assert started[0].poll() is not None, "the mount client still runs after an interrupted start"
    assert mount.process is None
