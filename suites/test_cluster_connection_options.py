"""Cluster-connection options (artemis-clusters.md, "Configuring Cluster Connections":
message-load-balancing and its default, STRICT and nodes without the queue, retry-interval and
reconnect-attempts; "Specifying Members of a Cluster Explicitly"), on every target with
``topology.cluster``.

Three clusters, one at a time, each started once for the module:

* DEFAULTS: two nodes, every option at its default (ON_DEMAND, reconnect-attempts -1). A node
  stopped and started again is reconnected to (retrying without limit) and forwarded to again.
  Then B is started with cluster credentials A does not accept (it never joins), and twice with
  the broker's shipped defaults (it warns at each start): `use_cluster_credentials`, a launcher
  hook of both targets.
* GIVE_UP: two nodes, STRICT, ``reconnect_attempts`` 1 with 200 ms between attempts. After B
  crashes A's one reconnect attempt fails, B is taken as down for good and A keeps every message
  it gets. The wait before sending (`GIVE_UP_WAIT`) is a lower bound far above the attempts'
  200 ms: a slow machine can only make the test fail in vain, never pass a broker that keeps
  routing to a node it gave up.
* MEMBERS: three nodes, STRICT, explicit members A<->B<->C (static connectors with
  allow-direct-connections-only): A never connects to C although it learns of C through B.

* PINGED: two nodes, check-period 500 ms, connection-ttl 2 s. B frozen (SIGSTOP, or the
  reference's frozen loop) keeps its TCP connections open, so only the missing pings can make A
  give the link up; A's log line saying so is timed from the pause (B, frozen, cannot be asked)
  and must come between ttl - check-period and ttl + check-period (+1 s, `GIVE_UP_SLACK`; the
  brokers look for silent links at every check period here: ``ttl_check_interval_ms``); once
  B resumes the link is established again (`bridge_establishments` grows: a link that never
  failed is never established twice). The defaults (30 s / 60 s) are timed the same way on
  DEFAULTS, whose configuration names neither: the give-up must come 30..90 s after the pause.

Messages are sent over STOMP with receipts; every test uses its own queue, which exists on a node
once a client subscribed there (`declare`). Demand is known across the cluster once a probe
crossed (`demand_crossed`); the tests that stop, kill, pause or reconfigure B say so
(``disrupts=True``) and run after the quiet ones of their cluster.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import datetime

import pytest

from suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    FORMATION, StompClients, bodies, cluster_suite_marks, cluster_pool, clusters, declare, drain, parametrize_by_target,
    demand_crossed, queue, restarted_after, send_numbered, settle, wait_quiet_sizes)
from conformance.topology import CLUSTER_CONNECTION_DEFAULTS, ClusterConnection, Topology
from machinery.waiting import poll

pytestmark = cluster_suite_marks()

DEFAULTS = Topology(("A", "B"), cluster=ClusterConnection(), prefix="ccdefault")
GIVE_UP = Topology(("A", "B"), cluster=ClusterConnection(message_load_balancing="STRICT", reconnect_attempts=1,
                                                         retry_interval_ms=200, max_retry_interval_ms=200),
                   prefix="ccgiveup")
MEMBERS = Topology(("A", "B", "C"), cluster=ClusterConnection(
    message_load_balancing="STRICT", connections=(("A", "B"), ("B", "A"), ("B", "C"), ("C", "B"))),
    prefix="ccmembers")
PINGED_CHECK_PERIOD_MS = 500
PINGED_TTL_MS = 2000
#: the node that gives the link up is the one B's link dials (A's acceptor): Artemis looks for
#: connections silent for their ttl every connection-ttl-check-interval (2000 ms by default, a core
#: setting outside the clusters chapter), so by default it gives up anywhere in ttl .. ttl + 2 s of
#: silence (mj29 and mj32 measured 3.53 s and 3.55 s, past the window the check period alone allows).
#: Checking at the check period, as the reference broker does, makes the give-up as precise as
#: the two options the statement is about
PINGED = Topology(("A", "B"), cluster=ClusterConnection(check_period_ms=PINGED_CHECK_PERIOD_MS,
                                                        connection_ttl_ms=PINGED_TTL_MS,
                                                        ttl_check_interval_ms=PINGED_CHECK_PERIOD_MS), prefix="ccping")
MESSAGES = 12
#: seconds after B's crash before A is expected to have given B up (one attempt, 200 ms apart).
#: Shortened from 15 s: the statement is about the attempts running out, not how soon; 5 s is still
#: 25 times the one 200 ms attempt (a lower bound: a slow machine can only fail the test in vain)
GIVE_UP_WAIT = 5.0
#: seconds a link that must not come up is watched for coming up all the same. Shortened from 20 s:
#: the statement is about the link never forming; a link that is accepted forms within a retry or
#: two (500 ms apart by default, 200 ms on GIVE_UP), so 10 s is still about 20 retry intervals
JOIN_WAIT = 10.0
#: the warning about the shipped cluster credentials: Artemis's AMQ222007 ("... running with the
#: default cluster admin user and default password ..."), the reference's "uses the default
#: cluster password"
DEFAULT_CREDENTIALS_WARNING = re.compile(r"default cluster (admin user|password)", re.IGNORECASE)
#: a node refusing the cluster user ``{user}``: Artemis's AMQ229099 ("Unable to authenticate cluster
#: user: <user>", under AMQ222186), the reference's "refused a link from ...: wrong cluster user or password"
CREDENTIALS_REFUSED = r"Unable to authenticate cluster user: {user}\b|wrong cluster user or password"
#: a node giving a peer up once its reconnect attempts ran out: Artemis's AMQ221029 ("Stopped
#: bridge", the cluster bridge to that node), the reference's "given up, the node is considered down"
GIVEN_UP = re.compile(r"AMQ221029: Stopped bridge|given up, the node is considered down")
#: seconds a setup check waits for a node's log to show what it did
LOG_WAIT = 30.0
#: seconds a node stays paused. Shortened from 12 s: the statement is about connection-ttl (2 s,
#: which stays) and the check period (0.5 s); 6 s is three times the ttl, a lower bound above
#: ttl + check period (a slow machine can only make the link be given up late: a failure in vain)
PAUSED_FOR = 6.0
#: a node's log line saying a cluster link heard nothing from its peer for the connection-ttl:
#: Artemis's AMQ219014 (the link's client side) / AMQ229014 (the acceptor side), "Did not receive
#: data from ... within the ...ms connection TTL"; the reference's "nothing from B for ... ms
#: (connection_ttl): link closed"
TTL_EXPIRED = re.compile(r"Did not receive data from .* connection TTL|\(connection_ttl\): link closed")
#: CLU-CC-PING-1 (artemis-clusters.md, "Configuring Cluster Connections", check-period and
#: connection-ttl): the link is kept while silent for connection-ttl and given up at the check that
#: finds it silent that long. The silence starts when B is paused, or up to one check period earlier
#: (the last ping B sent may be that old), so the earliest the document allows is ttl - check-period;
#: the latest is ttl + check-period (the first check after the ttl ran out), plus 1 s for reading A's
#: log every 0.1 s and for a loaded machine (two cores shared with other runs) scheduling late
GIVE_UP_SLACK = 1.0
#: seconds B stays paused with the documented defaults (30 s check period, 60 s ttl): the latest
#: give-up allowed (90 s + the slack) and a little more
DEFAULT_PAUSED_FOR = 93.0
#: seconds a stopped node stays down while the others retry. Shortened from 5 s: the statement is
#: about retrying without limit, not for how long; 2 s is still four default retry intervals (500 ms)
DOWN_FOR = 2.0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def node_config(cluster, name: str) -> str:
    """Node ``name``'s part of the cluster's generated configuration (`config_text`: one
    ``--- node X ---`` section per node)."""
    parts = re.split(r"^--- node (\S+) ---$", cluster.config_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2])).get(name, "")


def log_matches(cluster, pattern: re.Pattern) -> int:
    """Lines of the cluster's log (every node's) matching ``pattern``."""
    return len(pattern.findall(cluster.log_tail(100000)))


def expired_lines(cluster) -> list[str]:
    """The lines of the cluster's log (every node's) saying a link went silent for the connection-ttl."""
    return [line for line in cluster.log_tail(100000).splitlines() if TTL_EXPIRED.search(line)]


#: the time a log line starts with: Artemis's log and the reference broker's (``%(asctime)s``)
LOGGED_AT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\b")


def logged_at(line: str) -> float | None:
    """The wall-clock time (epoch seconds) a broker's log line was written at, if it starts with one
    (the broker runs on this machine, in its time zone and on its clock)."""
    m = LOGGED_AT.match(line)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000


def wait_log_matches(cluster, pattern: re.Pattern, more_than: int) -> int:
    """The matches of ``pattern`` once there are more than ``more_than`` (or the last count after `LOG_WAIT`)."""
    return poll(lambda: log_matches(cluster, pattern), lambda n: n > more_than, timeout=LOG_WAIT, interval=0.5)


def check_a_gave_b_up(cluster, given_up_before: int | None) -> None:
    """Setup of the reconnect-attempts checks: A's log says it gave B up after B crashed (more
    give-up lines than ``given_up_before``; None: B crashed in an earlier test, any such line).
    Without it a link still retrying (or a test that killed nothing) would be judged as a node A
    gave up."""
    before = 0 if given_up_before is None else given_up_before
    seen = wait_log_matches(cluster, GIVEN_UP, before)
    assert seen > before, (
        f"setup: A's log should say it gave B up (its one reconnect attempt, 200 ms after B crashed, ran out) "
        f"within {LOG_WAIT:.0f} s; give-up lines {seen}, before the crash {before}\n{cluster.log_tail(20)}")


def lines_after(log: str, last: list[str]) -> str:
    """The part of ``log`` after the line ``last`` (a one-line list; []: the log was empty, all
    of it). A launcher keeps a bounded tail of its log, so counting matches in it could miss a new
    one; ``last`` gone from the tail gives "" (a false failure, never a warning seen twice)."""
    lines = log.splitlines()
    if not last:
        return log
    if last[0] not in lines:
        return ""
    return "\n".join(lines[len(lines) - lines[::-1].index(last[0]):])


# ----------------------------------------------------------------------------- defaults

@pytest.mark.spec("CLU-MLB-1")
def test_default_load_balancing_is_on_demand(clusters):
    cluster = clusters.get(DEFAULTS)
    destination = queue()
    with StompClients() as clients:
        for node in ("A", "B"):
            declare(clients, cluster[node], destination)
        demand_crossed(cluster, destination, ("A", "B"))  # A knows B's queue lost its consumer
        send_numbered(clients, cluster["A"], destination, MESSAGES, "idle")
        sizes = wait_quiet_sizes(cluster, destination, ("A", "B"), MESSAGES)
        assert sizes == {"A": MESSAGES, "B": 0}, (
            f"CLU-MLB-1: with message-load-balancing left at its default (ON_DEMAND) A must not forward to B's "
            f"queue while it has no consumer (STRICT would): A holds {sizes['A']}, B {sizes['B']} of {MESSAGES}")
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"))
        send_numbered(clients, cluster["A"], destination, MESSAGES, "busy")
        got = [b for b in bodies(drain(consumer)) if b.startswith("busy")]
    assert got, (f"CLU-MLB-1: with the default ON_DEMAND A must forward to B once B's queue has a consumer (OFF "
                 f"would not); B's consumer got none of {MESSAGES}\n{cluster.log_tail(20)}")


@pytest.mark.spec("CLU-CC-RETRY-1", "CLU-CC-RETRY-4")
def test_a_node_back_after_a_stop_is_reconnected_and_forwarded_to(clusters):
    cluster = clusters.get(DEFAULTS, disrupts=True)
    destination = queue()
    cluster.stop_broker("B")
    with restarted_after(cluster, "B"):  # waits for every link, A->B included
        time.sleep(DOWN_FOR)  # A retries meanwhile: reconnect-attempts -1 (default) never gives up
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"))
        sent = send_numbered(clients, cluster["A"], destination, MESSAGES)
        got = bodies(drain(consumer))
        left = cluster["A"].queue_size(destination)
    assert got, (f"CLU-CC-RETRY-1: B was down {DOWN_FOR:.0f} s and came back; A (reconnect-attempts -1) should have "
                 f"reconnected and forward to B's consumer, which got none of {MESSAGES} (A holds {left})\n"
                 f"{cluster.log_tail(20)}")
    assert len(got) + left == len(sent) and len(set(got)) == len(got), \
        f"CLU-CC-RETRY-1: {len(sent)} sent to A, B got {got}, A holds {left}"


@pytest.mark.spec("CLU-CRED-1")
def test_a_node_with_credentials_the_others_reject_does_not_join(clusters):
    cluster = clusters.get(DEFAULTS, disrupts=True)
    destination = queue()
    cluster.stop_broker("B")
    intruder = ("brokerconf-intruder", "wrong-" + uuid.uuid4().hex)
    cluster.use_cluster_credentials("B", intruder)
    refusal = re.compile(CREDENTIALS_REFUSED.format(user=re.escape(intruder[0])))
    refused_before = log_matches(cluster, refusal)
    cluster["B"].start(timeout=FORMATION)  # serving; not start_broker, which waits for the links
    # B really runs with the other pair: its configuration names it (A's does not), and a node
    # refused the pair it was offered once B was back (a cluster where B kept the shared pair would
    # let B join, which must not be booked as CLU-CRED-1's deviation)
    mine, theirs = node_config(cluster, "B"), node_config(cluster, "A")
    assert all(part in mine for part in intruder) and not any(part in theirs for part in intruder), (
        f"setup: B should be configured with the cluster user and password A does not know {intruder}; "
        f"B's configuration names them: {[part in mine for part in intruder]}, A's: {[part in theirs for part in intruder]}")
    refused = wait_log_matches(cluster, refusal, refused_before)
    assert refused > refused_before, (
        f"setup: once B started with other cluster credentials a node should have refused them in its log within "
        f"{LOG_WAIT:.0f} s (refusals {refused}, before B's start {refused_before})\n{cluster.log_tail(20)}")
    # a bound of many retry intervals (500 ms by default) for a link to come up if it is accepted
    missing = set(poll(cluster.missing_links, lambda m: not {("A", "B"), ("B", "A")} & set(m),
                       timeout=JOIN_WAIT, interval=0.5))
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        # no probe: B's demand could only reach A over a link that must not exist, so nothing can
        # show it arrived; the room a joined B's announcement would need
        settle()
        send_numbered(clients, cluster["A"], destination, MESSAGES)
        got = bodies(drain(consumer))
        kept = wait_quiet_sizes(cluster, destination, ("A",), MESSAGES)["A"]
    assert got == [] and kept == MESSAGES, (
        f"CLU-CRED-1: B's cluster user and password differ from A's, so B should not join, yet B's consumer got "
        f"{len(got)} of {MESSAGES} messages sent to A (A kept {kept}; links not up: {sorted(missing)})\n"
        f"{cluster.log_tail(20)}")
    assert {("A", "B"), ("B", "A")} <= missing, (
        f"CLU-CRED-1: B's cluster user and password differ from A's, yet a link between them came up within "
        f"{JOIN_WAIT:.0f} s (links still missing: {sorted(missing)})\n{cluster.log_tail(20)}")


@pytest.mark.spec("CLU-CRED-2")
def test_a_node_left_with_the_default_credentials_warns_at_every_start(clusters):
    cluster = clusters.get(DEFAULTS, disrupts=True)
    cluster.stop_broker("B")
    cluster.use_cluster_credentials("B", None)  # the broker's shipped cluster user and password
    for start in (1, 2):
        last = cluster.log_tail(1).strip().splitlines()[-1:]  # where this start's lines begin
        cluster["B"].start(timeout=FORMATION)
        warnings = poll(lambda: DEFAULT_CREDENTIALS_WARNING.findall(lines_after(cluster.log_tail(100000), last)),
                        timeout=30, interval=0.5)
        assert warnings, (f"CLU-CRED-2: B started ({start} of 2) with the shipped default cluster "
                          f"credentials and logged no warning about them\n{cluster.log_tail(30)}")
        if start == 1:
            cluster.stop_broker("B")


# ----------------------------------------------------------------------------- reconnect attempts run out

@pytest.mark.spec("CLU-CC-RETRY-4")
def test_a_node_whose_reconnect_attempts_ran_out_gets_no_more_messages(clusters):
    cluster = clusters.get(GIVE_UP, disrupts=True)
    before, after = queue(), queue()
    with StompClients() as clients:
        for node in ("A", "B"):
            declare(clients, cluster[node], before)
            declare(clients, cluster[node], after)
        demand_crossed(cluster, before, ("A", "B"))  # STRICT: A knows B has both queues
        send_numbered(clients, cluster["A"], before, MESSAGES)
        split = wait_quiet_sizes(cluster, before, ("A", "B"), MESSAGES)
    assert split["B"] > 0, f"setup: under STRICT A should forward to B's queue before B goes down: {split}"
    given_up_before = log_matches(cluster, GIVEN_UP)
    cluster["B"].kill()
    time.sleep(GIVE_UP_WAIT)
    check_a_gave_b_up(cluster, given_up_before)
    with StompClients() as clients:
        send_numbered(clients, cluster["A"], after, MESSAGES)
        kept = wait_quiet_sizes(cluster, after, ("A",), MESSAGES)["A"]
    assert kept == MESSAGES, (
        f"CLU-CC-RETRY-4: B crashed and A's reconnect-attempts (1, 200 ms apart) ran out {GIVE_UP_WAIT:.0f} s ago, "
        f"so B is down for good and A should route nothing to it; A's own queue got {kept} of {MESSAGES} "
        f"(before the crash A kept {split['A']} and B got {split['B']})\n{cluster.log_tail(20)}")


@pytest.mark.spec("CLU-CC-RETRY-4")
def test_a_node_given_up_is_not_connected_to_again_when_it_returns(clusters):
    cluster = clusters.get(GIVE_UP, disrupts=True)
    given_up_before = None  # B crashed in the test before (see check_a_gave_b_up)
    if cluster["B"].running:  # run alone: crash B and let A's one reconnect attempt run out
        given_up_before = log_matches(cluster, GIVEN_UP)
        cluster["B"].kill()
        time.sleep(GIVE_UP_WAIT)
    check_a_gave_b_up(cluster, given_up_before)
    cluster["B"].start(timeout=FORMATION)  # serving again; not start_broker, which waits for every link
    missing = set(poll(cluster.missing_links, lambda m: ("A", "B") not in m, timeout=JOIN_WAIT, interval=0.5))
    assert ("A", "B") in missing, (
        f"CLU-CC-RETRY-4: A's reconnect-attempts to B (1) ran out, so B is down for good for A, yet A's cluster "
        f"connection to B came up again once B returned\n{cluster.log_tail(20)}")


# ----------------------------------------------------------------------------- explicit members, STRICT

@pytest.mark.spec("CLU-MEMBERS-1")
def test_explicit_members_connect_only_to_the_nodes_they_list(clusters):
    cluster = clusters.get(MEMBERS)
    destination = queue()
    with StompClients() as clients:
        for node in ("A", "B", "C"):
            declare(clients, cluster[node], destination)
        demand_crossed(cluster, destination, ("A", "B"))
        # and no probe for C: C's queue could only be announced to A over a link that must not
        # exist, so nothing can show it would have arrived; the room it would need
        settle()
        send_numbered(clients, cluster["A"], destination, MESSAGES)
        sizes = wait_quiet_sizes(cluster, destination, ("A", "B", "C"), MESSAGES)
    assert sizes["C"] == 0, (f"CLU-MEMBERS-1: A lists only B (allow-direct-connections-only), so under STRICT it "
                             f"must not connect to C, which it learns of through B, nor route to it: {sizes}")
    assert sizes["B"] > 0 and sizes["A"] + sizes["B"] == MESSAGES, \
        f"CLU-MEMBERS-1: under STRICT A should split its {MESSAGES} messages with its member B: {sizes}"


@pytest.mark.spec("CLU-LB-6")
def test_strict_forwards_nothing_to_a_node_without_the_queue(clusters):
    cluster = clusters.get(MEMBERS)  # B is connected to both A and C
    destination = queue()
    with StompClients() as clients:
        for node in ("A", "B"):
            declare(clients, cluster[node], destination)  # C never has the queue
        demand_crossed(cluster, destination, ("B", "A"))  # STRICT: B knows A has the queue
        send_numbered(clients, cluster["B"], destination, MESSAGES)
        sizes = wait_quiet_sizes(cluster, destination, ("A", "B", "C"), MESSAGES)
    assert sizes["C"] == 0, f"CLU-LB-6: C has no queue {destination}, yet under STRICT B routed to it: {sizes}"
    assert sizes["A"] > 0 and sizes["A"] + sizes["B"] == MESSAGES, \
        f"CLU-LB-6: under STRICT B should split its {MESSAGES} messages between its queue and A's: {sizes}"


# ----------------------------------------------------------------------------- pings and connection-ttl

def check_a_paused_nodes_link_is_given_up(cluster, *, check_period_ms: int, ttl_ms: int, paused_for: float,
                                          slack: float) -> None:
    """CLU-CC-PING-1 on a formed two-node cluster whose cluster connection runs with ``check_period_ms``
    and ``ttl_ms``: B is frozen for ``paused_for`` seconds; A's log must say it gave B's silent link
    up between ttl - check-period and ttl + check-period (+ ``slack`` s) after the pause, and once B
    resumes the link is formed again and carries messages."""
    earliest = (ttl_ms - check_period_ms) / 1000
    latest = (ttl_ms + check_period_ms) / 1000 + slack
    before = cluster.bridge_establishments()
    lines_before = set(expired_lines(cluster))
    expired_before = len(lines_before)
    cluster["B"].pause()
    paused_at, paused_wall = time.monotonic(), time.time()
    try:
        # A's own log is the signal (B, frozen, cannot be asked): the first line saying a link to B
        # went silent for the ttl, read every 0.1 s; watched until the latest allowed, so a late one
        # is measured (and reported with its number) rather than missed
        expired = poll(lambda: log_matches(cluster, TTL_EXPIRED), lambda n: n > expired_before,
                       timeout=paused_for, interval=0.1)
        noticed_after = time.monotonic() - paused_at if expired > expired_before else None
        time.sleep(max(0.0, paused_for - (time.monotonic() - paused_at)))  # no event to poll while B is frozen
    finally:
        cluster["B"].resume()
    # when A gave the link up is its log line's own time: noticing it costs a read of every node's
    # log, which on a loaded machine took the measurement 30 ms past the bound once (mj29: 3.53 s,
    # where the bound allows for A's check, not for the reading); a line without a time falls back
    # to when it was noticed (later than the give-up, never earlier)
    logged = [at for line in set(expired_lines(cluster)) - lines_before if (at := logged_at(line)) is not None]
    given_up_after = min(logged) - paused_wall if logged and noticed_after is not None else noticed_after
    said = TTL_EXPIRED.findall(cluster.log_tail(100000))[expired_before:expired_before + 1]
    print(f"CLU-CC-PING-1: A gave B's silent link up {given_up_after} s after B was paused (by its log line; "
          f"noticed after {noticed_after} s) "
          f"(check-period {check_period_ms} ms, connection-ttl {ttl_ms} ms): {said}")
    after = poll(cluster.bridge_establishments, lambda n: n > before, timeout=FORMATION, interval=0.5)
    assert after > before, (
        f"CLU-CC-PING-1: B was frozen {paused_for:.0f} s with connection-ttl {ttl_ms} ms and check-period "
        f"{check_period_ms} ms, so its silent link should have been given up and established again after it "
        f"resumed; cluster link establishments stayed at {before}\n{cluster.log_tail(20)}")
    cluster.wait_formed(FORMATION)
    destination = queue()
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"))
        send_numbered(clients, cluster["A"], destination, MESSAGES)
        got = bodies(drain(consumer))
    assert got, f"CLU-CC-PING-1: after the link was formed again A forwarded none of {MESSAGES} messages to B's consumer"
    # the timing last, so a broker late with it still has the outcome above checked
    assert given_up_after is not None, (
        f"CLU-CC-PING-1: A's log never said a link to B went silent for the connection-ttl "
        f"({ttl_ms} ms) within {paused_for:.1f} s of B being paused\n{cluster.log_tail(20)}")
    assert earliest <= given_up_after <= latest, (
        f"CLU-CC-PING-1: with connection-ttl {ttl_ms} ms and check-period {check_period_ms} ms A should "
        f"give B's silent link up between {earliest:.1f} s and {latest:.1f} s after B was paused; "
        f"it did after {given_up_after:.2f} s")


@pytest.mark.spec("CLU-CC-PING-1")
def test_a_paused_nodes_link_is_given_up_after_the_ttl_and_formed_again(clusters):
    check_a_paused_nodes_link_is_given_up(clusters.get(PINGED, disrupts=True), check_period_ms=PINGED_CHECK_PERIOD_MS,
                                          ttl_ms=PINGED_TTL_MS, paused_for=PAUSED_FOR, slack=GIVE_UP_SLACK)


@pytest.mark.spec("CLU-CC-PING-1")
# a bound, not a timing check: the default connection-ttl alone is 60 s, and the test took 95-112 s
# (main jobs, CI), close to the test run's default 120 s; the main job's suites have 300 s
@pytest.mark.timeout(300)
def test_by_default_a_paused_nodes_link_is_given_up_after_60_s(clusters):
    """The document's defaults, on DEFAULTS (whose configuration names neither option): check-period
    30 s and connection-ttl 60 s, so the give-up comes 30..90 s after the pause. The longest wait of
    the module, on its own worker; the cluster is the module's shared default one."""
    check_a_paused_nodes_link_is_given_up(
        clusters.get(DEFAULTS, disrupts=True), check_period_ms=CLUSTER_CONNECTION_DEFAULTS["check_period_ms"],
        ttl_ms=CLUSTER_CONNECTION_DEFAULTS["connection_ttl_ms"], paused_for=DEFAULT_PAUSED_FOR, slack=GIVE_UP_SLACK)
