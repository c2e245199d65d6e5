"""UDP broadcast and discovery groups (artemis-clusters.md, "Broadcast Groups", "Discovery
Groups"): the broadcast group sends this node's cluster acceptor to the group address every
``broadcast_period`` ms; the discovery group keeps every other node it hears and drops one not
heard for ``refresh_timeout`` ms.

The datagram is this project's own (JSON: node name and acceptor), not Artemis's binary one: only
reference nodes hear each other. The socket is the networks of brokers' loopback multicast socket
(reference_broker/cluster/discovery.py: joined on 127.0.0.1, TTL 0, so nothing leaves the host).
`DiscoveryTable` is the sans-IO part.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

from ..cluster.discovery import DiscoveryUri, _multicast_socket
from ..config import ClusterDiscoveryConfig

log = logging.getLogger("reference_broker.clustering")

_KIND = "artemis-style-cluster-node"


def announcement(node: str, host: str, port: int) -> bytes:
    return json.dumps({"kind": _KIND, "node": node, "host": host, "port": port}).encode()


def parse_announcement(data: bytes) -> tuple[str, str, int] | None:
    try:
        frame = json.loads(data)
        if frame.get("kind") != _KIND:
            return None
        return str(frame["node"]), str(frame["host"]), int(frame["port"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class DiscoveryTable:
    """Nodes heard, with when; `expired(now)` the ones silent past the refresh timeout."""

    def __init__(self, me: str, refresh_timeout_ms: int) -> None:
        self.me = me
        self.refresh_timeout = refresh_timeout_ms / 1000
        self.heard: dict[str, tuple[str, int, float]] = {}

    def heard_from(self, data: bytes, now: float) -> tuple[str, str, int] | None:
        """The node, if this datagram announces one not known before."""
        parsed = parse_announcement(data)
        if parsed is None or parsed[0] == self.me:
            return None
        node, host, port = parsed
        new = node not in self.heard or self.heard[node][:2] != (host, port)
        self.heard[node] = (host, port, now)
        return parsed if new else None

    def expired(self, now: float) -> list[str]:
        gone = [n for n, (_, _, at) in self.heard.items() if now - at > self.refresh_timeout]
        for node in gone:
            del self.heard[node]
        return gone


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, owner: "UdpDiscovery") -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr) -> None:
        self.owner._received(data)


class UdpDiscovery:
    def __init__(self, config: ClusterDiscoveryConfig, me: str, acceptor: tuple[str, int],
                 on_found: Callable[[str, str, int], None], on_lost: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.me = me
        host = acceptor[0] if acceptor[0] not in ("", "0.0.0.0") else "127.0.0.1"
        self.datagram = announcement(me, host, acceptor[1])
        self.table = DiscoveryTable(me, config.refresh_timeout)
        self.on_found = on_found
        self.on_lost = on_lost
        self._transport = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        uri = DiscoveryUri(address=self.config.group_address, port=self.config.group_port)
        sock = _multicast_socket(uri)
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), sock=sock)
        self._task = loop.create_task(self._broadcast_forever())

    async def _broadcast_forever(self) -> None:
        period = self.config.broadcast_period / 1000
        check = min(period, self.config.refresh_timeout / 2000)
        next_broadcast = 0.0
        while True:
            now = time.monotonic()
            if now >= next_broadcast:
                self._transport.sendto(self.datagram, (self.config.group_address, self.config.group_port))
                next_broadcast = now + period
            for node in self.table.expired(now):
                log.info("cluster node %s: %s not heard for %d ms, dropped", self.me, node, self.config.refresh_timeout)
                if self.on_lost is not None:
                    self.on_lost(node)
            await asyncio.sleep(max(0.01, min(check, next_broadcast - time.monotonic())))

    def _received(self, data: bytes) -> None:
        found = self.table.heard_from(data, time.monotonic())
        if found is not None:
            self.on_found(*found)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._transport is not None:
            self._transport.close()
