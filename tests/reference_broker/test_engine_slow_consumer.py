"""Slow consumers on non-durable topics, checked against ActiveMQ Classic's "Slow Consumer
Handling" page (../shared/spec/activemq-classic-slow-consumer-handling.md, cited below as
SCH and its section)."""

from __future__ import annotations

import pytest

from reference_broker.engine.consumer import AckMode

from .test_engine_support import Client, make_broker, subscription_stats

T = "topic://PRICES.IBM"


def limited(strategy: dict | None, eviction: dict | None = None, pattern: str = "PRICES.>") -> dict:
    entry: dict = {"topic": pattern}
    if strategy is not None:
        entry["pending_message_limit_strategy"] = strategy
    if eviction is not None:
        entry["message_eviction_strategy"] = eviction
    return {"policy_entries": [entry]}


def stalled(config: dict, prefetch: int, topic: str = T, consumer_id: str = "slow"):
    """A subscriber that never acknowledges: its prefetch fills, then messages pend."""
    broker = make_broker(config)
    c = Client(broker)
    c.subscribe(consumer_id, topic, prefetch=prefetch)
    return broker, c


def pending(c: Client, consumer_id: str = "slow") -> list[str]:
    return [r.message.message_id for r in c.consumer(consumer_id).source.pending]


# --------------------------------------------------------------------------- SLOW-LIMIT-1


def test_slow_limit_1_constant_limit_caps_pending_above_prefetch():
    """SLOW-LIMIT-1 (SCH §Pending Message Limit Strategy, §ConstantPendingMessageLimitStrategy,
    §Monitoring): a constant limit bounds what is kept for a consumer beyond its prefetch
    buffer; older pending messages are dropped as new ones arrive, `discarded` counts them and
    `matched` is what is waiting for prefetch room."""
    broker, c = stalled(limited({"type": "constant", "limit": 5}), prefetch=2)
    for i in range(20):
        c.send(T, f"p{i}")
    stats = subscription_stats(broker, "slow")
    assert c.got() == ["p0", "p1"], "SLOW-LIMIT-1: prefetch buffer filled first"
    assert pending(c) == [f"p{i}" for i in range(15, 20)], "SLOW-LIMIT-1: newest 5 kept"
    assert (stats["pending_limit"], stats["matched"], stats["discarded"], stats["in_flight"]) == (5, 5, 13, 2), (
        f"SLOW-LIMIT-1: {stats}")
    # Acknowledging makes room: the kept messages flow, the discarded ones never come.
    while c.conn.consumer("slow").in_flight:
        c.ack_all("slow")
    assert c.got() == ["p0", "p1"] + [f"p{i}" for i in range(15, 20)], "SLOW-LIMIT-1"
    stats = subscription_stats(broker, "slow")
    assert (stats["matched"], stats["discarded"], stats["dequeued"]) == (0, 13, 7)


def test_slow_limit_1_fast_consumer_on_same_topic_loses_nothing():
    """SLOW-LIMIT-1 (SCH intro): the limit is per consumer - a fast consumer on the same topic
    keeps receiving everything while the slow one discards."""
    broker = make_broker(limited({"type": "constant", "limit": 1}))
    c = Client(broker)
    c.subscribe("slow", T, prefetch=1)
    c.subscribe("fast", T, ack_mode=AckMode.AUTO)
    for i in range(10):
        c.send(T, f"p{i}")
    assert c.got("fast") == [f"p{i}" for i in range(10)], "SLOW-LIMIT-1"
    assert subscription_stats(broker, "slow")["discarded"] == 8
    assert subscription_stats(broker, "fast")["discarded"] == 0


# --------------------------------------------------------------------------- SLOW-LIMIT-2


@pytest.mark.parametrize("prefetch,multiplier,expected", [(3, 2.5, 7), (4, 2.5, 10), (10, 0.05, 0), (2, 1.0, 2)])
def test_slow_limit_2_prefetch_rate_multiplier(prefetch, multiplier, expected):
    """SLOW-LIMIT-2 (SCH §PrefetchRatePendingMessageLimitStrategy): the limit is the consumer's
    prefetch times the multiplier (truncated to an integer)."""
    broker, c = stalled(limited({"type": "prefetch_rate", "multiplier": multiplier}), prefetch=prefetch)
    n = prefetch + expected + 13
    for i in range(n):
        c.send(T, f"p{i}")
    stats = subscription_stats(broker, "slow")
    assert stats["pending_limit"] == expected == int(prefetch * multiplier), f"SLOW-LIMIT-2: {stats}"
    assert (stats["matched"], stats["discarded"]) == (expected, 13), f"SLOW-LIMIT-2: {stats}"


# --------------------------------------------------------------------------- SLOW-LIMIT-3


@pytest.mark.parametrize("strategy", [{"type": "constant", "limit": -1}, None])
def test_slow_limit_3_minus_one_never_discards(strategy):
    """SLOW-LIMIT-3 (SCH §Pending Message Limit Strategy): -1 turns discarding off (and with no
    strategy configured, ActiveMQ's default, nothing is discarded either)."""
    broker, c = stalled(limited(strategy), prefetch=2)
    for i in range(500):
        c.send(T, f"p{i}")
    stats = subscription_stats(broker, "slow")
    assert (stats["matched"], stats["discarded"]) == (498, 0), f"SLOW-LIMIT-3: {stats}"


# --------------------------------------------------------------------------- SLOW-LIMIT-4


def test_slow_limit_4_zero_keeps_nothing_beyond_prefetch():
    """SLOW-LIMIT-4 (SCH §Pending Message Limit Strategy): a limit of zero keeps nothing except
    what fits in the prefetch buffer."""
    broker, c = stalled(limited({"type": "constant", "limit": 0}), prefetch=3)
    for i in range(10):
        c.send(T, f"p{i}")
    stats = subscription_stats(broker, "slow")
    assert (stats["in_flight"], stats["matched"], stats["discarded"]) == (3, 0, 7), f"SLOW-LIMIT-4: {stats}"
    c.ack_all("slow")
    c.send(T, "late")
    assert c.got() == ["p0", "p1", "p2", "late"], "SLOW-LIMIT-4"


# --------------------------------------------------------------------------- SLOW-EVICT-*


def test_slow_evict_1_oldest_is_the_default():
    """SLOW-EVICT-1 (SCH §Configuring the Eviction Policy): the default strategy evicts the
    oldest pending message."""
    broker, c = stalled(limited({"type": "constant", "limit": 3}), prefetch=1)
    assert broker.policies.policy_for(c.consumer("slow").destination).message_eviction_strategy.type == "oldest"
    for i in range(8):
        c.send(T, f"p{i}", priority=9 if i == 1 else 4)   # priority does not matter here
    assert pending(c) == ["p5", "p6", "p7"], "SLOW-EVICT-1"
    assert subscription_stats(broker, "slow")["discarded"] == 4


def test_slow_evict_2_oldest_with_lowest_priority():
    """SLOW-EVICT-2 (SCH §Configuring the Eviction Policy, oldestMessageWithLowestPriority): the
    lowest-priority pending message goes first even when it is newer; among equal priorities
    the oldest goes."""
    broker, c = stalled(limited({"type": "constant", "limit": 3}, {"type": "oldest_with_lowest_priority"}), prefetch=1)
    c.send(T, "p0")                      # fills the prefetch buffer
    for mid, prio in [("A", 9), ("B", 1), ("C", 9), ("D", 1)]:
        c.send(T, mid, priority=prio)
    assert pending(c) == ["A", "C", "D"], "SLOW-EVICT-2: low-priority B evicted before older A"
    c.send(T, "E", priority=9)
    assert pending(c) == ["A", "C", "E"], "SLOW-EVICT-2: newer low-priority D evicted"
    c.send(T, "F", priority=1)
    assert pending(c) == ["A", "C", "E"], "SLOW-EVICT-2: the newcomer itself can be the lowest"
    c.send(T, "G", priority=9)
    assert pending(c) == ["C", "E", "G"], "SLOW-EVICT-2: all equal -> oldest"
    assert subscription_stats(broker, "slow")["discarded"] == 4


def test_slow_evict_3_unique_property_keeps_newest_per_value():
    """SLOW-EVICT-3 (SCH §Configuring the Eviction Policy, uniquePropertyMessageEviction): older
    messages that have a newer pending message with the same property value (e.g. the same
    stock symbol) are evicted first, so the latest price per symbol survives."""
    cfg = limited({"type": "constant", "limit": 3}, {"type": "unique_property", "property_name": "STOCK"})
    broker, c = stalled(cfg, prefetch=1)
    c.send(T, "IBM1", properties={"STOCK": "IBM"})      # prefetch
    for mid in ("IBM2", "MSFT1", "IBM3"):
        c.send(T, mid, properties={"STOCK": mid[:-1]})
    assert pending(c) == ["IBM2", "MSFT1", "IBM3"]
    c.send(T, "ORCL1", properties={"STOCK": "ORCL"})
    assert pending(c) == ["MSFT1", "IBM3", "ORCL1"], "SLOW-EVICT-3: older IBM2 superseded by IBM3"
    c.send(T, "AAPL1", properties={"STOCK": "AAPL"})
    assert pending(c) == ["IBM3", "ORCL1", "AAPL1"], "SLOW-EVICT-3: all unique -> oldest goes"
    c.send(T, "IBM4", properties={"STOCK": "IBM"})
    assert pending(c) == ["ORCL1", "AAPL1", "IBM4"], "SLOW-EVICT-3"
    assert subscription_stats(broker, "slow")["discarded"] == 3


def test_slow_evict_3_unique_property_never_keeps_two_of_one_value_when_over_limit():
    """SLOW-EVICT-3 (SCH §Configuring the Eviction Policy): whenever eviction runs, what is left
    pending holds at most one message per property value."""
    cfg = limited({"type": "constant", "limit": 4}, {"type": "unique_property", "property_name": "STOCK"})
    broker, c = stalled(cfg, prefetch=1)
    symbols = ["IBM", "MSFT", "IBM", "ORCL", "IBM", "MSFT", "ORCL", "ORCL", "IBM", "SAP", "IBM", "IBM"]
    evictions = 0
    for i, sym in enumerate(symbols):
        before = subscription_stats(broker, "slow")["discarded"]
        c.send(T, f"{sym}-{i}", properties={"STOCK": sym})
        left = pending(c)
        assert len(left) <= 4, f"SLOW-EVICT-3: over the limit {left}"
        if subscription_stats(broker, "slow")["discarded"] > before:
            evictions += 1
            values = [mid.split("-")[0] for mid in left]
            assert len(values) == len(set(values)), f"SLOW-EVICT-3: duplicate value kept {left}"
            assert f"{sym}-{i}" in left, "SLOW-EVICT-3: the newest message of its value survives"
    assert evictions >= 3
    assert pending(c) == ["MSFT-5", "ORCL-7", "SAP-9", "IBM-11"], f"SLOW-EVICT-3 {pending(c)}"


# --------------------------------------------------------------------------- SLOW-POLICY-1


def test_slow_policy_1_policy_entries_matched_by_wildcard_most_specific_wins():
    """SLOW-POLICY-1 (SCH §Pending Message Limit Strategy and §Example): the strategy comes from
    the destination policy entry whose wildcard matches the topic, so different regions of the
    topic namespace can behave differently; the most specific entry wins."""
    broker = make_broker({"policy_entries": [
        {"topic": ">", "pending_message_limit_strategy": {"type": "constant", "limit": 50}},
        {"topic": "PRICES.>", "pending_message_limit_strategy": {"type": "constant", "limit": 10}},
        {"topic": "PRICES.*", "pending_message_limit_strategy": {"type": "constant", "limit": 7}},
        {"topic": "PRICES.IBM", "pending_message_limit_strategy": {"type": "constant", "limit": 2}},
        {"topic": "ORDERS.>"},   # orders: no strategy -> never discard
        {"queue": "PRICES.>", "pending_message_limit_strategy": {"type": "constant", "limit": 1}},
    ]})
    c = Client(broker)
    expected = {
        "topic://PRICES.IBM": 2, "topic://PRICES.MSFT": 7, "topic://PRICES.EU.SAP": 10,
        "topic://ORDERS.EU": -1, "topic://TRADES": 50, "topic://PRICES.>": 10,
    }
    for i, (topic, limit) in enumerate(expected.items()):
        c.subscribe(f"s{i}", topic, prefetch=1)
        assert subscription_stats(broker, f"s{i}")["pending_limit"] == limit, f"SLOW-POLICY-1 {topic}"
    for i in range(6):
        c.send("topic://PRICES.IBM", f"ibm{i}")
        c.send("topic://ORDERS.EU", f"ord{i}")
    assert subscription_stats(broker, "s0")["matched"] == 2, "SLOW-POLICY-1"
    assert subscription_stats(broker, "s3")["matched"] == 5, "SLOW-POLICY-1: orders keep everything"
    # The wildcard subscriber PRICES.> (limit 10) matched all six IBM prices.
    assert subscription_stats(broker, "s5")["matched"] == 5


def test_slow_durable_1_durable_subscriptions_discard_nothing():
    """SLOW-DURABLE-1 (SCH intro: the problem and the strategy concern non-durable topics): a
    durable subscriber on a topic with a pending limit keeps every message."""
    broker = make_broker(limited({"type": "constant", "limit": 2}))
    c = Client(broker, client_id="cid")
    c.subscribe("d", T, prefetch=1, durable_name="sub")
    for i in range(10):
        c.send(T, f"p{i}")
    stats = next(s for s in broker.stats()["subscriptions"] if s["durable"])
    assert (stats["in_flight"], stats["pending"], stats["discarded"]) == (1, 9, 0), f"SLOW-DURABLE-1 {stats}"


# --------------------------------------------------------------------------- SLOW-MEM-1


def test_slow_mem_1_stalled_consumer_keeps_broker_memory_bounded():
    """SLOW-MEM-1 (SCH intro and §Pending Message Limit Strategy): discarding for a slow
    consumer keeps the RAM a topic needs bounded; 100k messages published to a stalled
    consumer never use more than (limit + 1) messages' worth of memory at any time."""
    limit, prefetch, n = 10, 5, 100_000
    broker, c = stalled(limited({"type": "constant", "limit": limit}), prefetch=prefetch)
    c.subscribe("fast", T, ack_mode=AckMode.AUTO)
    body = b"x" * 100
    size = None
    send = c.conn.send
    destination = c.consumer("slow").destination
    from .test_engine_support import message

    for i in range(n):
        m = message(T, f"p{i}", body=body)
        size = m.size
        assert send(destination, m) is True
        if i % 10_000 == 0:
            assert broker.system_usage.used <= limit * size, f"SLOW-MEM-1 at {i}: {broker.system_usage.used}"
    usage = broker.system_usage
    assert usage.used == limit * size, f"SLOW-MEM-1: {usage.used}"
    assert usage.high_water <= (limit + 1) * size, f"SLOW-MEM-1 high water {usage.high_water}"
    stats = subscription_stats(broker, "slow")
    assert (stats["matched"], stats["discarded"]) == (limit, n - prefetch - limit), f"SLOW-MEM-1 {stats}"
    assert len([d for d in c.deliveries if d.consumer_id == "fast"]) == n
    # The memory is given back when the slow consumer goes away.
    c.conn.unsubscribe("slow")
    assert usage.used == 0, "SLOW-MEM-1: pending memory released on unsubscribe"


def test_slow_mem_1_control_without_limit_memory_grows():
    """SLOW-MEM-1, control case: without a pending limit the stalled consumer's backlog (and the
    broker's memory) grows with every message."""
    broker, c = stalled(limited(None), prefetch=5)
    for i in range(1000):
        c.send(T, f"p{i}", body=b"x" * 100)
    one = 100 + 64
    assert broker.system_usage.used == 995 * one, "SLOW-MEM-1 control"


# --------------------------------------------------------------------------- SLOW-CONSUMER-LIMIT-1


@pytest.mark.parametrize(
    "policy_limit, requested, expected",
    [
        (None, 3, 3),  # no policy strategy: the consumer's own limit applies
        (10, 3, 3),  # a consumer may lower the policy's limit
        (2, 5, 2),  # ...but not raise it
        (4, 0, 4),  # a requested 0 is ignored
        (None, 0, -1),  # ignored, and no policy: nothing is discarded
    ],
)
def test_slow_consumer_limit_1_consumer_sets_its_own_limit(policy_limit, requested, expected):
    """SLOW-CONSUMER-LIMIT-1 (SCH §Using the Prefetch Policy to Configure the Limit): a consumer
    can ask for its own maximum pending message limit; zero is ignored so the lowest it can
    ask for is 1. Combined with the policy, the smaller positive limit wins."""
    strategy = {"type": "constant", "limit": policy_limit} if policy_limit is not None else None
    broker = make_broker(limited(strategy))
    c = Client(broker)
    c.subscribe("slow", T, prefetch=1, maximum_pending_limit=requested)
    for i in range(12):
        c.send(T, f"p{i}")
    stats = subscription_stats(broker, "slow")
    assert stats["pending_limit"] == expected, f"SLOW-CONSUMER-LIMIT-1: {stats}"
    kept = 11 if expected == -1 else expected
    assert (stats["matched"], stats["discarded"]) == (kept, 11 - kept), f"SLOW-CONSUMER-LIMIT-1: {stats}"
