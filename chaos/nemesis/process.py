"""Process faults on one broker node: kill -9, pause / resume (SIGSTOP / SIGCONT), graceful stop,
start, restart.

Works over any `conformance.topology.Node` (a node of a launched topology: ``pid``, ``running``,
``start`` / ``stop`` / ``kill`` / ``pause`` / ``resume``). How a fault reaches the broker is the
node's business (conformance/targets/runtime/node.py signals a process's own group and only
while its handle says it runs; an in-process broker freezes its loop); this nemesis keeps the
schedule's state (what is down, what is paused) and records each step with the broker's PID.
"""

from __future__ import annotations

import os
from typing import Any

from chaos.history import History
from conformance.topology import Node, NodeError

from .base import NemesisError, RecordedNemesis

DOWN = "down"      # fault key: killed or stopped, until start
PAUSED = "paused"  # fault key: SIGSTOPped, until resume


def process_running(node: Node) -> bool:
    """Whether the node's broker is running (started and not stopped, killed or reaped)."""
    return bool(node.running)


class ProcessNemesis(RecordedNemesis):
    """Steps: ``kill`` (SIGKILL), ``pause``, ``resume``, ``stop`` (graceful), ``start``, ``restart``,
    ``heal`` (resume and start whatever is down). Teardown heals, so the broker is running when
    it returns; the node's owner still stops it."""

    name = "process"

    def __init__(self, handle: Node, history: History | None = None, *, node: str | None = None,
                 start_timeout: float = 60.0) -> None:
        super().__init__(history, node=node)
        self.handle = handle
        self.start_timeout = start_timeout

    def _pid(self) -> int | None:
        if not process_running(self.handle):
            raise NemesisError(f"{self.handle!r} is not running: start it first (step 'start')")
        pid = self.handle.pid
        if pid is not None and pid == os.getpid():
            raise NemesisError(f"refusing to signal pid {pid!r}: it is not a broker process we started")
        return pid

    def _do(self, action, *args: Any) -> None:
        try:
            action(*args)
        except NodeError as exc:
            raise NemesisError(str(exc)) from None

    # ------------------------------------------------------------------ steps

    def _step(self, f: str, params: dict) -> dict | None:
        if f == "kill":
            pid = self._pid()
            self.active.pop(PAUSED, None)  # a killed process is no longer paused
            self._do(self.handle.kill)  # SIGKILL, reaped, what the handle holds released
            return {"pid": pid, "fault": DOWN}
        if f == "pause":
            pid = self._pid()
            self._do(self.handle.pause)
            return {"pid": pid, "fault": PAUSED}
        if f == "resume":
            pid = self._pid()
            self._do(self.handle.resume)
            return {"pid": pid, "healed": [PAUSED] if PAUSED in self.active else []}
        if f == "stop":
            pid = self._pid()
            if PAUSED in self.active:  # a stopped process never sees SIGTERM
                self._do(self.handle.resume)
                self.active.pop(PAUSED)
            self.handle.stop()
            return {"pid": pid, "fault": DOWN}
        if f == "start":
            return {"pid": self._start(), "healed": [DOWN] if DOWN in self.active else []}
        if f == "restart":
            old = self.handle.pid if process_running(self.handle) else None
            if process_running(self.handle):
                if PAUSED in self.active:
                    self._do(self.handle.resume)
                self.handle.stop()
            pid = self._start()
            healed = [k for k in (PAUSED, DOWN) if k in self.active]
            return {"old_pid": old, "pid": pid, "healed": healed}
        return super()._step(f, params)

    def _start(self) -> int | None:
        if process_running(self.handle):
            raise NemesisError(f"{self.handle!r} is already running (pid {self.handle.pid}): stop or kill it first")
        # Nodes keep their ports across restarts, so clients reconnect.
        self.handle.start(timeout=self.start_timeout)
        return self.handle.pid

    def _heal(self, key: str, fault: dict) -> None:
        if key == PAUSED:
            if process_running(self.handle):
                self._do(self.handle.resume)
        elif key == DOWN:
            if not process_running(self.handle):
                self._start()
