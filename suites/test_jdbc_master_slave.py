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

from chaos.nemesis.lock import lock_loss_nemesis
from conformance.clients.failover import connect_failover
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from suites.network_support import network_workdir, parametrize_by_target, queue
from suites.test_master_slave import (MESSAGES, closed, failover_uri,
                                                  kill_master_and_check_every_receipted_message,
                                                  stores_a_persistent_message)
from conformance.targets.base import why_missing
from conformance.topology import SharedStore, Topology
from machinery.waiting import poll

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
def proxied_group(request, target_name, tmp_path_factory):
    """The same pair, each node reaching the database through its own fault-proxy link
    (a lock-loss nemesis on ``cluster.rig`` cuts one), for FT-JDBC-7."""
    cluster = launch_group(request, target_name, tmp_path_factory, replace(LEASE, proxied_database=True))
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
        # the positive control: a message receipted by the new master must come back through the
        # same client and queue, so a missing message below is one the new master lacks, not a
        # receive path that hands back nothing at all
        client.send(destination, "control", persistent=True)
        subscription = client.subscribe(destination, ack="client-individual")
        received = []
        while (message := subscription.receive(timeout=5.0)) is not None:
            received.append(message.text)
            subscription.ack(message)
    finally:
        client.close()
    assert "control" in received, (
        f"FT-JDBC-3: a message receipted by the new master after the takeover never came back (received "
        f"{received}): the check below would count lost messages that no receive could have shown"
        f"\n{group.log_tail(40)}")
    received.remove("control")
    missing = sorted(set(sent) - set(received), key=lambda b: int(b[1:]))
    assert missing, (f"FT-JDBC-3: with the journaled JDBC adapter the new master handed back all {len(sent)} "
                     f"receipted messages, as if the old master's journal were not its own\n{group.log_tail(40)}")
    print(f"FT-JDBC-3: the new master lacks {len(missing)} of {len(sent)} receipted messages "
          f"(received {len(received)})")


@pytest.mark.spec("FT-JDBC-7")
# room for the group's start, TAKEOVER s of waiting for the master to stop and the watch after it,
# so that a master that never stops ends in this test's own assertion (with its log), not a timeout
@pytest.mark.timeout(300)
def test_with_the_database_lost_to_every_node_no_broker_serves(proxied_group):
    """The shared database is the group's single point of failure: with every node's link to it
    cut, no broker of the group may take a persistent message (confirmed by a receipt), neither
    the master nor the slave. A listener left open without a store is not serving (ActiveMQ's
    master keeps its connectors open: its lease locker logs the failed keep-alive and carries on)."""
    group = proxied_group
    assert group.master() is group["A"], f"setup: node A is not the master\n{group.log_tail(30)}"
    assert stores_a_persistent_message(group["A"]), f"setup: the master does not take a persistent message"
    cut = lock_loss_nemesis(group.rig)  # left cut: the group's stop heals the links
    for host in ("A", "B"):
        cut.invoke("partition", host=host)
    stopped = poll(lambda: not stores_a_persistent_message(group["A"]), bool, timeout=TAKEOVER, interval=0.5)
    assert stopped, (f"FT-JDBC-7: the master still took persistent messages {TAKEOVER} s after the database became "
                     f"unreachable to every node\n{group.log_tail(40)}")
    # several leases long (the master's last lease has run out; the slave keeps trying)
    watched = 5 * LEASE.lock_acquire_sleep_interval_ms / 1000 + 5.0
    served = poll(lambda: [n.name for n in (group["A"], group["B"]) if stores_a_persistent_message(n)], bool,
                  timeout=watched, interval=0.5)
    assert not served, (f"FT-JDBC-7: {served} took a persistent message while no node could reach the database\n"
                        f"{group.log_tail(40)}")


# --------------------------------------------------------------------------- scheduled messages

#: how long a message is scheduled ahead: longer than the time from its send to the master's kill
#: (a fraction of a second), so it is still waiting in the scheduler store when the master dies
SCHEDULED_DELAY_MS = 8000


def scheduler_group(request, target_name, tmp_path, *, shared: bool):
    """An ActiveMQ JDBC pair with the job scheduler on (schedulerSupport), its store either in one
    directory both brokers use (the guide's note, ``shared``) or, ActiveMQ's default, in each
    broker's own data directory. Started; the caller stops it."""
    target = request.config.stash[STATE].targets.get(target_name)
    if target is None or target.kind != "activemq":
        pytest.skip(f"{NOT_APPLICABLE}FT-JDBC-6 is ActiveMQ's job scheduler store")
    ok, reason = target.availability()
    if not ok:
        from conformance.requirements import skip_or_fail
        skip_or_fail("activemq", reason)
    from conformance.targets.activemq.shared_store import SharedStoreGroup

    shared_scheduler = tmp_path / "shared-scheduler"

    class WithScheduler(SharedStoreGroup):
        def _make_nodes(self, *args, **kwargs) -> None:
            super()._make_nodes(*args, **kwargs)
            for node in self.nodes.values():
                node.process.scheduler_support = True
                if shared:
                    node.process.broker_attributes["schedulerDirectory"] = str(shared_scheduler)

    group = WithScheduler(tmp_path / "group", nodes=2, broker_name="ftjdbc6", jvm_heap_mb=256, jdbc=True,
                          lock_keep_alive_period_ms=LEASE.lock_keep_alive_period_ms,
                          lock_acquire_sleep_interval_ms=LEASE.lock_acquire_sleep_interval_ms)
    group.start(timeout=TAKEOVER)
    return group


def schedule_then_kill_the_master(group) -> tuple[list, float]:
    """Schedule one persistent message SCHEDULED_DELAY_MS ahead on the master, kill -9 it, and
    collect what the new master delivers until well after the message's time; returns the
    messages and when the send was confirmed."""
    destination = queue("jdbc.scheduled")
    client = connect_failover(failover_uri(group), "stomp", timeout=10.0)
    try:
        client.send(destination, "scheduled", persistent=True,
                    properties={"AMQ_SCHEDULED_DELAY": SCHEDULED_DELAY_MS})  # receipted: in the scheduler store
        sent = time.monotonic()
        group["A"].kill()
        assert group.wait_for_master(TAKEOVER) is group["B"], \
            f"setup: the slave did not take over after the master's kill -9\n{group.log_tail(40)}"
        subscription = client.subscribe(destination)
        wait = max(0.0, sent + SCHEDULED_DELAY_MS / 1000 - time.monotonic()) + 30.0
        got = subscription.receive(timeout=wait)
        return ([] if got is None else [got]), sent
    finally:
        client.close()


@pytest.mark.spec("FT-JDBC-6")
def test_a_scheduled_message_survives_the_takeover_with_a_shared_scheduler_store(request, target_name, tmp_path):
    group = scheduler_group(request, target_name, tmp_path, shared=True)
    try:
        received, sent = schedule_then_kill_the_master(group)
        arrived = time.monotonic()
    finally:
        group.stop()
    assert received and received[0].text == "scheduled", \
        (f"FT-JDBC-6: with the scheduler store shared, the message scheduled on the old master should be delivered "
         f"by the new one ({SCHEDULED_DELAY_MS} ms after its send); got {received}")
    # not before its time (1 s of slack: the broker dates the delay from its own receipt)
    assert arrived - sent >= SCHEDULED_DELAY_MS / 1000 - 1.0, \
        f"FT-JDBC-6: the scheduled message came {arrived - sent:.1f} s after its send, before its delay"


@pytest.mark.spec("FT-JDBC-6")
def test_a_scheduled_message_stays_with_the_dead_master_when_each_broker_has_its_own_scheduler_store(
        request, target_name, tmp_path):
    """The reason for the guide's note: the job scheduler keeps its own store beside the JDBC
    tables, by default in each broker's own data directory, so the new master has no record of a
    message the old one scheduled."""
    group = scheduler_group(request, target_name, tmp_path, shared=False)
    try:
        received, _ = schedule_then_kill_the_master(group)
    finally:
        group.stop()
    assert not received, (f"FT-JDBC-6: with each broker's scheduler store in its own data directory the new master "
                          f"delivered the message scheduled on the old one: {received}")


# --------------------------------------------------------------------------- membership by tables

#: the PostgreSQL schema the outsider's tables live in: the group's database, other tables
OTHER_SCHEMA = "ftjdbc5_other"


def create_schema(database, schema: str) -> None:
    import psycopg

    with psycopg.connect(database.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")


def outsider_on_other_tables(group, target_kind: str, workdir):
    """A third broker configured as the group's members are, but whose tables (messages and lock)
    are in another schema of the same database (its connection's search path): unstarted."""
    if target_kind == "reference":
        import json

        from conformance.targets.reference.process import ReferenceBrokerProcess

        config = json.loads(group["A"].process.config_file.read_text())
        config["name"] = f"{config['name']}-outsider"
        # libpq applies options= as a server setting: every unqualified table name resolves there
        config["store"]["dsn"] = f"{config['store']['dsn']} options=-csearch_path={OTHER_SCHEMA}"
        workdir.mkdir(parents=True, exist_ok=True)
        config_file = workdir / "broker.json"
        config_file.write_text(json.dumps(config, indent=2))
        return ReferenceBrokerProcess(name=config["name"], config_file=config_file, data_dir=None)
    from conformance.targets.activemq.process import ActiveMQProcess

    a = group["A"].process
    jdbc = replace(a.jdbc, jdbc_url=f"{a.jdbc.jdbc_url}?currentSchema={OTHER_SCHEMA}")  # pgjdbc's search path
    return ActiveMQProcess(workdir, name=f"{a.name}-outsider", openwire=True, persistent=True, jvm_heap_mb=256,
                           jdbc=jdbc)


@pytest.mark.spec("FT-JDBC-5")
def test_a_broker_on_other_tables_of_the_same_database_is_not_in_the_group(group, target_name, request, tmp_path):
    """3.2 "Configuring the brokers": membership is sharing the same tables, nothing else. A third
    broker with the members' settings but its tables in another schema of the group's database
    must not wait for the group's lock: it is master of its own tables at once, while A stays
    master of the group and B its slave."""
    kind = request.config.stash[STATE].targets[target_name].kind
    if kind not in ("reference", "activemq"):
        pytest.skip(f"{NOT_APPLICABLE}FT-JDBC-5 is not claimed for {kind} (roles are configured there)")
    database = group.database
    assert database is not None, f"setup: the JDBC group has no database handle: {group!r}"
    create_schema(database, OTHER_SCHEMA)
    outsider = outsider_on_other_tables(group, kind, tmp_path / "outsider")
    try:
        outsider.start(timeout=TAKEOVER, wait_for="lock")
        serving = poll(lambda: outsider.serving(), bool, timeout=30.0, interval=0.5)
        assert serving, (f"FT-JDBC-5: a broker whose tables are in another schema of the group's database waited for "
                         f"the group's lock instead of serving on its own tables\n{outsider.log_tail(30)}")
        assert group.master() is group["A"], f"FT-JDBC-5: the group's master changed when the outsider started"
        assert closed(group["B"]), "FT-JDBC-5: the group's slave opened its listeners when the outsider started"
    finally:
        outsider.stop()
