"""The reference broker's database store and its JDBC-style master/slave group on a private
PostgreSQL server (A-MQ FT guide 3.2; reference_broker/store/database.py, ha/lease.py)."""

from __future__ import annotations

import json
import time

import pytest

from conformance.clients import connect
from conformance.targets.reference.process import ReferenceBrokerProcess
from machinery.waiting import poll
from reference_broker.config import ConfigError, build_config
from reference_broker.ha.lease import LeaseDatabaseLocker
from reference_broker.engine.message import Message
from reference_broker.store.base import MessageStore, StoreError
from reference_broker.store.database import DatabaseStore

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.slow


@pytest.fixture
def clean(db):
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        for table in ("brokerconf_messages", "brokerconf_durable", "brokerconf_lock"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    return db


def message(mid: str, body: bytes = b"x", **kw) -> Message:
    return Message(message_id=mid, destination="queue://Q", body=body, persistent=True, **kw)


def test_is_a_message_store(clean):
    assert isinstance(DatabaseStore(clean.dsn), MessageStore)


def test_batch_is_invisible_until_flush_then_recovered_in_order(clean):
    store = DatabaseStore(clean.dsn)
    for n in range(5):
        store.add("queue://Q", message(f"m{n}", f"b{n}".encode(), properties={"n": n}))
    store.remove("queue://Q", "m1")
    fresh = DatabaseStore(clean.dsn)
    assert fresh.recover().messages == {}, "nothing is confirmed before flush"
    store.flush()
    state = DatabaseStore(clean.dsn).recover()
    got = state.messages["queue://Q"]
    assert [m.message_id for m in got] == ["m0", "m2", "m3", "m4"]
    assert got[1].body == b"b2" and got[1].properties == {"n": 2}


def test_re_adding_a_live_id_replaces_it_in_place_and_resets_redelivery(clean):
    store = DatabaseStore(clean.dsn)
    for mid in ("a", "b", "c"):
        store.add("queue://Q", message(mid))
    store.update_redelivery("queue://Q", "a", 3)
    store.update_redelivery("queue://Q", "c", 2)
    store.add("queue://Q", message("a", b"new"))
    store.flush()
    state = DatabaseStore(clean.dsn).recover()
    assert [(m.message_id, m.body) for m in state.messages["queue://Q"]] == [("a", b"new"), ("b", b"x"), ("c", b"x")]
    assert state.redelivery_counts == {("queue://Q", "c"): 2}


def test_durable_subscription_and_its_messages(clean):
    store = DatabaseStore(clean.dsn)
    store.add_durable_subscription("durable://c:s", {"topic": "T", "selector": None})
    store.add("durable://c:s", message("m"))
    store.flush()
    state = DatabaseStore(clean.dsn).recover()
    assert state.durable_subscriptions == {"durable://c:s": {"topic": "T", "selector": None}}
    assert [m.message_id for m in state.messages["durable://c:s"]] == ["m"]
    store.remove_durable_subscription("durable://c:s")
    store.flush()
    state = DatabaseStore(clean.dsn).recover()
    assert state.durable_subscriptions == {} and state.messages == {}


def test_a_flush_the_database_does_not_answer_fails_in_time_and_the_store_stays_failed(clean):
    store = DatabaseStore(clean.dsn, call_timeout_s=1.0)
    store.add("queue://Q", message("m"))
    store.flush()
    store.add("queue://Q", message("n"))
    clean.pause()
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="did not answer within 1.0 s"):
            store.flush()
        assert time.monotonic() - started < 3.0
    finally:
        clean.resume()
    with pytest.raises(StoreError, match="failed earlier"):
        store.add("queue://Q", message("o"))


def test_config_needs_a_dsn_and_a_keep_alive_inside_the_lease():
    with pytest.raises(ConfigError, match="needs store.dsn"):
        build_config({"store": {"kind": "database", "lock_keep_alive_period": 1000}})
    with pytest.raises(ConfigError, match="must be above 0 and below the lease"):
        build_config({"store": {"kind": "database", "dsn": "host=h", "lock_keep_alive_period": 10_000}})
    with pytest.raises(ConfigError, match="needs store.kind = 'database'"):
        build_config({"store": {"kind": "journal", "locker": {"kind": "lease_database"}}})
    config = build_config({"store": {"kind": "database", "dsn": "host=h", "lock_keep_alive_period": 1000,
                                     "locker": {"lock_acquire_sleep_interval": 3000}}})
    assert config.store.locker.kind == "lease_database" and config.store.locker.lock_acquire_sleep_interval == 3000


# ---------------------------------------------------------------- a JDBC-style pair of brokers

def start(tmp_path, name: str, dsn: str, wait_for: str = "serving") -> ReferenceBrokerProcess:
    workdir = tmp_path / name
    workdir.mkdir()
    config = workdir / "broker.json"
    config.write_text(json.dumps({"name": name, "store": {
        "kind": "database", "dsn": dsn, "lock_keep_alive_period": 500,
        "locker": {"kind": "lease_database", "lock_acquire_sleep_interval": 2000}}}))
    broker = ReferenceBrokerProcess(name=name, config_file=config, data_dir=workdir / "data", http=False)
    return broker.start(wait_for=wait_for)


def test_database_pair_slave_takes_over_after_kill_with_every_receipted_message(clean, tmp_path):
    """FT-JDBC-1: only the lease holder serves; FT-JDBC-2: after the master dies its lease ends and
    the slave serves the messages the master confirmed; FT-JDBC-4: the old master rejoins as slave."""
    a = start(tmp_path, "A", clean.dsn)
    b = start(tmp_path, "B", clean.dsn, wait_for="lock")
    try:
        assert b.role == "slave", "FT-JDBC-1: the second broker must wait for the lease"
        assert not b.stomp_port, "FT-JDBC-1: a slave keeps its listeners closed"
        with connect("127.0.0.1", a.stomp_port, "stomp") as producer:
            for n in range(20):
                producer.send("queue://jdbc", f"m{n}".encode(), persistent=True)
        a.kill()
        assert poll(lambda: b.role == "master", timeout=30, interval=0.1), \
            f"FT-JDBC-2: the slave never became master after the master died:\n{b.log_tail()}"
        with connect("127.0.0.1", b.stomp_port, "stomp") as consumer:
            sub = consumer.subscribe("queue://jdbc")
            got = [sub.receive(10) for _ in range(20)]
        assert [m.body for m in got if m is not None] == [f"m{n}".encode() for n in range(20)], \
            "FT-JDBC-2: the new master must have every message the old one receipted, in order"
        a.start(wait_for="lock")
        assert a.role == "slave", "FT-JDBC-4: a restarted master rejoins as a slave"
    finally:
        for broker in (a, b):
            broker.stop()


def test_a_broker_has_made_the_store_tables_before_it_waits_as_a_slave(clean, tmp_path):
    """The tables are made at start-up, before the lock is tried: a new master's first store call
    then runs inside its lease on tables that exist (a DDL commit there once failed a start on a
    loaded machine: "could not create the tables ... did not answer within 1.0 s")."""
    other = LeaseDatabaseLocker(clean.dsn, holder="another broker", lease_ms=60_000)
    assert other.try_acquire()
    try:
        b = start(tmp_path, "B", clean.dsn, wait_for="lock")
        try:
            assert b.role == "slave"
            with psycopg.connect(clean.dsn, autocommit=True) as conn:
                tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
            assert {"brokerconf_messages", "brokerconf_durable"} <= tables, tables
        finally:
            b.stop()
    finally:
        other.release()


def test_master_cut_from_its_database_stops_serving_before_the_slave_takes_over(clean, tmp_path):
    """Issue 18 (guide 3.2 with a lease): the master's database link goes silent (a black hole in
    the fault proxy: connections stay open, nothing answers). Its lease renewals go unanswered, so
    it must stop serving before its lease ends -- and only after that may the slave, whose own
    link is fine, take the lease and serve. Never two masters at once."""
    from machinery.faultproxy import FaultProxyServer
    from machinery.faultproxy.client import ToxiproxyClient
    from conformance.targets.runtime.probes import tcp_accepts

    proxy_server = FaultProxyServer().start()
    try:
        api = ToxiproxyClient(proxy_server.api_url)
        link = api.create_proxy("pg-A", f"127.0.0.1:{clean.port}")
        proxied_port = int(link["listen"].rsplit(":", 1)[1])
        a = start(tmp_path, "A", clean.dsn.replace(f"port={clean.port}", f"port={proxied_port}"))
        b = start(tmp_path, "B", clean.dsn, wait_for="lock")
        try:
            assert b.role == "slave"
            for stream in ("upstream", "downstream"):
                api.add_toxic("pg-A", "timeout", stream=stream, name=f"blackhole-{stream}", attributes={"timeout": 0})
            cut = time.monotonic()
            a_stopped = b_serving = None
            while time.monotonic() - cut < 30 and (a_stopped is None or b_serving is None):
                now = time.monotonic() - cut
                if a_stopped is None and not tcp_accepts(a.stomp_port, 0.2):
                    a_stopped = now
                if b_serving is None and b.stomp_port and tcp_accepts(b.stomp_port, 0.2):
                    b_serving = now
                time.sleep(0.02)
            print(f"after the cut: A stopped serving at {a_stopped} s, B served at {b_serving} s")
            assert a_stopped is not None, f"the cut-off master never stopped serving:\n{a.log_tail()}"
            assert b_serving is not None, f"the slave never took over:\n{b.log_tail()}"
            assert a_stopped < b_serving, (f"split brain: B served at {b_serving:.2f} s while A still served until "
                                           f"{a_stopped:.2f} s\nA:\n{a.log_tail()}\nB:\n{b.log_tail()}")
        finally:
            for broker in (a, b):
                broker.stop()
    finally:
        proxy_server.stop()


def test_keep_alive_must_leave_the_stop_margin_inside_the_lease():
    """A renewal 1800 ms into a 2000 ms lease would come after the master's 500 ms stop margin
    began: every renewal would find the lease already given up."""
    with pytest.raises(ConfigError, match="by at least 500 ms"):
        build_config({"store": {"kind": "database", "dsn": "host=h", "lock_keep_alive_period": 1800,
                                "locker": {"lock_acquire_sleep_interval": 2000}}})
    build_config({"store": {"kind": "database", "dsn": "host=h", "lock_keep_alive_period": 1500,
                            "locker": {"lock_acquire_sleep_interval": 2000}}})


def test_a_new_master_whose_database_answers_too_slowly_waits_as_a_slave_again(clean, tmp_path, monkeypatch):
    """FT-JDBC-2's takeover on a slow database. The store a new master opens inside its lease gets
    the lease's budget per call. A database that does not answer within it (a CI run: a new
    connection on a machine with a run queue of 20 took over 1.5 s) makes the store unusable but
    is not a broken store: the broker gives the lock back and waits as a slave again, instead of
    exiting and leaving the group without a broker. The first store connection stalls here; the
    second attempt serves."""
    import asyncio
    import threading

    from reference_broker.ha.runner import MasterSlaveRunner
    from reference_broker.store import bounded_db
    from tests.reference_broker.test_locker import FakeLocker, Script

    config = build_config({"name": "t", "stomp": "127.0.0.1:0", "http": None, "data": str(tmp_path), "store": {
        "kind": "database", "dsn": clean.dsn, "lock_keep_alive_period": 500,
        "locker": {"kind": "lease_database", "lock_acquire_sleep_interval": 1000}}})
    real_connect = bounded_db.psycopg_connect
    connects, release = [], threading.Event()

    def connect(dsn, timeout):
        connects.append(dsn)
        if len(connects) == 2:  # 1: the start-up's create_schema; 2: the first master's store
            release.wait(10)  # a database too slow to answer within the store's 0.5 s
        return real_connect(dsn, timeout)

    monkeypatch.setattr(bounded_db, "psycopg_connect", connect)
    locker = FakeLocker()
    script = Script(limit=6)
    runner = MasterSlaveRunner(config, locker=locker, wait=script)
    served = []
    runner.on_master = lambda server: (served.append(server), script.events.append("master"))
    try:
        asyncio.run(runner.run(asyncio.Event()))
    finally:
        release.set()
    assert locker.attempts >= 2, f"the broker did not try the lock again after its store timed out: {script.events}"
    assert locker.releases >= 2, "the lock is given back when the store times out, and on stop"
    assert len(served) == 1, f"the second attempt should serve: {script.events}"
