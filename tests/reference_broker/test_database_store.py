"""The reference broker's database store and its JDBC-style master/slave group on a private
PostgreSQL server (A-MQ FT guide 3.2; reference_broker/store/database.py, ha/lease.py)."""

from __future__ import annotations

import json
import signal
import time

import psutil
import pytest

from conformance.clients import connect
from conformance.requirements import skip_or_fail
from conformance.targets.reference.process import ReferenceBrokerProcess
from conformance.targets.runtime import postgres
from conformance.waiting import poll
from reference_broker.config import ConfigError, build_config
from reference_broker.engine.message import Message
from reference_broker.store.base import MessageStore, StoreError
from reference_broker.store.database import DatabaseStore

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    ok, reason = postgres.availability()
    if not ok:
        skip_or_fail("postgresql", reason)
    server = postgres.PostgresServer(tmp_path_factory.mktemp("pg"))
    try:
        yield server.start()
    finally:
        server.stop()


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
    paused = _server_processes(clean)
    for process in paused:
        process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="did not answer within 1.0 s"):
            store.flush()
        assert time.monotonic() - started < 3.0
    finally:
        for process in paused:
            process.send_signal(signal.SIGCONT)
    with pytest.raises(StoreError, match="failed earlier"):
        store.add("queue://Q", message("o"))


def _server_processes(db) -> list:
    master = psutil.Process(db.pid)
    return [master, *master.children(recursive=True)]


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
