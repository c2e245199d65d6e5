"""A pytest plugin that breaks the reference broker on purpose, to prove the conformance suites
can fail and name the rule that broke.

Load it with ``-p tests.conformance.broken_reference`` and choose the faults with the
environment variable ``BROKERCONF_BREAK`` (comma-separated names of `FAULTS`).

Each fault is a bug a broker implementer could plausibly write (a wrong default, an off-by-one,
a forgotten filter...), patched over the reference broker's code. It is registered with the
suite that must catch it and the statements that suite must then report failed
(`tests/conformance/fault_batches.py` groups them into suite runs; `scripts/kill_ratio.py`
measures how many are caught per statement family).

The faults are patched in this test process (the ``reference`` target and the reference
clusters and networks run in-process) and in every ``python -m reference_broker`` process the
harness starts (master/slave groups): `_patch_broker_processes` makes those load this module
first, and they inherit ``BROKERCONF_BREAK``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Fault:
    name: str
    suite: str                   # the suites file that must catch it
    breaks: tuple[str, ...]      # statements that suite must report failed
    apply: Callable[[], None]
    # statements it may fail besides (a fault seldom breaks exactly one rule); a batch of faults
    # expects every other statement of the suite not to fail
    collateral: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        return " ".join((self.apply.__doc__ or "").strip().split("\n\n")[0].split())


FAULTS: dict[str, Fault] = {}


def fault(suite: str, *breaks: str, collateral: tuple[str, ...] = ()):
    """Register the decorated patch as fault ``<function name without the leading _>``."""
    def register(apply: Callable[[], None]) -> Callable[[], None]:
        name = apply.__name__.lstrip("_")
        FAULTS[name] = Fault(name, suite, tuple(breaks), apply, tuple(collateral))
        return apply
    return register


# ---------------------------------------------------------------- the first faults

@fault("test_groups.py", "GRP-PIN-1",
       collateral=("GRP-ORDER-1", "GRP-REASSIGN-1", "GRP-HOL-1", "GRP-CLOSE-1", "GRP-FIRST-1", "GRP-REBAL-1",
                   "GRP-BUCKETS-1", "GRP-PROP-1"))
def _groups_not_pinned() -> None:
    """A group never remembers its owner, so each grouped message goes to whichever consumer
    dispatch picks next."""
    from reference_broker.engine.groups import GroupTable

    GroupTable.owner = lambda self, key: None


@fault("test_groups.py", "GRP-BUCKETS-1")
def _minus_one_buckets_as_two() -> None:
    """A queue with group-buckets -1 (the default) hashes group ids into two buckets instead of
    tracking each."""
    from reference_broker.engine.groups import GroupTable, artemis_group_hash

    right = GroupTable.key
    GroupTable.key = lambda self, group_id: (
        (artemis_group_hash(group_id) & 0x7FFFFFFF) % 2 if self.buckets < 0 else right(self, group_id))


@fault("test_groups.py", "GRP-BUCKETS-1")
def _buckets_ignored() -> None:
    """A queue with N > 0 group buckets tracks every group id on its own."""
    from reference_broker.engine.groups import GroupTable

    right = GroupTable.key
    GroupTable.key = lambda self, group_id: group_id if self.buckets > 0 else right(self, group_id)


@fault("test_networks.py", "NOB-DUPLEX-2")
def _duplex_reverse_unfiltered() -> None:
    """The reverse half of a duplex bridge ignores the connector's excluded and dynamically
    included destinations."""
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


@fault("test_core_ack.py", "ACK-NACK-1")
def _nack_acks_earlier() -> None:
    """A NACK also acknowledges the messages delivered before it on that subscription, as if it
    were cumulative."""
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


@fault("test_core_queues.py", "Q-COMPETE-1", "SEL-MATCH-1", "SEL-QUEUE-1", "EXP-1", collateral=("Q-FIFO-1", "Q-EXCL-2"))
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


@fault("test_slow_consumer.py", "SLOW-STATS-1", collateral=("SLOW-STATS-2", "SLOW-STATS-3"))
def _discards_not_counted() -> None:
    """Slow-subscriber evictions still happen but the discarded counter stays at zero."""
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


@fault("test_cluster_link_faults.py", "CLU-CC-DUP-1")
def _cluster_duplicates_kept() -> None:
    """A cluster node enqueues every forward it gets, a resent copy too, as if
    use_duplicate_detection were false on the sender."""
    from reference_broker.clustering.service import ClusterService

    right = ClusterService._received
    ClusterService._received = lambda self, link, frame: right(self, link, {**frame, "dedupe": False})


@fault("test_cluster_link_faults.py", "CLU-CC-RETRY-3")
def _cluster_initial_attempts_unbounded() -> None:
    """A cluster link never gives up before it first came up, whatever initial_connect_attempts
    says."""
    from reference_broker.clustering.retry import RetryPolicy

    right = RetryPolicy.gives_up
    RetryPolicy.gives_up = lambda self, attempts, *, ever_connected: (
        right(self, attempts, ever_connected=ever_connected) if ever_connected else False)


@fault("test_cluster_link_faults.py", "CLU-CC-RETRY-3")
def _cluster_initial_attempts_default_finite() -> None:
    """A cluster connection that leaves initial_connect_attempts unset gives a node it cannot
    reach at its start up after three attempts, as if the default were 3 instead of -1 (without
    limit)."""
    from reference_broker.clustering.retry import RetryPolicy

    right = RetryPolicy.gives_up

    def gives_up(self, attempts, *, ever_connected):
        if not ever_connected and self.initial_connect_attempts == -1:
            return attempts >= 3
        return right(self, attempts, ever_connected=ever_connected)

    RetryPolicy.gives_up = gives_up


@fault("test_cluster_link_faults.py", "CLU-CC-RETRY-2")
def _cluster_retry_not_multiplied() -> None:
    """The wait between a cluster link's attempts ignores retry_interval_multiplier (stays at
    retry_interval)."""
    from reference_broker.clustering.retry import RetryPolicy

    RetryPolicy.delay = lambda self, failures: min(self.retry_interval, self.max_retry_interval) / 1000


@fault("test_cluster_link_faults.py", "CLU-CC-RETRY-2")
def _cluster_retry_uncapped() -> None:
    """The wait between a cluster link's attempts ignores max_retry_interval (grows without
    bound)."""
    from reference_broker.clustering.retry import RetryPolicy

    RetryPolicy.delay = lambda self, failures: (
        self.retry_interval * self.retry_interval_multiplier ** max(0, failures - 1) / 1000)



@fault("test_cluster_link_faults.py", "CLU-CC-RETRY-2", collateral=("CLU-CC-RETRY-1",))
def _cluster_retry_starts_at_max() -> None:
    """The wait between a cluster link's attempts ignores retry_interval and the multiplier: it is
    max_retry_interval from the first retry on."""
    from reference_broker.clustering.retry import RetryPolicy

    RetryPolicy.delay = lambda self, failures: self.max_retry_interval / 1000

# ---------------------------------------------------------------- core (conformance/spec/core.toml)

@fault("test_core_ack.py", "DLQ-MAX-1")
def _redelivery_limit_off_by_one() -> None:
    """A queue dead-letters a message once its delivery count *reaches* maximum_redeliveries
    instead of when it passes it: one redelivery fewer than configured."""
    from reference_broker.engine.queue import Queue

    def negative_acknowledge(self, consumer, refs) -> None:
        returned = []
        limit = self.policy.maximum_redeliveries
        for ref in refs:
            ref.delivery_count += 1
            if limit >= 0 and ref.delivery_count >= limit:  # the fault: >= where > is right
                self._dead_letter(ref, f"delivery count {ref.delivery_count} reached maximum_redeliveries {limit}")
            else:
                returned.append(ref)
        if returned:
            self._return(returned)
        self.dispatch()

    Queue.negative_acknowledge = negative_acknowledge


@fault("test_core_ack.py", "DLQ-NONPERSIST-1")
def _non_persistent_dead_lettered() -> None:
    """Dead-lettering ignores process_non_persistent (as if its default were true): a
    non-persistent message that exhausted its redeliveries lands on the DLQ instead of being
    dropped."""
    from reference_broker.engine.queue import Queue

    def dead_letter_everything(self, ref, cause) -> None:
        self.dequeued += 1
        self.dead_lettered += 1
        if ref.message.persistent:
            self.broker.store.remove(self.store_key, ref.message.message_id)
        self.broker.dead_letter(self, ref, cause)

    Queue._dead_letter = dead_letter_everything


@fault("test_core_ack.py", "TX-ABORT-1")
def _abort_keeps_sends() -> None:
    """ABORT undoes a transaction's acknowledgements but still routes the messages sent in it,
    as COMMIT would."""
    from reference_broker.engine.broker import Connection

    right = Connection.abort

    def abort_and_send(self, tx_id) -> None:
        tx = self.transactions.get(tx_id)
        sends = list(tx.sends) if tx is not None else []
        right(self, tx_id)
        for dest, message in sends:
            self.broker.route(dest, message)

    Connection.abort = abort_and_send


@fault("test_core_queues.py", "Q-PRIO-1")
def _priority_ignored() -> None:
    """Every message goes to the lowest priority level: a queue delivers in arrival order
    whatever the message priority."""
    from reference_broker.engine.queue import Queue

    Queue._level = lambda self, ref: 0


@fault("test_core_queues.py", "Q-EXCL-1", collateral=("Q-EXCL-2",))
def _exclusive_ignored() -> None:
    """A consumer's exclusive flag is dropped when the consumer is created: an exclusive
    consumer competes like any other."""
    from reference_broker.engine.consumer import Consumer

    right = Consumer.__init__

    def init_without_exclusive(self, *args, **kwargs) -> None:
        kwargs["exclusive"] = False
        right(self, *args, **kwargs)

    Consumer.__init__ = init_without_exclusive


@fault("test_core_queues.py", "EXP-1", collateral=("EXP-DLQ-1",))
def _expiry_ignored() -> None:
    """Message expiration is never checked: an expired message is still delivered."""
    from reference_broker.engine.message import Message

    Message.is_expired = lambda self, now_ms: False


@fault("test_core_queues.py", "SEL-QUEUE-1", collateral=("SEL-MATCH-1",))
def _queue_selector_ignored() -> None:
    """A queue consumer's selector is not applied (only the no-local check is): it gets every
    message of the queue."""
    from reference_broker.engine.consumer import Consumer

    def accepts_without_selector(self, ref) -> bool:
        return not (self.no_local and ref.message.producer_id == self.connection.connection_id)

    Consumer.accepts = accepts_without_selector


@fault("test_core_queues.py", "STOMP-ERROR-1")
def _error_keeps_connection() -> None:
    """A STOMP ERROR frame is sent but the connection is left open behind it."""
    from reference_broker.protocols.stomp.session import StompSession

    right = StompSession._error

    def error_without_closing(self, *args, **kwargs) -> None:
        self._shutdown = lambda: None  # the fault: the close after the ERROR is forgotten
        try:
            right(self, *args, **kwargs)
        finally:
            del self._shutdown

    StompSession._error = error_without_closing


@fault("test_core_queues.py", "STORE-RECEIPT-1")
def _persistent_header_not_echoed() -> None:
    """A STOMP MESSAGE frame leaves out the persistent header of a persistent message."""
    from reference_broker.protocols.stomp.session import StompSession

    right = StompSession._encode_common
    StompSession._encode_common = staticmethod(
        lambda message, version: right(message, version).replace(b"persistent:true\n", b""))


@fault("test_core_topics.py", "TOPIC-FANOUT-1")
def _topic_first_subscriber_only() -> None:
    """A topic hands each message to the first matching subscription only, like a queue."""
    from reference_broker.engine.broker import Broker

    right = Broker._routes
    Broker._routes = lambda self, topic_name: right(self, topic_name)[:1]


@fault("test_core_topics.py", "DUR-KEEP-1")
def _inactive_durable_drops() -> None:
    """A durable subscription with no active subscriber drops what is published meanwhile, as
    a non-durable one would."""
    from reference_broker.engine.topic import DurableSubscription

    right = DurableSubscription.add

    def add_when_active(self, message, topic, retained=False) -> None:
        if self.active is not None:
            right(self, message, topic, retained)

    DurableSubscription.add = add_when_active


# ---------------------------------------------------------------- networks of brokers (NOB)

def _with_config(method, **wrong):
    """`method` of a Bridge run with its connector configuration changed by ``wrong``."""
    def patched(self, *args, **kwargs):
        saved = self.config
        self.config = saved.model_copy(update=wrong)
        try:
            return method(self, *args, **kwargs)
        finally:
            self.config = saved
    return patched


@fault("test_networks.py", "NOB-TTL-2")
def _message_ttl_one_hop_too_many() -> None:
    """A bridge's message TTL check lets a message cross one broker more than message_ttl says
    (the path length compared with <= instead of <)."""
    from reference_broker.cluster import bridge

    right = bridge.remote_message_selector
    bridge.remote_message_selector = lambda exclude, message_ttl, consumer_selector=None: right(
        exclude, message_ttl + 1, consumer_selector)


@fault("test_networks.py", "NOB-TTL-3", collateral=("NOB-TTL-1",))
def _consumer_ttl_one_hop_too_many() -> None:
    """A consumer announcement is acted on one broker further than consumer_ttl allows (the path
    length compared with <= instead of <)."""
    from reference_broker.cluster import demand

    demand.eligible = lambda consumer, announcer, forwarder, consumer_ttl: (
        forwarder not in consumer.path and announcer not in consumer.path and len(consumer.path) <= consumer_ttl)


@fault("test_networks.py", "NOB-EXCL-1")
def _excluded_destinations_ignored() -> None:
    """Demand for a destination of the excluded list still crosses the connector: only the
    dynamically included list is consulted."""
    from reference_broker.cluster import demand

    from reference_broker.cluster import bridge

    demand.dynamically_forwarded = bridge.dynamically_forwarded = lambda config, destination: (
        not config.dynamically_included_destinations
        or any(demand.destination_matches(p, destination) for p in config.dynamically_included_destinations))


@fault("test_networks.py", "NOB-CONDUIT-1",
       collateral=("NOB-CONDUIT-2", "NOB-CONDUIT-3", "NOB-TOPIC-1", "NOB-LOOP-1", "NOB-VIRT-3"))
def _conduit_subscriptions_ignored() -> None:
    """conduit_subscriptions is not honoured: every remote consumer gets a network consumer of its
    own, as with the option off."""
    from reference_broker.cluster import demand

    right = demand.desired_consumers
    demand.desired_consumers = lambda config, destination, announcer, forwarder, consumers: right(
        config.model_copy(update={"conduit_subscriptions": False}), destination, announcer, forwarder, consumers)
    from reference_broker.cluster import bridge
    if getattr(bridge, "desired_consumers", None) is right:
        bridge.desired_consumers = demand.desired_consumers


@fault("test_networks.py", "NOB-PRIO-1")
def _network_priority_not_decreased() -> None:
    """decrease_network_consumer_priority is not honoured: network consumers keep priority 0,
    level with local ones."""
    from reference_broker.cluster import bridge, demand, paths

    for module in (paths, demand, bridge):
        if hasattr(module, "network_priority"):
            module.network_priority = lambda path, decrease: 0


@fault("test_networks.py", "NOB-STATINC-1", collateral=("NOB-EXCL-2",))
def _static_includes_wait_for_demand() -> None:
    """Statically included destinations are only forwarded while the remote broker has a consumer,
    like dynamically included ones."""
    from reference_broker.cluster import bridge, demand

    demand.static_demand = lambda config, announcer: {}
    if hasattr(bridge, "static_demand"):
        bridge.static_demand = demand.static_demand


@fault("test_network_connectors.py", "NOB-PREFETCH-1", collateral=("NOB-SYNC-1",))
def _network_prefetch_not_passed() -> None:
    """The network consumer ignores the connector's prefetch_size and takes the default 1000."""
    from reference_broker.cluster.bridge import Bridge

    Bridge._add_forward = _with_config(Bridge._add_forward, prefetch_size=1000)


@fault("test_network_temp.py", "NOB-TEMP-1")
def _temp_destinations_not_bridged() -> None:
    """bridge_temp_destinations defaults to off: a remote broker's temporary reply-to destination
    is never announced, so replies to it go nowhere."""
    from reference_broker.cluster.bridge import Bridge

    Bridge._on_advisory = _with_config(Bridge._on_advisory, bridge_temp_destinations=False)
    Bridge._local_demand = _with_config(Bridge._local_demand, bridge_temp_destinations=False)


@fault("test_network_store_forward.py", "NOB-STATIC-2")
def _reconnect_delay_in_seconds() -> None:
    """A static bridge reads initial_reconnect_delay as seconds, not milliseconds: after losing
    its peer it waits a thousand times too long to try again."""
    from reference_broker.cluster.uris import ReconnectPolicy

    right = ReconnectPolicy.delay_ms
    ReconnectPolicy.delay_ms = lambda self, failures: right(self, failures) * 1000


# ---------------------------------------------------------------- slow consumers (SLOW)

@fault("test_slow_consumer.py", "SLOW-EVICT-1",
       collateral=("SLOW-LIMIT-1", "SLOW-POLICY-1", "SLOW-FAST-1", "SLOW-FLOW-1", "SLOW-MEM-1", "SLOW-PREFETCH-1",
                   "SLOW-STATS-2", "SLOW-STATS-3"))
def _evict_newest() -> None:
    """The default eviction strategy drops the newest waiting message instead of the oldest."""
    from reference_broker.engine import slow_consumer, topic
    from reference_broker.config import OldestWithLowestPriorityEviction, UniquePropertyEviction

    right = slow_consumer.evictor_for

    def evictor_for(strategy):
        if isinstance(strategy, (UniquePropertyEviction, OldestWithLowestPriorityEviction)):
            return right(strategy)
        return lambda pending: [pending.pop()]

    topic.evictor_for = evictor_for


@fault("test_slow_consumer.py", "SLOW-LIMIT-2")
def _prefetch_rate_multiplier_ignored() -> None:
    """The prefetch-rate pending limit forgets its multiplier: the limit is the prefetch size."""
    from reference_broker.config import PrefetchRatePendingMessageLimit
    from reference_broker.engine import slow_consumer, topic

    right = slow_consumer.pending_limit
    topic.pending_limit = lambda strategy, prefetch: (
        prefetch if isinstance(strategy, PrefetchRatePendingMessageLimit) else right(strategy, prefetch))


@fault("test_slow_consumer.py", "SLOW-CONSUMER-LIMIT-1")
def _consumer_limit_ignored() -> None:
    """The pending limit a consumer asks for when it subscribes is ignored: only the policy's
    limit counts.

    (First tried: a requested 0 taken as a limit. Not reachable: the STOMP session already turns
    a requested 0 into "none asked", a second guard behind the engine's.)"""
    from reference_broker.engine import topic

    topic.effective_limit = lambda policy_limit, consumer_limit: policy_limit


# ---------------------------------------------------------------- Artemis clusters (CLU)

@fault("test_cluster_topologies.py", "CLU-HOPS-2")
def _max_hops_off_by_one() -> None:
    """A node's binding table reaches one cluster connection further than max_hops: with the
    default 1 it load-balances to a node two connections away."""
    from reference_broker.clustering.bindings import BindingTable

    right = BindingTable.__init__
    BindingTable.__init__ = lambda self, me, max_hops: right(self, me, max_hops + 1)


@fault("test_cluster_load_balancing.py", "CLU-LB-3")
def _on_demand_ignores_selectors() -> None:
    """ON_DEMAND counts any consumer on the other node, selector or not: messages its consumers'
    selectors refuse are forwarded there too."""
    from reference_broker.clustering.balancer import LoadBalancer

    right = LoadBalancer.candidates

    def candidates(self, message, local_matches, remotes):
        if self.mode != "ON_DEMAND":
            return right(self, message, local_matches, remotes)
        chosen = {r.node for r in remotes if r.consumers}
        if local_matches:
            chosen.add(self.me)
        return sorted(chosen) or [self.me]

    LoadBalancer.candidates = candidates


@fault("test_cluster_load_balancing.py", "CLU-LB-4")
def _strict_balances_on_demand() -> None:
    """STRICT load balancing is run as ON_DEMAND: nodes whose queue has no (matching) consumer are
    skipped in the round robin."""
    from reference_broker.clustering.balancer import LoadBalancer

    right = LoadBalancer.candidates

    def candidates(self, message, local_matches, remotes):
        if self.mode != "STRICT":
            return right(self, message, local_matches, remotes)
        self.mode = "ON_DEMAND"
        try:
            return right(self, message, local_matches, remotes)
        finally:
            self.mode = "STRICT"

    LoadBalancer.candidates = candidates


@fault("test_cluster_load_balancing.py", "CLU-LB-5")
def _off_balances_on_demand() -> None:
    """message-load-balancing OFF is not recognised and falls back to the default ON_DEMAND."""
    from reference_broker.clustering.balancer import LoadBalancer

    right = LoadBalancer.__init__
    LoadBalancer.__init__ = lambda self, me, mode: right(self, me, "ON_DEMAND" if mode == "OFF" else mode)


def _redistribution_delay(wrong):
    """Have every Redistributor read its queue's redistribution delay through ``wrong(delay)``."""
    from reference_broker.clustering.redistribution import Redistributor

    right = Redistributor.__init__

    def init(self, mode, delay_for, move) -> None:
        right(self, mode, lambda queue: wrong(delay_for(queue)), move)

    Redistributor.__init__ = init


@fault("test_cluster_redistribution.py", "CLU-REDIST-4")
def _redistribution_on_by_default() -> None:
    """The default redistribution delay -1 is read as 0: messages are redistributed at once when
    nothing configured it."""
    _redistribution_delay(lambda delay: 0 if delay < 0 else delay)


@fault("test_cluster_redistribution.py", "CLU-REDIST-2", collateral=("CLU-REDIST-3", "CLU-REDIST-9"))
def _redistribution_delay_ignored() -> None:
    """A positive redistribution delay is not waited: messages move as soon as the last consumer
    closed."""
    _redistribution_delay(lambda delay: 0 if delay > 0 else delay)


@fault("test_cluster_scale_down_groups.py", "CLU-SCALE-4", collateral=("CLU-SCALE-5",))
def _scale_down_ignores_group() -> None:
    """Scale-down picks any node up and linked, whatever its scale-down-group-name."""
    from reference_broker.clustering.service import ClusterService

    def any_node(self):
        candidates = sorted({c.peer for c in self.connectors if c.up}
                            | {p for p, link in self.inbound.items() if link.is_open})
        return candidates[0] if candidates else None

    ClusterService.scale_down_target = any_node


# ---------------------------------------------------------------- clustered grouping (GRP-CLUSTER)

@fault("test_cluster_grouping.py", "GRP-CLUSTER-3",
       collateral=("GRP-CLUSTER-1", "GRP-CLUSTER-4", "GRP-CLUSTER-6", "GRP-CLUSTER-2", "GRP-CLUSTER-5",
                   # a group used through the REMOTE node (its timeout refreshed there) is routed by
                   # that node's own proposal too
                   "GRP-CLUSTER-9"))
def _remote_handler_decides_alone() -> None:
    """A REMOTE grouping handler routes a group by its own proposal without waiting for the
    LOCAL handler's decision: a group whose messages arrive at two nodes is split between them.

    (First tried: a LOCAL handler whose latest proposal replaces the route. Not observable: a
    REMOTE handler asks once per group and keeps the answer, so the LOCAL never hears a second
    proposal for a group while the test runs.)"""
    from reference_broker.clustering.grouping import RemoteGroupingHandler

    async def route(self, address, group_id, proposal):
        return proposal

    RemoteGroupingHandler.route = route


# GRP-CLUSTER-9's test routes through B as well: when a request of its times out on a loaded
# machine (a CI run, 2026-12-01), this fault routes that group by B's own proposal there too
@fault("test_cluster_grouping.py", "GRP-CLUSTER-5", "GRP-CLUSTER-2", collateral=("GRP-CLUSTER-9",))
def _remote_handler_routes_alone_on_timeout() -> None:
    """A REMOTE grouping handler that gets no decision in time routes the group by its own
    proposal instead of failing the send."""
    from reference_broker.clustering.grouping import GroupingTimeout, RemoteGroupingHandler

    right = RemoteGroupingHandler.route

    async def route(self, address, group_id, proposal):
        try:
            return await right(self, address, group_id, proposal)
        except GroupingTimeout:
            return proposal

    RemoteGroupingHandler.route = route


# ---------------------------------------------------------------- master/slave (FT)

@fault("test_master_slave.py", "FT-SHARED-1", collateral=("FT-SHARED-6", "FT-MS-3"))
def _slave_binds_transports_early() -> None:
    """A slave binds its STOMP port while it waits for the lock (accepting connections it never
    answers) instead of leaving it closed until it is master: clients hang on it instead of moving
    on to the master.

    (A slave that ignores the lock altogether serves beside the master; the harness refuses that
    group when it starts it, so that is an error of the setup, not a failed statement.)"""
    import asyncio

    from reference_broker.ha.runner import MasterSlaveRunner
    from reference_broker.server import _split

    right = MasterSlaveRunner._become_master

    async def become_master(self, stop) -> bool:
        early, accepted = None, []
        if self.config.stomp:
            host, port = _split(self.config.stomp)
            if port:
                early = await asyncio.start_server(lambda reader, writer: accepted.append(writer), host, port)
        try:
            return await right(self, stop)
        finally:
            if early is not None:  # the real listener takes the port once master
                early.close()  # stops listening at once
                for writer in accepted:
                    writer.close()

    MasterSlaveRunner._become_master = become_master


@fault("test_master_slave.py", "FT-SHARED-2", collateral=("FT-SHARED-5",))
def _lock_file_not_checked() -> None:
    """The master's keep-alive check re-locks its open descriptor but never looks whether the lock
    file is still there: a master whose lock file was deleted keeps serving."""
    from reference_broker.ha.locker import SharedFileLocker

    def keep_alive(self) -> bool:
        try:
            return self._fd is not None and self._lock(self._fd)
        except OSError:
            return False

    SharedFileLocker.keep_alive = keep_alive


@fault("test_master_slave_nfs.py", "FT-SHARED-4")
def _takes_over_without_waiting() -> None:
    """A slave that gets the lock serves at once instead of waiting one lock_keep_alive_period."""
    from reference_broker.ha.runner import MasterSlaveRunner

    right_period = MasterSlaveRunner.keep_alive_s
    right_become = MasterSlaveRunner._become_master

    async def become_master(self, stop) -> bool:
        self._becoming = True  # the period reads 0 while taking over: the wait is skipped
        try:
            return await right_become(self, stop)
        finally:
            self._becoming = False

    MasterSlaveRunner.keep_alive_s = property(
        lambda self: 0 if getattr(self, "_becoming", False) else right_period.fget(self))
    MasterSlaveRunner._become_master = become_master


@fault("test_master_slave_nfs.py", "FT-SHARED-3")
def _slave_polls_at_keep_alive_period() -> None:
    """A slave waits lock_keep_alive_period between its attempts on the lock instead of
    lock_acquire_sleep_interval (the two settings mixed up)."""
    from reference_broker.ha.runner import MasterSlaveRunner

    right = MasterSlaveRunner.acquire_sleep_s
    # read from the configuration, not keep_alive_s, which another fault patches
    MasterSlaveRunner.acquire_sleep_s = property(
        lambda self: self.config.store.lock_keep_alive_period / 1000 or right.fget(self))


@fault("test_jdbc_master_slave.py", "FT-JDBC-2")
def _receipts_before_batch_commit() -> None:
    """The database store commits only full batches of 100 changes (and at close), but receipts
    do not wait for that: a master killed after confirming fewer sends leaves them nowhere for the
    slave to find.

    (First tried: a master that never renews its database lease. Once the lease runs out the
    slave serves beside it, which FT-JDBC-4 (since it watches the restarted broker over three
    leases) fails, or, when the lease runs out while the group starts, the harness refuses as two
    masters: an error of the setup, so the count would depend on timing.)"""
    from reference_broker.store.database import DatabaseStore

    right_flush, right_close = DatabaseStore.flush, DatabaseStore.close

    def flush_full_batches(self) -> None:
        if len(self._pending) >= 100 or getattr(self, "_closing", False):
            right_flush(self)

    def close(self) -> None:
        self._closing = True
        right_close(self)

    DatabaseStore.flush, DatabaseStore.close = flush_full_batches, close


@fault("test_master_slave.py", "FT-MS-2")
def _transacted_sends_stored_at_send() -> None:
    """A persistent message sent in a transaction is written to the store when it is sent, not
    when the transaction commits: a master that dies with the transaction open leaves it for the
    next master to deliver."""
    from reference_broker.engine.broker import Connection

    right = Connection._buffer

    def buffer_and_store(self, tx, dest, message) -> None:
        right(self, tx, dest, message)
        if message.persistent and dest.is_queue:
            queue = self.broker.queue(dest)
            if queue.stored:
                self.broker.store.add(queue.store_key, message)

    Connection._buffer = buffer_and_store


@fault("test_jdbc_master_slave.py", "FT-JDBC-5")
def _lock_table_in_public_schema() -> None:
    """The database lease names its table with the public schema written in, whatever schema
    the broker's connection uses: a broker whose tables are elsewhere still waits for the lock
    of the group that uses public."""
    from reference_broker.ha import lease

    if "." not in lease.TABLE:
        lease.TABLE = f"public.{lease.TABLE}"


# ---------------------------------------------------------------- cross-protocol (XPROTO)

@fault("test_cross_protocol.py", "XPROTO-MQTT-2")
def _mqtt_user_properties_dropped() -> None:
    """An MQTT 5 PUBLISH's user properties are not carried into the message (only the group id
    the broker itself reads is kept): a STOMP subscriber does not see them as headers."""
    from reference_broker.protocols.mqtt import session

    right = session.message_from_mqtt

    def without_user_properties(*, user_properties=(), **fields):
        kept = [(name, value) for name, value in user_properties if name in ("JMSXGroupID", "JMSXGroupSeq")]
        return right(user_properties=kept, **fields)

    session.message_from_mqtt = without_user_properties


# ---------------------------------------------------------------- TLS listeners (TLS)

@fault("test_tls.py", "TLS-PLAIN-1", collateral=("TLS-RT-1", "TLS-SIDE-1"))
def _tls_listener_in_plaintext() -> None:
    """A TLS listener is bound without its SSL context: the TLS port speaks the protocol in
    plaintext."""
    import asyncio

    from reference_broker.server import BrokerServer

    right = BrokerServer._start_tls_listeners

    async def start_without_tls(self) -> None:
        loop = asyncio.get_running_loop()
        create_server = loop.create_server

        async def plain(*args, ssl=None, ssl_handshake_timeout=None, **kwargs):
            return await create_server(*args, **kwargs)

        loop.create_server = plain
        try:
            await right(self)
        finally:
            del loop.create_server

    BrokerServer._start_tls_listeners = start_without_tls


# ---------------------------------------------------------------- loading

def wanted_faults(value: str | None = None) -> list[Fault]:
    """The faults ``BROKERCONF_BREAK`` names (or `value`), refusing unknown names."""
    value = os.environ.get("BROKERCONF_BREAK", "") if value is None else value
    wanted = [f.strip() for f in value.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in FAULTS]
    if unknown:
        raise ValueError(f"BROKERCONF_BREAK: unknown fault(s) {unknown} (known: {', '.join(FAULTS)})")
    return [FAULTS[f] for f in wanted]


def apply_from_environment() -> None:
    for chosen in wanted_faults():
        chosen.apply()


# What a ``python -m reference_broker`` child runs instead: the faults first, then the broker's
# own entry point, with the arguments it would have had.
_BROKEN_MAIN = ("import runpy, sys; from tests.conformance.broken_reference import apply_from_environment; "
                "apply_from_environment(); sys.argv[0] = 'reference_broker'; "
                "runpy.run_module('reference_broker', run_name='__main__', alter_sys=True)")


def _patch_broker_processes() -> None:
    """Master/slave groups run brokers as child processes (conformance/targets/reference/
    process.py, which puts the source root on their PYTHONPATH): have them load the faults."""
    from conformance.targets.reference.process import ReferenceBrokerProcess

    right = ReferenceBrokerProcess.command

    def broken_command(self, stomp_port: int = 0) -> list[str]:
        cmd = right(self, stomp_port)
        at = cmd.index("-m")
        return [*cmd[:at], "-c", _BROKEN_MAIN, *cmd[at + 2:]]

    ReferenceBrokerProcess.command = broken_command


def pytest_configure(config) -> None:
    chosen = wanted_faults()
    for each in chosen:
        each.apply()
    if chosen:
        _patch_broker_processes()
