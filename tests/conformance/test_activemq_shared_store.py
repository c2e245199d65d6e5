"""The shared-store master/slave launcher (conformance.targets.activemq.shared_store): the
configuration it generates, and a real group of two ActiveMQ JVMs on one KahaDB directory
behaving as the A-MQ fault-tolerant messaging guide, 3.1 describes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from conformance.requirements import skip_or_fail
from conformance.targets.activemq.process import JDBC_JARS, ActiveMQProcess, JdbcStore, activemq_available
from conformance.targets.activemq.shared_store import SharedStoreGroup

CORE = "{http://activemq.apache.org/schema/core}"


def test_kahadb_section_carries_the_lock_settings(tmp_path):
    process = ActiveMQProcess(tmp_path / "a", persistent=True, kahadb_directory=tmp_path / "shared",
                              lock_keep_alive_period_ms=2000, lock_acquire_sleep_interval_ms=750)
    kahadb = ET.fromstring(process.render_config()).find(f".//{CORE}kahaDB")
    assert kahadb is not None
    assert kahadb.get("directory") == str(tmp_path / "shared")
    assert kahadb.get("lockKeepAlivePeriod") == "2000"
    locker = kahadb.find(f"{CORE}locker/{CORE}shared-file-locker")
    assert locker is not None and locker.get("lockAcquireSleepInterval") == "750"


def test_without_lock_settings_kahadb_keeps_its_defaults(tmp_path):
    kahadb = ET.fromstring(ActiveMQProcess(tmp_path, persistent=True).render_config()).find(f".//{CORE}kahaDB")
    assert kahadb.get("directory") == str(tmp_path / "data" / "kahadb")
    assert kahadb.get("lockKeepAlivePeriod") is None and kahadb.find(f"{CORE}locker") is None


def test_shared_directory_needs_a_persistent_broker(tmp_path):
    with pytest.raises(ValueError, match="needs persistent=True"):
        ActiveMQProcess(tmp_path, kahadb_directory=tmp_path / "shared")


def test_jdbc_store_is_the_direct_adapter_with_a_lease_locker_and_its_data_source(tmp_path):
    """A-MQ FT guide 3.2: the plain jdbcPersistenceAdapter (not the journaled one), the data source
    as a bean beside the broker (Example 3.3), and the lease locker with the lock settings."""
    store = JdbcStore("jdbc:postgresql://127.0.0.1:5999/db", "u", "p<&>", lock_keep_alive_period_ms=2000,
                      lock_acquire_sleep_interval_ms=3000, max_allowable_diff_from_db_time_ms=500)
    process = ActiveMQProcess(tmp_path / "a", persistent=True, jdbc=store)
    root = ET.fromstring(process.render_config())
    adapter = root.find(f".//{CORE}persistenceAdapter/{CORE}jdbcPersistenceAdapter")
    assert adapter is not None and root.find(f".//{CORE}kahaDB") is None
    assert adapter.get("dataSource") == "#brokerconf-ds" and adapter.get("lockKeepAlivePeriod") == "2000"
    locker = adapter.find(f"{CORE}locker/{CORE}lease-database-locker")
    assert locker.get("lockAcquireSleepInterval") == "3000" and locker.get("maxAllowableDiffFromDBTime") == "500"
    bean = root.find("{http://www.springframework.org/schema/beans}bean")
    properties = {p.get("name"): p.get("value") for p in bean}
    assert bean.get("id") == "brokerconf-ds"
    assert properties["url"] == store.jdbc_url and properties["password"] == "p<&>"
    assert properties["driverClassName"] == "org.postgresql.Driver"
    classpath = process._classpath()
    assert all(jar in classpath for jar, _ in JDBC_JARS)


def test_journaled_jdbc_store_is_a_persistence_factory_with_a_local_journal(tmp_path):
    """FT-JDBC-3's negative: the journaled adapter, each broker's journal in its own directory."""
    store = JdbcStore("jdbc:postgresql://h/db", "u", "p", journal_directory=str(tmp_path / "journal"))
    process = ActiveMQProcess(tmp_path / "a", persistent=True, jdbc=store)
    root = ET.fromstring(process.render_config())
    factory = root.find(f".//{CORE}persistenceFactory/{CORE}journalPersistenceAdapterFactory")
    assert factory is not None and root.find(f".//{CORE}persistenceAdapter") is None
    assert factory.get("dataSource") == "#brokerconf-ds" and factory.get("useDatabaseLock") == "true"
    assert factory.get("dataDirectory") == str(tmp_path / "journal")
    assert "activeio-core.jar" in process._classpath()


def test_jdbc_store_excludes_a_kahadb_directory(tmp_path):
    with pytest.raises(ValueError, match="JDBC store"):
        ActiveMQProcess(tmp_path, persistent=True, kahadb_directory=tmp_path / "s",
                        jdbc=JdbcStore("jdbc:postgresql://h/db", "u", "p"))


def test_group_size_is_checked(tmp_path):
    with pytest.raises(ValueError, match="2 to 8 nodes"):
        SharedStoreGroup(tmp_path, nodes=1)


@pytest.mark.real_broker
@pytest.mark.slow
def test_slave_takes_over_and_the_old_master_rejoins_as_slave(tmp_path):
    ok, reason = activemq_available()
    if not ok:
        skip_or_fail("activemq", reason)  # the only reason to skip: the Debian package is not installed
    group = SharedStoreGroup(tmp_path, nodes=2, lock_keep_alive_period_ms=1000, lock_acquire_sleep_interval_ms=500,
                             jvm_heap_mb=256)
    group.start()
    try:
        a, b = group.nodes.values()
        # Only the lock holder opens its connectors (guide 3.1, "Initial state").
        assert group.master() is a
        assert b.running and b.process.waiting_for_lock() and not b.serving()
        a.kill()
        # The slave takes the lock once the master is gone ("State after failure of the master").
        assert group.wait_for_master(60) is b, group.log_tail(40)
        # the new master's counters can be read (over JMX), as a chaos run's drain reads them
        assert b.consumer_count("queue://brokerconf.shared-store.counters") == 0
        # A restarted master finds the lock taken and waits ("Reintroducing a failed node").
        a.start()
        assert a.running and a.process.waiting_for_lock() and not a.serving(), a.log_tail(40)
        assert group.master() is b
        assert group.addresses("stomp") == [("127.0.0.1", a.port("stomp")), ("127.0.0.1", b.port("stomp"))]
    finally:
        group.stop()
    assert not any(node.running for node in group.nodes.values())
