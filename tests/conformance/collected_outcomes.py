"""What a target's matrix column would hold if every collected suite test kept its verdict, from a
collection alone: ``python -m tests.conformance.collected_outcomes TARGET [SUITE ...]`` prints JSON
``{spec: {"outcome": ..., "reason": ...}}`` with the matrix's outcome names (conformance/matrix.py):
"passed" standing for "a collected test will run on this target and give its verdict", "known
deviation" for a test the plugin marks as a recorded deviation's strict xfail.

It mirrors `Matrix.cell` for one broker column: a statement with no test for the target is "not
checked" (or "not applicable" when it does not apply to the target's kind, or is not observable);
a test the plugin would skip at setup as not applicable (`_not_applicable_reason`: a capability
the target lacks, with that reason) does not count as checking; a client statement counts for the
broker only where a test checks its broker's part; of a statement's tests the worst outcome counts.
What it cannot see is a verdict, nor a test that finds itself not applicable only once it runs: that
each test passes (or fails as its recorded deviation) is asserted by running it (the test run runs
suites against every configured target).

A collection of its own (a subprocess): pytest's plugins and the conformance plugin's state must
not mix with the test run that asks.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.matrix import NOT_A_BROKER_STATEMENT
from conformance.plugin import DEVIATIONS, STATE, _marker_args, _not_applicable_reason, _params

ROOT = Path(__file__).resolve().parents[2]


class _Collector:
    def __init__(self, target: str) -> None:
        self.target = target
        self.runnable: set[str] = set()
        self.deviating: set[str] = set()
        #: spec -> the reason of its first test skipped at setup as not applicable
        self.skipped: dict[str, str] = {}
        self.state = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.state = session.config.stash[STATE]
        for item in session.items:
            if _params(item).get("target_name") != self.target:
                continue
            broker_part = _marker_args(item, "broker_part")
            specs = [s for s in _marker_args(item, "spec")
                     if not self.state.catalogue[s].about_client or s in broker_part]
            try:
                reason = _not_applicable_reason(item, self.state)
            except pytest.fail.Exception:  # a requirement this machine must meet: the test fails, not skips
                reason = None
            if reason:
                for spec in specs:
                    self.skipped.setdefault(spec, reason)
                continue
            self.runnable.update(specs)
            if item.stash.get(DEVIATIONS, None):
                self.deviating.update(specs)

    def cells(self) -> dict[str, dict[str, str]]:
        kind = self.state.targets[self.target].kind
        result = {}
        for spec, statement in self.state.catalogue.items():
            documented = f"documented for {', '.join(sorted(statement.applies_to))}"
            if statement.about_client and spec not in self.runnable and spec not in self.skipped:
                result[spec] = {"outcome": NOT_A_BROKER_STATEMENT, "reason": ""}
            elif not statement.applies(kind):
                result[spec] = {"outcome": "not applicable", "reason": documented}
            elif spec in self.deviating:
                result[spec] = {"outcome": "known deviation", "reason": ""}
            elif spec in self.runnable:
                result[spec] = {"outcome": "passed", "reason": ""}
            elif spec in self.skipped:
                result[spec] = {"outcome": "not applicable", "reason": self.skipped[spec]}
            elif statement.not_observable:
                result[spec] = {"outcome": "not applicable", "reason": "not observable: " + statement.not_observable}
            else:
                result[spec] = {"outcome": "not checked", "reason": ""}
        return result


def collected_cells(target: str, suites: list[str] | None = None) -> dict[str, dict[str, str]]:
    """Over ``suites`` (files; default all of suites), as `brokerconf suite --suite` runs them."""
    collector = _Collector(target)
    command = [*(suites or [str(ROOT / "suites")]), "--collect-only", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", f"--rootdir={ROOT}", "--target", target]
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = pytest.main(command, plugins=[collector])
    if collector.state is None or status != 0:
        raise SystemExit(f"collecting the suites for {target} failed (pytest exit {status}):\n"
                         f"{output.getvalue()[-3000:]}")
    return collector.cells()


def outcomes(cells: dict[str, dict[str, str]]) -> dict[str, str]:
    return {spec: cell["outcome"] for spec, cell in cells.items()}


def in_subprocess(target: str, suites: list[str] | tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """`collected_cells` from a test: in an interpreter of its own (see above)."""
    proc = subprocess.run([sys.executable, "-m", "tests.conformance.collected_outcomes", target, *suites], cwd=ROOT,
                          capture_output=True, text=True, timeout=110, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


if __name__ == "__main__":
    print(json.dumps(collected_cells(sys.argv[1], sys.argv[2:]), indent=1, sort_keys=True))
