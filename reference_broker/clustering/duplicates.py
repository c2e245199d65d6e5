"""The receiving node's memory of forwarded messages' duplicate ids (artemis-clusters.md,
use-duplicate-detection: a source that resends after a broken link must not deliver twice). Bounded:
the oldest ids are forgotten first, as Artemis's id cache (id-cache-size) does. Artemis persists
the cache, so a target that crashed and recovered still drops what its sources resend (the
chapter's very case): the service keeps the ids of persistent forwards in the store as well.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

#: Artemis's default id-cache-size
ID_CACHE_SIZE = 20000


class DuplicateCache:
    def __init__(self, size: int = ID_CACHE_SIZE, on_forget: Callable[[str], None] | None = None) -> None:
        self.size = size
        self._ids: OrderedDict[str, None] = OrderedDict()
        self.dropped = 0
        self.on_forget = on_forget  # told of each id pushed out (to drop it from the store too)

    def seen(self, duplicate_id: str) -> bool:
        """True (and counted) when ``duplicate_id`` came before; else remember it."""
        if duplicate_id in self._ids:
            self.dropped += 1
            return True
        self._ids[duplicate_id] = None
        if len(self._ids) > self.size:
            forgotten, _ = self._ids.popitem(last=False)
            if self.on_forget is not None:
                self.on_forget(forgotten)
        return False
