"""The main job's report: the conformance matrix of the run (as `matrix_report` renders it) as
``index.html``, with the run's other artefacts listed, and ``results.json`` summarising the run:
the chaos experiments (each run's verdict.json, reports/judge.py), then the verdicts the Spark
stage reached on the same histories and its comparison across targets
(reports/pipeline/main_job.py), naming the engine that judged; then the client statements per
client and the measured reconnect waits side by side (reports/client_table.py)."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from reports.client_table import ClientTableError, read_junit, statement_table, wait_table
from reports.render.clients_section import clients_html
from reports.render.matrix_report import render_matrix, write_matrix_report


def _shown_valid(verdict: dict) -> str:
    """The verdict column: the run's verdict, or for an experiment the stage settled without a run
    (brokerconf/chaos_stage.py, ``skipped``) that it was not applicable (the reason follows)."""
    return "not applicable" if verdict.get("skipped") else str(verdict.get("valid"))


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
        # the seed the run's schedule was drawn from: `brokerconf chaos run FILE --seed N` replays it
        seed = f"<br>seed {html.escape(str(v['seed']))}" if v.get("seed") is not None else ""
        rows.append(f"<tr><td>{html.escape(v['experiment'])}{seed}</td><td>{html.escape(str(v.get('target', '')))}</td>"
                    f"<td style=\"color:{colour}\"><b>{html.escape(_shown_valid(v))}</b></td><td>{detail}</td></tr>")
    return ("<h2>Chaos</h2><p>Each run judged from its history as it ended (<code>verdict.json</code>, "
            "reports/judge.py); the Spark verdicts on the same histories follow.</p>"
            "<table><tr><th>experiment</th><th>target</th><th>valid</th><th>what the checkers found</th>"
            "</tr>" + "".join(rows) + "</table><p>Histories and verdicts: <code>chaos-*/</code> in this directory.</p>")


_COLOURS = {True: "#1b5e20", False: "#b71c1c"}


def _valid_html(valid) -> str:
    word = {True: "true", False: "false"}.get(valid, str(valid))
    return f'<b style="color:{_COLOURS.get(valid, "#8d6e00")}">{html.escape(word)}</b>'


def _spark_html(stage: dict | None) -> str:
    if not stage:
        return ""
    e = html.escape
    head = (f"<h2>Chaos verdicts judged by Spark</h2><p>Engine: <b>{e(stage['engine'])}</b> on <code>"
            f"{e(stage['master'])}</code> (an embedded local session), {len(stage['histories'])} histories in "
            f"{stage.get('seconds', 0):.0f} s; every result in <code>{e(stage['dir'])}/</code> "
            "(<code>verdicts.json</code>, Parquet tables).</p>")
    if stage.get("error"):
        head += f'<p style="color:#b71c1c">The Spark stage did not finish: {e(stage["error"])}</p>'
    head += "".join(f'<p class="note">{e(note)}</p>' for note in stage.get("notes") or [])
    rows = []
    for v in stage.get("verdicts") or []:
        checks = "<br>".join(f"{e(name)}: {_valid_html(c['valid'])}" + (f" - {e(c['reason'])}" if c["reason"] and c["valid"] is not True else "")
                             for name, c in sorted(v["checks"].items()))
        # each measurement in its own words (reports/pipeline/main_job.py, `_compact`)
        measured = "<br>".join(f"{e(name)}: " + "; ".join(e(line) for line in lines)
                               for name, lines in (v.get("measurements") or {}).items() if lines)
        rows.append(f"<tr><td>{e(v['run'])}</td><td>{e(v['target'])}</td><td>{_valid_html(v['valid'])}</td>"
                    f"<td>{checks}</td><td>{v['anomalies']}</td><td><small>{measured}</small></td></tr>")
    table = ("<table><tr><th>run</th><th>target</th><th>valid</th><th>checks</th><th>anomalous messages</th>"
             "<th>measurements (beside the verdict)</th></tr>" + "".join(rows) + "</table>") if rows else ""
    comparison = stage.get("comparison")
    if comparison:
        targets = comparison["targets"]
        body = "".join(f"<tr><td><code>{e(name)}</code></td>"
                       + "".join(f"<td>{_valid_html(cells[t]) if t in cells else '-'}</td>" for t in targets) + "</tr>"
                       for name, cells in sorted(comparison["checkers"].items()))
        table += ("<h3>Across targets (Spark SQL)</h3><p>Each cell merges every run of the target (false beats "
                  f'unknown beats true); the page <a href="{e(comparison["page"])}">{e(comparison["page"])}</a> '
                  "adds the conformance matrix beside it.</p><table><tr><th>checker</th>"
                  + "".join(f"<th>{e(t)}</th>" for t in targets) + "</tr>" + body + "</table>")
    return head + table


def _times_html(times: dict | None) -> str:
    """Where the run's time went: each stage's wall time, then each target's in the suites (targets
    run side by side on the workers, so their wall times overlap) and the costliest modules."""
    if not times:
        return ""
    e = html.escape
    stages = "".join(f"<tr><td>{e(s['stage'])}</td><td>{s['seconds']:.0f} s</td></tr>" for s in times["stages"])
    # stages that ran side by side overlap: the total is the run's measured wall time, not a sum
    total = times.get("total_seconds", sum(s["seconds"] for s in times["stages"]))
    out = ("<h2>Time</h2><table><tr><th>stage</th><th>wall time</th></tr>" + stages
           + f"<tr><td><b>total, set-up included</b></td><td><b>{total:.0f} s</b></td></tr></table>")
    speed = times.get("machine_speed") or {}
    if "start_seconds" in speed:  # brokerconf/machine_speed.py: the same work's CPU time, before and after
        after = f", {speed['end_seconds']:.2f} s after it" if "end_seconds" in speed else ""
        out += (f"<p>Machine speed: a fixed piece of work took {speed['start_seconds']:.2f} s of CPU before the run"
                f"{after} (more is slower). Compare two runs' times only where these are alike.</p>")
    if times.get("targets"):
        rows = "".join(f"<tr><td>{e(t)}</td><td>{span['wall_seconds']:.0f} s</td><td>{span['test_seconds']:.0f} s</td></tr>"
                       for t, span in times["targets"].items())
        out += (f"<p>Conformance suites on {times.get('workers', 1)} workers, chaos experiments "
                f"{times.get('chaos_parallel', 1)} at a time. A target's wall time runs from its first test's start "
                "to its last's end; its test time sums its tests' own times.</p><table><tr><th>target</th>"
                "<th>wall time</th><th>test time</th></tr>" + rows + "</table>")
    modules = times.get("modules") or {}
    if modules:
        costly = sorted(modules.items(), key=lambda item: -sum(item[1].values()))[:15]
        targets = sorted({t for _, per in costly for t in per})
        rows = "".join(f"<tr><td><code>{e(m)}</code></td>" + "".join(
            f"<td>{per[t]:.0f} s</td>" if t in per else "<td>-</td>" for t in targets) + "</tr>" for m, per in costly)
        out += ("<h3>Costliest suite modules (test time)</h3><table><tr><th>module</th>"
                + "".join(f"<th>{e(t)}</th>" for t in targets) + "</tr>" + rows + "</table>")
    return out


def _clients_html(out_dir: Path, matrix: dict) -> str:
    """The Clients section (reports/client_table.py) from the matrix and the run's junit.xml; none
    for a matrix without client columns."""
    if not matrix.get("clients"):
        return ""
    junit, problem, measurements = out_dir / "junit.xml", "", []
    try:
        measurements = read_junit(junit)
    except ClientTableError as exc:
        problem = f"No reconnect gaps: {exc}"
    return clients_html(statement_table(matrix), wait_table(matrix, measurements), junit_problem=problem)


def write_run_report(out_dir: Path, run_id: str, matrix: dict, seconds: float, chaos: list[dict] | None = None,
                     spark: dict | None = None, times: dict | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_matrix_report(out_dir, matrix)
    summary = {"run_id": run_id, "seconds": round(seconds, 1), "targets": matrix["targets"],
               "summary": matrix["summary"], "chaos": chaos or [], "spark": spark, "times": times,
               "artefacts": {"matrix": "matrix.json", "junit": "junit.xml", "allure_results": "allure-results/"}}
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2))
    artefacts = (('<p>Run took {:.0f} s. Artefacts: <a href="matrix.json">matrix.json</a> · '
                  '<a href="junit.xml">junit.xml</a> · allure-results/ (<code>allure serve allure-results</code>)</p>'
                  ).format(seconds) + _times_html(times) + _chaos_html(chaos or [], out_dir) + _spark_html(spark)
                 + _clients_html(out_dir, matrix))
    index = out_dir / "index.html"
    index.write_text(render_matrix(matrix, title=f"brokerconf run {run_id}", preamble=artefacts))
    return index
