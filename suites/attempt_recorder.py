"""A listener standing in for a cluster node that is down, noting each connection attempt of the
link dialing it (`AttemptRecorder`); used by CLU-CC-RETRY-2 (test_cluster_link_faults.py).

Not a suite (no ``test_`` prefix).

Every attempt reaches it through the fault proxy, which accepts first and then dials the recorder
(as Toxiproxy does), so an attempt is a connection that opens and is dropped, never a refused
connect. What was found on Artemis 2.40.0 (issue 19), and what the recorder does about it:

* The link's own attempts are told apart by their opening request (`opening_of`): an Artemis
  cluster bridge opens a new connection with CLUSTER_CONNECT (``ClusterControl.authorize``, its
  cluster-user handshake), a reference cluster link with its ``hello`` frame. Artemis's cluster
  controller keeps a topology connection of its own to the same address (``ClusterController``
  locator, configured with the cluster connection's reconnect-attempts -1) and reconnects it with
  CHECK_FOR_FAILOVER. That call then always waits its full call-timeout (30 s): the drop's
  failure event is queued on the factory's ordered close executor behind the very reconnect that
  waits (jstack: ``failoverOrReconnect`` -> ``getConnection`` -> ``checkForFailover`` parked in
  ``ChannelImpl.sendBlocking``; the recorder saw these connections 30.2 s apart). The old recorder
  counted them among the link's attempts (the 12 ms gap in the issue).
* An Artemis bridge whose connection is dropped while it is still setting it up can miss the drop
  and wait its call-timeout before the next attempt: jstack showed the bridge thread parked in
  ``ChannelImpl.sendBlocking`` under ``BridgeImpl$ConnectRunnable.run`` ->
  ``ClientSessionFactoryImpl.createSession``, and node A's log has ``AMQ222186: unable to authorise
  cluster control: AMQ219016`` at 08:21:41,704 and the next ``AMQ224091`` (retrying) at
  08:22:11,706. In the 2.40.0 sources: the drop makes ``failoverOrReconnect`` destroy the
  connection (closing the channels it has, which wakes ``authorize``) and only then clear the
  factory's ``connection``; a bridge thread that passes ``connect()``'s null check in between goes
  on to ``createSession``, whose channel 1 is created after the destroy, so nothing ever wakes it.
  A race: the old recorder, dropping 50 ms after the first bytes, hit it in most runs of the whole
  file; dropping once the CLUSTER_CONNECT request had arrived still hit it in 3 of 6.

So the recorder answers a bridge's CLUSTER_CONNECT (authorized, as ClusterConnectReplyMessage
encodes it) and drops the connection only once the bridge asks for a session: the bridge is then
blocked in that call on a channel the destroy closes, and fails at once (one AMQ224091 per attempt
in node A's log, no AMQ222186). Every other opening is dropped `HOLD` s after it is complete.
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
#: the session requests a bridge sends once its cluster handshake was answered
CORE_SESSION_REQUESTS = frozenset({30, -18})
#: CLUSTER_CONNECT_REPLY (type 126) on the cluster channel (3), authorized: a length of 10 (type,
#: channel, one boolean), as ClusterConnectReplyMessage.encodeRest writes it
CORE_CLUSTER_CONNECT_REPLY = struct.pack(">ibq?", 10, 126, 3, True)
#: the openings of a cluster link's own attempts: an Artemis cluster bridge (ClusterControl.authorize
#: on a new connection) and a reference broker's cluster link (reference_broker/clustering/wire.py)
LINK_OPENINGS = frozenset({"core CLUSTER_CONNECT", "cluster hello"})

_LENGTH = struct.Struct(">i")


def _core_frames(data: bytes) -> list[tuple[int, int]]:
    """The complete Core frames after the handshake, as (type, channel): each frame is a 4-byte
    length (of what follows), a type byte and an 8-byte channel id, then its body
    (PacketImpl.encodeHeader). A malformed length ends the list with type None."""
    frames = []
    offset = len(CORE_HANDSHAKE)
    while len(data) - offset >= _LENGTH.size + 9:
        (length,) = _LENGTH.unpack_from(data, offset)
        if length < 9:
            frames.append((None, None))
            break
        if len(data) - offset < _LENGTH.size + length:
            break  # the frame is still arriving
        frames.append(struct.unpack_from(">bq", data, offset + _LENGTH.size))
        offset += _LENGTH.size + length
    return frames


def _core_opening(data: bytes) -> str | None:
    for kind, _channel in _core_frames(data):
        if kind is None:
            return "core (malformed frame)"
        if kind != CORE_PING:
            return f"core {CORE_PACKETS.get(kind, f'packet {kind}')}"
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
    """One connection: when it was accepted and when the recorder dropped it (or saw the client
    give up), both ``time.monotonic()``, and what its client sent first (`opening_of`; ``"none"``
    when nothing recognisable came within the wait)."""

    at: float
    opening: str
    dropped: float

    @property
    def of_the_link(self) -> bool:
        return self.opening in LINK_OPENINGS


class AttemptRecorder:
    """A loopback listener that fails every connection attempt and notes each (`attempts`; the
    link's own in `link_attempts`, their spacing in `gaps`). A context manager."""

    #: seconds a connection stays open once its opening request (a bridge's: its session request)
    #: is complete: the client is then blocked waiting for the answer, which the drop wakes
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
        answered = False
        deadline = accepted + self.OPENING_WAIT
        with conn:
            while not self._stop.is_set():
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
                if opening is None:
                    opening = opening_of(data)
                    if opening == "core CLUSTER_CONNECT":
                        # answered, so the bridge goes on to ask for a session and is blocked in that
                        # call when the drop comes (see the module docstring)
                        try:
                            conn.sendall(CORE_CLUSTER_CONNECT_REPLY)
                        except OSError:
                            break
                        answered = True
                    elif opening is not None:
                        break
                if answered and any(kind in CORE_SESSION_REQUESTS for kind, _ in _core_frames(data)):
                    break
            if opening is not None:
                time.sleep(self.HOLD)
        self.attempts.append(Attempt(accepted, opening or "none", dropped=time.monotonic()))

    def link_attempts(self) -> list[Attempt]:
        """The link's own attempts (`LINK_OPENINGS`), in the order they arrived."""
        return sorted((a for a in self.attempts if a.of_the_link), key=lambda a: a.at)

    def gaps(self) -> list[float]:
        """Seconds between consecutive attempts of the link, opening to opening: each holds the
        earlier attempt's own round (connect, handshake, the recorder's hold) besides the wait."""
        times = [a.at for a in self.link_attempts()]
        return [b - a for a, b in zip(times, times[1:])]

    def waits_after_drops(self) -> list[float]:
        """Seconds from the recorder dropping one attempt of the link to the next attempt's
        arrival: the link's wait after a failure plus its connect, without the failed attempt's
        own round, which a loaded machine stretches (a JVM busy elsewhere answers the recorder
        late). Never longer than the matching `gaps` entry."""
        attempts = self.link_attempts()
        return [b.at - a.dropped for a, b in zip(attempts, attempts[1:])]

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
