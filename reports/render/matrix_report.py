"""The conformance matrix as a static HTML page: one row per catalogued statement (grouped by
document), one column per target and one per client subject (``client: <subject>``: the statements
about a client library, checked by exercising that client), each cell the merged outcome with its
reason and the tests behind it; above it, per column, how many applicable statements were checked
and passed."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

COLOURS = {
    "passed": ("#e8f5e9", "#1b5e20"),
    "failed": ("#ffebee", "#b71c1c"),
    "error": ("#fff3e0", "#e65100"),
    "known deviation": ("#fff8e1", "#8d6e00"),
    "not applicable": ("#f5f5f5", "#616161"),
    "not checked": ("#ffffff", "#9e9e9e"),
    # a statement of the other subject (a client's in a broker's column, or the reverse): nobody's gap
    "not a broker statement": ("#eef3f8", "#78909c"),
    "not a client statement": ("#eef3f8", "#78909c"),
}

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ddd;padding:.35em .5em;vertical-align:top;font-size:.9em}
th{background:#fafafa;position:sticky;top:0}
td.cell{min-width:9em}
.doc{background:#eceff1;font-weight:bold}
.para{color:#555;font-size:.85em}
small{color:#666}
details summary{cursor:pointer}
"""


def _e(value) -> str:
    return html.escape(str(value))


def _cell(cell: dict) -> str:
    outcome = cell["outcome"]
    background, colour = COLOURS.get(outcome, ("#fff", "#000"))
    tests = "".join(
        f"<li><code>{_e(t['nodeid'].split('::')[-1])}</code> {_e(t['outcome'])}"
        f"{' (against ' + _e(t['target']) + ')' if t.get('target') else ''}"
        f"{' — ' + _e(t['reason']) if t['reason'] else ''}</li>" for t in cell.get("tests", []))
    detail = f"<details><summary>{len(cell['tests'])} test(s)</summary><ul>{tests}</ul></details>" if tests else ""
    reason = f"<br><small>{_e(cell['reason'][:300])}</small>" if cell.get("reason") else ""
    return (f'<td class="cell" style="background:{background};color:{colour}">'
            f"<b>{_e(outcome)}</b>{reason}{detail}</td>")


def render_matrix(data: dict, title: str = "brokerconf conformance matrix", preamble: str = "") -> str:
    """The page; ``preamble`` is trusted HTML placed under the title (links to a run's artefacts)."""
    targets = list(data["targets"])
    clients = data.get("clients", {})  # older matrices have no client columns
    summary_rows = []
    for name in targets:
        info, s = data["targets"][name], data["summary"][name]
        status = "runs here" if info["available"] else f"not available: {info['reason']}"
        if info.get("start_error"):
            status = f"could not start: {info['start_error'].splitlines()[0]}"
        summary_rows.append(
            f"<tr><td><b>{_e(name)}</b></td><td>{_e(info['kind'])}</td><td>{_e(info['launch'])}</td>"
            f"<td>{_e(status)}</td><td>{s['applicable']} of {s['listed']}</td><td>{s['checked']}</td>"
            f"<td>{s['passed']}</td><td>{s['failed']}</td><td>{s['known_deviation']}</td><td>{s['not_checked']}</td></tr>")
    for name, info in clients.items():
        s = data["summary"][name]
        summary_rows.append(
            f"<tr><td><b>{_e(name)}</b></td><td>client</td><td></td><td>against {_e(', '.join(info['targets']))}</td>"
            f"<td>{s['applicable']} client statements of its documents</td><td>{s['checked']}</td><td>{s['passed']}</td>"
            f"<td>{s['failed']}</td><td>{s['known_deviation']}</td><td>{s['not_checked']}</td></tr>")
    columns = [*targets, *clients]
    by_document: dict[str, list[str]] = defaultdict(list)
    for spec_id, entry in data["catalogue"].items():
        by_document[entry["document"]].append(spec_id)
    rows = []
    for document, ids in by_document.items():
        rows.append(f'<tr><td class="doc" colspan="{len(columns) + 1}">{_e(document)}</td></tr>')
        for spec_id in ids:
            entry = data["catalogue"][spec_id]
            note = f"<br><small>note: {_e(entry['note'])}</small>" if entry.get("note") else ""
            cells = "".join(_cell(data["matrix"][t][spec_id]) for t in columns)
            rows.append(f"<tr><td><code>{_e(spec_id)}</code> <small>§ {_e(entry['section'])}</small>"
                        f'<div class="para">{_e(entry["paraphrase"])}</div>{note}</td>{cells}</tr>')
    head = "".join(f"<th>{_e(t)}</th>" for t in columns)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{_e(title)}</title><style>{_STYLE}</style></head>
<body><h1>{_e(title)}</h1><p>generated {_e(data.get('generated_at', ''))}</p>{preamble}
<h2>Targets and clients</h2>
<p>A statement about a client library (a failover option, a load-balancing policy) is booked under the client a
test exercised, never under the broker it ran against: broker columns show it as not a broker statement.</p>
<table><tr><th>target</th><th>kind</th><th>launch</th><th>status</th><th>applicable statements</th><th>checked</th>
<th>passed</th><th>failed</th><th>known deviations</th><th>not checked</th></tr>{''.join(summary_rows)}</table>
<h2>Statements</h2>
<table><tr><th>statement</th>{head}</tr>{''.join(rows)}</table>
</body></html>"""


def write_matrix_report(out_dir: Path, data: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "matrix.html"
    path.write_text(render_matrix(data))
    return path
