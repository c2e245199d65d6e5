"""Chapter 2 of the A-MQ "Fault Tolerant Messaging" guide (failover and discovery URIs,
../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue fault_tolerance.toml,
FT-FAILOVER-*, FT-DISCOVERY-*) checked on the real client the chapter documents: ActiveMQ's
``activemq-client`` (OpenWire failover transport), in the installed broker's version and in the
newest 6.x, through brokerconf's Java driver (drivers/java; issue 28). Our own failover client is
checked against the same statements in test_failover_pairs.py; where the two differ, that module's
expectation or this one's is wrong, and the report says which.

Set-up, shared by the whole module to keep it cheap: two ActiveMQ brokers (A, B) of the target,
each behind a *gate* of the fault proxy (test_failover_pairs.Gate) that a test closes to make the
broker vanish for the client (its connections dropped, its port refusing) and opens to bring it
back, so no JVM is restarted; one driver process per client. A broker that is "down from the
start" is a loopback port where nothing listens.

Reconnect waits (FT-FAILOVER-4/5, FT-DISCOVERY-2) are measured outside the client, on the wire:
every SYN the client sends to the closed gate's port is one connection attempt (syn_watch.py), and
the loss is the moment the library reported ``transportInterrupted``. Only what the options imply
is asserted: lower bounds (a wait is at least its delay) and the documented cap (with the margin
explained at the assertion), never how fast anything was.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from machinery.faultproxy import ToxiproxyClient
from conformance.clients.java_driver import DriverError, NoAnswer
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.requirements import skip_or_fail
from suites import syn_watch
from suites.scheduling_lag import SchedulingLag
from suites.java_support import (  # noqa: F401 - drivers: the fixture
    ACTIVEMQ_CLIENTS, address, SUBJECTS, client_params, drivers)
from suites.network_support import network_workdir, parametrize_by_target
from suites.test_failover_pairs import Gate, Pair, free_port, gaps_ms, record_schedule
from machinery.waiting import poll
from suites.proxy_support import fault_proxy  # noqa: F401 - the fixture
from reports.client_table import GAPS_PROPERTY

pytestmark = [pytest.mark.slow]

#: reconnect delays for the tests that are not about them (Table 2.1's maxReconnectDelay default
#: is 30 s); the delay tests set their own
FAST = "initialReconnectDelay=10&maxReconnectDelay=200"
RECEIVE = 10.0
EVENT_TIMEOUT = 30.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.fixture(scope="module")
def pair(target_name, request, tmp_path_factory):
    target = request.config.stash[STATE].targets[target_name]
    if target.kind != "activemq":
        pytest.skip(f"{NOT_APPLICABLE}the failover transport checked here is ActiveMQ's client (OpenWire); "
                    f"{target_name} is {target.kind}")
    running = Pair(target, network_workdir(tmp_path_factory, f"ftreal-{target_name}"))
    try:
        yield running
    finally:
        running.stop()


class Gates:
    """Gates in front of brokers A and B (OpenWire), opened for each test, removed after it."""

    def __init__(self, api: ToxiproxyClient, pair, client: str) -> None:
        self.a = Gate(api, address(pair.a, client))
        self.b = Gate(api, address(pair.b, client))

    @staticmethod
    def tcp(gate: Gate) -> str:
        return f"tcp://127.0.0.1:{gate.port}"

    def remove(self) -> None:
        for gate in (self.a, self.b):
            gate.remove()


@pytest.fixture
def gates(pair, fault_proxy, client):
    opened = Gates(fault_proxy, pair, client)
    try:
        yield opened
    finally:
        opened.remove()


@pytest.fixture
def driver(drivers, client):
    return drivers(client)


def _queue() -> str:
    return f"fo.real.{uuid.uuid4().hex[:8]}"


def _interrupted(conn) -> bool:
    return bool(conn.events("interrupted"))


def _closed_port_uri() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


CLIENTS = client_params(ACTIVEMQ_CLIENTS)


# FT-FAILOVER-17 too: the pair is two single-node topologies launched one by one (`Pair`), with no
# network, cluster or shared store between them, so the move below needs nothing of the brokers
@pytest.mark.spec("FT-FAILOVER-1", "FT-FAILOVER-2", "FT-FAILOVER-8", "FT-FAILOVER-17")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_moves_to_the_second_broker_when_the_first_dies(gates, driver, client):
    queue = _queue()
    conn = driver.connect(f"failover:({gates.tcp(gates.a)},{gates.tcp(gates.b)})?randomize=false&{FAST}", timeout=60)
    try:
        assert conn.port == gates.a.port, \
            f"FT-FAILOVER-8: with randomize=false {client} should start on the first URI; it is on {conn.address}"
        conn.subscribe(queue)
        conn.send(queue, "before")
        assert conn.receive(queue, RECEIVE) == "before", f"FT-FAILOVER-2: no message before the loss{driver.log_tail()}"
        gates.a.close()
        assert poll(lambda: _interrupted(conn), timeout=EVENT_TIMEOUT, interval=0.05), \
            f"FT-FAILOVER-2: {client} never reported the interruption: {conn.events()}"
        conn.send(queue, "after", timeout=60)
        assert conn.port == gates.b.port, \
            f"FT-FAILOVER-1: after the first broker went away {client} should be on the second; it is on {conn.address}"
        assert conn.receive(queue, RECEIVE) == "after", \
            f"FT-FAILOVER-2: the consumer should carry on on the new broker; events {conn.events()}"
    finally:
        conn.close()


@pytest.mark.spec("FT-FAILOVER-1", "FT-FAILOVER-3")
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("form", ["parenthesised", "bare-list"])
def test_real_client_starting_while_the_first_broker_is_down_connects_to_the_next(gates, driver, client, form):
    listed = f"{_closed_port_uri()},{gates.tcp(gates.b)}"
    uri = f"failover:({listed})?randomize=false&{FAST}" if form == "parenthesised" else f"failover:{listed}"
    queue = _queue()
    conn = driver.connect(uri, timeout=60)
    try:
        assert conn.port == gates.b.port, \
            f"FT-FAILOVER-1: with the first broker down {client} should connect to the next one ({uri}); it is on " \
            f"{conn.address}"
        conn.send(queue, "m")
        assert conn.receive(queue, RECEIVE) == "m", "FT-FAILOVER-3: the connection it made does not work"
    finally:
        conn.close()


@pytest.mark.spec("FT-DISCOVERY-1", "FT-DISCOVERY-4")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_discovery_with_the_static_agent_finds_the_live_broker(gates, driver, client):
    queue = _queue()
    conn = driver.connect(f"discovery:(static://({_closed_port_uri()},{gates.tcp(gates.b)}))?{FAST}", timeout=60)
    try:
        assert conn.port == gates.b.port, \
            f"FT-DISCOVERY-1: with one listed broker dead {client}'s discovery transport should use the other; " \
            f"it is on {conn.address}"
        conn.send(queue, "m")
        assert conn.receive(queue, RECEIVE) == "m", "FT-DISCOVERY-4: the discovered connection does not work"
    finally:
        conn.close()


@pytest.mark.spec("FT-FAILOVER-6")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_max_reconnect_attempts_zero_never_fails_over(gates, driver, client):
    queue = _queue()
    conn = driver.connect(f"failover:({gates.tcp(gates.a)},{gates.tcp(gates.b)})?randomize=false&{FAST}"
                          "&maxReconnectAttempts=0", timeout=60)
    try:
        assert conn.port == gates.a.port
        conn.send(queue, "first")
        gates.a.close()
        # with no reconnect the transport fails for good: the library reports the error (not an
        # interruption it means to recover from) and the next send fails
        failed = poll(lambda: conn.events("exception") + conn.events("error"), bool, timeout=EVENT_TIMEOUT,
                      interval=0.05)
        assert failed, f"FT-FAILOVER-6: {client} reported no failure after its broker went away: {conn.events()}"
        with pytest.raises(DriverError):
            conn.send(queue, "second", timeout=60)
        assert not conn.events("resumed")[1:], \
            f"FT-FAILOVER-6: with maxReconnectAttempts=0 {client} must not reconnect anywhere: {conn.events()}"
    finally:
        try:
            conn.close()
        except DriverError:
            pass  # a failed connection may refuse even its close


@pytest.mark.spec("FT-FAILOVER-7")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_startup_max_reconnect_attempts_zero_gives_up_when_no_broker_is_up(pair, driver, client):
    # `pair` is not dialled (no broker is up as far as this URI goes); it binds the test to the
    # ActiveMQ target, whose client column the verdict goes to
    uri = f"failover:({_closed_port_uri()},{_closed_port_uri()})?randomize=false&startupMaxReconnectAttempts=0"
    began = time.monotonic()
    with pytest.raises(DriverError) as refused:
        driver.connect(uri, timeout=120)
    took = time.monotonic() - began
    # "at once": one pass over two closed loopback ports, with no retry, takes milliseconds; the
    # bound is only there to tell "gave up" from "kept retrying until something else stopped it"
    assert took < 30, f"FT-FAILOVER-7: {client} took {took:.1f} s to give up with startupMaxReconnectAttempts=0"
    assert refused.value.java_class, f"FT-FAILOVER-7: the error should come from the client: {refused.value}"


#: FT-FAILOVER-14: attempts each warning check lets the client make before it gives up
#: (startupMaxReconnectAttempts): past the default's second warning (20), so every documented
#: warning of the three settings below is due, and the connect returns instead of retrying for ever
WARN_ATTEMPTS = 25
#: the failover transport's warning for a list it still cannot reach (FailoverTransport.doReconnect,
#: through the SLF4J binding the driver's lib carries, on the driver's stderr)
RETRY_WARNING = r"Failed to connect to \[{uri}\] after: (\d+) attempt\(s\).*continuing to retry"


def warnings_after(driver, client: str, options: str) -> list[int]:
    """The attempt numbers after which ``client`` warned it still had no connection, while its
    startup attempts to a closed port ran out (WARN_ATTEMPTS, 10 ms apart)."""
    uri = _closed_port_uri()
    mark = driver.log_mark()
    try:
        driver.connect(f"failover:({uri})?startupMaxReconnectAttempts={WARN_ATTEMPTS}&initialReconnectDelay=10&"
                       f"useExponentialBackOff=false{options}", timeout=60)
    except DriverError:
        pass  # the attempts ran out: the end of the sequence the warnings are about
    else:
        pytest.fail(f"setup: {client} connected to {uri}, where nothing listens")
    # the driver answers once the client gave up, after its last warning was written; only what
    # this connect wrote counts (CI stop 32: a port picked again read an earlier run's warnings)
    pattern = re.compile(RETRY_WARNING.format(uri=re.escape(uri)))
    return [int(n) for n in pattern.findall(driver.log_since(mark))]


@pytest.mark.spec("FT-FAILOVER-14")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_warns_after_every_n_reconnect_attempts(pair, driver, client):
    # `pair` binds the test to the ActiveMQ target (whose client column the verdict goes to); the
    # attempts go to a closed port, since the warnings are about having no connection
    every_two = warnings_after(driver, client, "&warnAfterReconnectAttempts=2")
    by_default = warnings_after(driver, client, "")
    off = warnings_after(driver, client, "&warnAfterReconnectAttempts=0")
    print(f"FT-FAILOVER-14: {client} warned after attempts {every_two} (N=2), {by_default} (default), {off} (N=0) "
          f"of {WARN_ATTEMPTS}")
    assert not off, f"FT-FAILOVER-14: warnAfterReconnectAttempts=0 turns the warnings off; {client} warned after {off}"
    due_two = list(range(2, WARN_ATTEMPTS, 2))
    assert set(due_two) <= set(every_two), \
        f"FT-FAILOVER-14: with N=2 {client} should warn after attempts {due_two}; it warned after {every_two}"
    assert {10, 20} <= set(by_default), (
        f"FT-FAILOVER-14: with warnAfterReconnectAttempts at its default (10) {client} should warn after attempts 10 "
        f"and 20; it warned after {by_default}")
    # and only then: a warning after every N attempts, not at other counts
    assert every_two == due_two and by_default == [10, 20], (
        f"FT-FAILOVER-14: {client} warned at counts that are not multiples of N: {every_two} (N=2), {by_default} "
        f"(default 10)")


#: how long the harness waits for a send that timeout=1500 should end: 20 times the option, so a
#: send still blocked then is not late, it is not bounded
SEND_BOUND = 30.0


@pytest.mark.spec("FT-FAILOVER-10")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_timeout_bounds_a_send_while_no_broker_is_reachable(gates, driver, client):
    queue = _queue()
    # Table 2.1's reconnect defaults: only timeout is the subject
    conn = driver.connect(f"failover:({gates.tcp(gates.a)})?timeout=1500", timeout=60)
    try:
        gates.a.close()
        assert poll(lambda: _interrupted(conn), timeout=EVENT_TIMEOUT, interval=0.05), f"never interrupted: {conn.events()}"
        began = time.monotonic()
        try:
            conn.send(queue, "nowhere", timeout=SEND_BOUND)
            outcome = "sent"
        except NoAnswer:
            outcome = "blocked"
        except DriverError as exc:
            outcome = str(exc)
        took = time.monotonic() - began
        assert outcome != "blocked", (f"FT-FAILOVER-10: with timeout=1500 and no broker reachable {client}'s send was "
                                      f"still blocked {SEND_BOUND:.0f} s later")
        assert "timeout" in outcome.lower(), \
            f"FT-FAILOVER-10: with no broker and timeout=1500 {client}'s send should fail with a timeout: {outcome}"
        assert took >= 1.5 - 0.05, f"FT-FAILOVER-10: the send gave up after {took:.3f} s, before timeout=1500 ms"
    finally:
        # a send still blocked in the library goes through once the broker is back; then close
        gates.a.open()
        poll(lambda: len(conn.events("resumed")) >= 2, timeout=60, interval=0.1)
        conn.close()


@pytest.mark.spec("FT-FAILOVER-15")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_priority_backup_returns_to_the_first_broker(gates, driver, client):
    queue = _queue()
    conn = driver.connect(f"failover:({gates.tcp(gates.a)},{gates.tcp(gates.b)})?randomize=false&{FAST}"
                          "&priorityBackup=true", timeout=60)
    try:
        assert conn.port == gates.a.port
        gates.a.close()
        # noticed: interrupted, or already on B without an interruption (priorityBackup keeps a
        # backup connection to B once it can, and a client with one swaps to it at once; seen in a
        # loaded main job: resumed on A, then on B 31 ms later, no interrupted event)
        assert poll(lambda: _interrupted(conn) or conn.port == gates.b.port, timeout=EVENT_TIMEOUT, interval=0.05), \
            f"{client} never noticed the loss of the first broker: {conn.events()}"
        conn.send(queue, "on-b", timeout=60)
        assert conn.port == gates.b.port, f"FT-FAILOVER-15: {client} should be on the backup; on {conn.address}"
        assert conn.receive(queue, RECEIVE) == "on-b"
        gates.a.open()
        back = poll(lambda: conn.port, lambda port: port == gates.a.port, timeout=60, interval=0.2)
        assert back == gates.a.port, \
            f"FT-FAILOVER-15: {client} never went back to the priority broker once it was reachable: {conn.events()}"
        conn.send(queue, "on-a", timeout=60)
        assert conn.receive(queue, RECEIVE) == "on-a", "FT-FAILOVER-15: the consumer does not work on the priority broker"
    finally:
        conn.close()


#: connections of one randomize=true URI over two brokers: all on one broker has probability
#: 2 * (1/2)**12 < 0.001 if each pick is random
RANDOM_CONNECTIONS = 12


@pytest.mark.spec("FT-FAILOVER-8")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_randomize_default_spreads_its_connections_over_the_list(gates, driver, client):
    uri = f"failover:({gates.tcp(gates.a)},{gates.tcp(gates.b)})?{FAST}"  # randomize left at its default
    ports = []
    for _ in range(RANDOM_CONNECTIONS):
        conn = driver.connect(uri, timeout=60)
        ports.append(conn.port)
        conn.close()
    assert set(ports) == {gates.a.port, gates.b.port}, \
        f"FT-FAILOVER-8: with randomize at its default (true) {client}'s {RANDOM_CONNECTIONS} connections all went to " \
        f"one broker: {ports}"


@pytest.mark.spec("FT-FAILOVER-16")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_priority_uris_are_preferred_over_the_list_order(gates, driver, client):
    queue = _queue()
    second = gates.tcp(gates.b)
    conn = driver.connect(f"failover:({gates.tcp(gates.a)},{second})?randomize=false&{FAST}&priorityBackup=true"
                          f"&priorityURIs={second}", timeout=60)
    try:
        # the library may first take the list's first URI and then move to the priority one it
        # keeps a backup connection to; what the statement asks is where it settles
        settled = poll(lambda: conn.port, lambda port: port == gates.b.port, timeout=30, interval=0.2)
        assert settled == gates.b.port, \
            f"FT-FAILOVER-16: priorityURIs names the second broker, so {client} should be there; it is on {conn.address}"
        conn.send(queue, "m", timeout=60)
        assert conn.receive(queue, RECEIVE) == "m", "FT-FAILOVER-16: the preferred broker's connection does not work"
    finally:
        conn.close()


@pytest.mark.spec("FT-FAILOVER-9")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_backup_holds_a_second_connection_to_the_other_broker(gates, driver, client, wire):
    queue = _queue()
    with syn_watch.SynWatch(gates.b.port) as to_b:
        conn = driver.connect(f"failover:({gates.tcp(gates.a)},{gates.tcp(gates.b)})?randomize=false&{FAST}"
                              "&backup=true", timeout=60)
        try:
            assert conn.port == gates.a.port
            assert poll(lambda: len(to_b.times), bool, timeout=30, interval=0.1), \
                f"FT-FAILOVER-9: with backup=true {client} opened no connection to the second broker"
            backed_up = len(to_b.times)
            conn.subscribe(queue)
            gates.a.close()
            assert poll(lambda: _interrupted(conn), timeout=EVENT_TIMEOUT, interval=0.05), \
                f"never interrupted: {conn.events()}"
            conn.send(queue, "after", timeout=60)
            assert conn.port == gates.b.port, f"FT-FAILOVER-9: {client} is not on the backup broker: {conn.address}"
            assert conn.receive(queue, RECEIVE) == "after", "FT-FAILOVER-9: the backup connection does not work"
            # the move took the connection already held: no new connection to B was needed for it
            moved_with = len(to_b.times) - backed_up
        finally:
            conn.close()
    assert moved_with == 0, \
        f"FT-FAILOVER-9: {client} opened {moved_with} new connection(s) to B to fail over instead of using its backup"


@pytest.mark.spec("FT-FAILOVER-12")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_update_uris_url_lets_it_reach_a_broker_missing_from_its_uri(gates, driver, client, tmp_path):
    queue = _queue()
    listed = tmp_path / "more-brokers.txt"
    listed.write_text(gates.tcp(gates.b) + "\n")
    gates.a.close()  # the only broker the URI names is down
    conn = driver.connect(f"failover:({gates.tcp(gates.a)})?randomize=false&{FAST}&updateURIsURL=file://{listed}",
                          timeout=60)
    try:
        assert conn.port == gates.b.port, \
            f"FT-FAILOVER-12: the broker listed in the updateURIsURL file should be used; {client} is on {conn.address}"
        conn.send(queue, "m")
        assert conn.receive(queue, RECEIVE) == "m", "FT-FAILOVER-12: that connection does not work"
    finally:
        conn.close()


@pytest.mark.spec("FT-FAILOVER-11")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_track_messages_replays_a_send_cut_off_before_its_receipt(gates, driver, client, fault_proxy,
                                                                             pair):
    import threading

    queue, body = _queue(), "x" * 64
    conn = driver.connect(f"failover:({gates.tcp(gates.a)},{gates.tcp(gates.b)})?randomize=false&{FAST}"
                          "&trackMessages=true", timeout=60)
    watcher = driver.connect("tcp://{}:{}".format(*address(pair.a, client)), timeout=60)  # straight to A
    outcome: dict = {}

    def send() -> None:
        try:
            conn.send(queue, body, persistent=True, timeout=90)  # JMS: a persistent send waits for the broker
            outcome["sent"] = True
        except DriverError as exc:
            outcome["error"] = exc

    try:
        watcher.subscribe(queue)
        # the producer first (creating it waits for the broker's answer too), with one message
        conn.send(queue, "warm-up", timeout=60)
        assert watcher.receive(queue, RECEIVE) == "warm-up", "setup: the producer's first message did not arrive"
        # broker A's answers (the send's response) stop at the gate; the message itself goes through
        fault_proxy.add_toxic(gates.a.name, "timeout", stream="downstream", attributes={"timeout": 0})
        sender = threading.Thread(target=send, name="ft-failover-11-real-send", daemon=True)
        sender.start()
        assert watcher.receive(queue, RECEIVE) == body, \
            "FT-FAILOVER-11: the send never reached broker A through the gate (nothing to cut off)"
        assert sender.is_alive(), f"FT-FAILOVER-11: the send returned without the broker's answer: {outcome}"
        gates.a.close()  # the connection breaks with the send's answer outstanding
        sender.join(90)
        assert not sender.is_alive(), "FT-FAILOVER-11: the send neither returned nor failed after the connection broke"
        assert outcome.get("sent"), (f"FT-FAILOVER-11: with trackMessages=true {client}'s cut-off send should be "
                                     f"replayed on the broker it reconnects to; it raised {outcome.get('error')!r}")
        # The replayed send can be answered before the transport names its new broker: ActiveMQ's
        # failover transport replays what it tracked while it restores the connection and sets its
        # connected URI only after that (CI read None here once, and B's address a moment later).
        on = poll(lambda: conn.port, lambda port: port is not None, timeout=EVENT_TIMEOUT, interval=0.05)
        assert on == gates.b.port, f"FT-FAILOVER-11: {client} is not on broker B: {conn.address}"
        on_b = []
        while (got := conn.receive(queue, 3.0)) is not None:
            on_b.append(got)
        print(f"FT-FAILOVER-11 {client}: on broker B after the replay: {[m[:8] for m in on_b]}")
        # (5.17.2 and 6.3.1 replay the warm-up too, whose send had completed: the cache keeps
        # answered sends, a known deviation checked in test_failover_real_message_cache.py. The
        # cut-off send itself is replayed from the failover transport's map of requests still
        # waiting for an answer, with trackMessages left out too (seen on both clients): this test
        # shows that replay; the cache itself is checked with non-persistent sends over there)
        assert body in on_b, f"FT-FAILOVER-11: the replayed message is not on broker B: {on_b}"
    finally:
        conn.close()
        watcher.close()


class OpeningRelay:
    """A loopback relay to ``upstream`` that records the first bytes each connection's client sends
    (an OpenWire client opens with its WireFormatInfo). The first relay of a ``group`` to be
    reached plays a broker that dies: it records that opening, drops the connection and stops
    listening, so a failover client moves on to the next broker of its list; the others relay
    both ways."""

    def __init__(self, upstream: tuple[str, int], group: list) -> None:
        import socket
        import threading

        self.upstream, self.openings, self._socks, self._group = upstream, [], [], group
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._threading = threading
        threading.Thread(target=self._accept, name=f"opening-relay-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            first = client.recv(4096)
            self.openings.append(first)
            if not self._group:
                self._group.append(self.port)  # this one dies
                client.close()
                self._server.close()
                return
            upstream = socket.create_connection(self.upstream, timeout=10)
            upstream.settimeout(None)
            upstream.sendall(first)
            self._socks += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._server.close()
        for sock in self._socks:
            try:
                sock.close()
            except OSError:
                pass


def max_inactivity(opening: bytes) -> int | None:
    """MaxInactivityDuration from an OpenWire WireFormatInfo: its properties are a marshalled map
    of (UTF-8 key, type byte, value); a long (type 6) is 8 bytes big-endian."""
    import struct

    key = b"MaxInactivityDuration"
    at = opening.find(key)
    if at < 0 or opening[at + len(key)] != 6:
        return None
    return struct.unpack(">q", opening[at + len(key) + 1:at + len(key) + 9])[0]


def check_option_reaches_every_broker(pair, driver, client, spec: str, uri_of) -> None:
    """``uri_of(listed)`` with the two relays' addresses; the first broker reached dies (see
    `OpeningRelay`), so the client connects to both; each opening must carry maxInactivityDuration
    4000 (the default is 30000 ms: 4000 can only come from the option)."""
    died: list = []
    relays = [OpeningRelay(address(node, client), died) for node in (pair.a, pair.b)]
    uri = uri_of(",".join(f"tcp://127.0.0.1:{relay.port}" for relay in relays))
    queue = _queue()
    try:
        conn = driver.connect(uri, timeout=60)
        try:
            conn.send(queue, "m")
            assert conn.receive(queue, RECEIVE) == "m", f"{spec}: the connection through the relays does not work"
        finally:
            conn.close()
    finally:
        for relay in relays:
            relay.close()
    seen = {relay.port: [max_inactivity(o) for o in relay.openings] for relay in relays}
    print(f"{spec} {client} {uri}: maxInactivityDuration per broker port {seen}")
    assert all(seen.values()), f"{spec}: {client} did not connect to every broker of the list: {seen}"
    assert all(v == 4000 for values in seen.values() for v in values), \
        f"{spec}: {client}'s connections did not all carry maxInactivityDuration=4000 (per broker port): {seen}"


@pytest.mark.spec("FT-FAILOVER-13")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_nested_options_reach_every_broker_of_the_list(pair, driver, client):
    check_option_reaches_every_broker(pair, driver, client, "FT-FAILOVER-13", lambda listed: (
        f"failover:({listed})?randomize=false&{FAST}&nested.wireFormat.maxInactivityDuration=4000"))


@pytest.mark.spec("FT-DISCOVERY-3")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_discovery_injects_an_option_it_does_not_know_into_every_endpoint(pair, driver, client):
    check_option_reaches_every_broker(pair, driver, client, "FT-DISCOVERY-3", lambda listed: (
        f"discovery:(static://({listed}))?{FAST}&wireFormat.maxInactivityDuration=4000"))


# --------------------------------------------------------------------------- reconnect waits


def watch_reconnects(gate: Gate, driver, uri: str, attempts: int, spec: str):
    """Connect ``uri`` (through ``gate``), close the gate, wait for ``attempts`` connection attempts
    at its port after the loss, open it and wait for the client to work again. Returns (the loss
    time, the attempt times after it), both on the monotonic clock."""
    watch = syn_watch.SynWatch(gate.port)
    queue = _queue()
    try:
        conn = driver.connect(uri, timeout=60)
    except DriverError as exc:
        watch.stop()
        raise AssertionError(f"{spec}: {driver.name} refused the URI {uri}: {exc}") from None
    watch.start()
    try:
        conn.subscribe(queue)
        gate.close()
        noticed = poll(lambda: conn.events("interrupted") or conn.events("exception"), bool, timeout=EVENT_TIMEOUT,
                       interval=0.01)
        assert noticed, f"{spec}: the client never reported the loss: {conn.events()}"
        if not conn.events("interrupted"):
            time.sleep(2.0)  # time for reconnect attempts, were any coming
            gone = noticed[0].mono
            raise AssertionError(f"{spec}: {driver.name} gave up at the loss instead of reconnecting ({uri}): it "
                                 f"reported {[(e.kind, e.detail.get('class')) for e in conn.events()[1:]]} and made "
                                 f"{len(watch.after(gone))} connection attempts in the next 2 s")
        lost = conn.events("interrupted")[0].mono
        assert poll(lambda: len(watch.after(lost)), lambda n: n >= attempts, timeout=90, interval=0.02), \
            f"{spec}: fewer than {attempts} reconnect attempts reached the port: {len(watch.after(lost))}"
        gate.open()
        assert poll(lambda: len(conn.events("resumed")) >= 2, timeout=60, interval=0.05), \
            f"{spec}: the client did not reconnect once the gate opened again: {conn.events()}"
        conn.send(queue, "after", timeout=60)
        assert conn.receive(queue, RECEIVE) == "after", f"{spec}: the reconnected client does not work"
        return lost, watch.after(lost)
    finally:
        watch.stop()
        try:
            conn.close()
        except DriverError:
            pass  # a connection that gave up may refuse its close too


@pytest.fixture
def wire():
    ok, reason = syn_watch.available()
    if not ok:
        skip_or_fail("netns", reason)  # the same machine power as the netns nemesis: root on Linux


#: Table 2.1's options and the waits they imply before reconnect attempts 1, 2, ... (ms)
DELAYS = [
    pytest.param("", [10, 20, 40, 80, 160, 320], id="defaults"),
    # the growth factor under the library's own name (reconnectDelayExponent): the cap is the subject
    # here; the documented name, backOffMultiplier, is test_real_client_back_off_multiplier_...'s
    pytest.param("&initialReconnectDelay=100&reconnectDelayExponent=3&maxReconnectDelay=1000",
                 [100, 300, 900, 1000, 1000], id="exponent-3-capped-at-1000"),
    pytest.param("&initialReconnectDelay=150&useExponentialBackOff=false", [150, 150, 150, 150], id="no-back-off"),
]
#: how far past the options' schedule the waits may run, as the median over a series: a gap also
#: holds the refused loopback connect and the thread waking up (measured here: 1 to 8 ms for the
#: real clients and ours alike; tens of ms for a single gap on a loaded machine, which the median
#: absorbs). A client that waits longer than the options say (such as ours before this module,
#: whose STOMP adapter slept 0.2 s after every refused connect) is well past it, and so is one
#: that ignores maxReconnectDelay (multiplier 3 uncapped: 2700 ms where 1000 is due)
EXCESS_MARGIN_MS = 150


def check_gaps(who: str, options: str, gaps: list[float], waits: list[float], spec: str, *,
               lag_ms: float = 0.0) -> None:
    """``gaps``: loss -> attempt 1, then attempt k -> k+1 (ms). Table 2.1's schedule: attempt k
    comes after the k-th wait (``waits``), so attempt k+1 follows attempt k by ``waits[k]``.
    ``lag_ms``: how late the client's own threads were woken during the series, when they are this
    process's (`SchedulingLag`), added to the too-long margin; the too-early check takes nothing."""
    between, expected = gaps[1:len(waits)], waits[1:]
    short = [(n + 2, gap, wait) for n, (gap, wait) in enumerate(zip(between, expected)) if gap < wait - 1]
    assert not short, (f"{spec}: {who} with {options or 'the default options'}: reconnect attempts (number, ms since "
                       f"the previous one, the wait the options imply) came early: {short}; all gaps {gaps}")
    excess = sorted(gap - wait for gap, wait in zip(between, expected))
    median = excess[len(excess) // 2]
    assert median <= EXCESS_MARGIN_MS + lag_ms, (
        f"{spec}: {who} with {options or 'the default options'} waits longer than the options say (median excess "
        f"{median:.1f} ms over {expected}, margin {EXCESS_MARGIN_MS} ms + {lag_ms:.1f} ms this process was woken "
        f"late); gaps {gaps}")


@pytest.mark.spec("FT-FAILOVER-5")
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("options, waits", DELAYS)
def test_real_client_waits_between_reconnect_attempts_follow_the_delay_options(gates, driver, client, options, waits,
                                                                               wire, target_name, record_property):
    check_reconnect_waits(gates, driver, client, target_name, options, waits, record_property)


@pytest.mark.spec("FT-FAILOVER-5")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_back_off_multiplier_option_sets_the_growth_of_the_waits(gates, driver, client, wire, target_name,
                                                                            record_property):
    check_reconnect_waits(gates, driver, client, target_name,
                          "&initialReconnectDelay=100&backOffMultiplier=3&maxReconnectDelay=1000",
                          [100, 300, 900, 1000, 1000], record_property)


def check_reconnect_waits(gates, driver, client, target_name, options, waits, record_property):
    record_schedule(record_property, ["FT-FAILOVER-5"], SUBJECTS[client], target_name, "failover", options, waits,
                    seen_at="wire")
    lost, attempts = watch_reconnects(gates.a, driver, f"failover:({gates.tcp(gates.a)})?randomize=false{options}",
                                      len(waits), "FT-FAILOVER-5")
    gaps = gaps_ms(lost, attempts)[:len(waits)]
    record_property(GAPS_PROPERTY, gaps)
    print(f"reconnect gaps {client} {options or 'defaults'}: {gaps}")
    check_gaps(client, options, gaps, waits, "FT-FAILOVER-5")


@pytest.mark.spec("FT-FAILOVER-4")
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("initial", [10, 500], ids=["default-10", "500"])
def test_real_client_waits_initial_reconnect_delay_before_its_first_attempt(gates, driver, client, initial, wire,
                                                                          target_name, record_property):
    options = "" if initial == 10 else f"&initialReconnectDelay={initial}"
    # the waits Table 2.1 implies with only initialReconnectDelay set (doubling, maxReconnectDelay
    # 30 s far away), for the report; this test asserts the first
    record_schedule(record_property, ["FT-FAILOVER-4"], SUBJECTS[client], target_name, "failover", options,
                    [initial * 2 ** k for k in range(4)], seen_at="wire")
    lost, attempts = watch_reconnects(gates.a, driver, f"failover:({gates.tcp(gates.a)})?randomize=false{options}",
                                      3, "FT-FAILOVER-4")
    gaps = gaps_ms(lost, attempts)
    record_property(GAPS_PROPERTY, gaps[:4])
    print(f"reconnect gaps {client} initial={initial}: {gaps[:4]}")
    # the loss time is when the library reported it, which is after the transport saw the
    # connection drop: the first attempt can only look later than it really was, never earlier
    assert gaps[0] >= initial - 1, (f"FT-FAILOVER-4: {client}'s first reconnect attempt came {gaps[0]} ms after it "
                                    f"reported the loss, before initialReconnectDelay = {initial} ms; gaps {gaps}")


DISCOVERY_WAITS = [10, 20, 40, 80, 160, 320, 640]


def check_discovery_waits(gates, driver, client, target_name, options: str, record_property) -> None:
    waits = DISCOVERY_WAITS
    record_schedule(record_property, ["FT-DISCOVERY-2"], SUBJECTS[client], target_name, "discovery", options, waits,
                    seen_at="wire")
    uri = f"discovery:(static://({gates.tcp(gates.a)})){options}"
    lost, attempts = watch_reconnects(gates.a, driver, uri, len(waits), "FT-DISCOVERY-2")
    gaps = gaps_ms(lost, attempts)[:len(waits)]
    record_property(GAPS_PROPERTY, gaps)
    print(f"reconnect gaps {client} {uri}: {gaps}")
    check_gaps(f"{client}'s discovery transport", options, gaps, waits, "FT-DISCOVERY-2")


@pytest.mark.spec("FT-DISCOVERY-2")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_discovery_reconnects_with_failover_s_default_delays(gates, driver, client, wire, target_name,
                                                                        record_property):
    check_discovery_waits(gates, driver, client, target_name, "", record_property)


@pytest.mark.spec("FT-DISCOVERY-2")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_discovery_max_reconnect_attempts_zero_means_unlimited(gates, driver, client, wire, target_name,
                                                                           record_property):
    # Table 2.3: for the discovery transport 0 (its default) means no limit, unlike failover's 0
    check_discovery_waits(gates, driver, client, target_name, "?maxReconnectAttempts=0", record_property)


# --------------------------------------------------------------------------- ours, measured the same way
#
# Our failover client (conformance/clients/failover.py, STOMP) through a gate in front of broker A,
# its attempts counted on the wire exactly as the real clients' are, so the report can put the
# gaps side by side (test_failover_pairs.py checks ours through its own sleep and connect hooks).

OURS = [pytest.param("ours", id="ours", marks=pytest.mark.client_subject(SUBJECTS["ours"]))]


@pytest.fixture
def stomp_gate(pair, fault_proxy):
    opened = Gate(fault_proxy, pair.a.address("stomp"))
    try:
        yield opened
    finally:
        opened.remove()


@pytest.mark.spec("FT-FAILOVER-4", "FT-FAILOVER-5")
@pytest.mark.parametrize("client", OURS)
@pytest.mark.parametrize("options, waits", [
    pytest.param("", [10, 20, 40, 80, 160, 320], id="defaults"),
    # DELAYS's growth factor under the library's name too (failover_uri.py takes both names)
    pytest.param("&initialReconnectDelay=100&reconnectDelayExponent=3&maxReconnectDelay=1000",
                 [100, 300, 900, 1000, 1000], id="exponent-3-capped-at-1000"),
    pytest.param("&initialReconnectDelay=100&backOffMultiplier=3&maxReconnectDelay=1000", [100, 300, 900, 1000, 1000],
                 id="multiplier-3-capped-at-1000"),
    pytest.param("&initialReconnectDelay=150&useExponentialBackOff=false", [150, 150, 150, 150], id="no-back-off"),
    pytest.param("&initialReconnectDelay=500", [500, 1000, 2000, 4000], id="initial-500"),
])
def test_our_client_reconnect_waits_seen_on_the_wire(stomp_gate, client, options, waits, wire, target_name,
                                                     record_property):
    from conformance.clients.failover import connect_failover

    record_schedule(record_property, ["FT-FAILOVER-4", "FT-FAILOVER-5"], SUBJECTS[client], target_name, "failover",
                    options, waits, seen_at="wire")
    gate, watch, events, queue = stomp_gate, syn_watch.SynWatch(stomp_gate.port), [], f"queue://{_queue()}"
    fo = connect_failover(f"failover:({gate.uri})?randomize=false{options}", "stomp", listener=events.append,
                          timeout=5.0)
    watch.start()
    # our client sleeps its waits on this process's threads: how late they were woken is the
    # machine's, not the client's (mj35: 176 and 185 ms late twice in a row under the main job)
    lag = SchedulingLag()
    try:
        sub = fo.subscribe(queue)
        lag.start()
        gate.close()
        assert poll(lambda: [e for e in events if e.kind == "interrupted"], bool, timeout=EVENT_TIMEOUT, interval=0.01), \
            f"FT-FAILOVER-5: our client never noticed the loss: {events}"
        lost = next(e.time for e in events if e.kind == "interrupted")
        assert poll(lambda: len(watch.after(lost)), lambda n: n >= len(waits), timeout=90, interval=0.02), \
            f"FT-FAILOVER-5: fewer than {len(waits)} attempts reached the port"
        lag.stop()  # the series is over
        gate.open()
        assert poll(lambda: [e.kind for e in events].count("resumed") >= 2, timeout=60, interval=0.05), \
            f"FT-FAILOVER-5: our client did not reconnect: {events}"
        fo.send(queue, b"after")
        got = sub.receive(RECEIVE)
        assert got is not None and got.body == b"after", "FT-FAILOVER-5: the reconnected client does not work"
        gaps = gaps_ms(lost, watch.after(lost))[:len(waits)]
    finally:
        lag.stop()
        watch.stop()
        fo.close()
    record_property(GAPS_PROPERTY, gaps)
    print(f"reconnect gaps ours {options or 'defaults'}: {gaps}")
    assert gaps[0] >= waits[0] - 1, \
        f"FT-FAILOVER-4: our first reconnect attempt came {gaps[0]} ms after the loss, before {waits[0]} ms; gaps {gaps}"
    print(f"this process was woken up to {lag.max_ms:.1f} ms late during the series")
    check_gaps("our client", options, gaps, waits, "FT-FAILOVER-5", lag_ms=lag.max_ms)
