"""The catalogue loader and the matrix cell of a statement no client of ours can observe."""

from __future__ import annotations

import pytest

from conformance.matrix import ConformanceResults
from conformance.matrix import TestRecord as Record  # (not collected as a test class)
from conformance.spec.catalogue import CatalogueError, load_catalogue

TOML = """
document = "toy.md"
title = "Toy"

[[statement]]
id = "TOY-SEEN-1"
section = "1"
paraphrase = "seen"
applies_to = ["reference"]

[[statement]]
id = "TOY-HIDDEN-1"
section = "2"
paraphrase = "only an OpenWire client sees it"
applies_to = ["reference"]
not_observable = '''
OpenWire control commands
only.
'''
"""


@pytest.fixture
def catalogue(tmp_path):
    (tmp_path / "toy.toml").write_text(TOML)
    return load_catalogue(tmp_path)


def test_not_observable_reason_is_read_and_folded_to_one_line(catalogue):
    assert catalogue["TOY-HIDDEN-1"].not_observable == "OpenWire control commands only."
    assert catalogue["TOY-SEEN-1"].not_observable == ""


def test_matrix_says_not_applicable_with_the_reason_for_an_unobservable_statement(catalogue):
    results = ConformanceResults(catalogue)
    results.add_target("reference", kind="reference", launch="in-process", available=True)
    cell = results.cell("reference", "TOY-HIDDEN-1")
    assert cell["outcome"] == "not applicable"
    assert cell["reason"] == "not observable: OpenWire control commands only."
    assert results.cell("reference", "TOY-SEEN-1")["outcome"] == "not checked"
    summary = results.summary("reference")
    assert (summary["not_checked"], summary["not_applicable"]) == (1, 1)


def test_a_test_of_an_unobservable_statement_still_counts(catalogue):
    """Should someone find a way to observe it, the test's verdict wins over the reason."""
    results = ConformanceResults(catalogue)
    results.add_target("reference", kind="reference", launch="in-process", available=True)
    results.record(Record("t::a", "reference", "stomp", ["TOY-HIDDEN-1"], "failed", "boom"))
    assert results.cell("reference", "TOY-HIDDEN-1")["outcome"] == "failed"


def test_unknown_key_is_refused(tmp_path):
    (tmp_path / "bad.toml").write_text(TOML.replace("not_observable", "unobservable"))
    with pytest.raises(CatalogueError, match="unknown key"):
        load_catalogue(tmp_path)


def test_the_project_catalogue_loads_with_the_fault_tolerance_document():
    catalogue = load_catalogue()
    ft = [s for s in catalogue.values() if s.document == "redhat-amq-6.2-fault-tolerant-messaging.md"]
    assert len(ft) >= 40
    assert all(s.id.startswith("FT-") for s in ft)


def test_the_project_catalogue_loads_with_the_clusters_document():
    catalogue = load_catalogue()
    clusters = {s.id: s for s in catalogue.values() if s.document == "artemis-clusters.md"}
    assert len(clusters) >= 50
    assert all(i.startswith("CLU-") for i in clusters)
    # what only Artemis's Core client, JMX or Core packets between its nodes could show carries
    # its reason; what the reference broker implements is claimed for both
    assert clusters["CLU-CC-CALL-1"].not_observable and clusters["CLU-CC-WINDOW-1"].not_observable
    assert clusters["CLU-MLB-1"].applies_to == {"reference", "artemis"} and not clusters["CLU-MLB-1"].not_observable
    # the chapter as we have it names three load-balancing modes; the fourth is not catalogued
    assert not any("OFF_WITH_REDISTRIBUTION" in s.paraphrase for s in clusters.values())


def test_clustered_grouping_is_claimed_for_the_reference_broker_too():
    catalogue = load_catalogue()
    cluster_grouping = [s for s in catalogue.values() if s.id.startswith("GRP-CLUSTER-")]
    assert len(cluster_grouping) == 9
    assert all(s.applies_to == {"reference", "artemis"} for s in cluster_grouping)


def test_unobservable_cluster_statements_are_not_applicable_in_the_matrix():
    results = ConformanceResults(load_catalogue())
    results.add_target("artemis", kind="artemis", launch="process", available=True)
    assert results.cell("artemis", "CLU-CC-CALL-1")["outcome"] == "not applicable"
    assert results.cell("artemis", "CLU-REDIST-FILTER-1")["outcome"] == "not checked"


def test_uncatalogued_rows_are_loaded_and_validated(tmp_path):
    from conformance.spec.catalogue import load_uncatalogued

    (tmp_path / "doc.toml").write_text(
        'document = "d.md"\n[[uncatalogued]]\nsection = "1"\nsummary = "a  claim"\nwhy = "later"\n')
    rows = load_uncatalogued(tmp_path)
    assert [(r.document, r.section, r.summary, r.why) for r in rows] == [("d.md", "1", "a claim", "later")]
    (tmp_path / "bad.toml").write_text('document = "e.md"\n[[uncatalogued]]\nsection = "1"\nsummary = "x"\n')
    with pytest.raises(CatalogueError, match="uncatalogued #1"):
        load_uncatalogued.__wrapped__(tmp_path)


def test_unknown_top_level_keys_are_refused(tmp_path):
    (tmp_path / "doc.toml").write_text('document = "d.md"\n[[statments]]\nid = "X-1"\n')
    with pytest.raises(CatalogueError, match="statments"):
        load_catalogue.__wrapped__(tmp_path)
