"""Renders a main-job run (smoke checks per target, benchmark numbers if any) as JSON and a
static HTML page. The PySpark pipeline and the full reports come with later work; this page is
the run's human-readable summary."""

from __future__ import annotations

import html
import json
from pathlib import Path

_COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "error": "#ef6c00", "not applicable": "#757575"}


def write_run_report(out_dir: Path, run: dict) -> tuple[Path, Path]:
    """`run` = {"run_id", "started", "targets": {name: {"status", "reason", "checks": [...]}}}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(run, indent=2, default=str))
    html_path = out_dir / "index.html"
    html_path.write_text(_render(run))
    return json_path, html_path


def _render(run: dict) -> str:
    targets = run["targets"]
    checks: dict[str, tuple[str, str]] = {}
    for t in targets.values():
        for c in t.get("checks", []):
            checks.setdefault(c["spec_id"], (c["check"], c["spec_id"]))
    head = "".join(f"<th>{html.escape(name)}</th>" for name in targets)
    rows = []
    for spec_id, (title, _) in checks.items():
        cells = []
        for t in targets.values():
            found = next((c for c in t.get("checks", []) if c["spec_id"] == spec_id), None)
            if found is None:
                outcome, detail = "not applicable", t.get("reason") or "not run"
            else:
                outcome, detail = found["outcome"], found["detail"]
            cells.append(
                f'<td style="color:{_COLOURS.get(outcome, "#000")}" title="{html.escape(detail)}">'
                f"<b>{html.escape(outcome)}</b><br><small>{html.escape(detail)}</small></td>"
            )
        rows.append(f"<tr><td><code>{html.escape(spec_id)}</code><br>{html.escape(title)}</td>{''.join(cells)}</tr>")
    status = "".join(
        f"<li><b>{html.escape(name)}</b>: {html.escape(t['status'])}"
        f"{' — ' + html.escape(t['reason']) if t.get('reason') else ''}</li>"
        for name, t in targets.items()
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>brokerconf run {html.escape(run['run_id'])}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.4em;vertical-align:top}}</style>
</head><body><h1>brokerconf run {html.escape(run['run_id'])}</h1><p>started {html.escape(str(run['started']))}</p>
<h2>Targets</h2><ul>{status}</ul>
<h2>Smoke checks</h2><table><tr><th>rule</th>{head}</tr>{''.join(rows)}</table>
</body></html>"""
