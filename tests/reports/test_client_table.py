"""Issue 28's table (reports/client_table.py): client statements x clients from a matrix, and the
reconnect gaps the tests recorded in junit.xml side by side; `brokerconf clients` printing it and
the run report's Clients section. Everything is built from a small matrix and a JUnit file written
here, in the shapes the plugin (conformance/matrix.py) and pytest's junitxml write."""

from __future__ import annotations

import json
from xml.sax.saxutils import quoteattr

import pytest

from brokerconf.cli import main
from reports.client_table import (GAPS_PROPERTY, NOT_MEASURED, OPTION_SETS, SCHEDULE_PROPERTY, ClientTableError,
                                  Measurement, Schedule, option_key, read_junit, read_matrix, render_markdown,
                                  schedule_property, statement_table, wait_cell_texts, wait_table)
from reports.render.run_report import write_run_report

AMQ5, AMQ6 = "activemq-client 5.17.2 (openwire)", "activemq-client 6.3.1 (openwire)"
OURS = "brokerconf failover (python)"
FT = "redhat-amq-6.2-fault-tolerant-messaging.md"
#: a reason with markup in it: the HTML must show it as text
DEVIATION = "activemq-client refuses the guide's backOffMultiplier <option> & calls it reconnectDelayExponent"
CLUSTERS_NA = "no test of this client checks a statement of artemis-clusters.md"
MULTIPLIER = "initialReconnectDelay=100&backOffMultiplier=3&maxReconnectDelay=1000"


def _statement(section: str, subject: str = "client", document: str = FT) -> dict:
    return {"document": document, "section": section, "paraphrase": "(paraphrase)", "applies_to": ["activemq"],
            "note": "", "not_observable": "", "subject": subject}


def _cell(outcome: str, reason: str = "", tests: int = 0) -> dict:
    return {"outcome": outcome, "reason": reason,
            "tests": [{"nodeid": f"t::x[{n}]", "target": "activemq", "protocol": "stomp", "outcome": outcome,
                       "reason": reason, "seconds": 0.1} for n in range(tests)]}


def fixture_matrix() -> dict:
    """Two real ActiveMQ clients and ours; FT-FAILOVER-5 deviates on 5.17 only (for the fixture),
    CLU-CLIENT-2 is not applicable to them; CORE-ACK-1 is a broker statement."""
    catalogue = {"FT-FAILOVER-4": _statement("2.1.1 Transport options, Table 2.1 (initialReconnectDelay)"),
                 "FT-FAILOVER-5": _statement("2.1.1 Transport options, Table 2.1 (backOffMultiplier)"),
                 "CLU-CLIENT-2": _statement("Client-Side Load balancing (Round Robin)", document="artemis-clusters.md"),
                 "CORE-ACK-1": _statement("Acknowledgement", subject="broker", document="core.md")}
    client_cells = {
        AMQ5: {"FT-FAILOVER-4": _cell("passed", "against activemq", 2),
               "FT-FAILOVER-5": _cell("known deviation", DEVIATION, 3),
               "CLU-CLIENT-2": _cell("not applicable", CLUSTERS_NA),
               "CORE-ACK-1": _cell("not a client statement")},
        AMQ6: {"FT-FAILOVER-4": _cell("passed", "against activemq", 2),
               "FT-FAILOVER-5": _cell("failed", "activemq: gaps [1, 2]", 3),
               "CLU-CLIENT-2": _cell("not applicable", CLUSTERS_NA),
               "CORE-ACK-1": _cell("not a client statement")},
        OURS: {"FT-FAILOVER-4": _cell("passed", "against reference, activemq", 2),
               "FT-FAILOVER-5": _cell("passed", "against reference, activemq", 2),
               "CLU-CLIENT-2": _cell("not applicable", CLUSTERS_NA),
               "CORE-ACK-1": _cell("not a client statement")},
    }
    summary = {"listed": 4, "applicable": 1, "checked": 1, "passed": 1, "failed": 0, "known_deviation": 0,
               "not_applicable": 0, "not_checked": 0}
    return {
        "generated_at": "2026-11-29T17:00:00Z",
        "targets": {"activemq": {"name": "activemq", "kind": "activemq", "launch": "process", "available": True,
                                 "reason": "", "capabilities": [], "start_error": ""}},
        "clients": {f"client: {s}": {"subject": s, "targets": ["activemq"]} for s in client_cells},
        "catalogue": catalogue,
        "matrix": {"activemq": {spec: _cell("not a broker statement") if spec != "CORE-ACK-1" else _cell("passed")
                                for spec in catalogue},
                   **{f"client: {s}": cells for s, cells in client_cells.items()}},
        "summary": {"activemq": summary, **{f"client: {s}": summary for s in client_cells}},
        "tests": [],
    }


def _schedule(client: str, options: str, waits: list[float], *, target: str = "activemq",
              specs: tuple[str, ...] = ("FT-FAILOVER-5",), seen_at: str = "wire") -> str:
    return schedule_property(statements=list(specs), client=client, target=target, transport="failover",
                             options=options, waits_ms=waits, seen_at=seen_at)


def _case(name: str, properties: dict, outcome: str = "") -> str:
    # as pytest's junitxml writes them: record_property values as str(value)
    props = "".join(f"<property name={quoteattr(k)} value={quoteattr(str(v))}/>" for k, v in properties.items())
    return (f'<testcase classname="suites.test_failover_real_clients" name={quoteattr(name)} time="1.0">'
            f"<properties>{props}</properties>{outcome}</testcase>")


def fixture_junit() -> str:
    cases = [
        # 5.17 with the defaults: measured
        _case("test_real_client_waits[activemq-defaults-activemq-5]",
              {SCHEDULE_PROPERTY: _schedule(AMQ5, "", [10, 20, 40, 80, 160, 320]),
               GAPS_PROPERTY: [11.2, 21.4, 41.0, 81.9, 161.5, 322.7]}),
        # 5.17 with backOffMultiplier: the known deviation stops it before it measures anything
        _case("test_real_client_back_off[activemq-activemq-5]",
              {SCHEDULE_PROPERTY: _schedule(AMQ5, "&" + MULTIPLIER, [100, 300, 900, 1000, 1000])},
              f'<skipped type="pytest.xfail" message={quoteattr("known deviation FT-FAILOVER-5: " + DEVIATION)}/>'),
        # ours, the same defaults, on two targets, timed at two places
        _case("test_reconnect_waits_follow_the_delay_options[reference-defaults]",
              {SCHEDULE_PROPERTY: _schedule(OURS, "", [10, 20, 40, 80, 160, 320], target="reference",
                                            specs=("FT-FAILOVER-4", "FT-FAILOVER-5"), seen_at="connect call"),
               GAPS_PROPERTY: [10.4, 20.3, 40.2, 80.6, 160.1, 320.8]}),
        _case("test_our_client_reconnect_waits_seen_on_the_wire[activemq-defaults-ours]",
              {SCHEDULE_PROPERTY: _schedule(OURS, "", [10, 20, 40, 80, 160, 320],
                                            specs=("FT-FAILOVER-4", "FT-FAILOVER-5")),
               GAPS_PROPERTY: [12.0, 22.9, 42.1, 83.3, 163.0, 324.4]}),
        # ours, multiplier written in another order: the same option set
        _case("test_reconnect_waits_follow_the_delay_options[reference-multiplier-3-capped-at-1000]",
              {SCHEDULE_PROPERTY: _schedule(OURS, "maxReconnectDelay=1000&backOffMultiplier=3&"
                                                  "initialReconnectDelay=100", [100, 300, 900, 1000, 1000],
                                            target="reference", seen_at="connect call"),
               GAPS_PROPERTY: [101.0, 302.0, 903.0, 1001.0, 1002.0]},
              '<failure message="FT-FAILOVER-5: late">late</failure>'),
        # a test with no reconnect property at all is not a measurement
        _case("test_real_client_moves[activemq-activemq-5]", {}),
    ]
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="6">'
            + "".join(cases) + "</testsuite></testsuites>")


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "matrix.json").write_text(json.dumps(fixture_matrix()))
    (tmp_path / "junit.xml").write_text(fixture_junit())
    return tmp_path


def _row(table, name: str):
    return next(row for row in table.rows if row.option_set.name == name)


def test_one_row_per_client_statement_with_each_client_column_s_outcome(run_dir):
    table = statement_table(read_matrix(run_dir / "matrix.json"))
    assert table.columns == [AMQ5, AMQ6, OURS]
    assert [spec for spec, _, _ in table.rows] == ["FT-FAILOVER-4", "FT-FAILOVER-5", "CLU-CLIENT-2"]  # no CORE-ACK-1
    cells = {spec: cells for spec, _, cells in table.rows}
    assert cells["FT-FAILOVER-5"] == {AMQ5: ("known deviation", DEVIATION), AMQ6: ("failed", "activemq: gaps [1, 2]"),
                                      OURS: ("passed", "against reference, activemq")}
    assert cells["CLU-CLIENT-2"][AMQ6] == ("not applicable", CLUSTERS_NA)
    assert dict((spec, title) for spec, title, _ in table.rows)["FT-FAILOVER-4"] == \
        "2.1.1 Transport options, Table 2.1 (initialReconnectDelay)"


def test_gaps_of_every_client_side_by_side_with_the_waits_the_options_imply(run_dir):
    table = wait_table(read_matrix(run_dir / "matrix.json"), read_junit(run_dir / "junit.xml"))
    # the clients with a reconnect-wait test in the matrix, in its order
    assert table.columns == [AMQ5, AMQ6, OURS]
    assert [row.option_set for row in table.rows] == list(OPTION_SETS)  # every set listed, none added
    defaults = _row(table, "defaults")
    assert defaults.waits_ms == (10, 20, 40, 80, 160, 320)
    assert defaults.statements == ["FT-FAILOVER-4", "FT-FAILOVER-5"]
    assert wait_cell_texts(defaults, AMQ5) == ["11, 21, 41, 82, 162, 323"]
    # ours ran the set on two targets, timed at two places: each series says which
    assert wait_cell_texts(defaults, OURS) == ["10, 20, 40, 81, 160, 321 (reference, at the connect call)",
                                               "12, 23, 42, 83, 163, 324 (activemq, at the wire)"]
    # two tests of one client with the same options, about different statements: each says which
    two_tests = _row(wait_table(fixture_matrix(), read_junit(run_dir / "junit.xml") + [
        Measurement("t::ft4", "passed", "", Schedule(("FT-FAILOVER-4",), AMQ5, "activemq", "failover", "",
                                                     (10, 20, 40, 80), "wire"), (10.6, 20.4, 40.8, 81.1))]), "defaults")
    assert wait_cell_texts(two_tests, AMQ5) == ["11, 21, 41, 82, 162, 323 (FT-FAILOVER-5)",
                                                "11, 20, 41, 81 (FT-FAILOVER-4)"]
    multiplier = _row(table, "backOffMultiplier 3, capped at 1000 ms")
    assert multiplier.waits_ms == (100, 300, 900, 1000, 1000)
    # the deviation stopped 5.17 before any gap: said, never a number
    assert wait_cell_texts(multiplier, AMQ5) == [f"{NOT_MEASURED} (known deviation)"]
    assert wait_cell_texts(multiplier, OURS) == ["101, 302, 903, 1001, 1002 (failed)"]


def test_a_client_without_a_gaps_property_shows_not_measured_never_a_number(run_dir):
    table = wait_table(read_matrix(run_dir / "matrix.json"), read_junit(run_dir / "junit.xml"))
    # 6.3.1 has reconnect-wait tests in the matrix but recorded nothing in this junit.xml
    assert all(wait_cell_texts(row, AMQ6) == [NOT_MEASURED] for row in table.rows)
    no_back_off = _row(table, "no back-off")
    assert no_back_off.waits_ms is None and no_back_off.statements == []
    assert all(wait_cell_texts(no_back_off, s) == [NOT_MEASURED] for s in table.columns)
    text = render_markdown(statement_table(read_matrix(run_dir / "matrix.json")), table)
    line = next(line for line in text.splitlines() if line.startswith("| no back-off |"))
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[3:] == ["(no test of these options in this run)", *[NOT_MEASURED] * 3], line


def test_option_sets_match_whatever_order_the_options_were_written_in():
    assert option_key("&b=2&a=1") == option_key("?a=1&b=2") == "a=1&b=2"
    assert option_key("") == option_key("?") == ""


def test_gaps_recorded_without_a_schedule_are_named_not_placed(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>' + _case("test_old[activemq-defaults-activemq-5]",
                                                       {GAPS_PROPERTY: [10.0, 20.0]}) + "</testsuite></testsuites>")
    table = wait_table(fixture_matrix(), read_junit(junit))
    assert table.unplaced == ["suites.test_failover_real_clients::test_old[activemq-defaults-activemq-5]"]
    assert all(wait_cell_texts(row, AMQ5) == [NOT_MEASURED] for row in table.rows)
    assert "not placed" in render_markdown(statement_table(fixture_matrix()), table)


def test_tests_that_disagree_on_what_the_options_imply_are_both_shown(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>' + "".join(_case(f"test_{n}[x]", {
        SCHEDULE_PROPERTY: _schedule(client, "", waits), GAPS_PROPERTY: [11.0, 21.0]}) for n, (client, waits) in
        enumerate([(AMQ5, [10, 20, 40]), (OURS, [10, 20]), (AMQ6, [10, 30])])) + "</testsuite></testsuites>")
    defaults = _row(wait_table(fixture_matrix(), read_junit(junit)), "defaults")
    # [10, 20] is the beginning of [10, 20, 40]: the same schedule, waited for less far; [10, 30] is not
    assert defaults.waits_ms == (10, 20, 40) and defaults.other_waits == [(10, 30)]
    text = render_markdown(statement_table(fixture_matrix()), wait_table(fixture_matrix(), read_junit(junit)))
    assert "| 10, 20, 40 (another test: 10, 30) |" in text


def test_a_schedule_outside_the_listed_option_sets_gets_its_own_row(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>' + _case("test_new[x]", {
        SCHEDULE_PROPERTY: _schedule(OURS, "&initialReconnectDelay=50", [50, 100]), GAPS_PROPERTY: [51.0, 101.0]})
        + "</testsuite></testsuites>")
    table = wait_table(fixture_matrix(), read_junit(junit))
    extra = table.rows[-1]
    assert extra.option_set.options == "initialReconnectDelay=50" and extra.waits_ms == (50, 100)
    assert wait_cell_texts(extra, OURS) == ["51, 101"]


def test_the_markdown_numbers_the_reasons_of_cells_that_did_not_pass(run_dir):
    text = render_markdown(statement_table(read_matrix(run_dir / "matrix.json")),
                           wait_table(read_matrix(run_dir / "matrix.json"), read_junit(run_dir / "junit.xml")))
    lines = text.splitlines()
    ft5 = next(line for line in lines if line.startswith("| FT-FAILOVER-5 |"))
    assert "| known deviation [1] | failed [2] | passed |" in ft5
    assert f"[1] {DEVIATION}" in lines and "[2] activemq: gaps [1, 2]" in lines
    assert f"[3] {CLUSTERS_NA}" in lines
    # a table row keeps its columns: every row has as many cells as the head
    head = next(line for line in lines if line.startswith("| statement |"))
    assert ft5.count(" | ") == head.count(" | ")


@pytest.mark.parametrize("junit_text", ["<testsuites><testsuite", "<testsuites><testsuite><testcase name='x'>"
                                        "<properties><property name='reconnect_gaps_ms' value='ten'/></properties>"
                                        "</testcase></testsuite></testsuites>"], ids=["not-xml", "not-numbers"])
def test_an_unreadable_junit_file_is_an_error(tmp_path, junit_text):
    (tmp_path / "junit.xml").write_text(junit_text)
    with pytest.raises(ClientTableError):
        read_junit(tmp_path / "junit.xml")


def test_cli_prints_both_tables(run_dir, capsys):
    assert main(["clients", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "## Client statements x clients" in out and "## Reconnect waits side by side" in out
    assert "11, 21, 41, 82, 162, 323" in out and NOT_MEASURED in out


def test_cli_takes_the_matrix_and_the_junit_from_elsewhere(run_dir, tmp_path_factory, capsys):
    elsewhere = tmp_path_factory.mktemp("empty")
    assert main(["clients", str(elsewhere), "--matrix", str(run_dir / "matrix.json"),
                 "--junit", str(run_dir / "junit.xml")]) == 0
    assert "11, 21, 41, 82, 162, 323" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing-dir", "no-matrix", "bad-matrix", "bad-junit"])
def test_cli_a_directory_it_cannot_read_is_a_usage_error_naming_the_option(tmp_path, capsys, case):
    report_dir = tmp_path / "run"
    if case != "missing-dir":
        report_dir.mkdir()
    if case == "bad-matrix":
        (report_dir / "matrix.json").write_text("{not json")
    if case == "bad-junit":
        (report_dir / "matrix.json").write_text(json.dumps(fixture_matrix()))
        (report_dir / "junit.xml").write_text("<testsuites")
    assert main(["clients", str(report_dir)]) == 2
    err = capsys.readouterr().err
    assert "brokerconf clients: REPORT_DIR:" in err and str(report_dir) in err


def test_cli_without_junit_prints_the_statements_and_no_gap(tmp_path, capsys):
    (tmp_path / "matrix.json").write_text(json.dumps(fixture_matrix()))
    assert main(["clients", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "no junit.xml" in captured.err
    assert "| FT-FAILOVER-5 |" in captured.out and "11, 21" not in captured.out


def test_the_run_report_has_a_clients_section(run_dir):
    page = write_run_report(run_dir, "r1", read_matrix(run_dir / "matrix.json"), seconds=1.0).read_text()
    section = page[page.index("<h2>Clients</h2>"):page.index("<h2>Targets and clients</h2>")]
    assert "<code>FT-FAILOVER-5</code>" in section and "11, 21, 41, 82, 162, 323" in section
    assert f"{NOT_MEASURED} (known deviation)" in section
    # the run's texts are escaped
    assert "backOffMultiplier &lt;option&gt; &amp; calls it" in section and "<option>" not in section


def test_the_run_report_says_why_a_junit_gave_no_gaps(tmp_path):
    page = write_run_report(tmp_path, "r1", fixture_matrix(), seconds=1.0).read_text()
    assert "<h2>Clients</h2>" in page and "No reconnect gaps: cannot read" in page
    assert "11, 21" not in page


def test_the_suites_option_sets_each_have_a_row():
    # the suites' reconnect-wait parameters, read from their parametrize marks: a set missing
    # from OPTION_SETS would still be shown, but after the others and named by its options
    from suites import test_failover_pairs as pairs
    from suites import test_failover_real_clients as real

    measured = {option_key(options) for options, _ in (p.values for p in real.DELAYS)}
    for test in (pairs.test_reconnect_waits_follow_the_delay_options,
                 real.test_our_client_reconnect_waits_seen_on_the_wire):
        marks = [m for m in test.pytestmark if m.name == "parametrize" and m.args[0] == "options, waits"]
        assert marks, test.__name__
        measured |= {option_key(p.values[0] if hasattr(p, "values") else p[0]) for p in marks[0].args[1]}
    assert len(measured) == 5, measured  # defaults, exponent 3, multiplier 3, no back-off, 500 ms
    listed = {option_set.key[1] for option_set in OPTION_SETS if option_set.transport == "failover"}
    assert measured <= listed, measured - listed
