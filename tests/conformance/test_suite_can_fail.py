"""The suites must be able to fail: run them against a deliberately broken reference broker
(tests/conformance/broken_reference.py) and expect failures that name the right spec IDs, and
only those.

Each test names the suite run it judges (``broken_run(suite, faults)``). The runs mostly wait (a
broken broker never makes the deliveries a check waits for, up to the suite's bound), so the
module's first test starts every selected test's run, `PARALLEL` at a time and the costliest first
(fault_batches.py `ConcurrentRuns`), and each test waits for its own: the module's tests share one
worker (tests/conftest.py ONE_WORKER), where one run after another used to keep a worker idle for
most of half an hour.
"""

from __future__ import annotations

import pytest

from conformance.schedule import load_costs
from tests.conformance.broken_reference import FAULTS
from tests.conformance.fault_batches import ConcurrentRuns, SuiteRun, batches, judge_batch

# A test waits for its own run, which may queue behind longer ones started before it, and each run
# is a whole suite (bounded at 600 s by fault_batches.py): the project's 120 s per-test default is
# far too short for that on a loaded 2-core machine, so this bound only stops a hung run.
pytestmark = pytest.mark.timeout(1500)


def broken_run(suite: str, faults: str) -> pytest.MarkDecorator:
    """The mark of a test that judges ``suite`` run against the reference broker with ``faults``."""
    return pytest.mark.broken_run(suite, faults)


@pytest.fixture(scope="module")
def broken_runs(request, tmp_path_factory):
    """Every selected test's run of this module, started at once, the costliest first, so the last
    to start is a short one: by the test's recorded cost (conformance/unit_costs.json) where there
    is one, else by its suite's on the reference broker."""
    runs = ConcurrentRuns(tmp_path_factory.mktemp("broken-suite-runs"))
    costs = load_costs()

    def cost(item: pytest.Item, suite: str) -> float:
        recorded_as = item.nodeid.split("@", 1)[0]  # without the worker's "@<group>"
        return costs.get(recorded_as, costs.get(f"suites/{suite}(reference)", 0.0))

    planned = [(cost(item, marker.args[0]), marker.args) for item in request.session.items
               if item.module is request.module and (marker := item.get_closest_marker("broken_run"))]
    for _, (suite, faults) in sorted(planned, key=lambda each: -each[0]):
        runs.submit(suite, faults)
    yield runs
    runs.close()


@pytest.fixture
def suite_run(request, broken_runs) -> SuiteRun:
    """The finished run the test's ``broken_run`` mark names."""
    marker = request.node.get_closest_marker("broken_run")
    assert marker is not None, f"{request.node.name} uses suite_run without a broken_run mark"
    return broken_runs.result(*marker.args)


def failed_matrix(run: SuiteRun) -> dict:
    """The run's matrix, once the run failed as a run against a broken broker must (and left nothing)."""
    assert run.exit_code == 1, f"the suite did not fail against a broken broker:\n{run.output_tail}"
    assert not run.left_behind, f"the suite run left things behind: {run.left_behind}"
    return run.matrix


def outcomes(matrix: dict) -> dict[str, str]:
    return {spec: cell["outcome"] for spec, cell in matrix["matrix"]["reference"].items()}


@pytest.mark.slow
@broken_run("test_groups.py", "groups_not_pinned")
def test_unpinned_groups_fail_the_pinning_rules(suite_run):
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    assert result["GRP-PIN-1"] == "failed", result
    # the failure names the rule in its message
    pin = matrix["matrix"]["reference"]["GRP-PIN-1"]
    assert "GRP-PIN-1" in pin["reason"], pin
    # the broker still works otherwise: rules that do not rest on pinning keep passing
    assert any(outcome == "passed" for outcome in result.values()), result


@pytest.mark.slow
@pytest.mark.parametrize("fault, test", [
    pytest.param(fault, test, marks=broken_run("test_groups.py", fault))
    for fault, test in (("minus_one_buckets_as_two", "test_minus_one_buckets_track_every_group"),
                        ("buckets_ignored", "test_seven_buckets_give_at_most_seven_owner_patterns"))
])
def test_wrong_bucket_counts_fail_the_bucket_rule(suite_run, fault, test):
    """GRP-BUCKETS-1's checks do not depend on the hash: -1 treated as two buckets, or N buckets
    ignored, both fail it (in the owner-pattern test made for that case); pinning still works."""
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    assert result["GRP-BUCKETS-1"] == "failed", result
    failed = {t["nodeid"].split("::")[1].split("[")[0] for t in matrix["tests"] if t["outcome"] == "failed"}
    assert test in failed, f"{test} should fail with fault {fault}; failed: {sorted(failed)}"
    assert result["GRP-PIN-1"] == "passed", result


@pytest.mark.slow
@broken_run("test_networks.py", "duplex_reverse_unfiltered")
def test_an_unfiltered_reverse_half_fails_the_duplex_rule(suite_run):
    """NOB-DUPLEX-2's network has a filter, so a reverse half that ignores the configuration is
    seen; the forward direction and the plain duplex checks still pass."""
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    assert result["NOB-DUPLEX-2"] == "failed", result
    failed = {t["nodeid"].split("::")[1].split("[")[0] for t in matrix["tests"] if t["outcome"] == "failed"}
    assert failed == {"test_duplex_configuration_reaches_the_reverse_bridge"}, sorted(failed)
    assert "B->A" in matrix["matrix"]["reference"]["NOB-DUPLEX-2"]["reason"], matrix["matrix"]["reference"]["NOB-DUPLEX-2"]
    assert result["NOB-DIR-2"] == "passed", result


@pytest.mark.slow
@broken_run("test_core_ack.py", "nack_acks_earlier")
def test_a_cumulative_nack_fails_the_nack_rule(suite_run):
    """ACK-NACK-1 as STOMP 1.2 states it: a client-individual NACK concerns one message; a broker
    whose NACK also settles the earlier unacknowledged message fails it."""
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    assert result["ACK-NACK-1"] == "failed", result
    assert "'held'" in matrix["matrix"]["reference"]["ACK-NACK-1"]["reason"], matrix["matrix"]["reference"]["ACK-NACK-1"]
    assert result["ACK-INDIV-1"] == "passed", result


@pytest.mark.slow
@broken_run("test_slow_consumer.py", "discards_not_counted")
def test_uncounted_discards_fail_the_counter_rules(suite_run):
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    failed = {spec for spec, outcome in result.items() if outcome == "failed"}
    assert "SLOW-STATS-1" in failed, result
    # eviction itself still works, so the eviction-order rules keep passing
    assert result["SLOW-EVICT-1"] == "passed", result


@pytest.mark.slow
@broken_run("test_cluster_link_faults.py", 
             "cluster_duplicates_kept,cluster_initial_attempts_unbounded,cluster_retry_uncapped")
def test_cluster_link_faults_fail_their_rules(suite_run):
    """A node that keeps resent forwards, a link that never gives up its initial attempts, waits
    that grow without bound: each fails its rule in test_cluster_link_faults.py."""
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    for spec in ("CLU-CC-DUP-1", "CLU-CC-RETRY-3", "CLU-CC-RETRY-2"):
        assert result[spec] == "failed", result
        assert spec in matrix["matrix"]["reference"][spec]["reason"], matrix["matrix"]["reference"][spec]
    assert "twice" in matrix["matrix"]["reference"]["CLU-CC-DUP-1"]["reason"]


@pytest.mark.slow
@broken_run("test_cluster_link_faults.py", "cluster_retry_not_multiplied")
def test_waits_not_multiplied_fail_the_spacing_rule_only(suite_run):
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    assert result["CLU-CC-RETRY-2"] == "failed", result
    # the message is cut short in the matrix: its opening names the multiplier the gaps ignored
    assert "retry-interval-multiplier 2" in matrix["matrix"]["reference"]["CLU-CC-RETRY-2"]["reason"], \
        matrix["matrix"]["reference"]["CLU-CC-RETRY-2"]
    assert result["CLU-CC-DUP-1"] == "passed" and result["CLU-CC-RETRY-3"] == "passed", result


@pytest.mark.slow
@broken_run("test_cluster_link_faults.py", "cluster_retry_starts_at_max")
def test_waits_at_the_maximum_from_the_first_retry_fail_the_spacing_rule(suite_run):
    """Waits that never grow because they start at max-retry-interval: each is at most the cap, and
    none is shorter than documented, so only the check that the first waits are the documented
    ones (retry-interval, then times the multiplier) can see it."""
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    assert result["CLU-CC-RETRY-2"] == "failed", result
    assert "too long" in matrix["matrix"]["reference"]["CLU-CC-RETRY-2"]["reason"], \
        matrix["matrix"]["reference"]["CLU-CC-RETRY-2"]
    assert result["CLU-CC-DUP-1"] == "passed" and result["CLU-CC-RETRY-3"] == "passed", result


@pytest.mark.slow
@pytest.mark.parametrize("suite, expected", [
    # each of these rules' tests ends at a barrier (a marker behind the messages) where it watched a quiet window
    pytest.param(suite, expected, marks=broken_run(suite, "auto_ack_copies"))
    for suite, expected in (("test_core_queues.py", {"Q-COMPETE-1", "SEL-MATCH-1", "SEL-QUEUE-1", "EXP-1"}),
                            ("test_groups.py", {"GRP-PIN-1", "GRP-BUCKETS-1", "GRP-REBAL-1", "GRP-FIRST-1"}))
])
def test_copied_deliveries_fail_the_exactly_once_rules(suite_run, suite, expected):
    """A queue that hands auto-acknowledged messages to a second consumer (a stray) or twice to a
    lone one (a duplicate) fails the rules whose tests say "each message once, nothing more": the
    barriers that replaced the quiet windows still see the copies (conformance/waiting.py)."""
    matrix = failed_matrix(suite_run)
    result = outcomes(matrix)
    failed = {spec for spec, outcome in result.items() if outcome == "failed"}
    assert expected <= failed, result
    # acknowledged deliveries are not copied, so rules resting on them keep passing
    assert any(outcome == "passed" for outcome in result.values()), result


# The faults the tests above run (with checks of their own on the failure messages); the batches
# below run every other registered fault.
FAULTS_TESTED_ABOVE = frozenset({
    "groups_not_pinned", "minus_one_buckets_as_two", "buckets_ignored", "duplex_reverse_unfiltered",
    "nack_acks_earlier", "discards_not_counted", "cluster_duplicates_kept", "cluster_initial_attempts_unbounded",
    "cluster_retry_uncapped", "cluster_retry_not_multiplied", "cluster_retry_starts_at_max", "auto_ack_copies"})


@pytest.mark.slow
@pytest.mark.parametrize("batch", [
    pytest.param(batch, marks=broken_run(batch.suite, batch.fault_names), id=batch.name)
    for batch in batches([f for f in FAULTS.values() if f.name not in FAULTS_TESTED_ABOVE])])
def test_each_fault_of_a_batch_fails_its_statements_and_only_those(suite_run, batch):
    """One suite run with several faults whose statements do not overlap (fault_batches.py): each
    fault's statements fail, and no statement that none of them touches does."""
    verdict = judge_batch(batch, suite_run)
    assert verdict.outcomes, f"the suite left no matrix (exit {verdict.exit_code}):\n{verdict.output_tail}"
    uncaught = {name: {spec: verdict.outcomes.get(spec, "not run") for spec in FAULTS[name].breaks}
                for name in verdict.uncaught}
    assert not uncaught, f"faults the suite did not catch (their statements' outcomes): {uncaught}"
    assert not verdict.unexpected, f"statements no fault of the batch touches failed: {verdict.unexpected}"
    assert not verdict.left_behind, f"the suite run left things behind: {verdict.left_behind}"
    # 1: tests failed; anything else is pytest's own trouble (an interrupted run, a usage error)
    assert verdict.exit_code == 1, f"the suite run ended with exit code {verdict.exit_code}:\n{verdict.output_tail}"
