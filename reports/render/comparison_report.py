"""The comparison of implementations as a static HTML page: target x spec ID and target x checker,
coloured, from the ``comparison.json`` that `reports.pipeline.compare.write` produces, with each
conformance matrix rendered beside it (`matrix_report.render_matrix`) and linked.

Each cell shows the merged outcome; hovering it (an HTML ``title``, no script) and the row's
details list what every run said, so a merged "failed" can be traced to the run that failed.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from reports.render.matrix_report import COLOURS as SPEC_COLOURS
from reports.render.matrix_report import render_matrix

CHECKER_COLOURS = {"true": ("#e8f5e9", "#1b5e20"), "false": ("#ffebee", "#b71c1c"),
                   "unknown": ("#fff8e1", "#8d6e00")}
MISSING = ("#fafafa", "#9e9e9e")

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.6em 0}
td,th{border:1px solid #ddd;padding:.3em .5em;vertical-align:top;font-size:.88em;text-align:left}
th{background:#fafafa;position:sticky;top:0}
td.c{text-align:center;font-weight:bold;min-width:7em}
small,.note{color:#666}
"""


class ComparisonError(ValueError):
    """The comparison input is not what `reports.pipeline.compare.write` writes."""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _text(valid) -> str:
    """A verdict as the JSON spells it: true / false / unknown."""
    return {True: "true", False: "false"}.get(valid, str(valid))


def _cell(outcome, runs: dict | None, colours: dict) -> str:
    if outcome is None:
        background, colour = MISSING
        return f'<td class="c" style="background:{background};color:{colour}">-</td>'
    key = _text(outcome)
    background, colour = colours.get(key, MISSING)
    tip = "; ".join(f"{run}: {_text(v)}" for run, v in (runs or {}).items())
    count = f"<br><small>{len(runs)} runs</small>" if runs and len(runs) > 1 else ""
    return (f'<td class="c" style="background:{background};color:{colour}" title="{_e(tip)}">'
            f"{_e(key)}{count}</td>")


def _table(rows: dict, per_run: dict, targets: list[str], colours: dict, first: str, describe=None) -> str:
    head = "".join(f"<th>{_e(t)}</th>" for t in targets)
    body = []
    for key in sorted(rows):
        label = f"<code>{_e(key)}</code>" + (describe(key) if describe else "")
        cells = "".join(_cell(rows[key].get(t), per_run.get(key, {}).get(t), colours) for t in targets)
        body.append(f"<tr><td>{label}</td>{cells}</tr>")
    return f"<table><tr><th>{_e(first)}</th>{head}</tr>{''.join(body)}</table>"


def _load(compare_json_or_dict) -> dict:
    if isinstance(compare_json_or_dict, dict):
        data = compare_json_or_dict
    else:
        path = Path(compare_json_or_dict)
        if not path.is_file():
            raise ComparisonError(f"{path}: not found; run `python -m reports.pipeline.compare PATH... --out DIR` "
                                  "and pass DIR/comparison.json")
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise ComparisonError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not {"specs", "checkers"} <= set(data):
        raise ComparisonError("a comparison needs the keys 'specs' and 'checkers' (reports.pipeline.compare.write)")
    return data


def _matrix_pages(matrices: list[Path], out_dir: Path) -> tuple[list[str], dict]:
    """Render each matrix next to the comparison page; return the links and the merged catalogue
    (document, section, paraphrase per spec ID) for the spec rows."""
    links, catalogue = [], {}
    for number, path in enumerate(map(Path, matrices), start=1):
        try:
            matrix = json.loads(path.read_text())
            page = render_matrix(matrix, title=f"conformance matrix {path.parent.name}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            links.append(f"<li><code>{_e(path)}</code>: could not render ({_e(type(exc).__name__)}: {_e(exc)}); "
                         "expected the matrix.json `brokerconf suite` writes</li>")
            continue
        catalogue.update(matrix.get("catalogue") or {})
        name = f"matrix-{number}-{path.parent.name}.html"
        (out_dir / name).write_text(page, encoding="utf-8")
        summary = ", ".join(f"{t}: {s.get('passed', 0)} passed / {s.get('failed', 0)} failed of "
                            f"{s.get('applicable', 0)} applicable" for t, s in (matrix.get("summary") or {}).items())
        links.append(f'<li><a href="{_e(name)}">{_e(path.parent.name)}</a> <small>generated '
                     f"{_e(matrix.get('generated_at', '?'))}; {_e(summary)}</small></li>")
    return links, catalogue


def render_comparison_report(compare_json_or_dict, matrices: list[Path], out_path: str | Path) -> Path:
    """Write the comparison page to ``out_path`` (and each matrix as ``matrix-N-NAME.html`` in
    the same directory); return ``out_path``."""
    data = _load(compare_json_or_dict)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    links, catalogue = _matrix_pages(list(matrices), out_path.parent)
    targets = list(data.get("targets") or sorted({t for table in ("specs", "checkers")
                                                  for cells in data[table].values() for t in cells}))

    def describe(spec_id: str) -> str:
        entry = catalogue.get(spec_id)
        if not entry:
            return ""
        return (f" <small>{_e(entry.get('document', ''))} § {_e(entry.get('section', ''))}</small>"
                f"<br><small>{_e(str(entry.get('paraphrase', ''))[:240])}</small>")

    specs = (_table(data["specs"], data.get("spec_runs") or {}, targets, SPEC_COLOURS, "spec ID", describe)
             if data["specs"] else "<p class=\"note\">No conformance matrix among the inputs.</p>")
    checkers = (_table(data["checkers"], data.get("checker_runs") or {}, targets, CHECKER_COLOURS, "checker")
                if data["checkers"] else "<p class=\"note\">No analysed chaos run among the inputs.</p>")
    inputs = data.get("inputs") or {}
    sources = "".join(f"<li><code>{_e(p)}</code></li>" for p in (inputs.get("matrices") or []) + (inputs.get("verdicts") or []))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>brokerconf comparison</title><style>{_STYLE}</style></head>
<body><h1>brokerconf comparison</h1>
<p>{len(targets)} targets, {len(data['specs'])} spec IDs, {len(data['checkers'])} checkers. A cell is the merged
outcome of every run of that target (conformance: failed beats error beats known deviation beats passed; chaos
checkers: false beats unknown beats true); hover a cell for each run's own outcome. "-": no run of that target
judged it.</p>
<h2>Target x spec ID</h2>{specs}
<h2>Target x checker</h2>{checkers}
<h2>Conformance matrices</h2>{'<ul>' + ''.join(links) + '</ul>' if links else '<p class="note">None given.</p>'}
{f'<details><summary>inputs</summary><ul>{sources}</ul></details>' if sources else ''}
</body></html>"""
    out_path.write_text(page, encoding="utf-8")
    return out_path
