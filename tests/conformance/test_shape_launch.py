"""The topology's shape and the targets' one launch dispatch (issue 27: one generic `launch_topology`
replaces the kind switches; each target declares the shapes it launches).

`Topology.shape` is told from the model's fields once (conformance/topology.py); every target
launches through `LaunchesByShape` (conformance/targets/runtime/shape_launch.py) from its table of
shape -> launcher. No broker starts here: the dispatch is checked on a recording target, and the
real targets' tables against the capabilities they declare in every launch mode, with the machine
faked as tests/conformance/test_launch_mode_table.py fakes it.
"""

from __future__ import annotations

import pytest

from conformance.scenario import Scenario
from conformance.targets.activemq.target import ActiveMQTarget
from conformance.targets.artemis.target import ArtemisTarget
from conformance.targets.external import ExternalTarget
from conformance.targets.mosquitto.target import MosquittoTarget
from conformance.targets.rabbitmq.target import RabbitMQTarget
from conformance.targets.reference.target import ReferenceTarget
from conformance.targets.registry import BUILTIN, builtin_target
from conformance.targets.runtime.shape_launch import LaunchesByShape, ShapeLaunch
from conformance.topology import (TOPOLOGY_CAPABILITIES, Bridge, ClusterConnection, Shape, SharedStore, Topology,
                                  TopologyUnsupported, capability_of)
from tests.conformance.test_launch_mode_table import fake_machine

#: one topology of each shape, built as callers build them
EXAMPLES = {
    Shape.SINGLE: Topology(("A",)),
    Shape.SHARED_STORE: Topology(("A", "B"), shared_store=SharedStore()),
    Shape.JDBC_STORE: Topology(("A", "B"), shared_store=SharedStore(kind="jdbc", lock_keep_alive_period_ms=500)),
    Shape.NETWORK: Topology(("A", "B"), (Bridge("A", "B"),)),
    Shape.CLUSTER: Topology(("A", "B"), cluster=ClusterConnection()),
}


def test_each_topology_has_the_shape_its_fields_describe():
    assert set(EXAMPLES) == set(Shape)
    for shape, topology in EXAMPLES.items():
        assert topology.shape is shape
        assert (topology.kind, capability_of(topology)) == (shape.kind, shape.capability)
    # the names the model always had (messages, the matrix, the history's run-end record)
    assert [shape.kind for shape in Shape] == ["single", "shared-store", "jdbc-store", "network", "cluster"]
    assert {shape.capability for shape in Shape} - {None} <= set(TOPOLOGY_CAPABILITIES)
    # a network of one node is no network
    assert Topology(("A",), ()).shape is Shape.SINGLE


class Recording(LaunchesByShape):
    """A target launching single brokers and clusters, declaring what it is told to."""

    name = "recording"

    def __init__(self, capabilities=("topology.cluster",)) -> None:
        self._capabilities = frozenset(capabilities)
        self.launched: list[tuple[str, Topology, object]] = []

    def capabilities(self):
        return self._capabilities

    def topology_launches(self):
        return {Shape.SINGLE: ShapeLaunch(lambda *args: self._launch("single", *args)),
                Shape.CLUSTER: ShapeLaunch(lambda *args: self._launch("cluster", *args))}

    def _launch(self, launcher, topology, scenario, workdir, bridge_route):
        self.launched.append((launcher, topology, bridge_route))
        return f"{launcher} launched"


def test_the_dispatch_picks_the_launcher_of_the_topologys_shape(tmp_path):
    target = Recording()
    route = object()
    assert target.launch_topology(EXAMPLES[Shape.CLUSTER], Scenario("s"), tmp_path, bridge_route=route) == \
        "cluster launched"
    assert target.launch_topology(EXAMPLES[Shape.SINGLE], Scenario("s"), tmp_path) == "single launched"
    assert target.launched == [("cluster", EXAMPLES[Shape.CLUSTER], route), ("single", EXAMPLES[Shape.SINGLE], None)]
    assert target.launched_capabilities() == {"topology.cluster"}


def test_a_shape_not_declared_is_refused_naming_the_capability(tmp_path):
    target = Recording(capabilities=())
    with pytest.raises(TopologyUnsupported, match=r"lacks topology.cluster \(it cannot launch a cluster topology"):
        target.launch_topology(EXAMPLES[Shape.CLUSTER], Scenario("s"), tmp_path)
    assert target.launched == []


def test_a_shape_declared_but_not_in_the_table_is_refused_naming_the_shapes_it_has(tmp_path):
    # e.g. an external broker whose targets file declares topology.network: it runs one broker
    target = Recording(capabilities=("topology.network", "topology.cluster"))
    with pytest.raises(TopologyUnsupported, match=r"launches no network topology \(its shapes: single, cluster\)"):
        target.launch_topology(EXAMPLES[Shape.NETWORK], Scenario("s"), tmp_path)
    external = ExternalTarget(name="ext", kind="activemq", host="127.0.0.1", ports={"stomp": 61613},
                              declared=frozenset({"topology.network"}), credentials=(None, None))
    with pytest.raises(TopologyUnsupported, match="launches no network topology"):
        external.launch_topology(EXAMPLES[Shape.NETWORK], Scenario("s"), tmp_path)


def test_every_builtin_target_launches_through_the_one_dispatch():
    for name in BUILTIN:
        target = builtin_target(name)
        assert isinstance(target, LaunchesByShape), name
        # none keeps a launch_topology of its own beside the table
        assert type(target).launch_topology is LaunchesByShape.launch_topology, name
        assert Shape.SINGLE in target.topology_launches(), name


def _targets_in_every_mode():
    return [ActiveMQTarget(name="activemq:process", launch="process", process_check=lambda: (True, "")),
            ActiveMQTarget(name="activemq:container", launch="container", container_check=lambda: (True, "")),
            ArtemisTarget(name="artemis:process", launch="process", process_check=lambda: (True, "")),
            ArtemisTarget(name="artemis:container", launch="container", image_check=lambda image: (True, "")),
            ReferenceTarget(name="reference", launch="in-process"),
            ReferenceTarget(name="reference:process", launch="process"),
            RabbitMQTarget(), MosquittoTarget()]


@pytest.mark.parametrize("extras", [True, False], ids=["extras-installed", "no-extras"])
def test_every_shape_capability_a_target_declares_is_in_its_table(monkeypatch, extras):
    """A target's capabilities follow its table: a mode or a missing install may take a shape away
    (ActiveMQ networks need local JVMs, a JDBC store PostgreSQL), never add one the target cannot
    launch."""
    fake_machine(monkeypatch, extras)
    shape_capabilities = {shape.capability for shape in Shape} - {None}
    declared_somewhere = set()
    for target in _targets_in_every_mode():
        declared = set(target.capabilities()) & shape_capabilities
        assert declared <= target.launched_capabilities(), (target.name, declared - target.launched_capabilities())
        declared_somewhere |= declared
    if extras:
        # the check is not empty: with everything installed each shape is declared by some target
        assert declared_somewhere == shape_capabilities
