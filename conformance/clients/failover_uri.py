"""Parsing ``failover:(uri1,...,uriN)?options`` and ``discovery:(static://(...))?options``.

The option names, their defaults and their meaning come from the Red Hat A-MQ 6.2 "Fault
Tolerant Messaging" guide, chapter 2 (cited below as "A-MQ FT" with the section). Where the
guide is silent the defaults are those of ActiveMQ Classic's ``FailoverTransport`` (cited as
"ActiveMQ FailoverTransport"). Option names keep the guide's camelCase spelling on the wire;
`FailoverOptions` exposes them as snake_case attributes.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import unquote

#: inner URI schemes -> protocol (None = "the protocol the client was asked to speak").
#: ``tcp`` / ``nio`` are ActiveMQ's OpenWire schemes; our clients never speak OpenWire, so a
#: ``tcp://`` address means "this host:port, in the client's protocol".
SCHEMES: dict[str, str | None] = {
    "tcp": None, "nio": None,
    "stomp": "stomp", "stomp+nio": "stomp",
    "mqtt": "mqtt", "mqtt+nio": "mqtt",
    "amqp": "amqp", "amqp+nio": "amqp",
}

#: options an inner URI (or ``nested.*``) may carry, and what they become for `connect()`.
#: ActiveMQ's transports refuse parameters they do not know, so we do too.
INNER_OPTIONS = ("connectionTimeout", "wireFormat.maxInactivityDuration")


@dataclass(frozen=True)
class BrokerURI:
    """One endpoint of a failover list: ``scheme://host:port?params``."""

    scheme: str
    host: str
    port: int
    params: tuple[tuple[str, str], ...] = ()

    @property
    def protocol(self) -> str | None:
        return SCHEMES[self.scheme]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.params)
        return f"{self.scheme}://{self.host}:{self.port}" + (f"?{query}" if query else "")

    def same_endpoint(self, other: "BrokerURI") -> bool:
        """Equal ignoring parameters (priorityURIs name endpoints without ``nested`` options)."""
        return (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)

    def connect_options(self, protocol: str) -> dict[str, object]:
        """The parameters as `conformance.clients.connect` keyword arguments."""
        options: dict[str, object] = {}
        for key, value in self.params:
            if key == "connectionTimeout":
                # ActiveMQ TCP transport: connect timeout in ms; our adapters take seconds.
                options["timeout"] = _int(key, value) / 1000.0
            elif key == "wireFormat.maxInactivityDuration":
                # The OpenWire inactivity monitor (A-MQ FT 2.1.2, Example 2.4) detects dead peers;
                # STOMP heart-beats are the same mechanism on the STOMP wire (STOMP 1.2 "Heart-beating").
                if protocol == "stomp":
                    ms = _int(key, value)
                    options["heartbeats"] = (ms, ms)
        return options


@dataclass(frozen=True)
class FailoverOptions:
    """A-MQ FT 2.1.1, Table 2.1 "Failover Transport Options" (defaults as documented there)."""

    initial_reconnect_delay: int = 10         # ms before the first reconnect attempt
    max_reconnect_delay: int = 30000          # ms, cap on the wait between attempts
    use_exponential_back_off: bool = True
    back_off_multiplier: float = 2.0
    max_reconnect_attempts: int = -1          # -1 unlimited; 0: connect once at start-up, never fail over
    startup_max_reconnect_attempts: int = -1  # -1 unlimited; 0: no retries on the first connect
    randomize: bool = True                    # else the list is walked left to right
    backup: bool = False                      # hold a second, ready connection
    timeout: int = -1                         # ms a send waits for a reconnect; -1 forever
    track_messages: bool = False              # replay in-flight sends after reconnecting
    max_cache_size: int = 131072              # bytes of tracked in-flight sends
    update_uris_supported: bool = True        # accept URI lists from the broker (OpenWire only)
    update_uris_url: str | None = None        # file/URL holding extra comma-separated URIs
    warn_after_reconnect_attempts: int = 10   # warn every N failed attempts; <= 0 disables
    # A-MQ FT 2.1.3 "Priority Backup" names these without a default; ActiveMQ FailoverTransport
    # has priorityBackup=false and an empty priority list (then the first URI is the priority one).
    priority_backup: bool = False
    priority_uris: tuple[str, ...] = ()


#: wire name -> attribute name
OPTION_NAMES: dict[str, str] = {
    "initialReconnectDelay": "initial_reconnect_delay",
    "maxReconnectDelay": "max_reconnect_delay",
    "useExponentialBackOff": "use_exponential_back_off",
    "backOffMultiplier": "back_off_multiplier",
    # ActiveMQ's own failover transport knows the multiplier only by this name and refuses the
    # guide's backOffMultiplier (known deviation, fault_tolerance.toml); a URI written for it works here too
    "reconnectDelayExponent": "back_off_multiplier",
    "maxReconnectAttempts": "max_reconnect_attempts",
    "startupMaxReconnectAttempts": "startup_max_reconnect_attempts",
    "randomize": "randomize",
    "backup": "backup",
    "timeout": "timeout",
    "trackMessages": "track_messages",
    "maxCacheSize": "max_cache_size",
    "updateURIsSupported": "update_uris_supported",
    "updateURIsURL": "update_uris_url",
    "warnAfterReconnectAttempts": "warn_after_reconnect_attempts",
    "priorityBackup": "priority_backup",
    "priorityURIs": "priority_uris",
}

#: A-MQ FT 2.2.1, Table 2.3 "Dynamic Discovery Protocol Options": the discovery form knows only
#: these; any other option is injected into every discovered endpoint ("Setting options on the
#: discovered transports"), and its maxReconnectAttempts default is 0, meaning unlimited.
DISCOVERY_OPTIONS = ("initialReconnectDelay", "maxReconnectDelay", "useExponentialBackOff",
                     "backOffMultiplier", "maxReconnectAttempts")


@dataclass(frozen=True)
class FailoverURI:
    uris: tuple[BrokerURI, ...]
    options: FailoverOptions = field(default_factory=FailoverOptions)
    nested: tuple[tuple[str, str], ...] = ()  # nested.* options, already applied to `uris`
    form: str = "failover"                    # failover | discovery
    agent: str | None = None                  # a multicast:// agent: uris come from its announcements

    def priority_uris(self) -> tuple[BrokerURI, ...]:
        if self.options.priority_uris:
            return tuple(parse_broker_uri(u) for u in self.options.priority_uris)
        return self.uris[:1]


def did_you_mean(name: str, known: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    lowered = {k.lower(): k for k in known}
    guess = close[0] if close else lowered.get(name.lower())
    return f": did you mean {guess!r}?" if guess else f" (known: {', '.join(known)})"


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"option {name}={value!r} must be an integer") from None


def _bool(name: str, value: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"option {name}={value!r} must be true or false")


def _float(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"option {name}={value!r} must be a number") from None


def _convert(wire: str, value: str) -> object:
    attr = OPTION_NAMES[wire]
    kind = {f.name: f.type for f in fields(FailoverOptions)}[attr]
    if attr == "priority_uris":
        uris = tuple(u.strip() for u in value.split(",") if u.strip())
        for uri in uris:
            parse_broker_uri(uri)  # fail early on a bad priority URI
        return uris
    if attr == "update_uris_url":
        if value:
            update_uris_path(value)  # fail early on a URL this client cannot read
        return value or None
    if kind == "bool":
        return _bool(wire, value)
    if kind == "float":
        return _float(wire, value)
    number = _int(wire, value)
    if attr in ("initial_reconnect_delay", "max_reconnect_delay", "max_cache_size") and number < 0:
        raise ValueError(f"option {wire}={value!r} must not be negative")
    if attr in ("max_reconnect_attempts", "startup_max_reconnect_attempts") and number < -1:
        raise ValueError(f"option {wire}={value!r}: use -1 for unlimited, 0 or more for a limit")
    return number


def update_uris_path(url: str) -> str:
    """The local file an ``updateURIsURL`` names (``file:///path`` or a plain path). Our clients
    read only local files: a URL of another scheme would send traffic off this machine."""
    scheme, sep, rest = url.partition(":")
    if not sep or len(scheme) <= 1:  # a plain path (or a Windows drive letter)
        return url
    if scheme.lower() != "file":
        raise ValueError(f"option updateURIsURL={url!r}: only file: URLs (or a plain path) are supported")
    return unquote(rest[2:] if rest.startswith("//") else rest)


def read_update_uris(url: str) -> tuple["BrokerURI", ...]:
    """The comma-separated URIs of the ``updateURIsURL`` file (A-MQ FT Table 2.1 updateURIsURL)."""
    text = Path(update_uris_path(url)).read_text()
    return tuple(parse_broker_uri(u.strip()) for u in split_top_level(text.replace("\n", ",")) if u.strip())


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside parentheses (``static://(a,b)`` stays one item)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' at position {i} in {text!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '(' in {text!r}: close every '(' with ')'")
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_query(query: str) -> list[tuple[str, str]]:
    pairs = []
    for item in query.split("&"):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"option {key!r} has no value: write {key}=VALUE")
        pairs.append((unquote(key.strip()), unquote(value.strip())))
    return pairs


def parse_broker_uri(text: str, extra: list[tuple[str, str]] | tuple = ()) -> BrokerURI:
    """``stomp://host:port?p=v`` -> BrokerURI; ``extra`` (nested.* options) are added unless the
    URI sets them itself (a URI's own parameter wins, as in ActiveMQ's addExtraQueryOptions)."""
    text = text.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ValueError(f"broker URI {text!r} must look like tcp://HOST:PORT")
    if scheme not in SCHEMES:
        raise ValueError(f"broker URI {text!r}: unsupported scheme {scheme!r}"
                         f"{did_you_mean(scheme, tuple(SCHEMES))}")
    hostport, _, query = rest.partition("?")
    host, colon, port = hostport.rstrip("/").rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"broker URI {text!r} needs HOST:PORT with a port between 1 and 65535")
    params = dict(parse_query(query))
    for key, value in extra:
        params.setdefault(key, value)
    for key in params:
        if key not in INNER_OPTIONS:
            raise ValueError(f"unknown option {key!r} on broker URI {text!r}{did_you_mean(key, INNER_OPTIONS)}")
    return BrokerURI(scheme, host.strip("[]"), int(port), tuple(sorted(params.items())))


def _unwrap(body: str) -> tuple[str, str]:
    """``(a,b)?q`` -> ("a,b", "q"); ``a,b`` -> ("a,b", "")."""
    body = body.strip()
    if body.startswith("//"):
        body = body[2:]
    if not body.startswith("("):
        # A-MQ FT 2.1.1 "Failover URI": the short form has no parentheses and no options.
        return body, ""
    depth = 0
    for i, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            rest = body[i + 1:].strip()
            if rest and not rest.startswith("?"):
                raise ValueError(f"unexpected {rest!r} after the URI list: options start with '?'")
            return body[1:i], rest[1:]
    raise ValueError(f"unbalanced '(' in {body!r}: close the URI list with ')'")


def parse_failover_uri(text: str) -> FailoverURI:
    """Parse a failover or discovery URI; ValueError names what is wrong and how to fix it."""
    text = " ".join(text.split())  # the guide's examples wrap lines after '?'
    scheme, colon, body = text.partition(":")
    if scheme == "failover" and colon:
        return _parse_failover(body)
    if scheme == "discovery" and colon:
        return _parse_discovery(body)
    if scheme in SCHEMES and colon:
        # A bare broker URI is a failover list of one (handy for experiments and CLIs).
        return FailoverURI(uris=(parse_broker_uri(text),))
    raise ValueError(f"{text!r} is not a failover URI: write failover:(stomp://HOST:PORT,...)?options "
                     "or discovery:(static://(URI,...))?options")


def _options(pairs: list[tuple[str, str]], *, context: str, base: dict | None = None
             ) -> tuple[FailoverOptions, list[tuple[str, str]]]:
    values: dict[str, object] = dict(base or {})
    nested: list[tuple[str, str]] = []
    for key, value in pairs:
        if key.startswith("nested."):
            # A-MQ FT 2.1.1 Table 2.1 "nested.*" and Example 2.4: applied to every inner URI.
            nested.append((key[len("nested."):], value))
        elif key in OPTION_NAMES:
            values[OPTION_NAMES[key]] = _convert(key, value)
        else:
            raise ValueError(f"unknown option {key!r} in {context}{did_you_mean(key, tuple(OPTION_NAMES) + ('nested.*',))}")
    return FailoverOptions(**values), nested


def _parse_failover(body: str) -> FailoverURI:
    inner, query = _unwrap(body)
    options, nested = _options(parse_query(query), context="the failover URI")
    items = [u for u in split_top_level(inner) if u]
    if not items:
        raise ValueError("the failover URI lists no broker: write failover:(stomp://HOST:PORT,...)")
    uris = tuple(parse_broker_uri(u, nested) for u in items)
    return FailoverURI(uris=uris, options=options, nested=tuple(nested))


def _parse_discovery(body: str) -> FailoverURI:
    agent, query = _unwrap(body)
    kind, sep, rest = agent.partition("://")
    if kind == "multicast" and sep:
        # A-MQ FT 2.2.2.4: the list is whatever the brokers announce in the group
        # (conformance/clients/multicast_agent.py), heard before each connect pass
        from .multicast_agent import DiscoveryUriError, check_agent_uri

        try:
            check_agent_uri(agent)
        except DiscoveryUriError as exc:
            raise ValueError(str(exc)) from None
        own, injected = _split_discovery_query(query)
        options, nested = _options(own, context="the discovery URI")
        nested += [(k[len("nested."):] if k.startswith("nested.") else k, v) for k, v in injected]
        return FailoverURI(uris=(), options=options, nested=tuple(nested), form="discovery", agent=agent)
    if kind != "static" or not sep:
        # A-MQ FT 2.2.2: zeroconf and fabric agents need a registry or a library we do not have;
        # the static (2.2.2.3) and multicast (2.2.2.4) agents work from a client alone.
        raise ValueError(f"discovery agent {agent!r} is not supported: use discovery:(static://(URI,...)) or "
                         "discovery:(multicast://default?group=NAME); zeroconf/fabric agents need a discovery service")
    inner, inner_query = _unwrap(rest)
    if inner_query:
        raise ValueError(f"options belong after the discovery URI, not after static://(...): {agent!r}")
    own, injected = _split_discovery_query(query)
    options, nested = _options(own, context="the discovery URI")
    nested += [(k[len("nested."):] if k.startswith("nested.") else k, v) for k, v in injected]
    items = [u for u in split_top_level(inner) if u]
    if not items:
        raise ValueError("the static discovery agent lists no broker: write static://(stomp://HOST:PORT,...)")
    uris = tuple(parse_broker_uri(u, nested) for u in items)
    return FailoverURI(uris=uris, options=options, nested=tuple(nested), form="discovery")


def _split_discovery_query(query: str) -> tuple[list, list]:
    """The discovery URI's own options (Table 2.3) and those for every discovered endpoint."""
    own, injected = [], []
    for key, value in parse_query(query):
        (own if key in DISCOVERY_OPTIONS else injected).append((key, value))
    # Table 2.3: maxReconnectAttempts 0 = unlimited (the failover table's -1).
    own = [(k, "-1" if k == "maxReconnectAttempts" and v == "0" else v) for k, v in own]
    return own, injected
