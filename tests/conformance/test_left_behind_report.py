"""tests/conformance/fault_batches.py `left_behind`: the leak check's report is read from a child
pytest's output (those runs fail on purpose, so their exit status cannot tell a leak)."""

from __future__ import annotations

from tests.conformance.fault_batches import broken_suite_command, left_behind

REPORT = """....F
============================ left behind by the tests ============================
process 123 python -m machinery.sharedstore.server --root /tmp/bc-store-x
mount /tmp/pytest-of-root/pytest-1/mounts/A
2 thing(s) the tests started are still there; clean them up by handle or PID in the test that started them
=========================== short test summary info ============================
FAILED suites/test_master_slave_nfs.py::test_x
"""


def test_the_leak_report_is_read_line_by_line():
    assert left_behind(REPORT) == ["process 123 python -m machinery.sharedstore.server --root /tmp/bc-store-x",
                                   "mount /tmp/pytest-of-root/pytest-1/mounts/A"]


def test_no_report_is_nothing_left():
    assert left_behind("....F\n==== short test summary info ====\nFAILED x\n") == []


def test_the_child_runs_with_the_leak_check():
    command = broken_suite_command("test_core_ack.py", "m.json")
    assert command[command.index("conformance.leak_plugin") - 1] == "-p"
