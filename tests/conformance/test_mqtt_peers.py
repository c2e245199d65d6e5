"""Cross-broker MQTT checks: the same basic behaviours against the reference broker and Mosquitto.

One module-scoped broker per target (`mqtt_target` yields its (host, port)); every test id
shows the target (``[reference-...]`` / ``[mosquitto-...]``).  The clients are paho-mqtt 2.x
(`Paho` from the reference broker's MQTT fixtures).  Mosquitto runs only when installed
(`real_broker` mark); otherwise its parametrization is skipped with the launcher's reason.
"""

from __future__ import annotations

import time
import uuid

import pytest

from conformance.requirements import skip_or_fail
from conformance.targets.mosquitto.process import MosquittoProcess, mosquitto_available
from machinery.loop_thread import LoopThread
from conformance.waiting import QUIET, settle
from machinery.waiting import poll
from reference_broker.config import build_config
from reference_broker.server import BrokerServer
from tests.reference_broker.mqtt_fixtures import MQTT_5, MQTT_311, PacketTypes, Paho, props



class InProcessBroker:
    """The reference broker served by its own asyncio loop in a daemon thread (`LoopThread`)."""

    def __init__(self, config: dict) -> None:
        self._loop = LoopThread("peers-broker")
        self.server = self._run(self._make(build_config(config)))

    @staticmethod
    async def _make(config):
        server = BrokerServer(config)
        await server.start()
        return server

    def _run(self, coro):
        return self._loop.run(coro, 10)

    def stop(self) -> None:
        try:
            self._run(self.server.stop())
        finally:
            self._loop.stop(10)


VERSIONS = [pytest.param(MQTT_311, id="v311"), pytest.param(MQTT_5, id="v5")]


@pytest.fixture(scope="module", params=[
    pytest.param("reference", id="reference"),
    pytest.param("mosquitto", id="mosquitto", marks=[pytest.mark.real_broker]),
])
def mqtt_target(request, tmp_path_factory):
    if request.param == "reference":
        running = InProcessBroker({"mqtt": "127.0.0.1:0", "amqp": None, "stomp": None})
        try:
            yield tuple(running.server.mqtt_address)
        finally:
            running.stop()
    else:
        ok, reason = mosquitto_available()
        if not ok:
            skip_or_fail("mosquitto", reason)
        with MosquittoProcess(tmp_path_factory.mktemp("mosquitto")) as m:
            yield m.mqtt_address


@pytest.fixture
def clients():
    made: list[Paho] = []

    def factory(address, version=MQTT_311, client_id="", **kwargs) -> Paho:
        client = Paho(address, version, client_id, **kwargs)
        made.append(client)
        return client

    yield factory
    for client in made:
        client.close()


def topic(prefix: str) -> str:
    return f"peers/{prefix}/{uuid.uuid4().hex[:10]}"


def drain(client: Paho, within: float = 0.5) -> list:
    """Every message that arrives within `within` seconds."""
    got = []
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        try:
            got.append(client.messages.get(timeout=left))
        except Exception:  # queue.Empty
            break
    return got


# --------------------------------------------------------------------------- QoS


@pytest.mark.parametrize("version", VERSIONS)
def test_qos_round_trip(mqtt_target, clients, version):
    """Each (publish QoS, subscription QoS) pair: payload intact, delivered QoS = min of the two."""
    base = topic("qos")
    sub = clients(mqtt_target, version)
    sub.connect()
    for sq in (0, 1, 2):
        assert [getattr(rc, "value", rc) for rc in sub.subscribe(f"{base}/{sq}", sq)] == [sq]
    pub = clients(mqtt_target, version)
    pub.connect()
    for sq in (0, 1, 2):
        for pq in (0, 1, 2):
            pub.publish(f"{base}/{sq}", f"p{pq}s{sq}".encode(), qos=pq)
    got = {}
    for msg in sub.get_n(9):
        got[msg.topic, msg.payload] = msg.qos
    expected = {(f"{base}/{sq}", f"p{pq}s{sq}".encode()): min(pq, sq) for sq in (0, 1, 2) for pq in (0, 1, 2)}
    assert got == expected
    sub.assert_no_message()


# --------------------------------------------------------------------------- retained


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_delivered_then_cleared(mqtt_target, clients, version):
    t = topic("retain")
    pub = clients(mqtt_target, version)
    pub.connect()
    pub.publish(t, b"kept", qos=1, retain=True)

    late = clients(mqtt_target, version)
    late.connect()
    late.subscribe(t, 1)
    msg = late.get()
    assert (msg.topic, msg.payload, msg.retain, msg.qos) == (t, b"kept", True, 1)
    late.assert_no_message()

    # an empty retained publish removes the retained message ([MQTT-3.3.1-10/11]); the empty
    # publish itself goes to the current subscriber as a normal (non-retained) message
    pub.publish(t, b"", qos=1, retain=True)
    live = late.get()
    assert (live.payload, live.retain) == (b"", False)

    later = clients(mqtt_target, version)
    later.connect()
    later.subscribe(t, 1)
    later.assert_no_message(0.4)


# --------------------------------------------------------------------------- will


@pytest.mark.parametrize("version", VERSIONS)
def test_will_on_abnormal_close(mqtt_target, clients, version):
    t = topic("will")
    watcher = clients(mqtt_target, version)
    watcher.connect()
    watcher.subscribe(t, 1)

    dying = clients(mqtt_target, version)
    dying.connect(will=(t, b"gone", 1, False))
    dying.sync()
    watcher.assert_no_message(0.2)
    dying.kill()  # socket shut down, no DISCONNECT

    msg = watcher.get()
    assert (msg.topic, msg.payload, msg.qos) == (t, b"gone", 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_no_will_on_clean_disconnect(mqtt_target, clients, version):
    t = topic("nowill")
    watcher = clients(mqtt_target, version)
    watcher.connect()
    watcher.subscribe(t, 1)
    leaving = clients(mqtt_target, version)
    leaving.connect(will=(t, b"gone", 1, False))
    leaving.disconnect()
    watcher.assert_no_message(0.5)


# --------------------------------------------------------------------------- wildcards


@pytest.mark.parametrize("version", VERSIONS)
def test_wildcards(mqtt_target, clients, version):
    base = topic("wild")
    sub = clients(mqtt_target, version)
    sub.connect()
    sub.subscribe(f"{base}/+/c", 0)
    sub.subscribe(f"{base}/x/#", 1)
    pub = clients(mqtt_target, version)
    pub.connect()
    sends = ["a/c", "a/b/c", "x", "x/y/z", "y/c/d", "xx/c"]
    for suffix in sends:
        pub.publish(f"{base}/{suffix}", suffix.encode(), qos=1)
    pub.publish(f"{base}/end/c", b"end", qos=1)
    got = []
    while True:
        msg = sub.get()
        got.append(msg.topic.removeprefix(base + "/"))
        if msg.payload == b"end":
            break
    # `+` matches exactly one level; `x/#` matches `x` itself and everything below it [MQTT-4.7.1-2]
    assert sorted(got) == sorted(["a/c", "x", "x/y/z", "xx/c", "end/c"])
    sub.assert_no_message()


@pytest.mark.parametrize("version", VERSIONS)
def test_dollar_topics_not_matched_by_wildcards(mqtt_target, clients, version):
    """[MQTT-4.7.2-1]: filters starting with a wildcard do not match topics starting with `$`."""
    uid = uuid.uuid4().hex[:10]
    dollar = f"$peers{uid}/x"
    normal = f"peers{uid}/x"
    wild = clients(mqtt_target, version)
    wild.connect()
    wild.subscribe("#", 0)
    wild.subscribe("+/x", 0)
    exact = clients(mqtt_target, version)
    exact.connect()
    exact.subscribe(dollar, 0)  # proves the `$` publish really went through the broker
    pub = clients(mqtt_target, version)
    pub.connect()
    pub.publish(dollar, b"dollar", qos=1)
    pub.publish(normal, b"normal", qos=1)

    assert exact.get().payload == b"dollar"
    # both publishes came from one connection at QoS 1, so once `normal` has arrived on `wild`
    # (it was published after `dollar`), a `$` match would already be there too
    seen = [wild.get()]
    seen += drain(wild, QUIET)
    topics = [m.topic for m in seen]
    assert normal in topics  # `#` and `+/x` both match it (one or two copies, both allowed)
    assert dollar not in topics
    assert not any(t.startswith("$") for t in topics), topics


# --------------------------------------------------------------------------- sessions


@pytest.mark.parametrize("version", VERSIONS)
def test_persistent_session_queues_qos1(mqtt_target, clients, version):
    t = topic("session")
    cid = f"peers-{uuid.uuid4().hex[:12]}"
    if version == MQTT_5:
        first = clients(mqtt_target, version, cid)
        first.connect(clean_start=True, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=60))
    else:
        first = clients(mqtt_target, version, cid, clean_session=False)
        first.connect()
    first.subscribe(t, 1)
    first.disconnect()

    pub = clients(mqtt_target, version)
    pub.connect()
    for i in range(3):
        pub.publish(t, f"m{i}".encode(), qos=1)

    if version == MQTT_5:
        again = clients(mqtt_target, version, cid)
        flags, _rc, _p = again.connect(clean_start=False,
                                        properties=props(PacketTypes.CONNECT, SessionExpiryInterval=60))
    else:
        again = clients(mqtt_target, version, cid, clean_session=False)
        flags, _rc, _p = again.connect()
    assert flags.session_present
    msgs = again.get_n(3)
    assert [(m.payload, m.qos) for m in msgs] == [(b"m0", 1), (b"m1", 1), (b"m2", 1)]
    again.assert_no_message()
    # clean up the session so nothing lingers in the module-scoped broker
    again.disconnect(properties=props(PacketTypes.DISCONNECT, SessionExpiryInterval=0)
                     if version == MQTT_5 else None)


# --------------------------------------------------------------------------- MQTT 5 only


def test_v5_no_local(mqtt_target, clients):
    t = topic("nolocal")
    me = clients(mqtt_target, MQTT_5)
    me.connect()
    me.subscribe(t, 1, noLocal=True)
    other = clients(mqtt_target, MQTT_5)
    other.connect()
    me.publish(t, b"mine", qos=1)
    other.publish(t, b"theirs", qos=1)
    assert me.get().payload == b"theirs"
    me.assert_no_message(0.5)


def test_v5_shared_subscription_splits(mqtt_target, clients):
    t = topic("shared")
    group = f"g{uuid.uuid4().hex[:6]}"
    a = clients(mqtt_target, MQTT_5)
    b = clients(mqtt_target, MQTT_5)
    for c in (a, b):
        c.connect()
        c.subscribe(f"$share/{group}/{t}", 1)
    pub = clients(mqtt_target, MQTT_5)
    pub.connect()
    n = 20
    for i in range(n):
        pub.publish(t, f"{i}".encode(), qos=1)
    got_a: list[bytes] = []
    got_b: list[bytes] = []

    def receive_round() -> int:  # the drains are the polling interval
        got_a.extend(m.payload for m in drain(a, 0.05))
        got_b.extend(m.payload for m in drain(b, 0.05))
        return len(got_a) + len(got_b)

    poll(receive_round, lambda total: total >= n, timeout=5, interval=0)
    settle()  # nothing more (no duplicates)
    got_a += [m.payload for m in drain(a, 0.01)]
    got_b += [m.payload for m in drain(b, 0.01)]
    # each message goes to exactly one member of the group [MQTT-4.8.2]; both members get some
    assert sorted(got_a + got_b, key=int) == [f"{i}".encode() for i in range(n)]
    assert got_a and got_b, (got_a, got_b)
