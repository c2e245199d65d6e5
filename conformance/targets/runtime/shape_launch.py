"""The targets' one launch dispatch and their topology capabilities (issue 27): a target declares
the topology shapes it knows in one table (`LaunchesByShape.topology_launches`), each row with the
launcher and whether the target, in its launch mode, can launch the shape on this machine (an
availability: ``(ok, reason)``; ActiveMQ's networks need local JVMs, a JDBC store PostgreSQL).
``launch_topology`` picks the launcher by the topology's shape (`conformance.topology.Shape`), and
the target's topology capabilities and the reasons it lacks one are read from the same rows
(`topology_capabilities`, `why_not_launched`): no target writes a ``topology.*`` capability beside
its table (tests/conformance/test_shape_capabilities.py scans for one), so a shape added to a
table is a capability with no other edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from conformance.topology import BridgeRoute, Cluster, Shape, Topology, TopologyUnsupported, check_supported

__all__ = ["Availability", "LaunchesByShape", "Launcher", "ShapeLaunch", "launchable"]

#: launches a topology of one shape, configured for a scenario: (topology, scenario, workdir,
#: bridge_route) -> the started `Cluster`
Launcher = Callable[..., Cluster]

#: whether a shape can be launched here: () -> (True, "") or (False, why not and what to do)
Availability = Callable[[], "tuple[bool, str]"]


def launchable() -> tuple[bool, str]:
    """The availability of a shape that needs nothing beyond the target itself."""
    return True, ""


@dataclass(frozen=True)
class ShapeLaunch:
    """One row of a target's table: how it launches a shape (``launcher``; None for a shape it
    never launches, kept in the table for its reason) and whether it can launch it here
    (``available``, asked each time: it may look at the machine). ``requirement``: the
    BROKERCONF_REQUIRE name (conformance/requirements.py) of what the machine must provide for the
    shape, so a required one fails instead of being not applicable (`Target.capability_requirements`)."""

    launcher: Launcher | None
    available: Availability = launchable
    requirement: str | None = None

    @classmethod
    def never(cls, reason: str) -> "ShapeLaunch":
        """A shape the target never launches, in any mode or on any machine, and why."""
        return cls(None, lambda: (False, reason))

    def availability(self) -> tuple[bool, str]:
        """``(ok, reason)`` for launching the shape here."""
        return self.available()


class LaunchesByShape:
    """Mixin: ``launch_topology`` through the table of shapes the target declares, and the
    topology capabilities that table gives."""

    name: str

    def topology_launches(self) -> Mapping[Shape, ShapeLaunch]:
        """The shapes this target knows, each with its launcher and its availability here."""
        raise NotImplementedError

    def _launchers(self) -> dict[Shape, Launcher]:
        return {shape: row.launcher for shape, row in self.topology_launches().items() if row.launcher is not None}

    def launched_capabilities(self) -> frozenset[str]:
        """The capabilities of every shape the table has a launcher for, on any machine (a single
        broker needs none)."""
        return frozenset(c for shape in self._launchers() for c in shape.capabilities)

    def topology_capabilities(self) -> frozenset[str]:
        """The capabilities of the shapes this target can launch here: the table's launchers whose
        availability is ok (each shape's own capability and its rigs', `Shape.capabilities`)."""
        return frozenset(c for shape, row in self.topology_launches().items()
                         if row.launcher is not None and row.availability()[0] for c in shape.capabilities)

    def why_not_launched(self, capability: str) -> str | None:
        """The table's reason this target lacks topology capability ``capability`` here (a rig's
        is its shape's); None when it has it, when it is no topology's, or when the table does not
        mention the shape (the capability's description then says what is missing)."""
        shape = Shape.of_capability(capability)
        row = self.topology_launches().get(shape) if shape is not None else None
        if row is None:
            return None
        ok, reason = row.availability()
        return None if ok else (reason or None)

    def shape_requirements(self) -> dict[str, str]:
        """Topology capability -> the requirement of the machine it stands for (rows with one)."""
        return {c: row.requirement for shape, row in self.topology_launches().items()
                if row.requirement is not None for c in shape.capabilities}

    def launch_topology(self, topology: Topology, scenario, workdir: Path, *,
                        bridge_route: BridgeRoute | None = None) -> Cluster:
        """Start ``topology`` configured for ``scenario`` with the launcher of its shape; its
        capability must be declared (`check_supported`: TopologyUnsupported names it)."""
        check_supported(self, topology)
        launchers = self._launchers()
        launcher = launchers.get(topology.shape)
        if launcher is None:
            raise TopologyUnsupported(f"target {self.name} launches no {topology.kind} topology (its shapes: "
                                      f"{', '.join(shape.kind for shape in launchers)})")
        return launcher(topology, scenario, workdir, bridge_route)
