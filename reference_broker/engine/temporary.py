"""Temporary queues and topics, owned by one connection.

ActiveMQ "Stomp" page, "Working with Destinations with Stomp": a ``/temp-queue/NAME`` or
``/temp-topic/NAME`` named by a client is created for its connection, a reply-to naming it reaches
other clients in a form they can send to, and it goes away with the connection. ActiveMQ names
the real destination ``ID:<connection id>:<n>`` (ProtocolConverter.createTempDestination) and shows
it to other clients as ``/remote-temp-queue/ID:...`` (LegacyFrameTranslator.convertDestination);
the engine uses the same physical names, as ordinary queue/topic names, and this registry says which
of them are temporary, who owns them, and which the network announced (bridgeTempDestinations,
ActiveMQ "Networks of Brokers", NetworkConnector properties).

Consuming is for the owning connection only (JMS 2.0 6.2.8, enforced by ActiveMQ's JMS client);
network consumers (a bridge pulling for its broker) are the exception, as in ActiveMQ's TempQueue.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import MutableMapping, Protocol

from .errors import EngineError
from .names import QUEUE, DestinationName
from .queue import Queue
from .topic import Topic

# Names of deleted temporary destinations remembered, to answer a late send clearly (bounded).
_DELETED_MEMORY = 10_000


class TemporaryDestinationError(EngineError):
    """A temporary destination that does not exist (deleted, or unknown on this broker)."""


class TemporaryHost(Protocol):
    """What the registry asks of its broker (`broker.Broker` implements it): create a queue,
    drop destinations. Declared here so this module never imports the broker module."""

    @property
    def queues(self) -> MutableMapping[str, Queue]: ...

    @property
    def topics(self) -> MutableMapping[str, Topic]: ...

    def queue(self, dest: DestinationName) -> Queue: ...


class Owner(Protocol):
    """The connection a temporary destination belongs to (`broker.Connection` implements it)."""

    connection_id: str
    temporary: list[DestinationName]  # the temporary destinations it created


class TemporaryDestinations:
    def __init__(self, broker: TemporaryHost) -> None:
        self.broker = broker
        self._numbers = itertools.count(1)
        self.owners: dict[str, Owner] = {}  # canonical -> owning local connection
        # canonical -> the connections (network peers) that announced it; see `announce`
        self.remote: dict[str, set[str]] = {}
        self.deleted: OrderedDict[str, None] = OrderedDict()

    # ------------------------------------------------------------ local ones

    def create(self, connection: Owner, kind: str = QUEUE) -> DestinationName:
        dest = DestinationName(kind, f"ID:{connection.connection_id}:{next(self._numbers)}")
        self.owners[dest.canonical] = connection
        connection.temporary.append(dest)
        if dest.is_queue:
            self.broker.queue(dest)  # exists (and takes sends) before anyone consumes
        return dest

    def is_temporary(self, canonical: str) -> bool:
        return canonical in self.owners or canonical in self.remote

    def is_local(self, canonical: str) -> bool:
        return canonical in self.owners

    def release(self, connection: Owner) -> None:
        """The connection closed: its temporary destinations go, with their messages."""
        for dest in connection.temporary:
            key = dest.canonical
            self.owners.pop(key, None)
            self.deleted[key] = None
            if len(self.deleted) > _DELETED_MEMORY:
                self.deleted.popitem(last=False)
            queue = self.broker.queues.pop(key, None) if dest.is_queue else None
            if queue is not None:
                queue.purge()
            self.broker.topics.pop(key, None)
        connection.temporary.clear()
        for key in [k for k, holders in self.remote.items() if connection.connection_id in holders]:
            self.withdraw(self.broker_dest(key), connection.connection_id)

    @staticmethod
    def broker_dest(canonical: str) -> DestinationName:
        kind, _, name = canonical.partition("://")
        return DestinationName(kind, name)

    # ------------------------------------------------------------ checks

    def check_send(self, dest: DestinationName) -> None:
        """A client names a temporary destination it did not create (``/remote-temp-queue/``)."""
        key = dest.canonical
        if key in self.owners or key in self.remote:
            return
        why = ("it was deleted when the connection that created it closed" if key in self.deleted else
               "it is not known on this broker: created on another broker of a network that does "
               "not bridge temporary destinations (bridge_temp_destinations), or never created")
        raise TemporaryDestinationError(f"temporary destination {key} does not exist: {why}")

    def check_consume(self, dest: DestinationName, connection: Owner, network: bool) -> None:
        key = dest.canonical
        owner = self.owners.get(key)
        if owner is connection or network:
            return
        if owner is None and key not in self.remote:
            self.check_send(dest)
        raise TemporaryDestinationError(
            f"cannot consume from temporary destination {key}: only the connection that created it may")

    # ------------------------------------------------------------ network

    def announce(self, dest: DestinationName, connection_id: str) -> None:
        """A peer's bridge (connection ``connection_id``) announced a temporary destination of its
        broker (bridge_temp_destinations): local clients may send to it, the bridge carries it back."""
        self.remote.setdefault(dest.canonical, set()).add(connection_id)

    def withdraw(self, dest: DestinationName, connection_id: str) -> None:
        holders = self.remote.get(dest.canonical)
        if holders is not None:
            holders.discard(connection_id)
            if not holders:
                del self.remote[dest.canonical]
                self.broker.queues.pop(dest.canonical, None)
