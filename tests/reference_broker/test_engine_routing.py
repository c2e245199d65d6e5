"""Topic routing through the subscription trie (engine/routing.py) and the bounds on what the
broker keeps per distinct name (issue 20, item 6). Spec IDs ENG-ROUTE-* (proposed for the
catalogue, as the other ENG-* engine statements).

ENG-ROUTE-1: a publish reaches exactly the subscriptions whose pattern matches its name, as
`wildcard.matches` defines matching. ENG-ROUTE-2: the work of routing one publish does not grow
with subscriptions its name cannot match. ENG-ROUTE-3: publishing to ever new names leaves a
bounded amount behind (caches, topics)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.engine import broker as broker_module
from reference_broker.engine import topic as topic_module
from reference_broker.engine import virtual as virtual_module
from reference_broker.engine import wildcard
from reference_broker.engine.audit import NetworkAudit
from reference_broker.engine.consumer import AckMode
from reference_broker.engine.names import parse_destination
from reference_broker.engine.routing import IndexedQueues, SubscriptionTrie
from reference_broker.engine.wildcard import WildcardMap, matches

from .test_engine_support import Client, make_broker

# Few distinct elements, so random patterns and names actually meet; the wildcard characters are
# in the name alphabet too (a wildcard-looking name is where `*` and `>` differ).
_ELEMENT = st.sampled_from(["a", "b", "c", "", "ab"])
_PATTERN_ELEMENT = st.one_of(_ELEMENT, st.sampled_from(["*", ">", "#"]))
_NAME = st.lists(st.one_of(_ELEMENT, st.sampled_from(["*", ">", "#"])), min_size=1, max_size=5).map(".".join)
_PATTERN = st.lists(_PATTERN_ELEMENT, min_size=1, max_size=5).map(".".join)


class _Sub:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __repr__(self) -> str:
        return f"_Sub({self.pattern!r})"


@settings(max_examples=400, deadline=None)
@given(patterns=st.lists(_PATTERN, max_size=12), names=st.lists(_NAME, min_size=1, max_size=8),
       removed=st.sets(st.integers(min_value=0, max_value=11)))
def test_trie_agrees_with_the_wildcard_matcher(patterns, names, removed):
    """ENG-ROUTE-1: for random patterns (some added and removed again) and names, the trie finds
    exactly the subscriptions `wildcard.matches` accepts, in the order they were added."""
    trie: SubscriptionTrie[_Sub] = SubscriptionTrie()
    subs = [_Sub(p) for p in patterns]
    for sub in subs:
        trie.add(sub.pattern, sub)
    for i in sorted(removed):
        if i < len(subs):
            trie.remove(subs[i])
    kept = [s for i, s in enumerate(subs) if i not in removed]
    for name in names:
        expected = [s for s in kept if matches(s.pattern, name)]
        assert trie.match(name) == expected, f"ENG-ROUTE-1: {name!r} against {[s.pattern for s in kept]}"
    assert list(trie) == kept, "ENG-ROUTE-1: the trie lists what it holds, oldest first"


def test_removing_every_subscription_leaves_an_empty_trie():
    """ENG-ROUTE-3: unsubscribed patterns leave no branches behind."""
    trie: SubscriptionTrie[_Sub] = SubscriptionTrie()
    subs = [_Sub(f"a.{i}.*.x") for i in range(100)] + [_Sub("a.>"), _Sub("*.b"), _Sub("#")]
    for sub in subs:
        trie.add(sub.pattern, sub)
    for sub in subs:
        trie.remove(sub)
    assert len(trie) == 0 and trie._root.empty(), "ENG-ROUTE-3: nothing left after the last unsubscribe"


def test_ten_thousand_unrelated_subscriptions_do_not_slow_each_publish(monkeypatch):
    """ENG-ROUTE-2, the issue 20 attack: one connection holds 10k topic subscriptions, another
    publishes to names none of them matches. Each publish must visit a handful of trie nodes
    (bounded by the name's length), not scan the subscriptions; the old route lookup called the
    matcher once per subscription for every new name (10k calls per publish)."""
    matcher_calls = 0

    def counting_matches(pattern: str, name: str) -> bool:
        nonlocal matcher_calls
        matcher_calls += 1
        return matches(pattern, name)

    monkeypatch.setattr(topic_module, "matches", counting_matches)
    broker = make_broker()
    # 20 connections of 500 subscriptions: under any per-connection consumer limit
    attackers = [Client(broker) for _ in range(20)]
    for i in range(10_000):
        attackers[i % 20].subscribe(f"s{i}", f"topic://SPAM.{i}.x", ack_mode=AckMode.AUTO)
    attacker = attackers[0]
    attacker.subscribe("wild", "topic://SPAM.*.y", ack_mode=AckMode.AUTO)
    watcher = Client(broker)
    watcher.subscribe("mine", "topic://PRICES.>", ack_mode=AckMode.AUTO)
    publishes = 500
    for i in range(publishes):
        watcher.send(f"topic://PRICES.N{i}", f"p{i}")
    assert matcher_calls / publishes <= 1, (
        f"ENG-ROUTE-2: {matcher_calls / publishes} pattern matches per publish with 10k unrelated subscriptions")
    trie = broker._routing
    before = trie.nodes_visited
    for i in range(publishes):
        watcher.send(f"topic://PRICES.M{i}", f"q{i}")
    per_publish = (trie.nodes_visited - before) / publishes
    # The name PRICES.Nx has two elements: at most root, PRICES and PRICES.Nx are visited.
    assert per_publish <= 3, f"ENG-ROUTE-2: {per_publish} trie nodes visited per publish with 10k unrelated subscriptions"
    expected = [f"p{i}" for i in range(publishes)] + [f"q{i}" for i in range(publishes)]
    assert watcher.got("mine") == expected, "ENG-ROUTE-1: the matching subscriber got every message"
    assert all(a.got() == [] for a in attackers), "ENG-ROUTE-1: no unrelated subscription got anything"
    # A name the wildcard subscription does match reaches it, still without scanning the rest.
    before = trie.nodes_visited
    watcher.send("topic://SPAM.77.y", "hit")
    assert trie.nodes_visited - before <= 6, "ENG-ROUTE-2: a matching name walks only its own branches"
    assert attacker.got("wild") == ["hit"], "ENG-ROUTE-1"


def test_publishing_to_many_distinct_names_keeps_the_broker_bounded(monkeypatch):
    """ENG-ROUTE-3, the issue 20 attack: 100k publishes, each to a new topic name, with a `>`
    subscriber reading them all. What the broker keeps per name (the topics with their
    statistics, the policy lookup cache) stays within its documented bounds; the route cache
    the old lookup kept per name is gone."""
    monkeypatch.setattr(broker_module, "IDLE_TOPIC_LIMIT", 1000, raising=False)
    broker = make_broker()
    reader = Client(broker)
    reader.subscribe("all", "topic://>", ack_mode=AckMode.AUTO)
    received = 0
    for i in range(100_000):
        reader.send(f"topic://FLOOD.{i}")
        if i % 10_000 == 0:
            received += len(reader.got("all"))
            reader.deliveries.clear()
    received += len(reader.got("all"))
    assert received == 100_000, "ENG-ROUTE-1: the `>` subscriber got every message"
    assert len(broker.topics) <= 1000, f"ENG-ROUTE-3: {len(broker.topics)} topics kept after 100k distinct names"
    assert len(broker.policies._topic_entries._cache) <= wildcard.LOOKUP_CACHE_SIZE, "ENG-ROUTE-3: policy cache bounded"
    assert not hasattr(broker, "_route_cache"), "ENG-ROUTE-3: no per-name route cache"
    # The most recent topics are the ones kept, with their statistics.
    assert "topic://FLOOD.99999" in broker.topics and broker.topics["topic://FLOOD.99999"].enqueued == 1


def test_a_topic_with_pending_messages_is_never_forgotten(monkeypatch):
    """ENG-ROUTE-3: only topics holding nothing are forgotten: a topic whose messages wait for a
    slow subscriber keeps its memory accounting (forgetting it would lose the charge)."""
    monkeypatch.setattr(broker_module, "IDLE_TOPIC_LIMIT", 10, raising=False)
    broker = make_broker()
    slow = Client(broker)
    slow.subscribe("slow", "topic://HELD", prefetch=1)
    for i in range(5):
        slow.send("topic://HELD", f"h{i}")
    held = broker.topics["topic://HELD"]
    assert held.usage.used > 0
    other = Client(broker)
    for i in range(100):
        other.send(f"topic://OTHER.{i}", "o")
    assert broker.topics.get("topic://HELD") is held, "ENG-ROUTE-3: a topic with pending messages was forgotten"
    assert len(broker.topics) <= 10, "ENG-ROUTE-3: idle topics beyond the limit are forgotten"
    slow.ack("slow", "h0")
    for i in range(1, 5):
        slow.ack("slow", f"h{i}")
    assert slow.got("slow") == [f"h{i}" for i in range(5)]
    assert held.usage.used == 0, "ENG-ROUTE-3: its memory was released on the same topic object"


def test_wildcard_map_lookup_cache_is_bounded():
    """ENG-ROUTE-3: policy and authorization lookups remember at most LOOKUP_CACHE_SIZE names, and
    still answer right for names it forgot."""
    wmap = WildcardMap([("A.>", "a"), ("A.B.*", "ab"), (">", "any")])
    for i in range(wildcard.LOOKUP_CACHE_SIZE * 3):
        assert wmap.lookup(f"A.B.{i}") == "ab"
        assert wmap.lookup(f"Z.{i}") == "any"
    assert len(wmap._cache) <= wildcard.LOOKUP_CACHE_SIZE, "ENG-ROUTE-3: lookup cache bounded"
    assert wmap.lookup("A.B.0") == "ab" and wmap.lookup("A.C") == "a"


@settings(max_examples=300, deadline=None)
@given(names=st.lists(_NAME, max_size=12), patterns=st.lists(_PATTERN, min_size=1, max_size=6),
       removed=st.sets(st.integers(min_value=0, max_value=11)))
def test_name_index_agrees_with_the_wildcard_matcher(names, patterns, removed):
    """ENG-ROUTE-1: the queue-name index virtual topics use finds exactly the names
    `wildcard.matches` accepts, in the order they were added, after removals too."""
    queues = IndexedQueues()
    for name in names:
        queues[f"queue://{name}"] = object()
    for i in sorted(removed):
        if i < len(names):
            queues.pop(f"queue://{names[i]}", None)
    kept = [key.partition("://")[2] for key in queues]
    for pattern in patterns:
        expected = [n for n in kept if matches(pattern, n)]
        assert queues.names.matching(pattern) == expected, f"ENG-ROUTE-1: {pattern!r} against {kept}"


def test_virtual_topic_copies_do_not_scan_unrelated_queues(monkeypatch):
    """ENG-ROUTE-2: with 10k unrelated queues, a message to a virtual topic finds its consumer
    queues without looking at the others (ActiveMQ virtual topics: Consumer.*.VirtualTopic.X);
    the old lookup matched the pattern against every queue name for every message."""
    matcher_calls = 0

    def counting_matches(pattern: str, name: str) -> bool:
        nonlocal matcher_calls
        matcher_calls += 1
        return matches(pattern, name)

    monkeypatch.setattr(virtual_module, "matches", counting_matches)
    broker = make_broker()
    client = Client(broker)
    for i in range(10_000):
        broker.queue(parse_destination(f"queue://OTHER.{i}"))
    client.subscribe("a", "queue://Consumer.A.VirtualTopic.ORDERS", ack_mode=AckMode.AUTO)
    client.subscribe("b", "queue://Consumer.B.VirtualTopic.ORDERS", ack_mode=AckMode.AUTO)
    for i in range(100):
        client.send("topic://VirtualTopic.ORDERS", f"o{i}")
    assert client.got("a") == client.got("b") == [f"o{i}" for i in range(100)], "ENG-ROUTE-1: each consumer queue got a copy"
    assert matcher_calls / 100 <= 2, f"ENG-ROUTE-2: {matcher_calls / 100} pattern matches per message with 10k other queues"
    index = broker.queues.names
    before = index.nodes_visited
    for i in range(100, 200):
        client.send("topic://VirtualTopic.ORDERS", f"o{i}")
    per_message = (index.nodes_visited - before) / 100
    assert per_message <= 10, f"ENG-ROUTE-2: {per_message} queue-name nodes visited per message with 10k other queues"


def test_a_wildcard_stomp_subscriber_on_many_names_keeps_a_bounded_frame_cache():
    """ENG-ROUTE-3: a STOMP session caches the start of its MESSAGE frames per (subscription,
    destination); a `>` subscriber sees a new destination with every message, so the cache must
    stay within MESSAGE_PREFIX_CACHE_SIZE and the frames must stay right."""
    from reference_broker.protocols.stomp import session as stomp_session

    from .test_stomp_fuzz import new_session, server_frames

    broker = make_broker()
    session, transport = new_session(broker)
    session.data_received(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0"
                          b"SUBSCRIBE\nid:all\ndestination:/topic/>\nack:auto\n\n\0")
    producer = Client(broker)
    names = 3 * stomp_session.MESSAGE_PREFIX_CACHE_SIZE
    for i in range(names):
        producer.send(f"topic://MANY.{i}")
    assert len(session._message_prefixes) <= stomp_session.MESSAGE_PREFIX_CACHE_SIZE, "ENG-ROUTE-3: frame cache bounded"
    messages = [f for f in server_frames(bytes(transport.data)) if f.command == "MESSAGE"]
    assert [f.get("destination") for f in messages] == [f"/topic/MANY.{i}" for i in range(names)], "ENG-ROUTE-1"


def test_network_audit_forgets_the_least_recently_used_destination():
    """ENG-ROUTE-3: the duplicate audit of network messages keeps ids for a bounded number of
    destinations (the property is a header any client can set, on ever new names), and still
    catches a resend on a destination it remembers."""
    audit = NetworkAudit(depth=4, destinations=3)
    for i in range(10):
        assert not audit.is_duplicate(f"topic://A.{i}", "origin-1|")
    assert len(audit._seen) == 3, "ENG-ROUTE-3: audited destinations bounded"
    assert audit.is_duplicate("topic://A.9", "origin-1|"), "a resend on a remembered destination is caught"
    assert not audit.is_duplicate("topic://A.0", "origin-1|"), "a forgotten destination starts afresh"


def test_queues_used_once_under_ever_new_names_do_not_accumulate(monkeypatch):
    """ENG-ROUTE-3: a client sending to (and draining) ever new queue names leaves a bounded
    number of empty queues behind, and the queue-name index shrinks with them."""
    monkeypatch.setattr(broker_module, "IDLE_QUEUE_LIMIT", 100, raising=False)
    broker = make_broker()
    client = Client(broker)
    for i in range(2000):
        client.send(f"queue://ONCE.{i}", f"m{i}")
        client.subscribe(f"c{i}", f"queue://ONCE.{i}", ack_mode=AckMode.AUTO)
        client.conn.unsubscribe(f"c{i}")
    assert client.got() == [f"m{i}" for i in range(2000)], "ENG-ROUTE-1: every queue delivered its message"
    assert len(broker.queues) <= 100, f"ENG-ROUTE-3: {len(broker.queues)} empty queues kept after 2000 names"
    assert broker.queues.names.matching(">") == [k.partition("://")[2] for k in broker.queues], (
        "ENG-ROUTE-3: the name index holds exactly the queues kept")


def test_queues_holding_messages_or_feeding_a_virtual_topic_are_kept(monkeypatch):
    """ENG-ROUTE-3: only empty queues without consumers are forgotten: one holding a message is
    kept, and so is a virtual topic's consumer queue whose consumer is away (it must go on
    receiving copies, ActiveMQ "Virtual Destinations")."""
    monkeypatch.setattr(broker_module, "IDLE_QUEUE_LIMIT", 50, raising=False)
    broker = make_broker()
    client = Client(broker)
    client.subscribe("vt", "queue://Consumer.A.VirtualTopic.ORDERS", ack_mode=AckMode.AUTO)
    client.conn.unsubscribe("vt")  # the consumer goes away; its queue stays, empty
    client.send("queue://HOLDS", "kept")
    for i in range(500):
        broker.queue(parse_destination(f"queue://EMPTY.{i}"))
    assert len(broker.queues) <= 50, "ENG-ROUTE-3: empty queues beyond the limit are forgotten"
    assert "queue://HOLDS" in broker.queues and broker.queues["queue://HOLDS"].pending_count == 1, (
        "ENG-ROUTE-3: a queue holding a message was forgotten")
    assert "queue://Consumer.A.VirtualTopic.ORDERS" in broker.queues, (
        "ENG-ROUTE-3: a virtual topic's consumer queue was forgotten while its consumer was away")
    client.send("topic://VirtualTopic.ORDERS", "while-away")
    assert broker.queues["queue://Consumer.A.VirtualTopic.ORDERS"].pending_count == 1, "ENG-ROUTE-1"
