"""Every expected failure goes through the plugin's one narrowed path (issue 26, "Deviations that
bypass the narrowing"), shown on small literal suites with pytester:

* the lock-loss experiment suites (suites/test_*_lock_loss_experiments.py): with the
  recorded FT-SHARED-1 and FT-JDBC-1 deviations in force, a harness fault (a process left behind,
  a nemesis error, a schedule not kept) fails the test instead of being booked as the broker's
  deviation, while the broker's recorded failure still is booked;
* ``@pytest.mark.known_failure(failure=..., reason=...)``, the tests outside the suites' strict
  xfail: only an AssertionError whose message matches is the expected failure.
"""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

DEVIATIONS = Path(__file__).resolve().parents[2] / "conformance" / "known_deviations" / "fault_tolerance.toml"
NFS_TEST = "test_activemq_has_one_master_when_its_nfs_lock_is_lost"
JDBC_TEST = "test_activemq_has_one_master_when_its_database_link_is_cut"


def recorded(test: str) -> dict:
    """The ActiveMQ deviation entry of ``test`` as recorded in the project."""
    (entry,) = [d for d in tomllib.loads(DEVIATIONS.read_text())["deviation"]
                if d["target"] == "activemq" and d.get("test") == test]
    return entry


def on_the_reference_broker(entry: dict) -> str:
    """``entry`` as a TOML deviation of the reference kind (so the toy runs without ActiveMQ): the
    same spec, test and recorded failure pattern."""
    fields = {**{k: entry[k] for k in ("spec", "test", "summary", "failure")}, "target": "reference",
              "evidence": "copied from conformance/known_deviations/fault_tolerance.toml"}
    return "[[deviation]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


def run(pytester: pytest.Pytester, *args: str):
    matrix = pytester.path / "matrix.json"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--known-deviations",
                                           str(pytester.path / "deviations"), "--conformance-matrix", str(matrix),
                                           "--target", "reference", *args)
    return result, json.loads(matrix.read_text()) if matrix.exists() else None


#: the toy suite: the real harness checks and one-master checks of the experiment suites, fed a
#: verdict of the short ActiveMQ runs' shape (two masters for 1.6 s), with or without a harness fault
EXPERIMENT_TOY = '''
import subprocess, sys
import pytest
from suites.experiment_support import check_harness, child_pids, parametrize_by_kind
from suites.test_nfs_lock_loss_experiments import check_one_master as nfs_one_master
from suites.test_jdbc_lock_loss_experiments import check_one_master as jdbc_one_master

FAULT = {"node": "A", "fault": "partition", "detection_s": 12.1, "takeover_s": 10.4, "overlap_s": 1.6,
         "open_overlap_s": 1.6, "closed_s": 12.1, "back_s": None, "timeline": [[0.0, ["A"], ["A"]]]}
CASES = ["clean", "process left behind", "nemesis error", "two faults", "harness assert"]

def pytest_generate_tests(metafunc):
    parametrize_by_kind(metafunc, {})
    metafunc.parametrize("case", CASES)

def judged(case):
    stats = {"nemesis_errors": ["partition of A: proxy API refused"] if case == "nemesis error" else [],
             "lock_loss": [FAULT, FAULT] if case == "two faults" else [FAULT]}
    verdict = {"run_stats": stats, "checks": {"split_brain": {"valid": True}}}
    if case == "harness assert":  # the old tests' style: an AssertionError of the harness
        assert not [4242], "processes left behind by the experiment: [4242]"
    before = child_pids()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) if case == "process left behind" else None
    try:
        check_harness(verdict, left=child_pids() - before, mounts=[])
    finally:
        if child is not None:
            child.kill()
            child.wait()
    return verdict

@pytest.mark.spec("FT-SHARED-1")
def %s(target_name, case):
    judged(case)
    nfs_one_master(dict(FAULT))

@pytest.mark.spec("FT-JDBC-1")
def %s(target_name, case):
    verdict = judged(case)
    jdbc_one_master(verdict, dict(FAULT))
''' % (NFS_TEST, JDBC_TEST)


def test_a_harness_fault_fails_a_test_whose_deviation_is_recorded(pytester: pytest.Pytester) -> None:
    (pytester.mkdir("deviations") / "toy.toml").write_text(
        on_the_reference_broker(recorded(NFS_TEST)) + "\n" + on_the_reference_broker(recorded(JDBC_TEST)))
    pytester.makepyfile(test_toy=EXPERIMENT_TOY)
    result, data = run(pytester)
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in data["tests"]}
    for test in (NFS_TEST, JDBC_TEST):
        # the broker's recorded failure, with a clean harness: booked as the known deviation
        assert outcomes[f"{test}[reference-clean]"] == "known deviation", outcomes
        for case in ("process left behind", "nemesis error", "two faults", "harness assert"):
            assert outcomes[f"{test}[reference-{case}]"] == "failed", (case, outcomes)
    result.assert_outcomes(xfailed=2, failed=8)
    result.stdout.fnmatch_lines(["*HarnessFault: harness: processes left behind by the experiment*"])
    result.stdout.fnmatch_lines(["*HarnessFault: harness: the nemesis failed*"])
    result.stdout.fnmatch_lines(["*the assertion message does not match the recorded failure*"])
    # the statements' cells: a harness fault is a failure there too, never a known deviation
    assert data["matrix"]["reference"]["FT-SHARED-1"]["outcome"] == "failed"
    assert data["matrix"]["reference"]["FT-JDBC-1"]["outcome"] == "failed"


KNOWN_FAILURE_TOY = r'''
import pytest

@pytest.mark.known_failure(failure=r"^GRP-1: headers None, None(\n|$)", reason="the client drops them")
def test_reproduces():
    headers = (None, None)
    assert headers == ("g", 1), f"GRP-1: headers {headers[0]}, {headers[1]}"

@pytest.mark.known_failure(failure=r"^GRP-1: headers None, None(\n|$)", reason="the client drops them")
def test_other_values():
    headers = ("h", 2)
    assert headers == ("g", 1), f"GRP-1: headers {headers[0]}, {headers[1]}"

@pytest.mark.known_failure(failure=r"^GRP-1: headers None, None(\n|$)", reason="the client drops them")
def test_no_message():
    assert None is not None, "the message was not delivered"

@pytest.mark.known_failure(failure=r"^GRP-1: headers None, None(\n|$)", reason="the client drops them")
def test_other_exception():
    raise ConnectionError("GRP-1: headers None, None")

@pytest.mark.known_failure(failure=r"^GRP-1: headers None, None(\n|$)", reason="the client drops them")
def test_fixed():
    pass
'''


def test_a_known_failure_accepts_only_the_matching_assertion(pytester: pytest.Pytester) -> None:
    pytester.mkdir("deviations")
    pytester.makepyfile(test_toy=KNOWN_FAILURE_TOY)
    result, _ = run(pytester, "-rfxX")
    result.assert_outcomes(xfailed=1, failed=4)
    result.stdout.fnmatch_lines(["XFAIL test_toy.py::test_reproduces - known failure: the client drops them"])
    result.stdout.fnmatch_lines(["*test_fixed*", "*XPASS(strict)*known failure: the client drops them*"])
    for test in ("test_other_values", "test_no_message", "test_other_exception"):
        result.stdout.fnmatch_lines([f"FAILED test_toy.py::{test}*"])


@pytest.mark.parametrize("mark, complaint", [
    ('@pytest.mark.known_failure(reason="no pattern")', "takes failure=REGEX"),
    ('@pytest.mark.known_failure(failure="X-1")', "takes failure=REGEX"),
    ('@pytest.mark.known_failure(failure=".*", reason="anything")', "matches any message"),
    ('@pytest.mark.known_failure(failure="(", reason="broken")', "not a valid regular expression"),
])
def test_a_known_failure_without_a_narrow_pattern_is_refused(pytester: pytest.Pytester, mark, complaint) -> None:
    pytester.mkdir("deviations")
    pytester.makepyfile(test_toy=f"import pytest\n\n{mark}\ndef test_x():\n    assert False, 'X-1'\n")
    result, _ = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{complaint}*"])
