"""The reference broker as a conformance target.

In-process by default: a `BrokerServer` on its own asyncio loop in a daemon thread, started in
milliseconds, its counters read directly from the engine. ``launch="process"`` runs
``python -m reference_broker`` instead (for tests that kill and restart it); counters then come
from its HTTP statistics endpoint.

The handles and the configuration a scenario becomes are in `reference.handles`; what differs
between the two launch modes, in `reference.launch_modes`.
"""

from __future__ import annotations

from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.base import TargetUnavailable
from conformance.targets.reference.handles import (  # noqa: F401 - their old home: callers import them from here
    CAPABILITIES,
    DEAD_LETTER_QUEUE,
    InProcessReference,
    ProcessReference,
    scenario_config,
    tls_listeners,
)
from conformance.targets.reference.launch_modes import launch_for
from conformance.targets.reference.network import ReferenceNetwork
from conformance.targets.reference.process import ReferenceStartError
from conformance.targets.reference.rigs import DiscoveryPair
from conformance.targets.reference.rigs import HostPairRig, MasterSlaveRig, StaticFanRig
from conformance.targets.reference.shared_store import launch_shared_store
from machinery import postgres
from conformance.targets.runtime.launch_choice import LaunchedByMode
from conformance.targets.runtime.node import launch_single
from conformance.targets.runtime.shape_launch import LaunchesByShape, ShapeLaunch
from conformance.topology import Shape
from reference_broker.config import ConfigError


class ReferenceTarget(LaunchesByShape, LaunchedByMode):
    name = "reference"
    kind = "reference"

    def __init__(self, name: str = "reference", launch: str = "in-process") -> None:
        self.name = name
        #: the mode's object (`launch_modes`): what differs between in-process and process is asked of it
        self.mode = launch_for(launch)

    def availability(self) -> tuple[bool, str]:
        return True, ""

    @property
    def capability_requirements(self) -> dict[str, str]:
        """Groups on one database need a PostgreSQL server (`Target.capability_requirements`, from
        the table)."""
        return self.shape_requirements()

    def capabilities(self) -> frozenset[str]:
        return CAPABILITIES | self.mode.capabilities | self.topology_capabilities()

    def why_missing(self, capability: str) -> str | None:
        if Shape.of_capability(capability) is not None:
            return self.why_not_launched(capability)
        return self.mode.why_missing(capability)

    def launch(self, scenario: Scenario, workdir: Path):
        try:
            return self.mode.launch(scenario, workdir, self.name)
        except ConfigError as exc:
            raise TargetUnavailable(f"the configuration generated for scenario {scenario.name!r} is invalid: {exc}") from None
        except OSError as exc:
            raise TargetUnavailable(f"reference broker could not listen: {exc}") from None

    def discovery_pair(self, workdir: Path, group: str):
        """Two unstarted brokers that find each other by multicast discovery in ``group`` (reference_rigs.DiscoveryPair)."""

        return DiscoveryPair(workdir, group)

    def masterslave_rig(self, workdir: Path, reconnect: dict):
        """A master/slave pair M, S and a broker F bridging to it through a ``masterslave:``
        connector with the ``reconnect`` options (reference_rigs.MasterSlaveRig), unstarted."""

        return MasterSlaveRig(workdir, reconnect)

    def static_fan_rig(self, workdir: Path, reconnect: dict):
        """Two independent brokers M, S and a broker F with one plain ``static:(M, S)`` connector
        with the ``reconnect`` options (rigs.StaticFanRig), unstarted."""

        return StaticFanRig(workdir, reconnect)

    def host_pair_rig(self, workdir: Path, reconnect: dict):
        """Two shared-store groups of broker processes over two "hosts", each node's
        ``masterslave:`` connector (with the ``reconnect`` options) to the other group
        (rigs.HostPairRig), unstarted."""

        return HostPairRig(workdir, reconnect,
                           lambda name: scenario_config(Scenario(name="host-pair", protocols=("stomp",)), name=name))

    def topology_launches(self) -> dict[Shape, ShapeLaunch]:
        """One broker (in-process, or a process the harness can fault), a shared-store master/slave
        group of broker processes on one journal directory or database (`reference.shared_store`,
        whatever the launch mode: the harness must be able to kill its master; the database, guide
        3.2, where a private PostgreSQL server can run), a network of in-process reference brokers
        (`ReferenceNetwork`), or a cluster joined by Artemis-style cluster connections
        (reference_broker/clustering)."""
        return {Shape.SINGLE: ShapeLaunch(self._launch_single),
                Shape.SHARED_STORE: ShapeLaunch(self._launch_store_group),
                Shape.JDBC_STORE: ShapeLaunch(self._launch_store_group, postgres.availability, "postgresql"),
                Shape.NETWORK: ShapeLaunch(self._launch_network),
                Shape.CLUSTER: ShapeLaunch(self._launch_cluster)}

    def _launch_single(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        return launch_single(self, topology, scenario, workdir, faultable=self.mode.faultable)

    def _launch_store_group(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        try:
            return launch_shared_store(topology, lambda name: scenario_config(scenario, name=name),
                                       scenario.protocols, workdir)
        except ReferenceStartError as exc:
            raise TargetUnavailable(f"reference shared-store group did not start: {exc}") from None

    def _launch_cluster(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        from conformance.targets.reference.clustering import ClusterFormationError, ReferenceCluster

        cluster = ReferenceCluster(topology, workdir, bridge_route=bridge_route)
        try:
            cluster.start()
        except ClusterFormationError as exc:
            raise TargetUnavailable(f"reference cluster did not form: {exc}") from None
        return cluster

    def _launch_network(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        network = ReferenceNetwork(workdir, topology.nodes, topology.bridges, prefix=topology.prefix,
                                   policies=topology.policies, bridge_route=bridge_route,
                                   broker_attributes=topology.broker_attributes, composites=topology.composites,
                                   users=topology.users, topology=topology)
        if topology.persistent:
            network.use_journal_stores(Path(workdir) / "stores")
        network.start()
        return network
