"""Slow consumers on non-durable topics (ActiveMQ "Slow Consumer Handling").

A topic subscription whose prefetch buffer is full keeps further matched messages pending. The
pending message limit strategy bounds how many it keeps *above* the prefetch; once over the
limit, the eviction strategy picks which pending messages to discard, and the subscription's
`discarded` counter grows. A limit of -1 never discards, 0 keeps nothing beyond the prefetch.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from ..config import (
    ConstantPendingMessageLimit,
    MessageEvictionStrategy,
    OldestWithLowestPriorityEviction,
    PendingMessageLimitStrategy,
    PrefetchRatePendingMessageLimit,
    UniquePropertyEviction,
)
from .message import MessageRef

NO_LIMIT = -1


def pending_limit(strategy: PendingMessageLimitStrategy | None, prefetch: int) -> int:
    """Maximum pending messages above the prefetch for a consumer, or NO_LIMIT."""
    if strategy is None:
        return NO_LIMIT
    if isinstance(strategy, ConstantPendingMessageLimit):
        return strategy.limit
    if isinstance(strategy, PrefetchRatePendingMessageLimit):
        # ActiveMQ truncates prefetch * multiplier to an int.
        return int(prefetch * strategy.multiplier)
    raise TypeError(f"unknown pending message limit strategy {strategy!r}")


def effective_limit(policy_limit: int, consumer_limit: int | None) -> int:
    """Combine the policy's limit with one the consumer asked for ("Using the Prefetch Policy to
    Configure the Limit"): a consumer can lower the limit, or set one where the policy has
    none; a requested 0 is ignored, so the lowest a consumer can ask for is 1."""
    if consumer_limit is None or consumer_limit <= 0:
        return policy_limit
    if policy_limit == NO_LIMIT or consumer_limit < policy_limit:
        return consumer_limit
    return policy_limit


Evictor = Callable[[deque], list[MessageRef]]


def _evict_oldest(pending: deque) -> list[MessageRef]:
    return [pending.popleft()]


def _evict_oldest_lowest_priority(pending: deque) -> list[MessageRef]:
    # Lower-priority messages go first even when newer; among equals the oldest goes.
    lowest = min(ref.message.priority for ref in pending)
    for index, ref in enumerate(pending):
        if ref.message.priority == lowest:
            del pending[index]
            return [ref]
    raise AssertionError("unreachable: a minimum exists in a non-empty deque")


def _unique_property(name: str) -> Evictor:
    def evict(pending: deque) -> list[MessageRef]:
        # Keep the newest message per property value (the latest price per symbol); everything
        # older that has a newer message for the same value, and everything without the
        # property, is evicted. If that frees nothing, fall back to the oldest, as ActiveMQ's
        # UniquePropertyMessageEvictionStrategy does.
        newest: dict[object, MessageRef] = {}
        for ref in pending:
            value = ref.message.properties.get(name)
            if value is not None:
                newest[value] = ref
        keep = {id(ref) for ref in newest.values()}
        if newest and len(keep) < len(pending):
            evicted = [ref for ref in pending if id(ref) not in keep]
            survivors = [ref for ref in pending if id(ref) in keep]
            pending.clear()
            pending.extend(survivors)
            return evicted
        return [pending.popleft()]

    return evict


def evictor_for(strategy: MessageEvictionStrategy) -> Evictor:
    if isinstance(strategy, UniquePropertyEviction):
        return _unique_property(strategy.property_name)
    if isinstance(strategy, OldestWithLowestPriorityEviction):
        return _evict_oldest_lowest_priority
    return _evict_oldest
