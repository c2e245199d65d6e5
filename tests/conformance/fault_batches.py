"""Group the faults of tests/conformance/broken_reference.py into suite runs, run one, and judge it.

Several faults of one suite go into one run (``BROKERCONF_BREAK=a,b,c``) when none of them touches
a statement another must fail: then each expected failure can only come from its own fault, and
every statement no fault of the batch touches must still not fail (the broker otherwise works, and
the faults do not leak into other rules).

A fault touches the statements it must fail, those it may fail besides (`Fault.collateral`), and
the statements checked by the same test function as one of those (a test marked with several
IDs stops at its first failed assertion, and all its IDs are booked failed).
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from conformance.leak_plugin import SECTION_TITLE, STILL_THERE
from tests.conformance.broken_reference import FAULTS, Fault

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "suites"
# A whole suite under load (CI saw the groups suite take 150 s on a loaded 2-core machine)
SUITE_TIMEOUT = 600
#: broken suite runs at once (`ConcurrentRuns`): each is a pytest with the reference broker in its
#: own process, waiting far more than computing
PARALLEL = 4
FAILED = ("failed", "error")


def _spec_ids(decorator: ast.expr) -> list[str]:
    """The IDs of a ``@pytest.mark.spec("A", "B")`` decorator, [] for any other."""
    if isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) and decorator.func.attr == "spec":
        return [a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return []


def checked_together(suite: str) -> dict[str, set[str]]:
    """Statement -> the statements checked by the same test function of ``suite`` (read from its
    ``@pytest.mark.spec`` decorators, without importing it)."""
    tree = ast.parse((SUITES / suite).read_text())
    together: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            ids = {i for d in node.decorator_list for i in _spec_ids(d)}
            for spec in ids:
                together.setdefault(spec, set()).update(ids)
    return together


def touched(fault: Fault) -> set[str]:
    together = checked_together(fault.suite)
    return {s for spec in (*fault.breaks, *fault.collateral) for s in together.get(spec, {spec})}


@dataclass(frozen=True)
class Batch:
    suite: str
    faults: tuple[Fault, ...]

    @property
    def name(self) -> str:
        return f"{self.suite.removeprefix('test_').removesuffix('.py')}:{'+'.join(f.name for f in self.faults)}"

    @property
    def touched(self) -> set[str]:
        return {spec for f in self.faults for spec in touched(f)}

    @property
    def fault_names(self) -> str:
        """``BROKERCONF_BREAK``'s value for the batch."""
        return ",".join(f.name for f in self.faults)


def batches(faults: list[Fault] | None = None, *, alone: bool = False) -> list[Batch]:
    """First fit, in registration order: a fault joins the first batch of its suite where it
    touches no statement another fault must fail, and no fault there touches one it must fail
    (``alone``: one batch per fault)."""
    out: list[list[Fault]] = []

    def fits(each: Fault, batch: list[Fault]) -> bool:
        return batch[0].suite == each.suite and all(
            not touched(each) & set(other.breaks) and not touched(other) & set(each.breaks) for other in batch)

    for each in FAULTS.values() if faults is None else faults:
        home = None if alone else next((b for b in out if fits(each, b)), None)
        if home is None:
            out.append([each])
        else:
            home.append(each)
    return [Batch(b[0].suite, tuple(b)) for b in out]


@dataclass
class Verdict:
    batch: Batch
    outcomes: dict[str, str]
    seconds: float
    exit_code: int
    output_tail: str = ""
    reasons: dict[str, str] = field(default_factory=dict)
    caught: list[str] = field(default_factory=list)
    uncaught: list[str] = field(default_factory=list)
    # statements no fault of the batch touches that failed anyway
    unexpected: dict[str, str] = field(default_factory=dict)
    # what the suite run left running or mounted (its leak check's report)
    left_behind: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.uncaught and not self.unexpected


def broken_suite_command(suite: str, matrix_file: Path) -> list[str]:
    """pytest on one suite against the reference broker with the faults BROKERCONF_BREAK names.
    The leak check rides along (``-p conformance.leak_plugin``): these runs fail on purpose, so
    their exit status cannot tell a leak, and the runs are outside tests/ where conftest.py adds
    it; `left_behind` reads its report from the output."""
    return [sys.executable, "-m", "pytest", str(SUITES / suite), "--target", "reference", "-q",
            "-p", "no:cacheprovider", "-p", "tests.conformance.broken_reference", "-p", "conformance.leak_plugin",
            f"--conformance-matrix={matrix_file}", "-o", "addopts="]


def left_behind(output: str) -> list[str]:
    """The leak check's lines in a child pytest's output (empty: it found nothing)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if SECTION_TITLE in line and line.startswith("=")), None)
    if start is None:
        return []
    found = []
    for line in lines[start + 1:]:
        if line.startswith("=") or STILL_THERE in line:
            break
        found.append(line)
    return found


@dataclass
class SuiteRun:
    """One finished run of a suite against the reference broker with the faults ``faults`` names."""
    suite: str
    faults: str
    exit_code: int
    seconds: float
    stdout: str
    stderr: str
    matrix_file: Path

    @property
    def matrix(self) -> dict | None:
        return json.loads(self.matrix_file.read_text()) if self.matrix_file.exists() else None

    @property
    def output_tail(self) -> str:
        return self.stdout[-3000:] + self.stderr[-2000:]

    @property
    def left_behind(self) -> list[str]:
        return left_behind(self.stdout)


def run_broken_suite(suite: str, faults: str, workdir: Path, started=lambda proc: None) -> SuiteRun:
    """Run ``suite`` against the reference broker with ``faults`` (comma-separated) into ``workdir``.
    ``started(proc)`` is handed the child's handle, so a caller can stop a run it gave up on."""
    workdir.mkdir(parents=True, exist_ok=True)
    matrix_file = workdir / "matrix.json"
    env = {**os.environ, "BROKERCONF_BREAK": faults}
    began = time.monotonic()
    proc = subprocess.Popen(broken_suite_command(suite, matrix_file), cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    started(proc)
    try:
        stdout, stderr = proc.communicate(timeout=SUITE_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        stderr += f"\n[the suite run was stopped after {SUITE_TIMEOUT} s]"
    return SuiteRun(suite, faults, proc.returncode, time.monotonic() - began, stdout, stderr, matrix_file)


def judge_batch(batch: Batch, run: SuiteRun) -> Verdict:
    """The batch's verdict from its suite run's matrix: which faults were caught, what else failed."""
    outcomes: dict[str, str] = {}
    reasons: dict[str, str] = {}
    if (matrix := run.matrix) is not None:
        for spec, cell in matrix["matrix"]["reference"].items():
            outcomes[spec], reasons[spec] = cell["outcome"], cell.get("reason", "")
    verdict = Verdict(batch, outcomes, run.seconds, run.exit_code, run.output_tail, reasons,
                      left_behind=run.left_behind)
    for each in batch.faults:
        caught = all(outcomes.get(spec) == "failed" for spec in each.breaks)
        (verdict.caught if caught else verdict.uncaught).append(each.name)
    touched = batch.touched
    verdict.unexpected = {spec: f"{outcome}: {reasons[spec][:300]}" for spec, outcome in outcomes.items()
                          if outcome in FAILED and spec not in touched}
    return verdict


def run_batch(batch: Batch, workdir: Path) -> Verdict:
    """Run the batch's suite against the reference broker with its faults; judge the matrix."""
    return judge_batch(batch, run_broken_suite(batch.suite, batch.fault_names, workdir))


class ConcurrentRuns:
    """Broken suite runs made several at a time, each once: ``submit`` starts one (queued behind
    `PARALLEL` others), ``result`` waits for it. A run mostly waits (for the deliveries a broken
    broker never makes, up to the suite's own bounds: the networks batch used 8 s of CPU in 313 s),
    so one after another they kept a test worker idle for most of half an hour. ``close`` stops
    what is still running, by its handle."""

    def __init__(self, root: Path, parallel: int = PARALLEL) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.root = root
        self._pool = ThreadPoolExecutor(parallel, thread_name_prefix="broken-suite-run")
        self._futures: dict[tuple[str, str], object] = {}
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def submit(self, suite: str, faults: str) -> None:
        key = (suite, faults)
        with self._lock:
            if key not in self._futures:
                workdir = self.root / f"run{len(self._futures)}-{suite.removeprefix('test_').removesuffix('.py')}"
                self._futures[key] = self._pool.submit(self._run, suite, faults, workdir)

    def result(self, suite: str, faults: str) -> SuiteRun:
        self.submit(suite, faults)
        return self._futures[(suite, faults)].result()

    def running(self) -> list[subprocess.Popen]:
        """The runs' processes still going."""
        with self._lock:
            return [proc for proc in self._running if proc.poll() is None]

    def close(self) -> None:
        for future in self._futures.values():
            future.cancel()
        running = self.running()
        for proc in running:  # a run still going when its tests are done or interrupted
            proc.send_signal(signal.SIGINT)  # pytest's own interruption: its fixtures stop their brokers
        for proc in running:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._pool.shutdown(wait=True)

    def _run(self, suite: str, faults: str, workdir: Path) -> SuiteRun:
        def started(proc: subprocess.Popen) -> None:
            with self._lock:
                self._running.add(proc)

        try:
            return run_broken_suite(suite, faults, workdir, started)
        finally:
            with self._lock:
                self._running = {p for p in self._running if p.poll() is None}
