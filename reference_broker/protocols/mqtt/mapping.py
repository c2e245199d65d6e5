"""How MQTT topics and PUBLISH properties map onto the engine's names and messages.

Topic names (ActiveMQ's MQTT transport convention, `MQTTProtocolSupport`):

* MQTT separates levels with `/`, the engine (ActiveMQ) with `.`: the two characters are
  *swapped*, so MQTT `a/b` is engine `a.b` and a `.` inside an MQTT level becomes `/`
  (MQTT `v1.2/x` is engine `v1/2.x`, a STOMP `/topic/x/y.z` is MQTT `x.y/z`). A swap is its own
  inverse, so the mapping is reversible and no MQTT level can leak into a second engine level.
* Filter wildcards map level by level: `+` (one level) to `*`, `#` (this level and every level
  below, including the parent itself, MQTT 3.1.1 4.7.1.2 / 5.0 4.7.1.2) to `>` — the engine's
  `>` also matches the parent, and its `*` also matches an empty level, as MQTT's do.
* Characters the engine would read as syntax are percent-escaped (`%XX` of their UTF-8 bytes):
  `*` and `>` (engine wildcards; MQTT allows them as literal characters, 4.7.3), `#` and `+`
  (the engine accepts `#` as `>`), `?` (starts destination parameters), white space (not
  allowed in engine names) and `%` itself. ActiveMQ swaps `*`/`+` and `>`/`#` instead, which
  would turn a literal `>` into the engine's `#` wildcard here; escaping keeps a literal a
  literal. Going back, only escapes of those characters are decoded; a literal `+` or `#` in an
  engine name (a STOMP producer may use one) cannot appear in an MQTT topic name (3.3.2) and is
  sent escaped. Known limit: an engine name that literally contains such an escape (`a%2Ab`,
  from another protocol) reaches MQTT subscribers decoded (`a*b`).
* `$`-topics (4.7.2): the engine's `>` and `*` match them like any other name, so the session
  checks each delivery and drops (acknowledges without sending) a `$` topic on a subscription
  whose filter starts with a wildcard. Shared subscription prefixes (`$share/group/`) never
  reach the engine: the group becomes the engine's `shared_name`.

Messages:

* An MQTT PUBLISH becomes a message on `topic://<engine name>`. QoS 1 and 2 are persistent,
  QoS 0 is not (as ActiveMQ does). The PUBLISH QoS is kept in the property `ActiveMQ.MQTT.QoS`
  (ActiveMQ's name) so every later delivery can use min(publish QoS, subscription QoS)
  (3.3.1.2 / 3.8.4). A message without that property (sent by another protocol) counts as
  QoS 2 when persistent (the subscription's QoS then decides) and QoS 0 when not; ActiveMQ
  itself does the reverse, which its own tracker lists as a bug.
* The retain flag becomes `ActiveMQ.Retain` = true (the engine's RETAIN_PROPERTY).
* MQTT 5.0 properties: Message Expiry Interval <-> `expiration` (absolute; deliveries carry the
  remaining lifetime, 3.3.2.3.3); Content Type <-> `content_type`; Response Topic <->
  `reply_to` (as `topic://<engine name>`); Correlation Data <-> `correlation_id` (the bytes as
  UTF-8 text; other bytes as hex text plus the property `ActiveMQ.MQTT.CorrelationData` = hex,
  so they come back byte for byte); Payload Format Indicator <-> `ActiveMQ.MQTT.PayloadFormat`;
  User Properties <-> message properties (strings), except that `JMSXGroupID`, `JMSXGroupSeq`
  (an integer) and `JMSType` set the message's group id, group sequence and type, so message
  groups and selectors work across protocols, and are sent back as user properties.
* Not carried: a user property name given more than once keeps only its last value (message
  properties are a map; MQTT allows repeats); user property order is kept except that the
  JMSX names move to the end; properties named like the internal ones above are ignored;
  non-string property values from other protocols are sent as their text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from ...engine.message import RETAIN_PROPERTY, Message
from ...engine.names import TOPIC, DestinationName

QOS_PROPERTY = "ActiveMQ.MQTT.QoS"  # ActiveMQ's MQTTProtocolConverter.QOS_PROPERTY_NAME
CORRELATION_DATA_PROPERTY = "ActiveMQ.MQTT.CorrelationData"  # hex, when not UTF-8
PAYLOAD_FORMAT_PROPERTY = "ActiveMQ.MQTT.PayloadFormat"
# Properties the MQTT layer sets for itself: never shown to MQTT 5 clients as user properties
# and never accepted from them.
INTERNAL_PROPERTIES = frozenset({RETAIN_PROPERTY, QOS_PROPERTY, CORRELATION_DATA_PROPERTY, PAYLOAD_FORMAT_PROPERTY})
# User properties that are message headers in the engine (JMS names).
_HEADER_PROPERTIES = ("JMSXGroupID", "JMSXGroupSeq", "JMSType")

_SWAP = str.maketrans({"/": ".", ".": "/"})
_NEEDS_ESCAPE = re.compile(r"[%*>#+?\s]")
_ESCAPE_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_MQTT_RESERVED = re.compile(r"[+#]")
# Escapes decoded on the way back to MQTT (every escape topic_to_engine can produce from a
# valid topic name; `+` and `#` never occur in one, so their escapes stay as they are).
_DECODABLE = frozenset("%*>?")


def _escape(match: re.Match) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode())


def _unescape(match: re.Match) -> str:
    text = match.group()
    try:
        decoded = bytes.fromhex(text.replace("%", "")).decode()
    except UnicodeDecodeError:
        return text
    out = []
    for ch in decoded:
        if ch in _DECODABLE or ch.isspace():
            out.append(ch)
        else:
            out.append("".join(f"%{byte:02X}" for byte in ch.encode()))
    return "".join(out)


@lru_cache(maxsize=8192)
def topic_to_engine(topic: str) -> str:
    """MQTT topic name (or one filter level) -> engine topic name (no `topic://` prefix)."""
    name = topic.translate(_SWAP)
    if _NEEDS_ESCAPE.search(name):
        name = _NEEDS_ESCAPE.sub(_escape, name)
    return name


@lru_cache(maxsize=8192)
def filter_to_engine(topic_filter: str) -> str:
    """MQTT topic filter (without any `$share/group/` prefix) -> engine wildcard pattern."""
    levels = []
    for level in topic_filter.split("/"):
        if level == "+":
            levels.append("*")
        elif level == "#":
            levels.append(">")
        else:
            levels.append(topic_to_engine(level))
    return ".".join(levels)


@lru_cache(maxsize=8192)
def engine_to_topic(name: str) -> str:
    """Engine topic name (no prefix) -> MQTT topic name; inverse of topic_to_engine."""
    topic = name.translate(_SWAP)
    if "%" in topic:
        topic = _ESCAPE_RUN.sub(_unescape, topic)
    if _MQTT_RESERVED.search(topic):
        topic = _MQTT_RESERVED.sub(_escape, topic)
    return topic


@lru_cache(maxsize=8192)
def topic_destination(topic: str) -> DestinationName:
    return DestinationName(TOPIC, topic_to_engine(topic))


@lru_cache(maxsize=4096)
def filter_destination(topic_filter: str) -> DestinationName:
    return DestinationName(TOPIC, filter_to_engine(topic_filter))


@lru_cache(maxsize=8192)
def mqtt_topic_of(canonical: str) -> str:
    """The MQTT topic name for a message's canonical destination (`topic://a.b` -> `a/b`).
    Queues have no MQTT form; their name is used as it is (it only matters for reply-to)."""
    kind, sep, name = canonical.partition("://")
    if not sep:
        return canonical
    if kind == TOPIC:
        return engine_to_topic(name)
    return canonical


def reply_to_from_response_topic(response_topic: str) -> str:
    return "topic://" + topic_to_engine(response_topic)


def response_topic_from_reply_to(reply_to: str) -> str:
    """A message's reply-to as an MQTT Response Topic: topics in either engine (`topic://X`) or
    STOMP (`/topic/X`) form are translated; anything else (a queue) is passed on as written."""
    if reply_to.startswith("topic://"):
        return engine_to_topic(reply_to[8:])
    if reply_to.startswith("/topic/"):
        return engine_to_topic(reply_to[7:])
    return reply_to


def is_dollar_topic(topic: str) -> bool:
    return topic.startswith("$")


def filter_starts_with_wildcard(topic_filter: str) -> bool:
    """MQTT 4.7.2: such filters must not match topic names beginning with `$`."""
    return topic_filter[:1] in ("+", "#")


# --------------------------------------------------------------------------- messages


def message_from_mqtt(
    *,
    message_id: str,
    destination: DestinationName,
    payload: bytes,
    qos: int,
    retain: bool,
    now_ms: int,
    expiry_interval: int | None = None,
    content_type: str | None = None,
    response_topic: str | None = None,
    correlation_data: bytes | None = None,
    user_properties: list[tuple[str, str]] | tuple = (),
    payload_format: int | None = None,
) -> Message:
    """An engine message for an MQTT PUBLISH (or a will message)."""
    properties: dict = {QOS_PROPERTY: qos}
    if retain:
        properties[RETAIN_PROPERTY] = True
    group_id = None
    group_seq = 0
    message_type = None
    for name, value in user_properties:
        if name in INTERNAL_PROPERTIES:
            continue  # a client must not forge the broker's own bookkeeping
        if name == "JMSXGroupID":
            group_id = value
        elif name == "JMSXGroupSeq" and _is_int(value):
            group_seq = int(value)
        elif name == "JMSType":
            message_type = value
        else:
            properties[name] = value
    correlation_id = None
    if correlation_data is not None:
        try:
            correlation_id = correlation_data.decode("utf-8")
        except UnicodeDecodeError:
            correlation_id = correlation_data.hex()
            properties[CORRELATION_DATA_PROPERTY] = correlation_id
    if payload_format is not None:
        properties[PAYLOAD_FORMAT_PROPERTY] = payload_format
    return Message(
        message_id=message_id,
        destination=destination.canonical,
        body=payload,
        properties=properties,
        persistent=qos > 0,
        timestamp=now_ms,
        expiration=now_ms + expiry_interval * 1000 if expiry_interval is not None else 0,
        correlation_id=correlation_id,
        reply_to=reply_to_from_response_topic(response_topic) if response_topic is not None else None,
        type=message_type,
        group_id=group_id,
        group_seq=group_seq,
        content_type=content_type,
    )


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def message_qos(message: Message) -> int:
    """The QoS the message was published with (see the module notes for foreign messages)."""
    qos = message.properties.get(QOS_PROPERTY)
    if isinstance(qos, int) and not isinstance(qos, bool) and 0 <= qos <= 2:
        return qos
    if isinstance(qos, str) and qos in ("0", "1", "2"):  # set by a STOMP producer, as text
        return int(qos)
    return 2 if message.persistent else 0


def published_with_retain(message: Message) -> bool:
    return message.properties.get(RETAIN_PROPERTY) is True


def remaining_expiry(message: Message, now_ms: int) -> int | None:
    """Seconds of lifetime left (rounded up), None if it never expires, 0 if expired."""
    if not message.expiration:
        return None
    left = message.expiration - now_ms
    if left <= 0:
        return 0
    return math.ceil(left / 1000)


@dataclass(slots=True)
class OutboundFields:
    """The MQTT 5 PUBLISH properties a message carries (apart from expiry, per delivery)."""

    content_type: str | None
    response_topic: str | None
    correlation_data: bytes | None
    payload_format: int | None
    user_properties: list[tuple[str, str]]


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def outbound_fields(message: Message) -> OutboundFields:
    properties = message.properties
    user = [(name, _text(value)) for name, value in properties.items() if name not in INTERNAL_PROPERTIES]
    if message.group_id is not None:
        user.append(("JMSXGroupID", message.group_id))
        if message.group_seq:
            user.append(("JMSXGroupSeq", str(message.group_seq)))
    if message.type is not None:
        user.append(("JMSType", message.type))
    correlation = None
    hex_data = properties.get(CORRELATION_DATA_PROPERTY)
    if isinstance(hex_data, str):
        try:
            correlation = bytes.fromhex(hex_data)
        except ValueError:
            correlation = None
    if correlation is None and message.correlation_id is not None:
        correlation = message.correlation_id.encode("utf-8")
    payload_format = properties.get(PAYLOAD_FORMAT_PROPERTY)
    return OutboundFields(
        content_type=message.content_type,
        response_topic=response_topic_from_reply_to(message.reply_to) if message.reply_to is not None else None,
        correlation_data=correlation,
        payload_format=payload_format if isinstance(payload_format, int) and payload_format in (0, 1) else None,
        user_properties=user,
    )
