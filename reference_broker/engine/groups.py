"""Message group ownership for one queue (Artemis "Message Grouping").

A group id is pinned to the consumer that got its first message; later messages of the group go
only to that consumer. Ownership ends when that consumer closes, when a message with a negative
JMSXGroupSeq closes the group, or when the groups are reset (manually, or by `group-rebalance`
when a consumer is added). With `group-buckets` N > 0 the group id is hashed into one of N
buckets and ownership is tracked per bucket, bounding memory; -1 tracks every id; 0 disables
grouping on the queue.
"""

from __future__ import annotations

import struct
from typing import Generic, TypeVar

C = TypeVar("C")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (ActiveMQ Classic's MessageGroupHashBucket hashes group ids with
    it). Artemis buckets with `artemis_group_hash` instead."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def artemis_group_hash(group_id: str) -> int:
    """The hash Artemis buckets a group id with: its group ids are `SimpleString`s, whose
    hashCode runs Java's `31 * h + x` over the UTF-16 code units as *signed little-endian
    bytes* (low byte, then high byte) - not String.hashCode over the chars."""
    h = 0
    for byte in group_id.encode("utf-16-le"):
        h = (31 * h + (byte - 256 if byte > 127 else byte)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


class GroupTable(Generic[C]):
    def __init__(self, buckets: int = -1) -> None:
        self.buckets = buckets
        self._owners: dict[object, C] = {}

    def key(self, group_id: str) -> object:
        if self.buckets > 0:
            # Artemis BucketMessageGroups: (groupId.hashCode() & Integer.MAX_VALUE) % buckets,
            # where groupId is a SimpleString.
            return (artemis_group_hash(group_id) & 0x7FFFFFFF) % self.buckets
        return group_id

    def owner(self, key: object) -> C | None:
        return self._owners.get(key)

    def assign(self, key: object, consumer: C) -> None:
        self._owners[key] = consumer

    def close(self, key: object) -> None:
        self._owners.pop(key, None)

    def release_consumer(self, consumer: C) -> int:
        """Forget every group owned by `consumer`; returns how many were released."""
        keys = [k for k, c in self._owners.items() if c is consumer]
        for k in keys:
            del self._owners[k]
        return len(keys)

    def reset(self) -> int:
        count = len(self._owners)
        self._owners.clear()
        return count

    def __len__(self) -> int:
        return len(self._owners)

    def snapshot(self) -> dict[str, C]:
        return {str(k): c for k, c in self._owners.items()}
