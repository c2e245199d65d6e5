"""The "Clients" section of the main job's report: reports/client_table.py's two tables (client
statements x clients; reconnect waits side by side) as HTML, every text from the run escaped."""

from __future__ import annotations

import html

from reports.client_table import NOT_MEASURED, StatementTable, WaitTable, options_text, wait_cell_texts, waits_text
from reports.render.matrix_report import COLOURS


def _e(value) -> str:
    return html.escape(str(value))


def _outcome_cell(outcome: str, reason: str) -> str:
    background, colour = COLOURS.get(outcome, ("#fff", "#000"))
    detail = f"<br><small>{_e(reason[:300])}</small>" if reason and outcome != "passed" else ""
    return f'<td style="background:{background};color:{colour}"><b>{_e(outcome)}</b>{detail}</td>'


def _statements_html(table: StatementTable) -> str:
    if not table.columns:
        return "<p>The matrix has no client columns: no test exercised a client library in this run.</p>"
    head = "".join(f"<th>{_e(subject)}</th>" for subject in table.columns)
    rows = "".join(f"<tr><td><code>{_e(spec_id)}</code></td><td><small>{_e(title)}</small></td>"
                   + "".join(_outcome_cell(*cells[s]) for s in table.columns) + "</tr>"
                   for spec_id, title, cells in table.rows)
    return f"<table><tr><th>statement</th><th>section</th>{head}</tr>{rows}</table>"


def _gap_cell(texts: list[str]) -> str:
    unmeasured = all(text.startswith(NOT_MEASURED) for text in texts)
    style = ' style="color:#9e9e9e"' if unmeasured else ""
    return f"<td{style}>" + "<br>".join(_e(text) for text in texts) + "</td>"


def _waits_html(table: WaitTable) -> str:
    head = "".join(f"<th>{_e(subject)}<br><small>measured gaps (ms)</small></th>" for subject in table.columns)
    rows = []
    for row in table.rows:
        waits = _e(waits_text(row)) if row.waits_ms else f'<span style="color:#9e9e9e">{_e(waits_text(row))}</span>'
        rows.append(f"<tr><td>{_e(row.option_set.name)}</td><td><code>{_e(options_text(row.option_set))}</code></td>"
                    f"<td>{_e(', '.join(row.statements) or '-')}</td><td>{waits}</td>"
                    + "".join(_gap_cell(wait_cell_texts(row, s)) for s in table.columns) + "</tr>")
    out = (f"<table><tr><th>option set</th><th>options</th><th>statements</th><th>waits the options imply (ms)</th>"
           f"{head}</tr>{''.join(rows)}</table>")
    if table.unplaced:
        out += (f"<p>{len(table.unplaced)} test case(s) recorded gaps without a schedule (a run older than the "
                f"schedule property), not placed: {_e(', '.join(table.unplaced))}</p>")
    return out


def clients_html(statements: StatementTable, waits: WaitTable, *, junit_problem: str = "") -> str:
    """The section; ``junit_problem`` says why the run's junit.xml gave no measurements (missing,
    unreadable), shown above the waits table."""
    problem = f'<p style="color:#b71c1c">{_e(junit_problem)}</p>' if junit_problem else ""
    return ("<h2>Clients</h2><p>The statements about client libraries, per client the run exercised "
            "(the matrix's client columns; <code>brokerconf clients DIR</code> prints the same tables as Markdown).</p>"
            + _statements_html(statements)
            + "<h3>Reconnect waits side by side</h3><p>Gaps between a client's reconnect attempts after it lost its "
              "broker (loss to attempt 1, then attempt k to k+1), as the reconnect-wait tests recorded them in "
              "<code>junit.xml</code> (whole ms); one line per test, in brackets the statements, target and "
              "where the attempts were timed where a client's series differ in those, and the outcome where the "
              "test did not pass.</p>"
            + problem + _waits_html(waits))
