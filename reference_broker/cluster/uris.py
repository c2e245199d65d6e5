"""Network connector URIs: ``static:(uri,...)?options`` and ``masterslave:(uri,...)?options``.

ActiveMQ "Networks of Brokers", "Static discovery": a static connector makes one bridge per listed
URI and retries a lost one with initialReconnectDelay / maxReconnectDelay / useExponentialBackOff /
backOffMultiplier (defaults 1000 ms, 30000 ms, true, 2). "MasterSlave Discovery": the URIs are a
master and its slaves in order, only one of them is connected at a time, with the same options.

Peers are ``tcp://host:port`` (or ``stomp://host:port``): the reference broker bridges over STOMP,
so the port is the peer's STOMP listener.

``multicast://default?group=NAME`` (`discovery`): the peers are whoever announces itself in the
group; the same reconnect options may be given in the query (ActiveMQ's multicast agent takes them
there, with its own defaults: 5000 ms initial delay, 30000 ms max, no exponential back-off).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from .discovery import DiscoveryUri, DiscoveryUriError, parse_discovery_uri

_URI = re.compile(r"^(?P<scheme>static|masterslave):\((?P<peers>[^()]*)\)(?:\?(?P<query>.*))?$")
_PEER_SCHEMES = ("tcp", "stomp", "nio", "stomp+nio")

#: option in the URI -> (field name, parser)
_OPTIONS = {
    "initialReconnectDelay": "initial_reconnect_delay",
    "maxReconnectDelay": "max_reconnect_delay",
    "useExponentialBackOff": "use_exponential_back_off",
    "backOffMultiplier": "back_off_multiplier",
}


class NetworkUriError(ValueError):
    """A network connector URI the broker cannot use; the message says what to write instead."""


def _bool(name: str, raw: str) -> bool:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise NetworkUriError(f"{name}={raw!r}: expected true or false")


def _number(name: str, raw: str, minimum: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise NetworkUriError(f"{name}={raw!r}: expected a number") from None
    if value < minimum:
        raise NetworkUriError(f"{name}={raw!r}: must be at least {minimum:g}")
    return value


@dataclass(frozen=True)
class ReconnectPolicy:
    """The "Static discovery" retry options with the document's defaults (milliseconds)."""

    initial_reconnect_delay: float = 1000
    max_reconnect_delay: float = 30000
    use_exponential_back_off: bool = True
    back_off_multiplier: float = 2

    def delay_ms(self, failures: int) -> float:
        """Wait before the next attempt after ``failures`` consecutive failures (>= 1): the
        initial delay, multiplied by back_off_multiplier per further failure when exponential
        back-off is on, never above max_reconnect_delay."""
        if failures < 1:
            return 0.0
        delay = self.initial_reconnect_delay
        if self.use_exponential_back_off:
            delay *= self.back_off_multiplier ** (failures - 1)
        return min(delay, self.max_reconnect_delay)


@dataclass(frozen=True)
class Peer:
    host: str
    port: int

    def __str__(self) -> str:
        return f"tcp://{self.host}:{self.port}"


@dataclass(frozen=True)
class NetworkUri:
    scheme: str  # "static" or "masterslave"
    peers: tuple[Peer, ...]
    reconnect: ReconnectPolicy
    discovery: DiscoveryUri | None = None  # multicast: peers come from announcements

    @property
    def master_slave(self) -> bool:
        return self.scheme == "masterslave"


def _peer(text: str) -> Peer:
    parts = urlsplit(text.strip())
    if parts.scheme not in _PEER_SCHEMES or not parts.hostname or parts.port is None:
        raise NetworkUriError(f"peer {text!r}: expected tcp://HOST:PORT (the peer's STOMP listener)")
    return Peer(parts.hostname, parts.port)


def parse_network_uri(uri: str) -> NetworkUri:
    """``static:(tcp://h:1,tcp://h:2)?maxReconnectDelay=5000`` -> `NetworkUri`; raises
    `NetworkUriError` naming the part that is wrong."""
    if uri.strip().startswith("multicast:"):
        return _parse_multicast(uri)
    m = _URI.match(uri.strip())
    if m is None:
        raise NetworkUriError(f"network connector uri {uri!r}: expected static:(tcp://HOST:PORT,...)[?options], "
                              "multicast://default?group=NAME or masterslave:(tcp://MASTER:PORT,tcp://SLAVE:PORT,...)[?options]")
    peers = tuple(_peer(p) for p in m.group("peers").split(",") if p.strip())
    if not peers:
        raise NetworkUriError(f"{uri!r}: the parentheses list no peer")
    return NetworkUri(m.group("scheme"), peers, _reconnect(uri, parse_qsl(m.group("query") or "", keep_blank_values=True)))


#: ActiveMQ's MulticastDiscoveryAgent reconnect defaults (see the module docstring).
_MULTICAST_RECONNECT = {"initial_reconnect_delay": 5000, "max_reconnect_delay": 30000,
                        "use_exponential_back_off": False}


def _parse_multicast(uri: str) -> NetworkUri:
    base, _, query = uri.strip().partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    reconnect = _reconnect(uri, [(k, v) for k, v in pairs if k in _OPTIONS], dict(_MULTICAST_RECONNECT))
    rest = urlencode([(k, v) for k, v in pairs if k not in _OPTIONS])
    try:
        discovery = parse_discovery_uri(f"{base}?{rest}" if rest else base)
    except DiscoveryUriError as exc:
        raise NetworkUriError(f"{uri!r}: {exc} (reconnect options {', '.join(_OPTIONS)} are allowed too)") from None
    return NetworkUri("multicast", (), reconnect, discovery)


def _reconnect(uri: str, pairs: list[tuple[str, str]], values: dict | None = None) -> ReconnectPolicy:
    values = dict(values or {})
    for key, raw in pairs:
        field = _OPTIONS.get(key)
        if field is None:
            raise NetworkUriError(f"{uri!r}: unknown option {key!r} (known: {', '.join(_OPTIONS)})")
        if field == "use_exponential_back_off":
            values[field] = _bool(key, raw)
        elif field == "back_off_multiplier":
            values[field] = _number(key, raw, 1)
        else:
            values[field] = _number(key, raw, 0)
    return ReconnectPolicy(**values)
