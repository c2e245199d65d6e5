"""Every command that launches brokers stops what it started on SIGTERM, SIGINT and SIGHUP (a CI
job's timeout, Ctrl-C, a closed terminal): the command exits and no process of its tree is left.

Seen before brokerconf/children.py: `brokerconf suite --target activemq` ended by SIGTERM during
``test_core_topics`` left that module's ActiveMQ JVM running, because ``subprocess.run`` SIGKILLed
pytest before its fixtures' teardown. Each test sends the signal to the command's PID only (not its
group) once its broker listens; tests/interrupting.py remembers the tree and kills leftovers by
PID so a failure does not leak either."""

from __future__ import annotations

import re
import signal

import pytest

from conformance.targets.activemq.process import activemq_available
from tests.interrupting import REPO, broker_listening, brokerconf, interrupt, itself_listening, listening

ALL = pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
SUITE = "suites/test_core_topics.py"


def _exit_by(result, signum: int) -> None:
    """The command ended because of the signal: 128 + N from cli's handler (SIGTERM, SIGHUP), or
    an uncaught KeyboardInterrupt for SIGINT, after which Python ends the process by SIGINT."""
    assert result.returncode in (128 + signum, -signum), result.describe()


@pytest.mark.slow
@ALL
def test_suite_stops_its_reference_broker_process(tmp_path, signum):
    result = interrupt(brokerconf("suite", "--target", "reference:process", "--suite", SUITE,
                                  "--out", str(tmp_path / "out")),
                       signum, broker_listening("reference_broker"), log=tmp_path / "output.log")
    assert not result.left, result.describe()
    _exit_by(result, signum)
    # pytest was told, and tore its fixtures down instead of being killed
    assert f"passing {signum.name} on to 1 child process" in result.output, result.describe()
    assert "KeyboardInterrupt" in result.output or "Terminated" in result.output, result.describe()


@pytest.mark.slow
@pytest.mark.real_broker
@pytest.mark.skipif(not activemq_available()[0], reason=f"ActiveMQ Classic: {activemq_available()[1]}")
def test_suite_stops_its_activemq_jvm(tmp_path):
    """The case that was seen: the module's ActiveMQ JVM (in a session of its own, out of reach of
    any group signal) outlived the run."""
    result = interrupt(brokerconf("suite", "--target", "activemq:process", "--suite", SUITE,
                                  "--out", str(tmp_path / "out")),
                       signal.SIGTERM, broker_listening("java"), log=tmp_path / "output.log")
    assert not result.left, result.describe()
    assert any("java" in line for line in result.before), result.describe()
    _exit_by(result, signal.SIGTERM)


@pytest.mark.slow
def test_suite_killed_outright_still_stops_its_broker(tmp_path):
    """SIGKILL (the OOM killer, a runner giving up) leaves `brokerconf` no chance to pass anything
    on: pytest gets SIGTERM from the kernel when its parent dies (PR_SET_PDEATHSIG,
    brokerconf/children.py) and tears down as for any SIGTERM."""
    result = interrupt(brokerconf("suite", "--target", "reference:process", "--suite", SUITE,
                                  "--out", str(tmp_path / "out")),
                       signal.SIGKILL, broker_listening("reference_broker"), log=tmp_path / "output.log",
                       settle=True)
    assert not result.left, result.describe()
    # pytest took the SIGTERM as an interrupt: raised in a test ("Terminated: SIGTERM received ..."),
    # or, arriving in a setup or teardown, held and then ending the session there ("Interrupted:
    # SIGTERM received", conformance/signals.py; seen in CI)
    assert re.search(r"(Terminated|Interrupted): SIGTERM received", result.output), result.describe()


@pytest.mark.slow
def test_run_stops_the_suites_broker(tmp_path):
    """The main job's suite stage: the same path as `suite` (chaos stage off). Its first suites
    are the cluster suites, whose nodes may listen inside pytest itself: ready once anything in
    the tree listens."""
    def anything_listening(root, tree):
        return any(listening(p) for p in tree)

    result = interrupt(brokerconf("run", "--targets", "reference:process", "--chaos-duration", "0",
                                  "--out", str(tmp_path / "out")),
                       signal.SIGTERM, anything_listening, log=tmp_path / "output.log")
    assert not result.left, result.describe()
    _exit_by(result, signal.SIGTERM)
    assert "passing SIGTERM on to 1 child process" in result.output, result.describe()


@pytest.mark.slow
@ALL
def test_chaos_run_stops_its_brokers(tmp_path, signum):
    """In-process: cli's handler turns SIGTERM / SIGHUP into SystemExit and SIGINT is
    KeyboardInterrupt, so every ``finally`` of the experiment stops its brokers. With Python's
    default for SIGTERM the reference broker of a chaos run outlived ``brokerconf`` (and, on
    Artemis, both JVMs and both NFS mounts did)."""
    result = interrupt(brokerconf("chaos", "run", str(REPO / "chaos/experiments/reference-kill-restart.toml"),
                                  "--out", str(tmp_path / "out")),
                       signum, broker_listening("reference_broker"), log=tmp_path / "output.log")
    assert not result.left, result.describe()
    _exit_by(result, signum)
    if signum != signal.SIGINT:  # SIGINT is Python's own KeyboardInterrupt, without cli's message
        assert f"{signum.name} received; stopping what this run started" in result.output, result.describe()


@pytest.mark.slow
@ALL
def test_broker_command_stops(tmp_path, signum):
    """`brokerconf broker` is the broker: it closes its listeners and exits 0 (SIGHUP included)."""
    result = interrupt(brokerconf("broker", "--stomp", "127.0.0.1:0"), signum, itself_listening,
                       log=tmp_path / "output.log")
    assert not result.left, result.describe()
    assert result.returncode == 0, result.describe()


BENCHES = {
    "stomp": ("--targets", "reference", "--messages", "5000000", "--warmup-messages", "5000000", "--repeats", "1"),
    "mqtt": ("--targets", "reference", "--messages", "5000000", "--warmup-messages", "5000000", "--repeats", "1"),
    "amqp": ("--targets", "reference", "--messages", "5000000", "--warmup-messages", "5000000", "--repeats", "1"),
    "soak": ("--duration", "600", "--report-every", "30"),
}


@pytest.mark.slow
@pytest.mark.parametrize("bench", list(BENCHES))
def test_bench_stops_its_broker_and_load_generators(tmp_path, bench):
    """In-process, like `chaos run`: each bench's broker (a reference broker process) and its load
    generators (processes too for stomp and mqtt) are stopped by the bench's ``finally``."""
    result = interrupt(brokerconf("bench", bench, *BENCHES[bench]), signal.SIGTERM,
                       broker_listening("reference_broker"), log=tmp_path / "output.log")
    assert not result.left, result.describe()
    _exit_by(result, signal.SIGTERM)
