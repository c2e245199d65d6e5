"""No deadline loop written by hand outside machinery/waiting.py (issue 27, "Waiting defined once").

A condition is awaited with `machinery.waiting.wait_until` / `poll`; a loop that does work each
round (a reader that keeps what it receives, a retry that sends again) counts down a
`machinery.waiting.Deadline`. What this test refuses is the clock arithmetic written again in
place: a ``while`` loop whose condition compares ``time.monotonic()`` / ``time.time()`` (or a name
computed from it in the loop), or that has an ``if`` making such a comparison and leaving the loop
on it (the ``while True: ... if time.monotonic() >= deadline: raise`` form); a timer that only acts
on the clock (a broadcast due, a tick) is no deadline. Each such loop that remains is
in `ALLOWED`, by file and function, with the reason it is not a wait.

Read with `ast` (tests/branch_scan.py finds comparisons of a kind's *name* with literals; here
the operand is a clock call, so the scan is its own). Test files and the suites are not scanned:
their waits are the tests' own business.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.branch_scan import ROOT

#: every top-level directory with code that is not a test
SCANNED = ("benchmarks", "brokerconf", "chaos", "conformance", "fuzz", "machinery", "reference_broker", "reports",
           "scripts")
NOT_SCANNED = ()  # the suites (suites/) are test code, outside SCANNED
#: where the waiting is written, once
DEFINED_HERE = "machinery/waiting.py"

#: file::function -> why the loop there compares the clock itself
ALLOWED: dict[str, str] = {
    "conformance/waiting.py::wait_stable":
        "a quiet window: the condition is how long the value has stayed the same (since its last "
        "change); its bound is a Deadline",
    "chaos/workloads/cluster.py::ClusterWorkload._read_all":
        "a quiet window: reads every drain until nothing arrived for `quiet` s; there is no deadline",
    "chaos/lockloss_fault.py::LockLossFault._watch_group":
        "an observer: each round records who serves and listens, and it ends `settle_s` after the "
        "last thing it looks for happened (a settle window measured from an event, not a deadline)",
    "chaos/experiment.py::_run_with_history":
        "the run's clock, not a wait: each round fires the nemesis steps whose offset has come, and "
        "the run ends `recovery_s` after the last heal",
    "chaos/experiment.py::_drain_cluster":
        "tests/chaos/test_cluster_drain.py drives this wait with a fake clock through the module's "
        "`time` (it checks the default covers two call-timeouts without waiting 80 s); it moves to a "
        "Deadline when that test can hand it a clock",
    "conformance/bench/soak.py::run_soak":
        "the soak's clock, not a wait: it samples on a schedule until the run's duration is over",
    "machinery/tether.py::_end":
        "the watchdog's escalation: each round SIGKILLs what outlived its own grace period, and it "
        "gives up 5 s after the last SIGKILL",
    "benchmarks/lockloss_bench.py::one_run":
        "a measurement: the time from the cut to B taking the lock is the result it reports",
}

_CLOCK_ATTRIBUTES = {"monotonic", "time"}


def _clock_aliases(tree: ast.AST) -> set[str]:
    """Names bound by ``from time import monotonic`` / ``time`` (``as`` included)."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "time"
            for alias in node.names if alias.name in _CLOCK_ATTRIBUTES}


def _reads_clock(node: ast.AST, aliases: set[str], clocked: set[str]) -> bool:
    """Whether an expression calls the clock, or uses a name computed from it in the loop."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if (isinstance(func, ast.Attribute) and func.attr in _CLOCK_ATTRIBUTES
                    and isinstance(func.value, ast.Name) and func.value.id == "time"):
                return True
            if isinstance(func, ast.Name) and func.id in aliases:
                return True
        if isinstance(sub, ast.Name) and sub.id in clocked:
            return True
    return False


def _compares_clock(node: ast.AST, aliases: set[str], clocked: set[str]) -> bool:
    return any(isinstance(sub, ast.Compare) and _reads_clock(sub, aliases, clocked) for sub in ast.walk(node))


def _leaves(branch: ast.If) -> bool:
    """Whether a branch of the ``if`` leaves the loop (raise, return, break): the clock then ends
    the loop, as a deadline does. A timer that only acts (broadcast, tick, report) stays in it."""
    return any(isinstance(node, (ast.Raise, ast.Return, ast.Break))
               for statement in branch.body + branch.orelse for node in _walk_scope(statement))


def _walk_scope(node: ast.AST) -> list[ast.AST]:
    """The node and everything in it, nested functions and classes left out (their own scope)."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        found.append(current)
        pending.extend(ast.iter_child_nodes(current))
    return found


def is_deadline_loop(loop: ast.While, aliases: set[str]) -> bool:
    """A ``while`` whose condition compares the clock, or with an ``if`` on the clock that leaves it."""
    body = [node for statement in loop.body for node in _walk_scope(statement)]
    clocked = {target.id for node in body if isinstance(node, ast.Assign) and _reads_clock(node.value, aliases, set())
               for target in node.targets if isinstance(target, ast.Name)}
    clocked |= {node.target.id for node in ast.walk(loop.test)
                if isinstance(node, ast.NamedExpr) and _reads_clock(node.value, aliases, set())}
    return (_compares_clock(loop.test, aliases, clocked)
            or any(isinstance(node, ast.If) and _compares_clock(node.test, aliases, clocked) and _leaves(node)
                   for node in body))


def deadline_loops(source: str) -> list[tuple[str, int]]:
    """(enclosing function's qualified name, line) of every hand-written deadline loop."""
    tree = ast.parse(source)
    aliases = _clock_aliases(tree)
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = scope + (child.name,)
            if isinstance(child, ast.While) and is_deadline_loop(child, aliases):
                found.append((".".join(scope) or "<module>", child.lineno))
            visit(child, inner)

    visit(tree, ())
    return found


def scan(root: Path) -> dict[str, list[int]]:
    """file::function -> lines of its hand-written deadline loops, over the code that is not a test."""
    found: dict[str, list[int]] = {}
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative == DEFINED_HERE or relative.startswith(NOT_SCANNED):
                continue
            for function, line in deadline_loops(path.read_text(encoding="utf-8")):
                found.setdefault(f"{relative}::{function}", []).append(line)
    return found


def test_no_deadline_loop_is_written_by_hand_outside_the_allowed_ones():
    found = scan(ROOT)
    new = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert not new, ("deadline loops written by hand (use machinery.waiting: wait_until / poll for a condition, a "
                     "Deadline for a loop that works each round; or allow one here, with the reason):\n"
                     + "\n".join(f"{key} line(s) {lines}" for key, lines in sorted(new.items())))
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"allowed loops no longer there (drop them from ALLOWED): {stale}"


# --------------------------------------------------------------------------- the scan itself


def test_the_forms_written_before_issue_27_are_found():
    # the four shapes the tree had (each from a file converted in issue 27)
    source = '''
import time
from time import monotonic as now_s

def condition_in_the_test(deadline):
    while time.monotonic() < deadline:
        time.sleep(0.1)

def check_inside_the_body(deadline):
    while True:
        try:
            return call()
        except OSError:
            if time.monotonic() >= deadline:
                raise

def remaining_by_walrus(deadline):
    while (left := deadline - time.monotonic()) > 0:
        read(left)

def a_name_from_the_clock(deadline):
    while True:
        now = now_s()
        if now >= deadline:
            return
'''
    assert [function for function, _ in deadline_loops(source)] == [
        "condition_in_the_test", "check_inside_the_body", "remaining_by_walrus", "a_name_from_the_clock"]


def test_the_helpers_and_other_loops_are_not_taken_for_deadline_loops():
    source = '''
import time
from machinery.waiting import Deadline, wait_until

def helpers(timeout):
    wait_until(ready, timeout, 0.1)
    deadline = Deadline(timeout)
    while not deadline.expired():
        read(deadline.remaining())

def a_clock_read_in_a_loop_without_comparing_it(items):
    while items:
        stamp(items.pop(), time.monotonic())

def an_injected_clock(self, deadline):
    while self._clock() < deadline:
        pass

def a_nested_function_is_its_own_scope():
    while True:
        def later():
            return time.monotonic() > 5
        break
'''
    assert deadline_loops(source) == []


def test_the_scan_reads_the_tree():
    # it must be able to fail on the real tree: the allowed loops are found where they are
    found = scan(ROOT)
    assert "conformance/waiting.py::wait_stable" in found and len(found) >= len(ALLOWED)
