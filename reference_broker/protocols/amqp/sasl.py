"""The SASL layer in front of the AMQP 1.0 connection: protocol-header negotiation and the
server side of ANONYMOUS and PLAIN (AMQP 1.0 part 5.3, "SASL").

Why not proton's own SASL layer: proton-c's built-in server implementation offers only
ANONYMOUS and EXTERNAL (`default_sasl.c`), and the Cyrus implementation checks passwords
against Cyrus' own databases; neither can ask the broker's user list, and the plugin interface
(`pnx_sasl_implementation`) is not reachable from Python. So this layer runs the short SASL
exchange itself and hands proton's `Transport` everything from the AMQP protocol header on.
It still uses proton's codec (`proton.Data`) for the SASL frame bodies; only the 8-byte frame
header is read and written here.

Sans-IO: `feed(bytes)` in, `take_output()` out; no sockets, no asyncio.
"""

from __future__ import annotations

import enum
import struct
from typing import Callable

from proton import Array, Data, Described, UNDESCRIBED, symbol, ubyte, ulong

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
HEADER_LENGTH = 8

SASL_FRAME_TYPE = 0x01
# Performative descriptors (AMQP 1.0 part 5.3.3).
SASL_MECHANISMS = 0x40
SASL_INIT = 0x41
SASL_CHALLENGE = 0x42
SASL_RESPONSE = 0x43
SASL_OUTCOME = 0x44
_SYMBOLIC = {
    "amqp:sasl-init:list": SASL_INIT,
    "amqp:sasl-response:list": SASL_RESPONSE,
}

# sasl-code (5.3.3.6)
OK = 0
AUTH = 1
SYS = 2

# SASL frames are small: the spec's minimum max-frame-size during SASL is 512 bytes. Allow more
# (long user names, passwords) but never an unbounded buffer.
MAX_SASL_FRAME = 64 * 1024


class SaslState(enum.Enum):
    HEADER = "header"  # waiting for the client's protocol header
    INIT = "init"  # mechanisms sent, waiting for sasl-init
    AMQP_HEADER = "amqp-header"  # outcome ok sent, waiting for the AMQP protocol header
    DONE = "done"  # hand everything (from the AMQP header on) to proton
    FAILED = "failed"  # write what is pending, then close the socket


class SaslError(Exception):
    pass


Authenticator = Callable[[str | None, str | None], None]  # raises to refuse


class SaslServer:
    """Negotiates the protocol header and, when the client asks for it, SASL.

    `authenticate(login, passcode)` raises to refuse credentials (login None = anonymous).
    After `state is SaslState.DONE`, `remainder` holds the bytes for proton (starting with the
    AMQP header); `login`/`passcode` are what the client authenticated with, `used_sasl` says
    whether it went through SASL at all (a client may skip it; the broker then treats the
    connection as anonymous and decides at Open).
    """

    def __init__(self, mechanisms: list[str], authenticate: Authenticator) -> None:
        self.mechanisms = list(mechanisms)
        self._authenticate = authenticate
        self.state = SaslState.HEADER
        self._buffer = bytearray()
        self._out: list[bytes] = []
        self.remainder = b""
        self.login: str | None = None
        self.passcode: str | None = None
        self.mechanism: str | None = None
        self.used_sasl = False
        self.error: str | None = None

    # ------------------------------------------------------------ I/O

    def feed(self, data: bytes) -> None:
        if self.state in (SaslState.DONE, SaslState.FAILED):
            raise SaslError("the SASL layer has finished; feed the AMQP layer instead")
        self._buffer += data
        try:
            self._run()
        except SaslError as exc:
            self._fail(str(exc))

    def take_output(self) -> bytes:
        out, self._out = self._out, []
        return b"".join(out)

    # ------------------------------------------------------------ state machine

    def _run(self) -> None:
        while self.state not in (SaslState.DONE, SaslState.FAILED):
            if self.state is SaslState.HEADER:
                if not self._header():
                    return
            elif self.state is SaslState.INIT:
                frame = self._frame()
                if frame is None:
                    return
                self._on_frame(*frame)
            elif self.state is SaslState.AMQP_HEADER:
                if len(self._buffer) < HEADER_LENGTH:
                    if bytes(self._buffer) != AMQP_HEADER[: len(self._buffer)]:
                        raise SaslError("expected the AMQP protocol header after SASL")
                    return
                if bytes(self._buffer[:HEADER_LENGTH]) != AMQP_HEADER:
                    raise SaslError(
                        f"expected the AMQP protocol header after SASL, got {bytes(self._buffer[:HEADER_LENGTH])!r}"
                    )
                self._finish()

    def _header(self) -> bool:
        buffer = self._buffer
        have = bytes(buffer[:HEADER_LENGTH])
        if not (SASL_HEADER.startswith(have) or AMQP_HEADER.startswith(have)):
            # AMQP 1.0 2.2: answer an unsupported header with the one we support, then close.
            self._out.append(SASL_HEADER)
            raise SaslError(f"unsupported protocol header {have!r}: this broker speaks AMQP 1.0 with SASL")
        if len(buffer) < HEADER_LENGTH:
            return False
        if have == AMQP_HEADER:
            # The client skips SASL: proton answers the header itself.
            self._finish()
            return True
        del buffer[:HEADER_LENGTH]
        self.used_sasl = True
        self._out.append(SASL_HEADER)
        self._out.append(self._encode(SASL_MECHANISMS, [Array(UNDESCRIBED, Data.SYMBOL, *map(symbol, self.mechanisms))]))
        self.state = SaslState.INIT
        return True

    def _frame(self) -> tuple[int, list] | None:
        buffer = self._buffer
        while True:
            if len(buffer) < 8:
                return None
            size, doff, frame_type = struct.unpack_from(">IBB", buffer)
            if size < 8 or doff < 2 or doff * 4 > size:
                raise SaslError(f"malformed SASL frame header (size {size}, doff {doff})")
            if size > MAX_SASL_FRAME:
                raise SaslError(f"SASL frame of {size} bytes is larger than {MAX_SASL_FRAME}")
            if frame_type != SASL_FRAME_TYPE:
                raise SaslError(f"expected a SASL frame (type 1), got frame type {frame_type}")
            if len(buffer) < size:
                return None
            body = bytes(buffer[doff * 4 : size])
            del buffer[:size]
            if not body:
                continue  # an empty frame carries nothing; keep reading
            return self._decode(body)

    @staticmethod
    def _decode(body: bytes) -> tuple[int, list]:
        data = Data()
        try:
            consumed = data.decode(body)
            data.rewind()
            data.next()
            value = data.get_object()
        except Exception as exc:  # proton raises DataException and friends on garbage
            raise SaslError(f"undecodable SASL frame body: {exc}") from None
        if consumed != len(body) or not isinstance(value, Described) or not isinstance(value.value, list):
            raise SaslError("a SASL frame body must be one described list")
        descriptor = value.descriptor
        if isinstance(descriptor, str):
            descriptor = _SYMBOLIC.get(str(descriptor), -1)
        # Binary fields come back as memoryviews into `data`'s buffer, which dies with it.
        fields = [bytes(f) if isinstance(f, memoryview) else f for f in value.value]
        return int(descriptor), fields

    @staticmethod
    def _encode(descriptor: int, fields: list) -> bytes:
        data = Data()
        data.put_object(Described(ulong(descriptor), fields))
        body = bytes(data.encode())
        return struct.pack(">IBBH", 8 + len(body), 2, SASL_FRAME_TYPE, 0) + body

    def _on_frame(self, descriptor: int, fields: list) -> None:
        if descriptor != SASL_INIT:
            raise SaslError(f"expected sasl-init, got performative 0x{descriptor:x}")
        mechanism = str(fields[0]) if fields and fields[0] is not None else ""
        raw = fields[1] if len(fields) > 1 else None
        # AMQP 1.0 5.3.3.2: initial-response is binary. Anything else is refused before bytes()
        # sees it: bytes(str) raises TypeError and bytes(n) allocates n zero bytes (found by
        # fuzzing, tests/reference_broker/test_fuzz_findings.py).
        if raw is not None and not isinstance(raw, (bytes, memoryview)):
            raise SaslError(f"sasl-init initial-response must be binary, got {type(raw).__name__}")
        response = bytes(raw) if raw is not None else b""
        self.mechanism = mechanism
        if mechanism not in self.mechanisms:
            self._outcome(AUTH, f"mechanism {mechanism!r} is not offered (offered: {' '.join(self.mechanisms)})")
            return
        login = passcode = None
        if mechanism == "PLAIN":
            # RFC 4616: [authzid] NUL authcid NUL passwd
            parts = response.split(b"\x00")
            if len(parts) != 3:
                self._outcome(AUTH, "malformed PLAIN response")
                return
            try:
                login, passcode = parts[1].decode("utf-8"), parts[2].decode("utf-8")
            except UnicodeDecodeError:
                self._outcome(AUTH, "PLAIN credentials are not UTF-8")
                return
            if not login:
                self._outcome(AUTH, "PLAIN needs a user name")
                return
        try:
            self._authenticate(login, passcode)
        except Exception as exc:  # the broker's refusal (AuthenticationFailed)
            self._outcome(AUTH, str(exc))
            return
        self.login, self.passcode = login, passcode
        self._outcome(OK, None)

    def _outcome(self, code: int, error: str | None) -> None:
        self._out.append(self._encode(SASL_OUTCOME, [ubyte(code)]))
        if code == OK:
            self.state = SaslState.AMQP_HEADER
        else:
            # AMQP 1.0 5.3.2: after a failed outcome the server closes the connection.
            self.error = error
            self.state = SaslState.FAILED

    def _finish(self) -> None:
        self.remainder = bytes(self._buffer)
        self._buffer.clear()
        self.state = SaslState.DONE

    def _fail(self, error: str) -> None:
        self.error = error
        self.state = SaslState.FAILED
