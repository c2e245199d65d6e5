"""Sans-IO MQTT 3.1.1 / 5.0 packet codec.

Bytes go in, packet objects come out (`MqttParser.feed`); packets go in, bytes come out
(`encode`). Nothing here touches sockets, asyncio or clocks: the session adapter owns I/O,
timers, topic-alias maps and packet-identifier bookkeeping, and every wire rule below can be
tested on plain bytes.

Section numbers refer to the OASIS standards "MQTT Version 3.1.1" (2014, written "3.1.1 §x") and
"MQTT Version 5.0" (2019, written "5.0 §x"). Where both versions number a rule the same way only
one number is given.

Wire format in one breath (3.1.1 §2.2, 5.0 §2.1): one byte of packet type and flags, the
Remaining Length as a Variable Byte Integer of one to four bytes, then that many bytes of variable
header and payload. MQTT 5.0 adds a property block (5.0 §2.2.2) to most packets and reason codes
(5.0 §2.4) to the acknowledgements.

Receiving is strict: every violation raises `MqttProtocolError` carrying the MQTT 5.0 reason code
a server would put in its CONNACK or DISCONNECT (MALFORMED_PACKET, PROTOCOL_ERROR, ...). In 3.1.1,
which has no reason codes and simply closes the connection (3.1.1 §4.8), rules that 5.0 calls
protocol errors are reported as MALFORMED_PACKET. Sending is lenient: `encode` writes whatever
fields it is given (a property in a packet that may not carry it, QoS 0 with DUP set...), and
`encode_raw` writes arbitrary type, flags and body for tests of bad input.

The parser is written for throughput: it scans one `bytes` buffer with offsets, decodes fields by
indexing and slicing, joins pending chunks once per `feed` (never per packet), and only loops per
byte over the at most four bytes of a Variable Byte Integer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Union

__all__ = [
    "AUTH_REASON_CODES",
    "CONNACK_REASON_CODES",
    "DISCONNECT_REASON_CODES",
    "MAX_VARIABLE_BYTE_INTEGER",
    "MQTT_311",
    "MQTT_5",
    "PROPERTY_IDS",
    "PUBACK_REASON_CODES",
    "PUBREL_REASON_CODES",
    "SUBACK_REASON_CODES",
    "SUBACK_RETURN_CODES_311",
    "SUPPORTED_LEVELS",
    "UNSUBACK_REASON_CODES",
    "Auth",
    "Connack",
    "ConnackReturn311",
    "Connect",
    "Disconnect",
    "MqttParser",
    "MqttProtocolError",
    "Packet",
    "PacketType",
    "Pingreq",
    "Pingresp",
    "Properties",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "ReasonCode",
    "Suback",
    "Subscribe",
    "Subscription",
    "Unsuback",
    "Unsubscribe",
    "Will",
    "encode",
    "encode_raw",
    "parse_shared",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]

# The Protocol Level byte of CONNECT (3.1.1 §3.1.2.2, 5.0 §3.1.2.2).
MQTT_311 = 4
MQTT_5 = 5
SUPPORTED_LEVELS = (MQTT_311, MQTT_5)

# Largest value a four-byte Variable Byte Integer can hold (5.0 §1.5.5, 3.1.1 §2.2.3).
MAX_VARIABLE_BYTE_INTEGER = 268_435_455


class PacketType(IntEnum):
    """Control packet types, the high nibble of the first byte (3.1.1 §2.2.1, 5.0 §2.1.2)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # 5.0 only; reserved in 3.1.1


# Plain ints for the hot paths: comparing against an IntEnum member costs an attribute lookup.
_CONNECT = 1
_PUBLISH = 3


class ReasonCode(IntEnum):
    """MQTT 5.0 reason codes (5.0 §2.4). Values below 0x80 mean success."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    REAUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnackReturn311(IntEnum):
    """MQTT 3.1.1 CONNACK return codes (3.1.1 §3.2.2.3); 6-255 are reserved."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USER_NAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


# Reason codes each 5.0 packet may carry; anything else is refused on receipt. Sections: CONNACK
# 3.2.2.2, PUBACK 3.4.2.1, PUBREC 3.5.2.1, PUBREL 3.6.2.1, PUBCOMP 3.7.2.1, SUBACK 3.9.3, UNSUBACK
# 3.11.3, DISCONNECT 3.14.2.1, AUTH 3.15.2.1.
CONNACK_REASON_CODES = frozenset(
    (0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90, 0x95,
     0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F)
)
PUBACK_REASON_CODES = frozenset((0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99))
PUBREL_REASON_CODES = frozenset((0x00, 0x92))
SUBACK_REASON_CODES = frozenset(
    (0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2)
)
UNSUBACK_REASON_CODES = frozenset((0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91))
DISCONNECT_REASON_CODES = frozenset(
    (0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94,
     0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2)
)
AUTH_REASON_CODES = frozenset((0x00, 0x18, 0x19))
# 3.1.1 §3.9.3: the only SUBACK return codes; the rest are reserved.
SUBACK_RETURN_CODES_311 = frozenset((0x00, 0x01, 0x02, 0x80))


class MqttProtocolError(Exception):
    """The peer broke the MQTT wire format; `.message` says what and cites the rule.

    `.reason` is the MQTT 5.0 reason code a server would answer with (in a CONNACK while
    connecting, in a DISCONNECT afterwards, 5.0 §4.13). `.protocol_level` is the protocol level in
    effect, or for an error inside CONNECT the level byte that CONNECT carried (None if it was
    never read): a server refusing an unsupported version answers in the client's own format,
    return code 1 for anything but level 5 (3.1.1 §3.1.2.2), reason 0x84 for level 5.
    `.packets` holds the packets that parsed cleanly earlier in the same `feed` call.
    """

    def __init__(
        self,
        message: str,
        reason: ReasonCode = ReasonCode.MALFORMED_PACKET,
        *,
        protocol_level: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = ReasonCode(reason)
        self.protocol_level = protocol_level
        self.packets: list[Packet] = []

    def __str__(self) -> str:
        return f"{self.message} [{self.reason.name} 0x{self.reason.value:02X}]"


def _malformed(message: str) -> MqttProtocolError:
    return MqttProtocolError(message, ReasonCode.MALFORMED_PACKET)


def _violation(message: str, level: int | None) -> MqttProtocolError:
    """A rule MQTT 5.0 calls a Protocol Error; 3.1.1 has no such category, only malformed."""
    reason = ReasonCode.MALFORMED_PACKET if level == MQTT_311 else ReasonCode.PROTOCOL_ERROR
    return MqttProtocolError(message, reason)


# --------------------------------------------------------------------------------------------
# Properties (5.0 §2.2.2)
# --------------------------------------------------------------------------------------------


@dataclass(slots=True, repr=False)
class Properties:
    """MQTT 5.0 properties, one field per property (5.0 §2.2.2.2); None means absent.

    Fields are in identifier order. User properties keep wire order and repeats; a PUBLISH may
    carry several subscription identifiers (5.0 §3.3.2.3.8), every other packet at most one.
    """

    payload_format_indicator: int | None = None  # 0x01
    message_expiry_interval: int | None = None  # 0x02
    content_type: str | None = None  # 0x03
    response_topic: str | None = None  # 0x08
    correlation_data: bytes | None = None  # 0x09
    subscription_identifiers: list[int] = field(default_factory=list)  # 0x0B
    session_expiry_interval: int | None = None  # 0x11
    assigned_client_identifier: str | None = None  # 0x12
    server_keep_alive: int | None = None  # 0x13
    authentication_method: str | None = None  # 0x15
    authentication_data: bytes | None = None  # 0x16
    request_problem_information: int | None = None  # 0x17
    will_delay_interval: int | None = None  # 0x18
    request_response_information: int | None = None  # 0x19
    response_information: str | None = None  # 0x1A
    server_reference: str | None = None  # 0x1C
    reason_string: str | None = None  # 0x1F
    receive_maximum: int | None = None  # 0x21
    topic_alias_maximum: int | None = None  # 0x22
    topic_alias: int | None = None  # 0x23
    maximum_qos: int | None = None  # 0x24
    retain_available: int | None = None  # 0x25
    user_properties: list[tuple[str, str]] = field(default_factory=list)  # 0x26
    maximum_packet_size: int | None = None  # 0x27
    wildcard_subscription_available: int | None = None  # 0x28
    subscription_identifier_available: int | None = None  # 0x29
    shared_subscription_available: int | None = None  # 0x2A

    def is_empty(self) -> bool:
        """True when no property is set (the block encodes as a single zero byte)."""
        return _properties_empty(self)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{spec[1]}={getattr(self, spec[1])!r}"
            for spec in _PROP_SPECS
            if getattr(self, spec[1]) not in (None, [])
        )
        return f"Properties({shown})"


# Where a property may appear (5.0 §2.2.2.2): a bit per packet type, plus one for the Will
# Properties of CONNECT (5.0 §3.1.3.2), which are not a packet of their own.
_WILL = 16


def _mask(*types: int) -> int:
    bits = 0
    for t in types:
        bits |= 1 << t
    return bits


# Value kinds (5.0 §1.5 and the data type column of the table in §2.2.2.2).
_BYTE, _U16, _U32, _VBI, _STR, _BIN, _PAIR = range(7)
# Value checks made on receipt.
_ANY, _BOOL, _NONZERO, _QOS01 = range(4)

P = PacketType
# (identifier, field, kind, allowed-in mask, check)
_PROP_SPECS: tuple[tuple[int, str, int, int, int], ...] = (
    # 5.0 §3.3.2.3.2: 0 = unspecified bytes, 1 = UTF-8 payload.
    (0x01, "payload_format_indicator", _BYTE, _mask(P.PUBLISH, _WILL), _BOOL),
    (0x02, "message_expiry_interval", _U32, _mask(P.PUBLISH, _WILL), _ANY),
    (0x03, "content_type", _STR, _mask(P.PUBLISH, _WILL), _ANY),
    (0x08, "response_topic", _STR, _mask(P.PUBLISH, _WILL), _ANY),
    (0x09, "correlation_data", _BIN, _mask(P.PUBLISH, _WILL), _ANY),
    # 5.0 §3.8.2.1.2 / §3.3.2.3.8: a subscription identifier of 0 is a protocol error.
    (0x0B, "subscription_identifiers", _VBI, _mask(P.PUBLISH, P.SUBSCRIBE), _NONZERO),
    (0x11, "session_expiry_interval", _U32, _mask(P.CONNECT, P.CONNACK, P.DISCONNECT), _ANY),
    (0x12, "assigned_client_identifier", _STR, _mask(P.CONNACK), _ANY),
    (0x13, "server_keep_alive", _U16, _mask(P.CONNACK), _ANY),
    (0x15, "authentication_method", _STR, _mask(P.CONNECT, P.CONNACK, P.AUTH), _ANY),
    (0x16, "authentication_data", _BIN, _mask(P.CONNECT, P.CONNACK, P.AUTH), _ANY),
    # 5.0 §3.1.2.11.7 / §3.1.2.11.6: only 0 or 1.
    (0x17, "request_problem_information", _BYTE, _mask(P.CONNECT), _BOOL),
    (0x18, "will_delay_interval", _U32, _mask(_WILL), _ANY),
    (0x19, "request_response_information", _BYTE, _mask(P.CONNECT), _BOOL),
    (0x1A, "response_information", _STR, _mask(P.CONNACK), _ANY),
    (0x1C, "server_reference", _STR, _mask(P.CONNACK, P.DISCONNECT), _ANY),
    (0x1F, "reason_string", _STR,
     _mask(P.CONNACK, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP, P.SUBACK, P.UNSUBACK,
           P.DISCONNECT, P.AUTH), _ANY),
    # 5.0 §3.1.2.11.3 / §3.2.2.3.3: a receive maximum of 0 is a protocol error.
    (0x21, "receive_maximum", _U16, _mask(P.CONNECT, P.CONNACK), _NONZERO),
    (0x22, "topic_alias_maximum", _U16, _mask(P.CONNECT, P.CONNACK), _ANY),
    # 5.0 §3.3.2.3.4: topic alias 0 is not permitted.
    (0x23, "topic_alias", _U16, _mask(P.PUBLISH), _NONZERO),
    # 5.0 §3.2.2.3.4: maximum QoS is 0 or 1 (2 is expressed by leaving it out).
    (0x24, "maximum_qos", _BYTE, _mask(P.CONNACK), _QOS01),
    (0x25, "retain_available", _BYTE, _mask(P.CONNACK), _BOOL),
    (0x26, "user_properties", _PAIR,
     _mask(P.CONNECT, P.CONNACK, P.PUBLISH, _WILL, P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP,
           P.SUBSCRIBE, P.SUBACK, P.UNSUBSCRIBE, P.UNSUBACK, P.DISCONNECT, P.AUTH), _ANY),
    # 5.0 §3.1.2.11.4 / §3.2.2.3.6: a maximum packet size of 0 is a protocol error.
    (0x27, "maximum_packet_size", _U32, _mask(P.CONNECT, P.CONNACK), _NONZERO),
    (0x28, "wildcard_subscription_available", _BYTE, _mask(P.CONNACK), _BOOL),
    (0x29, "subscription_identifier_available", _BYTE, _mask(P.CONNACK), _BOOL),
    (0x2A, "shared_subscription_available", _BYTE, _mask(P.CONNACK), _BOOL),
)
del P

PROPERTY_IDS: dict[str, int] = {spec[1]: spec[0] for spec in _PROP_SPECS}
# Indexed by identifier (every defined one is below 0x40); each spec gains the label used in
# error messages, so none is formatted while parsing good input.
_PROP_BY_ID: list[tuple[int, str, int, int, int, str] | None] = [None] * 0x40
for _spec in _PROP_SPECS:
    _PROP_BY_ID[_spec[0]] = (*_spec, f"property {_spec[1]}")
del _spec

_new = object.__new__
_SUBSCRIPTION_ID = 0x0B
_LIST_PROPS = frozenset((0x0B, 0x26))


def _compile_properties_helpers() -> tuple:
    """Build `_new_properties()` and `_properties_empty(p)` as straight-line code.

    Both sit on the per-packet path. The dataclass __init__ (27 keyword defaults) costs twice
    what plain slot stores do, and a getattr loop or attrgetter over slots costs more than the
    rest of a PUBLISH decode, so the field list is unrolled once here, as dataclasses itself
    does for __init__.
    """
    names = [spec[1] for spec in _PROP_SPECS]
    lists = {spec[1] for spec in _PROP_SPECS if spec[0] in _LIST_PROPS}
    stores = "".join(
        f"    p.{n} = []\n" if n in lists else f"    p.{n} = None\n" for n in names
    )
    tests = " and ".join(f"not p.{n}" if n in lists else f"p.{n} is None" for n in names)
    source = (
        f"def _new_properties():\n    p = _new(Properties)\n{stores}    return p\n"
        f"def _properties_empty(p):\n    return {tests}\n"
    )
    namespace = {"_new": _new, "Properties": Properties}
    exec(source, namespace)  # noqa: S102 - source built from the constant table above
    return namespace["_new_properties"], namespace["_properties_empty"]


_new_properties, _properties_empty = _compile_properties_helpers()


def _packet_name(ptype: int) -> str:
    if ptype == _WILL:
        return "Will properties of CONNECT"
    return PacketType(ptype).name


# --------------------------------------------------------------------------------------------
# Packets
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Will:
    """The Will Message carried in CONNECT (3.1.1 §3.1.2.5, 5.0 §3.1.2.5 and §3.1.3.2-3.1.3.4)."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Connect:
    """CONNECT (3.1). `protocol_level` is the byte on the wire; `encode` lays the packet out by
    its own `protocol_level` argument but writes this byte as given, so a test can send a 5.0
    CONNECT claiming some other level."""

    packet_type: ClassVar[int] = PacketType.CONNECT
    protocol_name: str = "MQTT"
    protocol_level: int = MQTT_5
    clean_start: bool = True
    keep_alive: int = 60
    client_id: str = ""
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Connack:
    """CONNACK (3.2). `reason_code` holds the 3.1.1 return code (`ConnackReturn311`) in 3.1.1."""

    packet_type: ClassVar[int] = PacketType.CONNACK
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Publish:
    """PUBLISH (3.3). `packet_id` is None exactly when QoS is 0 (3.3.2.2). In 5.0 `topic` may be
    empty when `properties.topic_alias` names it (5.0 §3.3.2.3.4); the session resolves it."""

    packet_type: ClassVar[int] = PacketType.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Puback:
    """PUBACK (3.4). `reason_code` and `properties` exist only in 5.0 (5.0 §3.4.2)."""

    packet_type: ClassVar[int] = PacketType.PUBACK
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Pubrec:
    """PUBREC (3.5), the first answer to a QoS 2 PUBLISH."""

    packet_type: ClassVar[int] = PacketType.PUBREC
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Pubrel:
    """PUBREL (3.6); its fixed-header flags are 0b0010."""

    packet_type: ClassVar[int] = PacketType.PUBREL
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Pubcomp:
    """PUBCOMP (3.7), the end of the QoS 2 exchange."""

    packet_type: ClassVar[int] = PacketType.PUBCOMP
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Subscription:
    """One topic filter and its options (3.1.1 §3.8.3, 5.0 §3.8.3.1). 3.1.1 knows only `qos`."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    """SUBSCRIBE (3.8); fixed-header flags 0b0010."""

    packet_type: ClassVar[int] = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: list[Subscription] = field(default_factory=list)
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Suback:
    """SUBACK (3.9): one return/reason code per subscription, in order."""

    packet_type: ClassVar[int] = PacketType.SUBACK
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Unsubscribe:
    """UNSUBSCRIBE (3.10); fixed-header flags 0b0010."""

    packet_type: ClassVar[int] = PacketType.UNSUBSCRIBE
    packet_id: int
    topic_filters: list[str] = field(default_factory=list)
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Unsuback:
    """UNSUBACK (3.11). 3.1.1 has no reason codes: `reason_codes` is then empty."""

    packet_type: ClassVar[int] = PacketType.UNSUBACK
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Pingreq:
    """PINGREQ (3.12): no variable header, no payload."""

    packet_type: ClassVar[int] = PacketType.PINGREQ


@dataclass(slots=True)
class Pingresp:
    """PINGRESP (3.13)."""

    packet_type: ClassVar[int] = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    """DISCONNECT (3.14). Reason code and properties exist only in 5.0 (5.0 §3.14.2)."""

    packet_type: ClassVar[int] = PacketType.DISCONNECT
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Auth:
    """AUTH (5.0 §3.15), enhanced authentication; does not exist in 3.1.1."""

    packet_type: ClassVar[int] = PacketType.AUTH
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)


Packet = Union[
    Connect, Connack, Publish, Puback, Pubrec, Pubrel, Pubcomp, Subscribe, Suback, Unsubscribe,
    Unsuback, Pingreq, Pingresp, Disconnect, Auth,
]


# --------------------------------------------------------------------------------------------
# Field readers. Each takes the buffer, an offset and the end of the enclosing structure, and
# returns (value, next offset); running past `end` is a malformed packet (5.0 §4.13.1).
# --------------------------------------------------------------------------------------------


def _read_vbi(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """A Variable Byte Integer (5.0 §1.5.5, 3.1.1 §2.2.3): 7 bits a byte, at most four bytes."""
    value = 0
    shift = 0
    for i in range(4):
        if pos >= end:
            raise _malformed(f"{what}: variable byte integer runs past the end of the packet")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and i:
                # 5.0 §1.5.5: the encoding must use the fewest bytes possible.
                raise _malformed(f"{what}: variable byte integer is not minimally encoded")
            return value, pos
        shift += 7
    raise _malformed(f"{what}: variable byte integer longer than four bytes (5.0 §1.5.5)")


def _read_u16(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    if pos + 2 > end:
        raise _malformed(f"{what}: packet ends inside a two-byte integer")
    return (buf[pos] << 8) | buf[pos + 1], pos + 2


def _read_str(buf: bytes, pos: int, end: int, what: str) -> tuple[str, int]:
    """A UTF-8 Encoded String (3.1.1 §1.5.3, 5.0 §1.5.4): two-byte length, then the text.

    Python's strict UTF-8 decoder already refuses overlong forms, surrogate code points
    (U+D800-U+DFFF) and anything above U+10FFFF; U+0000 is checked here. A BOM is kept as
    U+FEFF, never stripped (3.1.1 §1.5.3, 5.0 §1.5.4).
    """
    if pos + 2 > end:
        raise _malformed(f"{what}: packet ends inside a string length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise _malformed(
            f"{what}: string of {stop - pos - 2} bytes runs past the end of the packet"
        )
    try:
        text = buf[pos + 2 : stop].decode()
    except UnicodeDecodeError as exc:
        raise _malformed(
            f"{what}: not well-formed UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    if "\x00" in text:
        raise _malformed(f"{what}: string contains U+0000 (5.0 §1.5.4, 3.1.1 §1.5.3)")
    return text, stop


def _read_bin(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes, int]:
    """Binary Data (5.0 §1.5.6): two-byte length, then that many bytes."""
    if pos + 2 > end:
        raise _malformed(f"{what}: packet ends inside a binary data length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise _malformed(
            f"{what}: binary data of {stop - pos - 2} bytes runs past the end of the packet"
        )
    return buf[pos + 2 : stop], stop


def _read_packet_id(buf: bytes, pos: int, end: int, name: str, level: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise _malformed(f"{name}: packet ends before its packet identifier")
    packet_id = (buf[pos] << 8) | buf[pos + 1]
    if not packet_id:
        # 3.1.1 §2.3.1, 5.0 §2.2.1: packet identifiers are non-zero.
        raise _violation(f"{name}: packet identifier 0 (identifiers are 1-65535)", level)
    return packet_id, pos + 2


def _read_properties(
    buf: bytes, pos: int, end: int, ptype: int
) -> tuple[Properties, int]:
    """A 5.0 property block (5.0 §2.2.2): its length, then identifier/value pairs."""
    try:
        return _read_property_block(buf, pos, end, ptype)
    except MqttProtocolError as exc:
        # Messages are built without the packet name (it costs an enum lookup per property
        # on the good path); it is added here, once, on the way out.
        exc.message = f"{_packet_name(ptype)} {exc.message}"
        exc.args = (exc.message,)
        raise


def _read_property_block(
    buf: bytes, pos: int, end: int, ptype: int
) -> tuple[Properties, int]:
    if pos >= end:
        raise _malformed("packet ends before its property length")
    length = buf[pos]
    if length < 0x80:
        pos += 1
    else:
        length, pos = _read_vbi(buf, pos, end, "property length")
    stop = pos + length
    if stop > end:
        raise _malformed(f"property length {length} runs past the end of the packet")
    props = _new_properties()
    if not length:
        return props, pos
    mask = 1 << ptype
    seen = 0
    while pos < stop:
        ident = buf[pos]
        pos += 1
        # Identifiers are Variable Byte Integers but all defined ones are single bytes below
        # 0x40 (5.0 §2.2.2.2); anything else cannot be understood, hence malformed.
        spec = _PROP_BY_ID[ident] if ident < 0x40 else None
        if spec is None:
            raise _malformed(f"unknown property identifier 0x{ident:02X} (5.0 §2.2.2.2)")
        _, name, kind, allowed, check, label = spec
        if not allowed & mask:
            raise MqttProtocolError(
                f"{label} (0x{ident:02X}) is not allowed in this packet (5.0 §2.2.2.2)",
                ReasonCode.PROTOCOL_ERROR,
            )
        if kind == _STR:
            value, pos = _read_str(buf, pos, stop, label)
        elif kind == _PAIR:  # 5.0 §1.5.7; user properties may repeat (5.0 §3.1.2.11.8 etc.)
            key, pos = _read_str(buf, pos, stop, label)
            value, pos = _read_str(buf, pos, stop, label)
            props.user_properties.append((key, value))
            continue
        elif kind == _BYTE:
            if pos >= stop:
                raise _malformed(f"{label}: runs past the end of the property block")
            value = buf[pos]
            pos += 1
        elif kind == _U32:
            if pos + 4 > stop:
                raise _malformed(f"{label}: runs past the end of the property block")
            value = int.from_bytes(buf[pos : pos + 4], "big")
            pos += 4
        elif kind == _U16:
            value, pos = _read_u16(buf, pos, stop, label)
        elif kind == _BIN:
            value, pos = _read_bin(buf, pos, stop, label)
        else:  # _VBI
            value, pos = _read_vbi(buf, pos, stop, label)
        if check:
            if check == _NONZERO:
                if value == 0:
                    raise MqttProtocolError(f"{label}: value 0 is not allowed",
                                            ReasonCode.PROTOCOL_ERROR)
            elif value > 1:  # _BOOL, and _QOS01 (5.0 §3.2.2.3.4: maximum QoS is 0 or 1)
                raise MqttProtocolError(
                    f"{label}: value {value} is neither 0 nor 1", ReasonCode.PROTOCOL_ERROR
                )
        bit = 1 << ident
        if seen & bit:
            # Every property section makes a repeat a protocol error; only user properties
            # and, in PUBLISH, subscription identifiers (5.0 §3.3.2.3.8) may repeat.
            if not (ident == _SUBSCRIPTION_ID and ptype == _PUBLISH):
                raise MqttProtocolError(
                    f"{label}: included more than once", ReasonCode.PROTOCOL_ERROR
                )
        seen |= bit
        if ident == _SUBSCRIPTION_ID:
            props.subscription_identifiers.append(value)
        else:
            setattr(props, name, value)
    return props, stop


def _check_end(pos: int, end: int, name: str) -> None:
    if pos != end:
        raise _malformed(f"{name}: {end - pos} unexpected bytes after the last field")


# --------------------------------------------------------------------------------------------
# Packet decoders: (buf, start, end, fixed-header flags, protocol level) -> packet
# --------------------------------------------------------------------------------------------


def _decode_connect(buf: bytes, pos: int, end: int, flags: int, level: int | None) -> Connect:
    name, pos = _read_str(buf, pos, end, "CONNECT protocol name")
    if pos >= end:
        raise _malformed("CONNECT: packet ends before the protocol level")
    seen_level = buf[pos]
    pos += 1
    if name != "MQTT" or seen_level not in SUPPORTED_LEVELS:
        # 3.1.1 §3.1.2.1-3.1.2.2, 5.0 §3.1.2.1-3.1.2.2: the server may say which version it
        # refuses (CONNACK return code 1 / reason 0x84) and then closes. "MQIsdp" is MQTT 3.1.
        if name in ("MQTT", "MQIsdp"):
            message = (
                f"CONNECT: unsupported protocol {name!r} level {seen_level}; this codec speaks "
                "MQTT 3.1.1 (level 4) and 5.0 (level 5)"
            )
        else:
            message = f"CONNECT: unknown protocol name {name[:40]!r} (expected 'MQTT')"
        raise MqttProtocolError(
            message, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, protocol_level=seen_level
        )
    try:
        return _decode_connect_rest(buf, pos, end, name, seen_level)
    except MqttProtocolError as exc:
        exc.protocol_level = seen_level
        raise


def _decode_connect_rest(buf: bytes, pos: int, end: int, name: str, level: int) -> Connect:
    if pos + 3 > end:
        raise _malformed("CONNECT: packet ends inside the connect flags or keep alive")
    cflags = buf[pos]
    keep_alive = (buf[pos + 1] << 8) | buf[pos + 2]
    pos += 3
    # 3.1.1 §3.1.2.3, 5.0 §3.1.2.3: bit 0 is reserved and must be 0, else malformed.
    if cflags & 0x01:
        raise _malformed("CONNECT: reserved connect flag (bit 0) is set")
    will_flag = cflags & 0x04
    will_qos = (cflags >> 3) & 0x03
    will_retain = cflags & 0x20
    if will_flag:
        if will_qos == 3:  # 3.1.2.6
            raise _malformed("CONNECT: Will QoS 3 is not a QoS level")
    elif will_qos or will_retain:
        # 3.1.2.6 / 3.1.2.7: without a will, Will QoS and Will Retain must be 0.
        raise _malformed("CONNECT: Will QoS or Will Retain set without the Will flag")
    has_username = cflags & 0x80
    has_password = cflags & 0x40
    if level == MQTT_311 and has_password and not has_username:
        # 3.1.1 §3.1.2.9; 5.0 §3.1.2.9 lifted this rule.
        raise _malformed("CONNECT: password flag set without the user name flag (3.1.1)")
    if level == MQTT_5:
        props, pos = _read_properties(buf, pos, end, PacketType.CONNECT)
        if props.authentication_data is not None and props.authentication_method is None:
            # 5.0 §3.1.2.11.10
            raise MqttProtocolError(
                "CONNECT: authentication data without an authentication method",
                ReasonCode.PROTOCOL_ERROR,
            )
    else:
        props = _new_properties()
    # 3.1.3.1: the client identifier may be empty; whether that is acceptable (clean start,
    # assigned identifiers) is the session's decision.
    client_id, pos = _read_str(buf, pos, end, "CONNECT client identifier")
    will = None
    if will_flag:
        if level == MQTT_5:
            will_props, pos = _read_properties(buf, pos, end, _WILL)  # 5.0 §3.1.3.2
        else:
            will_props = _new_properties()
        will_topic, pos = _read_str(buf, pos, end, "CONNECT will topic")
        validate_topic_name(will_topic)
        will_payload, pos = _read_bin(buf, pos, end, "CONNECT will payload")
        will = Will(will_topic, will_payload, will_qos, bool(will_retain), will_props)
    username = password = None
    if has_username:
        username, pos = _read_str(buf, pos, end, "CONNECT user name")
    if has_password:
        password, pos = _read_bin(buf, pos, end, "CONNECT password")
    _check_end(pos, end, "CONNECT")
    return Connect(
        name, level, bool(cflags & 0x02), keep_alive, client_id, will, username, password, props
    )


def _decode_connack(buf: bytes, pos: int, end: int, flags: int, level: int) -> Connack:
    if end - pos < 2 or (level == MQTT_311 and end - pos != 2):
        raise _malformed(f"CONNACK: remaining length {end - pos} (3.2.2)")
    ack_flags = buf[pos]
    code = buf[pos + 1]
    # 3.1.1 §3.2.2.1, 5.0 §3.2.2.1: bits 7-1 of the acknowledge flags are reserved.
    if ack_flags & 0xFE:
        raise _malformed(f"CONNACK: reserved acknowledge flags set (0x{ack_flags:02X})")
    if level == MQTT_311:
        if code > ConnackReturn311.NOT_AUTHORIZED:
            raise _malformed(f"CONNACK: return code {code} is reserved (3.1.1 §3.2.2.3)")
        props = _new_properties()
        pos += 2
    else:
        if code not in CONNACK_REASON_CODES:
            raise MqttProtocolError(
                f"CONNACK: 0x{code:02X} is not a CONNACK reason code (5.0 §3.2.2.2)",
                ReasonCode.PROTOCOL_ERROR,
            )
        props, pos = _read_properties(buf, pos + 2, end, PacketType.CONNACK)
    if ack_flags and code:
        # 3.1.1 §3.2.2.2, 5.0 §3.2.2.1.1: a refusal never claims a session.
        raise _violation("CONNACK: session present set on a refused connection", level)
    _check_end(pos, end, "CONNACK")
    return Connack(bool(ack_flags), code, props)


def _decode_publish(buf: bytes, pos: int, end: int, flags: int, level: int) -> Publish:
    qos = (flags >> 1) & 0x03  # QoS 3 is refused with the fixed header (3.3.1.2)
    if pos + 2 > end:
        raise _malformed("PUBLISH: packet ends inside the topic name length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise _malformed(
            f"PUBLISH: topic name of {stop - pos - 2} bytes runs past the end of the packet"
        )
    try:
        topic = buf[pos + 2 : stop].decode()
    except UnicodeDecodeError as exc:
        raise _malformed(f"PUBLISH topic name: not well-formed UTF-8 ({exc.reason})") from None
    if "\x00" in topic:
        raise _malformed("PUBLISH topic name: string contains U+0000 (5.0 §1.5.4, 3.1.1 §1.5.3)")
    if "+" in topic or "#" in topic:
        validate_topic_name(topic)  # raises TOPIC_NAME_INVALID (3.3.2.1, 4.7.1)
    pos = stop
    if qos:
        if pos + 2 > end:
            raise _malformed("PUBLISH: packet ends before its packet identifier")
        packet_id = (buf[pos] << 8) | buf[pos + 1]
        if not packet_id:
            raise _violation("PUBLISH: QoS > 0 with packet identifier 0 (2.2.1)", level)
        pos += 2
    else:
        packet_id = None
        if flags & 0x08:
            # 3.3.1.1: DUP must be 0 for QoS 0.
            raise _violation("PUBLISH: DUP flag set on a QoS 0 message (3.3.1.1)", level)
    if level == MQTT_5:
        if pos < end and buf[pos] == 0:
            props = _new_properties()
            pos += 1
        else:
            props, pos = _read_properties(buf, pos, end, _PUBLISH)
        if not topic and props.topic_alias is None:
            # 5.0 §3.3.2.3.4: a zero-length topic name needs a topic alias.
            raise MqttProtocolError(
                "PUBLISH: empty topic name without a topic alias (5.0 §3.3.2.3.4)",
                ReasonCode.PROTOCOL_ERROR,
            )
    else:
        props = _new_properties()
        if not topic:
            raise MqttProtocolError(
                "PUBLISH: empty topic name (3.1.1 §4.7.3)", ReasonCode.TOPIC_NAME_INVALID
            )
    # Slot stores instead of the dataclass __init__: measurably cheaper on the hottest path.
    packet = _new(Publish)
    packet.topic = topic
    packet.payload = buf[pos:end]
    packet.qos = qos
    packet.retain = (flags & 0x01) != 0
    packet.dup = (flags & 0x08) != 0
    packet.packet_id = packet_id
    packet.properties = props
    return packet


def _ack_decoder(cls: type, ptype: int, codes: frozenset[int]):
    name = PacketType(ptype).name

    def decode(buf: bytes, pos: int, end: int, flags: int, level: int):
        length = end - pos
        packet_id, pos = _read_packet_id(buf, pos, end, name, level)
        if level == MQTT_311:
            if length != 2:  # 3.1.1 §3.4.1 and the like: remaining length is exactly 2
                raise _malformed(f"{name}: remaining length {length}, expected 2 in 3.1.1")
            return cls(packet_id, 0, _new_properties())
        # 5.0 §3.4.2.1 and §3.4.2.2.1 (same for PUBREC/PUBREL/PUBCOMP): length 2 means
        # success without properties; below 4 the property length is absent.
        if length == 2:
            return cls(packet_id, 0, _new_properties())
        code = buf[pos]
        if code not in codes:
            raise MqttProtocolError(
                f"{name}: 0x{code:02X} is not a {name} reason code", ReasonCode.PROTOCOL_ERROR
            )
        if length == 3:
            return cls(packet_id, code, _new_properties())
        props, pos = _read_properties(buf, pos + 1, end, ptype)
        _check_end(pos, end, name)
        return cls(packet_id, code, props)

    return decode


def _decode_subscribe(buf: bytes, pos: int, end: int, flags: int, level: int) -> Subscribe:
    packet_id, pos = _read_packet_id(buf, pos, end, "SUBSCRIBE", level)
    if level == MQTT_5:
        props, pos = _read_properties(buf, pos, end, PacketType.SUBSCRIBE)
    else:
        props = _new_properties()
    subscriptions = []
    # Filters are only decoded here; judging them (SUBACK 0x8F per filter, or a disconnect) is
    # the session's call, see validate_topic_filter and parse_shared.
    while pos < end:
        topic_filter, pos = _read_str(buf, pos, end, "SUBSCRIBE topic filter")
        if pos >= end:
            raise _malformed("SUBSCRIBE: topic filter without its options byte")
        options = buf[pos]
        pos += 1
        qos = options & 0x03
        if level == MQTT_311:
            # 3.1.1 §3.8.3.1: the upper six bits are reserved; QoS 3 is malformed as well.
            if options & 0xFC:
                raise _malformed(f"SUBSCRIBE: reserved option bits set (0x{options:02X})")
            if qos == 3:
                raise _malformed("SUBSCRIBE: requested QoS 3")
            subscriptions.append(Subscription(topic_filter, qos))
            continue
        # 5.0 §3.8.3.1: bits 7-6 reserved (malformed); QoS 3 and Retain Handling 3 are
        # protocol errors.
        if options & 0xC0:
            raise _malformed(f"SUBSCRIBE: reserved option bits 6-7 set (0x{options:02X})")
        if qos == 3:
            raise MqttProtocolError("SUBSCRIBE: maximum QoS 3", ReasonCode.PROTOCOL_ERROR)
        retain_handling = (options >> 4) & 0x03
        if retain_handling == 3:
            raise MqttProtocolError("SUBSCRIBE: retain handling 3", ReasonCode.PROTOCOL_ERROR)
        subscriptions.append(
            Subscription(topic_filter, qos, bool(options & 0x04), bool(options & 0x08),
                         retain_handling)
        )
    if not subscriptions:
        # 3.1.1 §3.8.3, 5.0 §3.8.3: at least one topic filter.
        raise _violation("SUBSCRIBE without any topic filter", level)
    return Subscribe(packet_id, subscriptions, props)


def _decode_suback(buf: bytes, pos: int, end: int, flags: int, level: int) -> Suback:
    packet_id, pos = _read_packet_id(buf, pos, end, "SUBACK", level)
    if level == MQTT_5:
        props, pos = _read_properties(buf, pos, end, PacketType.SUBACK)
        allowed = SUBACK_REASON_CODES
    else:
        props = _new_properties()
        allowed = SUBACK_RETURN_CODES_311
    codes = list(buf[pos:end])
    if not codes:
        raise _violation("SUBACK without any return code (3.9.3)", level)
    for code in codes:
        if code not in allowed:
            raise _violation(f"SUBACK: 0x{code:02X} is not a SUBACK code (3.9.3)", level)
    return Suback(packet_id, codes, props)


def _decode_unsubscribe(buf: bytes, pos: int, end: int, flags: int, level: int) -> Unsubscribe:
    packet_id, pos = _read_packet_id(buf, pos, end, "UNSUBSCRIBE", level)
    if level == MQTT_5:
        props, pos = _read_properties(buf, pos, end, PacketType.UNSUBSCRIBE)
    else:
        props = _new_properties()
    filters = []
    while pos < end:
        topic_filter, pos = _read_str(buf, pos, end, "UNSUBSCRIBE topic filter")
        filters.append(topic_filter)
    if not filters:
        raise _violation("UNSUBSCRIBE without any topic filter (3.10.3)", level)
    return Unsubscribe(packet_id, filters, props)


def _decode_unsuback(buf: bytes, pos: int, end: int, flags: int, level: int) -> Unsuback:
    length = end - pos
    packet_id, pos = _read_packet_id(buf, pos, end, "UNSUBACK", level)
    if level == MQTT_311:
        if length != 2:
            raise _malformed(f"UNSUBACK: remaining length {length}, expected 2 in 3.1.1")
        return Unsuback(packet_id, [], _new_properties())
    props, pos = _read_properties(buf, pos, end, PacketType.UNSUBACK)
    codes = list(buf[pos:end])
    if not codes:
        raise _violation("UNSUBACK without any reason code (5.0 §3.11.3)", level)
    for code in codes:
        if code not in UNSUBACK_REASON_CODES:
            raise _violation(f"UNSUBACK: 0x{code:02X} is not an UNSUBACK reason code", level)
    return Unsuback(packet_id, codes, props)


def _decode_pingreq(buf: bytes, pos: int, end: int, flags: int, level: int) -> Pingreq:
    if pos != end:
        raise _malformed(f"PINGREQ: remaining length {end - pos}, expected 0 (3.12)")
    return Pingreq()


def _decode_pingresp(buf: bytes, pos: int, end: int, flags: int, level: int) -> Pingresp:
    if pos != end:
        raise _malformed(f"PINGRESP: remaining length {end - pos}, expected 0 (3.13)")
    return Pingresp()


def _decode_disconnect(buf: bytes, pos: int, end: int, flags: int, level: int) -> Disconnect:
    if level == MQTT_311:
        if pos != end:
            raise _malformed(f"DISCONNECT: remaining length {end - pos}, expected 0 in 3.1.1")
        return Disconnect(0, _new_properties())
    # 5.0 §3.14.2.1-3.14.2.2.1: no byte means normal disconnection; one byte is the reason
    # code without properties.
    if pos == end:
        return Disconnect(0, _new_properties())
    code = buf[pos]
    if code not in DISCONNECT_REASON_CODES:
        raise MqttProtocolError(
            f"DISCONNECT: 0x{code:02X} is not a DISCONNECT reason code (5.0 §3.14.2.1)",
            ReasonCode.PROTOCOL_ERROR,
        )
    if end - pos == 1:
        return Disconnect(code, _new_properties())
    props, pos = _read_properties(buf, pos + 1, end, PacketType.DISCONNECT)
    _check_end(pos, end, "DISCONNECT")
    return Disconnect(code, props)


def _decode_auth(buf: bytes, pos: int, end: int, flags: int, level: int) -> Auth:
    # 5.0 §3.15.2.1: reason code and property length are left out together (remaining length
    # 0, success); unlike DISCONNECT there is no form with the reason code alone.
    if pos == end:
        return Auth(0, _new_properties())
    code = buf[pos]
    if code not in AUTH_REASON_CODES:
        raise MqttProtocolError(
            f"AUTH: 0x{code:02X} is not an AUTH reason code (5.0 §3.15.2.1)",
            ReasonCode.PROTOCOL_ERROR,
        )
    props, pos = _read_properties(buf, pos + 1, end, PacketType.AUTH)
    _check_end(pos, end, "AUTH")
    return Auth(code, props)


_DECODERS = (
    None,
    _decode_connect,
    _decode_connack,
    _decode_publish,
    _ack_decoder(Puback, PacketType.PUBACK, PUBACK_REASON_CODES),
    _ack_decoder(Pubrec, PacketType.PUBREC, PUBACK_REASON_CODES),
    _ack_decoder(Pubrel, PacketType.PUBREL, PUBREL_REASON_CODES),
    _ack_decoder(Pubcomp, PacketType.PUBCOMP, PUBREL_REASON_CODES),
    _decode_subscribe,
    _decode_suback,
    _decode_unsubscribe,
    _decode_unsuback,
    _decode_pingreq,
    _decode_pingresp,
    _decode_disconnect,
    _decode_auth,
)


# Fixed-header flags each packet type must carry (3.1.1 §2.2.2, 5.0 §2.1.3 table); PUBLISH
# carries DUP/QoS/RETAIN instead.
_REQUIRED_FLAGS = {
    PacketType.PUBREL: 0b0010,
    PacketType.SUBSCRIBE: 0b0010,
    PacketType.UNSUBSCRIBE: 0b0010,
}


def _first_byte_error(first: int, level: int | None) -> str | None:
    """Why `first` cannot start a packet at `level`, or None when it can."""
    ptype, flags = first >> 4, first & 0x0F
    if ptype == 0:
        return "packet type 0 is reserved (2.1.2)"
    if ptype == PacketType.AUTH and level == MQTT_311:
        return "packet type 15 is reserved in MQTT 3.1.1 (AUTH exists only in 5.0)"
    if ptype == PacketType.PUBLISH:
        if flags & 0x06 == 0x06:
            return "PUBLISH with QoS 3 (3.3.1.2)"
        return None
    required = _REQUIRED_FLAGS.get(ptype, 0)
    if flags != required:
        return (
            f"{PacketType(ptype).name}: fixed header flags 0b{flags:04b}, must be "
            f"0b{required:04b} (3.1.1 §2.2.2, 5.0 §2.1.3)"
        )
    return None


_FIRST_OK_311 = bytes(_first_byte_error(b, MQTT_311) is None for b in range(256))
_FIRST_OK_5 = bytes(_first_byte_error(b, MQTT_5) is None for b in range(256))


# --------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------


class MqttParser:
    """Incremental MQTT packet parser: `feed(bytes)` returns every packet completed so far.

    `protocol_level` (4 or 5) selects the packet layouts. Left at None, the parser accepts only a
    CONNECT, reads the protocol level from it (CONNECT's own layout depends on nothing else), and
    from then on parses with that level. A server parser therefore needs no help; a client parser
    sets the level it sent in its CONNECT.

    Packets bigger than `max_packet_size` (whole packet, fixed header included, the way 5.0
    §3.1.2.11.4 counts) are refused as soon as their fixed header arrives, never buffered.
    """

    __slots__ = ("max_packet_size", "_level", "_chunks", "_pending", "_need", "_error")

    def __init__(
        self, *, max_packet_size: int = 1 << 20, protocol_level: int | None = None
    ) -> None:
        self.max_packet_size = max_packet_size
        self.protocol_level = protocol_level
        # Unparsed data, kept as a list of chunks so that a large packet trickling in costs one
        # join when it is complete rather than one copy per feed.
        self._chunks: list[bytes] = []
        self._pending = 0  # bytes held in _chunks
        self._need = 0  # size of the packet at the head of _chunks, once its header is known
        self._error: MqttProtocolError | None = None

    @property
    def protocol_level(self) -> int | None:
        return self._level

    @protocol_level.setter
    def protocol_level(self, level: int | None) -> None:
        if level is not None and level not in SUPPORTED_LEVELS:
            raise ValueError(
                f"unsupported MQTT protocol level {level!r}; expected {MQTT_311} (3.1.1), "
                f"{MQTT_5} (5.0) or None (read it from CONNECT)"
            )
        self._level = level

    @property
    def buffered(self) -> int:
        """Bytes held for a packet that has not completed yet."""
        return self._pending

    def feed(self, data: bytes) -> list[Packet]:
        """Add `data` and return every packet it completes, in order.

        Raises MqttProtocolError on bad input; the parser is dead afterwards and every later call
        raises an error with the same message and reason.
        """
        if self._error is not None:
            error = self._error
            raise MqttProtocolError(error.message, error.reason,
                                    protocol_level=error.protocol_level)
        if type(data) is not bytes:
            data = bytes(data)
        pending = self._pending + len(data)
        if pending < self._need:
            self._chunks.append(data)
            self._pending = pending
            return []
        if self._chunks:
            self._chunks.append(data)
            buf = b"".join(self._chunks)
            self._chunks = []
        else:
            buf = data
        out: list[Packet] = []
        try:
            pos, self._need = self._parse(buf, out)
        except MqttProtocolError as exc:
            exc.packets = out
            if exc.protocol_level is None:
                exc.protocol_level = self._level
            self._error = exc
            self._pending = self._need = 0  # nothing more will be parsed; release the memory
            raise
        rest = len(buf) - pos
        if rest:
            self._chunks.append(buf[pos:] if pos else buf)
        self._pending = rest
        return out

    # The hot loop: `pos` walks `buf` packet by packet; nothing is copied but the fields.
    def _parse(self, buf: bytes, out: list) -> tuple[int, int]:
        end = len(buf)
        pos = 0
        level = self._level
        max_size = self.max_packet_size
        append = out.append
        first_ok = _FIRST_OK_311 if level == MQTT_311 else _FIRST_OK_5
        while pos < end:
            first = buf[pos]
            # Judge the first byte at once, so garbage is refused before a body is awaited.
            if not first_ok[first]:
                raise _malformed(_first_byte_error(first, level))  # type: ignore[arg-type]
            ptype = first >> 4
            if level is None and ptype != _CONNECT:
                # 3.1.1 §3.1, 5.0 §3.1: the first packet from a client must be CONNECT.
                raise MqttProtocolError(
                    f"expected CONNECT as the first packet, got {PacketType(ptype).name}",
                    ReasonCode.PROTOCOL_ERROR,
                )
            if pos + 1 >= end:
                return pos, 0
            # Remaining Length (3.1.1 §2.2.3, 5.0 §2.1.4): one byte for bodies under 128 bytes,
            # two up to 16 KiB (inlined: that is where typical messages fall), else the loop.
            size = buf[pos + 1]
            if size < 0x80:
                body = pos + 2
            elif pos + 2 < end and 0 < buf[pos + 2] < 0x80:
                size = (size & 0x7F) | (buf[pos + 2] << 7)
                body = pos + 3
            else:
                size, body = _remaining_length(buf, pos, end)
                if body < 0:
                    return pos, 0  # the length itself is still incomplete
            stop = body + size
            if stop - pos > max_size:
                raise MqttProtocolError(
                    f"{PacketType(ptype).name} packet of {stop - pos} bytes exceeds the maximum "
                    f"packet size of {max_size} bytes (max_packet_size)",
                    ReasonCode.PACKET_TOO_LARGE,
                )
            if stop > end:
                return pos, stop - pos
            if ptype == _PUBLISH:
                append(_decode_publish(buf, body, stop, first & 0x0F, level))  # type: ignore
            else:
                packet = _DECODERS[ptype](buf, body, stop, first & 0x0F, level)
                if level is None:  # it was the CONNECT: its level now governs the stream
                    level = self._level = packet.protocol_level
                    first_ok = _FIRST_OK_311 if level == MQTT_311 else _FIRST_OK_5
                append(packet)
            pos = stop
        return pos, 0


def _remaining_length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode a multi-byte Remaining Length at buf[pos + 1:]; (size, body offset), or (0, -1)
    while incomplete. Five bytes, or a non-minimal encoding, are malformed (5.0 §1.5.5)."""
    value = 0
    shift = 0
    i = pos + 1
    limit = pos + 5
    while i < limit:
        if i >= end:
            return 0, -1
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            if byte == 0:
                raise _malformed("remaining length is not minimally encoded (5.0 §1.5.5)")
            return value, i
        shift += 7
    raise _malformed("remaining length longer than four bytes (3.1.1 §2.2.3, 5.0 §1.5.5)")


# --------------------------------------------------------------------------------------------
# Encoder (lenient: writes what it is given)
# --------------------------------------------------------------------------------------------

_pack_u16 = struct.Struct(">H").pack
_pack_u32 = struct.Struct(">I").pack
_VBI_SMALL = tuple(bytes((n,)) for n in range(128))
_BYTE1 = _VBI_SMALL + tuple(bytes((n,)) for n in range(128, 256))


def _vbi(value: int) -> bytes:
    """Encode a Variable Byte Integer (5.0 §1.5.5) in the fewest bytes."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"variable byte integer cannot be negative: {value}")
        return _VBI_SMALL[value]
    if value > MAX_VARIABLE_BYTE_INTEGER:
        raise ValueError(
            f"{value} does not fit a variable byte integer (max {MAX_VARIABLE_BYTE_INTEGER})"
        )
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _str(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0xFFFF:
        raise ValueError(f"string of {len(data)} bytes does not fit MQTT's 65535-byte limit")
    return _pack_u16(len(data)) + data


def _bin(data: bytes | str) -> bytes:
    if isinstance(data, str):
        data = data.encode()
    if len(data) > 0xFFFF:
        raise ValueError(f"binary data of {len(data)} bytes exceeds MQTT's 65535-byte limit")
    return _pack_u16(len(data)) + bytes(data)


_EMPTY_PROPERTIES = b"\x00"


def _compile_property_encoder():
    """Build `_property_parts(props)`: the encoded properties of `props` in identifier order.

    Unrolled over the table for the same reason as `_new_properties`: a getattr loop over 27
    slots would cost more than encoding the rest of a PUBLISH.
    """
    value_code = {
        _BYTE: "bytes((v,))",
        _U16: "_pack_u16(v)",
        _U32: "_pack_u32(v)",
        _STR: "_str(v)",
        _BIN: "_bin(v)",
    }
    lines = ["def _property_parts(p):", "    parts = []"]
    for ident, name, kind, _allowed, _check in _PROP_SPECS:
        head = bytes((ident,))
        lines.append(f"    v = p.{name}")
        if kind == _VBI:
            lines.append("    for x in v:")
            lines.append(f"        parts.append({head!r} + _vbi(x))")
        elif kind == _PAIR:
            lines.append("    for k, x in v:")
            lines.append(f"        parts.append({head!r} + _str(k) + _str(x))")
        else:
            lines.append("    if v is not None:")
            lines.append(f"        parts.append({head!r} + {value_code[kind]})")
    lines.append("    return parts")
    namespace = {
        "_vbi": _vbi, "_str": _str, "_bin": _bin, "_pack_u16": _pack_u16, "_pack_u32": _pack_u32,
    }
    exec("\n".join(lines), namespace)  # noqa: S102 - source built from the constant table
    return namespace["_property_parts"]


_property_parts = _compile_property_encoder()


def _encode_properties(props: Properties) -> bytes:
    """The property block (length + properties in identifier order); writes every set field,
    allowed in the packet or not."""
    parts = _property_parts(props)
    if not parts:
        return _EMPTY_PROPERTIES
    block = b"".join(parts)
    return _vbi(len(block)) + block


def _packet(first: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return _BYTE1[first] + _vbi(len(body)) + body


def _encode_connect(p: Connect, level: int) -> bytes:
    flags = 0x02 if p.clean_start else 0
    will = p.will
    if will is not None:
        flags |= 0x04 | ((will.qos & 0x03) << 3) | (0x20 if will.retain else 0)
    if p.username is not None:
        flags |= 0x80
    if p.password is not None:
        flags |= 0x40
    parts = [
        _str(p.protocol_name), bytes((p.protocol_level & 0xFF, flags)), _pack_u16(p.keep_alive)
    ]
    if level == MQTT_5:
        parts.append(_encode_properties(p.properties))
    parts.append(_str(p.client_id))
    if will is not None:
        if level == MQTT_5:
            parts.append(_encode_properties(will.properties))
        parts.append(_str(will.topic))
        parts.append(_bin(will.payload))
    if p.username is not None:
        parts.append(_str(p.username))
    if p.password is not None:
        parts.append(_bin(p.password))
    return _packet(0x10, *parts)


def _encode_connack(p: Connack, level: int) -> bytes:
    head = bytes((0x01 if p.session_present else 0, p.reason_code))
    if level == MQTT_311:
        return b"\x20\x02" + head
    return _packet(0x20, head, _encode_properties(p.properties))


def _encode_publish(p: Publish, level: int) -> bytes:
    topic = p.topic.encode()
    if len(topic) > 0xFFFF:
        raise ValueError(f"topic name of {len(topic)} bytes exceeds MQTT's 65535-byte limit")
    qos = p.qos & 0x03
    first = 0x30 | (qos << 1)
    if p.retain:
        first |= 0x01
    if p.dup:
        first |= 0x08
    props = _encode_properties(p.properties) if level == MQTT_5 else b""
    payload = p.payload
    if qos:
        if p.packet_id is None:
            raise ValueError("a PUBLISH with QoS > 0 needs a packet_id")
        size = len(topic) + len(props) + len(payload) + 4
        head = _pack_u16(len(topic)) + topic + _pack_u16(p.packet_id)
    else:
        size = len(topic) + len(props) + len(payload) + 2
        head = _pack_u16(len(topic)) + topic
    if size < 0x80:
        return b"".join((_BYTE1[first], _VBI_SMALL[size], head, props, payload))
    return b"".join((_BYTE1[first], _vbi(size), head, props, payload))


def _ack_encoder(first: int):
    def encode_ack(p: Puback, level: int) -> bytes:
        if level == MQTT_311:
            return _BYTE1[first] + b"\x02" + _pack_u16(p.packet_id)
        # 5.0 §3.4.2.1 etc.: the shortest form that says it all.
        if p.properties.is_empty():
            if not p.reason_code:
                return _BYTE1[first] + b"\x02" + _pack_u16(p.packet_id)
            return _BYTE1[first] + b"\x03" + _pack_u16(p.packet_id) + bytes((p.reason_code,))
        return _packet(first, _pack_u16(p.packet_id), bytes((p.reason_code,)),
                       _encode_properties(p.properties))

    return encode_ack


def _subscription_options(s: Subscription) -> int:
    options = s.qos & 0x03
    if s.no_local:
        options |= 0x04
    if s.retain_as_published:
        options |= 0x08
    return options | ((s.retain_handling & 0x03) << 4)


def _encode_subscribe(p: Subscribe, level: int) -> bytes:
    parts = [_pack_u16(p.packet_id)]
    if level == MQTT_5:
        parts.append(_encode_properties(p.properties))
    for s in p.subscriptions:
        parts.append(_str(s.topic_filter) + _BYTE1[_subscription_options(s)])
    return _packet(0x82, *parts)


def _encode_suback(p: Suback, level: int) -> bytes:
    props = _encode_properties(p.properties) if level == MQTT_5 else b""
    return _packet(0x90, _pack_u16(p.packet_id), props, bytes(p.reason_codes))


def _encode_unsubscribe(p: Unsubscribe, level: int) -> bytes:
    parts = [_pack_u16(p.packet_id)]
    if level == MQTT_5:
        parts.append(_encode_properties(p.properties))
    parts.extend(_str(f) for f in p.topic_filters)
    return _packet(0xA2, *parts)


def _encode_unsuback(p: Unsuback, level: int) -> bytes:
    if level == MQTT_311:
        return b"\xb0\x02" + _pack_u16(p.packet_id)  # 3.1.1 §3.11: no payload
    return _packet(0xB0, _pack_u16(p.packet_id), _encode_properties(p.properties),
                   bytes(p.reason_codes))


def _encode_pingreq(p: Pingreq, level: int) -> bytes:
    return b"\xc0\x00"


def _encode_pingresp(p: Pingresp, level: int) -> bytes:
    return b"\xd0\x00"


def _encode_disconnect(p: Disconnect, level: int) -> bytes:
    if level == MQTT_311:
        return b"\xe0\x00"
    # 5.0 §3.14.2.1-3.14.2.2.1: leave out what defaults.
    if p.properties.is_empty():
        if not p.reason_code:
            return b"\xe0\x00"
        return b"\xe0\x01" + bytes((p.reason_code,))
    return _packet(0xE0, bytes((p.reason_code,)), _encode_properties(p.properties))


def _encode_auth(p: Auth, level: int) -> bytes:
    if level == MQTT_311:
        raise ValueError("AUTH does not exist in MQTT 3.1.1 (use encode_raw to send type 15)")
    if not p.reason_code and p.properties.is_empty():
        return b"\xf0\x00"  # 5.0 §3.15.2.1
    return _packet(0xF0, bytes((p.reason_code,)), _encode_properties(p.properties))


_ENCODERS = {
    Connect: _encode_connect,
    Connack: _encode_connack,
    Publish: _encode_publish,
    Puback: _ack_encoder(0x40),
    Pubrec: _ack_encoder(0x50),
    Pubrel: _ack_encoder(0x62),
    Pubcomp: _ack_encoder(0x70),
    Subscribe: _encode_subscribe,
    Suback: _encode_suback,
    Unsubscribe: _encode_unsubscribe,
    Unsuback: _encode_unsuback,
    Pingreq: _encode_pingreq,
    Pingresp: _encode_pingresp,
    Disconnect: _encode_disconnect,
    Auth: _encode_auth,
}


def encode(packet: Packet, protocol_level: int) -> bytes:
    """Encode `packet` in the layout of `protocol_level` (4 = 3.1.1, 5 = 5.0).

    In 3.1.1 the 5.0-only fields (properties, ack and DISCONNECT reason codes) are left out.
    In 5.0 acknowledgements, DISCONNECT and AUTH take their shortest allowed form. Field values
    are written as given, without checking them against the rules the parser enforces; values
    that cannot be represented at all (a 70 kB string, a 300 reason code) raise ValueError.
    """
    if protocol_level != MQTT_5 and protocol_level != MQTT_311:
        raise ValueError(f"unsupported MQTT protocol level {protocol_level!r}; expected 4 or 5")
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise TypeError(f"not an MQTT packet: {packet!r}")
    try:
        return encoder(packet, protocol_level)
    except (struct.error, OverflowError) as exc:
        raise ValueError(f"cannot encode {packet!r}: {exc}") from None


def encode_raw(
    packet_type: int, flags: int, body: bytes = b"", *, remaining_length: int | None = None
) -> bytes:
    """Encode a packet verbatim: any type and flags nibble, `body` as the rest, no checks.

    For tests that need bad input. `remaining_length` overrides the length written in the fixed
    header (e.g. to claim more bytes than follow).
    """
    if not 0 <= packet_type <= 15 or not 0 <= flags <= 15:
        raise ValueError("packet_type and flags are four-bit values")
    length = len(body) if remaining_length is None else remaining_length
    return _BYTE1[(packet_type << 4) | flags] + _vbi(length) + bytes(body)


# --------------------------------------------------------------------------------------------
# Topic names and filters (4.7), shared subscriptions (5.0 §4.8.2)
# --------------------------------------------------------------------------------------------


def _check_topic_text(text: str | bytes, what: str, reason: ReasonCode) -> str:
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode()
        except UnicodeDecodeError:
            raise MqttProtocolError(f"{what} is not well-formed UTF-8", reason) from None
    if not text:
        raise MqttProtocolError(f"{what} is empty (4.7.3)", reason)
    if "\x00" in text:
        raise MqttProtocolError(f"{what} contains U+0000 (4.7.3)", reason)
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise MqttProtocolError(f"{what} holds an unpaired surrogate (1.5.4)", reason) from None
    if size > 0xFFFF:
        raise MqttProtocolError(f"{what} is longer than 65535 bytes (4.7.3)", reason)
    return text


def validate_topic_name(name: str | bytes) -> str:
    """Check a topic name (for PUBLISH and wills) and return it as str.

    Raises MqttProtocolError(TOPIC_NAME_INVALID) when it is empty, holds a wildcard (4.7.1,
    3.3.2.1), U+0000 or an unpaired surrogate, or exceeds 65535 UTF-8 bytes.
    """
    name = _check_topic_text(name, "topic name", ReasonCode.TOPIC_NAME_INVALID)
    if "+" in name or "#" in name:
        raise MqttProtocolError(
            f"topic name {name[:60]!r} contains a wildcard (4.7.1, 3.3.2.1)",
            ReasonCode.TOPIC_NAME_INVALID,
        )
    return name


def validate_topic_filter(topic_filter: str | bytes) -> str:
    """Check a topic filter (SUBSCRIBE, UNSUBSCRIBE) and return it as str.

    Wildcards (4.7.1.2, 4.7.1.3): '#' must be the last level and alone in it; '+' must be alone
    in its level. Raises MqttProtocolError(TOPIC_FILTER_INVALID).
    """
    text = _check_topic_text(topic_filter, "topic filter", ReasonCode.TOPIC_FILTER_INVALID)
    if "+" in text or "#" in text:
        levels = text.split("/")
        last = len(levels) - 1
        for i, level in enumerate(levels):
            if "#" in level and (level != "#" or i != last):
                raise MqttProtocolError(
                    f"topic filter {text[:60]!r}: '#' must be the whole last level (4.7.1.2)",
                    ReasonCode.TOPIC_FILTER_INVALID,
                )
            if "+" in level and level != "+":
                raise MqttProtocolError(
                    f"topic filter {text[:60]!r}: '+' must fill a whole level (4.7.1.3)",
                    ReasonCode.TOPIC_FILTER_INVALID,
                )
    return text


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Whether a (valid, non-shared) topic filter matches a (valid) topic name (4.7).

    '+' matches exactly one level, possibly empty; '#' matches any number of levels including
    none, so 'sport/#' matches 'sport' (4.7.1.2). A filter starting with a wildcard does not
    match topics starting with '$' (4.7.2). Strip a shared subscription's '$share/name/' prefix
    first (parse_shared).
    """
    if "+" not in topic_filter and "#" not in topic_filter:
        return topic_filter == topic
    if topic[:1] == "$" and topic_filter[0] in "+#":
        return False
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    count = len(t_levels)
    for i, level in enumerate(f_levels):
        if level == "#":
            return True
        if i >= count:
            return False
        if level != "+" and level != t_levels[i]:
            return False
    return len(f_levels) == count


_SHARE_PREFIX = "$share/"


def parse_shared(topic_filter: str) -> tuple[str | None, str]:
    """Split a shared subscription filter: '$share/group/a/b' -> ('group', 'a/b') (5.0 §4.8.2).

    A filter not starting with '$share/' comes back as (None, filter). Both parts are
    validated: the share name must be non-empty and hold no '/', '+' or '#', and a valid topic
    filter must follow it. Raises MqttProtocolError(TOPIC_FILTER_INVALID).
    """
    if not topic_filter.startswith(_SHARE_PREFIX):
        return None, validate_topic_filter(topic_filter)
    share, sep, inner = topic_filter[len(_SHARE_PREFIX):].partition("/")
    if not share:
        raise MqttProtocolError(
            f"shared subscription {topic_filter[:60]!r} has an empty share name (5.0 §4.8.2)",
            ReasonCode.TOPIC_FILTER_INVALID,
        )
    if "+" in share or "#" in share:
        raise MqttProtocolError(
            f"share name {share[:60]!r} contains a wildcard (5.0 §4.8.2)",
            ReasonCode.TOPIC_FILTER_INVALID,
        )
    if not sep or not inner:
        raise MqttProtocolError(
            f"shared subscription {topic_filter[:60]!r} has no topic filter after the share "
            "name (5.0 §4.8.2)",
            ReasonCode.TOPIC_FILTER_INVALID,
        )
    return share, validate_topic_filter(inner)
