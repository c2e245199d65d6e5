"""The JDBC lock-loss experiments (chaos/experiments/*-jdbc-lock-loss.toml; issue 18, section 5:
"cut the master's database link: the lease lapses, the slave takes over, the old master must stop").

Without brokers: the shipped files, the experiment file's refusals (each naming the bad option),
and the database links themselves (conformance/targets/runtime/database_links.py: one proxy per
node in front of a private PostgreSQL server, one node's link cut while the other's works).

The experiments with brokers, which check catalogue statements on each target, are a conformance
suite (suites/test_jdbc_lock_loss_experiments.py), so their outcomes reach the matrix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.experiment_file import Experiment, ExperimentError, load_experiment, with_overrides
from chaos.nemesis.base import NemesisError
from chaos.nemesis.lock import lock_loss_nemesis
from chaos.schedule import build_schedule
from chaos.topology import topology_of
from conformance.requirements import skip_or_fail
from suites.experiment_support import child_pids
from machinery import postgres
from conformance.topology import SharedStore

EXPERIMENTS = Path(__file__).resolve().parents[2] / "chaos" / "experiments"
FILES = ("reference-jdbc-lock-loss.toml", "activemq-jdbc-lock-loss.toml", "artemis-jdbc-lock-loss.toml")


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
    assert [step for _, step, _, _ in build_schedule(exp)] == ["lock-loss", "heal"]
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
            cut = lock_loss_nemesis(links)
            cut.invoke("partition", host="A")
            assert not answers("A"), "A's database link is cut"
            assert answers("B"), "B's link is its own: the cut of A's leaves it alone"
            with pytest.raises(NemesisError, match="no lease server of ours"):
                cut.invoke("expire", host="B")
            cut.invoke("heal", host="A")
            assert answers("A")
            cut.invoke("partition", host="A")  # left cut: close heals it and removes the proxies
        finally:
            links.close()
        assert links.proxy is None
        links.close()  # a second close does nothing
    finally:
        server.stop()
    assert child_pids() - before == set(), "the fault proxy or the server outlived close / stop"
