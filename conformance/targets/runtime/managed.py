"""A broker process the harness starts and owns: in its own session (so its process group is ours
to signal and nothing else is in it), output appended to a log file, a readiness poll that fails
early when the process exits and late with the broker's own failure report, stop (SIGTERM the
group, then SIGKILL) and kill (SIGKILL the group) by the leader's PID, never by name, and its peak
RSS. Every local-process launcher (ActiveMQ, Artemis, Mosquitto) is one of these; what differs is
the command, the readiness probe and how to summarise the log, which the subclass gives."""

from __future__ import annotations

import subprocess
import time
import weakref
from pathlib import Path
from typing import Callable

from conformance.targets.runtime.process import kill_group, peak_rss, stop_group, tail_files

#: a readiness probe: (seconds it may take) -> (ready?, what it saw)
Probe = Callable[[float], tuple[bool, str]]


class ManagedProcess:
    """Mixin for a launcher. The subclass sets ``label`` (how messages name it), ``start_error``
    (the exception its start raises), ``log_path`` (where its output goes) and calls
    `_init_process` in its constructor; it may override `_failure_report`."""

    label = "broker"
    start_error: type[Exception] = RuntimeError
    stop_timeout = 20.0
    log_path: Path

    def _init_process(self) -> None:
        self._proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self._finalizer: weakref.finalize | None = None
        self._out_fh = None
        self._rss_peak = 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _spawn(self, command: list[str], *, cwd: Path, output: Path, truncate: bool = False) -> None:
        """Start ``command`` in its own session, stdout and stderr appended to ``output`` (emptied
        first with ``truncate``); a finalizer kills the group if the handle is dropped running."""
        self._close_output()
        # O_APPEND: a JVM's stdout/stderr and its own file appender can share the file safely.
        self._out_fh = open(output, "wb" if truncate else "ab", buffering=0)
        self._rss_peak = 0
        self._proc = subprocess.Popen(command, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=self._out_fh,
                                      stderr=subprocess.STDOUT,
                                      start_new_session=True,  # own session & process group: pgid == pid
                                      close_fds=True)
        self.pid = self._proc.pid
        self._finalizer = weakref.finalize(self, kill_group, self._proc)

    def _await_ready(self, deadline: float, probe: Probe, *, done: Callable[[], bool] | None = None,
                    poll: float = 0.1, where: str = "") -> None:
        """Poll ``probe`` until it says ready (or ``done()`` says the start is over another way),
        raising ``start_error`` with the failure report when the process exits or ``deadline``
        passes. ``where``: appended to the messages (e.g. "; log PATH")."""
        last = "not tried yet"
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise self.start_error(f"{self.label} (pid {self.pid}) exited with code {rc} during start-up{where}:\n"
                                       f"{self._failure_report()}")
            self._sample_rss()
            if done is not None and done():
                return
            ok, last = probe(min(5.0, max(0.5, deadline - time.monotonic())))
            if ok:
                return
            if time.monotonic() >= deadline:
                raise self.start_error(f"{self.label} (pid {self.pid}) not ready before timeout (last check: {last})"
                                       f"{where}:\n{self._failure_report()}")
            time.sleep(poll)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the broker's process group, wait, then SIGKILL. Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            self._sample_rss()
            stop_group(self._proc, self.stop_timeout if timeout is None else timeout)
        self._detach()

    def kill(self) -> None:
        """SIGKILL the broker's process group (a crash); `start` brings it back."""
        if self._proc is not None and self._proc.poll() is None:
            self._sample_rss()
            kill_group(self._proc)
        self._detach()

    def _detach(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._close_output()

    def _close_output(self) -> None:
        if self._out_fh is not None:
            try:
                self._out_fh.close()
            finally:
                self._out_fh = None

    def _sample_rss(self) -> int:
        if self.running:
            self._rss_peak = max(self._rss_peak, peak_rss(self.pid))
        return self._rss_peak

    def rss_peak_bytes(self) -> int:
        """Peak resident set size of the broker (VmHWM); after stop(), the last value seen."""
        return self._sample_rss()

    def log_tail(self, lines: int = 50) -> str:
        return tail_files([self.log_path], lines)

    def _failure_report(self) -> str:
        return self.log_tail(40) or "(empty log)"
