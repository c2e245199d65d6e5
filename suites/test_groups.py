"""Message groups on one broker, checked against the Artemis "Message Grouping" chapter
(../shared/spec/artemis-message-grouping.md, cited as AMG + section; statements in
conformance/spec/groups.toml).

Messages are told apart by their body, ``"<group>:<n>"``: ActiveMQ Classic 5.17 does not echo
JMSXGroupID on STOMP MESSAGE frames (REFERENCES.md), so the echoed header cannot be relied on.

Timing: a positive expectation waits up to RECEIVE_TIMEOUT (only a failing run waits that long).
"Nothing more arrives" is checked with a barrier where an ordered path reaches the consumer in
question (conformance.waiting: a marker in a group the consumer owns, sent after the messages of
interest by the same producer, see `barrier`); the quiet window (conformance.waiting.QUIET) stays
only where none does - a consumer that owns no group, or one whose prefetch is full - and each such
use says why.
"""

from __future__ import annotations

import random
from typing import Iterable

import pytest

from conformance.clients import Received, Subscription
from conformance.scenario import DestinationPolicy, Scenario
from conformance.waiting import (QUIET, is_marker, new_marker, receive_until_each_marked, receive_until_marker,
                                 receive_until_markers)
from machinery.waiting import poll

RECEIVE_TIMEOUT = 5.0
FIRST_KEY = "JMSXGroupFirstForConsumer"

# One broker per target for the module; each test picks destinations under these patterns.
# group-buckets 0 is not among them: ActiveMQ's launcher refuses it (Classic cannot turn grouping
# off), which would stop the whole module there; tests that need it create their queue with the
# destination parameter ?group-buckets=0 instead (AMG "Group Buckets", GRP-SETTINGS-1).
SCENARIO = Scenario(name="groups", policies=(
    DestinationPolicy("queue://grp.rebalance.>", group_rebalance=True),
    DestinationPolicy("queue://grp.first.>", group_first_key=FIRST_KEY),
    DestinationPolicy("queue://grp.buckets1.>", group_buckets=1),
    DestinationPolicy("queue://grp.buckets7.>", group_buckets=7),
    DestinationPolicy("queue://grp.bucketsall.>", group_buckets=-1),
    # GRP-SETTINGS-2: two matching settings for queues under grp.merge.one.>: the broad one sets
    # the first key and 7 buckets, the specific one 1 bucket only
    DestinationPolicy("queue://grp.merge.>", group_first_key=FIRST_KEY, group_buckets=7),
    DestinationPolicy("queue://grp.merge.one.>", group_buckets=1),
))
#: groups sent to the merged-settings queue: with the broad setting's 7 buckets instead of the
#: specific one's 1 they would all share one owner only if all 12 ids hashed into one bucket
#: (each new bucket goes to the next consumer); for a hash spreading ids evenly that is 7 ** -11
MERGE_GROUPS = 12


# --------------------------------------------------------------------------- helpers


def gather(subs: dict[str, Subscription], total: int, via: tuple | None = None, groups=(),
           timeout: float = RECEIVE_TIMEOUT, *, read_again: Iterable[str] = ()) -> dict[str, list[Received]]:
    """What each subscription receives until ``total`` messages arrived overall (or the timeout),
    plus anything more still on its way - so duplicates and strays show up too: with ``via`` =
    (producer, queue) through `barrier` (markers in ``groups``); without, every consumer is
    watched for the quiet window (the caller says why no barrier serves).

    ``read_again`` names consumers never watched for the quiet window (a marker still serves where
    one reaches them): the caller reads their inbox again later with a check of exactly what
    arrives there first, which sees anything that arrived meanwhile (the caller says why)."""
    got: dict[str, list[Received]] = {name: [] for name in subs}

    def receive_round() -> int:  # the receive timeouts are the polling interval
        for name, sub in subs.items():
            message = sub.receive(0.02)
            if message is not None:
                got[name].append(message)
        return sum(map(len, got.values()))

    poll(receive_round, lambda n: n >= total, timeout=timeout, interval=0)
    if via is None:
        for name, sub in subs.items():
            if name not in read_again:
                got[name].extend(sub.drain(QUIET))
    else:
        barrier(subs, got, *via, groups, read_again=read_again)
    return got


def barrier(subs: dict[str, Subscription], got: dict[str, list[Received]], producer, queue: str,
            groups, read_again: Iterable[str] = ()) -> None:
    """Add to ``got`` whatever is still on its way to each consumer, waiting for a fact where one
    exists: each consumer that received a message of one of ``groups`` is sent a marker in that
    group (the one of its last such message), by the test's producer, after all the test's
    messages. The group's owner gets the marker (AMG "Message Grouping"), and the queue hands its
    messages out in order, so once a marker is in, nothing sent before it is still on its way to
    the consumer that got it - the messages of other groups included, as long as nobody lacks room
    (callers give their consumers prefetch to spare, so no message is passed over for a busy
    owner). Each consumer is judged by the markers it actually got, wherever the broker sent them.

    A consumer that got no marker (it received no grouped message, so it owns no group, or its
    marker went elsewhere) has no ordered path leading to it: that one is watched for the quiet
    window, unless it is in ``read_again`` (see `gather`). Markers are never returned."""
    markers = []
    for name, messages in got.items():
        last = next((group_of(m.text) for m in reversed(messages) if group_of(m.text) in groups), None)
        if last is not None:
            marker = new_marker(f"{last}:")
            producer.send(queue, marker, group_id=last)
            markers.append(marker)
    more, seen = receive_until_markers(subs, markers, timeout=RECEIVE_TIMEOUT,
                                       describe=f"barrier markers {markers} (one per consumer, in a group it owns)")
    for name, sub in subs.items():
        got[name].extend(more[name])
        if not seen[name] and name not in read_again:
            # No marker reached this consumer (it owns no group): nothing on an ordered path
            # can tell that no stray is still coming to it, so the quiet window stays for it.
            got[name].extend(m for m in sub.drain(QUIET) if not is_marker(m.text))


def texts(got: dict[str, list[Received]]) -> dict[str, list[str]]:
    return {name: [m.text for m in messages] for name, messages in got.items()}


def group_of(body: str) -> str:
    return body.partition(":")[0]


def holders(got: dict[str, list[str]], group: str) -> set[str]:
    """The consumers that received at least one message of ``group``."""
    return {name for name, bodies in got.items() if any(group_of(b) == group for b in bodies)}


def owner_of(got: dict[str, list[str]], group: str, spec: str) -> str:
    found = holders(got, group)
    assert len(found) == 1, f"{spec}: group {group} reached {sorted(found) or 'no consumer'}: {got}"
    return next(iter(found))


def two_consumers(client, queue: str, **options) -> dict[str, Subscription]:
    """Consumers A and B on one queue, each on its own connection, subscribed in that order."""
    return {name: client().subscribe(queue, **options) for name in ("A", "B")}


def nothing_more(sub: Subscription) -> list[str]:
    """What reaches ``sub`` within the quiet window - only for a consumer no barrier reaches
    (each caller says why)."""
    return [m.text for m in sub.drain(QUIET)]


def up_to_marker(sub: Subscription, producer, queue: str, group: str) -> list[str]:
    """What reaches ``sub``, the owner of ``group``, before a marker in ``group`` sent now by
    ``producer`` (the test's own, so the marker is behind its messages; the owner must have room)."""
    marker = new_marker(f"{group}:")
    producer.send(queue, marker, group_id=group)
    return [m.text for m in receive_until_marker(sub, marker, timeout=RECEIVE_TIMEOUT)]


def first_flag(message: Received) -> bool:
    """The group-first-key header as the consumer sees it (STOMP header / AMQP application
    property); absent means not flagged."""
    value = message.properties.get(FIRST_KEY, message.headers.get(FIRST_KEY))
    return str(value).lower() == "true" if value is not None else False


# --------------------------------------------------------------------------- pinning and order


@pytest.mark.spec("GRP-PIN-1", "GRP-PROP-1")
@pytest.mark.requires("groups")
@pytest.mark.protocols("stomp", "amqp")
def test_group_pinned_to_one_consumer(broker, client, dest, protocol):
    """AMG "Message Grouping": every message of a group goes to one consumer, however many the
    queue has, and the group stays there after everything was acknowledged."""
    q = dest("queue", "grp.pin")
    subs = {name: client().subscribe(q, prefetch=100) for name in ("A", "B", "C")}
    producer = client()
    groups = ["IBM", "MSFT", "ORCL", "SUNW"]
    for i in range(6):
        for g in groups:
            producer.send(q, f"{g}:{i}", group_id=g)
    got = texts(gather(subs, 24, (producer, q), groups))
    assert sorted(b for bodies in got.values() for b in bodies) == sorted(f"{g}:{i}" for g in groups for i in range(6)), \
        f"GRP-PIN-1: expected each of the 24 grouped messages exactly once: {got}"
    owners = {g: owner_of(got, g, "GRP-PIN-1") for g in groups}

    # Auto-acknowledged already: pinning outlives acknowledgement.
    for i in range(6, 9):
        for g in groups:
            producer.send(q, f"{g}:{i}", group_id=g)
    later = texts(gather(subs, 12, (producer, q), groups))
    for g in groups:
        assert holders(later, g) == {owners[g]}, (
            f"GRP-PIN-1: group {g} was pinned to {owners[g]} but later messages went to "
            f"{sorted(holders(later, g))}: {later}")


@pytest.mark.spec("GRP-PIN-1")
@pytest.mark.requires("groups")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_ungrouped_messages_are_not_pinned(broker, client, dest):
    """AMG "Message Grouping" (control): pinning is for messages with a group id; ungrouped
    messages go to whichever consumer has room. Each consumer has room for 2 unacknowledged
    messages and G:0 takes one slot of its owner, so u:0..u:2 can only all be delivered if
    they are spread over both consumers - as they must be, with nothing acknowledged."""
    q = dest("queue", "grp.ungrouped")
    subs = two_consumers(client, q, ack="client-individual", prefetch=2)
    producer = client()
    producer.send(q, "G:0", group_id="G")
    for i in range(3):
        producer.send(q, f"u:{i}")
    unacknowledged = gather(subs, 4, read_again=subs)  # read again below, after a barrier
    got = texts(unacknowledged)
    ungrouped = {name: [b for b in bodies if group_of(b) == "u"] for name, bodies in got.items()}
    # Both consumers are full (2 unacknowledged each), so no marker can reach either before an
    # acknowledgement. What arrived without one is judged above (`ungrouped`); now everything is
    # acknowledged and ungrouped markers go out one at a time until each consumer got one: any
    # duplicate or stray, still queued or on its way, arrives before its consumer's marker.
    for name, messages in unacknowledged.items():
        for message in messages:
            subs[name].ack(message)
    more, seen = receive_until_each_marked(subs, lambda body: producer.send(q, body), limit=8)
    for name, sub in subs.items():
        got[name] += [m.text for m in more[name]]
        if not seen[name]:  # the markers all went elsewhere: nothing ordered reaches this one
            got[name] += nothing_more(sub)
    everything = sorted(b for bodies in got.values() for b in bodies if group_of(b) == "u")
    assert sorted(b for bodies in ungrouped.values() for b in bodies) == ["u:0", "u:1", "u:2"] == everything, (
        f"GRP-PIN-1: the three ungrouped messages should all be delivered (there is room for them), "
        f"each once, without any acknowledgement: {got}")
    assert all(ungrouped.values()), f"GRP-PIN-1: ungrouped messages were kept to one consumer: {got}"


@pytest.mark.spec("GRP-ORDER-1", "GRP-PIN-1")
@pytest.mark.requires("groups")
@pytest.mark.protocols("stomp", "amqp")
def test_messages_of_a_group_arrive_in_send_order(broker, client, dest, protocol):
    """AMG "Message Grouping": a group exists to be processed serially by one consumer. With a
    small prefetch the broker dispatches each group in many rounds while the consumers
    acknowledge; every group must still arrive complete and in the order it was sent."""
    q = dest("queue", "grp.order")
    subs = two_consumers(client, q, ack="client-individual", prefetch=2)
    producer = client()
    groups, per_group = ["G1", "G2", "G3"], 8
    for i in range(per_group):
        for g in groups:
            # JMS numbers a group's messages from 1 (JMSXGroupSeq); positive numbers close nothing.
            producer.send(q, f"{g}:{i}", group_id=g, group_seq=i + 1)
    received: dict[str, list[Received]] = {name: [] for name in subs}

    def receive_round() -> int:  # the receive timeouts are the polling interval
        for name, sub in subs.items():
            message = sub.receive(0.02)
            if message is not None:
                received[name].append(message)
                sub.ack(message)
        return sum(map(len, received.values()))

    poll(receive_round, lambda n: n >= len(groups) * per_group, timeout=2 * RECEIVE_TIMEOUT, interval=0)
    # Everything received was acknowledged, so each owner has room for its marker.
    barrier(subs, received, producer, q, groups)
    got = texts(received)
    for g in groups:
        owner = owner_of(got, g, "GRP-PIN-1")
        sequence = [b for b in got[owner] if group_of(b) == g]
        assert sequence == [f"{g}:{i}" for i in range(per_group)], (
            f"GRP-ORDER-1: group {g} reached {owner} as {sequence}, not complete in send order")


# --------------------------------------------------------------------------- owner closes


@pytest.mark.spec("GRP-REASSIGN-1", "GRP-ORDER-1")
@pytest.mark.requires("groups", "groups.reassign_on_close")
@pytest.mark.protocols("stomp", "amqp")
@pytest.mark.parametrize("how", ["unsubscribe", "disconnect"])
def test_group_moves_to_another_consumer_when_owner_closes(broker, client, dest, protocol, how):
    """AMG "Message Grouping": when the owner closes, another consumer is chosen and gets all
    of the group's messages from then on - the old owner's unacknowledged ones included."""
    q = dest("queue", "grp.reassign")
    connections = {name: client() for name in ("A", "B")}
    subs = {name: c.subscribe(q, ack="client-individual", prefetch=10) for name, c in connections.items()}
    producer = client()
    for i in range(3):
        producer.send(q, f"G:{i}", group_id="G")
    # Only G's owner gets a marker; the other consumer's inbox is read again by `moved` below,
    # which expects exactly G:1..G:5 first, so anything that reached it meanwhile shows there.
    first = gather(subs, 3, (producer, q), ["G"], read_again=subs)
    owner = owner_of(texts(first), "G", "GRP-PIN-1")
    other = "B" if owner == "A" else "A"
    assert texts(first)[owner] == ["G:0", "G:1", "G:2"], f"GRP-ORDER-1: {texts(first)}"
    subs[owner].ack(first[owner][0])
    if how == "unsubscribe":
        subs[owner].close()
    else:
        connections[owner].close()

    for i in range(3, 6):
        producer.send(q, f"G:{i}", group_id="G")
    # The marker in G follows G:5 to G's new owner; the old owner's G:1, G:2 went back to the
    # queue when it closed, before G:3 was sent, so they are ahead of it too.
    moved = up_to_marker(subs[other], producer, q, "G")
    assert moved == [f"G:{i}" for i in range(1, 6)], (
        f"GRP-REASSIGN-1: after owner {owner} closed ({how}) the other consumer should get the unacknowledged "
        f"G:1, G:2 and then G:3..G:5, in order; it got {moved}")


# --------------------------------------------------------------------------- closing a group



def _fill_owner(client, q: str, producer, third_seq: int | None):
    """A and B with room for 3 unacknowledged messages each; G:1, G:2, G:3 (the third with
    JMSXGroupSeq ``third_seq``) go to the group's owner and fill it.
    Returns (subs, owner, other, the owner's messages)."""
    subs = two_consumers(client, q, ack="client-individual", prefetch=3)
    producer.send(q, "G:1", group_id="G")
    producer.send(q, "G:2", group_id="G")
    producer.send(q, "G:3", group_id="G", group_seq=third_seq)
    # No marker can reach either consumer (the owner is full, the other owns no group), and none is
    # needed here: both callers read both inboxes again with a check of exactly what comes first
    # (G:4 on the consumer that should get it) or a quiet window, so anything that arrived
    # meanwhile - a stray or a duplicate - shows there.
    got = gather(subs, 3, read_again=subs)
    owner = owner_of(texts(got), "G", "GRP-PIN-1")
    assert texts(got)[owner] == ["G:1", "G:2", "G:3"], (
        f"GRP-PIN-1: the owner should get the group's first three messages, in order: {texts(got)}")
    return subs, owner, "B" if owner == "A" else "A", got[owner]


@pytest.mark.spec("GRP-CLOSE-1")
@pytest.mark.requires("groups", "groups.close")
@pytest.mark.protocols("stomp", "amqp")
def test_negative_sequence_closes_the_group(broker, client, dest, protocol):
    """AMG "Closing a Message Group": JMSXGroupSeq -1 closes the group; the closing message still
    goes to the owner, and the next message of the group is assigned afresh - so it must go to
    the idle consumer, since the old owner has no room left."""
    q = dest("queue", "grp.close")
    producer = client()
    subs, owner, other, _held = _fill_owner(client, q, producer, third_seq=-1)
    producer.send(q, "G:4", group_id="G")
    message = subs[other].receive(RECEIVE_TIMEOUT)
    assert message is not None and message.text == "G:4", (
        f"GRP-CLOSE-1: after G:3 closed the group (JMSXGroupSeq -1), G:4 should be assigned afresh to the "
        f"idle consumer {other} while {owner} is full; {other} got {message and message.text!r}")
    # Quiet window: the old owner is full (3 unacknowledged), so no marker could reach it.
    assert nothing_more(subs[owner]) == [], f"GRP-CLOSE-1: {owner} must not get G:4 as well"


@pytest.mark.spec("GRP-CLOSE-1", "GRP-PIN-1")
@pytest.mark.requires("groups", "groups.close")
@pytest.mark.protocols("stomp", "amqp")
def test_without_negative_sequence_the_group_waits_for_its_busy_owner(broker, client, dest, protocol):
    """AMG "Message Grouping" / "Closing a Message Group" (control for the test above): a
    positive JMSXGroupSeq closes nothing, so G:4 waits for its full owner while the other
    consumer idles, and follows on the owner as soon as it has room."""
    q = dest("queue", "grp.noclose")
    producer = client()
    subs, owner, other, held = _fill_owner(client, q, producer, third_seq=3)
    producer.send(q, "G:4", group_id="G")
    # Quiet window: the idle consumer owns no group, and an ungrouped marker would wait behind
    # G:4 at the head of the queue (GRP-HOL-1), so nothing ordered can reach it.
    assert nothing_more(subs[other]) == [], (
        f"GRP-PIN-1: G:4 went to the idle {other} although group G is pinned to {owner} and was never closed")
    subs[owner].ack(held[0])
    message = subs[owner].receive(RECEIVE_TIMEOUT)
    assert message is not None and message.text == "G:4", (
        f"GRP-PIN-1: once {owner} had room again, G:4 should follow there; got {message and message.text!r}")


# --------------------------------------------------------------------------- group-first-key


@pytest.mark.spec("GRP-FIRST-1")
@pytest.mark.requires("groups", "groups.first_key")
@pytest.mark.protocols("stomp", "amqp")
def test_first_message_of_a_group_for_a_consumer_is_flagged(broker, client, dest, protocol):
    """AMG "Notifying Consumer of Group Ownership change": with group-first-key set, the first
    message of a group a consumer is given carries the key = true; later ones do not; when the
    group moves to another consumer, its first message there is flagged again."""
    q = dest("queue", "grp.first")
    subs = two_consumers(client, q, ack="client-individual", prefetch=10)
    producer = client()
    for body, group in (("GA:1", "GA"), ("GB:1", "GB"), ("GA:2", "GA"), ("u:1", None), ("GB:2", "GB")):
        producer.send(q, body, group_id=group)
    got = gather(subs, 5, (producer, q), ["GA", "GB"])  # the markers are acknowledged, so GA's move takes none
    flags = {m.text: first_flag(m) for messages in got.values() for m in messages}
    assert flags == {"GA:1": True, "GB:1": True, "GA:2": False, "u:1": False, "GB:2": False}, (
        f"GRP-FIRST-1: {FIRST_KEY} should be true exactly on each group's first message to its consumer: {flags}")

    owner = owner_of(texts(got), "GA", "GRP-PIN-1")
    other = "B" if owner == "A" else "A"
    for message in got[owner]:
        if group_of(message.text) != "GA":
            subs[owner].ack(message)
    subs[owner].close()  # its unacknowledged GA:1, GA:2 move to the other consumer
    moved = subs[other].receive_n(2, RECEIVE_TIMEOUT)
    assert [(m.text, first_flag(m)) for m in moved] == [("GA:1", True), ("GA:2", False)], (
        f"GRP-FIRST-1: after the owner closed, GA's first message on {other} should be flagged again: "
        f"{[(m.text, first_flag(m)) for m in moved]}")


@pytest.mark.spec("GRP-FIRST-1", "GRP-SETTINGS-1")
@pytest.mark.requires("groups", "groups.first_key")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_no_first_flag_without_group_first_key(broker, client, dest):
    """AMG "Notifying Consumer..." ("by default ... off"): with no group-first-key configured no
    message carries the flag."""
    q = dest("queue", "grp.plain")
    subs = two_consumers(client, q, prefetch=10)
    producer = client()
    for i in range(4):
        producer.send(q, f"G{i % 2}:{i}", group_id=f"G{i % 2}")
    got = gather(subs, 4, (producer, q), ["G0", "G1"])
    flagged = [m.text for messages in got.values() for m in messages if FIRST_KEY in m.properties or FIRST_KEY in m.headers]
    assert sum(map(len, got.values())) == 4 and flagged == [], (
        f"GRP-FIRST-1: {FIRST_KEY} appeared without group-first-key being set: {flagged}; {texts(got)}")


# --------------------------------------------------------------------------- group-rebalance


@pytest.mark.spec("GRP-REBAL-1")
@pytest.mark.requires("groups", "groups.rebalance")
@pytest.mark.protocols("stomp", "amqp")
def test_adding_a_consumer_rebalances_groups_despite_in_flight_messages(broker, client, dest, protocol):
    """AMG "Rebalancing Message Groups" (Automatically, and the note on the split moment): with
    group-rebalance, a consumer joining resets the groups; G:1 already in flight stays with A
    while G:2 goes to the newcomer B, so two consumers hold messages of G at once; B keeps G."""
    q = dest("queue", "grp.rebalance")
    a = client().subscribe(q, ack="client-individual", prefetch=1)
    producer = client()
    producer.send(q, "G:1", group_id="G")
    g1 = a.receive(RECEIVE_TIMEOUT)
    assert g1 is not None and g1.text == "G:1", f"GRP-PIN-1: the only consumer should get G:1, got {g1}"
    b = client().subscribe(q, ack="client-individual", prefetch=10)
    producer.send(q, "G:2", group_id="G")
    g2 = b.receive(RECEIVE_TIMEOUT)
    assert g2 is not None and g2.text == "G:2", (
        f"GRP-REBAL-1: after B joined, the reset group G should go to B while A still holds G:1 "
        f"unacknowledged; B got {g2 and g2.text!r}")
    producer.send(q, "G:3", group_id="G")
    a.ack(g1)
    rest_b = up_to_marker(b, producer, q, "G")
    # Quiet window for A: after the rebalance it owns no group, so no ordered path reaches it.
    assert rest_b == ["G:3"] and nothing_more(a) == [], (
        f"GRP-REBAL-1: B owns G after the rebalance and should get G:3 (A nothing); B got {rest_b}")


@pytest.mark.spec("GRP-REBAL-1")
@pytest.mark.requires("groups", "groups.rebalance")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_without_rebalance_a_new_consumer_takes_no_group(broker, client, dest):
    """AMG "Rebalancing Message Groups" (default false), control for the test above: the group
    stays with its busy owner A; the newcomer B gets nothing of it."""
    q = dest("queue", "grp.norebalance")
    a = client().subscribe(q, ack="client-individual", prefetch=1)
    producer = client()
    producer.send(q, "G:1", group_id="G")
    g1 = a.receive(RECEIVE_TIMEOUT)
    assert g1 is not None and g1.text == "G:1", f"GRP-PIN-1: the only consumer should get G:1, got {g1}"
    b = client().subscribe(q, ack="client-individual", prefetch=10)
    producer.send(q, "G:2", group_id="G")
    # Quiet window: B owns no group and G's owner A is full, so no marker can reach B.
    assert nothing_more(b) == [], "GRP-REBAL-1: rebalancing is off by default, yet the newcomer took group G"
    a.ack(g1)
    g2 = a.receive(RECEIVE_TIMEOUT)
    assert g2 is not None and g2.text == "G:2", f"GRP-PIN-1: G:2 should follow on A; got {g2 and g2.text!r}"


@pytest.mark.spec("GRP-REBAL-1")
@pytest.mark.requires("groups", "groups.rebalance")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_rebalance_spreads_long_lived_groups_onto_a_new_consumer(broker, client, dest):
    """AMG "Rebalancing Message Groups": long-lived groups all pinned to the first consumer leave
    a newcomer idle - unless group-rebalance is on, when some of them move to it (and then
    stay pinned where they landed)."""
    groups = [f"G{n}" for n in range(4)]

    def after_newcomer(q: str) -> dict[str, list[str]]:
        """A gets every group first; then B joins and two more rounds follow: who got what."""
        a = client().subscribe(q, prefetch=100)
        producer = client()
        for g in groups:
            producer.send(q, f"{g}:0", group_id=g)
        first = texts(gather({"A": a}, len(groups), (producer, q), groups))
        assert first["A"] == [f"{g}:0" for g in groups], f"GRP-PIN-1: A alone should get every group: {first}"
        subs = {"A": a, "B": client().subscribe(q, prefetch=100)}
        for i in (1, 2):
            for g in groups:
                producer.send(q, f"{g}:{i}", group_id=g)
        return texts(gather(subs, 2 * len(groups), (producer, q), groups))  # a B owning nothing: quiet window

    plain = after_newcomer(dest("queue", "grp.norebalance"))
    assert plain["B"] == [], f"GRP-REBAL-1: without rebalancing the groups should stay on A: {plain}"
    moved = after_newcomer(dest("queue", "grp.rebalance"))
    assert moved["B"], f"GRP-REBAL-1: with group-rebalance some groups should move to the newcomer B: {moved}"
    for g in groups:
        owner_of(moved, g, "GRP-REBAL-1")  # re-pinned: each group on exactly one consumer after the reset


@pytest.mark.spec("GRP-RESET-1")
@pytest.mark.requires("groups", "groups.reset")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_reset_all_groups_assigns_each_group_afresh(broker, client, dest):
    """AMG "Rebalancing Message Groups" (Manually): resetAllGroups forgets G's owner A, so the
    next message of G is assigned afresh: A's prefetch (1) is full with G:1 unacknowledged, so it
    goes to the newcomer B, which then keeps G. Without the reset G:2 would wait for A
    (test_without_rebalance_a_new_consumer_takes_no_group, the same steps without the operation)."""
    q = dest("queue", "grp.reset")  # no group-rebalance: B's arrival alone resets nothing
    a = client().subscribe(q, ack="client-individual", prefetch=1)
    producer = client()
    producer.send(q, "G:1", group_id="G")
    g1 = a.receive(RECEIVE_TIMEOUT)
    assert g1 is not None and g1.text == "G:1", f"GRP-PIN-1: the only consumer should get G:1, got {g1}"
    b = client().subscribe(q, ack="client-individual", prefetch=10)
    broker.reset_all_groups(q)
    producer.send(q, "G:2", group_id="G")
    g2 = b.receive(RECEIVE_TIMEOUT)
    assert g2 is not None and g2.text == "G:2", (
        f"GRP-RESET-1: after resetAllGroups group G has no owner, and A (prefetch 1) still holds G:1 "
        f"unacknowledged, so G:2 should be assigned afresh to B; B got {g2 and g2.text!r}")
    producer.send(q, "G:3", group_id="G")
    a.ack(g1)
    rest_b = up_to_marker(b, producer, q, "G")
    # Quiet window for A: after the reset it owns no group, so no ordered path reaches it.
    assert rest_b == ["G:3"] and nothing_more(a) == [], (
        f"GRP-RESET-1: G was assigned afresh to B, which should keep it and get G:3 (A nothing); B got {rest_b}")


# --------------------------------------------------------------------------- group-buckets


NO_GROUPING = "?group-buckets=0"  # AMG "Group Buckets": 0 buckets, as a destination parameter


@pytest.mark.spec("GRP-BUCKETS-1", "GRP-SETTINGS-1")
@pytest.mark.requires("groups", "groups.buckets")
@pytest.mark.protocols("stomp", "amqp")
def test_zero_buckets_turn_grouping_off(broker, client, dest, protocol):
    """AMG "Group Buckets": group-buckets 0 disables grouping on the queue, so one group's
    messages are handed out round robin like ungrouped ones. The consumers create the queue as
    NAME?group-buckets=0 (the auto-create parameter form); the producer uses the plain name."""
    q = dest("queue", "grp.nogrouping")
    subs = two_consumers(client, q + NO_GROUPING, prefetch=100)
    producer = client()
    for i in range(6):
        producer.send(q, f"G:{i}", group_id="G")
    # No grouping: the two G markers go round robin like G's messages, one to each consumer.
    got = texts(gather(subs, 6, (producer, q), ["G"]))
    evens, odds = [f"G:{i}" for i in (0, 2, 4)], [f"G:{i}" for i in (1, 3, 5)]
    assert sorted([got["A"], got["B"]]) == sorted([evens, odds]), (
        f"GRP-BUCKETS-1: with 0 buckets group G should alternate between the consumers: {got}")


@pytest.mark.spec("GRP-BUCKETS-1")
@pytest.mark.requires("groups", "groups.buckets")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_one_bucket_pins_every_group_to_one_consumer(broker, client, dest):
    """AMG "Group Buckets": ownership is per bucket, so with a single bucket every group id
    shares one owner (where round robin would otherwise spread new groups)."""
    q = dest("queue", "grp.buckets1")
    subs = two_consumers(client, q, prefetch=100)
    producer = client()
    for n in range(6):
        producer.send(q, f"G{n}:0", group_id=f"G{n}")
    got = texts(gather(subs, 6, (producer, q), [f"G{n}" for n in range(6)]))  # the idle one: quiet window
    assert sorted(map(len, got.values())) == [0, 6], (
        f"GRP-BUCKETS-1: with 1 bucket all six groups should share one owner: {got}")


@pytest.mark.spec("GRP-SETTINGS-2")
@pytest.mark.requires("groups", "groups.buckets", "groups.first_key")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_overlapping_settings_merge_the_specific_over_the_broad(broker, client, dest):
    """AMG "Group Buckets" (wildcard address settings) with the address-settings merge: on a queue
    under grp.merge.one.> the specific setting's group-buckets 1 decides (every group shares one
    owner, not 7 buckets' spread) and the broad one's group-first-key, which the specific one does
    not set, still applies (the first message of the first group is flagged)."""
    q = dest("queue", "grp.merge.one")
    subs = two_consumers(client, q, prefetch=100)
    producer = client()
    groups = [f"G{n}" for n in range(MERGE_GROUPS)]
    for g in groups:
        producer.send(q, f"{g}:0", group_id=g)
    got = gather(subs, MERGE_GROUPS, (producer, q), groups)  # the idle one: quiet window
    owners = texts(got)
    assert sorted(map(len, owners.values())) == [0, MERGE_GROUPS], (
        f"GRP-SETTINGS-2: the more specific setting (group-buckets 1) should decide over the broad one's 7 "
        f"buckets, so all {MERGE_GROUPS} groups share one owner: {owners}")
    # G0:0, sent first, opens the one bucket's ownership: whatever a broker does with the other
    # groups' first messages in a bucket already owned (the document does not say), that one is
    # the first message of its group for its consumer
    flagged = [m.text for messages in got.values() for m in messages if first_flag(m)]
    assert f"{groups[0]}:0" in flagged, (
        f"GRP-SETTINGS-2: the specific setting does not set group-first-key, so the broad one's ({FIRST_KEY}) should "
        f"apply and flag the first message of group {groups[0]} for its consumer; flagged: {flagged}")


# Bucket tests that do not depend on the hash function (AMG "Group Buckets" only says the id is
# hashed into a bucket, not how). Groups in one bucket share its owner, so on a queue with N
# buckets, however the ids hash, the owner each group gets in several rounds (all consumers
# replaced between rounds, the groups' first messages sent in a fresh random order each round)
# forms at most N distinct "owner patterns". With -1 every group is on its own: the premise is
# that a queue hands new groups out over its consumers (round robin, as the reference broker and
# Artemis do; the document does not say how a new group's consumer is chosen), so each group's
# pattern is its positions in the random orders modulo the consumer count. With BUCKET_GROUPS = 40
# groups, BUCKET_CONSUMERS = 3 consumers and BUCKET_ROUNDS = 3 rounds there are 3^3 = 27 possible
# patterns; if each group's were uniform and independent, the chance that 40 groups show at most 8
# distinct ones is at most C(27, 8) * (8/27)^40 < 2e-15 (union bound over the 8-pattern sets), and
# a simulation of the round robin model (200,000 runs, positions from random permutations) never
# showed fewer than 14. So "more than 8 patterns" for -1 and "at most 7" for 7 buckets tell -1 from
# any bucket count up to 8 (two, say) with certainty on the bucketed side and a false alarm
# probability below 2e-15 on the other.
BUCKET_GROUPS, BUCKET_CONSUMERS, BUCKET_ROUNDS = 40, 3, 3
MINUS_ONE_MIN_PATTERNS = 9  # more than any bucket count up to 8 can produce


def owner_patterns(client, q: str) -> tuple[dict[str, tuple[str, ...]], int]:
    """Each group's owners over BUCKET_ROUNDS rounds on queue ``q`` (consumers c0..c2, replaced
    between rounds, which releases every group and bucket: GRP-REASSIGN-1), and the random seed."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    groups = [f"G{n}" for n in range(BUCKET_GROUPS)]
    producer = client()
    owners: dict[str, list[str]] = {g: [] for g in groups}
    for r in range(BUCKET_ROUNDS):
        connections = [client() for _ in range(BUCKET_CONSUMERS)]
        subs = {f"c{i}": c.subscribe(q, prefetch=100) for i, c in enumerate(connections)}
        order = groups[:]
        rng.shuffle(order)
        for g in order:
            producer.send(q, f"{g}:{r}", group_id=g)
        got = texts(gather(subs, len(groups), (producer, q), groups))
        received = sorted(b for bodies in got.values() for b in bodies)
        assert received == sorted(f"{g}:{r}" for g in groups), (
            f"setup: round {r} should deliver each of the {len(groups)} messages exactly once (seed {seed}): {got}")
        for g in groups:
            owners[g].append(owner_of(got, g, "GRP-PIN-1"))
        for c in connections:
            c.close()  # the owners leave: every group and bucket gets a new owner next round
    return {g: tuple(o) for g, o in owners.items()}, seed


def pattern_summary(patterns: dict[str, tuple[str, ...]]) -> str:
    by_pattern: dict[tuple[str, ...], list[str]] = {}
    for g, pattern in patterns.items():
        by_pattern.setdefault(pattern, []).append(g)
    return "; ".join(f"{'/'.join(p)}: {' '.join(gs)}" for p, gs in sorted(by_pattern.items()))


@pytest.mark.spec("GRP-BUCKETS-1")
@pytest.mark.requires("groups", "groups.buckets")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_seven_buckets_give_at_most_seven_owner_patterns(broker, client, dest):
    """AMG "Group Buckets": with 7 buckets ownership is per bucket, so however the ids hash, 40
    groups behave as at most 7 units: at most 7 distinct owner patterns over the rounds (a broker
    that ignored the buckets would show more than 8, see the comment above)."""
    patterns, seed = owner_patterns(client, dest("queue", "grp.buckets7"))
    distinct = len(set(patterns.values()))
    assert distinct <= 7, (
        f"GRP-BUCKETS-1: with 7 buckets groups of one bucket share its owner, so {BUCKET_GROUPS} groups can show at "
        f"most 7 owner patterns over {BUCKET_ROUNDS} rounds; got {distinct} (seed {seed}): {pattern_summary(patterns)}")


@pytest.mark.spec("GRP-BUCKETS-1")
@pytest.mark.requires("groups", "groups.buckets")
@pytest.mark.parametrize("prefix", ["grp.bucketsall", "grp.default"])
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_minus_one_buckets_track_every_group(broker, client, dest, prefix):
    """AMG "Group Buckets": -1 (explicit, or the default) keeps every group id apart, so 40
    groups show more owner patterns than any small bucket count could (at most N for N buckets;
    false alarm below 2e-15, see the comment above)."""
    patterns, seed = owner_patterns(client, dest("queue", prefix))
    distinct = len(set(patterns.values()))
    assert distinct >= MINUS_ONE_MIN_PATTERNS, (
        f"GRP-BUCKETS-1: with -1 buckets every group is tracked on its own, so {BUCKET_GROUPS} groups over "
        f"{BUCKET_CONSUMERS} consumers and {BUCKET_ROUNDS} rounds should show at least {MINUS_ONE_MIN_PATTERNS} owner "
        f"patterns (N buckets give at most N); got {distinct} (seed {seed}): {pattern_summary(patterns)}")


# --------------------------------------------------------------------------- head of line


def _hol_run(client, q: str, parameters: str = ""):
    """A (room for 2) subscribes alone and is given group G; then idle B joins and three
    ungrouped messages queue up behind G's remaining three. Returns (a, b, A's messages)."""
    a = client().subscribe(q + parameters, ack="client-individual", prefetch=2)
    producer = client()
    for i in range(1, 6):
        producer.send(q, f"G:{i}", group_id="G")
    held = a.receive_n(2, RECEIVE_TIMEOUT)
    assert [m.text for m in held] == ["G:1", "G:2"], f"GRP-PIN-1: A should hold G:1, G:2: {[m.text for m in held]}"
    b = client().subscribe(q + parameters, ack="client-individual", prefetch=10)
    for i in range(1, 4):
        producer.send(q, f"u:{i}")
    return a, b, held


@pytest.mark.spec("GRP-HOL-1")
@pytest.mark.requires("groups")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_grouped_run_at_head_holds_back_ungrouped_messages(broker, client, dest):
    """AMG "Message Grouping" (the note on FIFO and concurrency): G:3..G:5 at the head must go to
    their busy owner A before the ungrouped u:1..u:3 behind them reach anybody - even idle B."""
    a, b, held = _hol_run(client, dest("queue", "grp.hol"))
    # Quiet windows for B: it owns no group, and an ungrouped marker would queue behind the
    # grouped run like u:1..u:3 - held back is exactly what is checked, so nothing can tell.
    assert nothing_more(b) == [], "GRP-HOL-1: idle B got ungrouped messages while grouped ones were ahead of them"
    for message in held:
        a.ack(message)
    more = a.receive_n(2, RECEIVE_TIMEOUT)
    assert [m.text for m in more] == ["G:3", "G:4"], f"GRP-HOL-1: A should get G:3, G:4 next: {[m.text for m in more]}"
    assert nothing_more(b) == [], "GRP-HOL-1: G:5 is still ahead of the ungrouped messages, B must wait"
    a.ack(more[0])
    last = a.receive(RECEIVE_TIMEOUT)
    assert last is not None and last.text == "G:5", f"GRP-PIN-1: A should get G:5; got {last and last.text!r}"
    released = [m.text for m in b.receive_n(3, RECEIVE_TIMEOUT)]
    assert released == ["u:1", "u:2", "u:3"], (
        f"GRP-HOL-1: with the grouped run gone, idle B should get the ungrouped messages: {released}")


@pytest.mark.spec("GRP-HOL-1", "GRP-BUCKETS-1", "GRP-SETTINGS-1")
@pytest.mark.requires("groups", "groups.buckets")
@pytest.mark.protocols("stomp", "amqp")  # prefetch counts messages over AMQP on Artemis too
def test_nothing_held_back_when_grouping_is_off(broker, client, dest):
    """AMG "Message Grouping" / "Group Buckets" (control for the test above): with grouping off
    (0 buckets) G's messages are ordinary, so idle B takes what A has no room for at once."""
    a, b, _held = _hol_run(client, dest("queue", "grp.nogrouping"), NO_GROUPING)
    taken = [m.text for m in b.receive_n(6, RECEIVE_TIMEOUT)]
    assert taken == ["G:3", "G:4", "G:5", "u:1", "u:2", "u:3"], (
        f"GRP-HOL-1 (control): without grouping idle B should take everything A has no room for: {taken}")


# --------------------------------------------------------------------------- the Core property name


@pytest.mark.spec("GRP-PROP-2")
@pytest.mark.requires("groups")
@pytest.mark.protocols("stomp")
def test_core_group_property_groups_messages(broker, client, dest):
    """AMG "Using Core API": the Core property _AMQ_GROUP_ID groups messages. Over STOMP, Artemis
    makes a SEND frame's other headers Core properties of the same name, so the header sets that
    property itself (no JMSXGroupID is sent). Without grouping, 24 messages over three consumers
    with room for all would be spread round robin, splitting every group."""
    q = dest("queue", "grp.coreprop")
    subs = {name: client().subscribe(q) for name in ("A", "B", "C")}  # room for all 24
    producer = client()
    groups = ["IBM", "MSFT", "ORCL", "SUNW"]
    for i in range(6):
        for g in groups:
            producer.send(q, f"{g}:{i}", properties={"_AMQ_GROUP_ID": g})
    # no barrier: a marker would need a group id, the very thing under test; the quiet window
    got = texts(gather(subs, 24))
    assert sorted(b for bodies in got.values() for b in bodies) == sorted(f"{g}:{i}" for g in groups for i in range(6)), \
        f"GRP-PROP-2: expected each of the 24 messages exactly once: {got}"
    for g in groups:
        owner_of(got, g, "GRP-PROP-2")
