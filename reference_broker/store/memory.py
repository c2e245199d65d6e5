"""The store used when persistence is off: it records nothing.

Every operation is a no-op and `MemoryStore.recover` returns an empty `RecoveredState`, so a
broker restarted with this store starts empty. The engine keeps its messages in its own queues;
this class exists so the engine can always talk to *a* store.
"""

from __future__ import annotations

from reference_broker.engine.message import Message
from reference_broker.store.base import RecoveredState

__all__ = ["MemoryStore"]


class MemoryStore:
    """A `MessageStore` that persists nothing (persistence disabled)."""

    def add(self, store_key: str, message: Message) -> None:
        pass

    def remove(self, store_key: str, message_id: str) -> None:
        pass

    def update_redelivery(self, store_key: str, message_id: str, count: int) -> None:
        pass

    def add_durable_subscription(self, sub_key: str, metadata: dict) -> None:
        pass

    def remove_durable_subscription(self, sub_key: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def recover(self) -> RecoveredState:
        return RecoveredState(messages={}, durable_subscriptions={}, redelivery_counts={})

    def close(self) -> None:
        pass

    def stats(self) -> dict:
        return {"kind": "memory"}
