"""Thin asyncio shell around `AmqpSession`: socket bytes in, proton's bytes out.

Like the STOMP listener, output is written once per read (and once per loop iteration for
deliveries caused by other connections), after `Broker.flush()`: a disposition that accepts a
durable message never leaves before the store's group commit.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

from ..config import AmqpConfig
from ..engine.broker import Broker
from ..store.base import StoreError
from ..protocols.amqp.session import AmqpSession

log = logging.getLogger("reference_broker.listeners.amqp")


class AmqpProtocol(asyncio.Protocol):
    def __init__(self, broker: Broker, options: AmqpConfig, registry: set) -> None:
        self.broker = broker
        self.options = options
        self.registry = registry
        self.transport: asyncio.Transport | None = None
        self.session: AmqpSession | None = None
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._loop = asyncio.get_event_loop()

    # The SessionTransport interface.
    def wake(self) -> None:
        if not self._flush_scheduled and self.transport is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        transport, session = self.transport, self.session
        if transport is None or session is None:
            return
        try:
            out = session.data_to_send()
        except Exception:  # a bug must cost one connection, never the broker
            log.exception("internal error producing AMQP output; closing that connection")
            session.connection_lost()
            transport.abort()
            return
        if out:
            try:
                self.broker.flush()  # group commit before any disposition leaves
            except StoreError:
                # nothing of this batch is confirmed: drop it with the connection (the server has
                # logged the failure and is closing every connection: server.py _on_store_failure)
                transport.abort()
                return
            if not transport.is_closing():
                transport.write(out)
        if session.finished and not transport.is_closing():
            transport.close()
            return
        self._arm(session.deadline)

    def _arm(self, deadline: float) -> None:
        """Make sure proton is ticked by its next deadline (empty frames for a client with a
        short idle time-out cannot wait for the housekeeping round)."""
        if not deadline or (self._timer is not None and self._timer_at <= deadline):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self._loop.call_later(max(0.0, deadline - time.monotonic()), self._on_timer)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.transport.set_write_buffer_limits(high=1024 * 1024, low=256 * 1024)
        self.session = AmqpSession(self.broker, self, self.options)
        self.registry.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.session.data_received(data)
        except Exception:
            log.exception("internal error handling AMQP data; closing that connection")
            self.session.connection_lost()
            self.transport.abort()
            return
        self.flush()

    def eof_received(self) -> bool:
        self.session.eof_received()
        self.flush()
        return False

    def pause_writing(self) -> None:
        self.session.set_writable(False)

    def resume_writing(self) -> None:
        self.session.set_writable(True)
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.session is not None:
            self.session.connection_lost()
        self.transport = None

    def tick(self, now: float, period: float = 0.0) -> None:
        if self.session is None or self.transport is None:
            return
        self.session.tick(now)
        self.flush()

    def _on_timer(self) -> None:
        self._timer = None
        self.tick(time.monotonic())
