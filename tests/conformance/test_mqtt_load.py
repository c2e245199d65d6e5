"""Tests for the raw-socket MQTT load generator (conformance.bench.mqtt_load)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from conformance.requirements import skip_or_fail
from conformance.bench.mqtt_load import (
    MqttBenchResult,
    _SubParser,
    encode_connect,
    encode_puback,
    encode_publish,
    encode_remaining_length,
    encode_subscribe,
    run_mqtt_load,
)
from conformance.targets.mosquitto.process import MosquittoProcess, mosquitto_available
from machinery.waiting import poll


def _varint(buf, pos: int, end: int):
    value = 0
    for i in range(4):
        if pos + i >= end:
            return None
        b = buf[pos + i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, i + 1
    raise ValueError("malformed remaining length")


class FakeMqttRelay:
    """A tiny threaded MQTT "broker" for one topic subscriber per topic (3.1.1 and 5.0).

    CONNECT -> CONNACK (with ``receive_maximum`` as a property on MQTT 5, or return code
    5 / reason 0x87 when ``refuse_connect``); SUBSCRIBE -> SUBACK (granted QoS as asked);
    PUBLISH -> forwarded verbatim to the subscriber of that exact topic (both sides speak the
    same protocol and QoS in these tests, so a packet is valid on both connections, packet
    identifiers included) and, at QoS 1, a PUBACK to the publisher.  PUBACKs from
    subscribers are counted (``sub_acks``).  Runs of same-length PUBLISHes are handled in bulk
    (strided header check, verbatim forward) so the relay is cheap enough to show the
    generator's own ceiling.  ``drop_after`` stops forwarding after that many messages.
    ``max_unacked_seen`` is the most PUBLISHes the publisher had outstanding (received by the
    relay, not yet PUBACKed) at any time: the publisher's window.
    """

    def __init__(self, *, drop_after: int | None = None, receive_maximum: int | None = None,
                 refuse_connect: bool = False) -> None:
        self.drop_after = drop_after
        self.receive_maximum = receive_maximum
        self.refuse_connect = refuse_connect
        self.forwarded = 0
        self.pub_acks_sent = 0
        self.sub_acks = 0
        self.max_unacked_seen = 0
        self.connects: list[dict] = []
        self.subscriptions: list[tuple[str, int]] = []
        self._subs: dict[bytes, tuple[socket.socket, threading.Lock, int]] = {}
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closing = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.host, self.port = self._listener.getsockname()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    def __enter__(self) -> "FakeMqttRelay":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closing = True
        try:
            self._listener.close()
        except OSError:
            pass
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    # ------------------------------------------------------------------ server side
    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        st = {"wlock": threading.Lock(), "protocol": 4, "plen": 0, "phdr": b"", "pid_off": 0}
        buf = bytearray()
        try:
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    return
                buf += data
                pos, replies, keep_going = self._handle(conn, st, buf)
                del buf[:pos]
                if replies:
                    with st["wlock"]:
                        conn.sendall(replies)
                if not keep_going:
                    return
        except OSError:
            return
        finally:
            with self._lock:
                for topic, (c, _, _) in list(self._subs.items()):
                    if c is conn:
                        del self._subs[topic]
            conn.close()

    def _forward(self, topic: bytes, data: bytes, n: int, plen: int) -> None:
        sub = self._subs.get(topic)
        if sub is None:
            return
        if self.drop_after is not None:
            room = self.drop_after - self.forwarded
            if room <= 0:
                return
            if n > room:
                data, n = data[: room * plen], room
        sock, lock, _ = sub
        with lock:
            sock.sendall(data)
        self.forwarded += n

    def _handle(self, conn: socket.socket, st: dict, buf: bytearray) -> tuple[int, bytes, bool]:
        pos, end = 0, len(buf)
        replies = bytearray()
        unacked = 0
        while pos < end:
            # bulk path: a run of PUBLISHes like the last one (same header, topic length)
            L = st["plen"]
            k = (end - pos) // L if L else 0
            if k:
                stop = pos + k * L
                if all(buf[pos + j:stop:L].count(b) == k for j, b in enumerate(st["phdr"])):
                    topic = st["topic"]
                    self._forward(topic, bytes(buf[pos:stop]), k, L)
                    if st["qos"]:
                        unacked += k
                        off = pos + st["pid_off"]
                        acks = bytearray(4 * k)
                        acks[0::4] = b"\x40" * k
                        acks[1::4] = b"\x02" * k
                        acks[2::4] = buf[off:stop:L]
                        acks[3::4] = buf[off + 1:stop:L]
                        replies += acks
                        self.pub_acks_sent += k
                    pos = stop
                    continue
            # PUBACKs from a subscriber, in bulk
            k = (end - pos) // 4
            if k and buf[pos] == 0x40 and buf[pos:pos + 4 * k:4].count(0x40) == k \
                    and buf[pos + 1:pos + 4 * k:4].count(2) == k:
                self.sub_acks += k
                pos += 4 * k
                continue
            # one packet
            if end - pos < 2:
                break
            r = _varint(buf, pos + 1, end)
            if r is None:
                break
            length, used = r
            total = 1 + used + length
            if end - pos < total:
                break
            first = buf[pos]
            body = bytes(buf[pos + 1 + used:pos + total])
            ptype = first >> 4
            if ptype == 1:  # CONNECT
                nlen = struct.unpack(">H", body[:2])[0]
                level = body[2 + nlen]
                st["protocol"] = level
                i = 2 + nlen + 4 + (1 + body[2 + nlen + 4] if level == 5 else 0)
                cid_len = struct.unpack(">H", body[i:i + 2])[0]
                self.connects.append({"protocol": level, "client_id": body[i + 2:i + 2 + cid_len].decode(),
                                      "flags": body[2 + nlen + 1]})
                if level == 5:
                    props = b"" if self.receive_maximum is None else b"\x21" + struct.pack(">H", self.receive_maximum)
                    rc = 0x87 if self.refuse_connect else 0
                    replies += bytes([0x20, 3 + len(props), 0, rc, len(props)]) + props
                else:
                    replies += bytes([0x20, 2, 0, 5 if self.refuse_connect else 0])
                if self.refuse_connect:
                    return pos + total, bytes(replies), False
            elif ptype == 8:  # SUBSCRIBE
                pid = body[:2]
                i = 2
                if st["protocol"] == 5:
                    i += 1 + body[2]
                tlen = struct.unpack(">H", body[i:i + 2])[0]
                topic = body[i + 2:i + 2 + tlen]
                qos = body[i + 2 + tlen] & 3
                with self._lock:
                    self._subs[topic] = (conn, st["wlock"], qos)
                self.subscriptions.append((topic.decode(), qos))
                replies += (b"\x90\x04" + pid + b"\x00" + bytes([qos]) if st["protocol"] == 5
                            else b"\x90\x03" + pid + bytes([qos]))
            elif ptype == 3:  # PUBLISH
                tlen = struct.unpack(">H", body[:2])[0]
                topic = body[2:2 + tlen]
                qos = (first >> 1) & 3
                h = 1 + used
                self._forward(topic, bytes(buf[pos:pos + total]), 1, total)
                if qos:
                    unacked += 1
                    replies += b"\x40\x02" + body[2 + tlen:4 + tlen]
                    self.pub_acks_sent += 1
                st.update(plen=total, phdr=bytes(buf[pos:pos + h + 2]), pid_off=h + 2 + tlen, topic=topic, qos=qos)
            elif ptype == 4:  # PUBACK from a subscriber
                self.sub_acks += 1
            elif ptype == 12:  # PINGREQ
                replies += b"\xd0\x00"
            elif ptype == 14:  # DISCONNECT
                return pos + total, bytes(replies), False
            pos += total
        self.max_unacked_seen = max(self.max_unacked_seen, unacked)
        return pos, bytes(replies), True


# ---------------------------------------------------------------------- packet helpers


def test_encoders():
    assert encode_remaining_length(0) == b"\x00"
    assert encode_remaining_length(127) == b"\x7f"
    assert encode_remaining_length(128) == b"\x80\x01"
    assert encode_remaining_length(16_383) == b"\xff\x7f"
    assert encode_remaining_length(268_435_455) == b"\xff\xff\xff\x7f"
    with pytest.raises(ValueError):
        encode_remaining_length(268_435_456)
    assert encode_connect("c", protocol=4) == b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x00\x00\x01c"
    assert encode_connect("c", protocol=5) == b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x00\x00\x00\x01c"
    assert encode_subscribe(1, "a/b", 1) == b"\x82\x08\x00\x01\x00\x03a/b\x01"
    assert encode_subscribe(1, "a/b", 0, protocol=5) == b"\x82\x09\x00\x01\x00\x00\x03a/b\x00"
    assert encode_publish("t", b"xy", qos=0) == b"\x30\x05\x00\x01txy"
    assert encode_publish("t", b"xy", qos=1, packet_id=258) == b"\x32\x07\x00\x01t\x01\x02xy"
    assert encode_publish("t", b"xy", qos=1, packet_id=1, protocol=5) == b"\x32\x08\x00\x01t\x00\x01\x00xy"
    assert encode_puback(0x1234) == b"\x40\x02\x12\x34"
    with pytest.raises(ValueError):
        encode_publish("t", b"", qos=1)  # no packet id
    big = encode_publish("bench/t", b"x" * 256, qos=1, packet_id=7)
    assert big[:3] == b"\x32\x8b\x02" and len(big) == 3 + 267  # 2+7 topic, 2 id, 256 payload


def _stream(packets: list[bytes]) -> bytearray:
    return bytearray(b"".join(packets))


@pytest.mark.parametrize("protocol", [4, 5])
def test_sub_parser_counts_and_acks_across_reads(protocol):
    pkts = [encode_publish("bench/t", b"x" * 300, qos=1, packet_id=i, protocol=protocol) for i in range(1, 2001)]
    data = bytes(_stream(pkts))
    parser = _SubParser(qos=1)
    buf = bytearray(len(data))
    start = end = 0
    total = 0
    acks = bytearray()
    # odd-sized reads so packets (and headers) are split across reads
    for i in range(0, len(data), 777):
        chunk = data[i:i + 777]
        buf[end:end + len(chunk)] = chunk
        end += len(chunk)
        start, n, a = parser.parse(buf, start, end)
        total += n
        acks += a
    assert total == 2000 and start == end
    assert bytes(acks) == b"".join(encode_puback(i) for i in range(1, 2001))


def test_sub_parser_qos0_mixed_packets_and_disconnect():
    p = encode_publish("a", b"12345", qos=0)
    other = encode_publish("longer/topic", b"z" * 10, qos=0)
    stream = _stream([p] * 5 + [b"\xd0\x00"] + [other] * 3 + [p] * 2)  # PINGRESP in between
    parser = _SubParser(qos=0)
    start, n, acks = parser.parse(stream, 0, len(stream))
    assert (start, n, acks) == (len(stream), 10, None)
    stream = _stream([p, b"\xe0\x02\x8b\x00"])  # MQTT 5 DISCONNECT, server shutting down
    with pytest.raises(Exception, match="DISCONNECT reason 0x8b"):
        _SubParser(qos=0).parse(stream, 0, len(stream))


def test_sub_parser_dup_redelivery_is_acked():
    a = encode_publish("t", b"x" * 20, qos=1, packet_id=5)
    dup = bytes([a[0] | 0x08]) + a[1:]
    stream = _stream([a, dup, a])
    start, n, acks = _SubParser(qos=1).parse(stream, 0, len(stream))
    assert n == 3 and bytes(acks) == encode_puback(5) * 3


# ---------------------------------------------------------------------- fake-relay runs


@pytest.mark.parametrize("qos,protocol", [(0, 4), (1, 4), (0, 5), (1, 5)])
def test_small_run_against_fake_relay(qos, protocol):
    with FakeMqttRelay() as relay:
        res = run_mqtt_load(relay.host, relay.port, target="fake", messages=3_000, warmup=500, qos=qos,
                            protocol=protocol, timeout=30)
        assert isinstance(res, MqttBenchResult)
        assert res.error is None, res.error
        assert (res.target, res.qos, res.protocol, res.messages) == ("fake", qos, protocol, 3_000)
        assert res.consumer_received == 3_000 and res.producer_sent == 3_000
        assert res.seconds > 0 and res.msgs_per_sec > 0
        assert relay.forwarded == 3_500
        assert [c["protocol"] for c in relay.connects] == [protocol, protocol]
        assert all(c["flags"] & 0x02 for c in relay.connects)  # clean session
        assert relay.subscriptions == [("bench/t", qos)]
        if qos:
            assert res.producer_acked == 3_000
            assert relay.pub_acks_sent == 3_500
            assert poll(lambda: relay.sub_acks, lambda n: n == 3_500, interval=0.01) == 3_500, relay.sub_acks
        else:
            assert res.producer_acked == 0 and relay.sub_acks == 0
        assert res.producer_cpu_seconds >= 0 and res.consumer_cpu_seconds >= 0


def test_qos1_window_respects_inflight_and_receive_maximum():
    with FakeMqttRelay() as relay:
        res = run_mqtt_load(relay.host, relay.port, target="w", messages=2_000, warmup=0, qos=1, inflight=7,
                            timeout=30)
        assert res.error is None, res.error
        assert relay.max_unacked_seen in range(1, 8)
    with FakeMqttRelay(receive_maximum=5) as relay:
        res = run_mqtt_load(relay.host, relay.port, target="w5", messages=2_000, warmup=0, qos=1, protocol=5,
                            timeout=30)
        assert res.error is None, res.error
        assert relay.max_unacked_seen in range(1, 6)


def test_payload_and_topic_options():
    with FakeMqttRelay() as relay:
        res = run_mqtt_load(relay.host, relay.port, target="big", messages=300, warmup=10, qos=1,
                            payload_size=20_000, topic="a/very/long/topic/name", timeout=30)
        assert res.error is None, res.error
        assert relay.subscriptions == [("a/very/long/topic/name", 1)]
    with pytest.raises(ValueError):
        run_mqtt_load("127.0.0.1", 1, target="x", topic="bench/#")
    with pytest.raises(ValueError):
        run_mqtt_load("127.0.0.1", 1, target="x", qos=2)


def test_stall_is_reported_with_count():
    with FakeMqttRelay(drop_after=1_200) as relay:
        res = run_mqtt_load(relay.host, relay.port, target="lossy", messages=2_000, warmup=200, timeout=1.5)
    assert res.error is not None and "stalled" in res.error
    assert res.consumer_received == 1_000
    assert "1000 of 2000" in res.error
    assert res.msgs_per_sec == 0.0


@pytest.mark.parametrize("protocol", [4, 5])
def test_refused_connect_is_an_error(protocol):
    with FakeMqttRelay(refuse_connect=True) as relay:
        res = run_mqtt_load(relay.host, relay.port, target="no", messages=10, warmup=0, protocol=protocol,
                            timeout=5)
    assert res.error is not None and "CONNECT refused" in res.error
    assert ("0x05" in res.error) if protocol == 4 else ("0x87" in res.error)


def test_connection_refused_is_an_error_not_an_exception():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res = run_mqtt_load("127.0.0.1", port, target="nobody", messages=10, warmup=0, timeout=5)
    assert res.error is not None
    assert "Connection refused" in res.error or "ConnectionRefused" in res.error


# ---------------------------------------------------------------------- real broker


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory):
    ok, reason = mosquitto_available()
    if not ok:
        skip_or_fail("mosquitto", reason)
    # mosquitto's default max_queued_messages (1000 per client, beyond max_inflight_messages 20 for
    # MQTT 3.1.1 subscribers) drops QoS 1 messages ("Outgoing messages are being dropped") as soon
    # as a windowed publisher gets ahead of the subscriber; a benchmark must not lose messages.
    with MosquittoProcess(tmp_path_factory.mktemp("mosq"), max_queued_messages=0) as m:
        yield m


@pytest.mark.real_broker
@pytest.mark.slow
@pytest.mark.parametrize("qos,protocol", [(0, 4), (1, 4), (1, 5)])
def test_against_mosquitto(mosquitto, qos, protocol):
    res = run_mqtt_load("127.0.0.1", mosquitto.mqtt_port, target="mosquitto", messages=20_000, warmup=2_000,
                        qos=qos, protocol=protocol, timeout=60, broker_pid=mosquitto.pid)
    assert res.error is None, res.error + "\n" + mosquitto.log_tail(20)
    assert res.consumer_received == 20_000 and res.producer_sent == 20_000
    assert res.producer_acked == (20_000 if qos else 0)
    assert res.msgs_per_sec > 0
    assert res.broker_cpu_seconds is not None and res.broker_cpu_seconds >= 0
    assert mosquitto.rss_peak_bytes() > 0
