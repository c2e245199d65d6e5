"""Child processes that stop with `brokerconf`: a signal that ends the command (SIGTERM from a CI
job's timeout or ``kill``, SIGINT from Ctrl-C, SIGHUP from a closed terminal) is passed on to each
child's process group, and the command waits for the children to finish their own cleanup (pytest
tears down its fixtures, which stop the brokers) before it goes on ending.

Why not ``subprocess.run``: `brokerconf` turns SIGTERM into SystemExit (cli._stop_on_termination)
and ``subprocess.run`` answers any exception by SIGKILLing its child (``except: process.kill()``
in ``run``, and ``Popen.__exit__`` waits without passing anything on), so pytest never ran its
finalizers. The brokers it had started live in sessions of their own (so the harness can signal
their process groups, machinery/managed.py) and the terminal's signals never
reach them either: a SIGTERM during ``test_core_topics`` left that module's ActiveMQ JVM running.

The protocol, for one child or several (parallel chaos experiments):

* each child starts in a process group of its own (``process_group=0``), so a terminal's Ctrl-C
  reaches it once, from us, and never twice (the terminal's copy plus ours would cut pytest's
  teardown short);
* the first of SIGTERM / SIGINT / SIGHUP is sent to every running child's group and starts a grace
  period (`DEFAULT_GRACE_S`); repeats are not passed on, for the same reason;
* a child still running when the grace period ends is SIGKILLed, by its group (its PID: we have
  not reaped it, so the ID cannot name anything else);
* when the children are done the signal is delivered again to this process, to whatever handler
  was there before (cli's handler: SystemExit(128 + signal) and every ``finally`` of the command
  runs; no handler: the process ends by the signal, as a wrapper should).

Handlers can only be set from the main thread: elsewhere `Children` forwards nothing and starts
its children in the caller's process group, where the terminal's signals reach them as before.

A backstop for when this process is killed outright (SIGKILL, the OOM killer) and can pass nothing
on: a child started from the main thread gets SIGTERM when its parent dies (Linux
``PR_SET_PDEATHSIG``, set by a small trampoline that then execs the command, so the PID is the
command's). The kernel sends it when the *thread* that forked the child exits, not the process;
the main thread is the one thread that lives as long as the process, hence main thread only. A
child started from another thread is tethered instead (machinery/tether.py: a watchdog process
sends it SIGTERM when this process dies, SIGKILL after the grace period); not both, so pytest
gets one SIGTERM, not two that could cut its teardown short.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from typing import Any, Iterable, Sequence

from machinery.tether import launch
from machinery.waiting import Deadline

#: signals passed on to the children
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

#: sets PR_SET_PDEATHSIG (1, prctl(2)) then execs the command: argv = signal, expected parent PID,
#: command... If the parent died before the prctl (the kernel would never send it), the signal
#: is sent at once. -E -S: nothing from the environment or site-packages in the trampoline itself;
#: the command gets the environment unchanged.
_PDEATHSIG_TRAMPOLINE = (
    "import ctypes, os, sys\n"
    "sig, parent = int(sys.argv[1]), int(sys.argv[2])\n"
    "if ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0) == 0 and os.getppid() != parent:\n"
    "    os.kill(os.getpid(), sig)\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)

#: seconds the children get for their cleanup after the signal before they are SIGKILLed. A suite
#: module's teardown may stop several JVM brokers one after another, each allowed 20 s
#: (ManagedProcess.stop_timeout; a network of three ActiveMQ brokers is 60 s at worst), and the
#: workers of a parallel run tear down side by side.
DEFAULT_GRACE_S = 120.0


class SignalReceived(Exception):
    """Raised by `Children.start` once a signal has arrived: the command is ending, nothing new
    starts. `Children.__exit__` swallows it and delivers the signal again (see the module doc)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} received: not starting another child process")
        self.signum = signum


class Children:
    """The child processes of one command. Use as a context manager around starting and waiting::

        with Children() as children:
            proc = children.start([sys.executable, "-m", "pytest", ...], stdin=subprocess.DEVNULL)
            status = children.wait(proc)

    Several children at once: `start` each, then `wait_any` / `wait_all` (or `wait` per child from
    worker threads: the handler runs in the main thread, the waits wake up when a child exits or
    the grace period ends). Leaving the block with children still running (an exception) stops
    them as a signal would: SIGTERM to their groups, the grace period, then SIGKILL."""

    def __init__(self, grace: float = DEFAULT_GRACE_S, *, name: str = "brokerconf") -> None:
        self.grace = grace
        self.name = name
        self.signum: int | None = None          # the first signal received, if any
        self._deadline: Deadline | None = None  # the end of the grace period, once a stop began
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._previous: dict[int, Any] = {}
        self._forwarding = False
        self._repeat_noted = False
        self._wake_r = self._wake_w = -1

    # ------------------------------------------------------------------ context

    def __enter__(self) -> "Children":
        self._forwarding = threading.current_thread() is threading.main_thread()
        if self._forwarding:
            # Written once by the handler so waiters blocked without a deadline wake up; never
            # drained (a waiter leaves it out of its select once the deadline is set).
            self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._previous = {number: signal.signal(number, self._on_signal) for number in FORWARDED}
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if any(p.returncode is None for p in self._procs):
                if self.signum is None:
                    # leaving early (an exception): stop them the way a signal would
                    self._begin_stop(signal.SIGTERM, why=f"{exc_type.__name__ if exc_type else 'exit'}")
                self.wait_all()
        finally:
            for number, handler in self._previous.items():
                # None: a handler not set from Python; the default is the closest we can restore
                signal.signal(number, signal.SIG_DFL if handler is None else handler)
            self._previous = {}
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1
        if self.signum is not None and (exc is None or isinstance(exc, SignalReceived)):
            # The children are done: now the signal does to this process what it would have done.
            signal.raise_signal(self.signum)
            return isinstance(exc, SignalReceived)  # a handler that did not raise: swallow ours
        return False

    @property
    def stopping(self) -> bool:
        """True once a signal arrived (or the block is being left): start nothing new."""
        return self._deadline is not None

    # ------------------------------------------------------------------ children

    def start(self, args: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """``subprocess.Popen(args, **popen_kwargs)`` in a process group of its own (unless the
        caller chose ``start_new_session`` or ``process_group``), tracked until it is reaped. From
        the main thread (an argument list, no ``shell`` or ``executable``), through the
        PR_SET_PDEATHSIG trampoline, else tethered (module doc)."""
        if self.signum is not None:
            raise SignalReceived(self.signum)
        if self._forwarding and "start_new_session" not in popen_kwargs:
            popen_kwargs.setdefault("process_group", 0)
        if (sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
                and not isinstance(args, (str, bytes)) and not popen_kwargs.get("shell")
                and "executable" not in popen_kwargs):
            args = [sys.executable, "-E", "-S", "-c", _PDEATHSIG_TRAMPOLINE, str(int(signal.SIGTERM)),
                    str(os.getpid()), *map(os.fspath, args)]
            proc = subprocess.Popen(args, **popen_kwargs)
        else:
            proc = launch(args, grace=self.grace, **popen_kwargs)
        with self._lock:
            self._procs.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen) -> int:
        """Wait for one child; its exit status (negative: the signal that ended it)."""
        self._wait([proc], any_of=False)
        return proc.returncode

    def wait_any(self, procs: Iterable[subprocess.Popen] | None = None) -> subprocess.Popen:
        """Wait until one of ``procs`` (default: every child) has exited; returns it."""
        pending = list(self._procs if procs is None else procs)
        return self._wait(pending, any_of=True)

    def wait_all(self) -> list[int]:
        """Wait for every child; their exit statuses in start order."""
        self._wait(list(self._procs), any_of=False)
        return [p.returncode for p in self._procs]

    def _wait(self, procs: list[subprocess.Popen], *, any_of: bool) -> subprocess.Popen | None:
        pidfds: dict[int, int] = {}
        try:
            # not a `wait_until`: a select on the children's pidfds (woken by a signal that starts
            # the grace period), which kills what is left once the grace period is over
            while True:
                pending = [p for p in procs if p.poll() is None]
                done = [p for p in procs if p.returncode is not None]
                if any_of and done:
                    return done[0]
                if not pending:
                    return None
                deadline = self._deadline
                if deadline is not None and deadline.expired():
                    self._kill(pending)
                    continue
                fds = []
                for p in pending:
                    if p.pid not in pidfds:
                        pidfds[p.pid] = _pidfd(p.pid)
                    if pidfds[p.pid] >= 0:
                        fds.append(pidfds[p.pid])
                if deadline is None and self._wake_r >= 0:
                    fds.append(self._wake_r)
                remaining = None if deadline is None else deadline.remaining()
                if len(fds) < len(pending) + (deadline is None and self._wake_r >= 0):
                    # no pidfd (a kernel before 5.3): poll, twice a second
                    remaining = 0.5 if remaining is None else min(remaining, 0.5)
                select.select(fds, [], [], remaining)
        finally:
            for fd in pidfds.values():
                if fd >= 0:
                    os.close(fd)

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum: int, frame) -> None:  # noqa: ARG002 - the signal module's signature
        if self.signum is not None:
            if not self._repeat_noted:
                self._repeat_noted = True
                _say(f"{self.name}: {signal.Signals(signum).name} received; already stopping after "
                     f"{signal.Signals(self.signum).name}: not passed on, so the children's cleanup is not cut "
                     f"short (they are killed when the {self.grace:g} s grace period ends)")
            return
        self.signum = signum
        self._begin_stop(signum, why=signal.Signals(signum).name + " received")
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"\0")
            except OSError:
                pass

    def _begin_stop(self, signum: int, why: str) -> None:
        self._deadline = Deadline(self.grace)
        with self._lock:
            running = [p for p in self._procs if p.returncode is None]
        if running:
            _say(f"{self.name}: {why}; passing {signal.Signals(signum).name} on to {len(running)} child "
                 f"process(es) ({', '.join(str(p.pid) for p in running)}) and waiting up to {self.grace:g} s "
                 "for them to stop what they started")
        for proc in running:
            _signal_child(proc, signum)

    def _kill(self, procs: list[subprocess.Popen]) -> None:
        _say(f"{self.name}: child process(es) {', '.join(str(p.pid) for p in procs)} still running after "
             f"the {self.grace:g} s grace period: SIGKILL (what they started may be left behind)")
        for proc in procs:
            _signal_child(proc, signal.SIGKILL)
        for proc in procs:
            proc.wait()


def run(args: Sequence[str], *, grace: float = DEFAULT_GRACE_S, **popen_kwargs: Any) -> int:
    """Like ``subprocess.run(args, **popen_kwargs).returncode``, but a signal is passed on and
    waited for (see the module doc); after such a signal the previous handler gets it on return."""
    with Children(grace) as children:
        return children.wait(children.start(args, **popen_kwargs))


def _signal_child(proc: subprocess.Popen, signum: int) -> None:
    """``signum`` to the child's process group when it leads one (pgid == pid), else to the child.
    Only while unreaped (``returncode is None``): its PID cannot name another process yet."""
    if proc.returncode is not None:
        return
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _pidfd(pid: int) -> int:
    """A descriptor that becomes readable when ``pid`` exits (Linux >= 5.3), or -1."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _say(message: str) -> None:
    # os.write, not print: a handler that prints while the main thread is inside a write to the
    # same stream gets "reentrant call" from the buffered writer.
    try:
        os.write(sys.stderr.fileno(), (message + "\n").encode())
    except (OSError, ValueError, AttributeError):
        pass
