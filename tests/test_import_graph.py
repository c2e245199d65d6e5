"""No import cycles among the project's packages (issue 17, "Done when").

The graph is read from the source with `ast`, so it holds every import the code can execute:
module level, inside functions (lazy imports) and under ``if TYPE_CHECKING``. A cycle hidden
behind a lazy import is still a cycle here: two modules that need each other are one module in
two files, and the fix is to move the shared piece or pass it in (a protocol, a callable).
"""

from __future__ import annotations

import ast
import tomllib
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("machinery", "conformance", "chaos", "reference_broker", "reports", "brokerconf", "suites")


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the given top-level packages."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Dotted names an import statement may load (``from a import b``: ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> project modules it imports anywhere in its source."""
    modules = module_files(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(name, path.name == "__init__.py", node):
                # ``from pkg.mod import func``: the longest prefix that is a project module
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Components of more than one module (Tarjan, iterative: no recursion limit to hit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import path from the component's first module back to itself."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph[node] & members):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return path[::-1] + [start]
            if succ not in came_from:
                came_from[succ] = node
                queue.append(succ)
    raise AssertionError(f"{component} is not strongly connected")  # pragma: no cover


def describe(graph: dict[str, set[str]]) -> list[str]:
    """One line per cycle: an import path round it, and every module caught in it."""
    lines = []
    for component in strongly_connected(graph):
        path = one_cycle(graph, component)
        line = " -> ".join(path)
        if len(component) > len(path) - 1:
            line += f" (the cycle holds {len(component)} modules: {', '.join(component)})"
        lines.append(line)
    return lines


def test_the_project_has_no_import_cycle():
    graph = import_graph(ROOT)
    assert len(graph) > 100, f"found only {len(graph)} modules under {ROOT}: wrong root?"
    cycles = describe(graph)
    assert not cycles, "import cycles (move the shared piece, or pass it in):\n" + "\n".join(cycles)


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_cycle_behind_a_lazy_or_typing_import_is_found_and_named(tmp_path):
    # The check must be able to fail: plant the two shapes this project used to hide cycles in.
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import helper\n",
        "pkg/b.py": "def helper():\n    from pkg.a import thing  # lazy\n    return thing\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..d import D\n",
        "pkg/d.py": "from pkg.sub import c\n",
        "pkg/e.py": "import pkg.a\n",  # depends on a cycle without being in one
        "pkg/f.py": "from pkg import g\n",  # f -> g -> h -> f, plus h -> i -> h
        "pkg/g.py": "from . import h\n",
        "pkg/h.py": "from .f import x\nfrom .i import y\n",
        "pkg/i.py": "def later():\n    from .h import z\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert strongly_connected(graph) == [
        ["pkg.a", "pkg.b"], ["pkg.d", "pkg.sub.c"], ["pkg.f", "pkg.g", "pkg.h", "pkg.i"]]
    assert describe(graph) == [
        "pkg.a -> pkg.b -> pkg.a",
        "pkg.d -> pkg.sub.c -> pkg.d",
        "pkg.f -> pkg.g -> pkg.h -> pkg.f (the cycle holds 4 modules: pkg.f, pkg.g, pkg.h, pkg.i)",
    ]


def test_imports_between_a_package_and_its_modules_in_one_direction_are_no_cycle(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from .a import A\nfrom .b import B\n",
        "pkg/a.py": "A = 1\n",
        "pkg/b.py": "from .a import A\nB = A\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.a", "pkg.b"}, "pkg.a": set(), "pkg.b": {"pkg.a"}}
    assert describe(graph) == []


# Package layers, lowest first (issue 27): a module may import its own layer and the layers below,
# never one above. Packages that share a layer are peers and may not import each other either.
# The suite modules are pytest's test modules, the top of the house, which drive chaos experiments
# and judge them (brokerconf.chaos_job); nothing but tests imports them. They are a package of their
# own (they were ``conformance.suites``, which made conformance and chaos import each other in a
# package-level drawing of the tree).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("machinery", "reference_broker"),  # processes, containers, downloads, PostgreSQL, fault plane
    ("conformance",),                   # targets, clients, catalogue, the pytest plugin
    ("chaos",),                         # experiments, nemeses, workloads on top of targets and clients
    ("reports",),                       # checkers, the Spark pipeline, rendering of chaos histories
    ("brokerconf",),                    # the command line
    ("suites",),                        # the suites: pytest modules that use all of the above
)


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> tuple[int, str]:
    """(layer index, the unit the module belongs to): the longest listed prefix of ``module``."""
    best: tuple[int, str] | None = None
    for index, units in enumerate(layers):
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and (best is None or len(unit) > len(best[1])):
                best = (index, unit)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS")
    return best


def upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """One line per import from a unit to a unit above it or beside it (a peer), sorted."""
    wrong = []
    for module, targets in graph.items():
        level, unit = layer_of(module, layers)
        for target in targets:
            target_level, target_unit = layer_of(target, layers)
            if target_unit != unit and target_level >= level:
                where = "above it" if target_level > level else "beside it"
                wrong.append(f"{unit} -> {target_unit} ({where}): {module} imports {target}")
    return sorted(wrong)


def test_no_package_imports_a_package_above_it():
    packages = tuple(sorted({unit.split(".")[0] for units in LAYERS for unit in units}))
    graph = import_graph(ROOT, packages)
    assert len(graph) > 100, f"found only {len(graph)} modules under {ROOT}: wrong root?"
    # every package the project installs has its layer (pyproject's packages.find: "name*")
    find = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]["find"]
    installed = {pattern.rstrip("*") for pattern in find["include"]}
    assert installed == set(packages), f"installed {sorted(installed)}, layered {sorted(packages)}"
    wrong = upward_imports(graph)
    assert not wrong, f"{len(wrong)} imports run up the layers {LAYERS}:\n" + "\n".join(wrong)


def test_an_upward_or_sideways_import_is_found_lazy_or_not(tmp_path):
    # The check must be able to fail: a lazy import up a layer, a typing-only one, a peer's, and a
    # sub-unit (low.top) that may import everything because it is listed in the top layer.
    _write(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": "def later():\n    from high.b import B\n",
        "low/top.py": "from high import b\n",
        "peer/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from low import a\n",
        "high/__init__.py": "",
        "high/b.py": "from low.a import later\nimport peer\n",
    })
    layers = (("low", "peer"), ("high",), ("low.top",))
    graph = import_graph(tmp_path, ("low", "peer", "high"))
    assert upward_imports(graph, layers) == [
        "low -> high (above it): low.a imports high.b",
        "peer -> low (beside it): peer imports low",  # `from low import a` loads low, then low.a
        "peer -> low (beside it): peer imports low.a",
    ]
