"""The [workload] and [[nemesis]] kinds are branched on in one place, the experiment file's parser
(chaos/experiment_file.py), which declares what each kind means (`WORKLOAD_KINDS`, `FAULT_KINDS`)
(issue 27, "Done when": no branch on ``workload.kind`` or ``nemesis.kind`` outside the one place
each is parsed).

Everywhere else a section is asked for its traits (``fans_out``, ``grouped``, ``plane``,
``heal_step``, ``fault_params()``): comparing a kind with a kind's name, or with a collection of
such names, declares a second time what that kind means, and the next kind added would have to be
found there too. The scan reads the source with `ast`, so a comparison in a lazy branch counts as
much as one at the top.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

from chaos.experiment_file import NemesisSection, WorkloadSection

ROOT = Path(__file__).resolve().parents[2]
#: where the kinds are parsed and declared: the one module allowed to branch on their names
PARSER = ROOT / "chaos" / "experiment_file.py"
#: the packages that read experiments: the harness, the judges, the command line
SCANNED = ("chaos", "reports", "brokerconf")
#: every workload and nemesis kind's name, as the parser accepts them (disjoint from the topology's:
#: single, shared-store, ...)
KIND_NAMES = frozenset(get_args(WorkloadSection.model_fields["kind"].annotation)
                       + get_args(NemesisSection.model_fields["kind"].annotation))


def reads_kind(node: ast.AST) -> bool:
    """``x.kind``, ``x["kind"]`` or ``x.get("kind")``: a kind read from a section or its JSON."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"
    return False


def kind_names_in(value: object) -> set[str]:
    """The kind names a value is or holds (a string; a tuple, list, set or dict's keys)."""
    if isinstance(value, str):
        return {value} & KIND_NAMES
    if isinstance(value, (tuple, list, set, frozenset, dict)):
        return {v for v in value if isinstance(v, str)} & KIND_NAMES
    return set()


class Scanned:
    """One module's source: its module-level literals, and (given its dotted name) the module
    itself, to resolve a name it imported (``PROXY_FAULTS``) or computed (``frozenset(...) - {...}``)."""

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
        """What an operand stands for, when the source says: a literal, or a module-level name."""
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError):
            pass
        if isinstance(node, ast.Name):
            if node.id in self.literals:
                return self.literals[node.id]
            if self.dotted is not None:
                return getattr(importlib.import_module(self.dotted), node.id, None)
        if isinstance(node, ast.Attribute):
            owner = self.value_of(node.value)
            return getattr(owner, node.attr, None) if owner is not None else None
        return None

    def kind_branches(self) -> list[str]:
        """``line: source`` of every comparison (or ``match``) of a kind with kind names, by line."""
        found: list[tuple[int, str]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(reads_kind(o) for o in operands) and any(
                        kind_names_in(self.value_of(o)) for o in operands if not reads_kind(o)):
                    found.append((node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.Match) and reads_kind(node.subject):
                for case in node.cases:
                    if any(isinstance(c, ast.Constant) and c.value in KIND_NAMES for c in ast.walk(case.pattern)):
                        found.append((case.pattern.lineno,
                                      f"match {ast.unparse(node.subject)}: case {ast.unparse(case.pattern)}"))
        return [f"{line}: {text}" for line, text in sorted(found)]


def scanned_files() -> list[Path]:
    return [path for package in SCANNED for path in sorted((ROOT / package).rglob("*.py")) if path != PARSER]


def test_no_module_but_the_parser_branches_on_a_workload_or_nemesis_kind():
    files = scanned_files()
    assert len(files) > 50, f"found only {len(files)} modules under {ROOT}: wrong root?"
    wrong = []
    for path in files:
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        wrong += [f"{path.relative_to(ROOT)}:{line}"
                  for line in Scanned(path.read_text(encoding="utf-8"), dotted).kind_branches()]
    assert not wrong, ("branches on a workload or nemesis kind's name outside chaos/experiment_file.py (ask the "
                       "section for the trait, declared with the kind there):\n" + "\n".join(wrong))


def test_the_scan_finds_every_shape_of_such_a_branch():
    # The check must be able to fail: the shapes the harness used to switch in, and near misses.
    source = '''
FAULTS = ("kill", "stop")
def run(w, n, record, e, other):
    if w.kind == "topic":                                  # 4
        pass
    if n.kind in FAULTS:                                   # 6
        pass
    topic = (record.get("workload") or {}).get("kind") == "topic"   # 8
    if "lock-loss" != e["kind"]:                           # 9
        pass
    wanted = "topic://" if w.kind == "topic" else "queue://"   # 11
    match n.kind:
        case "pause" | "resume":                           # 13
            pass
    if w.kind == "single":                                 # a topology's kind: not these sections'
        pass
    if w.kind == other or n.plane is FaultPlane.PROXY:     # a variable, a trait: allowed
        pass
    return FAULT_KINDS[n.kind].heal                        # a lookup in the table: allowed
'''
    found = [line.split(":")[0] for line in Scanned(source).kind_branches()]
    assert found == ["4", "6", "8", "9", "11", "13"]


def test_a_name_imported_or_computed_is_resolved_from_the_module(monkeypatch):
    # `n.kind in STOPPING` with STOPPING = frozenset(PROCESS_FAULTS) - {"pause"} (exit_watch.py had it)
    module = SimpleNamespace(STOPPING=frozenset({"kill", "stop"}))
    monkeypatch.setattr(importlib, "import_module", lambda name: module)
    source = "STOPPING = frozenset(PROCESS_FAULTS) - {'pause'}\nstops = [n for n in x if n.kind in STOPPING]\n"
    assert Scanned(source, "planted").kind_branches() == ["2: n.kind in STOPPING"]
