"""Shared-file master/slave groups, against the A-MQ "Fault Tolerant Messaging" guide, 3.1
(../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue fault_tolerance.toml,
FT-SHARED-*), on every target that forms a ``topology.shared-store`` group through the topology
contract: the reference broker (broker processes on one journal directory, reference_broker/ha),
ActiveMQ Classic 5.17 (JVMs on one KahaDB directory) and Artemis 2.40 (a shared-store primary and
backup on one data directory).

Each test starts its own group of two nodes, A (started first: the master) and B, with the lock
settings below, and stops it at the end. Only what a client can see is asserted: whose listeners
accept connections, which messages come back, which connection the broker drops. How long a
takeover took is never asserted (the machine is shared); the deadlines only bound the waiting.

The lock file each group names (``cluster.lock_file``): ``lock`` in the reference broker's journal
directory and in KahaDB's directory; ``journal/server.lock`` for Artemis, the file its lock monitor
watches (FileLockNodeManager; removing ``serverlock.1``, which carries the primary's byte-range
lock, went unnoticed here). Artemis's primary exits when it loses that file rather than waiting as a
backup (a known deviation on FT-SHARED-2, known_deviations/fault_tolerance.toml), and nobody
recreates it (FT-SHARED-5 is not claimed for Artemis).
"""

from __future__ import annotations

import time
import uuid

import pytest

from conformance.clients import connect
from conformance.clients.failover import connect_failover
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.scenario import Scenario
from suites.network_support import network_workdir, parametrize_by_target
from conformance.targets.base import why_missing
from conformance.targets.runtime.probes import tcp_accepts
from conformance.topology import SharedStore, Topology
from machinery.waiting import poll

CAPABILITY = "topology.shared-store"
#: short lock timings so a test does not wait ActiveMQ's default 10 s per poll (already shortened
#: from the document's lockAcquireSleepInterval 10 s; no statement here is about either number).
#: Kept at 1 s / 0.5 s: what a test here waits is JVM starts, not these timers
LOCKS = SharedStore(lock_keep_alive_period_ms=1000, lock_acquire_sleep_interval_ms=500)
TAKEOVER = 120.0  # bound on a slave taking over (a JVM opening its store and acceptors)
#: FT-SHARED-2: how long a master that turned slave must still be there, waiting: ten of LOCKS'
#: lock-acquire intervals, each a poll of the lock a slave makes; long past a JVM's exit once it
#: began shutting down
SLAVE_HOLD = 5.0
#: FT-SHARED-2: how long after the drop the slave sign may take: as long as the drop may (30
#: keep-alive periods), plus a JVM broker's restart (ActiveMQ restarts its broker to wait as a slave)
SLAVE_WITHIN = 30 * LOCKS.lock_keep_alive_period_ms / 1000 + 30
MESSAGES = 40

pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc, scope=None)


def launch_group(request, target_name, tmp_path_factory, names: tuple[str, ...]):
    """A started group of ``target_name`` on one store, nodes started in ``names`` order (the
    first becomes master); the caller stops it."""
    target = request.config.stash[STATE].targets.get(target_name)
    if target is None or CAPABILITY not in target.capabilities():
        why = why_missing(target, CAPABILITY) if target is not None else "unknown target"
        pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {CAPABILITY}" + (f" ({why})" if why else ""))
    workdir = network_workdir(tmp_path_factory, f"ms-{request.node.name}")
    return target.launch_topology(Topology(names, shared_store=LOCKS, prefix="ms"),
                                  Scenario(name="master-slave", protocols=("stomp",)), workdir)


@pytest.fixture
def group(request, target_name, tmp_path_factory):
    """A started two-node group of ``target_name`` (A master, B slave), stopped after the test."""
    cluster = launch_group(request, target_name, tmp_path_factory, ("A", "B"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def group_of_three(request, target_name, tmp_path_factory):
    """A master A and two slaves B and C on one store (FT-MS-3), stopped after the test."""
    cluster = launch_group(request, target_name, tmp_path_factory, ("A", "B", "C"))
    try:
        yield cluster
    finally:
        cluster.stop()


def failover_uri(cluster) -> str:
    inner = ",".join(f"stomp://{host}:{port}" for host, port in cluster.addresses("stomp"))
    return f"failover:({inner})?randomize=false&initialReconnectDelay=100&maxReconnectDelay=1000"


def stores_a_persistent_message(node, timeout: float = 5.0) -> bool:
    """Whether ``node`` takes a persistent message now: a STOMP connection opens and a persistent
    SEND is confirmed by the broker's receipt within ``timeout`` (a broker that keeps its listener
    open but cannot reach its store does not count). The message goes to a queue of its own."""
    from conformance.clients.base import ClientError, ConnectFailed

    if not node.running:
        return False
    host, port = node.address("stomp")
    try:
        client = connect(host, port, "stomp", timeout=timeout)
    except (ClientError, ConnectFailed, OSError):
        return False
    try:
        client.send(f"queue://ms.probe.{uuid.uuid4().hex[:8]}", "probe", persistent=True)
        return True
    except (ClientError, ConnectFailed, OSError):
        return False
    finally:
        try:
            client.close()
        except (ClientError, ConnectFailed, OSError):
            pass


def queue() -> str:
    return f"queue://ms.{uuid.uuid4().hex[:10]}"


def closed(node) -> bool:
    host, port = node.address("stomp")
    return not tcp_accepts(port, 1.0)


@pytest.mark.spec("FT-SHARED-1")
def test_only_the_master_opens_its_listeners(group):
    a, b = group["A"], group["B"]
    assert group.master() is a, f"FT-SHARED-1: node A (started first, alone) is not the master\n{group.log_tail(30)}"
    assert b.running, f"FT-SHARED-1: the slave exited instead of waiting for the lock\n{b.log_tail(30)}"
    assert closed(b), f"FT-SHARED-1: the slave B accepts connections on its STOMP port while A is master\n{b.log_tail(30)}"
    assert not closed(a), "FT-SHARED-1: the master's STOMP port refuses connections"


def kill_master_and_check_every_receipted_message(group, spec: str) -> None:
    """Send MESSAGES persistent messages through a failover client (each confirmed by a receipt),
    kill -9 the master A, and require B to take over and hand every one of them back exactly once.
    Shared with the JDBC suite (``spec`` names the statement checked)."""
    destination = queue()
    client = connect_failover(failover_uri(group), "stomp", timeout=10.0)
    try:
        sent = [f"m{i}" for i in range(MESSAGES)]
        for body in sent:
            client.send(destination, body, persistent=True)  # each confirmed by the broker's receipt
        group["A"].kill()  # kill -9: nothing gets flushed on the way out
        new_master = group.wait_for_master(TAKEOVER)
        assert new_master is group["B"], \
            f"{spec}: the slave did not take over within {TAKEOVER} s of the master's kill -9\n{group.log_tail(40)}"
        subscription = client.subscribe(destination, ack="client-individual")
        received = []
        deadline = time.monotonic() + 30
        while len(received) < len(sent) and time.monotonic() < deadline:
            message = subscription.receive(timeout=2.0)
            if message is not None:
                received.append(message.body.decode() if isinstance(message.body, bytes) else message.body)
                subscription.ack(message)
        lost = sorted(set(sent) - set(received), key=lambda b: int(b[1:]))
        assert not lost, (f"{spec}: {len(lost)} of {len(sent)} receipted persistent messages missing on the new "
                          f"master after the failover: {lost[:10]}\n{group.log_tail(40)}")
        assert sorted(received, key=lambda b: int(b[1:])) == sent, \
            f"{spec}: messages came back duplicated or unexpected: {received}"
    finally:
        client.close()


@pytest.mark.spec("FT-SHARED-9", "FT-MS-1")
def test_killed_master_the_slave_takes_over_with_every_receipted_message(group):
    kill_master_and_check_every_receipted_message(group, "FT-SHARED-9")


@pytest.mark.spec("FT-SHARED-6", "FT-SHARED-12")
def test_a_restarted_master_rejoins_as_a_slave(group):
    # FT-SHARED-12 too: A is restarted with the very configuration it was master with, and comes
    # back a slave, because only the order in which the nodes reached the lock decides the roles
    a, b = group["A"], group["B"]
    a.kill()
    assert group.wait_for_master(TAKEOVER) is b, f"FT-SHARED-6: B never took over\n{group.log_tail(40)}"
    a.start(timeout=TAKEOVER)  # returns once A serves or waits for the lock
    assert a.running, f"FT-SHARED-6: the restarted former master exited\n{a.log_tail(30)}"
    assert a.process.waiting_for_lock(), f"FT-SHARED-6: the restarted former master does not wait for the lock\n{a.log_tail(30)}"
    assert closed(a), f"FT-SHARED-6: the restarted former master opened its listeners while B is master\n{a.log_tail(30)}"
    assert group.master() is b, "FT-SHARED-6: B stopped being master when A came back"
    assert a.process.waiting_for_lock() and closed(a), \
        "FT-SHARED-12: node A, unchanged since it was master, should now be the slave: roles follow the lock alone"


def delete_lock_file_under_the_master(group):
    """Delete the group's lock file while a STOMP client is connected to the master A; returns that
    client and whether the master dropped it (stopped serving) within ample keep-alive periods."""
    if group.lock_file is None:
        pytest.skip(f"{NOT_APPLICABLE}the store's lock file is not reachable from the harness ({group.store})")
    host, port = group["A"].address("stomp")
    client = connect(host, port, "stomp", timeout=10.0)
    assert group.lock_file.exists(), f"no lock file at {group.lock_file}: the launcher names the wrong file"
    group.lock_file.unlink()
    # The master re-checks every lock_keep_alive_period; give it ample periods on a busy machine.
    dropped = poll(lambda: not client.connected, bool, timeout=30 * LOCKS.lock_keep_alive_period_ms / 1000)
    return client, dropped


@pytest.mark.spec("FT-SHARED-2")
def test_a_master_whose_lock_file_is_deleted_stops_serving_and_turns_slave(group):
    client, dropped = delete_lock_file_under_the_master(group)
    try:
        assert dropped, (f"FT-SHARED-2: the master kept serving (its client connection stayed open) for "
                         f"{30 * LOCKS.lock_keep_alive_period_ms} ms after its lock file {group.lock_file} was "
                         f"deleted\n{group.log_tail(40)}")
    finally:
        client.close()
    # ...and turns slave rather than ending (guide 3.1, lockKeepAlivePeriod). Seen in three steps:
    # its listeners close; then it waits for the lock (each target's own sign, `waiting_for_lock`:
    # the reference broker's slave line, ActiveMQ's "locked by another server" once its broker
    # restarted, Artemis's AMQ221109 / AMQ221034) with them closed, or, as a slave that found the
    # lock file missing and recreated it before B did (FT-SHARED-5), it is master again; and it
    # is still there `SLAVE_HOLD` s on, because a broker that is shutting down also has its
    # listeners closed for a moment
    a = group["A"]
    went_down = poll(lambda: closed(a) or not a.running, bool, timeout=SLAVE_WITHIN, interval=0.05)
    slave = went_down and poll(lambda: a.running and (a.process.waiting_for_lock() and closed(a) or a.serving()),
                               bool, timeout=SLAVE_WITHIN, interval=0.2)
    if slave:
        time.sleep(SLAVE_HOLD)
    still = a.running and (a.process.waiting_for_lock() or a.serving())
    assert slave and still, (
        f"FT-SHARED-2: the master whose lock file was deleted stopped serving but did not turn slave (seen waiting "
        f"for the lock with its listeners closed, or master again: {bool(slave)}; {SLAVE_HOLD:.0f} s later running: "
        f"{a.running})\n{group.log_tail(30)}")
    assert group.wait_for_master(TAKEOVER) is not None, \
        f"FT-SHARED-2: with the old master a slave, no broker became master\n{group.log_tail(40)}"


@pytest.mark.spec("FT-SHARED-5")
def test_after_a_deleted_lock_file_a_master_recreates_it(group):
    client, dropped = delete_lock_file_under_the_master(group)
    client.close()
    master = group.wait_for_master(TAKEOVER)
    assert master is not None, f"FT-SHARED-5: no broker became master again after the lock file was deleted\n" \
                               f"{group.log_tail(40)}"
    assert group.lock_file.exists(), (f"FT-SHARED-5: the new master {master.name} did not recreate the lock file "
                                      f"{group.lock_file.name}; the directory holds "
                                      f"{sorted(p.name for p in group.lock_file.parent.iterdir())}\n"
                                      f"{group.log_tail(40)}")


@pytest.mark.spec("FT-MS-2")
def test_a_takeover_keeps_a_committed_transaction_and_none_of_an_open_one(group):
    """Chapter 1: the group keeps persistent messages *and transactions* intact. One transaction is
    committed on the master (its COMMIT receipted), a second is left open, the master is killed
    -9: the new master must hold every message of the first and none of the second."""
    destination = queue()
    client = connect_failover(failover_uri(group), "stomp", timeout=10.0)
    try:
        committed = [f"c{i}" for i in range(5)]
        transaction = client.begin()
        for body in committed:
            client.send(destination, body, persistent=True, transaction=transaction)
        client.commit(transaction)  # receipted: the broker has committed it
        open_transaction = client.begin()
        for i in range(5):
            client.send(destination, f"o{i}", persistent=True, transaction=open_transaction)
        group["A"].kill()  # the open transaction's COMMIT is never sent
        assert group.wait_for_master(TAKEOVER) is group["B"], \
            f"setup: the slave did not take over after the master's kill -9\n{group.log_tail(40)}"
        subscription = client.subscribe(destination, ack="client-individual")
        received = []
        while (message := subscription.receive(timeout=5.0)) is not None:
            received.append(message.text)
            subscription.ack(message)
    finally:
        client.close()
    assert sorted(m for m in received if m.startswith("c")) == committed, \
        (f"FT-MS-2: the new master should hold every message of the transaction committed on the old one; "
         f"received {received}\n{group.log_tail(40)}")
    leaked = [m for m in received if m.startswith("o")]
    assert not leaked, (f"FT-MS-2: messages of a transaction still open when the master died reached the new "
                        f"master: {leaked}")
    assert len(received) == len(committed), f"FT-MS-2: duplicates or strangers among {received}"


@pytest.mark.spec("FT-MS-3")
# three JVMs start one after the other in the fixture (the default 120 s ran out for Artemis's on
# this shared 2-core machine); the bound is on waiting, nothing here is timed
@pytest.mark.timeout(420)
def test_with_two_slaves_exactly_one_takes_over(group_of_three):
    group = group_of_three
    a, b, c = group["A"], group["B"], group["C"]
    assert group.master() is a, f"setup: node A (started first) is not the master\n{group.log_tail(30)}"
    a.kill()
    new_master = group.wait_for_master(TAKEOVER)  # master() raises if two serve at once
    assert new_master in (b, c), f"FT-MS-3: no slave took over within {TAKEOVER} s\n{group.log_tail(40)}"
    other = c if new_master is b else b
    # the loser keeps polling for the lock; watch it for a few of its polls so a late double
    # master would be seen
    time.sleep(10 * LOCKS.lock_acquire_sleep_interval_ms / 1000)
    assert group.master() is new_master, f"FT-MS-3: the master changed again\n{group.log_tail(40)}"
    assert other.running, f"FT-MS-3: the slave that did not take over exited instead of waiting\n{other.log_tail(30)}"
    assert closed(other), (f"FT-MS-3: slave {other.name} opened its listeners while {new_master.name} is master"
                           f"\n{other.log_tail(30)}")
    # and the new master serves: a message goes round through it
    host, port = new_master.address("stomp")
    client = connect(host, port, "stomp", timeout=10.0)
    try:
        destination = queue()
        subscription = client.subscribe(destination)
        client.send(destination, "after", persistent=True)
        got = subscription.receive(timeout=10.0)
        assert got is not None and got.text == "after", f"FT-MS-3: the new master {new_master.name} does not serve: {got}"
    finally:
        client.close()
