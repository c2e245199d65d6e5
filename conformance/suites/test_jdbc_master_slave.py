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

import time
from dataclasses import replace

import pytest

from conformance.clients.failover import connect_failover
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from conformance.suites.network_support import network_workdir, parametrize_by_target, queue
from conformance.suites.test_master_slave import (MESSAGES, closed, failover_uri,
                                                  kill_master_and_check_every_receipted_message)
from conformance.targets.base import why_missing
from conformance.topology import SharedStore, Topology

CAPABILITY = "topology.jdbc-store"
#: a 2 s lease renewed every 500 ms: short enough that a takeover after kill -9 waits little
#: (already shortened from ActiveMQ's 10 s lease and 30 s keep-alive; no statement here is about
#: either number). Not shortened further: the lease must outlast a renewal with margin, and 1.5 s
#: of slack is already thin on a loaded machine (what a test here waits is JVM and database starts)
LEASE = SharedStore(kind="jdbc", lock_keep_alive_period_ms=500, lock_acquire_sleep_interval_ms=2000)
TAKEOVER = 120.0

pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc, scope=None)


def launch_group(request, target_name, tmp_path_factory, store: SharedStore):
    """A started two-node group of ``target_name`` on one database (A master, B slave)."""
    target = request.config.stash[STATE].targets.get(target_name)
    if target is None or CAPABILITY not in target.capabilities():
        why = why_missing(target, CAPABILITY) if target is not None else "unknown target"
        pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {CAPABILITY}" + (f" ({why})" if why else ""))
    workdir = network_workdir(tmp_path_factory, f"jdbc-{request.node.name}")
    return target.launch_topology(Topology(("A", "B"), shared_store=store, prefix="jdbc"),
                                  Scenario(name="jdbc-master-slave", protocols=("stomp",)), workdir)


@pytest.fixture
def group(request, target_name, tmp_path_factory):
    cluster = launch_group(request, target_name, tmp_path_factory, LEASE)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def journaled_group(request, target_name, tmp_path_factory):
    """The same pair on ActiveMQ's journaled JDBC adapter (FT-JDBC-3): each broker's journal in
    its own data directory, checkpointed into the shared database."""
    cluster = launch_group(request, target_name, tmp_path_factory, replace(LEASE, jdbc_adapter="journaled"))
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
    # A joins as a slave and stays one: watched over three of B's leases (a lease lasts
    # lock_acquire_sleep_interval), since a master that let its lease run out would lose it to A
    # only at A's next attempt, after the checks above
    watch_until = time.monotonic() + 3 * LEASE.lock_acquire_sleep_interval_ms / 1000
    while time.monotonic() < watch_until:
        assert closed(a) and group.master() is b, \
            f"FT-JDBC-4: the restarted A took the lease from the master B after it had joined as a slave\n{group.log_tail(30)}"
        time.sleep(0.5)


@pytest.mark.spec("FT-JDBC-3")
def test_the_journaled_adapter_keeps_receipted_messages_in_the_dead_masters_own_journal(journaled_group):
    """Why the guide wants the direct adapter: with the journaled one a receipted message sits in
    the master's local journal until a checkpoint copies it into the database, so a slave taking
    over after a kill -9 cannot see it. The same sends and kill as FT-JDBC-2, where the direct
    adapter hands every message over."""
    group = journaled_group
    destination = queue("jdbc.journaled")
    client = connect_failover(failover_uri(group), "stomp", timeout=10.0)
    try:
        sent = [f"m{i}" for i in range(MESSAGES)]
        for body in sent:
            client.send(destination, body, persistent=True)  # each confirmed by the broker's receipt
        group["A"].kill()
        assert group.wait_for_master(TAKEOVER) is group["B"], \
            f"setup: the slave did not take over after the master's kill -9\n{group.log_tail(40)}"
        subscription = client.subscribe(destination, ack="client-individual")
        received = []
        while (message := subscription.receive(timeout=5.0)) is not None:
            received.append(message.text)
            subscription.ack(message)
    finally:
        client.close()
    missing = sorted(set(sent) - set(received), key=lambda b: int(b[1:]))
    assert missing, (f"FT-JDBC-3: with the journaled JDBC adapter the new master handed back all {len(sent)} "
                     f"receipted messages, as if the old master's journal were not its own\n{group.log_tail(40)}")
    print(f"FT-JDBC-3: the new master lacks {len(missing)} of {len(sent)} receipted messages "
          f"(received {len(received)})")
