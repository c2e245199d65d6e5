"""Find branches on a kind's name in the source (issue 27: a kind is branched on only where it is
parsed). Used by tests/chaos/test_kind_dispatch.py (workload and nemesis kinds) and
tests/conformance/test_launch_mode_dispatch.py (launch modes); each says what counts as reading
its kind and which names are its kind's.

The scan reads the source with `ast`, so a comparison in a lazy branch counts as much as one at
the top. A name compared with is resolved from the module's literals, else (given the module's
dotted name) from the module itself, so an imported or computed tuple of names counts too.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]

Reads = Callable[[ast.AST], bool]


def names_in(value: object, names: frozenset[str]) -> set[str]:
    """The names of ``names`` a value is or holds (a string; a tuple, list, set or dict's keys)."""
    if isinstance(value, str):
        return {value} & names
    if isinstance(value, (tuple, list, set, frozenset, dict)):
        return {v for v in value if isinstance(v, str)} & names
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

    def branches(self, reads: Reads, names: frozenset[str]) -> list[str]:
        """``line: source`` of every comparison (or ``match``) of what ``reads`` recognises with one
        of ``names``, by line."""
        found: list[tuple[int, str]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(reads(o) for o in operands) and any(
                        names_in(self.value_of(o), names) for o in operands if not reads(o)):
                    found.append((node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.Match) and reads(node.subject):
                for case in node.cases:
                    if any(isinstance(c, ast.Constant) and c.value in names for c in ast.walk(case.pattern)):
                        found.append((case.pattern.lineno,
                                      f"match {ast.unparse(node.subject)}: case {ast.unparse(case.pattern)}"))
        return [f"{line}: {text}" for line, text in sorted(found)]


def branches_in_tree(files: list[Path], reads: Reads, names: frozenset[str]) -> list[str]:
    """``path:line: source`` of every such branch in ``files`` (paths relative to the repository)."""
    wrong = []
    for path in files:
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        wrong += [f"{path.relative_to(ROOT)}:{line}"
                  for line in Scanned(path.read_text(encoding="utf-8"), dotted).branches(reads, names)]
    return wrong
