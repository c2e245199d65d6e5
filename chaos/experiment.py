"""Run one chaos experiment: launch the target, run the workload under the nemesis schedule,
heal, drain, and leave a history (Jepsen's roles: the harness records; checkers judge later).

`run_experiment` never judges the history itself: chaos/ does not import reports/. Whoever ran
it (the CLI, a test) hands ``result.history_path`` to the checkers.
"""

from __future__ import annotations

import json
import sys
import urllib.request
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from chaos.experiment_file import Experiment, ExperimentError
from chaos.history import History
from chaos.nemesis.process import ProcessNemesis
from chaos.nemesis.proxy import ProxyNemesis
from chaos.proxy import start_fault_proxy
from chaos.workloads.queue import QueueWorkload
from conformance.scenario import Scenario
from conformance.targets.base import TargetUnavailable
from conformance.targets.registry import UnknownTarget, resolve

#: each fault and the step that ends it
FAULT_AND_HEAL = {"kill": "start", "pause": "resume", "stop": "start", "partition": "heal"}
#: the fault proxy's proxy in front of the broker, when the experiment partitions clients
PROXY_NAME = "broker"


@dataclass
class ExperimentResult:
    name: str
    run_id: str
    history_path: Path
    seconds: float
    sent_ok: int
    received_ok: int
    drained: int
    faults: int
    target: str
    workload_errors: list[str] = field(default_factory=list)


def _client_factory(exp: Experiment, host: str, port: int) -> Callable:
    from conformance.clients import connect, connect_failover

    protocol = exp.target.protocol
    if exp.target.failover:
        uri = f"failover:(tcp://{host}:{port})?{exp.target.failover_options}"
        return lambda: connect_failover(uri, protocol)
    return lambda: connect(host, port, protocol)


def _schedule(exp: Experiment) -> list[tuple[float, str, int, dict]]:
    """(at seconds, step, nemesis index, step params) for the whole run, faults and their heals,
    in time order."""
    events = []
    for index, nemesis in enumerate(exp.nemesis):
        fault_params = {"proxy": PROXY_NAME, "direction": nemesis.direction} if nemesis.kind == "partition" else {}
        heal_params = {"proxy": PROXY_NAME} if nemesis.kind == "partition" else {}
        at = nemesis.every_s
        while at + nemesis.down_s < exp.duration_s:
            events.append((at, nemesis.kind, index, fault_params))
            events.append((at + nemesis.down_s, FAULT_AND_HEAL[nemesis.kind], index, heal_params))
            at += nemesis.down_s + nemesis.every_s  # faults never overlap: quiet time after each heal
    return sorted(events, key=lambda event: event[:3])


class _Progress:
    """One status line per second on a terminal, one every 5 s otherwise (CI logs)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.tty = sys.stdout.isatty()
        self.last = 0.0

    def show(self, elapsed: float, duration: float, workload: QueueWorkload, faults: int) -> None:
        now = time.monotonic()
        if now - self.last < (1.0 if self.tty else 5.0):
            return
        self.last = now
        line = (f"  {elapsed:5.1f}/{duration:.0f} s  sent ok {workload.sent_ok:>6}  "
                f"received {workload.received_ok:>6}  faults {faults}")
        if self.tty:
            sys.stdout.write("\r" + line)
            sys.stdout.flush()
        else:
            self.write(line)

    def done(self) -> None:
        if self.tty:
            sys.stdout.write("\n")


def run_experiment(exp: Experiment, out_dir: Path, *, progress: Callable[[str], None] = print) -> ExperimentResult:
    """Run ``exp``; the history goes to ``out_dir/history.jsonl``. Raises ExperimentError when the
    target cannot run it (unknown, not installed, cannot be killed for a kill schedule)."""
    try:
        target = resolve(exp.target.name)
    except UnknownTarget as exc:
        raise ExperimentError(f"[target] name: {exc}") from None
    ok, reason = target.availability()
    if not ok:
        raise ExperimentError(f"target {exp.target.name} cannot run here: {reason}")
    process_faults = [n for n in exp.nemesis if n.kind != "partition"]
    if process_faults and "process.kill" not in target.capabilities():
        raise ExperimentError(f"target {exp.target.name} cannot be killed or paused by the harness "
                              "(it lacks process.kill); use e.g. 'reference:process'")
    run_id = f"{exp.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    out_dir.mkdir(parents=True, exist_ok=True)
    history_path = out_dir / "history.jsonl"
    with tempfile.TemporaryDirectory(prefix="brokerconf-chaos-") as workdir:
        try:
            handle = target.launch(Scenario(name=exp.name, protocols=(exp.target.protocol,)), Path(workdir))
        except TargetUnavailable as exc:
            raise ExperimentError(f"target {exp.target.name} could not start: {exc}") from None
        proxy = None
        try:
            if any(n.kind == "partition" for n in exp.nemesis):
                proxy = start_fault_proxy()
            return _run(exp, handle, run_id, history_path, progress, proxy)
        finally:
            if proxy is not None:
                proxy.stop()
            handle.stop()


def _route_through_proxy(proxy, host: str, port: int) -> tuple[str, int]:
    """Create the proxy in front of the broker; clients connect to its listen address."""
    request = urllib.request.Request(f"{proxy.api_url}/proxies", method="POST",
                                     data=json.dumps({"name": PROXY_NAME, "listen": "127.0.0.1:0",
                                                      "upstream": f"{host}:{port}"}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        listen = json.load(response)["listen"]
    listen_host, _, listen_port = listen.rpartition(":")
    return listen_host, int(listen_port)


def _nemesis_for(kind: str, handle, proxy, history: History):
    if kind == "partition":
        return ProxyNemesis(proxy.api_url, history, node="A")
    # ProcessNemesis drives the broker's own process handle (kill -9 its PID, start it again).
    return ProcessNemesis(getattr(handle, "process", handle), history, node="A")


def _run(exp: Experiment, handle, run_id: str, history_path: Path, progress, proxy) -> ExperimentResult:
    host, port = handle.host, handle.ports[exp.target.protocol]
    if proxy is not None:
        host, port = _route_through_proxy(proxy, host, port)
    history = History(history_path, run=run_id, target=exp.target.name, node="A")
    workload = QueueWorkload(history, _client_factory(exp, host, port), destination=exp.workload.destination,
                             producers=exp.workload.producers, consumers=exp.workload.consumers,
                             rate=exp.workload.rate, persistent=exp.workload.persistent)
    nemeses = [_nemesis_for(n.kind, handle, proxy, history) for n in exp.nemesis]
    schedule = _schedule(exp)
    display = _Progress(progress)
    progress(f"experiment {exp.name}: {exp.workload.kind} workload on {exp.target.name} for {exp.duration_s:.0f} s, "
             f"{sum(1 for _, step, _, _ in schedule if step in FAULT_AND_HEAL)} faults scheduled; history {history_path}")
    started = time.monotonic()
    faults = 0
    try:
        for nemesis in nemeses:
            nemesis.setup()
        workload.start()
        while (elapsed := time.monotonic() - started) < exp.duration_s:
            while schedule and schedule[0][0] <= elapsed:
                _, step, index, params = schedule.pop(0)
                nemeses[index].invoke(step, **params)
                faults += step in FAULT_AND_HEAL
            display.show(elapsed, exp.duration_s, workload, faults)
            time.sleep(0.05)
    finally:
        display.done()
        for nemesis in nemeses:
            nemesis.teardown()  # heals: the broker is up again before the drain
        workload.stop()
    progress(f"  healed; draining {exp.workload.destination} until {exp.drain_quiet_s:.1f} s of quiet")
    drained = workload.drain(quiet=exp.drain_quiet_s)
    history.close()
    return ExperimentResult(exp.name, run_id, history_path, round(time.monotonic() - started, 1), workload.sent_ok,
                            workload.received_ok, len(drained), faults, exp.target.name, list(workload.errors))
