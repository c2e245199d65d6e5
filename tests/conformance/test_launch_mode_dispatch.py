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

The scan (tests/branch_scan.py) reads the source with `ast`, so a comparison in a lazy branch or
through a ``getattr`` counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.branch_scan import ROOT, Scanned, branches_in_tree
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


def scanned_files() -> list[Path]:
    return [path for folder in SCANNED for path in sorted(folder.rglob("*.py")) if path != RESOLVER]


def test_no_module_but_the_resolver_branches_on_a_launch_mode():
    files = scanned_files()
    assert len(files) > 50, f"found only {len(files)} modules under {SCANNED}: wrong root?"
    wrong = branches_in_tree(files, reads_launch, MODE_NAMES)
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
    found = [line.split(":")[0] for line in Scanned(source).branches(reads_launch, MODE_NAMES)]
    assert found == ["4", "6", "8", "9", "11", "14", "16"]
