"""`--master spark://...`: a real standalone master and worker from the installed pyspark, on
loopback, run the analysis job. Both are subprocesses this test holds and stops by handle."""

from __future__ import annotations

import argparse
import json

import pytest

from reports.pipeline import analyze as analyze_module
from reports.pipeline.cli_args import add_arguments
from reports.pipeline.session import get_session, stop_session
from reports.pipeline.standalone import StandaloneCluster

from .histories import H


@pytest.fixture
def standalone_cluster(tmp_path):
    """(master URL, the cluster): one master and one worker with one core and 1 GB."""
    cluster = StandaloneCluster(tmp_path / "cluster", workers=1, memory="1g", timeout=60)
    with cluster as url:
        try:
            yield url, cluster
        finally:
            stop_session()  # the driver leaves the cluster before it goes; later tests start a local session


@pytest.mark.slow
def test_analyze_on_standalone_cluster(standalone_cluster, tmp_path, capsys):
    url, cluster = standalone_cluster
    history = (H("cluster-lost").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0)
               .drain(2, []).write(tmp_path / "runs"))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([str(history), "--out", str(tmp_path / "out"), "--master", url])
    assert analyze_module.run(args, progress=print) == 1
    assert get_session(url).sparkContext.master == url
    verdicts = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert [(a["kind"], a["message_id"]) for a in verdicts["runs"][0]["anomalies"]] == [("lost", "b")]
    # the master saw our application, with the worker's executor doing the work
    assert cluster.applications() == ["brokerconf-analyze"]
    assert f"on {url}" in capsys.readouterr().out
