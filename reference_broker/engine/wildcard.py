"""ActiveMQ destination wildcards: `.` separates path elements, `*` matches one element and
`>` matches all remaining elements (ActiveMQ "Wildcards"). Artemis writes the last one as `#`;
both spellings are accepted in configuration."""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache
from typing import Generic, Iterable, TypeVar

T = TypeVar("T")


def has_wildcards(name: str) -> bool:
    return any(part in ("*", ">", "#") for part in name.split("."))


@lru_cache(maxsize=4096)
def _parts(pattern: str) -> tuple[str, ...]:
    return tuple(">" if p == "#" else p for p in pattern.split("."))


def matches(pattern: str, name: str) -> bool:
    """True if the destination `name` (no wildcards) is matched by `pattern`."""
    pat = _parts(pattern)
    parts = name.split(".")
    for i, p in enumerate(pat):
        if p == ">":
            return True  # '>' matches the rest, including nothing more
        if i >= len(parts):
            return False
        if p != "*" and p != parts[i]:
            return False
        if p == "*" and parts[i] in (">", "#"):
            # `name` is itself a wildcard (a wildcard subscription looking up its policy or
            # permissions): one-element `*` does not cover every descendant that `>` names.
            return False
    return len(parts) == len(pat)


def specificity(pattern: str) -> tuple[int, int, int]:
    """Sort key: exact names beat `*`, which beats `>`; longer patterns beat shorter ones."""
    pat = _parts(pattern)
    return (0 if ">" in pat else 1, -sum(p == "*" for p in pat), len(pat))


#: names whose answer a WildcardMap remembers (least recently used forgotten first): lookups
#: come with every destination a client names, so an unbounded cache would grow with every
#: distinct name published.
LOOKUP_CACHE_SIZE = 4096


class WildcardMap(Generic[T]):
    """Entries keyed by wildcard pattern; `lookup` returns the most specific match, cached for
    the LOOKUP_CACHE_SIZE most recently asked names."""

    def __init__(self, entries: Iterable[tuple[str, T]] = ()) -> None:
        self._entries = sorted(entries, key=lambda e: specificity(e[0]), reverse=True)
        self._cache: OrderedDict[str, T | None] = OrderedDict()

    def lookup_all(self, name: str) -> list[T]:
        """Every entry matching `name`, least specific first (for settings that merge)."""
        return [value for pattern, value in reversed(self._entries) if matches(pattern, name)]

    def lookup(self, name: str) -> T | None:
        cache = self._cache
        try:
            found = cache[name]
        except KeyError:
            pass
        else:
            cache.move_to_end(name)
            return found
        found = next((value for pattern, value in self._entries if matches(pattern, name)), None)
        cache[name] = found
        if len(cache) > LOOKUP_CACHE_SIZE:
            cache.popitem(last=False)
        return found
