"""conformance/signals.py: plain ``pytest`` on the suites stops its brokers on SIGTERM, SIGINT and
SIGHUP, serially and on pytest-xdist workers (``scripts/test.sh`` runs ``-n N --dist loadgroup``).

Python's default for SIGTERM and SIGHUP ends pytest at once, without its fixtures' teardown.
Under xdist a signal sent to the controller's PID does not reach the workers at all; before this
plugin the controller died and left both workers and their brokers running. The tests send the
signal once a broker listens (tests/interrupting.py) and check no process of the run's tree is
left; a terminal's Ctrl-C (SIGINT to the whole foreground group) reaches the workers twice, from
the terminal and from the controller, and the second copy must not cut their teardown short."""

from __future__ import annotations

import signal
import sys

import pytest

from tests.interrupting import broker_listening, command_line, interrupt, listening

SUITES = ["suites/test_core_topics.py", "suites/test_core_queues.py"]


def _pytest(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-o", "addopts=",
            "--target", "reference:process"]


def _both_brokers(root, tree) -> bool:
    """One broker per worker: each suite module's tests form one xdist group."""
    return sum(1 for p in tree if "reference_broker" in command_line(p) and listening(p)) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_serial_pytest_tears_down_on_the_signal(tmp_path, signum):
    result = interrupt(_pytest(SUITES[0]), signum, broker_listening("reference_broker"), log=tmp_path / "output.log")
    assert not result.left, result.describe()
    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.describe()
    assert f"Terminated: {signum.name} received" in result.output, result.describe()


@pytest.mark.slow
@pytest.mark.parametrize("signum, to_group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM-to-controller", "SIGINT-to-group"])
def test_xdist_workers_tear_down_on_the_signal(tmp_path, signum, to_group):
    result = interrupt(_pytest(*SUITES, "-n", "2", "--dist", "loadgroup"), signum, _both_brokers,
                       log=tmp_path / "output.log", to_group=to_group)
    assert not result.left, result.describe()
    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.describe()
    assert "passing it on to the pytest-xdist workers" in result.output, result.describe()


#: a test whose cleanup fails while the interrupt passes through it, so its own error replaces the
#: KeyboardInterrupt (as a store's cleanup did once the signal had ended its fault proxy too), and
#: a second test that must never start
_SWALLOWED = '''
import os, pathlib, time

def test_cleanup_error_replaces_the_interrupt():
    pathlib.Path(os.environ["BROKERCONF_TEST_READY"]).write_text("in the test")
    try:
        time.sleep(120)
    except BaseException:
        raise RuntimeError("cleanup failed: its helper was gone")

def test_must_not_start():
    pathlib.Path(os.environ["BROKERCONF_TEST_READY"] + ".second").write_text("started")
    time.sleep(120)
'''


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_an_interrupt_replaced_by_a_cleanup_error_still_stops_the_session(tmp_path, workers):
    (tmp_path / "test_swallowed.py").write_text(_SWALLOWED)
    ready_file = tmp_path / "ready"

    def in_the_test(root, tree) -> bool:  # noqa: ARG001
        return ready_file.exists()

    result = interrupt([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                        "--rootdir", str(tmp_path), str(tmp_path / "test_swallowed.py"), *workers],
                       signal.SIGTERM, in_the_test, cwd=tmp_path, log=tmp_path / "output.log",
                       env={"BROKERCONF_TEST_READY": str(ready_file)})
    assert not (tmp_path / "ready.second").exists(), result.describe()
    assert "cleanup failed: its helper was gone" in result.output, result.describe()
    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.describe()
