"""Ordering a parallel run by recorded cost, and the run's timing (conformance/schedule.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import schedule

REPO = Path(__file__).resolve().parents[2]


class FakeItem:
    def __init__(self, nodeid: str, group: str | None = None, slow: bool = False) -> None:
        self.nodeid = nodeid
        self.group = group
        self.slow = slow

    def iter_markers(self, name):
        if name == "xdist_group" and self.group:
            yield pytest.mark.xdist_group(self.group).mark
        if name == "slow" and self.slow:
            yield pytest.mark.slow.mark


def test_units_go_out_costliest_first_each_units_tests_together_in_their_order():
    items = [FakeItem("a.py::t1", "a.py(reference)"), FakeItem("b.py::t1"), FakeItem("a.py::t2", "a.py(reference)"),
             FakeItem("c.py::t1", "c.py(artemis)"), FakeItem("c.py::t2", "c.py(artemis)"), FakeItem("d.py::t1")]
    costs = {"c.py(artemis)": 90.0, "a.py(reference)": 12.0, "d.py::t1": 30.0}
    schedule.order_by_cost(items, costs)
    assert [i.nodeid for i in items] == ["c.py::t1", "c.py::t2", "d.py::t1", "a.py::t1", "a.py::t2", "b.py::t1"]


def test_unrecorded_units_keep_the_collection_order_after_the_recorded_ones():
    items = [FakeItem(f"m.py::t{n}") for n in range(5)]
    schedule.order_by_cost(items, {"m.py::t3": 2.0})
    assert [i.nodeid for i in items] == ["m.py::t3", "m.py::t0", "m.py::t1", "m.py::t2", "m.py::t4"]


def test_a_new_slow_test_is_costed_like_its_modules_recorded_tests_not_as_free():
    """A slow test renamed or added since the costs were recorded: counted as free it would go out
    last and keep one worker busy after the others finished."""
    items = [FakeItem("fast.py::t1"), FakeItem("x.py::t_cheap"), FakeItem("chaos.py::t_new", slow=True),
             FakeItem("y.py::t_mid")]
    costs = {"chaos.py::t_a": 60.0, "chaos.py::t_b": 80.0, "chaos.py::t_c": 100.0, "x.py::t_cheap": 5.0,
             "y.py::t_mid": 70.0}
    schedule.order_by_cost(items, costs)
    # the new test counts the median of its file's recorded tests (80 s); an unmarked new one is cheap
    assert [i.nodeid for i in items] == ["chaos.py::t_new", "y.py::t_mid", "x.py::t_cheap", "fast.py::t1"]
    assert schedule.estimated_cost("new.py::t", True, costs) == 70.0  # a new file: the median of all


def test_a_suite_module_new_to_a_target_costs_what_it_costs_on_the_others():
    costs = {"s/test_a.py(reference)": 40.0, "s/test_a.py(artemis)": 90.0, "s/test_b.py(reference)": 10.0,
             "s/test_c.py(reference)": 20.0, "t.py::x": 500.0}
    assert schedule.estimated_cost("s/test_a.py(activemq)", False, costs) == 90.0
    # a new suite module: the median of the recorded suite units (10, 20, 40, 90: 30 s), not the tests' costs
    assert schedule.estimated_cost("s/test_new.py(reference)", False, costs) == 30.0
    assert schedule.estimated_cost("t.py::y", False, costs) == schedule.UNRECORDED


@pytest.mark.parametrize("nodeid, unit", [
    ("suites/test_groups.py::test_x[reference-stomp]@suites/test_groups.py(reference)",
     "suites/test_groups.py(reference)"),
    ("tests/x.py::test_a[p@q]", "tests/x.py::test_a[p@q]"),  # an "@" inside the parameters is no group
    ("tests/x.py::test_a", "tests/x.py::test_a"),
])
def test_the_unit_of_a_node_id_is_read_as_pytest_xdist_reads_it(nodeid, unit):
    assert schedule.unit_of_nodeid(nodeid) == unit


class FakeReport:
    def __init__(self, nodeid, start, stop, worker_id=None, cpu=None):
        self.nodeid, self.start, self.stop, self.duration = nodeid, start, stop, stop - start
        if worker_id:
            self.worker_id = worker_id
        if cpu is not None:
            setattr(self, schedule.CPU_ATTRIBUTE, cpu)


def test_timing_sums_units_and_spans_targets_across_workers():
    timing = schedule.RunTiming()
    group = "@suites/test_groups.py({})"
    timing.add(FakeReport("suites/test_groups.py::a" + group.format("artemis"), 100.0, 103.0, cpu=2.5))
    timing.add(FakeReport("suites/test_groups.py::b" + group.format("artemis"), 110.0, 111.0, cpu=0.25))
    timing.add(FakeReport("suites/test_groups.py::a" + group.format("reference"), 101.0, 101.5, cpu=0.5))
    timing.add(FakeReport("tests/test_x.py::test_y", 100.0, 100.25))  # a report without CPU counts none
    out = timing.to_json()
    assert out["units"] == {"suites/test_groups.py(artemis)": 4.0,
                            "suites/test_groups.py(reference)": 0.5, "tests/test_x.py::test_y": 0.25}
    assert out["units_cpu"] == {"suites/test_groups.py(artemis)": 2.75,
                                "suites/test_groups.py(reference)": 0.5, "tests/test_x.py::test_y": 0.0}
    assert out["targets"]["artemis"] == {"wall_seconds": 11.0, "test_seconds": 4.0, "cpu_seconds": 2.8}
    assert out["modules"] == {"suites/test_groups.py": {"artemis": 4.0, "reference": 0.5}}


def test_each_workers_units_and_its_idle_tail_are_kept_in_the_order_it_ran_them():
    timing = schedule.RunTiming()
    timing.started = 100.0
    group = "@suites/test_groups.py(artemis)"
    timing.add(FakeReport("suites/test_groups.py::a" + group, 101.0, 103.0, "gw0"))
    timing.add(FakeReport("suites/test_groups.py::a" + group, 103.0, 104.0, "gw0"))  # its teardown phase
    timing.add(FakeReport("tests/test_x.py::test_y", 101.0, 150.0, "gw1"))
    timing.add(FakeReport("suites/test_groups.py::b" + group, 104.5, 110.0, "gw0"))
    timing.add(FakeReport("tests/test_x.py::test_z", 111.0, 112.0, "gw0"))
    assert timing.timeline() == {
        "gw0": [["suites/test_groups.py(artemis)", 1.0, 10.0, 8.5], ["tests/test_x.py::test_z", 11.0, 12.0, 1.0]],
        "gw1": [["tests/test_x.py::test_y", 1.0, 50.0, 49.0]]}
    summary = timing.worker_summary()
    assert summary["gw0"] == {"busy_seconds": 9.5, "first_start": 1.0, "last_stop": 12.0, "idle_at_end": 38.0,
                              "units": 2}
    assert summary["gw1"]["idle_at_end"] == 0.0
    assert json.loads(json.dumps(timing.to_json()))["workers"] == summary


def test_a_serial_runs_reports_are_one_workers():
    timing = schedule.RunTiming()
    timing.add(FakeReport("tests/test_x.py::test_y", 1.0, 2.0))
    assert list(timing.worker_summary()) == ["main"]


def test_the_recorded_cost_file_is_readable_and_names_units():
    costs = schedule.load_costs()
    assert costs, f"{schedule.COSTS_FILE} should hold the costs recorded by scripts/record_costs.py"
    assert all(seconds >= 1.0 for seconds in costs.values())


def test_record_costs_keeps_each_units_largest_cost(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps({"units": {"a": 5.0, "b": 0.2, "c": 3.0}}))
    (tmp_path / "two.json").write_text(json.dumps({"units": {"a": 7.0, "c": 1.0}}))
    out = tmp_path / "costs.json"
    subprocess.run([sys.executable, str(REPO / "scripts/record_costs.py"), str(tmp_path / "one.json"),
                    str(tmp_path / "two.json"), "--out", str(out)], check=True, capture_output=True)
    assert json.loads(out.read_text())["units"] == {"a": 7.0, "c": 3.0}
    assert schedule.load_costs(out) == {"a": 7.0, "c": 3.0}


def test_a_broken_cost_file_is_a_usage_error_naming_it(tmp_path):
    bad = tmp_path / "costs.json"
    bad.write_text("{not json")
    with pytest.raises(pytest.UsageError, match="costs.json"):
        schedule.load_costs(bad)


def _matrix(outcome: str, test_outcome: str) -> dict:
    return {"matrix": {"artemis": {"CLU-MLB-1": {"outcome": outcome, "reason": "", "tests": [
        {"nodeid": "suites/x.py::t[artemis]", "outcome": test_outcome, "seconds": 1.0}]}}}}


def test_matrix_diff_is_silent_for_equal_matrices_and_names_each_changed_cell(tmp_path):
    one, two, three = (tmp_path / f"{n}.json" for n in ("one", "two", "three"))
    one.write_text(json.dumps(_matrix("passed", "passed")))
    two.write_text(json.dumps(_matrix("passed", "passed")))
    three.write_text(json.dumps(_matrix("failed", "failed")))
    script = str(REPO / "scripts/matrix_diff.py")
    same = subprocess.run([sys.executable, script, str(one), str(two)], capture_output=True, text=True)
    assert (same.returncode, same.stdout) == (0, "")
    changed = subprocess.run([sys.executable, script, str(one), str(three)], capture_output=True, text=True)
    assert changed.returncode == 1
    assert "artemis CLU-MLB-1: passed -> failed" in changed.stdout
    assert "x.py::t[artemis]: passed -> failed" in changed.stdout


_CPU_TESTS = '''
import subprocess, sys, time

def test_burns_a_second_in_a_child():
    # the child spins until it has used one second of CPU: the parent reaps it within the test
    subprocess.run([sys.executable, "-c",
                    "import time\\nwhile time.process_time() < 1.0: pass"], check=True)

def test_sleeps():
    time.sleep(1.0)
'''


def test_each_tests_cpu_reaches_the_timing_report_from_a_worker(tmp_path):
    """Under pytest-xdist the CPU is measured in the worker and travels on its reports."""
    (tmp_path / "test_cpu.py").write_text(_CPU_TESTS)
    report = tmp_path / "timing.json"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", str(tmp_path / "test_cpu.py"),
                    f"--timing-report={report}"], check=True, capture_output=True, cwd=tmp_path)
    cpu = json.loads(report.read_text())["units_cpu"]
    burned, slept = cpu["test_cpu.py::test_burns_a_second_in_a_child"], cpu["test_cpu.py::test_sleeps"]
    assert burned >= 1.0, cpu  # the child's CPU counts for the test that reaped it
    assert slept < 0.5, cpu  # a sleep costs (next to) none: the figure is CPU, not wall


_SESSION_FIXTURE_TESTS = '''
import subprocess, sys
import pytest

@pytest.fixture(scope="session")
def busy_child():
    # a session-long child (a Spark JVM, say) that has used one second of CPU when the session ends
    child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile time.process_time() < 1.0: pass"])
    yield
    child.wait()

def test_uses_the_session_fixture(busy_child):
    pass

def test_cheap_and_last():
    pass
'''


def test_the_last_teardown_books_the_session_fixtures_cpu_apart_from_the_last_test(tmp_path):
    """The child ends with the session's fixtures, in the last test's teardown: its CPU goes to
    SESSION_TEARDOWN, not to the cheap test that happened to run last."""
    (tmp_path / "test_session.py").write_text(_SESSION_FIXTURE_TESTS)
    report = tmp_path / "timing.json"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_session.py"),
                    f"--timing-report={report}"], check=True, capture_output=True, cwd=tmp_path)
    cpu = json.loads(report.read_text())["units_cpu"]
    assert cpu[schedule.SESSION_TEARDOWN] >= 1.0, cpu
    assert cpu["test_session.py::test_cheap_and_last"] < 0.5, cpu
    assert cpu["test_session.py::test_uses_the_session_fixture"] < 0.5, cpu
