"""Client failover between two brokers of one target, against the A-MQ "Fault Tolerant Messaging"
guide, chapter 2 (../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue
conformance/spec/fault_tolerance.toml, FT-FAILOVER-*).

The failover options are the client's (ActiveMQ's failover transport; ours is
conformance/clients/failover.py, whose option arithmetic tests/conformance/test_failover.py checks
without brokers). What only real brokers show is here: that a failover client really moves
between two brokers of the target when one dies, and comes back where the guide says it should;
and, through a gate of the fault proxy in front of a broker (see "through a gate" below), that the
reconnect waits follow the delay options and that endpoint options reach every broker.
Each target runs two independent brokers it can kill and restart (``process.kill``); a reference
target that runs in-process gets two reference broker processes instead, since a broker in the
test's own process cannot die.

STOMP only: the failover logic is protocol-neutral (one class drives every protocol's client), so
one protocol is enough to check it against a broker; randomize=false throughout, so which broker
comes first is known (FT-FAILOVER-8).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest

from machinery.faultproxy import ToxiproxyClient
from conformance.clients import connect
from conformance.clients.failover import CLIENT_SUBJECT, FailoverExhausted, FailoverTimeout, InDoubt, connect_failover
from conformance.plugin import STATE
from conformance.scenario import Scenario
from suites.network_support import network_workdir, parametrize_by_target
from conformance.topology import Topology
from machinery.waiting import poll
from suites.proxy_support import fault_proxy  # noqa: F401 - the fixture
from reports.client_table import GAPS_PROPERTY, SCHEDULE_PROPERTY, schedule_property

#: every test here checks our failover client (client statements): the matrix books it under its column
pytestmark = [pytest.mark.slow, pytest.mark.client_subject(CLIENT_SUBJECT)]

#: reconnect delays for the tests that are not about them: already far below Table 2.1's
#: maxReconnectDelay default (30 s). The tests about the delays (FT-FAILOVER-4/5, FT-DISCOVERY-2)
#: keep the document's defaults or their own values, since those numbers are what they check
FAST = "initialReconnectDelay=10&maxReconnectDelay=200"
START_TIMEOUT = 120.0  # a JVM broker (re)starting on a loaded 2-core machine
RECEIVE = 10.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def _killable(target):
    """The target itself when the harness can kill its brokers, else (the in-process reference
    broker) the same broker launched as processes."""
    if "process.kill" in target.capabilities():
        return target
    if target.kind == "reference":
        from conformance.targets.reference.target import ReferenceTarget

        return ReferenceTarget(name=f"{target.name}:process", launch="process")
    return None


class Pair:
    """Brokers A and B of one target, each a topology node the test can kill and start."""

    def __init__(self, target, workdir) -> None:
        self.clusters = []
        scenario = Scenario(name="failover-pair", protocols=("stomp",))
        try:
            for name in ("A", "B"):
                cluster = target.launch_topology(Topology(nodes=(name,), prefix="fo"), scenario, workdir / name)
                self.clusters.append(cluster)
        except BaseException:
            self.stop()
            raise
        self.a, self.b = (cluster[name] for cluster, name in zip(self.clusters, "AB"))

    def uri(self, options: str = "") -> str:
        inner = ",".join("stomp://{}:{}".format(*node.address("stomp")) for node in (self.a, self.b))
        return f"failover:({inner})?randomize=false&{FAST}{options}"

    def port(self, node) -> int:
        return node.address("stomp")[1]

    def restore(self) -> None:
        """Both brokers running again, for the next test."""
        for node in (self.a, self.b):
            if not node.running:
                node.start(timeout=START_TIMEOUT)

    def stop(self) -> None:
        for cluster in self.clusters:
            cluster.stop()


@pytest.fixture(scope="module")
def pair(target_name, request, tmp_path_factory):
    target = _killable(request.config.stash[STATE].targets[target_name])
    if target is None:
        pytest.skip(f"{target_name} cannot kill its brokers (no process.kill): failover needs brokers that die")
    running = Pair(target, network_workdir(tmp_path_factory, f"failover-{target_name}"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def fresh_pair(pair):
    pair.restore()
    yield pair


# A test whose premise is a dead broker takes the pair as the test before left it when that broker
# is already dead (killed -9 there, as it would be here) instead of restarting a JVM only to kill
# it again; the tests are ordered so that such a test follows one that kills the same broker
# (a dead broker stays dead whichever test killed it: only kill -9 is used in this module).


def _kill_if_running(node) -> None:
    if node.running:
        node.kill()


@pytest.fixture
def first_down(pair):
    """The pair with the first broker (A) dead and the second (B) running."""
    if not pair.b.running:
        pair.b.start(timeout=START_TIMEOUT)
    _kill_if_running(pair.a)
    yield pair


@pytest.fixture
def all_down(pair):
    """The pair with both brokers dead."""
    for node in (pair.a, pair.b):
        _kill_if_running(node)
    yield pair


def _queue() -> str:
    return f"queue://fo.{uuid.uuid4().hex[:8]}"


def _interrupted(events) -> bool:
    return "interrupted" in [e.kind for e in events]


def _without_a_broker(events) -> bool:
    """The client's last transport event is a loss: after both brokers of a pair were killed one
    after the other it may have reached the second in between (interrupted, resumed, interrupted);
    until it noticed that one gone too, an operation still goes out on it. (Warnings and other events
    say nothing about the connection.)"""
    states = [e.kind for e in events if e.kind in ("interrupted", "resumed")]
    return bool(states) and states[-1] == "interrupted"


# FT-FAILOVER-17 too: the pair is two single-node topologies launched one by one (`Pair`), with no
# network, cluster or shared store between them, so the move below needs nothing of the brokers
@pytest.mark.spec("FT-FAILOVER-1", "FT-FAILOVER-2", "FT-FAILOVER-8", "FT-FAILOVER-17")
def test_client_moves_to_the_second_broker_when_the_first_dies_and_keeps_working(fresh_pair):
    pair, queue, events = fresh_pair, _queue(), []
    client = connect_failover(pair.uri(), "stomp", listener=events.append, timeout=5.0)
    try:
        assert client.uri.port == pair.port(pair.a), \
            f"FT-FAILOVER-8: with randomize=false the client should start on the first URI; it is on {client.uri}"
        sub = client.subscribe(queue)
        client.send(queue, b"before")
        first = sub.receive(RECEIVE)
        assert first is not None and first.body == b"before", f"FT-FAILOVER-2: no message before the kill: {first}"
        pair.a.kill()
        assert poll(lambda: _interrupted(events), timeout=30, interval=0.05), \
            f"FT-FAILOVER-2: the client never noticed that its broker died: {events}"
        client.send(queue, b"after")
        assert client.uri.port == pair.port(pair.b), \
            f"FT-FAILOVER-1: after the first broker died the client should be on the second; it is on {client.uri}"
        second = sub.receive(RECEIVE)
        assert second is not None and second.body == b"after", \
            f"FT-FAILOVER-2: the subscription should carry on on the new broker; got {second}, events {events}"
    finally:
        client.close()


@pytest.mark.spec("FT-FAILOVER-1")
def test_client_starting_while_the_first_broker_is_down_connects_to_the_next(first_down):
    pair, queue = first_down, _queue()
    client = connect_failover(pair.uri(), "stomp", timeout=5.0)
    try:
        assert client.uri.port == pair.port(pair.b), \
            f"FT-FAILOVER-1: with the first broker down the client should connect to the next one; it is on {client.uri}"
        sub = client.subscribe(queue)
        client.send(queue, b"m")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"m", f"FT-FAILOVER-1: the connection it made does not work: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-DISCOVERY-1", "FT-DISCOVERY-4")
def test_discovery_with_the_static_agent_finds_the_live_broker_of_its_list(first_down):
    pair, queue = first_down, _queue()
    listed = ",".join("stomp://{}:{}".format(*node.address("stomp")) for node in (pair.a, pair.b))
    client = connect_failover(f"discovery:(static://({listed}))?{FAST}", "stomp", timeout=5.0)
    try:
        assert client.uri.port == pair.port(pair.b), \
            f"FT-DISCOVERY-1: with one listed broker dead the discovery client should use the other; it is on {client.uri}"
        sub = client.subscribe(queue)
        client.send(queue, b"m")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"m", f"FT-DISCOVERY-4: the discovered connection does not work: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-FAILOVER-15")
def test_priority_backup_returns_to_the_first_broker_once_it_is_back(fresh_pair):
    pair, queue, events = fresh_pair, _queue(), []
    client = connect_failover(pair.uri("&priorityBackup=true"), "stomp", listener=events.append, timeout=5.0)
    try:
        sub = client.subscribe(queue)
        pair.a.kill()
        assert poll(lambda: _interrupted(events), timeout=30, interval=0.05), f"never interrupted: {events}"
        client.send(queue, b"on-b")
        assert client.uri.port == pair.port(pair.b), f"FT-FAILOVER-15: should be on the backup; on {client.uri}"
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"on-b", f"FT-FAILOVER-15: nothing received on the backup: {got}"
        pair.a.start(timeout=START_TIMEOUT)
        back = poll(lambda: client.uri.port, lambda port: port == pair.port(pair.a), timeout=60)
        assert back == pair.port(pair.a), \
            f"FT-FAILOVER-15: the client never went back to the priority broker once it was up again: {events}"
        client.send(queue, b"on-a")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"on-a", \
            f"FT-FAILOVER-15: after switching back the subscription should work on the priority broker: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-FAILOVER-6")
def test_max_reconnect_attempts_zero_never_fails_over_to_the_other_broker(fresh_pair):
    pair, queue, events = fresh_pair, _queue(), []
    client = connect_failover(pair.uri("&maxReconnectAttempts=0"), "stomp", listener=events.append, timeout=5.0)
    try:
        assert client.uri.port == pair.port(pair.a)
        client.send(queue, b"first")
        pair.a.kill()
        assert poll(lambda: _interrupted(events), timeout=30, interval=0.05), f"never interrupted: {events}"
        with pytest.raises(FailoverExhausted):
            client.send(queue, b"second")
        assert client.uri.port == pair.port(pair.a), \
            f"FT-FAILOVER-6: with maxReconnectAttempts=0 the client must not move to {client.uri}; events {events}"
    finally:
        client.close()


@pytest.mark.spec("FT-FAILOVER-3")
def test_short_form_failover_uri_without_parentheses_connects(fresh_pair):
    pair, queue = fresh_pair, _queue()
    uri = "failover:" + ",".join("stomp://{}:{}".format(*node.address("stomp")) for node in (pair.a, pair.b))
    client = connect_failover(uri, "stomp", timeout=5.0)
    try:
        assert client.uri.port in (pair.port(pair.a), pair.port(pair.b)), f"FT-FAILOVER-3: connected to {client.uri}"
        sub = client.subscribe(queue)
        client.send(queue, b"m")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"m", f"FT-FAILOVER-3: the short form's connection does not work: {got}"
    finally:
        client.close()


def _both_down(pair) -> None:
    pair.a.kill()
    pair.b.kill()


@pytest.mark.spec("FT-FAILOVER-16")
def test_priority_uris_are_preferred_over_the_list_order(fresh_pair):
    pair, queue = fresh_pair, _queue()
    second = "stomp://{}:{}".format(*pair.b.address("stomp"))
    client = connect_failover(pair.uri(f"&priorityBackup=true&priorityURIs={second}"), "stomp", timeout=5.0)
    try:
        assert client.uri.port == pair.port(pair.b), \
            f"FT-FAILOVER-16: priorityURIs names the second broker, so the client should start there; it is on {client.uri}"
        sub = client.subscribe(queue)
        client.send(queue, b"m")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"m", f"FT-FAILOVER-16: the preferred broker's connection does not work: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-FAILOVER-9")
def test_backup_holds_a_second_connection_to_the_other_broker(fresh_pair):
    pair, queue, events = fresh_pair, _queue(), []
    client = connect_failover(pair.uri("&backup=true"), "stomp", listener=events.append, timeout=5.0)
    try:
        backup = poll(lambda: client.backup_uri, lambda uri: uri is not None, timeout=30)
        assert backup is not None and backup.port == pair.port(pair.b), \
            f"FT-FAILOVER-9: with backup=true a second connection to the other broker should be held; got {backup}"
        sub = client.subscribe(queue)
        pair.a.kill()
        assert poll(lambda: _interrupted(events), timeout=30, interval=0.05), f"never interrupted: {events}"
        client.send(queue, b"after")
        assert client.uri.port == pair.port(pair.b), f"FT-FAILOVER-9: not on the backup broker: {client.uri}"
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"after", f"FT-FAILOVER-9: the backup connection does not work: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-FAILOVER-10", "FT-FAILOVER-14")
def test_timeout_bounds_an_operation_and_warnings_come_every_n_attempts(fresh_pair):
    pair, queue, events, default_events = fresh_pair, _queue(), [], []
    client = connect_failover(pair.uri("&timeout=1500&warnAfterReconnectAttempts=2"), "stomp",
                              listener=events.append, timeout=5.0)
    # a second client with warnAfterReconnectAttempts left at its default (10 by Table 2.1); FAST's
    # short waits make its twenty attempts take seconds
    default_client = connect_failover(pair.uri(), "stomp", listener=default_events.append, timeout=5.0)
    try:
        _both_down(pair)
        # (mj37: the client had moved to B between the two kills, and a send went out on that
        # connection before its loss was noticed: InDoubt, not the timeout this statement is about)
        assert poll(lambda: _without_a_broker(events), timeout=30, interval=0.05), \
            f"the client never lost its last broker: {[e.kind for e in events]}"
        # the failover client's own error for an operation that found no broker within `timeout`
        # (a refused connect or a lost receipt would be another error, and not this statement)
        with pytest.raises(FailoverTimeout, match=r"no broker connection within timeout=1500 ms"):
            client.send(queue, b"nowhere")
        warned = poll(lambda: [e.attempts for e in events if e.kind == "warning"], lambda w: len(w) >= 2, timeout=30)
        assert warned and all(n % 2 == 0 for n in warned), \
            f"FT-FAILOVER-14: a warning after every 2 failed attempts was expected; got {warned}"
        by_default = poll(lambda: [e.attempts for e in default_events if e.kind == "warning"],
                          lambda w: len(w) >= 2, timeout=30)
        assert by_default[:2] == [10, 20], (
            f"FT-FAILOVER-14: with warnAfterReconnectAttempts at its default (10) the warnings should come after "
            f"attempts 10 and 20; they came after {by_default}")
    finally:
        client.close()
        default_client.close()


@pytest.mark.spec("FT-FAILOVER-7")
def test_startup_max_reconnect_attempts_zero_gives_up_at_once_when_no_broker_is_up(all_down):
    with pytest.raises(FailoverExhausted, match="startupMaxReconnectAttempts=0"):
        connect_failover(all_down.uri("&startupMaxReconnectAttempts=0"), "stomp", timeout=5.0)


# --------------------------------------------------------------------------- through a gate
#
# The option arithmetic of Table 2.1 (how long the client waits between reconnect attempts) and
# the options set on every endpoint are checked against the target's broker A behind a *gate*: an
# endpoint of the fault proxy (loopback) that the test closes and opens. Closed, its port refuses
# connections as a dead broker's does, so the client's reconnect attempts can be watched without
# restarting a JVM; opened again, the client must reach broker A through it and work. Only lower
# bounds and order relations derived from the options are asserted, never how fast anything was.
# The reconnect-wait tests record the gaps they saw in junit.xml (record_property), beside the
# real clients' (test_failover_real_clients.py), for `brokerconf clients` and the run report.


class Gate:
    """A fault-proxy endpoint on a fixed loopback port in front of ``upstream``."""

    def __init__(self, api: ToxiproxyClient, upstream: tuple[str, int]) -> None:
        self.api, self.name = api, f"gate-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        api.create_proxy(self.name, "{}:{}".format(*upstream), f"127.0.0.1:{self.port}")

    @property
    def uri(self) -> str:
        return f"stomp://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop listening and drop every connection through the gate."""
        self.api.disable(self.name)

    def open(self) -> None:
        self.api.enable(self.name)

    def remove(self) -> None:
        self.api.delete_proxy(self.name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def gate(fresh_pair, fault_proxy):
    opened = Gate(fault_proxy, fresh_pair.a.address("stomp"))
    try:
        yield opened
    finally:
        opened.remove()


class AttemptLog:
    """The failover client's connect attempts (monotonic time, port, options) and the waits it
    asked for between them (ms), recorded by wrapping its connect and sleep functions; the waits
    are really slept."""

    def __init__(self) -> None:
        self.connects: list[tuple[float, int, dict]] = []
        self.sleeps: list[float] = []
        self.opened: list[tuple[int, dict, object]] = []  # (port, options, client) of those that succeeded
        # the ports of attempts that ended in failure, appended once the attempt is over: an
        # attempt is noted in `connects` when it starts, and one still under way when the gate
        # opens may succeed
        self.refused: list[int] = []

    def connect(self, host, port, protocol, **options):
        self.connects.append((time.monotonic(), port, dict(options)))
        try:
            client = connect(host, port, protocol, **options)
        except Exception:
            self.refused.append(port)
            raise
        self.opened.append((port, dict(options), client))
        return client

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds * 1000.0, 3))
        time.sleep(seconds)

    def attempts_after(self, moment: float, port: int) -> list[float]:
        return [t for t, p, _ in self.connects if t > moment and p == port]


def _lost_at(events) -> float:
    return next(e.time for e in events if e.kind == "interrupted")


def _watch_reconnects(gate, uri: str, expected_waits: list[float], spec: str):
    """Connect through the gate, close it, let the client make len(expected_waits) reconnect
    attempts against the closed port, open it again; returns (log, time the loss was noticed)
    once the client works through the gate again."""
    log, events, queue = AttemptLog(), [], _queue()
    client = connect_failover(uri, "stomp", listener=events.append, connect=log.connect, sleep=log.sleep,
                              timeout=5.0)
    try:
        sub = client.subscribe(queue)
        gate.close()
        assert poll(lambda: _interrupted(events), timeout=30, interval=0.01), \
            f"{spec}: the client never noticed that the gate closed: {events}"
        lost = _lost_at(events)
        # counted once refused, not once started: an attempt under way as the gate opens could
        # succeed, and the test would then have seen one attempt fewer than it waited for
        # (the first connect went through the open gate: every refusal is after the loss)
        assert poll(lambda: log.refused.count(gate.port), lambda n: n >= len(expected_waits),
                    timeout=60 + sum(expected_waits) / 1000.0, interval=0.01), \
            f"{spec}: fewer than {len(expected_waits)} refused reconnect attempts: sleeps {log.sleeps}, events {events}"
        gate.open()
        assert poll(lambda: [e.kind for e in events].count("resumed") >= 2, timeout=60, interval=0.05), \
            f"{spec}: the client did not reconnect once the gate opened again: {events}"
        client.send(queue, b"after")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"after", f"{spec}: the reconnected client does not work: {got}"
    finally:
        client.close()
    return log, lost


#: FT-FAILOVER-5's tolerance above each documented wait, as the gate sees the gaps: the attempt's
#: own connect to the closed gate (refused at once on loopback) plus the scheduling delay of a
#: loaded machine. Under the step the cap cuts off in the capped case (900 ms to 2700 ms
#: uncapped, against 1000 ms capped), so an uncapped or late client shows
ATTEMPT_SLACK_MS = 500


def gaps_ms(lost: float, attempts: list[float]) -> list[float]:
    """[first attempt - loss, then the gap before each later attempt], in ms: what the report puts
    side by side for every client (reports/client_table.py; test_failover_real_clients.py uses it too)."""
    times = [lost, *attempts]
    return [round(1000 * (b - a), 1) for a, b in zip(times, times[1:])]


def record_schedule(record_property, specs: list[str], client: str, target_name: str, transport: str, options: str,
                    waits: list[float], seen_at: str = "connect call") -> None:
    """What the test is about to measure, recorded before it does, so the report (reports/
    client_table.py) places even a test that fails before measuring anything. ``seen_at``: where the
    attempts are timed (our client's connect calls here; the wire in test_failover_real_clients.py)."""
    record_property(SCHEDULE_PROPERTY, schedule_property(statements=specs, client=client, target=target_name,
                                                         transport=transport, options=options, waits_ms=waits,
                                                         seen_at=seen_at))


# Table 2.1's options and the waits they imply before reconnect attempts 1, 2, ... (ms): the same
# sets as the real clients' (test_failover_real_clients.py DELAYS and its initialReconnectDelay
# test), so the report can put the gaps side by side
@pytest.mark.spec("FT-FAILOVER-4", "FT-FAILOVER-5")
@pytest.mark.parametrize("options, waits", [
    # the defaults: 10 ms first, doubled each time (maxReconnectDelay 30 s is far away)
    ("", [10, 20, 40, 80, 160, 320]),
    # the growth factor under ActiveMQ's own name (failover_uri.py takes both)
    ("&initialReconnectDelay=100&reconnectDelayExponent=3&maxReconnectDelay=1000", [100, 300, 900, 1000, 1000]),
    ("&initialReconnectDelay=100&backOffMultiplier=3&maxReconnectDelay=1000", [100, 300, 900, 1000, 1000]),
    ("&initialReconnectDelay=150&useExponentialBackOff=false", [150, 150, 150, 150]),
    ("&initialReconnectDelay=500", [500, 1000, 2000, 4000]),
], ids=["defaults", "exponent-3-capped-at-1000", "multiplier-3-capped-at-1000", "no-back-off", "initial-500"])
def test_reconnect_waits_follow_the_delay_options(gate, target_name, options, waits, record_property):
    record_schedule(record_property, ["FT-FAILOVER-4", "FT-FAILOVER-5"], CLIENT_SUBJECT, target_name, "failover", options, waits)
    uri = f"failover:({gate.uri})?randomize=false{options}"
    log, lost = _watch_reconnects(gate, uri, waits, "FT-FAILOVER-5")
    attempts = log.attempts_after(lost, gate.port)
    measured = gaps_ms(lost, attempts)
    record_property(GAPS_PROPERTY, measured[:len(waits)])
    assert log.sleeps[:len(waits)] == waits, \
        f"FT-FAILOVER-5: with {options or 'the default options'} the waits before reconnect attempts should be " \
        f"{waits} ms; the client waited {log.sleeps[:len(waits)]}"
    assert attempts[0] - lost >= waits[0] / 1000.0, \
        f"FT-FAILOVER-4: the first reconnect attempt came {1000 * (attempts[0] - lost):.1f} ms after the loss, " \
        f"before initialReconnectDelay = {waits[0]} ms"
    gaps = measured[1:]  # between attempts
    short = [(n + 2, gap, wait) for n, (gap, wait) in enumerate(zip(gaps, waits[1:])) if gap < wait]
    assert not short, f"FT-FAILOVER-5: reconnect attempts (number, ms since the previous one, required wait) " \
                      f"came before their wait: {short}"
    # and not much after it: the waits are what the client sleeps, the gaps what the gate sees, so
    # this is where a wait beyond maxReconnectDelay (or an uncapped growth) shows
    late = [(n + 2, gap, wait) for n, (gap, wait) in enumerate(zip(gaps, waits[1:])) if gap > wait + ATTEMPT_SLACK_MS]
    assert not late, (f"FT-FAILOVER-5: with {options or 'the default options'} reconnect attempts (number, ms since "
                      f"the previous one, documented wait) came later than their wait, capped by maxReconnectDelay, "
                      f"allows: {late}")


@pytest.mark.spec("FT-DISCOVERY-2")
def test_discovery_max_reconnect_attempts_zero_retries_without_limit_with_failover_s_delays(gate, target_name,
                                                                                           record_property):
    # Table 2.3: the failover delays' defaults, but maxReconnectAttempts=0 means no limit (for
    # failover 0 means "never fail over": test_max_reconnect_attempts_zero_never_fails_over...);
    # seven waits, as the real clients' discovery tests wait for (test_failover_real_clients.py)
    waits = [10, 20, 40, 80, 160, 320, 640]
    record_schedule(record_property, ["FT-DISCOVERY-2"], CLIENT_SUBJECT, target_name, "discovery", "maxReconnectAttempts=0", waits)
    log, lost = _watch_reconnects(gate, f"discovery:(static://({gate.uri}))?maxReconnectAttempts=0", waits,
                                  "FT-DISCOVERY-2")
    attempts = log.attempts_after(lost, gate.port)
    record_property(GAPS_PROPERTY, gaps_ms(lost, attempts)[:len(waits)])
    assert log.sleeps[:len(waits)] == waits, \
        f"FT-DISCOVERY-2: the discovery client's default waits should be {waits} ms; it waited {log.sleeps}"
    assert len(attempts) > len(waits), \
        f"FT-DISCOVERY-2: maxReconnectAttempts=0 should not limit the attempts; only {len(attempts)} were made"


def _negotiated_heartbeats(client) -> tuple[int, int]:
    # stomp.py keeps the heart-beat it computed from the broker's CONNECTED frame on the connection
    # (HeartbeatListener.on_connected): (0, 0) unless both sides asked for heart-beats
    return tuple(client._conn.heartbeats)


@pytest.mark.spec("FT-FAILOVER-13", "FT-DISCOVERY-3")
@pytest.mark.parametrize("form", ["failover-nested", "discovery"])
def test_an_option_for_the_endpoints_reaches_every_broker_of_the_list(fresh_pair, gate, fault_proxy, form):
    pair, queue, events, log = fresh_pair, _queue(), [], AttemptLog()
    # B behind a gate too: the discovery form has no randomize option (Table 2.3), so the client
    # may start on either broker; closing the gate of the one it is on moves it to the other
    gate_b = Gate(fault_proxy, pair.b.address("stomp"))
    gates = {gate.port: gate, gate_b.port: gate_b}
    spec, uri = (("FT-FAILOVER-13", f"failover:({gate.uri},{gate_b.uri})?randomize=false&{FAST}"
                  "&nested.wireFormat.maxInactivityDuration=4000") if form == "failover-nested" else
                 ("FT-DISCOVERY-3", f"discovery:(static://({gate.uri},{gate_b.uri}))?{FAST}"
                  "&wireFormat.maxInactivityDuration=4000"))
    try:
        client = connect_failover(uri, "stomp", listener=events.append, connect=log.connect, timeout=5.0)
        try:
            gates[client.uri.port].close()  # the client moves to the other broker: both get a connection
            assert poll(lambda: [e.kind for e in events].count("resumed") >= 2, timeout=60, interval=0.05), \
                f"{spec}: the client did not move to the second broker: {events}"
            client.send(queue, b"m")
            ports = {port: (options.get("heartbeats"), _negotiated_heartbeats(c)) for port, options, c in log.opened}
        finally:
            client.close()
    finally:
        gate_b.remove()
    assert set(ports) == set(gates), f"{spec}: the client did not connect to both brokers: {ports}"
    for port, (asked, negotiated) in ports.items():
        assert asked == (4000, 4000), \
            f"{spec}: the connection to port {port} did not carry the inactivity option (STOMP heart-beat {asked})"
        # STOMP 1.2 Heart-beating: each side's period is the larger of the two asked for, and 0
        # unless both asked; so a non-zero result means the option went out and the broker took it
        assert negotiated != (0, 0), \
            f"{spec}: the broker on port {port} did not take the heart-beat the option asked for: {negotiated}"


@pytest.mark.spec("FT-FAILOVER-12")
def test_update_uris_url_lets_the_client_reach_a_broker_missing_from_its_uri(fresh_pair, gate, tmp_path):
    pair, queue = fresh_pair, _queue()
    listed = tmp_path / "more-brokers.txt"
    listed.write_text("stomp://{}:{}\n".format(*pair.b.address("stomp")))
    gate.close()  # the only broker the URI names is down
    client = connect_failover(f"failover:({gate.uri})?randomize=false&{FAST}&updateURIsURL=file://{listed}",
                              "stomp", timeout=5.0)
    try:
        assert client.uri.port == pair.port(pair.b), \
            f"FT-FAILOVER-12: the broker listed in the updateURIsURL file should be used; the client is on {client.uri}"
        sub = client.subscribe(queue)
        client.send(queue, b"m")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"m", f"FT-FAILOVER-12: that connection does not work: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-FAILOVER-11")
@pytest.mark.parametrize("options, size, replayed", [
    ("&trackMessages=true", 64, True),
    ("", 64, False),                                      # trackMessages is false by default
    ("&trackMessages=true&maxCacheSize=16", 64, False),   # the 64-byte send does not fit the cache
    # maxCacheSize's default, 131072 bytes (Table 2.1): a send of exactly that fits, one byte more does not
    ("&trackMessages=true", 131072, True),
    ("&trackMessages=true", 131073, False),
], ids=["tracked", "default-untracked", "over-max-cache-size", "default-max-cache-size", "over-default-max-cache-size"])
def test_track_messages_replays_a_send_cut_off_before_its_receipt(fresh_pair, gate, fault_proxy, options, size,
                                                                   replayed):
    pair, queue, body = fresh_pair, _queue(), b"x" * size
    second = "stomp://{}:{}".format(*pair.b.address("stomp"))
    # a long inner timeout: the send must wait for its receipt until the gate closes, not give up
    client = connect_failover(f"failover:({gate.uri},{second})?randomize=false&{FAST}{options}", "stomp", timeout=30.0)
    watcher = connect(*pair.a.address("stomp"), "stomp", timeout=10.0)
    outcome: dict = {}

    def send() -> None:
        try:
            client.send(queue, body, persistent=True)
            outcome["sent"] = True
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test asserts on
            outcome["error"] = exc

    try:
        seen_on_a = watcher.subscribe(queue)
        # broker A's answers (the RECEIPT) stop at the gate; the SEND itself goes through
        fault_proxy.add_toxic(gate.name, "timeout", stream="downstream", attributes={"timeout": 0})
        sender = threading.Thread(target=send, name="ft-failover-11-send", daemon=True)
        sender.start()
        arrived = seen_on_a.receive(RECEIVE)
        assert arrived is not None and arrived.body == body, \
            f"FT-FAILOVER-11: the SEND never reached broker A through the gate (nothing to cut off): {arrived}"
        gate.close()  # the connection breaks with the send's receipt outstanding
        sender.join(60)
        assert not sender.is_alive(), "FT-FAILOVER-11: the send neither returned nor failed after the connection broke"
        if replayed:
            assert outcome.get("sent"), (f"FT-FAILOVER-11: with {options} the cut-off send of {size} bytes should be "
                                         f"replayed on the broker the client reconnects to; it raised "
                                         f"{outcome.get('error')!r}")
            assert client.uri.port == pair.port(pair.b), f"FT-FAILOVER-11: not on broker B: {client.uri}"
            got = client.subscribe(queue).receive(RECEIVE)
            assert got is not None and got.body == body, \
                f"FT-FAILOVER-11: the replayed message is not on broker B: {got}"
        else:
            error = outcome.get("error")
            assert isinstance(error, InDoubt), (
                f"FT-FAILOVER-11: with {options or 'the defaults'} a send of {size} bytes cut off before its receipt "
                f"must not be replayed but reported in doubt; got {outcome}")
    finally:
        client.close()
        watcher.close()
