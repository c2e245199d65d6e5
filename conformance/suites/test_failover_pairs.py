"""Client failover between two brokers of one target, against the A-MQ "Fault Tolerant Messaging"
guide, chapter 2 (../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue
conformance/spec/fault_tolerance.toml, FT-FAILOVER-*).

The failover options are the client's (ActiveMQ's failover transport; ours is
conformance/clients/failover.py, whose option arithmetic tests/conformance/test_failover.py checks
without brokers). What only real brokers show is here: that a failover client really moves
between two brokers of the target when one dies, and comes back where the guide says it should.
Each target runs two independent brokers it can kill and restart (``process.kill``); a reference
target that runs in-process gets two reference broker processes instead, since a broker in the
test's own process cannot die.

STOMP only: the failover logic is protocol-neutral (one class drives every protocol's client), so
one protocol is enough to check it against a broker; randomize=false throughout, so which broker
comes first is known (FT-FAILOVER-8).
"""

from __future__ import annotations

import uuid

import pytest

from conformance.clients.failover import FailoverExhausted, connect_failover
from conformance.plugin import STATE
from conformance.scenario import Scenario
from conformance.suites.network_support import network_workdir, parametrize_by_target
from conformance.topology import Topology
from conformance.waiting import poll

pytestmark = [pytest.mark.slow]

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


def _queue() -> str:
    return f"queue://fo.{uuid.uuid4().hex[:8]}"


def _interrupted(events) -> bool:
    return "interrupted" in [e.kind for e in events]


@pytest.mark.spec("FT-FAILOVER-1", "FT-FAILOVER-2", "FT-FAILOVER-8")
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
def test_client_starting_while_the_first_broker_is_down_connects_to_the_next(fresh_pair):
    pair, queue = fresh_pair, _queue()
    pair.a.kill()
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


@pytest.mark.spec("FT-DISCOVERY-1", "FT-DISCOVERY-4")
def test_discovery_with_the_static_agent_finds_the_live_broker_of_its_list(fresh_pair):
    pair, queue = fresh_pair, _queue()
    pair.a.kill()
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


@pytest.mark.spec("FT-FAILOVER-7")
def test_startup_max_reconnect_attempts_zero_gives_up_at_once_when_no_broker_is_up(fresh_pair):
    _both_down(fresh_pair)
    with pytest.raises(FailoverExhausted, match="startupMaxReconnectAttempts=0"):
        connect_failover(fresh_pair.uri("&startupMaxReconnectAttempts=0"), "stomp", timeout=5.0)


@pytest.mark.spec("FT-FAILOVER-10", "FT-FAILOVER-14")
def test_timeout_bounds_an_operation_and_warnings_come_every_n_attempts(fresh_pair):
    pair, queue, events = fresh_pair, _queue(), []
    client = connect_failover(pair.uri("&timeout=1500&warnAfterReconnectAttempts=2"), "stomp",
                              listener=events.append, timeout=5.0)
    try:
        _both_down(pair)
        assert poll(lambda: _interrupted(events), timeout=30, interval=0.05), f"never interrupted: {events}"
        with pytest.raises(Exception) as refused:
            client.send(queue, b"nowhere")
        assert "timeout" in str(refused.value).lower(), \
            f"FT-FAILOVER-10: with both brokers down a send should fail once timeout=1500 ms passes: {refused.value!r}"
        warned = poll(lambda: [e.attempts for e in events if e.kind == "warning"], lambda w: len(w) >= 2, timeout=30)
        assert warned and all(n % 2 == 0 for n in warned), \
            f"FT-FAILOVER-14: a warning after every 2 failed attempts was expected; got {warned}"
    finally:
        client.close()
