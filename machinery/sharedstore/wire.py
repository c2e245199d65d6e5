"""One frame on the store's TCP link: ``>II`` (header length, data length), a JSON header, raw data.

Requests carry ``op``, ``xid`` (the client's request number, echoed in the reply so a late answer
to an abandoned try is recognised and dropped) and the op's arguments; file contents travel as the
raw data part, not inside the JSON.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct

PREFIX = struct.Struct(">II")
#: a header or data part larger than this is a protocol error, not an allocation
MAX_PART = 64 * 1024 * 1024


class ProtocolError(RuntimeError):
    pass


def encode(header: dict, data: bytes = b"") -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    return PREFIX.pack(len(raw), len(data)) + raw + data


def _check(head_len: int, data_len: int) -> None:
    if head_len > MAX_PART or data_len > MAX_PART:
        raise ProtocolError(f"frame too large: header {head_len}, data {data_len} bytes")


async def read_frame(reader: asyncio.StreamReader) -> tuple[dict, bytes]:
    head_len, data_len = PREFIX.unpack(await reader.readexactly(PREFIX.size))
    _check(head_len, data_len)
    header = json.loads(await reader.readexactly(head_len))
    data = await reader.readexactly(data_len) if data_len else b""
    return header, data


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionResetError("the store closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> tuple[dict, bytes]:
    """Blocking read of one frame (the socket's timeout bounds each recv)."""
    head_len, data_len = PREFIX.unpack(_recv_exactly(sock, PREFIX.size))
    _check(head_len, data_len)
    header = json.loads(_recv_exactly(sock, head_len))
    return header, (_recv_exactly(sock, data_len) if data_len else b"")
