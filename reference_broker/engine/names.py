"""Destination names in ActiveMQ's form: `queue://X`, `topic://X`, plus Artemis-style
destination parameters (`orders?group-rebalance=true`) for per-queue group settings
(Artemis "Message Grouping": the address-parameter form of group-first-key, group-rebalance
and group-buckets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from .errors import InvalidDestination

QUEUE = "queue"
TOPIC = "topic"

# Destination parameters the engine understands; anything else is a clear error, not ignored.
KNOWN_PARAMETERS = frozenset({"group-rebalance", "group-buckets", "group-first-key"})


@dataclass(frozen=True, slots=True)
class DestinationName:
    kind: str  # QUEUE or TOPIC
    name: str  # e.g. "ORDERS.EU" (no prefix, no parameters)
    params: tuple[tuple[str, str], ...] = ()
    # "queue://ORDERS.EU": computed once, it is the key of every per-destination lookup.
    canonical: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "canonical", f"{self.kind}://{self.name}")

    @property
    def is_queue(self) -> bool:
        return self.kind == QUEUE

    @property
    def is_topic(self) -> bool:
        return self.kind == TOPIC

    def param(self, key: str) -> str | None:
        for k, v in self.params:
            if k == key:
                return v
        return None

    def __str__(self) -> str:
        return self.canonical


def parse_destination(text: str, default_kind: str = QUEUE) -> DestinationName:
    """Parse `queue://X`, `topic://X` or a bare `X` (of `default_kind`), with optional `?k=v&...`."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidDestination("empty destination name")
    kind = default_kind
    rest = text
    for prefix in (QUEUE, TOPIC):
        if text.startswith(prefix + "://"):
            kind, rest = prefix, text[len(prefix) + 3 :]
            break
    else:
        if "://" in text:
            raise InvalidDestination(
                f"unknown destination kind in {text!r}: use queue://NAME or topic://NAME"
            )
    name, _, query = rest.partition("?")
    if not name:
        raise InvalidDestination(f"empty destination name in {text!r}")
    if any(ch.isspace() for ch in name):
        raise InvalidDestination(f"destination name {name!r} contains whitespace")
    params: list[tuple[str, str]] = []
    if query:
        for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
            if key not in KNOWN_PARAMETERS:
                raise InvalidDestination(
                    f"unknown destination parameter {key!r} in {text!r} "
                    f"(known: {', '.join(sorted(KNOWN_PARAMETERS))})"
                )
            params.append((key, value))
    return DestinationName(kind, name, tuple(params))
