"""The shared-store master/slave launcher (conformance.targets.activemq.shared_store): the
configuration it generates, and a real group of two ActiveMQ JVMs on one KahaDB directory
behaving as the A-MQ fault-tolerant messaging guide, 3.1 describes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from conformance.requirements import skip_or_fail
from conformance.targets.activemq.process import ActiveMQProcess, activemq_available
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
        # A restarted master finds the lock taken and waits ("Reintroducing a failed node").
        a.start()
        assert a.running and a.process.waiting_for_lock() and not a.serving(), a.log_tail(40)
        assert group.master() is b
        assert group.addresses("stomp") == [("127.0.0.1", a.port("stomp")), ("127.0.0.1", b.port("stomp"))]
    finally:
        group.stop()
    assert not any(node.running for node in group.nodes.values())
