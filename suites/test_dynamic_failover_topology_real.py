"""Dynamic failover's broker list as the brokers announce it and the clients use it (the A-MQ
"Fault Tolerant Messaging" guide, 2.1.2 "Dynamic Failover": Overview, Client-side configuration,
Table 2.2 and Example 2.2 with its note; ../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md;
catalogue fault_tolerance.toml FT-DYNAMIC-3, -4, -6, -8, -10), on ActiveMQ with its own clients
(activemq-client 5.17.2 and 6.3.1 through the Java driver; issue 28). The sibling module
test_dynamic_failover_real.py has FT-DYNAMIC-1, -2 and -7.

What is read:
* what a broker *announces*: the OpenWire ConnectionControl commands its clients receive (the
  driver reports each, with its broker list and its rebalance flag, as a ``connection-control``
  event). An announcement is watched on an *observer*, a connection with
  ``updateURIsSupported=false``, which receives the commands but does not act on them, so a
  rebalance request cannot move it off the broker being watched;
* what a client *knows* and *does*: the failover transport's supplied list (the driver's
  ``transport_uris``) and the broker it reaches after its connection fails.

Topologies (ActiveMQ brokers, OpenWire only, each started in a second or two):
* the *filtered trio* (module-scoped; FT-DYNAMIC-3 and -6): C; B bridged to C; A bridged to B and
  to C; all announce (updateClusterClients), A with ``updateClusterFilter="dynA.*,dynB.*"`` (the
  two-pattern shape of Example 2.2), so A announces A and B but not C, and B announces all three.
  A client reaches A through a gate of the fault proxy, which the test closes to fail the
  connection without stopping A;
* a *lone A* per configuration (module-scoped; FT-DYNAMIC-4, -10): a broker that a new broker J
  joins (J's duplex bridge to A) and leaves (J stopped), one J per test;
* A and B networked and a standalone F (per test, FT-DYNAMIC-8: A and B are killed).
"""

from __future__ import annotations

import time
import uuid

import pytest

from conformance.clients.java_driver import DriverError, NoAnswer, port_of
from conformance.plugin import NOT_APPLICABLE, STATE
from suites.dynamic_failover_support import (UPDATES, announced_ports, announcements, ports_of,
                                                          start_broker)
from suites.java_support import ACTIVEMQ_CLIENTS, SUBJECTS, client_params, drivers  # noqa: F401
from suites.network_support import network_workdir, parametrize_by_target
from suites.proxy_support import fault_proxy  # noqa: F401 - the fixture
from conformance.waiting import QUIET
from machinery.waiting import poll

pytestmark = [pytest.mark.slow]

#: A's filter: Example 2.2's shape (two patterns, comma-separated) over this module's broker names
FILTER = "dynA.*,dynB.*"
#: the client's reconnect delays: short, so that a failed connection moves at once
DELAYS = "initialReconnectDelay=50&maxReconnectDelay=500"
#: an observer takes the broker's announcements and ignores them (see the module docstring)
OBSERVER = "updateURIsSupported=false"
#: seconds an announcement (or a move) has to arrive: a bound for a loaded machine, never a speed
ARRIVE = 30.0
#: seconds after a leaving broker has stopped during which a removal announcement would have come:
#: the broker announces when the network connection closes, before the leaving JVM has exited
#: (`stop` returns after the exit); with updateClusterClientsOnRemove the removal arrived before
#: `stop` returned in every run, so three quiet windows are plenty
LEAVE_WINDOW = 3 * QUIET
#: trials of the random pick (FT-DYNAMIC-6); see the test for the probability
TRIALS = 12
#: seconds a send is given to show the client found no broker (FT-DYNAMIC-8's control case)
NOT_REACHED = 5.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def require_activemq(request, target_name: str) -> None:
    target = request.config.stash[STATE].targets[target_name]
    if target.kind != "activemq":
        pytest.skip(f"{NOT_APPLICABLE}dynamic failover is ActiveMQ's (OpenWire ConnectionControl); "
                    f"{target_name} is {target.kind}")


class Started:
    """Brokers started for a fixture, stopped (by their handles) in reverse order."""

    def __init__(self) -> None:
        self.brokers = []

    def add(self, broker):
        self.brokers.append(broker)
        return broker

    def stop(self) -> None:
        for broker in reversed(self.brokers):
            broker.stop()


@pytest.fixture(scope="module")
def filtered_trio(target_name, request, tmp_path_factory):
    require_activemq(request, target_name)
    workdir = network_workdir(tmp_path_factory, f"ftdyn-trio-{target_name}")
    started = Started()
    try:
        c = started.add(start_broker(workdir, "dynC", UPDATES))
        b = started.add(start_broker(workdir, "dynB", UPDATES, [c]))
        a = started.add(start_broker(workdir, "dynA", {**UPDATES, "updateClusterFilter": FILTER}, [b, c]))
        yield a, b, c
    finally:
        started.stop()


def lone_broker(name: str, attributes: dict[str, str]):
    @pytest.fixture(scope="module")
    def fixture(target_name, request, tmp_path_factory):
        require_activemq(request, target_name)
        workdir = network_workdir(tmp_path_factory, f"ftdyn-{name}-{target_name}")
        broker = start_broker(workdir, name, attributes)
        try:
            yield broker
        finally:
            broker.stop()
    return fixture


#: Table 2.2's other two attributes left out of the configuration: their defaults apply
lone_default = lone_broker("dynD", UPDATES)
#: both set
lone_all_set = lone_broker("dynE", {**UPDATES, "updateClusterClientsOnRemove": "true",
                                    "rebalanceClusterClients": "true"})


def first_announcement(conn):
    """The first ConnectionControl ``conn`` received (sent on connecting); fails if none came."""
    seen = poll(lambda: announcements(conn), timeout=ARRIVE)
    assert seen, f"setup: {conn.name} received no broker list within {ARRIVE:.0f} s of connecting"
    return seen[0]


def first_listing(conn, port: int, since: float) -> float | None:
    """When ``conn`` first received a list naming ``port`` after ``since`` (None: never)."""
    return next((e.mono for e in announcements(conn, since) if port in announced_ports(e)), None)


def close_quietly(conn) -> None:
    try:
        conn.close(timeout=5)
    except DriverError:
        pass  # a client still dialling dead brokers does not close; the driver stops with the module


# ---------------------------------------------------------------------------------- FT-DYNAMIC-3


@pytest.mark.spec("FT-DYNAMIC-3")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_update_cluster_filter_limits_the_brokers_announced_to_clients(filtered_trio, drivers, client):
    """A announces (through its filter) itself and B; C, bridged to A like B, matches neither
    pattern and is not announced. B, in the same network without a filter, announces C: the
    filter is what leaves C out."""
    a, b, c = filtered_trio
    driver = drivers(client)
    on_a = driver.connect(f"failover:(tcp://127.0.0.1:{a.openwire_port})?{OBSERVER}", timeout=60)
    on_b = driver.connect(f"failover:(tcp://127.0.0.1:{b.openwire_port})?{OBSERVER}", timeout=60)
    try:
        from_a, from_b = set(announced_ports(first_announcement(on_a))), set(announced_ports(first_announcement(on_b)))
        assert c.openwire_port in from_b, f"setup: B (no filter) should announce C, its bridged peer: {from_b}"
        ports = {a.openwire_port: "A", b.openwire_port: "B", c.openwire_port: "C"}
        named = sorted(ports.get(p, str(p)) for p in from_a)
        assert from_a == {a.openwire_port, b.openwire_port}, (
            f"FT-DYNAMIC-3: A with updateClusterFilter={FILTER!r} should announce exactly the brokers whose names "
            f"match a pattern (dynA, dynB), not dynC; it announced {named} to {SUBJECTS[client]}")
    finally:
        close_quietly(on_a)
        close_quietly(on_b)


# ---------------------------------------------------------------------------------- FT-DYNAMIC-6


@pytest.mark.spec("FT-DYNAMIC-6")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_after_a_failure_the_client_picks_at_random_from_the_supplied_list_and_takes_the_new_broker_s_list(
        filtered_trio, drivers, fault_proxy, client):
    """The client names only the gate in front of A; A supplies [A, B]. The gate closes (the
    connection fails, A stays up): the client must reach A or B, never C (not supplied), and over
    `TRIALS` trials both. A client that always took the first of the list (A's own address comes
    first) or any fixed one of the two would see one broker only; a uniform pick of two does so
    with probability 2 x (1/2)^12 = 1/2048. Where it lands on B, its supplied list must become
    B's announcement, which names C: the new broker's list replaced A's."""
    a, b, c = filtered_trio
    driver = drivers(client)
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    listen = fault_proxy.create_proxy(gate, f"127.0.0.1:{a.openwire_port}")["listen"]
    names = {a.openwire_port: "A", b.openwire_port: "B", c.openwire_port: "C"}
    picks = []
    try:
        for trial in range(TRIALS):
            fault_proxy.enable(gate)
            conn = driver.connect(f"failover:(tcp://{listen})?{DELAYS}", timeout=60)
            try:
                supplied = ports_of(poll(lambda: conn.transport_uris()["updated"], timeout=ARRIVE))
                assert supplied == {a.openwire_port, b.openwire_port}, f"setup: A supplied {supplied}"
                fault_proxy.disable(gate)
                landed = poll(lambda: conn.port, lambda p: p is not None and p != port_of(f"tcp://{listen}"),
                              timeout=ARRIVE)
                picks.append(names.get(landed, str(landed)))
                assert landed in (a.openwire_port, b.openwire_port), (
                    f"FT-DYNAMIC-6: after its connection failed, {SUBJECTS[client]} should pick its next broker from "
                    f"the list A supplied (A, B); trial {trial + 1} reached {picks[-1]}")
                if landed == b.openwire_port:
                    known = poll(lambda: ports_of(conn.transport_uris()["updated"]),
                                 lambda s: c.openwire_port in s, timeout=ARRIVE)
                    assert known == {a.openwire_port, b.openwire_port, c.openwire_port}, (
                        f"FT-DYNAMIC-6: on B, whose announcement names A, B and C, {SUBJECTS[client]}'s supplied "
                        f"list should be B's, replacing A's (A, B); it is {sorted(names.get(p, p) for p in known)}")
            finally:
                close_quietly(conn)
    finally:
        fault_proxy.delete_proxy(gate)
    print(f"FT-DYNAMIC-6 picks over {TRIALS} trials ({SUBJECTS[client]}): {' '.join(picks)}")
    assert {"A", "B"} <= set(picks), (
        f"FT-DYNAMIC-6: {SUBJECTS[client]} should pick its next broker at random from the supplied A, B; over "
        f"{TRIALS} trials it picked {' '.join(picks)}")


# -------------------------------------------------------------------------- FT-DYNAMIC-4 and -10


def join_and_leave(broker, driver, workdir):
    """An observer and a following client on ``broker``; broker J joins (its duplex bridge to
    ``broker``), then leaves (stopped). Returns (observer, follower, J's port, the time J joined,
    the time J had stopped)."""
    observer = driver.connect(f"failover:(tcp://127.0.0.1:{broker.openwire_port})?{OBSERVER}", timeout=60)
    follower = driver.connect(f"failover:(tcp://127.0.0.1:{broker.openwire_port})?{DELAYS}", timeout=60)
    first_announcement(observer)
    joined = time.monotonic()
    j = start_broker(workdir, f"dynJ{uuid.uuid4().hex[:6]}", {}, [broker])
    try:
        poll(lambda: any(j.openwire_port in announced_ports(e) for e in announcements(observer, joined)),
             timeout=ARRIVE)
    finally:
        j.stop()
    return observer, follower, j.openwire_port, joined, time.monotonic()


@pytest.mark.spec("FT-DYNAMIC-4", "FT-DYNAMIC-10")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_by_default_a_joining_broker_is_announced_a_leaving_one_is_not_and_no_rebalance_is_asked(
        lone_default, drivers, client, tmp_path):
    """A sets updateClusterClients only: a broker that joins is announced; one that leaves is not
    (FT-DYNAMIC-4, and updateClusterClientsOnRemove's default, FT-DYNAMIC-10); no announcement
    asks to rebalance and the following client stays on A (rebalanceClusterClients' default)."""
    config = lone_default.config_path.read_text()
    assert "updateClusterClients=" in config and "updateClusterClientsOnRemove" not in config \
        and "rebalanceClusterClients" not in config, "setup: the configuration names an option left at its default"
    observer, follower, j_port, joined, left = join_and_leave(lone_default, drivers(client), tmp_path)
    try:
        time.sleep(LEAVE_WINDOW)  # nothing to wait for: the check is that no removal comes (see LEAVE_WINDOW)
        after_join = announcements(observer, joined)
        assert any(j_port in announced_ports(e) for e in after_join), (
            f"FT-DYNAMIC-4: A should announce the broker that joined (port {j_port}) to {SUBJECTS[client]}; "
            f"announcements: {[e.detail.get('connected_brokers') for e in after_join]}")
        after_leave = announcements(observer, left)
        listed = first_listing(observer, j_port, joined)
        dropped = [e.detail.get("connected_brokers") for e in after_join
                   if e.mono > listed and j_port not in announced_ports(e)]
        assert not dropped, (
            f"FT-DYNAMIC-4: with updateClusterClientsOnRemove at its default (false) A should not announce that the "
            f"broker left, yet {SUBJECTS[client]} received {dropped} (after the leave: "
            f"{[e.detail.get('connected_brokers') for e in after_leave]})")
        asked = [e.detail for e in announcements(observer) if e.detail.get("rebalance")]
        assert not asked, (f"FT-DYNAMIC-10: with rebalanceClusterClients at its default (false) A should not ask its "
                           f"clients to rebalance; {SUBJECTS[client]} was asked: {asked}")
        assert follower.port == lone_default.openwire_port, (
            f"FT-DYNAMIC-10: with rebalanceClusterClients at its default the client should stay on A after a broker "
            f"joined; {SUBJECTS[client]} is on {follower.address}")
    finally:
        close_quietly(observer)
        close_quietly(follower)


@pytest.mark.spec("FT-DYNAMIC-10")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_update_on_remove_announces_a_leaving_broker_and_rebalance_asks_clients_to_spread(
        lone_all_set, drivers, client, tmp_path):
    """A sets updateClusterClientsOnRemove and rebalanceClusterClients too: when J leaves, A
    announces a list without it; when J joins, the announcement asks the clients to rebalance,
    and two clients are given the brokers in different orders (each takes the first one: spread)."""
    driver = drivers(client)
    second = driver.connect(f"failover:(tcp://127.0.0.1:{lone_all_set.openwire_port})?{OBSERVER}", timeout=60)
    observer, follower, j_port, joined, left = join_and_leave(lone_all_set, driver, tmp_path)
    try:
        listed = first_listing(observer, j_port, joined)
        assert listed is not None, f"setup: A did not announce the joining broker (port {j_port}) within {ARRIVE:.0f} s"
        removal = poll(lambda: [e for e in announcements(observer, listed)
                                if j_port not in announced_ports(e)], timeout=ARRIVE)
        assert removal, (f"FT-DYNAMIC-10: with updateClusterClientsOnRemove A should announce a list without the broker "
                         f"that left (port {j_port}); {SUBJECTS[client]} received "
                         f"{[e.detail.get('connected_brokers') for e in announcements(observer, joined)]}")
        # the first list naming J that each of the two clients received
        joins = [e for e in (next((e for e in announcements(conn, joined) if j_port in announced_ports(e)), None)
                             for conn in (observer, second)) if e is not None]
        assert joins and all(e.detail.get("rebalance") for e in joins), (
            f"FT-DYNAMIC-10: with rebalanceClusterClients A's announcement of the joining broker should ask "
            f"{SUBJECTS[client]} to rebalance: {[e.detail for e in joins]}")
        firsts = {announced_ports(e)[0] for e in joins}
        assert len(joins) == 2 and len(firsts) == 2, (
            f"FT-DYNAMIC-10: with rebalanceClusterClients two clients should be asked to go to different brokers "
            f"(the first of the list each is sent); they were sent {[e.detail.get('connected_brokers') for e in joins]}")
    finally:
        for conn in (observer, follower, second):
            close_quietly(conn)


# ---------------------------------------------------------------------------------- FT-DYNAMIC-8


@pytest.fixture
def pair_and_fallback(target_name, request, tmp_path_factory):
    """A and B networked, both announcing, and F standalone (known to nobody); per test (A and B
    are killed)."""
    require_activemq(request, target_name)
    workdir = network_workdir(tmp_path_factory, f"ftdyn-fallback-{target_name}")
    started = Started()
    try:
        f = started.add(start_broker(workdir, "dynF", {}))
        b = started.add(start_broker(workdir, "dynB", UPDATES))
        a = started.add(start_broker(workdir, "dynA", UPDATES, [b]))
        yield a, b, f
    finally:
        started.stop()


def reached_after_kills(pair_and_fallback, driver, tmp_path, *, with_file: bool, kill_b: bool = True):
    """A client naming A (which supplies A and B); its updateURIsURL file (``with_file``) lists F,
    written once the client is on A: the client reads the file before every connection attempt,
    the first one included, and would otherwise start on F half the time (see the catalogue note).
    Then A (and B if ``kill_b``) is killed and a send follows. Returns (the port the send went
    through on, or None when it was still waiting, what was seen)."""
    a, b, f = pair_and_fallback
    uris_file = tmp_path / "failover-uris.txt"
    option = f"&updateURIsURL={uris_file.as_uri()}" if with_file else ""
    conn = driver.connect(f"failover:(tcp://127.0.0.1:{a.openwire_port})?{DELAYS}{option}", timeout=60)
    try:
        assert conn.port == a.openwire_port, f"setup: the client should be on A, the broker it names: {conn.address}"
        supplied = poll(lambda: ports_of(conn.transport_uris()["updated"]), lambda s: b.openwire_port in s,
                        timeout=ARRIVE)
        assert supplied == {a.openwire_port, b.openwire_port}, f"setup: A should supply A and B: {supplied}"
        uris_file.write_text(f"tcp://127.0.0.1:{f.openwire_port}\n")
        queue = f"ftdyn.{uuid.uuid4().hex[:8]}"
        conn.send(queue, "before")
        if kill_b:
            b.kill()
        a.kill()
        try:
            # the short wait only where the expected outcome is "no broker": a client that moves
            # does so within its reconnect delays, one that cannot keeps waiting however long
            conn.send(queue, "after", timeout=ARRIVE if with_file or not kill_b else NOT_REACHED)
        except NoAnswer:
            return None, f"the send was still waiting after A{' and B' if kill_b else ''} died; on {conn.address}"
        port = conn.port
        names = {a.openwire_port: "A", b.openwire_port: "B", f.openwire_port: "F"}
        return port, f"the send went through on {names.get(port, port)} ({conn.address})"
    finally:
        close_quietly(conn)


@pytest.mark.spec("FT-DYNAMIC-8")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_with_no_supplied_broker_reachable_the_client_falls_back_on_its_update_uris_url_file(
        pair_and_fallback, drivers, client, tmp_path):
    port, seen = reached_after_kills(pair_and_fallback, drivers(client), tmp_path, with_file=True)
    assert port == pair_and_fallback[2].openwire_port, (
        f"FT-DYNAMIC-8: with A and B (the supplied list) dead, {SUBJECTS[client]} should fall back on F, the URI of "
        f"its updateURIsURL file: {seen}")


@pytest.mark.spec("FT-DYNAMIC-8")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_without_an_update_uris_url_file_the_client_does_not_reach_the_unannounced_broker(
        pair_and_fallback, drivers, client, tmp_path):
    """The control case: F is reached through the file only (nobody announces it)."""
    port, seen = reached_after_kills(pair_and_fallback, drivers(client), tmp_path, with_file=False)
    assert port is None, f"FT-DYNAMIC-8 (control): without updateURIsURL {SUBJECTS[client]} reached a broker: {seen}"


@pytest.mark.spec("FT-DYNAMIC-8")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_while_a_supplied_broker_is_reachable_the_client_does_not_fall_back_on_its_file(
        pair_and_fallback, drivers, client, tmp_path):
    """The file is the fallback for when no supplied broker can be reached: with A dead and B (of
    A's list) up, the client should go to B, not to F."""
    a, b, f = pair_and_fallback
    port, seen = reached_after_kills(pair_and_fallback, drivers(client), tmp_path, with_file=True, kill_b=False)
    assert port == b.openwire_port, (
        f"FT-DYNAMIC-8: with A dead and B of the supplied list still up, {SUBJECTS[client]} should reach B and keep "
        f"its updateURIsURL file for when no supplied broker is reachable: {seen}")
