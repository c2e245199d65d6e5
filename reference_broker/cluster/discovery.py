"""Multicast discovery that speaks ActiveMQ Classic's own datagrams (``multicast://`` URIs).

ActiveMQ "Networks of Brokers", "Example using multicast discovery": a transport connector with a
``discoveryUri`` announces the broker, a ``multicast://`` network connector bridges to whatever is
announced. The datagram format and timings follow ActiveMQ's MulticastDiscoveryAgent (apache/
activemq, activemq-client, transport/discovery/multicast; ../shared/REFERENCES.md, "ActiveMQ
Classic"), so a reference broker and a real ActiveMQ broker hear each other:

* group address 239.255.2.3, port 6155 (``multicast://default``); any other ``ADDRESS:PORT`` may be
  given; the group name comes from the ``group`` option (``multicast://default?group=NAME``), as in
  ActiveMQ's factory -- the URI's host is an address, ``default`` standing for 239.255.2.3;
* one UTF-8 datagram per announcement: ``<group>.ActiveMQ-4.`` then ``alive.`` or ``dead.``, then the
  broker name between ``%`` signs (ActiveMQ always sends ``%localhost%``), then the service URI;
* ``alive.`` every keep-alive interval (500 ms), and at once when a new peer is heard (so it learns
  of us without waiting); a peer silent for ten intervals is dropped; ``dead.`` when stopping;
* announcements of our own service (the socket hears itself) and of other groups are ignored.

`DiscoveryCore` is the sans-IO part (datagrams and clock readings in, peer events and datagrams
out); `MulticastDiscovery` is the asyncio UDP shell around it.

Traffic stays on this machine (a deliberate difference from ActiveMQ, whose agent picks a
non-loopback interface and sends with TTL 1): the shell joins the group on the loopback interface,
sends through it (IP_MULTICAST_IF 127.0.0.1, IP_MULTICAST_LOOP on) with TTL 0, and Linux never puts a
TTL-0 multicast datagram on a wire. ``interface`` and ``timeToLive`` options override this for a
real multi-host network. ActiveMQ gets the same confinement from
``?networkInterface=lo&joinNetworkInterface=lo&timeToLive=0`` (see `activemq_loopback_uri`).

Not mirrored: the agent's "suppress a failed service for a back-off" bookkeeping -- a reference
bridge retries a failed peer itself with the connector's reconnect policy (`uris.ReconnectPolicy`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger("reference_broker.cluster.discovery")

DEFAULT_ADDRESS = "239.255.2.3"
DEFAULT_PORT = 6155
DEFAULT_GROUP = "default"
KEEP_ALIVE_MS = 500
HEARTBEATS_MISSED_BEFORE_DEATH = 10
LOOPBACK = "127.0.0.1"
_TYPE_SUFFIX = "ActiveMQ-4."
_ALIVE, _DEAD = "alive.", "dead."
_BROKER_NAME_SENT = "localhost"  # what ActiveMQ's agent puts between the % signs
_MAX_DATAGRAM = 8192  # ActiveMQ's receive buffer


class DiscoveryUriError(ValueError):
    """A ``multicast://`` URI the broker cannot use; the message says what to write instead."""


@dataclass(frozen=True)
class DiscoveryUri:
    address: str = DEFAULT_ADDRESS
    port: int = DEFAULT_PORT
    group: str = DEFAULT_GROUP
    keep_alive_ms: float = KEEP_ALIVE_MS
    time_to_live: int = 0  # ActiveMQ's default is 1; 0 keeps datagrams on this host
    interface: str = LOOPBACK


def parse_discovery_uri(uri: str) -> DiscoveryUri:
    """``multicast://default?group=g1`` -> `DiscoveryUri`; raises `DiscoveryUriError`.

    Accepts the options of ActiveMQ's agent that the reference broker implements: ``group``,
    ``keepAliveInterval`` (ms), ``timeToLive``, ``interface`` (an IPv4 address of this host)."""
    parts = urlsplit(uri.strip())
    if parts.scheme != "multicast" or not parts.hostname:
        raise DiscoveryUriError(f"discovery uri {uri!r}: expected multicast://default[?group=NAME] "
                                "or multicast://ADDRESS:PORT[?group=NAME]")
    host = parts.hostname
    address = DEFAULT_ADDRESS if host == DEFAULT_GROUP else host
    try:
        if not ipaddress.IPv4Address(address).is_multicast:
            raise ValueError
    except ValueError:
        raise DiscoveryUriError(
            f"discovery uri {uri!r}: {host!r} is not 'default' nor an IPv4 multicast address (224.0.0.0/4); "
            f"the host is the group's address, as in ActiveMQ -- name the group with "
            f"multicast://default?group={host}") from None
    values: dict = {"address": address, "port": parts.port or DEFAULT_PORT}
    for key, raw in parse_qsl(parts.query, keep_blank_values=True):
        if key == "group":
            if not raw or "%" in raw:
                raise DiscoveryUriError(f"discovery uri {uri!r}: group must be a non-empty name without '%'")
            values["group"] = raw
        elif key == "keepAliveInterval":
            values["keep_alive_ms"] = _positive(uri, key, raw)
        elif key == "timeToLive":
            if not raw.isdigit() or int(raw) > 255:
                raise DiscoveryUriError(f"discovery uri {uri!r}: timeToLive={raw!r} must be 0..255")
            values["time_to_live"] = int(raw)
        elif key == "interface":
            try:
                ipaddress.IPv4Address(raw)
            except ValueError:
                raise DiscoveryUriError(f"discovery uri {uri!r}: interface={raw!r} must be an IPv4 address "
                                        "of this host") from None
            values["interface"] = raw
        else:
            raise DiscoveryUriError(f"discovery uri {uri!r}: unknown option {key!r} "
                                    "(known: group, keepAliveInterval, timeToLive, interface)")
    return DiscoveryUri(**values)


def _positive(uri: str, key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise DiscoveryUriError(f"discovery uri {uri!r}: {key}={raw!r} must be a positive number of ms")
    return value


def activemq_loopback_uri(group: str, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT) -> str:
    """The ``multicast://`` URI that keeps a real ActiveMQ broker's discovery on loopback with TTL 0
    (its agent's ``joinNetworkInterface``, ``networkInterface`` and ``timeToLive`` options)."""
    host = "default" if address == DEFAULT_ADDRESS and port == DEFAULT_PORT else f"{address}:{port}"
    return f"multicast://{host}?group={group}&timeToLive=0&networkInterface=lo&joinNetworkInterface=lo"


# ---------------------------------------------------------------- datagrams


@dataclass(frozen=True)
class Announcement:
    group: str
    alive: bool
    broker_name: str
    service: str


def format_announcement(group: str, alive: bool, service: str, broker_name: str = _BROKER_NAME_SENT) -> bytes:
    """``<group>.ActiveMQ-4.alive.%localhost%<service>`` (or ``dead.``) as bytes."""
    return f"{group}.{_TYPE_SUFFIX}{_ALIVE if alive else _DEAD}%{broker_name}%{service}".encode("utf-8")


def parse_announcement(data: bytes, group: str) -> Announcement | None:
    """The announcement in ``data`` if it belongs to ``group``; None for another group or a
    datagram that is not a well-formed announcement (ActiveMQ's agent ignores other groups too)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    prefix = f"{group}.{_TYPE_SUFFIX}"
    if not text.startswith(prefix):
        return None
    rest = text[len(prefix):]
    if rest.startswith(_ALIVE):
        alive, rest = True, rest[len(_ALIVE):]
    elif rest.startswith(_DEAD):
        alive, rest = False, rest[len(_DEAD):]
    else:
        return None
    if not rest.startswith("%"):
        return None
    name, sep, service = rest[1:].partition("%")
    if not sep or not service:
        return None
    return Announcement(group, alive, name, service)


# ---------------------------------------------------------------- sans-IO core


@dataclass(frozen=True)
class PeerAdded:
    service: str
    broker_name: str


@dataclass(frozen=True)
class PeerRemoved:
    service: str
    reason: str  # "dead" (it said so) or "expired" (ten heartbeats missed)


PeerEvent = PeerAdded | PeerRemoved


@dataclass
class Step:
    """What one call of the core produced: peer events, and datagrams to send to the group."""

    events: list[PeerEvent] = field(default_factory=list)
    datagrams: list[bytes] = field(default_factory=list)


class DiscoveryCore:
    """Discovery state without sockets or clocks: times are milliseconds the caller passes in.

    ``self_service`` (None: listen only, as a ``multicast://`` network connector without a
    discoveryUri does) is announced alive every ``keep_alive_ms`` and dead on `stop`."""

    def __init__(self, group: str, self_service: str | None = None, keep_alive_ms: float = KEEP_ALIVE_MS,
                 misses_before_death: int = HEARTBEATS_MISSED_BEFORE_DEATH) -> None:
        self.group = group
        self.self_service = self_service
        self.keep_alive_ms = keep_alive_ms
        self.misses_before_death = misses_before_death
        self.peers: dict[str, float] = {}  # service -> time of its last heartbeat
        self.peer_names: dict[str, str] = {}
        self._last_advertised: float | None = None
        self.started = False

    def _advertise(self, step: Step, now: float, alive: bool) -> None:
        if self.self_service is not None:
            step.datagrams.append(format_announcement(self.group, alive, self.self_service))
            self._last_advertised = now

    def start(self, now: float) -> Step:
        step = Step()
        self.started = True
        self._advertise(step, now, alive=True)
        return step

    def stop(self, now: float) -> Step:
        """The ``dead.`` announcement (if we announce a service); peers are forgotten silently."""
        step = Step()
        if self.started:
            self.started = False
            self._advertise(step, now, alive=False)
        self.peers.clear()
        self.peer_names.clear()
        return step

    def datagram_received(self, data: bytes, now: float) -> Step:
        step = Step()
        announcement = parse_announcement(data, self.group)
        if not self.started or announcement is None or announcement.service == self.self_service:
            return step
        service = announcement.service
        if announcement.alive:
            if service not in self.peers:
                self.peer_names[service] = announcement.broker_name
                step.events.append(PeerAdded(service, announcement.broker_name))
                self._advertise(step, now, alive=True)  # the newcomer learns of us at once
            self.peers[service] = now
        elif self.peers.pop(service, None) is not None:
            self.peer_names.pop(service, None)
            step.events.append(PeerRemoved(service, "dead"))
        return step

    def tick(self, now: float) -> Step:
        """Heartbeat when one is due; drop peers silent for ``misses_before_death`` intervals."""
        step = Step()
        if not self.started:
            return step
        if self._last_advertised is None or now - self._last_advertised >= self.keep_alive_ms or now < self._last_advertised:
            self._advertise(step, now, alive=True)
        expire_before = now - self.keep_alive_ms * self.misses_before_death
        for service in [s for s, seen in self.peers.items() if seen < expire_before]:
            del self.peers[service]
            self.peer_names.pop(service, None)
            step.events.append(PeerRemoved(service, "expired"))
        return step


# ---------------------------------------------------------------- asyncio shell


def _multicast_socket(uri: DiscoveryUri) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        # Several agents of this host share the port, as ActiveMQ's MulticastSocket does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", uri.port))
        group = socket.inet_aton(uri.address)
        interface = socket.inet_aton(uri.interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4s", group, interface))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, uri.time_to_live)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot join multicast group {uri.address}:{uri.port} on {uri.interface}: "
                                 f"{exc.strerror}; check that the interface exists and allows multicast") from None
    return sock


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, owner: "MulticastDiscovery") -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr) -> None:
        self.owner._apply(self.owner.core.datagram_received(data, self.owner._now()))

    def error_received(self, exc: Exception) -> None:
        log.warning("discovery %s: %s", self.owner.uri.group, exc)


class MulticastDiscovery:
    """`DiscoveryCore` on a real multicast socket. ``on_event`` is called on the loop for every
    `PeerAdded` / `PeerRemoved`; ``peers`` lists the services currently known."""

    def __init__(self, uri: DiscoveryUri | str, self_service: str | None = None,
                 on_event: Callable[[PeerEvent], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.uri = parse_discovery_uri(uri) if isinstance(uri, str) else uri
        self.core = DiscoveryCore(self.uri.group, self_service, self.uri.keep_alive_ms)
        self.on_event = on_event
        self.events: list[PeerEvent] = []  # every event so far (tests and logs)
        self._clock = clock
        self._transport: asyncio.DatagramTransport | None = None
        self._ticker: asyncio.Task | None = None

    def __repr__(self) -> str:
        return f"<MulticastDiscovery {self.uri.group}@{self.uri.address}:{self.uri.port} {self.core.self_service}>"

    @property
    def peers(self) -> list[str]:
        return list(self.core.peers)

    def _now(self) -> float:
        return self._clock() * 1000

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        sock = _multicast_socket(self.uri)
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), sock=sock)
        self._apply(self.core.start(self._now()))
        self._ticker = asyncio.create_task(self._tick_forever(), name=repr(self))

    async def _tick_forever(self) -> None:
        # A fifth of the interval: heartbeats go out at most 100 ms late with the 500 ms default.
        period = self.uri.keep_alive_ms / 5000
        while True:
            await asyncio.sleep(period)
            self._apply(self.core.tick(self._now()))

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except asyncio.CancelledError:
                pass
            self._ticker = None
        if self._transport is not None:
            self._apply(self.core.stop(self._now()), deliver=False)
            self._transport.close()
            self._transport = None

    def _apply(self, step: Step, deliver: bool = True) -> None:
        transport = self._transport
        for datagram in step.datagrams:
            if transport is not None:
                transport.sendto(datagram, (self.uri.address, self.uri.port))
        for event in step.events:
            self.events.append(event)
            log.info("discovery %s: %s", self.uri.group, event)
            if deliver and self.on_event is not None:
                try:
                    self.on_event(event)
                except Exception:  # noqa: BLE001 - one bad listener must not stop discovery
                    log.exception("discovery %s: listener failed on %s", self.uri.group, event)
