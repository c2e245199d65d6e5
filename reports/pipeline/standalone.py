"""A Spark standalone cluster on loopback from the installed pyspark: one master and N workers,
subprocesses this handle holds and stops by PID (terminate, then kill). For the cluster benchmark
(benchmarks/pipeline_bench.py --cluster) and the cluster test (tests/reports/test_cluster.py);
`brokerconf analyze --master URL` takes its URL like any other master's.

    with StandaloneCluster(work_dir, workers=2, memory="3g") as url:
        ...  # spark://127.0.0.1:PORT
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path

import pyspark

from machinery.waiting import poll
from machinery.tether import launch

LOOPBACK = "127.0.0.1"
SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


class ClusterStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def master_state(ui_port: int) -> dict | None:
    """The master's own JSON status page (workers, applications), None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=2) as answer:
            return json.loads(answer.read())
    except OSError:
        return None


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` and ``memory`` each) in ``work`` (logs, work dirs)."""

    def __init__(self, work: Path, workers: int = 2, *, cores: int = 1, memory: str = "3g",
                 timeout: float = 120.0) -> None:
        self.work, self.n_workers, self.cores, self.memory, self.timeout = Path(work), workers, cores, memory, timeout
        self.processes: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.url = ""
        self.ui_port = 0

    def __enter__(self) -> str:
        self.work.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "SPARK_HOME": str(SPARK_CLASS.parent.parent),
               "SPARK_LOG_DIR": str(self.work / "logs"), "SPARK_WORKER_DIR": str(self.work / "work")}
        port, self.ui_port = free_port(), free_port()
        self.url = f"spark://{LOOPBACK}:{port}"
        try:
            self._start(["org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(port),
                         "--webui-port", str(self.ui_port)], env, "master")
            self._wait("the master answers", lambda: master_state(self.ui_port) is not None)
            for i in range(self.n_workers):
                self._start(["org.apache.spark.deploy.worker.Worker", self.url, "--host", LOOPBACK,
                             "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(self.cores),
                             "--memory", self.memory, "--work-dir", str(self.work / f"work{i}")], env, f"worker{i}")
            self._wait(f"{self.n_workers} worker(s) registered", lambda: self.alive_workers() == self.n_workers)
        except BaseException:
            self.__exit__()
            raise
        return self.url

    def alive_workers(self) -> int:
        return sum(w.get("state") == "ALIVE" for w in (master_state(self.ui_port) or {}).get("workers", []))

    def applications(self) -> list[str]:
        return [a["name"] for a in (master_state(self.ui_port) or {}).get("activeapps", [])]

    def _start(self, args: list[str], env: dict, name: str) -> None:
        log = self.work / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            self.processes.append(launch([str(SPARK_CLASS), *args], env=env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

    def _log_tails(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}" for log in self.logs if log.exists())

    def _wait(self, what: str, predicate) -> None:
        def holds_while_daemons_run() -> bool:
            if predicate():
                return True
            exited = [p for p in self.processes if p.poll() is not None]
            if exited:
                raise ClusterStartError(f"a Spark daemon exited ({exited[0].returncode}) before {what}; "
                                        f"logs:\n{self._log_tails()}")
            return False

        if not poll(holds_while_daemons_run, timeout=self.timeout, interval=0.5):
            raise ClusterStartError(f"not within {self.timeout:.0f} s: {what}; logs:\n{self._log_tails()}")

    def __exit__(self, *exc) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=20)
        self.processes.clear()
