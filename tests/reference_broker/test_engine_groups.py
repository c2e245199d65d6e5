"""Message grouping on queues, checked against the Artemis user manual's "Message Grouping"
chapter (../shared/spec/artemis-message-grouping.md, cited below as AMG and its section)."""

from __future__ import annotations

import pytest

from reference_broker.engine.groups import GroupTable, artemis_group_hash, java_string_hash

from .test_engine_support import Client, dest, make_broker, pending_ids

Q = "queue://orders"


def two_consumers(destination=Q, config=None, prefetch_a=100, prefetch_b=100):
    broker = make_broker(config)
    client = Client(broker)
    client.subscribe("A", destination, prefetch=prefetch_a)
    client.subscribe("B", destination, prefetch=prefetch_b)
    return broker, client


def owners(client: Client) -> dict[str, set[str]]:
    """group id -> consumers that received at least one message of the group."""
    result: dict[str, set[str]] = {}
    for d in client.deliveries:
        gid = d.ref.message.group_id
        if gid is not None:
            result.setdefault(gid, set()).add(d.consumer_id)
    return result


# --------------------------------------------------------------------------- GRP-PIN-1


def test_grp_pin_1_same_group_id_always_reaches_the_same_consumer():
    """GRP-PIN-1 (AMG §Message Grouping, characteristics): every message carrying a given group
    id is consumed by one and the same consumer, however many consumers the queue has."""
    broker, client = two_consumers()
    groups = ["IBM", "MSFT", "ORCL"]
    for i in range(30):
        client.send(Q, f"m{i}", group_id=groups[i % 3])
    seen = owners(client)
    assert all(len(c) == 1 for c in seen.values()), f"GRP-PIN-1: a group reached two consumers: {seen}"
    # Round robin hands out the first message of each group, so both consumers own groups.
    assert {next(iter(c)) for c in seen.values()} == {"A", "B"}, f"GRP-PIN-1: {seen}"
    # Pinning outlives acknowledgement: the owner keeps the group after acking everything.
    owner_ibm = next(iter(seen["IBM"]))
    client.ack_all("A")
    client.ack_all("B")
    for i in range(30, 36):
        client.send(Q, f"m{i}", group_id="IBM")
    assert owners(client)["IBM"] == {owner_ibm}, "GRP-PIN-1: group moved after acks"
    # Per-group order is preserved on the owner.
    ibm = [d.message_id for d in client.deliveries if d.ref.message.group_id == "IBM"]
    assert ibm == [f"m{i}" for i in range(0, 36) if i >= 30 or i % 3 == 0], "GRP-PIN-1: group order"


def test_grp_pin_1_ungrouped_messages_still_round_robin():
    """GRP-PIN-1 (AMG §Message Grouping): pinning applies only to messages with a group id."""
    broker, client = two_consumers()
    client.send(Q, "g1", group_id="G")
    for i in range(4):
        client.send(Q, f"u{i}")
    assert client.got("A") == ["g1", "u1", "u3"] and client.got("B") == ["u0", "u2"], (
        "GRP-PIN-1: ungrouped messages should alternate between consumers", client.deliveries)


# --------------------------------------------------------------------------- GRP-REASSIGN-1


@pytest.mark.parametrize("how", ["unsubscribe", "close_connection"])
def test_grp_reassign_1_owner_closing_moves_the_group_to_another_consumer(how):
    """GRP-REASSIGN-1 (AMG §Message Grouping, characteristics): once the consumer a group is
    pinned to goes away, some other consumer is picked and from then on gets all of that
    group's messages, including the ones the old owner never acknowledged."""
    broker = make_broker()
    owner_client = Client(broker)
    other = Client(broker)
    owner_client.subscribe("A", Q, prefetch=10)
    other.subscribe("B", Q, prefetch=10)
    for i in range(3):
        owner_client.send(Q, f"g{i}", group_id="G")
    assert owner_client.got("A") == ["g0", "g1", "g2"]
    owner_client.ack("A", "g0")
    if how == "unsubscribe":
        owner_client.conn.unsubscribe("A")
    else:
        owner_client.conn.close()
    # Unacknowledged g1, g2 are redelivered to B, in order, flagged as redelivered.
    assert other.got("B") == ["g1", "g2"], "GRP-REASSIGN-1: unacked group messages go to the new owner"
    assert all(d.redelivered and d.delivery_count == 1 for d in other.deliveries)
    for i in range(3, 6):
        other.send(Q, f"g{i}", group_id="G")
    assert other.got("B") == ["g1", "g2", "g3", "g4", "g5"], "GRP-REASSIGN-1: new owner keeps the group"
    assert broker.queues[Q].groups.owner("G") is other.consumer("B")


def test_grp_reassign_1_group_waits_for_a_new_consumer_when_none_is_left():
    """GRP-REASSIGN-1 (AMG §Message Grouping): with the owner gone and no consumer left, the
    group's messages wait; the next consumer to arrive becomes the owner."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("A", Q, prefetch=10)
    c.send(Q, "g0", group_id="G")
    c.conn.unsubscribe("A")
    c.send(Q, "g1", group_id="G")
    assert pending_ids(broker, Q) == ["g0", "g1"]
    c.subscribe("B", Q, prefetch=10)
    assert c.got("B") == ["g0", "g1"], "GRP-REASSIGN-1"


# --------------------------------------------------------------------------- GRP-CLOSE-1


def test_grp_close_1_negative_group_seq_closes_the_group():
    """GRP-CLOSE-1 (AMG §Closing a Message Group): a message whose JMSXGroupSeq is negative
    (-1) closes its group; it still goes to the current owner, and the next message with the
    same group id is assigned afresh (here: to the other consumer, by round robin)."""
    broker, client = two_consumers()
    client.send(Q, "g1", group_id="G")            # A becomes owner; rotation puts B next
    client.send(Q, "g2", group_id="G")
    client.send(Q, "g3", group_id="G", group_seq=-1)
    client.send(Q, "g4", group_id="G")
    assert client.got("A") == ["g1", "g2", "g3"], "GRP-CLOSE-1: the closing message goes to the old owner"
    assert client.got("B") == ["g4"], "GRP-CLOSE-1: after close the group is reassigned"
    assert broker.queues[Q].groups.owner("G") is client.consumer("B")


def test_grp_close_1_without_negative_seq_the_group_stays():
    """GRP-CLOSE-1 (AMG §Closing a Message Group), control case: positive sequence numbers do
    not close anything."""
    broker, client = two_consumers()
    for i, seq in enumerate([1, 2, 3, 4], start=1):
        client.send(Q, f"g{i}", group_id="G", group_seq=seq)
    assert client.got("A") == ["g1", "g2", "g3", "g4"] and client.got("B") == [], "GRP-CLOSE-1"


# --------------------------------------------------------------------------- GRP-FIRST-1


def test_grp_first_1_flag_on_the_first_message_of_a_group_per_consumer_only():
    """GRP-FIRST-1 (AMG §Notifying Consumer of Group Ownership change): with group-first-key
    set, the first message a consumer gets for a group it was just assigned carries the flag,
    later messages of that group do not; when the group moves to another consumer, that
    consumer's first message of it carries the flag again."""
    destination = "queue://orders?group-first-key=JMSXGroupFirstForConsumer"
    broker, client = two_consumers(destination)
    queue = broker.queues[Q]
    assert queue.group_settings.first_key == "JMSXGroupFirstForConsumer"
    client.send(Q, "a1", group_id="GA")
    client.send(Q, "b1", group_id="GB")
    client.send(Q, "a2", group_id="GA")
    client.send(Q, "u1")
    client.send(Q, "b2", group_id="GB")
    flags = {d.message_id: d.first_for_consumer for d in client.deliveries}
    assert flags == {"a1": True, "b1": True, "a2": False, "u1": False, "b2": False}, f"GRP-FIRST-1: {flags}"
    # Owner of GA (A) goes away: its unacked a1, a2 move to B; a1 opens the group on B.
    assert client.in_flight("A") == ["a1", "a2", "u1"]
    client.ack("A", "u1")
    client.conn.unsubscribe("A")
    moved = [(d.message_id, d.first_for_consumer) for d in client.deliveries[5:]]
    assert moved == [("a1", True), ("a2", False)], f"GRP-FIRST-1 after reassignment: {moved}"


def test_grp_first_1_flag_again_after_group_close_and_off_by_default():
    """GRP-FIRST-1 (AMG §Notifying Consumer...): a closed group (JMSXGroupSeq -1) reassigned is
    a new assignment, so its next first message is flagged; without group-first-key (the
    default, off) nothing is ever flagged."""
    broker, client = two_consumers("queue://orders?group-first-key=FIRST")
    client.send(Q, "g1", group_id="G", group_seq=-1)
    client.send(Q, "g2", group_id="G")
    client.send(Q, "g3", group_id="G")
    assert [d.first_for_consumer for d in client.deliveries] == [True, True, False], "GRP-FIRST-1"

    broker, client = two_consumers()
    assert broker.queues[Q].group_settings.first_key is None
    for i in range(4):
        client.send(Q, f"g{i}", group_id=f"G{i % 2}", group_seq=-1 if i == 2 else 0)
    assert not any(d.first_for_consumer for d in client.deliveries), "GRP-FIRST-1: off by default"


def test_grp_first_1_address_setting_default_first_key():
    """GRP-FIRST-1 / GRP-SETTINGS-1 (AMG §Notifying Consumer...): default-group-first-key in a
    matching address-setting turns the flag on for the queues under it."""
    broker = make_broker({"address_settings": [{"match": "orders.#", "default_group_first_key": "F"}]})
    c = Client(broker)
    c.subscribe("A", "queue://orders.eu", prefetch=10)
    c.send("queue://orders.eu", "g1", group_id="G")
    c.send("queue://orders.eu", "g2", group_id="G")
    assert [d.first_for_consumer for d in c.deliveries] == [True, False], "GRP-FIRST-1"


# --------------------------------------------------------------------------- GRP-REBAL-1


def test_grp_rebal_1_adding_a_consumer_resets_groups_with_in_flight_caveat():
    """GRP-REBAL-1 (AMG §Rebalancing Message Groups, Automatically, and the note under
    Rebalancing): with group-rebalance, adding a consumer resets every group, so new messages
    of a group may go to the new consumer while messages already in flight to the old owner
    stay there - for a moment two consumers hold messages of the same group."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("A", "queue://orders?group-rebalance=true", prefetch=1)
    c.send(Q, "g1", group_id="G")
    assert c.in_flight("A") == ["g1"]
    c.subscribe("B", Q, prefetch=10)
    assert len(broker.queues[Q].groups) == 0, "GRP-REBAL-1: groups reset on consumer add"
    c.send(Q, "g2", group_id="G")
    assert c.in_flight("A") == ["g1"] and c.in_flight("B") == ["g2"], (
        "GRP-REBAL-1: in-flight message stays with the old owner, new one goes to the new owner")
    c.send(Q, "g3", group_id="G")
    assert c.got("B") == ["g2", "g3"], "GRP-REBAL-1: B is the group's owner now"


def test_grp_rebal_1_spreads_long_lived_groups_onto_the_new_consumer():
    """GRP-REBAL-1 (AMG §Rebalancing Message Groups): long-lived groups all pinned to the
    existing consumer leave a new consumer idle unless rebalancing is on."""
    def run(destination):
        broker = make_broker()
        c = Client(broker)
        c.subscribe("A", destination, prefetch=100)
        for g in range(4):
            c.send(Q, f"first-{g}", group_id=f"G{g}")
        c.subscribe("B", Q, prefetch=100)
        for g in range(4):
            c.send(Q, f"next-{g}", group_id=f"G{g}")
        return c.got("B")

    assert run("queue://orders") == [], "GRP-REBAL-1: default (off) leaves the new consumer idle"
    assert run("queue://orders?group-rebalance=true") == ["next-1", "next-3"], "GRP-REBAL-1"


def test_grp_rebal_1_without_rebalance_the_group_waits_for_its_owner():
    """GRP-REBAL-1 (AMG §Rebalancing Message Groups, default false), control case: a new
    consumer does not take over a group whose owner is merely busy."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("A", Q, prefetch=1)
    c.send(Q, "g1", group_id="G")
    c.subscribe("B", Q, prefetch=10)
    c.send(Q, "g2", group_id="G")
    assert c.got("B") == [] and pending_ids(broker, Q) == ["g2"], "GRP-REBAL-1 default off"


# --------------------------------------------------------------------------- GRP-RESET-1


def test_grp_reset_1_reset_groups_forgets_every_owner():
    """GRP-RESET-1 (AMG §Rebalancing Message Groups, Manually - resetAllGroups): resetting
    drops all group-to-consumer assignments; the next message of each group is assigned anew."""
    broker, c = two_consumers()
    queue = broker.queues[Q]
    c.send(Q, "a1", group_id="GA")   # -> A
    c.send(Q, "b1", group_id="GB")   # -> B
    assert queue.stats()["groups"] == 2
    assert queue.reset_groups() == 2, "GRP-RESET-1: reports how many groups were reset"
    assert queue.stats()["groups"] == 0
    c.send(Q, "b2", group_id="GB")   # fresh assignment: round robin says A
    c.send(Q, "a2", group_id="GA")   # ... and then B
    assert c.got("A") == ["a1", "b2"] and c.got("B") == ["b1", "a2"], "GRP-RESET-1"


# --------------------------------------------------------------------------- GRP-BUCKETS-1


def test_grp_buckets_1_java_string_hashcode_parity():
    """GRP-BUCKETS-1 (AMG §Group Buckets: the group id is hashed): `java_string_hash` is Java's
    String.hashCode bit for bit (UTF-16 code units, 32-bit signed overflow)."""
    known = {
        "": 0,
        "hello": 99162322,
        "Aa": 2112,
        "BB": 2112,
        "polygenelubricants": -(2**31),
        "\U0001F600": 0xD83D * 31 + 0xDE00,  # a surrogate pair counts as two code units
    }
    assert {s: java_string_hash(s) for s in known} == known, "GRP-BUCKETS-1: String.hashCode parity"


def test_grp_buckets_1_artemis_bucket_hash_is_simplestring_hashcode():
    """GRP-BUCKETS-1 (AMG §Group Buckets): Artemis hashes the group id as a SimpleString (UTF-16
    code units as signed little-endian bytes, 31*h+b), then (hash & Integer.MAX_VALUE) % N."""
    assert artemis_group_hash("") == 0
    assert artemis_group_hash("A") == 65 * 31            # bytes 0x41, 0x00
    assert artemis_group_hash("Aa") == ((65 * 31) * 31 + 97) * 31
    assert artemis_group_hash("\u00e9") == -23 * 31       # 0xE9 is the signed byte -23
    table = GroupTable(7)
    assert [table.key(g) for g in ("A", "B", "Aa")] == [6, 2, 2], "GRP-BUCKETS-1: bucket index"


def test_grp_buckets_1_groups_in_one_bucket_share_an_owner():
    """GRP-BUCKETS-1 (AMG §Group Buckets): with N buckets, ownership is per bucket, so two group
    ids hashing into the same bucket go to the same consumer even where round robin would have
    separated them; with -1 (the default) every group id is tracked on its own."""
    broker, c = two_consumers("queue://orders?group-buckets=7")
    c.send(Q, "x1", group_id="Aa")   # bucket 2 -> A
    c.send(Q, "x2", group_id="B")    # bucket 2 too -> A, although B is next in the rotation
    c.send(Q, "x3", group_id="A")    # bucket 6 -> B
    assert c.got("A") == ["x1", "x2"] and c.got("B") == ["x3"], "GRP-BUCKETS-1 shared bucket"
    assert len(broker.queues[Q].groups) == 2

    broker, c = two_consumers("queue://orders?group-buckets=-1")
    c.send(Q, "x1", group_id="Aa")
    c.send(Q, "x2", group_id="B")
    assert c.got("A") == ["x1"] and c.got("B") == ["x2"], "GRP-BUCKETS-1 -1 tracks every group"

    broker, c = two_consumers("queue://orders?group-buckets=1")
    for i in range(6):
        c.send(Q, f"y{i}", group_id=f"G{i}")
    assert c.got("B") == [], "GRP-BUCKETS-1: a single bucket pins every group to one consumer"


def test_grp_buckets_1_zero_buckets_disables_grouping():
    """GRP-BUCKETS-1 (AMG §Group Buckets): 0 buckets switches grouping off on the queue, which
    then keeps plain round robin even for messages with a group id."""
    broker, c = two_consumers("queue://orders?group-buckets=0")
    for i in range(6):
        c.send(Q, f"g{i}", group_id="G")
    assert c.got("A") == ["g0", "g2", "g4"] and c.got("B") == ["g1", "g3", "g5"], "GRP-BUCKETS-1 zero"
    assert len(broker.queues[Q].groups) == 0


# --------------------------------------------------------------------------- GRP-SETTINGS-1


def test_grp_settings_1_address_settings_matched_by_wildcard_and_params_override():
    """GRP-SETTINGS-1 (AMG §Rebalancing / §Group Buckets, address-setting and address
    parameters): address-setting defaults apply to the addresses their match (wildcards
    allowed) covers, the most specific match wins for the options it sets, and a destination
    parameter given at creation overrides the default."""
    broker = make_broker({"address_settings": [
        {"match": "orders.#", "default_group_rebalance": True, "default_group_buckets": 16},
        {"match": "orders.eu", "default_group_buckets": 0},
        {"match": "prices.*", "default_group_first_key": "F"},
    ]})

    def s(name):
        return broker.queue(dest(name)).group_settings

    us = s("queue://orders.us")
    assert (us.rebalance, us.buckets, us.first_key) == (True, 16, None), "GRP-SETTINGS-1 wildcard #"
    assert s("queue://orders").rebalance is True, "GRP-SETTINGS-1: # also matches zero words"
    eu = s("queue://orders.eu")
    # orders.eu sets only buckets; rebalance comes from the broader orders.# (merged, see
    # GRP-SETTINGS-2).
    assert (eu.rebalance, eu.buckets) == (True, 0), "GRP-SETTINGS-1: most specific wins for what it sets"
    assert s("queue://prices.ibm").first_key == "F"
    assert s("queue://prices.ibm.x").first_key is None, "GRP-SETTINGS-1: * is one word"
    other = s("queue://misc")
    assert (other.rebalance, other.buckets, other.first_key) == (False, -1, None), "GRP-SETTINGS-1 defaults"
    ov = s("queue://orders.asia?group-rebalance=false&group-buckets=-1&group-first-key=K")
    assert (ov.rebalance, ov.buckets, ov.first_key) == (False, -1, "K"), "GRP-SETTINGS-1 params override"


def test_grp_settings_1_destination_parameter_rebalance_changes_dispatch():
    """GRP-SETTINGS-1 (AMG §Rebalancing, address parameters): `queue://orders?group-rebalance=true`
    enables rebalancing for that queue even though no address-setting does."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("A", "queue://orders?group-rebalance=true", prefetch=1)
    assert broker.queues[Q].group_settings.rebalance is True
    c.send(Q, "g1", group_id="G")
    c.subscribe("B", Q, prefetch=1)
    c.send(Q, "g2", group_id="G")
    assert c.got("B") == ["g2"], "GRP-SETTINGS-1"


def test_grp_settings_1_bad_parameters_are_refused():
    """GRP-SETTINGS-1: malformed group parameters are a clear error, never silently ignored."""
    from reference_broker.engine.errors import InvalidDestination

    broker = make_broker()
    c = Client(broker)
    for bad in ("queue://q?group-rebalance=yes", "queue://q?group-buckets=x",
                "queue://q?group-buckets=-2", "queue://q?group-bogus=1"):
        with pytest.raises(InvalidDestination):
            c.subscribe("A", bad)


# --------------------------------------------------------------------------- GRP-HOL-1


def hol_scenario():
    broker = make_broker()
    c = Client(broker)
    c.subscribe("A", Q, prefetch=2)
    c.subscribe("B", Q, prefetch=10)
    for i in range(1, 6):
        c.send(Q, f"g{i}", group_id="G")
    for i in range(1, 4):
        c.send(Q, f"u{i}")
    return broker, c


def test_grp_hol_1_grouped_run_holds_back_ungrouped_messages():
    """GRP-HOL-1 (AMG §Message Grouping, the note on concurrent processing): a run of grouped
    messages at the head of the queue must reach its (busy) owner before the ungrouped
    messages behind it are dispatched - even to a consumer that is idle."""
    broker, c = hol_scenario()
    assert c.got("A") == ["g1", "g2"]
    assert c.got("B") == [], "GRP-HOL-1: idle consumer B must not get ungrouped messages yet"
    assert pending_ids(broker, Q) == ["g3", "g4", "g5", "u1", "u2", "u3"]
    c.ack("A", "g1")
    c.ack("A", "g2")
    assert c.got("A") == ["g1", "g2", "g3", "g4"] and c.got("B") == [], "GRP-HOL-1"
    c.ack("A", "g3")
    # g5 reaches A (now full again); the head is ungrouped, so idle B finally takes it all.
    assert c.got("A") == ["g1", "g2", "g3", "g4", "g5"]
    assert c.got("B") == ["u1", "u2", "u3"], ("GRP-HOL-1", c.deliveries)
    assert pending_ids(broker, Q) == []


def test_grp_hol_1_is_reproducible():
    """GRP-HOL-1: the same operations give the same dispatch, run after run."""
    runs = []
    for _ in range(3):
        broker, c = hol_scenario()
        c.ack_all("A")
        c.ack_all("A")
        runs.append([(d.consumer_id, d.message_id) for d in c.deliveries])
    assert runs[0] == runs[1] == runs[2], "GRP-HOL-1 must be deterministic"


def test_grp_hol_1_control_without_grouping_nothing_is_held_back():
    """GRP-HOL-1, control case: with grouping disabled (group-buckets=0) the idle consumer
    takes ungrouped messages straight away."""
    broker = make_broker()
    c = Client(broker)
    c.subscribe("A", "queue://orders?group-buckets=0", prefetch=2)
    c.subscribe("B", Q, prefetch=10)
    for i in range(1, 6):
        c.send(Q, f"g{i}", group_id="G")
    c.send(Q, "u1")
    assert "u1" in c.got("B"), "GRP-HOL-1 control"


def test_grp_settings_2_matching_address_settings_merge():
    """GRP-SETTINGS-2 ("Message Grouping", address-setting defaults; Artemis merges matching
    address-settings): a specific match overrides only what it sets; other options come from
    broader matches."""
    from reference_broker.config import build_config
    from reference_broker.engine.names import parse_destination
    from reference_broker.engine.policy import GroupSettings, Policies

    policies = Policies(build_config({"address_settings": [
        {"match": "orders.#", "default_group_rebalance": True, "default_group_first_key": "First"},
        {"match": "orders.eu.*", "default_group_buckets": 16},
    ]}))
    assert policies.groups_for(parse_destination("queue://orders.eu.fr")) == GroupSettings(True, 16, "First"), "GRP-SETTINGS-2"
    assert policies.groups_for(parse_destination("queue://orders.us")) == GroupSettings(True, -1, "First"), "GRP-SETTINGS-2"
    assert policies.groups_for(parse_destination("queue://other")) == GroupSettings(), "GRP-SETTINGS-2"
    # The destination parameter form still overrides them all.
    assert policies.groups_for(parse_destination("queue://orders.eu.fr?group-buckets=0")).buckets == 0
