"""A listener standing in for a cluster node that is down, noting each connection attempt of the
link dialing it (`AttemptRecorder`); used by CLU-CC-RETRY-2 (test_cluster_link_faults.py).

Not a suite (no ``test_`` prefix).

When each connection is closed matters. The link dials the fault proxy, which accepts at once and
then reaches the recorder (Toxiproxy does the same): so every attempt is a connection that opens
and is then dropped, never a refused connect. An Artemis 2.40.0 cluster bridge misses a drop that
lands while it is still setting its connection up, and then blocks for its call-timeout (30 s)
before it tries again: seen here with jstack (the bridge thread parked in
``ChannelImpl.sendBlocking`` under ``BridgeImpl$ConnectRunnable`` -> ``createSession``) and in the
log (AMQ222186 ``unable to authorise cluster control: AMQ219016``, then no AMQ224091 retry line
for 30 s). Reading the 2.40.0 sources: a blocking call waits on a channel that a failure wakes only
if the channel existed when the failure was handled (``RemotingConnectionImpl.fail`` / ``destroy``
walk the existing channels; ``ChannelImpl.sendBlocking`` resets its response before it writes),
and a bridge that has just connected opens its cluster channel (``ClusterControl.authorize``) and
then channel 1 (``createSession``) one after the other. The first attempts after a JVM start take
the cold path, where the 7-byte handshake goes out some 60 ms before the first request (measured
here); the old recorder closed 50 ms after the first bytes, so it dropped those attempts mid-set-up
and the bridge went quiet after two to four attempts.

So the recorder closes a connection only once the client's opening request has fully arrived (the
client then waits for the answer, which a drop does wake) and `HOLD` seconds more, and it notes
what that request was: an Artemis bridge opens with CLUSTER_CONNECT (its cluster-user handshake),
a reference cluster link with its ``hello`` frame. Other connections are noted but are not link
attempts: Artemis's cluster controller keeps its own topology connection to the same address,
and when that connection is dropped it reconnects with CHECK_FOR_FAILOVER (and then waits its own
call-timeout: the failure is queued behind the blocked call on the factory's ordered executor).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from dataclasses import dataclass

__all__ = ["Attempt", "AttemptRecorder", "opening_of"]

#: what an Artemis Core client sends first on a connection (ActiveMQClientProtocolManager.sendHandshake)
CORE_HANDSHAKE = b"ARTEMIS"
#: Core packet types (PacketImpl.java, 2.40.0) that can open a connection; PING (10) never counts
CORE_PING = 10
CORE_PACKETS = {125: "CLUSTER_CONNECT", -4: "CHECK_FOR_FAILOVER", 30: "CREATESESSION", -18: "CREATESESSION_V2",
                111: "NODE_ANNOUNCE", 112: "SUBSCRIBE_TOPOLOGY", 113: "SUBSCRIBE_TOPOLOGY_V2"}
#: the openings of a cluster link's own attempts: an Artemis cluster bridge (ClusterControl.authorize
#: on a new connection) and a reference broker's cluster link (reference_broker/clustering/wire.py)
LINK_OPENINGS = frozenset({"core CLUSTER_CONNECT", "cluster hello"})

_LENGTH = struct.Struct(">i")


def _core_opening(data: bytes) -> str | None:
    """Core frames after the handshake: a 4-byte length (of what follows), a type byte, ..."""
    offset = len(CORE_HANDSHAKE)
    while len(data) - offset >= _LENGTH.size + 1:
        (length,) = _LENGTH.unpack_from(data, offset)
        if length < 1:
            return "core (malformed frame)"
        if len(data) - offset < _LENGTH.size + length:
            return None  # the frame is still arriving
        kind = struct.unpack_from(">b", data, offset + _LENGTH.size)[0]
        if kind != CORE_PING:
            return f"core {CORE_PACKETS.get(kind, f'packet {kind}')}"
        offset += _LENGTH.size + length
    return None


def _cluster_frame_opening(data: bytes) -> str | None:
    """A reference cluster link's frame: a 4-byte length, then a JSON object."""
    (length,) = _LENGTH.unpack_from(data, 0)
    if len(data) < _LENGTH.size + length:
        return None
    try:
        frame = json.loads(data[_LENGTH.size:_LENGTH.size + length])
    except ValueError:
        return "cluster (not JSON)"
    return f"cluster {frame.get('kind') if isinstance(frame, dict) else '?'}"


def opening_of(data: bytes) -> str | None:
    """What the first request in ``data`` (everything a client sent so far) is, once it has fully
    arrived; None while it is still incomplete. Bytes of no known protocol: ``"unrecognised"``."""
    if CORE_HANDSHAKE.startswith(data[:len(CORE_HANDSHAKE)]) and len(data) < len(CORE_HANDSHAKE):
        return None
    if data.startswith(CORE_HANDSHAKE):
        return _core_opening(data)
    if len(data) < _LENGTH.size + 1:
        return None
    if data[_LENGTH.size:_LENGTH.size + 1] == b"{":
        return _cluster_frame_opening(data)
    return "unrecognised"


@dataclass(frozen=True)
class Attempt:
    """One connection: when it was accepted (``time.monotonic()``) and what its client sent
    first (`opening_of`; ``"none"`` when nothing recognisable came within the wait)."""

    at: float
    opening: str

    @property
    def of_the_link(self) -> bool:
        return self.opening in LINK_OPENINGS


class AttemptRecorder:
    """A loopback listener that fails every connection attempt and notes each (`attempts`; the
    link's own in `link_attempts`, their spacing in `gaps`). A context manager."""

    #: seconds a connection stays open once its opening request is complete (the client is then
    #: blocked waiting for the answer; the drop wakes it)
    HOLD = 0.05
    #: seconds to wait for a complete opening request before dropping the connection all the same
    OPENING_WAIT = 5.0

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="attempt-recorder", daemon=True)
        self._handlers: list[threading.Thread] = []

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            handler = threading.Thread(target=self._fail, args=(conn, time.monotonic()),
                                       name="attempt-recorder-conn", daemon=True)
            self._handlers.append(handler)
            handler.start()

    def _fail(self, conn: socket.socket, accepted: float) -> None:
        data = b""
        opening = None
        deadline = accepted + self.OPENING_WAIT
        with conn:
            while opening is None and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                conn.settimeout(min(left, 0.2))
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break  # the client gave up first
                data += chunk
                opening = opening_of(data)
            if opening is not None:
                time.sleep(self.HOLD)
        self.attempts.append(Attempt(accepted, opening or "none"))

    def link_attempts(self) -> list[Attempt]:
        """The link's own attempts (`LINK_OPENINGS`), in the order they arrived."""
        return sorted((a for a in self.attempts if a.of_the_link), key=lambda a: a.at)

    def gaps(self) -> list[float]:
        """Seconds between consecutive attempts of the link."""
        times = [a.at for a in self.link_attempts()]
        return [b - a for a, b in zip(times, times[1:])]

    def describe(self) -> str:
        """Every connection, ms after the first, with its opening (for failure messages)."""
        attempts = sorted(self.attempts, key=lambda a: a.at)
        if not attempts:
            return "no connection"
        first = attempts[0].at
        return ", ".join(f"+{round((a.at - first) * 1000)} ms {a.opening}" for a in attempts)

    def __enter__(self) -> "AttemptRecorder":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
        for handler in list(self._handlers):
            handler.join(self.OPENING_WAIT + self.HOLD + 1)
