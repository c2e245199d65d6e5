"""Every suite test has the suites' own bound (suites/conftest.py), whatever runs them: the test
command's 120 s default once stopped an Artemis cluster test in CI while its launch was still within
its own, longer bounds, with no broker log to show for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from suites.conftest import SUITE_TEST_BOUND_S

REPO = Path(__file__).resolve().parents[1]
PROBE = '''
import pytest

def pytest_collection_finish(session):
    for item in session.items:
        marker = item.get_closest_marker("timeout")
        print("BOUND", item.nodeid, marker.args[0] if marker else None)
'''


def _bounds(tmp_path: Path, *paths: str) -> dict[str, object]:
    (tmp_path / "bound_probe.py").write_text(PROBE)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "bound_probe", "--target", "reference", *paths],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line.split() for line in proc.stdout.splitlines() if line.startswith("BOUND ")]
    return {nodeid: None if bound == "None" else int(bound) for _, nodeid, bound in lines}


def test_suite_tests_get_the_suites_bound_and_keep_their_own_where_they_set_one(tmp_path):
    bounds = _bounds(tmp_path, "suites/test_cluster_link_faults.py", "suites/test_master_slave.py",
                     "tests/test_suite_test_bound.py")
    default_half = next(n for n in bounds if "keeps_trying_to_reach_a_peer_unreachable" in n)
    assert bounds[default_half] == SUITE_TEST_BOUND_S, bounds
    # test_master_slave.py bounds one test at 420 s itself: it keeps that, its others get the suites'
    master_slave = [b for n, b in bounds.items() if "test_master_slave.py" in n]
    assert 420 in master_slave and set(master_slave) == {420, SUITE_TEST_BOUND_S}, master_slave
    # the project's own tests keep the ini's bound (no marker of the suites')
    assert bounds["tests/test_suite_test_bound.py::test_suite_tests_get_the_suites_bound_and_keep_their_own_where_they_set_one"] is None
