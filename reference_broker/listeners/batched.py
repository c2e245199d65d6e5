"""The asyncio shell shared by the byte-stream front-ends (STOMP, MQTT): socket bytes go to a
sans-IO session; what the session writes is collected and sent once per read.

Why batching: a session may produce many frames per read (receipts, acks, deliveries to this
and other connections). Each connection writes its output once, after the current read has been
fully processed and the store has group-committed (`Broker.flush`), so an acknowledgement of a
persistent message (a STOMP RECEIPT, an MQTT PUBACK/PUBREC) never leaves before the message is
in the journal.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from ..engine.broker import Broker
from ..store.base import StoreError

log = logging.getLogger("reference_broker.listeners")

# Back-pressure: dispatch to a connection pauses while the kernel buffer and this much of ours
# are full, and resumes below the low mark.
WRITE_BUFFER_HIGH = 1024 * 1024
WRITE_BUFFER_LOW = 256 * 1024


class BatchedSessionProtocol(asyncio.Protocol):
    """Subclasses set `protocol_name` and implement `make_session()`; the session gets this
    object as its transport (write / close / pause_reading / resume_reading)."""

    protocol_name = "?"

    def __init__(self, broker: Broker, registry: set) -> None:
        self.broker = broker
        self.registry = registry  # open connections, ticked and closed by the server
        self.transport: asyncio.Transport | None = None
        self.session = None
        self._out: list[bytes] = []
        self._out_bytes = 0
        # Dispatch paused by us (not by asyncio's pause_writing) because one turn of the loop
        # produced more than WRITE_BUFFER_HIGH for this connection (see `write`).
        self._held_back = False
        self._flush_scheduled = False
        self._close_after_flush = False
        self._loop = asyncio.get_event_loop()

    def make_session(self):
        raise NotImplementedError

    # ---- the SessionTransport interface the session writes to

    def write(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > WRITE_BUFFER_HIGH and not self._held_back and self.session is not None:
            # asyncio's pause_writing only comes after the batch is handed to the transport: a
            # burst inside one turn (retained messages for a new subscription, a topic fan-out)
            # would otherwise all be buffered here at once, whatever the peer reads (issue 20,
            # item 5). Stop dispatching now; `flush` resumes once the transport can take more.
            self._held_back = True
            self.session.set_writable(False)
        self._schedule_flush()

    def close(self) -> None:
        self._close_after_flush = True
        self._schedule_flush()

    def _schedule_flush(self) -> None:
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
            try:
                self.broker.flush()  # group commit before any acknowledgement leaves
            except StoreError:
                # Nothing of this batch is confirmed: drop it with the connection. The server has
                # logged the failure and is closing every connection (server.py _on_store_failure).
                self._out = []
                self._out_bytes = 0
                transport.abort()
                return
            out, self._out = self._out, []
            self._out_bytes = 0
            if not transport.is_closing():
                transport.write(out[0] if len(out) == 1 else b"".join(out))
        if self._close_after_flush and not transport.is_closing():
            transport.close()
            return
        if self._held_back and not transport.is_closing() and transport.get_write_buffer_size() <= WRITE_BUFFER_HIGH:
            # The transport took the batch without pausing us: dispatch again on the next turn
            # (not now, so other connections get the loop in between). Above the mark asyncio
            # has called pause_writing and its resume_writing ends the hold instead.
            self._loop.call_soon(self._end_hold)

    def _end_hold(self) -> None:
        if not self._held_back:
            return
        self._held_back = False
        transport = self.transport
        if transport is None or transport.is_closing() or self.session is None:
            return
        if transport.get_write_buffer_size() <= WRITE_BUFFER_HIGH:
            self.session.set_writable(True)

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        self.session = self.make_session()
        self.registry.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.session.data_received(data)
        except Exception:  # a bug must cost one connection, never the broker
            log.exception("internal error handling %s data; closing that connection", self.protocol_name)
            self._release_session()
            self.close()
        if self._out or self._close_after_flush:
            self.flush()

    def pause_writing(self) -> None:
        self.session.set_writable(False)

    def resume_writing(self) -> None:
        self._held_back = False
        self.session.set_writable(True)
        if self._out:
            self.flush()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.discard(self)
        self._release_session()
        self.transport = None
        self._out.clear()
        self._out_bytes = 0

    def _release_session(self) -> None:
        if self.session is None:
            return
        try:
            self.session.connection_lost()
        except Exception:  # e.g. an MQTT will that cannot be routed: log, keep the broker up
            log.exception("internal error closing a %s session", self.protocol_name)

    def tick(self, now: float, period: float = 0.0) -> None:
        if self.session is not None:
            self.session.tick(now, period)
