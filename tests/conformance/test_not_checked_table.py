"""scripts/not_checked.py --by-document: the counting of its table, on a toy catalogue (no suite
is collected here; the script's collection is what `scripts/not_checked.py` itself runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conformance.spec.catalogue import Statement, Uncatalogued

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "not_checked.py"


def _script():
    spec = importlib.util.spec_from_file_location("not_checked_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _statement(id_: str, document: str, kinds, not_observable: str = "", subject: str = "broker") -> Statement:
    return Statement(id_, document, "", "s", "p", frozenset(kinds), not_observable=not_observable, subject=subject)


def test_by_document_counts_catalogued_uncatalogued_checked_and_unobservable():
    catalogue = {s.id: s for s in [
        _statement("DOC-A-1", "a.md", ["reference", "activemq"]),
        _statement("DOC-A-2", "a.md", ["reference", "activemq"]),
        _statement("DOC-A-3", "a.md", ["activemq"], not_observable="OpenWire only"),
        _statement("DOC-A-4", "a.md", ["reference", "activemq"], subject="client"),
        _statement("DOC-A-5", "a.md", ["reference", "activemq"], subject="client"),
        _statement("DOC-B-1", "b.md", ["artemis"]),
    ]}
    uncatalogued = (Uncatalogued("a.md", "s", "a claim", "why not"),)
    checked = {("reference", "DOC-A-1"), ("activemq", "DOC-A-1"), ("activemq", "DOC-A-2"),
               ("activemq", "DOC-A-3"), ("reference", "DOC-B-1")}  # B-1 does not apply to reference
    table = _script().document_table(catalogue, {"reference": "reference", "activemq": "activemq"},
                                     checked, {"DOC-A-4"}, uncatalogued).splitlines()
    assert table[0] == ("| document | checkable | catalogued | % catalogued | checked: reference | "
                        "checked: activemq | checked: client statements | not observable |")
    # a.md: 5 catalogued + 1 uncatalogued = 6 checkable, 83 %; the brokers' columns count the broker
    # statements A-1, A-2 (A-3 is not observable, so not in a denominator even with a test; A-4,
    # A-5 are client statements, counted in their own column: one of two checked with a client)
    assert table[2] == "| a.md | 6 | 5 | 83% | 1/2 | 2/2 | 1/2 | 1 |"
    assert table[3] == "| b.md | 1 | 1 | 100% | 0/0 | 0/0 | 0/0 | 0 |"


def test_a_prefix_keeps_only_its_statements():
    catalogue = {s.id: s for s in [_statement("FT-X-1", "a.md", ["reference"]),
                                   _statement("NOB-X-1", "b.md", ["reference"])]}
    table = _script().document_table(catalogue, {"reference": "reference"}, set(), set(), (), prefix="FT-")
    assert [row.split(" | ")[0] for row in table.splitlines()[2:]] == ["| a.md"]
