"""Hypothesis fuzzing of the STOMP front-end: garbage, mutated, truncated and oversized input never
crashes the broker, and a fresh client can always connect, send and receive afterwards.

Two layers:
* straight into `StompSession` with a fake transport (fast, many examples), which also checks that
  what the broker writes back is well-formed STOMP and that an ERROR is always the last frame
  ("ERROR": the server closes the connection after sending it);
* over real sockets against an in-process broker (few examples), covering the listener too.

Plus a round-trip property: any header name/value and any body a 1.1/1.2 client can express
("Value Encoding", "Header content-length") comes back unchanged in the MESSAGE.
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from machinery.waiting import poll
from reference_broker.config import StompConfig
from reference_broker.engine.broker import Broker
from reference_broker.protocols.stomp.codec import (
    HEARTBEAT,
    FrameLimits,
    StompParser,
    StompProtocolError,
    serialize_frame,
)
from reference_broker.protocols.stomp.session import StompSession
from tests.reference_broker.conftest import RunningBroker, assert_broker_works

pytestmark = pytest.mark.timeout(120)

LIMITS = dict(max_frame_size=4096, max_header_block=1024, max_headers=30, max_header_length=512)
# database=None: nothing written into the work tree; failures print their reproducing example.
FUZZ_SETTINGS = settings(max_examples=200, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow])
SOCKET_SETTINGS = settings(
    max_examples=25, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# ------------------------------------------------------------------------------- fake transport


class FakeTransport:
    """The `SessionTransport` the listener would provide, recording what the session does."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.paused = False
        self.writes_after_close = 0

    def write(self, data: bytes) -> None:
        if self.closed:
            self.writes_after_close += 1
        self.data += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def server_frames(data: bytes, version: str = "1.2") -> list:
    """Parse the broker's output as a client would; it must always be well-formed STOMP."""
    parser = StompParser(version="1.2")
    out = []
    # CONNECTED is never escaped and decides the version for what follows; parse frame by frame.
    for item in parser.feed(bytes(data)):
        if item is HEARTBEAT:
            continue
        out.append(item)
        if item.command == "CONNECTED":
            parser.version = item.get("version", "1.0")
    assert parser.buffered == 0, f"trailing partial frame in broker output: {bytes(data)[-200:]!r}"
    return out


def new_session(broker: Broker, options: StompConfig | None = None) -> tuple[StompSession, FakeTransport]:
    transport = FakeTransport()
    return StompSession(broker, transport, options or StompConfig(**LIMITS)), transport


def fresh_client_works(broker: Broker) -> None:
    """A new session on the same engine can connect, subscribe, send and receive."""
    session, transport = new_session(broker)
    dest = f"/queue/fresh.{uuid.uuid4().hex}"
    session.data_received(
        serialize_frame("CONNECT", [("accept-version", "1.2"), ("host", "h")], b"", "1.2", content_length=False)
        + serialize_frame("SUBSCRIBE", [("id", "1"), ("destination", dest)], b"", "1.2", content_length=False)
        + serialize_frame("SEND", [("destination", dest), ("receipt", "r")], b"alive", "1.2")
    )
    frames = server_frames(transport.data)
    assert [f.command for f in frames] == ["CONNECTED", "MESSAGE", "RECEIPT"], frames
    assert frames[1].body == b"alive"
    session.data_received(serialize_frame("DISCONNECT", [], b"", "1.2", content_length=False))
    assert transport.closed
    session.connection_lost()


def check_session_output(session: StompSession, transport: FakeTransport) -> None:
    frames = server_frames(transport.data)
    errors = [i for i, f in enumerate(frames) if f.command == "ERROR"]
    if errors:
        assert len(errors) == 1, frames
        assert errors[0] == len(frames) - 1, f"frames after the ERROR: {frames}"
        assert frames[-1].get("message"), frames[-1]
        assert transport.closed, "ERROR sent but the connection was not closed"
    assert transport.writes_after_close == 0 or not errors
    for f in frames:
        assert f.command in ("CONNECTED", "MESSAGE", "RECEIPT", "ERROR"), f


# ------------------------------------------------------------------------------- strategies

CONNECT = serialize_frame("CONNECT", [("accept-version", "1.0,1.1,1.2"), ("host", "h")], b"", "1.2",
                          content_length=False)

VALID_FRAMES = [
    serialize_frame("SEND", [("destination", "/queue/fz"), ("receipt", "r1")], b"hello", "1.2"),
    serialize_frame("SEND", [("destination", "/topic/fz"), ("persistent", "true"), ("priority", "7")], b"\x00bin\x00", "1.2"),
    serialize_frame("SEND", [("destination", "/queue/fz"), ("JMSXGroupID", "g"), ("a\\b", "c:d\ne")], b"", "1.2"),
    serialize_frame("SUBSCRIBE", [("id", "s1"), ("destination", "/queue/fz"), ("ack", "client")], b"", "1.2", content_length=False),
    serialize_frame("SUBSCRIBE", [("id", "s2"), ("destination", "/topic/fz"), ("selector", "x > 1")], b"", "1.2", content_length=False),
    serialize_frame("UNSUBSCRIBE", [("id", "s1")], b"", "1.2", content_length=False),
    serialize_frame("ACK", [("id", "1:ID:x")], b"", "1.2", content_length=False),
    serialize_frame("NACK", [("id", "1:ID:x")], b"", "1.2", content_length=False),
    serialize_frame("BEGIN", [("transaction", "t")], b"", "1.2", content_length=False),
    serialize_frame("COMMIT", [("transaction", "t")], b"", "1.2", content_length=False),
    serialize_frame("ABORT", [("transaction", "t")], b"", "1.2", content_length=False),
    serialize_frame("DISCONNECT", [("receipt", "bye")], b"", "1.2", content_length=False),
    b"\n", b"\r\n",
    CONNECT,
]

NASTY = [b"\x00", b"\n", b"\r", b":", b"\\", b"\\x", b"\xff\xfe", b"\n\n", b"content-length:",
         b"content-length:99999999999999999999999\n", b"content-length:-1\n", b"\xc3", b"CONNECT\n",
         b"SEND\n", b"\x00\x00\x00"]

valid_stream = st.lists(st.sampled_from(VALID_FRAMES), min_size=1, max_size=8).map(b"".join)


@st.composite
def mutated_stream(draw) -> bytes:
    data = bytearray(draw(valid_stream))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "delete", "insert", "nasty", "truncate", "duplicate"]))
        pos = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            i = min(pos, len(data) - 1)
            data[i] = draw(st.integers(0, 255))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "nasty":
            data[pos:pos] = draw(st.sampled_from(NASTY))
        elif op == "truncate":
            del data[pos:]
        elif op == "duplicate":
            data[pos:pos] = data[max(0, pos - 32):pos]
    return bytes(data)


@st.composite
def huge_headers(draw) -> bytes:
    command = draw(st.sampled_from([b"SEND", b"SUBSCRIBE", b"CONNECT", b"ACK"]))
    count = draw(st.integers(1, 60))
    length = draw(st.sampled_from([10, 100, 511, 512, 513, 1000, 5000, 70_000]))
    lines = b"".join(b"h%d:%s\n" % (i, b"v" * length) for i in range(count))
    terminate = draw(st.booleans())
    return command + b"\ndestination:/queue/x\n" + lines + (b"\nbody\x00" if terminate else b"")


garbage = st.one_of(
    st.binary(max_size=3000),
    mutated_stream(),
    valid_stream.flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n])),  # truncated
    huge_headers(),
)


@st.composite
def chunked(draw, data: bytes) -> list[bytes]:
    """Split `data` at random points (the network may deliver it in any pieces)."""
    if not data:
        return [data]
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=6))))
    pieces, last = [], 0
    for cut in cuts + [len(data)]:
        pieces.append(data[last:cut])
        last = cut
    return [p for p in pieces if p] or [data]


# ------------------------------------------------------------------------------- in-process


@pytest.fixture(scope="module")
def engine() -> Broker:
    broker = Broker()
    yield broker
    broker.close()


@FUZZ_SETTINGS
@given(data=st.data(), payload=garbage, connect_first=st.booleans())
def test_session_survives_garbage(engine, data, payload, connect_first):
    """Any byte stream, in any chunking, with or without a valid CONNECT first: the session never
    raises, writes only well-formed frames, ends with at most one ERROR (then closes), and the
    engine still serves a fresh client. The connection is released when the transport goes."""
    before = len(engine.connections)
    session, transport = new_session(engine)
    stream = (CONNECT if connect_first else b"") + payload
    for piece in data.draw(chunked(stream)):
        session.data_received(piece)
        if transport.closed:
            break
    check_session_output(session, transport)
    commands = [f.command for f in server_frames(transport.data)]
    event("ended with ERROR" if commands[-1:] == ["ERROR"] else "no ERROR")
    event("delivered a MESSAGE" if "MESSAGE" in commands else "no MESSAGE")
    session.connection_lost()
    assert len(engine.connections) == before
    # tick on a closed session must be harmless too
    session.tick(time.monotonic() + 3600, 0.25)
    fresh_client_works(engine)


@FUZZ_SETTINGS
@given(payload=garbage)
def test_parser_errors_are_protocol_errors(payload):
    """The codec raises only StompProtocolError on bad input (never IndexError, ValueError...),
    which is what the session turns into an ERROR frame."""
    parser = StompParser(FrameLimits(**LIMITS))
    try:
        parser.feed(payload)
    except StompProtocolError:
        pass


header_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=0, max_size=40,
)
header_name = header_text.filter(
    lambda n: n and n not in {
        "destination", "content-length", "receipt", "transaction", "persistent", "priority",
        "expires", "correlation-id", "reply-to", "type", "JMSXGroupID", "JMSXGroupSeq",
        "content-type", "message-id", "timestamp", "subscription", "ack", "redelivered",
        "JMSXDeliveryCount",
    }
)


@FUZZ_SETTINGS
@given(
    version=st.sampled_from(["1.1", "1.2"]),
    headers=st.dictionaries(header_name, header_text, max_size=6),
    body=st.binary(max_size=300),
    correlation=st.none() | header_text,
)
def test_header_and_body_round_trip(engine, version, headers, body, correlation):
    """"Value Encoding" + "Header content-length": whatever a 1.1/1.2 client can encode (any
    UTF-8 text except NUL; 1.1 cannot carry CR so it is left out there) comes back unchanged."""
    if version == "1.1":
        headers = {k.replace("\r", ""): v.replace("\r", "") for k, v in headers.items() if k.replace("\r", "")}
        correlation = correlation.replace("\r", "") if correlation is not None else None
    session, transport = new_session(engine, StompConfig())
    dest = f"/queue/rt.{uuid.uuid4().hex}"
    send_headers = [("destination", dest), *headers.items()]
    if correlation is not None:
        send_headers.append(("correlation-id", correlation))
    session.data_received(
        serialize_frame("CONNECT", [("accept-version", version), ("host", "h")], b"", "1.0", content_length=False)
        + serialize_frame("SUBSCRIBE", [("id", "s"), ("destination", dest)], b"", version, content_length=False)
        + serialize_frame("SEND", send_headers, body, version)
    )
    frames = server_frames(transport.data)
    assert [f.command for f in frames] == ["CONNECTED", "MESSAGE"], frames
    message = frames[1]
    assert message.body == body
    got = message.header_dict()
    for name, value in headers.items():
        assert got.get(name) == value, (name, value, message.headers)
    if correlation is not None:
        assert got["correlation-id"] == correlation
    session.connection_lost()


# ------------------------------------------------------------------------------- over sockets


@pytest.fixture(scope="module")
def socket_broker():
    running = RunningBroker({"stomp_options": LIMITS})
    yield running
    running.stop()


def _blast(address, payload: bytes, pieces: list[bytes]) -> None:
    with socket.create_connection(address, timeout=2) as sock:
        try:
            for piece in pieces:
                sock.sendall(piece)
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                if not sock.recv(65536):
                    break
        except (OSError, socket.timeout):
            pass  # the broker may close on us mid-send: fine


@SOCKET_SETTINGS
@given(data=st.data(), payload=garbage, connect_first=st.booleans())
def test_broker_survives_garbage_over_sockets(socket_broker, data, payload, connect_first):
    stream = (CONNECT if connect_first else b"") + payload
    _blast(socket_broker.address, stream, data.draw(chunked(stream)))
    assert_broker_works(socket_broker.address)


def test_no_connections_leak_after_socket_fuzzing(socket_broker):
    """After the fuzzing clients are gone, the broker holds no connection for them."""
    for payload in (b"\xff" * 100, CONNECT + b"SEND\ndestination:/queue/x\n\npartial", CONNECT + b"GARBAGE\n\n\x00"):
        _blast(socket_broker.address, payload, [payload])
    assert poll(socket_broker.connection_count, lambda n: n == 0, timeout=3, interval=0.02) == 0
    assert socket_broker.call(lambda: len(socket_broker.server._connections)) == 0
