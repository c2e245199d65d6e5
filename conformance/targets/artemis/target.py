"""Apache Artemis as a conformance target: ``artemis:process`` (a local JVM from the distribution
in ``.tools/artemis``, `artemis_process`), ``artemis:container`` (the image, `artemis_container`),
and plain ``artemis``: the process when the distribution is installed, else the container (as
``activemq`` picks its launch mode). The matrix records which ran.

Capabilities of the process target, each backed by the Artemis 2.40 documentation (chapter
named) and by what the launcher configures:

* ``protocol.stomp`` / ``protocol.mqtt`` / ``protocol.amqp``: one acceptor each (artemis_config).
* ``scenario.policies``: group and redelivery address settings; Classic-only fields are refused.
* ``counters.destination``: queue MBeans over Jolokia ("Management"): MessagesAdded ->
  enqueued, MessagesAcknowledged -> dequeued, ConsumerCount -> consumers, MessageCount and
  DeliveringCount in ``raw``.
* ``groups``, ``groups.close``, ``groups.reassign_on_close``, ``groups.first_key``,
  ``groups.rebalance``, ``groups.buckets``: "Message Grouping".
* ``message_priority`` ("Message Priority": on by default, 0-9), ``nack`` / ``dead_letter``
  ("Message Redelivery and Undelivered Messages": max-delivery-attempts, dead-letter-address),
  ``expiry`` ("Message Expiry": expiry-address), ``transactions`` (local transactions on every
  protocol), ``selectors`` ("Filter Expressions"; STOMP ``selector``, AMQP jms-selector),
  ``durable_subscriptions`` (STOMP durable subscriptions, AMQP durable terminus),
  ``consumer_priority`` ("Consumer Priority", over AMQP), ``process.kill``.
* ``topology.shared-store``: a primary and backups on one data directory ("High Availability and
  Failover", "Shared Store"; artemis/shared_store.py), local JVMs only.
* ``topology.cluster``: 2 to 4 local JVMs joined by cluster connections ("Clusters";
  artemis/cluster.py); on ``artemis:container`` 2 to 4 containers on a network of their own
  (artemis/container_cluster.py: static connectors only, no links through the fault proxy: the
  container partition nemesis cuts the real links).

Not offered: ``counters.subscription`` (Classic's per-subscriber matched / discarded counters),
``slow_consumer.*`` and ``memory.limits`` (Classic policies, refused by artemis_config),
``topology.network`` (Classic network connectors; Artemis clusters are another document),
``exclusive_consumers`` (Classic's per-consumer ``activemq.exclusive``; Artemis's exclusive queues
are a queue setting with other semantics).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from conformance.scenario import Scenario
from conformance.targets.artemis import container as artemis_container
from conformance.targets.artemis import process as artemis_process
from conformance.targets.artemis.config import DEAD_LETTER_ADDRESS, UnsupportedArtemisPolicy
from conformance.targets.artemis.dist import ARTEMIS_IMAGE, installed
from conformance.targets.base import DestinationCounters, SubscriptionCounters, TargetUnavailable
from machinery.docker_env import DockerUnavailable, image_available
from machinery import postgres
from conformance.targets.artemis.node import ArtemisNode
from conformance.targets.runtime.node import launch_single
from conformance.topology import check_supported
from conformance.targets.runtime.launch_choice import choose_launch
from conformance.targets.runtime.evidence import ProcessEvidence

__all__ = ["ArtemisTarget", "ArtemisProcessHandle", "ArtemisContainerHandle", "LAUNCH_MODES"]

LAUNCH_MODES = ("auto", "process", "container")

#: what the container target offers: the image's broker.xml (created by `artemis create`, with its
#: DLQ and ExpiryQueue address settings) plus the scenario's address settings (artemis_config.py:
#: groups, max-delivery-attempts); the broker behaviour below needs nothing from the launcher
CONTAINER_CAPABILITIES = frozenset({
    "protocol.stomp", "protocol.mqtt", "protocol.amqp", "scenario.policies", "groups", "groups.close",
    "groups.reassign_on_close", "groups.first_key", "groups.rebalance", "groups.buckets", "process.kill",
    "message_priority", "nack", "dead_letter", "expiry", "transactions", "selectors", "durable_subscriptions",
    "consumer_priority"})

#: a container cluster's node (artemis/container_cluster.py) reads its queue counters over the
#: Jolokia of its published console port, as the local JVM does
CONTAINER_CLUSTER_CAPABILITIES = CONTAINER_CAPABILITIES | frozenset({"counters.destination", "topology.cluster"})

#: the local JVM adds broker-side counters read over Jolokia on loopback, shared-store HA pairs of
#: local JVMs on one data directory (artemis/shared_store.py), and tls: a TLS acceptor per protocol
#: with the run's keystore (Scenario(tls=True); the container has none)
PROCESS_CAPABILITIES = CONTAINER_CAPABILITIES | frozenset({"counters.destination", "topology.shared-store", "tls",
                                                          "topology.cluster", "groups.reset"})

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


def _broker_name(scenario: Scenario) -> str:
    return "brokerconf-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario.name).strip("-") or "scenario")


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


def _container_check(image: str, image_check=None) -> tuple[bool, str]:
    if image_check is not None:
        return image_check(image)

    return image_available(image)


class ArtemisTarget:
    """Apache Artemis, one broker per scenario (implements `Target`).

    ``launch``: "process" (local JVM), "container" (the image), "auto" (process when the
    distribution is installed, else container). ``process_check`` / ``image_check`` are seams for
    tests (defaults: `artemis_dist.installed`, docker_env's image check, which never pulls)."""

    kind = "artemis"
    #: a JDBC shared store needs PostgreSQL (`Target.capability_requirements`); the whole target
    #: needs `requirement`
    capability_requirements: dict[str, str] = {"topology.jdbc-store": "postgresql"}

    def __init__(self, name: str = "artemis", *, launch: str = "auto", image: str | None = None,
                 image_check=None, process_check: Callable[[], tuple[bool, str]] | None = None,
                 start_timeout: float = 120.0, jvm_heap_mb: int = 384) -> None:
        if launch not in LAUNCH_MODES:
            raise ValueError(f"launch must be one of {', '.join(LAUNCH_MODES)}, not {launch!r}")

        self.name = name
        self.launch_requested = launch
        self.image = image or ARTEMIS_IMAGE
        self._image_check = image_check
        self._process_check = process_check
        self.start_timeout = start_timeout
        self.jvm_heap_mb = jvm_heap_mb
        self._resolved: tuple[str, bool, str] | None = None

    def _check_process(self) -> tuple[bool, str]:
        if self._process_check is not None:
            return self._process_check()

        return installed()

    def _check_container(self) -> tuple[bool, str]:
        ok, reason = _container_check(self.image, self._image_check)
        return (True, "") if ok else (False, f"no Artemis container: {reason}")

    def _resolve(self) -> tuple[str, bool, str]:
        if self._resolved is None:
            self._resolved = choose_launch(
                self.launch_requested, self._check_process, self._check_container,
                lambda reason, c_reason: f"no local Artemis ({reason}) and {c_reason}")
        return self._resolved

    @property
    def launch_mode(self) -> str:
        return self._resolve()[0]

    @property
    def requirement(self) -> str:
        """The BROKERCONF_REQUIRE name this target needs (conformance/requirements.py): the local
        distribution, or the Docker engine with the image for ``artemis:container``."""
        return "docker" if self.launch_requested == "container" else "artemis"

    def availability(self) -> tuple[bool, str]:
        _, ok, reason = self._resolve()
        return ok, reason

    def capabilities(self) -> frozenset[str]:
        if self.launch_mode != "process":
            return CONTAINER_CAPABILITIES | {"topology.cluster"}
        return PROCESS_CAPABILITIES | ({"topology.jdbc-store"} if self._jdbc_available()[0] else frozenset())

    def _jdbc_available(self) -> tuple[bool, str]:
        """A JDBC shared-store pair (local JVMs): a private PostgreSQL server and its driver jar."""
        if self.launch_mode == "container":
            return False, "JDBC shared-store pairs are launched as local JVMs (artemis:process)"
        if not postgres.JDBC_DRIVER_JAR.is_file():
            return False, f"the PostgreSQL JDBC driver {postgres.JDBC_DRIVER_JAR} is missing (Debian package libpostgresql-jdbc-java)"
        return postgres.availability()

    def why_missing(self, capability: str) -> str | None:
        if capability == "counters.subscription":
            return "Artemis keeps no per-subscriber matched / discarded counters (a Classic slow-consumer view)"
        if capability.startswith(("slow_consumer.", "memory.")):
            return "an ActiveMQ Classic policy with no Artemis setting of the same meaning (artemis_config.py)"
        if capability == "exclusive_consumers":
            return ("ActiveMQ Classic's per-consumer exclusive flag; Artemis has exclusive queues (a queue setting), "
                    "not exclusive consumers")
        if capability == "topology.jdbc-store":
            return self._jdbc_available()[1] or None
        if capability == "topology.network":
            return "ActiveMQ Classic network connectors; Artemis forms clusters instead (another document)"
        if self.launch_mode == "container" and capability == "tls":
            return "only the local process launcher (artemis:process) opens TLS acceptors with the run's keystore"
        if self.launch_mode == "container" and capability == "topology.shared-store":
            return "shared-store pairs are launched as local JVMs (artemis/shared_store.py), not as containers"
        if self.launch_mode == "container" and capability in self.capabilities():
            return None
        if self.launch_mode == "container" and capability == "groups.reset":
            return "a single Artemis container has no management channel (resetAllGroups goes over Jolokia)"
        if self.launch_mode == "container" and capability in PROCESS_CAPABILITIES:
            return ("a single Artemis container reads no broker counters (only the nodes of a container cluster read "
                    "theirs, over their published Jolokia)")
        return None

    def launch_topology(self, topology, scenario: Scenario, workdir: Path, *, bridge_route=None):
        """One broker, a shared-store primary/backup group of local JVMs (`artemis.shared_store`),
        or a cluster joined by cluster connections: local JVMs (`artemis.cluster`) or containers
        (`artemis.container_cluster`, launch mode "container")."""

        if topology.kind == "cluster" and self.launch_mode == "container":
            check_supported(self, topology)
            return self._launch_container_cluster(topology, scenario, workdir)
        if topology.kind == "cluster":
            check_supported(self, topology)
            from conformance.targets.artemis.cluster import launch_cluster

            try:
                return launch_cluster(topology, scenario, workdir, bridge_route=bridge_route,
                                      counters=lambda process: self._counters_handle(process, scenario),
                                      jvm_heap_mb=min(self.jvm_heap_mb, 256), timeout=max(self.start_timeout, 240))
            except UnsupportedArtemisPolicy as e:
                raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
            except (artemis_process.ArtemisNotInstalled, artemis_process.ArtemisStartError) as e:
                raise TargetUnavailable(f"Apache Artemis cluster did not start: {e}") from e
            # a cluster whose JVMs run but whose links never connect (ClusterFormationError) is an error

        if topology.kind in ("shared-store", "jdbc-store"):
            check_supported(self, topology)
            from conformance.targets.artemis.shared_store import launch_shared_store

            try:
                return launch_shared_store(topology, scenario, workdir, jvm_heap_mb=min(self.jvm_heap_mb, 256),
                                           timeout=max(self.start_timeout, 240))
            except UnsupportedArtemisPolicy as e:
                raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
            except (artemis_process.ArtemisNotInstalled, artemis_process.ArtemisStartError) as e:
                raise TargetUnavailable(f"Apache Artemis shared-store group did not start: {e}") from e
        return launch_single(self, topology, scenario, workdir, faultable=True, node_type=ArtemisNode)

    def _launch_container_cluster(self, topology, scenario: Scenario, workdir: Path):
        """Containers on a network of their own joined by cluster connections
        (`artemis.container_cluster`); each node's counters over its published Jolokia."""
        from conformance.targets.artemis.container_cluster import launch_container_cluster

        if scenario.tls:
            raise TargetUnavailable(f"Apache Artemis (container) cannot run scenario {scenario.name!r} over TLS: "
                                    "only the local process launcher opens TLS acceptors")
        try:
            return launch_container_cluster(
                topology, scenario, workdir, image=self.image, jvm_heap_mb=min(self.jvm_heap_mb, 256),
                timeout=max(self.start_timeout, 240),
                counters=lambda container: self._counters_handle(container, scenario, CONTAINER_CLUSTER_CAPABILITIES))
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        except (artemis_container.ArtemisStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"Apache Artemis container cluster did not start: {e}") from e
        # containers that run but whose links never connect (ClusterFormationError) are an error

    def _counters_handle(self, process, scenario: Scenario,
                         offered: frozenset[str] = PROCESS_CAPABILITIES) -> "ArtemisProcessHandle":
        """The handle a cluster node reads its queue counters through (Jolokia on its process)."""
        capabilities = frozenset(c for c in offered
                                 if not (c.startswith("protocol.") and c.split(".", 1)[1] not in process.ports))
        return ArtemisProcessHandle(target=self.name, process=process, scenario=scenario, capabilities=capabilities)

    def launch(self, scenario: Scenario, workdir: Path):
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        if self.launch_mode == "container":
            if scenario.tls:
                raise TargetUnavailable(f"Apache Artemis (container) cannot run scenario {scenario.name!r} over TLS: "
                                        "only the local process launcher opens TLS acceptors")
            return self._launch_container(scenario, workdir)

        process = artemis_process.ArtemisProcess(Path(workdir) / "artemis", scenario, name=_broker_name(scenario),
                                 jvm_heap_mb=self.jvm_heap_mb)
        try:
            process.start(timeout=self.start_timeout)
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        except (artemis_process.ArtemisNotInstalled, artemis_process.ArtemisStartError) as e:
            raise TargetUnavailable(f"Apache Artemis ({self.name}, process) did not start for scenario "
                                    f"{scenario.name!r}: {e}") from e
        capabilities = frozenset(c for c in PROCESS_CAPABILITIES
                                 if not (c.startswith("protocol.") and c.split(".", 1)[1] not in process.ports))
        return ArtemisProcessHandle(target=self.name, process=process, scenario=scenario, capabilities=capabilities)

    def _launch_container(self, scenario: Scenario, workdir: Path) -> ArtemisContainerHandle:
        try:
            broker = artemis_container.from_scenario(scenario, Path(workdir) / "artemis-container", image=self.image,
                                                     jvm_heap_mb=self.jvm_heap_mb)
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        try:
            broker.start(timeout=self.start_timeout)
        except (artemis_container.ArtemisStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"Apache Artemis (container) did not start for scenario {scenario.name!r}: "
                                    f"{e}") from e
        opened = {"stomp": True, "mqtt": broker.mqtt, "amqp": broker.amqp}
        capabilities = frozenset(c for c in CONTAINER_CAPABILITIES
                                 if not (c.startswith("protocol.") and not opened[c.split(".", 1)[1]]))
        return ArtemisContainerHandle(target=self.name, broker=broker, scenario=scenario, capabilities=capabilities)

    def __repr__(self) -> str:
        return f"<ArtemisTarget {self.name} launch={self.launch_requested}>"
