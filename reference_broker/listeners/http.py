"""Read-only JSON statistics over HTTP: the counters operators watch (destinations, consumers,
enqueued / dequeued / dispatched / in-flight, per-subscription `discarded` and `matched` from
ActiveMQ "Slow Consumer Handling", "Monitoring the Status of Slow Consumers").

Endpoints: GET /stats (everything), /queues, /topics, /subscriptions, /health.
"""

from __future__ import annotations

import asyncio
import json
import logging

from ..engine.broker import Broker

log = logging.getLogger("reference_broker.listeners.http")

_MAX_REQUEST = 16 * 1024


async def serve_http(broker: Broker, host: str, port: int) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        status, payload = 400, {"error": "malformed request line"}
        if len(parts) == 3:
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method != "GET":
                status, payload = 405, {"error": f"{method} not allowed: the statistics are read-only"}
            else:
                status, payload = _route(broker, target)
        body = json.dumps(payload, indent=2, default=str).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        )
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    return await asyncio.start_server(handle, host, port, limit=_MAX_REQUEST)


def _route(broker: Broker, target: str) -> tuple[int, dict]:
    if target == "/health":  # cheap, no destination lists: for watching a broker under load
        return 200, {"status": "ok", "broker": broker.config.name, **broker.gauges()}
    stats = broker.stats()
    if target in ("/", "/stats"):
        return 200, stats
    key = target.strip("/")
    if key in ("queues", "topics", "subscriptions"):
        return 200, {key: stats[key]}
    return 404, {"error": f"no such resource {target!r}", "resources": ["/stats", "/queues", "/topics", "/subscriptions", "/health"]}
