"""Store and forward through a cut bridge (issue 7), against ActiveMQ Classic's "Networks of
Brokers" page (../shared/spec/activemq-classic-networks-of-brokers.md; catalogue
conformance/spec/networks.toml).

Two brokers, A -> B. A's network connector does not dial B itself but a fault proxy in front of B
(machinery/faultproxy, Toxiproxy API; `chaos.topology.BridgeProxies` is the launchers' ``bridge_route``),
so disabling that proxy cuts the bridge alone: the producer on A and the consumer on B stay
connected to their brokers. A persistent producer on A sends while the bridge is up, keeps sending
through the cut, and stops after the heal; the connector reconnects with the static: transport's
reconnect options (page, "Static discovery").

What is checked (page, "Reliability"): every message whose send A confirmed (a STOMP receipt)
reaches B's consumer - none lost - and none arrives twice (the page promises durability across
the network and says nothing that would permit a bridge to deliver a message twice; duplicates
are counted and named in the failure). What is *not* checked (page, "Ordering"): the order in
which they arrive; a network does not keep total order.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from conformance.clients import connect
from conformance.topology import Bridge, NetworkConnectorOptions, Topology
from suites.network_support import (DEMAND_TIMEOUT, FAST_RECONNECT, launch_network, network_target,
                                                network_suite_marks, network_workdir, parametrize_by_target)
from chaos.nemesis.proxy import ProxyNemesis
from machinery.faultproxy import start_fault_proxy
from chaos.topology import BridgeProxies

#: messages sent in all: a third before the cut, a third during it, a third after the heal
MESSAGES = 300
#: how long the healed bridge may take to re-form and deliver the backlog (reconnect delay, JVM
#: bridge start, advisories; generous on a loaded 2-core machine)
DELIVERY_TIMEOUT = 60.0
#: after everything arrived, how long to keep listening for duplicates
QUIET = 2.0

pytestmark = network_suite_marks()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


# --------------------------------------------------------------------------- the network


def _bridges():
    return (Bridge("A", "B", NetworkConnectorOptions(**FAST_RECONNECT)),)


def establishments(net) -> int:
    """How many times A's bridge to B (the network's one bridge) has been established so far (each
    reconnect counts)."""
    return net.bridge_establishments()


@pytest.fixture(scope="module")
def cut_network(target_name, request, tmp_path_factory):
    """(network, proxy nemesis, proxy name): A -> B with the bridge's link through a fault proxy."""
    network_target(request, target_name)  # not applicable: skip before the proxy starts
    proxy = start_fault_proxy()
    try:
        route = BridgeProxies(proxy.api_url)
        workdir = network_workdir(tmp_path_factory, f"{target_name}-nob-saf")
        network = launch_network(request, target_name, workdir,
                                 Topology(("A", "B"), _bridges(), proxied=("bridges",), prefix="nob-saf"),
                                 bridge_route=route)
        try:
            nemesis = ProxyNemesis(proxy.api_url)
            yield network, nemesis, route.name_of("A", "B")
            nemesis.teardown()  # heals whatever a failed test left cut
        finally:
            network.stop()
    finally:
        proxy.stop()


class Producer(threading.Thread):
    """Sends ``count`` persistent messages to ``destination`` on A, one at a time, each confirmed
    by a receipt before the next; records which were confirmed."""

    def __init__(self, client, destination: str, count: int, tag: str) -> None:
        super().__init__(name="saf-producer", daemon=True)
        self.client, self.destination, self.count, self.tag = client, destination, count, tag
        self.confirmed: list[str] = []
        self.unconfirmed: list[tuple[str, str]] = []  # (body, error): outcome unknown
        self.pause = threading.Event()
        self.pause.set()

    def run(self) -> None:
        for i in range(self.count):
            body = f"{self.tag}-{i}"
            try:
                self.client.send(self.destination, body, persistent=True)
            except Exception as exc:  # noqa: BLE001 - the producer's own link is never cut; reported below
                self.unconfirmed.append((body, f"{type(exc).__name__}: {exc}"))
            else:
                self.confirmed.append(body)
            time.sleep(0.005)  # a steady stream, so the cut lands while messages are in flight


def wait_until(condition, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True


@pytest.mark.spec("NOB-RELIABLE-1", "NOB-STATIC-2")  # NOB-ORDER-1: order deliberately not checked
def test_persistent_messages_survive_a_cut_bridge(cut_network):
    net, nemesis, proxy_name = cut_network
    a, b = net["A"], net["B"]
    destination = f"queue://nob.saf.{uuid.uuid4().hex[:8]}"
    consumer_client = connect(*b.address("stomp"), "stomp")
    producer_client = connect(*a.address("stomp"), "stomp")
    try:
        subscription = consumer_client.subscribe(destination)
        seen = a.wait_for_consumers(destination, 1, DEMAND_TIMEOUT)
        assert seen == 1, f"setup: B's consumer should reach A as demand over the bridge; A counts {seen} consumers"
        before = establishments(net)
        received: list[str] = []
        producer = Producer(producer_client, destination, MESSAGES, uuid.uuid4().hex[:6])
        producer.start()

        # Cut the bridge once a third is confirmed (messages are crossing it now)...
        assert wait_until(lambda: len(producer.confirmed) >= MESSAGES // 3, DELIVERY_TIMEOUT), (
            f"setup: the producer on A confirmed only {len(producer.confirmed)} sends")
        nemesis.invoke("partition", proxy=proxy_name, direction="both")
        # ...keep sending through the cut: those can only wait on A...
        assert wait_until(lambda: len(producer.confirmed) >= 2 * MESSAGES // 3, DELIVERY_TIMEOUT), (
            f"setup: sends on A stalled during the bridge cut ({len(producer.confirmed)} confirmed): the cut "
            "should not touch the producer's own connection")
        received += [m.text for m in subscription.drain(0.5)]
        held_on_a = a.queue_size(destination)
        # ...and heal; the connector reconnects by itself (page, "Static discovery").
        nemesis.invoke("heal", proxy=proxy_name)
        producer.join(DELIVERY_TIMEOUT)
        assert not producer.is_alive(), "setup: the producer on A did not finish its sends"
        assert held_on_a > 0, ("setup: nothing was held on A during the cut, so the cut did not separate the "
                               f"brokers (proxy {proxy_name}); the test would prove nothing")

        confirmed = set(producer.confirmed)
        deadline = time.monotonic() + DELIVERY_TIMEOUT
        while not confirmed <= set(received) and time.monotonic() < deadline:
            message = subscription.receive(0.5)
            if message is not None:
                received.append(message.text)
        received += [m.text for m in subscription.drain(QUIET)]  # anything arriving twice, late
        reconnected = establishments(net) - before

        missing = sorted(confirmed - set(received), key=lambda body: int(body.rpartition("-")[2]))
        duplicates = {body: n for body, n in Counter(received).items() if n > 1}
        context = (f"{len(confirmed)} sends confirmed on A ({len(producer.unconfirmed)} unconfirmed: "
                   f"{producer.unconfirmed[:3]}), {len(received)} deliveries on B, {held_on_a} held on A during the "
                   f"cut, bridge re-established {reconnected} time(s), A still holds {a.queue_size(destination)}, "
                   f"B holds {b.queue_size(destination)}")
        assert reconnected >= 1, f"NOB-STATIC-2: the cut bridge never re-established after the heal; {context}"
        assert not missing, (f"NOB-RELIABLE-1: {len(missing)} persistent messages confirmed on A never reached B "
                             f"across the cut and healed bridge (first: {missing[:10]}); {context}")
        assert not duplicates, (f"NOB-RELIABLE-1: {len(duplicates)} messages reached B's consumer more than once "
                                f"across the cut bridge (e.g. {dict(list(duplicates.items())[:10])}); {context}")
        unexpected = set(received) - confirmed - {body for body, _ in producer.unconfirmed}
        assert not unexpected, f"messages B delivered that A never sent: {sorted(unexpected)[:10]}; {context}"
        # NOB-ORDER-1: the order of `received` is deliberately not compared with the sending order.
    finally:
        for client in (producer_client, consumer_client):
            try:
                client.close()
            except Exception:  # noqa: BLE001 - a broken connection must not hide the test's outcome
                pass
