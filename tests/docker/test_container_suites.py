"""The conformance suites through ActiveMQ Classic in containers (issue 8, "Tests and CI").

One `brokerconf suite` subprocess runs every suite except the network-of-brokers ones (their
scenarios start several brokers of their own; tests/docker/test_container_partitions.py runs a
network of brokers across containers) against ``activemq:container``, and its matrix must say what
the local process's says: the container is the same broker with the same activemq.xml
(conformance/targets/activemq/container.py), so every spec ID has the same outcome, no test fails,
and the known deviations (conformance/known_deviations/*.toml) still show as strict xfails.

The process side is not run again here: the test run already runs every suite against plain
``activemq`` (pyproject.toml's brokerconf_targets; the local process wherever the package is
installed), and fails on any of its tests that does not pass or fail as its recorded deviation.
So the outcome each spec ID gets on the process is the one its collection predicts
(tests/conformance/collected_outcomes.py: passed, known deviation, not applicable with the
reason, not checked; it matched a whole main job's matrix of all three targets cell for cell when
written, and tests/brokerconf/test_cli.py's main job test compares it with its run every time),
and that is what the container's outcomes are compared with. Built from the suites of the run,
not a stored copy, it stays valid when the suites change. (The process target used to run here
too, a second time; that its launch is "process" is asserted on a real handle in
tests/conformance/test_targets_real.py, and that the matrix records a target's launch in
tests/conformance/test_plugin.py.)

Where the local package is missing (a machine with only Docker) the container run is still
checked on its own: no failures, launch recorded as "container", the deviations still xfail.

The same suites but the cluster ones (see `artemis_suite_files`) run against Artemis in a
container (brokerconf/artemis, issue 16) in a second `brokerconf suite` subprocess: no test fails and Artemis's known deviations are strict xfails. A
suite statement documented for ActiveMQ only is "not applicable" there, so no comparison with the
ActiveMQ outcomes is made.

Measured on the project's 2-core CI machine (see the report of issue 8 part 3): the container
run alone takes about 2 minutes, both targets together about twice that.

The suites run here include test_core_queues.py: these runs are also what checks that a plain
suite runs through either container target (the launch recorded, its tests passed)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conformance.requirements import skip_or_fail
from tests.conformance.collected_outcomes import in_subprocess as collected_cells
from conformance.targets.activemq.process import activemq_available
from machinery.docker_env import ACTIVEMQ_IMAGE, image_available
from conformance.targets.artemis.dist import ARTEMIS_IMAGE
from conformance.targets.registry import BUILTIN

#: both runs together take minutes (see above); the default 120 s would cut the fixture short
pytestmark = [pytest.mark.container, pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites"
#: suites that start groups of brokers of their own as local JVMs: the network-of-brokers suites
#: (test_networks.py, test_network_*.py; networks across containers are covered elsewhere, see
#: above), and the master/slave and failover-pair suites (issue 18: shared stores, databases and
#: killable pairs, run on the process targets by the main test run), and the lock-loss experiments
#: (local-process pairs on the simulated NFS or a database: not applicable to a container target)
NOT_HERE_PREFIX = ("test_network", "test_master_slave", "test_jdbc_master_slave", "test_failover_pairs",
                   "test_nfs_lock_loss", "test_jdbc_lock_loss")
DEVIATIONS = ROOT / "conformance" / "known_deviations"
#: the target that runs Artemis in a container (plain "artemis" before the registry named launch modes)
ARTEMIS_CONTAINER = "artemis:container" if "artemis:container" in BUILTIN else "artemis"


def suite_files() -> list[Path]:
    return sorted(p for p in SUITES.glob("test_*.py") if not p.name.startswith(NOT_HERE_PREFIX))


def known_deviation_specs(kind: str, suites: list[Path]) -> set[str]:
    """Spec IDs recorded as known deviations of ``kind`` whose test is in one of ``suites``; those of
    client statements are left out: they are the client library's, booked in its own column of the
    matrix, never in a broker's (conformance/matrix.py)."""
    from conformance.spec.catalogue import load_catalogue

    catalogue = load_catalogue()
    texts = {p.name: p.read_text(encoding="utf-8") for p in suites}
    specs = set()
    for path in DEVIATIONS.glob("*.toml"):
        for entry in tomllib.loads(path.read_text(encoding="utf-8")).get("deviation", []):
            if entry.get("target") != kind or catalogue[entry["spec"]].subject == "client":
                continue
            test = entry.get("test")
            if test is None or any(f"def {test}(" in text for text in texts.values()):
                specs.add(entry["spec"])
    return specs


def run_in_own_group(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``command`` as the leader of its own process group; if this test is interrupted or
    times out, the whole group (brokerconf, its pytest) is interrupted, then killed, by its id, so
    no suite run outlives the test; the interrupt lets the suite's fixtures stop their brokers."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        # SIGINT first: pytest turns it into KeyboardInterrupt and runs its fixtures' teardown, which
        # stops the broker JVMs (each leads a process group of its own, out of reach of killpg)
        # and removes containers; SIGTERM would end the interpreter without any teardown.
        for sig, grace in ((signal.SIGINT, 60), (signal.SIGTERM, 30), (signal.SIGKILL, None)):
            if proc.poll() is not None:
                break
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def outcomes(matrix: dict, target: str) -> dict[str, str]:
    return {spec: row["outcome"] for spec, row in matrix["matrix"][target].items()}


def lacking_here(matrix: dict, target: str) -> set[str]:
    """Spec IDs not applicable to ``target`` because this machine's install lacks a capability
    (e.g. the MQTT transport's jars of the Debian package; the image always has them)."""
    return {spec for spec, row in matrix["matrix"][target].items()
            if row["outcome"] == "not applicable" and " lacks " in row["reason"]
            and "protocol.amqp" not in row["reason"]}


#: what the container launchers lack by design, each saying so in the not-applicable reason
CONTAINER_GAPS = ("lacks protocol.amqp", "lacks tls")


def lacking_in_image(matrix: dict, target: str) -> set[str]:
    """Spec IDs not applicable to the container ``target`` for what its launcher lacks by design:
    no AMQP listener (the process target takes ActiveMQ's AMQP transport from .tools/,
    conformance/targets/activemq/amqp.py; the image is built from Debian's packages, which lack
    it), and no TLS acceptors (only the process launchers make the run's keystore,
    conformance/targets/tls_setup.py)."""
    return {spec for spec, row in matrix["matrix"][target].items()
            if row["outcome"] == "not applicable" and any(gap in row["reason"] for gap in CONTAINER_GAPS)}


def test_known_deviations_are_found_for_the_suites_run():
    """The helper the container test relies on: networks' deviation is left out with its suite."""
    specs = known_deviation_specs("activemq", suite_files())
    assert {"SLOW-LIMIT-2", "SLOW-STATS-1"} <= specs
    assert "NOB-EXCL-2" not in specs


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    ok, reason = image_available(ACTIVEMQ_IMAGE)
    if not ok:
        skip_or_fail("docker", reason)
    result, matrix = run_suites(["activemq:container"], tmp_path_factory.mktemp("container-suites"))
    return result, matrix


def run_suites(targets: list[str], out: Path, suites: list[Path] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """`brokerconf suite` over ``suites`` (default suite_files()) against ``targets``: its result
    and its matrix."""
    # two workers: the run waits on container starts far more than it computes (each module's
    # tests of one target stay on one worker, so each container starts once)
    command = [str(Path(sys.executable).with_name("brokerconf")), "suite", "--out", str(out), "--workers", "2"]
    for target in targets:
        command += ["--target", target]
    for path in suites if suites is not None else suite_files():
        command += ["--suite", str(path)]
    result = run_in_own_group(command, timeout=1700)
    matrices = sorted(out.glob("*/matrix.json"))
    assert matrices, f"brokerconf suite wrote no matrix (exit {result.returncode}):\n{result.stdout[-3000:]}\n" \
                     f"{result.stderr[-2000:]}"
    return result, json.loads(matrices[-1].read_text())


def suite_test_outcomes(matrix: dict, target: str, suite: str) -> dict[str, str]:
    """Node ID -> outcome of ``suite``'s tests on ``target`` in the run, told by their function
    names (a node ID's file part is relative to the rootdir, empty for a suite outside it)."""
    names = {node.name for node in ast.parse((SUITES / suite).read_text(encoding="utf-8")).body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    return {test["nodeid"]: test["outcome"] for cell in matrix["matrix"][target].values() for test in cell["tests"]
            if test["nodeid"].split("::")[-1].split("[")[0] in names}


def check_core_queue_suite_ran(matrix: dict, target: str) -> None:
    """test_core_queues.py through the container target as pytest would pass it: tests passed, and
    none failed or errored (a known deviation or not applicable is no failure)."""
    got = suite_test_outcomes(matrix, target, "test_core_queues.py")
    assert "passed" in got.values() and set(got.values()) <= {"passed", "known deviation", "not applicable"}, got


def test_container_suites_pass_with_launch_recorded(suite_run):
    result, matrix = suite_run
    info = matrix["targets"]["activemq:container"]
    assert (info["kind"], info["launch"], info["available"]) == ("activemq", "container", True), info
    summary = matrix["summary"]["activemq:container"]
    assert summary["failed"] == 0 and summary["passed"] > 0, (summary, result.stdout[-4000:])
    check_core_queue_suite_ran(matrix, "activemq:container")


def test_known_deviations_still_xfail_in_containers(suite_run):
    _, matrix = suite_run
    expected = known_deviation_specs("activemq", suite_files())
    got = {spec for spec, outcome in outcomes(matrix, "activemq:container").items() if outcome == "known deviation"}
    assert got == expected, (f"known deviations recorded for activemq: {sorted(expected)}; the container run "
                             f"shows {sorted(got)} (a deviation that passes now fails its strict xfail)")


def test_container_and_process_have_the_same_outcome_per_spec(suite_run):
    _, matrix = suite_run
    if not activemq_available()[0]:
        skip_or_fail("activemq", "the local ActiveMQ package is not installed: nothing to compare the container run with")
    # the process's column as the test run's own run of these suites against it gives it (see above)
    expected = {"matrix": {"activemq:process": collected_cells("activemq:process", [str(p) for p in suite_files()])}}
    process, container = outcomes(expected, "activemq:process"), outcomes(matrix, "activemq:container")
    local_gaps = lacking_here(expected, "activemq:process") | lacking_in_image(matrix, "activemq:container")
    differ = {spec: (process.get(spec), container.get(spec)) for spec in process.keys() | container.keys()
              if process.get(spec) != container.get(spec) and spec not in local_gaps}
    assert not differ, f"spec outcomes (process, container) that differ: {differ}"
    assert any(o == "passed" for o in container.values())


# ---------------------------------------------------------------- Artemis in a container


@pytest.fixture(scope="module")
def artemis_suite_run(tmp_path_factory):
    ok, reason = image_available(ARTEMIS_IMAGE)
    if not ok:  # build it with docker/build-images.sh
        skip_or_fail("docker", reason)
    return run_suites([ARTEMIS_CONTAINER], tmp_path_factory.mktemp("artemis-container-suites"),
                      artemis_suite_files())


def artemis_suite_files() -> list[Path]:
    """suite_files() without the cluster suites (test_cluster_*.py). ``artemis:container`` forms
    clusters (artemis/container_cluster.py), but each cluster suite starts several clusters of
    containers, 20 to 30 s each here, which would take this run far beyond its budget; the container
    cluster is checked by tests/docker/test_artemis_container_cluster.py (one cluster, real link
    cuts), and the cluster suites run on artemis:process."""
    return [p for p in suite_files() if not p.name.startswith("test_cluster_")]


def test_artemis_container_suites_pass_with_launch_recorded(artemis_suite_run):
    result, matrix = artemis_suite_run
    info = matrix["targets"][ARTEMIS_CONTAINER]
    assert (info["kind"], info["launch"], info["available"]) == ("artemis", "container", True), info
    summary = matrix["summary"][ARTEMIS_CONTAINER]
    failed = {spec: row.get("reason", "") for spec, row in matrix["matrix"][ARTEMIS_CONTAINER].items()
              if row["outcome"] == "failed"}
    assert summary["failed"] == 0 and summary["passed"] > 0, (summary, failed, result.stdout[-4000:])
    check_core_queue_suite_ran(matrix, ARTEMIS_CONTAINER)


def test_artemis_known_deviations_xfail_in_containers(artemis_suite_run):
    _, matrix = artemis_suite_run
    container = outcomes(matrix, ARTEMIS_CONTAINER)
    # the cluster suites are not in this run (artemis_suite_files), so neither are their deviations
    expected = known_deviation_specs("artemis", artemis_suite_files())
    got = {spec for spec, outcome in container.items() if outcome == "known deviation"}
    assert got == expected, (
        f"known deviations recorded for artemis in these suites: {sorted(expected)}; the container run shows "
        f"{sorted(got)} (a deviation that passes now fails its strict xfail)")
