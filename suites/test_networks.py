"""Networks of brokers, against ActiveMQ Classic's "Networks of Brokers" page
(../shared/spec/activemq-classic-networks-of-brokers.md; catalogue conformance/spec/networks.toml).

Each test gets a small network of one target's brokers (2 or 3, joined by static: network
connectors) and checks through STOMP clients on the different brokers where messages go. The
networks are module-scoped and shared by the tests that need the same configuration (tests are
grouped by network below, so at most one network runs at a time); each test uses destination
names of its own (a random suffix), and connectors restricted to disjoint destination patterns let
one pair of brokers carry several configurations (the document allows several named connectors
between the same two brokers).

Demand crosses a bridge asynchronously (an advisory message), so before producing a test waits
until the forwarding broker counts the expected consumers (destination MBean ConsumerCount,
network consumers included). Where the check is that nothing arrives, the test first waits for a
positive sign that the network had the chance (the demand reached the last broker it may reach),
then gives the messages a quiet window and checks that they are still held where they were sent.

Targets: ActiveMQ Classic (``conformance.targets.activemq.network``) and the reference broker
(``conformance.targets.reference.network``, bridges from ``reference_broker/cluster/``). A target
without a network launcher is reported not applicable with the reason.
"""

from __future__ import annotations

import time
import uuid

import pytest

from suites.network_support import (DEMAND_TIMEOUT, OneNetworkAtATime, StompClients, demand,
                                                launch_network, network_suite_marks, network_target,
                                                network_workdir, parametrize_by_target, queue, send)
from conformance.topology import Bridge, BridgeFilterPolicy, CompositeDestination, Topology
from conformance.topology import NetworkConnectorOptions as Options

#: excluded on the duplex network's one connector (A's): the reverse half must exclude it as well
DUPLEX_EXCLUDED = "queue://nob.duplex.excl.>"
#: quiet window after which a subscriber concludes nothing more is coming (local brokers forward
#: within milliseconds once demand is there; generous on a loaded 2-core machine)
QUIET = 1.5
#: NOB-ADV-1 ("Networks of brokers and advisories"): a connector learns of remote consumers from
#: the remote broker's consumer advisory topics (ActiveMQ.Advisory.Consumer.<Queue|Topic>.<name>);
#: without dynamic includes it subscribes to all of them
CONSUMER_ADVISORY_PREFIX = "ActiveMQ.Advisory.Consumer."
ALL_CONSUMER_ADVISORIES = CONSUMER_ADVISORY_PREFIX + ">"
#: NOB-PRIO-1 ("NetworkConnector Properties", decreaseNetworkConsumerPriority): network consumers
#: start at priority -5, the first hop away
DOCUMENTED_ONE_HOP_PRIORITY = -5

pytestmark = network_suite_marks()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def consumer_advisory_subscriptions(node) -> list[str]:
    """The consumer-advisory topics subscribed to on ``node`` (network connectors' demand
    subscriptions; a composite subscription counted once per part), from its consumer MBeans."""
    parts = [part for name in node.subscribed_destinations() for part in name.split(",")]
    return sorted(part for part in parts if part.startswith(CONSUMER_ADVISORY_PREFIX))


# --------------------------------------------------------------------------- networks


def _activemq_networks():
    equal_priority = dict(decrease_network_consumer_priority=False)  # the conduit example's premise
    return {
        # A -> B with the broker's defaults (no other option written), one excluded pattern and one
        # statically included queue that the exclusion also matches; decreaseNetworkConsumerPriority
        # is written out as the table's true: NOB-PRIO-1 is about the option on, and 5.17's own
        # default is false (the table: true from 5.18)
        "default": (("A", "B"), (Bridge("A", "B", Options(
            decrease_network_consumer_priority=True,
            excluded_destinations=("queue://nob.excluded.>",),
            statically_included_destinations=("queue://nob.excluded.always",))),)),
        # A -> B twice: conduit subscriptions left at the broker's default (on, NOB-CONDUIT-1) for
        # nob.conduit.on.>, off for nob.conduit.off.>.
        "conduit": (("A", "B"), (
            Bridge("A", "B", Options(name="conduit",
                                     dynamically_included_destinations=("queue://nob.conduit.on.>",),
                                     **equal_priority)),
            Bridge("A", "B", Options(name="noconduit", conduit_subscriptions=False,
                                     dynamically_included_destinations=("queue://nob.conduit.off.>",),
                                     **equal_priority)))),
        # A <-> B, with replay when no consumers for the queues nob.replay.> on both brokers, and
        # one excluded pattern configured on A's connector only: the duplex configuration is sent
        # to B, so B's half must exclude it too (NOB-DUPLEX-2).
        "duplex": (("A", "B"), (Bridge("A", "B", Options(duplex=True, excluded_destinations=(DUPLEX_EXCLUDED,))),),
                   (BridgeFilterPolicy("nob.replay.>", replay_when_no_consumers=True),)),
        # A -> B -> C with, on both hops: TTL left at the broker's default (1, NOB-TTL-1) for
        # nob.ttl1.> and TTL 2 for nob.ttl2.>; message TTL 2 with the consumer TTL left at its
        # default (1, NOB-TTL-3) for nob.mttl.>, consumer TTL 2 with the message TTL left at its
        # default (1, NOB-TTL-2) for nob.cttl.>. Plus A -> B and A -> C with conduit subscriptions on for nob.sel.on.> and off
        # for nob.sel.off.> (the selector pitfall: one producing broker, two receiving ones).
        "line": (("A", "B", "C"), tuple(
            Bridge(src, dst, Options(name=f"ttl{ttl}", **({} if ttl == 1 else {"network_ttl": ttl}),
                                     dynamically_included_destinations=(f"queue://nob.ttl{ttl}.>",)))
            for src, dst in (("A", "B"), ("B", "C")) for ttl in (1, 2)) + tuple(
            Bridge(src, dst, Options(name=name, **ttl,
                                     dynamically_included_destinations=(f"queue://nob.{name}.>",)))
            for src, dst in (("A", "B"), ("B", "C"))
            for name, ttl in (("mttl", {"message_ttl": 2}), ("cttl", {"consumer_ttl": 2}))) + tuple(
            # (a connector's name is a Spring bean name in activemq.xml: unique on its broker)
            Bridge("A", dst, Options(name=f"sel{mode}{dst}", conduit_subscriptions=mode == "on",
                                     dynamically_included_destinations=(f"queue://nob.sel.{mode}.>",)))
            for dst in ("B", "C") for mode in ("on", "off"))),
        "static": (("A", "B"), (Bridge("A", "B", Options(
            static_bridge=True, statically_included_destinations=("queue://nob.static.always",))),)),
    }


def _virtual_networks():
    """Networks for "Dynamic networks and Virtual Destinations", and the extra broker settings
    (``<broker>`` attributes, composite destinations) each launcher takes for them."""
    # The document's examples: the consuming broker has useVirtualDestSubs, the forwarding
    # broker's connector too, and dynamically includes the virtual topics / the composite topic.
    composites = tuple(CompositeDestination(f"nob.{kind}.bar", (f"queue://nob.{kind}.bar.forward",), forward_only=False)
                       for kind in ("vcomp", "vplain", "vcreate"))
    return {
        # A -> B: connector "vdest" with useVirtualDestSubs, connector "plain" without (the control);
        # A -> C: "oncreate", C also with useVirtualDestSubsOnCreation.
        "virtual": (("A", "B", "C"), (
            Bridge("A", "B", Options(name="vdest", use_virtual_dest_subs=True, dynamically_included_destinations=(
                "topic://VirtualTopic.>", "topic://nob.vcomp.bar"))),
            Bridge("A", "B", Options(name="plain", dynamically_included_destinations=("topic://nob.vplain.bar",))),
            Bridge("A", "C", Options(name="oncreate", use_virtual_dest_subs=True,
                                     dynamically_included_destinations=("topic://nob.vcreate.bar",)))),
            dict(composites=composites, broker_attributes={
                "B": {"useVirtualDestSubs": "true"},
                "C": {"useVirtualDestSubs": "true", "useVirtualDestSubsOnCreation": "true"}})),
        # A, B, C fully meshed (a connector each way between every pair) twice: networkTTL 1 for
        # topics nob.mesh1.>, networkTTL 3 for nob.mesh3.>. decreaseNetworkConsumerPriority on, as
        # the launcher used to write it for every connector (the expected counts assume it: with
        # ActiveMQ's own default, off, B counted one network subscription fewer with TTL 3)
        "mesh": (("A", "B", "C"), tuple(
            Bridge(src, dst, Options(name=f"mesh{ttl}{dst}", network_ttl=ttl, decrease_network_consumer_priority=True,
                                     dynamically_included_destinations=(f"topic://nob.mesh{ttl}.>",)))
            for ttl in (1, 3) for src in "ABC" for dst in "ABC" if src != dst), {}),
    }


def _network_model(key: str):
    """(names, bridges, launcher keyword arguments) of network ``key``."""
    if key in (virtual := _virtual_networks()):
        names, bridges, extra = virtual[key]
        return names, bridges, extra
    names, bridges, *policies = _activemq_networks()[key]
    return names, bridges, {"policies": policies[0] if policies else ()}


def _launch(request, target_name: str, key: str, workdir):
    """Network ``key``, started by the target under test from the one model (`_activemq_networks`,
    `_virtual_networks`) through the topology contract; the reference broker's are in-process."""
    names, bridges, extra = _network_model(key)
    return launch_network(request, target_name, workdir, Topology(names, bridges, prefix=f"nob-{key}", **extra))


@pytest.fixture(scope="module")
def networks(target_name, request, tmp_path_factory):
    """``networks(key)`` -> the started network ``key`` of the current target; starting another
    key stops the previous one (tests are grouped by network, so each starts once). Targets
    without a multi-broker launcher are not applicable."""
    running = OneNetworkAtATime()

    def get(key: str):
        network_target(request, target_name)  # not applicable: skip before anything starts
        return running.get(key, lambda: _launch(request, target_name, key,
                                                network_workdir(tmp_path_factory, f"{target_name}-nob-{key}")))

    yield get
    running.stop()


@pytest.fixture
def net(networks, request):
    """The network named by the test's ``@pytest.mark.network(key)``, started at set-up: a network
    that cannot start is an error of the test's set-up, never a failure of the check (nor a known
    deviation's expected failure)."""
    marker = request.node.get_closest_marker("network")
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: uses `net` without @pytest.mark.network(key)")
    return networks(marker.args[0])


@pytest.fixture
def clients():
    """STOMP clients on the network's brokers (``clients.on(node)``), closed when the test ends."""
    with StompClients() as made:
        yield made


def texts(messages) -> list[str]:
    return [m.text for m in messages]


def held(node, destination: str, expected: int, timeout: float = DEMAND_TIMEOUT) -> int:
    """Poll until ``node`` holds ``expected`` messages of ``destination`` (forwarding is
    asynchronous); returns the last size seen, for the caller's assertion."""
    deadline = time.monotonic() + timeout
    while (size := node.queue_size(destination)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return size


# --------------------------------------------------------------------------- network "default": A -> B


@pytest.mark.spec("NOB-DIR-1", "NOB-STATIC-1")
@pytest.mark.network("default")
def test_bridge_is_one_way_by_default(net, clients):
    a, b = net["A"], net["B"]
    # A's connector forwards to B on B's demand...
    forward = queue("nob.oneway.fwd")
    on_b = clients.on(b).subscribe(forward)
    demand(a, forward, 1)
    sent = send(clients.on(a), forward, 5)
    assert sorted(texts(on_b.drain(QUIET))) == sorted(sent), "NOB-DIR-1: A's bridge should forward to B's consumer"
    # ...but nothing flows back: B has no connector to A, so A's consumer creates no demand on B.
    backward = queue("nob.oneway.back")
    on_a = clients.on(a).subscribe(backward)
    demand(a, backward, 1)  # A's own consumer only: setup, not a sign that demand could cross
    # Positive sign that the bridge's advisory traffic had its chance: a consumer on B subscribed
    # after A's became demand on A, so if A's consumer were announced to B it would be by now.
    witness = queue("nob.oneway.witness")
    clients.on(b).subscribe(witness)
    demand(a, witness, 1)
    assert b.consumer_count(backward) == 0, "NOB-DIR-1: A's consumer became a network consumer on B over a one-way A->B bridge"
    sent = send(clients.on(b), backward, 5)
    got = texts(on_a.drain(QUIET))
    assert got == [], f"NOB-DIR-1: messages produced on B reached A's consumer over a one-way A->B bridge: {got}"
    assert b.queue_size(backward) == len(sent), "NOB-DIR-1: B should still hold the messages produced on it"


@pytest.mark.spec("NOB-DEMAND-1")
@pytest.mark.network("default")
def test_no_forwarding_without_demand(net, clients):
    a, b = net["A"], net["B"]
    q = queue("nob.demand")
    sent = send(clients.on(a), q, 10)
    # Forwarding is asynchronous: a size read at once would be 0 even on a broker that forwards
    # without demand. Give A a quiet window to forward (polling B for the messages), then look.
    on_b_size = held(b, q, len(sent), timeout=QUIET)
    assert on_b_size == 0, f"NOB-DEMAND-1: A forwarded messages to B although B has no consumer: B holds {on_b_size}"
    assert a.queue_size(q) == 10, "NOB-DEMAND-1: with no consumer anywhere the messages should wait on A"
    # A consumer appears on B: the messages follow the demand.
    on_b = clients.on(b).subscribe(q)
    got = texts(on_b.receive_n(len(sent), DEMAND_TIMEOUT))
    assert sorted(got) == sorted(sent), f"NOB-DEMAND-1: B's new consumer should get A's waiting messages, got {got}"


@pytest.mark.spec("NOB-EXCL-1", "NOB-WILD-1")
@pytest.mark.network("default")
def test_excluded_destination_is_not_forwarded(net, clients):
    a, b = net["A"], net["B"]
    excluded, allowed = queue("nob.excluded.q"), queue("nob.allowed")
    on_b = clients.on(b).subscribe(excluded)
    on_b_allowed = clients.on(b).subscribe(allowed)
    demand(a, allowed, 1)  # demand from B has reached A for the destination that is not excluded
    assert a.consumer_count(excluded) == 0, "NOB-EXCL-1: B's consumer of an excluded queue became a network consumer on A"
    producer = clients.on(a)
    send(producer, excluded, 5)
    send(producer, allowed, 5)
    assert len(on_b_allowed.drain(QUIET)) == 5, "setup: the queue outside the exclusion should be forwarded"
    got = texts(on_b.drain(QUIET))
    assert got == [], f"NOB-EXCL-1: messages of an excluded queue (nob.excluded.>) were forwarded: {got}"
    assert a.queue_size(excluded) == 5, "NOB-EXCL-1: the excluded queue's messages should stay on A"


@pytest.mark.spec("NOB-EXCL-2")  # NOB-STATINC-1 alone: test_static_bridge_forwards_without_demand
@pytest.mark.network("default")
def test_static_inclusion_ignores_exclusion(net, clients):
    a, b = net["A"], net["B"]
    always = "queue://nob.excluded.always"  # statically included and matched by nob.excluded.>
    sent = send(clients.on(a), always, 5, tag=f"s{uuid.uuid4().hex[:6]}-")
    # No consumer anywhere: a statically included destination is forwarded regardless.
    on_b_size = held(b, always, 5)
    assert on_b_size == 5, (f"NOB-EXCL-2/NOB-STATINC-1: with no consumer anywhere B should hold the 5 messages "
                            f"of a statically included (and excluded) queue; B holds {on_b_size}, "
                            f"A {a.queue_size(always)}")
    on_b = clients.on(b).subscribe(always)
    got = texts(on_b.drain(QUIET))
    assert sorted(got) == sorted(sent), (f"NOB-EXCL-2/NOB-STATINC-1: a statically included queue that the exclusion "
                                         f"also matches should reach B; B got {got}, A holds {a.queue_size(always)}")


@pytest.mark.spec("NOB-PRIO-1")
@pytest.mark.network("default")
def test_decreased_priority_prefers_local_consumers(net, clients):
    # decreaseNetworkConsumerPriority written out as the table's true (network "default")
    a, b = net["A"], net["B"]
    q = queue("nob.prio")
    local = clients.on(a).subscribe(q)
    remote = clients.on(b).subscribe(q)
    demand(a, q, 2)
    # the number itself: A's local consumer keeps the default 0, B's network consumer on A (one
    # hop away) gets the table's starting priority, -5 (each consumer's own priority on A: its
    # consumer MBean's Priority on ActiveMQ)
    priorities = a.consumer_priorities(q)
    print(f"NOB-PRIO-1: priorities of A's consumers of {q}: {priorities}")
    sent = send(clients.on(a), q, 20)
    got_local, got_remote = texts(local.drain(QUIET)), texts(remote.drain(QUIET))
    assert (len(got_local), len(got_remote)) == (len(sent), 0), (
        f"NOB-PRIO-1: with decreased network consumer priority A's local consumer (free prefetch) should get every "
        f"message and B's none; got local {len(got_local)}, remote {len(got_remote)}")
    assert priorities == [DOCUMENTED_ONE_HOP_PRIORITY, 0], (
        f"NOB-PRIO-1: with decreaseNetworkConsumerPriority on, B's network consumer on A (one hop) should have "
        f"priority {DOCUMENTED_ONE_HOP_PRIORITY} and A's local consumer 0; A's consumers of {q} have {priorities}")


@pytest.mark.spec("NOB-ADV-1")
@pytest.mark.network("default")
def test_a_connector_without_dynamic_includes_subscribes_to_every_consumer_advisory(net):
    # A's connector (no dynamicallyIncludedDestinations) learns B's consumers from B's consumer
    # advisories, all of them: its subscription on B is the whole advisory tree
    advisories = consumer_advisory_subscriptions(net["B"])
    assert advisories == [ALL_CONSUMER_ADVISORIES], (
        f"NOB-ADV-1: A's connector has no dynamically included destinations, so it should subscribe on B to every "
        f"consumer advisory ({ALL_CONSUMER_ADVISORIES}); B's consumer-advisory subscriptions are {advisories}")


# --------------------------------------------------------------------------- network "conduit": A -> B twice


@pytest.mark.spec("NOB-CONDUIT-1", "NOB-NAME-1", "NOB-DYNINC-1")
@pytest.mark.parametrize("conduit", [True, False], ids=["conduit", "no-conduit"])
@pytest.mark.network("conduit")
def test_conduit_example(net, clients, conduit):
    a, b = net["A"], net["B"]
    q = queue("nob.conduit.on.Q.TEST" if conduit else "nob.conduit.off.Q.TEST")
    on_a = clients.on(a).subscribe(q)
    on_b = [clients.on(b).subscribe(q), clients.on(b).subscribe(q)]
    # Conduit: B's pair is one network consumer on A (2 in all); without: two (3 in all).
    demand(a, q, 2 if conduit else 3)
    send(clients.on(a), q, 30)
    counts = [len(on_a.drain(QUIET))] + [len(s.drain(QUIET)) for s in on_b]
    if conduit:
        assert (counts[0], counts[1] + counts[2]) == (15, 15), (
            f"NOB-CONDUIT-1: with conduit subscriptions A's consumer should get 15 of 30 and B's pair 15; "
            f"got A {counts[0]}, B {counts[1]} + {counts[2]}")
    else:
        assert counts == [10, 10, 10], (
            f"NOB-CONDUIT-1: without conduit subscriptions each of the three consumers should get 10; got {counts}")


@pytest.mark.spec("NOB-DYNINC-1", "NOB-WILD-1")
@pytest.mark.network("conduit")
def test_only_dynamically_included_destinations_follow_demand(net, clients):
    # both connectors have a dynamically included list
    a, b = net["A"], net["B"]
    included, other = queue("nob.conduit.on.inc"), queue("nob.not.included")
    on_b = clients.on(b).subscribe(included)
    on_b_other = clients.on(b).subscribe(other)
    demand(a, included, 1)
    assert a.consumer_count(other) == 0, "NOB-DYNINC-1: a queue outside every included list got a network consumer on A"
    producer = clients.on(a)
    send(producer, included, 5)
    send(producer, other, 5)
    assert len(on_b.drain(QUIET)) == 5, "NOB-DYNINC-1: a dynamically included queue should follow B's demand"
    got = texts(on_b_other.drain(QUIET))
    assert got == [], f"NOB-DYNINC-1: a queue matching no dynamically included pattern was forwarded: {got}"
    assert a.queue_size(other) == 5


@pytest.mark.spec("NOB-ADV-1")
@pytest.mark.network("conduit")
def test_dynamic_includes_narrow_the_consumer_advisory_subscription(net):
    # both of A's connectors include one queue pattern each (nob.conduit.on.> / .off.>): each
    # subscribes on B to the consumer advisories of its pattern only, none to the whole tree
    advisories = consumer_advisory_subscriptions(net["B"])
    narrowed = {f"{CONSUMER_ADVISORY_PREFIX}Queue.nob.conduit.{mode}.>" for mode in ("on", "off")}
    assert sorted(set(advisories)) == sorted(narrowed), (
        f"NOB-ADV-1: A's connectors dynamically include queue://nob.conduit.on.> and queue://nob.conduit.off.>, so "
        f"on B they should subscribe to those queues' consumer advisories only ({sorted(narrowed)}); B's "
        f"consumer-advisory subscriptions are {advisories}")


# --------------------------------------------------------------------------- network "duplex": A <-> B


@pytest.mark.spec("NOB-DIR-2", "NOB-DUPLEX-2")
@pytest.mark.network("duplex")
def test_duplex_bridge_carries_both_ways(net, clients):
    a, b = net["A"], net["B"]
    for producer_node, consumer_node in ((a, b), (b, a)):
        q = queue(f"nob.duplex.{producer_node.name}to{consumer_node.name}")
        sub = clients.on(consumer_node).subscribe(q)
        demand(producer_node, q, 1)
        sent = send(clients.on(producer_node), q, 5)
        got = texts(sub.drain(QUIET))
        assert sorted(got) == sorted(sent), (f"NOB-DIR-2: over a duplex A->B connector, messages produced on "
                                             f"{producer_node.name} should reach {consumer_node.name}'s consumer; got {got}")


@pytest.mark.spec("NOB-DUPLEX-2", "NOB-EXCL-1")
@pytest.mark.network("duplex")
def test_duplex_configuration_reaches_the_reverse_bridge(net, clients):
    """"Duplex network connectors": the configuration of A's duplex connector is sent to B, whose
    half is an exact replica, so the exclusion written only in A's connector (nob.duplex.excl.>)
    also keeps B's messages from A. A's own direction is the control."""
    a, b = net["A"], net["B"]
    for producer_node, consumer_node in ((a, b), (b, a)):
        way = f"{producer_node.name}->{consumer_node.name}"
        excluded = queue(f"nob.duplex.excl.{producer_node.name}to{consumer_node.name}")
        allowed = queue(f"nob.duplex.ok.{producer_node.name}to{consumer_node.name}")
        on_excluded = clients.on(consumer_node).subscribe(excluded)
        on_allowed = clients.on(consumer_node).subscribe(allowed)
        demand(producer_node, allowed, 1)  # the demand for the queue outside the exclusion crossed {way}
        assert producer_node.consumer_count(excluded) == 0, (
            f"NOB-DUPLEX-2: {way}: {consumer_node.name}'s consumer of a queue the duplex connector excludes "
            f"({DUPLEX_EXCLUDED}) became a network consumer on {producer_node.name}")
        producer = clients.on(producer_node)
        send(producer, excluded, 5)
        sent = send(producer, allowed, 5)
        assert sorted(texts(on_allowed.drain(QUIET))) == sorted(sent), (
            f"setup: {way}: the queue outside the exclusion should be forwarded")
        got = texts(on_excluded.drain(QUIET))
        assert got == [], (f"NOB-DUPLEX-2: {way}: messages of a queue the duplex connector excludes "
                           f"({DUPLEX_EXCLUDED}) were forwarded: {got}")
        assert producer_node.queue_size(excluded) == 5, (
            f"NOB-DUPLEX-2: {way}: the excluded queue's 5 messages should stay on {producer_node.name}, "
            f"which holds {producer_node.queue_size(excluded)}")


# NOB-REPLAY-2: the replay policy leaves enableAudit unset (5.17's default, on), as from 5.9 it may
@pytest.mark.spec("NOB-REPLAY-1", "NOB-DUPLEX-2", "NOB-REPLAY-2")
@pytest.mark.parametrize("replay", [True, False], ids=["replay", "no-replay"])
@pytest.mark.network("duplex")
def test_replay_when_no_consumers_unsticks_messages(net, clients, replay):
    # a policy on both brokers replays nob.replay.> queues
    a, b = net["A"], net["B"]
    q = queue("nob.replay.q" if replay else "nob.stuck.q")
    # B's consumer pulls A's messages over to B, takes one without acknowledging it, and leaves:
    # all of them are now on B, which has no consumer.
    leaving = clients.on(b)
    leaving.subscribe(q, ack="client-individual", prefetch=1)
    demand(a, q, 1)
    sent = send(clients.on(a), q, 10)
    on_b_size = held(b, q, len(sent))
    assert on_b_size == len(sent), f"setup: A should forward its 10 messages to B's consumer; B holds {on_b_size}"
    leaving.close()
    demand(b, q, 0)
    # A consumer appears back on A, where the messages came from.
    on_a = clients.on(a).subscribe(q)
    demand(b, q, 1)  # A's consumer is a network consumer on B (the duplex bridge's other half)
    if replay:
        got = texts(on_a.receive_n(len(sent), DEMAND_TIMEOUT))
        assert sorted(got) == sorted(sent), (
            f"NOB-REPLAY-1: with replayWhenNoConsumers the messages stuck on B (no consumer there) should go back "
            f"to A's consumer; A's consumer got {len(got)} of {len(sent)}, B holds {b.queue_size(q)}")
        assert held(b, q, 0) == 0, "NOB-REPLAY-1: B should hold nothing once the messages are replayed"
    else:
        got = texts(on_a.drain(QUIET))
        assert got == [], (f"NOB-REPLAY-1 (control): without the conditional filter a message never goes back to "
                           f"a broker it came through, so B's messages should stay stuck; A's consumer got {got}")
        assert b.queue_size(q) == len(sent), "NOB-REPLAY-1 (control): the messages should still be held on B"


# --------------------------------------------------------------------------- network "line": A -> B -> C


@pytest.mark.spec("NOB-TTL-1")
@pytest.mark.parametrize("ttl", [1, 2])
@pytest.mark.network("line")
def test_network_ttl_in_a_line(net, clients, ttl):
    a, b, c = net["A"], net["B"], net["C"]
    q = queue(f"nob.ttl{ttl}.q")
    on_c = clients.on(c).subscribe(q)
    demand(b, q, 1)  # C's consumer is one hop from B: known there for any TTL
    if ttl == 1:
        # Two hops from A: with TTL 1 the announcement stops at B, so A never forwards.
        assert a.consumer_count(q) == 0, "NOB-TTL-1: with networkTTL 1, C's consumer became known two hops away on A"
        send(clients.on(a), q, 5)
        got = texts(on_c.drain(QUIET))
        assert got == [], f"NOB-TTL-1: with networkTTL 1 a consumer two brokers away got A's messages: {got}"
        assert a.queue_size(q) == 5, "NOB-TTL-1: the messages should stay on A"
    else:
        demand(a, q, 1)
        sent = send(clients.on(a), q, 5)
        got = texts(on_c.receive_n(len(sent), DEMAND_TIMEOUT))
        assert sorted(got) == sorted(sent), f"NOB-TTL-1: with networkTTL 2, A's messages should reach C; got {got}"


# --------------------------------------------------------------------------- network "static": A -> B, staticBridge


@pytest.mark.spec("NOB-STATIC-BRIDGE-1", "NOB-STATINC-1")
@pytest.mark.network("static")
def test_static_bridge_forwards_without_demand(net, clients):
    a, b = net["A"], net["B"]
    always = "queue://nob.static.always"
    tag = f"s{uuid.uuid4().hex[:6]}-"
    sent = send(clients.on(a), always, 5, tag=tag)
    on_b_size = held(b, always, 5)
    assert on_b_size == 5, (f"NOB-STATINC-1: with no consumer anywhere B should hold the 5 messages of the "
                            f"statically included queue; B holds {on_b_size}, A {a.queue_size(always)}")
    dynamic = queue("nob.static.dynamic")
    on_b_dynamic = clients.on(b).subscribe(dynamic)
    send(clients.on(a), dynamic, 5)
    # The statically included queue went to B with no consumer there ...
    on_b = clients.on(b).subscribe(always)
    got = texts(on_b.drain(QUIET))
    assert sorted(got) == sorted(sent), f"NOB-STATINC-1: the statically included queue should be on B; got {got}"
    # ... while B's consumer of another queue creates no demand on a static bridge.
    assert texts(on_b_dynamic.drain(QUIET)) == [], "NOB-STATIC-BRIDGE-1: a static bridge followed a remote consumer"
    assert a.queue_size(dynamic) == 5 and a.consumer_count(dynamic) == 0


@pytest.mark.spec("NOB-TTL-2", "NOB-TTL-3")
@pytest.mark.network("line")
def test_consumer_ttl_beyond_message_ttl_strands_messages_midway(net, clients):
    # nob.cttl.>: consumer TTL 2, message TTL left at its default (1) on both hops
    a, b, c = net["A"], net["B"], net["C"]
    q = queue("nob.cttl.q")
    on_c = clients.on(c).subscribe(q)
    demand(b, q, 1)
    demand(a, q, 1)  # consumer TTL 2: C's consumer is announced two brokers away, on A
    sent = send(clients.on(a), q, 5)
    on_b_size = held(b, q, len(sent))
    got = texts(on_c.drain(QUIET))
    assert got == [], (f"NOB-TTL-2: with message TTL 1 (left at the default) a message crosses one broker only, so "
                       f"A's messages should stop on B and not reach C's consumer; C got {got}")
    assert on_b_size == len(sent) and a.queue_size(q) == 0, (
        f"NOB-TTL-2/NOB-TTL-3: A should forward on the demand announced with consumer TTL 2 and B keep the "
        f"messages; A holds {a.queue_size(q)}, B {on_b_size}")


@pytest.mark.spec("NOB-TTL-3")
@pytest.mark.network("line")
def test_consumer_ttl_limits_demand_whatever_the_message_ttl(net, clients):
    # nob.mttl.>: message TTL 2, consumer TTL left at its default (1) on both hops
    a, b, c = net["A"], net["B"], net["C"]
    q = queue("nob.mttl.q")
    on_c = clients.on(c).subscribe(q)
    demand(b, q, 1)  # one hop: known on B
    assert a.consumer_count(q) == 0, ("NOB-TTL-3: with consumer TTL 1 (left at the default), C's consumer should not be announced two "
                                      "brokers away on A (whatever the message TTL)")
    send(clients.on(a), q, 5)
    got = texts(on_c.drain(QUIET))
    assert got == [] and a.queue_size(q) == 5, (
        f"NOB-TTL-3: without demand on A its messages should stay there; C got {got}, A holds {a.queue_size(q)}")


@pytest.mark.spec("NOB-CONDUIT-3")
@pytest.mark.parametrize("conduit", [True, False], ids=["conduit", "no-conduit"])
@pytest.mark.network("line")
def test_conduit_ignores_remote_selectors(net, clients, conduit):
    # A -> B and A -> C, conduit on for nob.sel.on.>, off for nob.sel.off.>
    a, b, c = net["A"], net["B"], net["C"]
    q = queue("nob.sel.on.q" if conduit else "nob.sel.off.q")
    on_b = clients.on(b).subscribe(q, selector="colour = 'red'")
    on_c = clients.on(c).subscribe(q, selector="colour = 'blue'")
    demand(a, q, 2)  # one network consumer towards B, one towards C
    producer = clients.on(a)
    sent = [f"red{i}" for i in range(20)]
    for body in sent:
        producer.send(q, body, {"colour": "red"})
    got_b = texts(on_b.drain(QUIET))
    assert texts(on_c.drain(QUIET)) == [], "NOB-CONDUIT-3: C's consumer selects blue messages only"
    if conduit:
        # A ignores the selectors and shares the red messages between B and C: C's share is stuck.
        stuck = len(sent) - len(got_b)
        on_c_size = held(c, q, stuck) if stuck else c.queue_size(q)
        assert 0 < stuck == on_c_size, (
            f"NOB-CONDUIT-3: with conduit subscriptions A does not evaluate the remote selectors, so some red "
            f"messages should go to C, where no consumer selects them; B's red consumer got {len(got_b)} of "
            f"{len(sent)}, C holds {on_c_size}, A holds {a.queue_size(q)}")
    else:
        assert sorted(got_b) == sorted(sent) and c.queue_size(q) == 0, (
            f"NOB-CONDUIT-3: without conduit subscriptions each network consumer carries its remote consumer's "
            f"selector, so every red message should reach B's consumer; B got {len(got_b)} of {len(sent)}, "
            f"C holds {c.queue_size(q)}")


# --------------------------------------------------------------------------- network "virtual": A -> B, A -> C


@pytest.mark.spec("NOB-VIRT-3")
@pytest.mark.network("virtual")
def test_virtual_topic_consumer_queue_creates_demand_across_the_network(net, clients):
    # A -> B "vdest": useVirtualDestSubs, VirtualTopic.> dynamically included
    a, b = net["A"], net["B"]
    name = f"VirtualTopic.nob.{uuid.uuid4().hex[:8]}"
    topic = f"topic://{name}"
    group_1 = [clients.on(b).subscribe(f"queue://Consumer.G1.{name}") for _ in range(2)]
    group_2 = clients.on(b).subscribe(f"queue://Consumer.G2.{name}")
    demand(a, topic, 1)  # conduit: B's consumer queues are one network consumer of the topic on A
    sent = send(clients.on(a), topic, 10)
    got_1 = [texts(s.drain(QUIET)) for s in group_1]
    got_2 = texts(group_2.drain(QUIET))
    assert sorted(got_1[0] + got_1[1]) == sorted(sent), (
        f"NOB-VIRT-3: messages published to the virtual topic on A should reach consumer group G1's queue on B, "
        f"each once between its two consumers; got {got_1}")
    assert sorted(got_2) == sorted(sent), f"NOB-VIRT-3: consumer group G2 on B should get its own copy; got {got_2}"


@pytest.mark.spec("NOB-VIRT-1")
@pytest.mark.parametrize("virtual_subs", [True, False], ids=["useVirtualDestSubs", "plain"])
@pytest.mark.network("virtual")
def test_composite_topic_target_consumer_creates_demand(net, clients, virtual_subs):
    # B forwards topic nob.vcomp.bar / nob.vplain.bar to queue <topic>.forward
    a, b = net["A"], net["B"]
    kind = "vcomp" if virtual_subs else "vplain"
    topic, forward = f"topic://nob.{kind}.bar", f"queue://nob.{kind}.bar.forward"
    on_b = clients.on(b).subscribe(forward)
    tag = f"{kind}{uuid.uuid4().hex[:6]}-"
    if virtual_subs:
        demand(a, topic, 1)
        sent = send(clients.on(a), topic, 5, tag=tag)
        got = texts(on_b.drain(QUIET))
        assert sorted(got) == sorted(sent), (
            f"NOB-VIRT-1: with useVirtualDestSubs, B's consumer of the composite topic's target queue should make A "
            f"forward the topic's messages; B's consumer got {got}")
    else:
        # Positive sign first: the same advisories reached A for the connector that listens to them.
        witness = clients.on(b).subscribe("queue://nob.vcomp.bar.forward")
        demand(a, "topic://nob.vcomp.bar", 1)
        assert a.consumer_count(topic) == 0, ("NOB-VIRT-1: without useVirtualDestSubs on the connector, a consumer of "
                                              "a composite topic's target queue created demand for the topic")
        send(clients.on(a), topic, 5, tag=tag)
        got = texts(on_b.drain(QUIET))
        assert got == [], f"NOB-VIRT-1: without useVirtualDestSubs A forwarded the composite topic's messages: {got}"
        witness.close()


@pytest.mark.spec("NOB-VIRT-2")
@pytest.mark.network("virtual")
def test_virtual_dest_demand_from_queue_creation(net, clients):
    # A -> C "oncreate"; C: useVirtualDestSubs + useVirtualDestSubsOnCreation
    a, c = net["A"], net["C"]
    topic, forward = "topic://nob.vcreate.bar", "queue://nob.vcreate.bar.forward"
    # The target queue comes to exist on C (a consumer opens it and leaves): no consumer remains.
    opener = clients.on(c)
    opener.subscribe(forward).close()
    demand(c, forward, 0)
    demand(a, topic, 1)  # the queue's existence alone is demand for the composite topic
    sent = send(clients.on(a), topic, 5, tag=f"c{uuid.uuid4().hex[:6]}-")
    size = held(c, forward, len(sent))
    assert size == len(sent), (f"NOB-VIRT-2: with useVirtualDestSubsOnCreation, messages published to the composite "
                               f"topic on A should reach its target queue on C with no consumer there; C holds {size}")
    got = texts(clients.on(c).subscribe(forward).drain(QUIET))
    assert sorted(got) == sorted(sent), f"NOB-VIRT-2: a late consumer on C should get them; got {got}"


# --------------------------------------------------------------------------- network "mesh": A, B, C fully meshed


@pytest.mark.spec("NOB-TOPIC-1", "NOB-CONDUIT-2", "NOB-LOOP-1")
@pytest.mark.parametrize("ttl", [1, 3])
@pytest.mark.network("mesh")
def test_topic_messages_in_a_full_mesh(net, clients, ttl):
    # every pair joined both ways; networkTTL 1 for nob.mesh1.>, 3 for nob.mesh3.>
    nodes = [net[n] for n in "ABC"]
    topic = f"topic://nob.mesh{ttl}.{uuid.uuid4().hex[:8]}"
    subscribers = {n.name: clients.on(n).subscribe(topic) for n in nodes}
    subscribers["B2"] = clients.on(nodes[1]).subscribe(topic)  # conduit: B's pair is one network subscription
    for n in nodes:
        # each broker counts its own subscriber(s) plus one network subscription per other broker
        # (with TTL 3 the second-hand announcements join the same conduit subscription)
        demand(n, topic, 4 if n.name == "B" else 3)
    sent = {n.name: send(clients.on(n), topic, 5, tag=f"{n.name}-") for n in nodes}
    everything = sorted(m for ms in sent.values() for m in ms)
    for name, sub in subscribers.items():
        got = sorted(texts(sub.drain(QUIET)))
        own = [m for m in got if m.startswith(name[0] + "-")]
        assert own == sorted(sent[name[0]]), (
            f"NOB-LOOP-1: a message must not come back to the broker it was published on; the subscriber on "
            f"{name} got its own broker's messages {own}")
        missing = sorted(set(everything) - set(got))
        assert not missing, f"NOB-TOPIC-1: the subscriber on {name} missed messages published elsewhere: {missing}"
        if ttl == 1:
            assert got == everything, (
                f"NOB-TOPIC-1/NOB-CONDUIT-2/NOB-LOOP-1: in a full mesh with networkTTL 1 the subscriber on {name} "
                f"should get each of the {len(everything)} messages exactly once; got {len(got)} "
                f"(duplicates: {sorted({m for m in got if got.count(m) > 1})})")
