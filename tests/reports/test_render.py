"""The static HTML reports (reports/render/): a chaos run's page and the comparison page, on small
literal histories whose verdicts come from the real checkers (reports/checkers), so the page is
tested against the shapes `brokerconf chaos run` writes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from chaos.history import read_history
from reports.checkers.failover_downtime import failover_downtime
from reports.checkers.redelivery import check_no_redelivery_after_ack
from reports.checkers.total_queue import check_total_queue
from reports.render import chaos_report
from reports.render.chaos_report import (ReportError, Window, fault_windows, latency_series, render_chaos_report,
                                         served_lanes, throughput_series, timeline_lanes)
from reports.render.comparison_report import ComparisonError, render_comparison_report
from reports.render.svg import Band, Plot, Scale, bar_chart, fmt
from tests.reports.histories import MS, H, msg

REPO = Path(__file__).resolve().parents[2]
S = 1_000_000_000


def write_run(tmp_path: Path, h: H, **checks_extra) -> Path:
    """The run directory `brokerconf chaos run` leaves: history.jsonl and a verdict.json made by
    the same checkers `reports.judge` uses."""
    history_path = h.write(tmp_path)
    history = read_history(history_path)
    checks = {"total_queue": check_total_queue(history).to_json(),
              "no_redelivery_after_ack": check_no_redelivery_after_ack(history).to_json(),
              "failover_downtime": failover_downtime(history).to_json(), **checks_extra}
    verdict = {"experiment": "kill-restart", "target": "reference:process", "run": h.run,
               "valid": checks["total_queue"]["valid"], "checks": checks,
               "run_stats": {"faults": 1, "topology": "single", "slow_subscribers": []},
               "history": "history.jsonl", "operations": len(history), "summary": ["kill-restart: ...", "a line"]}
    (history_path.parent / "verdict.json").write_text(json.dumps(verdict))
    return history_path.parent


def lost_during_kill() -> H:
    """Producer 0's message "m-lost" is acknowledged just after the broker is killed at 10 ms and
    never arrives; "m-ok" arrives; the broker is back at 40 ms; then a drain."""
    h = H("lost-run")
    h.call(0, "connect")
    h.send(1, "m-ok", seq=0)
    h.receive(0, "m-ok", seq=0)
    h.kill(at=10)
    h.op(1, "invoke", "send", msg("m-lost", seq=1), at=11)
    h.op(1, "ok", "send", msg("m-lost", seq=1), at=12)
    h.restart(at=39, killed_at=10)
    h.send(1, "m-after", seq=2)
    h.receive(0, "m-after", seq=2)
    h.drain(2, [])
    return h


def page_of(run_dir: Path, **kw) -> str:
    return render_chaos_report(run_dir, **kw).read_text()


# ---------------------------------------------------------------------- the chaos page


def test_lost_message(tmp_path):
    run_dir = write_run(tmp_path, lost_during_kill())
    path = render_chaos_report(run_dir)
    assert path == run_dir / "report.html"
    page = path.read_text()
    # the verdict and the check that failed
    assert "<code>total_queue</code>" in page and ">False</span>" in page
    # the anomaly: its id, kind, its two operations (invoke #8 and ok #9 of process 1), the window
    anomalies = page[page.index("<h2>Anomalies"):page.index("<h2>Fault windows")]
    assert "<code>m-lost</code>" in anomalies and "lost" in anomalies
    assert "<td>#8</td><td>0.011 s</td><td>p1</td><td>invoke</td><td>send</td>" in anomalies
    assert "<td>#9</td><td>0.012 s</td><td>p1</td><td>ok</td><td>send</td>" in anomalies
    assert "kill A (0.010 s - 0.040 s)" in anomalies
    assert "m-ok" not in anomalies  # a message that arrived is no anomaly


def test_anomaly_outside_fault_window(tmp_path):
    h = H("dup-run")
    h.send(1, "m-dup", seq=0)
    h.receive(0, "m-dup", seq=0)
    h.receive(0, "m-dup", seq=0)
    h.kill(at=50)
    h.restart(at=60, killed_at=50)
    h.drain(2, [])
    page = page_of(write_run(tmp_path, h))
    row = re.search(r"<code>m-dup</code>.*?</tr></table></td><td>(.*?)</td></tr>", page, re.S)
    assert row, "the duplicated message is listed with its operations"
    assert "duplicated" in page and "received 2 times" in page
    assert "outside every fault window" in row.group(1)


def test_svg_plots_shade_the_fault_window(tmp_path):
    page = page_of(write_run(tmp_path, lost_during_kill()))
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) >= 3, "timeline, latency and throughput plots"
    for svg in svgs[:3]:  # every time plot shades the kill (10 ms .. 40 ms) and labels it
        assert 'class="band"' in svg and ">kill A</text>" in svg
    assert "failover downtime per fault and client" in page  # the downtime bars (the check is present)
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_open_fault_lasts_until_the_run_ends():
    nemesis = [
        {"index": 0, "time": 5 * S, "process": "nemesis", "type": "info", "f": "pause", "node": "B",
         "value": {"nemesis": "process", "phase": "start"}},
        {"index": 1, "time": 5 * S + 10, "process": "nemesis", "type": "info", "f": "pause", "node": "B",
         "value": {"nemesis": "process", "phase": "end", "fault": "paused", "started": 5 * S}},
    ]
    assert fault_windows(nemesis, 9 * S) == [Window("pause", "pause B", 5 * S, 9 * S, healed=False)]


def test_toxic_windows_of_one_heal_merge_into_one_band():
    heal = {"index": 3, "time": 6 * S, "process": "nemesis", "type": "info", "f": "heal", "node": "proxy",
            "value": {"nemesis": "proxy", "phase": "end", "proxy": "slow-A", "fault_window": [
                {"fault": "slow-A/toxic/up", "f": "latency", "start": 1 * S, "end": 6 * S},
                {"fault": "slow-A/toxic/down", "f": "latency", "start": 1 * S + 5, "end": 6 * S + 2}]}}
    assert fault_windows([heal], 10 * S) == [Window("latency", "latency slow-A", 1 * S, 6 * S + 2)]


def test_hostile_strings_are_escaped(tmp_path):
    evil = '<script>alert("x")</script>'
    h = H("evil-run")
    h.kill(at=1)
    h.op(1, "invoke", "send", msg(evil, seq=0, body=evil), at=2)
    h.op(1, "ok", "send", msg(evil, seq=0, body=evil), at=3, error='<img src=x onerror="alert(1)">')
    h.restart(at=5, killed_at=1)
    h.drain(2, [])
    page = page_of(write_run(tmp_path, h))
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # the id is shown, escaped
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_transport_events_are_listed_with_their_fault_window(tmp_path):
    run_dir = write_run(tmp_path, lost_during_kill())  # killed at 10 ms, back at 40 ms
    lines = [{"time": 2 * MS, "worker": "consumer-0", "kind": "resumed", "uri": "tcp://127.0.0.1:1", "reason": "connected"},
             {"time": 12 * MS, "worker": "consumer-0", "kind": "interrupted", "uri": "tcp://127.0.0.1:1",
              "reason": "<b>connection lost</b>"},
             {"time": 41 * MS, "worker": "consumer-0", "kind": "resumed", "uri": "tcp://127.0.0.1:1", "reason": "reconnected"}]
    (run_dir / "transport.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"time": 5')  # torn tail
    page = page_of(run_dir)
    section = page[page.index("<h2>Failover transport events"):]
    assert "1 line(s) of transport.jsonl could not be read" in section
    rows = re.findall(r"<tr><td>([\d.]+) s</td><td>consumer-0</td><td>(\w+)</td>.*?<td>([^<]*)</td></tr>", section)
    assert rows == [("0.002", "resumed", ""), ("0.012", "interrupted", "kill A"), ("0.041", "resumed", "")], rows
    assert "&lt;b&gt;connection lost&lt;/b&gt;" in section and "<b>" not in section


def test_a_run_without_failover_clients_has_no_transport_section(tmp_path):
    assert "Failover transport events" not in page_of(write_run(tmp_path, lost_during_kill()))


def test_page_size_is_bounded_for_200k_operations(tmp_path):
    """100 processes, 100k sends (200k events), 1,000 of them lost, two faults: the page stays
    well under 2 MB and says how many anomalies it did not list."""
    run = "big-run"
    run_dir = tmp_path / run
    run_dir.mkdir()
    lines, index, lost = [], 0, []

    def add(time, process, type, f, value):
        nonlocal index
        lines.append(json.dumps({"index": index, "time": time, "process": process, "type": type, "f": f,
                                 "value": value, "target": "t", "node": "A", "run": run}, separators=(",", ":")))
        index += 1

    for i in range(100_000):
        t = i * 600_000  # 60 s in all
        value = {"id": f"{run}-{i}", "producer": i % 100, "seq": i // 100, "destination": "queue://q"}
        add(t, i % 100, "invoke", "send", value)
        add(t + 300_000 + (i % 7) * 50_000, i % 100, "ok", "send", value)
        if i % 100 == 0:
            lost.append(value["id"])
        if i in (20_000, 70_000):
            add(t + 1, "nemesis", "info", "kill", {"nemesis": "process", "phase": "end", "fault": "down", "started": t})
        if i in (30_000, 80_000):
            add(t + 1, "nemesis", "info", "start", {"nemesis": "process", "phase": "end", "fault_window": [
                {"fault": "down", "f": "kill", "start": t - 6 * S, "end": t}]})
    (run_dir / "history.jsonl").write_text("\n".join(lines) + "\n")
    verdict = {"experiment": "big", "target": "t", "run": run, "valid": False, "history": "history.jsonl",
               "checks": {"total_queue": {"valid": False, "attempted": 100_000, "enqueued": 100_000,
                                          "dequeued": 99_000, "lost": lost, "unexpected": [], "duplicated": {},
                                          "recovered": [], "reason": ""}},
               "run_stats": {"faults": 2}, "summary": []}
    (run_dir / "verdict.json").write_text(json.dumps(verdict))
    size = render_chaos_report(run_dir).stat().st_size
    page = (run_dir / "report.html").read_text()
    assert size < 2_000_000, f"report.html is {size} bytes"
    assert "Anomalies (1000)" in page and "and 800 more anomalies" in page
    assert page.count("<td>lost<br>") == 200
    assert page.count('class="band"') >= 6  # two windows on each of the three time plots


def test_pipeline_anomalies_join_the_page(tmp_path):
    h = H("fifo-run")
    h.send(1, "m1", seq=0)
    h.send(1, "m2", seq=1)
    h.receive(0, "m2", seq=1)
    h.receive(0, "m1", seq=0)
    h.drain(2, [])
    run_dir = write_run(tmp_path, h)
    pipeline_dir = tmp_path / "analysis"
    pipeline_dir.mkdir()
    verdicts = {"valid": False, "runs": [{"run": "fifo-run", "target": "t", "valid": False, "skipped_lines": [],
                "checks": {"fifo": {"checker": "fifo", "valid": False, "applicable": True, "reason": "1 reordered",
                                    "stats": {"checked_destinations": 1}}},
                "anomalies": [{"checker": "fifo", "kind": "reordered", "message_id": "m1", "ops": [6, 7],
                               "detail": "arrived after m2 (seq 1)"}]}]}
    (pipeline_dir / "verdicts.json").write_text(json.dumps(verdicts))
    page = page_of(run_dir, pipeline_dir=pipeline_dir)
    assert "<h2>Pipeline checks" in page and "1 reordered" in page
    assert "<code>m1</code>" in page and "arrived after m2 (seq 1)" in page
    assert "<td>#6</td>" in page and "<td>#7</td>" in page
    with pytest.raises(ReportError, match="brokerconf analyze"):
        render_chaos_report(run_dir, pipeline_dir=tmp_path / "nowhere")


def test_the_pipelines_measurements_are_shown_in_their_words_not_as_passed_checks(tmp_path):
    """A measurement's result is always true: the pipeline section shows what it found (its
    declaration's words), marked a measurement, never a green "True" beside the checks."""
    h = H("measured-run").send(1, "m1").receive(0, "m1").drain(2, [])
    run_dir = write_run(tmp_path, h)
    pipeline_dir = tmp_path / "analysis"
    pipeline_dir.mkdir()
    outcomes = {"checker": "outcomes", "valid": True, "applicable": True, "reason": "", "stats": {
        "by_f": {"send": {"ok": 1, "fail": 0, "info": 2, "fail_errors": [], "info_errors": [["reset", 2]]}},
        "never_ok": [], "in_doubt_sends": {"messages": 2, "delivered": 1, "never_delivered": 1}}}
    verdicts = {"valid": True, "runs": [{"run": "measured-run", "target": "t", "valid": True, "skipped_lines": [],
                                         "checks": {"outcomes": outcomes}, "anomalies": []}]}
    (pipeline_dir / "verdicts.json").write_text(json.dumps(verdicts))
    page = page_of(run_dir, pipeline_dir=pipeline_dir)
    row = page[page.index("<td><code>outcomes</code></td>", page.index("<h2>Pipeline checks")):]
    row = row[:row.index("</tr>")]
    assert "<td>measurement</td>" in row and ">True<" not in row, row
    assert "outcomes of send: 1 ok, 0 fail, 2 info; info: &#x27;reset&#x27; x2" in row
    assert "sends in doubt: 2 messages, 1 delivered nevertheless, 1 never" in row


def test_history_alone_without_verdict(tmp_path):
    run_dir = lost_during_kill().write(tmp_path).parent
    page = page_of(run_dir)
    assert "No verdict.json" in page and "<svg" in page and 'class="band"' in page


def test_missing_history_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ReportError, match="no history"):
        render_chaos_report(tmp_path)
    assert chaos_report.main([str(tmp_path)]) == 2
    assert "history.jsonl" in capsys.readouterr().err


def test_main_renders_a_run(tmp_path, capsys):
    run_dir = write_run(tmp_path, lost_during_kill())
    assert chaos_report.main([str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "report.html")


def test_topic_fanout_bars(tmp_path):
    fanout = {"valid": False, "attempted": 10, "acknowledged": 10, "unexpected": [], "reason": "",
              "subscribers": {"0": {"expected": 10, "received": 7, "observed_discards": 3, "broker_discards": 2,
                                    "missing": ["t-7", "t-8", "t-9"], "unexpected": [], "duplicated": {},
                                    "out_of_window": []}}}
    h = H("topic-run")
    h.send(1, "t-0")
    page = page_of(write_run(tmp_path, h, topic_fanout=fanout))
    assert "lost vs broker discards per subscriber" in page
    assert "lost (history) 3" in page and "broker discards 2" in page
    assert page.count("subscriber 0</td>") == 3  # the three missing ids, each naming its subscriber


@pytest.mark.slow
def test_a_real_run_directory(tmp_path, fresh_queue_run):
    """The page of a real run: one made for this session (conftest's fresh_queue_run), and the
    newest chaos run under reports/out when there is one."""
    earlier = sorted((REPO / "reports/out").glob("chaos-*/verdict.json"))[-1:]
    for i, source in enumerate([fresh_queue_run, *(v.parent for v in earlier)]):
        run_dir = Path(shutil.copytree(source, tmp_path / f"{i}-{source.name}",
                                       ignore=shutil.ignore_patterns("report.html")))
        page = page_of(run_dir)
        verdict = json.loads((run_dir / "verdict.json").read_text())
        assert verdict["run"] in page and page.count("<svg") >= 3, source


# ---------------------------------------------------------------------- aggregation


def test_timeline_lanes_keep_the_worst_outcome_per_column():
    ops = [(1, "send", i * 10, i * 10 + 5, "ok") for i in range(1000)]  # 1000 ops in 10 us
    ops.append((1, "send", 5000, 5003, "info"))
    ops.append((2, "receive", 0, None, "open"))
    lanes = timeline_lanes(ops, 10_000, columns=100)
    (p1, label1, intervals1), (p2, _, intervals2) = lanes
    assert (p1, label1, p2) == (1, "p1 send", 2)
    assert [o for _, _, o in intervals1] == ["ok", "info", "ok"]  # merged, not one mark per op
    assert intervals2 == [(0, 10_100, "open")]


def test_latency_percentiles_and_throughput_per_bin():
    ops = [(1, "send", 0, (i + 1) * MS, "ok") for i in range(100)]  # latencies 1..100 ms, all in bin 0
    ops.append((1, "send", 0, 50 * MS, "fail"))  # a failure is no latency
    (t, p50, p99, n), = latency_series(ops, ["send"], 1 * S)["send"]
    assert (t, p50, p99, n) == (0.0, 50.0, 99.0, 100)
    rate = throughput_series(ops, ["send"], S // 2, 2 * S)["send"]
    assert rate == [(0.0, 200.0), (0.5, 0.0), (1.0, 0.0), (1.5, 0.0), (2.0, 0.0)]


def test_svg_helpers():
    assert Scale(0, 10, 0, 100).ticks(5) == [0, 2, 4, 6, 8, 10]
    assert Scale(1, 1000, 0, 100, log=True).ticks() == [1, 10, 100, 1000]
    assert (fmt(4839.8), fmt(12_500), fmt(0.25)) == ("4840", "12.5k", "0.25")
    plot = Plot.make((0, 10), (0, 1), bands=[Band(2, 4, "kill A"), Band(3, 5, "pause B")])
    plot.bands([Band(2, 4, "kill A"), Band(3, 5, "pause B")])
    plot.line([(0, 0), (1, None), (2, 1), (3, 1)], "#000", "s")
    svg = plot.svg("t")
    assert svg.count('class="band"') == 2 and svg.count("<polyline") == 1 and svg.count("<circle") == 1
    bars = bar_chart([("fault <1>", [("c", 5.0), ("never", None)])])
    assert "fault &lt;1&gt;" in bars and "never n/a" in bars


# ---------------------------------------------------------------------- comparison


MATRIX = {"generated_at": "2026-01-01T00:00:00Z",
          "targets": {"reference": {"name": "reference", "kind": "reference", "launch": "in-process", "available": True,
                                    "reason": "", "start_error": ""}},
          "catalogue": {"Q-FIFO-1": {"document": "core", "section": "JMS 1.1 § 4.4.10", "paraphrase": "order kept",
                                     "applies_to": ["reference"], "note": ""}},
          "matrix": {"reference": {"Q-FIFO-1": {"outcome": "failed", "reason": "m2 before m1", "tests": []}}},
          "summary": {"reference": {"listed": 1, "applicable": 1, "checked": 1, "passed": 0, "failed": 1,
                                    "known_deviation": 0, "not_applicable": 0, "not_checked": 0}},
          "tests": {}}

COMPARISON = {"specs": {"Q-FIFO-1": {"reference": "failed", "activemq": "passed"}},
              "checkers": {"total_queue": {"activemq": False, "reference": "unknown"}},
              "spec_runs": {"Q-FIFO-1": {"reference": {"ci-1@x": "passed", "ci-2@y": "failed"},
                                         "activemq": {"ci-1@x": "passed"}}},
              "checker_runs": {"total_queue": {"activemq": {"kill-3": False}, "reference": {"kill-2": "unknown"}}},
              "targets": ["activemq", "reference"], "inputs": {"matrices": [], "verdicts": []}}


def test_comparison_report(tmp_path):
    matrix_path = tmp_path / "ci-1" / "matrix.json"
    matrix_path.parent.mkdir()
    matrix_path.write_text(json.dumps(MATRIX))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "comparison.json").write_text(json.dumps(COMPARISON))
    out = render_comparison_report(tmp_path / "out" / "comparison.json", [matrix_path], tmp_path / "out" / "index.html")
    page = out.read_text()
    specs = page[page.index("Target x spec ID"):page.index("Target x checker")]
    checkers = page[page.index("Target x checker"):page.index("Conformance matrices")]
    assert "<code>Q-FIFO-1</code>" in specs and "order kept" in specs  # paraphrase from the matrix's catalogue
    assert 'background:#ffebee;color:#b71c1c" title="ci-1@x: passed; ci-2@y: failed">failed' in specs
    assert "<small>2 runs</small>" in specs
    assert 'title="kill-3: false">false</td>' in checkers and ">unknown</td>" in checkers
    assert '<a href="matrix-1-ci-1.html">ci-1</a>' in page
    assert "m2 before m1" in (tmp_path / "out" / "matrix-1-ci-1.html").read_text()


def test_comparison_missing_cell_and_bad_input(tmp_path):
    data = dict(COMPARISON, checkers={"groups": {"activemq": True}}, checker_runs={})
    page = render_comparison_report(data, [], tmp_path / "c.html").read_text()
    assert '<td class="c" style="background:#fafafa;color:#9e9e9e">-</td>' in page  # reference never ran groups
    with pytest.raises(ComparisonError, match="specs"):
        render_comparison_report({"runs": []}, [], tmp_path / "d.html")


def test_served_lanes_merge_neighbouring_columns_per_node():
    served = [("A", t) for t in (0, 10, 20)] + [("B", 60), ("B", 70), ("A", 95)]
    assert served_lanes(served, 100, columns=10) == [("A", [(0, 30), (90, 100)]), ("B", [(60, 80)])]


def test_timeline_shows_which_node_served_each_operation(tmp_path):
    """Issue 18: a master/slave run's page has a "served by" lane per node."""
    h = H("served-run")
    h.send(0, "a", node="A").receive(1, "a", node="A")
    h.kill(at=10)
    h.send(0, "b", seq=1, node="B").receive(1, "b", seq=1, node="B").drain(2, [])
    from reports.checkers.split_brain import check_split_brain
    page = page_of(write_run(tmp_path, h, split_brain=check_split_brain(h.lines).to_json()))
    assert ">served by A</text>" in page and ">served by B</text>" in page
    assert "served by A, B, 1 handovers - nodes A, B served in turn; every switch was clean" in page
    assert page.count('<title>node B accepted operations</title>') >= 1


def test_split_brain_windows_are_listed_in_the_checks_table(tmp_path):
    from reports.checkers.split_brain import check_split_brain
    from tests.reports.test_checkers import LITERALS
    h = LITERALS["split_brain_both_nodes_accept"]
    page = page_of(write_run(tmp_path, h, split_brain=check_split_brain(h.lines).to_json()))
    assert "overlapping windows: A and B 1.510 s - 1.601 s (ops 7, 9)" in page
