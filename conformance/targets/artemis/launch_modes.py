"""How Artemis runs in each launch mode: one object per mode, asked by `ArtemisTarget` for
everything that differs between a local JVM and a container (issue 27: the target resolves its
mode once, then never compares the mode's name again).

* `ArtemisProcessLaunch`: JVMs from the distribution in ``.tools/artemis``: counters over Jolokia
  on loopback, TLS acceptors, shared-store and JDBC pairs, clusters of local JVMs
  (artemis/cluster.py, links through the fault proxy when asked).
* `ArtemisContainerLaunch`: the image: no counters for a single broker, no TLS, no shared store;
  clusters of containers on a network of their own (artemis/container_cluster.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.artemis import container as artemis_container
from conformance.targets.artemis import process as artemis_process
from conformance.targets.artemis.config import UnsupportedArtemisPolicy
from conformance.targets.artemis.handles import ArtemisContainerHandle, ArtemisProcessHandle, process_handle
from conformance.targets.base import TargetUnavailable
from machinery import postgres
from machinery.docker_env import DockerUnavailable

__all__ = ["ArtemisProcessLaunch", "ArtemisContainerLaunch", "LAUNCHES", "CONTAINER_CAPABILITIES",
           "CONTAINER_CLUSTER_CAPABILITIES", "PROCESS_CAPABILITIES"]

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
CONTAINER_CLUSTER_CAPABILITIES = CONTAINER_CAPABILITIES | frozenset({"counters.destination"})

#: the local JVM adds broker-side counters read over Jolokia on loopback, the resetAllGroups
#: operation over the same channel, and tls: a TLS acceptor per protocol with the run's keystore
#: (Scenario(tls=True); the container has none). The topologies either mode launches are the
#: target's table (`ArtemisTarget.topology_launches`, with each mode's availability below).
PROCESS_CAPABILITIES = CONTAINER_CAPABILITIES | frozenset({"counters.destination", "tls", "groups.reset"})


def broker_name(scenario: Scenario) -> str:
    return "brokerconf-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario.name).strip("-") or "scenario")


class ArtemisProcessLaunch:
    """Local JVMs (`artemis.process.ArtemisProcess`)."""

    name = "process"
    #: the JVM runs from this machine's distribution (.tools/artemis)
    local = True

    def capabilities(self) -> frozenset[str]:
        return PROCESS_CAPABILITIES

    @staticmethod
    def start_timeout(configured: float) -> float:
        return configured  # the target's budget as it is: a JVM from a template instance

    def shared_store_available(self) -> tuple[bool, str]:
        return True, ""  # primary and backups: local JVMs on one data directory (artemis/shared_store.py)

    def jdbc_available(self) -> tuple[bool, str]:
        """A JDBC shared-store pair (local JVMs): a private PostgreSQL server and its driver jar."""
        if not postgres.JDBC_DRIVER_JAR.is_file():
            return False, f"the PostgreSQL JDBC driver {postgres.JDBC_DRIVER_JAR} is missing (Debian package libpostgresql-jdbc-java)"
        return postgres.availability()

    def why_missing(self, capability: str) -> str | None:
        return None  # what a local JVM lacks, it lacks in either mode (the target says why)

    def launch(self, target, scenario: Scenario, workdir: Path) -> ArtemisProcessHandle:
        """One started JVM configured for ``scenario``."""
        process = artemis_process.ArtemisProcess(Path(workdir) / "artemis", scenario, name=broker_name(scenario),
                                                 jvm_heap_mb=target.jvm_heap_mb)
        try:
            process.start(timeout=self.start_timeout(target.start_timeout))
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        except (artemis_process.ArtemisNotInstalled, artemis_process.ArtemisStartError) as e:
            raise TargetUnavailable(f"Apache Artemis ({target.name}, process) did not start for scenario "
                                    f"{scenario.name!r}: {e}") from e
        return process_handle(target.name, process, scenario, PROCESS_CAPABILITIES)

    def launch_cluster(self, target, topology, scenario: Scenario, workdir: Path, *, bridge_route=None):
        """Local JVMs joined by cluster connections (`artemis.cluster`), links through the fault
        proxy when the topology routes them there."""
        from conformance.targets.artemis.cluster import launch_cluster

        try:
            return launch_cluster(topology, scenario, workdir, bridge_route=bridge_route,
                                  counters=lambda process: process_handle(target.name, process, scenario,
                                                                          PROCESS_CAPABILITIES),
                                  jvm_heap_mb=min(target.jvm_heap_mb, 256), timeout=max(target.start_timeout, 240))
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        except (artemis_process.ArtemisNotInstalled, artemis_process.ArtemisStartError) as e:
            raise TargetUnavailable(f"Apache Artemis cluster did not start: {e}") from e
        # a cluster whose JVMs run but whose links never connect (ClusterFormationError) is an error


class ArtemisContainerLaunch:
    """The image (`artemis.container.ArtemisContainer`)."""

    name = "container"
    local = False

    def capabilities(self) -> frozenset[str]:
        return CONTAINER_CAPABILITIES

    def shared_store_available(self) -> tuple[bool, str]:
        return False, "shared-store pairs are launched as local JVMs (artemis/shared_store.py), not as containers"

    def jdbc_available(self) -> tuple[bool, str]:
        return False, "JDBC shared-store pairs are launched as local JVMs (artemis:process)"

    def why_missing(self, capability: str) -> str | None:
        if capability == "tls":
            return "only the local process launcher (artemis:process) opens TLS acceptors with the run's keystore"
        if capability in self.capabilities():
            return None
        if capability == "groups.reset":
            return "a single Artemis container has no management channel (resetAllGroups goes over Jolokia)"
        if capability in PROCESS_CAPABILITIES:
            return ("a single Artemis container reads no broker counters (only the nodes of a container cluster read "
                    "theirs, over their published Jolokia)")
        return None

    @staticmethod
    def _refuse_tls(scenario: Scenario) -> None:
        if scenario.tls:
            raise TargetUnavailable(f"Apache Artemis (container) cannot run scenario {scenario.name!r} over TLS: "
                                    "only the local process launcher opens TLS acceptors")

    @staticmethod
    def start_timeout(configured: float) -> float:
        """The process's budget plus what only a container's first start does: `artemis create`
        (a JVM run of its own; a local launch copies a template instead) before the broker's JVM,
        and the web console after it (the image's readiness line; a local launch serves Jolokia
        from an agent). In a CI run with six workers busy `artemis create` alone took ~95 s before
        the broker's JVM started, and two containers missed the 120 s by a second or so."""
        return configured + 60

    def launch(self, target, scenario: Scenario, workdir: Path) -> ArtemisContainerHandle:
        """One started container configured for ``scenario``."""
        self._refuse_tls(scenario)
        try:
            broker = artemis_container.from_scenario(scenario, Path(workdir) / "artemis-container", image=target.image,
                                                     jvm_heap_mb=target.jvm_heap_mb)
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        try:
            broker.start(timeout=self.start_timeout(target.start_timeout))
        except (artemis_container.ArtemisStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"Apache Artemis (container) did not start for scenario {scenario.name!r}: "
                                    f"{e}") from e
        opened = {"stomp": True, "mqtt": broker.mqtt, "amqp": broker.amqp}
        capabilities = frozenset(c for c in CONTAINER_CAPABILITIES
                                 if not (c.startswith("protocol.") and not opened[c.split(".", 1)[1]]))
        return ArtemisContainerHandle(target=target.name, broker=broker, scenario=scenario, capabilities=capabilities)

    def launch_cluster(self, target, topology, scenario: Scenario, workdir: Path, *, bridge_route=None):
        """Containers on a network of their own joined by cluster connections
        (`artemis.container_cluster`); each node's counters over its published Jolokia. No link
        runs through the fault proxy (``bridge_route`` is not used): the container partition
        nemesis cuts the real links."""
        from conformance.targets.artemis.container_cluster import launch_container_cluster

        self._refuse_tls(scenario)
        try:
            return launch_container_cluster(
                topology, scenario, workdir, image=target.image, jvm_heap_mb=min(target.jvm_heap_mb, 256),
                timeout=max(target.start_timeout, 240),
                counters=lambda container: process_handle(target.name, container, scenario,
                                                          CONTAINER_CLUSTER_CAPABILITIES))
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        except (artemis_container.ArtemisStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"Apache Artemis container cluster did not start: {e}") from e
        # containers that run but whose links never connect (ClusterFormationError) are an error


#: a resolved mode's name (`runtime.launch_choice.choose_launch`) -> its object
LAUNCHES = {"process": ArtemisProcessLaunch(), "container": ArtemisContainerLaunch()}
