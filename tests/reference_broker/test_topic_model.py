"""Model-based test of topic subscriptions with wildcards in the engine (hypothesis.stateful):
subscribers come and go on exact names and on `*` / `>` patterns, publishes go to names old and
new, and every subscription must get exactly what a naive matcher says, in publish order.

This is the routing the engine does for every protocol (MQTT `+` / `#` map onto `*` / `>`);
the model keeps a list of live subscriptions and matches each publish against every one of
them, so whatever structure the engine routes through (route caches, a subscription trie)
must agree with the plain definition. Name elements are separated by `.`; `*` matches one
element, `>` at the end matches the rest, none included (ENG-TOPIC-1 in
test_engine_topic.py, as ActiveMQ's wildcards do).
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reference_broker.engine.consumer import AckMode

from .test_engine_support import Client, make_broker

ELEMENTS = ["A", "B", "C"]
PATTERN_ELEMENT = st.sampled_from(ELEMENTS + ["*"])
NAMES = st.lists(st.sampled_from(ELEMENTS), min_size=1, max_size=3).map(".".join)
PATTERNS = st.one_of(
    st.lists(PATTERN_ELEMENT, min_size=1, max_size=3).map(".".join),
    st.lists(PATTERN_ELEMENT, min_size=0, max_size=2).map(lambda parts: ".".join([*parts, ">"])),
)


def matches(pattern: str, name: str) -> bool:
    want, have = pattern.split("."), name.split(".")
    for i, element in enumerate(want):
        if element == ">":
            return True
        if i >= len(have) or (element != "*" and element != have[i]):
            return False
    return len(want) == len(have)


class TopicMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.broker = make_broker()
        self.clients = [Client(self.broker) for _ in range(2)]
        self.producer = Client(self.broker)
        self.subs: dict[tuple[int, str], str] = {}         # (client, consumer id) -> pattern
        self.expected: dict[tuple[int, str], list[str]] = {}
        self.ids = itertools.count()

    @rule(client=st.integers(0, 1), pattern=PATTERNS)
    def subscribe(self, client: int, pattern: str) -> None:
        sub_id = f"s{next(self.ids)}"
        self.clients[client].subscribe(sub_id, f"topic://{pattern}", ack_mode=AckMode.AUTO)
        key = (client, sub_id)
        self.subs[key] = pattern
        self.expected[key] = []

    @precondition(lambda self: self.subs)
    @rule(data=st.data())
    def unsubscribe(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.subs)))
        self.clients[key[0]].conn.unsubscribe(key[1])
        del self.subs[key]

    @rule(name=NAMES)
    def publish(self, name: str) -> None:
        message_id = f"m{next(self.ids)}"
        self.producer.send(f"topic://{name}", message_id)
        for key, pattern in self.subs.items():
            if matches(pattern, name):
                self.expected[key].append(message_id)

    @invariant()
    def every_subscription_got_what_matches(self) -> None:
        if not hasattr(self, "subs"):
            return
        for key, pattern in self.subs.items():
            client, sub_id = key
            got = self.clients[client].got(sub_id)
            assert got == self.expected[key], (
                f"ENG-TOPIC-1: subscription {sub_id} on {pattern!r} got {got}, matching publishes "
                f"were {self.expected[key]}")

    def teardown(self) -> None:
        if hasattr(self, "broker"):
            self.broker.close()


TopicMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTopicModel = TopicMachine.TestCase
