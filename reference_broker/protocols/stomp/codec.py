"""Sans-IO STOMP 1.0 / 1.1 / 1.2 frame codec.

Bytes go in, `Frame` and `HEARTBEAT` events come out (`StompParser.feed`); frames go in, bytes
come out (`serialize_frame`). Nothing here touches sockets, asyncio or clocks, so the session
adapter owns all I/O and timing and every rule below can be tested on plain bytes.

Section names in comments refer to https://stomp.github.io/stomp-specification-1.2.html.

Wire format in one breath ("STOMP Frames", "Augmented BNF"): a command line, zero or more
`name:value` header lines, a blank line, the body, then a NUL octet. Lines end in LF; from 1.2 on a
CR may precede the LF. Extra EOLs between frames are heart-beats ("Heart-beating").

The parser is written for throughput: it scans with `bytearray.find`, decodes each header block
once, splits it with `str.split`/`str.partition`, skips unescaping when the block holds no
backslash, and consumes parsed frames by moving one offset, compacting the buffer once per `feed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Iterable, Mapping

__all__ = [
    "CLIENT_COMMANDS",
    "COMMANDS",
    "HEARTBEAT",
    "SERVER_COMMANDS",
    "VERSIONS",
    "Frame",
    "FrameLimits",
    "Heartbeat",
    "StompParser",
    "StompProtocolError",
    "encode_message_frame",
    "escape_header",
    "serialize_frame",
    "serialize_raw",
    "unescape_header",
]

VERSIONS = ("1.0", "1.1", "1.2")

CLIENT_COMMANDS = frozenset(
    ("CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT",
     "ABORT", "DISCONNECT")
)
SERVER_COMMANDS = frozenset(("CONNECTED", "MESSAGE", "RECEIPT", "ERROR"))
COMMANDS = CLIENT_COMMANDS | SERVER_COMMANDS

# "Value Encoding": CONNECT and CONNECTED stay unescaped in every version so that a 1.0 peer can
# still read them. The STOMP command is not on that list: only a 1.2-aware client sends it, and it
# escapes like any other frame.
_UNESCAPED_COMMANDS = frozenset(("CONNECT", "CONNECTED"))

# Longest command (UNSUBSCRIBE) plus a possible CR: a command line still growing past this without
# its LF cannot become a known command, so the parser gives up early instead of buffering it.
_MAX_COMMAND_LINE = max(map(len, COMMANDS)) + 1

# More digits than this cannot be a sane content-length; it also keeps int() away from Python's
# 4300-digit conversion limit, which would raise ValueError instead of StompProtocolError.
_MAX_CONTENT_LENGTH_DIGITS = 18


class StompProtocolError(Exception):
    """The peer broke the STOMP wire format; `.message` says what and, for limits, which limit.

    `.frames` holds the frames (and heart-beats) that parsed cleanly earlier in the same `feed`
    call, so the caller can still act on them (e.g. a SEND sent just before the garbage) before it
    answers with an ERROR frame and closes the connection.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.frames: list[Frame | Heartbeat] = []


class Heartbeat:
    """A bare EOL between frames ("Heart-beating"); only proves the peer is alive."""

    __slots__ = ()
    _instance: Heartbeat | None = None

    def __new__(cls) -> Heartbeat:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "HEARTBEAT"

    def __reduce__(self) -> str:
        return "HEARTBEAT"


HEARTBEAT = Heartbeat()


class Frame:
    """One parsed STOMP frame; header names and values are already unescaped.

    `headers` keeps wire order and repeated entries, because a relaying server may prepend
    updated values and keep older ones as history ("Repeated Header Entries"); lookups therefore
    take the first entry. The parser may hand over a dict instead (a block without repeated
    names, its common case); the list is then built only when someone asks for it. Treat both
    as read-only: assign a new list to change a frame's headers.
    """

    __slots__ = ("command", "_headers", "_dict", "body")

    def __init__(
        self,
        command: str,
        headers: list[tuple[str, str]] | dict[str, str] | None = None,
        body: bytes = b"",
    ) -> None:
        self.command = command
        if isinstance(headers, dict):
            self._dict: dict[str, str] | None = headers
            self._headers: list[tuple[str, str]] | None = None
        else:
            self._dict = None
            self._headers = headers if headers is not None else []
        self.body = body

    @property
    def headers(self) -> list[tuple[str, str]]:
        if self._headers is None:
            self._headers = list(self._dict.items())  # type: ignore[union-attr]
        return self._headers

    @headers.setter
    def headers(self, headers: list[tuple[str, str]]) -> None:
        self._headers = headers
        self._dict = None

    def get(self, name: str, default: str | None = None) -> str | None:
        """Value of the first `name` header, or `default`."""
        if self._dict is not None:
            return self._dict.get(name, default)
        for key, value in self._headers:  # type: ignore[union-attr]
            if key == name:
                return value
        return default

    def header_dict(self) -> dict[str, str]:
        """Headers as a dict (read-only; cached); the first occurrence of a repeated name wins."""
        if self._dict is None:
            # Building from the reversed list lets earlier entries overwrite later ones.
            self._dict = dict(reversed(self._headers))  # type: ignore[arg-type]
        return self._dict

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (
            self.command == other.command
            and self.headers == other.headers
            and self.body == other.body
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 64 else self.body[:64] + b"..."
        return f"Frame({self.command!r}, {self.headers!r}, {body!r})"


@dataclass(slots=True)
class FrameLimits:
    """Caps a server may put on untrusted input ("Size Limits"); every size is in bytes.

    The header block is everything before the body: command line, header lines and the blank
    line. A header line's length excludes its EOL. The frame size counts from the first byte of
    the command to the terminating NUL inclusive (heart-beat EOLs before it are not counted).
    """

    max_frame_size: int = 10 * 1024 * 1024
    max_header_block: int = 64 * 1024
    max_headers: int = 1000
    max_header_length: int = 16 * 1024


_DEFAULT_LIMITS = FrameLimits()


# --------------------------------------------------------------------------------------------
# Header value escaping ("Value Encoding")
# --------------------------------------------------------------------------------------------

# 1.1 introduced \n \c \\ ; 1.2 added \r because a raw CR before LF now reads as part of the EOL.
_UNESCAPES = {
    "1.1": {"n": "\n", "c": ":", "\\": "\\"},
    "1.2": {"r": "\r", "n": "\n", "c": ":", "\\": "\\"},
}


def escape_header(value: str, version: str) -> str:
    """Encode a header name or value for a non-CONNECT/CONNECTED frame of `version`."""
    if version == "1.0":
        return value  # 1.0 has no escaping at all
    # Backslash first, or the backslashes introduced below would be doubled again.
    value = value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    if version == "1.2":
        value = value.replace("\r", "\\r")
    return value


def unescape_header(value: str, version: str) -> str:
    """Decode a header name or value; an undefined escape is fatal in 1.1 and 1.2."""
    if version == "1.0" or "\\" not in value:
        return value
    table = _UNESCAPES.get(version)
    if table is None:
        raise ValueError(f"unknown STOMP version {version!r}")
    out = []
    i = 0
    while True:
        j = value.find("\\", i)
        if j < 0:
            out.append(value[i:])
            return "".join(out)
        out.append(value[i:j])
        decoded = table.get(value[j + 1 : j + 2])
        if decoded is None:
            allowed = " ".join("\\" + k for k in table)
            raise StompProtocolError(
                f"invalid escape sequence {value[j : j + 2]!r} in header {_clip(value)!r} "
                f"(STOMP {version} defines only {allowed})"
            )
        out.append(decoded)
        i = j + 2


def _unescape_headers(
    headers: list[tuple[str, str]], version: str
) -> list[tuple[str, str]]:
    return [(unescape_header(n, version), unescape_header(v, version)) for n, v in headers]


# --------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------


class StompParser:
    """Incremental STOMP frame parser: `feed(bytes)` returns every event completed so far.

    `version` ("1.0", "1.1" or "1.2") governs unescaping and whether a CR before LF is part of
    the EOL. It starts at "1.2" and the caller sets it once CONNECT/CONNECTED has settled the
    session version. Parsing the CONNECT itself under 1.2 rules is harmless: CONNECT is never
    unescaped, and the only other difference, accepting CRLF line ends, is a leniency.
    """

    __slots__ = (
        "limits",
        "_version",
        "_crlf",
        "_escapes",
        "_buf",
        "_error",
        "_head",
        "_scan",
        "_partial",
        "_counted",
        "_lines",
        "_line_start",
    )

    def __init__(self, limits: FrameLimits | None = None, version: str = "1.2") -> None:
        self.limits = limits if limits is not None else _DEFAULT_LIMITS
        self.version = version
        self._buf = bytearray()
        self._error: StompProtocolError | None = None
        # A frame whose header block is parsed but whose body has not fully arrived:
        # (command, headers, body offset from buffer start, content-length or -1).
        self._head: tuple[str, list[tuple[str, str]], int, int] | None = None
        # Offset from the start of the pending frame where the next search resumes, so a frame
        # trickling in byte by byte is scanned once overall rather than once per feed.
        self._scan = 0
        # Bookkeeping for limits on an incomplete header block (only used on the slow path).
        self._partial = False
        self._counted = 0  # offset up to which LFs have been counted
        self._lines = 0  # complete lines seen, command line included
        self._line_start = 0  # offset where the current, incomplete line begins

    @property
    def version(self) -> str:
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        if version not in VERSIONS:
            raise ValueError(f"unknown STOMP version {version!r}; expected one of {VERSIONS}")
        self._version = version
        # "Augmented BNF": only 1.2 allows CR before LF; in 1.0/1.1 a CR is ordinary data.
        self._crlf = version == "1.2"
        # "Value Encoding": 1.0 predates escaping; 1.1 and 1.2 decode escapes.
        self._escapes = version != "1.0"

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that has not completed yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame | Heartbeat]:
        """Add `data` and return every frame and heart-beat it completes, in order.

        Raises StompProtocolError on malformed input; the parser is dead afterwards and every
        later call raises an error with the same message.
        """
        if self._error is not None:
            raise StompProtocolError(self._error.message)
        buf = self._buf
        buf += data
        out: list[Frame | Heartbeat] = []
        try:
            pos = self._parse(buf, out)
        except StompProtocolError as exc:
            exc.frames = out
            self._error = exc
            self._head = None
            buf.clear()  # nothing more will be parsed; release the memory now
            raise
        if pos:
            del buf[:pos]  # compact once per feed, not once per frame
        return out

    # The hot loop. Offsets are absolute within `buf` here; state kept across feeds is stored
    # relative to the start of the pending frame, which compaction moves to offset 0.
    def _parse(self, buf: bytearray, out: list) -> int:
        limits = self.limits
        crlf = self._crlf
        find = buf.find
        append = out.append
        end = len(buf)
        pos = 0
        while pos < end:
            head = self._head
            if head is None:
                byte = buf[pos]
                # "Heart-beating": EOLs between frames; each one is reported.
                if byte == 10:
                    append(HEARTBEAT)
                    pos += 1
                    continue
                if byte == 13 and crlf:
                    if pos + 1 == end:
                        break  # the LF may still come
                    if buf[pos + 1] == 10:
                        append(HEARTBEAT)
                        pos += 2
                        continue
                # The header block ends at the first empty line: LF LF, or (1.2) LF CR LF.
                scan = pos + self._scan
                hdr_end = find(b"\n\n", scan)
                body_start = hdr_end + 2
                if crlf:
                    alt = find(b"\n\r\n", scan, body_start if hdr_end >= 0 else end)
                    if alt >= 0:
                        hdr_end = alt
                        body_start = alt + 3
                if hdr_end < 0:
                    self._header_block_incomplete(buf, pos, end)
                    break
                if self._partial:
                    self._reset_partial()
                command, headers, content_length = self._parse_header_block(
                    buf, pos, hdr_end, body_start
                )
            else:
                command, headers, body_start, content_length = head
                body_start += pos  # stored relative to the frame start
                self._head = None

            # Body ("Header content-length"): exactly content-length octets then a NUL, else
            # everything up to the first NUL.
            if content_length >= 0:
                nul = body_start + content_length
                if nul >= end:
                    self._head = (command, headers, body_start - pos, content_length)
                    break
                if buf[nul] != 0:
                    raise StompProtocolError(
                        f"{command} frame: expected NUL after the {content_length}-byte body "
                        f"given by content-length, found {bytes(buf[nul:nul + 1])!r}"
                    )
            else:
                nul = find(b"\x00", max(body_start, pos + self._scan))
                if nul < 0:
                    if end - pos >= limits.max_frame_size:
                        raise StompProtocolError(
                            f"{command} frame exceeds {limits.max_frame_size} bytes "
                            "(max_frame_size) without a terminating NUL"
                        )
                    self._head = (command, headers, body_start - pos, content_length)
                    self._scan = end - pos
                    break
                if nul + 1 - pos > limits.max_frame_size:
                    raise StompProtocolError(
                        f"{command} frame of {nul + 1 - pos} bytes exceeds "
                        f"{limits.max_frame_size} bytes (max_frame_size)"
                    )
                self._scan = 0
            append(Frame(command, headers, bytes(buf[body_start:nul])))
            pos = nul + 1
        return pos

    def _parse_header_block(
        self, buf: bytearray, pos: int, hdr_end: int, body_start: int
    ) -> tuple[str, list[tuple[str, str]], int]:
        """Decode the complete header block buf[pos:body_start]; hdr_end is its final LF."""
        limits = self.limits
        if body_start - pos > limits.max_header_block:
            raise StompProtocolError(
                f"header block of {body_start - pos} bytes exceeds {limits.max_header_block} "
                "bytes (max_header_block)"
            )
        raw = buf[pos:hdr_end]
        if 0 in raw:
            raise StompProtocolError(
                "NUL octet inside the header block (a frame ended before its blank line?)"
            )
        try:
            # "Value Encoding": commands and headers are UTF-8; decode the block once.
            text = raw.decode()
        except UnicodeDecodeError:
            _check_command_bytes(raw.split(b"\n", 1)[0], self._crlf)
            raise StompProtocolError("header block is not valid UTF-8") from None
        lines = text.split("\n")
        if self._crlf and "\r" in text:
            lines = [ln[:-1] if ln[-1:] == "\r" else ln for ln in lines]
        command = lines[0]
        if command not in COMMANDS:
            raise StompProtocolError(f"unknown command {_clip(command)!r}")
        if len(lines) - 1 > limits.max_headers:
            raise StompProtocolError(
                f"{command} frame has {len(lines) - 1} headers, more than {limits.max_headers} "
                "(max_headers)"
            )
        if hdr_end - pos > limits.max_header_length:
            # Only a block longer than the limit can hold a line longer than it.
            for line in raw.split(b"\n"):
                self._check_line_length(line)
        headers: list[tuple[str, str]] | dict[str, str] = []
        length_value = None
        if len(lines) > 1:
            del lines[0]
            # One plain loop into a dict (measured faster than comprehensions, map() or a
            # regex for typical 3-6 header frames). The first occurrence of a name wins.
            pairs: dict[str, str] = {}
            for line in lines:
                # The first colon splits: 1.1+ escape colons in names, 1.0 values may hold them.
                name, sep, value = line.partition(":")
                if not sep:
                    raise StompProtocolError(
                        f"{command} frame: header line without ':': {_clip(line)!r}"
                    )
                if name not in pairs:
                    pairs[name] = value
            # Escapes never decode to the characters of "content-length" or of a valid number,
            # so the raw value is as good as the unescaped one for this test.
            length_value = pairs.get("content-length")
            if len(pairs) == len(lines):
                headers = pairs  # Frame keeps the dict and builds the list only if asked
            else:
                # Repeated names: keep every entry, in wire order ("Repeated Header Entries").
                headers = [(name, value) for name, _, value in map(str.partition, lines, repeat(":"))]
            if self._escapes and "\\" in text and command not in _UNESCAPED_COMMANDS:
                items = headers.items() if isinstance(headers, dict) else headers
                headers = _unescape_headers(list(items), self._version)
        if length_value is None:
            return command, headers, -1
        return command, headers, self._content_length(command, length_value, body_start - pos)

    def _content_length(self, command: str, value: str, head_size: int) -> int:
        if not (value.isdigit() and value.isascii()):
            raise StompProtocolError(
                f"{command} frame: content-length must be a non-negative integer, got "
                f"{_clip(value)!r}"
            )
        max_frame = self.limits.max_frame_size
        # Checked before the body arrives, so an oversized body is never buffered.
        if len(value) > _MAX_CONTENT_LENGTH_DIGITS or head_size + int(value) + 1 > max_frame:
            raise StompProtocolError(
                f"{command} frame with content-length {_clip(value)} exceeds {max_frame} bytes "
                "(max_frame_size)"
            )
        return int(value)

    def _check_line_length(self, line: bytes | bytearray) -> None:
        length = len(line)
        if self._crlf and line[-1:] == b"\r":
            length -= 1  # the CR belongs to the EOL in 1.2
        if length > self.limits.max_header_length:
            raise StompProtocolError(
                f"header line of {length} bytes exceeds {self.limits.max_header_length} bytes "
                "(max_header_length)"
            )

    def _header_block_incomplete(self, buf: bytearray, pos: int, end: int) -> None:
        """Enforce every limit on a header block that is still arriving, then wait for more.

        A final header block is always longer than what has been buffered of it (its closing
        empty line is not there yet), so `buffered >= limit` already proves a violation.
        """
        limits = self.limits
        buffered = end - pos
        if buffered >= limits.max_header_block:
            raise StompProtocolError(
                f"header block exceeds {limits.max_header_block} bytes (max_header_block)"
            )
        if buffered >= limits.max_frame_size:
            raise StompProtocolError(
                f"frame exceeds {limits.max_frame_size} bytes (max_frame_size)"
            )
        first_lf = buf.find(b"\n", pos, end)
        if first_lf < 0:
            # Still on the command line: reject it as soon as it cannot be a command.
            if buffered > _MAX_COMMAND_LINE:
                _check_command_bytes(buf[pos:end], self._crlf)
        elif self._lines == 0:
            _check_command_bytes(buf[pos:first_lf], self._crlf)
        start = pos + self._counted
        if buf.find(b"\x00", start, end) >= 0:
            raise StompProtocolError(
                "NUL octet inside the header block (a frame ended before its blank line?)"
            )
        new_lines = buf.count(b"\n", start, end)
        if new_lines:
            line_start = self._line_start
            self._lines += new_lines
            self._line_start = buf.rfind(b"\n", start, end) + 1 - pos
            # Lines completed in this chunk, checked now rather than at the blank line.
            if self._line_start - line_start > limits.max_header_length:
                for line in buf[pos + line_start : pos + self._line_start - 1].split(b"\n"):
                    self._check_line_length(line)
        if self._lines - 1 > limits.max_headers:
            raise StompProtocolError(
                f"frame has more than {limits.max_headers} headers (max_headers)"
            )
        current = end - pos - self._line_start
        if current > limits.max_header_length:
            # A trailing CR may turn out to be half of a 1.2 CRLF and so not count.
            if not (current == limits.max_header_length + 1 and self._crlf and buf[end - 1] == 13):
                raise StompProtocolError(
                    f"header line exceeds {limits.max_header_length} bytes (max_header_length)"
                )
        self._counted = buffered
        self._scan = max(0, buffered - 2)  # a blank line may straddle this chunk and the next
        self._partial = True

    def _reset_partial(self) -> None:
        self._partial = False
        self._scan = 0
        self._counted = 0
        self._lines = 0
        self._line_start = 0


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _check_command_bytes(line: bytes | bytearray, crlf: bool) -> None:
    if crlf and line[-1:] == b"\r":
        line = line[:-1]
    command = bytes(line).decode("utf-8", "replace")
    if command not in COMMANDS:
        raise StompProtocolError(f"unknown command {_clip(command)!r}")


# --------------------------------------------------------------------------------------------
# Serializer
# --------------------------------------------------------------------------------------------

def _header_lines(
    command: str, headers: list | tuple, version: str
) -> tuple[str, int]:
    """The header lines of a frame joined by LF, escaped where needed, and how many there are."""
    lines = [f"{name}:{value}" for name, value in headers]
    count = len(lines)
    text = "\n".join(lines)
    # Most frames need no escaping at all. That is the case exactly when the joined header text
    # holds no backslash or CR, no LF besides the separators and one colon per line; checking
    # that once per frame is far cheaper than four scans per header name and value.
    special = "\\" in text or "\r" in text or (count and text.count("\n") != count - 1)
    if not special and text.count(":") == count:
        return text, count
    if version == "1.0" or command in _UNESCAPED_COMMANDS:
        # "Value Encoding": these frames are sent unescaped, so a LF would start a forged header
        # line; refuse rather than corrupt the stream.
        for name, value in headers:
            if "\n" in name or "\n" in str(value):
                raise ValueError(
                    f"header {name!r} contains a newline, which a {command} frame "
                    f"(STOMP {version}) cannot carry unescaped"
                )
        return text, count
    # Same test line by line, so only the offending headers pay for escaping. Usually the
    # culprit is a colon (a broker's message ids often hold some), so the other three
    # characters are only looked for when the frame holds any of them.
    for i, line in enumerate(lines):
        if line.count(":") != 1 or (special and ("\\" in line or "\n" in line or "\r" in line)):
            name, value = headers[i]
            lines[i] = f"{escape_header(name, version)}:{escape_header(str(value), version)}"
    return "\n".join(lines), count


def _has_content_length(text: str, headers: list | tuple) -> bool:
    # The substring test is a cheap gate; only a header named exactly so counts.
    return "content-length" in text and any(name == "content-length" for name, _ in headers)


def serialize_frame(
    command: str,
    headers: Iterable[tuple[str, str]] | Mapping[str, str],
    body: bytes = b"",
    version: str = "1.2",
    *,
    content_length: bool = True,
) -> bytes:
    """Encode one frame for `version`, escaping header names and values where the spec asks.

    With `content_length` set and no content-length header given, one is added so the body may
    carry NUL octets ("Header content-length"). The frame always ends with its NUL. Non-str header
    values are written with str().
    """
    if isinstance(headers, Mapping):
        headers = list(headers.items())
    elif not isinstance(headers, (list, tuple)):
        headers = list(headers)  # iterated twice when escaping is needed
    text, count = _header_lines(command, headers, version)
    if content_length and not _has_content_length(text, headers):
        length = f"content-length:{len(body)}"
        text = f"{text}\n{length}" if count else length
        count += 1
    if count:
        return f"{command}\n{text}\n\n".encode() + body + b"\x00"
    return f"{command}\n\n".encode() + body + b"\x00"


def serialize_raw(
    command: str,
    headers: Iterable[tuple[str, str]] | Mapping[str, str] = (),
    body: bytes = b"",
    *,
    eol: str = "\n",
    terminator: bytes = b"\x00",
) -> bytes:
    """Encode a frame verbatim: no escaping, no content-length, no checks.

    For tests that need deliberately malformed or unusual frames (CRLF line ends via `eol`, a
    missing NUL via `terminator=b""`).
    """
    if isinstance(headers, Mapping):
        headers = headers.items()
    head = [command, *(f"{name}:{value}" for name, value in headers), "", ""]
    return eol.join(head).encode() + body + terminator


def encode_message_frame(
    destination: str,
    message_id: str,
    subscription: str,
    body: bytes = b"",
    headers: Iterable[tuple[str, str]] = (),
    *,
    ack: str | None = None,
    version: str = "1.2",
) -> bytes:
    """Fast path for the broker's hottest output, a MESSAGE frame ("MESSAGE").

    Writes subscription, message-id, destination, the 1.2 `ack` header when given, then
    `headers` (user and server headers, in wire order), then content-length unless `headers`
    already holds one. Same bytes as `serialize_frame("MESSAGE", ...)` with those headers.
    """
    if version != "1.0":
        # Broker-made message ids often hold colons: escape just the values that need it.
        joined = f"{subscription}{message_id}{destination}{ack or ''}"
        if ":" in joined or "\\" in joined or "\n" in joined or "\r" in joined:
            subscription = _escape_if_needed(subscription, version)
            message_id = _escape_if_needed(message_id, version)
            destination = _escape_if_needed(destination, version)
            if ack is not None:
                ack = _escape_if_needed(ack, version)
    elif "\n" in f"{subscription}{message_id}{destination}{ack or ''}":
        raise ValueError("a STOMP 1.0 MESSAGE frame cannot carry a newline in a header")
    fixed = f"subscription:{subscription}\nmessage-id:{message_id}\ndestination:{destination}"
    if ack is not None:
        fixed = f"{fixed}\nack:{ack}"
    if not isinstance(headers, (list, tuple)):
        headers = list(headers)
    if headers:
        text, _ = _header_lines("MESSAGE", headers, version)
        if _has_content_length(text, headers):
            return f"MESSAGE\n{fixed}\n{text}\n\n".encode() + body + b"\x00"
        return (
            f"MESSAGE\n{fixed}\n{text}\ncontent-length:{len(body)}\n\n".encode() + body + b"\x00"
        )
    return f"MESSAGE\n{fixed}\ncontent-length:{len(body)}\n\n".encode() + body + b"\x00"


def _escape_if_needed(value: str, version: str) -> str:
    if ":" in value or "\\" in value or "\n" in value or "\r" in value:
        return escape_header(value, version)
    return value
