"""A small HTTP/1.1 server on asyncio streams, enough for a JSON control API.

Keep-alive, Content-Length and chunked request bodies; every read is bounded in time and size
(Toxiproxy's API server uses a 15 s read timeout, api.go ``read_timeout``).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable

READ_TIMEOUT = 15.0
MAX_HEADER_LINES = 100
MAX_BODY = 4 << 20

REASONS = {
    200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 411: "Length Required",
    413: "Payload Too Large", 500: "Internal Server Error", 503: "Service Unavailable",
}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]


class BadHttp(Exception):
    pass


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = await reader.readline()
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadHttp("bad chunk size") from None
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            if len(body) + size > MAX_BODY:
                raise BadHttp("body too large")
            body += await reader.readexactly(size)
            await reader.readline()
    length_text = headers.get("content-length")
    if not length_text:
        return b""
    try:
        length = int(length_text)
    except ValueError:
        raise BadHttp("bad Content-Length") from None
    if length < 0 or length > MAX_BODY:
        raise BadHttp("bad Content-Length")
    return await reader.readexactly(length)


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadHttp("malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {"_version": version}
    for _ in range(MAX_HEADER_LINES):
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, sep, value = header.decode("latin-1").partition(":")
        if not sep:
            raise BadHttp("malformed header")
        headers[name.strip().lower()] = value.strip()
    else:
        raise BadHttp("too many headers")
    body = await _read_body(reader, headers)
    path = target.split("?", 1)[0]
    return Request(method=method.upper(), path=path, headers=headers, body=body)


def _encode(response: Response, keep_alive: bool, head_only: bool = False) -> bytes:
    reason = REASONS.get(response.status, "Unknown")
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    if response.status != 204:
        lines.append(f"Content-Type: {response.content_type}")
        lines.append(f"Content-Length: {len(response.body)}")
    for name, value in response.headers.items():
        lines.append(f"{name}: {value}")
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if (head_only or response.status == 204) else head + response.body


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
) -> None:
    try:
        while True:
            try:
                request = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT)
            except (BadHttp, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                body = f"{exc}\n".encode()
                writer.write(_encode(Response(400, body, "text/plain; charset=utf-8"), False))
                break
            except (asyncio.TimeoutError, ConnectionError):
                break
            if request is None:
                break
            version = request.headers.get("_version", "HTTP/1.1")
            connection = request.headers.get("connection", "").lower()
            keep_alive = (version == "HTTP/1.1" and connection != "close") or connection == "keep-alive"
            response = await handler(request)
            writer.write(_encode(response, keep_alive))
            await writer.drain()
            if not keep_alive:
                break
    except ConnectionError:
        pass  # the client went away mid-response
    finally:
        writer.close()
