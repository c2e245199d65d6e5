"""JDBC master/slave groups, against the A-MQ "Fault Tolerant Messaging" guide, 3.2
(../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue fault_tolerance.toml,
FT-JDBC-*), on every target that forms a ``topology.jdbc-store`` group through the topology
contract: the reference broker (its database store and lease, reference_broker/store/database.py,
reference_broker/ha/lease.py) and ActiveMQ Classic 5.17 (the plain jdbcPersistenceAdapter with a
lease-database-locker). Each group has its own private PostgreSQL server, stopped with it.

The lease lasts ``lock_acquire_sleep_interval`` (ActiveMQ's LeaseDatabaseLocker) and is renewed
every ``lock_keep_alive_period``; after a kill -9 the slave can take over only once the dead
master's lease has run out. As in test_master_slave.py only what a client sees is asserted, and
the deadlines only bound the waiting.
"""

from __future__ import annotations

import pytest

from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from conformance.suites.network_support import network_workdir, parametrize_by_target
from conformance.suites.test_master_slave import closed, kill_master_and_check_every_receipted_message
from conformance.targets.base import why_missing
from conformance.topology import SharedStore, Topology

CAPABILITY = "topology.jdbc-store"
#: a 2 s lease renewed every 500 ms: short enough that a takeover after kill -9 waits little
LEASE = SharedStore(kind="jdbc", lock_keep_alive_period_ms=500, lock_acquire_sleep_interval_ms=2000)
TAKEOVER = 120.0

pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc, scope=None)


@pytest.fixture
def group(request, target_name, tmp_path_factory):
    """A started two-node group of ``target_name`` on one database (A master, B slave)."""
    target = request.config.stash[STATE].targets.get(target_name)
    if target is None or CAPABILITY not in target.capabilities():
        why = why_missing(target, CAPABILITY) if target is not None else "unknown target"
        pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {CAPABILITY}" + (f" ({why})" if why else ""))
    workdir = network_workdir(tmp_path_factory, f"jdbc-{request.node.name}")
    cluster = target.launch_topology(Topology(("A", "B"), shared_store=LEASE, prefix="jdbc"),
                                     Scenario(name="jdbc-master-slave", protocols=("stomp",)), workdir)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.spec("FT-JDBC-1")
def test_only_the_lease_holder_opens_its_listeners(group):
    a, b = group["A"], group["B"]
    assert group.master() is a, f"FT-JDBC-1: node A (started first, alone) is not the master\n{group.log_tail(30)}"
    assert b.running, f"FT-JDBC-1: the slave exited instead of waiting for the lease\n{b.log_tail(30)}"
    assert closed(b), f"FT-JDBC-1: the slave B accepts connections while A holds the lease\n{b.log_tail(30)}"


@pytest.mark.spec("FT-JDBC-2")
def test_killed_master_the_slave_takes_over_with_every_receipted_message(group):
    kill_master_and_check_every_receipted_message(group, "FT-JDBC-2")


@pytest.mark.spec("FT-JDBC-4")
def test_a_restarted_master_rejoins_as_a_slave(group):
    a, b = group["A"], group["B"]
    a.kill()
    assert group.wait_for_master(TAKEOVER) is b, f"FT-JDBC-4: B never took over\n{group.log_tail(40)}"
    a.start(timeout=TAKEOVER)
    assert a.running and a.process.waiting_for_lock(), \
        f"FT-JDBC-4: the restarted former master does not wait for the lease\n{a.log_tail(30)}"
    assert closed(a), f"FT-JDBC-4: the restarted former master opened its listeners while B is master"
    assert group.master() is b, "FT-JDBC-4: B stopped being master when A came back"
