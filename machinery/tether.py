"""Tie every process the harness launches to the life of the Python process that launched it, so
nothing it started outlives it when it dies without running its cleanup (SIGKILL, the OOM killer,
an xdist worker's crash, pytest-timeout's hard kill).

The launchers put their processes in sessions of their own (``start_new_session``: the harness
signals the group, a terminal's Ctrl-C does not reach it twice), so no signal reaches them when
the launcher dies: last session a ``toxiproxy-server`` ran on for 2 h, parent PID 1, after its
pytest had been SIGKILLed.

How: one **watchdog** process per launching process, started with the first launch. It holds the
read end of a pipe whose write end only the launcher holds (close-on-exec, so no exec'd child
keeps it; closed in a child forked without exec, see `_after_fork`). Each launch sends the
watchdog one line: PID, start time, whether it leads its own process group, grace period. When
the launcher ends for any reason the kernel closes the write end; the watchdog reads EOF, sends
SIGTERM to every registered process group still there (to the process alone when it leads no
group), SIGKILLs what is left after the grace period (`DEFAULT_GRACE_S`), says what it ended
(stderr, and the file `REPORT_ENV` names if set) and exits. While the launcher lives the watchdog
does nothing: the harness stops its processes by their handles as before.

Why not the other option, ``PR_SET_PDEATHSIG`` set by a trampoline before exec (what
brokerconf/children.py does for the command line's own children, from the main thread only):

* the kernel sends that signal to the one process that set it, and clears it in a fork: a start
  script that forks the real server (a broker's launcher script, ``sh`` running ``sleep &``)
  loses its shell and keeps the server; the watchdog signals the whole group;
* it fires when the *thread* that forked the child ends, so every fork would have to run on one
  long-lived thread, and each launch site (some retry on ETXTBSY, some start side by side from
  worker threads) would hand its Popen call to that thread; the watchdog does not care which
  thread launched, and the launch stays an ordinary ``subprocess.Popen`` in the caller's thread;
* the PID the caller gets stays the command's own either way (no trampoline here at all), and
  with it everything the harness does by that PID: the process group (pgid == pid), RSS reads,
  stop and kill.

What it costs and what it leaves open: one small extra process per launching process (not per
launch); a launcher killed in the microseconds between its fork and the registration line leaves
that one process; a process that left its group (Erlang's ``erl_child_setup``, see
machinery/managed.py) is not followed. The watchdog acts on EOF, also when the launcher ends
normally: whatever it registered and did not stop by then is ended too (nothing the harness
launches is meant to outlive it).

A registered PID or group may be long gone, and its number reused (pid_max is 32768 here), when
the watchdog acts: it signals a group or process only when its leader still has the start time
recorded at launch, or, the leader reaped, a member of the group started after it runs
(`_targets`), as conformance/leaks.py decides what is a leftover.

Standard library only: the watchdog runs this file as a script (``python -I -S``), so nothing of
the project or of site-packages is imported into it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

#: seconds between the watchdog's SIGTERM and its SIGKILL: what a launched process gets to end on
#: its own once its launcher is gone (a JVM's shutdown hooks, libfuse's unmount)
DEFAULT_GRACE_S = 5.0

#: how often the watchdog looks again whether what it signalled has ended
_POLL_S = 0.1

#: environment variable naming a file the watchdog appends what it had to end to, besides its
#: stderr (which may be a pytest capture file nobody reads once pytest is gone): a test that
#: checks a command left nothing behind reads it (tests/interrupting.py)
REPORT_ENV = "BROKERCONF_TETHER_REPORT"

_lock = threading.Lock()
_write_fd = -1                              # the launcher's end of the watchdog's pipe
_watchdog: subprocess.Popen | None = None
_owner = 0                                  # the PID that started the watchdog (a fork has another)
# watchdogs let go of (ours that died, or a parent's after a fork): kept referenced, so no
# "still running" ResourceWarning comes from a handle dropped while its process runs
_retired: list[subprocess.Popen] = []


# ---------------------------------------------------------------------- the launcher's side


def launch(args: Any, *, grace: float = DEFAULT_GRACE_S, **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen_kwargs)``, tethered: it (with its process group, when it
    leads one) is ended within ``grace`` seconds (SIGTERM, then SIGKILL) after this process dies."""
    _ensure_watchdog()  # first: a watchdog that cannot start must not leave a process untethered
    proc = _EndedIfItsStartIsInterrupted(args, **popen_kwargs)
    try:
        tether(proc.pid, grace=grace)
    except BaseException:
        # no backstop for it, and the caller never gets the handle to stop it: end it here (its
        # group too: not reaped yet, so the group ID is still its own)
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL) if os.getpgid(proc.pid) == proc.pid else proc.kill()
            except ProcessLookupError:
                pass
            proc.wait()
        raise
    return proc


class _EndedIfItsStartIsInterrupted(subprocess.Popen):
    """``subprocess.Popen`` that does not leave a forked child behind when its own start raises.

    Popen forks, then reads a pipe until the child has exec'd. A signal whose handler raises (the
    command line's SIGTERM/SIGINT handlers do, brokerconf/children.py) can land in that read: the
    exception leaves ``__init__``, the caller never gets the handle, and the child runs on,
    untethered (CI: `brokerconf bench mqtt` stopped with SIGTERM while it started a load
    generator left the generator running after it exited). Here the child is killed and reaped
    before the exception goes on."""

    def _execute_child(self, *args: Any, **kwargs: Any) -> None:
        try:
            super()._execute_child(*args, **kwargs)
        except BaseException:
            pid = getattr(self, "pid", None)
            if getattr(self, "_child_created", False) and pid and self.returncode is None:
                try:
                    os.kill(pid, signal.SIGKILL)  # not reaped yet, so the PID is surely the child
                    os.waitpid(pid, 0)
                    self.returncode = -signal.SIGKILL
                except (ProcessLookupError, ChildProcessError):
                    pass
            raise


def tether(pid: int, *, grace: float = DEFAULT_GRACE_S) -> None:
    """Register a child process of this one (not yet reaped, so the PID is surely it) with the
    watchdog: it, and its process group when it leads one, ends within ``grace`` seconds after
    this process. A process already gone is not registered."""
    stat = _stat(pid)
    if stat is None:
        return
    _, pgid, start = stat
    line = f"{pid} {start} {int(pgid == pid)} {grace:g}\n".encode()
    with _lock:
        try:
            os.write(_ensure_watchdog_locked(), line)  # shorter than PIPE_BUF: written whole
        except BrokenPipeError:
            # the watchdog is dying (its read end is closed): once it is gone a new one starts
            # (`_ensure_watchdog_locked` says what that means) and gets the line
            _watchdog.wait(10)
            os.write(_ensure_watchdog_locked(), line)


def is_watchdog(argv: list[str]) -> bool:
    """Whether a command line is a tether watchdog's (for checks that walk a process tree: it ends
    on its own once its launcher has)."""
    script = os.sep + os.path.join("machinery", "tether.py")
    return len(argv) > 3 and argv[1:3] == ["-I", "-S"] and argv[3].endswith(script)


def watchdog_pid() -> int | None:
    """PID of this process's watchdog, if it has one running (it lives as long as this process:
    a leak check must not count it)."""
    with _lock:
        if _watchdog is None or _owner != os.getpid() or _watchdog.poll() is not None:
            return None
        return _watchdog.pid


def _ensure_watchdog() -> None:
    with _lock:
        _ensure_watchdog_locked()


def _ensure_watchdog_locked() -> int:
    global _write_fd, _watchdog, _owner
    if _watchdog is not None and _owner == os.getpid():
        if _watchdog.poll() is None:
            return _write_fd
        # killed by someone: what it watched is not ended with this process any more
        _say(f"tether: the watchdog (pid {_watchdog.pid}) ended ({_watchdog.returncode}); processes "
             f"launched by {os.getpid()} before now are no longer ended when it dies")
    _drop_locked()
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        _watchdog = subprocess.Popen(
            # -I: no environment variables, not this file's directory on sys.path; -S: no
            # site-packages. The watchdog needs the standard library only.
            [sys.executable, "-I", "-S", os.path.abspath(__file__), str(read_fd), str(os.getpid()),
             os.path.abspath(os.environ[REPORT_ENV]) if os.environ.get(REPORT_ENV) else ""],
            pass_fds=(read_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            # its own session: a signal to the launcher's group (Ctrl-C, the CLI passing SIGTERM
            # on) leaves it alone; it ends on EOF. "/": it must not keep a mount point busy.
            start_new_session=True, cwd="/")
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    _write_fd, _owner = write_fd, os.getpid()
    return _write_fd


def _drop_locked() -> None:
    """Forget the watchdog (closing our write end ends it, once it has acted on what it holds)."""
    global _write_fd, _watchdog, _owner
    if _write_fd >= 0:
        try:
            os.close(_write_fd)
        except OSError:
            pass
    if _watchdog is not None:
        _retired.append(_watchdog)
    _write_fd, _watchdog, _owner = -1, None, 0


def _after_fork() -> None:
    """In a child forked without exec: the parent's write end must not keep the parent's watchdog
    from seeing EOF, and the child's own launches need a watchdog of their own."""
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _drop_locked()


os.register_at_fork(after_in_child=_after_fork)


# ---------------------------------------------------------------------- shared


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time in clock ticks) of a process, or None if it is gone.
    proc(5): the fields after the command name, which is in parentheses and may hold spaces."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[2]), int(rest[19])


#: in the watchdog: the file of `REPORT_ENV`, if the launcher had one
_report = ""


def _say(message: str) -> None:
    try:
        os.write(2, (message + "\n").encode())
    except OSError:
        pass
    if _report:
        try:
            with open(_report, "a", encoding="utf-8") as report:
                report.write(message + "\n")
        except OSError:
            pass


# ---------------------------------------------------------------------- the watchdog's side


@dataclass(frozen=True)
class Registration:
    pid: int
    start: int      # the leader's start time (clock ticks since boot) when it was launched
    group: bool     # it led its own process group: the whole group is ended
    grace: float


def _targets(registrations: list[Registration], processes: dict[int, tuple[str, int, int]]) -> list[Registration]:
    """The registrations that still name something running, given a snapshot ``processes``
    (pid -> `_stat`). A registration whose PID now belongs to a process started at another time
    names nothing of ours (the number was reused); a group whose leader is gone (reaped) still
    counts while a member started no earlier than the leader is there (a start script's server
    after the script ended)."""
    alive = []
    for reg in registrations:
        leader = processes.get(reg.pid)
        if leader is not None and leader[2] != reg.start:
            continue  # reused PID (and, for a group, a group ID a new session leader took over)
        if leader is not None and leader[0] != "Z":
            alive.append(reg)
        elif reg.group and any(pgid == reg.pid and state != "Z" and start >= reg.start
                               for pid, (state, pgid, start) in processes.items() if pid != reg.pid):
            alive.append(reg)
    return alive


def _snapshot() -> dict[int, tuple[str, int, int]]:
    processes = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                processes[int(name)] = stat
    return processes


def _command(pid: int, limit: int = 200) -> str:
    """The process's command line, cut to ``limit`` characters: the report says what it ended, not
    only its PID (a CI run's report of one leftover could not be traced to a test)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in words) or "?"
    return text if len(text) <= limit else text[:limit] + "..."


def _signal(reg: Registration, signum: int) -> None:
    try:
        if reg.group:
            os.killpg(reg.pid, signum)
        else:
            os.kill(reg.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _end(registrations: list[Registration], launcher: int) -> None:
    """SIGTERM what is still there, SIGKILL what outlives its grace period, wait (briefly) for it."""
    pending = _targets(registrations, _snapshot())
    if not pending:
        return
    _say(f"tether: process {launcher} ended with {len(pending)} launched process(es) still running "
         f"({'; '.join(f'{r.pid}: {_command(r.pid)}' for r in pending)}): SIGTERM, SIGKILL after the grace period")
    started = time.monotonic()
    for reg in pending:
        _signal(reg, signal.SIGTERM)
    killed: set[Registration] = set()
    while pending:
        time.sleep(_POLL_S)
        pending = _targets(pending, _snapshot())
        elapsed = time.monotonic() - started
        for reg in pending:
            if reg not in killed and elapsed >= reg.grace:
                _signal(reg, signal.SIGKILL)
                killed.add(reg)
        if pending and all(r in killed for r in pending) and elapsed >= max(r.grace for r in pending) + 5.0:
            _say(f"tether: still there 5 s after SIGKILL: {', '.join(str(r.pid) for r in pending)}")
            return


def _prune(registrations: list[Registration]) -> list[Registration]:
    """Drop what has ended, so a long run's list stays short."""
    return _targets(registrations, _snapshot())


def watch(fd: int, launcher: int, report: str = "") -> None:
    """The watchdog: read registrations from ``fd`` until EOF, then end what they name (saying so
    on stderr and in ``report``, if given)."""
    global _report
    _report = report
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # only EOF ends the watch (SIGTERM still ends it)
    registrations: list[Registration] = []
    buffered = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            pid, start, group, grace = line.split()
            registrations.append(Registration(int(pid), int(start), group == b"1", float(grace)))
        if len(registrations) > 32:
            registrations = _prune(registrations)
    _end(registrations, launcher)


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
