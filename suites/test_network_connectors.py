"""Network-connector properties with a count as their observable, against ActiveMQ Classic's
"Networks of Brokers" page (../shared/spec/activemq-classic-networks-of-brokers.md; catalogue
conformance/spec/networks.toml): prefetchSize (NOB-PREFETCH-1), alwaysSyncSend (NOB-SYNC-1, its
default NOB-SYNC-2) and
the conditional network bridge filter's rate limit (NOB-THROTTLE-1).

One network of two brokers, A -> B, with one connector per property, each restricted to its own
queues (dynamically included ``nob.<connector>.>``). Every connector dials a fault proxy in front of
B (machinery/faultproxy; `chaos.topology.BridgeProxies` is the launchers' ``bridge_route``), so one
connector's link can be stalled alone: with the proxy dropping what A writes (a ``timeout`` toxic
with timeout 0 upstream), B never confirms anything, and what A still holds is a count that does
not depend on timing:

* prefetch: a network consumer with prefetch N has exactly N persistent messages dispatched and
  unacknowledged (A's InFlightCount), the rest wait in A's queue;
* alwaysSyncSend: non-persistent messages wait for B's confirmation like persistent ones (A keeps
  them, N in flight); without it they are sent one-way and A drops them at once (queue empty);
* rate limit: with a window far longer than the test (``rate_duration`` 10 minutes), a network
  consumer takes at most ``rate_limit`` messages while a local consumer on A takes the rest.

Not tested here: NOB-START-1 (networkConnectorStartAsync). What it changes is how long the
broker's start waits for its connectors, and in async mode the order of the start log lines is
the scheduler's: a duration or an unfixed order, not a count (no timed assertions here).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from conformance.clients import connect
from conformance.deployment import InFlight, require
from conformance.plugin import STATE
from suites.network_support import NETWORK_CAPABILITY, launch_network, network_target
from conformance.targets.base import CAPABILITIES
from conformance.topology import Bridge, BridgeFilterPolicy, NetworkConnectorOptions, Topology
from chaos.nemesis.proxy import ProxyNemesis
from machinery.faultproxy import start_fault_proxy
from chaos.topology import BridgeProxies

#: the connectors' network prefetch (NOB-PREFETCH-1, NOB-SYNC-1): small, so the messages sent are
#: several times the prefetch
PREFETCH = 5
MESSAGES = 20
#: NOB-THROTTLE-1: messages per window; the window outlasts the test, so only one window counts
RATE_LIMIT = 3
RATE_DURATION_MS = 600_000
DEMAND_TIMEOUT = 15.0
#: how long A may take to dispatch / drop what it will (generous on a loaded 2-core machine)
SETTLE_TIMEOUT = 15.0
#: after a count reached its expected value, how long to watch that it stays there
QUIET = 1.5
#: reconnect quickly after a healed stall (page, "Static discovery" table)
RECONNECT = dict(initial_reconnect_delay=500, max_reconnect_delay=1000, use_exponential_back_off=False)

pytestmark = [pytest.mark.slow]
if NETWORK_CAPABILITY in CAPABILITIES:
    pytestmark.append(pytest.mark.requires(NETWORK_CAPABILITY))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One run per selected target (as suites/test_networks.py)."""
    if "target_name" in metafunc.fixturenames:
        names = list(dict.fromkeys(metafunc.config.stash[STATE].target_names))
        metafunc.parametrize("target_name", names, ids=names, scope="module")


# --------------------------------------------------------------------------- the network


def _model():
    def connector(name: str, **options) -> Bridge:
        return Bridge("A", "B", NetworkConnectorOptions(
            name=name, dynamically_included_destinations=(f"queue://nob.{name}.>",), **RECONNECT, **options))

    bridges = (connector("prefetch", prefetch_size=PREFETCH),
               # prefetchSize left unset: NOB-PREFETCH-1's default (1000) is the broker's own
               connector("defprefetch"),
               connector("sync", prefetch_size=PREFETCH, always_sync_send=True),
               # NOB-SYNC-1 is about the option on and off: "off" is written out (left unset,
               # ActiveMQ 5.17.2 applies its own default, true, where the table says false)
               connector("async", prefetch_size=PREFETCH, always_sync_send=False),
               # alwaysSyncSend left unset: NOB-SYNC-2's default (off) is the broker's own
               connector("syncdefault", prefetch_size=PREFETCH),
               # equal priority, so the queue offers the network consumer its share (with the
               # table's default the local consumer would be preferred and the limit never reached)
               connector("throttle", decrease_network_consumer_priority=False))
    policies = (BridgeFilterPolicy("nob.throttle.>", rate_limit=RATE_LIMIT, rate_duration=RATE_DURATION_MS),)
    return bridges, policies


@pytest.fixture(scope="module")
def network(target_name, request, tmp_path_factory):
    """(network, proxy nemesis, routes): A -> B, each connector's link through its own proxy."""
    network_target(request, target_name)  # not applicable: skip before the proxy starts
    proxy = start_fault_proxy()
    try:
        routes = BridgeProxies(proxy.api_url)
        workdir = tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_.-]", "_", f"{target_name}-nob-conn"))
        bridges, policies = _model()
        net = launch_network(request, target_name, workdir,
                             Topology(("A", "B"), bridges, proxied=("bridges",), policies=policies, prefix="nob-conn"),
                             bridge_route=routes)
        try:
            nemesis = ProxyNemesis(proxy.api_url)
            yield net, nemesis, routes
            nemesis.teardown()  # heals whatever a test left stalled
        finally:
            net.stop()
    finally:
        proxy.stop()


@pytest.fixture
def clients():
    made: list = []

    def on(node):
        made.append(connect(*node.address("stomp"), "stomp"))
        return made[-1]

    yield on
    for c in reversed(made):
        try:
            c.close()
        except Exception:  # noqa: BLE001 - a broken connection must not hide the test's outcome
            pass


def queue(connector: str) -> str:
    return f"queue://nob.{connector}.{uuid.uuid4().hex[:8]}"


def settle(read, expected: int, timeout: float = SETTLE_TIMEOUT) -> int:
    """Poll ``read()`` until it returns ``expected``, then watch it for `QUIET` s (a count that
    overshoots later must be seen); returns the last value, for the caller's assertion."""
    deadline = time.monotonic() + timeout
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    if value != expected:
        return value
    quiet_until = time.monotonic() + QUIET
    while time.monotonic() < quiet_until:
        if (value := read()) != expected:
            return value
        time.sleep(0.1)
    return value


def demand(node, destination: str, count: int) -> None:
    seen = node.wait_for_consumers(destination, count, DEMAND_TIMEOUT)
    assert seen == count, (f"setup: broker {node.name} should count {count} consumer(s) of {destination} "
                           f"(local + network) within {DEMAND_TIMEOUT:.0f} s, counts {seen}")


def stall(nemesis, routes, connector: str) -> None:
    """Drop everything A's ``connector`` writes to B (the connection stays open; nothing B could
    confirm ever reaches it). Undone by the fixture's teardown or `heal`."""
    nemesis.invoke("partition", proxy=routes.name_of("A", "B", connector), direction="upstream")


def heal(nemesis, routes, connector: str) -> None:
    nemesis.invoke("heal", proxy=routes.name_of("A", "B", connector))


# --------------------------------------------------------------------------- tests


@pytest.mark.spec("NOB-PREFETCH-1")
@pytest.mark.parametrize("connector", ["prefetch", "defprefetch"], ids=["set", "default"])
def test_network_consumer_prefetch_is_the_connectors_prefetch_size(network, clients, connector):
    net, nemesis, routes = network
    a, b = net["A"], net["B"]
    # "prefetch": prefetch_size=PREFETCH; "defprefetch": unset, the document's default (the
    # model's field default, "NetworkConnector Properties") is what the broker must apply itself
    options = next(bridge.options for bridge in net.topology.bridges if bridge.options.name == connector)
    assert (connector == "defprefetch") == ("prefetch_size" not in options.model_fields_set), "setup"
    prefetch = options.prefetch_size
    messages = prefetch + MESSAGES  # several times a small prefetch, a few more than the default one
    q = queue(connector)
    clients(b).subscribe(q)
    demand(a, q, 1)
    stall(nemesis, routes, connector)
    try:
        producer = clients(a)
        for i in range(messages):
            producer.send(q, f"p{i}")  # persistent: forwarded as a request, acknowledged on B's reply
        in_flight = settle(lambda: require(a, InFlight).in_flight_count(q), prefetch)
        context = f"A holds {a.queue_size(q)} of {messages}, B holds {b.queue_size(q)}"
        what = f"prefetch_size={prefetch}" if connector == "prefetch" else f"prefetchSize left at its default ({prefetch})"
        assert in_flight == prefetch, (
            f"NOB-PREFETCH-1: with {what} and B not confirming, A's network consumer should "
            f"have exactly {prefetch} messages in flight; A's InFlightCount is {in_flight} ({context})")
        assert a.queue_size(q) == messages, f"NOB-PREFETCH-1: A should still hold every message ({context})"
    finally:
        heal(nemesis, routes, connector)


@pytest.mark.spec("NOB-SYNC-1")
def test_always_sync_send_forwards_non_persistent_messages_as_requests(network, clients):
    net, nemesis, routes = network
    a, b = net["A"], net["B"]
    sync_q, async_q = queue("sync"), queue("async")
    on_b = clients(b)
    on_b.subscribe(sync_q)
    on_b.subscribe(async_q)
    demand(a, sync_q, 1)
    demand(a, async_q, 1)
    stall(nemesis, routes, "sync")
    stall(nemesis, routes, "async")
    try:
        producer = clients(a)
        for i in range(MESSAGES):
            producer.send(sync_q, f"s{i}", persistent=False)
            producer.send(async_q, f"a{i}", persistent=False)
        # alwaysSyncSend: each non-persistent message waits for B's reply, so A keeps them all,
        # a prefetch's worth in flight.
        in_flight = settle(lambda: require(a, InFlight).in_flight_count(sync_q), PREFETCH)
        held = a.queue_size(sync_q)
        assert (in_flight, held) == (PREFETCH, MESSAGES), (
            f"NOB-SYNC-1: with always_sync_send, non-persistent messages should be forwarded as requests and "
            f"kept on A until B replies; with B not replying A has {in_flight} in flight (expected {PREFETCH}) "
            f"and holds {held} of {MESSAGES}")
        # Without it (the default): one-way sends, dropped by A as soon as they are written.
        left = settle(lambda: a.queue_size(async_q), 0)
        assert left == 0, (
            f"NOB-SYNC-1: without always_sync_send, non-persistent messages should be forwarded one-way and "
            f"removed from A at once; A still holds {left} of {MESSAGES} while B confirms nothing")
    finally:
        heal(nemesis, routes, "sync")
        heal(nemesis, routes, "async")


@pytest.mark.spec("NOB-SYNC-2")
def test_always_sync_send_left_unset_forwards_non_persistent_messages_one_way(network, clients):
    """The connector's configuration does not mention alwaysSyncSend: the table's default (false)
    makes non-persistent messages one-way sends, which A drops once written, confirmed or not."""
    net, nemesis, routes = network
    a, b = net["A"], net["B"]
    options = next(bridge.options for bridge in net.topology.bridges if bridge.options.name == "syncdefault")
    assert "always_sync_send" not in options.model_fields_set, "setup: the option must be left to the broker"
    q = queue("syncdefault")
    clients(b).subscribe(q)
    demand(a, q, 1)
    stall(nemesis, routes, "syncdefault")
    try:
        producer = clients(a)
        for i in range(MESSAGES):
            producer.send(q, f"d{i}", persistent=False)
        left = settle(lambda: a.queue_size(q), 0)
        assert left == 0, (
            f"NOB-SYNC-2: with alwaysSyncSend left unset (the table's default, false) non-persistent messages "
            f"should be forwarded one-way and removed from A at once; A still holds {left} of {MESSAGES}, "
            f"{require(a, InFlight).in_flight_count(q)} in flight, while B confirms nothing")
    finally:
        heal(nemesis, routes, "syncdefault")


@pytest.mark.spec("NOB-THROTTLE-1")
def test_rate_limit_caps_what_the_network_consumer_takes(network, clients):
    net, _nemesis, _routes = network
    a, b = net["A"], net["B"]
    q = queue("throttle")
    remote = clients(b).subscribe(q)
    demand(a, q, 1)
    local = clients(a).subscribe(q)
    demand(a, q, 2)
    producer = clients(a)
    for i in range(MESSAGES):
        producer.send(q, f"t{i}")
    got_local, got_remote = [], []
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while len(got_local) + len(got_remote) < MESSAGES and time.monotonic() < deadline:
        got_local += [m.text for m in local.drain(0.2)]
        got_remote += [m.text for m in remote.drain(0.2)]
    got_local += [m.text for m in local.drain(QUIET)]
    got_remote += [m.text for m in remote.drain(QUIET)]
    context = (f"local consumer on A got {len(got_local)}, B's consumer {len(got_remote)} of {MESSAGES}; "
               f"rate_limit={RATE_LIMIT} per {RATE_DURATION_MS} ms")
    assert sorted(got_local + got_remote) == sorted(f"t{i}" for i in range(MESSAGES)), (
        f"setup: every message should reach one of the two consumers exactly once ({context})")
    assert 1 <= len(got_remote) <= RATE_LIMIT, (
        f"NOB-THROTTLE-1: the network consumer should take at most rate_limit={RATE_LIMIT} messages in one window "
        f"(and at least one, or the bridge took no part), the local consumer the rest ({context})")
