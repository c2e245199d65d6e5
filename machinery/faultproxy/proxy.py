"""Proxies (listen -> upstream) and the collection of proxies, with Toxiproxy's rules.

Sources: Shopify/toxiproxy proxy.go (start/stop/update), proxy_collection.go (add, populate),
toxic_collection.go (toxic names unique across both streams), README "Proxy fields".
"""
from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from .link import Connection
from .toxics import (
    DOWNSTREAM,
    STREAMS,
    UPSTREAM,
    ApiError,
    Toxic,
    parse_attributes,
    parse_toxicity,
    bad_request_body,
)

PROXY_NOT_FOUND = ("proxy not found", 404)
PROXY_EXISTS = ("proxy already exists", 409)
TOXIC_NOT_FOUND = ("toxic not found", 404)
TOXIC_EXISTS = ("toxic already exists", 409)


def split_host_port(address: str) -> tuple[str, int]:
    """``"h:p"`` or ``"[v6]:p"`` -> (host, port); errors read like Go's net package."""
    if not isinstance(address, str) or ":" not in address:
        raise ApiError(f"address {address}: missing port in address", 500)
    host, _, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ApiError(f"address {address}: invalid port", 500) from None
    if not 0 <= port <= 65535:
        raise ApiError(f"address {address}: invalid port", 500)
    return host, port


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def resolve_listen(address: str) -> tuple[str, int]:
    """Resolve a listen address to one IP (IPv4 first, as Go does for ``localhost``)."""
    host, port = split_host_port(address)
    if host == "":
        return "0.0.0.0", port  # Go listens on every interface for ":port"
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ApiError(f"listen tcp {address}: lookup {host}: {exc}", 500) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return infos[0][4][0], port


class Proxy:
    """One listening address forwarding to one upstream, with its toxics."""

    def __init__(self, name: str, listen: str, upstream: str, connect_timeout: float = 10.0) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.upstream_connect_timeout = connect_timeout
        self.toxics: dict[str, list[Toxic]] = {UPSTREAM: [], DOWNSTREAM: []}
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None

    # --- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": self.toxic_list(),
        }

    # --- listening --------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (proxy.go start); a taken address is a 500 with Go's message, as Toxiproxy."""
        if self.enabled:
            return
        host, port = await resolve_listen(self.listen)
        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(
                lambda: Connection(self, loop).client, host, port, reuse_address=True, backlog=1024
            )
        except OSError as exc:
            # asyncio wraps the errno in its own sentence; Go prints just the errno's text.
            reason = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
            raise ApiError(f"listen tcp {join_host_port(host, port)}: bind: {reason}", 500) from None
        bound = server.sockets[0].getsockname()
        self.listen = join_host_port(bound[0], bound[1])
        self._server = server
        self.enabled = True

    def stop(self) -> None:
        """Stop listening and drop every connection (README: enabled=false takes it down)."""
        if not self.enabled:
            return
        self.enabled = False
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self.connections):
            conn.drop()
        self.connections.clear()

    async def differs(self, listen: str, upstream: str) -> bool:
        host, port = await resolve_listen(listen)
        return join_host_port(host, port) != self.listen or upstream != self.upstream

    async def update(self, body: dict[str, Any]) -> None:
        """POST/PATCH /proxies/{name}: change listen/upstream (drops connections) or enabled."""
        listen = body.get("listen", self.listen)
        upstream = body.get("upstream", self.upstream)
        enabled = body.get("enabled", self.enabled)
        if not isinstance(listen, str) or not isinstance(upstream, str):
            raise bad_request_body("listen and upstream must be strings")
        if not isinstance(enabled, bool):
            raise bad_request_body(f"enabled must be true or false, got {enabled!r}")
        if await self.differs(listen, upstream):
            self.stop()
            self.listen, self.upstream = listen, upstream
        if enabled != self.enabled:
            if enabled:
                await self.start()
            else:
                self.stop()

    def upstream_address(self) -> tuple[str, int]:
        return split_host_port(self.upstream)

    # --- connections (called by link.Connection) --------------------------------------------
    def register(self, conn: Connection) -> bool:
        if not self.enabled:
            return False
        self.connections.add(conn)
        return True

    def connection_finished(self, conn: Connection) -> None:
        self.connections.discard(conn)

    def _established_pipes(self, direction: str):
        for conn in list(self.connections):
            pipe = conn.pipes[direction]
            if pipe.source is not None:
                yield pipe

    # --- toxics -----------------------------------------------------------------------------
    def toxic_list(self) -> list[dict[str, Any]]:
        # GetToxicArray: the upstream chain, then the downstream chain, in insertion order.
        return [t.to_json() for stream in STREAMS for t in self.toxics[stream]]

    def toxics_for(self, direction: str) -> list[Toxic]:
        return list(self.toxics[direction])

    def find_toxic(self, name: str) -> Toxic:
        for stream in STREAMS:
            for toxic in self.toxics[stream]:
                if toxic.name == name:
                    return toxic
        raise ApiError(*TOXIC_NOT_FOUND)

    def add_toxic(self, toxic: Toxic) -> None:
        if any(t.name == toxic.name for s in STREAMS for t in self.toxics[s]):
            raise ApiError(*TOXIC_EXISTS)
        self.toxics[toxic.direction].append(toxic)
        for pipe in self._established_pipes(toxic.direction):
            pipe.add_toxic(toxic)

    def update_toxic(self, name: str, body: Any) -> Toxic:
        toxic = self.find_toxic(name)
        if not isinstance(body, dict):
            raise bad_request_body(f"expected a JSON object, got {type(body).__name__}")
        attributes = parse_attributes(toxic.type, body.get("attributes"), base=toxic.attributes)
        toxicity = parse_toxicity(body.get("toxicity", toxic.toxicity))
        toxic.attributes, toxic.toxicity = attributes, toxicity
        for pipe in self._established_pipes(toxic.direction):
            pipe.update_toxic(toxic)
        return toxic

    def remove_toxic(self, name: str) -> None:
        toxic = self.find_toxic(name)
        self.toxics[toxic.direction].remove(toxic)
        for pipe in self._established_pipes(toxic.direction):
            pipe.remove_toxic(toxic)

    def reset_toxics(self) -> None:
        for stream in STREAMS:
            for toxic in list(self.toxics[stream]):
                self.remove_toxic(toxic.name)


class ProxyCollection:
    """All proxies of one server, by name (proxy_collection.go)."""

    def __init__(self, connect_timeout: float = 10.0) -> None:
        self.proxies: dict[str, Proxy] = {}
        self.connect_timeout = connect_timeout

    def get(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise ApiError(*PROXY_NOT_FOUND) from None

    def new_proxy(self, name: str, listen: str, upstream: str) -> Proxy:
        return Proxy(name, listen, upstream, connect_timeout=self.connect_timeout)

    async def add(self, proxy: Proxy, start: bool) -> None:
        if proxy.name in self.proxies:
            raise ApiError(*PROXY_EXISTS)
        if start:
            await proxy.start()
        self.proxies[proxy.name] = proxy

    async def add_or_replace(self, proxy: Proxy, start: bool) -> Proxy:
        # /populate: an existing proxy with the same listen and upstream is kept untouched,
        # which makes populate idempotent (README "Populating Proxies").
        existing = self.proxies.get(proxy.name)
        if existing is not None:
            if not await existing.differs(proxy.listen, proxy.upstream):
                return existing
            existing.stop()
        if start:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return proxy

    def remove(self, name: str) -> None:
        proxy = self.get(name)
        proxy.stop()
        del self.proxies[name]

    def clear(self) -> None:
        for name in list(self.proxies):
            self.remove(name)

    async def reset(self) -> None:
        """POST /reset: enable every proxy and remove every toxic (api.go ResetState)."""
        for proxy in list(self.proxies.values()):
            await proxy.start()
            proxy.reset_toxics()
