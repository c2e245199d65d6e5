"""A pytest plugin that breaks the in-process reference broker on purpose, to prove the
conformance suites can fail and name the rule that broke.

Load it with ``-p tests.conformance.broken_reference`` and choose the faults with the
environment variable ``BROKERCONF_BREAK`` (comma-separated):

* ``groups_not_pinned``: a group never remembers its owner, so each grouped message goes to
  whichever consumer dispatch picks next (breaks GRP-PIN-*).
* ``minus_one_buckets_as_two``: a queue with group-buckets -1 (the default) hashes group ids
  into two buckets instead of tracking each (breaks GRP-BUCKETS-1).
* ``buckets_ignored``: a queue with N > 0 group buckets tracks every group id on its own
  (breaks GRP-BUCKETS-1).
* ``duplex_reverse_unfiltered``: the reverse half of a duplex bridge ignores the connector's
  excluded and dynamically included destinations (breaks NOB-DUPLEX-2).
* ``nack_acks_earlier``: a NACK also acknowledges the messages delivered before it on that
  subscription, as if it were cumulative (breaks ACK-NACK-1).
* ``discards_not_counted``: slow-subscriber evictions still happen but the ``discarded`` counter
  stays at zero (breaks the counter statements of the slow-consumer document).
* ``cluster_duplicates_kept``: a cluster node enqueues every forward it gets, a resent copy too,
  as if use_duplicate_detection were false on the sender (breaks CLU-CC-DUP-1).
* ``cluster_initial_attempts_unbounded``: a cluster link never gives up before it first came up,
  whatever initial_connect_attempts says (breaks CLU-CC-RETRY-3).
* ``cluster_retry_not_multiplied`` / ``cluster_retry_uncapped`` / ``cluster_retry_starts_at_max``:
  the wait between a cluster link's attempts ignores retry_interval_multiplier (stays at
  retry_interval) / max_retry_interval (grows without bound) / retry_interval and the multiplier
  (max_retry_interval from the first retry on) (all break CLU-CC-RETRY-2).

The faults are patched into the engine classes at configure time, in this test process only
(the suites' ``reference`` target runs the broker in-process).
"""

from __future__ import annotations

import os

FAULTS = ("groups_not_pinned", "minus_one_buckets_as_two", "buckets_ignored", "duplex_reverse_unfiltered",
          "nack_acks_earlier", "discards_not_counted", "cluster_duplicates_kept", "cluster_initial_attempts_unbounded",
          "cluster_retry_not_multiplied", "cluster_retry_uncapped", "cluster_retry_starts_at_max", "auto_ack_copies")


def _groups_not_pinned() -> None:
    from reference_broker.engine.groups import GroupTable

    GroupTable.owner = lambda self, key: None


def _minus_one_buckets_as_two() -> None:
    from reference_broker.engine.groups import GroupTable, artemis_group_hash

    right = GroupTable.key
    GroupTable.key = lambda self, group_id: (
        (artemis_group_hash(group_id) & 0x7FFFFFFF) % 2 if self.buckets < 0 else right(self, group_id))


def _buckets_ignored() -> None:
    from reference_broker.engine.groups import GroupTable

    right = GroupTable.key
    GroupTable.key = lambda self, group_id: group_id if self.buckets > 0 else right(self, group_id)


def _duplex_reverse_unfiltered() -> None:
    from reference_broker.cluster.bridge import Bridge

    right = Bridge._local_demand

    def unfiltered(self, destination, consumers) -> None:
        # the pull (reverse) half works from a copy of the configuration without its filters
        saved = self.config
        self.config = saved.model_copy(update={"excluded_destinations": (), "dynamically_included_destinations": ()})
        try:
            right(self, destination, consumers)
        finally:
            self.config = saved

    Bridge._local_demand = unfiltered


def _nack_acks_earlier() -> None:
    from reference_broker.engine.broker import Connection

    right = Connection.nack

    def nack_and_ack_earlier(self, consumer, message_id, transaction=None) -> None:
        earlier = []
        for mid in list(consumer.in_flight):
            if mid == message_id:
                break
            earlier.append(mid)
        for mid in earlier:
            self.ack(consumer, mid)
        right(self, consumer, message_id, transaction)

    Connection.nack = nack_and_ack_earlier


def _auto_ack_copies() -> None:
    """A queue hands each auto-acknowledged message to one more consumer right behind the first
    delivery: to the next auto-ack consumer of the queue (a stray), or to the same one again when
    it is alone (a duplicate). The copy goes out in dispatch order, so a barrier behind the
    messages of interest must see it, as the quiet window did."""
    from reference_broker.engine.queue import AckMode, Queue

    right = Queue._hand_over

    def hand_over_and_copy(self, consumer, ref, new_group) -> None:
        right(self, consumer, ref, new_group)
        if consumer.ack_mode is not AckMode.AUTO:
            return
        others = [c for c in self.consumers if c is not consumer and c.ack_mode is AckMode.AUTO]
        target = others[0] if others else consumer
        target.deliver(target, ref)

    Queue._hand_over = hand_over_and_copy


def _discards_not_counted() -> None:
    from reference_broker.engine.topic import TopicSubscription

    def enforce_limit_without_counting(self) -> None:
        while len(self.pending) > self.limit:
            evicted = self._evict(self.pending) if self.limit > 0 else [self.pending.popleft()]
            if not evicted:
                break
            for ref in evicted:
                self._release_memory(ref)
            # the fault: evicted messages are not added to self.discarded

    TopicSubscription._enforce_limit = enforce_limit_without_counting


def _cluster_duplicates_kept() -> None:
    from reference_broker.clustering.service import ClusterService

    right = ClusterService._received
    ClusterService._received = lambda self, link, frame: right(self, link, {**frame, "dedupe": False})


def _cluster_initial_attempts_unbounded() -> None:
    from reference_broker.clustering.retry import RetryPolicy

    right = RetryPolicy.gives_up
    RetryPolicy.gives_up = lambda self, attempts, *, ever_connected: (
        right(self, attempts, ever_connected=ever_connected) if ever_connected else False)


def _cluster_retry_not_multiplied() -> None:
    from reference_broker.clustering.retry import RetryPolicy

    RetryPolicy.delay = lambda self, failures: min(self.retry_interval, self.max_retry_interval) / 1000


def _cluster_retry_uncapped() -> None:
    from reference_broker.clustering.retry import RetryPolicy

    RetryPolicy.delay = lambda self, failures: (
        self.retry_interval * self.retry_interval_multiplier ** max(0, failures - 1) / 1000)


def _cluster_retry_starts_at_max() -> None:
    from reference_broker.clustering.retry import RetryPolicy

    RetryPolicy.delay = lambda self, failures: self.max_retry_interval / 1000


def pytest_configure(config) -> None:
    wanted = [f.strip() for f in os.environ.get("BROKERCONF_BREAK", "").split(",") if f.strip()]
    unknown = [f for f in wanted if f not in FAULTS]
    if unknown:
        raise ValueError(f"BROKERCONF_BREAK: unknown fault(s) {unknown} (known: {', '.join(FAULTS)})")
    for fault in wanted:
        globals()[f"_{fault}"]()
