"""Read access checked per destination a message comes from, not only on the pattern a client
subscribed with (issue 20, item 2).

A wildcard subscription is authorized on its pattern when it is made (`Broker._authorize`); that
alone would let ``PUBLIC.>`` (readable) deliver what is published to ``PUBLIC.SECRET.plans`` (not
readable). ActiveMQ Classic checks the read ACL of every concrete destination a subscription is
added to, not the consumer's own (possibly wildcard) destination (apache/activemq,
activemq-broker/src/main/java/org/apache/activemq/security/AuthorizationDestinationFilter.java,
addSubscription; its maintainers describe the same in apache/activemq pull request 1198, AMQ-9472:
a consumer gets one subscription per matching destination, each authorized on its own). Artemis
checks a subscription against the security-settings matching its own address, wildcard included
(Artemis "Security", role based security for addresses), and documents no per-source check; the
reference broker follows ActiveMQ Classic.

The engine's topics are not objects a subscription is added to, so the rule is applied where a
topic message enters a subscription: `ReadAccess.allows(topic)` for its reader, on every path that
delivers (routing, retained messages replayed on subscribe, durable and shared subscriptions;
engine/topic.py). A queue consumer reads the queue it was authorized on: wildcard queues cannot be
consumed or browsed, and what a virtual or composite destination copies into a queue sits there
under the queue's own name, so the queue's read ACL is the one that applies.
"""

from __future__ import annotations

from typing import Callable

from .names import DestinationName

Permits = Callable[[list[str], DestinationName, str], bool]


class ReadAccess:
    """What one reader (a connection's groups) may receive. None in its place means no
    authorization is configured: everything is readable."""

    __slots__ = ("_permits", "groups", "user")

    def __init__(self, permits: Permits, groups: list[str], user: str | None = None) -> None:
        self._permits = permits
        self.groups = list(groups)
        self.user = user  # kept with durable subscriptions, so a restart knows whose they are

    def allows(self, dest: DestinationName) -> bool:
        return self._permits(self.groups, dest, "read")


def allows(access: ReadAccess | None, dest: DestinationName) -> bool:
    return access is None or access.allows(dest)
