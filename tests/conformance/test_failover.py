"""The failover transport without sockets: the URI parser, the reconnect schedule on a fake
clock, the URI ordering, and `FailoverClient` over in-memory fake brokers.

Defaults and semantics come from A-MQ 6.2 "Fault Tolerant Messaging" ch. 2 (Table 2.1 for the
failover options, Table 2.3 for the discovery form, 2.1.3 for priority backup)."""

from __future__ import annotations

import random
import threading

import pytest

from conformance.clients import ClientError, ConnectFailed
from conformance.clients.base import Inbox, NotSent, Received
from conformance.clients.failover import (
    FailoverClient,
    FailoverExhausted,
    FailoverTimeout,
    InDoubt,
    ReconnectSchedule,
    UriOrder,
)
from conformance.clients.failover_uri import (
    BrokerURI,
    FailoverOptions,
    parse_broker_uri,
    parse_failover_uri,
)
from machinery.waiting import wait_until

# --------------------------------------------------------------------------- parser

TABLE_2_1_DEFAULTS = {
    "initial_reconnect_delay": 10, "max_reconnect_delay": 30000, "use_exponential_back_off": True,
    "back_off_multiplier": 2.0, "max_reconnect_attempts": -1, "startup_max_reconnect_attempts": -1,
    "randomize": True, "backup": False, "timeout": -1, "track_messages": False, "max_cache_size": 131072,
    "update_uris_supported": True, "update_uris_url": None, "warn_after_reconnect_attempts": 10,
    "priority_backup": False, "priority_uris": (),
}


def test_defaults_are_the_documented_ones():
    options = parse_failover_uri("failover:(tcp://a:1,tcp://b:2)").options
    assert {k: getattr(options, k) for k in TABLE_2_1_DEFAULTS} == TABLE_2_1_DEFAULTS


@pytest.mark.parametrize("query, attribute, expected", [
    ("initialReconnectDelay=100", "initial_reconnect_delay", 100),
    ("maxReconnectDelay=500", "max_reconnect_delay", 500),
    ("useExponentialBackOff=false", "use_exponential_back_off", False),
    ("backOffMultiplier=1.5", "back_off_multiplier", 1.5),
    ("maxReconnectAttempts=3", "max_reconnect_attempts", 3),
    ("startupMaxReconnectAttempts=0", "startup_max_reconnect_attempts", 0),
    ("randomize=false", "randomize", False),
    ("backup=true", "backup", True),
    ("timeout=2500", "timeout", 2500),
    ("trackMessages=true", "track_messages", True),
    ("maxCacheSize=1024", "max_cache_size", 1024),
    ("updateURIsSupported=false", "update_uris_supported", False),
    ("updateURIsURL=file:///tmp/uris.txt", "update_uris_url", "file:///tmp/uris.txt"),
    ("warnAfterReconnectAttempts=0", "warn_after_reconnect_attempts", 0),
    ("priorityBackup=true", "priority_backup", True),
    ("priorityURIs=tcp://a:1,tcp://b:2", "priority_uris", ("tcp://a:1", "tcp://b:2")),
])
def test_every_option_is_parsed(query, attribute, expected):
    # priorityURIs holds commas itself, so it goes last, as in A-MQ FT Example 2.6.
    options = parse_failover_uri(f"failover:(tcp://a:1,tcp://b:2)?randomize=true&{query}").options
    assert getattr(options, attribute) == expected


def test_guide_examples_parse():
    # A-MQ FT Example 2.1, wrapped after '?' as the guide prints it.
    simple = parse_failover_uri("failover:(tcp://localhost:61616,tcp://remotehost:61616)?\n  initialReconnectDelay=100")
    assert [str(u) for u in simple.uris] == ["tcp://localhost:61616", "tcp://remotehost:61616"]
    assert simple.options.initial_reconnect_delay == 100
    # Example 2.6
    priority = parse_failover_uri("failover:(tcp://local1:61616,tcp://local2:61616,tcp://remote:61616)?"
                                  "randomize=false&priorityBackup=true&priorityURIs=tcp://local1:61616,tcp://local2:61616")
    assert [u.host for u in priority.priority_uris()] == ["local1", "local2"]


def test_short_form_without_parentheses():
    parsed = parse_failover_uri("failover:stomp://a:1,stomp://b:2")
    assert [u.address for u in parsed.uris] == ["a:1", "b:2"]
    assert [u.protocol for u in parsed.uris] == ["stomp", "stomp"]


def test_nested_options_apply_to_every_inner_uri_unless_it_sets_its_own():
    parsed = parse_failover_uri("failover:(tcp://a:1,tcp://b:2?connectionTimeout=5)?"
                                "nested.connectionTimeout=1000&nested.wireFormat.maxInactivityDuration=1000")
    a, b = parsed.uris
    assert dict(a.params) == {"connectionTimeout": "1000", "wireFormat.maxInactivityDuration": "1000"}
    assert dict(b.params)["connectionTimeout"] == "5"
    assert a.connect_options("stomp") == {"timeout": 1.0, "heartbeats": (1000, 1000)}
    assert a.connect_options("mqtt") == {"timeout": 1.0}


def test_discovery_static_form():
    # A-MQ FT Example 2.14 (with a space after the comma), plus Table 2.3 options.
    parsed = parse_failover_uri("discovery:(static://(tcp://localhost:61716, tcp://localhost:61816))"
                                "?initialReconnectDelay=100")
    assert parsed.form == "discovery"
    assert [u.port for u in parsed.uris] == [61716, 61816]
    assert parsed.options.initial_reconnect_delay == 100


def test_discovery_max_reconnect_attempts_zero_means_unlimited():
    # Table 2.3: 0 = unlimited there, where Table 2.1 uses -1.
    parsed = parse_failover_uri("discovery:(static://(tcp://a:1))?maxReconnectAttempts=0")
    assert parsed.options.max_reconnect_attempts == -1


def test_discovery_injects_other_options_into_each_endpoint():
    # A-MQ FT 2.2.1 "Setting options on the discovered transports", Example 2.9.
    parsed = parse_failover_uri("discovery:(static://(tcp://a:1,tcp://b:2))?connectionTimeout=10000")
    assert all(dict(u.params) == {"connectionTimeout": "10000"} for u in parsed.uris)


@pytest.mark.parametrize("uri, message", [
    ("failover:(tcp://a:1)?randomise=false", "did you mean 'randomize'"),
    ("failover:(tcp://a:1)?initialreconnectdelay=5", "did you mean 'initialReconnectDelay'"),
    ("failover:(tcp://a:1)?maxReconnectAttempts=lots", "must be an integer"),
    ("failover:(tcp://a:1)?randomize=yes", "must be true or false"),
    ("failover:(tcp://a:1)?maxReconnectAttempts=-2", "use -1 for unlimited"),
    ("failover:(tcp://a:1)?randomize", "has no value"),
    ("failover:(tcp://a:1?connectTimeout=5)", "did you mean 'connectionTimeout'"),
    ("failover:(tcp://a:1)?nested.soTimeout=5", "unknown option 'soTimeout'"),
    ("failover:(tcpp://a:1)", "did you mean 'tcp'"),
    ("failover:(tcp://a)", "HOST:PORT"),
    ("failover:(tcp://a:1", "unbalanced"),
    ("failover:()", "lists no broker"),
    ("failover:(tcp://a:1)x", "options start with '?'"),
    ("discovery:(zeroconf://default)", "not supported"),
    ("discovery:(multicast://localhost)", "not 'default' nor an IPv4 multicast address"),
    ("failover:(tcp://a:1)?updateURIsURL=http://example.invalid/uris.txt", "updateURIsURL.*only file: URLs"),
    ("http://a:1", "not a failover URI"),
])
def test_bad_uris_are_refused_with_a_useful_message(uri, message):
    with pytest.raises(ValueError, match=message):
        parse_failover_uri(uri)


def test_a_bare_broker_uri_is_a_list_of_one():
    assert parse_failover_uri("stomp://a:1").uris == (parse_broker_uri("stomp://a:1"),)


# --------------------------------------------------------------------------- schedule

def schedule(**options) -> ReconnectSchedule:
    return ReconnectSchedule(FailoverOptions(**options))


def test_default_delays_double_from_10ms_up_to_30s():
    assert schedule().delays(15) == [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240, 20480,
                                     30000, 30000, 30000]


def test_back_off_capped_by_max_reconnect_delay():
    assert schedule(initial_reconnect_delay=100, max_reconnect_delay=1000, back_off_multiplier=3).delays(5) == \
        [100, 300, 900, 1000, 1000]


def test_without_exponential_back_off_the_delay_stays_initial():
    assert schedule(initial_reconnect_delay=250, use_exponential_back_off=False).delays(4) == [250] * 4


def test_startup_first_pass_is_immediate():
    assert schedule().delays(4, startup=True) == [0, 10, 20, 40]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds * 1000, 6))
        self.now += seconds


def run_failing(sched: ReconnectSchedule, *, startup: bool, succeed_on: int | None = None):
    clock, passes, warnings = FakeClock(), [], []

    def attempt(number):
        passes.append(number)
        return "connected" if number == succeed_on else None

    try:
        result = sched.run(attempt, startup=startup, sleep=clock.sleep, on_warning=warnings.append)
    except FailoverExhausted as exc:
        result = exc
    return result, passes, clock, warnings


def test_run_sleeps_the_schedule_until_a_pass_succeeds():
    result, passes, clock, _ = run_failing(schedule(), startup=False, succeed_on=5)
    assert result == "connected"
    assert passes == [1, 2, 3, 4, 5]
    assert clock.sleeps == [10, 20, 40, 80, 160]
    assert clock.now == pytest.approx(0.31)


def test_max_reconnect_attempts_limits_passes_after_a_loss():
    result, passes, clock, _ = run_failing(schedule(max_reconnect_attempts=3), startup=False)
    assert isinstance(result, FailoverExhausted) and "maxReconnectAttempts=3" in str(result)
    assert passes == [1, 2, 3]
    assert clock.sleeps == [10, 20, 40]


def test_max_reconnect_attempts_zero_never_fails_over():
    result, passes, _, _ = run_failing(schedule(max_reconnect_attempts=0), startup=False)
    assert isinstance(result, FailoverExhausted) and passes == []


def test_startup_zero_means_one_pass_and_no_retry():
    result, passes, clock, _ = run_failing(schedule(startup_max_reconnect_attempts=0), startup=True)
    assert isinstance(result, FailoverExhausted) and "startupMaxReconnectAttempts=0" in str(result)
    assert passes == [0] and clock.sleeps == []


def test_startup_limit_is_separate_from_the_limit_after_connecting():
    sched = schedule(startup_max_reconnect_attempts=2, max_reconnect_attempts=5)
    assert run_failing(sched, startup=True)[1] == [0, 1, 2]
    assert run_failing(sched, startup=False)[1] == [1, 2, 3, 4, 5]


def test_startup_unlimited_falls_back_to_max_reconnect_attempts():
    # ActiveMQ FailoverTransport.calculateReconnectAttemptLimit; and Table 2.1's "0: an initial
    # connection attempt is made at start-up" for maxReconnectAttempts.
    assert run_failing(schedule(max_reconnect_attempts=0), startup=True)[1] == [0]
    assert run_failing(schedule(max_reconnect_attempts=2), startup=True)[1] == [0, 1, 2]


def test_warn_after_reconnect_attempts():
    _, _, _, warnings = run_failing(schedule(max_reconnect_attempts=25, warn_after_reconnect_attempts=10,
                                             max_reconnect_delay=10), startup=False)
    assert warnings == [10, 20]
    _, _, _, none = run_failing(schedule(max_reconnect_attempts=25, warn_after_reconnect_attempts=0,
                                         max_reconnect_delay=10), startup=False)
    assert none == []


# --------------------------------------------------------------------------- ordering

def order(uri: str, seed: int = 0) -> UriOrder:
    return UriOrder(parse_failover_uri(uri), random.Random(seed))


def hosts(uris: list[BrokerURI]) -> list[str]:
    return [u.host for u in uris]


def test_randomize_false_walks_left_to_right_and_puts_the_failed_uri_last():
    o = order("failover:(tcp://a:1,tcp://b:1,tcp://c:1)?randomize=false")
    assert hosts(o.connect_list()) == ["a", "b", "c"]
    assert hosts(o.connect_list(failed=parse_broker_uri("tcp://a:1"))) == ["b", "c", "a"]


def test_randomize_with_a_seed_is_reproducible_and_uses_every_uri():
    uri = "failover:(tcp://a:1,tcp://b:1,tcp://c:1,tcp://d:1)"
    first = [hosts(order(uri, seed=7).connect_list()) for _ in range(3)]
    assert first[0] == first[1] == first[2]
    orders = {tuple(hosts(order(uri, seed=s).connect_list())) for s in range(20)}
    assert all(sorted(o) == ["a", "b", "c", "d"] for o in orders)
    assert len(orders) > 1, "randomize=true never changed the order over 20 seeds"


def test_priority_backup_first_uri_is_the_priority_one_by_default():
    o = order("failover:(tcp://local:1,tcp://remote:1)?randomize=false&priorityBackup=true")
    assert o.is_priority(parse_broker_uri("tcp://local:1"))
    assert hosts(o.priority_candidates(parse_broker_uri("tcp://remote:1"))) == ["local"]
    assert o.priority_candidates(parse_broker_uri("tcp://local:1")) == []


def test_priority_uris_come_first_in_their_listed_order():
    o = order("failover:(tcp://remote:1,tcp://local2:1,tcp://local1:1)?randomize=true&priorityBackup=true"
              "&priorityURIs=tcp://local1:1,tcp://local2:1", seed=3)
    assert hosts(o.connect_list())[:2] == ["local1", "local2"]


# --------------------------------------------------------------------------- client over fakes

class FakeSub:
    def __init__(self, client, destination, ack, options):
        self.client, self.destination, self.ack_mode, self.options = client, destination, ack, options
        self.inbox = Inbox()
        self.acked: list[str] = []

    def receive(self, timeout=5.0):
        return self.inbox.get(timeout)

    def ack(self, message):
        self.client._check()
        self.acked.append(message.message_id)

    nack = ack

    def close(self):
        self.client.subs.remove(self)


class FakeClient:
    """An inner client connected to a `FakeBroker`."""

    def __init__(self, broker, client_id):
        self.broker, self.client_id = broker, client_id
        self.alive = True
        self.subs: list[FakeSub] = []
        self.hang_next_send = False

    @property
    def connected(self):
        return self.alive and self.broker.up

    def _check(self):
        if not self.connected:
            raise ClientError("not connected")

    def send(self, destination, body=b"", properties=None, **kwargs):
        self._check()
        if self.broker.cut_after_write:
            # the frame reached the broker, the receipt did not come back
            self.broker.sent.append((destination, body))
            self.broker.cut_after_write = False
            self.broker.kill()
            raise ClientError("connection lost before the receipt")
        if self.broker.gone_before_write:
            # the inner client still looked connected, but the socket was closed under the write
            self.broker.gone_before_write = False
            self.broker.kill()
            raise NotSent("could not send (OSError(9, 'Bad file descriptor'))")
        if destination == "queue://refused":
            raise ClientError("the broker answered ERROR: not allowed")
        self.broker.sent.append((destination, body))

    def subscribe(self, destination, *, ack="auto", **options):
        self._check()
        sub = FakeSub(self, destination, ack, options)
        self.subs.append(sub)
        self.broker.subscribes.append((self.client_id, destination, ack, options))
        return sub

    def deliver(self, body):
        sub = self.subs[0]
        sub.inbox.put(Received(body=body, destination=sub.destination, message_id=body.decode(), subscription=sub))

    def begin(self):
        self._check()
        return "tx-1"

    def commit(self, transaction):
        self._check()

    def abort(self, transaction):
        self._check()

    def close(self):
        self.alive = False


class FakeBroker:
    def __init__(self, port):
        self.port, self.up = port, True
        self.clients: list[FakeClient] = []
        self.sent: list = []
        self.subscribes: list = []
        self.cut_after_write = False
        self.gone_before_write = False

    def kill(self):
        self.up = False
        for client in self.clients:
            for sub in client.subs:
                sub.inbox.connection_lost("broker killed")


class FakeNetwork:
    def __init__(self, *ports):
        self.brokers = {p: FakeBroker(p) for p in ports}
        self.connects: list[int] = []

    def connect(self, host, port, protocol, *, client_id=None, **options):
        self.connects.append(port)
        broker = self.brokers.get(port)
        if broker is None or not broker.up:
            raise ConnectFailed(f"cannot open a socket to {host}:{port}")
        client = FakeClient(broker, client_id)
        broker.clients.append(client)
        return client


@pytest.fixture
def network():
    return FakeNetwork(1, 2)


@pytest.fixture
def make_client(network):
    clients = []

    def make(query="", **kwargs):
        client = FailoverClient(f"failover:(stomp://h:1,stomp://h:2)?randomize=false&initialReconnectDelay=1{query}",
                                "stomp", connect=network.connect, monitor_interval=0.005, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def test_connects_to_the_first_uri_when_randomize_is_false(network, make_client):
    client = make_client()
    assert client.uri.port == 1 and network.connects == [1]
    client.send("queue://q", b"x")
    assert network.brokers[1].sent == [("queue://q", b"x")]


def test_startup_skips_a_dead_broker_in_the_same_pass(network, make_client):
    network.brokers[1].up = False
    client = make_client()
    assert client.uri.port == 2 and network.connects == [1, 2]


def test_startup_max_reconnect_attempts_fails_fast_when_nothing_is_up(network):
    network.brokers[1].up = network.brokers[2].up = False
    clock = FakeClock()
    with pytest.raises(FailoverExhausted, match="startupMaxReconnectAttempts=2"):
        FailoverClient("failover:(stomp://h:1,stomp://h:2)?randomize=false&startupMaxReconnectAttempts=2",
                       "stomp", connect=network.connect, sleep=clock.sleep, clock=clock)
    assert network.connects == [1, 2] * 3
    assert clock.sleeps == [10, 20]


def test_fails_over_restores_subscriptions_and_reports_events(network, make_client):
    events = []
    client = make_client(listener=events.append)
    sub = client.subscribe("queue://q", ack="client-individual", selector="a = 1", durable_name="d")
    network.brokers[1].kill()
    wait_until(lambda: client.connected and client.uri.port == 2, describe="the client connected to broker 2")
    assert network.brokers[2].subscribes == [(client.client_id, "queue://q", "client-individual",
                                              {"selector": "a = 1", "durable_name": "d"})]
    assert [e.kind for e in events] == ["resumed", "interrupted", "resumed"]
    assert events[1].time <= events[2].time and events[2].uri == "stomp://h:2"
    network.brokers[2].clients[-1].deliver(b"m1")
    message = sub.receive(2)
    assert message.body == b"m1"
    sub.ack(message)


def test_receive_waits_through_a_failover(network, make_client):
    client = make_client()
    sub = client.subscribe("queue://q")
    got = []
    reader = threading.Thread(target=lambda: got.append(sub.receive(5)))
    reader.start()
    network.brokers[1].kill()
    wait_until(lambda: client.uri.port == 2 and client.connected, describe="the client connected to broker 2")
    network.brokers[2].clients[-1].deliver(b"after")
    reader.join(5)
    assert got and got[0].body == b"after"


def test_ack_of_a_message_from_a_lost_connection_is_refused(network, make_client):
    client = make_client()
    sub = client.subscribe("queue://q", ack="client")
    network.brokers[1].clients[-1].deliver(b"m1")
    message = sub.receive(1)
    network.brokers[1].kill()
    wait_until(lambda: client.uri.port == 2 and client.connected, describe="the client connected to broker 2")
    with pytest.raises(ClientError, match="redelivers it"):
        sub.ack(message)


def test_send_cut_off_before_its_receipt_is_in_doubt(network, make_client):
    client = make_client()
    network.brokers[1].cut_after_write = True
    with pytest.raises(InDoubt, match="trackMessages=false") as caught:
        client.send("queue://q", b"x", {"id": "p1-1"})
    assert caught.value.operation == "send" and caught.value.properties == {"id": "p1-1"}
    assert network.brokers[1].sent == [("queue://q", b"x")]


def test_send_whose_socket_closed_under_the_write_goes_to_the_next_broker(network, make_client):
    # Seen in CI: the broker died between the `connected` check and the write (EBADF). Nothing
    # was written, so even with trackMessages=false the send is not in doubt.
    client = make_client()
    network.brokers[1].gone_before_write = True
    client.send("queue://q", b"x")
    assert network.brokers[1].sent == [] and network.brokers[2].sent == [("queue://q", b"x")]
    assert client.uri.port == 2


def test_track_messages_replays_a_cut_off_send_on_the_next_broker(network, make_client):
    client = make_client("&trackMessages=true")
    network.brokers[1].cut_after_write = True
    client.send("queue://q", b"x")
    assert network.brokers[2].sent == [("queue://q", b"x")]
    # at-least-once: the first broker may have it too (QPID-5975)
    assert network.brokers[1].sent == [("queue://q", b"x")]


def test_track_messages_beyond_max_cache_size_is_in_doubt(network, make_client):
    client = make_client("&trackMessages=true&maxCacheSize=4")
    network.brokers[1].cut_after_write = True
    with pytest.raises(InDoubt, match="maxCacheSize=4"):
        client.send("queue://q", b"12345")


def test_a_send_refused_by_a_live_broker_is_not_retried(network, make_client):
    client = make_client()
    with pytest.raises(ClientError, match="not allowed") as caught:
        client.send("queue://refused", b"x")
    assert not isinstance(caught.value, InDoubt)
    assert client.uri.port == 1


def test_send_while_down_waits_for_the_reconnect(network, make_client):
    client = make_client()
    network.brokers[1].kill()
    client.send("queue://q", b"later")  # not in doubt: nothing was written before the loss
    assert network.brokers[2].sent == [("queue://q", b"later")]


def test_timeout_bounds_the_wait_for_a_reconnect(network, make_client):
    client = make_client("&timeout=100&maxReconnectDelay=1")
    network.brokers[1].kill()
    network.brokers[2].up = False
    with pytest.raises(FailoverTimeout, match="timeout=100 ms"):
        client.send("queue://q", b"x")


def test_max_reconnect_attempts_exhausted_fails_operations(network, make_client):
    events = []
    client = make_client("&maxReconnectAttempts=2", listener=events.append)
    network.brokers[1].kill()
    network.brokers[2].up = False
    wait_until(lambda: any(e.kind == "failed" for e in events), interval=0.01, describe="a \"failed\" transport event")
    with pytest.raises(FailoverExhausted, match="maxReconnectAttempts=2"):
        client.send("queue://q", b"x")


def test_transaction_begun_before_a_failover_cannot_be_committed(network, make_client):
    client = make_client()
    tx = client.begin()
    network.brokers[1].kill()
    wait_until(lambda: client.uri.port == 2 and client.connected, describe="the client connected to broker 2")
    with pytest.raises(ClientError, match="rolled it back"):
        client.commit(tx)


def test_priority_backup_switches_back_when_the_priority_broker_returns(network, make_client):
    events = []
    client = make_client("&priorityBackup=true&maxReconnectDelay=5", listener=events.append)
    client.subscribe("topic://t")
    network.brokers[1].kill()
    wait_until(lambda: client.uri.port == 2 and client.connected, describe="the client connected to broker 2")
    network.brokers[1].up = True
    wait_until(lambda: client.uri.port == 1, interval=0.01, describe="the client back on broker 1")
    assert [e.kind for e in events][-1] == "switched"
    assert network.brokers[1].subscribes[-1][1] == "topic://t"


def test_backup_keeps_a_second_connection_ready(network, make_client):
    client = make_client("&backup=true")
    wait_until(lambda: client._backup is not None, interval=0.01, describe="a backup connection")
    ready = client._backup[1]
    network.brokers[1].kill()
    wait_until(lambda: client.uri.port == 2 and client.connected, describe="the client connected to broker 2")
    assert client._inner is ready, "failover opened a new connection instead of using the backup"


def test_warnings_are_reported_as_events(network):
    network.brokers[1].up = network.brokers[2].up = False
    clock, events = FakeClock(), []
    with pytest.raises(FailoverExhausted):
        FailoverClient("failover:(stomp://h:1)?startupMaxReconnectAttempts=5&warnAfterReconnectAttempts=2",
                       "stomp", connect=network.connect, sleep=clock.sleep, clock=clock, listener=events.append)
    # 1 start-up pass + 5 retries = 6 failures: warned after 2, 4 and 6
    assert [e.attempts for e in events if e.kind == "warning"] == [2, 4, 6]


def test_inner_uri_of_another_protocol_is_refused(network):
    with pytest.raises(ValueError, match="speaks mqtt"):
        FailoverClient("failover:(mqtt://h:1)", "stomp", connect=network.connect)


def test_update_uris_url_adds_the_file_s_uris_to_the_list(network, make_client, tmp_path):
    # A-MQ FT Table 2.1 updateURIsURL: a file of comma-separated URIs the client may reconnect to
    listed = tmp_path / "uris.txt"
    listed.write_text("stomp://h:3, stomp://h:1\n")
    network.brokers[3] = FakeBroker(3)
    network.brokers[1].up = network.brokers[2].up = False
    client = FailoverClient(f"failover:(stomp://h:1,stomp://h:2)?randomize=false&updateURIsURL=file://{listed}",
                            "stomp", connect=network.connect, monitor_interval=0.005)
    try:
        assert client.uri.port == 3 and network.connects == [1, 2, 3]
    finally:
        client.close()


def test_an_unreadable_update_uris_file_is_noted_and_the_list_kept(network, make_client, tmp_path):
    client = make_client(f"&updateURIsURL={tmp_path / 'missing.txt'}")
    assert client.uri.port == 1
    assert any("updateURIsURL" in line and "not read" in line for line in client.exchange), list(client.exchange)


def test_discovery_multicast_agent_form():
    parsed = parse_failover_uri("discovery:(multicast://default?group=g1)?initialReconnectDelay=5&connectionTimeout=300")
    assert parsed.form == "discovery" and parsed.agent == "multicast://default?group=g1" and parsed.uris == ()
    assert parsed.options.initial_reconnect_delay == 5 and parsed.nested == (("connectionTimeout", "300"),)


def test_reconnect_delay_exponent_is_activemq_s_name_for_the_back_off_multiplier():
    # the real activemq-client refuses backOffMultiplier and knows only reconnectDelayExponent
    # (issue 28); a URI written for it must mean the same to ours
    from conformance.clients.failover_uri import parse_failover_uri

    assert parse_failover_uri("failover:(tcp://h:1)?reconnectDelayExponent=3").options.back_off_multiplier == 3
    assert parse_failover_uri("failover:(tcp://h:1)?backOffMultiplier=3").options.back_off_multiplier == 3
