"""The conditional network bridge filter: replay when no consumers, replay delay, rate limit.

ActiveMQ "Networks of Brokers", "Stuck Messages" (replayWhenNoConsumers, version 5.6) and
"Throttling a network consumer": a queue policy may give the network consumers of its queues a
``conditionalNetworkBridgeFilterFactory``. Without it, a message never goes back to a broker it
came through (loop suppression, `paths`), so messages forwarded to a broker whose consumer then
left are stuck there even when the origin has consumers again. With ``replay_when_no_consumers``
a network consumer towards broker X also takes messages that came through X, provided this broker
has no local (non-network) consumer for the queue and, with ``replay_delay``, the message entered
this broker at least that many ms ago. ``rate_limit`` caps how many messages the queue's network
consumers take per ``rate_duration`` ms window. Semantics follow ActiveMQ's
ConditionalNetworkBridgeFilter, which the document names but does not spell out: a replay ignores
message_ttl (it only applies to messages that are not going back), the remote consumer's own
selector still applies.

`install(broker, consumer, later, windows)` wraps a new network consumer's selector (the
`AdvisoryPublisher` calls it for every network consumer added to a queue whose policy has the
filter); the wrapper is what the queue's dispatch consults through `Consumer.accepts`.
"""

from __future__ import annotations

from typing import Callable

from ..config import ConditionalNetworkBridgeFilter
from ..engine.consumer import Consumer
from ..engine.selector import parse_selector
from .paths import PATH_PROPERTY, network_subscription, parse_path, split_remote_selector

Later = Callable[[float, Callable[[], None]], object]


def is_network_consumer(consumer: Consumer) -> bool:
    return network_subscription(consumer) is not None


class RateWindow:
    """Counts messages taken in fixed windows of ``duration`` ms (ActiveMQ's rateLimit/rateDuration)."""

    def __init__(self, limit: int, duration: int) -> None:
        self.limit, self.duration = limit, duration
        self.window_start = 0
        self.count = 0

    def take(self, now_ms: int) -> bool:
        """Whether one more message may go now; counts it when it may."""
        if self.limit <= 0:
            return True
        if now_ms - self.window_start >= self.duration:
            self.window_start, self.count = now_ms, 0
        if self.count >= self.limit:
            return False
        self.count += 1
        return True

    def reopens_in_ms(self, now_ms: int) -> int:
        return max(1, self.window_start + self.duration - now_ms)


class ConditionalBridgeSelector:
    """Stands in for a network consumer's compiled selector (same ``text`` / ``matches`` /
    ``evaluate`` surface as engine.selector.Selector)."""

    def __init__(self, consumer: Consumer, target: str, settings: ConditionalNetworkBridgeFilter,
                 window: RateWindow, now_ms: Callable[[], int], later: Later) -> None:
        base = consumer.selector
        self.text = base.text if base is not None else ""
        self.identifiers = getattr(base, "identifiers", frozenset())
        self._base = base
        _, own = split_remote_selector(self.text)
        self._own = parse_selector(own) if own else None
        self._consumer = consumer
        self._target = target
        self._settings = settings
        self._window = window
        self._now_ms = now_ms
        self._later = later
        self._wakeup_pending = False

    def evaluate(self, lookup) -> bool:
        return self.matches(lookup)

    def matches(self, lookup) -> bool:
        if self._base is None or self._base.matches(lookup):
            return self._rate_allows()
        if not self._settings.replay_when_no_consumers:
            return False
        if self._target not in parse_path(lookup(PATH_PROPERTY)):
            return False  # refused for another reason (message_ttl, the consumer's selector)
        if self._own is not None and not self._own.matches(lookup):
            return False
        if self._has_local_consumers():
            return False
        delay = self._settings.replay_delay
        if delay:
            arrived = lookup("JMSTimestamp") or 0
            wait = arrived + delay - self._now_ms()
            if wait > 0:
                self._wake_in(wait)
                return False
        return self._rate_allows()

    def _rate_allows(self) -> bool:
        now = self._now_ms()
        if self._window.take(now):
            return True
        self._wake_in(self._window.reopens_in_ms(now))
        return False

    def _has_local_consumers(self) -> bool:
        queue = self._consumer.source
        return any(not is_network_consumer(c) for c in getattr(queue, "consumers", ()))

    def _wake_in(self, ms: int) -> None:
        """Dispatch the queue again once the delay or the rate window has passed (nothing else
        would: no consumer or message event happens meanwhile)."""
        if self._wakeup_pending:
            return
        self._wakeup_pending = True

        def wake() -> None:
            self._wakeup_pending = False
            queue = self._consumer.source
            if not self._consumer.closed and queue is not None:
                queue.dispatch()

        self._later(ms / 1000, wake)

    def __repr__(self) -> str:
        return f"ConditionalBridgeSelector(to={self._target!r}, {self._settings!r})"


def install(broker, consumer: Consumer, later: Later, windows: dict[str, RateWindow]) -> bool:
    """Wrap ``consumer``'s selector when it is a network consumer of a queue whose policy has a
    conditional network bridge filter; returns whether it did. ``windows`` (queue -> its rate
    window) is shared by every network consumer of the broker: the limit is per destination. Dispatches the queue again, as
    the queue's first dispatch to the new consumer used the plain selector."""
    parsed = network_subscription(consumer)
    if parsed is None or not consumer.destination.is_queue or not parsed[0]:
        return False
    settings = broker.policies.policy_for(consumer.destination).conditional_network_bridge_filter
    if settings is None:
        return False
    queue = consumer.source
    window = windows.setdefault(consumer.destination.canonical,
                                RateWindow(settings.rate_limit, settings.rate_duration))
    consumer.selector = ConditionalBridgeSelector(consumer, parsed[0][0], settings, window, broker.now_ms, later)
    if queue is not None:
        queue.dispatch()
    return True
