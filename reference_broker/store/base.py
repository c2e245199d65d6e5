"""The message-store interface the engine persists through, and the types it shares.

A store keeps, per *store key*, the messages that are still owed to someone: a queue
(``"queue://ORDERS"``) or a durable topic subscription (``"durable://clientid:subname"``). The
engine calls `MessageStore.add` when a persistent message is accepted onto a queue or durable
subscription, `MessageStore.remove` when it is acknowledged, dead-lettered or expired, and
`MessageStore.flush` once at the end of every network read batch (group commit); receipts for
persistent sends go out only after ``flush()`` has returned.

Layering: the engine depends on the store, the store knows only `Message` (the dataclass in
``reference_broker.engine.message``) and nothing else from the engine.

Conventions every implementation follows:

* Message ids are unique within a store key. Adding an id that is already live under that key
  replaces the stored copy in place (same position, redelivery count reset).
* `remove` / `update_redelivery` of an id that is not live are ignored.
* A durable subscription's messages are stored under a store key equal to its sub key, so
  `remove_durable_subscription(sub_key)` also drops every message stored under ``sub_key``.
* Subscription metadata must be JSON-serialisable; it comes back from `recover` as JSON would
  return it (tuples become lists, keys become strings).
* The store keeps a reference to each added `Message` (it does not copy it); a message must not
  be mutated after it has been added.
* Stores are not thread-safe: the broker drives them from its single event-loop thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from reference_broker.engine.message import Message

__all__ = ["MessageStore", "RecoveredState", "StoreError", "SyncPolicy"]


class SyncPolicy(str, Enum):
    """When a journal forces written data to stable storage (see ``journal.py`` for details)."""

    ALWAYS = "always"  # fsync at every flush(): an acknowledged message survives power loss
    INTERVAL = "interval"  # write at every flush(), fsync at most every sync_interval_ms
    NEVER = "never"  # write at every flush(), leave syncing to the OS


class StoreError(Exception):
    """A message store failed; the broker should treat it as fatal for persistence."""


class StoreStalled(StoreError):
    """The store's medium did not answer within its deadline: a shared file system that stopped
    answering, a database that answered too slowly. The store is unusable, but nothing says it is
    broken: a master/slave broker gives the lock back and waits as a slave again (ha/runner.py)
    instead of exiting, and the next master opens it afresh."""


@dataclass
class RecoveredState:
    """What a store held when it was last closed (or when the process died)."""

    # store_key -> live messages, in the order they were added
    messages: dict[str, list[Message]] = field(default_factory=dict)
    # sub_key -> the metadata dict given to add_durable_subscription
    durable_subscriptions: dict[str, dict] = field(default_factory=dict)
    # (store_key, message_id) -> delivery count, only for live messages that were
    # dispatched and returned (count > 0)
    redelivery_counts: dict[tuple[str, str], int] = field(default_factory=dict)


@runtime_checkable
class MessageStore(Protocol):
    def add(self, store_key: str, message: Message) -> None:
        """Record `message` as live under `store_key` (e.g. "queue://ORDERS")."""
        ...

    def remove(self, store_key: str, message_id: str) -> None:
        """The message was acknowledged, dead-lettered or expired; unknown ids are ignored."""
        ...

    def update_redelivery(self, store_key: str, message_id: str, count: int) -> None:
        """Remember that the message has been dispatched and returned `count` times."""
        ...

    def add_durable_subscription(self, sub_key: str, metadata: dict) -> None:
        """Record (or replace) a durable subscription and its JSON-serialisable metadata."""
        ...

    def remove_durable_subscription(self, sub_key: str) -> None:
        """Forget the subscription and every message stored under store key `sub_key`."""
        ...

    def flush(self) -> None:
        """End of a batch: make everything so far durable per the sync policy.

        Cheap (no system calls) when nothing is pending."""
        ...

    def recover(self) -> RecoveredState:
        """The live state; call once at startup, before any new writes."""
        ...

    def close(self) -> None:
        """Flush, release files and locks. Idempotent."""
        ...

    def stats(self) -> dict:
        """Counters for monitoring, e.g. {"kind": "journal", "bytes": ..., "records": ...}."""
        ...
