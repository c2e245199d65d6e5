"""Interrupt a command that launched brokers and check it left nothing behind (the tests of
tests/brokerconf/test_signals.py and tests/conformance/test_signals.py).

`interrupt` starts the command in a session of its own, waits until its tree has what the test
needs running (a broker listening), remembers every process of that tree, sends the signal to the
command's PID only (as ``kill PID`` or a CI runner would), waits for the command to exit and
reports which of the remembered processes still run. Each leftover is then SIGKILLed by its own
handle (psutil checks the PID still names the process it remembered), so a failing test does not
leak either; so is the command's group if it had to be abandoned.

A tether watchdog (machinery/tether.py) in the tree is not counted when the command exits: it ends
on its own once its launcher has, after ending what that launcher left running. It gets that time;
what it had to end it writes to a report file (`REPORT_ENV`), and each such line counts as left
too, so the watchdog cannot hide a process the command failed to stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from machinery.tether import REPORT_ENV, is_watchdog

REPO = Path(__file__).resolve().parent.parent

#: how long a command may take to start its broker, and to stop after the signal, before the test
#: gives up on it (not a timing assertion: a bound for a hung run, far above the normal seconds)
START_BOUND_S = 240.0
STOP_BOUND_S = 240.0

Ready = Callable[[psutil.Process, list[psutil.Process]], bool]


@dataclass
class Interrupted:
    returncode: int
    output: str
    before: list[str]   # the tree when the signal was sent: "PID command"
    left: list[str]     # what of it still ran after the command exited (killed since)

    def describe(self) -> str:
        return (f"exit status {self.returncode}\nprocesses before the signal:\n  " + "\n  ".join(self.before)
                + "\nleft after the command exited:\n  " + ("\n  ".join(self.left) or "(none)")
                + f"\noutput (tail):\n{self.output[-4000:]}")


def listening(proc: psutil.Process) -> bool:
    """Whether ``proc`` has a TCP socket listening (a broker that has bound its ports)."""
    try:
        return any(c.status == psutil.CONN_LISTEN for c in proc.net_connections(kind="tcp"))
    except psutil.Error:
        return False


def broker_listening(marker: str) -> Ready:
    """Ready once a descendant whose command line contains ``marker`` listens on a port."""
    def ready(root: psutil.Process, tree: list[psutil.Process]) -> bool:
        return any(marker in command_line(p) and listening(p) for p in tree)
    return ready


def itself_listening(root: psutil.Process, tree: list[psutil.Process]) -> bool:  # noqa: ARG001
    """Ready once the command's own process listens (`brokerconf broker`: the broker is the command)."""
    return listening(root)


def interrupt(command: list[str], signum: int, ready: Ready, *, cwd: Path = REPO, log: Path,
              env: dict[str, str] | None = None, to_group: bool = False, settle: bool = False) -> Interrupted:
    """Run ``command``, wait for ``ready``, send ``signum`` to it, wait for it to end; see the module doc.
    ``to_group``: to its whole process group instead, as a terminal's Ctrl-C or ``timeout`` does
    (what is in sessions of its own, the brokers, is not in it). ``settle``: after the command
    exited, wait for the remembered processes to end before looking (the command was SIGKILLed
    and its children stop on their own)."""
    tethered = log.with_name(log.name + ".tether")
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, **(env or {}), REPORT_ENV: str(tethered)})
    root = psutil.Process(process.pid)
    tree: list[psutil.Process] = []
    watchdogs: list[psutil.Process] = []
    try:
        bound = time.monotonic() + START_BOUND_S
        while True:
            tree = _tree(root)
            if ready(root, tree):
                break
            if process.poll() is not None:
                raise AssertionError(f"setup: the command exited ({process.returncode}) before its broker was "
                                     f"running:\n{log.read_text(errors='replace')[-4000:]}")
            if time.monotonic() > bound:
                raise AssertionError(f"setup: no broker running after {START_BOUND_S:g} s:\n"
                                     f"{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.2)
        tree = _tree(root)  # again: what started beside the broker meanwhile
        before = [f"{p.pid} {command_line(p)[:160]}" for p in tree]
        # told apart now, while every command line is readable: a watchdog that is ending when it is
        # looked at again has none any more (CI counted one, "457 ?", as left by the command)
        watchdogs = [p for p in tree if is_watchdog(_argv(p))]
        if to_group:
            os.killpg(process.pid, signum)  # its own session, made above
        else:
            process.send_signal(signum)
        try:
            process.wait(STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the command did not exit within {STOP_BOUND_S:g} s of "
                                 f"{signal.Signals(signum).name}:\n{log.read_text(errors='replace')[-4000:]}") from None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # its own session, made above: nothing else is in it
            process.wait()
        if settle:
            # the command is gone; what it left is winding down on its own (bounded, not timed)
            psutil.wait_procs(_alive(tree), timeout=STOP_BOUND_S)
        left = [p for p in _alive(tree) if p not in watchdogs]
        psutil.wait_procs(watchdogs, timeout=STOP_BOUND_S)  # see the module doc (bounded, not timed)
        left += _alive(watchdogs)
        for proc in left:
            try:
                proc.kill()  # psutil refuses if the PID now names another process
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=30)
    ended = tethered.read_text(errors="replace").splitlines() if tethered.exists() else []
    return Interrupted(process.returncode, log.read_text(errors="replace"), before,
                       [f"{p.pid} {command_line(p)[:160]}" for p in left]
                       + [f"ended by a tether watchdog, not by the command: {line}" for line in ended])


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return root.children(recursive=True)
    except psutil.Error:
        return []


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            pass
    return alive


def command_line(proc: psutil.Process) -> str:
    return " ".join(_argv(proc)) or "?"


def _argv(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def brokerconf(*args: str) -> list[str]:
    return [sys.executable, "-m", "brokerconf.cli", *args]
