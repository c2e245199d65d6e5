"""The targets' one launch dispatch (issue 27): a target declares the topology shapes it launches,
each with its launcher, in one table (`LaunchesByShape.topology_launchers`), and ``launch_topology``
picks the launcher by the topology's shape (`conformance.topology.Shape`). No target compares a
topology's kind with a name; a shape added to the model is launched where a table lists it.

The capability a target declares for a shape (``topology.cluster``...) may depend on its launch mode
or the machine (PostgreSQL for ``topology.jdbc-store``); the table says what the target can launch
at all, so every shape capability it declares must be in it
(tests/conformance/test_shape_launch.py checks each target in each mode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from conformance.topology import BridgeRoute, Cluster, Shape, Topology, TopologyUnsupported, check_supported

__all__ = ["LaunchesByShape", "Launcher"]

#: launches a topology of one shape, configured for a scenario: (topology, scenario, workdir,
#: bridge_route) -> the started `Cluster`
Launcher = Callable[..., Cluster]


class LaunchesByShape:
    """Mixin: ``launch_topology`` through the table of shapes the target declares."""

    name: str

    def topology_launchers(self) -> Mapping[Shape, Launcher]:
        """The shapes this target launches, each with its launcher."""
        raise NotImplementedError

    def launched_capabilities(self) -> frozenset[str]:
        """The topology capabilities of the shapes in the table (a single broker needs none)."""
        return frozenset(shape.capability for shape in self.topology_launchers() if shape.capability is not None)

    def launch_topology(self, topology: Topology, scenario, workdir: Path, *,
                        bridge_route: BridgeRoute | None = None) -> Cluster:
        """Start ``topology`` configured for ``scenario`` with the launcher of its shape; its
        capability must be declared (`check_supported`: TopologyUnsupported names it)."""
        check_supported(self, topology)
        launcher = self.topology_launchers().get(topology.shape)
        if launcher is None:
            raise TopologyUnsupported(f"target {self.name} launches no {topology.kind} topology (its shapes: "
                                      f"{', '.join(shape.kind for shape in self.topology_launchers())})")
        return launcher(topology, scenario, workdir, bridge_route)
