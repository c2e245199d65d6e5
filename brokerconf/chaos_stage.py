"""The main job's chaos stage: which experiments it runs, and running them side by side.

Each experiment runs as its own ``brokerconf chaos run --run-dir DIR`` process. The experiments
share nothing (every launcher picks free loopback ports, every run has its own directory, fault
proxy, store server and mounts), and a run spends nearly all of its time waiting on its schedule
(20 s of workload, restarts, the drain), so several run at once: `PARALLEL` of them, measured on
the 2-core machine (see the README's "Time"). A process per run also keeps one run's signal
handlers, FUSE mounts and loggers away from the others', and lets an interrupted stage stop each
run by its own handle (`brokerconf.children`), which then stops what it started.

Each run's lines are printed as they come, prefixed with the run's label; its whole console output
is kept as ``console.log`` in its run directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: overrides (`chaos run --set`) that fit a lock-loss experiment into a short chaos stage: the
#: shortened schedule cuts at 3 s for 11 s, so the run needs 20 s for that cut and its recovery
#: (the stage never runs an experiment shorter than its ``min_duration_s``)
LOCK_LOSS_SHORT = ("recovery_s=6", 'topology.nfs_mount_options="soft,timeo=10,retrans=2,lookupcache=none,sync"',
                   "topology.nfs_lease_s=5.0", "nemesis.0.every_s=3", "nemesis.0.down_s=11", "min_duration_s=20")
#: the same for a lock-loss cut of the database link (the JDBC store): a 3 s lease renewed every
#: second and one 12 s cut (the lease, a slave's next try, and the watch), as the JDBC lock-loss
#: suite shortens it (suites/test_jdbc_lock_loss_experiments.py); the files' own 6 s lease and
#: 24 s cut need 40 s
JDBC_LOCK_LOSS_SHORT = ("recovery_s=6", "topology.lock_keep_alive_period_ms=1000",
                        "topology.lock_acquire_sleep_interval_ms=3000", "nemesis.0.every_s=4", "nemesis.0.down_s=12",
                        "min_duration_s=20")

#: experiments running at once. Measured with the whole stage (17 runs) on the 2-core machine:
#: see the README's "Time"; more than this and the runs' own schedules start to slip (a restart
#: waiting for CPU counts as failover downtime).
PARALLEL = 4

#: (experiment file, target override, real broker it needs or None[, --set overrides]).
#: Experiment 1 always; with ActiveMQ Classic among the targets and installed, experiment 2 and
#: experiment 4 on ActiveMQ as well, so the report compares the two slow-subscriber accountings.
#: Experiments 1 (kill under persistent load, journal kept) and 3 (clients partitioned through the
#: fault proxy) on Artemis too when it is among the targets and installed.
#: The bridge partition (issue 7) on both: ActiveMQ's networks run as local JVMs only
#: (chaos/topology.py), hence `activemq:process`.
MAIN_JOB_EXPERIMENTS = (
    ("reference-kill-restart.toml", None, None),
    ("slow-topic-subscriber.toml", None, None),
    ("network-bridge-partition.toml", None, None),
    ("activemq-shared-store-failover.toml", None, "activemq"),
    # the same master/slave experiment through the topology contract (issue 18): the reference
    # broker's shared journal and Artemis's shared-store pair
    ("activemq-shared-store-failover.toml", "reference", None),
    ("activemq-shared-store-failover.toml", "artemis:process", "artemis"),
    ("slow-topic-subscriber.toml", "activemq", "activemq"),
    ("network-bridge-partition.toml", "activemq:process", "activemq"),
    # Apache Artemis as a local JVM (issue 16): killed under persistent load, journal kept
    ("artemis-kill-restart.toml", "artemis:process", "artemis"),
    ("client-partition.toml", "artemis:process", "artemis"),
    # lock loss on the simulated NFS store, one per broker (issue 18): shortened so one cut and its
    # recovery fit the main job's chaos duration (a 6 s soft-mount timeout, a 5 s lease)
    ("reference-nfs-lock-loss.toml", None, None, LOCK_LOSS_SHORT),
    ("activemq-nfs-lock-loss.toml", "activemq:process", "activemq", LOCK_LOSS_SHORT),
    ("artemis-nfs-lock-loss.toml", "artemis:process", "artemis", LOCK_LOSS_SHORT),
    # Artemis-style clusters (issue 19): redistribution under consumer churn, a node killed and the
    # cluster links cut; clustered grouping across nodes. A target that cannot launch a cluster
    # (no topology.cluster) reports these not applicable, with the reason (`cluster_not_applicable`).
    ("reference-cluster-redistribution.toml", None, None),
    ("reference-clustered-grouping.toml", None, None),
    ("artemis-cluster-redistribution.toml", "artemis:process", "artemis"),
    ("artemis-clustered-grouping.toml", "artemis:process", "artemis"),
)


@dataclass(frozen=True)
class PlannedRun:
    """One experiment of the stage, loaded and with its duration and overrides applied."""

    path: Path
    target: str | None
    settings: tuple[str, ...]
    duration_s: float
    name: str
    target_name: str
    run_dir: Path
    seed: int | None = None  # None: the file's own

    @property
    def label(self) -> str:
        return f"{self.name} on {self.target_name}"

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "brokerconf.cli", "chaos", "run", str(self.path),
                   "--duration", f"{self.duration_s:g}", "--run-dir", str(self.run_dir)]
        if self.target is not None:
            command += ["--target", self.target]
        for setting in self.settings:
            command += ["--set", setting]
        if self.seed is not None:
            command += ["--seed", str(self.seed)]
        return command


def cluster_not_applicable(exp, target) -> dict | None:
    """The stage's entry for a cluster experiment whose target cannot launch a cluster (it lacks
    ``topology.cluster``): not applicable, with the reason; None when it can (or no cluster)."""
    from chaos.topology import topology_of
    from conformance.targets.base import why_missing
    from conformance.topology import capability_of

    needed = capability_of(topology_of(exp))
    if needed != "topology.cluster" or needed in target.capabilities():
        return None
    why = why_missing(target, needed)
    # not a verdict (no run, no history to judge): an entry the stage lists with its reason,
    # left out of the stage's outcome (`stage_failed`)
    return {"experiment": exp.name, "target": exp.target.name, "skipped": True,
            "error": f"not applicable: target {exp.target.name} lacks {needed}, it cannot launch a "
                     f"{len(exp.topology.node_names)}-node cluster" + (f" ({why})" if why else "")}


def short_settings(exp) -> tuple[str, ...]:
    """The overrides that shorten ``exp`` for a short run: a lock-loss cut of the store's link
    (its first [[nemesis]] entry, the one they move) gets its store's shortened lease and cut, on
    the simulated NFS `LOCK_LOSS_SHORT`, on a database `JDBC_LOCK_LOSS_SHORT`; anything else
    (an expired NFS lease is an instant event, already short) none."""
    from chaos.experiment_file import FaultPlane

    first = exp.nemesis[0] if exp.nemesis else None
    if first is None or first.plane is not FaultPlane.STORE or first.fault != "partition":
        return ()
    # a lock-loss entry's store is on the simulated NFS or in a database (the file's validation)
    return LOCK_LOSS_SHORT if exp.topology.on_simulated_nfs else JDBC_LOCK_LOSS_SHORT


def stage_duration(chaos_duration: float, exp) -> float:
    """How long the stage runs experiment ``exp`` (overrides applied): the stage's duration, or
    the experiment's declared ``min_duration_s`` when that is longer."""
    return max(chaos_duration, exp.min_duration_s)


def plan(chaos_duration: float, targets: list[str], out_dir: Path, progress: Callable[[str], None], *,
         seed: int | None = None) -> tuple[list[PlannedRun], list[dict]]:
    """The runs the stage will make, and the entries it settles without running (not applicable).
    An experiment whose broker is not among ``targets`` or not installed is left out, saying why.
    ``seed`` replaces every file's own (None: each keeps its own)."""
    import chaos
    from chaos.experiment_file import load_experiment, with_overrides
    from machinery.sharedstore.harness import fuse_unavailable
    from conformance.targets.registry import resolve

    runs: list[PlannedRun] = []
    settled: list[dict] = []
    if chaos_duration <= 0:
        return runs, settled
    for file_name, target, needs, *settings in MAIN_JOB_EXPERIMENTS:
        path = Path(chaos.__file__).resolve().parent / "experiments" / file_name
        overrides = tuple(settings[0]) if settings else ()
        exp = with_overrides(load_experiment(path), target=target, settings=overrides, seed=seed)
        # shortened, but never below what the experiment declares it needs for its faults' recovery
        duration = stage_duration(chaos_duration, exp)
        exp = with_overrides(exp, duration_s=duration)
        label = f"{exp.name} on {exp.target.name}"
        if exp.topology.on_simulated_nfs and (why := fuse_unavailable()):
            progress(f"chaos: {label} skipped: {why}")
            continue
        if needs is not None:
            available, why = resolve(target or needs).availability()
            if needs not in targets or not available:
                progress(f"chaos: {label} skipped: " + (why if needs in targets else f"{needs} not in --targets"))
                continue
        if (skipped := cluster_not_applicable(exp, resolve(exp.target.name))) is not None:
            progress(f"chaos: {label}: {skipped['error']}")
            settled.append(skipped)
            continue
        run_dir = out_dir / f"chaos-{exp.name}-{exp.target.name.replace(':', '-')}"
        runs.append(PlannedRun(path, target, overrides, duration, exp.name, exp.target.name, run_dir, seed))
    return runs, settled


def stage_failed(verdicts: list[dict]) -> bool:
    """Whether the stage's runs, composed as a run's checks are (reports/verdicts.py: false beats
    unknown beats true), are anything but valid; the entries settled without a run (`skipped`)
    are not verdicts and do not count. No run at all (a stage of length 0) fails nothing."""
    from reports.verdicts import compose

    runs = {f"{v['experiment']}@{v.get('target')}#{i}": v for i, v in enumerate(verdicts) if not v.get("skipped")}
    return bool(runs) and compose(runs)["valid"] is not True


def console_lines(verdicts: list[dict]) -> list[str]:
    """What the main job prints of the stage: each run's summary (reports/judge.py), or why it
    has none (settled without a run, or broke before judging)."""
    from reports.judge import summary

    return [summary(v) if "run_stats" in v else f"{v['experiment']}: {v['error']}" for v in verdicts]


def _verdict_of(run: PlannedRun, status: int, output: list[str]) -> dict:
    """The run's verdict.json; without one (the run broke before judging), an ``unknown`` entry
    carrying the run's exit status and its last lines."""
    try:
        verdict = json.loads((run.run_dir / "verdict.json").read_text())
    except (OSError, ValueError):
        verdict = None
    if verdict is None:
        tail = "\n".join(output[-15:])
        return {"experiment": run.name, "target": run.target_name, "valid": "unknown",
                "error": f"the run exited with {status} without a verdict:\n{tail}"}
    # the run's page (reports/render/chaos_report.py), which verdict.json itself does not name
    page = run.run_dir / "report.html"
    if page.is_file():
        verdict["report"] = str(page)
    return verdict


def cost_key(experiment: str, target: str) -> str:
    """A chaos run's entry in the recorded costs (conformance/unit_costs.json)."""
    return f"chaos:{experiment}@{target}"


def longest_first(runs: list[PlannedRun], costs: dict[str, float]) -> list[PlannedRun]:
    """``runs`` by their recorded wall time, longest first (a stable sort: unrecorded runs keep
    their order, after the recorded ones), so the stage does not end waiting on one long run
    started last (a shared-store failover on ActiveMQ took 76 s beside 25-35 s runs)."""
    return sorted(runs, key=lambda run: -costs.get(cost_key(run.name, run.target_name), 0.0))


def run_all(runs: list[PlannedRun], *, parallel: int = PARALLEL, progress: Callable[[str], None] = print,
            children=None) -> list[dict]:
    """Run ``runs``, ``parallel`` at a time, the longest recorded first; returns their verdicts in
    the order of ``runs``, each with its ``wall_seconds``. Interrupted (SIGTERM / SIGINT / SIGHUP in
    this process), the signal is passed on to every run still going and each is waited for, so
    each stops the brokers it started (brokerconf/children.py; ``children``: a `Children` the caller
    already holds, e.g. with the suites' pytest in it)."""
    from contextlib import nullcontext

    from brokerconf.children import Children
    from conformance.schedule import load_costs

    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, not {parallel}")
    verdicts: dict[int, dict] = {}
    lock = threading.Lock()

    def pump(index: int, run: PlannedRun, stream, sink: list[str]) -> None:
        with open(run.run_dir / "console.log", "w", encoding="utf-8") as log:
            for line in stream:
                line = line.rstrip("\n")
                sink.append(line)
                log.write(line + "\n")
                if line.strip():
                    with lock:
                        progress(f"[{run.label}] {line}")

    order = {id(run): index for index, run in enumerate(runs)}
    with nullcontext(children) if children is not None else Children(name="brokerconf run: chaos stage") as children:
        pending = [(order[id(run)], run) for run in longest_first(runs, load_costs())]
        active: dict[int, tuple] = {}
        while pending or active:
            while pending and len(active) < parallel:
                index, run = pending.pop(0)
                run.run_dir.mkdir(parents=True, exist_ok=True)
                with lock:
                    progress(f"chaos: {run.label} for {run.duration_s:.0f} s ({run.path.name}) started")
                child = children.start(run.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
                output: list[str] = []
                reader = threading.Thread(target=pump, args=(index, run, child.stdout, output), daemon=True)
                reader.start()
                active[index] = (run, child, reader, output, time.monotonic())
            children.wait_any([child for _, child, *_rest in active.values()])
            finished = [index for index, (_, child, *_rest) in active.items() if child.poll() is not None]
            for index in finished:
                run, child, reader, output, began = active.pop(index)
                reader.join()
                verdicts[index] = {**_verdict_of(run, child.returncode, output),
                                   "wall_seconds": round(time.monotonic() - began, 1)}
                with lock:
                    progress(f"chaos: {run.label} finished in {time.monotonic() - began:.0f} s: "
                             f"valid = {verdicts[index].get('valid')}")
    return [verdicts[index] for index in range(len(runs))]

