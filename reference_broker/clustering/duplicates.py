"""The receiving node's memory of forwarded messages' duplicate ids (artemis-clusters.md,
use-duplicate-detection: a source that resends after a broken link must not deliver twice). Bounded:
the oldest ids are forgotten first, as Artemis's id cache (id-cache-size) does."""

from __future__ import annotations

from collections import OrderedDict

#: Artemis's default id-cache-size
ID_CACHE_SIZE = 20000


class DuplicateCache:
    def __init__(self, size: int = ID_CACHE_SIZE) -> None:
        self.size = size
        self._ids: OrderedDict[str, None] = OrderedDict()
        self.dropped = 0

    def seen(self, duplicate_id: str) -> bool:
        """True (and counted) when ``duplicate_id`` came before; else remember it."""
        if duplicate_id in self._ids:
            self.dropped += 1
            return True
        self._ids[duplicate_id] = None
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)
        return False
