"""Toxic types of the fault proxy, with Toxiproxy's names, attributes and semantics.

Each toxic type is a small class: its attribute schema (name -> default), how it validates a
request, and ``process``: an async generator that takes one chunk travelling through a link and
yields what comes out (nothing, the chunk, or slices of it). Per-connection state lives in a
``ToxicRuntime`` owned by the link (``link.py``), so one toxic serves many connections, as in
Toxiproxy (toxics/toxic.go: a toxic holds settings, a ToxicStub holds per-connection state).

Semantics follow Shopify/toxiproxy's toxics/*.go and README "Toxics" section; where this
implementation differs on purpose the comment says so.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, ClassVar, Protocol

UPSTREAM = "upstream"  # client -> server (README "Toxic fields")
DOWNSTREAM = "downstream"  # server -> client
STREAMS = (UPSTREAM, DOWNSTREAM)


class ApiError(Exception):
    """An error with Toxiproxy's body shape ``{"error": message, "status": code}`` (api.go)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


def bad_request_body(detail: str) -> ApiError:
    # api.go: ErrBadRequestBody is joined with the decoder's message.
    return ApiError(f"bad request body: {detail}", 400)


class CloseLink(Exception):
    """Raised by a toxic to close the connection gracefully (Toxiproxy: stub.Close())."""


class ResetLink(Exception):
    """Raised by a toxic to reset the connection (TCP RST, SO_LINGER 0; toxics/reset_peer.go)."""


@dataclass(slots=True)
class Chunk:
    """Bytes read from one side, stamped with the `ToxicPipe.now` time they arrived; ``data=None`` is EOF."""

    data: bytes | None
    ts: float

    @property
    def eof(self) -> bool:
        return self.data is None


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class ToxicPipe(Protocol):
    """What a toxic may ask of the link direction it runs on (``link.Pipe`` implements it).

    Declared here, by the toxics that use it, so ``link`` depends on ``toxics`` and never the
    other way round."""

    def now(self) -> float:
        """The clock chunks are stamped with (`Chunk.ts`)."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable: ...

    async def sleep_until(self, deadline: float, runtime: "ToxicRuntime") -> bool:
        """Sleep until ``deadline``; False if the toxic was removed or updated meanwhile."""
        ...

    def close_link(self) -> None:
        """Close the destination after what was already written."""
        ...


class ToxicType:
    """Base class: attribute schema plus the per-chunk behaviour."""

    type_name: ClassVar[str]
    attribute_defaults: ClassVar[dict[str, int]]

    def start(self, toxic: "Toxic", runtime: "ToxicRuntime", pipe: ToxicPipe) -> None:
        """Called when the toxic starts applying to a link (link start, toxic added or updated)."""

    def stop(self, toxic: "Toxic", runtime: "ToxicRuntime", pipe: ToxicPipe, removed: bool) -> None:
        """Called when the toxic stops applying to a link (removed, or before an update)."""

    async def process(
        self, toxic: "Toxic", runtime: "ToxicRuntime", chunk: Chunk, pipe: ToxicPipe
    ) -> AsyncIterator[Chunk]:
        yield chunk


class Latency(ToxicType):
    # toxics/latency.go: delay = latency +/- jitter ms, measured from when the chunk was read, so
    # back-to-back chunks are delayed in parallel rather than accumulating.
    type_name = "latency"
    attribute_defaults = {"latency": 0, "jitter": 0}

    async def process(self, toxic, runtime, chunk, pipe):
        if chunk.eof:
            yield chunk
            return
        delay_ms = toxic.attributes["latency"]
        jitter = toxic.attributes["jitter"]
        if jitter > 0:
            # Go's rand.Int63n(2j) - j: uniform in [-j, j).
            delay_ms += random.randrange(2 * jitter) - jitter
        deadline = chunk.ts + delay_ms / 1000.0
        # On removal the chunk goes out at once, never dropped (latency.go "Exit fast").
        await pipe.sleep_until(deadline, runtime)
        chunk.ts = max(chunk.ts, pipe.now())
        yield chunk


class Bandwidth(ToxicType):
    # toxics/bandwidth.go: rate in KB/s (1 KB = 1000 bytes: sleep = len * 1ms / rate); chunks
    # larger than 100 ms worth of data are split so the receiver sees a steady trickle.
    type_name = "bandwidth"
    attribute_defaults = {"rate": 0}

    async def process(self, toxic, runtime, chunk, pipe):
        rate = toxic.attributes["rate"]
        if chunk.eof or rate <= 0:
            yield chunk
            return
        bytes_per_second = rate * 1000.0
        piece_size = max(1, rate * 100)
        data = chunk.data
        while data:
            piece, data = data[:piece_size], data[piece_size:]
            # A per-link virtual clock: idle time earns no burst credit (as in Go, where the
            # sleep debt is corrected by the time actually slept).
            runtime.clock = max(runtime.clock, pipe.now()) + len(piece) / bytes_per_second
            if not await pipe.sleep_until(runtime.clock, runtime):
                yield Chunk(piece + data, chunk.ts)  # removed: flush the rest, drop nothing
                return
            yield Chunk(piece, chunk.ts)


class SlowClose(ToxicType):
    # toxics/slow_close.go: data passes; the close is held back for `delay` ms.
    type_name = "slow_close"
    attribute_defaults = {"delay": 0}

    async def process(self, toxic, runtime, chunk, pipe):
        if chunk.eof:
            await pipe.sleep_until(pipe.now() + toxic.attributes["delay"] / 1000.0, runtime)
        yield chunk


class Timeout(ToxicType):
    # toxics/timeout.go: all data is dropped; after `timeout` ms the connection is closed;
    # timeout 0 never closes. README "timeout": data is dropped (not held) until the toxic is
    # removed, and removing it closes the connection (Cleanup; timeout_test.go
    # TestTimeoutToxicClosesConnectionOnRemove) - new connections then flow normally.
    type_name = "timeout"
    attribute_defaults = {"timeout": 0}

    def start(self, toxic, runtime, pipe):
        timeout_ms = toxic.attributes["timeout"]
        if timeout_ms > 0:
            runtime.timer = pipe.call_later(timeout_ms / 1000.0, pipe.close_link)

    def stop(self, toxic, runtime, pipe, removed):
        if runtime.timer is not None:
            runtime.timer.cancel()
            runtime.timer = None
        if removed:
            pipe.close_link()

    async def process(self, toxic, runtime, chunk, pipe):
        if chunk.eof:
            yield chunk
        # data: dropped on the floor


class ResetPeer(ToxicType):
    # toxics/reset_peer.go: the first chunk seen starts the timer (timeout ms, 0 = at once); the
    # chunk is discarded and the connection is closed with SO_LINGER 0, i.e. a TCP RST.
    # Difference: Toxiproxy's wait cannot be interrupted (a removal waits it out); here a removal
    # during the wait lets the chunk through.
    type_name = "reset_peer"
    attribute_defaults = {"timeout": 0}

    async def process(self, toxic, runtime, chunk, pipe):
        if chunk.eof:
            yield chunk
            return
        deadline = pipe.now() + toxic.attributes["timeout"] / 1000.0
        if await pipe.sleep_until(deadline, runtime):
            raise ResetLink()
        yield chunk


class Slicer(ToxicType):
    # toxics/slicer.go: split each chunk into pieces of about average_size +/- size_variation
    # bytes, with `delay` microseconds after each piece.
    type_name = "slicer"
    attribute_defaults = {"average_size": 0, "size_variation": 0, "delay": 0}

    @staticmethod
    def offsets(start: int, end: int, average: int, variation: int) -> list[int]:
        """Slice boundaries as pairs [s0, e0, s1, e1, ...], by recursive halving (slicer.go chunk)."""
        if (end - start) - average <= variation:
            return [start, end]
        mid = start + (end - start) // 2
        if variation > 0:
            mid += random.randrange(variation * 2) - variation
        return Slicer.offsets(start, mid, average, variation) + Slicer.offsets(
            mid, end, average, variation
        )

    async def process(self, toxic, runtime, chunk, pipe):
        if chunk.eof:
            yield chunk
            return
        attrs = toxic.attributes
        bounds = self.offsets(0, len(chunk.data), attrs["average_size"], attrs["size_variation"])
        delay = attrs["delay"] / 1_000_000.0
        for i in range(1, len(bounds), 2):
            yield Chunk(chunk.data[bounds[i - 1] : bounds[i]], chunk.ts)
            if not await pipe.sleep_until(pipe.now() + delay, runtime):
                rest = chunk.data[bounds[i] :]
                if rest:
                    yield Chunk(rest, chunk.ts)
                return


class LimitData(ToxicType):
    # toxics/limit_data.go: pass at most `bytes` bytes per connection and direction, then close.
    type_name = "limit_data"
    attribute_defaults = {"bytes": 0}

    async def process(self, toxic, runtime, chunk, pipe):
        if chunk.eof:
            yield chunk
            return
        limit = toxic.attributes["bytes"]
        remaining = max(0, limit - runtime.transmitted)
        allowed = chunk.data[:remaining]
        if allowed:
            runtime.transmitted += len(allowed)
            yield Chunk(allowed, chunk.ts)
        if limit - runtime.transmitted <= 0:
            raise CloseLink()


TOXIC_TYPES: dict[str, ToxicType] = {
    cls.type_name: cls()
    for cls in (Latency, Bandwidth, SlowClose, Timeout, ResetPeer, Slicer, LimitData)
}


@dataclass(eq=False)
class Toxic:
    """One configured toxic on a proxy, as the API shows it."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]

    @property
    def kind(self) -> ToxicType:
        return TOXIC_TYPES[self.type]

    @property
    def direction(self) -> str:
        return self.stream.lower()

    def to_json(self) -> dict[str, Any]:
        # Field order of toxics.ToxicWrapper's JSON encoding.
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


@dataclass(eq=False)
class ToxicRuntime:
    """Per-link state of one toxic (Toxiproxy: ToxicStub.State plus the toxicity roll)."""

    toxic: Toxic
    active: bool
    clock: float = 0.0  # bandwidth: when the link may next send
    transmitted: int = 0  # limit_data: bytes passed so far
    timer: Any = None  # timeout: the scheduled close
    waiters: set = field(default_factory=set)  # futures of sleeps to wake on removal / update


def _check_int(type_name: str, attr: str, value: Any) -> int:
    # Toxiproxy's attributes are Go ints: JSON strings, floats and booleans fail to decode.
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request_body(
            f"attribute '{attr}' of toxic type {type_name} must be an integer, got {value!r}"
        )
    return value


def parse_attributes(type_name: str, raw: Any, base: dict[str, int] | None = None) -> dict[str, int]:
    """Validate ``attributes`` of a request and merge them over ``base`` (or the defaults).

    Difference: Toxiproxy silently ignores an unknown attribute name (Go's JSON decoder drops
    unknown fields), so a typo such as ``latncy`` yields a toxic that does nothing. Here it is a
    400 naming the known attributes, which is what a chaos experiment needs.
    """
    kind = TOXIC_TYPES[type_name]
    result = dict(base if base is not None else kind.attribute_defaults)
    if raw is None:
        return result
    if not isinstance(raw, dict):
        raise bad_request_body(f"attributes must be a JSON object, got {raw!r}")
    for attr, value in raw.items():
        if attr not in kind.attribute_defaults:
            known = ", ".join(kind.attribute_defaults)
            raise bad_request_body(
                f"unknown attribute '{attr}' for toxic type {type_name} (known: {known})"
            )
        result[attr] = _check_int(type_name, attr, value)
    return result


def parse_toxicity(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request_body(f"toxicity must be a number between 0 and 1, got {value!r}")
    return float(value)


def toxic_from_request(body: Any) -> Toxic:
    """Build a toxic from a POST /proxies/{proxy}/toxics body (toxic_collection.go AddToxicJson)."""
    if not isinstance(body, dict):
        raise bad_request_body(f"expected a JSON object, got {type(body).__name__}")
    stream = body.get("stream", DOWNSTREAM)
    if not isinstance(stream, str):
        raise bad_request_body(f"stream must be a string, got {stream!r}")
    if stream.lower() not in STREAMS:
        raise ApiError("stream was invalid, can be either upstream or downstream", 400)
    type_name = body.get("type", "")
    if not isinstance(type_name, str):
        raise bad_request_body(f"type must be a string, got {type_name!r}")
    name = body.get("name") or f"{type_name}_{stream}"
    if not isinstance(name, str):
        raise bad_request_body(f"name must be a string, got {name!r}")
    if type_name not in TOXIC_TYPES:
        raise ApiError("invalid toxic type", 400)
    toxicity = parse_toxicity(body.get("toxicity", 1.0))
    attributes = parse_attributes(type_name, body.get("attributes"))
    return Toxic(name=name, type=type_name, stream=stream, toxicity=toxicity, attributes=attributes)
