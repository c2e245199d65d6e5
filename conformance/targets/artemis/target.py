"""Apache Artemis as a conformance target: ``artemis:process`` (a local JVM from the distribution
in ``.tools/artemis``, `artemis_process`), ``artemis:container`` (the image, `artemis_container`),
and plain ``artemis``: the process when the distribution is installed, else the container (as
``activemq`` picks its launch mode). The matrix records which ran. Whatever differs between the
two is asked of the resolved mode's object (`conformance.targets.artemis.launch_modes`); the
handles are in `conformance.targets.artemis.handles`.

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

from pathlib import Path
from typing import Callable

from conformance.scenario import Scenario
from conformance.targets.artemis.dist import ARTEMIS_IMAGE, installed
from conformance.targets.artemis.handles import (  # noqa: F401 - their old home: callers import them from here
    CLIENT_OPTIONS,
    DESTINATION_PARAMETERS,
    QUEUE_ATTRIBUTES,
    STOMP_UNSUPPORTED,
    ArtemisContainerHandle,
    ArtemisHandle,
    ArtemisProcessHandle,
)
from conformance.targets.artemis.launch_modes import (  # noqa: F401 - the capability sets, declared with the modes
    CONTAINER_CAPABILITIES,
    CONTAINER_CLUSTER_CAPABILITIES,
    LAUNCHES,
    PROCESS_CAPABILITIES,
    ArtemisContainerLaunch,
    ArtemisProcessLaunch,
)
from conformance.targets.artemis.config import UnsupportedArtemisPolicy
from conformance.targets.artemis import process as artemis_process
from conformance.targets.base import TargetUnavailable
from machinery.docker_env import image_available
from conformance.targets.artemis.node import ArtemisNode
from conformance.targets.runtime.node import launch_single
from conformance.targets.runtime.shape_launch import LaunchesByShape, ShapeLaunch
from conformance.topology import Shape
from conformance.targets.runtime.launch_choice import LaunchedByMode, check_requested, choose_launch, requirement_of

__all__ = ["ArtemisTarget", "ArtemisProcessHandle", "ArtemisContainerHandle", "LAUNCH_MODES"]

LAUNCH_MODES = ("auto", "process", "container")


def _container_check(image: str, image_check=None) -> tuple[bool, str]:
    if image_check is not None:
        return image_check(image)

    return image_available(image)


class ArtemisTarget(LaunchesByShape, LaunchedByMode):
    """Apache Artemis, one broker per scenario (implements `Target`).

    ``launch``: "process" (local JVM), "container" (the image), "auto" (process when the
    distribution is installed, else container). ``process_check`` / ``image_check`` are seams for
    tests (defaults: `artemis_dist.installed`, docker_env's image check, which never pulls)."""

    kind = "artemis"

    def __init__(self, name: str = "artemis", *, launch: str = "auto", image: str | None = None,
                 image_check=None, process_check: Callable[[], tuple[bool, str]] | None = None,
                 start_timeout: float = 120.0, jvm_heap_mb: int = 384) -> None:
        self.name = name
        self.launch_requested = check_requested(launch, LAUNCH_MODES)
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
    def mode(self) -> ArtemisProcessLaunch | ArtemisContainerLaunch:
        """The resolved mode's object (`launch_modes`): everything that differs between a local JVM
        and a container is asked of it."""
        return LAUNCHES[self._resolve()[0]]

    @property
    def requirement(self) -> str:
        """The BROKERCONF_REQUIRE name this target needs (conformance/requirements.py): the local
        distribution, or the Docker engine with the image for ``artemis:container``."""
        return requirement_of(self.launch_requested, "artemis")

    def availability(self) -> tuple[bool, str]:
        _, ok, reason = self._resolve()
        return ok, reason

    @property
    def capability_requirements(self) -> dict[str, str]:
        """A JDBC shared store needs PostgreSQL (`Target.capability_requirements`, from the table);
        the whole target needs `requirement`."""
        return self.shape_requirements()

    def capabilities(self) -> frozenset[str]:
        return self.mode.capabilities() | self.topology_capabilities()

    def why_missing(self, capability: str) -> str | None:
        if Shape.of_capability(capability) is not None:
            return self.why_not_launched(capability)
        if capability == "counters.subscription":
            return "Artemis keeps no per-subscriber matched / discarded counters (a Classic slow-consumer view)"
        if capability.startswith(("slow_consumer.", "memory.")):
            return "an ActiveMQ Classic policy with no Artemis setting of the same meaning (artemis_config.py)"
        if capability == "exclusive_consumers":
            return ("ActiveMQ Classic's per-consumer exclusive flag; Artemis has exclusive queues (a queue setting), "
                    "not exclusive consumers")
        return self.mode.why_missing(capability)

    def topology_launches(self) -> dict[Shape, ShapeLaunch]:
        """One broker, a shared-store primary/backup group of local JVMs on one data directory or
        database (`artemis.shared_store`; process mode, the database where PostgreSQL and its driver
        are installed), or a cluster joined by cluster connections: local JVMs (`artemis.cluster`)
        or containers (`artemis.container_cluster`), as the launch mode does it. Never a network of
        Classic connectors: the row is there for its reason."""
        # the requirement is the JDBC group's whatever the mode, as the target always declared it
        return {Shape.SINGLE: ShapeLaunch(self._launch_single),
                Shape.SHARED_STORE: ShapeLaunch(self._launch_store_group, self.mode.shared_store_available),
                Shape.JDBC_STORE: ShapeLaunch(self._launch_store_group, self.mode.jdbc_available, "postgresql"),
                Shape.CLUSTER: ShapeLaunch(self._launch_cluster),
                Shape.NETWORK: ShapeLaunch.never("ActiveMQ Classic network connectors; Artemis forms clusters "
                                                 "instead (another document)")}

    def _launch_single(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        return launch_single(self, topology, scenario, workdir, faultable=True, node_type=ArtemisNode)

    def _launch_cluster(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        return self.mode.launch_cluster(self, topology, scenario, workdir, bridge_route=bridge_route)

    def _launch_store_group(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        from conformance.targets.artemis.shared_store import launch_shared_store

        try:
            return launch_shared_store(topology, scenario, workdir, jvm_heap_mb=min(self.jvm_heap_mb, 256),
                                       timeout=max(self.start_timeout, 240))
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"Apache Artemis cannot run scenario {scenario.name!r}: {e}") from e
        except (artemis_process.ArtemisNotInstalled, artemis_process.ArtemisStartError) as e:
            raise TargetUnavailable(f"Apache Artemis shared-store group did not start: {e}") from e

    def launch(self, scenario: Scenario, workdir: Path):
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        return self.mode.launch(self, scenario, workdir)

    def __repr__(self) -> str:
        return f"<ArtemisTarget {self.name} launch={self.launch_requested}>"
