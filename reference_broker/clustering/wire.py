"""Frames on a cluster link: a 4-byte big-endian length, then one JSON object (UTF-8).

Why not STOMP, as the networks of brokers (reference_broker/cluster) use: a cluster link carries
more than messages: binding tables with hop counts, acknowledgements of forwards by duplicate id,
and a request/response RPC for the clustered grouping handlers. As JSON objects these stay plain
dicts on both ends; on STOMP each would need headers invented for it and an advisory scheme. The
link also has its own acceptor, as Artemis's cluster connections use a connector of their own,
so the fault proxy can cut cluster traffic without touching clients.
"""

from __future__ import annotations

import base64
import json
import struct

from ..engine.message import Message

_LENGTH = struct.Struct(">I")
#: a frame longer than this is a broken or hostile peer, not a message (bodies are base64 in JSON)
MAX_FRAME = 64 * 1024 * 1024


class FrameError(ValueError):
    """The peer sent something that is not a cluster frame."""


def encode(frame: dict) -> bytes:
    data = json.dumps(frame, separators=(",", ":")).encode()
    return _LENGTH.pack(len(data)) + data


class FrameReader:
    """Sans-IO: `feed` bytes, get the complete frames so far."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise FrameError(f"frame of {length} bytes is over the {MAX_FRAME} byte limit")
            if len(self._buffer) < _LENGTH.size + length:
                break
            raw = bytes(self._buffer[_LENGTH.size:_LENGTH.size + length])
            del self._buffer[:_LENGTH.size + length]
            try:
                frame = json.loads(raw)
            except ValueError as exc:
                raise FrameError(f"frame is not JSON: {exc}") from None
            if not isinstance(frame, dict) or not isinstance(frame.get("kind"), str):
                raise FrameError("a frame is a JSON object with a 'kind'")
            frames.append(frame)
        return frames


_FIELDS = ("message_id", "destination", "persistent", "priority", "timestamp", "expiration", "correlation_id",
           "reply_to", "type", "group_id", "group_seq", "content_type", "producer_id")


def message_to_wire(message: Message) -> dict:
    data = {name: getattr(message, name) for name in _FIELDS}
    data["body"] = base64.b64encode(message.body).decode()
    data["properties"] = dict(message.properties)
    return data


def message_from_wire(data: dict) -> Message:
    try:
        return Message(body=base64.b64decode(data["body"]), properties=dict(data.get("properties") or {}),
                       **{name: data[name] for name in _FIELDS})
    except (KeyError, TypeError, ValueError) as exc:
        raise FrameError(f"malformed message on the cluster link: {exc}") from None
