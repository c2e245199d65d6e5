"""Durable topic subscriptions across a network of brokers, against ActiveMQ Classic's "Networks of
Brokers" page (../shared/spec/activemq-classic-networks-of-brokers.md; catalogue
conformance/spec/networks.toml).

A durable subscriber on broker B, remote from the producer's broker A (A -> B), makes A's bridge
keep a *durable* network subscription of the topic on A. The page's dynamicOnly row says when such
a networked durable subscription is active: by default from start-up on, with dynamicOnly only
once the matching durable subscriber comes back.

What 5.17 shows (measured with the launcher, STOMP clients, JMX counters; see the test docstring):
the network subscription stays active while the bridge is up, even with its subscriber offline,
so there is nothing to re-activate until the bridge itself stops. A bridge cut and healed through
a fault proxy does *not* re-activate it with either setting (ActiveMQ collects the topics to
re-activate from its store when the broker starts, DurableConduitBridge), so "start-up" is the
broker's: the test restarts broker A on a persistent store. Stores are persistent on both targets
(KahaDB; the reference broker's journal) so durable subscriptions survive that restart.

Not covered here: NOB-DURNAME-1 (renaming a connector between restarts), NOB-SUPPRESS-1, and
NOB-TEMP-1 (the reference broker has no temporary destinations on STOMP, so it is not applicable).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from conformance.clients import connect
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.targets.base import CAPABILITIES

NETWORK_CAPABILITY = "network_of_brokers"
DEMAND_TIMEOUT = 15.0
#: after publishing on A, how long A's bridge gets to forward before A is stopped (local brokers
#: forward within milliseconds; generous on a loaded 2-core machine). The default-mode half of the
#: test is the positive control that this window suffices.
FORWARD_WINDOW = 3.0
QUIET = 2.0
MESSAGES = 3
RECONNECT = dict(initial_reconnect_delay=500, max_reconnect_delay=1000, use_exponential_back_off=False)

pytestmark = [pytest.mark.slow]
if NETWORK_CAPABILITY in CAPABILITIES:
    pytestmark.append(pytest.mark.requires(NETWORK_CAPABILITY))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One run per selected target (as conformance/suites/test_networks.py)."""
    if "target_name" in metafunc.fixturenames:
        names = list(dict.fromkeys(metafunc.config.stash[STATE].target_names))
        metafunc.parametrize("target_name", names, ids=names)


def _bridges():
    """A -> B twice: connector "nodyn" (dynamicOnly false, the default) for topics nob.nodyn.>,
    connector "dyn" (dynamicOnly true) for nob.dyn.>."""
    from conformance.targets.activemq_network import Bridge, NetworkConnectorOptions as Options
    return tuple(Bridge("A", "B", Options(name=mode, dynamic_only=mode == "dyn",
                                          dynamically_included_destinations=(f"topic://nob.{mode}.>",), **RECONNECT))
                 for mode in ("nodyn", "dyn"))


def _launch_activemq(workdir):
    from conformance.targets.activemq_network import ActiveMQNetwork
    net = ActiveMQNetwork(workdir, ("A", "B"), _bridges(), prefix="nob-dur")
    for node in net.nodes.values():
        node.process.persistent = True  # KahaDB: durable subscriptions survive a restart
    return net


def _launch_reference(workdir):
    from conformance.targets.reference_network import ReferenceNetwork
    net = ReferenceNetwork(workdir, ("A", "B"), _bridges(), prefix="nob-dur")
    net.use_journal_stores(workdir / "stores")
    return net


LAUNCHERS = {"activemq": _launch_activemq, "reference": _launch_reference}


@pytest.fixture
def durable_network(target_name, request, tmp_path_factory):
    target = request.config.stash[STATE].targets.get(target_name)
    kind = getattr(target, "kind", "unknown")
    if kind not in LAUNCHERS:
        pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {NETWORK_CAPABILITY} (no multi-broker launcher for "
                    f"{kind} targets)")
    workdir = tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9_.-]", "_", f"{target_name}-nob-dur"))
    network = LAUNCHERS[kind](workdir)
    network.start()
    try:
        yield network
    finally:
        network.stop()


@pytest.mark.spec("NOB-DYNONLY-1")
def test_networked_durable_subscription_activation_at_startup(durable_network):
    """A durable subscriber on B for each connector's topic, then offline; broker A (owner of the
    connectors) restarts; messages published on A after the restart; A stopped; the subscribers
    come back on B. Measured on ActiveMQ 5.17.2: with dynamicOnly false B's subscriber gets the 3
    messages (A re-activated the network durable subscription as its bridge started and
    forwarded them), with dynamicOnly true none (they wait on A, in the inactive network
    subscription, until the subscriber's return would re-activate it)."""
    net = durable_network
    a, b = net["A"], net["B"]
    suffix = uuid.uuid4().hex[:8]
    topics = {mode: f"topic://nob.{mode}.{suffix}" for mode in ("nodyn", "dyn")}
    client_ids = {mode: f"nob-dur-{mode}-{suffix}" for mode in topics}
    for mode, topic in topics.items():
        subscriber = connect(b.host, b.stomp_port, "stomp", client_id=client_ids[mode])
        try:
            subscriber.subscribe(topic, durable_name="sub")
            seen = a.wait_for_consumers(topic, 1, DEMAND_TIMEOUT)
            assert seen == 1, (f"setup: B's durable subscriber of {topic} should reach A as demand over connector "
                               f"{mode!r}; A counts {seen} consumers")
        finally:
            subscriber.close()  # offline: the durable subscription stays on B

    net.restart("A")
    producer = connect(a.host, a.stomp_port, "stomp")
    try:
        for mode, topic in topics.items():
            for i in range(MESSAGES):
                producer.send(topic, f"{mode}-{i}", persistent=True)
    finally:
        producer.close()
    time.sleep(FORWARD_WINDOW)
    net["A"].stop()  # from now on only what reached B can be delivered

    received = {}
    for mode, topic in topics.items():
        subscriber = connect(b.host, b.stomp_port, "stomp", client_id=client_ids[mode])
        try:
            subscription = subscriber.subscribe(topic, durable_name="sub")
            received[mode] = sorted(m.text for m in subscription.drain(QUIET))
        finally:
            subscriber.close()
    assert received["nodyn"] == [f"nodyn-{i}" for i in range(MESSAGES)], (
        f"NOB-DYNONLY-1: with dynamicOnly false (the default) the networked durable subscription is active from "
        f"broker start-up, so the {MESSAGES} messages published on A after its restart should have been forwarded "
        f"and kept on B for the offline durable subscriber; it got {received['nodyn']}")
    assert received["dyn"] == [], (
        f"NOB-DYNONLY-1: with dynamicOnly true the networked durable subscription stays inactive until its "
        f"subscriber returns, so nothing published on A after the restart should have reached B; the subscriber "
        f"got {received['dyn']}")
