"""A minimal asyncio STOMP 1.2 client for bridges: CONNECT, SEND with receipts, SUBSCRIBE,
ACK, and frames handed to a callback. It reuses the broker's sans-IO codec (StompParser,
serialize_frame) and asks for no heart-beats (a dead peer shows up as a closed socket or a
failed send, and the bridge reconnects)."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from ..protocols.stomp.codec import Frame, StompParser, serialize_frame

log = logging.getLogger("reference_broker.cluster")

VERSION = "1.2"


class StompLinkError(ConnectionError):
    """The peer refused the bridge's connection or the connection broke."""


class StompLink(asyncio.Protocol):
    def __init__(self, on_frame: Callable[[Frame], None]) -> None:
        self._on_frame = on_frame
        self._parser = StompParser()
        self._parser.version = VERSION
        self.transport: asyncio.Transport | None = None
        self.connected: asyncio.Future = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(cls, host: str, port: int, on_frame: Callable[[Frame], None], *, login: str | None = None,
                   passcode: str | None = None, timeout: float = 10.0) -> tuple["StompLink", Frame]:
        """Connect and log in; returns the link and the CONNECTED frame."""
        loop = asyncio.get_running_loop()
        link = cls(on_frame)
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that lands as
        # the connect completes, and the bridge's retry loop would outlive its stop.
        async with asyncio.timeout(timeout):
            await loop.create_connection(lambda: link, host, port)
        headers = [("accept-version", VERSION), ("host", host), ("heart-beat", "0,0")]
        if login is not None:
            headers += [("login", login), ("passcode", passcode or "")]
        link.write("CONNECT", headers)
        try:
            async with asyncio.timeout(timeout):
                connected = await asyncio.shield(link.connected)
        except BaseException:
            link.close()
            raise
        return link, connected

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            events = self._parser.feed(data)
        except Exception as exc:  # noqa: BLE001 - a peer speaking garbage ends the link
            log.warning("bridge: malformed STOMP from peer, closing: %s", exc)
            self.close()
            return
        for event in events:
            if not isinstance(event, Frame):
                continue  # heart-beat
            if event.command == "CONNECTED" and not self.connected.done():
                self.connected.set_result(event)
            elif event.command == "ERROR" and not self.connected.done():
                self.connected.set_exception(StompLinkError(
                    f"peer refused the bridge: {event.get('message')} {event.body[:200]!r}"))
            else:
                self._on_frame(event)

    def connection_lost(self, exc) -> None:
        if not self.connected.done():
            self.connected.set_exception(StompLinkError(f"peer closed the connection: {exc}"))
        if not self.closed.done():
            self.closed.set_result(exc)

    # ------------------------------------------------------------ sending

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.closed.done() and not self.transport.is_closing()

    def write(self, command: str, headers: list[tuple[str, str]], body: bytes = b"") -> bool:
        if self.transport is None or self.transport.is_closing():
            return False
        self.transport.write(serialize_frame(command, headers, body, VERSION))
        return True

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
