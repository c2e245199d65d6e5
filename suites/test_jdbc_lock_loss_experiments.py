"""The JDBC lock-loss experiments (chaos/experiments/*-jdbc-lock-loss.toml; issue 18, section 5:
"cut the master's database link: the lease lapses, the slave takes over, the old master must
stop"), a short version of each end to end as `brokerconf chaos run` runs it, shortened by
overrides only (a 3 s lease renewed every second, one 12 s cut). A suite (moved from tests/chaos,
issue 26; the files' own checks and the database links without brokers stay in
tests/chaos/test_jdbc_lock_loss_experiments.py): one run per target of the run
(`experiment_support`), so each statement reaches the conformance matrix and a known deviation
goes through the plugin's narrowed path.

Checked (A-MQ fault-tolerant messaging guide, 3.2; IDs in conformance/spec/fault_tolerance.toml):
the slave takes over once the cut master's lease lapsed and no acknowledged persistent message is
lost (FT-JDBC-2); the old master stops serving before the slave serves, no two serving or
listening at once (FT-JDBC-1), also with the link slowed past the lease instead of cut (the
reference broker, Artemis). ActiveMQ (link cut) and Artemis (link slowed) break FT-JDBC-1: known
deviations in conformance/known_deviations/fault_tolerance.toml, booked only for the assertion
messages recorded there. How long each took is printed, not asserted (`brokerconf chaos run ...
--repeat 5`). Every process the run started (brokers, PostgreSQL, the fault proxies) is gone
after it, or the harness failed (`experiment_support.HarnessFault`, never a booked deviation).
"""

from __future__ import annotations

import pytest

from chaos.experiment_file import load_experiment, with_overrides
from conformance.requirements import skip_or_fail
from suites.experiment_support import (EXPERIMENTS, experiment_target, parametrize_by_kind,
                                                   run_checked, the_fault)
from machinery import postgres

CAPABILITY = "topology.jdbc-store"
pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]

#: a 3 s lease renewed every second; one 12 s cut (the lease, a slave's next try, and the watch)
SHORT = ["duration_s=28", "recovery_s=6", "topology.lock_keep_alive_period_ms=1000",
         "topology.lock_acquire_sleep_interval_ms=3000", "nemesis.0.every_s=4", "nemesis.0.down_s=12",
         "workload.rate=10"]
#: a link slowed past the lease instead of cut: no error reaches the master, only silence
SLOW_LINK = ("nemesis.0.fault=latency", "nemesis.0.latency_ms=20000")
#: faults the Artemis slow-link check runs at most (each a short experiment of its own; it stops at
#: the first with two masters). Artemis is not consistent here: at some faults the primary's store
#: write fails at once and it closes before the backup goes live (no overlap). Seen in about a third
#: of the faults (4 of the ~12 on record; both of a main-job run's two on a loaded machine, 2026-11-29,
#: whose test then passed where the deviation is recorded: XPASS(strict)), so two runs missed the
#: deviation too often. A fault can also end with no takeover at all before the heal (the primary closed
#: 3.2 s after the fault and the backup never went live: a main job, 2026-11-29, mj19): nothing to judge
#: at that fault, so the next one runs. Six faults miss the deviation about once in 250 (0.4^6), at no
#: cost when the first shows it.
SLOW_LINK_RUNS = 6
#: the target kinds each test is generated for (by test name). With the link cut, ActiveMQ's
#: takeover is checked on its own: whether its acknowledged messages survive is not asserted there
#: (see test_activemq_slave_takes_over_when_the_cut_masters_lease_lapses)
KINDS = {"test_cut_master_stops_and_the_slave_takes_over": ("reference", "artemis"),
         "test_cut_master_stops_when_its_database_link_is_slow": ("reference",),
         "test_activemq_slave_takes_over_when_the_cut_masters_lease_lapses": ("activemq",),
         "test_activemq_has_one_master_when_its_database_link_is_cut": ("activemq",),
         "test_artemis_has_one_master_when_its_database_link_is_slow": ("artemis",)}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_kind(metafunc, KINDS)


def run_short(request, workdir, target_name: str, extra=()) -> dict:
    """The short ``<kind>-jdbc-lock-loss.toml`` of ``target_name``'s kind, run and judged."""
    target = experiment_target(request, target_name, CAPABILITY)
    ok, reason = postgres.availability()
    if not ok:
        skip_or_fail("postgresql", reason)
    kind = target.split(":")[0]
    exp = with_overrides(load_experiment(EXPERIMENTS / f"{kind}-jdbc-lock-loss.toml"), target=target,
                         settings=[*SHORT, *extra])
    return run_checked(exp, workdir)


def check_takeover_without_loss(verdict: dict) -> dict:
    fault = the_fault(verdict)
    assert fault["takeover_s"] is not None, \
        f"FT-JDBC-2 no slave served after the cut master's lease lapsed: {fault['timeline']}"
    total = verdict["checks"]["total_queue"]
    assert total["lost"] == [], f"FT-JDBC-2 acknowledged persistent messages lost: {total['lost'][:10]}"
    return fault


def check_one_master(verdict: dict, fault: dict) -> None:
    if fault["detection_s"] is None:
        raise AssertionError(f"FT-JDBC-1: the master whose database link was cut went on serving after the slave "
                             f"took over at {fault['takeover_s']:.1f} s: {fault['timeline']}")
    assert fault["overlap_s"] == 0 and fault["detection_s"] <= fault["takeover_s"], \
        (f"FT-JDBC-1: two masters served at once for {fault['overlap_s']:.1f} s: the slave from "
         f"{fault['takeover_s']:.1f} s, the old master until {fault['detection_s']:.1f} s after its database link was "
         f"cut: {fault['timeline']}")
    # only the lock holder opens its connectors: a listener still open next to the new master's is
    # a second master's, even while it answers no one (stuck on the slow link)
    assert fault["open_overlap_s"] == 0, \
        (f"FT-JDBC-1: two nodes had their listeners open at once for {fault['open_overlap_s']:.1f} s: the slave "
         f"served from {fault['takeover_s']:.1f} s, the old master's listener closed at {fault['closed_s']} s after its "
         f"database link was cut: {fault['timeline']}")
    split = verdict["checks"]["split_brain"]
    assert split["valid"] is not False, f"FT-JDBC-1: the history shows two nodes accepting work at once: {split}"


def takeover_or_nothing_to_judge(verdict: dict) -> dict:
    """The fault, once a slave took over; without a takeover the one-master rule has nothing to
    judge (FT-JDBC-2's tests fail on that): not an AssertionError, so never the known deviation."""
    fault = the_fault(verdict)
    if fault["takeover_s"] is None:
        raise RuntimeError(f"the run never got to a takeover: nothing to judge: {fault['timeline']}")
    return fault


@pytest.mark.spec("FT-JDBC-1", "FT-JDBC-2")
def test_cut_master_stops_and_the_slave_takes_over(request, tmp_path, target_name):
    verdict = run_short(request, tmp_path, target_name)
    fault = check_takeover_without_loss(verdict)
    check_one_master(verdict, fault)


@pytest.mark.spec("FT-JDBC-1", "FT-JDBC-2")
def test_cut_master_stops_when_its_database_link_is_slow(request, tmp_path, target_name):
    verdict = run_short(request, tmp_path, target_name, SLOW_LINK)
    fault = check_takeover_without_loss(verdict)
    check_one_master(verdict, fault)


@pytest.mark.spec("FT-JDBC-2")
def test_activemq_slave_takes_over_when_the_cut_masters_lease_lapses(request, tmp_path, target_name):
    """The takeover half of FT-JDBC-2. Whether acknowledged messages survive is not asserted on
    ActiveMQ: the old master, still serving without its lease (the FT-JDBC-1 deviation below),
    accepts persistent sends into the database once its link heals, before it notices the lease is
    gone, and the new master never delivers them. That happens in some runs only (2 of 5 full
    runs), so neither a pass nor a strict xfail would be honest; the count is printed, and the
    deviation's evidence has the runs."""
    verdict = run_short(request, tmp_path, target_name)
    fault = the_fault(verdict)
    assert fault["takeover_s"] is not None, \
        f"FT-JDBC-2 no slave served after the cut master's lease lapsed: {fault['timeline']}"


@pytest.mark.spec("FT-JDBC-1")
def test_activemq_has_one_master_when_its_database_link_is_cut(request, tmp_path, target_name):
    """FT-JDBC-1: one master at a time; a known deviation on ActiveMQ (the master cut from its
    database ignores its failed lease renewals and serves until the link heals), booked only for
    the assertion messages recorded in conformance/known_deviations/fault_tolerance.toml."""
    verdict = run_short(request, tmp_path, target_name)
    check_one_master(verdict, takeover_or_nothing_to_judge(verdict))


@pytest.mark.spec("FT-JDBC-1")
@pytest.mark.timeout(SLOW_LINK_RUNS * 150)  # each run two JVMs, PostgreSQL and 28 s of load: 60-100 s under load
def test_artemis_has_one_master_when_its_database_link_is_slow(request, tmp_path, target_name):
    """FT-JDBC-1 under a slow database link (Artemis's lease renewal waits on it instead of failing);
    a known deviation on Artemis (its primary keeps its acceptors open for seconds after the backup
    went live), booked only for the assertion messages recorded in
    conformance/known_deviations/fault_tolerance.toml. The rule holds only if it holds at every
    fault, so the fault is run up to ``SLOW_LINK_RUNS`` times and the first run with two masters is
    the outcome: in one CI run of six the primary failed its store write at once (closed 2.4 s
    after the fault, before the backup went live), which a single run cannot tell from a broker
    that keeps the rule."""
    without_takeover = []
    for run in range(SLOW_LINK_RUNS):
        (tmp_path / f"fault-{run}").mkdir()
        verdict = run_short(request, tmp_path / f"fault-{run}", target_name, SLOW_LINK)
        fault = the_fault(verdict)
        if fault["takeover_s"] is None:
            # no backup served during this fault, so no two served at once: nothing to judge here
            # (FT-JDBC-2's tests judge the takeover); the next fault may show what this one did not
            without_takeover.append(fault["timeline"])
            continue
        check_one_master(verdict, fault)
    if len(without_takeover) == SLOW_LINK_RUNS:
        raise RuntimeError(f"no run got to a takeover: nothing to judge: {without_takeover}")
