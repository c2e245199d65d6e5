"""The [workload] and [[nemesis]] kinds are branched on in one place, the experiment file's parser
(chaos/experiment_file.py), which declares what each kind means (`WORKLOAD_KINDS`, `FAULT_KINDS`)
(issue 27, "Done when": no branch on ``workload.kind`` or ``nemesis.kind`` outside the one place
each is parsed).

Everywhere else a section is asked for its traits (``fans_out``, ``grouped``, ``plane``,
``heal_step``, ``fault_params()``): comparing a kind with a kind's name, or with a collection of
such names, declares a second time what that kind means, and the next kind added would have to be
found there too. The scan (tests/branch_scan.py) reads the source with `ast`, so a comparison in a
lazy branch counts as much as one at the top.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

from chaos.experiment_file import NemesisSection, WorkloadSection
from tests.branch_scan import ROOT, Scanned, branches_in_tree
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


def scanned_files() -> list[Path]:
    return [path for package in SCANNED for path in sorted((ROOT / package).rglob("*.py")) if path != PARSER]


def test_no_module_but_the_parser_branches_on_a_workload_or_nemesis_kind():
    files = scanned_files()
    assert len(files) > 50, f"found only {len(files)} modules under {ROOT}: wrong root?"
    wrong = branches_in_tree(files, reads_kind, KIND_NAMES)
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
    found = [line.split(":")[0] for line in Scanned(source).branches(reads_kind, KIND_NAMES)]
    assert found == ["4", "6", "8", "9", "11", "13"]


def test_a_name_imported_or_computed_is_resolved_from_the_module(monkeypatch):
    # `n.kind in STOPPING` with STOPPING = frozenset(PROCESS_FAULTS) - {"pause"} (exit_watch.py had it)
    module = SimpleNamespace(STOPPING=frozenset({"kill", "stop"}))
    monkeypatch.setattr(importlib, "import_module", lambda name: module)
    source = "STOPPING = frozenset(PROCESS_FAULTS) - {'pause'}\nstops = [n for n in x if n.kind in STOPPING]\n"
    assert Scanned(source, "planted").branches(reads_kind, KIND_NAMES) == ["2: n.kind in STOPPING"]
