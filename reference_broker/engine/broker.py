"""The engine's facade: a `Broker` holds destinations; each protocol connection gets a
`Connection` through which it sends, subscribes, acknowledges and runs transactions.

Everything here is synchronous and protocol-neutral: a protocol adapter calls in with decoded
requests and receives deliveries through the callback it gave `subscribe`. Durability follows
the store's batch rhythm: the adapter calls `Broker.flush()` after each network read and only
then confirms persistent sends, so confirmations are group-committed.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import secrets
import time
from typing import Callable

from ..config import BrokerConfig
from ..store.base import MessageStore
from ..store.memory import MemoryStore
from .access import ReadAccess
from .audit import NetworkAudit, audit_key
from .consumer import AckMode, Consumer, DeliverCallback
from .errors import (
    AuthenticationFailed,
    ClientIdInUse,
    InvalidDestination,
    InvalidSelectorError,
    NotAuthorized,
    ResourceLimitError,
    TransactionError,
    UnknownMessage,
    UnknownSubscription,
)
from .message import RETAIN_PROPERTY, Message, MessageRef
from .network_principal import is_in_process_bridge
from .names import QUEUE, TOPIC, DestinationName, parse_destination
from .policy import Policies
from .queue import Queue
from .retained import RetainedReplay
from .routing import IndexedQueues, SubscriptionTrie
from .selector import SelectorError, parse_selector
from .temporary import TemporaryDestinations
from .topic import DurableSubscription, SharedSubscription, Topic, TopicSubscription
from .usage import MemoryUsage
from .virtual import VirtualDestinations
from .wildcard import WildcardMap, has_wildcards
from .wildcard import matches as wildcard_matches

log = logging.getLogger("reference_broker.engine")


def connection_id(broker_name: str, incarnation: str, number: int) -> str:
    """``<broker>-<incarnation>-<n>``: STOMP's CONNECTED ``session`` header, and the stem of the
    connection's message ids."""
    return f"{broker_name}-{incarnation}-{number}"


def broker_name_of(connection_id: str) -> str:
    """The broker part of a `connection_id` (broker names may contain dashes)."""
    return connection_id.rsplit("-", 2)[0]

def _refuse_wildcard_send(dest: DestinationName) -> None:
    """A wildcard names many destinations, so the reference broker lets no client send to one
    (issue 20 item 7: a SEND to /topic/A.> was accepted with a receipt; the
    suite does not check here what ActiveMQ or Artemis do with such a send). The broker's own
    connection may: its advisory topics for a wildcard subscription carry the wildcard in their
    name. The substring test keeps the common case to one scan of the name."""
    name = dest.name
    if ("*" in name or ">" in name or "#" in name) and has_wildcards(name):
        raise InvalidDestination(
            f"cannot send to {dest.canonical}: it contains a wildcard ('*', '>' or '#' as a "
            "whole name element), and wildcards are only for subscribing")


# Store keys of retained messages: "retained://topic://NAME" (persistent ones survive restarts).
RETAINED_KEY_PREFIX = "retained://"

#: how many topics with nothing pending a broker remembers (Broker.idle_topic_limit)
IDLE_TOPIC_LIMIT = 10_000
#: how many empty queues without consumers a broker remembers (Broker.idle_queue_limit)
IDLE_QUEUE_LIMIT = 10_000
# how many busy topics _forget_idle_topics passes over per call before giving up
_IDLE_SCAN = 64


class Broker:
    def __init__(
        self,
        config: BrokerConfig | None = None,
        store: MessageStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or BrokerConfig()
        self.store: MessageStore = store or MemoryStore()
        self.clock = clock
        self.policies = Policies(self.config)
        self.system_usage = MemoryUsage("system", self.config.system_usage.memory_limit)
        # Memory that no consumer drains, charged to the broker-wide limit like pending messages
        # (issue 20, items 4 and 5): retained messages (until replaced or cleared) and sends
        # buffered in open transactions (until COMMIT or ABORT). A full broker refuses more of
        # either instead of blocking the producer: blocking would wait for a drain that only
        # the blocked client itself could cause.
        self.retained_usage = MemoryUsage("retained", None, self.system_usage)
        self.transaction_usage = MemoryUsage("transactions", None, self.system_usage)
        # by canonical name, with a trie of the names (virtual topics look their queues up by pattern)
        self.queues: IndexedQueues = IndexedQueues()
        self.topics: dict[str, Topic] = {}
        # Topic subscriptions (non-durable, durable, shared) by pattern: routing a publish walks
        # only the branches its name can take (engine/routing.py), whatever else is subscribed.
        self._routing: SubscriptionTrie[TopicSubscription | DurableSubscription | SharedSubscription] = SubscriptionTrie()
        self.durable: dict[str, DurableSubscription] = {}
        self.shared: dict[str, SharedSubscription] = {}
        # The retained message of each topic (canonical name), see RETAIN_PROPERTY.
        self.retained: dict[str, Message] = {}
        # At most this many topics with nothing pending are remembered (with their statistics);
        # beyond it the least recently published one is forgotten, so publishing to ever new
        # names cannot grow the broker (see _forget_idle_topics).
        self.idle_topic_limit = IDLE_TOPIC_LIMIT
        self.idle_queue_limit = IDLE_QUEUE_LIMIT  # the same for queues (_forget_idle_queues)
        # The event-loop lag gauge of the server running this broker (reference_broker/loop_lag.py).
        self.loop_lag = None
        self.connections: dict[str, Connection] = {}
        self._client_ids: dict[str, Connection] = {}
        self._connection_numbers = itertools.count(1)
        # Connection (and so message) ids name this incarnation of the broker: a broker restarted
        # on its journal must not hand a new message the id of a recovered one, and a peer's
        # network audit (engine/audit.py) must not take a new message for one it saw before.
        self._incarnation = secrets.token_hex(4)
        self.network_audit = NetworkAudit()
        self._users = {u.name: u for u in self.config.security.users}
        # One map per destination kind, keyed by the plain pattern: a "queue://" prefix glued to
        # the first path element would stop a leading wildcard (queue=">") from matching.
        self._acl = {
            QUEUE: WildcardMap((e.queue, e) for e in self.config.security.authorization if e.queue is not None),
            TOPIC: WildcardMap((e.topic, e) for e in self.config.security.authorization if e.topic is not None),
        }
        self.started_at = clock()
        # Called as listener(event, consumer) with event "add" or "remove" whenever a consumer
        # attaches to or detaches from a destination: networks of brokers (reference_broker/cluster)
        # turn these into consumer advisories so a peer's bridge sees demand.
        self.consumer_listeners: list[Callable[[str, Consumer], None]] = []
        # Called with the canonical name of each queue the broker creates (networks: a virtual
        # destination's target queue is demand from its creation, use_virtual_dest_subs_on_creation).
        self.queue_listeners: list[Callable[[str], None]] = []
        # Virtual topics and composite destinations (engine/virtual.py).
        self.virtual = VirtualDestinations(self.config)
        # Temporary queues/topics of connections (engine/temporary.py).
        self.temporary = TemporaryDestinations(self)
        # Artemis-style clustering (reference_broker/clustering): called as router(queue, message)
        # for each message routed to a queue; True means the cluster took it (forwarded it to
        # another node, or holds it for a grouping decision), so it is not enqueued here.
        self.queue_router: Callable[[Queue, Message], bool] | None = None
        # Set by a queue_router that decides later (a clustered grouping decision): an asyncio
        # future, done once the message is routed, failed with RoutingFailed when it cannot be.
        # Connection.send hands it to the sending connection (Connection.deferred_send).
        self.deferred_route = None

    @property
    def subscriptions(self) -> list[TopicSubscription | DurableSubscription | SharedSubscription]:
        """Every topic subscription, oldest first."""
        return list(self._routing)

    def consumer_event(self, event: str, consumer: Consumer) -> None:
        for listener in list(self.consumer_listeners):
            listener(event, consumer)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------ lifecycle

    def recover(self) -> int:
        """Load what the store kept (after a restart or crash); returns messages recovered."""
        state = self.store.recover()
        for key, meta in state.durable_subscriptions.items():
            selector = parse_selector(meta["selector"]) if meta.get("selector") else None
            durable = self._create_durable(
                key, meta["client_id"], meta["name"], parse_destination(meta["destination"], TOPIC),
                selector, bool(meta.get("no_local")), persist=False, user=meta.get("user"),
            )
        count = 0
        for key, messages in state.messages.items():
            if key.startswith(RETAINED_KEY_PREFIX):
                for message in messages:
                    self._keep_retained(message)
                continue
            if key in self.durable:
                queue = self.durable[key].queue
            else:
                queue = self.queue(parse_destination(key, QUEUE))
            for message in messages:
                redeliveries = state.redelivery_counts.get((key, message.message_id), 0)
                queue.enqueue(message, delivery_count=redeliveries, persist=False)
                count += 1
        if count:
            log.info("recovered %d persistent messages from the store", count)
        return count

    def flush(self) -> None:
        self.store.flush()

    def close(self) -> None:
        for connection in list(self.connections.values()):
            connection.close()
        self.store.flush()
        self.store.close()

    def tick(self) -> int:
        """Periodic housekeeping: expire messages nobody is dispatching."""
        now = self.now_ms()
        expired = sum(q.expire_sweep(now) for q in list(self.queues.values()))
        for subscription in self.subscriptions:
            if isinstance(subscription, (DurableSubscription, SharedSubscription)):
                expired += subscription.queue.expire_sweep(now)
            else:
                expired += subscription.expire_sweep(now)
        return expired

    # ------------------------------------------------------------ security

    def authenticate(self, login: str | None, passcode: str | None) -> tuple[str | None, list[str]]:
        security = self.config.security
        if login and not self._users:
            # No users configured means no authentication at all (like an ActiveMQ broker
            # without an authentication plugin): any login is accepted, as anonymous.
            return login, list(security.anonymous_groups)
        if login:
            user = self._users.get(login)
            if user is None or not hmac.compare_digest(user.password.encode(), (passcode or "").encode()):
                raise AuthenticationFailed(f"user {login!r}: wrong user name or password")
            return user.name, list(user.groups)
        if not security.anonymous_allowed:
            raise AuthenticationFailed("anonymous login is not allowed: give a login and passcode")
        return None, list(security.anonymous_groups)

    def groups_of(self, user: str | None) -> list[str]:
        """The groups a (previously authenticated) user has by the configuration."""
        known = self._users.get(user) if user is not None else None
        return list(known.groups) if known is not None else list(self.config.security.anonymous_groups)

    @property
    def authorization_enabled(self) -> bool:
        return bool(self.config.security.authorization)

    def permits(self, groups: list[str], dest: DestinationName, action: str) -> bool:
        if not self.config.security.authorization:
            return True
        entry = self._acl[dest.kind].lookup(dest.name)
        allowed = getattr(entry, action) if entry is not None else []
        return "*" in allowed or not set(groups).isdisjoint(allowed)

    def _authorize(self, groups: list[str], dest: DestinationName, action: str) -> None:
        if not self.permits(groups, dest, action):
            verb = "read from" if action == "read" else "write to"
            raise NotAuthorized(f"not authorized to {verb} {dest.canonical}")

    def read_access(self, groups: list[str], user: str | None = None) -> ReadAccess | None:
        """What a reader may receive, message by message (engine/access.py); None when no
        authorization is configured."""
        return ReadAccess(self.permits, groups, user) if self.authorization_enabled else None

    # ------------------------------------------------------------ destinations

    def queue(self, dest: DestinationName) -> Queue:
        key = dest.canonical
        queue = self.queues.get(key)
        if queue is None:
            policy = self.policies.policy_for(dest)
            usage = MemoryUsage(key, policy.memory_limit, self.system_usage)
            queue = Queue(self, DestinationName(QUEUE, dest.name), key, policy, self.policies.groups_for(dest), usage)
            if len(self.queues) >= self.idle_queue_limit:
                self._forget_idle_queues()
            self.queues[key] = queue
            for listener in list(self.queue_listeners):
                listener(key)
        else:
            self.queues.move_to_end(key)  # the order is the order of last use
        return queue

    def _forget_idle_queues(self) -> None:
        """Forget the least recently used queues that hold nothing and have nobody on them: no
        message, no consumer, no producer waiting for space. Never a temporary queue (its
        connection owns it) nor a virtual destination's target queue (a virtual topic copies
        only to queues that exist, and keeps messages there for consumers that are away). Like
        _forget_idle_topics, looks at a bounded number of the oldest queues per call."""
        excess = len(self.queues) - self.idle_queue_limit + 1
        idle: list[str] = []
        for looked, (key, queue) in enumerate(self.queues.items()):
            if len(idle) >= excess or looked >= excess + _IDLE_SCAN:
                break
            usage = queue.usage
            if (queue.consumers or queue.pending_count or usage.used or usage._waiters
                    or self.temporary.is_temporary(key) or self.virtual.sources_for(queue.name)):
                continue
            idle.append(key)
        for key in idle:
            del self.queues[key]

    def topic(self, dest: DestinationName) -> Topic:
        key = dest.canonical
        topics = self.topics
        topic = topics.pop(key, None)
        if topic is None:
            policy = self.policies.policy_for(dest)
            topic = Topic(DestinationName(TOPIC, dest.name), policy, MemoryUsage(key, policy.memory_limit, self.system_usage))
            if len(topics) >= self.idle_topic_limit:
                self._forget_idle_topics()
        topics[key] = topic  # the dict's order is the order of last use
        return topic

    def no_room_for(self, size: int) -> bool:
        """Whether `size` more bytes would take the broker past its memory limit (for what no
        consumer drains: retained messages, transaction buffers, which are refused, not paused)."""
        usage = self.system_usage
        return usage.limit is not None and usage.used + size > usage.limit
    def _forget_idle_topics(self) -> None:
        """Forget the least recently used topics that hold nothing: no message of theirs waits in
        a subscription (their memory usage is zero) and no producer waits for their space. Only
        their counters go; a later publish starts a fresh topic. ActiveMQ's gcInactiveDestinations
        and Artemis' auto-delete-addresses drop unused destinations in the same spirit. Looks at
        a bounded number of the oldest topics per call, so a broker full of busy topics does not
        pay a full scan for every new name."""
        excess = len(self.topics) - self.idle_topic_limit + 1
        idle: list[str] = []
        for looked, (key, topic) in enumerate(self.topics.items()):
            if len(idle) >= excess or looked >= excess + _IDLE_SCAN:
                break
            usage = topic.usage
            if usage.used == 0 and not usage._waiters:
                idle.append(key)
        for key in idle:
            del self.topics[key]

    def usage_for(self, dest: DestinationName) -> MemoryUsage:
        return self.queue(dest).usage if dest.is_queue else self.topic(dest).usage

    def _routes(self, topic_name: str) -> list:
        return self._routing.match(topic_name)

    def route(self, dest: DestinationName, message: Message) -> None:
        """Deliver an accepted message to its destination."""
        self.route_to(self.queue(dest) if dest.is_queue else self.topic(dest), message)

    def route_to(self, target: Queue | Topic, message: Message) -> None:
        key = audit_key(message.properties) if message.properties else None
        if key is not None and self.network_audit.is_duplicate(target.name.canonical, key):
            # A bridge resent what it had already delivered (its receipt was lost with the link):
            # accepted, so the bridge can drop its copy, but not enqueued twice (engine/audit.py).
            log.info("dropped a duplicate from the network on %s: %s", target.name.canonical, key)
            return
        if not self.virtual.route_copies(self, target.name, message):
            return  # a forward-only composite destination: only its forward_to list gets it
        if isinstance(target, Queue):
            router = self.queue_router
            if router is not None and router(target, message):
                return
            target.enqueue(message)
            return
        topic = target
        dest = topic.name
        topic.enqueued += 1
        if message.properties and message.properties.get(RETAIN_PROPERTY) is True:
            self._retain(message)
        # A topic message is only as durable as its subscriptions: durable ones store it.
        for subscription in self._routes(dest.name):
            subscription.add(message, topic)

    def _retain(self, message: Message) -> None:
        """Make `message` its topic's retained message; an empty body clears it (MQTT 3.3.1.3,
        and ActiveMQ's retained-message recovery policy)."""
        topic_name = message.destination
        key = RETAINED_KEY_PREFIX + topic_name
        if not self.retained_fits(message):
            # Clients are refused before this (Connection.send); this is for what the broker
            # routes itself, such as an MQTT will: delivered, but not kept past the limit.
            log.warning("retained message on %s not kept: the memory limit (%d bytes) is reached",
                        topic_name, self.system_usage.limit)
            return
        previous = self.retained.pop(topic_name, None)
        if previous is not None:
            self.retained_usage.decrease(previous.size)
            if previous.persistent:
                self.store.remove(key, previous.message_id)
        if message.body:
            self._keep_retained(message)
            if message.persistent:
                self.store.add(key, message)

    def retained_fits(self, message: Message) -> bool:
        """Whether `message` can become its topic's retained message within the memory limit
        (the retained message it replaces is released)."""
        if not message.body:
            return True  # clears
        previous = self.retained.get(message.destination)
        return not self.no_room_for(message.size - (previous.size if previous is not None else 0))

    def _keep_retained(self, message: Message) -> None:
        previous = self.retained.get(message.destination)
        if previous is not None:
            self.retained_usage.decrease(previous.size)
        self.retained[message.destination] = message
        self.retained_usage.increase(message.size)

    def retained_for(self, pattern: DestinationName) -> list[Message]:
        """Retained messages of every topic `pattern` (wildcards allowed) matches."""
        return [self.retained[name] for name in self.retained_names_for(pattern)]

    def retained_names_for(self, pattern: DestinationName) -> list[str]:
        """Canonical names of the topics with a retained message that `pattern` matches."""
        return [name for name in self.retained if wildcard_matches(pattern.name, name.partition("://")[2])]

    def dead_letter(self, source: Queue, ref: MessageRef, cause: str) -> None:
        original = ref.message
        dlq_name = source.policy.dead_letter_queue
        properties = dict(original.properties)
        properties["originalDestination"] = original.destination
        properties["dlqDeliveryFailureCause"] = cause
        copy = Message(
            message_id=original.message_id,
            destination=f"queue://{dlq_name}",
            body=original.body,
            properties=properties,
            persistent=original.persistent,
            priority=original.priority,
            timestamp=original.timestamp,
            expiration=0,  # a dead letter must not expire away
            correlation_id=original.correlation_id,
            reply_to=original.reply_to,
            type=original.type,
            group_id=original.group_id,
            group_seq=original.group_seq,
            content_type=original.content_type,
            producer_id=original.producer_id,
        )
        log.info("dead-lettering %s from %s to %s: %s", original.message_id, source.name, dlq_name, cause)
        self.queue(DestinationName(QUEUE, dlq_name)).enqueue(copy)

    def _create_durable(self, key, client_id, name, pattern, selector, no_local, persist=True,
                        user: str | None = None) -> DurableSubscription:
        dest = DestinationName(QUEUE, key)
        policy = self.policies.policy_for(pattern)
        usage = MemoryUsage(key, policy.memory_limit, self.system_usage)
        queue = Queue(self, dest, key, policy, self.policies.groups_for(pattern), usage)
        durable = DurableSubscription(key, client_id, name, pattern, selector, no_local, queue)
        self.own_durable(durable, user)
        self.durable[key] = durable
        self._routing.add(pattern.name, durable)
        if persist:
            self.store.add_durable_subscription(key, durable.metadata())
        return durable

    def own_durable(self, durable: DurableSubscription, user: str | None) -> None:
        """Make ``user`` the reader of ``durable``: what it collects while its subscriber is away is
        what that user may read, by the groups the configuration gives it (also after a restart,
        from the stored metadata)."""
        durable.user = user
        durable.access = self.read_access(self.groups_of(user), user)

    def _shared(self, group: str, pattern: DestinationName) -> SharedSubscription:
        key = f"shared://{group}/{pattern.name}"
        shared = self.shared.get(key)
        if shared is None:
            policy = self.policies.policy_for(pattern)
            usage = MemoryUsage(key, policy.memory_limit, self.system_usage)
            queue = Queue(self, DestinationName(QUEUE, key), key, policy, self.policies.groups_for(pattern),
                          usage, stored=False)
            shared = SharedSubscription(key, group, pattern, queue)
            self.shared[key] = shared
            self._routing.add(pattern.name, shared)
        return shared

    def _drop_shared_if_unused(self, shared: SharedSubscription) -> None:
        if shared.queue.consumers or self.shared.get(shared.key) is not shared:
            return
        del self.shared[shared.key]
        self._routing.remove(shared)
        # Whatever it still held had no consumer left to go to: count it, don't hide it.
        shared.queue.purge()

    def remove_durable(self, key: str) -> None:
        durable = self.durable.pop(key, None)
        if durable is None:
            raise UnknownSubscription(f"no durable subscription {key!r}")
        if durable.active is not None:
            raise TransactionError(f"durable subscription {durable.name!r} is still active")
        self._routing.remove(durable)
        self.store.remove_durable_subscription(key)

    # ------------------------------------------------------------ connections

    def connect(
        self, *, login: str | None = None, passcode: str | None = None, client_id: str | None = None,
        internal: bool = False,
    ) -> "Connection":
        """A client connection, after checking ``login`` / ``passcode``. ``internal``: the broker's
        own connection (advisories, a bridge's local end; in-VM in ActiveMQ), which does not log
        in, so a broker that refuses anonymous clients can still network (NOB-AUTH-1).
        The connection is a network bridge (`Connection.network`, engine/network_principal.py) when
        internal, when its user is in ``security.network_group``, or when it is a bridge of a broker
        of this process (which otherwise logs in as an anonymous client would)."""
        security = self.config.security
        if internal:
            user, groups, network = None, list(security.anonymous_groups), True
        elif is_in_process_bridge(login, passcode):
            user, groups = self.authenticate(None, None)
            network = True
        else:
            user, groups = self.authenticate(login, passcode)
            network = security.network_group in groups and user in self._users
        if client_id is not None and client_id in self._client_ids:
            raise ClientIdInUse(f"client id {client_id!r} is already connected")
        connection = Connection(self, connection_id(self.config.name, self._incarnation, next(self._connection_numbers)),
                                user, groups, client_id)
        connection.internal = internal
        connection.network = network
        if internal or network:
            # the broker's own connections and trusted peer bridges (engine/network_principal.py)
            # are not clients: a bridge carries demand its peer's own clients are limited for
            connection.limits = None
            connection.unacked_limit = float("inf")
        self.connections[connection.connection_id] = connection
        if client_id is not None:
            self._client_ids[client_id] = connection
        return connection

    def _forget(self, connection: "Connection") -> None:
        self.connections.pop(connection.connection_id, None)
        if connection.client_id is not None and self._client_ids.get(connection.client_id) is connection:
            del self._client_ids[connection.client_id]

    # ------------------------------------------------------------ statistics

    def gauges(self) -> dict:
        """What the HTTP /health shows besides "ok": cheap to compute, whatever the broker holds."""
        gauges: dict = {"connections": len(self.connections)}
        if self.loop_lag is not None:
            gauges["loop"] = self.loop_lag.snapshot()
        return gauges

    def stats(self) -> dict:
        return {
            "broker": self.config.name,
            "uptime_s": round(self.clock() - self.started_at, 3),
            "connections": len(self.connections),
            "memory": {"used": self.system_usage.used, "limit": self.system_usage.limit,
                       "high_water": self.system_usage.high_water,
                       "retained": self.retained_usage.used, "transactions": self.transaction_usage.used},
            "store": self.store.stats(),
            "queues": [q.stats() for q in self.queues.values()],
            "topics": [
                {
                    "name": t.name.canonical,
                    "kind": "topic",
                    "enqueued": t.enqueued,
                    "dispatched": t.dispatched,
                    "memory_usage": t.usage.used,
                    "memory_limit": t.usage.limit,
                }
                for t in self.topics.values()
            ],
            "subscriptions": [s.stats() for s in self.subscriptions],
        }


class Transaction:
    """A local transaction: sends and acknowledgements applied together at commit."""

    def __init__(self, tx_id: str) -> None:
        self.tx_id = tx_id
        self.sends: list[tuple[DestinationName, Message]] = []
        self.send_bytes = 0  # charged to the broker's transaction_usage until COMMIT / ABORT
        # (consumer, refs, "ack" | "nack") in the order the client issued them
        self.outcomes: list[tuple[Consumer, list[MessageRef], str]] = []


class Connection:
    """One client connection's view of the broker (a STOMP/MQTT/AMQP connection)."""

    def __init__(self, broker: Broker, connection_id: str, user: str | None, groups: list[str], client_id: str | None) -> None:
        self.broker = broker
        self.connection_id = connection_id
        self.user = user
        self.groups = groups
        self.client_id = client_id
        self.consumers: dict[str, Consumer] = {}
        self.transactions: dict[str, Transaction] = {}
        self._consumer_numbers = itertools.count(1)
        self._message_numbers = itertools.count(1)
        self.closed = False
        self.temporary: list[DestinationName] = []  # temporary destinations it created
        # The broker's own connection (Broker.connect(internal=True)): it publishes advisories
        # on topics named after wildcard subscriptions (ActiveMQ.Advisory.Consumer.Topic.A.>).
        self.internal = False
        # Trusted as a peer broker's network bridge (Broker.connect; engine/network_principal.py).
        self.network = False
        # The last send's routing when the broker decides it later (Broker.deferred_route): the
        # protocol adapter takes it (take_deferred_send) to confirm or fail that send when done.
        self.deferred_send = None
        self.limits = broker.config.connection_limits  # None: the broker's own connection
        # Retained messages new subscriptions still wait for, by consumer id (engine/retained.py).
        self.replays: dict[str, RetainedReplay] = {}
        # Set by a protocol adapter that must answer the SUBSCRIBE before retained messages go out.
        self.hold_retained = False
        # Deliveries in flight or acknowledged in an open transaction, across the consumers
        # (their in_flight and tx_held), kept as a count: checked on every dispatch.
        self.unacked = 0
        self.unacked_limit = self.limits.max_unacknowledged  # read on every dispatch (Consumer.has_credit)

    # ------------------------------------------------------------ producing

    def new_message_id(self) -> str:
        return f"ID:{self.connection_id}-{next(self._message_numbers)}"

    def check_send(self, dest: DestinationName) -> None:
        _refuse_wildcard_send(dest)
        self.broker._authorize(self.groups, dest, "write")

    def send(self, dest: DestinationName, message: Message, transaction: str | None = None) -> bool:
        """Accept a message. Returns False when the destination is now over its memory limit
        and the caller must pause this producer until `wait_for_space` calls back.
        Raises ResourceLimitError when the policy refuses sends while full."""
        broker = self.broker
        if not self.internal:
            _refuse_wildcard_send(dest)
        if broker.authorization_enabled:
            broker._authorize(self.groups, dest, "write")
        message.producer_id = self.connection_id
        # The engine finds a message's destination (and its memory accounting) by this name:
        # make it the canonical one whatever the caller put there.
        message.destination = dest.canonical
        if not message.timestamp:
            message.timestamp = broker.now_ms()
        if transaction is not None:
            self._buffer(self._transaction(transaction), dest, message)
            return True
        if (message.properties and message.properties.get(RETAIN_PROPERTY) is True
                and not broker.retained_fits(message)):
            # A retained message is kept until replaced: nothing drains it, so waiting for room
            # is no answer, and it must not fill the broker so that producers wait for ever
            # (issue 20, item 5).
            raise ResourceLimitError(
                f"the broker's memory limit ({broker.system_usage.limit} bytes) is reached: "
                f"{broker.retained_usage.used} bytes of it are retained messages; no room for "
                f"another retained message on {dest.canonical}")
        target = broker.queue(dest) if dest.is_queue else broker.topic(dest)
        usage = target.usage
        if usage.full:
            policy = broker.policies.policy_for(dest)
            if policy.send_fail_if_no_space:
                raise ResourceLimitError(
                    f"{dest.canonical} is full ({usage.used} bytes pending, limit "
                    f"{usage.limit or broker.system_usage.limit}) and its policy refuses sends "
                    "while full (send_fail_if_no_space)"
                )
        broker.route_to(target, message)
        if broker.deferred_route is not None:
            # the protocol adapter confirms (or fails) this send once it is routed
            self.deferred_send, broker.deferred_route = broker.deferred_route, None
        if usage.full:
            policy = broker.policies.policy_for(dest)
            # Pause only when the policy blocks producers; a policy that refuses sends while
            # full answers the *next* send with ResourceLimitError instead.
            return not policy.producer_flow_control or policy.send_fail_if_no_space
        return True

    def take_deferred_send(self):
        """The future of the last send's routing if the broker decides it later (else None)."""
        deferred, self.deferred_send = self.deferred_send, None
        return deferred

    def _buffer(self, tx: "Transaction", dest: DestinationName, message: Message) -> None:
        """Keep a transacted send until COMMIT, charged to the memory limit (issue 20, item 4)."""
        broker = self.broker
        size = message.size
        limits = self.limits
        if limits is not None:
            if len(tx.sends) >= limits.max_transaction_messages:
                raise ResourceLimitError(
                    f"transaction {tx.tx_id!r} already holds {len(tx.sends)} sends "
                    f"(connection_limits.max_transaction_messages)")
            if tx.send_bytes + size > limits.max_transaction_bytes:
                raise ResourceLimitError(
                    f"transaction {tx.tx_id!r} would hold {tx.send_bytes + size} bytes of sends, over "
                    f"{limits.max_transaction_bytes} (connection_limits.max_transaction_bytes)")
        if broker.no_room_for(size):
            # Producer flow control would wait for room that only this transaction's own COMMIT
            # or ABORT could make: refuse instead, before the broker is full.
            raise ResourceLimitError(
                f"the broker's memory limit ({broker.system_usage.limit} bytes) is reached "
                f"({broker.transaction_usage.used} bytes in open transactions): send refused in "
                f"transaction {tx.tx_id!r}")
        tx.sends.append((dest, message))
        tx.send_bytes += size
        broker.transaction_usage.increase(size)

    def wait_for_space(self, dest: DestinationName, callback: Callable[[], None]) -> None:
        self.broker.usage_for(dest).wait_for_space(callback)

    # ------------------------------------------------------------ consuming

    def subscribe(
        self,
        consumer_id: str,
        dest: DestinationName,
        *,
        deliver: DeliverCallback,
        ack_mode: AckMode = AckMode.AUTO,
        prefetch: int = 1000,
        selector: str | None = None,
        priority: int = 0,
        exclusive: bool = False,
        no_local: bool = False,
        durable_name: str | None = None,
        maximum_pending_limit: int | None = None,
        shared_name: str | None = None,
        receive_retained: bool = True,
    ) -> Consumer:
        """Attach a consumer. On a topic: a non-durable subscription, a durable one
        (`durable_name`, needs a client id) or a shared one (`shared_name`: consumers of the
        same name and topic compete for its messages). `receive_retained`: whether a new topic
        subscription first gets the retained messages of the topics it matches."""
        broker = self.broker
        if consumer_id in self.consumers:
            raise UnknownSubscription(f"subscription id {consumer_id!r} is already in use on this connection")
        broker._authorize(self.groups, dest, "read")
        try:
            compiled = parse_selector(selector) if selector else None
        except SelectorError as exc:
            raise InvalidSelectorError(str(exc)) from None  # str(exc) starts "invalid selector"
        if dest.is_queue and has_wildcards(dest.name):
            raise UnknownSubscription(f"cannot consume from a wildcard queue {dest.canonical}")
        self._check_consumer_limits(dest)
        retained_names: list[str] = []
        if receive_retained and dest.is_topic and shared_name is None:
            retained_names = broker.retained_names_for(dest)
            self._check_pending_retained(len(retained_names))
        consumer = Consumer(
            self, consumer_id, next(self._consumer_numbers), dest, deliver=deliver, ack_mode=ack_mode,
            prefetch=prefetch, selector=compiled, priority=priority, exclusive=exclusive,
            no_local=no_local, durable_name=durable_name, maximum_pending_limit=maximum_pending_limit,
        )
        consumer.access = broker.read_access(self.groups, self.user)
        if dest.is_queue:
            queue = broker.queue(dest)  # may refuse the destination: register nothing before
            self.consumers[consumer_id] = consumer
            queue.add_consumer(consumer)
        elif shared_name is not None:
            if durable_name is not None:
                raise UnknownSubscription("a subscription is either shared or durable, not both")
            shared = broker._shared(shared_name, dest)
            self.consumers[consumer_id] = consumer
            # Retained messages are not replayed into shared subscriptions (MQTT 5, 4.8.2).
            shared.queue.add_consumer(consumer)
        elif durable_name is not None:
            if self.client_id is None:
                raise UnknownSubscription("a durable subscription needs a client id on the connection")
            key = f"durable://{self.client_id}:{durable_name}"
            durable = broker.durable.get(key)
            if durable is not None and durable.active is not None:
                raise UnknownSubscription(f"durable subscription {durable_name!r} is already active")
            if durable is not None and (durable.pattern != dest or (durable.selector and durable.selector.text) != (compiled and compiled.text)):
                # JMS: changing the topic or selector of a durable subscription replaces it.
                broker.remove_durable(key)
                durable = None
            if durable is None:
                durable = broker._create_durable(key, self.client_id, durable_name, dest, compiled, no_local,
                                                 user=self.user)
            elif durable.user != self.user:
                # Same client id, another user. ActiveMQ authorizes the new reader on every
                # destination the subscription is on (engine/access.py); here, on every topic what it
                # holds came from. Allowed, it collects for the new user from now on.
                access = broker.read_access(self.groups, self.user)
                if access is not None:
                    for topic in sorted({ref.message.destination for ref in durable.queue.pending_refs()}):
                        if not access.allows(parse_destination(topic, TOPIC)):
                            raise NotAuthorized(
                                f"durable subscription {durable_name!r} of client id {self.client_id!r} holds "
                                f"messages from {topic}, which this user may not read")
                broker.own_durable(durable, self.user)
                broker.store.add_durable_subscription(key, durable.metadata())
            durable.active = consumer
            durable.last_connection_id = self.connection_id
            consumer.selector = None  # applied when messages enter the subscription
            consumer.no_local = False
            self.consumers[consumer_id] = consumer
            durable.queue.add_consumer(consumer)
            self._start_replay(consumer, durable, retained_names)
        else:
            policy = broker.policies.policy_for(dest)
            subscription = TopicSubscription(broker, consumer, policy)
            self.consumers[consumer_id] = consumer
            broker._routing.add(dest.name, subscription)
            self._start_replay(consumer, subscription, retained_names)
        if broker.consumer_listeners:
            broker.consumer_event("add", consumer)
        self.pump_retained()
        return consumer

    def _check_consumer_limits(self, dest: DestinationName) -> None:
        limits = self.limits
        if limits is None:
            return
        if len(self.consumers) >= limits.max_consumers:
            raise ResourceLimitError(
                f"this connection already has {len(self.consumers)} consumers "
                f"(connection_limits.max_consumers)")
        if dest.is_topic:
            topics = sum(1 for c in self.consumers.values() if c.destination.is_topic)
            if topics >= limits.max_subscriptions:
                raise ResourceLimitError(
                    f"this connection already has {topics} topic subscriptions "
                    f"(connection_limits.max_subscriptions)")

    def _check_pending_retained(self, more: int, replacing: str | None = None) -> None:
        limits = self.limits
        if limits is None or not more:
            return
        waiting = sum(len(r) for cid, r in self.replays.items() if cid != replacing)
        if waiting + more > limits.max_pending_retained:
            raise ResourceLimitError(
                f"the subscription matches {more} retained messages and {waiting} are still waiting "
                f"for this connection's other subscriptions: over "
                f"{limits.max_pending_retained} (connection_limits.max_pending_retained)")

    def _start_replay(self, consumer: Consumer, target, names: list[str]) -> None:
        if names:
            self.replays[consumer.consumer_id] = RetainedReplay(consumer, target, names)

    def replay_retained(self, consumer_id: str, target) -> None:
        """Send the retained messages matching subscription `consumer_id` again, paced (an MQTT
        re-SUBSCRIBE of the same filter, 3.8.4). Raises ResourceLimitError past
        max_pending_retained."""
        consumer = self.consumer(consumer_id)
        names = self.broker.retained_names_for(consumer.destination)
        self._check_pending_retained(len(names), replacing=consumer_id)
        self.replays.pop(consumer_id, None)
        self._start_replay(consumer, target, names)
        self.pump_retained()

    def pump_retained(self) -> None:
        """Hand waiting retained messages to the consumers that can take them now."""
        if not self.replays or self.hold_retained:
            return
        for consumer_id, replay in list(self.replays.items()):
            if replay.pump(self.broker) and self.replays.get(consumer_id) is replay:
                del self.replays[consumer_id]

    @property
    def pending_retained(self) -> int:
        return sum(len(r) for r in self.replays.values())

    def remove_durable(self, durable_name: str) -> None:
        """Remove this client id's (inactive) durable subscription ``durable_name``."""
        if not self.client_id:
            raise UnknownSubscription("removing a durable subscription needs a client id on the connection")
        self.broker.remove_durable(f"durable://{self.client_id}:{durable_name}")

    def unsubscribe(self, consumer_id: str, *, remove_durable: bool = False) -> None:
        consumer = self.consumers.pop(consumer_id, None)
        if consumer is None:
            raise UnknownSubscription(f"no subscription with id {consumer_id!r}")
        self._detach(consumer)
        if remove_durable and consumer.durable_name is not None:
            self.broker.remove_durable(f"durable://{self.client_id}:{consumer.durable_name}")

    def _detach(self, consumer: Consumer) -> None:
        broker = self.broker
        consumer.closed = True
        self.replays.pop(consumer.consumer_id, None)
        # Its source clears (and redelivers) what it held unacknowledged.
        self.unacked -= len(consumer.in_flight) + len(consumer.tx_held)
        source = consumer.source
        if isinstance(source, TopicSubscription):
            source.remove_consumer(consumer)
            broker._routing.remove(source)
        elif source is not None:
            source.remove_consumer(consumer)
            shared = broker.shared.get(source.store_key)
            if shared is not None:
                broker._drop_shared_if_unused(shared)
            if consumer.durable_name is not None:
                durable = broker.durable.get(source.store_key)
                if durable is not None and durable.active is consumer:
                    durable.active = None
        if broker.consumer_listeners:
            broker.consumer_event("remove", consumer)

    def consumer(self, consumer_id: str) -> Consumer:
        try:
            return self.consumers[consumer_id]
        except KeyError:
            raise UnknownSubscription(f"no subscription with id {consumer_id!r}") from None

    def find_consumer_for(self, message_id: str) -> Consumer:
        """STOMP 1.0 acks name only the message: find the consumer holding it."""
        for consumer in self.consumers.values():
            if message_id in consumer.in_flight:
                return consumer
        raise UnknownMessage(f"message {message_id!r} is not awaiting acknowledgement on this connection")

    def _take(self, consumer: Consumer, message_id: str) -> list[MessageRef]:
        """Remove from in-flight the refs an ack of `message_id` covers (per ack mode)."""
        in_flight = consumer.in_flight
        if message_id not in in_flight:
            raise UnknownMessage(
                f"message {message_id!r} is not awaiting acknowledgement on subscription {consumer.consumer_id!r}"
            )
        if consumer.ack_mode is AckMode.CLIENT:
            taken = []
            for mid in list(in_flight):
                taken.append(in_flight.pop(mid))
                if mid == message_id:
                    break
            self.unacked -= len(taken)
            return taken
        self.unacked -= 1
        return [in_flight.pop(message_id)]

    def ack(self, consumer: Consumer, message_id: str, transaction: str | None = None) -> None:
        self._settle(consumer, message_id, "ack", transaction)

    def nack(self, consumer: Consumer, message_id: str, transaction: str | None = None) -> None:
        self._settle(consumer, message_id, "nack", transaction)

    def _settle(self, consumer: Consumer, message_id: str, outcome: str, transaction: str | None) -> None:
        if consumer.ack_mode is AckMode.AUTO:
            raise UnknownMessage(f"subscription {consumer.consumer_id!r} uses auto acknowledgement")
        tx = self._transaction(transaction) if transaction is not None else None
        was_full = self.unacked >= self.unacked_limit
        refs = self._take(consumer, message_id)
        if tx is not None:
            for ref in refs:
                consumer.tx_held[ref.message.message_id] = ref
            self.unacked += len(refs)  # still unacknowledged until COMMIT
            tx.outcomes.append((consumer, refs, outcome))
            consumer.source.dispatch()  # the prefetch window has room again
        else:
            self._apply(consumer, refs, outcome)
        if was_full:
            # The connection-wide window has room again: the other consumers may be waiting.
            for other in list(self.consumers.values()):
                if other is not consumer and other.source is not None and not other.closed:
                    other.source.dispatch()
        self.pump_retained()

    @staticmethod
    def _apply(consumer: Consumer, refs: list[MessageRef], outcome: str) -> None:
        if outcome == "ack":
            consumer.source.acknowledge(consumer, refs)
        else:
            consumer.source.negative_acknowledge(consumer, refs)

    def set_writable(self, writable: bool) -> None:
        """Transport back-pressure: stop dispatching while the socket's buffer is full."""
        for consumer in list(self.consumers.values()):
            consumer.writable = writable
        if writable:
            for consumer in list(self.consumers.values()):
                if consumer.source is not None and not consumer.closed:
                    consumer.source.dispatch()
            self.pump_retained()

    # ------------------------------------------------------------ transactions

    def _transaction(self, tx_id: str) -> Transaction:
        try:
            return self.transactions[tx_id]
        except KeyError:
            raise TransactionError(f"transaction {tx_id!r} was not begun on this connection") from None

    def begin(self, tx_id: str) -> None:
        if tx_id in self.transactions:
            raise TransactionError(f"transaction {tx_id!r} is already active")
        limits = self.limits
        if limits is not None and len(self.transactions) >= limits.max_transactions:
            raise ResourceLimitError(
                f"{len(self.transactions)} transactions are already open on this connection "
                f"(connection_limits.max_transactions)")
        self.transactions[tx_id] = Transaction(tx_id)

    def _release_sends(self, tx: "Transaction") -> None:
        if tx.send_bytes:
            self.broker.transaction_usage.decrease(tx.send_bytes)
            tx.send_bytes = 0

    def commit(self, tx_id: str) -> None:
        tx = self.transactions.pop(tx_id, None)
        if tx is None:
            raise TransactionError(f"transaction {tx_id!r} was not begun on this connection")
        # The sends now become pending messages, charged to their destinations instead.
        self._release_sends(tx)
        for dest, message in tx.sends:
            self.broker.route(dest, message)
        for consumer, refs, outcome in tx.outcomes:
            for ref in refs:
                if consumer.tx_held.pop(ref.message.message_id, None) is not None:
                    self.unacked -= 1
            if not consumer.closed:
                self._apply(consumer, refs, outcome)

    def abort(self, tx_id: str) -> None:
        tx = self.transactions.pop(tx_id, None)
        if tx is None:
            raise TransactionError(f"transaction {tx_id!r} was not begun on this connection")
        self._release_sends(tx)
        # Sends are discarded. Acks are undone: the messages are unacknowledged again on their
        # consumer (the client may ack them again; closing redelivers them).
        restored: dict[Consumer, dict[str, MessageRef]] = {}
        for consumer, refs, _ in tx.outcomes:
            for ref in refs:
                if consumer.tx_held.pop(ref.message.message_id, None) is not None:
                    restored.setdefault(consumer, {})[ref.message.message_id] = ref
        for consumer, refs in restored.items():
            # They were delivered before anything still in flight, so they go back in front:
            # a later cumulative (client mode) ack must cover them again.
            consumer.in_flight = {**refs, **consumer.in_flight}

    # ------------------------------------------------------------ closing

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for tx_id in list(self.transactions):
            self.abort(tx_id)
        # Close every consumer before detaching any: otherwise what the first one had in flight
        # is redispatched to a sibling that is about to close (inflating its delivery count).
        for consumer in self.consumers.values():
            consumer.closed = True
        for consumer in list(self.consumers.values()):
            self._detach(consumer)
        self.consumers.clear()
        self.replays.clear()
        self.broker.temporary.release(self)
        self.broker._forget(self)
