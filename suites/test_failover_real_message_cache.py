"""The failover transport's message cache, trackMessages and maxCacheSize (the A-MQ "Fault Tolerant
Messaging" guide, 2.1.1, Table 2.1; ../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md;
catalogue fault_tolerance.toml FT-FAILOVER-11), on the real client the table documents:
``activemq-client`` 5.17.2 and 6.3.1 through brokerconf's Java driver (issue 28). Our own client
is checked against the same statement in test_failover_pairs.py.

Which sends show the cache. A send that waits for the broker's answer (a persistent JMS send) is
re-sent on reconnect by the failover transport whatever trackMessages says: it keeps every request
still waiting for its answer and replays it (test_failover_real_clients.py's FT-FAILOVER-11 test
shows that replay). The cache is for the sends that wait for nothing: a non-persistent send is
written and forgotten, so only the cache can carry it to the next broker. Each test here therefore
makes non-persistent sends *in flight*: gate A (the fault proxy in front of broker A) drops
everything the client sends while it still passes A's side, so the sends leave the client and never
reach A; then the gate closes, the client fails over to B, and what B received before a marker the
client sends once it is there is what the client flushed (the marker waits for B's answer, and the
restore, flush included, comes before any new send on the connection). A's own consumer checks that
the sends were in flight (A never got them).

What the table says, as checked (body bytes are what the test counts: a message's size in the cache
can only be larger, never smaller, so a cache that keeps more than its size of bodies keeps more
than its size):
* trackMessages is false by default: then nothing is flushed;
* with trackMessages the in-flight sends are flushed to the broker the client reconnects to: all of
  them when they fit in maxCacheSize bytes (131072 by default), at least one when any of them fits,
  and never more than maxCacheSize bytes of them;
* the cache is of the messages in flight: a persistent send that A took and answered before the
  connection broke is not flushed to B (it would be a second copy there).
"""

from __future__ import annotations

import uuid

import pytest

from conformance.clients.java_driver import DriverError
from suites.java_support import (  # noqa: F401 - drivers: the fixture
    ACTIVEMQ_CLIENTS, SUBJECTS, client_params, drivers, tcp)
from suites.network_support import parametrize_by_target
from suites.proxy_support import fault_proxy  # noqa: F401 - the fixture
# the module's pair of ActiveMQ brokers behind gates, and one driver per client: the same fixtures
# as the module that checks the rest of Table 2.1 on these clients (each module starts its own pair)
from suites.test_failover_real_clients import EVENT_TIMEOUT, FAST, driver, gates, pair  # noqa: F401
from machinery.waiting import poll

pytestmark = [pytest.mark.slow]

#: Table 2.1's maxCacheSize default, in bytes
DEFAULT_MAX_CACHE_SIZE = 131072
#: seconds a marker (or a flushed send before it) is waited for on a broker's consumer
RECEIVE = 10.0
#: seconds the send after the gate closed may take: the client first has to reach B (reconnect
#: delays of FAST, a JVM on a loaded machine)
MOVE = 90.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def _bodies(sizes: list[int]) -> list[str]:
    """One body per size, exactly that many bytes (ASCII), each starting with its index."""
    bodies = []
    for index, size in enumerate(sizes):
        head = f"s{index}:"
        bodies.append(head + "x" * (size - len(head)))
    return bodies


def _until_markers(conn, queue: str, markers: tuple[str, ...], where: str) -> list[str]:
    """The bodies ``conn``'s consumer of ``queue`` receives until every one of ``markers`` came.
    A queue dispatches its persistent and its non-persistent messages from two separate lists,
    each in arrival order but not in order with the other, so each kind has its own marker."""
    got, missing = [], set(markers)
    while missing:
        body = conn.receive(queue, RECEIVE)
        if body is None:
            pytest.fail(f"setup: the markers sent to {where} did not all arrive within {RECEIVE:.0f} s; before "
                        f"them: {[b[:8] for b in got]}")
        if body in missing:
            missing.discard(body)
        else:
            got.append(body)
    return got


def _send_markers(conn, queue: str) -> tuple[str, str]:
    """A persistent then a non-persistent marker: each comes after every earlier send of its kind."""
    markers = f"marker-p-{uuid.uuid4().hex[:8]}", f"marker-n-{uuid.uuid4().hex[:8]}"
    conn.send(queue, markers[0], timeout=MOVE)
    conn.send(queue, markers[1], persistent=False, timeout=60)
    return markers


def cut_off_and_moved(pair, gates, driver, client: str, fault_proxy, options: str, in_flight: list[str],
                      answered: str) -> tuple[list[str], list[str]]:
    """The client on A sends ``answered`` (persistent: it waits for A's answer; it also creates
    the client's producer, whose creation waits for A's answer too), then ``in_flight``
    (non-persistent) cut off in flight, then moves to B (see the module docstring). Returns (what A
    received, what B received before the markers), bodies in arrival order."""
    queue = f"fo.cache.{uuid.uuid4().hex[:8]}"
    conn = driver.connect(f"failover:({gates.tcp(gates.a)},{gates.tcp(gates.b)})?randomize=false&{FAST}{options}",
                          timeout=60)
    on_a = driver.connect(tcp(pair.a, client), timeout=60)  # straight to each broker, past the gates
    on_b = driver.connect(tcp(pair.b, client), timeout=60)
    try:
        assert conn.port == gates.a.port, f"setup: with randomize=false the client should start on A: {conn.address}"
        on_a.subscribe(queue)
        on_b.subscribe(queue)
        conn.send(queue, answered, timeout=60)
        # from now on what the client sends leaves it and is dropped at the gate (A's answers still come)
        fault_proxy.add_toxic(gates.a.name, "timeout", stream="upstream", attributes={"timeout": 0})
        for body in in_flight:
            conn.send(queue, body, persistent=False, timeout=60)  # returns once written: it waits for no answer
        gates.a.close()  # the connection breaks with the sends in flight
        # a send made before the client noticed the break would enter the cache first (and could
        # push an older one out): the markers wait for the library's interruption
        assert poll(lambda: conn.events("interrupted"), timeout=EVENT_TIMEOUT, interval=0.05), \
            f"setup: the client never reported the interruption: {conn.events()}"
        # the persistent marker waits for B's answer, so the client has moved (and flushed) once it returns
        on_b_markers = _send_markers(conn, queue)
        assert conn.port == gates.b.port, f"setup: the client should have moved to B: {conn.address}"
        on_a_got = _until_markers(on_a, queue, _send_markers(on_a, queue), "A")
        on_b_got = _until_markers(on_b, queue, on_b_markers, "B")
    finally:
        for each in (conn, on_a, on_b):
            try:
                each.close(timeout=10)
            except DriverError:
                pass  # a close that fails must not hide the test's outcome; the driver stops with the module
    reached_a = [b[:8] for b in on_a_got if b in in_flight]
    assert not reached_a, f"setup: the sends were not in flight, A received {reached_a}"
    assert answered in on_a_got, f"setup: A should have received the answered send: {[b[:8] for b in on_a_got]}"
    return on_a_got, on_b_got


def flushed_on_reconnect(pair, gates, driver, client: str, fault_proxy, options: str,
                         sizes: list[int]) -> list[int]:
    """Non-persistent sends of ``sizes`` bytes cut off in flight on A, then a move to B: the
    indexes of the sends B received, in the order it received them."""
    bodies = _bodies(sizes)
    answered = f"answered-{uuid.uuid4().hex[:8]}"
    _, on_b = cut_off_and_moved(pair, gates, driver, client, fault_proxy, options, bodies, answered)
    flushed = [bodies.index(b) for b in on_b if b in bodies]
    print(f"FT-FAILOVER-11 {client} options={options or '(defaults)'} sizes={sizes}: B received sends {flushed}, "
          f"and {len(on_b) - len(flushed)} other(s)")
    return flushed


def check_the_cache(client: str, options: str, sizes: list[int], flushed: list[int]) -> None:
    """Table 2.1's trackMessages and maxCacheSize applied to what B received (module docstring)."""
    who = SUBJECTS[client]
    if "trackMessages=true" not in options:
        assert not flushed, (f"FT-FAILOVER-11: with trackMessages at its default (false) {who} keeps no cache, yet "
                             f"it flushed sends {flushed} of {len(sizes)} to the broker it reconnected to")
        return
    limit = next((int(o.split("=", 1)[1]) for o in options.split("&") if o.startswith("maxCacheSize=")),
                 DEFAULT_MAX_CACHE_SIZE)
    kept = sum(sizes[i] for i in set(flushed))
    assert kept <= limit, (f"FT-FAILOVER-11: {who}'s cache is maxCacheSize={limit} bytes, yet it flushed "
                           f"{kept} bytes of sends on reconnect (sends {flushed}, sizes {sizes})")
    if sum(sizes) <= limit:
        assert sorted(set(flushed)) == list(range(len(sizes))), (
            f"FT-FAILOVER-11: with trackMessages all {len(sizes)} sends ({sum(sizes)} bytes) fit {who}'s cache of "
            f"{limit} bytes and should all be flushed on reconnect; it flushed {flushed}")
    elif min(sizes) <= limit:
        assert flushed, (f"FT-FAILOVER-11: with trackMessages {who} should flush what its cache of {limit} bytes "
                         f"holds of the {len(sizes)} sends (each fits); it flushed none")


CLIENTS = client_params(ACTIVEMQ_CLIENTS)


@pytest.mark.spec("FT-FAILOVER-11")
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("options, sizes", [
    ("&trackMessages=true", [64] * 3),
    ("", [64] * 3),                                                  # trackMessages is false by default
    # the default maxCacheSize holds a send of exactly its size
    ("&trackMessages=true", [DEFAULT_MAX_CACHE_SIZE]),
], ids=["tracked", "default-untracked", "default-max-cache-size"])
def test_real_client_flushes_its_cache_of_sends_in_flight_on_reconnect(pair, gates, driver, client, fault_proxy,
                                                                       options, sizes):
    flushed = flushed_on_reconnect(pair, gates, driver, client, fault_proxy, options, sizes)
    check_the_cache(client, options, sizes, flushed)


@pytest.mark.spec("FT-FAILOVER-11")
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("options, sizes", [
    ("&trackMessages=true", [DEFAULT_MAX_CACHE_SIZE + 1]),           # one byte over the default
    ("&trackMessages=true&maxCacheSize=16", [64]),
    # 15000 bytes of sends in a cache of 10000: no more than 10000 bytes of them can be flushed
    ("&trackMessages=true&maxCacheSize=10000", [3000] * 5),
], ids=["over-default-max-cache-size", "over-max-cache-size", "more-than-max-cache-size"])
def test_real_client_does_not_flush_a_send_larger_than_its_cache(pair, gates, driver, client, fault_proxy, options,
                                                                 sizes):
    """A cache of maxCacheSize bytes never holds more: a send that does not fit is not flushed,
    and of several sends no more than that many bytes are."""
    flushed = flushed_on_reconnect(pair, gates, driver, client, fault_proxy, options, sizes)
    check_the_cache(client, options, sizes, flushed)


@pytest.mark.spec("FT-FAILOVER-11")
@pytest.mark.parametrize("client", CLIENTS)
def test_real_client_does_not_flush_a_send_its_broker_already_answered(pair, gates, driver, client, fault_proxy):
    """The cache is of the messages *in flight* when the connection broke: a persistent send that A
    took and answered before the break is not one of them, and flushing it would put a second
    copy on B. One in-flight send beside it shows that the cache was flushed at all."""
    answered, in_flight = f"answered-{uuid.uuid4().hex[:8]}", _bodies([64])
    on_a, on_b = cut_off_and_moved(pair, gates, driver, client, fault_proxy, "&trackMessages=true", in_flight,
                                   answered)
    print(f"FT-FAILOVER-11 {client}: A received {[b[:8] for b in on_a]}, B before the markers {[b[:8] for b in on_b]}")
    assert in_flight[0] in on_b, (f"setup: with trackMessages {SUBJECTS[client]} flushed nothing to B, not even the "
                                  f"send in flight: {[b[:8] for b in on_b]}")
    assert answered not in on_b, (
        f"FT-FAILOVER-11: {SUBJECTS[client]} flushed to B a send that A had already taken and answered before the "
        f"connection broke (not in flight): B now holds a second copy; B received {[b[:8] for b in on_b]}")
