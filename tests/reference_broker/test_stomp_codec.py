"""Tests of the sans-IO STOMP frame codec, on bytes only (no sockets)."""

from __future__ import annotations

import ast
import inspect
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.protocols.stomp import codec
from reference_broker.protocols.stomp.codec import (
    COMMANDS,
    HEARTBEAT,
    Frame,
    FrameLimits,
    Heartbeat,
    StompParser,
    StompProtocolError,
    encode_message_frame,
    escape_header,
    serialize_frame,
    serialize_raw,
    unescape_header,
)


def parse(data: bytes, version: str = "1.2", limits: FrameLimits | None = None) -> list:
    return StompParser(limits, version).feed(data)


def parse_one(data: bytes, version: str = "1.2", limits: FrameLimits | None = None) -> Frame:
    events = parse(data, version, limits)
    frames = [e for e in events if e is not HEARTBEAT]
    assert len(frames) == 1, events
    return frames[0]


def error_of(data: bytes, version: str = "1.2", limits: FrameLimits | None = None) -> str:
    with pytest.raises(StompProtocolError) as info:
        parse(data, version, limits)
    return info.value.message


# ------------------------------------------------------------------------------------------
# Frame structure
# ------------------------------------------------------------------------------------------


def test_basic_frame_body_runs_to_first_nul():
    frame = parse_one(b"SEND\ndestination:/queue/a\nreceipt:r1\n\nhello\x00")
    assert frame.command == "SEND"
    assert frame.headers == [("destination", "/queue/a"), ("receipt", "r1")]
    assert frame.body == b"hello"


def test_frame_without_headers_or_body():
    assert parse(b"DISCONNECT\n\n\x00") == [Frame("DISCONNECT", [], b"")]


def test_several_frames_in_one_feed_and_partial_tail_kept():
    parser = StompParser()
    events = parser.feed(b"BEGIN\ntransaction:t\n\n\x00COMMIT\ntransaction:t\n\n\x00ABO")
    assert [e.command for e in events] == ["BEGIN", "COMMIT"]
    assert parser.buffered == 3
    assert parser.feed(b"RT\ntransaction:t\n\n\x00") == [Frame("ABORT", [("transaction", "t")])]
    assert parser.buffered == 0


def test_content_length_body_may_contain_nul():
    body = b"a\x00b\x00\x00c"
    frame = parse_one(b"SEND\ndestination:/q\ncontent-length:6\n\n" + body + b"\x00")
    assert frame.body == body
    assert frame.get("content-length") == "6"


def test_content_length_zero():
    assert parse_one(b"SEND\ncontent-length:0\n\n\x00").body == b""


def test_content_length_body_waits_for_all_bytes_and_the_nul():
    parser = StompParser()
    assert parser.feed(b"SEND\ncontent-length:4\n\nab\x00") == []
    assert parser.feed(b"d") == []  # 4 bytes in, NUL still missing
    assert parser.feed(b"\x00") == [Frame("SEND", [("content-length", "4")], b"ab\x00d")]


def test_missing_nul_after_content_length_body():
    message = error_of(b"SEND\ncontent-length:3\n\nabcd\x00")
    assert "expected NUL" in message and "content-length" in message


@pytest.mark.parametrize("value", ["abc", "-1", "", " 5", "5 ", "+5", "1.5", "0x10", "\u0663"])
def test_bad_content_length(value):
    message = error_of(f"SEND\ncontent-length:{value}\n\nxyz\x00".encode())
    assert "content-length must be a non-negative integer" in message


def test_content_length_with_thousands_of_digits_is_a_protocol_error():
    # int() of >4300 digits raises ValueError in Python 3.11; the parser must not leak it.
    message = error_of(b"SEND\ncontent-length:" + b"9" * 5000 + b"\n\n\x00")
    assert "max_frame_size" in message


def test_header_names_are_case_sensitive():
    # "Content-Length" is not content-length, so the body runs to the first NUL.
    frame = parse_one(b"SEND\nContent-Length:1\n\nabc\x00")
    assert frame.body == b"abc"
    assert frame.get("content-length") is None
    assert frame.get("Content-Length") == "1"


def test_repeated_headers_first_wins_but_all_are_kept():
    frame = parse_one(b"MESSAGE\nfoo:World\nfoo:Hello\nbar:1\n\n\x00")
    assert frame.headers == [("foo", "World"), ("foo", "Hello"), ("bar", "1")]
    assert frame.get("foo") == "World"
    assert frame.header_dict() == {"foo": "World", "bar": "1"}
    assert frame.get("missing") is None
    assert frame.get("missing", "dflt") == "dflt"


def test_repeated_content_length_first_wins():
    frame = parse_one(b"SEND\ncontent-length:2\ncontent-length:5\n\nab\x00")
    assert frame.body == b"ab"


def test_first_colon_splits_and_empty_values_are_kept():
    frame = parse_one(b"SEND\nempty:\nurl:http://x:80/y\n\n\x00", version="1.0")
    assert frame.headers == [("empty", ""), ("url", "http://x:80/y")]


def test_header_values_are_not_trimmed():
    frame = parse_one(b"SEND\n key : v \n\n\x00")
    assert frame.headers == [(" key ", " v ")]


def test_header_line_without_colon():
    message = error_of(b"SEND\ndestination:/q\nnocolon\n\n\x00")
    assert "without ':'" in message and "nocolon" in message


def test_nul_inside_header_block_is_rejected_early():
    parser = StompParser()
    with pytest.raises(StompProtocolError, match="NUL octet inside the header block"):
        parser.feed(b"DISCONNECT\x00")  # no blank line before the NUL


def test_invalid_utf8_header_is_a_protocol_error():
    assert "UTF-8" in error_of(b"SEND\nname:\xff\xfe\n\n\x00")


def test_utf8_headers_are_decoded():
    frame = parse_one("SEND\ndestination:/queue/caf\u00e9\n\u00fc:\u20ac\n\n\x00".encode())
    assert frame.headers == [("destination", "/queue/caf\u00e9"), ("\u00fc", "\u20ac")]


# ------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_known_command_parses(command):
    assert parse_one(f"{command}\n\n\x00".encode()).command == command


def test_unknown_command():
    assert error_of(b"FOO\n\n\x00") == "unknown command 'FOO'"


def test_commands_are_case_sensitive():
    assert error_of(b"send\n\n\x00") == "unknown command 'send'"


def test_unknown_command_detected_as_soon_as_its_line_ends():
    parser = StompParser()
    with pytest.raises(StompProtocolError, match="unknown command 'GET / HTTP/1.1'"):
        parser.feed(b"GET / HTTP/1.1\n")  # header block not finished yet


def test_endless_command_line_is_rejected_after_a_few_bytes():
    parser = StompParser()
    fed = 0
    with pytest.raises(StompProtocolError, match="unknown command 'XXXXXXXXXXXXX'"):
        while True:
            fed += 1
            parser.feed(b"X")
    assert fed == len("UNSUBSCRIBE\r") + 1  # no command line can be longer
    assert parser.buffered == 0


def test_command_may_be_preceded_by_eols():
    events = parse(b"\n\n\r\nSEND\n\n\x00")
    assert events == [HEARTBEAT, HEARTBEAT, HEARTBEAT, Frame("SEND", [], b"")]


# ------------------------------------------------------------------------------------------
# Heart-beats and EOL handling
# ------------------------------------------------------------------------------------------


def test_heartbeat_is_a_singleton():
    assert Heartbeat() is HEARTBEAT
    assert pickle.loads(pickle.dumps(HEARTBEAT)) is HEARTBEAT
    assert repr(HEARTBEAT) == "HEARTBEAT"


def test_bare_eols_are_heartbeats():
    assert parse(b"\n") == [HEARTBEAT]
    assert parse(b"\n\n\n") == [HEARTBEAT] * 3
    assert parse(b"\r\n\r\n") == [HEARTBEAT] * 2  # 1.2: CRLF is one EOL


def test_heartbeats_between_and_after_frames():
    events = parse(b"SEND\n\na\x00\n\nSEND\n\nb\x00\r\n")
    assert events == [Frame("SEND", [], b"a"), HEARTBEAT, HEARTBEAT, Frame("SEND", [], b"b"),
                      HEARTBEAT]


def test_lone_cr_waits_for_its_lf():
    parser = StompParser()
    assert parser.feed(b"\r") == []
    assert parser.feed(b"\n") == [HEARTBEAT]


def test_crlf_frame_in_1_2():
    frame = parse_one(b"SEND\r\ndestination:/q\r\nreceipt:7\r\n\r\nbody\x00")
    assert frame == Frame("SEND", [("destination", "/q"), ("receipt", "7")], b"body")


def test_mixed_lf_and_crlf_lines_in_1_2():
    frame = parse_one(b"SEND\r\na:1\nb:2\r\n\nbody\x00")
    assert frame.headers == [("a", "1"), ("b", "2")]
    assert frame.body == b"body"


def test_crlf_content_length_frame_in_1_2():
    frame = parse_one(b"SEND\r\ncontent-length:3\r\n\r\n\r\n\x00\x00")
    assert frame.body == b"\r\n\x00"


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_cr_is_ordinary_data_before_1_2(version):
    frame = parse_one(b"SEND\nfoo:bar\r\n\n\x00", version=version)
    assert frame.headers == [("foo", "bar\r")]


def test_crlf_command_line_is_unknown_in_1_1():
    assert error_of(b"SEND\r\n\r\n\x00", version="1.1") == "unknown command 'SEND\\r'"


def test_version_setting():
    parser = StompParser()
    assert parser.version == "1.2"
    parser.version = "1.0"
    assert parser.version == "1.0"
    with pytest.raises(ValueError):
        parser.version = "2.0"
    with pytest.raises(ValueError):
        StompParser(version="1.3")


# ------------------------------------------------------------------------------------------
# Header escaping ("Value Encoding")
# ------------------------------------------------------------------------------------------


def test_escapes_decoded_in_1_2():
    frame = parse_one(b"SEND\na\\cb\\\\:x\\ny\\rz\\c\\\\\n\n\x00")
    assert frame.headers == [("a:b\\", "x\ny\rz:\\")]


def test_escapes_decoded_in_1_1_except_cr():
    frame = parse_one(b"SEND\nk:x\\ny\\cz\\\\\n\n\x00", version="1.1")
    assert frame.headers == [("k", "x\ny:z\\")]
    message = error_of(b"SEND\nk:x\\ry\n\n\x00", version="1.1")
    assert "invalid escape sequence '\\\\r'" in message


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@pytest.mark.parametrize("raw", [b"a\\tb", b"trailing\\", b"\\x41"])
def test_undefined_escape_is_fatal(version, raw):
    message = error_of(b"SEND\nk:" + raw + b"\n\n\x00", version=version)
    assert "invalid escape sequence" in message


def test_undefined_escape_in_header_name_is_fatal():
    assert "invalid escape sequence" in error_of(b"SEND\nk\\t:v\n\n\x00")


def test_1_0_does_no_unescaping():
    frame = parse_one(b"SEND\nk\\c:a\\nb\\tc\n\n\x00", version="1.0")
    assert frame.headers == [("k\\c", "a\\nb\\tc")]


@pytest.mark.parametrize("command", ["CONNECT", "CONNECTED"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_connect_and_connected_are_never_unescaped(command, version):
    data = f"{command}\npasscode:a\\tb\\nc\\\\\nlogin:x:y\n\n\x00".encode()
    frame = parse_one(data, version=version)
    assert frame.headers == [("passcode", "a\\tb\\nc\\\\"), ("login", "x:y")]


def test_stomp_command_is_unescaped_like_other_frames():
    # Only CONNECT and CONNECTED are exempt; a STOMP frame comes from a 1.2-aware client.
    frame = parse_one(b"STOMP\nlogin:a\\cb\n\n\x00")
    assert frame.headers == [("login", "a:b")]


def test_escape_and_unescape_helpers():
    assert escape_header("a:b\nc\\d\re", "1.2") == "a\\cb\\nc\\\\d\\re"
    assert escape_header("a:b\nc\\d\re", "1.1") == "a\\cb\\nc\\\\d\re"
    assert escape_header("a:b\nc", "1.0") == "a:b\nc"
    assert unescape_header("a\\cb\\nc\\\\d\\re", "1.2") == "a:b\nc\\d\re"
    assert unescape_header("a\\nb", "1.0") == "a\\nb"
    assert unescape_header("plain", "1.2") == "plain"
    # Backslash is decoded left to right: "\\\\n" is a backslash then "n", not a newline.
    assert unescape_header("\\\\n", "1.2") == "\\n"
    with pytest.raises(StompProtocolError):
        unescape_header("\\r", "1.1")


# ------------------------------------------------------------------------------------------
# Incremental feeding
# ------------------------------------------------------------------------------------------

STREAM = (
    b"\n"
    + b"CONNECT\naccept-version:1.2\nhost:/\nlogin:a\\b\n\n\x00\n"
    + serialize_frame("SEND", [("destination", "/q"), ("k:1", "v\n2")], b"bin\x00ary")
    + b"\r\n\r\n"
    + b"SEND\r\ndestination:/q\r\n\r\nno length\x00"
    + b"MESSAGE\nfoo:World\nfoo:Hello\n\n\x00"
    + serialize_frame("ERROR", {"message": "bad"}, b"")
)


def test_stream_parses_as_expected():
    events = parse(STREAM)
    assert events == [
        HEARTBEAT,
        Frame("CONNECT", [("accept-version", "1.2"), ("host", "/"), ("login", "a\\b")], b""),
        HEARTBEAT,
        Frame("SEND", [("destination", "/q"), ("k:1", "v\n2"), ("content-length", "7")],
              b"bin\x00ary"),
        HEARTBEAT,
        HEARTBEAT,
        Frame("SEND", [("destination", "/q")], b"no length"),
        Frame("MESSAGE", [("foo", "World"), ("foo", "Hello")], b""),
        Frame("ERROR", [("message", "bad"), ("content-length", "0")], b""),
    ]


def test_split_at_every_byte_boundary_matches_one_feed():
    expected = parse(STREAM)
    for cut in range(len(STREAM) + 1):
        parser = StompParser()
        events = parser.feed(STREAM[:cut]) + parser.feed(STREAM[cut:])
        assert events == expected, cut
        assert parser.buffered == 0


def test_byte_by_byte_matches_one_feed():
    parser = StompParser()
    events = []
    for i in range(len(STREAM)):
        events += parser.feed(STREAM[i : i + 1])
    assert events == parse(STREAM)


def test_empty_feed_is_harmless():
    parser = StompParser()
    assert parser.feed(b"") == []
    assert parser.feed(b"SEND\n\nab") == []
    assert parser.feed(b"") == []
    assert parser.feed(b"\x00") == [Frame("SEND", [], b"ab")]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_chunking_matches_one_feed(data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(STREAM)), max_size=12)))
    parser = StompParser()
    events = []
    start = 0
    for cut in [*cuts, len(STREAM)]:
        events += parser.feed(STREAM[start:cut])
        start = cut
    assert events == parse(STREAM)


# ------------------------------------------------------------------------------------------
# Errors leave the parser dead
# ------------------------------------------------------------------------------------------


def test_parser_is_dead_after_an_error():
    parser = StompParser()
    with pytest.raises(StompProtocolError) as first:
        parser.feed(b"FOO\n\n\x00")
    for data in (b"", b"SEND\n\n\x00"):
        with pytest.raises(StompProtocolError) as again:
            parser.feed(data)
        assert again.value.message == first.value.message
    assert parser.buffered == 0


def test_frames_before_the_error_travel_on_the_exception():
    parser = StompParser()
    with pytest.raises(StompProtocolError) as info:
        parser.feed(b"SEND\ndestination:/q\n\nkeep me\x00\nFOO\n\n\x00")
    assert info.value.frames == [Frame("SEND", [("destination", "/q")], b"keep me"), HEARTBEAT]


# ------------------------------------------------------------------------------------------
# Limits ("Size Limits")
# ------------------------------------------------------------------------------------------


def header_block_of(size: int) -> bytes:
    """A SEND header block (blank line included) of exactly `size` bytes, one header."""
    return b"SEND\na:" + b"x" * (size - 9) + b"\n\n"


def test_header_block_limit_boundary():
    limits = FrameLimits(max_header_block=1024)
    assert parse_one(header_block_of(1024) + b"\x00", limits=limits).command == "SEND"
    message = error_of(header_block_of(1025) + b"\x00", limits=limits)
    assert message == "header block of 1025 bytes exceeds 1024 bytes (max_header_block)"


def test_endless_header_block_rejected_without_buffering_past_the_limit():
    limits = FrameLimits(max_header_block=1024)
    parser = StompParser(limits)
    parser.feed(b"SEND\n")
    fed = 5
    with pytest.raises(StompProtocolError) as info:
        while True:
            parser.feed(b"h:vvvvvvv\n")  # 10 bytes, never a blank line
            fed += 10
            assert parser.buffered < 1024
    assert fed <= 1024 + 10
    assert info.value.message == "header block exceeds 1024 bytes (max_header_block)"


def test_header_count_limit_boundary():
    limits = FrameLimits(max_headers=5)
    ok = b"SEND\n" + b"h:v\n" * 5 + b"\n\x00"
    assert len(parse_one(ok, limits=limits).headers) == 5
    message = error_of(b"SEND\n" + b"h:v\n" * 6 + b"\n\x00", limits=limits)
    assert message == "SEND frame has 6 headers, more than 5 (max_headers)"


def test_header_count_limit_enforced_while_streaming():
    parser = StompParser(FrameLimits(max_headers=5))
    parser.feed(b"SEND\n")
    for _ in range(5):
        parser.feed(b"h:v\n")
    parser.feed(b"h:v")  # sixth header not complete yet
    with pytest.raises(StompProtocolError, match=r"more than 5 headers \(max_headers\)"):
        parser.feed(b"\n")


def test_header_line_limit_boundary():
    limits = FrameLimits(max_header_length=100)
    line = b"a:" + b"x" * 98  # exactly 100 bytes without its EOL
    assert parse_one(b"SEND\n" + line + b"\n\n\x00", limits=limits).get("a") == "x" * 98
    assert parse_one(b"SEND\r\n" + line + b"\r\n\r\n\x00", limits=limits).get("a") == "x" * 98
    message = error_of(b"SEND\n" + line + b"x\n\n\x00", limits=limits)
    assert message == "header line of 101 bytes exceeds 100 bytes (max_header_length)"


def test_endless_header_line_rejected_while_streaming():
    parser = StompParser(FrameLimits(max_header_length=100))
    parser.feed(b"SEND\na:")
    fed = 2
    with pytest.raises(StompProtocolError, match=r"exceeds 100 bytes \(max_header_length\)"):
        while True:
            parser.feed(b"x" * 10)
            fed += 10
    assert fed <= 100 + 10


def test_long_line_completed_inside_one_chunk_is_rejected_before_the_blank_line():
    parser = StompParser(FrameLimits(max_header_length=100))
    with pytest.raises(StompProtocolError, match="max_header_length"):
        parser.feed(b"SEND\na:" + b"x" * 200 + b"\nb:c\n")


def test_cr_of_a_crlf_is_not_counted_against_the_line_limit_while_streaming():
    parser = StompParser(FrameLimits(max_header_length=100))
    assert parser.feed(b"SEND\r\na:" + b"x" * 98 + b"\r") == []  # 101 bytes so far, CR pending
    assert parser.feed(b"\n\r\n\x00") == [Frame("SEND", [("a", "x" * 98)])]


def test_frame_size_limit_boundary():
    limits = FrameLimits(max_frame_size=1000)
    # SEND\n\n is 6 bytes, the NUL 1: a 993-byte body makes exactly 1000.
    assert len(parse_one(b"SEND\n\n" + b"b" * 993 + b"\x00", limits=limits).body) == 993
    message = error_of(b"SEND\n\n" + b"b" * 994 + b"\x00", limits=limits)
    assert message == "SEND frame of 1001 bytes exceeds 1000 bytes (max_frame_size)"


def test_endless_body_rejected_without_buffering_past_the_limit():
    parser = StompParser(FrameLimits(max_frame_size=1000))
    parser.feed(b"SEND\n\n")
    fed = 6
    with pytest.raises(StompProtocolError) as info:
        while True:
            parser.feed(b"b" * 100)
            fed += 100
            assert parser.buffered < 1000
    assert fed <= 1000 + 100
    assert "max_frame_size" in info.value.message and "1000" in info.value.message


def test_content_length_over_the_limit_rejected_before_the_body_arrives():
    limits = FrameLimits(max_frame_size=1000)
    body = b"b" * (1000 - len(b"SEND\ncontent-length:974\n\n") - 1)
    assert len(body) == 974
    assert parse_one(serialize_frame("SEND", [], body), limits=limits).body == body
    parser = StompParser(limits)
    with pytest.raises(StompProtocolError) as info:
        parser.feed(b"SEND\ncontent-length:975\n\n")
    assert info.value.message == (
        "SEND frame with content-length 975 exceeds 1000 bytes (max_frame_size)"
    )


def test_frame_size_limit_applies_to_a_header_block_still_arriving():
    parser = StompParser(FrameLimits(max_frame_size=50, max_header_block=1000))
    with pytest.raises(StompProtocolError, match=r"exceeds 50 bytes \(max_frame_size\)"):
        parser.feed(b"SEND\n" + b"h:v\n" * 20)


def test_default_limits():
    limits = FrameLimits()
    assert (limits.max_frame_size, limits.max_header_block, limits.max_headers,
            limits.max_header_length) == (10 * 1024 * 1024, 64 * 1024, 1000, 16 * 1024)
    parser = StompParser()
    with pytest.raises(StompProtocolError, match="max_header_block"):
        parser.feed(b"SEND\n" + b"h:" + b"v" * 1000 + b"\n" + (b"h:" + b"v" * 8000 + b"\n") * 9)


# ------------------------------------------------------------------------------------------
# Serialization
# ------------------------------------------------------------------------------------------


def test_serialize_adds_content_length_and_nul():
    data = serialize_frame("SEND", [("destination", "/q")], b"hi")
    assert data == b"SEND\ndestination:/q\ncontent-length:2\n\nhi\x00"


def test_serialize_keeps_a_given_content_length():
    data = serialize_frame("SEND", [("content-length", 2)], b"hi")
    assert data == b"SEND\ncontent-length:2\n\nhi\x00"


def test_serialize_without_content_length_and_from_a_dict():
    assert serialize_frame("RECEIPT", {"receipt-id": "7"}, content_length=False) == (
        b"RECEIPT\nreceipt-id:7\n\n\x00"
    )
    assert serialize_frame("DISCONNECT", [], content_length=False) == b"DISCONNECT\n\n\x00"


def test_serialize_accepts_any_iterable_of_pairs():
    pairs = (pair for pair in [("k:", "v"), ("n", 1)])
    assert serialize_frame("SEND", pairs, content_length=False) == b"SEND\nk\\c:v\nn:1\n\n\x00"


def test_serialize_escapes_per_version():
    headers = [("k:1", "a\nb\\c\rd")]
    assert serialize_frame("MESSAGE", headers, version="1.2", content_length=False) == (
        b"MESSAGE\nk\\c1:a\\nb\\\\c\\rd\n\n\x00"
    )
    assert serialize_frame("MESSAGE", headers, version="1.1", content_length=False) == (
        b"MESSAGE\nk\\c1:a\\nb\\\\c\rd\n\n\x00"
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([("k", "a\nb")], b"k:a\\nb"),  # one header, a LF and nothing else special
        ([("k", "a\\b")], b"k:a\\\\b"),
        ([("k", "a\rb")], b"k:a\\rb"),
        ([("a", "1"), ("k", "x\ny")], b"a:1\nk:x\\ny"),
        ([("k\n", "v")], b"k\\n:v"),
    ],
)
def test_serialize_escapes_each_special_character_on_its_own(headers, expected):
    data = serialize_frame("SEND", headers, content_length=False)
    assert data == b"SEND\n" + expected + b"\n\n\x00"
    assert parse_one(data).headers == headers


def test_serialize_escapes_only_the_headers_that_need_it():
    data = serialize_frame("MESSAGE", [("message-id", "ID:1:2"), ("plain", "v")],
                           content_length=False)
    assert data == b"MESSAGE\nmessage-id:ID\\c1\\c2\nplain:v\n\n\x00"


@pytest.mark.parametrize("command", ["CONNECT", "CONNECTED"])
def test_serialize_does_not_escape_connect_frames(command):
    data = serialize_frame(command, [("login", "a:b\\c")], content_length=False)
    assert data == f"{command}\nlogin:a:b\\c\n\n\x00".encode()
    with pytest.raises(ValueError, match="newline"):
        serialize_frame(command, [("login", "a\nforged:header")])


def test_serialize_1_0_does_not_escape_and_refuses_newlines():
    assert serialize_frame("SEND", [("k", "a:b\\")], version="1.0", content_length=False) == (
        b"SEND\nk:a:b\\\n\n\x00"
    )
    with pytest.raises(ValueError):
        serialize_frame("SEND", [("k", "a\nb")], version="1.0")


def test_serialize_raw_is_verbatim():
    assert serialize_raw("SEND", [("k", "a\\tb")], b"x") == b"SEND\nk:a\\tb\n\nx\x00"
    assert serialize_raw("SEND", {"a": "1"}, b"x", eol="\r\n", terminator=b"") == (
        b"SEND\r\na:1\r\n\r\nx"
    )
    assert "invalid escape" in error_of(serialize_raw("SEND", [("k", "a\\tb")]))


def test_encode_message_frame():
    data = encode_message_frame("/queue/a", "ID:b-1:1", "sub-0", b"hi", [("p", "v")], ack="42")
    assert data == (
        b"MESSAGE\nsubscription:sub-0\nmessage-id:ID\\cb-1\\c1\ndestination:/queue/a\n"
        b"ack:42\np:v\ncontent-length:2\n\nhi\x00"
    )
    frame = parse_one(data)
    assert frame.get("message-id") == "ID:b-1:1"
    assert frame.get("ack") == "42"
    assert encode_message_frame("/q", "1", "s", version="1.1") == (
        b"MESSAGE\nsubscription:s\nmessage-id:1\ndestination:/q\ncontent-length:0\n\n\x00"
    )


# ------------------------------------------------------------------------------------------
# Property tests
# ------------------------------------------------------------------------------------------

# Header text: drawn from the characters escaping is about (all together, or one at a time so
# that each must be caught on its own), or any Unicode except NUL and surrogates (which UTF-8
# cannot encode).
header_text = st.one_of(
    st.text(alphabet=":\\\n\rcnrt a\u00e9\u20ac\U0001f600", max_size=12),
    *(st.text(alphabet="ab" + special, max_size=6) for special in ":\\\n\r"),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
)
header_pairs = st.lists(
    st.tuples(header_text, header_text).filter(lambda pair: pair[0] != "content-length"),
    max_size=6,
)
escaped_commands = st.sampled_from(sorted(COMMANDS - {"CONNECT", "CONNECTED"}))


@settings(max_examples=100, deadline=None)
@given(
    version=st.sampled_from(["1.1", "1.2"]),
    command=escaped_commands,
    headers=header_pairs,
    body=st.binary(max_size=200),
)
def test_roundtrip_with_content_length(version, command, headers, body):
    data = serialize_frame(command, headers, body, version)
    frame = parse_one(data, version=version)
    assert frame.command == command
    assert frame.headers == [*headers, ("content-length", str(len(body)))]
    assert frame.body == body


@settings(max_examples=50, deadline=None)
@given(
    version=st.sampled_from(["1.1", "1.2"]),
    command=escaped_commands,
    headers=header_pairs,
    body=st.binary(max_size=100).map(lambda b: b.replace(b"\x00", b"")),
)
def test_roundtrip_without_content_length(version, command, headers, body):
    data = serialize_frame(command, headers, body, version, content_length=False)
    assert parse_one(data, version=version) == Frame(command, headers, body)


@settings(max_examples=40, deadline=None)
@given(
    version=st.sampled_from(["1.1", "1.2"]),
    frames=st.lists(st.tuples(escaped_commands, header_pairs, st.binary(max_size=50)),
                    max_size=4),
    data=st.data(),
)
def test_roundtrip_stream_with_heartbeats_in_random_chunks(version, frames, data):
    eol = b"\r\n" if version == "1.2" else b"\n"
    stream = b""
    expected: list = []
    for command, headers, body in frames:
        beats = data.draw(st.integers(0, 2))
        stream += eol * beats + serialize_frame(command, headers, body, version)
        expected += [HEARTBEAT] * beats
        expected.append(Frame(command, [*headers, ("content-length", str(len(body)))], body))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    parser = StompParser(version=version)
    events = []
    start = 0
    for cut in [*cuts, len(stream)]:
        events += parser.feed(stream[start:cut])
        start = cut
    assert events == expected
    assert parser.buffered == 0


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(["1.0", "1.1", "1.2"]),
    fixed=st.tuples(header_text, header_text, header_text, st.none() | header_text),
    headers=header_pairs,
    body=st.binary(max_size=20),
)
def test_encode_message_frame_matches_serialize_frame(version, fixed, headers, body):
    destination, message_id, subscription, ack = fixed
    pairs = [("subscription", subscription), ("message-id", message_id),
             ("destination", destination)]
    if ack is not None:
        pairs.append(("ack", ack))
    try:
        expected = serialize_frame("MESSAGE", pairs + headers, body, version)
    except ValueError:  # 1.0 cannot carry a newline
        with pytest.raises(ValueError):
            encode_message_frame(destination, message_id, subscription, body, headers, ack=ack,
                                 version=version)
        return
    assert encode_message_frame(destination, message_id, subscription, body, headers, ack=ack,
                                version=version) == expected


FRAGMENTS = [
    b"SEND", b"CONNECT", b"MESSAGE", b"FOO", b"\n", b"\n", b"\r\n", b"\r", b":", b"\x00",
    b"\\", b"\\n", b"\\t", b"content-length:", b"3", b"-1", b"99999999999999999999", b"a",
    b"\xff", b"\xc3", b"destination:/q", b"x" * 40,
]
garbage = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blob=garbage,
    version=st.sampled_from(["1.0", "1.1", "1.2"]),
    chunk=st.integers(1, 64),
    small_limits=st.booleans(),
)
def test_garbage_only_ever_raises_stomp_protocol_error(blob, version, chunk, small_limits):
    limits = (
        FrameLimits(max_frame_size=120, max_header_block=60, max_headers=3, max_header_length=20)
        if small_limits
        else FrameLimits()
    )
    parser = StompParser(limits, version)
    try:
        for i in range(0, len(blob), chunk):
            for event in parser.feed(blob[i : i + chunk]):
                assert event is HEARTBEAT or isinstance(event, Frame)
            # Nothing incomplete is ever held beyond the limits.
            assert parser.buffered < max(limits.max_frame_size, limits.max_header_block)
    except StompProtocolError as exc:
        assert exc.message


# ------------------------------------------------------------------------------------------
# Sans-IO
# ------------------------------------------------------------------------------------------


def test_codec_imports_no_io_modules():
    tree = ast.parse(inspect.getsource(codec))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & {"socket", "asyncio", "selectors", "ssl", "time"}
