"""The AMQP 1.0 <-> engine message mapping (reference_broker/protocols/amqp/convert.py), on
Message objects and encoded bytes, without sockets."""

from __future__ import annotations

import uuid

import pytest
from proton import Data, Described, Message as ProtonMessage, byte, symbol, ulong

from reference_broker.engine.message import Message, MessageRef
from reference_broker.protocols.amqp.convert import (
    AMQP_MESSAGE_ID,
    AMQP_NULL,
    AMQP_SEQUENCE,
    AMQP_VALUE_BINARY,
    AMQP_VALUE_LIST,
    AMQP_VALUE_MAP,
    AMQP_VALUE_NULL,
    AMQP_VALUE_STRING,
    ORIGINAL_ENCODING,
    ConversionError,
    decode_message,
    encode_bare,
    encode_delivery,
    id_from_string,
    id_to_string,
    message_from_amqp,
)

NOW = 1_700_000_000_123


def inbound(pm: ProtonMessage, destination: str = "queue://Q") -> Message:
    """What the broker makes of `pm` after it crossed the wire."""
    return message_from_amqp(decode_message(bytes(pm.encode())), message_id="ID:broker-1-1",
                             destination=destination, now_ms=NOW)


def client_view(payload: bytes) -> ProtonMessage:
    pm = ProtonMessage()
    pm.decode(payload)
    return pm


def outbound(message: Message, delivery_count: int = 0, now_ms: int = NOW) -> ProtonMessage:
    """What an AMQP consumer (proton) decodes from the broker's transfer of `message`; the
    broker's own strict decoder must accept it too."""
    payload = encode_delivery(MessageRef(message, 1, delivery_count), now_ms)
    decode_message(payload)
    return client_view(payload)


def round_trip(pm: ProtonMessage, destination: str = "queue://Q") -> ProtonMessage:
    return outbound(inbound(pm, destination))


# --------------------------------------------------------------------------- AMQP -> engine


def test_header_and_properties_map_to_engine_fields():
    message = inbound(ProtonMessage(
        body=b"payload", inferred=True, durable=True, priority=7, ttl=5,
        subject="order.created", reply_to="queue://replies", correlation_id="corr-1",
        content_type="application/json", group_id="g-1", group_sequence=3,
        creation_time=(NOW - 1000) / 1000,
    ))
    assert message.body == b"payload"
    assert message.persistent is True and message.priority == 7
    assert message.expiration == NOW + 5000  # ttl counts from arrival
    assert message.timestamp == NOW - 1000  # the producer's creation-time is JMSTimestamp
    assert (message.type, message.reply_to, message.correlation_id) == ("order.created", "queue://replies", "corr-1")
    assert message.content_type == "application/json"
    assert (message.group_id, message.group_seq) == ("g-1", 3)
    assert message.header("JMSXGroupID") == "g-1" and message.header("JMSXGroupSeq") == 3
    assert message.message_id == "ID:broker-1-1"  # the broker's id, unique in the engine
    assert ORIGINAL_ENCODING not in message.properties  # a Data section needs no marker


def test_defaults_when_sections_are_missing():
    message = inbound(ProtonMessage(body=b"x", inferred=True))
    assert (message.persistent, message.priority, message.expiration) == (False, 4, 0)
    assert message.timestamp == NOW  # no creation-time: the arrival time
    assert (message.group_id, message.group_seq, message.correlation_id, message.type) == (None, 0, None, None)
    assert message.properties == {}


def test_absolute_expiry_time_wins_over_ttl():
    message = inbound(ProtonMessage(body="x", ttl=5, expiry_time=(NOW + 60_000) / 1000))
    assert message.expiration == NOW + 60_000


def test_application_properties_keep_simple_types():
    message = inbound(ProtonMessage(body=b"", inferred=True, properties={
        "s": "text", "i": 42, "neg": -7, "f": 2.5, "t": True, "no": False,
        "sym": symbol("a-symbol"), "b": byte(3), "u": ulong(2 ** 40), "id": uuid.UUID(int=1),
        "null": None, "bin": b"\x00\x01",
    }))
    props = message.properties
    assert props == {"s": "text", "i": 42, "neg": -7, "f": 2.5, "t": True, "no": False,
                     "sym": "a-symbol", "b": 3, "u": 2 ** 40, "id": str(uuid.UUID(int=1))}
    assert type(props["t"]) is bool and type(props["i"]) is int and type(props["b"]) is int
    assert type(props["f"]) is float and type(props["sym"]) is str


def test_client_markers_are_not_trusted():
    message = inbound(ProtonMessage(body=b"raw", inferred=True,
                                    properties={ORIGINAL_ENCODING: AMQP_VALUE_STRING, AMQP_MESSAGE_ID: "forged"}))
    assert ORIGINAL_ENCODING not in message.properties and AMQP_MESSAGE_ID not in message.properties
    assert outbound(message).inferred is True  # still a Data section


@pytest.mark.parametrize("body, code, encoded", [
    ("héllo", AMQP_VALUE_STRING, "héllo".encode()),
    (b"\x00\xff", AMQP_VALUE_BINARY, b"\x00\xff"),
    (None, AMQP_NULL, b""),  # proton writes no body section for body=None
])
def test_amqp_value_bodies_are_marked(body, code, encoded):
    message = inbound(ProtonMessage(body=body))
    assert message.body == encoded
    assert message.properties[ORIGINAL_ENCODING] == code


def test_structured_bodies_are_kept_encoded():
    as_map = inbound(ProtonMessage(body={"k": [1, 2]}))
    assert as_map.properties[ORIGINAL_ENCODING] == AMQP_VALUE_MAP and as_map.body  # opaque bytes
    as_list = inbound(ProtonMessage(body=[1, "two"]))
    assert as_list.properties[ORIGINAL_ENCODING] == AMQP_VALUE_LIST
    sequence = inbound(ProtonMessage(body=[1, 2], inferred=True))
    assert sequence.properties[ORIGINAL_ENCODING] == AMQP_SEQUENCE


@pytest.mark.parametrize("payload", [
    b"\x00\x53\x75\xff\xff",  # a Data section of an unknown type
    b"\x00\x53\x75\xa0\x10ab",  # truncated binary
    b"garbage",
    b"\xa1\x02hi",  # a value that is not a section
    b"\x00\x53\x99\x45",  # a described list that is not a section
    bytes(ProtonMessage(body="ok").encode()) + b"\x00",  # trailing junk
])
def test_undecodable_bytes_are_a_conversion_error(payload):
    with pytest.raises(ConversionError):
        decode_message(payload)


# --------------------------------------------------------------------------- engine -> AMQP


def test_engine_message_to_amqp():
    message = Message(
        message_id="ID:broker-7-9", destination="topic://prices.eu", body=b"1.25",
        properties={"symbol": "IBM", "n": 3, "ok": True, "x": 0.5}, persistent=True, priority=9,
        timestamp=NOW, expiration=NOW + 30_000, correlation_id="c-1", reply_to="queue://r",
        type="quote", group_id="g", group_seq=12, content_type="text/plain",
    )
    pm = outbound(message, delivery_count=0, now_ms=NOW + 10_000)
    assert pm.inferred is True and bytes(pm.body) == b"1.25"  # no marker: a Data section
    assert (pm.durable, pm.priority) == (True, 9)
    assert pm.ttl == 20.0 and pm.expiry_time == (NOW + 30_000) / 1000  # time left, and absolute
    assert pm.creation_time == NOW / 1000
    assert pm.id == "ID:broker-7-9" and pm.address == "topic://prices.eu"
    assert (pm.subject, pm.reply_to, pm.correlation_id, pm.content_type) == ("quote", "queue://r", "c-1", "text/plain")
    assert (pm.group_id, pm.group_sequence) == ("g", 12)
    assert pm.properties == {"symbol": "IBM", "n": 3, "ok": True, "x": 0.5}
    assert pm.annotations[symbol("x-opt-jms-dest")] == 1  # a topic, for JMS clients
    assert (pm.delivery_count, pm.first_acquirer) == (0, True)


def test_delivery_count_and_first_acquirer_come_from_the_ref():
    message = Message(message_id="ID:m", destination="queue://Q", body=b"x")
    first = outbound(message, delivery_count=0)
    again = outbound(message, delivery_count=3)
    assert (first.delivery_count, first.first_acquirer) == (0, True)
    assert (again.delivery_count, again.first_acquirer) == (3, False)
    assert first.annotations[symbol("x-opt-jms-dest")] == 0  # a queue


def test_bare_message_is_encoded_once_per_message():
    message = Message(message_id="ID:m", destination="queue://Q", body=b"x")
    outbound(message)
    cached = message.wire_cache
    assert cached is not None and cached[0] == "amqp"
    outbound(message, delivery_count=1)
    assert message.wire_cache is cached


def test_group_close_sequence_round_trips_as_uint():
    message = Message(message_id="ID:m", destination="queue://Q", group_id="g", group_seq=-1)
    pm = outbound(message)
    assert pm.group_sequence == 0xFFFFFFFF  # the uint bit pattern of -1
    assert inbound(pm).group_seq == -1


def test_first_for_consumer_adds_the_group_first_key():
    message = Message(message_id="ID:m", destination="queue://Q", group_id="g")
    pm = client_view(encode_delivery(MessageRef(message, 1), NOW, {"JMSXGroupFirstForConsumer": True}))
    assert pm.properties == {"JMSXGroupFirstForConsumer": True}
    assert message.wire_cache is None  # per delivery, never cached


# --------------------------------------------------------------------------- round trips


def test_amqp_to_amqp_round_trip_keeps_the_message():
    original = ProtonMessage(
        body="text", durable=True, priority=6, subject="s", reply_to="queue://r", correlation_id="c",
        content_type="text/plain", group_id="g", group_sequence=2, properties={"a": 1, "b": "x", "c": False},
        id="my-id",
    )
    back = round_trip(original)
    assert back.body == "text" and back.inferred is False  # AmqpValue(string) again
    for field in ("durable", "priority", "subject", "reply_to", "correlation_id", "content_type",
                  "group_id", "group_sequence", "properties", "id"):
        assert getattr(back, field) == getattr(original, field), field


@pytest.mark.parametrize("body, inferred", [
    (b"\x00bytes", True),  # Data
    (b"\x00bytes", False),  # AmqpValue(binary)
    ({"k": "v", "n": [1, 2]}, False),  # AmqpValue(map)
    ([1, "two", 3.0], False),  # AmqpValue(list)
    ([1, 2, 3], True),  # AmqpSequence
    (42, False),  # any other AmqpValue
    ("", False),  # empty string
    (None, False),  # AmqpValue(null)
])
def test_body_sections_round_trip(body, inferred):
    back = round_trip(ProtonMessage(body=body, inferred=inferred))
    got = bytes(back.body) if isinstance(back.body, memoryview) else back.body
    assert (got, bool(back.inferred)) == (body, inferred)


@pytest.mark.parametrize("value", [
    "plain", "ID:already-prefixed", ulong(42), uuid.UUID("12345678-1234-5678-1234-567812345678"), b"\x01\x02",
    "ID:AMQP_ULONG:not-really",
])
def test_typed_ids_round_trip(value):
    assert id_from_string(id_to_string(value)) == value
    back = round_trip(ProtonMessage(body=b"", inferred=True, id=value, correlation_id=value))
    got_id = bytes(back.id) if isinstance(back.id, memoryview) else back.id
    got_corr = bytes(back.correlation_id) if isinstance(back.correlation_id, memoryview) else back.correlation_id
    assert got_id == value and got_corr == value
    # On the wire the id keeps its AMQP type (proton's Message.id hands a ulong back as int).
    payload = encode_delivery(MessageRef(inbound(ProtonMessage(body=b"", inferred=True, id=value)), 1), NOW)
    for _ in range(3):  # header, message-annotations, properties
        sections = Data()
        consumed = sections.decode(payload)
        payload = payload[consumed:]
    sections.rewind()
    sections.next()
    wire_id = sections.get_object().value[0]
    assert type(wire_id) is type(value) or (isinstance(value, bytes) and isinstance(wire_id, memoryview))


def test_engine_to_amqp_to_engine_round_trip():
    message = Message(
        message_id="ID:broker-1-1", destination="queue://Q", body=b"bytes", properties={"p": 1, "q": "w"},
        persistent=True, priority=2, timestamp=NOW - 5, expiration=NOW + 10_000, correlation_id="c",
        reply_to="queue://r", type="t", group_id="g", group_seq=5, content_type="application/octet-stream",
    )
    back = inbound(outbound(message))
    assert back.properties == {"p": 1, "q": "w", AMQP_MESSAGE_ID: "ID:broker-1-1"}
    for field in ("body", "persistent", "priority", "timestamp", "expiration", "correlation_id", "reply_to",
                  "type", "group_id", "group_seq", "content_type"):
        assert getattr(back, field) == getattr(message, field), field


def test_stomp_text_goes_out_as_data_and_markers_stay_private():
    # A STOMP producer's message: string properties, no markers.
    message = Message(message_id="ID:stomp-1", destination="queue://Q", body=b"hi",
                      properties={"region": "eu"}, content_type="text/plain")
    pm = outbound(message)
    assert pm.inferred is True and bytes(pm.body) == b"hi" and pm.content_type == "text/plain"
    # An AMQP producer's text message: the marker turns it back into a string for AMQP and is
    # not shown as an application property.
    from_amqp = inbound(ProtonMessage(body="hi", id="x"))
    assert set(from_amqp.properties) == {ORIGINAL_ENCODING, AMQP_MESSAGE_ID}
    assert outbound(from_amqp).properties is None


def test_no_body_section_stays_absent():
    message = Message(message_id="ID:m", destination="queue://Q", body=b"", properties={ORIGINAL_ENCODING: AMQP_NULL})
    payload = encode_delivery(MessageRef(message, 1), NOW)
    assert decode_message(payload).body_section is None
    assert client_view(payload).body is None


def section(descriptor: int, value) -> bytes:
    data = Data()
    data.put_object(Described(ulong(descriptor), value))
    return bytes(data.encode())


def test_amqp_value_null_is_kept_apart_from_no_body():
    message = message_from_amqp(decode_message(section(0x77, None)), message_id="m", destination="queue://Q", now_ms=NOW)
    assert message.properties[ORIGINAL_ENCODING] == AMQP_VALUE_NULL
    assert decode_message(encode_delivery(MessageRef(message, 1), NOW)).body_section == 0x77


def test_several_data_sections_are_one_body():
    decoded = decode_message(section(0x75, b"one,") + section(0x75, b"two"))
    assert decoded.body == b"one,two"
    decoded = decode_message(section(0x76, [1]) + section(0x76, [2, 3]))
    assert decoded.body == [1, 2, 3]


@pytest.mark.parametrize("payload, reason", [
    (section(0x73, [None, None, 42]), "to must be a string"),
    (section(0x73, [None, None, None, None, None, None, None, None, "soon"]), "absolute-expiry-time must be a number"),
    (section(0x70, {"durable": True}), "header section must be a list"),
    (section(0x77, "a") + section(0x77, "b"), "a message body is one"),
    (section(0x75, b"a") + section(0x77, "b"), "a message body is one"),
    (section(0x75, "not binary"), "must hold binary"),
    (section(0x74, [1, 2]), "must be a map"),
])
def test_ill_typed_sections_are_refused(payload, reason):
    with pytest.raises(ConversionError, match=reason):
        message_from_amqp(decode_message(payload), message_id="m", destination="queue://Q", now_ms=NOW)


def test_encode_bare_is_deterministic():
    message = Message(message_id="ID:m", destination="queue://Q", body=b"x", properties={"a": 1})
    assert encode_bare(message) == encode_bare(message)
