"""Thin asyncio shell around `MqttSession`: socket bytes in, batched bytes out.

As for STOMP (listeners/stomp.py): a connection collects what its session writes and sends it
once the current read has been processed and the store has group-committed (`Broker.flush`), so
a PUBACK or PUBREC for a persistent (QoS 1/2) message never leaves before the message is in the
journal.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from ..config import MqttConfig
from ..engine.broker import Broker
from ..protocols.mqtt.session import MqttSession, MqttSessionRegistry

log = logging.getLogger("reference_broker.listeners.mqtt")


class MqttProtocol(asyncio.Protocol):
    def __init__(self, broker: Broker, options: MqttConfig, sessions: MqttSessionRegistry, registry: set) -> None:
        self.broker = broker
        self.options = options
        self.sessions = sessions
        self.registry = registry  # open connections, ticked and closed by the server
        self.transport: asyncio.Transport | None = None
        self.session: MqttSession | None = None
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
            self.broker.flush()  # group commit before any PUBACK / PUBREC leaves
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
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        # Back-pressure: dispatch pauses while the kernel buffer and ~1 MiB of ours are full.
        self.transport.set_write_buffer_limits(high=1024 * 1024, low=256 * 1024)
        self.session = MqttSession(self.broker, self, self.sessions, self.options)
        self.registry.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.session.data_received(data)
        except Exception:  # a bug must cost one connection, never the broker
            log.exception("internal error handling MQTT data; closing that connection")
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
            try:
                self.session.connection_lost()
            except Exception:  # noqa: BLE001 - e.g. a will that cannot be routed
                log.exception("internal error closing an MQTT session")
        self.transport = None
        self._out.clear()

    def tick(self, now: float, period: float = 0.0) -> None:
        if self.session is not None:
            self.session.tick(now, period)
