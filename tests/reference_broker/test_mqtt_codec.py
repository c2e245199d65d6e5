"""Tests of the sans-IO MQTT 3.1.1 / 5.0 packet codec, on bytes only (no sockets).

Known packets are written out byte by byte here, with a small independent encoder for property
blocks, so the codec is checked against the standards' layouts rather than against itself.
Section numbers are those of the OASIS MQTT 3.1.1 and 5.0 standards.
"""

from __future__ import annotations

import ast
import inspect

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.protocols.mqtt import codec
from reference_broker.protocols.mqtt.codec import (
    MQTT_5,
    MQTT_311,
    Auth,
    Connack,
    ConnackReturn311,
    Connect,
    Disconnect,
    MqttParser,
    MqttProtocolError,
    Pingreq,
    Pingresp,
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
    encode,
    encode_raw,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)

MALFORMED = ReasonCode.MALFORMED_PACKET
PROTOCOL = ReasonCode.PROTOCOL_ERROR

FAST = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------
# Helpers: an independent little encoder for hand-built packets
# ------------------------------------------------------------------------------------------


def vbi(n: int) -> bytes:
    out = bytearray()
    while True:
        digit, n = n % 128, n // 128
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def s(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def b(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def u16(n: int) -> bytes:
    return n.to_bytes(2, "big")


def pkt(first: int, body: bytes) -> bytes:
    return bytes([first]) + vbi(len(body)) + body


def props(*encoded: bytes) -> bytes:
    block = b"".join(encoded)
    return vbi(len(block)) + block


NO_PROPS = b"\x00"


def parse(data: bytes, level: int | None) -> list:
    return MqttParser(protocol_level=level).feed(data)


def parse_one(data: bytes, level: int | None):
    packets = parse(data, level)
    assert len(packets) == 1, packets
    return packets[0]


def error_of(data: bytes, level: int | None, **kwargs) -> MqttProtocolError:
    with pytest.raises(MqttProtocolError) as info:
        MqttParser(protocol_level=level, **kwargs).feed(data)
    return info.value


def connect_311(client_id: str = "c") -> bytes:
    return pkt(0x10, s("MQTT") + bytes([4, 0x02]) + u16(60) + s(client_id))


def connect_5(client_id: str = "c") -> bytes:
    return pkt(0x10, s("MQTT") + bytes([5, 0x02]) + u16(60) + NO_PROPS + s(client_id))


# ------------------------------------------------------------------------------------------
# House rules
# ------------------------------------------------------------------------------------------


def test_codec_is_sans_io():
    tree = ast.parse(inspect.getsource(codec))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"socket", "asyncio", "selectors", "ssl", "threading"}, imported


def test_reason_codes_match_the_standard_table():
    # 5.0 §2.4, spot checks across the table, plus the aliases sharing 0x00.
    assert ReasonCode.SUCCESS == ReasonCode.NORMAL_DISCONNECTION == ReasonCode.GRANTED_QOS_0 == 0
    expected = {
        "GRANTED_QOS_1": 0x01, "GRANTED_QOS_2": 0x02, "DISCONNECT_WITH_WILL": 0x04,
        "NO_MATCHING_SUBSCRIBERS": 0x10, "NO_SUBSCRIPTION_EXISTED": 0x11,
        "CONTINUE_AUTHENTICATION": 0x18, "REAUTHENTICATE": 0x19, "UNSPECIFIED_ERROR": 0x80,
        "MALFORMED_PACKET": 0x81, "PROTOCOL_ERROR": 0x82, "UNSUPPORTED_PROTOCOL_VERSION": 0x84,
        "NOT_AUTHORIZED": 0x87, "SERVER_SHUTTING_DOWN": 0x8B, "SESSION_TAKEN_OVER": 0x8E,
        "TOPIC_FILTER_INVALID": 0x8F, "TOPIC_NAME_INVALID": 0x90, "PACKET_TOO_LARGE": 0x95,
        "USE_ANOTHER_SERVER": 0x9C, "SERVER_MOVED": 0x9D, "MAXIMUM_CONNECT_TIME": 0xA0,
        "WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED": 0xA2,
    }
    for name, value in expected.items():
        assert ReasonCode[name] == value, name
    assert {int(code) for code in ReasonCode} == {0, 1, 2, 4, 0x10, 0x11, 0x18, 0x19} | set(
        range(0x80, 0xA3))
    assert [int(c) for c in ConnackReturn311] == [0, 1, 2, 3, 4, 5]


def test_error_carries_message_reason_and_level():
    exc = error_of(connect_5("a\x00"), None)  # a 5.0 CONNECT whose client id holds U+0000
    assert isinstance(exc, MqttProtocolError)
    assert exc.reason is ReasonCode.MALFORMED_PACKET
    assert exc.protocol_level == MQTT_5
    assert "CONNECT client identifier" in exc.message and "U+0000" in exc.message
    assert "MALFORMED_PACKET" in str(exc)


# ------------------------------------------------------------------------------------------
# Known packets, byte for byte, both directions
# ------------------------------------------------------------------------------------------

KNOWN = [
    # CONNECT 3.1.1 (3.1.2): "MQTT", level 4, clean session, keep alive 60, client id "abc".
    pytest.param(
        MQTT_311,
        b"\x10\x0f\x00\x04MQTT\x04\x02\x00\x3c\x00\x03abc",
        Connect("MQTT", 4, True, 60, "abc"),
        id="connect-311",
    ),
    # CONNECT 3.1.1 with will (QoS 1, retained), user name and password; clean session off.
    pytest.param(
        MQTT_311,
        pkt(0x10, s("MQTT") + b"\x04\xec\x00\x0a" + s("dev-1") + s("dev/1/status") + b(b"gone")
            + s("alice") + b(b"secret")),
        Connect("MQTT", 4, False, 10, "dev-1", Will("dev/1/status", b"gone", 1, True),
                "alice", b"secret"),
        id="connect-311-will-credentials",
    ),
    # CONNECT 5.0 (3.1.2.11): session expiry 3600 and receive maximum 20, then a will with a
    # will delay of 5 s, user name, password; the password flag alone is fine in 5.0.
    pytest.param(
        MQTT_5,
        pkt(0x10, s("MQTT") + b"\x05\xc6\x00\x3c"
            + props(b"\x11" + (3600).to_bytes(4, "big"), b"\x21" + u16(20))
            + s("cid") + props(b"\x18" + (5).to_bytes(4, "big")) + s("w") + b(b"x")
            + s("user") + b(b"pw")),
        Connect("MQTT", 5, True, 60, "cid",
                Will("w", b"x", 0, False, Properties(will_delay_interval=5)), "user", b"pw",
                Properties(session_expiry_interval=3600, receive_maximum=20)),
        id="connect-5",
    ),
    pytest.param(MQTT_311, b"\x20\x02\x01\x00", Connack(True, 0), id="connack-311"),
    pytest.param(MQTT_311, b"\x20\x02\x00\x05", Connack(False, 5), id="connack-311-refused"),
    pytest.param(MQTT_5, b"\x20\x03\x00\x00\x00", Connack(False, 0), id="connack-5"),
    pytest.param(
        MQTT_5,
        pkt(0x20, b"\x00\x00" + props(b"\x12" + s("auto"), b"\x24\x01")),
        Connack(False, 0, Properties(assigned_client_identifier="auto", maximum_qos=1)),
        id="connack-5-properties",
    ),
    # PUBLISH (3.3): QoS 1, topic "a/b", packet id 7, payload "hi!".
    pytest.param(
        MQTT_311, b"\x32\x0a\x00\x03a/b\x00\x07hi!", Publish("a/b", b"hi!", 1, packet_id=7),
        id="publish-311-qos1",
    ),
    pytest.param(
        MQTT_311, b"\x3d\x0a\x00\x03a/b\x01\x00hi!",
        Publish("a/b", b"hi!", 2, retain=True, dup=True, packet_id=256), id="publish-311-qos2-dup",
    ),
    pytest.param(MQTT_311, b"\x30\x03\x00\x01t", Publish("t"), id="publish-311-empty-payload"),
    pytest.param(
        MQTT_5, b"\x30\x08\x00\x03a/b\x00hi", Publish("a/b", b"hi"), id="publish-5-qos0",
    ),
    # 5.0 §3.3.2.3.4: an empty topic name with a topic alias.
    pytest.param(
        MQTT_5, b"\x30\x07\x00\x00\x03\x23\x00\x02x",
        Publish("", b"x", properties=Properties(topic_alias=2)), id="publish-5-alias",
    ),
    pytest.param(
        MQTT_5,
        pkt(0x33, s("r") + u16(9) + props(b"\x01\x01", b"\x08" + s("re/ply"), b"\x09" + b(b"id"),
                                          b"\x0b\x05", b"\x0b\x80\x01", b"\x26" + s("k") + s("v"))
            + b"{}"),
        Publish("r", b"{}", 1, True, False, 9, Properties(
            payload_format_indicator=1, response_topic="re/ply", correlation_data=b"id",
            subscription_identifiers=[5, 128], user_properties=[("k", "v")])),
        id="publish-5-properties",
    ),
    pytest.param(MQTT_311, b"\x40\x02\x00\x07", Puback(7), id="puback-311"),
    pytest.param(MQTT_311, b"\x50\x02\x00\x07", Pubrec(7), id="pubrec-311"),
    pytest.param(MQTT_311, b"\x62\x02\x00\x07", Pubrel(7), id="pubrel-311"),
    pytest.param(MQTT_311, b"\x70\x02\x00\x07", Pubcomp(7), id="pubcomp-311"),
    # 5.0 §3.4.2.1: remaining length 2 means success with no properties.
    pytest.param(MQTT_5, b"\x40\x02\x00\x07", Puback(7), id="puback-5-short"),
    pytest.param(MQTT_5, b"\x40\x03\x00\x07\x10", Puback(7, 0x10), id="puback-5-reason"),
    pytest.param(
        MQTT_5, b"\x50\x09\x00\x07\x80\x05\x1f" + s("no"), Pubrec(7, 0x80, Properties(
            reason_string="no")), id="pubrec-5-properties",
    ),
    pytest.param(MQTT_5, b"\x62\x03\x00\x07\x92", Pubrel(7, 0x92), id="pubrel-5-reason"),
    pytest.param(MQTT_5, b"\x70\x02\x00\x07", Pubcomp(7), id="pubcomp-5-short"),
    # SUBSCRIBE (3.8): flags 0b0010, packet id 1, "a/b" at QoS 1 and "c/#" at QoS 2.
    pytest.param(
        MQTT_311, b"\x82\x0e\x00\x01\x00\x03a/b\x01\x00\x03c/#\x02",
        Subscribe(1, [Subscription("a/b", 1), Subscription("c/#", 2)]), id="subscribe-311",
    ),
    # 5.0 §3.8.3.1: options 0b00101101 = QoS 1, no local, retain as published, handling 2.
    pytest.param(
        MQTT_5, b"\x82\x09\x00\x01\x02\x0b\x03\x00\x01x\x2d",
        Subscribe(1, [Subscription("x", 1, True, True, 2)],
                  Properties(subscription_identifiers=[3])),
        id="subscribe-5-options",
    ),
    pytest.param(MQTT_311, b"\x90\x05\x00\x01\x01\x02\x80", Suback(1, [1, 2, 0x80]),
                 id="suback-311"),
    pytest.param(MQTT_5, b"\x90\x05\x00\x01\x00\x00\x9e", Suback(1, [0, 0x9E]), id="suback-5"),
    pytest.param(MQTT_311, b"\xa2\x07\x00\x02\x00\x03a/b", Unsubscribe(2, ["a/b"]),
                 id="unsubscribe-311"),
    pytest.param(MQTT_5, b"\xa2\x08\x00\x02\x00\x00\x03a/b", Unsubscribe(2, ["a/b"]),
                 id="unsubscribe-5"),
    pytest.param(MQTT_311, b"\xb0\x02\x00\x02", Unsuback(2), id="unsuback-311"),
    pytest.param(MQTT_5, b"\xb0\x05\x00\x02\x00\x00\x11", Unsuback(2, [0, 0x11]), id="unsuback-5"),
    pytest.param(MQTT_311, b"\xc0\x00", Pingreq(), id="pingreq"),
    pytest.param(MQTT_5, b"\xd0\x00", Pingresp(), id="pingresp"),
    pytest.param(MQTT_311, b"\xe0\x00", Disconnect(), id="disconnect-311"),
    # 5.0 §3.14.2.1: no reason code means normal disconnection; one byte is the code alone.
    pytest.param(MQTT_5, b"\xe0\x00", Disconnect(), id="disconnect-5-short"),
    pytest.param(MQTT_5, b"\xe0\x01\x04", Disconnect(4), id="disconnect-5-with-will"),
    pytest.param(
        MQTT_5, b"\xe0\x07\x8b\x05\x11\x00\x00\x00\x00", Disconnect(0x8B, Properties(
            session_expiry_interval=0)), id="disconnect-5-properties",
    ),
    pytest.param(MQTT_5, b"\xf0\x00", Auth(), id="auth-5-short"),
    pytest.param(
        MQTT_5, b"\xf0\x0a\x18\x08\x15" + s("SCRAM"), Auth(0x18, Properties(
            authentication_method="SCRAM")), id="auth-5",
    ),
]


@pytest.mark.parametrize("level, data, packet", KNOWN)
def test_known_packet_parses(level, data, packet):
    parser_level = None if isinstance(packet, Connect) else level
    assert parse_one(data, parser_level) == packet


@pytest.mark.parametrize("level, data, packet", KNOWN)
def test_known_packet_encodes(level, data, packet):
    assert encode(packet, level) == data


def test_connect_switches_the_parser_to_its_level():
    parser = MqttParser()
    assert parser.protocol_level is None
    # A 5.0 PUBACK with a reason code straight after the CONNECT, in the same feed.
    packets = parser.feed(connect_5() + b"\x40\x03\x00\x07\x10")
    assert parser.protocol_level == MQTT_5
    assert packets[1] == Puback(7, 0x10)
    parser = MqttParser()
    with pytest.raises(MqttProtocolError) as info:
        parser.feed(connect_311() + b"\x40\x03\x00\x07\x10")  # 3.1.1 acks are exactly 2 bytes
    assert parser.protocol_level == MQTT_311
    assert info.value.reason is MALFORMED
    assert info.value.packets == [Connect("MQTT", 4, True, 60, "c")]


def test_explicit_level_is_kept_when_a_connect_arrives():
    # A second CONNECT is the session's protocol error to report; the codec parses it by its own
    # level byte and leaves the stream's level alone.
    parser = MqttParser(protocol_level=MQTT_311)
    assert parser.feed(connect_5()) == [Connect("MQTT", 5, True, 60, "c")]
    assert parser.protocol_level == MQTT_311


def test_protocol_level_setter_rejects_unknown_levels():
    with pytest.raises(ValueError, match="unsupported MQTT protocol level 3"):
        MqttParser(protocol_level=3)
    parser = MqttParser()
    parser.protocol_level = MQTT_5
    assert parser.protocol_level == MQTT_5


@pytest.mark.parametrize("size", [0, 1, 126, 127, 128, 129, 16382, 16383, 16384, 16385, 70000])
@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_remaining_length_boundaries(size, level):
    # 3.1.1 §2.2.3, 5.0 §1.5.5: one byte up to 127, two up to 16383, three up to 2097151.
    overhead = 3 + (1 if level == MQTT_5 else 0)  # topic "t" and, in 5.0, the property length
    packet = Publish("t", bytes(max(0, size - overhead)))
    data = encode(packet, level)
    body = max(size, overhead)
    assert data[1:1 + len(vbi(body))] == vbi(body)
    assert len(data) == 1 + len(vbi(body)) + body
    assert parse_one(data, level) == packet


def test_variable_byte_integer_encoding_table():
    # The examples of 5.0 §1.5.5 at each size boundary.
    table = {
        0: b"\x00", 127: b"\x7f", 128: b"\x80\x01", 16383: b"\xff\x7f", 16384: b"\x80\x80\x01",
        2097151: b"\xff\xff\x7f", 2097152: b"\x80\x80\x80\x01", 268435455: b"\xff\xff\xff\x7f",
    }
    for value, encoded in table.items():
        assert codec._vbi(value) == encoded
        assert codec._read_vbi(encoded, 0, len(encoded), "x") == (value, len(encoded))
    with pytest.raises(ValueError):
        codec._vbi(268435456)


# ------------------------------------------------------------------------------------------
# Fixed header
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
@pytest.mark.parametrize("ptype", range(1, 16))
def test_reserved_flag_bits_must_match(ptype, level):
    # 3.1.1 §2.2.2, 5.0 §2.1.3: fixed flags per type; PUBREL/SUBSCRIBE/UNSUBSCRIBE use 0b0010.
    if ptype == 3:
        return  # PUBLISH carries DUP/QoS/RETAIN instead, tested below
    if ptype == 15 and level == MQTT_311:
        return  # reserved type in 3.1.1, tested below
    required = 0b0010 if ptype in (6, 8, 10) else 0
    parser_level = None if ptype == 1 else level
    for flags in range(16):
        if flags == required:
            continue
        # The first byte alone is enough to refuse it: nothing is buffered for it.
        exc = error_of(bytes([(ptype << 4) | flags]), parser_level)
        assert exc.reason is MALFORMED, (ptype, flags)
        assert "flags" in exc.message


@pytest.mark.parametrize("first, level", [(0x00, MQTT_5), (0x00, MQTT_311), (0xF0, MQTT_311)])
def test_reserved_packet_types(first, level):
    assert error_of(bytes([first, 0]), level).reason is MALFORMED


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
@pytest.mark.parametrize("first", [0x36, 0x37, 0x3E, 0x3F])
def test_publish_qos_3_is_malformed(first, level):
    # 3.3.1.2: QoS bits 11 are malformed in both versions; refused on the first byte.
    exc = error_of(bytes([first]), level)
    assert exc.reason is MALFORMED and "QoS 3" in exc.message


def test_remaining_length_of_five_bytes_is_malformed():
    # 5.0 §1.5.5: at most four bytes; the fourth continuation bit already decides it.
    exc = error_of(b"\x30\xff\xff\xff\xff", MQTT_5)
    assert exc.reason is MALFORMED and "four bytes" in exc.message
    # The largest four-byte length is fine as a header (then too large for the default cap).
    exc = error_of(b"\x30\xff\xff\xff\x7f", MQTT_5)
    assert exc.reason is ReasonCode.PACKET_TOO_LARGE


def test_remaining_length_not_minimal_is_malformed():
    assert error_of(b"\xc0\x80\x00", MQTT_5).reason is MALFORMED
    assert error_of(b"\x30\x83\x80\x00", MQTT_311).reason is MALFORMED


def test_packet_too_large_is_refused_from_the_header_alone():
    parser = MqttParser(protocol_level=MQTT_5, max_packet_size=100)
    header = b"\x30" + vbi(10_000)
    with pytest.raises(MqttProtocolError) as info:
        parser.feed(header)  # no body sent at all: nothing is buffered waiting for it
    assert info.value.reason is ReasonCode.PACKET_TOO_LARGE
    assert "100" in info.value.message
    assert parser.buffered == 0


def test_packet_size_limit_counts_the_whole_packet():
    exactly = encode(Publish("t", bytes(100 - 6)), MQTT_5)  # 2 header + 3 topic + 1 props
    assert len(exactly) == 100
    assert parse(exactly, MQTT_5) and MqttParser(protocol_level=MQTT_5, max_packet_size=100).feed(
        exactly)
    one_more = encode(Publish("t", bytes(95)), MQTT_5)
    exc = error_of(one_more, MQTT_5, max_packet_size=100)
    assert exc.reason is ReasonCode.PACKET_TOO_LARGE


def test_first_packet_must_be_connect():
    exc = error_of(b"\xc0\x00", None)
    assert exc.reason is PROTOCOL and "CONNECT" in exc.message
    assert exc.protocol_level is None


# ------------------------------------------------------------------------------------------
# Parser state: partial data, errors, dead parser
# ------------------------------------------------------------------------------------------

STREAM_5 = (
    connect_5("split")
    + encode(Publish("a/b", b"x" * 300, 1, packet_id=1, properties=Properties(
        user_properties=[("k", "v")], message_expiry_interval=9)), MQTT_5)
    + encode(Subscribe(2, [Subscription("a/+", 2, no_local=True)]), MQTT_5)
    + b"\xc0\x00"
    + encode(Disconnect(4), MQTT_5)
)
STREAM_311 = (
    connect_311("split")
    + encode(Publish("a/b", b"y" * 200, 2, packet_id=3), MQTT_311)
    + encode(Pubrel(3), MQTT_311)
    + encode(Unsubscribe(4, ["a/#", "b"]), MQTT_311)
    + b"\xe0\x00"
)


@pytest.mark.parametrize("stream", [STREAM_5, STREAM_311], ids=["5.0", "3.1.1"])
def test_split_at_every_byte_boundary(stream):
    whole = MqttParser().feed(stream)
    assert len(whole) == 5
    for cut in range(len(stream) + 1):
        parser = MqttParser()
        assert parser.feed(stream[:cut]) + parser.feed(stream[cut:]) == whole, cut
        assert parser.buffered == 0


@pytest.mark.parametrize("stream", [STREAM_5, STREAM_311], ids=["5.0", "3.1.1"])
def test_one_byte_at_a_time(stream):
    parser = MqttParser()
    out = []
    for i in range(len(stream)):
        out += parser.feed(stream[i : i + 1])
    assert out == MqttParser().feed(stream)


@FAST
@given(cuts=st.lists(st.integers(0, len(STREAM_5)), max_size=8))
def test_any_chunking_gives_the_same_packets(cuts):
    parser = MqttParser()
    out = []
    last = 0
    for cut in sorted(cuts) + [len(STREAM_5)]:
        out += parser.feed(STREAM_5[last:cut])
        last = cut
    assert out == MqttParser().feed(STREAM_5)


def test_buffered_counts_the_incomplete_packet():
    parser = MqttParser(protocol_level=MQTT_5)
    data = encode(Publish("t", bytes(1000)), MQTT_5)
    assert parser.feed(data[:500]) == []
    assert parser.buffered == 500
    assert parser.feed(data[500:999]) == []
    assert parser.buffered == 999
    assert parser.feed(data[999:] + b"\xc0") == [Publish("t", bytes(1000))]
    assert parser.buffered == 1


def test_large_packet_in_many_small_chunks():
    parser = MqttParser(protocol_level=MQTT_311)
    packet = Publish("big", bytes(range(256)) * 400, 1, packet_id=1)
    data = encode(packet, MQTT_311)
    out = []
    for i in range(0, len(data), 100):
        out += parser.feed(data[i : i + 100])
    assert out == [packet]


def test_feed_accepts_bytearray_and_memoryview():
    data = encode(Publish("t", b"x"), MQTT_311)
    assert parse_one(bytearray(data), MQTT_311) == Publish("t", b"x")
    assert MqttParser(protocol_level=MQTT_311).feed(memoryview(data)) == [Publish("t", b"x")]


def test_error_keeps_earlier_packets_and_kills_the_parser():
    parser = MqttParser(protocol_level=MQTT_5)
    good = encode(Puback(1), MQTT_5) + encode(Puback(2), MQTT_5)
    with pytest.raises(MqttProtocolError) as info:
        parser.feed(good + b"\x00\x00" + encode(Puback(3), MQTT_5))
    assert info.value.packets == [Puback(1), Puback(2)]
    assert info.value.protocol_level == MQTT_5
    # Dead: even valid input now raises the same error, with no packets.
    with pytest.raises(MqttProtocolError) as again:
        parser.feed(encode(Puback(4), MQTT_5))
    assert again.value.message == info.value.message
    assert again.value.reason == info.value.reason
    assert again.value.packets == []
    assert parser.buffered == 0


# ------------------------------------------------------------------------------------------
# UTF-8 strings and binary data (3.1.1 §1.5.3, 5.0 §1.5.4, §1.5.6)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"a\xffb", id="invalid-byte"),
        pytest.param(b"\xc0\xaf", id="overlong"),
        pytest.param(b"\xed\xa0\x80", id="surrogate"),
        pytest.param(b"\xf4\x90\x80\x80", id="above-10ffff"),
        pytest.param(b"a\xe2\x82", id="truncated-sequence"),
        pytest.param(b"a\x00b", id="nul"),
    ],
)
@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_bad_utf8_is_malformed(raw, level):
    body = b(raw) + (NO_PROPS if level == MQTT_5 else b"") + b"payload"
    assert error_of(pkt(0x30, body), level).reason is MALFORMED
    # Same rule for strings elsewhere: a client identifier, a subscription filter.
    connect = pkt(0x10, s("MQTT") + bytes([level, 2]) + u16(0)
                  + (NO_PROPS if level == MQTT_5 else b"") + b(raw))
    exc = error_of(connect, None)
    assert exc.reason is MALFORMED and exc.protocol_level == level
    subscribe = pkt(0x82, u16(1) + (NO_PROPS if level == MQTT_5 else b"") + b(raw) + b"\x00")
    assert error_of(subscribe, level).reason is MALFORMED


def test_bom_is_kept_not_stripped():
    # 3.1.1 §1.5.3, 5.0 §1.5.4: EF BB BF is U+FEFF wherever it appears.
    packet = parse_one(pkt(0x30, s("\ufeffa/b") + NO_PROPS), MQTT_5)
    assert packet.topic == "\ufeffa/b"


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_string_longer_than_packet_is_malformed(level):
    body = u16(50) + b"short"
    assert error_of(pkt(0x30, body), level).reason is MALFORMED
    # Binary data: a will payload claiming more bytes than follow.
    pre = NO_PROPS if level == MQTT_5 else b""
    connect = pkt(0x10, s("MQTT") + bytes([level, 0x06]) + u16(0) + pre + s("c") + pre + s("w")
                  + u16(9) + b"x")
    exc = error_of(connect, None)
    assert exc.reason is MALFORMED and "will payload" in exc.message


# ------------------------------------------------------------------------------------------
# CONNECT (3.1)
# ------------------------------------------------------------------------------------------


def connect_body(name: str = "MQTT", level: int = 4, flags: int = 0x02, rest: bytes = b"") -> bytes:
    return pkt(0x10, s(name) + bytes([level, flags]) + u16(30) + rest)


@pytest.mark.parametrize(
    "name, level",
    [("MQIsdp", 3), ("MQTT", 3), ("MQTT", 6), ("MQTT", 0), ("MQIsdp", 4), ("HTTP", 4),
     ("mqtt", 4)],
)
def test_unsupported_protocol_version(name, level):
    # 3.1.2.1-3.1.2.2: refuse with return code 1 / reason 0x84; the level seen is exposed so the
    # session can answer in the client's own format.
    exc = error_of(connect_body(name, level, rest=s("c")), None)
    assert exc.reason is ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert exc.protocol_level == level


def test_connect_truncated_before_level_is_malformed():
    exc = error_of(pkt(0x10, s("MQTT")), None)
    assert exc.reason is MALFORMED and exc.protocol_level is None


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_connect_flag_rules(level):
    pre = NO_PROPS if level == MQTT_5 else b""
    will = (NO_PROPS if level == MQTT_5 else b"") + s("w") + b(b"x")

    def err(flags: int, rest: bytes) -> MqttProtocolError:
        exc = error_of(connect_body("MQTT", level, flags, pre + rest), None)
        assert exc.protocol_level == level
        return exc

    # 3.1.2.3: the reserved bit 0 must be 0.
    assert err(0x03, s("c")).reason is MALFORMED
    # 3.1.2.6: Will QoS 3 is malformed; without the Will flag, Will QoS must be 0 ...
    assert err(0x02 | 0x04 | 0x18, s("c") + will).reason is MALFORMED
    assert err(0x02 | 0x08, s("c")).reason is MALFORMED
    assert err(0x02 | 0x10, s("c")).reason is MALFORMED
    # ... 3.1.2.7: and Will Retain must be 0.
    assert err(0x02 | 0x20, s("c")).reason is MALFORMED
    # Will flag set but the will fields missing.
    assert err(0x02 | 0x04, s("c")).reason is MALFORMED
    # User name flag set but no user name.
    assert err(0x82, s("c")).reason is MALFORMED
    # Bytes after the payload.
    assert err(0x02, s("c") + b"\x00").reason is MALFORMED
    # Will QoS 2 with retain is fine.
    packet = parse_one(connect_body("MQTT", level, 0x02 | 0x04 | 0x10 | 0x20, pre + s("c") + will),
                       None)
    assert packet.will == Will("w", b"x", 2, True)


def test_password_without_user_name():
    # 3.1.1 §3.1.2.9: malformed in 3.1.1; 5.0 §3.1.2.9 allows it.
    exc = error_of(connect_body("MQTT", 4, 0x42, s("c") + b(b"pw")), None)
    assert exc.reason is MALFORMED and "password" in exc.message
    packet = parse_one(connect_body("MQTT", 5, 0x42, NO_PROPS + s("c") + b(b"pw")), None)
    assert packet.username is None and packet.password == b"pw"


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_empty_client_id_is_parsed(level):
    # 3.1.3.1: zero-length ids are the session's decision (clean start, assigned ids).
    pre = NO_PROPS if level == MQTT_5 else b""
    packet = parse_one(connect_body("MQTT", level, 0x02, pre + s("")), None)
    assert packet.client_id == "" and packet.clean_start


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
@pytest.mark.parametrize("topic", ["a/+", "#", ""])
def test_will_topic_must_be_a_topic_name(level, topic):
    pre = NO_PROPS if level == MQTT_5 else b""
    data = connect_body("MQTT", level, 0x06, pre + s("c") + pre + s(topic) + b(b"x"))
    assert error_of(data, None).reason is ReasonCode.TOPIC_NAME_INVALID


def test_authentication_data_needs_a_method():
    # 5.0 §3.1.2.11.10
    data = connect_body("MQTT", 5, 0x02, props(b"\x16" + b(b"tok")) + s("c"))
    assert error_of(data, None).reason is PROTOCOL
    data = connect_body("MQTT", 5, 0x02, props(b"\x15" + s("m"), b"\x16" + b(b"tok")) + s("c"))
    assert parse_one(data, None).properties == Properties(authentication_method="m",
                                                         authentication_data=b"tok")


# ------------------------------------------------------------------------------------------
# CONNACK (3.2)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "level, data, reason",
    [
        (MQTT_311, b"\x20\x02\x02\x00", MALFORMED),  # reserved acknowledge flag bits
        (MQTT_5, b"\x20\x03\x80\x00\x00", MALFORMED),
        (MQTT_311, b"\x20\x02\x00\x06", MALFORMED),  # return codes 6-255 are reserved
        (MQTT_311, b"\x20\x03\x00\x00\x00", MALFORMED),  # 3.1.1 CONNACK is 2 bytes
        (MQTT_311, b"\x20\x02\x01\x05", MALFORMED),  # session present on a refusal
        (MQTT_5, b"\x20\x03\x01\x87\x00", PROTOCOL),
        (MQTT_5, b"\x20\x02\x00\x00", MALFORMED),  # 5.0 always has the property length
        (MQTT_5, b"\x20\x03\x00\x10\x00", PROTOCOL),  # 0x10 is not a CONNACK reason code
        (MQTT_5, b"\x20\x01\x00", MALFORMED),
    ],
)
def test_connack_errors(level, data, reason):
    assert error_of(data, level).reason is reason


def test_connack_5_refusals():
    for code in (0x80, 0x84, 0x86, 0x87, 0x8A, 0x9C, 0x9F):
        assert parse_one(bytes([0x20, 3, 0, code, 0]), MQTT_5) == Connack(False, code)


# ------------------------------------------------------------------------------------------
# PUBLISH (3.3)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level, reason", [(MQTT_5, PROTOCOL), (MQTT_311, MALFORMED)])
def test_publish_qos0_with_dup(level, reason):
    # 3.3.1.1: DUP must be 0 on QoS 0; a protocol error in 5.0, malformed in 3.1.1.
    body = s("t") + (NO_PROPS if level == MQTT_5 else b"") + b"x"
    exc = error_of(pkt(0x38, body), level)
    assert exc.reason is reason and "DUP" in exc.message
    # The lenient encoder writes it anyway.
    assert encode(Publish("t", b"x", dup=True), level) == pkt(0x38, body)


@pytest.mark.parametrize("level, reason", [(MQTT_5, PROTOCOL), (MQTT_311, MALFORMED)])
def test_publish_packet_id_zero(level, reason):
    body = s("t") + u16(0) + (NO_PROPS if level == MQTT_5 else b"")
    assert error_of(pkt(0x32, body), level).reason is reason


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_publish_truncated(level):
    assert error_of(pkt(0x32, s("t") + b"\x00"), level).reason is MALFORMED
    assert error_of(pkt(0x30, b"\x00"), level).reason is MALFORMED
    if level == MQTT_5:
        assert error_of(pkt(0x30, s("t")), level).reason is MALFORMED  # no property length


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
@pytest.mark.parametrize("topic", ["a/+", "+", "a/#", "#", "sport/tennis+", "a#"])
def test_publish_topic_with_wildcard(level, topic):
    # 3.3.2.1, 4.7.1: wildcards belong in filters only.
    body = s(topic) + (NO_PROPS if level == MQTT_5 else b"")
    assert error_of(pkt(0x30, body), level).reason is ReasonCode.TOPIC_NAME_INVALID


def test_publish_empty_topic():
    # 3.1.1 §4.7.3: at least one character.
    assert error_of(pkt(0x30, s("")), MQTT_311).reason is ReasonCode.TOPIC_NAME_INVALID
    # 5.0 §3.3.2.3.4: allowed only together with a topic alias.
    assert error_of(pkt(0x30, s("") + NO_PROPS), MQTT_5).reason is PROTOCOL
    packet = parse_one(pkt(0x30, s("") + props(b"\x23" + u16(1))), MQTT_5)
    assert packet.topic == "" and packet.properties.topic_alias == 1


def test_publish_topic_alias_zero():
    data = pkt(0x30, s("t") + props(b"\x23" + u16(0)))
    assert error_of(data, MQTT_5).reason is PROTOCOL


def test_publish_payload_may_be_anything():
    payload = bytes(range(256)) * 3
    packet = parse_one(pkt(0x30, s("t") + NO_PROPS + payload), MQTT_5)
    assert packet.payload == payload and isinstance(packet.payload, bytes)


# ------------------------------------------------------------------------------------------
# PUBACK / PUBREC / PUBREL / PUBCOMP (3.4-3.7)
# ------------------------------------------------------------------------------------------

ACKS = [(0x40, Puback), (0x50, Pubrec), (0x62, Pubrel), (0x70, Pubcomp)]


@pytest.mark.parametrize("first, cls", ACKS)
def test_ack_lengths(first, cls):
    # 3.1.1: exactly two bytes.
    assert error_of(bytes([first, 3, 0, 1, 0]), MQTT_311).reason is MALFORMED
    assert error_of(bytes([first, 1, 0]), MQTT_311).reason is MALFORMED
    assert error_of(bytes([first, 1, 0]), MQTT_5).reason is MALFORMED
    # 5.0 §3.4.2.1: length 2 = success; 3 = reason without properties; 4+ = with properties.
    assert parse_one(bytes([first, 2, 0, 9]), MQTT_5) == cls(9)
    assert parse_one(bytes([first, 4, 0, 9, 0, 0]), MQTT_5) == cls(9)
    # Properties must end exactly at the end of the packet.
    assert error_of(bytes([first, 5, 0, 9, 0, 0, 0]), MQTT_5).reason is MALFORMED
    assert error_of(bytes([first, 5, 0, 9, 0, 2, 0]), MQTT_5).reason is MALFORMED
    # Packet identifier 0.
    assert error_of(bytes([first, 2, 0, 0]), MQTT_5).reason is PROTOCOL
    assert error_of(bytes([first, 2, 0, 0]), MQTT_311).reason is MALFORMED


@pytest.mark.parametrize(
    "first, allowed",
    [
        (0x40, {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),  # 5.0 §3.4.2.1
        (0x50, {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),  # 5.0 §3.5.2.1
        (0x62, {0x00, 0x92}),  # 5.0 §3.6.2.1
        (0x70, {0x00, 0x92}),  # 5.0 §3.7.2.1
    ],
)
def test_ack_reason_codes(first, allowed):
    for code in range(256):
        data = bytes([first, 3, 0, 1, code])
        if code in allowed:
            assert parse_one(data, MQTT_5).reason_code == code
        else:
            assert error_of(data, MQTT_5).reason is PROTOCOL, hex(code)


# ------------------------------------------------------------------------------------------
# SUBSCRIBE / SUBACK / UNSUBSCRIBE / UNSUBACK (3.8-3.11)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level, reason", [(MQTT_5, PROTOCOL), (MQTT_311, MALFORMED)])
def test_subscribe_needs_a_filter(level, reason):
    pre = NO_PROPS if level == MQTT_5 else b""
    assert error_of(pkt(0x82, u16(1) + pre), level).reason is reason
    assert error_of(pkt(0xA2, u16(1) + pre), level).reason is reason


def test_subscription_options_311():
    # 3.1.1 §3.8.3.1: only the QoS bits; reserved bits and QoS 3 are malformed.
    for options in range(256):
        data = pkt(0x82, u16(1) + s("a") + bytes([options]))
        if options <= 2:
            assert parse_one(data, MQTT_311).subscriptions == [Subscription("a", options)]
        else:
            assert error_of(data, MQTT_311).reason is MALFORMED, hex(options)


def test_subscription_options_5():
    # 5.0 §3.8.3.1: bits 6-7 reserved (malformed); QoS 3 and retain handling 3 are protocol
    # errors.
    for options in range(256):
        data = pkt(0x82, u16(1) + NO_PROPS + s("a") + bytes([options]))
        if options & 0xC0:
            assert error_of(data, MQTT_5).reason is MALFORMED, hex(options)
        elif options & 0x03 == 3 or (options >> 4) & 0x03 == 3:
            assert error_of(data, MQTT_5).reason is PROTOCOL, hex(options)
        else:
            sub = parse_one(data, MQTT_5).subscriptions[0]
            assert (sub.qos, sub.no_local, sub.retain_as_published, sub.retain_handling) == (
                options & 3, bool(options & 4), bool(options & 8), options >> 4)


def test_subscribe_filter_without_options_is_malformed():
    assert error_of(pkt(0x82, u16(1) + s("a") + b"\x01" + s("b")), MQTT_311).reason is MALFORMED


def test_subscribe_filters_are_not_judged_by_the_codec():
    # Whether "a/#/b" gets SUBACK 0x8F or a disconnect is the session's call.
    packet = parse_one(pkt(0x82, u16(1) + s("a/#/b") + b"\x00"), MQTT_311)
    assert packet.subscriptions == [Subscription("a/#/b", 0)]


def test_subscribe_subscription_identifier_rules():
    # 5.0 §3.8.2.1.2: once at most, and never 0.
    two = pkt(0x82, u16(1) + props(b"\x0b\x01", b"\x0b\x02") + s("a") + b"\x00")
    assert error_of(two, MQTT_5).reason is PROTOCOL
    zero = pkt(0x82, u16(1) + props(b"\x0b\x00") + s("a") + b"\x00")
    assert error_of(zero, MQTT_5).reason is PROTOCOL
    big = pkt(0x82, u16(1) + props(b"\x0b" + vbi(268435455)) + s("a") + b"\x00")
    assert parse_one(big, MQTT_5).properties.subscription_identifiers == [268435455]


@pytest.mark.parametrize(
    "level, data, reason",
    [
        (MQTT_311, b"\x90\x02\x00\x01", MALFORMED),  # no return code
        (MQTT_5, b"\x90\x03\x00\x01\x00", PROTOCOL),
        (MQTT_311, b"\x90\x03\x00\x01\x03", MALFORMED),  # 3.1.1 §3.9.3: 0, 1, 2, 0x80 only
        (MQTT_311, b"\x90\x03\x00\x01\x87", MALFORMED),
        (MQTT_5, b"\x90\x04\x00\x01\x00\x03", PROTOCOL),
        (MQTT_5, b"\x90\x04\x00\x01\x00\x10", PROTOCOL),
        (MQTT_311, b"\xb0\x03\x00\x01\x00", MALFORMED),  # 3.1.1 UNSUBACK is 2 bytes
        (MQTT_5, b"\xb0\x03\x00\x01\x00", PROTOCOL),  # 5.0 UNSUBACK needs reason codes
        (MQTT_5, b"\xb0\x04\x00\x01\x00\x01", PROTOCOL),
    ],
)
def test_suback_unsuback_errors(level, data, reason):
    assert error_of(data, level).reason is reason


def test_suback_5_reason_codes():
    allowed = {0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}
    for code in allowed:
        assert parse_one(bytes([0x90, 4, 0, 1, 0, code]), MQTT_5).reason_codes == [code]
    unsuback = {0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}
    for code in unsuback:
        assert parse_one(bytes([0xB0, 4, 0, 1, 0, code]), MQTT_5).reason_codes == [code]


# ------------------------------------------------------------------------------------------
# PINGREQ, PINGRESP, DISCONNECT, AUTH (3.12-3.15)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "level, data, reason",
    [
        (MQTT_5, b"\xc0\x01\x00", MALFORMED),
        (MQTT_311, b"\xd0\x01\x00", MALFORMED),
        (MQTT_311, b"\xe0\x01\x00", MALFORMED),  # 3.1.1 DISCONNECT has no body
        (MQTT_5, b"\xe0\x01\x05", PROTOCOL),  # not a DISCONNECT reason code
        (MQTT_5, b"\xe0\x02\x00\x05", MALFORMED),  # property length past the end
        (MQTT_5, b"\xe0\x03\x00\x00\x00", MALFORMED),  # trailing byte
        (MQTT_5, b"\xf0\x01\x18", MALFORMED),  # AUTH: reason and property length go together
        (MQTT_5, b"\xf0\x02\x01\x00", PROTOCOL),  # 0x01 is not an AUTH reason code
    ],
)
def test_ping_disconnect_auth_errors(level, data, reason):
    assert error_of(data, level).reason is reason


def test_disconnect_5_reason_codes():
    allowed = {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93,
               0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1,
               0xA2}
    for code in range(256):
        if code in allowed:
            assert parse_one(bytes([0xE0, 1, code]), MQTT_5) == Disconnect(code)
        else:
            assert error_of(bytes([0xE0, 1, code]), MQTT_5).reason is PROTOCOL


# ------------------------------------------------------------------------------------------
# Properties (5.0 §2.2.2): which packet may carry which, duplicates, values
# ------------------------------------------------------------------------------------------

WILL = "WILL"
# Written out from the table in 5.0 §2.2.2.2, independently of the codec's own table:
# field -> (identifier, data type, packets allowed to carry it, a valid sample value).
PROPERTY_TABLE = {
    "payload_format_indicator": (0x01, "byte", {"PUBLISH", WILL}, 1),
    "message_expiry_interval": (0x02, "u32", {"PUBLISH", WILL}, 3600),
    "content_type": (0x03, "str", {"PUBLISH", WILL}, "text/plain"),
    "response_topic": (0x08, "str", {"PUBLISH", WILL}, "re/ply"),
    "correlation_data": (0x09, "bin", {"PUBLISH", WILL}, b"\x00\x01"),
    "subscription_identifiers": (0x0B, "vbi", {"PUBLISH", "SUBSCRIBE"}, [200]),
    "session_expiry_interval": (0x11, "u32", {"CONNECT", "CONNACK", "DISCONNECT"}, 60),
    "assigned_client_identifier": (0x12, "str", {"CONNACK"}, "auto-7"),
    "server_keep_alive": (0x13, "u16", {"CONNACK"}, 30),
    "authentication_method": (0x15, "str", {"CONNECT", "CONNACK", "AUTH"}, "SCRAM-SHA-1"),
    "authentication_data": (0x16, "bin", {"CONNECT", "CONNACK", "AUTH"}, b"tok"),
    "request_problem_information": (0x17, "byte", {"CONNECT"}, 0),
    "will_delay_interval": (0x18, "u32", {WILL}, 10),
    "request_response_information": (0x19, "byte", {"CONNECT"}, 1),
    "response_information": (0x1A, "str", {"CONNACK"}, "resp/"),
    "server_reference": (0x1C, "str", {"CONNACK", "DISCONNECT"}, "other:1883"),
    "reason_string": (0x1F, "str", {"CONNACK", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBACK",
                                    "UNSUBACK", "DISCONNECT", "AUTH"}, "because"),
    "receive_maximum": (0x21, "u16", {"CONNECT", "CONNACK"}, 10),
    "topic_alias_maximum": (0x22, "u16", {"CONNECT", "CONNACK"}, 5),
    "topic_alias": (0x23, "u16", {"PUBLISH"}, 3),
    "maximum_qos": (0x24, "byte", {"CONNACK"}, 1),
    "retain_available": (0x25, "byte", {"CONNACK"}, 0),
    "user_properties": (0x26, "pair", {"CONNECT", "CONNACK", "PUBLISH", WILL, "PUBACK", "PUBREC",
                                       "PUBREL", "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE",
                                       "UNSUBACK", "DISCONNECT", "AUTH"}, [("k", "v")]),
    "maximum_packet_size": (0x27, "u32", {"CONNECT", "CONNACK"}, 1024),
    "wildcard_subscription_available": (0x28, "byte", {"CONNACK"}, 1),
    "subscription_identifier_available": (0x29, "byte", {"CONNACK"}, 0),
    "shared_subscription_available": (0x2A, "byte", {"CONNACK"}, 1),
}
CARRIERS = ["CONNECT", WILL, "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
            "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "DISCONNECT", "AUTH"]


def encode_property(name: str, value) -> bytes:
    ident, kind, _, _ = PROPERTY_TABLE[name]
    head = bytes([ident])
    if kind == "byte":
        return head + bytes([value])
    if kind == "u16":
        return head + u16(value)
    if kind == "u32":
        return head + value.to_bytes(4, "big")
    if kind == "str":
        return head + s(value)
    if kind == "bin":
        return head + b(value)
    if kind == "vbi":
        return b"".join(head + vbi(v) for v in value)
    return b"".join(head + s(k) + s(v) for k, v in value)


def carrier(kind: str, block: bytes) -> tuple[bytes, int | None]:
    """A hand-built 5.0 packet of `kind` whose property block is `block` (length included)."""
    if kind == "CONNECT":
        return pkt(0x10, s("MQTT") + b"\x05\x02" + u16(0) + block + s("c")), None
    if kind == WILL:
        return pkt(0x10, s("MQTT") + b"\x05\x06" + u16(0) + NO_PROPS + s("c") + block + s("w")
                   + b(b"x")), None
    first, prefix, suffix = {
        "CONNACK": (0x20, b"\x00\x00", b""),
        "PUBLISH": (0x32, s("t") + u16(1), b"payload"),
        "PUBACK": (0x40, u16(1) + b"\x00", b""),
        "PUBREC": (0x50, u16(1) + b"\x00", b""),
        "PUBREL": (0x62, u16(1) + b"\x00", b""),
        "PUBCOMP": (0x70, u16(1) + b"\x00", b""),
        "SUBSCRIBE": (0x82, u16(1), s("a") + b"\x01"),
        "SUBACK": (0x90, u16(1), b"\x00"),
        "UNSUBSCRIBE": (0xA2, u16(1), s("a")),
        "UNSUBACK": (0xB0, u16(1), b"\x00"),
        "DISCONNECT": (0xE0, b"\x00", b""),
        "AUTH": (0xF0, b"\x18", b""),
    }[kind]
    return pkt(first, prefix + block + suffix), MQTT_5


def properties_of(packet, kind: str) -> Properties:
    return packet.will.properties if kind == WILL else packet.properties


@pytest.mark.parametrize("kind", CARRIERS)
@pytest.mark.parametrize("name", list(PROPERTY_TABLE))
def test_property_allowed_in_packet(name, kind):
    _, _, allowed, sample = PROPERTY_TABLE[name]
    encoded = [encode_property(name, sample)]
    expected = Properties(**{name: sample})
    if name == "authentication_data" and kind == "CONNECT":
        # 5.0 §3.1.2.11.10: data needs a method, a separate rule tested above.
        encoded.insert(0, encode_property("authentication_method", "m"))
        expected.authentication_method = "m"
    data, level = carrier(kind, props(*encoded))
    if kind in allowed:
        assert properties_of(parse_one(data, level), kind) == expected
    else:
        exc = error_of(data, level)
        assert exc.reason is PROTOCOL, exc.message
        assert "not allowed" in exc.message


@pytest.mark.parametrize("name", list(PROPERTY_TABLE))
def test_property_twice_is_a_protocol_error(name):
    _, _, allowed, sample = PROPERTY_TABLE[name]
    for kind in sorted(allowed):
        one = encode_property(name, sample)
        extra = [encode_property("authentication_method", "m")] if (
            name == "authentication_data" and kind == "CONNECT") else []
        data, level = carrier(kind, props(*extra, one, one))
        if name == "user_properties" or (name == "subscription_identifiers" and kind == "PUBLISH"):
            # Repeats allowed: user properties anywhere (in wire order), subscription
            # identifiers in PUBLISH (5.0 §3.3.2.3.8), one per matching subscription.
            got = getattr(properties_of(parse_one(data, level), kind), name)
            assert got == sample + sample
        else:
            exc = error_of(data, level)
            assert exc.reason is PROTOCOL and "more than once" in exc.message, (name, kind)


@pytest.mark.parametrize(
    "kind, encoded",
    [
        ("PUBLISH", b"\x01\x02"),  # payload format indicator 2
        ("CONNECT", b"\x17\x02"),  # request problem information 2
        ("CONNECT", b"\x19\x05"),  # request response information 5
        ("CONNECT", b"\x21\x00\x00"),  # receive maximum 0
        ("CONNACK", b"\x21\x00\x00"),
        ("CONNECT", b"\x27\x00\x00\x00\x00"),  # maximum packet size 0
        ("CONNACK", b"\x24\x02"),  # maximum QoS 2 (5.0 §3.2.2.3.4: only 0 or 1)
        ("CONNACK", b"\x25\x02"),  # retain available 2
        ("CONNACK", b"\x28\x02"),
        ("CONNACK", b"\x29\x02"),
        ("CONNACK", b"\x2a\xff"),
        ("PUBLISH", b"\x0b\x00"),  # subscription identifier 0
        ("PUBLISH", b"\x23\x00\x00"),  # topic alias 0
    ],
)
def test_property_value_rules(kind, encoded):
    data, level = carrier(kind, props(encoded))
    assert error_of(data, level).reason is PROTOCOL


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(props(b"\x04\x00"), id="unknown-identifier"),
        pytest.param(props(b"\x7f\x00"), id="unknown-identifier-7f"),
        pytest.param(props(b"\x80\x01\x00"), id="multi-byte-identifier"),
        pytest.param(props(b"\x02\x00\x00"), id="u32-cut-short"),
        pytest.param(props(b"\x23\x00"), id="u16-cut-short"),
        pytest.param(props(b"\x01"), id="byte-missing"),
        pytest.param(props(b"\x03\x00\x09ab"), id="string-past-block"),
        pytest.param(props(b"\x26" + s("k")), id="pair-missing-value"),
        pytest.param(props(b"\x0b\x80"), id="vbi-cut-short"),
        pytest.param(props(b"\x0b\x80\x00"), id="vbi-not-minimal"),
        pytest.param(props(b"\x0b\xff\xff\xff\xff\x01"), id="vbi-five-bytes"),
        pytest.param(b"\x0a" + b"\x01\x00", id="block-past-packet"),
        pytest.param(b"\x80\x00" + b"", id="property-length-not-minimal"),
        pytest.param(props(b"\x03" + s("a\x00b")), id="nul-in-string-property"),
    ],
)
def test_malformed_property_blocks(block):
    data, level = carrier("PUBLISH", block)
    exc = error_of(data, level)
    assert exc.reason is MALFORMED, exc.message
    assert exc.message.startswith("PUBLISH")


def test_lenient_encoder_writes_forbidden_properties():
    # Sending is lenient: a topic alias in CONNECT goes out, and the parser refuses it.
    data = encode(Connect(keep_alive=0, client_id="c", properties=Properties(topic_alias=1)),
                  MQTT_5)
    assert data == carrier("CONNECT", props(b"\x23" + u16(1)))[0]
    assert error_of(data, None).reason is PROTOCOL


def test_properties_helpers_follow_the_field_list():
    from dataclasses import fields

    names = [f.name for f in fields(Properties)]
    assert names == list(PROPERTY_TABLE)
    assert codec._new_properties() == Properties()
    assert Properties().is_empty()
    for name, (_, _, _, sample) in PROPERTY_TABLE.items():
        assert not Properties(**{name: sample}).is_empty(), name
    assert repr(Properties(topic_alias=3)) == "Properties(topic_alias=3)"


def test_three_one_one_encoding_leaves_out_five_oh_fields():
    rich = Properties(reason_string="r", user_properties=[("a", "b")])
    assert encode(Puback(1, 0x10, rich), MQTT_311) == b"\x40\x02\x00\x01"
    assert encode(Disconnect(0x8B, rich), MQTT_311) == b"\xe0\x00"
    assert encode(Unsuback(1, [0x11], rich), MQTT_311) == b"\xb0\x02\x00\x01"
    assert encode(Publish("t", b"", properties=rich), MQTT_311) == b"\x30\x03\x00\x01t"
    with pytest.raises(ValueError, match="AUTH"):
        encode(Auth(), MQTT_311)


def test_encode_short_forms_in_5():
    assert encode(Puback(1), MQTT_5) == b"\x40\x02\x00\x01"
    assert encode(Pubrel(1, 0x92), MQTT_5) == b"\x62\x03\x00\x01\x92"
    assert encode(Puback(1, 0, Properties(reason_string="x")), MQTT_5) == (
        b"\x40\x08\x00\x01\x00\x04\x1f" + s("x"))
    assert encode(Disconnect(), MQTT_5) == b"\xe0\x00"
    assert encode(Auth(0x18), MQTT_5) == b"\xf0\x02\x18\x00"


def test_encode_rejects_unrepresentable_values():
    with pytest.raises(ValueError):
        encode(Publish("t" * 70000), MQTT_5)
    with pytest.raises(ValueError):
        encode(Puback(70000), MQTT_5)
    with pytest.raises(ValueError):
        encode(Disconnect(300), MQTT_5)
    with pytest.raises(ValueError):
        encode(Publish("t", qos=1), MQTT_5)  # QoS 1 needs a packet id
    with pytest.raises(ValueError):
        encode(Publish("t", properties=Properties(payload_format_indicator=-1)), MQTT_5)
    with pytest.raises(ValueError):
        encode(Pingreq(), 3)
    with pytest.raises(TypeError):
        encode("PINGREQ", MQTT_5)  # type: ignore[arg-type]


def test_encode_raw():
    assert encode_raw(12, 0) == b"\xc0\x00"
    assert encode_raw(3, 0b0110, b"\x00\x01t") == b"\x36\x03\x00\x01t"
    assert encode_raw(8, 0, b"", remaining_length=300) == b"\x80\xac\x02"
    with pytest.raises(ValueError):
        encode_raw(16, 0)
    # What it makes, the parser judges.
    assert error_of(encode_raw(8, 0, u16(1) + s("a") + b"\x00"), MQTT_311).reason is MALFORMED


# ------------------------------------------------------------------------------------------
# Round trips (hypothesis)
# ------------------------------------------------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12)
topic_names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00+#"), min_size=1,
    max_size=12,
)
topic_filters = st.lists(
    st.one_of(st.just("+"), topic_names.filter(lambda t: "/" not in t), st.just("")),
    min_size=1, max_size=4,
).map("/".join).flatmap(lambda f: st.sampled_from([f, f + "/#", "#"])).filter(bool)
data = st.binary(max_size=40)
u16s = st.integers(0, 0xFFFF)
u32s = st.integers(0, 0xFFFFFFFF)
packet_ids = st.integers(1, 0xFFFF)

PROPERTY_VALUES = {
    "payload_format_indicator": st.integers(0, 1),
    "message_expiry_interval": u32s,
    "content_type": text,
    "response_topic": text,
    "correlation_data": data,
    "subscription_identifiers": st.lists(st.integers(1, 268_435_455), max_size=3),
    "session_expiry_interval": u32s,
    "assigned_client_identifier": text,
    "server_keep_alive": u16s,
    "authentication_method": text,
    "authentication_data": data,
    "request_problem_information": st.integers(0, 1),
    "will_delay_interval": u32s,
    "request_response_information": st.integers(0, 1),
    "response_information": text,
    "server_reference": text,
    "reason_string": text,
    "receive_maximum": st.integers(1, 0xFFFF),
    "topic_alias_maximum": u16s,
    "topic_alias": st.integers(1, 0xFFFF),
    "maximum_qos": st.integers(0, 1),
    "retain_available": st.integers(0, 1),
    "user_properties": st.lists(st.tuples(text, text), max_size=3),
    "maximum_packet_size": st.integers(1, 0xFFFFFFFF),
    "wildcard_subscription_available": st.integers(0, 1),
    "subscription_identifier_available": st.integers(0, 1),
    "shared_subscription_available": st.integers(0, 1),
}


@st.composite
def properties_for(draw, kind: str, level: int) -> Properties:
    if level == MQTT_311:
        return Properties()
    chosen = {}
    for name, (_, _, allowed, _) in PROPERTY_TABLE.items():
        if kind in allowed and draw(st.booleans()):
            value = draw(PROPERTY_VALUES[name])
            if name == "subscription_identifiers" and kind != "PUBLISH":
                value = value[:1]
            chosen[name] = value
    if kind == "CONNECT" and "authentication_data" in chosen:
        chosen.setdefault("authentication_method", "m")
    return Properties(**chosen)


def codes(allowed) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(allowed))


@st.composite
def packets(draw, level: int):
    five = level == MQTT_5
    kind = draw(st.sampled_from(["CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL",
                                 "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK",
                                 "PINGREQ", "PINGRESP", "DISCONNECT"]
                                + (["AUTH"] if five else [])))
    p = properties_for(kind, level)
    if kind == "CONNECT":
        will = None
        if draw(st.booleans()):
            will = Will(draw(topic_names), draw(data), draw(st.integers(0, 2)), draw(st.booleans()),
                        draw(properties_for(WILL, level)))
        username = draw(st.none() | text)
        password = draw(st.none() | data) if (five or username is not None) else None
        return Connect("MQTT", level, draw(st.booleans()), draw(u16s), draw(text), will, username,
                       password, draw(p))
    if kind == "CONNACK":
        code = draw(codes(codec.CONNACK_REASON_CODES if five else range(6)))
        return Connack(draw(st.booleans()) and code == 0, code, draw(p))
    if kind == "PUBLISH":
        qos = draw(st.integers(0, 2))
        props_ = draw(p)
        topic = draw(topic_names)
        if five and props_.topic_alias is not None and draw(st.booleans()):
            topic = ""
        return Publish(topic, draw(data), qos, draw(st.booleans()),
                       qos > 0 and draw(st.booleans()), draw(packet_ids) if qos else None, props_)
    if kind in ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP"):
        cls = {"PUBACK": Puback, "PUBREC": Pubrec, "PUBREL": Pubrel, "PUBCOMP": Pubcomp}[kind]
        allowed = codec.PUBACK_REASON_CODES if kind in ("PUBACK", "PUBREC") else (
            codec.PUBREL_REASON_CODES)
        return cls(draw(packet_ids), draw(codes(allowed)) if five else 0, draw(p))
    if kind == "SUBSCRIBE":
        subs = draw(st.lists(
            st.builds(Subscription, topic_filters, st.integers(0, 2),
                      st.booleans() if five else st.just(False),
                      st.booleans() if five else st.just(False),
                      st.integers(0, 2) if five else st.just(0)),
            min_size=1, max_size=3))
        return Subscribe(draw(packet_ids), subs, draw(p))
    if kind == "SUBACK":
        allowed = codec.SUBACK_REASON_CODES if five else codec.SUBACK_RETURN_CODES_311
        return Suback(draw(packet_ids), draw(st.lists(codes(allowed), min_size=1, max_size=4)),
                      draw(p))
    if kind == "UNSUBSCRIBE":
        return Unsubscribe(draw(packet_ids), draw(st.lists(topic_filters, min_size=1, max_size=3)),
                           draw(p))
    if kind == "UNSUBACK":
        reason_codes = draw(st.lists(codes(codec.UNSUBACK_REASON_CODES), min_size=1, max_size=4))
        return Unsuback(draw(packet_ids), reason_codes if five else [], draw(p))
    if kind == "PINGREQ":
        return Pingreq()
    if kind == "PINGRESP":
        return Pingresp()
    if kind == "DISCONNECT":
        return Disconnect(draw(codes(codec.DISCONNECT_REASON_CODES)) if five else 0, draw(p))
    return Auth(draw(codes(codec.AUTH_REASON_CODES)), draw(p))


@FAST
@given(st.data())
@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_round_trip_every_packet_type(level, data):
    packet_list = data.draw(st.lists(packets(level), min_size=1, max_size=4))
    stream = b"".join(encode(p, level) for p in packet_list)
    assert MqttParser(protocol_level=level).feed(stream) == packet_list
    # Re-encoding what was parsed gives the same bytes.
    assert b"".join(encode(p, level) for p in packet_list) == stream


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([None, MQTT_311, MQTT_5]))
def test_random_bytes_only_raise_protocol_errors(data, level):
    try:
        MqttParser(protocol_level=level).feed(data)
    except MqttProtocolError as exc:
        assert isinstance(exc.reason, ReasonCode)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([connect_311(), connect_5()]))
def test_random_bytes_after_connect_only_raise_protocol_errors(data, connect):
    parser = MqttParser()
    try:
        parser.feed(connect + data)
    except MqttProtocolError as exc:
        assert exc.packets and isinstance(exc.packets[0], Connect)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from([MQTT_311, MQTT_5]))
def test_corrupted_packets_only_raise_protocol_errors(data, level):
    original = encode(data.draw(packets(level)), level)
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(mutated) - 1))
        mutated[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mutated)))
    parser = MqttParser(protocol_level=level)
    try:
        parser.feed(bytes(mutated[:cut]))
        parser.feed(bytes(mutated[cut:]))
    except MqttProtocolError:
        pass


# ------------------------------------------------------------------------------------------
# Topic names, filters, matching (4.7), shared subscriptions (5.0 §4.8.2)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, valid",
    [
        ("sport/tennis/player1", True),
        ("/", True),
        ("/finance", True),
        ("$SYS/broker/load", True),
        ("a b/ü/😀", True),
        ("sport//x", True),
        ("", False),
        ("sport/+", False),
        ("sport/#", False),
        ("+", False),
        ("#", False),
        ("a\x00b", False),
        ("a\ud800", False),
        ("x" * 65536, False),
    ],
)
def test_validate_topic_name(name, valid):
    if valid:
        assert validate_topic_name(name) == name
    else:
        with pytest.raises(MqttProtocolError) as info:
            validate_topic_name(name)
        assert info.value.reason is ReasonCode.TOPIC_NAME_INVALID


@pytest.mark.parametrize(
    "topic_filter, valid",
    [
        ("sport/tennis/player1/#", True),
        ("sport/#", True),
        ("#", True),
        ("+", True),
        ("+/tennis/#", True),
        ("sport/+/player1", True),
        ("/+", True),
        ("+/+", True),
        ("$SYS/#", True),
        ("$share/g/a/#", True),
        ("sport/tennis#", False),  # 4.7.1.2: '#' alone in its level
        ("sport/tennis/#/ranking", False),  # and last
        ("#/", False),
        ("sport+", False),  # 4.7.1.3: '+' alone in its level
        ("sport/+x/a", False),
        ("++", False),
        ("", False),
        ("a\x00", False),
        ("\udfff", False),
    ],
)
def test_validate_topic_filter(topic_filter, valid):
    if valid:
        assert validate_topic_filter(topic_filter) == topic_filter
    else:
        with pytest.raises(MqttProtocolError) as info:
            validate_topic_filter(topic_filter)
        assert info.value.reason is ReasonCode.TOPIC_FILTER_INVALID


def test_validate_accepts_bytes():
    assert validate_topic_name(b"a/b") == "a/b"
    assert validate_topic_filter("a/+".encode()) == "a/+"
    with pytest.raises(MqttProtocolError):
        validate_topic_name(b"\xff")


@pytest.mark.parametrize(
    "topic_filter, topic, matches",
    [
        # 4.7.1.2: '#' matches the parent level and any number of children.
        ("sport/tennis/player1/#", "sport/tennis/player1", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
        ("sport/#", "sport", True),
        ("sport/#", "sport/", True),
        ("sport/#", "sports", False),
        ("#", "anything/at/all", True),
        ("#", "/", True),
        # 4.7.1.3: '+' matches exactly one level, which may be empty.
        ("sport/tennis/+", "sport/tennis/player1", True),
        ("sport/tennis/+", "sport/tennis/player1/ranking", False),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("/+", "/finance", True),
        ("+", "/finance", False),
        ("+", "finance", True),
        ("+/tennis/#", "sport/tennis", True),
        ("+/tennis/#", "sport/tennis/x/y", True),
        ("+/tennis/#", "sport/golf", False),
        ("a/+/c", "a//c", True),
        # No wildcard: exact, case-sensitive, level-sensitive.
        ("a/b", "a/b", True),
        ("a/b", "A/b", False),
        ("a/b", "a/b/", False),
        ("/a", "a", False),
        # 4.7.2: topics starting with '$' are not matched by a leading wildcard.
        ("#", "$SYS/broker/load", False),
        ("+/monitor/Clients", "$SYS/monitor/Clients", False),
        ("$SYS/#", "$SYS/monitor/Clients", True),
        ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
        ("$SYS", "$SYS", True),
        ("+/#", "$x", False),
        ("a/#", "a/$SYS", True),  # only a leading '$' is special
    ],
)
def test_topic_matches(topic_filter, topic, matches):
    assert topic_matches(topic_filter, topic) is matches


@FAST
@given(st.lists(topic_names.filter(lambda t: "/" not in t and not t.startswith("$")),
                min_size=1, max_size=5), st.data())
def test_generalised_filters_match_their_topic(levels, data):
    topic = "/".join(levels)
    assert topic_matches(topic, topic)
    generalised = [("+" if data.draw(st.booleans()) else level) for level in levels]
    assert topic_matches("/".join(generalised), topic)
    keep = data.draw(st.integers(0, len(levels)))
    assert topic_matches("/".join(generalised[:keep] + ["#"]), topic)
    assert not topic_matches("/".join(levels + ["x"]), topic)
    assert not topic_matches("/".join(generalised + ["+"]), topic)


@pytest.mark.parametrize(
    "topic_filter, expected",
    [
        ("$share/group/a/b", ("group", "a/b")),
        ("$share/g/#", ("g", "#")),
        ("$share/g/+/x", ("g", "+/x")),
        ("$share/g//", ("g", "/")),
        ("$share/consumer-1/$SYS/#", ("consumer-1", "$SYS/#")),
        ("a/b", (None, "a/b")),
        ("$SYS/#", (None, "$SYS/#")),
        ("$shared/x", (None, "$shared/x")),
        ("$share", (None, "$share")),
    ],
)
def test_parse_shared(topic_filter, expected):
    assert parse_shared(topic_filter) == expected


@pytest.mark.parametrize(
    "topic_filter",
    [
        "$share//a",  # empty share name (5.0 §4.8.2)
        "$share/",
        "$share/g",  # no filter after the share name
        "$share/g/",
        "$share/g+/a",  # wildcards in the share name
        "$share/#/a",
        "$share/+/a",
        "$share/g/a/#/b",  # the filter itself must be valid
        "a/#/b",
    ],
)
def test_parse_shared_rejects(topic_filter):
    with pytest.raises(MqttProtocolError) as info:
        parse_shared(topic_filter)
    assert info.value.reason is ReasonCode.TOPIC_FILTER_INVALID


# ------------------------------------------------------------------------------------------
# Cross-check with paho-mqtt's encoder
# ------------------------------------------------------------------------------------------

# paho-mqtt is a dependency of the project (pyproject.toml): imported, never skipped when missing
import paho.mqtt.client as paho_client  # noqa: E402
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties as PahoProperties  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

PAHO_NAMES = {
    "payload_format_indicator": "PayloadFormatIndicator",
    "message_expiry_interval": "MessageExpiryInterval",
    "content_type": "ContentType",
    "response_topic": "ResponseTopic",
    "correlation_data": "CorrelationData",
    "subscription_identifiers": "SubscriptionIdentifier",
    "topic_alias": "TopicAlias",
    "user_properties": "UserProperty",
}


class _NoSocket:
    """Stands in for paho's socket: PUBLISH is only queued when a socket is set."""

    def close(self) -> None:
        pass


def captured_client(level: int):
    """A paho client whose outgoing packets land in `sent` instead of a socket."""
    client = paho_client.Client(
        paho_client.CallbackAPIVersion.VERSION2, client_id="paho-1",
        protocol=paho_client.MQTTv5 if level == MQTT_5 else paho_client.MQTTv311,
    )
    sent: list[bytes] = []
    client._packet_queue = lambda command, packet, mid, qos, info=None: sent.append(bytes(packet))
    client._sock = _NoSocket()
    return client, sent


@FAST
@given(properties_for("PUBLISH", MQTT_5))
def test_property_blocks_match_paho(ours):
    theirs = PahoProperties(PacketTypes.PUBLISH)
    for name, paho_name in PAHO_NAMES.items():
        value = getattr(ours, name)
        if value not in (None, []):
            setattr(theirs, paho_name, value)
    assert codec._encode_properties(ours) == theirs.pack()


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_paho_connect_matches(level):
    client, sent = captured_client(level)
    client.username_pw_set("alice", "secret")
    client.will_set("dev/status", b"gone", qos=1, retain=True)
    client._send_connect(30)
    expected = Connect("MQTT", level, True, 30, "paho-1", Will("dev/status", b"gone", 1, True),
                       "alice", b"secret")
    assert parse_one(sent[0], None) == expected
    assert encode(expected, level) == sent[0]


@pytest.mark.parametrize("level", [MQTT_311, MQTT_5])
def test_paho_publish_subscribe_unsubscribe_disconnect_match(level):
    client, sent = captured_client(level)
    pub_props = None
    ours_props = Properties()
    if level == MQTT_5:
        pub_props = PahoProperties(PacketTypes.PUBLISH)
        pub_props.MessageExpiryInterval = 60
        pub_props.UserProperty = ("k", "v")
        ours_props = Properties(message_expiry_interval=60, user_properties=[("k", "v")])
    client._send_publish(5, b"a/b", b"payload", qos=1, retain=True, properties=pub_props)
    options = SubscribeOptions(qos=2, noLocal=True) if level == MQTT_5 else 2
    client._send_subscribe(False, [(b"x/+", options)])
    client._send_unsubscribe(False, [b"x/+", b"y"])
    client._send_disconnect()
    parsed = MqttParser(protocol_level=level).feed(b"".join(sent))
    sub_id, unsub_id = parsed[1].packet_id, parsed[2].packet_id
    expected = [
        Publish("a/b", b"payload", 1, True, False, 5, ours_props),
        Subscribe(sub_id, [Subscription("x/+", 2, no_local=level == MQTT_5)]),
        Unsubscribe(unsub_id, ["x/+", "y"]),
        Disconnect(),
    ]
    assert parsed == expected
    assert [encode(p, level) for p in expected] == sent
