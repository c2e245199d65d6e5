"""machinery/tether.py: what the harness launches ends within seconds after the Python process that
launched it dies without its cleanup (SIGKILL), also when the thread that launched it had ended
long before, and with the process group a start script forked into; the normal stop path is
unchanged.

The launcher is a small program of its own (a subprocess: the test kills it outright), run from the
repository so the code under test is what it imports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from machinery.managed import ManagedProcess
from machinery.process import stop_group
from machinery.waiting import poll

REPO = Path(__file__).resolve().parents[2]

#: a start script as a broker's may be: it forks the real process into its own group, says where it
#: is (file "$1") and waits for it
START_SCRIPT = ["/bin/sh", "-c", 'sleep 300 & echo $! > "$1"; wait']

#: the launcher: starts processes from a worker thread that then ends, and from the main thread;
#: prints their PIDs (and its watchdog's) once the worker thread is gone from /proc; then waits to
#: be killed ("kill") or exits at once without stopping them ("exit")
LAUNCHER = textwrap.dedent("""
    import json, os, subprocess, sys, threading, time
    from pathlib import Path
    here, api, then, script = Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    launched, forked, kept = {}, {}, []

    def start(name):
        if api == "managed":  # the broker launchers' way (machinery/managed.py), a start script
            from machinery.managed import ManagedProcess

            class Launched(ManagedProcess):
                label = name
                def __init__(self):
                    self.log_path = here / f"{name}.log"
                    self._init_process()
                def start(self):
                    self._spawn([*script, "sh", str(here / f"{name}.forked")], cwd=here, output=self.log_path)

            process = Launched()
            process.start()
        else:  # the plain API; the process stays in this launcher's group (no session of its own)
            from machinery.tether import launch
            process = launch(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        kept.append(process)  # a handle dropped would kill its group (ManagedProcess's finalizer)
        launched[name] = process.pid

    worker = threading.Thread(target=start, args=("from-thread",))
    worker.start()
    worker.join()
    while os.path.exists(f"/proc/self/task/{worker.native_id}"):  # the OS thread has ended too
        time.sleep(0.01)
    start("from-main")
    deadline = time.monotonic() + 60
    for name in launched if api == "managed" else ():
        path = here / f"{name}.forked"
        while not (path.exists() and path.read_text().endswith("\\n")):
            if time.monotonic() > deadline:
                sys.exit(f"{name}: the start script never said what it forked")
            time.sleep(0.01)
        forked[name] = int(path.read_text())
    try:
        from machinery.tether import watchdog_pid
        watchdog = watchdog_pid()
    except ImportError:  # the code before the tether: the test must fail on what it checks, not here
        watchdog = None
    print(json.dumps({"launched": launched, "forked": forked, "watchdog": watchdog}), flush=True)
    if then == "kill":
        time.sleep(600)
""")

#: the bound on "ended within a few seconds": the watchdog's SIGTERM ends `sleep` and `sh` at once;
#: DEFAULT_GRACE_S (5 s) is when it would SIGKILL something that ignored it, and the rest is slack
#: for a loaded 2-core machine (the watchdog polls /proc every 0.1 s)
GONE_WITHIN_S = 10.0


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) from /proc/PID/stat (proc(5)), or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[19])


def _start_time(pid: int) -> int | None:
    """The process's start time, or None when it is gone or a zombie (a zombie runs nothing: the
    new parent of an orphan reaps it when it gets to it)."""
    stat = _stat(pid)
    return None if stat is None or stat[0] == "Z" else stat[1]


def _kill_if_still_there(started: dict[int, int]) -> None:
    """A failed test's leftovers: SIGKILL by PID, only a process that still has its start time."""
    for pid, start in started.items():
        if _start_time(pid) == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _run_launcher(tmp_path: Path, api: str, then: str) -> tuple[subprocess.Popen, dict]:
    # stderr to a file, not a pipe: what the launcher started may hold it open after it is gone
    with open(tmp_path / "launcher.err", "wb") as errors:
        launcher = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(tmp_path), api, then, json.dumps(START_SCRIPT)],
            cwd=str(REPO), stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True)
    line = launcher.stdout.readline()  # bounded by pytest's timeout should the launcher hang
    if not line:
        launcher.wait(30)
        pytest.fail(f"the launcher exited ({launcher.returncode}) before naming its processes: "
                    f"{_errors(tmp_path)}")
    return launcher, json.loads(line)


def _errors(tmp_path: Path) -> str:
    return (tmp_path / "launcher.err").read_text(errors="replace")[-3000:]


def _still_running(started: dict[int, int], within: float) -> dict[int, int]:
    """Poll /proc until none of ``started`` (pid -> start time) runs, or ``within`` seconds pass;
    what still runs then."""
    deadline = time.monotonic() + within
    while True:
        running = {pid: start for pid, start in started.items() if start is not None and _start_time(pid) == start}
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.05)


@pytest.mark.parametrize("api, then", [("managed", "kill"), ("launch", "kill"), ("launch", "exit")],
                         ids=["broker-launcher-killed", "launch-killed", "launch-exited"])
def test_launched_processes_end_when_their_launcher_dies(tmp_path, api, then):
    launcher, named = _run_launcher(tmp_path, api, then)
    pids = [*named["launched"].values(), *named["forked"].values()]
    started = {pid: _start_time(pid) for pid in pids}
    watchdog = {named["watchdog"]: _start_time(named["watchdog"])} if named["watchdog"] else {}
    try:
        # the thread that launched "from-thread" is gone, and that did not end anything
        assert None not in started.values(), f"not running once the launching thread had ended: {named}"
        assert len(pids) == (4 if api == "managed" else 2)
        if then == "kill":
            launcher.kill()
        assert launcher.wait(30) == (-signal.SIGKILL if then == "kill" else 0), _errors(tmp_path)
        left = _still_running(started, GONE_WITHIN_S)
        assert not left, (f"still running {GONE_WITHIN_S:g} s after the launcher "
                          f"{'was SIGKILLed' if then == 'kill' else 'exited'}: "
                          + ", ".join(f"{pid} ({_stat(pid)})" for pid in left)
                          + f"; launched {named}; the launcher's stderr: {_errors(tmp_path)}")
        # its job done, the watchdog is gone too (it would be a leak of its own), and it said what
        # it had to end (on the launcher's stderr, which it shares)
        assert watchdog and None not in watchdog.values(), f"the launcher had no tether watchdog running: {named}"
        assert not _still_running(watchdog, GONE_WITHIN_S), f"the watchdog {named['watchdog']} still runs"
        said = f"tether: process {launcher.pid} ended with 2 launched process(es) still running"
        assert said in _errors(tmp_path), _errors(tmp_path)
        # and named each by its command line, so a report says what was left, not only its PID
        named_in_report = re.findall(r"(\d+): (/bin/sh -c|sleep 300)", _errors(tmp_path))
        assert len(named_in_report) == 2, _errors(tmp_path)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        _kill_if_still_there({pid: start for pid, start in {**started, **watchdog}.items() if start is not None})
        launcher.stdout.close()


class _ScriptProcess(ManagedProcess):
    """A broker launcher's shape around the start script (no readiness probe)."""

    label = "start script"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log_path = workdir / "script.log"
        self.forked_file = workdir / "forked"
        self._init_process()

    def start(self) -> None:
        self._spawn([*START_SCRIPT, "sh", str(self.forked_file)], cwd=self.workdir, output=self.log_path)

    def forked_pid(self) -> int:
        deadline = time.monotonic() + 30  # a bound for a hung test, not a timing assertion
        while not (self.forked_file.exists() and self.forked_file.read_text().endswith("\n")):
            assert self.running and time.monotonic() < deadline, "the start script never forked"
            time.sleep(0.01)
        return int(self.forked_file.read_text())


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_tethered_broker_group_stops_by_its_handle_as_before(tmp_path, how):
    process = _ScriptProcess(tmp_path)
    process.start()
    forked = process.forked_pid()
    started = {process.pid: _start_time(process.pid), forked: _start_time(forked)}
    proc = process._proc
    try:
        assert os.getpgid(process.pid) == process.pid == os.getpgid(forked), "the group is the leader's PID"
        getattr(process, how)()
        # the leader's status as the harness saw it before: ended by the group's signal
        assert proc.returncode == (-signal.SIGTERM if how == "stop" else -signal.SIGKILL)
        assert not _still_running({forked: started[forked]}, 30), "the forked process outlived the stop"
        from machinery.tether import watchdog_pid

        assert watchdog_pid() is not None, "stopping a process ended this process's watchdog"
    finally:
        process.kill()
        _kill_if_still_there(started)


def test_launch_returns_the_commands_own_process():
    from machinery.tether import launch

    proc = launch([sys.executable, "-c", "import sys; sys.exit(sys.stdin.read() == 'bye' and 7)"],
                         stdin=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert os.getpgid(proc.pid) == proc.pid  # what the harness signals, reads RSS of, stops by
        # read until the exec has happened: /proc/PID/cmdline is empty while the child is inside
        # execve (a CI run read it there); a wrapper left in between would never show the command
        cmdline = poll(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"),
                       lambda text: "python" in text, timeout=10, interval=0.01)
        assert "python" in cmdline, cmdline
        proc.communicate("bye", timeout=60)
        assert proc.returncode == 7
        sleeper = launch(["sleep", "300"], start_new_session=True)
        stop_group(sleeper, timeout=20)
        assert sleeper.returncode == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_start_interrupted_after_the_fork_leaves_no_child(monkeypatch):
    """A signal handler that raises while Popen waits for its child's exec (CI: `brokerconf bench`
    stopped with SIGTERM as it started a load generator) must not leave the forked child running
    without a handle: `launch` ends it before the exception goes on."""
    import threading

    import psutil

    from machinery import tether

    tether._ensure_watchdog()  # started before the interrupted read, so it is not the child looked for
    # this worker may have children of its own (a module's broker): only the one forked here counts
    before = {child.pid for child in psutil.Process().children()}
    real_read, this_thread = os.read, threading.get_ident()
    forked: list[int] = []
    interrupted: list[bool] = []

    def interrupted_read(fd, size):
        # Popen's first read after the fork is its exec-status pipe's: the signal "arrives" there;
        # any other thread's read, and any later one, is the real read
        if threading.get_ident() != this_thread or interrupted:
            return real_read(fd, size)
        interrupted.append(True)
        forked.extend(child.pid for child in psutil.Process().children() if child.pid not in before)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "read", interrupted_read)
    with pytest.raises(KeyboardInterrupt):
        tether.launch(["sleep", "300"], start_new_session=True)
    monkeypatch.setattr(os, "read", real_read)
    assert forked, "setup: no child was forked before the interrupted read"
    alive = [pid for pid in forked if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    for pid in alive:  # a regression must not leave the sleeper behind (forked here: the PID is its own)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not alive, f"the interrupted start left its child running: {alive}"


def test_the_watchdog_signals_only_what_is_still_the_registered_process():
    from machinery.tether import Registration, _targets

    # snapshot: pid -> (state, pgid, start time)
    registrations = [
        Registration(100, 500, True, 5.0),    # leader running
        Registration(200, 500, True, 5.0),    # leader reaped; a member its script forked runs on
        Registration(300, 500, True, 5.0),    # PID and group ID reused by a later session leader
        Registration(400, 500, False, 5.0),   # a lone process whose PID now names another one
        Registration(500, 500, False, 5.0),   # a zombie nobody reaped yet
        Registration(600, 500, True, 5.0),    # leader reaped; only an older process with that pgid
        Registration(700, 500, True, 5.0),    # gone with its whole group
    ]
    processes = {
        100: ("S", 100, 500),
        201: ("S", 200, 510),
        300: ("S", 300, 900), 301: ("S", 300, 901),
        400: ("R", 1, 900),
        500: ("Z", 1, 500),
        601: ("S", 600, 400),
    }
    assert [r.pid for r in _targets(registrations, processes)] == [100, 200]


def test_a_leftover_the_watchdog_ended_still_counts_as_left_by_an_interrupted_command(tmp_path):
    """tests/interrupting.py waits for a tree's watchdogs instead of counting them; that must not
    hide what the command failed to stop: the watchdog's report puts it on the list."""
    from tests.interrupting import command_line, interrupt

    # ends by SIGTERM's default action: no cleanup, its `sleep` left to the watchdog
    program = ("import time; from machinery.tether import launch; "
               "launch(['sleep', '300'], start_new_session=True); time.sleep(600)")
    result = interrupt([sys.executable, "-c", program], signal.SIGTERM,
                       lambda root, tree: any(command_line(p).startswith("sleep") for p in tree),
                       log=tmp_path / "output.log")
    assert result.returncode == -signal.SIGTERM, result.describe()
    assert any(line.startswith("ended by a tether watchdog") and "ended with 1 launched process(es)" in line
               for line in result.left), result.describe()

