"""Broker-wide engine behaviour: producer flow control and memory accounting, client ids,
authentication and authorization, destination names and wildcards. Spec IDs ENG-FLOW-*,
ENG-CLIENTID-1, ENG-AUTH-*, ENG-NAMES-1, ENG-WILD-1 (proposed for the catalogue)."""

from __future__ import annotations

import pytest

from reference_broker.engine.consumer import AckMode
from reference_broker.engine.errors import (
    AuthenticationFailed,
    ClientIdInUse,
    InvalidDestination,
    NotAuthorized,
    ResourceLimitError,
)
from reference_broker.engine.names import parse_destination
from reference_broker.engine.usage import MemoryUsage
from reference_broker.engine.wildcard import matches

from .test_engine_support import Client, dest, make_broker, pending_ids

Q = "queue://Q"
ONE = 100 + 64  # Message.size of a 100-byte body without properties


# --------------------------------------------------------------------------- flow control


def test_eng_flow_1_send_returns_false_at_memory_limit_and_waiter_fires_once():
    """ENG-FLOW-1 (ActiveMQ producer flow control): the send that brings a destination to its
    memory_limit is accepted but returns False (pause the producer); `wait_for_space` calls
    back exactly once when consumption frees memory."""
    broker = make_broker({"policy_entries": [{"queue": "Q", "memory_limit": 5 * ONE}]})
    c = Client(broker)
    results = [c.send(Q, f"m{i}", body=b"x" * 100) for i in range(5)]
    assert results == [True, True, True, True, False], "ENG-FLOW-1"
    assert broker.queues[Q].usage.used == 5 * ONE and broker.system_usage.used == 5 * ONE
    fired = []
    c.conn.wait_for_space(dest(Q), lambda: fired.append("go"))
    assert fired == [], "ENG-FLOW-1: still full"
    consumer = Client(broker)
    consumer.subscribe("A", Q, prefetch=1)
    assert fired == ["go"], "ENG-FLOW-1: woken once memory was freed"
    consumer.ack_all("A")
    consumer.ack_all("A")
    assert fired == ["go"], "ENG-FLOW-1: exactly once"
    # Not full: the callback runs at once.
    c.conn.wait_for_space(dest(Q), lambda: fired.append("now"))
    assert fired == ["go", "now"]


def test_eng_flow_1_broker_wide_limit_wakes_exactly_once():
    """ENG-FLOW-1: the broker-wide system_usage limit also pauses producers, and a producer
    waiting on it is woken once, not once per level of accounting."""
    broker = make_broker({"system_usage": {"memory_limit": 3 * ONE}})
    c = Client(broker)
    assert [c.send(Q, f"m{i}", body=b"x" * 100) for i in range(3)] == [True, True, False], "ENG-FLOW-1"
    fired = []
    c.conn.wait_for_space(dest(Q), lambda: fired.append(1))
    c.subscribe("A", Q, ack_mode=AckMode.AUTO)
    assert fired == [1], "ENG-FLOW-1: one wake-up"


def test_eng_flow_1_waiter_on_full_system_woken_by_another_destination():
    """ENG-FLOW-1: when only the broker-wide limit is in the way, memory freed by any
    destination wakes the paused producer."""
    broker = make_broker({"system_usage": {"memory_limit": 4 * ONE}})
    c = Client(broker)
    c.send("queue://OTHER", "o0", body=b"x" * 100)
    c.send("queue://OTHER", "o1", body=b"x" * 100)
    c.send(Q, "q0", body=b"x" * 100)
    assert c.send(Q, "q1", body=b"x" * 100) is False
    fired = []
    c.conn.wait_for_space(dest(Q), lambda: fired.append(1))
    c.subscribe("A", "queue://OTHER", ack_mode=AckMode.AUTO)
    assert fired == [1], "ENG-FLOW-1"


def test_eng_flow_1_destination_waiter_handed_to_the_full_parent():
    """ENG-FLOW-1 (usage accounting): a producer paused on its destination's own limit, whose
    destination drains while the broker-wide limit is still reached, is woken by memory freed
    elsewhere - it is not left waiting on a destination that has nothing more to free."""
    system = MemoryUsage("system", 6)
    queue = MemoryUsage("q", 4, system)
    other = MemoryUsage("other", None, system)
    queue.increase(4)              # queue full by its own limit
    fired = []
    queue.wait_for_space(lambda: fired.append(1))
    other.increase(6)              # system now full too (10 >= 6)
    queue.decrease(4)              # queue empty, but the system is still full (6 >= 6)
    assert fired == [] and queue.full
    other.decrease(1)              # room somewhere else in the broker
    assert fired == [1], "ENG-FLOW-1"
    other.decrease(5)
    queue.increase(4)
    queue.decrease(4)
    assert fired == [1], "ENG-FLOW-1: still exactly once"


def test_eng_flow_1_cancel_removes_the_waiter():
    """ENG-FLOW-1: a cancelled wait never calls back."""
    system = MemoryUsage("system", 2)
    q = MemoryUsage("q", None, system)
    q.increase(2)
    fired = []
    callback = lambda: fired.append(1)  # noqa: E731
    q.wait_for_space(callback)
    q.cancel(callback)
    q.decrease(2)
    assert fired == [], "ENG-FLOW-1"


def test_eng_flow_2_send_fail_if_no_space_raises():
    """ENG-FLOW-2 (ActiveMQ sendFailIfNoSpace): with the policy set, a send to a full
    destination is refused with ResourceLimitError naming the destination, and nothing is
    enqueued."""
    broker = make_broker({"policy_entries": [{"queue": "Q", "memory_limit": 2 * ONE, "send_fail_if_no_space": True}]})
    c = Client(broker)
    assert c.send(Q, "m0", body=b"x" * 100) is True
    # Now full; the policy refuses the next send rather than pausing this producer.
    assert c.send(Q, "m1", body=b"x" * 100) is True
    with pytest.raises(ResourceLimitError, match="queue://Q"):
        c.send(Q, "m2", body=b"x" * 100)
    assert pending_ids(broker, Q) == ["m0", "m1"], "ENG-FLOW-2"


def test_eng_flow_3_flow_control_off_never_pauses():
    """ENG-FLOW-3: with producer_flow_control off, sends over the limit are accepted without
    asking the producer to pause."""
    broker = make_broker({"policy_entries": [{"queue": "Q", "memory_limit": ONE, "producer_flow_control": False}]})
    c = Client(broker)
    assert all(c.send(Q, f"m{i}", body=b"x" * 100) for i in range(5)), "ENG-FLOW-3"


def test_eng_flow_4_memory_accounting_returns_to_zero():
    """ENG-FLOW-4: pending messages are charged to the destination and the broker; dispatch,
    acknowledgement, redelivery and dead-lettering keep the books balanced."""
    broker = make_broker({"policy_entries": [{"queue": ">", "maximum_redeliveries": 0}]})
    c = Client(broker)
    for i in range(10):
        c.send(Q, f"m{i}", body=b"x" * 100)
    assert broker.system_usage.used == 10 * ONE
    c.subscribe("A", Q, prefetch=3)
    assert broker.system_usage.used == 7 * ONE
    c.conn.unsubscribe("A")
    assert broker.system_usage.used == 10 * ONE
    c.subscribe("B", Q, prefetch=100)
    for mid in c.in_flight("B")[:5]:
        c.nack("B", mid)   # non-persistent, max 0: discarded
    c.ack_all("B")
    assert broker.system_usage.used == 0 and broker.queues[Q].usage.used == 0, "ENG-FLOW-4"


# --------------------------------------------------------------------------- client ids


def test_eng_clientid_1_client_id_unique_among_live_connections():
    """ENG-CLIENTID-1: a client id can be used by one connection at a time; once that
    connection closes the id is free again."""
    broker = make_broker()
    first = broker.connect(client_id="app")
    with pytest.raises(ClientIdInUse):
        broker.connect(client_id="app")
    broker.connect(client_id="other")
    broker.connect()  # no client id: always fine
    broker.connect()
    first.close()
    broker.connect(client_id="app")


# --------------------------------------------------------------------------- security


SECURITY = {
    "security": {
        "users": [
            {"name": "admin", "password": "secret", "groups": ["admins"]},
            {"name": "trader", "password": "pw", "groups": ["traders"]},
        ],
        "authorization": [
            {"queue": ">", "read": ["admins"], "write": ["admins"]},
            {"queue": "ORDERS.>", "read": ["admins", "traders"], "write": ["admins", "traders"]},
            {"topic": "PRICES.>", "read": ["*"], "write": ["admins"]},
            {"topic": "PRICES.*", "read": ["traders"], "write": ["admins"]},
        ],
    }
}


def test_eng_auth_1_authentication():
    """ENG-AUTH-1: with users configured, a wrong password or unknown user is refused and an
    anonymous login is refused unless allowed; with no users there is no authentication."""
    broker = make_broker(SECURITY)
    broker.connect(login="admin", passcode="secret")
    for login, passcode in [("admin", "wrong"), ("nobody", "x"), ("admin", None)]:
        with pytest.raises(AuthenticationFailed):
            broker.connect(login=login, passcode=passcode)
    with pytest.raises(AuthenticationFailed):
        broker.connect()
    allowed = make_broker({"security": {**SECURITY["security"], "allow_anonymous": True}})
    assert allowed.connect().groups == ["anonymous"]
    open_broker = make_broker()
    open_broker.connect()


def test_eng_auth_2_authorization_by_group_and_wildcard():
    """ENG-AUTH-2 (ActiveMQ authorizationEntry): read and write are granted per group on the
    most specific matching entry, including a catch-all `queue=">"`; everything else is
    refused with NotAuthorized."""
    broker = make_broker(SECURITY)
    admin = Client(broker, login="admin", passcode="secret")
    trader = Client(broker, login="trader", passcode="pw")
    admin.send("queue://ANYTHING", "a1")            # queue=">" grants admins
    with pytest.raises(NotAuthorized):
        trader.send("queue://ANYTHING", "t1")
    trader.send("queue://ORDERS.EU", "t2")
    trader.subscribe("o", "queue://ORDERS.EU")
    with pytest.raises(NotAuthorized):
        trader.subscribe("x", "queue://ANYTHING")
    with pytest.raises(NotAuthorized):
        trader.send("topic://PRICES.IBM", "t3")
    trader.subscribe("p", "topic://PRICES.IBM")     # PRICES.* read traders
    with pytest.raises(NotAuthorized):
        admin.subscribe("p", "topic://PRICES.IBM")  # most specific (PRICES.*) says traders only
    admin.subscribe("deep", "topic://PRICES.EU.SAP")  # PRICES.> read "*"
    with pytest.raises(NotAuthorized):
        admin.subscribe("t", "topic://TRADES")      # no entry: nothing allowed
    assert [d.message_id for d in trader.deliveries] == ["t2"]


def test_eng_auth_2_wildcard_subscription_needs_a_covering_entry():
    """ENG-AUTH-2: a wildcard subscription is checked against an entry that covers every
    destination it can match: read on PRICES.* does not grant a subscription to PRICES.>,
    which would also receive PRICES.EU.SAP."""
    broker = make_broker({"security": {
        "users": [{"name": "t", "password": "p", "groups": ["traders"]}],
        "authorization": [{"topic": "PRICES.*", "read": ["traders"], "write": ["traders"]}],
    }})
    c = Client(broker, login="t", passcode="p")
    c.subscribe("ok", "topic://PRICES.*")
    with pytest.raises(NotAuthorized):
        c.subscribe("wide", "topic://PRICES.>")


# --------------------------------------------------------------------------- names, wildcards


def test_eng_names_1_destination_names():
    """ENG-NAMES-1: `queue://X`, `topic://X` and bare names (of the default kind) parse;
    empty names, unknown kinds, whitespace and unknown parameters are refused."""
    assert parse_destination("queue://A.B").canonical == "queue://A.B"
    assert parse_destination("topic://A").is_topic
    assert parse_destination("A", "topic").canonical == "topic://A"
    d = parse_destination("queue://orders?group-buckets=4&group-first-key=F")
    assert (d.name, d.param("group-buckets"), d.param("group-first-key")) == ("orders", "4", "F")
    for bad in ("", "   ", "queue://", "exchange://x", "queue://a b", "queue://a?colour=red"):
        with pytest.raises(InvalidDestination):
            parse_destination(bad)


@pytest.mark.parametrize("pattern,name,expected", [
    ("A.B", "A.B", True), ("A.B", "A.C", False), ("A.*", "A.B", True), ("A.*", "A.B.C", False),
    ("A.*", "A", False), ("A.>", "A.B.C", True), ("A.>", "A", True), (">", "X.Y", True),
    ("A.#", "A.B.C", True), ("*.B", "A.B", True), ("*.B", "A.C", False),
    # wildcard names (wildcard subscriptions): a pattern matches only if it covers the name
    ("A.>", "A.>", True), ("A.*", "A.*", True), ("A.*", "A.>", False), (">", "A.>", True),
    ("A.B", "A.*", False),
])
def test_eng_wild_1_wildcard_matching(pattern, name, expected):
    """ENG-WILD-1 (ActiveMQ wildcards): `.` separates elements, `*` is one element, `>` (or
    Artemis' `#`) the rest."""
    assert matches(pattern, name) is expected, f"ENG-WILD-1 {pattern} vs {name}"


def test_eng_flow_4_accounting_does_not_depend_on_the_callers_destination_field():
    """ENG-FLOW-4: the engine takes the destination from the send, not from the message's own
    destination field, so memory charged for a topic's pending messages is always released."""
    from reference_broker.engine.message import Message

    broker = make_broker({"policy_entries": [
        {"topic": ">", "pending_message_limit_strategy": {"type": "constant", "limit": 2}}]})
    c = Client(broker)
    c.subscribe("s", "topic://T", prefetch=1)
    for i in range(10):
        m = Message(message_id=f"x{i}", destination="T")     # not canonical
        c.conn.send(dest("topic://T"), m)
        assert m.destination == "topic://T"
    assert broker.system_usage.used == 2 * 64
    c.conn.unsubscribe("s")
    assert broker.system_usage.used == 0, "ENG-FLOW-4"
