"""A target's topology capabilities follow from the shapes it launches (issue 27): each target's
table (`LaunchesByShape.topology_launches`) says, per shape, the launcher and whether it can launch
it here; `capabilities()` adds the capabilities of the shapes it can, and `why_missing` of a
topology capability is that row's reason. No module under conformance/targets names a
``topology.*`` capability itself (a source scan, read with `ast` as tests/test_deadline_loops.py
reads loops): the shape model (conformance/topology.py `Shape`) is where those names live.

No broker starts: the tables are edited on the target objects, the machine faked as
tests/conformance/test_launch_mode_table.py fakes it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conformance.targets.runtime.shape_launch import ShapeLaunch
from conformance.topology import TOPOLOGY_CAPABILITIES, Shape
from tests.conformance.test_launch_mode_table import fake_machine
from tests.conformance.test_shape_launch import _targets_in_every_mode

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "conformance" / "targets"

#: the shapes a target has a capability for (one broker needs none)
SHAPES_WITH_CAPABILITIES = [shape for shape in Shape if shape.capability is not None]


def test_every_topology_capability_is_one_shapes():
    # a topology capability outside the model would have to be written by hand somewhere
    owners = {c: [shape for shape in Shape if c in shape.capabilities] for c in TOPOLOGY_CAPABILITIES}
    assert all(len(shapes) == 1 for shapes in owners.values()), owners
    assert {c for shape in Shape for c in shape.capabilities} == set(TOPOLOGY_CAPABILITIES)
    # the rigs are networks the model does not describe yet: a network's variants
    assert Shape.of_capability("topology.discovery") is Shape.NETWORK
    assert Shape.of_capability("topology.masterslave-connector") is Shape.NETWORK
    assert Shape.of_capability("topology.cluster") is Shape.CLUSTER
    assert Shape.of_capability("groups") is None and Shape.SINGLE.capabilities == ()


def _with_row(target, shape: Shape, row: ShapeLaunch | None):
    """``target`` with its table's row for ``shape`` replaced (None: dropped), nothing else edited."""
    table = dict(target.topology_launches())
    if row is None:
        table.pop(shape, None)
    else:
        table[shape] = row
    target.topology_launches = lambda: table
    return target


def _launcher(*args):
    raise AssertionError("nothing is launched here")


@pytest.mark.parametrize("extras", [True, False], ids=["extras-installed", "no-extras"])
@pytest.mark.parametrize("shape", SHAPES_WITH_CAPABILITIES, ids=lambda shape: shape.kind)
def test_a_row_of_the_table_is_the_capability_and_its_reason(monkeypatch, extras, shape):
    """Each target in each mode: a shape whose row it gains is a capability with no other edit; a
    row that cannot launch here takes the capability away with the row's reason; no row, no
    capability. The target's other capabilities do not move."""
    fake_machine(monkeypatch, extras)
    reason = f"cannot launch a {shape.kind} here: the test says so"
    # five fresh objects of each target: as it is, and four with the shape's row edited
    for base, gained, refused, never, dropped in zip(*(_targets_in_every_mode() for _ in range(5))):
        others = base.capabilities() - set(shape.capabilities)

        _with_row(gained, shape, ShapeLaunch(_launcher))
        assert set(shape.capabilities) <= gained.capabilities(), (gained.name, shape)
        assert gained.capabilities() - set(shape.capabilities) == others, gained.name
        assert [gained.why_missing(c) for c in shape.capabilities] == [None] * len(shape.capabilities)

        _with_row(refused, shape, ShapeLaunch(_launcher, lambda: (False, reason)))
        assert not set(shape.capabilities) & refused.capabilities(), (refused.name, shape)
        assert refused.capabilities() == others, refused.name
        assert [refused.why_missing(c) for c in shape.capabilities] == [reason] * len(shape.capabilities)

        _with_row(never, shape, ShapeLaunch.never(reason))
        assert never.capabilities() == others and never.why_missing(shape.capability) == reason, never.name

        _with_row(dropped, shape, None)
        assert dropped.capabilities() == others, dropped.name


def test_a_required_shape_names_its_requirement_from_the_row(monkeypatch):
    # BROKERCONF_REQUIRE: a row's requirement is the capability's, wherever the row is
    fake_machine(monkeypatch, True)
    for target in _targets_in_every_mode():
        _with_row(target, Shape.CLUSTER, ShapeLaunch(_launcher, requirement="docker"))
        assert target.capability_requirements.get("topology.cluster") == "docker", target.name


# --------------------------------------------------------------------------- the source scan

#: a string that names a topology capability, or the start of one an f-string completes
CAPABILITY_LITERAL = re.compile(r"topology\.[\w.-]*")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (they describe, they declare nothing)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def capability_literals(source: str) -> list[str]:
    """``line: text`` of each string constant naming a topology capability (f-strings' pieces
    included), docstrings and comments aside."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    hits = [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and CAPABILITY_LITERAL.fullmatch(node.value)]
    return [f"{node.lineno}: {node.value}" for node in sorted(hits, key=lambda n: (n.lineno, n.col_offset))]


def test_no_target_module_names_a_topology_capability():
    files = sorted(TARGETS.rglob("*.py"))
    assert len(files) > 30, f"found only {len(files)} modules under {TARGETS}: wrong root?"
    wrong = [f"{path.relative_to(ROOT)}:{hit}" for path in files
             for hit in capability_literals(path.read_text(encoding="utf-8"))]
    assert not wrong, ("a topology capability written beside the shape tables (give the shape a row in the "
                       "target's topology_launches, with its availability; conformance/topology.py names the "
                       "capabilities):\n" + "\n".join(wrong))


def test_the_scan_finds_every_way_a_capability_was_written_by_hand():
    # The check must be able to fail: the ways the targets wrote them before the tables, and near misses.
    source = '''
"""Docstring: ``topology.network`` is described here, declared nowhere."""
NETWORK = frozenset({"topology.network", "topology.discovery"})                  # 3
def capabilities(self):
    # a comment naming topology.cluster is no declaration
    if self.jdbc_available()[0]:
        added.add("topology.jdbc-store")                                           # 7
    return PROCESS | {"topology.cluster"}                                          # 8
def why_missing(self, capability):
    if capability.startswith(("topology.masterslave",)):                          # 10
        return "networks are launched as local processes"
    if capability == f"topology.{self.kind}":                                      # 12
        return None
    raise ValueError("topology.proxied has 'cluster': launch_topology needs a bridge_route")
requirements = {Shape.JDBC_STORE.capability: "postgresql"}
nodes = topology.nodes
'''
    found = [hit.split(":")[0] for hit in capability_literals(source)]
    assert found == ["3", "3", "7", "8", "10", "12"]
