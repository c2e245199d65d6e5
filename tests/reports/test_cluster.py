"""`--master spark://...`: a real standalone master and worker from the installed pyspark, on
loopback, run the analysis job. Both are subprocesses this test holds and stops by handle."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

import pyspark
from conformance.waiting import poll
from reports.pipeline import analyze as analyze_module
from reports.pipeline.cli_args import add_arguments
from reports.pipeline.session import get_session, stop_session

from .histories import H

LOOPBACK = "127.0.0.1"
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _master_state(ui_port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=2) as answer:
            return json.loads(answer.read())
    except OSError:
        return None


def _wait(what: str, predicate, processes, logs: list[Path], timeout: float = 60.0) -> None:
    """Poll ``predicate`` while the Spark daemons run; fail with their logs when one exits first or
    the deadline passes."""
    def holds_while_daemons_run() -> bool:
        if predicate():
            return True
        for process in processes:
            if process.poll() is not None:
                pytest.fail(f"{what}: a Spark daemon exited with {process.returncode}; logs:\n"
                            + "\n".join(log.read_text()[-2000:] for log in logs))
        return False

    if not poll(holds_while_daemons_run, timeout=timeout, interval=0.5):
        pytest.fail(f"{what} within {timeout}s; logs:\n" + "\n".join(log.read_text()[-2000:] for log in logs))


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture
def standalone_cluster(tmp_path):
    """(master URL, master UI port): one master and one worker with one core."""
    env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "SPARK_HOME": str(SPARK_CLASS.parent.parent),
           "SPARK_LOG_DIR": str(tmp_path / "logs"), "SPARK_WORKER_DIR": str(tmp_path / "work")}
    port, ui_port = _free_port(), _free_port()
    url = f"spark://{LOOPBACK}:{port}"
    logs = [tmp_path / "master.log", tmp_path / "worker.log"]
    processes: list[subprocess.Popen] = []
    try:
        with open(logs[0], "wb") as log:
            processes.append(subprocess.Popen(
                [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(port),
                 "--webui-port", str(ui_port)], env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        _wait("the master did not answer", lambda: _master_state(ui_port) is not None, processes, logs)
        with open(logs[1], "wb") as log:
            processes.append(subprocess.Popen(
                [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", url, "--host", LOOPBACK,
                 "--port", str(_free_port()), "--webui-port", str(_free_port()), "--cores", "1", "--memory", "1g",
                 "--work-dir", str(tmp_path / "work")],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        _wait("the worker did not register with the master",
              lambda: any(w.get("state") == "ALIVE" for w in (_master_state(ui_port) or {}).get("workers", [])),
              processes, logs)
        yield url, ui_port
    finally:
        stop_session()  # the driver leaves the cluster before it goes; later tests start a local session
        for process in reversed(processes):
            _stop(process)


@pytest.mark.slow
def test_analyze_on_standalone_cluster(standalone_cluster, tmp_path, capsys):
    url, ui_port = standalone_cluster
    history = (H("cluster-lost").send(0, "a").send(0, "b", seq=1).receive(1, "a", consumer=0)
               .drain(2, []).write(tmp_path / "runs"))
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([str(history), "--out", str(tmp_path / "out"), "--master", url])
    assert analyze_module.run(args, progress=print) == 1
    assert get_session(url).sparkContext.master == url
    verdicts = json.loads((tmp_path / "out" / "verdicts.json").read_text())
    assert [(a["kind"], a["message_id"]) for a in verdicts["runs"][0]["anomalies"]] == [("lost", "b")]
    # the master saw our application, with the worker's executor doing the work
    apps = (_master_state(ui_port) or {}).get("activeapps", [])
    assert [a["name"] for a in apps] == ["brokerconf-analyze"]
    assert f"on {url}" in capsys.readouterr().out
