"""One proxied TCP connection: two sockets and a pipe per direction with its toxic chain.

With no active toxic a pipe writes each read straight to the other socket (the fast path that
keeps the added latency in the tens of microseconds). With toxics, chunks queue up and one task
per pipe carries them through the chain in order. Every control operation (add, update, remove a
toxic; drop the connection) is a plain method call on the event loop that never waits for data to
move, so removing a toxic under traffic cannot hang the API (Toxiproxy issues #412, #558).
"""
from __future__ import annotations

import asyncio
import random
import socket
import struct
import time
from collections import deque
from typing import Callable

from .toxics import DOWNSTREAM, UPSTREAM, Chunk, CloseLink, ResetLink, Toxic, ToxicRuntime

# Pause reading a source when this much data waits in a pipe's queue (backpressure).
QUEUE_HIGH_WATER = 1 << 20
QUEUE_LOW_WATER = 1 << 18


def set_reset_on_close(transport: asyncio.BaseTransport | None) -> None:
    """Make the next close send a TCP RST (SO_LINGER on, timeout 0), as reset_peer.go does."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # already closed: nothing left to reset


class Pipe:
    """One direction of a connection: reads from ``source``, writes to ``dest`` through toxics.

    The toxics see it as a `toxics.ToxicPipe` (now, call_later, sleep_until, close_link)."""

    def __init__(self, conn: "Connection", direction: str) -> None:
        self.conn = conn
        self.direction = direction
        self.loop = conn.loop
        self.source: "_Side | None" = None
        self.dest: "_Side | None" = None
        self.runtimes: list[ToxicRuntime] = []
        self.queue: deque[Chunk] = deque()
        self.queued_bytes = 0
        self.task: asyncio.Task | None = None
        self.closed = False
        self.dest_writable = asyncio.Event()
        self.dest_writable.set()

    # --- helpers the toxics use -------------------------------------------------------------
    def now(self) -> float:
        # time.monotonic(), not loop.time(): uvloop's loop time is whole milliseconds cached at
        # the start of an iteration, so a chunk stamped with it looks up to ~1 ms older than it is.
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> "DeadlineTimer":
        return DeadlineTimer(self.loop, time.monotonic() + delay, callback)

    async def sleep_until(self, deadline: float, runtime: ToxicRuntime) -> bool:
        """Sleep until ``deadline`` (a `now` time); False if the toxic was removed or updated
        meanwhile. Never returns True before the deadline (see `DeadlineTimer`)."""
        if deadline <= time.monotonic():
            return True
        fut = self.loop.create_future()
        handle = DeadlineTimer(self.loop, deadline, lambda: _resolve(fut, True))
        runtime.waiters.add(fut)
        try:
            return await fut
        finally:
            handle.cancel()
            runtime.waiters.discard(fut)

    # --- toxic chain control (called by the proxy on the loop; never blocks) ----------------
    def add_toxic(self, toxic: Toxic) -> None:
        # Toxicity is rolled once per link (README: "probability of the toxic being applied to
        # a link"); toxicity 0 therefore never applies (cf. Toxiproxy #603).
        runtime = ToxicRuntime(toxic=toxic, active=random.random() < toxic.toxicity)
        self.runtimes.append(runtime)
        if runtime.active and not self.closed:
            toxic.kind.start(toxic, runtime, self)

    def remove_toxic(self, toxic: Toxic) -> None:
        runtime = self._runtime_of(toxic)
        if runtime is None:
            return
        self.runtimes.remove(runtime)
        _wake(runtime)
        if runtime.active and not self.closed:
            toxic.kind.stop(toxic, runtime, self, removed=True)

    def update_toxic(self, toxic: Toxic) -> None:
        # Toxiproxy interrupts and restarts the toxic on every link (link.go UpdateToxic): the
        # toxicity is rolled again and timers restart with the new attributes.
        runtime = self._runtime_of(toxic)
        if runtime is None:
            return
        _wake(runtime)
        if runtime.active and not self.closed:
            toxic.kind.stop(toxic, runtime, self, removed=False)
        runtime.active = random.random() < toxic.toxicity
        if runtime.active and not self.closed:
            toxic.kind.start(toxic, runtime, self)

    def _runtime_of(self, toxic: Toxic) -> ToxicRuntime | None:
        for runtime in self.runtimes:
            if runtime.toxic is toxic:
                return runtime
        return None

    def _has_active_toxic(self) -> bool:
        for runtime in self.runtimes:
            if runtime.active:
                return True
        return False

    # --- data path ---------------------------------------------------------------------------
    def on_data(self, data: bytes) -> None:
        if self.closed:
            return
        if self.task is None and not self.queue and not self._has_active_toxic():
            dest = self.dest
            if dest is not None and dest.transport is not None and not dest.transport.is_closing():
                dest.transport.write(data)
            return
        self._enqueue(Chunk(data, time.monotonic()))

    def on_source_end(self) -> None:
        """The source sent EOF or went away: pass the end through the chain, then close dest."""
        if self.closed:
            return
        self._enqueue(Chunk(None, time.monotonic()))

    def _enqueue(self, chunk: Chunk) -> None:
        self.queue.append(chunk)
        if chunk.data is not None:
            self.queued_bytes += len(chunk.data)
            if self.queued_bytes > QUEUE_HIGH_WATER and self.source is not None:
                self.source.pause("queue")
        if self.task is None:
            self.task = self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self.queue and not self.closed:
                chunk = self.queue.popleft()
                if chunk.data is not None:
                    self.queued_bytes -= len(chunk.data)
                    if self.queued_bytes < QUEUE_LOW_WATER and self.source is not None:
                        self.source.resume("queue")
                await self._feed(chunk, 0, frozenset())
        except CloseLink:
            self.close_link()
        except ResetLink:
            self.conn.reset()
        finally:
            self.task = None

    async def _feed(self, chunk: Chunk, start: int, applied: frozenset) -> None:
        # Walk the *current* chain, skipping toxics this chunk already went through, so a toxic
        # added or removed while the chunk is in flight takes effect at once.
        runtimes = self.runtimes
        for index in range(min(start, len(runtimes)), len(runtimes)):
            runtime = runtimes[index]
            if runtime.active and id(runtime) not in applied:
                done = applied | {id(runtime)}
                toxic = runtime.toxic
                async for out in toxic.kind.process(toxic, runtime, chunk, self):
                    await self._feed(out, 0, done)
                return
        await self._emit(chunk)

    async def _emit(self, chunk: Chunk) -> None:
        if self.closed:
            return
        if chunk.data is None:
            self.close_link()
            return
        if not self.dest_writable.is_set():
            await self.dest_writable.wait()
        dest = self.dest
        if dest is not None and dest.transport is not None and not dest.transport.is_closing():
            dest.transport.write(chunk.data)

    def close_link(self) -> None:
        """Close dest after flushing what was written (Toxiproxy: the link's writer closes dest)."""
        if self.closed:
            return
        self.closed = True
        for runtime in self.runtimes:
            if runtime.timer is not None:
                runtime.timer.cancel()
            _wake(runtime)
        self.queue.clear()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        if self.dest is not None:
            self.dest.close()


class DeadlineTimer:
    """Calls ``callback`` on the loop once ``time.monotonic()`` has reached ``deadline``, never
    before. uvloop's timers count whole milliseconds from the loop time cached at the start of an
    iteration, so a plain ``call_at`` can fire up to ~1.5 ms early: CI saw a 120 ms latency toxic
    deliver after 119.75 ms, where Toxiproxy promises at least the configured delay
    (toxics/latency.go). A timer that wakes early re-arms itself for what is left."""

    __slots__ = ("_loop", "_deadline", "_callback", "_handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: float, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._deadline = deadline
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._handle = self._loop.call_later(max(0.0, self._deadline - time.monotonic()), self._fire)

    def _fire(self) -> None:
        if time.monotonic() < self._deadline:
            self._arm()
            return
        self._handle = None
        self._callback()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def _resolve(fut: asyncio.Future, value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


def _wake(runtime: ToxicRuntime) -> None:
    for fut in list(runtime.waiters):
        _resolve(fut, False)


class _Side(asyncio.Protocol):
    """One socket of a connection: the client's accepted socket or the socket to the upstream."""

    def __init__(self, conn: "Connection") -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.reads_into: Pipe | None = None
        self.writes_from: Pipe | None = None
        self._pause_reasons: set[str] = set()
        self.lost = False
        self.early: list[bytes] = []  # read before the upstream was connected
        self.early_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # small request/response messages must not wait for Nagle
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        if self.reads_into is not None:
            self.reads_into.on_data(data)
        else:
            # uvloop may deliver data even though reading was paused in connection_made.
            self.early.append(data)

    def eof_received(self) -> bool:
        if self.reads_into is not None:
            self.reads_into.on_source_end()
        else:
            self.early_eof = True
        return True  # keep the socket open for the other direction until its pipe closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.reads_into is not None:
            self.reads_into.on_source_end()
        if self.writes_from is not None:
            self.writes_from.dest_writable.set()
        self.conn.side_lost()

    # backpressure: the writing side of this socket is full -> stop reading the other socket
    def pause_writing(self) -> None:
        if self.writes_from is not None:
            self.writes_from.dest_writable.clear()
            if self.writes_from.source is not None:
                self.writes_from.source.pause("dest")

    def resume_writing(self) -> None:
        if self.writes_from is not None:
            self.writes_from.dest_writable.set()
            if self.writes_from.source is not None:
                self.writes_from.source.resume("dest")

    def pause(self, reason: str) -> None:
        if reason not in self._pause_reasons:
            self._pause_reasons.add(reason)
            if len(self._pause_reasons) == 1 and self.transport is not None and not self.lost:
                try:
                    self.transport.pause_reading()
                except (RuntimeError, AttributeError):
                    pass

    def resume(self, reason: str) -> None:
        if reason in self._pause_reasons:
            self._pause_reasons.discard(reason)
            if not self._pause_reasons and self.transport is not None and not self.lost:
                try:
                    self.transport.resume_reading()
                except (RuntimeError, AttributeError):
                    pass

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class Connection:
    """A client accepted by a proxy, linked to its own connection to the upstream."""

    def __init__(self, proxy, loop: asyncio.AbstractEventLoop) -> None:
        self.proxy = proxy
        self.loop = loop
        self.client: _Side = _ClientSide(self)
        self.upstream = _Side(self)
        self.pipes = {UPSTREAM: Pipe(self, UPSTREAM), DOWNSTREAM: Pipe(self, DOWNSTREAM)}
        self.connect_task: asyncio.Task | None = None
        self.finished = False

    def on_client_connected(self) -> None:
        # Like Toxiproxy (proxy.go server()): accept first, then dial the upstream; if that
        # fails the client is closed right away. So a client sees a successful connect followed
        # by EOF while the upstream is down (Toxiproxy #265 documents this; we keep it).
        self.client.pause("connecting")
        self.connect_task = self.loop.create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        host, port = self.proxy.upstream_address()
        try:
            await asyncio.wait_for(
                self.loop.create_connection(lambda: self.upstream, host, port),
                timeout=self.proxy.upstream_connect_timeout,
            )
        except (OSError, asyncio.TimeoutError, ValueError):
            self.client.close()
            return
        finally:
            self.connect_task = None
        if self.client.lost:
            self.upstream.close()
            return
        up, down = self.pipes[UPSTREAM], self.pipes[DOWNSTREAM]
        up.source, up.dest = self.client, self.upstream
        down.source, down.dest = self.upstream, self.client
        self.client.reads_into, self.client.writes_from = up, down
        self.upstream.reads_into, self.upstream.writes_from = down, up
        for toxic in self.proxy.toxics_for(UPSTREAM):
            up.add_toxic(toxic)
        for toxic in self.proxy.toxics_for(DOWNSTREAM):
            down.add_toxic(toxic)
        # Replay what either side sent (or whether it closed) before the pipes existed.
        for side, pipe in ((self.client, up), (self.upstream, down)):
            early, side.early = side.early, []
            for data in early:
                pipe.on_data(data)
            if side.early_eof or side.lost:
                pipe.on_source_end()
        if self.upstream.lost:
            up.close_link()
        self.client.resume("connecting")

    def side_lost(self) -> None:
        if self.client.lost and (self.upstream.lost or self.upstream.transport is None):
            self._finish()
        elif self.client.lost and self.connect_task is not None:
            self.connect_task.cancel()
            self._finish()

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            for pipe in self.pipes.values():
                pipe.closed = True
                for runtime in pipe.runtimes:
                    if runtime.timer is not None:
                        runtime.timer.cancel()
                    _wake(runtime)
                if pipe.task is not None:
                    pipe.task.cancel()
            self.proxy.connection_finished(self)

    def reset(self) -> None:
        """Reset both sockets (RST), as reset_peer does."""
        for pipe in self.pipes.values():
            pipe.closed = True
        for side in (self.client, self.upstream):
            set_reset_on_close(side.transport)
            side.abort()

    def drop(self) -> None:
        """Drop the connection at once (proxy disabled, deleted or changed; proxy.go stop())."""
        if self.connect_task is not None:
            self.connect_task.cancel()
        for pipe in self.pipes.values():
            pipe.closed = True
        self.client.abort()
        self.upstream.abort()
        self._finish()


class _ClientSide(_Side):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self.conn.proxy.register(self.conn):
            transport.abort()
            return
        self.conn.on_client_connected()
