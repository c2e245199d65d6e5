"""Model-based test of MQTT session state (hypothesis.stateful), like the queue model in
test_engine_model.py (the engine's wildcard routing: test_topic_model.py): a small model says
which PUBLISHes each client must see, and the real `MqttSession`s (sans-IO, over the harness of test_mqtt_session.py) are compared with it after
every step.

Two clients (A, B) connect with a clean or a kept session, with or without a will, take
each other's place by connecting again under the same client id while connected, subscribe and
unsubscribe topic filters with wildcards at QoS 0-2, disconnect politely or lose the network,
and either acknowledge what they receive at once (PUBACK; PUBREC, PUBREL, PUBCOMP) or hold it
unacknowledged until a later rule; a publisher P publishes at QoS 0-2. One run is all 3.1.1 or
all 5.0 (clean start + session expiry 0 or 1 h stand for 3.1.1's clean session flag).

Checked (spec IDs proposed for the catalogue, as the engine tests' ENG-* are; not catalogued yet, so
that the conformance matrix does not count them as unchecked suite statements; sections of
MQTT 3.1.1 and 5.0 in brackets):
- MQTT-DELIVER-1 [3.3.5, 4.7]: a connected client gets exactly the model's (payload, QoS) multiset:
  one copy per matching subscription, at the lower QoS (the reference broker sends one per
  subscription, which 3.1.1 allows).
- MQTT-SESSION-1 [3.1.2.4, 3.2.2.2]: CONNACK session present as the model says; the registry
  holds a session exactly for the model's sessions.
- MQTT-SESSION-2 [3.1.2.4; 5.0 4.1]: QoS 1/2 deliveries for a kept session made while away
  arrive on resume.
- MQTT-REDELIVER-1 [4.4]: what was held unacknowledged comes back with DUP=1 on resume,
  nothing else does.
- MQTT-TAKEOVER-1 [3.1.4]: the older connection is closed (5.0: DISCONNECT 0x8E first).
- MQTT-WILL-1 [3.1.2.5]: the will goes out on a lost connection or a takeover, never after
  DISCONNECT.
SESSION-2, REDELIVER-1 and WILL-1 are checked by the same comparison of what arrived (its
message names them all).
Known deviation, kept out of the model and pinned as strict xfails below: a QoS 1/2 delivery
left unacknowledged when its subscription is removed, or replaced by a re-SUBSCRIBE across QoS 0,
is not resent when the session resumes.
Not modelled: retained messages, shared subscriptions, topic aliases, expiry timers, windows
(a run stays far below the in-flight window of 100).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reference_broker.protocols.mqtt.codec import (
    MQTT_5,
    MQTT_311,
    Disconnect,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)

from .test_mqtt_session import Client, Env

CLIENTS = ["A", "B"]
FILTERS = ["t/a", "t/+", "t/#", "w/+"]
TOPICS = ["t", "t/a", "t/b"]  # "t" only matches t/# (its parent-level rule)


def topic_matches(topic_filter: str, topic: str) -> bool:
    """3.1.1 § 4.7: '+' matches one level, '#' (last) the rest including the parent level."""
    f_levels, t_levels = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(f_levels):
        if level == "#":
            return True
        if i >= len(t_levels) or (level != "+" and level != t_levels[i]):
            return False
    return len(f_levels) == len(t_levels)


@dataclass
class SessionModel:
    kept: bool                                           # outlives its connection
    subs: dict[str, int] = field(default_factory=dict)   # filter -> QoS
    unacked: list[tuple[bytes, int]] = field(default_factory=list)  # delivered, not acknowledged
    queued: list[tuple[bytes, int]] = field(default_factory=list)   # arrived while away


class MqttSessionMachine(RuleBasedStateMachine):
    @initialize(version=st.sampled_from([MQTT_311, MQTT_5]),
                keep=st.lists(st.booleans(), min_size=2, max_size=2),
                hold=st.lists(st.booleans(), min_size=2, max_size=2),
                qos=st.lists(st.integers(0, 2), min_size=2, max_size=2))
    def start(self, version: int, keep: list[bool], hold: list[bool], qos: list[int]) -> None:
        self.env = Env()
        self.version = version
        self.sessions: dict[str, SessionModel] = {}
        self.conns: dict[str, Client] = {}
        self.wills: dict[str, bytes] = {}        # client id -> will payload of its connection
        self.hold: dict[str, bool] = {}          # client id -> hold deliveries unacknowledged
        self.held: dict[str, list[Publish]] = {}  # client id -> PUBLISHes held, in order
        self.expect: dict[str, Counter] = {c: Counter() for c in CLIENTS}
        self.counter = 0
        self.publisher = self.env.client(version)
        self.publisher.connect("P")
        # Every run starts with both clients connected to t/#, so the rules that need a
        # connection or a subscription are enabled from the first step.
        for cid, k, h, q in zip(CLIENTS, keep, hold, qos):
            self.connect(cid, keep=k, will=False, hold=h)
            self.subscribe_one(cid, "t/#", q)

    # ------------------------------------------------------------------ the model's routing

    def route(self, topic: str, payload: bytes, qos: int) -> None:
        for cid, session in self.sessions.items():
            for topic_filter, sub_qos in session.subs.items():
                if not topic_matches(topic_filter, topic):
                    continue
                granted = min(qos, sub_qos)
                if cid in self.conns:
                    self.expect[cid][(payload, granted, False)] += 1
                elif granted:  # QoS 0 is not session state
                    session.queued.append((payload, granted))

    def payload(self, kind: str) -> bytes:
        self.counter += 1
        return f"{kind}{self.counter}".encode()

    def connect_kwargs(self, keep: bool) -> dict:
        if self.version == MQTT_311:
            return {"clean": not keep}
        return {"clean": not keep, "properties": Properties(session_expiry_interval=3600 if keep else 0)}

    def connection_ended(self, cid: str, publish_will: bool) -> None:
        """The model's side of a connection ending (the real one is already closed)."""
        del self.conns[cid]
        will = self.wills.pop(cid, None)
        if will is not None and publish_will:
            self.route(f"w/{cid}", will, 1)
        session = self.sessions[cid]
        session.unacked += [(p.payload, p.qos) for p in self.held.pop(cid, [])]
        self.expect[cid] = Counter()
        if not session.kept:
            del self.sessions[cid]

    def read(self, cid: str) -> None:
        """Compare what `cid` received with the model, then acknowledge or hold it."""
        client = self.conns[cid]
        got = client.packets()
        assert all(isinstance(p, Publish) for p in got), f"MQTT-DELIVER-1: unexpected packets {got}"
        seen = Counter((p.payload, p.qos, p.dup) for p in got)
        assert seen == self.expect[cid], (
            f"MQTT-DELIVER-1 (SESSION-2, REDELIVER-1, WILL-1): {cid} received (payload, QoS, DUP) "
            f"{sorted(seen.elements())}, the model says "
            f"{sorted(self.expect[cid].elements())}")
        self.expect[cid] = Counter()
        for publish in got:
            if publish.qos == 0:
                continue
            if self.hold[cid]:
                self.held.setdefault(cid, []).append(publish)
            else:
                self.acknowledge(client, publish)

    @staticmethod
    def acknowledge(client: Client, publish: Publish) -> None:
        if publish.qos == 1:
            client.send(Puback(publish.packet_id))
        else:
            client.send(Pubrec(publish.packet_id))
            rel = client.one(Pubrel)
            assert rel.packet_id == publish.packet_id, f"MQTT-DELIVER-1: PUBREL for {rel.packet_id}"
            client.send(Pubcomp(publish.packet_id))
        assert client.packets() == [], "nothing but the PUBREL answers an acknowledgement"

    def read_all(self) -> None:
        for cid in list(self.conns):
            self.read(cid)

    # ------------------------------------------------------------------ rules

    @rule(cid=st.sampled_from(CLIENTS), keep=st.booleans(), will=st.booleans(), hold=st.booleans())
    def connect(self, cid: str, keep: bool, will: bool, hold: bool) -> None:
        session = self.sessions.get(cid)
        # A client whose own will could reach its own subscription: left out, the order of the
        # will and the old session's end is not specified for that case.
        will = will and not (keep and session is not None and "w/+" in session.subs)
        old = self.conns.get(cid)
        client = self.env.client(self.version)
        will_payload = self.payload("will-") if will else None
        kwargs = self.connect_kwargs(keep)
        if will_payload is not None:
            kwargs["will"] = Will(f"w/{cid}", will_payload, 1)
        connack = client.connect(cid, **kwargs)
        assert connack.reason_code == 0, f"MQTT-SESSION-1: {cid} refused: {connack}"
        if old is not None:
            closed = old.closed_with()
            wanted = [ReasonCode.SESSION_TAKEN_OVER] if self.version == MQTT_5 else []
            assert [p.reason_code for p in closed if not isinstance(p, Publish)] == wanted, (
                f"MQTT-TAKEOVER-1: the old connection of {cid} got {closed}")
            self.conns[cid] = old  # so that connection_ended sees it
            self.expect_old_publishes(cid, closed)
            self.connection_ended(cid, publish_will=True)
            session = self.sessions.get(cid)
        present = keep and session is not None
        assert connack.session_present == present, (
            f"MQTT-SESSION-1: {cid} connected keep={keep}, session present {connack.session_present}, "
            f"the model says {present}")
        if not present:
            self.sessions[cid] = SessionModel(kept=keep)
        else:
            session.kept = keep
            for payload, qos in session.unacked:
                self.expect[cid][(payload, qos, True)] += 1
            for payload, qos in session.queued:
                self.expect[cid][(payload, qos, False)] += 1
            session.unacked, session.queued = [], []
        self.conns[cid] = client
        self.hold[cid] = hold
        if will_payload is not None:
            self.wills[cid] = will_payload
        self.read_all()

    def expect_old_publishes(self, cid: str, closed: list) -> None:
        """PUBLISHes the old connection got in its last moment count as delivered there."""
        leftovers = Counter((p.payload, p.qos, p.dup) for p in closed if isinstance(p, Publish))
        assert leftovers == self.expect[cid], f"MQTT-DELIVER-1: old {cid} got {leftovers}"
        for p in closed:
            if isinstance(p, Publish) and p.qos:
                self.held.setdefault(cid, []).append(p)
        self.expect[cid] = Counter()

    @precondition(lambda self: self.conns)
    @rule(data=st.data(), topic_filter=st.sampled_from(FILTERS), qos=st.integers(0, 2))
    def subscribe(self, data, topic_filter: str, qos: int) -> None:
        cid = data.draw(st.sampled_from(sorted(self.conns)), label="client")
        if topic_filter == "w/+" and cid in self.wills:
            return  # see connect: no client subscribes to its own will
        old_qos = self.sessions[cid].subs.get(topic_filter)
        if self.held.get(cid) and old_qos is not None and (old_qos == 0) != (qos == 0):
            # A re-SUBSCRIBE across QoS 0 replaces the broker's subscription, and the reference
            # broker then forgets its in-flight deliveries as after an UNSUBSCRIBE
            # (test_unacknowledged_delivery_is_resent_after_a_resubscribe_at_qos_0_and_resume, a
            # strict xfail; a CI run's model run found it): kept out as unsubscribing is.
            return
        self.subscribe_one(cid, topic_filter, qos)

    def subscribe_one(self, cid: str, topic_filter: str, qos: int) -> None:
        client = self.conns[cid]
        pid = client.pid()
        client.send(Subscribe(pid, [Subscription(topic_filter, qos)]))
        got = client.packets()
        assert got and isinstance(got[0], Suback) and got[0].packet_id == pid, got
        assert got[0].reason_codes == [qos], f"MQTT-DELIVER-1: SUBACK {got[0].reason_codes} for QoS {qos}"
        client._pending = got[1:]
        self.sessions[cid].subs[topic_filter] = qos
        self.read_all()

    def can_unsubscribe(self) -> list[str]:
        # Not while holding unacknowledged deliveries: the reference broker then forgets them
        # (test_unacknowledged_delivery_is_resent_after_unsubscribe_and_resume, a strict xfail);
        # with this, the model stays useful for everything else.
        return sorted(c for c in self.conns if self.sessions[c].subs and not self.held.get(c))

    @precondition(lambda self: self.can_unsubscribe())
    @rule(data=st.data())
    def unsubscribe(self, data) -> None:
        cid = data.draw(st.sampled_from(self.can_unsubscribe()), label="client")
        topic_filter = data.draw(st.sampled_from(sorted(self.sessions[cid].subs)), label="filter")
        client = self.conns[cid]
        pid = client.pid()
        client.send(Unsubscribe(pid, [topic_filter]))
        got = client.packets()
        assert got and isinstance(got[0], Unsuback) and got[0].packet_id == pid, got
        client._pending = got[1:]
        del self.sessions[cid].subs[topic_filter]
        self.read_all()

    @rule(topic=st.sampled_from(TOPICS), qos=st.integers(0, 2))
    def publish(self, topic: str, qos: int) -> None:
        payload = self.payload("m")
        self.publisher.publish(topic, payload, qos)
        self.route(topic, payload, qos)
        self.read_all()

    @precondition(lambda self: any(self.held.get(c) for c in self.conns))
    @rule(data=st.data())
    def acknowledge_held(self, data) -> None:
        cid = data.draw(st.sampled_from(sorted(c for c in self.conns if self.held.get(c))), label="client")
        for publish in self.held.pop(cid):
            self.acknowledge(self.conns[cid], publish)
        self.read_all()

    @precondition(lambda self: self.conns)
    @rule(data=st.data())
    def disconnect(self, data) -> None:
        cid = data.draw(st.sampled_from(sorted(self.conns)), label="client")
        client = self.conns[cid]
        client.send(Disconnect())
        assert client.transport.closed, "DISCONNECT closes the connection"
        client.session.connection_lost()
        self.read_all_but(cid)
        self.connection_ended(cid, publish_will=False)
        self.read_all()

    @precondition(lambda self: self.conns)
    @rule(data=st.data())
    def lose_connection(self, data) -> None:
        cid = data.draw(st.sampled_from(sorted(self.conns)), label="client")
        self.conns[cid].lost()
        self.connection_ended(cid, publish_will=True)
        self.read_all()

    def read_all_but(self, cid: str) -> None:
        for other in list(self.conns):
            if other != cid:
                self.read(other)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def registry_holds_the_model_sessions(self) -> None:
        if not hasattr(self, "env"):
            return
        for cid in CLIENTS:
            state = self.env.registry.get(cid)
            assert (state is not None) == (cid in self.sessions), (
                f"MQTT-SESSION-1: registry has {state!r} for {cid}, model sessions {sorted(self.sessions)}")

    def teardown(self) -> None:
        if hasattr(self, "env"):
            for client in [*self.conns.values(), self.publisher]:
                if not client.transport.closed:
                    client.lost()
            self.env.broker.close()


MqttSessionMachine.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=40,
    deadline=None,
    database=None,
    # no explain phase: tracing every line while explaining a failure outlasts the test time-out
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestMqttSessionModel = MqttSessionMachine.TestCase


@pytest.mark.known_failure(failure=r"^MQTT-REDELIVER-1: the unacknowledged QoS 1 delivery was not resent after "
                                   r"the re-SUBSCRIBE: \[\](\n|$)",
                           reason="reference broker: a re-SUBSCRIBE at QoS 0 replaces the subscription and forgets "
                                  "its in-flight deliveries (MQTT 3.1.1 3.8.4 / 4.4); for the coordinator")
def test_unacknowledged_delivery_is_resent_after_a_resubscribe_at_qos_0_and_resume():
    """Found by the model (a CI run): 3.1.1 [MQTT-3.8.4-3] replaces a subscription whose filter is
    subscribed again without interrupting the flow of publications, and [MQTT-4.4.0-1] resends
    the QoS 1/2 deliveries left unacknowledged (DUP) when the session resumes. Subscribed again at
    QoS 0, the reference broker makes a new engine subscription (session.py `engine_key`: QoS 0 is
    auto-acknowledged) and drops the old one with its in-flight message, as after an UNSUBSCRIBE."""
    env, sub, delivered = _holding_one_delivery()
    sub.subscribe("t/a", 0)
    again = _resumed(env, sub)
    assert [(p.payload, p.packet_id, p.dup) for p in again] == [(b"m", delivered.packet_id, True)], (
        f"MQTT-REDELIVER-1: the unacknowledged QoS 1 delivery was not resent after the re-SUBSCRIBE: {again}")


def test_an_unacknowledged_delivery_is_resent_at_its_own_qos_after_a_resubscribe_at_a_lower_one():
    """Found by the model (a CI run): [MQTT-4.4.0-1] resends the unacknowledged PUBLISH packet
    itself when the session resumes, under its packet id and so at its QoS; a re-SUBSCRIBE at a
    lower QoS >= 1 keeps the flow (3.8.4) and governs what is delivered after it, not the packet
    already in flight. The reference broker resent it at the new subscription QoS (QoS 1 for a
    QoS 2 packet id the client may hold in its QoS 2 state)."""
    env, sub, delivered = _holding_one_delivery("t/#", "t", qos=2)
    assert delivered.qos == 2, f"setup: delivered at QoS {delivered.qos}"
    sub.subscribe("t/#", 1)
    again = _resumed(env, sub)
    assert [(p.payload, p.packet_id, p.qos, p.dup) for p in again] == [(b"m", delivered.packet_id, 2, True)], (
        f"MQTT-REDELIVER-1: the unacknowledged QoS 2 delivery was not resent as it went out: {again}")


def _holding_one_delivery(topic_filter: str = "t/a", topic: str = "t/a", qos: int = 1):
    """A 3.1.1 client with a kept session, subscribed to ``topic_filter`` at ``qos``, holding one
    delivery of a message published to ``topic`` at ``qos`` unacknowledged: (the harness, the
    client, the delivery)."""
    env = Env()
    sub = env.client(MQTT_311)
    sub.connect("keep", clean=False)
    sub.subscribe(topic_filter, qos)
    pub = env.client(MQTT_311)
    pub.connect("pub")
    pub.publish(topic, b"m", qos)
    [delivered] = sub.publishes()
    return env, sub, delivered


def _resumed(env, sub) -> list:
    """What the session sends first when ``sub``'s client comes back after losing its connection."""
    sub.lost()
    back = env.client(MQTT_311)
    assert back.connect("keep", clean=False).session_present
    return back.packets()


@pytest.mark.known_failure(failure=r"^MQTT-REDELIVER-1: the unacknowledged QoS 1 delivery was not resent: \[\](\n|$)",
                           reason="reference broker: in-flight deliveries of a removed subscription are "
                                  "forgotten (MQTT 3.1.1 3.10.4 / 4.4); for the coordinator")
def test_unacknowledged_delivery_is_resent_after_unsubscribe_and_resume():
    """Found by the model: 3.1.1 [MQTT-3.10.4-3] (5.0 § 3.10.4): after UNSUBSCRIBE the server
    still completes the QoS 1/2 deliveries it had started, and [MQTT-4.4.0-1] resends them
    (DUP) when the session resumes. The reference broker drops the subscription's in-flight
    messages with the engine consumer (session.py `_detach`), so the message is lost."""
    env, sub, delivered = _holding_one_delivery()
    sub.send(Unsubscribe(sub.pid(), ["t/a"]))
    assert isinstance(sub.one(), Unsuback)
    again = _resumed(env, sub)
    assert [(p.payload, p.packet_id, p.dup) for p in again] == [(b"m", delivered.packet_id, True)], (
        f"MQTT-REDELIVER-1: the unacknowledged QoS 1 delivery was not resent: {again}")
