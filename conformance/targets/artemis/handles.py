"""The handles of a running Artemis broker: `ArtemisProcessHandle` (a local JVM, or a container
cluster's node, read over Jolokia) and `ArtemisContainerHandle` (a single container, no counters),
and what clients need to know of any Artemis broker (`CLIENT_OPTIONS`). Split from target.py so the
launch modes (`artemis.launch_modes`) build them without importing the target."""

from __future__ import annotations

from conformance.scenario import Scenario
from conformance.targets.artemis import container as artemis_container
from conformance.targets.artemis import process as artemis_process
from conformance.targets.artemis.config import DEAD_LETTER_ADDRESS
from conformance.targets.base import DestinationCounters, SubscriptionCounters, TargetUnavailable
from conformance.targets.runtime.evidence import ProcessEvidence
from machinery.docker_env import DockerUnavailable

__all__ = ["ArtemisProcessHandle", "ArtemisContainerHandle", "ArtemisHandle", "CLIENT_OPTIONS", "STOMP_UNSUPPORTED",
           "DESTINATION_PARAMETERS", "QUEUE_ATTRIBUTES", "process_handle"]

#: ActiveMQ's STOMP subscribe extensions that Artemis reads differently or not at all (Artemis
#: user manual, STOMP chapter, "Flow Control": ``activemq.prefetchSize`` is accepted for backwards
#: compatibility but read as ``consumer-window-size``, a window in BYTES, and with ack:auto a
#: consumer whose window is full gets nothing more; the chapter documents no consumer-priority or
#: exclusive-consumer SUBSCRIBE header).
#: The STOMP adapter raises Unsupported for them, so such a check runs over AMQP on Artemis (link
#: credit counts messages; the ``priority`` link property is Artemis's consumer priority).
STOMP_UNSUPPORTED = {
    "prefetch": "Artemis reads activemq.prefetchSize as consumer-window-size, a window in bytes, not a number of "
                "messages; the check runs over AMQP (credit) on Artemis",
    "exclusive": "Artemis has exclusive queues, not ActiveMQ's per-subscription activemq.exclusive header",
    "priority": "Artemis documents no STOMP consumer-priority header (activemq.priority is ActiveMQ's); "
                "consumer priority runs over AMQP on Artemis",
}

#: Address parameters (``name?group-buckets=0``) are documented for the JMS client only (AMG "Group
#: Buckets"). Seen on 2.40: over AMQP the parameter is stripped and ignored (the auto-created queue
#: has GroupBuckets -1), over STOMP it stays part of the address name.
DESTINATION_PARAMETERS = ("Artemis documents destination parameters for its JMS client only (artemis-message-grouping"
                          ".md, Group Buckets); over STOMP and AMQP 2.40 does not apply them")
CLIENT_OPTIONS = {"stomp": {"unsupported_subscribe": STOMP_UNSUPPORTED, "destination_parameters": DESTINATION_PARAMETERS},
                  "amqp": {"destination_parameters": DESTINATION_PARAMETERS}}

#: the queue MBean attributes read for destination counters
QUEUE_ATTRIBUTES = ("MessageCount", "MessagesAdded", "MessagesAcknowledged", "ConsumerCount", "DeliveringCount",
                    "MessagesExpired", "MessagesKilled", "ScheduledCount", "Durable", "Address", "Name")

class ArtemisProcessHandle(ProcessEvidence):
    """A running local Artemis broker for one scenario (implements `BrokerHandle`)."""

    kind = "artemis"
    launch = "process"

    def __init__(self, *, target: str, process, scenario: Scenario, capabilities: frozenset[str]) -> None:
        self.target = target
        self.process = process  # ArtemisProcess: start/stop/kill/running/pid, as ActiveMQHandle.process
        self.broker = process
        self.scenario = scenario
        self.capabilities = capabilities
        self.credentials = tuple(process.ready_login) if process.ready_login else (None, None)
        self.host = process.host
        self.ports = {p: process.ports[p] for p in ("stomp", "mqtt", "amqp") if p in process.ports}
        self.client_options = CLIENT_OPTIONS
        # Scenario(tls=True): clients use the TLS acceptors; the plain ones stay open beside them
        self.tls = process.tls
        self.plain_ports: dict[str, int] = {}
        if self.tls is not None:
            self.plain_ports = self.ports
            self.ports = {p: process.ports[f"{p}_ssl"] for p in ("stomp", "mqtt", "amqp") if f"{p}_ssl" in process.ports}
            self.client_options = self.tls.client_options(CLIENT_OPTIONS)
        self.dead_letter_queue = f"queue://{DEAD_LETTER_ADDRESS}"  # artemis_config's dead-letter-address

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        raise TargetUnavailable(f"{self.target}: Artemis keeps no per-subscriber matched / discarded counters "
                                "(ActiveMQ Classic's TopicSubscriptionView)")

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        """A queue's counters (``queue://X``: the anycast queue X), or a topic's summed over its
        subscription queues (``topic://X``: every multicast queue of address X); None when the
        broker has no such queue."""

        kind, _, name = destination.partition("://")
        if kind not in ("queue", "topic") or not name:
            raise ValueError(f"destination {destination!r} must be queue://NAME or topic://NAME")
        routing = "anycast" if kind == "queue" else "multicast"
        if not self.process.running:
            raise TargetUnavailable(f"Artemis ({self.target}) is not running; its counters cannot be read. "
                                    f"Log tail:\n{self.log_tail(20)}")
        try:
            found = self.process.queue_attributes(name, routing, QUEUE_ATTRIBUTES)
        except artemis_process.JolokiaError as exc:
            if "InstanceNotFound" in str(exc):
                return None
            raise
        if kind == "queue":
            found = {mbean: a for mbean, a in found.items() if a.get("Name") == name}
        if not found:
            return None
        for mbean, attributes in found.items():
            absent = [a for a in QUEUE_ATTRIBUTES[:5] if attributes.get(a) is None]
            if absent:  # a counter that is not there must not read as 0
                raise TargetUnavailable(f"{self.target}: {mbean} has no readable {absent}")
        total = {a: sum(int(v[a]) for v in found.values()) for a in QUEUE_ATTRIBUTES[:5]}
        return DestinationCounters(destination=destination, enqueued=total["MessagesAdded"],
                                   dequeued=total["MessagesAcknowledged"], consumers=total["ConsumerCount"],
                                   memory_usage=0, memory_limit=-1,
                                   raw={**total, "queues": found})

    def reset_all_groups(self, destination: str) -> None:
        """The anycast queue's resetAllGroups management operation (``queue://X``: queue X of address
        X), invoked over Jolokia."""
        kind, _, name = destination.partition("://")
        if kind != "queue" or not name:
            raise ValueError(f"resetAllGroups is a queue's operation; {destination!r} is not queue://NAME")
        self.process.jolokia({"type": "exec", "mbean": self.process.queue_mbean(name, name, "anycast"),
                              "operation": "resetAllGroups()"})

    def kill(self) -> None:
        """SIGKILL the broker JVM's process group (a crash); `restart` brings it back (same
        instance, journal and ports)."""
        self.process.kill()

    def restart(self, timeout: float = 120) -> None:
        if self.process.running:
            self.process.stop()
        try:
            self.process.start(timeout=timeout)
        except (artemis_process.ArtemisNotInstalled, artemis_process.ArtemisStartError) as e:
            raise TargetUnavailable(f"Artemis ({self.target}) did not come back: {e}") from e

    def stop(self) -> None:
        self.process.stop()

    def __repr__(self) -> str:
        return f"<ArtemisProcessHandle {self.target} {self.process!r}>"


class ArtemisContainerHandle:
    """A running Artemis container for one scenario (implements `BrokerHandle`; no counters:
    the container launcher reads no Artemis management data)."""

    kind = "artemis"
    launch = "container"

    def __init__(self, *, target: str, broker, scenario: Scenario, capabilities: frozenset[str]) -> None:
        self.target = target
        self.broker = broker  # conformance.targets.artemis.container.ArtemisContainer
        self.process = broker  # same name as ActiveMQHandle's, for the chaos harness (kill/pause/resume)
        self.scenario = scenario
        self.capabilities = capabilities
        self.credentials = tuple(broker.ready_login) if broker.ready_login else (None, None)
        self.host = broker.host
        self.ports = {p: broker.ports[p] for p in ("stomp", "mqtt", "amqp") if p in broker.ports}
        self.plain_ports: dict[str, int] = {}  # the container has no TLS acceptors
        self.client_options = CLIENT_OPTIONS
        # the image's broker.xml comes from the same `artemis create`, whose dead-letter address is DLQ
        self.dead_letter_queue = f"queue://{DEAD_LETTER_ADDRESS}"

    def config_text(self) -> str:
        return self.broker.config_text()

    def log_tail(self, lines: int = 80) -> str:
        return self.broker.log_tail(lines)

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        raise TargetUnavailable(f"{self.target}: the Artemis container launcher reads no subscription counters")

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        raise TargetUnavailable(f"{self.target}: the Artemis container launcher reads no destination counters")

    def kill(self) -> None:
        self.broker.kill()

    def restart(self, timeout: float = 120) -> None:
        """Start the killed container again (same instance, journal and host ports)."""

        try:
            self.broker.start(timeout=timeout)
        except (artemis_container.ArtemisStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"Artemis ({self.target}) did not come back: {e}") from e

    def stop(self) -> None:
        self.broker.stop()


#: kept for callers of the old name (the container handle was the only Artemis handle)
ArtemisHandle = ArtemisContainerHandle


def process_handle(target: str, process, scenario: Scenario, offered: frozenset[str]) -> ArtemisProcessHandle:
    """The handle of a started JVM or cluster node (Jolokia on its process), with ``offered`` less
    the protocols it opened no acceptor for."""
    capabilities = frozenset(c for c in offered
                             if not (c.startswith("protocol.") and c.split(".", 1)[1] not in process.ports))
    return ArtemisProcessHandle(target=target, process=process, scenario=scenario, capabilities=capabilities)
