"""The end-of-session leak check (conformance/leak_plugin.py, conformance/leaks.py) fails a run
that leaves something behind and names it, and passes one that cleans up. Each case is a pytest
run in a subprocess with the plugin (`-p conformance.leak_plugin`) on a small test file; what
the inner test leaks on purpose is cleaned up here afterwards, by the PID it wrote down.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.requirements import skip_or_fail
from machinery.waiting import poll

ROOT = Path(__file__).resolve().parent.parent

LEAKY = """
import subprocess, sys, tempfile
from pathlib import Path

def test_starts_a_process_group_and_forgets_it():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)
    Path({pidfile!r}).write_text(str(proc.pid))

def test_makes_a_temporary_directory_and_keeps_it():
    Path({dirfile!r}).write_text(tempfile.mkdtemp(prefix="brokerconf-leak-test-"))
"""

TIDY = """
import subprocess, sys, tempfile

def test_cleans_up():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)
    proc.kill()
    proc.wait()
    with tempfile.TemporaryDirectory(prefix="brokerconf-leak-test-"):
        pass
"""


def run_inner(tmp_path: Path, source: str, *extra: str) -> subprocess.CompletedProcess:
    # rootdir tmp_path: the inner test file there is the run's own code, whose temporary
    # directories the check records (conformance/leaks.py, `roots`)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conformance.leak_plugin", "-p", "no:cacheprovider",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-q", *extra, str(test_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=180)


def clean_up(pidfile: Path, dirfile: Path) -> None:
    if pidfile.exists():
        try:
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)  # the group the inner test started
        except ProcessLookupError:
            pass
    if dirfile.exists():
        Path(dirfile.read_text()).rmdir()


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_a_leaked_process_and_directory_fail_the_run_and_are_named(tmp_path, workers):
    pidfile, dirfile = tmp_path / "pid", tmp_path / "dir"
    extra = ("-n", workers) if workers else ()
    try:
        done = run_inner(tmp_path, LEAKY.format(pidfile=str(pidfile), dirfile=str(dirfile)), *extra)
        out = done.stdout + done.stderr
        assert done.returncode == 1, f"a leaking run must fail (exit 1), got {done.returncode}\n{out}"
        assert "left behind by the tests" in out, out
        pid = pidfile.read_text()
        assert f"process {pid} " in out and "time.sleep(120)" in out, f"the process is not named\n{out}"
        assert f"temporary directory {dirfile.read_text()}" in out, f"the directory is not named\n{out}"
        assert "2 passed" in out, out
    finally:
        clean_up(pidfile, dirfile)


def test_a_run_that_cleans_up_passes(tmp_path):
    done = run_inner(tmp_path, TIDY)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"exit {done.returncode}\n{out}"
    assert "left behind" not in out, out


def test_a_child_of_the_started_process_is_found_through_its_group(tmp_path):
    """The launcher pattern: a script started in its own session starts the real server (a JVM
    behind a shell script) and exits; the server is found through the recorded process group."""
    pidfile = tmp_path / "grandchild"
    source = f"""
    import subprocess, sys, time
    from pathlib import Path

    def test_launcher_exits_but_its_child_stays():
        code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
                "'import time; time.sleep(120)']); open({str(pidfile)!r}, 'w').write(str(p.pid))")
        subprocess.run([sys.executable, "-c", code], start_new_session=True, check=True)
    """
    try:
        done = run_inner(tmp_path, source)
        out = done.stdout + done.stderr
        assert done.returncode == 1, f"exit {done.returncode}\n{out}"
        assert f"process {pidfile.read_text()} " in out and "in the process group of" in out, out
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _can_mount() -> str | None:
    """None if this process may mount a tmpfs, else why not."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "mounting needs root and mount(8)"
    return None


@pytest.mark.parametrize("how", ["mount-command", "helper-argument"])
def test_a_mount_left_behind_fails_the_run(tmp_path, how):
    """Both ways a mount is recognised as the session's: `mount ... DIR` itself, or a new mount
    at a path a helper process was given on its command line (how a FUSE client is started)."""
    reason = _can_mount()
    if reason:
        skip_or_fail("netns", reason)  # the same root-only machinery as the netns nemesis
    point = tmp_path / "mnt"
    point.mkdir()
    if how == "mount-command":
        body = f"subprocess.run(['mount', '-t', 'tmpfs', 'none', {str(point)!r}], check=True)"
    else:
        body = (f"subprocess.run(['sh', '-c', 'mount -t tmpfs none \"$0\"', {str(point)!r}], check=True)")
    source = f"""
    import subprocess

    def test_mounts_and_forgets():
        {body}
    """
    try:
        done = run_inner(tmp_path, source)
        out = done.stdout + done.stderr
        assert done.returncode == 1, f"exit {done.returncode}\n{out}"
        assert f"mount {point}" in out and "still mounted" in out, out
    finally:
        subprocess.run(["umount", str(point)], capture_output=True)


def test_a_group_whose_id_another_process_now_leads_is_not_ours():
    """PIDs wrap (pid_max 32768) within a CI run: a recorded group leader that ended may see its
    ID taken by an unrelated process that leads a group of its own (seen: a shell's `sleep`
    reported as a FUSE mount's leftover). Simulated with a live group whose leader's start time
    differs from the one recorded; the recorded start itself still finds the group."""
    from conformance.leaks import StartedProcess, StartedRegistry, _stat

    leader = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        def member_started() -> bool:
            return any(int(e.name) != leader.pid and (_stat(int(e.name)) or ("", 0))[1] == leader.pid
                       for e in os.scandir("/proc") if e.name.isdigit())

        assert poll(member_started, timeout=10), "the group's sleep never started"
        start = _stat(leader.pid)[3]
        reused = StartedRegistry(processes=[StartedProcess(leader.pid, start - 1, True, "an ended mount", "here")])
        assert reused.leftovers(grace=0) == []
        ours = StartedRegistry(processes=[StartedProcess(leader.pid, start, True, "the shell", "here")])
        assert any("in the process group of" in line for line in ours.leftovers(grace=0))
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(10)
