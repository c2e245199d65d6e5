"""Thin asyncio shell around `StompSession`: socket bytes in, batched bytes out.

Why batching: the session may produce many frames per read (receipts, MESSAGE frames to this
and other connections). Each connection collects its output and writes it once, after the
current read has been fully processed and the store has group-committed (`Broker.flush`), so a
RECEIPT for a persistent send is never written before the message is in the journal.
"""

from __future__ import annotations

import asyncio
import logging

from ..config import StompConfig
from ..engine.broker import Broker
from ..protocols.stomp.session import StompSession

log = logging.getLogger("reference_broker.listeners.stomp")


class StompProtocol(asyncio.Protocol):
    def __init__(self, broker: Broker, options: StompConfig, registry: set) -> None:
        self.broker = broker
        self.options = options
        self.registry = registry
        self.transport: asyncio.Transport | None = None
        self.session: StompSession | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._close_after_flush = False
        self._loop = asyncio.get_event_loop()

    # The SessionTransport interface the session writes to.
    def write(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def close(self) -> None:
        self._close_after_flush = True
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if transport is None:
            return
        if self._out:
            self.broker.flush()  # group commit before any receipt leaves
            out, self._out = self._out, []
            if not transport.is_closing():
                transport.write(out[0] if len(out) == 1 else b"".join(out))
        if self._close_after_flush and not transport.is_closing():
            transport.close()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        # Back-pressure: dispatch pauses while the kernel buffer and ~1 MiB of ours are full.
        self.transport.set_write_buffer_limits(high=1024 * 1024, low=256 * 1024)
        self.session = StompSession(self.broker, self, self.options)
        self.registry.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.session.data_received(data)
        except Exception:  # a bug must cost one connection, never the broker
            log.exception("internal error handling STOMP data; closing that connection")
            self.session.connection_lost()
            self.close()
        if self._out or self._close_after_flush:
            self.flush()

    def pause_writing(self) -> None:
        self.session.set_writable(False)

    def resume_writing(self) -> None:
        self.session.set_writable(True)
        if self._out:
            self.flush()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.discard(self)
        if self.session is not None:
            self.session.connection_lost()
        self.transport = None
        self._out.clear()

    def tick(self, now: float, period: float = 0.0) -> None:
        if self.session is not None:
            self.session.tick(now, period)
