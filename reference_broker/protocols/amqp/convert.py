"""Mapping between AMQP 1.0 messages and the engine's protocol-neutral `Message`.

Incoming: `decode_message` decodes a transfer's payload section by section with proton's codec
(`proton.Data`), strictly (bytes that are not well-formed sections are a `ConversionError`,
answered with amqp:decode-error), and `message_from_amqp` turns it into a `Message`.
Outgoing: `encode_delivery` writes the sections with proton's codec: a header section per
delivery (it carries the delivery count) followed by the rest of the message, which is the
same for every delivery and is cached on the message (`Message.wire_cache`), so a topic
message fanned out to many AMQP subscribers is encoded once.

Field mapping (AMQP 1.0 part 3.2 "Message Format"; JMS names as Qpid JMS and ActiveMQ use them):

=============================  ==========================================================
AMQP                           engine `Message`
=============================  ==========================================================
header.durable                 persistent
header.priority                priority (ubyte; the engine clamps to 0-9 when queueing)
header.ttl                     expiration = arrival time + ttl (when no absolute-expiry-time);
                               outgoing: the time left, plus absolute-expiry-time
header.delivery-count          outgoing only: the ref's delivery count (prior attempts)
header.first-acquirer          outgoing only: true while the delivery count is 0
properties.message-id          kept in property JMS_AMQP_MESSAGE_ID (see below)
properties.to                  outgoing: the canonical destination (queue://X, topic://X)
properties.subject             type (JMSType)
properties.reply-to            reply_to
properties.correlation-id      correlation_id (typed ids as strings, see below)
properties.content-type        content_type
properties.creation-time       timestamp (set to the arrival time when absent)
properties.absolute-expiry     expiration
properties.group-id            group_id (JMSXGroupID)
properties.group-sequence      group_seq (JMSXGroupSeq, a signed int): the uint is read as
                               int32, so 0xFFFFFFFF is -1, which closes the group (ActiveMQ)
application-properties         properties, keeping str / int / float / bool
message-annotations            outgoing: x-opt-jms-dest (0 queue, 1 topic), as ActiveMQ sends
body                           body bytes, see below
=============================  ==========================================================

Message ids. The engine's `message_id` must be unique per broker (it keys acknowledgements and
the store), so the broker assigns it, as it does for STOMP. The producer's AMQP message-id is
kept in the property `JMS_AMQP_MESSAGE_ID` and given back to AMQP consumers as their
message-id, so a request/reply pair that correlates on it keeps working. Non-string ids
(ulong, uuid, binary) are written as strings the way Qpid JMS writes JMSMessageID
(`ID:AMQP_ULONG:42`, `ID:AMQP_UUID:...`, `ID:AMQP_BINARY:<hex>`; a string that would read as
one of these gets `ID:AMQP_STRING:`) and typed again on the way out. The same for
correlation-id, which the engine holds as a string.

Bodies. The engine holds bytes. A Data section is the bytes. Any other body is recorded in the
property `JMS_AMQP_ORIGINAL_ENCODING` with ActiveMQ's codes (AmqpMessageSupport), so an
AMQP->AMQP round trip gives the consumer the section the producer sent:
5 AmqpValue(string) -> UTF-8 bytes; 6 AmqpValue(binary) -> the bytes; 4 AmqpValue(null) and
1 no body section -> empty; 3 amqp-sequence sections, 7 AmqpValue(map), 8 AmqpValue(list),
0 any other AmqpValue -> the value in AMQP encoding. Several Data sections are one body (their
concatenation), several amqp-sequence sections one sequence. A message without the property
(from STOMP) goes out as one Data section. STOMP consumers see the property as a header; they
ignore it.

What AMQP carries that the engine cannot (dropped or changed on the way in):
- delivery-annotations, message-annotations (x-opt-jms-msg-type, x-opt-delivery-time, ...) and
  footer; user-id, content-encoding and reply-to-group-id; header first-acquirer and
  delivery-count from a producer (meaningless to a broker).
- application-property values that are not str/int/float/bool: null and binary values are
  dropped, uuid/decimal/char become strings, timestamps become int milliseconds; the AMQP
  integer width (byte/short/int/long/ulong) and float32 vs double are not kept.
- the split of a body into several Data or amqp-sequence sections; a structured body (map,
  list, sequence) is only opaque AMQP-encoded bytes to STOMP consumers.

What the engine carries that AMQP cannot: a negative JMSXGroupSeq other than -1 goes out as
its uint32 bit pattern; properties whose names collide with the markers above are owned by
the broker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import lru_cache

from proton import Array, Data, Described, byte, symbol, timestamp, ubyte, uint, ulong

from ...engine.message import DEFAULT_PRIORITY, Message, MessageRef, PropertyValue

ORIGINAL_ENCODING = "JMS_AMQP_ORIGINAL_ENCODING"
AMQP_MESSAGE_ID = "JMS_AMQP_MESSAGE_ID"
MARKERS = frozenset({ORIGINAL_ENCODING, AMQP_MESSAGE_ID})

# ActiveMQ's AmqpMessageSupport codes for the original body section.
AMQP_UNKNOWN = 0
AMQP_NULL = 1
AMQP_DATA = 2
AMQP_SEQUENCE = 3
AMQP_VALUE_NULL = 4
AMQP_VALUE_STRING = 5
AMQP_VALUE_BINARY = 6
AMQP_VALUE_MAP = 7
AMQP_VALUE_LIST = 8

# Section descriptors (AMQP 1.0 part 3.2).
HEADER = 0x70
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE_SECTION = 0x76
AMQP_VALUE = 0x77

JMS_DEST = symbol("x-opt-jms-dest")
_QUEUE_TYPE = byte(0)
_TOPIC_TYPE = byte(1)

# Qpid JMS's string forms of non-string message ids (AMQPMessageIdHelper).
_ID_ULONG = "ID:AMQP_ULONG:"
_ID_UUID = "ID:AMQP_UUID:"
_ID_BINARY = "ID:AMQP_BINARY:"
_ID_STRING = "ID:AMQP_STRING:"
_ID_NO_PREFIX = "ID:AMQP_NO_PREFIX:"
_ID_PREFIXES = (_ID_ULONG, _ID_UUID, _ID_BINARY, _ID_STRING, _ID_NO_PREFIX)


class ConversionError(ValueError):
    """An incoming message the broker cannot represent (answered with amqp:decode-error)."""


# --------------------------------------------------------------------------- ids


def id_to_string(value) -> str | None:
    """An AMQP message-id / correlation-id (string, ulong, uuid, binary) as a string."""
    if value is None:
        return None
    if isinstance(value, str):  # also symbol
        text = str(value)
        return _ID_STRING + text if text.startswith(_ID_PREFIXES) else text
    if isinstance(value, uuid.UUID):
        return _ID_UUID + str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _ID_BINARY + bytes(value).hex().upper()
    if isinstance(value, int) and not isinstance(value, bool):
        return _ID_ULONG + str(int(value))
    raise ConversionError(f"unsupported message id type {type(value).__name__}")


def id_from_string(text: str | None):
    """The inverse of `id_to_string`: the typed AMQP id for a string."""
    if text is None:
        return None
    if not text.startswith("ID:AMQP_"):
        return text
    try:
        if text.startswith(_ID_ULONG):
            return ulong(int(text[len(_ID_ULONG):]))
        if text.startswith(_ID_UUID):
            return uuid.UUID(text[len(_ID_UUID):])
        if text.startswith(_ID_BINARY):
            return bytes.fromhex(text[len(_ID_BINARY):])
    except ValueError:
        return text  # looks like an encoded id but is not one: a plain string after all
    if text.startswith(_ID_STRING):
        return text[len(_ID_STRING):]
    if text.startswith(_ID_NO_PREFIX):
        return text[len(_ID_NO_PREFIX):]
    return text


# --------------------------------------------------------------------------- AMQP -> engine


@dataclass(slots=True)
class AmqpMessage:
    """The sections of an incoming message the broker uses, as proton's codec decoded them.
    Annotations and the footer are checked for well-formedness and dropped."""

    header: list = field(default_factory=list)  # durable, priority, ttl, first-acquirer, delivery-count
    properties: list = field(default_factory=list)  # message-id, user-id, to, subject, ... (3.2.4)
    application_properties: dict | None = None
    body_section: int | None = None  # DATA, AMQP_SEQUENCE_SECTION, AMQP_VALUE; None: no body
    body: object = None

    @staticmethod
    def item(section: list, index: int):
        """Field `index` of a list section (absent trailing fields are null, AMQP 1.0 1.4)."""
        return section[index] if index < len(section) else None

    @property
    def to(self) -> str | None:
        return _string(self.item(self.properties, 2), "to")


_SECTIONS = frozenset(range(0x70, 0x79))  # header .. footer (AMQP 1.0 3.2.1-3.2.10)
_SECTION_NAMES = {
    "amqp:header:list": 0x70, "amqp:delivery-annotations:map": 0x71, "amqp:message-annotations:map": 0x72,
    "amqp:properties:list": 0x73, "amqp:application-properties:map": 0x74, "amqp:data:binary": 0x75,
    "amqp:amqp-sequence:list": 0x76, "amqp:amqp-value:*": 0x77, "amqp:footer:map": 0x78,
}
_SKIPPED = frozenset({0x71, MESSAGE_ANNOTATIONS, 0x78})


def _materialize(value):
    """Copy the memoryviews proton hands out (views into a `Data` buffer that dies with it)."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, list):
        return [_materialize(v) for v in value]
    if isinstance(value, dict):
        return {_materialize(k): _materialize(v) for k, v in value.items()}
    if isinstance(value, Described):
        return Described(value.descriptor, _materialize(value.value))
    if isinstance(value, Array):
        return Array(value.descriptor, value.type, *[_materialize(v) for v in value.elements])
    return value


def decode_message(payload: bytes) -> AmqpMessage:
    """Decode a transfer's payload section by section with proton's codec. Strict: every byte
    must belong to a well-formed section (proton.Message.decode would skip what it cannot
    read). Several Data sections make one body (their concatenation), as do several
    amqp-sequence sections (AMQP 1.0 3.2: the body is one of these kinds)."""
    message = AmqpMessage()
    data = Data()
    offset, size = 0, len(payload)
    body_parts: list = []
    while offset < size:
        data.clear()
        try:
            consumed = data.decode(payload[offset:] if offset else payload)
            data.rewind()
            data.next()
            if not data.is_described():
                raise ConversionError(f"byte {offset} does not start a message section (AMQP 1.0 3.2)")
            section = data.get_object()
        except ConversionError:
            raise
        except Exception as exc:  # proton.DataException and friends
            raise ConversionError(f"undecodable message section at byte {offset}: {exc}") from None
        descriptor = section.descriptor
        if isinstance(descriptor, str):
            descriptor = _SECTION_NAMES.get(str(descriptor))
        # The descriptor may be any AMQP value (a list, a map: unhashable); only a ulong code
        # or a section's symbol names a section (found by fuzzing, tests/reference_broker/test_fuzz_findings.py).
        if not isinstance(descriptor, int) or descriptor not in _SECTIONS or consumed <= 0:
            raise ConversionError(f"byte {offset} does not start a message section (AMQP 1.0 3.2)")
        offset += consumed
        value = section.value
        if descriptor in _SKIPPED:
            if value is not None and not isinstance(value, dict):
                raise ConversionError(f"section 0x{descriptor:x} must be a map")
            continue
        if descriptor == HEADER:
            message.header = _section_list(value, "header")
        elif descriptor == PROPERTIES:
            message.properties = _materialize(_section_list(value, "properties"))
        elif descriptor == APPLICATION_PROPERTIES:
            if value is not None and not isinstance(value, dict):
                raise ConversionError("application-properties must be a map")
            message.application_properties = value
        else:
            if message.body_section is not None and (message.body_section != descriptor or descriptor == AMQP_VALUE):
                raise ConversionError("a message body is one amqp-value, or data sections, or amqp-sequence sections")
            message.body_section = descriptor
            if descriptor == DATA:
                if not isinstance(value, (bytes, memoryview)):
                    raise ConversionError("a data section must hold binary")
                body_parts.append(bytes(value))
            elif descriptor == AMQP_SEQUENCE_SECTION:
                body_parts.extend(_materialize(_section_list(value, "amqp-sequence")))
            else:
                message.body = _materialize(value)
    if message.body_section == DATA:
        message.body = body_parts[0] if len(body_parts) == 1 else b"".join(body_parts)
    elif message.body_section == AMQP_SEQUENCE_SECTION:
        message.body = body_parts
    return message


def _section_list(value, name: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConversionError(f"the {name} section must be a list")
    return value


def _string(value, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConversionError(f"{name} must be a string, got {type(value).__name__}")
    return str(value)


def _property_value(value) -> PropertyValue | None:
    """An application-property value as an engine property value (None: drop it)."""
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):  # byte..ulong, timestamp (ms)
        return int(value)
    if isinstance(value, float):  # float32, double
        return float(value)
    if isinstance(value, str):  # string, symbol, char
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (dict, list, tuple)):
        return None  # not a simple type; AMQP 3.2.5 forbids these in application-properties
    return str(value)


def _encode_value(value) -> bytes:
    data = Data()
    data.put_object(value)
    return bytes(data.encode())


def _decode_value(encoded: bytes):
    data = Data()
    data.decode(encoded)
    data.rewind()
    data.next()
    return _materialize(data.get_object())


def _body_from_amqp(message: AmqpMessage) -> tuple[bytes, int | None]:
    """(body bytes, original-encoding code or None for data sections)."""
    kind, body = message.body_section, message.body
    if kind == DATA:
        return body, None
    if kind is None:
        return b"", AMQP_NULL
    if kind == AMQP_SEQUENCE_SECTION:
        return _encode_value(body), AMQP_SEQUENCE
    if body is None:
        return b"", AMQP_VALUE_NULL
    if isinstance(body, str):
        return body.encode("utf-8"), AMQP_VALUE_STRING
    if isinstance(body, bytes):
        return body, AMQP_VALUE_BINARY
    if isinstance(body, dict):
        return _encode_value(body), AMQP_VALUE_MAP
    if isinstance(body, list):
        return _encode_value(body), AMQP_VALUE_LIST
    return _encode_value(body), AMQP_UNKNOWN


def _int(value, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConversionError(f"{name} must be a number, got {type(value).__name__}")
    return int(value)


def message_from_amqp(decoded: AmqpMessage, *, message_id: str, destination: str, now_ms: int) -> Message:
    """An engine `Message` for a decoded AMQP message (see the module docstring)."""
    properties: dict[str, PropertyValue] = {}
    app = decoded.application_properties
    if app:
        for name, value in app.items():
            if not isinstance(name, str) or name in MARKERS:
                continue
            converted = _property_value(value)
            if converted is not None:
                properties[str(name)] = converted
    body, encoding = _body_from_amqp(decoded)
    if encoding is not None:
        properties[ORIGINAL_ENCODING] = encoding
    header, props = decoded.header, decoded.properties
    get = decoded.item
    original_id = id_to_string(get(props, 0))
    _string(get(props, 2), "to")  # not used (the link or the relay decided), but checked
    if original_id is not None:
        properties[AMQP_MESSAGE_ID] = original_id
    expiration = _int(get(props, 8), "absolute-expiry-time")
    ttl = _int(get(header, 2), "ttl")
    if not expiration and ttl:
        expiration = now_ms + ttl
    priority = get(header, 1)
    group_id = _string(get(props, 10), "group-id") or None
    group_seq = _int(get(props, 11), "group-sequence") if group_id is not None else 0
    if group_seq >= 0x80000000:  # a uint on the wire; JMSXGroupSeq is a signed int (-1 closes)
        group_seq -= 0x100000000
    content_type = _string(get(props, 6), "content-type")
    return Message(
        message_id=message_id,
        destination=destination,
        body=body,
        properties=properties,
        persistent=bool(get(header, 0)),
        priority=DEFAULT_PRIORITY if priority is None else _int(priority, "priority"),
        timestamp=_int(get(props, 9), "creation-time") or now_ms,
        expiration=expiration,
        correlation_id=id_to_string(get(props, 5)),
        reply_to=_string(get(props, 4), "reply-to") or None,
        type=_string(get(props, 3), "subject") or None,
        group_id=group_id,
        group_seq=group_seq,
        content_type=content_type or None,
    )


# --------------------------------------------------------------------------- engine -> AMQP


def _put(data: Data, value) -> None:
    """Put one field with the AMQP type its Python type stands for (explicit puts are about
    twice as fast as `Data.put_object`'s generic dispatch)."""
    if value is None:
        data.put_null()
    elif isinstance(value, symbol):
        data.put_symbol(value)
    elif isinstance(value, str):
        data.put_string(value)
    elif isinstance(value, bool):
        data.put_bool(value)
    elif isinstance(value, timestamp):
        data.put_timestamp(value)
    elif isinstance(value, uint):
        data.put_uint(value)
    elif isinstance(value, ulong):
        data.put_ulong(value)
    elif isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            data.put_long(value)
        elif 0 <= value < (1 << 64):
            data.put_ulong(value)
        else:
            data.put_string(str(value))  # wider than AMQP's integers: keep the digits
    elif isinstance(value, float):
        data.put_double(value)
    elif isinstance(value, (bytes, bytearray)):
        data.put_binary(bytes(value))
    elif isinstance(value, uuid.UUID):
        data.put_uuid(value)
    else:
        data.put_object(value)


def _annotations(kind_code: byte) -> bytes:
    data = Data()
    data.put_object(Described(ulong(MESSAGE_ANNOTATIONS), {JMS_DEST: kind_code}))
    return bytes(data.encode())


# The message-annotations section only depends on the destination kind: encoded once.
_QUEUE_ANNOTATIONS = _annotations(_QUEUE_TYPE)
_TOPIC_ANNOTATIONS = _annotations(_TOPIC_TYPE)


def _put_body(data: Data, message: Message) -> None:
    encoding = message.properties.get(ORIGINAL_ENCODING)
    body = message.body
    if encoding is not None and not isinstance(encoding, bool) and isinstance(encoding, int) and encoding != AMQP_DATA:
        try:
            if encoding == AMQP_NULL:
                return  # the producer sent no body section
            if encoding == AMQP_VALUE_STRING:
                value = body.decode("utf-8")
            elif encoding == AMQP_VALUE_BINARY:
                value = body
            elif encoding == AMQP_VALUE_NULL:
                value = None
            elif encoding == AMQP_SEQUENCE:
                sequence = _decode_value(body)
                if not isinstance(sequence, list):
                    raise ValueError("not a list")
                data.put_described()
                data.enter()
                data.put_ulong(AMQP_SEQUENCE_SECTION)
                data.put_object(sequence)
                data.exit()
                return
            elif encoding in (AMQP_VALUE_MAP, AMQP_VALUE_LIST, AMQP_UNKNOWN):
                value = _decode_value(body)
            else:
                raise ValueError("unknown code")
        except Exception:  # a marker that does not fit the body: send the bytes as they are
            pass
        else:
            data.put_described()
            data.enter()
            data.put_ulong(AMQP_VALUE)
            if isinstance(value, (dict, list)):
                data.put_object(value)
            else:
                _put(data, value)
            data.exit()
            return
    data.put_described()
    data.enter()
    data.put_ulong(DATA)
    data.put_binary(body)
    data.exit()


def encode_bare(message: Message, extra_properties: dict | None = None) -> bytes:
    """Every section after the header: the same for every delivery of `message`."""
    props = message.properties
    original_id = props.get(AMQP_MESSAGE_ID)
    message_id = id_from_string(original_id) if isinstance(original_id, str) else message.message_id
    fields = [
        message_id,
        None,  # user-id
        message.destination,  # to
        message.type,  # subject
        message.reply_to,
        id_from_string(message.correlation_id),
        symbol(message.content_type) if message.content_type else None,
        None,  # content-encoding
        timestamp(message.expiration) if message.expiration else None,
        timestamp(message.timestamp) if message.timestamp else None,
        message.group_id,
        uint(message.group_seq & 0xFFFFFFFF) if message.group_id is not None and message.group_seq else None,
    ]
    while fields and fields[-1] is None:
        fields.pop()
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(PROPERTIES)
    data.put_list()
    data.enter()
    for value in fields:
        _put(data, value)
    data.exit()
    data.exit()
    if extra_properties or (props and not props.keys() <= MARKERS):
        data.put_described()
        data.enter()
        data.put_ulong(APPLICATION_PROPERTIES)
        data.put_map()
        data.enter()
        for name, value in props.items():
            if name not in MARKERS:
                data.put_string(name)
                _put(data, value)
        if extra_properties:
            for name, value in extra_properties.items():
                data.put_string(name)
                _put(data, value)
        data.exit()
        data.exit()
    _put_body(data, message)
    annotations = _TOPIC_ANNOTATIONS if message.destination.startswith("topic://") else _QUEUE_ANNOTATIONS
    return annotations + bytes(data.encode())


@lru_cache(maxsize=4096)
def encode_header(durable: bool, priority: int, ttl: int, delivery_count: int) -> bytes:
    data = Data()
    data.put_object(Described(ulong(HEADER), [
        durable,
        ubyte(min(max(priority, 0), 255)),
        uint(ttl) if ttl else None,
        delivery_count == 0,  # first-acquirer
        uint(delivery_count),
    ]))
    return bytes(data.encode())


_WIRE_KEY = "amqp"


def encode_delivery(ref: MessageRef, now_ms: int, extra_properties: dict | None = None) -> bytes:
    """The bytes of one transfer of `ref`: its header, then the (cached) bare message."""
    message = ref.message
    if extra_properties:
        bare = encode_bare(message, extra_properties)  # per delivery: never cached
    else:
        cache = message.wire_cache
        if cache is not None and cache[0] == _WIRE_KEY:
            bare = cache[1]
        else:
            bare = encode_bare(message)
            message.wire_cache = (_WIRE_KEY, bare)
    ttl = 0
    if message.expiration:
        ttl = max(1, min(message.expiration - now_ms, 0xFFFFFFFF))
    return encode_header(message.persistent, message.priority, ttl, ref.delivery_count) + bare
