"""Read-only JSON statistics over HTTP: the counters operators watch (destinations, consumers,
enqueued / dequeued / dispatched / in-flight, per-subscription `discarded` and `matched` from
ActiveMQ "Slow Consumer Handling", "Monitoring the Status of Slow Consumers").

Endpoints: GET /stats (everything), /queues, /topics, /subscriptions, /health.

A master/slave broker (reference_broker/ha) keeps this listener open while it waits for the
store's lock: /health then answers ``{"status": "slave"}`` and the counters 503 (a slave has no
broker to count); every answer carries ``role`` (``master`` / ``slave``) then.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable

from ..engine.broker import Broker

log = logging.getLogger("reference_broker.listeners.http")

_MAX_REQUEST = 16 * 1024


async def serve_http(broker: Broker | Callable[[], Broker | None], host: str, port: int) -> asyncio.AbstractServer:
    """``broker``: the broker, or a function returning it (None while a slave waits for the lock)."""
    with_role = not isinstance(broker, Broker)
    current = broker if with_role else (lambda: broker)

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
                status, payload = _route(current(), target, with_role)
        body = json.dumps(payload, indent=2, default=str).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  503: "Service Unavailable"}[status]
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


def _route(broker: Broker | None, target: str, with_role: bool = False) -> tuple[int, dict]:
    if broker is None:  # a slave waiting for the store's lock
        if target == "/health":
            return 200, {"status": "slave", "role": "slave"}
        return 503, {"error": "this broker is a slave waiting for the store's lock: no counters", "role": "slave"}
    status, payload = _route_master(broker, target)
    return status, ({**payload, "role": "master"} if with_role else payload)


def _route_master(broker: Broker, target: str) -> tuple[int, dict]:
    stats = broker.stats()
    if target in ("/", "/stats"):
        return 200, stats
    if target == "/health":
        return 200, {"status": "ok", "broker": stats["broker"]}
    key = target.strip("/")
    if key in ("queues", "topics", "subscriptions"):
        return 200, {key: stats[key]}
    return 404, {"error": f"no such resource {target!r}", "resources": ["/stats", "/queues", "/topics", "/subscriptions", "/health"]}
