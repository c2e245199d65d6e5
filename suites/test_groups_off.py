"""group-buckets 0 set by address setting: grouping turned off for the queues it matches
(artemis-message-grouping.md, "Group Buckets", cited as AMG; GRP-BUCKETS-1, GRP-SETTINGS-1).

test_groups.py checks the same rule with the destination-parameter form (``NAME?group-buckets=0``),
which Artemis documents for its JMS client only, so over STOMP and AMQP it is not applicable there.
This module sets ``default-group-buckets`` 0 through the scenario instead (the address-setting form
AMG shows), in a module of its own because ActiveMQ Classic cannot express 0 buckets: its launcher
refuses the policy, and both rules are documented for reference and artemis only, so no test here
starts an ActiveMQ broker.
"""

from __future__ import annotations


import pytest

from conformance.scenario import DestinationPolicy, Scenario
from conformance.waiting import QUIET, is_marker, new_marker, receive_until_markers
from machinery.waiting import poll

SCENARIO = Scenario(name="groups-off", policies=(DestinationPolicy("queue://grp.off.>", group_buckets=0),))

RECEIVE_TIMEOUT = 5.0


def _gather(subs: dict, total: int, producer, queue: str, group: str,
            timeout: float = RECEIVE_TIMEOUT) -> dict[str, list[str]]:
    """What each subscription receives until ``total`` messages arrived, plus anything more still
    on its way, found with a barrier: one marker per consumer in ``group``, sent by the test's
    producer after its messages. With grouping off the group's messages, markers included, are
    handed out round robin in queue order (AMG "Group Buckets"), so a consumer that got a marker
    has had everything sent before it that was going to it; one that got none (the round robin
    broke, which the caller's assertion catches) is watched for the quiet window instead."""
    got: dict[str, list[str]] = {name: [] for name in subs}

    def receive_round() -> int:  # the receive timeouts are the polling interval
        for name, sub in subs.items():
            message = sub.receive(0.02)
            if message is not None:
                got[name].append(message.text)
        return sum(map(len, got.values()))

    poll(receive_round, lambda n: n >= total, timeout=timeout, interval=0)
    markers = [new_marker(f"{group}:") for _ in subs]
    for marker in markers:
        producer.send(queue, marker, group_id=group)
    more, seen = receive_until_markers(subs, markers, timeout=timeout)
    for name, sub in subs.items():
        got[name].extend(m.text for m in more[name])
        if not seen[name]:
            # No marker reached it: no ordered path tells that nothing more is coming, so the
            # quiet window stays for this consumer.
            got[name].extend(m.text for m in sub.drain(QUIET) if not is_marker(m.text))
    return got


@pytest.mark.spec("GRP-BUCKETS-1", "GRP-SETTINGS-1")
@pytest.mark.requires("groups", "groups.buckets", "scenario.policies")
@pytest.mark.protocols("stomp", "amqp")
def test_zero_buckets_by_address_setting_turn_grouping_off(broker, client, dest, protocol):
    """AMG "Group Buckets": with 0 buckets one group's messages go round robin, like ungrouped ones."""
    q = dest("queue", "grp.off")
    subs = {name: client().subscribe(q, prefetch=100) for name in ("A", "B")}
    producer = client()
    for i in range(6):
        producer.send(q, f"G:{i}", group_id="G")
    got = _gather(subs, 6, producer, q, "G")
    evens, odds = [f"G:{i}" for i in (0, 2, 4)], [f"G:{i}" for i in (1, 3, 5)]
    assert sorted([got["A"], got["B"]]) == sorted([evens, odds]), (
        f"GRP-BUCKETS-1: with default-group-buckets 0 group G should alternate between the consumers: {got}")


@pytest.mark.spec("GRP-HOL-1", "GRP-BUCKETS-1", "GRP-SETTINGS-1")
@pytest.mark.requires("groups", "groups.buckets", "scenario.policies")
@pytest.mark.protocols("stomp", "amqp")
def test_nothing_held_back_when_grouping_is_off_by_address_setting(broker, client, dest, protocol):
    """AMG "Message Grouping" / "Group Buckets": A (room for 2) holds G:1, G:2; with grouping off
    G's later messages are ordinary, so idle B takes them and the ungrouped ones behind them."""
    q = dest("queue", "grp.off")
    a = client().subscribe(q, ack="client-individual", prefetch=2)
    producer = client()
    for i in range(1, 6):
        producer.send(q, f"G:{i}", group_id="G")
    held = a.receive_n(2, RECEIVE_TIMEOUT)
    assert [m.text for m in held] == ["G:1", "G:2"], f"GRP-BUCKETS-1: A should hold G:1, G:2: {[m.text for m in held]}"
    b = client().subscribe(q, ack="client-individual", prefetch=10)
    for i in range(1, 4):
        producer.send(q, f"u:{i}")
    taken = [m.text for m in b.receive_n(6, RECEIVE_TIMEOUT)]
    for m in held:
        a.ack(m)
    assert taken == ["G:3", "G:4", "G:5", "u:1", "u:2", "u:3"], (
        f"GRP-BUCKETS-1: with grouping off idle B should take everything A has no room for: {taken}")
