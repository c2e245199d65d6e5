"""Write the committed seed corpus (fuzz/corpus/TARGET/NAME): `python -m fuzz.seeds`.

Small valid inputs of each format plus a few near-valid ones (one field wrong), each prefixed
with the target's control byte (fuzz/targets.py). Re-running rewrites the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

from reference_broker.protocols.mqtt.codec import (
    MQTT_5, MQTT_311, Connect, Disconnect, Pingreq, Properties, Puback, Publish, Pubrec, Pubrel,
    Subscribe, Subscription, Unsubscribe, Will, encode, encode_raw,
)
from reference_broker.protocols.stomp.codec import serialize_frame, serialize_raw

CORPUS = Path(__file__).resolve().parent / "corpus"
WHOLE, V10, V11, V12 = 0x00, 0x00, 0x40, 0x80  # control byte: version in the top bits, chunk 0


def stomp() -> dict[str, bytes]:
    connect = serialize_frame("CONNECT", [("accept-version", "1.2"), ("host", "h"), ("login", "u"),
                                          ("passcode", "p"), ("heart-beat", "0,1000")], b"", content_length=False)
    send = serialize_frame("SEND", [("destination", "/queue/a"), ("receipt", "r1"), ("k\\c", "v:w\nx")], b"hi\x00there")
    sub = serialize_frame("SUBSCRIBE", [("id", "1"), ("destination", "/topic/a.>"), ("ack", "client-individual"),
                                        ("selector", "p > 1 AND q LIKE 'a%'")], b"", content_length=False)
    return {
        "connect-12": bytes([V12]) + connect,
        "send-12": bytes([V12]) + send,
        "subscribe-12-chunked": bytes([V12 | 7]) + sub,
        "session-11": bytes([V11]) + b"\n".join([connect, send, sub, b"\n", serialize_frame(
            "ACK", [("id", "m1"), ("subscription", "1")], b"", "1.1", content_length=False)]),
        "send-10-no-length": bytes([V10]) + serialize_raw("SEND", [("destination", "/queue/a")], b"body"),
        "crlf-12": bytes([V12]) + serialize_raw("SEND", [("destination", "/queue/a")], b"x", eol="\r\n"),
        "bad-escape-12": bytes([V12]) + serialize_raw("SEND", [("destination", "/queue/a\\t")], b""),
        "short-content-length": bytes([V12]) + serialize_raw("SEND", [("content-length", "9")], b"abc"),
        "heartbeats": bytes([V12 | 1]) + b"\n\r\n\n" + send,
    }


def mqtt() -> dict[str, bytes]:
    auto, v4, v5 = 0x00, 0x40, 0x80
    c311 = encode(Connect(protocol_level=MQTT_311, clean_start=True, keep_alive=30, client_id="c1",
                          username="u", password=b"p", will=Will("w/t", b"bye", 1, True)), MQTT_311)
    c5 = encode(Connect(protocol_level=MQTT_5, clean_start=False, keep_alive=0, client_id="c5",
                        properties=Properties(session_expiry_interval=60, receive_maximum=10)), MQTT_5)
    out = {
        "connect-311": bytes([auto]) + c311,
        "connect-5": bytes([auto]) + c5,
        "connect-5-chunked": bytes([auto | 3]) + c5,
        "bad-level": bytes([auto]) + c311.replace(b"MQTT\x04", b"MQTT\x09"),
        "reserved-flag": bytes([auto]) + encode_raw(1, 1, c311[2:]),
    }
    for level, tag in ((MQTT_311, v4), (MQTT_5, v5)):
        props = Properties(message_expiry_interval=5, user_properties=[("k", "v")]) if level == MQTT_5 else Properties()
        session = b"".join(encode(p, level) for p in (
            Publish("a/b", b"payload", 1, packet_id=1, properties=props), Puback(7), Pubrec(8), Pubrel(8),
            Subscribe(2, [Subscription("a/+/c", 2), Subscription("$share/g/#", 1)]), Unsubscribe(3, ["a/#"]),
            Pingreq(), Publish("r", b"", 0, retain=True), Disconnect()))
        out[f"packets-{level}"] = bytes([tag]) + session
        out[f"packets-{level}-chunked"] = bytes([tag | 5]) + session
        out[f"publish-bad-topic-{level}"] = bytes([tag]) + encode(Publish("a/#", b"x", 0), level)
    return out


def amqp() -> dict[str, bytes]:
    from proton import Message
    from reference_broker.protocols.amqp.sasl import SaslServer

    payload = Message(body="hello", durable=True, priority=4, ttl=5.0, id="m1", subject="s",
                      correlation_id=7, reply_to="queue://r", group_id="g", group_sequence=3,
                      properties={"k": 1, "s": "v", "f": 1.5, "b": True}).encode()
    binary = Message(body=b"\x00\x01bin", content_type="application/octet-stream").encode()
    sasl = SaslServer._encode
    plain = b"AMQP\x03\x01\x00\x00" + sasl(0x41, ["PLAIN", b"\x00user\x00secret"]) + b"AMQP\x00\x01\x00\x00"
    return {
        "payload": bytes([0x80]) + payload,
        "payload-binary": bytes([0x80]) + binary,
        "payload-truncated": bytes([0x80]) + payload[:-3],
        "sasl-plain": bytes([0x00]) + plain,
        "sasl-plain-chunked": bytes([0x05]) + plain,
        "sasl-anonymous": bytes([0x00]) + b"AMQP\x03\x01\x00\x00" + sasl(0x41, ["ANONYMOUS", b"x"]),
        "no-sasl": bytes([0x00]) + b"AMQP\x00\x01\x00\x00\x00\x00\x00\x08\x02\x00\x00\x00",
        "wrong-header": bytes([0x00]) + b"AMQP\x01\x01\x00\x0a",
    }


def selector() -> dict[str, bytes]:
    texts = {
        "compare": "a > 1 AND b <> 'x'",
        "like": "p LIKE 'a%b_c' ESCAPE '!'",
        "like-wildcards": "p LIKE '%a%a%b'",
        "between-in": "a BETWEEN 1 AND 10 OR JMSType IN ('x', 'y')",
        "null-arith": "x IS NULL OR (a * 2 + b / 3) % 4 = -1.5E2",
        "headers": "JMSPriority >= 4 AND NOT (x = TRUE)",
        "hex-octal": "a = 0x1F OR a = 017 OR a = 12L OR a = 1.0d",
        "convert": "convert_string_expressions:a > '3'",
        "unterminated": "a = 'x",
        "deep": "(" * 30 + "a=1" + ")" * 30,
    }
    values = b"\0".join([b"5", b"x", b"aaab", b"4", b"y", b"true"])
    seeds = {name: text.encode() + b"\0" + values for name, text in texts.items()}
    # issue 20's attacks, kept as regression inputs: the backtracking LIKE against 100 a's in
    # every property, and a 5000-digit literal
    seeds["attack-like"] = b"p LIKE '%a%a%a%a%a%a%a%a%a%a%a%a%b'" + b"\0\0\0" + b"a" * 100
    seeds["attack-big-number"] = b"a = " + b"9" * 5000 + b"\0" + values
    return seeds


def config() -> dict[str, bytes]:
    toml = b"""name = "fuzz"
stomp = "127.0.0.1:0"
mqtt = "127.0.0.1:0"
data = "data"
[store]
[system_usage]
[mqtt_options]
[[policy_entries]]
queue = ">"
[security]
[[security.users]]
name = "u"
password = "p"
"""
    as_json = json.dumps({"name": "fuzz", "stomp": None, "amqp": "127.0.0.1:0",
                          "virtual_topics": [], "failover_peers": ["h:1"]}).encode()
    return {
        "toml": b"\x00" + toml,
        "toml-unknown-option": b"\x00" + toml + b"colour = 1\n",
        "toml-bad-port": b"\x00" + b'stomp = "127.0.0.1:99999"\n',
        "json": b"\x01" + as_json,
        "json-list": b"\x01[1, 2]",
        "empty-toml": b"\x00",
    }


def stomp_session() -> dict[str, bytes]:
    connect = serialize_frame("CONNECT", [("accept-version", "1.0,1.1,1.2"), ("host", "h")], b"",
                              content_length=False)
    frames = [
        serialize_frame("SUBSCRIBE", [("id", "1"), ("destination", "/queue/a"), ("ack", "client")], b"", content_length=False),
        serialize_frame("SEND", [("destination", "/queue/a"), ("receipt", "r1"), ("p", "7")], b"hello"),
        serialize_frame("SUBSCRIBE", [("id", "2"), ("destination", "/topic/t.>"), ("selector", "p > 3")], b"", content_length=False),
        serialize_frame("BEGIN", [("transaction", "tx")], b"", content_length=False),
        serialize_frame("SEND", [("destination", "/topic/t.x"), ("transaction", "tx"), ("p", "5")], b"in tx"),
        serialize_frame("COMMIT", [("transaction", "tx")], b"", content_length=False),
        serialize_frame("ACK", [("id", "x")], b"", content_length=False),
        serialize_frame("UNSUBSCRIBE", [("id", "1")], b"", content_length=False),
        serialize_frame("DISCONNECT", [("receipt", "bye")], b"", content_length=False),
    ]
    return {
        "session": bytes([0]) + connect + b"".join(frames),
        "session-chunked": bytes([9]) + connect + b"".join(frames),
        "no-connect": bytes([0]) + b"".join(frames[:2]),
        "temp-queue": bytes([0]) + connect + serialize_frame(
            "SEND", [("destination", "/temp-queue/r"), ("reply-to", "/temp-queue/r")], b"q"),
    }


def mqtt_session() -> dict[str, bytes]:
    out = {}
    for level in (MQTT_311, MQTT_5):
        props = Properties(session_expiry_interval=60) if level == MQTT_5 else Properties()
        connect = encode(Connect(protocol_level=level, clean_start=level == MQTT_5, keep_alive=0, client_id=f"c{level}",
                                 will=Will("w/t", b"bye", 1, False), properties=props), level)
        packets = b"".join(encode(p, level) for p in (
            Subscribe(1, [Subscription("a/#", 2), Subscription("$share/g/b", 1)]),
            Publish("a/b", b"one", 1, packet_id=2), Publish("a/c", b"two", 2, packet_id=3), Pubrel(3),
            Publish("r/x", b"kept", 0, retain=True), Puback(1), Pubrec(2), Unsubscribe(4, ["a/#"]),
            Pingreq(), Disconnect()))
        out[f"session-{level}"] = bytes([0]) + connect + packets
        out[f"session-{level}-chunked"] = bytes([7]) + connect + packets
    return out


def main() -> None:
    for target, make in (("stomp", stomp), ("mqtt", mqtt), ("amqp", amqp), ("selector", selector),
                         ("config", config), ("stomp-session", stomp_session), ("mqtt-session", mqtt_session)):
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in make().items():
            (folder / name).write_bytes(data)


if __name__ == "__main__":
    main()
