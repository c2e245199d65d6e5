"""The main job's report: the conformance matrix of the run (as `matrix_report` renders it) as
``index.html``, with the run's other artefacts listed, and ``results.json`` summarising the run.
Chaos experiments and the PySpark verdicts join this page as they land."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from reports.render.matrix_report import render_matrix, write_matrix_report


def _chaos_html(verdicts: list[dict], out_dir: Path) -> str:
    if not verdicts:
        return ""
    rows = []
    for v in verdicts:
        # The first summary line repeats the experiment and its verdict: the columns show those.
        lines = [v["error"]] if v.get("error") else (v.get("summary") or [])[1:]
        detail = "<br>".join(html.escape(line) for line in lines)
        if v.get("report"):
            link = os.path.relpath(v["report"], out_dir)
            detail += f'<br><a href="{html.escape(link)}">timeline, plots and anomalies</a>'

        colour = {True: "#1b5e20", False: "#b71c1c"}.get(v.get("valid"), "#8d6e00")
        rows.append(f"<tr><td>{html.escape(v['experiment'])}</td><td>{html.escape(str(v.get('target', '')))}</td>"
                    f"<td style=\"color:{colour}\"><b>{html.escape(str(v.get('valid')))}</b></td><td>{detail}</td></tr>")
    return ("<h2>Chaos</h2><table><tr><th>experiment</th><th>target</th><th>valid</th><th>what the checkers found</th>"
            "</tr>" + "".join(rows) + "</table><p>Histories and verdicts: <code>chaos-*/</code> in this directory.</p>")


def write_run_report(out_dir: Path, run_id: str, matrix: dict, seconds: float, chaos: list[dict] | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_matrix_report(out_dir, matrix)
    summary = {"run_id": run_id, "seconds": round(seconds, 1), "targets": matrix["targets"],
               "summary": matrix["summary"], "chaos": chaos or [],
               "artefacts": {"matrix": "matrix.json", "junit": "junit.xml", "allure_results": "allure-results/"}}
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2))
    artefacts = ('<p>Run took {:.0f} s. Artefacts: <a href="matrix.json">matrix.json</a> · '
                 '<a href="junit.xml">junit.xml</a> · allure-results/ (<code>allure serve allure-results</code>)</p>'
                 ).format(seconds) + _chaos_html(chaos or [], out_dir)
    index = out_dir / "index.html"
    index.write_text(render_matrix(matrix, title=f"brokerconf run {run_id}", preamble=artefacts))
    return index
