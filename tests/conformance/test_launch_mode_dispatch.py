"""A target's launch mode is a string in one place only, where the requested mode is resolved
(issue 27, "Done when": no branch on ``launch_mode`` outside the one place it is parsed).

`conformance/targets/runtime/launch_choice.py` reads the requested ``auto`` / ``process`` /
``container`` (which one runs, what the machine must provide); each target then turns the resolved
name into one object for that mode (`activemq.launch_modes`, `artemis.launch_modes`,
`reference.launch_modes`) by a table lookup, and asks that object whatever differs between the modes:
capabilities, reasons, start timeouts, how a broker or a group is launched. Comparing ``launch_mode``
(or a handle's ``launch``) with a mode's name anywhere else declares a second time what that mode
means, and the next mode added would have to be found there too. ``launch_mode`` stays a string
for messages and the matrix; reading it is fine, branching on it is not.

The scan reads the source with `ast`, so a comparison in a lazy branch or through a ``getattr``
counts as much as one at the top.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: where a requested launch mode is parsed: the one module allowed to compare it with mode names
RESOLVER = ROOT / "conformance" / "targets" / "runtime" / "launch_choice.py"
#: the targets, the suites that pick or skip by how a target runs its broker, the plugin and matrix
#: that record it, and the harness, judges and command line above them
SCANNED = tuple(ROOT / package for package in ("conformance", "chaos", "reports", "brokerconf"))
#: every launch mode's name a target or handle uses (`Target.launch_mode`, `BrokerHandle.launch`)
MODE_NAMES = frozenset({"auto", "process", "container", "in-process", "external"})
#: the names a launch mode is read under: the target's property, its request, a handle's field
LAUNCH_NAMES = frozenset({"launch", "launch_mode", "launch_requested"})


def reads_launch(node: ast.AST) -> bool:
    """``x.launch_mode``, ``launch``, ``getattr(x, "launch_mode", ...)``, ``x["launch"]`` or
    ``x.get("launch")``: a launch mode read from a target, a handle or their JSON."""
    if isinstance(node, ast.Attribute):
        return node.attr in LAUNCH_NAMES
    if isinstance(node, ast.Name):
        return node.id in LAUNCH_NAMES
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in LAUNCH_NAMES
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
        name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        keys = node.args[1:2] if name == "getattr" else node.args[:1] if name == "get" else []
        return any(isinstance(k, ast.Constant) and k.value in LAUNCH_NAMES for k in keys)
    return False


def mode_names_in(value: object) -> set[str]:
    """The mode names a value is or holds (a string; a tuple, list, set or dict's keys)."""
    if isinstance(value, str):
        return {value} & MODE_NAMES
    if isinstance(value, (tuple, list, set, frozenset, dict)):
        return {v for v in value if isinstance(v, str)} & MODE_NAMES
    return set()


class Scanned:
    """One module's source; a name it compares with is resolved from its module-level literals,
    else (given its dotted name) from the module itself (an imported or computed tuple)."""

    def __init__(self, source: str, dotted: str | None = None) -> None:
        self.tree = ast.parse(source)
        self.dotted = dotted
        self.literals: dict[str, object] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    self.literals[node.targets[0].id] = ast.literal_eval(node.value)
                except (ValueError, TypeError):  # not a literal: resolved from the module when asked
                    pass

    def value_of(self, node: ast.AST) -> object:
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError):
            pass
        if isinstance(node, ast.Name):
            if node.id in self.literals:
                return self.literals[node.id]
            if self.dotted is not None:
                return getattr(importlib.import_module(self.dotted), node.id, None)
        return None

    def launch_branches(self) -> list[str]:
        """``line: source`` of every comparison (or ``match``) of a launch mode with mode names."""
        found: list[tuple[int, str]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(reads_launch(o) for o in operands) and any(
                        mode_names_in(self.value_of(o)) for o in operands if not reads_launch(o)):
                    found.append((node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.Match) and reads_launch(node.subject):
                for case in node.cases:
                    if any(isinstance(c, ast.Constant) and c.value in MODE_NAMES for c in ast.walk(case.pattern)):
                        found.append((case.pattern.lineno,
                                      f"match {ast.unparse(node.subject)}: case {ast.unparse(case.pattern)}"))
        return [f"{line}: {text}" for line, text in sorted(found)]


def scanned_files() -> list[Path]:
    return [path for folder in SCANNED for path in sorted(folder.rglob("*.py")) if path != RESOLVER]


def test_no_module_but_the_resolver_branches_on_a_launch_mode():
    files = scanned_files()
    assert len(files) > 50, f"found only {len(files)} modules under {SCANNED}: wrong root?"
    wrong = []
    for path in files:
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        wrong += [f"{path.relative_to(ROOT)}:{line}"
                  for line in Scanned(path.read_text(encoding="utf-8"), dotted).launch_branches()]
    assert not wrong, (f"{len(wrong)} branches on a launch mode's name outside {RESOLVER.relative_to(ROOT)} (ask "
                       "the target's launch-mode object instead, declared with the mode in <target>/launch_modes.py):\n"
                       + "\n".join(wrong))


def test_the_scan_finds_every_shape_of_such_a_branch():
    # The check must be able to fail: the shapes the targets used to switch in, and near misses.
    source = '''
LOCAL = ("process", "in-process")
def run(self, target, handle, other):
    if self.launch_mode == "container":                     # 4
        pass
    if target.launch_mode not in LOCAL:                     # 6
        pass
    pid = handle.pid if handle.launch == "process" else None    # 8
    if getattr(target, "launch_mode", None) != "process":   # 9
        pass
    if "docker" if self.launch_requested == "container" else "x":   # 11
        pass
    match self.launch_mode:
        case "in-process":                                  # 14
            pass
    if launch not in ("auto", "process"):                   # 16
        pass
    if self.launch_mode == other or self._launch.faultable: # a variable, a trait: allowed
        pass
    if self.kind == "process":                              # not a launch mode: allowed
        pass
    return LAUNCHES[self.launch_mode].name                  # a lookup in the table: allowed
'''
    found = [line.split(":")[0] for line in Scanned(source).launch_branches()]
    assert found == ["4", "6", "8", "9", "11", "14", "16"]
