"""One cluster link: a TCP connection between two nodes carrying `wire` frames.

The dialing node (`Connector`, one per static connector or discovered node) opens it with a
``hello`` carrying the cluster user and password (artemis-clusters.md, "Cluster User
Credentials"); the accepting node answers ``welcome`` (with its node name and scale-down group)
or ``refused`` and closes. Afterwards both ends may send any frame: ``bindings`` (accepting ->
dialing), ``forward`` / ``ack`` (a message handed on, acknowledged once the receiver has it),
``request`` / ``response`` (an RPC, e.g. for the clustered grouping handlers), ``ping`` (every
check_period; a link silent for connection_ttl is closed: a frozen peer keeps its socket open).

The dialer keeps every forward until its ack; after a reconnect it sends the unacknowledged ones
again, with the same duplicate id, so the receiver can drop what it already has
(use-duplicate-detection). Reconnects follow `RetryPolicy`; when the attempts run out the node is
given up: `on_give_up` gets the forwards it never acknowledged.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Awaitable, Callable

from . import wire
from .retry import RetryPolicy

log = logging.getLogger("reference_broker.clustering")

_HELLO_TIMEOUT = 5.0


class LinkRefused(ConnectionError):
    """The peer refused the link (wrong cluster credentials) or did not answer the hello."""


class Link:
    """An open cluster connection, either end. ``peer``: the other node's name."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str,
                 peer_group: str | None = None, opening: "Opening | None" = None) -> None:
        self.reader = reader
        # what came in with the hello / welcome: the frames after it, and the reader's partial frame
        self._frames = opening.reader if opening is not None else wire.FrameReader()
        self._early = list(opening.rest) if opening is not None else []
        self.writer = writer
        self.peer = peer
        self.peer_group = peer_group
        self.connector: "Connector | None" = None  # set on the dialing end
        self.acks: list[str] = []  # forwards received in this read, acknowledged after the flush
        self.last_announced: dict | None = None  # the bindings frame last sent on this link (service.py)
        self._out: list[bytes] = []  # frames waiting for the end of this turn of the loop
        self._rids = itertools.count(1)
        self._calls: dict[int, asyncio.Future] = {}
        self.closed = asyncio.get_running_loop().create_future()
        self.last_heard = asyncio.get_running_loop().time()  # anything read, pings included

    @property
    def is_open(self) -> bool:
        return not self.closed.done() and not self.writer.is_closing()

    def send(self, frame: dict) -> bool:
        """Queue ``frame``; the frames sent in one turn of the loop go out in one write."""
        if not self.is_open:
            return False
        self._out.append(wire.encode(frame))
        if len(self._out) == 1:
            asyncio.get_running_loop().call_soon(self._write_out)
        return True

    def _write_out(self) -> None:
        out, self._out = self._out, []
        if out and not self.writer.is_closing():
            self.writer.write(b"".join(out))

    async def request(self, body: dict) -> dict:
        """Send ``body`` as a request and return the peer's answer; ConnectionError when the link
        breaks first or the peer answered with an error."""
        rid = next(self._rids)
        future = asyncio.get_running_loop().create_future()
        self._calls[rid] = future
        if not self.send({"kind": "request", "rid": rid, "body": body}):
            self._calls.pop(rid, None)
            raise ConnectionError(f"cluster link to {self.peer} is closed")
        try:
            return await future
        finally:
            self._calls.pop(rid, None)

    def answered(self, frame: dict) -> None:
        future = self._calls.get(frame.get("rid"))
        if future is None or future.done():
            return
        if "error" in frame:
            future.set_exception(ConnectionError(f"node {self.peer} answered: {frame['error']}"))
        else:
            future.set_result(frame.get("body") or {})

    async def serve(self, on_frame: Callable[["Link", dict], None],
                    on_batch: Callable[["Link"], None] | None = None) -> None:
        """Read frames until the connection ends, handing each to ``on_frame``; ``on_batch``
        after each read's frames (group commit: one flush and one ack frame per read)."""
        reader = self._frames
        try:
            early, self._early = self._early, []
            for frame in early:
                on_frame(self, frame)
            if early and on_batch is not None:
                on_batch(self)
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                self.last_heard = asyncio.get_running_loop().time()
                for frame in reader.feed(data):
                    if frame["kind"] == "response":
                        self.answered(frame)
                    else:
                        on_frame(self, frame)
                if on_batch is not None:
                    on_batch(self)
        except (ConnectionError, wire.FrameError) as exc:
            log.info("cluster link to %s ended: %s", self.peer, exc)
        finally:
            self.close()

    def close(self) -> None:
        self._write_out()
        if not self.writer.is_closing():
            self.writer.close()
        if not self.closed.done():
            self.closed.set_result(None)
        for future in self._calls.values():
            if not future.done():
                future.set_exception(ConnectionError(f"cluster link to {self.peer} closed"))


class Opening:
    """The first frame of a new connection (hello / welcome), the frames read with it, and the
    frame reader holding any partial frame after them (the link goes on reading with it)."""

    def __init__(self, first: dict, rest: list[dict], reader: wire.FrameReader) -> None:
        self.first, self.rest, self.reader = first, rest, reader


async def read_opening(reader: asyncio.StreamReader, timeout: float) -> Opening:
    frames = wire.FrameReader()
    async with asyncio.timeout(timeout):
        while True:
            data = await reader.read(65536)
            if not data:
                raise LinkRefused("the peer closed the connection before answering")
            got = frames.feed(data)
            if got:
                return Opening(got[0], got[1:], frames)


class Connector:
    """The dialing end of this node's link to the node at ``host:port``."""

    def __init__(self, host: str, port: int, hello: dict, retry: RetryPolicy,
                 on_link: Callable[[Link], Awaitable[None]],
                 on_give_up: Callable[["Connector", list[dict]], None]) -> None:
        self.host, self.port = host, port
        self.hello = hello
        self.retry = retry
        self.on_link = on_link  # serves the link; returns when it ends
        self.on_give_up = on_give_up
        self.link: Link | None = None
        self.peer: str | None = None  # known after the first welcome
        self.peer_group: str | None = None
        self.pending: dict[str, dict] = {}  # duplicate id -> forward frame, until acknowledged
        self.connections = 0  # links established so far (each reconnect counts)
        self.given_up = False
        self._stopping = False
        self._task: asyncio.Task | None = None

    @property
    def up(self) -> bool:
        return self.link is not None and self.link.is_open

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True  # ends the dial loop even if a cancel is lost at an await
        if self.link is not None:
            self.link.close()  # first: a served link returns to the loop, which sees _stopping
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass

    def forward(self, frame: dict) -> None:
        """Send a forward now if the link is up; keep it until acknowledged either way."""
        self.pending[frame["id"]] = frame
        if self.link is not None:
            self.link.send(frame)

    def acknowledged(self, duplicate_id: str) -> None:
        self.pending.pop(duplicate_id, None)

    async def _dial(self) -> Link:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the connection instead of
        # raising when a cancel (stop) lands just as the connect completes, and this loop went on
        # dialing forever under a stop that waited for it (seen in CI).
        async with asyncio.timeout(_HELLO_TIMEOUT):
            reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(wire.encode(self.hello))
            opening = await read_opening(reader, _HELLO_TIMEOUT)
        except BaseException:
            writer.close()
            raise
        answer = opening.first
        if answer.get("kind") != "welcome":
            writer.close()
            raise LinkRefused(f"node at {self.host}:{self.port} refused the cluster link: "
                              f"{answer.get('reason', answer)}")
        link = Link(reader, writer, str(answer["node"]), answer.get("group"), opening)
        link.connector = self
        return link

    async def _run(self) -> None:
        # failures: attempts failed in a row, what initial- / reconnect-attempts count; waits: the
        # waits since the link was last up, what the multiplier counts. They differ after a loss:
        # the wait before the first reconnect attempt is the first retry-interval, so the attempt
        # after it waits retry-interval x multiplier (CLU-CC-RETRY-2), not retry-interval again
        failures = waits = 0
        while not self._stopping:
            try:
                link = await self._dial()
            except (OSError, LinkRefused, TimeoutError, wire.FrameError) as exc:
                failures += 1
                if self.retry.gives_up(failures, ever_connected=self.connections > 0):
                    self._give_up(f"{failures} attempts failed, the last: {exc}")
                    return
                log.info("cluster link to %s:%d: attempt %d failed (%s)", self.host, self.port, failures, exc)
                waits += 1
                await asyncio.sleep(self.retry.delay(waits))
                continue
            failures = waits = 0
            self.link, self.peer, self.peer_group = link, link.peer, link.peer_group
            self.connections += 1
            log.info("cluster link %s -> %s up (%s:%d)", self.hello["node"], link.peer, self.host, self.port)
            for frame in list(self.pending.values()):  # resent with the same duplicate ids
                link.send(frame)
            await self.on_link(link)
            self.link = None
            log.info("cluster link %s -> %s down", self.hello["node"], link.peer)
            if self.retry.gives_up(0, ever_connected=True):
                self._give_up("reconnect_attempts is 0")
                return
            waits = 1
            await asyncio.sleep(self.retry.delay(waits))

    def _give_up(self, why: str) -> None:
        self.given_up = True
        log.warning("cluster link to %s (%s:%d) given up, the node is considered down: %s",
                    self.peer or "?", self.host, self.port, why)
        pending, self.pending = list(self.pending.values()), {}
        self.on_give_up(self, pending)
