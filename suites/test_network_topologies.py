"""Network topologies beyond a fixed static: list, against ActiveMQ Classic's "Networks of Brokers"
page (../shared/spec/activemq-classic-networks-of-brokers.md; catalogue conformance/spec/networks.toml):
multicast discovery (NOB-MCAST-1), masterslave: connectors (NOB-MS-1), connector credentials
(NOB-AUTH-1) and several named duplex connectors between one pair (NOB-DUPLEX-3); and, from the
A-MQ fault-tolerance guide's chapter 4, one plain static: connector listing two brokers (FT-NOB-3).

Targets: ActiveMQ Classic 5.17 (``conformance.targets.activemq.network``, shared-store
master/slave from ``conformance.targets.activemq.shared_store``) and the reference broker
(``conformance.targets.reference.network``, ``reference_broker/cluster/``).

Traffic rule for discovery: every test run uses a discovery group of its own (never ``default``),
joined on loopback with TTL 0 (``activemq_loopback_uri`` for ActiveMQ; the reference agent's own
default), so no other broker joins and no datagram leaves the host.

Master/slave: ActiveMQ's pair shares one KahaDB store; only the broker holding its lock (the
master) opens its connectors, so "the live broker of the group" is the master. For the
masterslave: connector the reference broker's pair is two independent brokers, both listening, and
what is checked is the part the page states for the connector -- it bridges to the first live URI
of the list only (not to the second although it listens), and to the next one when that dies. The
host pair (FT-NOB-4) is two shared-store groups of broker processes on both targets
(reference_broker/ha: only the lock holder listens and runs its network connector).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from conformance.requirements import skip_or_fail
from machinery.waiting import poll
from suites.network_support import (FAST_RECONNECT, StompClients, demand, launch_network,
                                                network_suite_marks, network_target, network_workdir,
                                                parametrize_by_target, queue, send)
from conformance.topology import Bridge, Topology
from conformance.topology import NetworkConnectorOptions as Options

QUIET = 1.5  # as test_networks.py: local brokers forward within milliseconds once demand is there
#: NOB-AUTH-1: how long A may take to log that B refused the connector (the bound is not the subject)
REFUSAL_LOGGED_WITHIN = 30.0
BRIDGE_TIMEOUT = 45.0  # a bridge forming (JVM start, discovery heartbeats, reconnect back-off)
FAILOVER_TIMEOUT = 60.0  # a slave taking the store's lock and opening its connectors
USER, PASSWORD = "nobuser", "nob-secret"

pytestmark = network_suite_marks()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.fixture(scope="module")
def rigs(target_name, request):
    """The target, for the networks the topology model does not describe yet (multicast
    discovery, a masterslave: connector): its ``discovery_pair`` / ``masterslave_rig``. Not
    applicable without ``topology.network``; skipped (with the reason) where the target cannot
    run here (these tests build their own brokers from the installation)."""
    target = network_target(request, target_name)
    ok, reason = target.availability()
    if not ok:
        skip_or_fail(target.name.partition(":")[0], reason)
    return target


@pytest.fixture
def clients():
    """``clients(node, login, passcode)`` -> a STOMP client on ``node``, closed when the test ends."""
    with StompClients() as made:
        def on(node, login: str | None = None, passcode: str | None = None):
            return made.on(node, login, passcode)

        yield on


def until(predicate, timeout: float, step: float = 0.1):
    """Poll ``predicate`` until it returns something truthy or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()) and time.monotonic() < deadline:
        time.sleep(step)
    return value


def flows(clients, producer_node, consumer_node, destination: str, n: int = 5, consumer_login=(None, None),
          producer_login=(None, None)) -> tuple[list[str], list[str]]:
    """Subscribe on ``consumer_node``, wait for the demand on ``producer_node``, send ``n`` there;
    returns (sent, received) for the caller's assertion."""
    sub = clients(consumer_node, *consumer_login).subscribe(destination)
    demand(producer_node, destination, 1)
    sent = send(clients(producer_node, *producer_login), destination, n, tag=f"{uuid.uuid4().hex[:4]}-")
    return sent, [m.text for m in sub.drain(QUIET)]


# --------------------------------------------------------------------------- multicast discovery


@pytest.mark.spec("NOB-MCAST-1", "FT-DYNAMIC-9")
@pytest.mark.requires("topology.discovery")
def test_multicast_discovery_forms_a_network(rigs, clients, tmp_path):
    group = f"brokerconf-{uuid.uuid4().hex[:10]}"  # this run's own group, never "default"
    pair = rigs.discovery_pair(tmp_path, group)
    try:
        pair.start()
        # Neither connector lists an address: each broker learns the other's from its announcement.
        links = {(a, b): until(lambda: pair.bridged(a, b), BRIDGE_TIMEOUT) for a, b in (("A", "B"), ("B", "A"))}
        assert all(links.values()), (f"NOB-MCAST-1: brokers announcing in group {group} should bridge to each other "
                                     f"through their multicast:// connectors; bridged {links}\n{pair.log_tail()}")
        a, b = pair.nodes["A"], pair.nodes["B"]
        for producer, consumer in ((a, b), (b, a)):
            sent, got = flows(clients, producer, consumer, queue(f"nob.mcast.{producer.name}to{consumer.name}"))
            assert sorted(got) == sorted(sent), (f"NOB-MCAST-1: over the discovered bridge, messages produced on "
                                                 f"{producer.name} should reach {consumer.name}'s consumer; got {got}")
    finally:
        pair.stop()


# --------------------------------------------------------------------------- masterslave:


@pytest.mark.spec("FT-NOB-3")
def test_one_plain_static_connector_bridges_to_every_listed_broker(rigs, clients, tmp_path):
    """A-MQ FT guide, chapter 4: the plain connector tries to connect to every broker of its list,
    which is why a master/slave group needs masterslave: (contrast NOB-MS-1 below, which bridges to
    the first live broker only). Both listed brokers live and independent: F must bridge to each,
    and messages produced on F must reach a consumer on either."""
    fan = rigs.static_fan_rig(tmp_path, FAST_RECONNECT)
    try:
        fan.start()
        m, s = fan.members
        bridged = until(lambda: len(b := fan.bridged_to()) == 2 and b, BRIDGE_TIMEOUT)
        assert bridged, (f"FT-NOB-3: one static:(M, S) connector should bridge to both listed brokers; bridged to "
                         f"{[n.name for n in fan.bridged_to()]}\n{fan.log_tail()}")
        for member in (m, s):
            sent, got = flows(clients, fan.forwarder, member, queue(f"ft.nob3.{member.name}"))
            assert sorted(got) == sorted(sent), \
                f"FT-NOB-3: messages sent on F should reach {member.name}'s consumer over its bridge; got {got}"
    finally:
        fan.stop()


@pytest.mark.spec("FT-NOB-4")
@pytest.mark.requires("topology.masterslave-connector")
# four brokers (JVMs on ActiveMQ) start one after the other; the bound is on waiting, nothing here is timed
@pytest.mark.timeout(480)
def test_host_pair_the_healthy_host_takes_over_the_failed_host_s_group(rigs, clients, tmp_path):
    """A-MQ FT guide chapter 4: in a host pair each host runs one group's master and the other's
    slave; when host1 (master A1, slave B2) fails, A2 on host2 takes over group A, host2 then runs
    both masters, and the masterslave: connectors carry messages between the groups again."""
    pair = rigs.host_pair_rig(tmp_path, FAST_RECONNECT)
    try:
        pair.start()
        n = pair.named
        assert pair.masters() == {"A": n["A1"], "B": n["B1"]}, f"setup: A1 and B1 should be the masters\n{pair.log_tail()}"
        linked = until(lambda: pair.bridged(n["A1"], n["B1"]) and pair.bridged(n["B1"], n["A1"]), BRIDGE_TIMEOUT)
        assert linked, f"setup: the two masters did not bridge to each other\n{pair.log_tail()}"

        pair.fail_host("host1")  # A1 and B2 die together
        assert pair.wait_for_master("A", FAILOVER_TIMEOUT) is n["A2"], \
            f"FT-NOB-4: group A's slave on the healthy host did not take over\n{pair.log_tail()}"
        assert pair.masters() == {"A": n["A2"], "B": n["B1"]}, \
            f"FT-NOB-4: the healthy host should now run both masters (A2, B1): {pair.masters()}"
        relinked = until(lambda: pair.bridged(n["A2"], n["B1"]) and pair.bridged(n["B1"], n["A2"]), BRIDGE_TIMEOUT)
        assert relinked, (f"FT-NOB-4: the network between the groups did not re-form between A2 and B1 "
                          f"\n{pair.log_tail()}")
        for producer, consumer in ((n["A2"], n["B1"]), (n["B1"], n["A2"])):
            destination = queue(f"ft.nob4.{producer.process.name}")
            sub = clients(consumer).subscribe(destination)
            sent = send(clients(producer), destination, 5, tag=f"{uuid.uuid4().hex[:4]}-")
            got = []
            deadline = time.monotonic() + BRIDGE_TIMEOUT  # forwarded once the consumer's demand crosses
            while len(got) < len(sent) and time.monotonic() < deadline:
                message = sub.receive(1.0)
                if message is not None:
                    got.append(message.text)
            assert sorted(got) == sorted(sent), (f"FT-NOB-4: after the takeover messages produced on "
                                                 f"{producer.process.name} should reach {consumer.process.name}'s "
                                                 f"consumer; got {got}\n{pair.log_tail()}")
    finally:
        pair.stop()


@pytest.mark.spec("NOB-MS-1", "FT-NOB-1")
@pytest.mark.requires("topology.masterslave-connector")
def test_masterslave_connector_follows_the_live_broker(rigs, clients, tmp_path):
    group = rigs.masterslave_rig(tmp_path, FAST_RECONNECT)
    try:
        group.start()
        master, slave = group.members
        assert group.live() is master, f"setup: the first member should be live; {group.log_tail()}"
        bridged = until(group.bridged_to, BRIDGE_TIMEOUT)
        assert bridged and bridged[-1] is master and slave not in bridged, (
            f"NOB-MS-1: a masterslave: connector should bridge to the first live URI (the master) only; "
            f"bridged to {[n.name for n in bridged or []]}\n{group.log_tail()}")
        f = group.forwarder
        sent, got = flows(clients, f, master, queue("nob.ms.before"))
        assert sorted(got) == sorted(sent), f"NOB-MS-1: messages sent on F should reach the master's consumer; got {got}"

        group.kill(master)
        live = group.wait_for_live(FAILOVER_TIMEOUT)
        assert live is slave, f"setup: the slave should take over once the master died; live: {live}\n{group.log_tail()}"
        moved = until(lambda: (b := group.bridged_to()) and b[-1] is slave, FAILOVER_TIMEOUT)
        assert moved, (f"NOB-MS-1: after the master died the masterslave: bridge should move to the next live URI "
                       f"(the slave); bridged to {[n.name for n in group.bridged_to()]}\n{group.log_tail()}")
        sent, got = flows(clients, f, slave, queue("nob.ms.after"))
        assert sorted(got) == sorted(sent), (f"NOB-MS-1: after the failover messages sent on F should reach the "
                                             f"slave's consumer; got {got}\n{group.log_tail()}")
    finally:
        group.stop()


# --------------------------------------------------------------------------- credentials and duplex names
#
# One network A -> B shared by NOB-AUTH-1 and NOB-DUPLEX-3: B has a user and refuses anonymous
# logins; A's connectors "good" (right credentials), "bad" (wrong password; not expected to come
# up), and two duplex connectors "dupa" / "dupb" (right credentials) splitting queues nob.dup.a.> and
# nob.dup.b.> between them.


def _topology_bridges():
    creds = dict(user_name=USER, password=PASSWORD)
    return (
        Bridge("A", "B", Options(name="good", dynamically_included_destinations=("queue://nob.auth.good.>",), **creds)),
        Bridge("A", "B", Options(name="bad", user_name=USER, password="not-" + PASSWORD,
                                 dynamically_included_destinations=("queue://nob.auth.bad.>",)),
               expect_established=False),
        Bridge("A", "B", Options(name="dupa", duplex=True, dynamically_included_destinations=("queue://nob.dup.a.>",),
                                 **creds)),
        Bridge("A", "B", Options(name="dupb", duplex=True, dynamically_included_destinations=("queue://nob.dup.b.>",),
                                 **creds)),
    )


@pytest.fixture(scope="module")
def secured(target_name, request, tmp_path_factory):
    net = launch_network(request, target_name, network_workdir(tmp_path_factory, f"{target_name}-nob-topo"),
                         Topology(("A", "B"), _topology_bridges(), prefix="nob-topo", users={"B": ((USER, PASSWORD),)}))
    yield net
    net.stop()


ON_B = (USER, PASSWORD)


@pytest.mark.spec("NOB-AUTH-1")
def test_connector_credentials_decide_whether_the_bridge_forms(secured, clients):
    a, b = secured["A"], secured["B"]
    # Right credentials: the bridge is up (start() waited for it) and carries B's demand.
    sent, got = flows(clients, a, b, queue("nob.auth.good"), consumer_login=ON_B)
    assert sorted(got) == sorted(sent), (
        f"NOB-AUTH-1: the connector with the right user name and password should bridge to B; B's consumer got {got}")
    # Wrong password: no bridge, so B's consumer of a queue only that connector includes creates
    # no demand on A and the messages stay there.
    refused = queue("nob.auth.bad")
    sub = clients(b, *ON_B).subscribe(refused)
    allowed = queue("nob.auth.good")
    clients(b, *ON_B).subscribe(allowed)
    demand(a, allowed, 1)  # positive sign that B's demand reached A meanwhile
    assert a.consumer_count(refused) == 0, "NOB-AUTH-1: the connector with a wrong password got B's demand"
    send(clients(a), refused, 5)
    got = [m.text for m in sub.drain(QUIET)]
    assert got == [], f"NOB-AUTH-1: messages crossed a connector whose password B refuses: {got}"
    assert a.queue_size(refused) == 5, "NOB-AUTH-1: the messages should stay on A"
    # The owning broker says why: the remote broker refused the credentials. The refusal reaches A's
    # log when B's answer to the connector's attempt does, which on a loaded machine came after the
    # checks above (a main job read A's log before it): wait for that line, as long as the
    # connector's retries (left at the defaults: 1 s, doubled each time) take for four more attempts.
    refusal = re.compile(r"(?i)(password is invalid|wrong user name or password)")
    log = poll(lambda: secured.log_tail(400), refusal.search, timeout=REFUSAL_LOGGED_WITHIN, interval=0.2)
    assert refusal.search(log), (
        f"NOB-AUTH-1: A's log should say B refused the connector's credentials (waited {REFUSAL_LOGGED_WITHIN} s); "
        f"log tail:\n{log[-3000:]}")


@pytest.mark.spec("NOB-DUPLEX-3", "NOB-NAME-1")
@pytest.mark.parametrize("connector", ["a", "b"])
def test_named_duplex_connectors_split_destinations(secured, clients, connector):
    a, b = secured["A"], secured["B"]
    for producer, consumer in ((a, b), (b, a)):
        q = queue(f"nob.dup.{connector}.{producer.name}to{consumer.name}")
        sent, got = flows(clients, producer, consumer, q,
                          consumer_login=ON_B if consumer is b else (None, None),
                          producer_login=ON_B if producer is b else (None, None))
        assert sorted(got) == sorted(sent), (
            f"NOB-DUPLEX-3: duplex connector dup{connector} should carry {q} from {producer.name} to "
            f"{consumer.name}; got {got}")
        # Each queue has exactly one network consumer on the producing broker: only the connector
        # that includes it took the demand, the other duplex connector did not.
        assert producer.consumer_count(q) == 1, (
            f"NOB-DUPLEX-3: {q} should have one network consumer on {producer.name} (only dup{connector} includes "
            f"it); counts {producer.consumer_count(q)}")
