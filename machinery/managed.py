"""A broker process the harness starts and owns: in its own session (so its process group is ours
to signal and nothing else is in it), output appended to a log file, a readiness poll that fails
early when the process exits and late with the broker's own failure report, stop (SIGTERM the
group, then SIGKILL) and kill (SIGKILL the group) by the leader's PID, never by name, and its peak
RSS. Every local-process launcher (ActiveMQ, Artemis, Mosquitto, RabbitMQ) is one of these; what
differs is the command, the readiness probe and how to summarise the log, which the subclass gives.

The broker and its companions are launched tethered (machinery/tether.py): should this Python
process die without stopping them (SIGKILL, the OOM killer), a watchdog ends their groups.

Two things only some brokers need, also handled here by PID:

* companions: processes started beside the broker (RabbitMQ's private Erlang port mapper), each in
  a session of its own, stopped after the broker;
* descendants that leave the broker's group (Erlang's ``erl_child_setup`` and what it spawns put
  themselves into sessions of their own): recorded before a stop or kill, and any that outlive the
  broker are killed by PID (psutil checks the PID still names the process it recorded)."""

from __future__ import annotations

import errno
import os
import subprocess
import time
import weakref
from pathlib import Path
from typing import Callable, Self

import psutil

from machinery.process import kill_group, peak_rss, stop_group, tail_files
from machinery.tether import launch
from machinery.waiting import Deadline, poll as poll_until

#: a readiness probe: (seconds it may take) -> (ready?, what it saw)
Probe = Callable[[float], tuple[bool, str]]


#: tries at starting a process whose executable another thread's fresh child still holds open for writing
_EXEC_BUSY_ATTEMPTS = 5

class ManagedProcess:
    """Mixin for a launcher. The subclass sets ``label`` (how messages name it), ``start_error``
    (the exception its start raises), ``log_path`` (where its output goes) and calls
    `_init_process` in its constructor and provides ``start()``; it may override `_failure_report`.
    As a context manager it starts on entry and stops on exit."""

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
        self._companions: list[tuple[subprocess.Popen, weakref.finalize]] = []

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _spawn(self, command: list[str], *, cwd: Path, output: Path, truncate: bool = False,
               env: dict[str, str] | None = None) -> None:
        """Start ``command`` in its own session, stdout and stderr appended to ``output`` (emptied
        first with ``truncate``); a finalizer kills the group if the handle is dropped running.
        ``env``: the whole environment (default: this process's)."""
        self._open_output(output, truncate)
        self._rss_peak = 0
        for attempt in range(_EXEC_BUSY_ATTEMPTS):
            try:
                self._proc = launch(command, cwd=str(cwd), env=env, stdin=subprocess.DEVNULL,
                                    stdout=self._out_fh, stderr=subprocess.STDOUT,
                                    start_new_session=True,  # own session & process group: pgid == pid
                                    close_fds=True)
                break
            except OSError as exc:
                # ETXTBSY: the launcher has just written the script it runs (an Artemis instance's
                # bin/artemis), and a child another thread forked meanwhile still holds that write
                # descriptor until its own exec (seen once in CI with cluster nodes started side by
                # side); it is gone within moments, so try again
                if exc.errno != errno.ETXTBSY or attempt == _EXEC_BUSY_ATTEMPTS - 1:
                    raise
                time.sleep(0.1 * (attempt + 1))
        self.pid = self._proc.pid
        self._finalizer = weakref.finalize(self, kill_group, self._proc)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn_until_ready(self, command: list[str], ready: Callable[[], None], *, cwd: Path, output: Path,
                           truncate: bool = False) -> None:
        """`_spawn` then ``ready()`` (which waits, raising on failure); if the wait fails or is
        interrupted the broker is stopped before the error propagates, so no half-started
        process outlives a failed start."""
        self._spawn(command, cwd=cwd, output=output, truncate=truncate)
        try:
            ready()
        except BaseException:
            self.stop()
            raise

    def _open_output(self, output: Path, truncate: bool = False) -> None:
        """Where the broker's (and its companions') stdout and stderr go; `_spawn` opens it, a
        subclass that starts a companion first opens it itself."""
        self._close_output()
        # O_APPEND: a JVM's stdout/stderr and its own file appender can share the file safely.
        self._out_fh = open(output, "wb" if truncate else "ab", buffering=0)

    def _spawn_companion(self, command: list[str], *, cwd: Path, env: dict[str, str] | None = None
                         ) -> subprocess.Popen:
        """Start a process the broker needs beside it (in its own session, output with the
        broker's, which `_open_output` must have opened); `stop` and `kill` end it after the
        broker, by its PID (our child: the PID cannot be reused before we reap it)."""
        proc = launch(command, cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=self._out_fh,
                      stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        self._companions.append((proc, weakref.finalize(self, kill_group, proc)))
        return proc

    def _await_ready(self, deadline: Deadline, probe: Probe, *, done: Callable[[], bool] | None = None,
                     poll: float = 0.1, where: str = "") -> None:
        """Poll ``probe`` until it says ready (or ``done()`` says the start is over another way),
        raising ``start_error`` with the failure report when the process exits or ``deadline``
        passes. ``where``: appended to the messages (e.g. "; log PATH")."""

        def check() -> tuple[bool, str]:
            rc = self._proc.poll()
            if rc is not None:
                raise self.start_error(f"{self.label} (pid {self.pid}) exited with code {rc} during start-up{where}:\n"
                                       f"{self._failure_report()}")
            self._sample_rss()
            if done is not None and done():
                return True, "done"
            # each probe gets what is left of the deadline, within [0.5, 5] s
            return probe(min(5.0, max(0.5, deadline.remaining())))

        ok, last = poll_until(check, lambda answer: answer[0], timeout=deadline, interval=poll)
        if not ok:
            raise self.start_error(f"{self.label} (pid {self.pid}) not ready before timeout (last check: {last})"
                                   f"{where}:\n{self._failure_report()}")

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the broker's process group, wait, then SIGKILL; then descendants that left
        the group and outlived it, and the companions. Idempotent."""
        timeout = self.stop_timeout if timeout is None else timeout
        if self._proc is not None and self._proc.poll() is None:
            self._sample_rss()
            escaped = self._escaped_descendants()
            stop_group(self._proc, timeout)
            _end(escaped, grace=5.0)  # they leave on their own when the broker goes: a moment first
        self._end_companions(grace=timeout)
        self._detach()

    def kill(self) -> None:
        """SIGKILL the broker's process group (a crash), descendants that left the group and the
        companions; `start` brings them back."""
        if self._proc is not None and self._proc.poll() is None:
            self._sample_rss()
            escaped = self._escaped_descendants()
            kill_group(self._proc)
            _end(escaped, grace=0.0)
        self._end_companions(grace=0.0)
        self._detach()

    def _escaped_descendants(self) -> list[psutil.Process]:
        """Processes below the broker's leader that are not in its process group any more."""
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []
        escaped = []
        for child in children:
            try:
                if os.getpgid(child.pid) != self.pid:
                    escaped.append(child)
            except OSError:
                pass  # gone already
        return escaped

    def _end_companions(self, grace: float) -> None:
        for proc, finalizer in reversed(self._companions):
            finalizer.detach()
            if grace > 0:
                stop_group(proc, grace)
            else:
                kill_group(proc)
        self._companions.clear()

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

    def _rss_pid(self) -> int | None:
        """The process whose memory is the broker's (the leader; a subclass may name a child)."""
        return self.pid

    def _sample_rss(self) -> int:
        pid = self._rss_pid() if self.running else None
        if pid:
            self._rss_peak = max(self._rss_peak, peak_rss(pid))
        return self._rss_peak

    def rss_peak_bytes(self) -> int:
        """Peak resident set size of the broker (VmHWM); after stop(), the last value seen."""
        return self._sample_rss()

    def log_tail(self, lines: int = 50) -> str:
        return tail_files([self.log_path], lines)

    def _failure_report(self) -> str:
        return self.log_tail(40) or "(empty log)"


def _end(processes: list[psutil.Process], grace: float) -> None:
    """Wait up to ``grace`` seconds for ``processes`` to exit, then SIGKILL the survivors. psutil
    refuses to signal a PID that now names another process (it compares creation times)."""
    if not processes:
        return
    _, alive = psutil.wait_procs(processes, timeout=grace) if grace > 0 else ([], processes)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
