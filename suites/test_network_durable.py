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

NOB-DURNAME-1 (the N.B. on names under "Example Configuration using NetworkConnector properties"):
the networked durable subscription on the producer's broker is named from the connector and broker
names (5.17.2, JMX: subscription ``NC-DS_<broker>_<topic>`` under client id
``<connector>_<peer>_inbound_<broker>``), so messages kept in it while the bridge is down reach the
remote durable subscriber after a restart with the same names, and are stranded after a restart
with the connector renamed. NOB-SUPPRESS-1 (table row suppressDuplicateQueueSubscriptions) is
checked on a full mesh of three brokers by counting network consumers, as the row describes it.

Not covered here: NOB-TEMP-1 (the reference broker has no temporary destinations on STOMP, so it
is not applicable).
"""

from __future__ import annotations

import itertools
import time
import uuid

import pytest

from conformance.clients import connect
from conformance.deployment import Renaming, require
from suites.network_support import (DEMAND_TIMEOUT, FAST_RECONNECT, launch_network,
                                                network_suite_marks, network_workdir, parametrize_by_target)
from conformance.topology import Bridge, Topology
from conformance.topology import NetworkConnectorOptions as Options

#: after publishing on A, how long A's bridge gets to forward before A is stopped (local brokers
#: forward within milliseconds; generous on a loaded 2-core machine). The default-mode half of the
#: test is the positive control that this window suffices.
FORWARD_WINDOW = 3.0
QUIET = 2.0
MESSAGES = 3

pytestmark = network_suite_marks()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # per test (no module scope): every test here restarts brokers on a network of its own
    parametrize_by_target(metafunc, scope=None)


def _bridges():
    """A -> B twice: connector "nodyn" (dynamicOnly false, the default) for topics nob.nodyn.>,
    connector "dyn" (dynamicOnly true) for nob.dyn.>."""
    # "nodyn" leaves dynamicOnly unset: the broker's own default is what NOB-DYNONLY-1 describes
    return tuple(Bridge("A", "B", Options(name=mode, **({"dynamic_only": True} if mode == "dyn" else {}),
                                          dynamically_included_destinations=(f"topic://nob.{mode}.>",),
                                          **FAST_RECONNECT))
                 for mode in ("nodyn", "dyn"))


def _launch(target_name, request, tmp_path_factory, names, bridges, prefix, stores=False):
    """A network of ``names`` joined by ``bridges`` on the target under test, started; persistent
    stores (KahaDB, the reference broker's journal) when ``stores``, so durable subscriptions
    survive a restart. Skips targets without a multi-broker launcher."""
    workdir = network_workdir(tmp_path_factory, f"{target_name}-{prefix}")
    return launch_network(request, target_name, workdir, Topology(names, bridges, prefix=prefix, persistent=stores))


def _running(*launch_args, **launch_kwargs):
    """A fixture's body: the network `_launch` starts, stopped when the test is done."""
    network = _launch(*launch_args, **launch_kwargs)
    try:
        yield network
    finally:
        network.stop()


@pytest.fixture
def durable_network(target_name, request, tmp_path_factory):
    yield from _running(target_name, request, tmp_path_factory, ("A", "B"), _bridges(), "nob-dur", stores=True)


def _leave_durable_subscribers_offline(a, b, topics: dict, client_ids: dict) -> None:
    """Per connector ``mode``: a durable subscriber of ``topics[mode]`` on B (client id
    ``client_ids[mode]``) whose demand reaches A over that connector, then closed, so the durable
    subscription stays on B with its subscriber offline."""
    for mode, topic in topics.items():
        subscriber = connect(*b.address("stomp"), "stomp", client_id=client_ids[mode])
        try:
            subscriber.subscribe(topic, durable_name="sub")
            seen = a.wait_for_consumers(topic, 1, DEMAND_TIMEOUT)
            assert seen == 1, (f"setup: B's durable subscriber of {topic} should reach A as demand over connector "
                               f"{mode!r}; A counts {seen} consumers")
        finally:
            subscriber.close()  # offline: the durable subscription stays on B


def _publish_on(a, topics: dict) -> None:
    """MESSAGES persistent messages ``{mode}-{i}`` to each of ``topics`` on broker ``a``."""
    producer = connect(*a.address("stomp"), "stomp")
    try:
        for mode, topic in topics.items():
            for i in range(MESSAGES):
                producer.send(topic, f"{mode}-{i}", persistent=True)
    finally:
        producer.close()


def _name_bridges():
    """A -> B twice, both with dynamicOnly false (the default): connector "kept" for topics
    nob.dn.kept.>, connector "renamed" for nob.dn.renamed.> (the test renames it to "renamed2")."""
    return tuple(Bridge("A", "B", Options(name=mode, dynamically_included_destinations=(f"topic://nob.dn.{mode}.>",),
                                          **FAST_RECONNECT))
                 for mode in ("kept", "renamed"))


@pytest.fixture
def named_network(target_name, request, tmp_path_factory):
    yield from _running(target_name, request, tmp_path_factory, ("A", "B"), _name_bridges(), "nob-dn", stores=True)


@pytest.mark.spec("NOB-DURNAME-1")
def test_networked_durable_subscription_needs_its_connector_name(named_network):
    """Durable subscribers on B (one per connector's topic) go offline; B stops; messages are
    published on A, where they wait in A's networked durable subscriptions; A stops; B starts;
    A starts again with connector "renamed" now named "renamed2"; the subscribers come back.
    Measured on ActiveMQ 5.17.2 (throwaway script, JMX consumer MBeans of A): the kept connector
    re-activates its subscription (client id ``kept_<B>_inbound_<A>``) and B's subscriber gets
    the 3 messages; the renamed connector leaves ``renamed_<B>_inbound_<A>`` inactive with the 3
    messages pending, and only subscribes anew (client id ``renamed2_...``) when the subscriber
    returns, so that subscriber gets only what is published afterwards."""
    net = named_network
    a, b = net["A"], net["B"]
    suffix = uuid.uuid4().hex[:8]
    topics = {mode: f"topic://nob.dn.{mode}.{suffix}" for mode in ("kept", "renamed")}
    client_ids = {mode: f"nob-dn-{mode}-{suffix}" for mode in topics}
    _leave_durable_subscribers_offline(a, b, topics, client_ids)

    net.stop_broker("B")  # the bridges go down: what A gets now waits in its network subscriptions
    _publish_on(a, topics)
    net.stop_broker("A")
    require(net, Renaming, 'rename connector "renamed" (NOB-DURNAME-1)').rename_connector("A", "renamed", "renamed2")
    net.start_broker("B")
    net.start_broker("A")
    time.sleep(FORWARD_WINDOW)  # the kept connector's re-activated subscription forwards its backlog

    kept_back, later = {}, {}
    for mode, topic in topics.items():
        before = a.consumer_count(topic)
        subscriber = connect(*b.address("stomp"), "stomp", client_id=client_ids[mode])
        try:
            subscription = subscriber.subscribe(topic, durable_name="sub")
            kept_back[mode] = sorted(m.text for m in subscription.drain(QUIET))
            if mode == "renamed":
                # The returning subscriber's demand makes connector "renamed2" subscribe anew beside
                # the stranded subscription (5.17.2: 1 consumer of the topic on A before, 2 after).
                # Only a wait: a broker that kept the old name would re-use the old subscription,
                # and the assertions below say which happened.
                a.wait_for_consumers(topic, before + 1, DEMAND_TIMEOUT)
            producer = connect(*a.address("stomp"), "stomp")
            try:
                producer.send(topic, f"{mode}-after", persistent=True)
            finally:
                producer.close()
            later[mode] = [m.text for m in subscription.drain(QUIET)]
        finally:
            subscriber.close()
    assert later == {"kept": ["kept-after"], "renamed": ["renamed-after"]}, (
        f"control: with B's subscribers back, a message published on A should reach each once; got {later}")
    assert kept_back["kept"] == [f"kept-{i}" for i in range(MESSAGES)], (
        f"NOB-DURNAME-1: with connector and broker names unchanged, the restarted bridge finds its networked "
        f"durable subscription again, so the {MESSAGES} messages kept in it while B was down should reach B's "
        f"durable subscriber; it got {kept_back['kept']}")
    assert kept_back["renamed"] == [], (
        f"NOB-DURNAME-1: the networked durable subscription is named from the connector name, so after renaming "
        f"the connector the messages kept under the old name stay stranded on A; B's subscriber got "
        f"{kept_back['renamed']}")


def _mesh_bridges():
    """A full mesh of one-way connectors between A, B and C (every ordered pair), network TTL 3 so
    demand reaches every broker; per pair one connector without suppression (queues
    nob.sup.off.>) and one with suppressDuplicateQueueSubscriptions (nob.sup.on.>)."""
    # "off" leaves the option unset: NOB-SUPPRESS-1's "off by default" is the broker's own default
    return tuple(Bridge(source, target, Options(name=f"{mode}-{target}", network_ttl=3,
                                                **({"suppress_duplicate_queue_subscriptions": True}
                                                   if mode == "on" else {}),
                                                dynamically_included_destinations=(f"queue://nob.sup.{mode}.>",),
                                                **FAST_RECONNECT))
                 for source, target in itertools.permutations(("A", "B", "C"), 2) for mode in ("off", "on"))


@pytest.fixture
def mesh_network(target_name, request, tmp_path_factory):
    yield from _running(target_name, request, tmp_path_factory, ("A", "B", "C"), _mesh_bridges(), "nob-sup")


@pytest.mark.spec("NOB-SUPPRESS-1")
def test_duplicate_queue_subscriptions_are_suppressed_in_a_mesh(mesh_network):
    """A queue consumer on C, per connector set. Measured on ActiveMQ 5.17.2 (JMX consumer MBeans):
    without suppression A has two network consumers of the queue, its connector to C's (priority
    -5) and its connector to B's (-8, B's own network consumer towards C), and B likewise; with
    suppression A and B each keep only their direct one to C."""
    net = mesh_network
    suffix = uuid.uuid4().hex[:8]
    queues = {mode: f"queue://nob.sup.{mode}.{suffix}" for mode in ("off", "on")}
    c = net["C"]
    consumer = connect(*c.address("stomp"), "stomp")
    try:
        subscriptions = {mode: consumer.subscribe(queue) for mode, queue in queues.items()}
        # The duplicate routes of the "off" set show the demand has travelled the whole mesh; the
        # "on" set's announcements take the same paths at the same time.
        for name in ("A", "B"):
            seen = net[name].wait_for_consumers(queues["off"], 2, DEMAND_TIMEOUT)
            assert seen == 2, (
                f"NOB-SUPPRESS-1: without suppression (the default) broker {name} of the full mesh (network TTL 3) "
                f"should have two network consumers of {queues['off']}, direct to C and through the third "
                f"broker; it has {seen}")
        time.sleep(QUIET)
        counts = {name: net[name].consumer_count(queues["on"]) for name in ("A", "B")}
        assert counts == {"A": 1, "B": 1}, (
            f"NOB-SUPPRESS-1: with suppressDuplicateQueueSubscriptions the network subscription that repeats, "
            f"through an intermediary, the one towards C should not exist: A and B should each have one consumer "
            f"of {queues['on']}; they have {counts}")
        producer = connect(*net["A"].address("stomp"), "stomp")
        try:
            for mode, queue in queues.items():
                for i in range(MESSAGES):
                    producer.send(queue, f"{mode}-{i}", persistent=True)
        finally:
            producer.close()
        received = {mode: sorted(m.text for m in subscription.drain(QUIET))
                    for mode, subscription in subscriptions.items()}
    finally:
        consumer.close()
    assert received == {mode: [f"{mode}-{i}" for i in range(MESSAGES)] for mode in queues}, (
        f"NOB-SUPPRESS-1: the route left after suppression still delivers: every message produced on A should "
        f"reach C's consumer once; got {received}")


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
    _leave_durable_subscribers_offline(a, b, topics, client_ids)

    net.restart("A")
    _publish_on(a, topics)
    time.sleep(FORWARD_WINDOW)
    net["A"].stop()  # from now on only what reached B can be delivered

    received = {}
    for mode, topic in topics.items():
        subscriber = connect(*b.address("stomp"), "stomp", client_id=client_ids[mode])
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
