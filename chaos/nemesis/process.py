"""Process faults on one broker: kill -9, pause / resume (SIGSTOP / SIGCONT), graceful stop,
start, restart.

Works over any handle with ``.pid``, ``.start()``, ``.stop()`` and ``.kill()``:
`conformance.targets.reference.ReferenceBrokerProcess`,
`conformance.targets.activemq.ActiveMQProcess` and `conformance.targets.artemis_process.ArtemisProcess`
(its JVM leads its own process group; `kill` takes the whole group down and `start` runs the same
instance, journal and ports again). Signals go to the handle's own PID, and only
while the handle says its process is running (a reaped PID may belong to someone else by now).
When the broker leads its own process group (ActiveMQ starts the JVM with
``start_new_session``), SIGSTOP / SIGCONT go to that group so every thread of the tree stops;
never to our own group.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from chaos.history import History

from .base import NemesisError, RecordedNemesis

DOWN = "down"      # fault key: killed or stopped, until start
PAUSED = "paused"  # fault key: SIGSTOPped, until resume


def process_running(handle: Any) -> bool:
    """Whether the handle's process is alive and not yet reaped (never trusts a bare PID)."""
    for attr in ("proc", "_proc"):
        proc = getattr(handle, attr, None)
        if proc is not None and hasattr(proc, "poll"):
            return proc.poll() is None
    running = getattr(handle, "running", None)
    if isinstance(running, bool):
        return running
    raise NemesisError(f"cannot tell whether {handle!r} is running: give it a Popen as .proc or a .running "
                       "property")


class ProcessNemesis(RecordedNemesis):
    """Steps: ``kill`` (SIGKILL), ``pause``, ``resume``, ``stop`` (graceful), ``start``, ``restart``,
    ``heal`` (resume and start whatever is down). Teardown heals, so the broker is running when
    it returns; the handle's owner still stops it."""

    name = "process"

    def __init__(self, handle: Any, history: History | None = None, *, node: str | None = None,
                 start_timeout: float = 60.0) -> None:
        super().__init__(history, node=node)
        self.handle = handle
        self.start_timeout = start_timeout

    # ------------------------------------------------------------------ signals

    def _pid(self) -> int:
        if not process_running(self.handle):
            raise NemesisError(f"{self.handle!r} is not running: start it first (step 'start')")
        pid = self.handle.pid
        if not pid or pid == os.getpid():
            raise NemesisError(f"refusing to signal pid {pid!r}: it is not a broker process we started")
        return pid

    def _signal_tree(self, sig: int) -> int:
        pid = self._pid()
        try:
            own_group = os.getpgid(pid) == pid and pid != os.getpgid(0)
        except ProcessLookupError:
            own_group = False
        if own_group:
            os.killpg(pid, sig)  # pgid == the leader's pid, which is not reaped: not reused
        else:
            os.kill(pid, sig)
        return pid

    # ------------------------------------------------------------------ steps

    def _step(self, f: str, params: dict) -> dict | None:
        if f == "kill":
            pid = self._pid()
            os.kill(pid, signal.SIGKILL)
            self.active.pop(PAUSED, None)  # a killed process is no longer paused
            self.handle.kill()  # reaps it and releases what the handle holds (logs, finalizers)
            return {"pid": pid, "fault": DOWN}
        if f == "pause":
            return {"pid": self._signal_tree(signal.SIGSTOP), "fault": PAUSED}
        if f == "resume":
            return {"pid": self._signal_tree(signal.SIGCONT), "healed": [PAUSED] if PAUSED in self.active else []}
        if f == "stop":
            pid = self._pid()
            if PAUSED in self.active:  # a stopped process never sees SIGTERM
                self._signal_tree(signal.SIGCONT)
                self.active.pop(PAUSED)
            self.handle.stop()
            return {"pid": pid, "fault": DOWN}
        if f == "start":
            return {"pid": self._start(), "healed": [DOWN] if DOWN in self.active else []}
        if f == "restart":
            old = self.handle.pid if process_running(self.handle) else None
            if old is not None:
                if PAUSED in self.active:
                    self._signal_tree(signal.SIGCONT)
                self.handle.stop()
            pid = self._start()
            healed = [k for k in (PAUSED, DOWN) if k in self.active]
            return {"old_pid": old, "pid": pid, "healed": healed}
        return super()._step(f, params)

    def _start(self) -> int:
        if process_running(self.handle):
            raise NemesisError(f"{self.handle!r} is already running (pid {self.handle.pid}): stop or kill it first")
        # Both handles take a timeout and keep their ports across restarts, so clients reconnect.
        self.handle.start(timeout=self.start_timeout)
        return self.handle.pid

    def _heal(self, key: str, fault: dict) -> None:
        if key == PAUSED:
            if process_running(self.handle):
                self._signal_tree(signal.SIGCONT)
        elif key == DOWN:
            if not process_running(self.handle):
                self._start()
