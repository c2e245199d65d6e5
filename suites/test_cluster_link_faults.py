"""Cluster links that fail (artemis-clusters.md, "Configuring Cluster Connections":
use-duplicate-detection, initial-connect-attempts, retry-interval-multiplier and
max-retry-interval), on every target with ``topology.cluster``.

Every cluster here runs its links through the fault proxy (``"cluster"`` in ``proxied``,
`cluster_support.LinkFaults`): A's link to B dials a proxy in front of B, so the link alone can be
cut while the clients keep their connections to their nodes.

* DUP: two nodes, STRICT (A forwards to B's queue whatever its consumers), persistent, check-period
  0.5 s and connection-ttl 2 s. `stream_across_a_fault` holds B's answers on the A->B link while A
  keeps forwarding: B takes the forwards in, A never hears so, gives the link up and sends them
  again once it is back. Each receipted body must then be found exactly once on A and B together,
  after a link fault alone and after B was also killed and started again (its journal keeps the
  messages and the duplicate ids).
* INITIAL: two nodes, STRICT, initial-connect-attempts 2, 200 ms apart. A is started again while
  its link to B and B's to A are cut (the proxies closed: every attempt refused); once its two
  attempts are used up B is down for good for A: A does not connect to B when the links are
  healed and keeps every message sent to it although B has the queue. The waits are lower bounds
  far above the attempts' 400 ms: a slow machine can only make the test fail in vain.
* SPACED: two nodes, retry-interval 250 ms, multiplier 2, max-retry-interval left at its default
  (2 s). A's link to B is moved to an `AttemptRecorder` (a listener of the test's own that fails
  every attempt) and B is killed; the recorder notes when each of A's reconnect attempts arrives.
  The waits must start at the interval, grow by the multiplier and stop growing at the maximum. B is started again afterwards. The recorder
  drops each connection only once its opening request is complete, and counts only the link's
  own attempts: why both matter on Artemis (a 30 s stall, another connection to the same
  address) is in suites/attempt_recorder.py.
* RETRY_DEFAULTS: two nodes, no retry option set; recorded as SPACED, the waits must be the
  chapter's default retry-interval (500 ms) each (CLU-CC-RETRY-1). And started again as INITIAL is,
  cut off for `UNLIMITED_CUT` s: with initial-connect-attempts at its default (-1, without limit)
  A must connect to B once the links are healed (CLU-CC-RETRY-3).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import pytest

from suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    FORMATION, AttemptRecorder, StompClients, bodies, cluster_suite_marks, cluster_pool, clusters, declare, drain,
    parametrize_by_target, queue, demand_crossed, restarted_after, send_numbered, settle, stream_across_a_fault,
    wait_quiet_sizes)
from conformance.targets.runtime.probes import tcp_accepts
from machinery.waiting import poll
from conformance.topology import ClusterConnection, Topology

pytestmark = cluster_suite_marks()

DUP = Topology(("A", "B"), cluster=ClusterConnection(message_load_balancing="STRICT", check_period_ms=500,
                                                     connection_ttl_ms=2000),
               proxied=("cluster",), persistent=True, prefix="ccdup")
INITIAL = Topology(("A", "B"), cluster=ClusterConnection(message_load_balancing="STRICT", initial_connect_attempts=2,
                                                         retry_interval_ms=200, max_retry_interval_ms=200),
                   proxied=("cluster",), prefix="ccinit")
#: max-retry-interval not set: its default (2000 ms by the chapter) is part of CLU-CC-RETRY-2
SPACED = Topology(("A", "B"), cluster=ClusterConnection(retry_interval_ms=250, retry_interval_multiplier=2.0),
                  proxied=("cluster",), prefix="ccspaced")
#: CLU-CC-RETRY-2: max-retry-interval is 2000 ms unless configured (artemis-clusters.md, "Configuring
#: Cluster Connections"); SPACED leaves it unset, so the number asserted is the chapter's
DOCUMENTED_MAX_RETRY_INTERVAL_MS = 2000
#: messages sent to A before, during and after the fault (a third of them, on average, cross to B in each phase)
PER_PHASE = 60
#: seconds B's answers are held: beyond connection-ttl (2 s), so A gives the link up and retries.
#: Shortened from 8 s: the statement is about the resent forwards being dropped, not the ttl; 5 s is
#: still 2.5 times the ttl plus its check period
CUT_FOR = 5.0
MESSAGES = 12
#: seconds A runs with its link to B cut before it is healed. Shortened from 15 s: the statement is
#: about the two attempts being used up, not how soon; 2 attempts 200 ms apart fit 5 s many times over
GIVE_UP_WAIT = 5.0
#: seconds the healed link is watched for coming up all the same. Shortened from 20 s: the statement
#: is about the link never forming; one accepted forms within a retry or two (200 ms apart here)
JOIN_WAIT = 10.0
#: the bound (not a timing check) on a test that launches its two-node cluster, records `RECORD_FOR`
#: s and starts B again: Artemis took up to 89.5 s in a main job and ran past the test run's default
#: 120 s in CI while its cluster was still forming (the main job's suites have 300 s, as here)
RECORDING_BOUND_S = 300
#: seconds A's reconnect attempts are recorded: waits of 250, 500, 1000 ms and then 2000 ms, about
#: seven attempts. Not shortened: the cap is the subject, and a link whose waits grow without it (250,
#: 500, 1000, 2000, 4000 ms) makes its fifth wait only after 7.75 s; in a shorter window it would fail
#: the "again and again" setup check instead of the cap (tests/conformance/test_suite_can_fail.py)
RECORD_FOR = 10.0
#: CLU-CC-RETRY-1: retry-interval is 500 ms unless configured (artemis-clusters.md, "Configuring
#: Cluster Connections"); RETRY_DEFAULTS sets no retry option, so the broker's default is what runs
DOCUMENTED_RETRY_INTERVAL_MS = 500
RETRY_DEFAULTS = Topology(("A", "B"), cluster=ClusterConnection(), proxied=("cluster",), prefix="ccretrydef")
#: seconds A runs cut off from B on RETRY_DEFAULTS (CLU-CC-RETRY-3's default, -1: without limit):
#: some twenty of the default 500 ms retry intervals, so a small finite default would run out
UNLIMITED_CUT = 10.0
#: CLU-CC-RETRY-2's tolerance on each measured wait above the documented one: a wait runs from the
#: recorder dropping one attempt to the next attempt's opening (`Waits.shortest`), so it also holds
#: the broker noticing the drop, the proxy's accept and dial and the machine's scheduling delay.
#: (Set when the gaps were counted opening to opening, which also held the attempt's own round: the
#: opening exchange and the recorder's 50 ms hold, 60-170 ms on the reference broker; not raised.)
#: Kept below the smallest step of SPACED's waits (250 ms to 500 ms is 250 ms, then 500 and 1000 ms)
#: plus 200 ms: a broker that waits the cap from its first retry, or skips a step of the multiplier,
#: has a wait above its documented one plus the slack
ATTEMPT_SLACK_MS = 450


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def check_once_each(sent: list[str], got: dict[str, list[str]], what: str) -> None:
    counts = Counter(got["A"] + got["B"])
    twice = sorted(body for body, n in counts.items() if n > 1)
    missing = sorted(set(sent) - set(counts))
    stray = sorted(set(counts) - set(sent))
    crossed = [b for b in got["B"] if b.startswith("cut")]
    assert crossed, (f"setup: under STRICT A should have forwarded some of the messages sent during the fault to B; "
                     f"B's queue had {len(got['B'])}, none of them from the fault")
    assert not twice and not missing and not stray, (
        f"CLU-CC-DUP-1: {what}, A sent the forwards B had taken in again; with use-duplicate-detection (default "
        f"true) B must drop the copies, so each of the {len(sent)} receipted messages is found once on A and B "
        f"together: twice: {twice[:20]} ({len(twice)}), missing: {missing[:20]} ({len(missing)}), unexpected: "
        f"{stray[:20]}; A held {len(got['A'])}, B {len(got['B'])}")


def stream_and_check_once_each(clusters, *, crash_target: bool, what: str) -> None:
    """A fresh queue on A and B (no consumer), the stream across the fault, each body once."""
    cluster = clusters.get(DUP, disrupts=True)
    # the module's previous fault may have left A's bridge still retrying: start on a working link
    cluster.wait_formed(FORMATION)
    destination = queue()
    with StompClients() as clients:
        for node in ("A", "B"):
            declare(clients, cluster[node], destination)
    demand_crossed(cluster, destination, ("A", "B"))  # STRICT: A knows B has the queue
    sent, got = stream_across_a_fault(cluster, clusters.links, DUP, destination, per_phase=PER_PHASE,
                                      crash_target=crash_target, cut_for=CUT_FOR)
    check_once_each(sent, got, what)


@pytest.mark.spec("CLU-CC-DUP-1")
def test_forwards_sent_again_after_a_link_fault_are_delivered_once(clusters):
    stream_and_check_once_each(clusters, crash_target=False,
                               what=f"B's answers on the A->B link were held for {CUT_FOR:.0f} s")


@pytest.mark.spec("CLU-CC-DUP-1")
def test_forwards_sent_again_to_a_target_that_crashed_and_recovered_are_delivered_once(clusters):
    stream_and_check_once_each(clusters, crash_target=True,
                               what=f"B's answers on the A->B link were held for {CUT_FOR:.0f} s, then B was "
                                    "killed and started again")


# ----------------------------------------------------------------------------- initial-connect-attempts

def restart_a_while_both_links_are_cut(cluster, links, topology: Topology, cut_for: float) -> None:
    """A stopped and started again while its link to B and B's to A are cut (the proxies closed:
    every attempt refused), left so for ``cut_for`` s once A serves, then healed. Both links: with
    B's link alive, B reaches A as soon as A is back and announces itself, and whether that happened
    during the cut decided the outcome on Artemis (A's bridge to B then used up its initial
    attempts, AMQ222101; issue 19's runs, see the CLU-CC-RETRY-3 deviation). Unreachable here means
    unreachable both ways until the heal."""
    proxies = [links.proxy(topology, "A", "B"), links.proxy(topology, "B", "A")]
    cluster.stop_broker("A")
    for proxy in proxies:
        links.nemesis.invoke("partition", proxy=proxy, direction="both")  # the proxy stops listening: refused
    try:
        cluster["A"].start(timeout=FORMATION)  # serving; not start_broker, which waits for every link
        time.sleep(cut_for)  # no event to poll: A's attempts fail meanwhile
        # the cut was in effect while A tried: both links' proxies refuse connections and neither
        # link is up (a cut that did not hold lets A connect at once, which must not be booked as
        # the broker's doing)
        open_ports = [port for port in (links.dialled_port(topology, "A", "B"), links.dialled_port(topology, "B", "A"))
                      if tcp_accepts(port, 1.0)]
        up_during_cut = {("A", "B"), ("B", "A")} - set(cluster.missing_links())
        assert not open_ports and not up_during_cut, (
            f"setup: while A started both links should be cut: proxies still accepting on {open_ports}, links up "
            f"{sorted(up_during_cut)}\n{cluster.log_tail(20)}")
    finally:
        for proxy in proxies:
            links.nemesis.invoke("heal", proxy=proxy)


@pytest.mark.spec("CLU-CC-RETRY-3")
def test_a_node_not_reached_in_the_initial_attempts_gets_no_messages(clusters):
    cluster = clusters.get(INITIAL, disrupts=True)
    destination = queue()
    restart_a_while_both_links_are_cut(cluster, clusters.links, INITIAL, GIVE_UP_WAIT)
    missing = set(poll(cluster.missing_links, lambda m: ("A", "B") not in m, timeout=JOIN_WAIT, interval=0.5))
    with StompClients() as clients:
        for node in ("A", "B"):
            declare(clients, cluster[node], destination)
        # no probe: B's queue is announced to A over A's link to B only, which must stay down, so
        # nothing can show the announcement would have arrived; the room it would need
        settle()
        send_numbered(clients, cluster["A"], destination, MESSAGES)
    sizes = wait_quiet_sizes(cluster, destination, ("A", "B"), MESSAGES)
    assert sizes == {"A": MESSAGES, "B": 0}, (
        f"CLU-CC-RETRY-3: A started while B was unreachable and used up its initial-connect-attempts (2, 200 ms "
        f"apart), so B is down for good for A, which should route nothing to B's queue even under STRICT once B is "
        f"reachable again; A holds {sizes['A']}, B {sizes['B']} of {MESSAGES}\n{cluster.log_tail(20)}")
    assert ("A", "B") in missing, (
        f"CLU-CC-RETRY-3: A used up its initial-connect-attempts to B, yet its link to B came up once the link was "
        f"healed\n{cluster.log_tail(20)}")


@pytest.mark.spec("CLU-CC-RETRY-3")
def test_by_default_a_node_keeps_trying_to_reach_a_peer_unreachable_at_its_start(clusters):
    """The default half of CLU-CC-RETRY-3: initial-connect-attempts left unset is -1, without
    limit. A starts while B is unreachable and stays cut off for `UNLIMITED_CUT` s, some twenty of
    the default 500 ms retry intervals (a bound: a broker whose default allowed more attempts than
    that would pass); once the links are healed A's link to B comes up and A forwards to B's
    consumer."""
    cluster = clusters.get(RETRY_DEFAULTS, disrupts=True)
    destination = queue()
    restart_a_while_both_links_are_cut(cluster, clusters.links, RETRY_DEFAULTS, UNLIMITED_CUT)
    missing = set(poll(cluster.missing_links, lambda m: ("A", "B") not in m, timeout=FORMATION, interval=0.5))
    assert ("A", "B") not in missing, (
        f"CLU-CC-RETRY-3: with initial-connect-attempts left at its default (-1, without limit) A should go on "
        f"trying to reach B, unreachable for {UNLIMITED_CUT:.0f} s after A started, and connect once the link was "
        f"healed; A's link to B was still down {FORMATION:.0f} s after the heal\n{cluster.log_tail(20)}")
    cluster.wait_formed(FORMATION)  # B's link to A too: the cluster as the module's next test expects it
    with StompClients() as clients:
        declare(clients, cluster["A"], destination)
        consumer = clients.on(cluster["B"]).subscribe(destination, ack="auto")
        demand_crossed(cluster, destination, ("A", "B"))
        sent = send_numbered(clients, cluster["A"], destination, MESSAGES)
        got = bodies(drain(consumer))
    assert got, (f"CLU-CC-RETRY-3: A's link to B came up after the heal, yet B's consumer got none of the {len(sent)} "
                 f"messages sent to A (ON_DEMAND, the only consumer on B)\n{cluster.log_tail(20)}")


# ----------------------------------------------------------------------------- retry-interval-multiplier, max

@dataclass(frozen=True)
class Waits:
    """A's waits before its reconnect attempts, in ms, as the chapter counts them: the first from
    the loss to the first attempt, then one between each two attempts. The loss is the diversion
    dropping the link's connection, somewhere inside the proxy call that moves its upstream; that
    call can take hundreds of ms on a loaded machine (CI: a first wait of 342 ms measured from the
    call's end, where the broker's own was 500). So the first wait is known within that call:
    ``longest`` counts it from before the call, ``shortest`` from after. A check that a wait is too
    short uses ``longest``, one that it is too long uses ``shortest``: neither can then blame the
    broker for the proxy call's time. The later waits are known within the failed attempt's own
    round in the same way: ``longest`` counts from one attempt's opening to the next's,
    ``shortest`` from the recorder dropping the earlier attempt (`AttemptRecorder.waits_after_drops`).
    The round is the broker answering the recorder, then the recorder's hold: ~60 ms on Artemis here,
    idle or beside three busy loops (drop to next attempt 503, 1007, 2006 ms; opening to opening
    562, 1068, 2064 ms). In two main jobs of thirteen the opening-to-opening gaps ran 530-650 ms
    over the chapter's waits (mj42: 1030 ms, mj54: 1146 ms for its 500): a failure names both
    series, so the part that grew, the broker's handling of the attempt or its wait, shows."""
    longest: list[int]
    shortest: list[int]


def record_reconnect_waits(clusters, topology: Topology):
    """Divert A's link to B to an `AttemptRecorder`, kill B, record `RECORD_FOR` s, start B again.
    Returns (cluster, the link's attempts, the `Waits`, when the recording ended, the recorder's
    description)."""
    cluster = clusters.get(topology, disrupts=True)
    with AttemptRecorder() as recorder, restarted_after(cluster, "B"):
        diverting = time.monotonic()
        with clusters.links.diverted(topology, "A", "B", recorder.address):
            diverted = time.monotonic()  # the diversion dropped the link's connection by now: the loss
            # B "is being rebooted" (the chapter's case): with B itself alive its link to A
            # keeps telling A that B is up, and Artemis's bridge then stopped retrying after
            # one or two attempts in some runs; with B down it retries steadily
            cluster["B"].kill()
            time.sleep(RECORD_FOR)  # no event to poll: A's attempts arrive meanwhile
            ended = time.monotonic()
    # read once the recorder is closed: every connection it took is then noted with its opening;
    # only the link's own attempts count (`attempt_recorder.LINK_OPENINGS`): an Artemis node's
    # cluster controller reconnects its own topology connection to the same proxy
    attempts = recorder.link_attempts()

    def from_loss(lost: float, between: list[float]) -> list[int]:
        return [round(w * 1000) for w in ([attempts[0].at - lost] if attempts else []) + between]

    waits = Waits(longest=from_loss(diverting, recorder.gaps()),
                  shortest=from_loss(diverted, recorder.waits_after_drops()))
    return cluster, attempts, waits, ended, f"every connection: {recorder.describe()}"


@pytest.mark.spec("CLU-CC-RETRY-2")
@pytest.mark.timeout(RECORDING_BOUND_S)
def test_reconnect_attempts_are_spaced_by_the_multiplier_up_to_the_maximum(clusters):
    cc = SPACED.cluster
    cap = DOCUMENTED_MAX_RETRY_INTERVAL_MS
    cluster, attempts, waits, ended, seen = record_reconnect_waits(clusters, SPACED)
    gaps = shown = waits.shortest
    print(f"CLU-CC-RETRY-2: from the loss to A's first reconnect attempt, then from each drop to the next attempt: "
          f"{shown} ms; from the diversion call's start, then opening to opening: {waits.longest} ms")
    assert attempts, (f"setup: no attempt of A's link to B reached the recorder in {RECORD_FOR:.0f} s ({seen})\n"
                      f"{cluster.log_tail(20)}")
    # The link reached the recorder, so from then on a silence is the broker's: the waits are
    # capped at max-retry-interval, so a silence of three times the cap is a link that stopped
    # retrying (Artemis: a bridge whose connection dropped during its set-up waits its 30 s
    # call-timeout; suites/attempt_recorder.py)
    silent = ended - attempts[-1].at
    assert silent < 3 * cap / 1000, (
        f"CLU-CC-RETRY-2: max-retry-interval {cap} ms caps the wait between reconnect "
        f"attempts, yet after {len(attempts)} attempts (gaps {shown} ms) A's link made none for the last "
        f"{silent:.1f} s of the {RECORD_FOR:.0f} s recorded ({seen})\n{cluster.log_tail(20)}")
    # what the chapter gives: the n-th wait is retry-interval x multiplier^n, capped at max-retry-interval
    expected = [min(cc.retry_interval_ms * cc.retry_interval_multiplier ** n, cap)
                for n in range(len(gaps))]
    # A lower bound (80 % of each wait) only a broker that waits less can miss; a loaded machine
    # only lengthens the gaps (the first counted from before the diversion: `Waits`)
    short = [(n, got, want) for n, (got, want) in enumerate(zip(waits.longest, expected)) if got < 0.8 * want]
    assert not short, (
        f"CLU-CC-RETRY-2: with retry-interval {cc.retry_interval_ms} ms and retry-interval-multiplier "
        f"{cc.retry_interval_multiplier:g} the waits between A's reconnect attempts should grow to "
        f"{[round(w) for w in expected]} ms; gaps {waits.longest} ms (too short: (n, got, expected) {short})")
    # The growth itself: each wait below the cap is the documented one plus `ATTEMPT_SLACK_MS` (the
    # broker noticing the drop, connecting, scheduling), so a broker that starts at the maximum, or skips a
    # step of the multiplier, is too slow on a first gap (250 + 450 < 500 + 450 < 1000 + 450 < 2000)
    growing = [(n, got, want) for n, (got, want) in enumerate(zip(shown, expected))
               if want < cap and got > want + ATTEMPT_SLACK_MS]
    assert not growing, (
        f"CLU-CC-RETRY-2: with retry-interval {cc.retry_interval_ms} ms and retry-interval-multiplier "
        f"{cc.retry_interval_multiplier:g} the first waits between A's reconnect attempts should be "
        f"{[round(w) for w in expected if w < cap]} ms, then {cap} ms; "
        f"waits from each drop {shown} ms (too long: (n, got, expected) {growing}; opening to opening "
        f"{waits.longest} ms)")
    # the cap needs several waits to judge (the waits above need only the first few, so a broker
    # that waits too long from the start is named for that, not for making few attempts)
    assert len(gaps) >= 5, (f"setup: A should have tried to reach B again and again in {RECORD_FOR:.0f} s; "
                            f"{len(attempts)} attempts of the link recorded (gaps {shown} ms; {seen})\n"
                            f"{cluster.log_tail(20)}")
    # The cap: the capped gaps' median is the maximum plus the same slack (the median, so one
    # attempt delayed by the machine does not decide; an uncapped broker's waits go on doubling)
    capped = sorted(shown[n] for n, want in enumerate(expected) if want >= cap)
    assert capped and capped[len(capped) // 2] <= cap + ATTEMPT_SLACK_MS, (
        f"CLU-CC-RETRY-2: max-retry-interval {cap} ms caps the wait between reconnect "
        f"attempts, yet the gaps kept growing: {shown} ms")


# ----------------------------------------------------------------------------- retry-interval by default

@pytest.mark.spec("CLU-CC-RETRY-1")
@pytest.mark.timeout(RECORDING_BOUND_S)
def test_reconnect_attempts_are_spaced_by_the_default_retry_interval(clusters):
    """CLU-CC-RETRY-1's number: with no retry option set, A waits retry-interval (500 ms by the
    chapter) before each attempt; the multiplier (1) and the cap (2000 ms) keep it there. The
    numbers are the chapter's, not the option model's: the cluster sets none of them."""
    cluster, attempts, measured, ended, seen = record_reconnect_waits(clusters, RETRY_DEFAULTS)
    waits = measured.shortest
    print(f"CLU-CC-RETRY-1: from the loss to A's first reconnect attempt, then from each drop to the next attempt: "
          f"{waits} ms; from the diversion call's start, then opening to opening: {measured.longest} ms")
    assert len(attempts) >= 5, (f"setup: A should have tried to reach B again and again in {RECORD_FOR:.0f} s; "
                                f"{len(attempts)} attempts of the link recorded (waits {waits} ms; {seen})\n"
                                f"{cluster.log_tail(20)}")
    # each wait at least 80 % of the interval (a loaded machine only lengthens them; the first
    # counted from before the diversion, `Waits`), and their median, counted from each drop, the
    # interval plus the broker's noticing, connecting and scheduling (`ATTEMPT_SLACK_MS`): the median, so one attempt the machine delayed
    # does not decide
    short = [(n, got) for n, got in enumerate(measured.longest) if got < 0.8 * DOCUMENTED_RETRY_INTERVAL_MS]
    median = sorted(waits)[len(waits) // 2]
    assert not short and median <= DOCUMENTED_RETRY_INTERVAL_MS + ATTEMPT_SLACK_MS, (
        f"CLU-CC-RETRY-1: with retry-interval left at its default ({DOCUMENTED_RETRY_INTERVAL_MS} ms, multiplier 1) "
        f"A should wait {DOCUMENTED_RETRY_INTERVAL_MS} ms before each reconnect attempt; waits {waits} ms (median "
        f"{median}, too short: {short}; {seen})")
