"""A signal that arrives while a handle's ``start()`` waits for its process to be ready must not
leave that process behind: the caller never received the handle, so nobody else can stop it.

Seen in CI: ``brokerconf run`` got SIGTERM while a master/slave suite's store server was starting
(its "listening" line not read yet), and the store server outlived the run. Each test makes the
wait itself raise KeyboardInterrupt (what SIGINT raises; cli turns SIGTERM into SystemExit the same
way), so the moment is exact rather than a race against a timer."""

from __future__ import annotations

import subprocess

import pytest

from machinery.sharedstore import harness
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
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        process = real_popen(*args, **kwargs)
        started.append(process)
        process.stdout = _InterruptedReads(process.stdout)
        return process

    monkeypatch.setattr(harness.subprocess, "Popen", popen)
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
