"""The main job's report: the conformance matrix of the run (as `matrix_report` renders it) as
``index.html``, with the run's other artefacts listed, and ``results.json`` summarising the run.
Chaos experiments and the PySpark verdicts join this page as they land."""

from __future__ import annotations

import json
from pathlib import Path

from reports.render.matrix_report import render_matrix, write_matrix_report


def write_run_report(out_dir: Path, run_id: str, matrix: dict, seconds: float) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_matrix_report(out_dir, matrix)
    summary = {"run_id": run_id, "seconds": round(seconds, 1), "targets": matrix["targets"],
               "summary": matrix["summary"],
               "artefacts": {"matrix": "matrix.json", "junit": "junit.xml", "allure_results": "allure-results/"}}
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2))
    artefacts = ('<p>Run took {:.0f} s. Artefacts: <a href="matrix.json">matrix.json</a> · '
                 '<a href="junit.xml">junit.xml</a> · allure-results/ (<code>allure serve allure-results</code>)</p>'
                 ).format(seconds)
    index = out_dir / "index.html"
    index.write_text(render_matrix(matrix, title=f"brokerconf run {run_id}", preamble=artefacts))
    return index
