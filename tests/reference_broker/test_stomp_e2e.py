"""End-to-end tests of the reference broker's STOMP front-end over real sockets.

The real stomp.py client (Connection10/11/12) drives the ordinary paths; a raw-socket client
(`RawStomp` in conftest.py) is used where exact bytes matter or stomp.py cannot express the case
(malformed frames, 1.0 header bytes, heart-beat timing, pipelining).

Section names refer to the STOMP 1.2 specification (stomp.github.io/stomp-specification-1.2.html);
ActiveMQ extension headers are those described on ActiveMQ's "Stomp" page.
"""

from __future__ import annotations

import time

import pytest

from machinery.waiting import poll
from reference_broker.protocols.stomp.codec import serialize_frame
from tests.reference_broker.conftest import RawStomp, assert_broker_works

pytestmark = pytest.mark.timeout(60)


def uniq(prefix: str = "q") -> str:
    return f"/queue/{prefix}.{time.monotonic_ns()}"


def bodies(frames) -> list:
    return [f.body for f in frames]


def frame_bytes(command, headers, body=b"", version="1.2") -> bytes:
    """A frame's exact bytes (no content-length added), for pipelining several in one write."""
    return serialize_frame(command, headers, body, version, content_length=False)


# =============================================================================== connecting


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_stompy_connects_with_each_version(broker, stomp_client, version):
    """"Protocol Negotiation": the server answers with the highest version both sides accept.
    1.0 CONNECTED frames carry no heart-beat header (heart-beating came with 1.1)."""
    client = stomp_client(broker.address, version)
    headers = client.listener.connected_headers
    assert headers["version"] == version
    assert headers["session"]
    assert headers["server"].startswith("brokerconf-reference/")
    if version == "1.0":
        assert "heart-beat" not in headers
    else:
        assert headers["heart-beat"] == "0,0"
    # and the session really works at that version
    dest = uniq("ver")
    client.subscribe(dest, "s1")
    client.send(dest, "hello " + version)
    assert client.listener.get().body == "hello " + version


@pytest.mark.parametrize(
    "accept, expected",
    [("1.0,1.1,1.2", "1.2"), ("1.1,1.0", "1.1"), ("1.0", "1.0"), ("1.2, 9.9", "1.2"), (None, "1.0")],
)
def test_version_negotiation_picks_highest_common(broker, raw_factory, accept, expected):
    """"Protocol Negotiation": accept-version lists the client's versions; the server picks the
    highest it shares. A CONNECT without accept-version is a 1.0 client."""
    client = raw_factory(broker.address)
    frame = client.connect(accept)
    assert frame.command == "CONNECTED"
    assert frame.get("version") == expected
    assert (frame.get("heart-beat") is None) == (expected == "1.0")


def test_stomp_command_connects(broker, raw_factory):
    """"Connecting": 1.2 clients may open with STOMP instead of CONNECT."""
    client = raw_factory(broker.address)
    frame = client.connect("1.2", command="STOMP")
    assert frame.command == "CONNECTED" and frame.get("version") == "1.2"


def test_unsupported_version_is_refused_with_version_info(broker, raw_factory):
    """"Protocol Negotiation": with no common version the server sends an ERROR that says which
    versions it supports (a `version` header), then closes the connection."""
    bystander = raw_factory(broker.address)
    assert bystander.connect("1.2").command == "CONNECTED"
    client = raw_factory(broker.address)
    client.send_frame("CONNECT", [("accept-version", "2.0,3.1"), ("host", "localhost")], version="1.0")
    error = client.expect_error_and_close()
    assert error.get("version") == "1.0,1.1,1.2"
    assert "version" in error.get("message")
    assert b"1.0" in error.body and b"2.0,3.1" in error.body
    # the other client and new clients are unaffected
    bystander.send_frame("BEGIN", [("transaction", "t"), ("receipt", "ok")])
    assert bystander.expect("RECEIPT").get("receipt-id") == "ok"
    assert_broker_works(broker.address)


def test_frame_before_connect_is_an_error(broker, raw_factory):
    """"Connecting": a client must open the session with CONNECT (or STOMP)."""
    client = raw_factory(broker.address)
    client.send_frame("SEND", [("destination", "/queue/x")], b"early")
    error = client.expect_error_and_close()
    assert "CONNECT" in error.get("message")
    assert_broker_works(broker.address)


def test_second_connect_is_an_error(broker, raw_factory):
    client = raw_factory(broker.address)
    client.connect("1.2")
    client.send_frame("CONNECT", [("accept-version", "1.2"), ("host", "x")])
    assert "already connected" in client.expect_error_and_close().get("message")


# =============================================================================== heart-beating

HB = {"stomp_options": {"heart_beat_send_ms": 500, "heart_beat_receive_ms": 400}}


@pytest.mark.parametrize(
    "client_hb, expected",
    [
        ("0,0", "0,0"),  # the client wants none
        ("1000,2000", "2000,1000"),  # client slower than the server on both sides: client wins
        ("100,100", "500,400"),  # client faster than the server can do: server's minimum wins
        ("0,700", "700,0"),  # client does not send; wants to receive every 700 ms
        ("300,0", "0,400"),  # client sends, wants nothing
        (None, "0,0"),  # no header: no heart-beating
    ],
)
def test_heartbeat_negotiation(broker_factory, raw_factory, client_hb, expected):
    """"Heart-beating": each direction uses the larger of what the sender can do and what the
    receiver wants, and is off when either side says 0. CONNECTED carries the server's values."""
    broker = broker_factory(**HB)
    client = raw_factory(broker.address)
    extra = {} if client_hb is None else {"heart_beat": client_hb}
    frame = client.connect("1.2", **extra)
    assert frame.get("heart-beat") == expected


@pytest.mark.parametrize("bad", ["abc", "1,2,3", "-1,5", "10"])
def test_invalid_heartbeat_header_is_an_error(broker, raw_factory, bad):
    client = raw_factory(broker.address)
    client.send_frame("CONNECT", [("accept-version", "1.2"), ("host", "h"), ("heart-beat", bad)], version="1.0")
    assert "heart-beat" in client.expect_error_and_close().get("message")
    assert_broker_works(broker.address)


def test_broker_sends_heartbeats(broker_factory, raw_factory):
    """"Heart-beating": with a negotiated server->client interval, the broker sends an EOL
    whenever it has sent nothing else for that long, and never lets a gap exceed it."""
    broker = broker_factory(stomp_options={"heart_beat_send_ms": 500, "heart_beat_receive_ms": 0})
    client = raw_factory(broker.address)
    frame = client.connect("1.2", heart_beat="0,500")
    assert frame.get("heart-beat") == "500,0"
    arrivals = []
    start = time.monotonic()
    client.sock.settimeout(2.0)
    while time.monotonic() - start < 2.2:
        data = client.sock.recv(100)
        assert data, "broker closed a heart-beating connection"
        assert set(data) <= {10, 13}, f"expected only EOLs, got {data!r}"
        arrivals.append(time.monotonic())
    assert len(arrivals) >= 3, arrivals
    gaps = [b - a for a, b in zip([start] + arrivals, arrivals)]
    # Allow scheduling noise, but a gap must not grow past the promised 500 ms by much.
    assert max(gaps) < 0.5 * 1.3, f"heart-beat gaps {gaps}"


def test_broker_closes_silent_client(broker_factory, raw_factory):
    """"Heart-beating": if the receiver hears nothing within the negotiated period (the broker
    allows twice that for network delay) it considers the connection dead and closes it. A client
    that keeps sending EOLs stays connected."""
    broker = broker_factory(stomp_options={"heart_beat_send_ms": 0, "heart_beat_receive_ms": 300})
    client = raw_factory(broker.address)
    assert client.connect("1.2", heart_beat="300,0").get("heart-beat") == "0,300"
    # keep beating for ~1.5 s (well past 2 x 300 ms): still open
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        client.send_bytes(b"\n")
        time.sleep(0.1)
    client.send_frame("BEGIN", [("transaction", "t1"), ("receipt", "alive")])
    assert client.expect("RECEIPT").get("receipt-id") == "alive"
    # then fall silent: closed after ~2 x 300 ms (plus the broker's timer resolution)
    silent_since = time.monotonic()
    client.wait_closed(timeout=3.0)
    waited = time.monotonic() - silent_since
    assert 0.45 < waited < 1.6, waited
    assert broker.connection_count() == 0
    assert_broker_works(broker.address)


def test_stompy_heartbeats_keep_connection_alive(broker_factory, stomp_client):
    """Both directions at once with stomp.py's own heart-beat thread: the connection outlives
    several intervals, the client sees the broker's heart-beats, and messages still flow."""
    broker = broker_factory(stomp_options={"heart_beat_send_ms": 400, "heart_beat_receive_ms": 400})
    client = stomp_client(broker.address, "1.2", heartbeats=(400, 400))
    assert client.listener.connected_headers["heart-beat"] == "400,400"
    time.sleep(2.0)
    assert client.conn.is_connected()
    assert client.listener.heartbeats >= 2
    assert not client.listener.disconnected.is_set()
    dest = uniq("hb")
    client.subscribe(dest, "1")
    client.send(dest, "after heart-beats")
    assert client.listener.get().body == "after heart-beats"


# =============================================================================== send / subscribe


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_send_subscribe_unsubscribe(broker, stomp_client, version):
    """"SEND", "SUBSCRIBE", "UNSUBSCRIBE", "MESSAGE": a MESSAGE carries destination, message-id
    and subscription (the SUBSCRIBE id); after UNSUBSCRIBE nothing more is delivered."""
    dest = uniq("basic")
    consumer = stomp_client(broker.address, version)
    producer = stomp_client(broker.address, version)
    consumer.subscribe(dest, "sub-1")
    for i in range(3):
        producer.send(dest, f"m{i}", content_type="text/plain")
    frames = consumer.listener.get_n(3)
    assert [f.body for f in frames] == ["m0", "m1", "m2"]
    ids = set()
    for f in frames:
        assert f.headers["destination"] == dest
        assert f.headers["subscription"] == "sub-1"
        assert f.headers["content-type"] == "text/plain"
        ids.add(f.headers["message-id"])
    assert len(ids) == 3
    rid = consumer.receipt()
    if version == "1.0":
        consumer.conn.unsubscribe(destination=dest, id="sub-1", headers={"receipt": rid})
    else:
        consumer.conn.unsubscribe("sub-1", headers={"receipt": rid})
    consumer.listener.wait_receipt(rid)
    producer.send(dest, "after")
    consumer.listener.assert_no_message()
    assert broker.queue_stats(dest)["pending"] == 1


def test_topic_fans_out_and_queue_competes(broker, stomp_client):
    topic = f"/topic/fan.{time.monotonic_ns()}"
    q = uniq("compete")
    a = stomp_client(broker.address)
    b = stomp_client(broker.address)
    for c in (a, b):
        c.subscribe(topic, "t")
        c.subscribe(q, "q")
    a.send(topic, "to-all")
    assert a.listener.get().body == "to-all" and b.listener.get().body == "to-all"
    for i in range(4):
        a.send(q, f"w{i}")
    got = sorted(f.body for f in a.listener.get_n(2) + b.listener.get_n(2))
    assert got == ["w0", "w1", "w2", "w3"]


def test_subscription_ids_route_messages(broker, raw_factory):
    """"SUBSCRIBE id": one connection, two subscriptions; each MESSAGE names its own."""
    c = raw_factory(broker.address)
    c.connect("1.2")
    qa, qb = uniq("a"), uniq("b")
    c.send_frame("SUBSCRIBE", [("id", "A"), ("destination", qa)])
    c.send_frame("SUBSCRIBE", [("id", "B"), ("destination", qb), ("receipt", "r")])
    c.expect("RECEIPT")
    c.send_frame("SEND", [("destination", qb)], b"for-b")
    c.send_frame("SEND", [("destination", qa)], b"for-a")
    m1, m2 = c.expect("MESSAGE"), c.expect("MESSAGE")
    assert (m1.get("subscription"), m1.body) == ("B", b"for-b")
    assert (m2.get("subscription"), m2.body) == ("A", b"for-a")


def test_duplicate_subscription_id_is_an_error(broker, raw_factory):
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("SUBSCRIBE", [("id", "same"), ("destination", uniq())])
    c.send_frame("SUBSCRIBE", [("id", "same"), ("destination", uniq())])
    assert "same" in c.expect_error_and_close().get("message")


def test_receipt_and_disconnect_with_receipt(broker, raw_factory):
    """"Header receipt" and "DISCONNECT": the broker answers a DISCONNECT receipt once
    everything before it is processed, and then closes the connection."""
    dest = uniq("disc")
    consumer = raw_factory(broker.address)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", [("id", "1"), ("destination", dest), ("receipt", "s")])
    consumer.expect("RECEIPT")
    producer = raw_factory(broker.address)
    producer.connect("1.2")
    # pipelined in one write: three sends and the DISCONNECT
    data = b"".join(
        frame_bytes("SEND", [("destination", dest)], f"p{i}".encode()) for i in range(3)
    ) + frame_bytes("DISCONNECT", [("receipt", "bye-77")])
    producer.send_bytes(data)
    frames = producer.wait_closed()
    assert [f.command for f in frames] == ["RECEIPT"]
    assert frames[0].get("receipt-id") == "bye-77"
    assert bodies(consumer.expect("MESSAGE") for _ in range(3)) == [b"p0", b"p1", b"p2"]


def test_stompy_disconnect_receipt(broker, stomp_client):
    client = stomp_client(broker.address, "1.2")
    client.conn.disconnect(receipt="see-you")
    # stomp.py does not block on the DISCONNECT receipt: wait for it to be read.
    client.listener.wait_receipt("see-you")
    assert client.listener.disconnected.wait(5)
    assert poll(broker.connection_count, lambda n: n == 0, timeout=5, interval=0.02) == 0


# =============================================================================== acknowledgement


def _redelivered_after_reconnect(broker, stomp_client, dest, expected_count, version="1.2"):
    """Open a fresh auto-ack consumer and return what it receives (the redeliveries)."""
    c = stomp_client(broker.address, version)
    c.subscribe(dest, "again")
    frames = c.listener.get_n(expected_count)
    c.listener.assert_no_message(0.3)
    return frames


def test_ack_12_client_individual(broker, stomp_client):
    """"ACK" (1.2): the id header is the MESSAGE's ack header; client-individual acks only the
    named message, so the others come back (redelivered) when the consumer goes away."""
    dest = uniq("ind")
    producer = stomp_client(broker.address)
    for i in range(3):
        producer.send(dest, f"m{i}")
    consumer = stomp_client(broker.address, "1.2")
    consumer.subscribe(dest, "s", ack="client-individual")
    frames = consumer.listener.get_n(3)
    assert all("ack" in f.headers for f in frames)
    rid = consumer.receipt()
    consumer.conn.ack(frames[1].headers["ack"], receipt=rid)
    consumer.listener.wait_receipt(rid)
    assert broker.queue_stats(dest)["in_flight"] == 2
    consumer.disconnect()
    again = _redelivered_after_reconnect(broker, stomp_client, dest, 2)
    assert [f.body for f in again] == ["m0", "m2"]
    assert all(f.headers.get("redelivered") == "true" for f in again)


def test_ack_12_client_cumulative(broker, stomp_client):
    """"SUBSCRIBE ack header": in client mode an ACK covers the named message and every message
    delivered before it on that subscription."""
    dest = uniq("cum")
    producer = stomp_client(broker.address)
    for i in range(4):
        producer.send(dest, f"m{i}")
    consumer = stomp_client(broker.address, "1.2")
    consumer.subscribe(dest, "s", ack="client")
    frames = consumer.listener.get_n(4)
    rid = consumer.receipt()
    consumer.conn.ack(frames[2].headers["ack"], receipt=rid)
    consumer.listener.wait_receipt(rid)
    assert broker.queue_stats(dest)["in_flight"] == 1
    consumer.disconnect()
    again = _redelivered_after_reconnect(broker, stomp_client, dest, 1)
    assert [f.body for f in again] == ["m3"]
    assert again[0].headers.get("redelivered") == "true"


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_ack_pre_12_forms(broker, stomp_client, version):
    """Before 1.2 ACK names the message by message-id (1.1 adds the subscription header)."""
    dest = uniq("ack" + version.replace(".", ""))
    producer = stomp_client(broker.address)
    for i in range(2):
        producer.send(dest, f"m{i}")
    consumer = stomp_client(broker.address, version)
    consumer.subscribe(dest, "s", ack="client")
    frames = consumer.listener.get_n(2)
    assert all("ack" not in f.headers for f in frames)  # the ack header is 1.2 only
    rid = consumer.receipt()
    if version == "1.0":
        consumer.conn.ack(frames[0].headers["message-id"], receipt=rid)
    else:
        consumer.conn.ack(frames[0].headers["message-id"], "s", receipt=rid)
    consumer.listener.wait_receipt(rid)
    assert broker.queue_stats(dest)["in_flight"] == 1
    consumer.disconnect()
    again = _redelivered_after_reconnect(broker, stomp_client, dest, 1)
    assert [f.body for f in again] == ["m1"]


def test_client_individual_is_not_a_10_ack_mode(broker, raw_factory):
    c = raw_factory(broker.address, "1.0")
    c.connect(None)
    c.send_frame("SUBSCRIBE", [("destination", uniq()), ("ack", "client-individual")])
    assert "ack mode" in c.expect_error_and_close().get("message")


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_nack_redelivers_with_redelivered_flag(broker, stomp_client, version):
    """"NACK": the message was not consumed; the broker redelivers it, flagged redelivered."""
    dest = uniq("nack")
    producer = stomp_client(broker.address)
    producer.send(dest, "again please")
    consumer = stomp_client(broker.address, version)
    consumer.subscribe(dest, "s", ack="client-individual")
    first = consumer.listener.get()
    assert "redelivered" not in first.headers
    if version == "1.2":
        consumer.conn.nack(first.headers["ack"])
    else:
        consumer.conn.nack(first.headers["message-id"], "s")
    second = consumer.listener.get()
    assert second.body == "again please"
    assert second.headers["redelivered"] == "true"
    assert second.headers["message-id"] == first.headers["message-id"]
    assert second.headers["JMSXDeliveryCount"] == "2"
    ack = second.headers["ack"] if version == "1.2" else second.headers["message-id"]
    rid = consumer.receipt()
    if version == "1.2":
        consumer.conn.ack(ack, receipt=rid)
    else:
        consumer.conn.ack(ack, "s", receipt=rid)
    consumer.listener.wait_receipt(rid)
    stats = broker.queue_stats(dest)
    assert stats["in_flight"] == 0 and stats["pending"] == 0 and stats["dequeued"] == 1


def test_nack_is_not_a_10_frame(broker, raw_factory):
    c = raw_factory(broker.address, "1.0")
    c.connect(None)
    c.send_frame("NACK", [("message-id", "x")])
    assert "NACK" in c.expect_error_and_close().get("message")


def test_ack_of_unknown_id_is_an_error(broker, raw_factory):
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("ACK", [("id", "no-such-ack"), ("receipt", "r9")])
    error = c.expect_error_and_close()
    assert "no-such-ack" in error.get("message")
    assert error.get("receipt-id") == "r9"  # "ERROR": identifies the offending frame


# =============================================================================== transactions


def test_transaction_sends_commit_and_abort(broker, stomp_client):
    """"BEGIN"/"COMMIT"/"ABORT": transacted sends reach the destination only on COMMIT, and
    are discarded on ABORT."""
    dest = uniq("tx")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    producer = stomp_client(broker.address)
    producer.conn.begin("tx-1")
    producer.send(dest, "one", transaction="tx-1")
    producer.send(dest, "two", transaction="tx-1")
    consumer.listener.assert_no_message(0.3)
    producer.conn.commit("tx-1")
    assert [f.body for f in consumer.listener.get_n(2)] == ["one", "two"]
    producer.conn.begin("tx-2")
    producer.send(dest, "never", transaction="tx-2")
    rid = producer.receipt()
    producer.conn.abort("tx-2", headers={"receipt": rid})
    producer.listener.wait_receipt(rid)
    producer.send(dest, "outside")
    assert consumer.listener.get().body == "outside"
    consumer.listener.assert_no_message(0.2)


def test_transaction_acks_abort_and_commit(broker, stomp_client):
    """Acks inside a transaction take effect at COMMIT; an ABORT undoes them, so the message is
    unacknowledged again and comes back when the consumer goes away."""
    dest = uniq("txack")
    producer = stomp_client(broker.address)
    producer.send(dest, "a")
    producer.send(dest, "b")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s", ack="client-individual")
    fa, fb = consumer.listener.get_n(2)
    consumer.conn.begin("t-abort")
    consumer.conn.ack(fa.headers["ack"], transaction="t-abort")
    rid = consumer.receipt()
    consumer.conn.abort("t-abort", headers={"receipt": rid})
    consumer.listener.wait_receipt(rid)
    consumer.conn.begin("t-commit")
    consumer.conn.ack(fb.headers["ack"], transaction="t-commit")
    rid = consumer.receipt()
    consumer.conn.commit("t-commit", headers={"receipt": rid})
    consumer.listener.wait_receipt(rid)
    assert broker.queue_stats(dest)["dequeued"] == 1
    consumer.disconnect()
    again = _redelivered_after_reconnect(broker, stomp_client, dest, 1)
    assert [f.body for f in again] == ["a"]


def test_transaction_errors(broker, raw_factory):
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("COMMIT", [("transaction", "never-begun")])
    assert "never-begun" in c.expect_error_and_close().get("message")
    c2 = raw_factory(broker.address)
    c2.connect("1.2")
    c2.send_frame("BEGIN", [])
    assert "transaction" in c2.expect_error_and_close().get("message")


def test_disconnect_aborts_open_transaction(broker, stomp_client):
    dest = uniq("txdisc")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    producer = stomp_client(broker.address)
    producer.conn.begin("open")
    producer.send(dest, "lost", transaction="open")
    producer.disconnect()
    consumer.listener.assert_no_message(0.3)
    assert broker.queue_stats(dest) is None or broker.queue_stats(dest)["enqueued"] == 0


# =============================================================================== encoding


WEIRD = "colon:here, newline\nthere, back\\slash"


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_header_escaping_round_trip_stompy(broker, stomp_client, version):
    """"Value Encoding": in 1.1/1.2 `:` `\\n` `\\\\` (and in 1.2 CR) travel escaped and come back
    as the original value."""
    dest = uniq("esc")
    consumer = stomp_client(broker.address, version)
    consumer.subscribe(dest, "s")
    value = WEIRD + ("\rcr" if version == "1.2" else "")
    consumer.send(dest, "x", weird=value, correlation_id="a:b\\c")
    frame = consumer.listener.get()
    assert frame.headers["weird"] == value
    assert frame.headers["correlation-id"] == "a:b\\c"


def test_header_escaping_exact_bytes_12(broker, raw_factory):
    """Escaped names and values on the wire (raw bytes), across 1.2 -> 1.1 -> 1.0 receivers."""
    dest = uniq("escraw")
    receivers = {}
    for version, accept in (("1.2", "1.2"), ("1.1", "1.1"), ("1.0", None)):
        r = raw_factory(broker.address, version)
        r.connect(accept)
        headers = [("destination", dest.replace("/queue/", "/topic/")), ("receipt", "s")]
        headers.append(("id", "s-" + version))
        r.send_frame("SUBSCRIBE", headers)
        r.expect("RECEIPT")
        receivers[version] = r
    sender = raw_factory(broker.address)
    sender.connect("1.2")
    sender.send_bytes(
        b"SEND\ndestination:" + dest.replace("/queue/", "/topic/").encode()
        + b"\nna\\cme:v\\ca\\nl\\\\b\\rz\nplain:x:y\n\nbody\x00"
    )
    m12 = receivers["1.2"].expect("MESSAGE")
    assert m12.get("na:me") == "v:a\nl\\b\rz"
    assert m12.get("plain") == "x:y"  # a raw colon in a value is tolerated on input
    assert b"na\\cme:v\\ca\\nl\\\\b\\rz\n" in receivers["1.2"].raw_received
    m11 = receivers["1.1"].expect("MESSAGE")
    assert m11.get("na:me") == "v:a\nl\\b\rz"  # 1.1 has no \r escape; the CR travels raw
    assert b"na\\cme:v\\ca\\nl\\\\b\rz\n" in receivers["1.1"].raw_received
    m10 = receivers["1.0"].expect("MESSAGE")
    # 1.0 has no escaping: a LF cannot be carried, and must never forge a header line
    raw10 = bytes(receivers["1.0"].raw_received)
    assert m10.body == b"body"
    assert b"\nl\\b" not in raw10
    assert m10.get("plain") == "x:y"
    # the LF went out as a space; the colon in the name is read as the name/value separator
    assert m10.get("na") == "me:v:a l\\b\rz"
    assert sorted(n for n, _ in m10.headers if n not in {"subscription", "destination", "message-id",
                                                         "timestamp", "expires", "priority", "content-length"}) == ["na", "plain"]


def test_no_escaping_in_10(broker, raw_factory):
    """"Value Encoding": 1.0 frames are not escaped: backslashes and colons are literal data.
    The same message to a 1.2 subscriber is escaped for 1.2 and decodes to the same value."""
    topic = f"/topic/ten.{time.monotonic_ns()}"
    c10 = raw_factory(broker.address, "1.0")
    c10.connect(None)
    c10.send_frame("SUBSCRIBE", [("destination", topic), ("receipt", "s")])
    c10.expect("RECEIPT")
    c12 = raw_factory(broker.address)
    c12.connect("1.2")
    c12.send_frame("SUBSCRIBE", [("id", "x"), ("destination", topic), ("receipt", "s")])
    c12.expect("RECEIPT")
    producer = raw_factory(broker.address, "1.0")
    producer.connect(None)
    producer.send_bytes(b"SEND\ndestination:" + topic.encode() + b"\npath:C:\\new\\table\n\nten\x00")
    m10 = c10.expect("MESSAGE")
    assert m10.get("path") == "C:\\new\\table"
    assert b"\npath:C:\\new\\table\n" in c10.raw_received
    assert m10.get("subscription") == topic  # 1.0 SUBSCRIBE without id: the destination
    m12 = c12.expect("MESSAGE")
    assert m12.get("path") == "C:\\new\\table"
    assert b"\npath:C\\c\\\\new\\\\table\n" in c12.raw_received


def test_bodies_with_nul_bytes_via_content_length(broker, raw_factory, stomp_client):
    """"Header content-length": with it, a body may contain NUL octets."""
    dest = uniq("nul")
    body = b"\x00head\x00\x00mid\xff\xfe\x00tail\x00"
    consumer = raw_factory(broker.address)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", [("id", "1"), ("destination", dest), ("receipt", "s")])
    consumer.expect("RECEIPT")
    producer = raw_factory(broker.address)
    producer.connect("1.2")
    producer.send_frame("SEND", [("destination", dest)], body, content_length=True)
    message = consumer.expect("MESSAGE")
    assert message.body == body
    assert message.get("content-length") == str(len(body))
    # and with stomp.py on both ends (bytes, no decoding)
    sp = stomp_client(broker.address, "1.2", auto_decode=False)
    dest2 = uniq("nul2")
    sp.subscribe(dest2, "1")
    sp.send(dest2, body)
    assert sp.listener.get().body == body


def test_body_without_content_length_ends_at_first_nul(broker, raw_factory):
    dest = uniq("nocl")
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("SUBSCRIBE", [("id", "1"), ("destination", dest), ("receipt", "s")])
    c.expect("RECEIPT")
    c.send_bytes(b"SEND\ndestination:" + dest.encode() + b"\n\nplain text\x00\n\n")
    assert c.expect("MESSAGE").body == b"plain text"


def test_crlf_line_endings_12(broker, raw_factory):
    """"Augmented BNF": 1.2 lines may end in CRLF."""
    dest = uniq("crlf")
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_bytes(
        b"SUBSCRIBE\r\nid:1\r\ndestination:" + dest.encode() + b"\r\nreceipt:s\r\n\r\n\x00"
        + b"SEND\r\ndestination:" + dest.encode() + b"\r\n\r\ncrlf\x00"
    )
    c.expect("RECEIPT")
    assert c.expect("MESSAGE").body == b"crlf"


def test_repeated_header_first_wins(broker, raw_factory):
    """"Repeated Header Entries": only the first occurrence counts."""
    dest = uniq("rep")
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("SUBSCRIBE", [("id", "1"), ("destination", dest), ("receipt", "s")])
    c.expect("RECEIPT")
    c.send_frame("SEND", [("destination", dest), ("color", "red"), ("color", "blue")], b"x")
    assert c.expect("MESSAGE").get("color") == "red"


# =============================================================================== ActiveMQ headers


def test_prefetch_size_limits_unacked_deliveries(broker, stomp_client):
    """activemq.prefetchSize: at most that many unacknowledged messages are in flight to the
    subscription; each ack lets one more through."""
    dest = uniq("prefetch")
    producer = stomp_client(broker.address)
    for i in range(5):
        producer.send(dest, f"m{i}")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s", ack="client-individual", **{"activemq.prefetchSize": 2})
    first = consumer.listener.get_n(2)
    consumer.listener.assert_no_message(0.4)
    consumer.conn.ack(first[0].headers["ack"])
    third = consumer.listener.get()
    assert third.body == "m2"
    consumer.listener.assert_no_message(0.3)
    assert broker.queue_stats(dest)["pending"] == 2


def test_prefetch_size_must_be_positive(broker, raw_factory):
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("SUBSCRIBE", [("id", "1"), ("destination", uniq()), ("activemq.prefetchSize", "0")])
    assert "prefetchSize" in c.expect_error_and_close().get("message")


def test_exclusive_consumer(broker, stomp_client):
    """activemq.exclusive: one consumer gets every message while it is subscribed; when it
    leaves, the others take over."""
    dest = uniq("excl")
    normal = stomp_client(broker.address)
    normal.subscribe(dest, "n")
    exclusive = stomp_client(broker.address)
    exclusive.subscribe(dest, "e", **{"activemq.exclusive": "true"})
    producer = stomp_client(broker.address)
    for i in range(4):
        producer.send(dest, f"m{i}")
    assert [f.body for f in exclusive.listener.get_n(4)] == ["m0", "m1", "m2", "m3"]
    normal.listener.assert_no_message(0.2)
    rid = exclusive.receipt()
    exclusive.conn.unsubscribe("e", headers={"receipt": rid})
    exclusive.listener.wait_receipt(rid)
    producer.send(dest, "later")
    assert normal.listener.get().body == "later"


def test_consumer_priority(broker, stomp_client):
    """activemq.priority: the highest-priority consumer with room gets the messages."""
    dest = uniq("cprio")
    low = stomp_client(broker.address)
    low.subscribe(dest, "low", **{"activemq.priority": 1})
    high = stomp_client(broker.address)
    high.subscribe(dest, "high", **{"activemq.priority": 9})
    producer = stomp_client(broker.address)
    for i in range(5):
        producer.send(dest, f"m{i}")
    assert len(high.listener.get_n(5)) == 5
    low.listener.assert_no_message(0.2)


def test_message_priority_ordering(broker, stomp_client):
    """JMS priority: higher priority first, FIFO within a priority."""
    dest = uniq("mprio")
    producer = stomp_client(broker.address)
    for body, prio in [("a1", 1), ("b9", 9), ("c4", 4), ("d9", 9), ("e0", 0), ("f5", 5), ("g", None)]:
        if prio is None:
            producer.send(dest, body)
        else:
            producer.send(dest, body, priority=prio)
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    frames = consumer.listener.get_n(7)
    assert [f.body for f in frames] == ["b9", "d9", "f5", "c4", "g", "a1", "e0"]
    assert frames[0].headers["priority"] == "9"
    assert frames[4].headers["priority"] == "4"  # the JMS default


@pytest.mark.parametrize("bad", ["high", "10", "-1", "4.5"])
def test_bad_priority_is_an_error(broker, raw_factory, bad):
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("SEND", [("destination", uniq()), ("priority", bad), ("receipt", "p")], b"x")
    error = c.expect_error_and_close()
    assert "priority" in error.get("message")
    assert error.get("receipt-id") == "p"
    assert_broker_works(broker.address)


def test_selector(broker, stomp_client):
    """selector: only matching messages reach the subscription. STOMP properties are strings;
    with convert_string_expressions (the default here) numeric comparisons still work."""
    dest = uniq("sel")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s", selector="color = 'red' AND weight > 5")
    producer = stomp_client(broker.address)
    producer.send(dest, "red-heavy", color="red", weight=7)
    producer.send(dest, "red-light", color="red", weight=2)
    producer.send(dest, "blue-heavy", color="blue", weight=9)
    producer.send(dest, "red-heavier", color="red", weight=50)
    producer.send(dest, "red-10", color="red", weight=10)  # "10" < "5" as strings, 10 > 5 as numbers
    producer.send(dest, "red-nan", color="red", weight="heavy")  # does not convert: no match
    assert [f.body for f in consumer.listener.get_n(3)] == ["red-heavy", "red-heavier", "red-10"]
    consumer.listener.assert_no_message(0.2)
    assert broker.queue_stats(dest)["pending"] == 3


def test_selector_on_jms_headers(broker, stomp_client):
    dest = uniq("selh")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s", selector="JMSPriority > 6 OR JMSCorrelationID = 'pick-me'")
    producer = stomp_client(broker.address)
    producer.send(dest, "low", priority=2)
    producer.send(dest, "high", priority=8)
    producer.send(dest, "corr", correlation_id="pick-me")
    assert sorted(f.body for f in consumer.listener.get_n(2)) == ["corr", "high"]


def test_persistent_header(broker, stomp_client):
    dest = uniq("pers")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    consumer.send(dest, "p", persistent="true")
    consumer.send(dest, "np")
    p, np_ = consumer.listener.get_n(2)
    assert p.headers.get("persistent") == "true"
    assert "persistent" not in np_.headers


def test_expires_in_the_past_is_not_delivered_to_a_later_subscriber(broker, stomp_client):
    """expires (ms since the epoch): an expired message is never delivered."""
    dest = uniq("exp")
    producer = stomp_client(broker.address)
    past = int(time.time() * 1000) - 60_000
    future = int(time.time() * 1000) + 60_000
    producer.send(dest, "stale", expires=past)
    producer.send(dest, "fresh", expires=future)
    producer.send(dest, "short", expires=int(time.time() * 1000) + 200)
    time.sleep(0.4)
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    frame = consumer.listener.get()
    assert frame.body == "fresh"
    assert frame.headers["expires"] == str(future)
    consumer.listener.assert_no_message(0.3)
    assert broker.queue_stats(dest)["expired"] == 2


def test_expired_persistent_message_goes_to_dlq(broker, stomp_client):
    """ActiveMQ's dead-letter strategy: an expired persistent message goes to ActiveMQ.DLQ
    (process_expired); an expired non-persistent one is dropped (process_non_persistent off)."""
    dest = uniq("expdlq")
    producer = stomp_client(broker.address)
    past = int(time.time() * 1000) - 1000
    producer.send(dest, "stale-persistent", expires=past, persistent="true", tag="p")
    producer.send(dest, "stale-transient", expires=past, tag="t")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    consumer.subscribe("/queue/ActiveMQ.DLQ", "dlq")
    frame = consumer.listener.get()
    assert frame.body == "stale-persistent"
    assert frame.headers["subscription"] == "dlq"
    assert frame.headers["dlqDeliveryFailureCause"] == "expired"
    assert frame.headers["originalDestination"] == "queue://" + dest.removeprefix("/queue/")
    consumer.listener.assert_no_message(0.3)


@pytest.mark.parametrize("kind", ["queue", "topic"])
def test_expired_message_not_delivered_to_waiting_subscriber(broker, stomp_client, kind):
    """Same rule when a consumer is already waiting: a message that is already expired when it
    arrives must not be handed to it."""
    dest = f"/{kind}/exp2.{time.monotonic_ns()}"
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    past = int(time.time() * 1000) - 60_000
    consumer.send(dest, "stale", expires=past)
    consumer.send(dest, "ok")
    assert consumer.listener.get().body == "ok"
    consumer.listener.assert_no_message(0.2)


def test_group_pinning_across_two_subscribers(broker, stomp_client):
    """JMSXGroupID: every message of a group goes to the one consumer that got its first
    message; different groups are spread over the consumers."""
    dest = uniq("grp")
    a = stomp_client(broker.address)
    a.subscribe(dest, "a")
    b = stomp_client(broker.address)
    b.subscribe(dest, "b")
    producer = stomp_client(broker.address)
    groups = ["g1", "g2", "g3", "g4"]
    for i in range(5):
        for g in groups:
            producer.send(dest, f"{g}-{i}", JMSXGroupID=g)
    received = {"a": [], "b": []}
    total = 0
    deadline = time.monotonic() + 5
    while total < 20 and time.monotonic() < deadline:
        for name, client in (("a", a), ("b", b)):
            try:
                frame = client.listener.messages.get(timeout=0.05)
            except Exception:  # noqa: BLE001 - queue.Empty
                continue
            received[name].append(frame)
            total += 1
    assert total == 20
    owners: dict[str, set] = {}
    for name, frames in received.items():
        for f in frames:
            assert f.headers["JMSXGroupID"] == f.body.split("-")[0]
            owners.setdefault(f.headers["JMSXGroupID"], set()).add(name)
        # FIFO within each group on its consumer
        for g in groups:
            seq = [int(f.body.split("-")[1]) for f in frames if f.body.startswith(g)]
            assert seq == sorted(seq)
    assert all(len(v) == 1 for v in owners.values()), owners
    assert received["a"] and received["b"], "groups should be spread over both consumers"


def test_group_seq_minus_one_closes_the_group(broker, stomp_client):
    """JMSXGroupSeq -1 closes the group: its next message may go to another consumer even though
    the previous owner is still subscribed (here: with a full prefetch window)."""
    dest = uniq("grpclose")
    owner = stomp_client(broker.address)
    owner.subscribe(dest, "o", ack="client-individual", **{"activemq.prefetchSize": 2})
    producer = stomp_client(broker.address)
    producer.send(dest, "closing-0", JMSXGroupID="CLOSING")
    producer.send(dest, "closing-end", JMSXGroupID="CLOSING", JMSXGroupSeq=-1)
    frames = owner.listener.get_n(2)
    assert [f.body for f in frames] == ["closing-0", "closing-end"]
    assert frames[1].headers["JMSXGroupSeq"] == "-1"
    other = stomp_client(broker.address)
    other.subscribe(dest, "x", ack="client-individual", **{"activemq.prefetchSize": 2})
    producer.send(dest, "closing-next", JMSXGroupID="CLOSING")
    assert other.listener.get().body == "closing-next"
    owner.listener.assert_no_message(0.1)


def test_open_group_waits_for_its_full_owner(broker, stomp_client):
    """JMSXGroupID pinning holds when the owner has no room: the group's next message waits for
    the owner (head-of-line) rather than going to another consumer, and is delivered to the owner
    once it acknowledges something."""
    dest = uniq("grpfull")
    owner = stomp_client(broker.address)
    owner.subscribe(dest, "o", ack="client-individual", **{"activemq.prefetchSize": 2})
    producer = stomp_client(broker.address)
    producer.send(dest, "open-0", JMSXGroupID="OPEN")
    producer.send(dest, "open-1", JMSXGroupID="OPEN")
    frames = owner.listener.get_n(2)
    other = stomp_client(broker.address)
    other.subscribe(dest, "x", ack="client-individual", **{"activemq.prefetchSize": 2})
    producer.send(dest, "open-2", JMSXGroupID="OPEN")
    other.listener.assert_no_message(0.3)
    assert broker.queue_stats(dest)["pending"] == 1
    owner.conn.ack(frames[0].headers["ack"])
    assert owner.listener.get().body == "open-2"
    other.listener.assert_no_message(0.1)


def test_correlation_id_reply_to_and_type(broker, stomp_client):
    dest = uniq("corr")
    replies = uniq("replies")
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    consumer.send(dest, "request", **{"correlation-id": "corr-42", "reply-to": replies, "type": "Order"})
    frame = consumer.listener.get()
    assert frame.headers["correlation-id"] == "corr-42"
    assert frame.headers["reply-to"] == replies
    assert frame.headers["type"] == "Order"
    # request/reply over the reply-to destination
    consumer.subscribe(replies, "r")
    consumer.send(frame.headers["reply-to"], "response", **{"correlation-id": frame.headers["correlation-id"]})
    reply = consumer.listener.get()
    assert reply.body == "response" and reply.headers["correlation-id"] == "corr-42"


@pytest.mark.parametrize("name_header", ["activemq.subscriptionName", "durable-subscription-name"])
def test_durable_subscription(broker, stomp_client, name_header):
    """client-id + activemq.subscriptionName: a durable topic subscription keeps what is published
    while its subscriber is away; UNSUBSCRIBE with the name removes it."""
    topic = f"/topic/news.{time.monotonic_ns()}"
    sub_headers = {name_header: "daily"}
    c1 = stomp_client(broker.address, headers={"client-id": "reader-1"})
    c1.subscribe(topic, "d", **sub_headers)
    publisher = stomp_client(broker.address)
    publisher.send(topic, "while-online")
    assert c1.listener.get().body == "while-online"
    c1.disconnect()
    # stomp.py does not wait for the DISCONNECT receipt: wait until the broker has detached
    # the subscriber, or the next message could still be dispatched to the closing client.
    assert poll(lambda: not any(s.get("active") for s in broker.stats()["subscriptions"] if s.get("durable")),
                timeout=5, interval=0.01), "durable subscriber never detached after DISCONNECT"
    publisher.send(topic, "away-1", persistent="true")
    publisher.send(topic, "away-2")
    c2 = stomp_client(broker.address, headers={"client-id": "reader-1"})
    c2.subscribe(topic, "d", **sub_headers)
    assert [f.body for f in c2.listener.get_n(2)] == ["away-1", "away-2"]
    # remove it: later publications are not kept for "daily"
    rid = c2.receipt()
    c2.conn.unsubscribe("d", headers={"receipt": rid, **sub_headers})
    c2.listener.wait_receipt(rid)
    assert not [s for s in broker.stats()["subscriptions"] if s.get("durable")]
    publisher.send(topic, "after-removal")
    c2.subscribe(topic, "d2", **sub_headers)
    c2.listener.assert_no_message(0.3)


def test_inactive_durable_subscription_removed_by_name(broker, stomp_client):
    """UNSUBSCRIBE naming a durable subscription nobody consumes removes it by client id and
    name, whatever the id header says (as ActiveMQ's STOMP transport does)."""
    topic = f"/topic/inactive.{time.monotonic_ns()}"
    c1 = stomp_client(broker.address, headers={"client-id": "reader-2"})
    c1.subscribe(topic, "d", **{"activemq.subscriptionName": "weekly"})
    c1.disconnect()
    assert poll(lambda: not any(s.get("active") for s in broker.stats()["subscriptions"] if s.get("durable")),
                timeout=5, interval=0.01), "durable subscriber never detached after DISCONNECT"
    c2 = stomp_client(broker.address, headers={"client-id": "reader-2"})
    rid = c2.receipt()
    c2.conn.unsubscribe("never-subscribed", headers={"receipt": rid, "activemq.subscriptionName": "weekly"})
    c2.listener.wait_receipt(rid)
    assert not [s for s in broker.stats()["subscriptions"] if s.get("durable")]


def test_durable_subscription_needs_client_id(broker, raw_factory):
    c = raw_factory(broker.address)
    c.connect("1.2")
    c.send_frame("SUBSCRIBE", [("id", "1"), ("destination", "/topic/t"), ("activemq.subscriptionName", "n")])
    assert "client id" in c.expect_error_and_close().get("message")


def test_client_id_in_use(broker, raw_factory):
    a = raw_factory(broker.address)
    assert a.connect("1.2", client_id="dup").command == "CONNECTED"
    b = raw_factory(broker.address)
    b.send_frame("CONNECT", [("accept-version", "1.2"), ("host", "h"), ("client-id", "dup")], version="1.0")
    assert "dup" in b.expect_error_and_close().get("message")
    a.send_frame("BEGIN", [("transaction", "t"), ("receipt", "ok")])
    a.expect("RECEIPT")


def test_no_local_topic_subscription(broker, stomp_client):
    """activemq.noLocal: a topic subscription does not receive messages its own connection sent."""
    topic = f"/topic/nolocal.{time.monotonic_ns()}"
    me = stomp_client(broker.address)
    me.subscribe(topic, "s", **{"activemq.noLocal": "true"})
    other = stomp_client(broker.address)
    me.send(topic, "mine")
    other.send(topic, "theirs")
    assert me.listener.get().body == "theirs"
    me.listener.assert_no_message(0.2)


def test_topic_wildcard_subscription(broker, stomp_client):
    """ActiveMQ wildcards: `*` matches one name element, `>` the rest."""
    base = f"prices{time.monotonic_ns()}"
    c = stomp_client(broker.address)
    c.subscribe(f"/topic/{base}.*.ibm", "one")
    c.subscribe(f"/topic/{base}.>", "all")
    c.send(f"/topic/{base}.nyse.ibm", "a")
    c.send(f"/topic/{base}.nyse.msft", "b")
    got = sorted((f.headers["subscription"], f.body) for f in c.listener.get_n(3))
    assert got == [("all", "a"), ("all", "b"), ("one", "a")]
    c.listener.assert_no_message(0.2)


def test_unsubscribe_by_destination_in_10(broker, raw_factory):
    """1.0 subscriptions may be identified by destination alone (no id)."""
    dest = uniq("ten-unsub")
    c = raw_factory(broker.address, "1.0")
    c.connect(None)
    c.send_frame("SUBSCRIBE", [("destination", dest)])
    c.send_frame("SEND", [("destination", dest)], b"one")
    assert c.expect("MESSAGE").body == b"one"
    c.send_frame("UNSUBSCRIBE", [("destination", dest), ("receipt", "u")])
    c.expect("RECEIPT")
    c.send_frame("SEND", [("destination", dest), ("receipt", "s")], b"two")
    c.expect("RECEIPT")
    c.no_frame(0.2)


def test_ack_11_without_subscription_header(broker, raw_factory):
    """A 1.1 ACK naming only the message-id still finds the subscription holding it."""
    dest = uniq("ack11")
    c = raw_factory(broker.address, "1.1")
    c.connect("1.1")
    c.send_frame("SUBSCRIBE", [("id", "s"), ("destination", dest), ("ack", "client-individual")])
    c.send_frame("SEND", [("destination", dest)], b"m")
    m = c.expect("MESSAGE")
    c.send_frame("ACK", [("message-id", m.get("message-id")), ("receipt", "a")])
    assert c.expect("RECEIPT").get("receipt-id") == "a"
    assert broker.queue_stats(dest)["dequeued"] == 1


def test_group_first_key_destination_parameter(broker, stomp_client):
    """Artemis group-first-key (as a destination parameter): the first message of a group on a
    consumer carries that header set to true."""
    name = f"grpfirst{time.monotonic_ns()}"
    c = stomp_client(broker.address)
    c.subscribe(f"/queue/{name}?group-first-key=JMSXGroupFirstForConsumer", "s")
    c.send(f"/queue/{name}", "g1", JMSXGroupID="G")
    c.send(f"/queue/{name}", "g2", JMSXGroupID="G")
    first, second = c.listener.get_n(2)
    assert first.headers.get("JMSXGroupFirstForConsumer") == "true"
    assert "JMSXGroupFirstForConsumer" not in second.headers


FLOW = {"policy_entries": [
    {"queue": "fc.>", "memory_limit": 2000},
    {"queue": "fcfail.>", "memory_limit": 2000, "send_fail_if_no_space": True},
    {"queue": "fctimeout.>", "memory_limit": 2000, "send_fail_if_no_space_after_timeout": 300},
]}


def test_producer_flow_control_pauses_and_resumes(broker_factory, raw_factory):
    """Producer flow control: once a queue is over its memory limit the broker stops reading
    from the producer (its receipts stop), and resumes when a consumer makes room; nothing is
    lost or reordered."""
    broker = broker_factory(**FLOW)
    dest = f"/queue/fc.{time.monotonic_ns()}"
    producer = raw_factory(broker.address)
    producer.connect("1.2")
    producer.send_bytes(b"".join(
        frame_bytes("SEND", [("destination", dest), ("receipt", f"r{i}"), ("n", str(i))], b"x" * 500)
        for i in range(10)
    ))
    early = []
    try:
        while True:
            early.append(producer.read_frame(timeout=0.5).get("receipt-id"))
    except TimeoutError:
        pass
    assert len(early) in range(1, 10), early
    consumer = raw_factory(broker.address)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", [("id", "c"), ("destination", dest)])
    got = [consumer.expect("MESSAGE").get("n") for _ in range(10)]
    assert got == [str(i) for i in range(10)]
    rest = [producer.read_frame().get("receipt-id") for _ in range(10 - len(early))]
    assert early + rest == [f"r{i}" for i in range(10)]


def test_flow_controlled_producer_is_not_dropped_for_missing_heartbeats(broker_factory, raw_factory):
    """While flow control has stopped the broker reading from a producer, the producer's
    heart-beats sit unread in the socket; the broker must not take that silence for a dead
    client ("Heart-beating") and drop the connection."""
    broker = broker_factory(stomp_options={"heart_beat_send_ms": 0, "heart_beat_receive_ms": 200}, **FLOW)
    dest = f"/queue/fc.hb{time.monotonic_ns()}"
    producer = raw_factory(broker.address)
    producer.connect("1.2", heart_beat="200,0")
    producer.send_bytes(b"".join(
        frame_bytes("SEND", [("destination", dest), ("receipt", f"r{i}")], b"x" * 500) for i in range(10)
    ))
    end = time.monotonic() + 1.2  # six heart-beat periods while blocked
    while time.monotonic() < end:
        producer.send_bytes(b"\n")
        time.sleep(0.1)
    consumer = raw_factory(broker.address)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", [("id", "c"), ("destination", dest)])
    assert len([consumer.expect("MESSAGE") for _ in range(10)]) == 10
    receipts = []
    while len(receipts) < 10:
        producer.send_bytes(b"\n")
        receipts.append(producer.expect("RECEIPT", timeout=2).get("receipt-id"))
    assert receipts == [f"r{i}" for i in range(10)]


def test_send_fail_if_no_space(broker_factory, raw_factory):
    """send_fail_if_no_space: a SEND to a full destination is refused with an ERROR instead of
    blocking the producer."""
    broker = broker_factory(**FLOW)
    dest = f"/queue/fcfail.{time.monotonic_ns()}"
    producer = raw_factory(broker.address)
    producer.connect("1.2")
    for i in range(20):
        producer.send_frame("SEND", [("destination", dest), ("receipt", f"r{i}")], b"x" * 500)
        frame = producer.read_frame(timeout=1)
        if frame.command == "ERROR":
            break
    else:
        raise AssertionError("never refused")
    assert "send_fail_if_no_space" in frame.get("message") and frame.get("receipt-id") == f"r{i}"
    producer.wait_closed()
    assert i >= 1
    assert_broker_works(broker.address)


def test_send_fail_if_no_space_after_timeout(broker_factory, raw_factory):
    """send_fail_if_no_space_after_timeout: a producer blocked by flow control longer than that
    gets an ERROR instead of waiting forever."""
    broker = broker_factory(**FLOW)
    dest = f"/queue/fctimeout.{time.monotonic_ns()}"
    producer = raw_factory(broker.address)
    producer.connect("1.2")
    start = time.monotonic()
    producer.send_bytes(b"".join(
        frame_bytes("SEND", [("destination", dest), ("receipt", f"r{i}")], b"x" * 500) for i in range(10)
    ))
    frames = producer.wait_closed(timeout=5)
    elapsed = time.monotonic() - start
    assert frames[-1].command == "ERROR", frames
    assert "send_fail_if_no_space_after_timeout" in frames[-1].get("message")
    assert 0.25 < elapsed < 3, elapsed
    assert_broker_works(broker.address)


def test_slow_reader_gets_back_pressure_not_unbounded_buffering(broker, raw_factory):
    """A consumer that stops reading its socket: once the transport's write buffer is full the
    broker stops dispatching to it (messages stay pending on the queue) instead of buffering
    everything in memory; when it reads again, everything arrives in order."""
    dest = uniq("slow")
    consumer = raw_factory(broker.address)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", [("id", "c"), ("destination", dest), ("receipt", "s")])
    consumer.expect("RECEIPT")
    producer = raw_factory(broker.address)
    producer.connect("1.2")
    body = b"y" * 65536
    count = 400  # ~26 MB, far beyond socket buffers plus the listener's 1 MiB high-water mark
    for i in range(count):
        producer.send_frame("SEND", [("destination", dest), ("n", str(i))], body, content_length=True)
    producer.send_frame("BEGIN", [("transaction", "sync"), ("receipt", "sync")])
    producer.expect("RECEIPT", timeout=20)
    stats = broker.queue_stats(dest)
    assert stats["pending"] > 0, stats
    assert stats["dispatched"] < count
    got = [int(consumer.expect("MESSAGE", timeout=10).get("n")) for _ in range(count)]
    assert got == list(range(count))


# =============================================================================== security

SECURITY = {
    "security": {
        "users": [
            {"name": "alice", "password": "wonderland", "groups": ["admins"]},
            {"name": "bob", "password": "builder", "groups": ["users"]},
        ],
        "authorization": [
            {"queue": "secret.>", "read": ["admins"], "write": ["admins"]},
            {"queue": "public.>", "read": ["admins", "users"], "write": ["admins", "users"]},
        ],
    }
}


def test_login_with_configured_users(broker_factory, stomp_client):
    broker = broker_factory(**SECURITY)
    alice = stomp_client(broker.address, login="alice", passcode="wonderland")
    bob = stomp_client(broker.address, "1.1", login="bob", passcode="builder")
    alice.subscribe("/queue/secret.plans", "s")
    alice.send("/queue/secret.plans", "for admins")
    assert alice.listener.get().body == "for admins"
    bob.subscribe("/queue/public.news", "p")
    bob.send("/queue/public.news", "for all")
    assert bob.listener.get().body == "for all"


@pytest.mark.parametrize(
    "login, passcode, expect",
    [("alice", "wrong", "alice"), ("mallory", "x", "mallory"), (None, None, "anonymous"), ("bob", None, "bob")],
)
def test_bad_login_is_refused(broker_factory, raw_factory, login, passcode, expect):
    broker = broker_factory(**SECURITY)
    c = raw_factory(broker.address)
    headers = [("accept-version", "1.2"), ("host", "h")]
    if login is not None:
        headers.append(("login", login))
    if passcode is not None:
        headers.append(("passcode", passcode))
    c.send_frame("CONNECT", headers, version="1.0")
    error = c.expect_error_and_close()
    assert expect in error.get("message")
    assert "wonderland" not in error.get("message") and b"wonderland" not in error.body
    assert broker.connection_count() == 0


def test_any_login_accepted_without_users(broker, stomp_client):
    """Config: a broker with no users has no authentication at all, so clients that send
    credentials anyway (many do by default, e.g. guest/guest) are let in, like ActiveMQ without
    an authentication plugin."""
    client = stomp_client(broker.address, login="guest", passcode="guest")
    assert client.listener.connected_headers["version"] == "1.2"


def test_anonymous_allowed_without_users(broker, raw_factory):
    """Security.allow_anonymous defaults to "no users configured": such a broker lets anyone in."""
    c = raw_factory(broker.address)
    assert c.connect("1.2").command == "CONNECTED"


def test_anonymous_allowed_when_configured(broker_factory, raw_factory):
    cfg = {"security": {**SECURITY["security"], "allow_anonymous": True,
                        "anonymous_groups": ["users"]}}
    broker = broker_factory(**cfg)
    c = raw_factory(broker.address)
    assert c.connect("1.2").command == "CONNECTED"
    c.send_frame("SEND", [("destination", "/queue/public.x"), ("receipt", "ok")], b"x")
    assert c.expect("RECEIPT").get("receipt-id") == "ok"
    c.send_frame("SEND", [("destination", "/queue/secret.x")], b"x")
    assert "not authorized" in c.expect_error_and_close().get("message")


@pytest.mark.parametrize(
    "frame, fragment",
    [
        ([("SUBSCRIBE", [("id", "1"), ("destination", "/queue/secret.plans")])], "read from queue://secret.plans"),
        ([("SEND", [("destination", "/queue/secret.plans")])], "write to queue://secret.plans"),
        ([("SUBSCRIBE", [("id", "1"), ("destination", "/queue/unlisted")])], "queue://unlisted"),
    ],
)
def test_authorization_refusals(broker_factory, raw_factory, stomp_client, frame, fragment):
    broker = broker_factory(**SECURITY)
    bystander = stomp_client(broker.address, login="bob", passcode="builder")
    bystander.subscribe("/queue/public.chat", "c")
    c = raw_factory(broker.address)
    c.connect("1.2", login="bob", passcode="builder")
    for command, headers in frame:
        c.send_frame(command, headers, b"x")
    error = c.expect_error_and_close()
    assert "not authorized" in error.get("message") and fragment in error.get("message")
    bystander.send("/queue/public.chat", "still here")
    assert bystander.listener.get().body == "still here"


# =============================================================================== bad input

LIMITS = {"stomp_options": {"max_frame_size": 4096, "max_header_block": 1024, "max_header_length": 512,
                            "max_headers": 20}}


def _send_connected(client: RawStomp, data: bytes) -> None:
    client.connect("1.2")
    client.send_bytes(data)


BAD_INPUT = [
    pytest.param({}, b"SEND\ndestination /queue/x\n\nbody\x00", "without ':'", id="malformed-header-line"),
    pytest.param({}, b"FROBNICATE\n\n\x00", "unknown command", id="unknown-command"),
    pytest.param({}, b"send\ndestination:/queue/x\n\n\x00", "unknown command", id="lowercase-command"),
    pytest.param({}, b"SEND\ndestination:/queue/x\ncontent-length:abc\n\nx\x00", "content-length", id="bad-content-length"),
    pytest.param({}, b"SEND\ndestination:/queue/x\ncontent-length:2\n\nxyz\x00", "NUL", id="content-length-mismatch"),
    pytest.param({}, b"SEND\ndestination:/queue/x\nbad:esc\\t\n\nx\x00", "escape", id="undefined-escape"),
    pytest.param({}, b"SEND\ndestination:/queue/x\nh:\xff\xfe\n\nx\x00", "UTF-8", id="invalid-utf8"),
    pytest.param(LIMITS, b"SEND\ndestination:/queue/x\n\n" + b"B" * 5000 + b"\x00", "max_frame_size", id="oversized-frame"),
    pytest.param(LIMITS, b"SEND\ndestination:/queue/x\ncontent-length:100000\n\n", "max_frame_size", id="oversized-content-length"),
    pytest.param(LIMITS, b"SEND\ndestination:/queue/x\n" + b"".join(b"h%d:%s\n" % (i, b"v" * 100) for i in range(12)) + b"\nx\x00",
                 "max_header_block", id="oversized-header-block"),
    pytest.param(LIMITS, b"SEND\ndestination:/queue/x\nlong:" + b"v" * 600 + b"\n\nx\x00", "max_header_length", id="oversized-header-line"),
    pytest.param(LIMITS, b"SEND\ndestination:/queue/x\n" + b"".join(b"h%d:v\n" % i for i in range(30)) + b"\nx\x00",
                 "max_headers", id="too-many-headers"),
    pytest.param({}, b"SEND\n\nno destination\x00", "destination", id="missing-destination"),
    pytest.param({}, b"SEND\ndestination:/elsewhere/x\n\nx\x00", "destination", id="bad-destination"),
    pytest.param({}, b"SUBSCRIBE\nid:1\n\n\x00", "destination", id="subscribe-missing-destination"),
    pytest.param({}, b"SUBSCRIBE\ndestination:/queue/x\n\n\x00", "id", id="subscribe-missing-id"),
    pytest.param({}, b"SUBSCRIBE\nid:1\ndestination:/queue/x\nselector:color = \n\n\x00", "selector", id="bad-selector"),
    pytest.param({}, b"SUBSCRIBE\nid:1\ndestination:/queue/x\nselector:a >< 3\n\n\x00", "selector", id="bad-selector-2"),
    pytest.param({}, b"SUBSCRIBE\nid:1\ndestination:/queue/x\nack:sometimes\n\n\x00", "ack mode", id="bad-ack-mode"),
    pytest.param({}, b"SEND\ndestination:/queue/x\npriority:urgent\n\nx\x00", "priority", id="bad-priority"),
    pytest.param({}, b"SEND\ndestination:/queue/x\nexpires:tomorrow\n\nx\x00", "expires", id="bad-expires"),
    pytest.param({}, b"MESSAGE\ndestination:/queue/x\n\nx\x00", "server frame", id="server-frame"),
    pytest.param({}, b"UNSUBSCRIBE\nid:nope\n\n\x00", "nope", id="unsubscribe-unknown"),
    pytest.param({}, b"ACK\n\n\x00", "id", id="ack-without-id"),
]


@pytest.mark.parametrize("config, data, fragment", BAD_INPUT)
def test_bad_input_gets_error_and_close(broker_factory, raw_factory, stomp_client, config, data, fragment):
    """"ERROR": a client error gets an ERROR frame whose `message` says what went wrong, then the
    connection is closed ("Size Limits" for the limit cases). Other clients are unaffected."""
    broker = broker_factory(**config)
    bystander = stomp_client(broker.address)
    own = uniq("bystander")
    bystander.subscribe(own, "b")
    bad = raw_factory(broker.address)
    _send_connected(bad, data)
    error = bad.expect_error_and_close()
    assert fragment.lower() in error.get("message").lower(), error
    assert error.get("content-type") == "text/plain"
    assert broker.call(lambda: len(broker.server.broker.connections)) == 1  # only the bystander
    bystander.send(own, "still works")
    assert bystander.listener.get().body == "still works"
    assert_broker_works(broker.address)


def test_oversized_frame_in_pieces(broker_factory, raw_factory):
    """"Size Limits": a frame that grows past max_frame_size across many reads is refused as
    soon as it passes the limit, not buffered forever."""
    broker = broker_factory(**LIMITS)
    bad = raw_factory(broker.address)
    bad.connect("1.2")
    bad.send_bytes(b"SEND\ndestination:/queue/x\n\n")
    sent = 0
    closed = False
    try:
        while sent < 20_000:
            bad.send_bytes(b"x" * 500)
            sent += 500
            time.sleep(0.005)
    except OSError:
        closed = True
    error = bad.expect_error_and_close()
    assert "max_frame_size" in error.get("message")
    assert closed or sent <= 20_000
    assert_broker_works(broker.address)


def test_frames_before_garbage_are_still_processed(broker, raw_factory):
    """A SEND that arrives in the same read as the garbage after it is still delivered; the
    ERROR comes after it."""
    dest = uniq("before-garbage")
    consumer = raw_factory(broker.address)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", [("id", "1"), ("destination", dest), ("receipt", "s")])
    consumer.expect("RECEIPT")
    bad = raw_factory(broker.address)
    bad.connect("1.2")
    bad.send_bytes(
        b"SEND\ndestination:" + dest.encode() + b"\nreceipt:r1\n\nfirst\x00" + b"GARBAGE\n\n\x00"
    )
    frames = bad.wait_closed()
    assert [f.command for f in frames] == ["RECEIPT", "ERROR"]
    assert consumer.expect("MESSAGE").body == b"first"


def test_error_after_partial_session_releases_resources(broker, raw_factory, stomp_client):
    """A client killed by an ERROR gives back its unacked messages to the queue."""
    dest = uniq("release")
    producer = stomp_client(broker.address)
    producer.send(dest, "held")
    bad = raw_factory(broker.address)
    bad.connect("1.2")
    bad.send_frame("SUBSCRIBE", [("id", "1"), ("destination", dest), ("ack", "client")])
    assert bad.expect("MESSAGE").body == b"held"
    bad.send_bytes(b"NONSENSE\n\n\x00")
    bad.expect_error_and_close()
    consumer = stomp_client(broker.address)
    consumer.subscribe(dest, "s")
    frame = consumer.listener.get()
    assert frame.body == "held" and frame.headers["redelivered"] == "true"


# =============================================================================== wildcard ACL


def test_authorization_catch_all_entry(broker_factory, stomp_client):
    """An authorization entry `queue: '>'` (ActiveMQ's "everything") covers every queue."""
    broker = broker_factory(security={
        "users": [{"name": "bob", "password": "builder", "groups": ["users"]}],
        "authorization": [{"queue": ">", "read": ["users"], "write": ["users"]}],
    })
    bob = stomp_client(broker.address, login="bob", passcode="builder")
    bob.subscribe("/queue/anything", "s")
    bob.send("/queue/anything", "ok")
    assert bob.listener.get().body == "ok"


def test_connection_without_connect_is_closed_after_timeout(broker_factory, raw_factory):
    """stomp_options.connect_timeout_ms: a socket that never sends CONNECT gets an ERROR and is
    closed, so idle sockets cannot hold connections open forever."""
    broker = broker_factory(stomp_options={"connect_timeout_ms": 300})
    idle = raw_factory(broker.address)
    error = idle.expect_error_and_close(timeout=5)
    assert "no CONNECT frame within 300 ms" in error.get("message")


def test_stomp_maximum_pending_message_limit_header(broker, raw_factory):
    """activemq.maximumPendingMessageLimit on SUBSCRIBE sets the subscription's slow-consumer
    limit (ActiveMQ "Slow Consumer Handling", prefetch policy section)."""
    topic = f"/topic/limit.{time.monotonic_ns()}"
    sub = raw_factory(broker.address)
    sub.connect("1.2")
    sub.send_frame("SUBSCRIBE", [("id", "s"), ("destination", topic), ("ack", "client"),
                                 ("activemq.prefetchSize", "1"), ("activemq.maximumPendingMessageLimit", "2"),
                                 ("receipt", "r")])
    sub.expect("RECEIPT")
    pub = raw_factory(broker.address)
    pub.connect("1.2")
    for i in range(6):
        pub.send_frame("SEND", [("destination", topic)], f"m{i}".encode())
    pub.send_frame("BEGIN", [("transaction", "sync"), ("receipt", "done")])
    pub.expect("RECEIPT")
    (stats,) = [s for s in broker.stats()["subscriptions"] if s.get("consumer") == "s"]
    assert (stats["pending_limit"], stats["in_flight"], stats["matched"], stats["discarded"]) == (2, 1, 2, 3)
