"""Broker paths on messages: message TTL and loop suppression, evaluated by the engine's own
selector (the forwarding network consumer and a duplex pull subscription use the same rule)."""

import pytest

from reference_broker.cluster.paths import (
    extend_path,
    format_path,
    may_forward,
    network_id,
    parse_network_id,
    parse_path,
    remote_message_selector,
)
from reference_broker.engine.message import Message
from reference_broker.engine.selector import parse_selector


def test_path_round_trip():
    assert parse_path(extend_path(extend_path(None, "A"), "B")) == ("A", "B")
    assert format_path(()) == "" and parse_path("") == ()


@pytest.mark.parametrize("path, target, ttl, expected", [
    ((), "B", 1, True),          # produced here: one hop allowed
    (("A",), "C", 1, False),     # already crossed one broker: message_ttl 1 stops it
    (("A",), "C", 2, True),
    (("A",), "A", 5, False),     # never back to a broker it came through
])
def test_may_forward(path, target, ttl, expected):
    assert may_forward(path, target, ttl) is expected


@pytest.mark.parametrize("path", [(), ("A",), ("A", "C"), ("C",), ("C", "D"), ("C", "D", "E")])
@pytest.mark.parametrize("ttl", [1, 2, 3])
def test_selector_agrees_with_may_forward(path, ttl):
    selector = parse_selector(remote_message_selector("A", ttl))
    message = Message("m", "queue://q", properties={"brokerPath": format_path(path)} if path else {})
    assert selector.matches(message.header) is may_forward(path, "A", ttl)


def test_selector_escapes_like_wildcards_in_broker_names():
    selector = parse_selector(remote_message_selector("nob_A", 5))
    other = Message("m", "queue://q", properties={"brokerPath": ",nobXA,"})
    assert selector.matches(other.header)  # '_' is not a wildcard here
    assert not selector.matches(Message("m", "queue://q", properties={"brokerPath": ",nob_A,"}).header)


def test_selector_keeps_the_remote_consumers_selector():
    selector = parse_selector(remote_message_selector("A", 1, "colour = 'red'"))
    assert selector.matches(Message("m", "queue://q", properties={"colour": "red"}).header)
    assert not selector.matches(Message("m", "queue://q", properties={"colour": "blue"}).header)


def test_network_ids_carry_path_and_priority():
    assert parse_network_id(network_id(("B", "C"), -6, 3)) == (("B", "C"), -6)
    assert parse_network_id("sub-1") is None
