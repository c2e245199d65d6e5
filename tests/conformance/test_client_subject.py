"""Statements about a client library (catalogue ``subject = "client"``) in the matrix: their
verdicts go to a column of the client a test exercised (``@pytest.mark.client_subject``), never to
the broker it ran against; the broker's column says "not a broker statement" and its summary leaves
them out; a test tied to one without naming its client is refused at collection."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from conformance.matrix import ConformanceResults, summary_line
from conformance.matrix import TestRecord as Record  # (not collected as a test class)
from conformance.spec.catalogue import CatalogueError, load_catalogue
from reports.render.matrix_report import render_matrix

pytest_plugins = ["pytester"]

CATALOGUE = """
document = "toy.md"
title = "Toy rules"

[[statement]]
id = "TOY-SEND-1"
section = "Sending"
paraphrase = "A broker accepts a connection."
applies_to = ["reference", "activemq"]

[[statement]]
id = "TOY-FO-1"
section = "Failover"
paraphrase = "A failover client moves to the next broker of its list."
applies_to = ["reference", "activemq"]
subject = "client"

[[statement]]
id = "TOY-FO-2"
section = "Failover"
paraphrase = "A failover client takes list updates a broker sends."
applies_to = ["reference", "activemq"]
subject = "client"
"""

OURS = "toy failover (python)"
JAVA = "toy-client 1.0 (java)"


@pytest.fixture
def catalogue(tmp_path):
    (tmp_path / "toy.toml").write_text(CATALOGUE)
    return load_catalogue.__wrapped__(tmp_path)


def results_for(catalogue, *records: Record) -> ConformanceResults:
    results = ConformanceResults(catalogue)
    results.add_target("reference", kind="reference", launch="in-process", available=True)
    results.add_target("activemq", kind="activemq", launch="process", available=True)
    for n, record in enumerate(records):
        results.record(record, n)
    return results


def client_record(nodeid: str, target: str, outcome: str, subject: str = OURS, specs=("TOY-FO-1",), reason: str = "",
                  broker_part=()) -> Record:
    return Record(nodeid, target, "stomp", list(specs), outcome, reason, client_subject=subject,
                  broker_part=list(broker_part))


REPO = Path(__file__).resolve().parents[2]


def _script(name: str):
    """A module of scripts/ (not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- the catalogue


def test_subject_defaults_to_broker_and_client_is_read(catalogue):
    assert catalogue["TOY-SEND-1"].subject == "broker" and not catalogue["TOY-SEND-1"].about_client
    assert catalogue["TOY-FO-1"].subject == "client" and catalogue["TOY-FO-1"].about_client


def test_an_unknown_subject_is_refused(tmp_path):
    (tmp_path / "toy.toml").write_text(CATALOGUE.replace('subject = "client"', 'subject = "consumer"', 1))
    with pytest.raises(CatalogueError, match="TOY-FO-1.*subject 'consumer' is not one of"):
        load_catalogue.__wrapped__(tmp_path)


def test_the_project_catalogue_marks_the_client_library_statements():
    catalogue = load_catalogue()
    about_client = {i for i, s in catalogue.items() if s.about_client}
    # the failover transport's options and discovery (A-MQ FT chapter 2), Artemis's client factory
    assert {f"FT-FAILOVER-{n}" for n in range(1, 17)} <= about_client
    assert {"FT-DISCOVERY-1", "FT-DISCOVERY-2", "FT-DISCOVERY-3", "FT-DISCOVERY-4", "FT-DISCOVERY-6",
            "FT-DYNAMIC-1"} <= about_client
    assert {f"CLU-CLIENT-{n}" for n in range(1, 8)} | {"CLU-DISC-8", "CLU-DISC-11", "CLU-STATIC-2"} <= about_client
    # what the broker sends, refuses or announces stays the broker's
    assert not {"FT-DYNAMIC-2", "FT-DYNAMIC-3", "FT-DYNAMIC-4", "FT-DYNAMIC-5", "FT-DISCOVERY-5",
                "FT-SHARED-9", "FT-JDBC-2", "CLU-DISC-1", "CLU-LB-1"} & about_client


# --------------------------------------------------------------------------- the matrix


def test_a_client_statement_checked_on_the_reference_target_lands_in_its_client_column(catalogue):
    results = results_for(catalogue, client_record("s.py::test_moves[reference]", "reference", "passed"))
    client = results.cell(f"client: {OURS}", "TOY-FO-1")
    assert client["outcome"] == "passed"
    assert client["reason"] == "against reference"
    assert [(t["nodeid"], t["target"], t["outcome"]) for t in client["tests"]] == \
        [("s.py::test_moves[reference]", "reference", "passed")]
    broker = results.cell("reference", "TOY-FO-1")
    assert broker["outcome"] == "not a broker statement"
    assert f"client: {OURS}" in broker["reason"] and broker["tests"] == []
    # a statement no test of this client checked is "not checked" in its column, a broker's is not its
    assert results.cell(f"client: {OURS}", "TOY-FO-2")["outcome"] == "not checked"
    assert results.cell(f"client: {OURS}", "TOY-SEND-1")["outcome"] == "not a client statement"
    data = results.to_json()
    assert list(data["matrix"]) == ["reference", "activemq", f"client: {OURS}"]
    assert data["clients"] == {f"client: {OURS}": {"subject": OURS, "targets": ["reference"]}}
    assert data["catalogue"]["TOY-FO-1"]["subject"] == "client"


def test_a_failover_option_checked_with_our_client_is_not_credited_to_the_broker():
    """Issue 26: FT-FAILOVER-8 (randomize) passing with our failover client against ActiveMQ said
    "passed" in ActiveMQ's column, though it is a statement about the client."""
    results = ConformanceResults(load_catalogue())
    results.add_target("activemq", kind="activemq", launch="process", available=True)
    record = Record("test_failover_pairs.py::test_client_moves[activemq]", "activemq", "stomp",
                    ["FT-FAILOVER-1", "FT-FAILOVER-8"], "passed")
    record.client_subject = "brokerconf failover (python)"
    results.record(record, 0)
    assert results.cell("activemq", "FT-FAILOVER-8")["outcome"] == "not a broker statement"
    assert results.summary("activemq")["passed"] == 0
    assert results.cell("client: brokerconf failover (python)", "FT-FAILOVER-8")["outcome"] == "passed"


def test_each_client_subject_has_its_column_merged_over_the_targets_it_ran_against(catalogue):
    results = results_for(
        catalogue,
        client_record("s.py::test_moves[reference-ours]", "reference", "passed"),
        client_record("s.py::test_moves[activemq-ours]", "activemq", "failed", reason="AssertionError: TOY-FO-1: stuck"),
        client_record("s.py::test_moves[activemq-java]", "activemq", "passed", subject=JAVA))
    assert results.client_columns() == sorted([f"client: {JAVA}", f"client: {OURS}"])
    ours = results.cell(f"client: {OURS}", "TOY-FO-1")
    assert ours["outcome"] == "failed"  # one failing run is never hidden by another passing
    assert ours["reason"] == "against reference, activemq; activemq: AssertionError: TOY-FO-1: stuck"
    assert results.cell(f"client: {JAVA}", "TOY-FO-1")["outcome"] == "passed"
    for target in ("reference", "activemq"):
        assert results.cell(target, "TOY-FO-1")["outcome"] == "not a broker statement"


def test_broker_summaries_leave_client_statements_out_and_client_columns_count_them(catalogue):
    results = results_for(
        catalogue,
        Record("s.py::test_send[reference]", "reference", "stomp", ["TOY-SEND-1"], "passed"),
        client_record("s.py::test_moves[reference]", "reference", "failed", reason="boom"))
    broker = results.summary("reference")
    assert (broker["listed"], broker["applicable"], broker["checked"], broker["passed"], broker["failed"],
            broker["not_checked"], broker["not_applicable"], broker["client_statements"]) == (3, 1, 1, 1, 0, 0, 0, 2)
    client = results.summary(f"client: {OURS}")
    assert (client["applicable"], client["checked"], client["passed"], client["failed"], client["not_checked"],
            client["broker_statements"]) == (2, 1, 0, 1, 1, 1)
    lines = results.summary_lines()
    assert lines[0].startswith("reference (reference, in-process): 1/1 applicable statements checked, 1 passed, "
                               "0 failed")
    assert lines[0].endswith("; 2 about clients (not a broker's, see the client columns)")
    assert lines[2] == (f"client: {OURS} (client, against reference): 1/2 client statements of its documents "
                        f"checked, 0 passed, 1 failed, 0 known deviations, 1 not checked, 0 not applicable")
    assert summary_line(f"client: {OURS}", results.to_json()) == lines[2]


def test_a_client_column_covers_the_client_statements_of_the_documents_its_tests_check(tmp_path):
    (tmp_path / "toy.toml").write_text(CATALOGUE)
    (tmp_path / "other.toml").write_text('document = "other.md"\n[[statement]]\nid = "OTHER-LB-1"\nsection = "1"\n'
                                         'paraphrase = "a policy"\napplies_to = ["reference"]\nsubject = "client"\n')
    results = results_for(load_catalogue.__wrapped__(tmp_path),
                          client_record("s.py::test_moves[reference]", "reference", "passed"))
    cell = results.cell(f"client: {OURS}", "OTHER-LB-1")
    assert (cell["outcome"], cell["reason"]) == ("not applicable", "no test of this client checks a statement of other.md")
    summary = results.summary(f"client: {OURS}")
    assert (summary["applicable"], summary["checked"], summary["not_checked"], summary["other_documents"]) == (2, 1, 1, 1)


def test_a_test_marked_as_checking_the_broker_s_part_counts_for_the_broker(catalogue):
    results = results_for(catalogue, client_record("s.py::test_updates[activemq]", "activemq", "passed", subject="",
                                                   specs=("TOY-FO-2",), broker_part=("TOY-FO-2",)))
    assert results.cell("activemq", "TOY-FO-2")["outcome"] == "passed"
    assert results.client_columns() == []
    summary = results.summary("activemq")
    assert (summary["applicable"], summary["checked"], summary["passed"], summary["client_statements"]) == (2, 1, 1, 1)


def test_a_client_run_against_a_broker_the_statement_is_not_documented_for_is_not_applicable(tmp_path):
    (tmp_path / "toy.toml").write_text(CATALOGUE.replace('applies_to = ["reference", "activemq"]\nsubject',
                                                         'applies_to = ["reference"]\nsubject'))
    catalogue = load_catalogue.__wrapped__(tmp_path)
    results = results_for(catalogue, client_record("s.py::test_moves[activemq]", "activemq", "not applicable",
                                                   reason="TOY-FO-1 documented for reference, not activemq"))
    cell = results.cell(f"client: {OURS}", "TOY-FO-1")
    assert cell["outcome"] == "not applicable" and cell["reason"] == "documented for reference"
    # the column does not claim it ran against a broker where its tests got no verdict
    assert results.to_json()["clients"][f"client: {OURS}"]["targets"] == []
    assert results.summary_lines()[2].startswith(f"client: {OURS} (client, against no broker): 0/2 ")


OBSERVED_BY_JAVA = f"""
[[statement]]
id = "TOY-FO-3"
section = "Discovery"
paraphrase = "A client discovers its brokers by multicast."
applies_to = ["reference", "activemq"]
subject = "client"
not_observable = "Our clients do not discover."
observable_with = ["{JAVA}"]
"""


def test_a_client_statement_a_real_client_observes_keeps_the_reason_for_ours_only(tmp_path):
    """observable_with: the not_observable reason speaks for our clients; the real client it names
    shows "not checked" while no test of it ran, and its verdict once one did."""
    (tmp_path / "toy.toml").write_text(CATALOGUE + OBSERVED_BY_JAVA)
    catalogue = load_catalogue.__wrapped__(tmp_path)
    assert catalogue["TOY-FO-3"].observable_with == {JAVA}
    assert catalogue["TOY-FO-3"].not_observable_by(JAVA) == ""
    assert catalogue["TOY-FO-3"].not_observable_by(OURS) == "Our clients do not discover."
    # both columns cover toy.md (each checked TOY-FO-1); no test checked TOY-FO-3 yet
    covering = (client_record("s.py::test_moves[activemq-ours]", "activemq", "passed"),
                client_record("s.py::test_moves[activemq-java]", "activemq", "passed", subject=JAVA))
    results = results_for(catalogue, *covering)
    ours = results.cell(f"client: {OURS}", "TOY-FO-3")
    assert (ours["outcome"], ours["reason"]) == ("not applicable", "not observable: Our clients do not discover.")
    assert results.cell(f"client: {JAVA}", "TOY-FO-3") == {"outcome": "not checked", "reason": "", "tests": []}
    assert results.summary(f"client: {JAVA}")["not_checked"] == 2  # TOY-FO-2 and TOY-FO-3
    results = results_for(catalogue, *covering, client_record("s.py::test_discovers[activemq-java]", "activemq",
                                                              "passed", subject=JAVA, specs=("TOY-FO-3",)))
    assert results.cell(f"client: {JAVA}", "TOY-FO-3")["outcome"] == "passed"
    assert results.cell(f"client: {OURS}", "TOY-FO-3")["outcome"] == "not applicable"
    assert results.cell("activemq", "TOY-FO-3")["outcome"] == "not a broker statement"


@pytest.mark.parametrize("change", [
    pytest.param(lambda text: text.replace('subject = "client"\nnot_observable', 'not_observable'), id="broker-statement"),
    pytest.param(lambda text: text.replace('not_observable = "Our clients do not discover."\n', ''), id="no-reason"),
    pytest.param(lambda text: text.replace(f'["{JAVA}"]', '[""]'), id="empty-subject"),
])
def test_observable_with_is_refused_where_it_means_nothing(tmp_path, change):
    (tmp_path / "toy.toml").write_text(CATALOGUE + change(OBSERVED_BY_JAVA))
    with pytest.raises(CatalogueError, match="TOY-FO-3.*observable_with lists client subjects"):
        load_catalogue.__wrapped__(tmp_path)


def test_the_project_s_core_client_observes_the_discovery_url_statements():
    """CLU-DISC-8, CLU-DISC-11 and CLU-STATIC-2 (test_cluster_client_discovery_real.py) and
    CLU-CLIENT-7 (test_cluster_client_balancing_real.py) are checked on Artemis's Core client: its
    column must not show our clients' reason (a run without those modules showed it for CLU-CLIENT-7)."""
    from suites.java_support import SUBJECTS

    catalogue = load_catalogue()
    for spec in ("CLU-DISC-8", "CLU-DISC-11", "CLU-STATIC-2", "CLU-CLIENT-7"):
        assert catalogue[spec].observable_with == {SUBJECTS["artemis"]}, spec
        assert catalogue[spec].not_observable.startswith("With brokerconf's own clients"), spec


def test_the_html_matrix_shows_the_client_columns(catalogue):
    results = results_for(catalogue, client_record("s.py::test_moves[reference]", "reference", "passed"))
    page = render_matrix(results.to_json())
    assert f"<th>client: {OURS}</th>" in page
    assert "not a broker statement" in page
    assert f"against reference" in page  # the client column's row of the summary table


def test_matrix_diff_compares_the_client_columns(catalogue):
    differences = _script("matrix_diff").differences
    passed = results_for(catalogue, client_record("s.py::test_moves[reference]", "reference", "passed")).to_json()
    failed = results_for(catalogue, client_record("s.py::test_moves[reference]", "reference", "failed")).to_json()
    assert f"client: {OURS} TOY-FO-1: passed -> failed" in differences(passed, failed)


# --------------------------------------------------------------------------- the plugin


@pytest.fixture
def toy(pytester: pytest.Pytester, monkeypatch):
    # the subprocess runs in a temporary directory: this checkout's plugin, not an installed one
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    spec = pytester.mkdir("spec")
    (spec / "toy.toml").write_text(CATALOGUE)
    pytester.mkdir("deviations")
    return pytester


def run(pytester: pytest.Pytester, *args: str):
    matrix = pytester.path / "matrix.json"
    # A subprocess: the in-process broker imports proton, whose cffi module cannot be imported twice.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--spec-catalogue", str(pytester.path / "spec"),
                                           "--known-deviations", str(pytester.path / "deviations"),
                                           "--conformance-matrix", str(matrix), *args)
    return result, (json.loads(matrix.read_text()) if matrix.exists() else None)


def test_a_test_of_a_client_statement_without_a_client_subject_is_refused(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_toy=textwrap.dedent("""
        import pytest

        @pytest.mark.spec("TOY-SEND-1", "TOY-FO-1")
        def test_moves(broker):
            pass
    """))
    result, data = run(toy, "--target", "reference")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_moves*TOY-FO-1 describe the client, not the broker*"
                                 "@pytest.mark.client_subject*"])
    assert data is None or not data["tests"]  # nothing ran, nothing was booked


def test_the_plugin_books_a_client_statement_under_the_subject_of_its_pytest_param(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_toy=textwrap.dedent(f"""
        import pytest

        @pytest.mark.spec("TOY-FO-1")
        @pytest.mark.parametrize("client_name", [
            pytest.param("ours", marks=pytest.mark.client_subject({OURS!r})),
            pytest.param("java", marks=pytest.mark.client_subject({JAVA!r})),
        ])
        def test_moves(broker, client_name):
            assert client_name == "ours", "TOY-FO-1: the java toy does not move"

        @pytest.mark.spec("TOY-SEND-1")
        def test_send(broker):
            assert broker.ports
    """))
    result, data = run(toy, "--target", "reference")
    result.assert_outcomes(passed=2, failed=1)
    assert data["matrix"]["reference"]["TOY-FO-1"]["outcome"] == "not a broker statement"
    assert data["matrix"][f"client: {OURS}"]["TOY-FO-1"]["outcome"] == "passed"
    assert data["matrix"][f"client: {JAVA}"]["TOY-FO-1"]["outcome"] == "failed"
    assert {t["nodeid"].split("::")[1]: t["client_subject"] for t in data["tests"]} == {
        "test_moves[reference-ours]": OURS, "test_moves[reference-java]": JAVA, "test_send[reference]": ""}
    # the reference broker passed the one broker statement it was checked on; the failure is the client's
    assert (data["summary"]["reference"]["checked"], data["summary"]["reference"]["failed"]) == (1, 0)
    result.stdout.fnmatch_lines([
        "reference (reference, *): 1/1 applicable statements checked, 1 passed, 0 failed*"
        "2 about clients (not a broker's, see the client columns)",
        f"client: {OURS} (client, against reference): 1/2 client statements of its documents checked, 1 passed, 0 failed*",
        f"client: {JAVA} (client, against reference): 1/2 client statements of its documents checked, 0 passed, 1 failed*"])
