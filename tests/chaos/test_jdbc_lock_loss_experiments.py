"""The JDBC lock-loss experiments (chaos/experiments/*-jdbc-lock-loss.toml; issue 18, section 5:
"cut the master's database link: the lease lapses, the slave takes over, the old master must stop").

Without brokers: the shipped files, the experiment file's refusals (each naming the bad option),
and the database links themselves (conformance/targets/runtime/database_links.py: one proxy per
node in front of a private PostgreSQL server, one node's link cut while the other's works).

With brokers (slow): a short version of each experiment end to end, as `brokerconf chaos run`
runs it, shortened by overrides only (a 3 s lease renewed every second, one 12 s cut). Checked
(A-MQ fault-tolerant messaging guide, 3.2; IDs in conformance/spec/fault_tolerance.toml): the
slave takes over once the cut master's lease lapsed and no acknowledged persistent message is lost
(FT-JDBC-2); the old master stops serving before the slave serves, no two serving or listening
at once (FT-JDBC-1), also with the link slowed past the lease instead of cut (the reference
broker). ActiveMQ (link cut) and Artemis (link slowed) break FT-JDBC-1: strict xfails, recorded
in conformance/known_deviations/fault_tolerance.toml. How long each took is printed, not asserted
(`brokerconf chaos run ... --repeat 5`).
Every process the run started (brokers, PostgreSQL, the fault proxies) is gone after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokerconf.chaos_job import run_and_judge
from chaos.experiment import _schedule
from chaos.experiment_file import Experiment, ExperimentError, load_experiment, with_overrides
from chaos.nemesis.base import NemesisError
from chaos.topology import topology_of
from conformance.requirements import skip_or_fail
from conformance.targets.registry import resolve
from conformance.targets.runtime import postgres
from conformance.topology import SharedStore
from tests.chaos.test_nfs_lock_loss_experiments import child_pids

EXPERIMENTS = Path(__file__).resolve().parents[2] / "chaos" / "experiments"
FILES = ("reference-jdbc-lock-loss.toml", "activemq-jdbc-lock-loss.toml", "artemis-jdbc-lock-loss.toml")
#: a 3 s lease renewed every second; one 12 s cut (the lease, a slave's next try, and the watch)
SHORT = ["duration_s=28", "recovery_s=6", "topology.lock_keep_alive_period_ms=1000",
         "topology.lock_acquire_sleep_interval_ms=3000", "nemesis.0.every_s=4", "nemesis.0.down_s=12",
         "workload.rate=10"]


def base(**topology) -> dict:
    return {"name": "x", "duration_s": 40,
            "topology": {"kind": "shared-store", "store": "jdbc", "lock_keep_alive_period_ms": 1000,
                         "lock_acquire_sleep_interval_ms": 5000, **topology},
            "nemesis": [{"kind": "lock-loss", "every_s": 5, "down_s": 20, "node": "master"}]}


# ------------------------------------------------------------------ the files and their checks


@pytest.mark.parametrize("name", FILES)
def test_shipped_files_cut_the_masters_database_link_for_longer_than_the_lease(name):
    exp = load_experiment(EXPERIMENTS / name)
    store = topology_of(exp).shared_store
    assert (store.kind, store.proxied_database) == ("jdbc", True)
    assert 0 < store.lock_keep_alive_period_ms < store.lock_acquire_sleep_interval_ms
    (cut,) = exp.nemesis
    assert (cut.kind, cut.fault, cut.node) == ("lock-loss", "partition", "master")
    # the lease lapses and a slave's next try (one more interval) falls inside the cut
    assert cut.down_s * 1000 >= 2 * store.lock_acquire_sleep_interval_ms
    assert [step for _, step, _, _ in _schedule(exp)] == ["lock-loss", "heal"]
    assert (exp.checkers.total_queue, exp.checkers.failover_downtime, exp.checkers.split_brain) == (True, True, True)


def test_jdbc_store_needs_a_shared_store_topology():
    with pytest.raises(ValueError, match='store = "jdbc" needs kind = "shared-store"'):
        Experiment.model_validate({"name": "x", "duration_s": 5, "topology": {"kind": "single", "store": "jdbc"}})


@pytest.mark.parametrize("keep_alive, lease", [(5000, 5000), (6000, 5000), (0, 5000)])
def test_a_lease_renewed_no_more_often_than_it_lasts_is_refused_by_name(keep_alive, lease):
    with pytest.raises(ValueError, match="lock_acquire_sleep_interval_ms .* lock_keep_alive_period_ms"):
        Experiment.model_validate(base(lock_keep_alive_period_ms=keep_alive, lock_acquire_sleep_interval_ms=lease))


def test_expire_is_refused_on_a_database_link():
    data = base()
    data["nemesis"][0]["fault"] = "expire"
    with pytest.raises(ValueError, match=r'nemesis\[0\].fault = "expire" .* jdbc store has none'):
        Experiment.model_validate(data)


def test_lock_loss_on_a_local_store_names_both_stores_it_needs():
    data = base(store="local", lock_keep_alive_period_ms=2000, lock_acquire_sleep_interval_ms=1000)
    with pytest.raises(ValueError, match='store = "nfs" or "jdbc"'):
        Experiment.model_validate(data)


@pytest.mark.parametrize("setting, message", [
    ("topology.store=\"postgres\"", "topology.store"),
    ("topology.proxied_databse=true", "unknown key 'proxied_databse' in topology"),
    ("nemesis.0.fault=expire", "expire"),
])
def test_bad_overrides_are_refused_by_name(setting, message):
    exp = load_experiment(EXPERIMENTS / "reference-jdbc-lock-loss.toml")
    with pytest.raises(ExperimentError, match=message):
        with_overrides(exp, settings=[setting])


def test_proxied_database_is_refused_on_a_file_store():
    with pytest.raises(ValueError, match="proxied_database applies to a kind 'jdbc' shared store"):
        SharedStore(kind="file", proxied_database=True)


# ------------------------------------------------------------------ the links (PostgreSQL, no broker)


@pytest.mark.slow
def test_each_node_reaches_the_database_through_its_own_link_and_one_can_be_cut(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    ok, reason = postgres.availability()
    if not ok:
        skip_or_fail("postgresql", reason)
    from conformance.targets.runtime.database_links import DatabaseLinks

    before = child_pids()
    server = postgres.PostgresServer(tmp_path / "pg").start()
    try:
        links = DatabaseLinks(server, ("A", "B"))
        try:
            ports = {links.address(host)[1] for host in ("A", "B")}
            assert len(ports) == 2 and server.port not in ports, "each node dials its own proxy, not the server"
            assert links.jdbc_url("A").startswith(f"jdbc:postgresql://127.0.0.1:{links.address('A')[1]}/")

            def answers(host: str) -> bool:
                try:
                    with psycopg.connect(links.dsn(host), connect_timeout=3) as conn:
                        return conn.execute("SELECT 1").fetchone() == (1,)
                except psycopg.OperationalError:
                    return False

            assert answers("A") and answers("B")
            links.nemesis.invoke("partition", host="A")
            assert not answers("A"), "A's database link is cut"
            assert answers("B"), "B's link is its own: the cut of A's leaves it alone"
            with pytest.raises(NemesisError, match="no lease server of ours"):
                links.nemesis.invoke("expire", host="B")
            links.nemesis.invoke("heal", host="A")
            assert answers("A")
            links.nemesis.invoke("partition", host="A")  # left cut: close heals it and removes the proxies
        finally:
            links.close()
        assert links.proxy is None
        links.close()  # a second close does nothing
    finally:
        server.stop()
    assert child_pids() - before == set(), "the fault proxy or the server outlived close / stop"


# ------------------------------------------------------------------ the experiments (brokers)


def run_short(tmp_path, file_name: str, target: str | None, extra=()) -> dict:
    ok, reason = postgres.availability()
    if not ok:
        skip_or_fail("postgresql", reason)
    if target is not None:
        ok, reason = resolve(target).availability()
        if not ok:
            skip_or_fail(target.split(":")[0], reason)
    exp = with_overrides(load_experiment(EXPERIMENTS / file_name), settings=[*SHORT, *extra])
    if "topology.jdbc-store" not in resolve(exp.target.name).capabilities():
        skip_or_fail("postgresql", f"{exp.target.name} lacks topology.jdbc-store here")
    before = child_pids()
    verdict = run_and_judge(exp, tmp_path / "run", progress=lambda line: None)
    left = child_pids() - before
    assert not left, f"processes left behind by the experiment: {sorted(left)}"
    stats = verdict["run_stats"]
    total = verdict["checks"]["total_queue"]
    print(f"{exp.name}: lock_loss {json.dumps(stats['lock_loss'])}; total_queue lost {len(total['lost'])} "
          f"duplicated {len(total['duplicated'])}; split_brain {verdict['checks'].get('split_brain', {}).get('valid')}")
    assert stats["nemesis_errors"] == [], stats["nemesis_errors"]
    assert len(stats["lock_loss"]) == 1, f"one lock-loss fault was scheduled: {stats['lock_loss']}"
    return verdict


def check_takeover_without_loss(verdict: dict) -> dict:
    (fault,) = verdict["run_stats"]["lock_loss"]
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


#: a link slowed past the lease instead of cut: no error reaches the master, only silence
SLOW_LINK = ("nemesis.0.fault=latency", "nemesis.0.latency_ms=20000")
#: faults the Artemis slow-link check runs at most (each a short experiment of its own)
SLOW_LINK_RUNS = 2


@pytest.mark.slow
@pytest.mark.parametrize("file_name, target, extra", [("reference-jdbc-lock-loss.toml", None, ()),
                                                      ("reference-jdbc-lock-loss.toml", None, SLOW_LINK),
                                                      ("artemis-jdbc-lock-loss.toml", "artemis:process", ())],
                         ids=["reference", "reference-slow-link", "artemis"])
def test_cut_master_stops_and_the_slave_takes_over(tmp_path, file_name, target, extra):
    verdict = run_short(tmp_path, file_name, target, extra)
    fault = check_takeover_without_loss(verdict)
    check_one_master(verdict, fault)


@pytest.mark.slow
def test_activemq_slave_takes_over_when_the_cut_masters_lease_lapses(tmp_path):
    """The takeover half of FT-JDBC-2. Whether acknowledged messages survive is not asserted on
    ActiveMQ: the old master, still serving without its lease (the FT-JDBC-1 deviation below),
    accepts persistent sends into the database once its link heals, before it notices the lease is
    gone, and the new master never delivers them. That happens in some runs only (2 of 5 full
    runs), so neither a pass nor a strict xfail would be honest; the count is printed, and the
    deviation's evidence has the runs."""
    verdict = run_short(tmp_path, "activemq-jdbc-lock-loss.toml", "activemq:process")
    (fault,) = verdict["run_stats"]["lock_loss"]
    assert fault["takeover_s"] is not None, \
        f"FT-JDBC-2 no slave served after the cut master's lease lapsed: {fault['timeline']}"


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="known deviation FT-JDBC-1 on activemq (conformance/known_deviations/fault_tolerance.toml): "
                          "the master cut from its database ignores its failed lease renewals and serves until the "
                          "link heals, while the slave already serves")
def test_activemq_has_one_master_when_its_database_link_is_cut(tmp_path):
    """FT-JDBC-1: one master at a time. Only an AssertionError is the recorded deviation: a run
    that never got to a takeover raises something else and fails the test."""
    verdict = run_short(tmp_path, "activemq-jdbc-lock-loss.toml", "activemq:process")
    (fault,) = verdict["run_stats"]["lock_loss"]
    if fault["takeover_s"] is None:
        raise RuntimeError(f"the run never got to a takeover: nothing to judge: {fault['timeline']}")
    check_one_master(verdict, fault)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="known deviation FT-JDBC-1 on artemis (conformance/known_deviations/fault_tolerance.toml): "
                          "with its database link slowed past the lease, the primary keeps its acceptors open for "
                          "seconds after the backup went live")
def test_artemis_has_one_master_when_its_database_link_is_slow(tmp_path):
    """FT-JDBC-1 under a slow database link (Artemis's lease renewal waits on it instead of failing).
    The rule holds only if it holds at every fault, so the fault is run up to ``SLOW_LINK_RUNS``
    times and the first run with two masters is the outcome: in one CI run of six the primary
    failed its store write at once (closed 2.4 s after the fault, before the backup went live),
    which a single run cannot tell from a broker that keeps the rule. Only an AssertionError is the
    recorded deviation: a run that never got to a takeover raises something else and fails the test."""
    for run in range(SLOW_LINK_RUNS):
        (tmp_path / f"fault-{run}").mkdir()
        verdict = run_short(tmp_path / f"fault-{run}", "artemis-jdbc-lock-loss.toml", "artemis:process", SLOW_LINK)
        (fault,) = verdict["run_stats"]["lock_loss"]
        if fault["takeover_s"] is None:
            raise RuntimeError(f"the run never got to a takeover: nothing to judge: {fault['timeline']}")
        check_one_master(verdict, fault)
