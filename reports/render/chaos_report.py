"""One chaos run as a static HTML page: ``report.html`` beside the run's ``history.jsonl``.

The page shows the verdict and every check (from ``verdict.json``, written by
`reports.judge.judge_run`), every registered measurement in its own words beside them, the anomalous messages with their operations and the fault
window each fell in, a timeline of operations per process (above them, when the history names
the node that served each operation, one "served by" lane per node: issue 18), latency percentiles and throughput over
time, failover downtime per fault and client, topic fan-out per subscriber, and the failover
clients' transport events (``transport.jsonl``, chaos/transport_log.py) when the run has them. Fault windows
(the ``fault_window`` entries of the nemesis's heal events, DESIGN.md "History format") are shaded
on every time plot. When the output directory of `brokerconf analyze` is given, its checks and
anomalies join the page; without it the page needs only the history and the verdict.

The page is one self-contained file (inline SVG and CSS, no scripts, nothing fetched). A history
of 100k operations and more stays readable and small: the history is streamed once into one
compact tuple per operation, plots aggregate into time bins, timeline lanes are drawn as merged
intervals over a fixed number of columns, and the anomaly list is capped.

``python -m reports.render.chaos_report RUN_DIR [--pipeline DIR]`` renders one run.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from chaos.history import HARNESS, NEMESIS, HistoryFormatError, iter_history
from reports.checkers import registry
from reports.render.svg import PALETTE, Band, Plot, bar_chart, fmt

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
MAX_ANOMALIES = 200  # listed on the page; verdict.json keeps them all
MAX_OPS_PER_ANOMALY = 16
MAX_TRANSPORT_EVENTS = 300  # listed on the page; transport.jsonl keeps them all
MAX_LANES = 48
TIMELINE_COLUMNS = 600  # lanes are drawn at this horizontal resolution, whatever the history's size
LATENCY_FS = ("send", "receive", "ack")
#: operations whose ok completion shows a node serving (the timeline's "served by" lanes)
SERVED_FS = ("send", "receive", "ack", "drain")
MAX_NODE_LANES = 8
OUTCOME_COLOURS = {"ok": "#43a047", "fail": "#fb8c00", "info": "#d32f2f", "open": "#9e9e9e"}
# Worse outcomes win a timeline column: an info in a column full of oks must stay visible.
_OUTCOME_RANK = {"ok": 1, "fail": 2, "info": 3, "open": 4}
_RANK_OUTCOME = {v: k for k, v in _OUTCOME_RANK.items()}
# The anomaly list shows what breaks a verdict first, what is merely notable (recovered) last.
_KIND_ORDER = ("lost", "unexpected", "redelivered after ack", "duplicated", "missing", "out of window",
               "reordered", "recovered")
VALID_COLOURS = {True: ("#e8f5e9", "#1b5e20"), False: ("#ffebee", "#b71c1c"), "unknown": ("#fff8e1", "#8d6e00")}


class ReportError(Exception):
    """The run directory cannot be rendered; the message says what is missing and what to do."""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


# ---------------------------------------------------------------------- reading the run


@dataclass(frozen=True)
class Window:
    """A fault window: ``start``/``end`` in ns since the run started."""
    f: str
    label: str
    start: int
    end: int
    healed: bool = True

    def describe(self) -> str:
        healed = "" if self.healed else ", never healed"
        return f"{self.label} ({self.start / NS_PER_S:.3f} s - {self.end / NS_PER_S:.3f} s{healed})"


@dataclass
class RunData:
    """What the page needs from a history, gathered in one pass."""
    ops: list[tuple] = field(default_factory=list)  # (process, f, invoke_ns, completion_ns | None, outcome)
    nemesis: list[dict] = field(default_factory=list)
    message_ops: dict[str, list[dict]] = field(default_factory=dict)  # anomalous id -> its events
    indexed: dict[int, dict] = field(default_factory=dict)  # wanted op index -> event
    #: (node, completion_ns) of every ok send / receive / ack / drain that names the node that
    #: served it (chaos/workloads/base.py NodeNames; issue 18): the timeline's "served by" lanes
    served: list[tuple[str, int]] = field(default_factory=list)
    t_end: int = 0
    events: int = 0


def _message_ids(value) -> list[str]:
    """Ids an op value carries: one message, a drain's list, or ``{"messages": [...]}``."""
    if isinstance(value, dict):
        if "id" in value:
            return [str(value["id"])]
        value = value.get("messages")
    if isinstance(value, list):
        return [str(m["id"]) for m in value if isinstance(m, dict) and "id" in m]
    return []


def read_run(history_path: Path, wanted_ids: set[str] = frozenset(), wanted_indexes: set[int] = frozenset()) -> RunData:
    """Stream the history once. Ops are paired invoke -> completion per process (a process runs one
    operation at a time, chaos/history.py); the events of ``wanted_ids`` (the anomalous messages)
    are kept with the invokes of their completions, because a receive's invoke carries no id."""
    data = RunData()
    pending: dict = {}  # process -> invoke event
    for event in iter_history(history_path, tolerate_torn_tail=True):
        data.events += 1
        time = event["time"]
        data.t_end = max(data.t_end, time)
        if event["index"] in wanted_indexes:
            data.indexed[event["index"]] = event
        process = event["process"]
        if process == NEMESIS:
            data.nemesis.append(event)
            continue
        if process == HARNESS:  # the harness's records (settings, counters): no operation to draw
            continue
        invoke = None
        if event["type"] == "invoke":
            pending[process] = event
        else:
            invoke = pending.pop(process, None)
            if event["type"] == "ok" and event["f"] in SERVED_FS and event.get("node") is not None:
                data.served.append((str(event["node"]), time))
            if invoke is not None and invoke["f"] == event["f"]:
                data.ops.append((process, event["f"], invoke["time"], time, event["type"]))
            else:  # a completion without its invoke (a cut history): a point in time
                data.ops.append((process, event["f"], time, time, event["type"]))
                invoke = None
        if wanted_ids:
            for message_id in _message_ids(event.get("value")):
                if message_id in wanted_ids:
                    found = data.message_ops.setdefault(message_id, [])
                    if invoke is not None and (not found or found[-1] is not invoke):
                        found.append(invoke)
                    found.append(event)
    for process, invoke in pending.items():  # never completed: in flight until the end
        data.ops.append((process, invoke["f"], invoke["time"], None, "open"))
    return data


def fault_windows(nemesis: list[dict], run_end: int) -> list[Window]:
    """Fault windows from the nemesis events (chaos/nemesis): each heal's ``end`` event lists the
    windows it closed; a fault whose step ended (``fault`` in its end event) but that no heal
    closed lasts until the run's last event. Windows of one step on one target (a proxy toxic
    upstream and downstream) are merged into one band."""
    closed: list[Window] = []
    opened: dict[tuple, tuple[str, str, int]] = {}
    for event in nemesis:
        value = event.get("value") if isinstance(event.get("value"), dict) else {}
        if value.get("phase") != "end":
            continue
        where = value.get("proxy") or event.get("node") or ""
        for w in value.get("fault_window") or []:
            if not isinstance(w, dict) or "start" not in w or "end" not in w:
                continue
            label = f"{w.get('f', 'fault')} {where}".strip()
            closed.append(Window(str(w.get("f", "fault")), label, int(w["start"]), int(w["end"])))
            opened.pop((where, str(w.get("fault"))), None)
        if value.get("fault") is not None and event["f"] not in ("setup", "teardown"):
            opened[(where, str(value["fault"]))] = (event["f"], f"{event['f']} {where}".strip(),
                                                    int(value.get("started", event["time"])))
    for (where, _), (f, label, start) in opened.items():
        closed.append(Window(f, label, start, max(run_end, start), healed=False))
    merged: list[Window] = []
    for w in sorted(closed, key=lambda w: (w.label, w.start)):
        last = merged[-1] if merged else None
        if last and last.label == w.label and w.start <= last.end:
            merged[-1] = Window(last.f, last.label, last.start, max(last.end, w.end), last.healed and w.healed)
        else:
            merged.append(w)
    return sorted(merged, key=lambda w: (w.start, w.end))


def nice_step(raw_ns: float, minimum_ns: int) -> int:
    """A bin width of 1, 2 or 5 times a power of ten, at least ``minimum_ns``."""
    raw_ns = max(raw_ns, minimum_ns, 1)
    power = 10 ** math.floor(math.log10(raw_ns))
    for m in (1, 2, 5, 10):
        if raw_ns <= m * power:
            return int(m * power)
    return int(10 * power)


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (the value some op really took)."""
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def latency_series(ops: list[tuple], fs: Iterable[str], bin_ns: int) -> dict[str, list[tuple[float, float, float, int]]]:
    """Per f: (bin start in s, p50 ms, p99 ms, count) over the ``ok`` completions in each bin.
    Only ``ok``: a failed receive is a poll that timed out, not a delivery's latency."""
    bins: dict[str, dict[int, list[float]]] = {f: defaultdict(list) for f in fs}
    for _, f, t0, t1, outcome in ops:
        if outcome == "ok" and f in bins and t1 is not None:
            bins[f][t1 // bin_ns].append((t1 - t0) / NS_PER_MS)
    series = {}
    for f, by_bin in bins.items():
        points = []
        for b in sorted(by_bin):
            values = sorted(by_bin[b])
            points.append((b * bin_ns / NS_PER_S, _percentile(values, 0.5), _percentile(values, 0.99), len(values)))
        if points:
            series[f] = points
    return series


def throughput_series(ops: list[tuple], fs: Iterable[str], bin_ns: int, t_end: int) -> dict[str, list[tuple[float, float]]]:
    """Per f: (bin start in s, ok completions per second); empty bins count as 0 (a stall is news)."""
    counts: dict[str, Counter] = {f: Counter() for f in fs}
    for _, f, _, t1, outcome in ops:
        if outcome == "ok" and f in counts and t1 is not None:
            counts[f][t1 // bin_ns] += 1
    last = t_end // bin_ns
    per_s = NS_PER_S / bin_ns
    return {f: [(b * bin_ns / NS_PER_S, c[b] * per_s) for b in range(last + 1)] for f, c in counts.items() if c}


def timeline_lanes(ops: list[tuple], t_end: int, columns: int = TIMELINE_COLUMNS) -> list[tuple]:
    """Per process: (process, label, [(start_ns, end_ns, outcome), ...]) at ``columns`` horizontal
    resolution. A column shows the worst outcome of the ops in it (open > info > fail > ok);
    neighbouring columns of the same outcome merge into one interval."""
    span = max(t_end, 1)
    width = span / columns
    grid: dict = {}
    fs: dict = defaultdict(Counter)
    for process, f, t0, t1, outcome in ops:
        row = grid.get(process)
        if row is None:
            row = grid[process] = [0] * (columns + 1)
        fs[process][f] += 1
        rank = _OUTCOME_RANK[outcome]
        end = t_end if t1 is None else t1
        for c in range(int(t0 / width), min(int(end / width), columns) + 1):
            if row[c] < rank:
                row[c] = rank
    lanes = []
    for process in sorted(grid, key=lambda p: (not isinstance(p, int), p if isinstance(p, int) else 0, str(p))):
        row, intervals, c = grid[process], [], 0
        while c <= columns:
            if row[c] == 0:
                c += 1
                continue
            start = c
            while c + 1 <= columns and row[c + 1] == row[start]:
                c += 1
            intervals.append((int(start * width), int((c + 1) * width), _RANK_OUTCOME[row[start]]))
            c += 1
        main_f = ", ".join(f for f, _ in fs[process].most_common(2) if f not in ("connect", "subscribe")) or "connect"
        lanes.append((process, f"p{process} {main_f}", intervals))
    return lanes


def served_lanes(served: list[tuple[str, int]], t_end: int, columns: int = TIMELINE_COLUMNS) -> list[tuple]:
    """Per node: (node, [(start_ns, end_ns), ...]): the columns (at ``columns`` resolution) in
    which the node completed an accepted operation, neighbours merged. Two nodes' lanes marked in
    one column is what the split-brain checker looks into (reports/checkers/split_brain.py; a
    column is coarse: the checker's verdict, not the picture, decides)."""
    span = max(t_end, 1)
    width = span / columns
    marks: dict[str, set[int]] = defaultdict(set)
    for node, t in served:
        marks[node].add(min(int(t / width), columns))
    lanes = []
    for node in sorted(marks):
        cols, intervals = sorted(marks[node]), []
        for c in cols:
            if intervals and intervals[-1][1] == c:
                intervals[-1][1] = c + 1
            else:
                intervals.append([c, c + 1])
        lanes.append((node, [(int(a * width), int(b * width)) for a, b in intervals]))
    return lanes


# ---------------------------------------------------------------------- anomalies


@dataclass
class Anomaly:
    checker: str
    kind: str
    message_id: str
    detail: str = ""
    indexes: list[int] = field(default_factory=list)  # op indexes the pipeline named


def verdict_anomalies(verdict: dict) -> list[Anomaly]:
    """Anomalous messages named by the checks of verdict.json (reports/checkers)."""
    checks = verdict.get("checks") or {}
    found: list[Anomaly] = []
    total = checks.get("total_queue") or {}
    for message_id in total.get("lost") or []:
        found.append(Anomaly("total_queue", "lost", str(message_id), "acknowledged send never received"))
    for message_id in total.get("unexpected") or []:
        found.append(Anomaly("total_queue", "unexpected", str(message_id), "received but never sent"))
    for message_id, count in (total.get("duplicated") or {}).items():
        found.append(Anomaly("total_queue", "duplicated", str(message_id), f"received {count} times"))
    for message_id in total.get("recovered") or []:
        found.append(Anomaly("total_queue", "recovered", str(message_id),
                             "send outcome unknown (info), yet it arrived"))
    redelivery = checks.get("no_redelivery_after_ack") or {}
    for message_id, indexes in (redelivery.get("redelivered_after_ack") or {}).items():
        found.append(Anomaly("no_redelivery_after_ack", "redelivered after ack", str(message_id),
                             "delivered again after its ack was confirmed",
                             [i for i in indexes if isinstance(i, int) and i >= 0]))
    fanout = checks.get("topic_fanout") or {}
    for message_id in fanout.get("unexpected") or []:
        found.append(Anomaly("topic_fanout", "unexpected", str(message_id), "received but never sent"))
    for name, sub in (fanout.get("subscribers") or {}).items():
        for key, kind in (("missing", "missing"), ("unexpected", "unexpected"), ("out_of_window", "out of window")):
            for message_id in sub.get(key) or []:
                found.append(Anomaly("topic_fanout", kind, str(message_id), f"subscriber {name}"))
        for message_id, count in (sub.get("duplicated") or {}).items():
            found.append(Anomaly("topic_fanout", "duplicated", str(message_id), f"subscriber {name} got it {count} times"))
    return found


def pipeline_run(pipeline_dir: Path | None, run_id: str | None) -> dict | None:
    """This run's verdict from `brokerconf analyze` output (verdicts.json), if there is one."""
    if pipeline_dir is None:
        return None
    path = Path(pipeline_dir) / "verdicts.json"
    if not path.is_file():
        raise ReportError(f"{path}: not found; pass the directory `brokerconf analyze PATH --out DIR` wrote, "
                          "or leave --pipeline out to render from the history and verdict.json alone")
    runs = json.loads(path.read_text()).get("runs") or []
    matching = [r for r in runs if r.get("run") == run_id]
    if not matching and len(runs) == 1:  # the analysis of this directory alone
        matching = runs
    return matching[0] if matching else None


def merge_anomalies(from_verdict: list[Anomaly], from_pipeline: list[dict]) -> list[Anomaly]:
    merged: dict[tuple, Anomaly] = {}
    for a in from_verdict:
        merged.setdefault((a.checker, a.kind, a.message_id, a.detail), a)
    for row in from_pipeline:
        a = Anomaly(str(row.get("checker")), str(row.get("kind")), str(row.get("message_id")),
                    str(row.get("detail") or ""), [int(i) for i in row.get("ops") or []])
        key = next((k for k in merged if k[:3] == (a.checker, a.kind, a.message_id)), None)
        if key is None:
            merged[(a.checker, a.kind, a.message_id, a.detail)] = a
        else:
            merged[key].indexes = sorted(set(merged[key].indexes) | set(a.indexes))
    rank = {k: i for i, k in enumerate(_KIND_ORDER)}
    return sorted(merged.values(), key=lambda a: (rank.get(a.kind, len(rank) - 1), a.checker, _natural(a.message_id)))


def _natural(message_id: str) -> tuple:
    """Ids are RUN-PRODUCER-SEQ: sort the numbers as numbers, so the listed first 200 are the
    earliest sequence numbers rather than "-1000" before "-2"."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", message_id))


def windows_overlapping(events: list[dict], windows: list[Window]) -> list[Window]:
    """The windows during which any of these events happened, an invoke to its completion
    counting as the whole interval between (a send in flight when the broker died)."""
    spans = [(e["time"], e["time"]) for e in events]
    for inv in (e for e in events if e["type"] == "invoke"):  # open until the process's next event
        later = [e["time"] for e in events if e["process"] == inv["process"] and e["index"] > inv["index"]]
        if later:
            spans.append((inv["time"], min(later)))
    return [w for w in windows if any(a <= w.end and b >= w.start for a, b in spans)]


# ---------------------------------------------------------------------- page parts

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:.6em 0}
td,th{border:1px solid #ddd;padding:.3em .5em;vertical-align:top;font-size:.88em;text-align:left}
th{background:#fafafa}
code{font-size:.92em}
.verdict{display:inline-block;padding:.2em .7em;border-radius:.3em;font-weight:bold}
.note{color:#555;font-size:.88em}
.ops td{font-size:.8em;border:none;padding:.05em .6em .05em 0}
svg{display:block;margin:.4em 0 1em}
details summary{cursor:pointer}
"""


def _valid_html(valid) -> str:
    key = valid if valid in (True, False) else "unknown"
    background, colour = VALID_COLOURS[key]
    return f'<span class="verdict" style="background:{background};color:{colour}">{_e(valid)}</span>'


def _scalars(stats: dict, limit: int = 400) -> str:
    text = ", ".join(f"{k} {v}" for k, v in stats.items() if isinstance(v, (str, int, float, bool)) or v is None)
    return _e(text[:limit] + ("..." if len(text) > limit else ""))


def _checks_html(verdict: dict) -> str:
    rows = []
    for name, check in (verdict.get("checks") or {}).items():
        detail = check.get("reason") or ""
        if name == "total_queue":
            detail = (f"attempted {check.get('attempted')}, enqueued {check.get('enqueued')}, dequeued "
                      f"{check.get('dequeued')}; lost {len(check.get('lost') or [])}, unexpected "
                      f"{len(check.get('unexpected') or [])}, duplicated {len(check.get('duplicated') or {})}, "
                      f"recovered {len(check.get('recovered') or [])}" + (f" - {detail}" if detail else ""))
        elif name == "no_redelivery_after_ack":
            detail = (f"{len(check.get('redelivered_after_ack') or {})} redelivered of "
                      f"{check.get('acknowledged')} acknowledged")
        elif name == "failover_downtime":
            s = check.get("summary") or {}
            detail = (f"{s.get('faults', 0)} faults, {s.get('measured', 0)} measurements, max "
                      f"{fmt(s['max_ms']) if s.get('max_ms') is not None else 'n/a'} ms, never recovered "
                      f"{s.get('never_recovered', 0)}" + (f" - {detail}" if detail else ""))
        elif name == "split_brain":
            s = check.get("stats") or {}
            windows = "; ".join(f"{' and '.join(w['nodes'])} {w['start'] / NS_PER_S:.3f} s - {w['end'] / NS_PER_S:.3f} s "
                                f"(ops {', '.join(map(str, w['ops']))})" for w in (s.get("windows") or [])[:20])
            detail = (f"served by {', '.join(s.get('nodes') or []) or 'no node named'}, {s.get('handovers', 0)} "
                      f"handovers" + (f"; overlapping windows: {windows}" if windows else "")
                      + (f" - {detail}" if detail else ""))
        elif name in ("redistribution", "group_pinning"):
            s = check.get("stats") or {}
            found = "; ".join(s.get("anomalies") or [])
            counts = (f"{s.get('enqueued', 0)} confirmed, {s.get('delivered', 0)} delivered, lost {s.get('lost', 0)}, "
                      f"duplicated {s.get('duplicated', 0)}, to a node without consumers {s.get('no-consumer-node', 0)}"
                      if name == "redistribution" else
                      f"{s.get('groups', 0)} groups over nodes {', '.join(s.get('nodes') or []) or 'none named'}, "
                      f"{s.get('moves', 0)} moves, unexplained {s.get('moved', 0)}")
            detail = counts + (f" - {detail}" if detail else "") + (f"; {found}" if found else "")
        rows.append(f"<tr><td><code>{_e(name)}</code></td><td>{_valid_html(check.get('valid'))}</td>"
                    f"<td>{_e(detail)}</td></tr>")
    # the checks this run was not judged by, and why (reports/check_plan.py: the Spark pipeline
    # leaves out the same ones)
    left_out = "".join(f"<li><code>{_e(name)}</code>: {_e(why)}</li>"
                       for name, why in (verdict.get("not_applied") or {}).items())
    left_out = f"<p class=\"note\">Not applied to this run:</p><ul class=\"note\">{left_out}</ul>" if left_out else ""
    if not rows:
        return "<p class=\"note\">No checks in verdict.json.</p>" + left_out
    return "<table><tr><th>check</th><th>valid</th><th>what it found</th></tr>" + "".join(rows) + "</table>" + left_out


def _measurements_html(measurements: dict) -> str:
    """Every measurement verdict.json holds, in its own words (its declaration's ``describe``,
    reports/checkers/registry.py): beside the verdict, never part of it."""
    if not measurements:
        return "<p class=\"note\">No measurement in verdict.json.</p>"
    rows = "".join(f"<tr><td><code>{_e(name)}</code></td><td>{'<br>'.join(_e(line) for line in registry.describe(name, m))}"
                   "</td></tr>" for name, m in measurements.items())
    return ("<p class=\"note\">Shown beside the verdict, never merged into it.</p>"
            "<table><tr><th>measurement</th><th>what it found</th></tr>" + rows + "</table>")


def _pipeline_html(run: dict | None, pipeline_dir: Path | None) -> str:
    if pipeline_dir is None:
        return ""
    if run is None:
        return (f"<h2>Pipeline checks</h2><p class=\"note\">{_e(pipeline_dir)}/verdicts.json has no verdict for this "
                "run.</p>")
    rows = []
    for name, check in (run.get("checks") or {}).items():
        measured = registry.is_measurement(name)
        if not check.get("applicable", True):
            valid = "not applicable"
        elif measured:  # its result is always true: a green badge would read as a passed check
            valid = "measurement"
        else:
            valid = _valid_html(check.get("valid"))
        numbers = ("<br>".join(_e(line) for line in registry.describe(name, check)) if measured
                   else _scalars(check.get("stats") or {}))
        rows.append(f"<tr><td><code>{_e(name)}</code></td><td>{valid}</td><td>{_e(check.get('reason') or '')}"
                    f"<br><small>{numbers}</small></td></tr>")
    skipped = "".join(f"<li>{_e(s)}</li>" for s in (run.get("skipped_lines") or [])[:20])
    return (f"<h2>Pipeline checks {_valid_html(run.get('valid'))}</h2><p class=\"note\">from "
            f"<code>{_e(pipeline_dir)}</code> (brokerconf analyze)</p>"
            + (f"<p>Skipped malformed lines:</p><ul>{skipped}</ul>" if skipped else "")
            + "<table><tr><th>checker</th><th>valid</th><th>reason and numbers</th></tr>" + "".join(rows) + "</table>")


def _op_row(event: dict) -> str:
    value = event.get("value")
    consumer = ""
    if isinstance(value, dict):
        who = [f"{k} {value[k]}" for k in ("producer", "consumer", "subscriber") if value.get(k) is not None]
        consumer = ", ".join(who)
    error = f" - {event['error']}" if event.get("error") else ""
    return (f"<tr><td>#{_e(event['index'])}</td><td>{event['time'] / NS_PER_S:.3f} s</td><td>p{_e(event['process'])}"
            f"</td><td>{_e(event['type'])}</td><td>{_e(event['f'])}</td><td>node {_e(event.get('node'))}</td>"
            f"<td>{_e(consumer)}{_e(error[:200])}</td></tr>")


def _anomalies_html(anomalies: list[Anomaly], data: RunData, windows: list[Window]) -> str:
    if not anomalies:
        return "<h2>Anomalies</h2><p>None: no check named an anomalous message.</p>"
    counts = Counter(a.kind for a in anomalies)
    rows = []
    for a in anomalies[:MAX_ANOMALIES]:
        events = {e["index"]: e for e in data.message_ops.get(a.message_id, [])}
        events.update({i: data.indexed[i] for i in a.indexes if i in data.indexed})
        ordered = [events[i] for i in sorted(events)]
        shown = "".join(_op_row(e) for e in ordered[:MAX_OPS_PER_ANOMALY])
        more = (f"<tr><td colspan=7>... and {len(ordered) - MAX_OPS_PER_ANOMALY} more operations</td></tr>"
                if len(ordered) > MAX_OPS_PER_ANOMALY else "")
        ops = f'<table class="ops">{shown}{more}</table>' if ordered else '<span class="note">no operation in the history carries this id</span>'
        fell = windows_overlapping(ordered, windows)
        window = "<br>".join(_e(w.describe()) for w in fell) if fell else '<span class="note">outside every fault window</span>'
        rows.append(f"<tr><td><code>{_e(a.message_id)}</code></td><td>{_e(a.kind)}<br><small>{_e(a.checker)}</small>"
                    f"</td><td>{_e(a.detail)}</td><td>{ops}</td><td>{window}</td></tr>")
    rest = len(anomalies) - MAX_ANOMALIES
    tail = (f"<p class=\"note\">... and {rest} more anomalies, not listed here: every one is named in verdict.json"
            " (and anomalies.parquet when the pipeline ran).</p>" if rest > 0 else "")
    summary = ", ".join(f"{kind} {n}" for kind, n in counts.most_common())
    return (f"<h2>Anomalies ({len(anomalies)})</h2><p>{_e(summary)}</p>"
            "<table><tr><th>message id</th><th>kind</th><th>detail</th><th>its operations (time since the run "
            "started, process, type, f)</th><th>fault window it fell in</th></tr>" + "".join(rows) + "</table>" + tail)


def _bands(windows: list[Window]) -> list[Band]:
    return [Band(w.start / NS_PER_S, w.end / NS_PER_S, w.label + ("" if w.healed else " (not healed)"))
            for w in windows]


def _seconds(v: float) -> str:
    return f"{fmt(v)} s"


def _timeline_svg(data: RunData, windows: list[Window], anomaly_times: list[tuple[float, str]]) -> str:
    lanes = timeline_lanes(data.ops, data.t_end)
    hidden = len(lanes) - MAX_LANES
    lanes = lanes[:MAX_LANES]
    nodes = served_lanes(data.served, data.t_end)[:MAX_NODE_LANES]
    # one "served by" lane per node above the processes, when the history names the nodes
    node_rows = len(nodes) + (1 if nodes else 0)  # and a blank lane between
    rows = len(lanes) + (1 if anomaly_times else 0) + node_rows
    lane_px = 14
    bands = _bands(windows)
    plot = Plot.make((0, data.t_end / NS_PER_S), (0, max(rows, 1)), height=rows * lane_px + 48,
                     margin=(8, 16, 40, 110), bands=bands)
    for row, (node, intervals) in enumerate(nodes):
        y = rows - row
        colour = PALETTE[row % len(PALETTE)]
        plot.text(plot.left - 4, plot.y(y - 0.5) + 3, f"served by {node}", anchor="end", pixel=True, colour=colour)
        for start, end in intervals:
            plot.rect(start / NS_PER_S, end / NS_PER_S, y - 0.85, y - 0.15, colour,
                      title=f"node {node} accepted operations", min_width=1.5)
    for row, (_, label, intervals) in enumerate(lanes):
        y = rows - node_rows - row
        plot.text(plot.left - 4, plot.y(y - 0.5) + 3, label, anchor="end", pixel=True)
        for start, end, outcome in intervals:
            plot.rect(start / NS_PER_S, end / NS_PER_S, y - 0.85, y - 0.15, OUTCOME_COLOURS[outcome])
    if anomaly_times:
        plot.text(plot.left - 4, plot.y(0.5) + 3, "anomalies", anchor="end", pixel=True, colour="#b71c1c")
        for t, title in anomaly_times[:MAX_ANOMALIES]:
            plot.rect(t, t, 0.1, 0.9, "#b71c1c", title=title, min_width=1.5)
    plot.bands(bands)  # over the lanes, which would hide it: the shade is translucent
    plot.axes("time since the run started (s)", "", x_fmt=_seconds, y_ticks=False)
    plot.legend = [(name, colour) for name, colour in OUTCOME_COLOURS.items()]
    note = (f'<p class="note">{hidden} more processes not drawn (the first {MAX_LANES} are).</p>' if hidden > 0 else "")
    return plot.svg("operations per process") + note


def _latency_svg(series: dict, windows: list[Window], t_end_s: float, bin_ns: int) -> str:
    if not series:
        return '<p class="note">No completed send, receive or ack: nothing to plot.</p>'
    values = [v for points in series.values() for _, p50, p99, _ in points for v in (p50, p99)]
    bands = _bands(windows)
    plot = Plot.make((0, t_end_s), (max(min(values) / 1.5, 0.001), max(values) * 1.5), height=260, log_y=True, bands=bands)
    plot.bands(bands)
    half = bin_ns / NS_PER_S / 2
    for i, (f, points) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        p50s, p99s = _with_gaps(points, bin_ns, 1, half), _with_gaps(points, bin_ns, 2, half)
        plot.line(p50s, colour, f"{f} p50")
        plot.line(p99s, colour, f"{f} p99", dash="4 3", width=1)
    plot.axes("time since the run started (s)", "latency (ms, log)", x_fmt=_seconds)
    return plot.svg("latency percentiles per bin")


def _with_gaps(points: list[tuple], bin_ns: int, column: int, shift: float) -> list[tuple[float, float | None]]:
    """Bin centres and one column of the points, with a None where bins are missing: no line is
    drawn across a stretch where nothing completed (a broker down is a gap, not a slope)."""
    out: list[tuple[float, float | None]] = []
    step = bin_ns / NS_PER_S
    for point in points:
        if out and point[0] - (out[-1][0] - shift) > step * 1.5:
            out.append((point[0], None))
        out.append((point[0] + shift, point[column]))
    return out


def _throughput_svg(series: dict, windows: list[Window], t_end_s: float, bin_ns: int) -> str:
    if not series:
        return '<p class="note">No ok operation to count.</p>'
    top = max(v for points in series.values() for _, v in points) or 1
    bands = _bands(windows)
    plot = Plot.make((0, t_end_s), (0, top * 1.1), height=240, bands=bands)
    plot.bands(bands)
    for i, (f, points) in enumerate(series.items()):
        plot.line(points + [(points[-1][0] + bin_ns / NS_PER_S, points[-1][1])], PALETTE[i % len(PALETTE)], f,
                  step=True)
    plot.axes("time since the run started (s)", "ok operations per second", x_fmt=_seconds)
    return plot.svg("throughput per bin")


def _downtime_html(check: dict | None) -> str:
    if not check:
        return ""
    groups = []
    for fault in check.get("faults") or []:
        where = f" {fault['node']}" if fault.get("node") else ""
        label = f"{fault.get('f')}{where} @ {fault.get('start_ns', 0) / NS_PER_S:.1f} s"
        bars = [(client, ms) for client, ms in sorted((fault.get("downtime_ms") or {}).items())]
        bars += [(f"{client} never recovered (at least)", ms)
                 for client, ms in sorted((fault.get("never_recovered") or {}).items())]
        groups.append((label, bars or [("no client measured", None)]))
    if not groups:
        return "<h2>Failover downtime</h2><p class=\"note\">No fault to measure.</p>"
    colours = {name: "#b71c1c" for _, bars in groups for name, _ in bars if "never recovered" in name}
    return ("<h2>Failover downtime</h2><p class=\"note\">From each fault's start to the client's first ok "
            "operation invoked after it (reports/checkers/failover_downtime.py).</p>"
            + bar_chart(groups, title="failover downtime per fault and client", unit=" ms", colours=colours))


def _fanout_html(check: dict | None, verdict: dict) -> str:
    if not check or not check.get("subscribers"):
        return ""
    slow = {str(s) for s in (verdict.get("run_stats") or {}).get("slow_subscribers") or []}
    counts, discards = [], []
    for name, sub in sorted(check["subscribers"].items()):
        label = f"subscriber {name}" + (" (slow)" if name in slow else "")
        counts.append((label, [("expected", sub.get("expected")), ("received", sub.get("received"))]))
        discards.append((label, [("lost (history)", sub.get("observed_discards")),
                                 ("broker discards", sub.get("broker_discards"))]))
    return ("<h2>Topic fan-out</h2><p class=\"note\">Per subscriber: messages it should have got and got, and "
            "what it lost against what the broker says it discarded (n/a: the broker reported no counter).</p>"
            + bar_chart(counts, title="expected and received per subscriber",
                        colours={"expected": "#90a4ae", "received": "#0072b2"})
            + bar_chart(discards, title="lost vs broker discards per subscriber",
                        colours={"lost (history)": "#d55e00", "broker discards": "#e69f00"}))


def read_transport_events(path: Path) -> tuple[list[dict], int]:
    """The events of ``transport.jsonl`` (chaos/transport_log.py) and how many lines could not be
    read (a run killed mid-write leaves a torn last line); ([], 0) when the run has none."""
    if not path.is_file():
        return [], 0
    events, unreadable = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and isinstance(event.get("time"), int):
            events.append(event)
        else:
            unreadable += 1
    return events, unreadable


def _transport_html(events: list[dict], unreadable: int, windows: list[Window]) -> str:
    if not events and not unreadable:
        return ""

    def window_of(t: int) -> str:
        return next((w.label for w in windows if w.start <= t <= w.end), "")

    rows = "".join(f"<tr><td>{e['time'] / NS_PER_S:.3f} s</td><td>{_e(e.get('worker'))}</td><td>{_e(e.get('kind'))}</td>"
                   f"<td><code>{_e(e.get('uri') or '')}</code></td><td>{_e(e.get('reason') or '')}</td>"
                   f"<td>{_e(window_of(e['time']))}</td></tr>"
                   for e in events[:MAX_TRANSPORT_EVENTS])
    notes = []
    if len(events) > MAX_TRANSPORT_EVENTS:
        notes.append(f"the first {MAX_TRANSPORT_EVENTS} of {len(events)} are listed; transport.jsonl has them all")
    if unreadable:
        notes.append(f"{unreadable} line(s) of transport.jsonl could not be read")
    return ("<h2>Failover transport events</h2><p class=\"note\">What each failover client's transport did, "
            "from transport.jsonl: interrupted, resumed (also on its first connect), switched, failed."
            + (" " + "; ".join(notes) + "." if notes else "") + "</p>"
            "<table><tr><th>time</th><th>worker</th><th>event</th><th>broker</th><th>reason</th><th>fault window</th></tr>"
            + rows + "</table>")


def _plotted_fs(ops: list[tuple]) -> list[str]:
    present = Counter(f for _, f, *_ in ops)
    fs = [f for f in LATENCY_FS if present.get(f)]
    # A workload of other operations (request-reply...) still gets its plots.
    return fs or [f for f, _ in present.most_common(4) if f not in ("connect", "subscribe", "drain", "close")]


# ---------------------------------------------------------------------- the page


def _seed_html(verdict: dict) -> str:
    """The seed the schedule was drawn from, and how to replay it (nothing for an old history)."""
    if verdict.get("seed") is None:
        return ""
    return (f' · <span title="replay: brokerconf chaos run FILE --seed {_e(verdict["seed"])}">seed '
            f'{_e(verdict["seed"])}</span>')


def render_chaos_page(data: RunData, verdict: dict | None, *, pipeline: dict | None = None,
                      pipeline_dir: Path | None = None, verdict_note: str = "",
                      transport: tuple[list[dict], int] = ([], 0)) -> str:
    verdict = verdict or {}
    windows = fault_windows(data.nemesis, data.t_end)
    anomalies = merge_anomalies(verdict_anomalies(verdict), (pipeline or {}).get("anomalies") or [])
    t_end_s = max(data.t_end / NS_PER_S, 1e-3)
    bin_ns = nice_step(data.t_end / 300, 100 * NS_PER_MS)
    rate_bin_ns = nice_step(data.t_end / 120, bin_ns)
    fs = _plotted_fs(data.ops)
    anomaly_times = []
    for a in anomalies[:MAX_ANOMALIES]:
        events = data.message_ops.get(a.message_id) or [data.indexed[i] for i in a.indexes if i in data.indexed]
        if events:
            anomaly_times.append((min(e["time"] for e in events) / NS_PER_S, f"{a.kind}: {a.message_id}"))
    title = f"{verdict.get('experiment', 'chaos run')} on {verdict.get('target', '?')}"
    stats = verdict.get("run_stats") or {}
    summary = "".join(f"<li>{_e(line)}</li>" for line in (verdict.get("summary") or [])[1:])
    window_rows = "".join(f"<tr><td>{_e(w.label)}</td><td>{w.start / NS_PER_S:.3f} s</td><td>{w.end / NS_PER_S:.3f} s"
                          f"</td><td>{(w.end - w.start) / NS_PER_S:.2f} s{'' if w.healed else ' (never healed)'}</td></tr>"
                          for w in windows)
    windows_html = ("<table><tr><th>fault</th><th>from</th><th>to</th><th>lasted</th></tr>" + window_rows + "</table>"
                    if windows else "<p class=\"note\">No fault window in the history.</p>")
    legend = " ".join(f'<span style="color:{c}">&#9632;</span> {_e(k)}' for k, c in OUTCOME_COLOURS.items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{_e(title)}</title><style>{_STYLE}</style></head>
<body><h1>{_e(title)} {_valid_html(verdict.get('valid', 'unknown'))}</h1>
<p>run <code>{_e(verdict.get('run', ''))}</code>{_seed_html(verdict)} · {data.events} events over {t_end_s:.1f} s ·
{_e(stats.get('faults', len(windows)))} faults · topology {_e(stats.get('topology', '?'))}</p>
{f'<p class="note">{_e(verdict_note)}</p>' if verdict_note else ''}
<ul>{summary}</ul>
<h2>Checks</h2>{_checks_html(verdict) if verdict else ''}
<h2>Measurements</h2>{_measurements_html(verdict.get('measurements') or {}) if verdict else ''}
{_pipeline_html(pipeline, pipeline_dir)}
{_anomalies_html(anomalies, data, windows)}
<h2>Fault windows</h2>{windows_html}
<h2>Timeline</h2><p class="note">Each lane is a client process (a process whose operation ended in info retires and
the worker carries on under a new one). A column shows the worst outcome in flight: {legend}. Shaded: fault windows.</p>
{_timeline_svg(data, windows, anomaly_times)}
<h2>Latency</h2><p class="note">Invoke to ok completion, p50 (solid) and p99 (dashed) per {bin_ns / NS_PER_MS:g} ms bin.</p>
{_latency_svg(latency_series(data.ops, fs, bin_ns), windows, t_end_s, bin_ns)}
<h2>Throughput</h2><p class="note">ok completions per second, per {rate_bin_ns / NS_PER_MS:g} ms bin.</p>
{_throughput_svg(throughput_series(data.ops, fs, rate_bin_ns, data.t_end), windows, t_end_s, rate_bin_ns)}
{_downtime_html((verdict.get('checks') or {}).get('failover_downtime'))}
{_fanout_html((verdict.get('checks') or {}).get('topic_fanout'), verdict)}
{_transport_html(*transport, windows)}
</body></html>"""


def render_chaos_report(run_dir: str | Path, *, pipeline_dir: str | Path | None = None) -> Path:
    """Write ``run_dir/report.html`` from its history and verdict.json (and the analysis in
    ``pipeline_dir`` when given); return its path."""
    run_dir = Path(run_dir)
    verdict_path = run_dir / "verdict.json"
    verdict, note = None, ""
    if verdict_path.is_file():
        try:
            verdict = json.loads(verdict_path.read_text())
        except ValueError as exc:
            raise ReportError(f"{verdict_path}: not valid JSON ({exc}); re-run `brokerconf chaos run` "
                              "or delete it to render the history alone") from None
    else:
        note = "No verdict.json in this directory: the plots come from the history alone, no check ran."
    history_path = run_dir / ((verdict or {}).get("history") or "history.jsonl")
    if not history_path.is_file():
        raise ReportError(f"{history_path}: no history; a chaos run directory holds the history.jsonl "
                          "`brokerconf chaos run` writes")
    pipeline = pipeline_run(Path(pipeline_dir) if pipeline_dir else None, (verdict or {}).get("run"))
    anomalies = merge_anomalies(verdict_anomalies(verdict or {}), (pipeline or {}).get("anomalies") or [])
    shown = anomalies[:MAX_ANOMALIES]
    data = read_run(history_path, {a.message_id for a in shown}, {i for a in shown for i in a.indexes})
    page = render_chaos_page(data, verdict, pipeline=pipeline, pipeline_dir=Path(pipeline_dir) if pipeline_dir else None,
                             verdict_note=note, transport=read_transport_events(run_dir / "transport.jsonl"))
    out = run_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.render.chaos_report",
                                     description="Render a chaos run directory as report.html beside its history.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a directory `brokerconf chaos run` wrote")
    parser.add_argument("--pipeline", metavar="DIR", help="the --out directory of `brokerconf analyze` for this run")
    args = parser.parse_args(argv)
    try:
        path = render_chaos_report(args.run_dir, pipeline_dir=args.pipeline)
    except (ReportError, HistoryFormatError) as exc:
        print(f"chaos_report: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
