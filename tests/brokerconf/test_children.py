"""brokerconf/children.py: a signal to the parent reaches each child's process group once, the parent
waits for the children's cleanup, SIGKILLs a child that outlives the grace period, and then the
signal does to the parent what it would have done.

Each test runs a small parent program (a subprocess: signal handlers belong to the main thread of a
process of their own) whose children report through files in ``tmp_path``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]

#: a child: installs handlers for the three signals, says it is ready, and on a signal writes which
#: one (and how many it got) once the test allows it to finish its "cleanup" (file ``release``)
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    here, name, ignore = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "ignore"
    got = []
    def handler(signum, frame):
        got.append(signum)
        (here / f"{name}.got").write_text(" ".join(signal.Signals(s).name for s in got))
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN if ignore else handler)
    (here / f"{name}.pid").write_text(str(os.getpid()))
    (here / f"{name}.ready").write_text("")
    while not got or not (here / "release").exists():
        time.sleep(0.05)
    (here / f"{name}.done").write_text(" ".join(signal.Signals(s).name for s in got))
""")

#: the parent: starts the children through Children and waits for all of them
PARENT = textwrap.dedent("""
    import subprocess, sys
    from brokerconf.children import Children
    here, names, mode, grace = sys.argv[1], sys.argv[2].split(","), sys.argv[3], float(sys.argv[4])
    with Children(grace, name="parent") as children:
        procs = [children.start([sys.executable, "-c", sys.argv[5], here, n, mode]) for n in names]
        print("statuses", children.wait_all(), flush=True)
    print("after the block", flush=True)
""")


def _await(path: Path, process: subprocess.Popen) -> None:
    """Wait for a child's file (a bound for a hung test, not a timing assertion)."""
    bound = time.monotonic() + 60
    while not path.exists():
        assert process.poll() is None, f"the parent exited ({process.returncode}) before {path.name}"
        assert time.monotonic() < bound, f"no {path.name} after 60 s"
        time.sleep(0.05)


def _parent(tmp_path: Path, names: str, mode: str = "handle", grace: float = 60.0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), names, mode, str(grace), CHILD],
                            cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(process: subprocess.Popen) -> tuple[str, str]:
    try:
        return process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


def _reap_children(tmp_path: Path) -> None:
    """Any child still running after a failed test: SIGKILL by its PID (psutil checks it is ours)."""
    for pid_file in tmp_path.glob("*.pid"):
        try:
            proc = psutil.Process(int(pid_file.read_text()))
            if str(tmp_path) in " ".join(proc.cmdline()):
                proc.kill()
        except psutil.Error:
            pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_the_signal_reaches_each_child_once_and_the_parent_waits(tmp_path, signum):
    process = _parent(tmp_path, "a,b")
    try:
        for name in ("a", "b"):
            _await(tmp_path / f"{name}.ready", process)
        process.send_signal(signum)
        for name in ("a", "b"):
            _await(tmp_path / f"{name}.got", process)
        process.send_signal(signum)  # a repeat: not passed on (it would cut pytest's teardown short)
        # the parent says so once it has handled the repeat; then the children may finish
        assert "already stopping" in _read_stderr_until(process, "already stopping")
        (tmp_path / "release").write_text("")
        stdout, stderr = _finish(process)
    finally:
        _reap_children(tmp_path)
    for name in ("a", "b"):
        assert (tmp_path / f"{name}.done").read_text() == signum.name, "each child gets the signal once"
    # the children were waited for (their statuses printed), then the signal took its default
    # course in the parent: the process ends by it (for SIGINT through an uncaught KeyboardInterrupt,
    # after which Python ends the process by SIGINT too)
    assert "statuses [0, 0]" in stdout and "after the block" not in stdout
    assert process.returncode == -signum, (process.returncode, stderr)


def _read_stderr_until(process: subprocess.Popen, text: str) -> str:
    seen = ""
    for line in process.stderr:
        seen += line
        if text in line:
            return seen
    return seen


def test_a_child_that_ignores_the_signal_is_killed_after_the_grace_period(tmp_path):
    process = _parent(tmp_path, "stubborn", mode="ignore", grace=1.0)
    try:
        _await(tmp_path / "stubborn.ready", process)
        child = psutil.Process(int((tmp_path / "stubborn.pid").read_text()))
        process.send_signal(signal.SIGTERM)
        stdout, stderr = _finish(process)
    finally:
        _reap_children(tmp_path)
    assert f"statuses [{-signal.SIGKILL}]" in stdout, (stdout, stderr)
    assert "SIGKILL" in stderr and not child.is_running()
    assert process.returncode == -signal.SIGTERM


def test_leaving_the_block_early_stops_the_children(tmp_path):
    """An exception while children run: they get SIGTERM and are waited for before it propagates."""
    program = textwrap.dedent("""
        import sys
        from brokerconf.children import Children
        here, child = sys.argv[1], sys.argv[2]
        with Children(60, name="parent") as children:
            children.start([sys.executable, "-c", child, here, "a", "handle"])
            children.start([sys.executable, "-c", "import sys; sys.exit(3)"])
            from pathlib import Path
            import time
            while not (Path(here) / "a.ready").exists():
                time.sleep(0.05)
            (Path(here) / "release").write_text("")
            raise RuntimeError("boom")
    """)
    process = subprocess.Popen([sys.executable, "-c", program, str(tmp_path), CHILD], cwd=str(REPO),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = _finish(process)
    finally:
        _reap_children(tmp_path)
    assert (tmp_path / "a.done").read_text() == "SIGTERM"
    assert "RuntimeError: boom" in stderr and process.returncode == 1


def test_a_child_gets_sigterm_when_the_parent_is_killed(tmp_path):
    """The backstop: SIGKILL leaves the parent no chance to pass anything on; the kernel sends the
    child SIGTERM (PR_SET_PDEATHSIG, set for children started from the main thread)."""
    process = _parent(tmp_path, "a")
    _kill_parent_then_see_the_child_get_sigterm(process, tmp_path)


def _kill_parent_then_see_the_child_get_sigterm(process: subprocess.Popen, tmp_path: Path) -> None:
    """SIGKILL ``process`` (a parent whose child "a" waits for a signal); the child must get SIGTERM."""
    try:
        _await(tmp_path / "a.ready", process)
        process.kill()
        process.wait()  # not communicate(): the child holds the parent's output pipes open
        child = psutil.Process(int((tmp_path / "a.pid").read_text()))
        bound = time.monotonic() + 60
        while not (tmp_path / "a.got").exists():
            assert child.is_running() and time.monotonic() < bound, "the child got no signal"
            time.sleep(0.05)
        (tmp_path / "release").write_text("")
        child.wait(60)
    finally:
        _reap_children(tmp_path)
        process.stdout.close()
        process.stderr.close()
    assert (tmp_path / "a.done").read_text() == "SIGTERM"


#: a parent whose child is started from a worker thread that ends before the parent is killed (the
#: kernel's PR_SET_PDEATHSIG would fire at that thread's end: the child is tethered instead)
THREAD_PARENT = textwrap.dedent("""
    import sys, threading
    from brokerconf.children import Children
    here = sys.argv[1]
    with Children(60.0, name="parent") as children:
        started = []
        command = [sys.executable, "-c", sys.argv[2], here, "a", "handle"]
        worker = threading.Thread(target=lambda: started.append(children.start(command)))
        worker.start()
        worker.join()
        children.wait(started[0])
""")


def test_a_child_started_from_a_worker_thread_gets_sigterm_when_the_parent_is_killed(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", THREAD_PARENT, str(tmp_path), CHILD], cwd=str(REPO),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _kill_parent_then_see_the_child_get_sigterm(process, tmp_path)


def test_run_returns_the_exit_status_without_a_signal():
    from brokerconf import children

    assert children.run([sys.executable, "-c", "import sys; sys.exit(5)"]) == 5
