"""Reconnect arithmetic of a cluster link (artemis-clusters.md, "Configuring Cluster Connections":
retry-interval, retry-interval-multiplier, max-retry-interval, initial-connect-attempts,
reconnect-attempts; -1 retries for ever). A node whose attempts run out is considered down and
gets no more messages."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RetryPolicy:
    retry_interval: int = 500  # ms
    retry_interval_multiplier: float = 1.0
    max_retry_interval: int = 2000  # ms
    initial_connect_attempts: int = -1
    reconnect_attempts: int = -1

    def delay(self, failures: int) -> float:
        """Seconds of the ``failures``-th wait since the link was last up (1 or more; the loss of
        a link counts as the first failure): the interval times the multiplier per earlier wait,
        capped at the maximum."""
        ms = self.retry_interval * self.retry_interval_multiplier ** max(0, failures - 1)
        return min(ms, self.max_retry_interval) / 1000

    def gives_up(self, attempts: int, *, ever_connected: bool) -> bool:
        """Whether ``attempts`` failed attempts in a row exhaust the allowance: the initial one
        until the link first came up, the reconnect one after."""
        limit = self.reconnect_attempts if ever_connected else self.initial_connect_attempts
        return limit != -1 and attempts >= max(limit, 1 if not ever_connected else 0)
