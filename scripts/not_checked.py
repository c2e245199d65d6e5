"""Which catalogued statements no suite test checks, per target, without running anything.

    .venv/bin/python scripts/not_checked.py [--prefix FT-] [--target reference --target activemq ...]
    .venv/bin/python scripts/not_checked.py --by-document     # a markdown table, one row per document
    .venv/bin/python scripts/not_checked.py --by-document --update-readme   # ... written into README.md

Collects suites for the targets (as `brokerconf suite` would run them) and lists, per
target, the statements that apply to its kind, carry no not_observable reason, and are named by
no collected test's @pytest.mark.spec for that target: what the matrix would show "not checked"
even if every test ran. (A run's matrix adds the tests that did not get to a verdict.)

Statements about a client (catalogue ``subject = "client"``) are not a broker's: they are listed
per client subject (the tests' @pytest.mark.client_subject), over the documents that client's
tests check, and once more for those no test checks with any client.

``--by-document`` prints instead, per document, how far it is catalogued and checked: its checkable
statements (catalogued statements plus its ``[[uncatalogued]]`` rows), how many are catalogued and
what share, and per target how many of the broker statements that apply to it are checked by at least
one collected test for that target, out of those a test could check (the ones without a not_observable
reason); the client statements (checked by a test with any client) and the not_observable ones
have columns of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.plugin import STATE, _marker_args, client_subject  # noqa: E402
from conformance.spec.catalogue import load_uncatalogued  # noqa: E402


class _Collected:
    def __init__(self) -> None:
        self.checked: set[tuple[str, str]] = set()
        #: (client subject, spec) of the client statements tests check with that client
        self.client_checked: set[tuple[str, str]] = set()
        self.state = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.state = session.config.stash[STATE]
        for item in session.items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if isinstance(params.get("target_name"), str):
                broker_part = _marker_args(item, "broker_part")
                for spec in _marker_args(item, "spec"):
                    if self.state.catalogue[spec].about_client and spec not in broker_part:
                        self.client_checked.add((client_subject(item), spec))
                    else:
                        self.checked.add((params["target_name"], spec))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default="", help="only statements whose ID starts with this (e.g. FT-)")
    parser.add_argument("--target", action="append", dest="targets", metavar="NAME",
                        help="a target to list (repeatable; default reference, activemq, artemis)")
    parser.add_argument("--by-document", action="store_true",
                        help="a markdown table per document: checkable, catalogued, %% catalogued, checked per target")
    parser.add_argument("--update-readme", action="store_true",
                        help="with --by-document: write the table into README.md between its markers "
                             "(tests/test_readme_statement_table.py fails while the README's table is stale)")
    args = parser.parse_args(argv)
    if args.update_readme and (not args.by_document or args.prefix or args.targets):
        parser.error("--update-readme writes the README's whole table: use it with --by-document alone")
    targets = args.targets or ["reference", "activemq", "artemis"]
    collected = _Collected()
    command = [str(ROOT / "suites"), "--collect-only", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", "--allow-unavailable", f"--rootdir={ROOT}"]
    for target in targets:
        command += ["--target", target]
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = pytest.main(command, plugins=[collected])
    if collected.state is None or status not in (0, 5):
        print(output.getvalue()[-3000:], file=sys.stderr)
        print(f"not_checked: collecting the suites failed (pytest exit {status})", file=sys.stderr)
        return 2 if status == 4 else 1
    state = collected.state
    if args.by_document:
        kinds = {target: state.targets[target].kind for target in targets}
        table = document_table(state.catalogue, kinds, collected.checked,
                               {spec for _, spec in collected.client_checked},
                               () if args.prefix else load_uncatalogued(), args.prefix)
        if args.update_readme:
            README.write_text(with_readme_table(README.read_text(), table))
            print(f"not_checked: wrote the table into {README}")
        print(table)
        return 0
    for target in targets:
        kind = state.targets[target].kind
        missing = [spec for spec, statement in state.catalogue.items()
                   if spec.startswith(args.prefix) and statement.applies(kind) and not statement.not_observable
                   and not statement.about_client and (target, spec) not in collected.checked]
        print(f"{target}: {len(missing)} not checked" + (": " + " ".join(missing) if missing else ""))
    # a client statement some client can observe: no not_observable reason, or a client observable_with
    about_client = {spec: s for spec, s in state.catalogue.items()
                    if s.about_client and spec.startswith(args.prefix) and (not s.not_observable or s.observable_with)}
    for subject in sorted({subject for subject, _ in collected.client_checked}):
        documents = {state.catalogue[spec].document for who, spec in collected.client_checked if who == subject}
        missing = [spec for spec, s in about_client.items()
                   if s.document in documents and not s.not_observable_by(subject)
                   and (subject, spec) not in collected.client_checked]
        print(f"client: {subject}: {len(missing)} not checked" + (": " + " ".join(missing) if missing else ""))
    unchecked = [spec for spec in about_client if not any(s == spec for _, s in collected.client_checked)]
    print(f"clients: {len(unchecked)} client statements no test checks with any client"
          + (": " + " ".join(unchecked) if unchecked else ""))
    return 0


#: the README's copy of the ``--by-document`` table sits between these two lines
README = ROOT / "README.md"
TABLE_START, TABLE_END = "<!-- not_checked --by-document: START -->", "<!-- not_checked --by-document: END -->"


def _table_span(readme: str) -> tuple[int, int]:
    """Where the README's table lies (between the markers); ValueError when a marker is missing."""
    return readme.index(TABLE_START) + len(TABLE_START), readme.index(TABLE_END)


def readme_table(readme: str) -> str:
    """The table the README shows."""
    start, end = _table_span(readme)
    return readme[start:end].strip("\n")


def with_readme_table(readme: str, table: str) -> str:
    """``readme`` with ``table`` between the markers in place of what was there."""
    start, end = _table_span(readme)
    return readme[:start] + "\n" + table + "\n" + readme[end:]


def document_table(catalogue, kinds: dict[str, str], checked: set[tuple[str, str]], client_checked: set[str] = frozenset(),
                   uncatalogued=(), prefix: str = "") -> str:
    """The ``--by-document`` table (markdown), one row per catalogue document, in catalogue order.
    ``kinds``: target name -> kind, in column order; ``checked``: (target, statement ID) pairs some
    collected test checks on that broker; ``client_checked``: the client statements some collected
    test checks with a client; ``uncatalogued``: the documents' `Uncatalogued` rows (none with a
    prefix, since they have no ID to match it)."""
    statements = [s for spec, s in catalogue.items() if spec.startswith(prefix)]
    documents = list(dict.fromkeys([s.document for s in statements] + [u.document for u in uncatalogued]))
    targets = list(kinds)
    header = ["document", "checkable", "catalogued", "% catalogued",
              *[f"checked: {t}" for t in targets], "checked: client statements", "not observable"]
    rows = [header, ["---"] * len(header)]
    for document in documents:
        mine = [s for s in statements if s.document == document]
        open_rows = sum(1 for u in uncatalogued if u.document == document)
        checkable = len(mine) + open_rows
        share = f"{100 * len(mine) / checkable:.0f}%" if checkable else "-"
        # a client statement some client's test checks, or a real client observes (observable_with),
        # counts as observable, even where its not_observable reason says why brokerconf's own
        # clients cannot see it
        observable = [s for s in mine if not s.not_observable or s.id in client_checked or s.observable_with]
        cells = []
        for target in targets:
            testable = [s for s in observable if not s.about_client and s.applies(kinds[target])]
            done = sum(1 for s in testable if (target, s.id) in checked)
            cells.append(f"{done}/{len(testable)}")
        about_client = [s for s in observable if s.about_client]
        cells.append(f"{sum(1 for s in about_client if s.id in client_checked)}/{len(about_client)}")
        unobservable = len(mine) - len(observable)
        rows.append([document, str(checkable), str(len(mine)), share, *cells, str(unobservable)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)

if __name__ == "__main__":
    sys.exit(main())
