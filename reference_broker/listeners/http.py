"""Read-only JSON statistics over HTTP: the counters operators watch (destinations, consumers,
enqueued / dequeued / dispatched / in-flight, per-subscription `discarded` and `matched` from
ActiveMQ "Slow Consumer Handling", "Monitoring the Status of Slow Consumers").

Endpoints: GET /stats (everything), /queues, /topics, /subscriptions, /health.

Read-only but not public (issue 20, "secure by default"): with users configured, every endpoint
but /health (which says only "ok" and the broker's name) needs HTTP Basic credentials of one of
them (RFC 7617); with none, the configuration only lets the listener bind a loopback address
(config.BrokerConfig._secure_by_default). Either way the answer never shows identifiers that
would help someone reach other clients' messages: temporary destination names (anyone may send
to them), connection ids (the stem of those names) and the client ids of durable subscriptions
(connecting with one takes its subscription over) appear as `masked` tokens, the same within a
run for the same value, so they still tell entries apart. Subscription ids are shown: they name
nothing outside their own connection, and an ``NC|`` id grants nothing to a connection the broker
does not trust as a network bridge (engine/network_principal.py).

A master/slave broker (reference_broker/ha) keeps this listener open while it waits for the
store's lock: /health then answers ``{"status": "slave"}`` and the counters 503 (a slave has no
broker to count, so nothing to protect either); every answer carries ``role`` (``master`` /
``slave``) then.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
from typing import Callable

from ..engine.broker import Broker
from ..engine.errors import AuthenticationFailed

log = logging.getLogger("reference_broker.listeners.http")

_MAX_REQUEST = 16 * 1024


async def serve_http(broker: Broker | Callable[[], Broker | None], host: str, port: int,
                     **server_options) -> asyncio.AbstractServer:
    """``broker``: the broker, or a function returning it (None while a slave waits for the lock).
    ``server_options`` go to asyncio.start_server (``ssl`` and ``ssl_handshake_timeout`` for https)."""
    with_role = not isinstance(broker, Broker)
    current = broker if with_role else (lambda: broker)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        status, payload = 400, {"error": "malformed request line"}
        extra = ""
        if len(parts) == 3:
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method != "GET":
                status, payload = 405, {"error": f"{method} not allowed: the statistics are read-only"}
            elif target != "/health" and (serving := current()) is not None and not _authorized(serving, lines[1:]):
                status, payload = 401, {"error": "the statistics need the credentials of a configured user "
                                                 "(HTTP Basic)"}
                extra = 'WWW-Authenticate: Basic realm="brokerconf reference broker", charset="UTF-8"\r\n'
            else:
                status, payload = _route(current(), target, with_role)
        body = json.dumps(payload, indent=2, default=str).encode()
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                  405: "Method Not Allowed", 503: "Service Unavailable"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        )
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    return await asyncio.start_server(handle, host, port, limit=_MAX_REQUEST, **server_options)


def _authorized(broker: Broker, header_lines: list[str]) -> bool:
    """No users configured (so a loopback listener): open. Else HTTP Basic of a configured user."""
    if not broker.config.security.users:
        return True
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() != "authorization":
            continue
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            login, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep or not login:
            return False
        try:
            broker.authenticate(login, password)
        except AuthenticationFailed:
            log.info("statistics request refused: wrong user name or password for %r", login)
            return False
        return True
    return False


_MASK_KEY = secrets.token_bytes(16)  # per process: masks are stable within a run, unguessable


def masked(value: str) -> str:
    return "masked-" + hmac.new(_MASK_KEY, value.encode(), hashlib.sha256).hexdigest()[:16]


def public_stats(broker: Broker) -> dict:
    """`Broker.stats()` without the identifiers the module docstring lists."""
    stats = broker.stats()
    temporary = broker.temporary.is_temporary

    def destination(name: str) -> str:
        if not temporary(name):
            return name
        kind = name.partition("://")[0]
        return f"{kind}://{masked(name)}"

    for entry in stats["queues"] + stats["topics"]:
        if temporary(entry["name"]):
            entry["name"], entry["temporary"] = destination(entry["name"]), True
        for consumer in entry.get("consumers", ()):
            consumer["connection"] = masked(consumer["connection"])
    for subscription in stats["subscriptions"]:
        for key in ("connection", "client_id"):
            if subscription.get(key) is not None:
                subscription[key] = masked(subscription[key])
        if "destination" in subscription:
            subscription["destination"] = destination(subscription["destination"])
    return stats


def _route(broker: Broker | None, target: str, with_role: bool = False) -> tuple[int, dict]:
    if broker is None:  # a slave waiting for the store's lock
        if target == "/health":
            return 200, {"status": "slave", "role": "slave"}
        return 503, {"error": "this broker is a slave waiting for the store's lock: no counters", "role": "slave"}
    status, payload = _route_master(broker, target)
    return status, ({**payload, "role": "master"} if with_role else payload)


def _route_master(broker: Broker, target: str) -> tuple[int, dict]:
    if target == "/health":  # cheap, no destination lists: for watching a broker under load
        return 200, {"status": "ok", "broker": broker.config.name, **broker.gauges()}
    stats = public_stats(broker)
    if target in ("/", "/stats"):
        return 200, stats
    key = target.strip("/")
    if key in ("queues", "topics", "subscriptions"):
        return 200, {key: stats[key]}
    return 404, {"error": f"no such resource {target!r}", "resources": ["/stats", "/queues", "/topics", "/subscriptions", "/health"]}
