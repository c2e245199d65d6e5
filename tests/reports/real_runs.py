"""The test session's real short runs of the experiment files (chaos/experiments/*.toml), each
made once, on the file's own target, by the main job's own chaos stage (brokerconf/chaos_stage.py
`run_all`: a `brokerconf chaos run` process per run, several at a time, each judged by `chaos run`
into its verdict.json), and laid out as that stage lays out its runs: ``<root>/chaos-<file>/``.

Each run is as short as is still honest (`short_plan`): the file's lock-loss cut shortened as the
main job shortens it (`chaos_stage.short_settings`), then the shortest duration in which every
[[nemesis]] entry strikes once and heals with the file's recovery (chaos/schedule.py
`shortest_duration`), never below the file's declared ``min_duration_s`` (`chaos_stage.stage_duration`).

Runs are made on demand: a test that needs one file's run (conftest.py ``fresh_queue_run``) makes
that one; tests/reports/test_judges_agree_on_real_runs.py asks for every file, and only the ones
not made yet run. A file whose broker, PostgreSQL or FUSE is missing here is not run; its tests
skip with the reason, or fail where CI requires the thing (conformance/requirements.py).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import chaos

EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"

#: runs at once. Each waits on its schedule, broker start-ups and the drain far more than it
#: computes, but a run on Artemis or ActiveMQ starts one to three JVMs (plus PostgreSQL for the JDBC
#: store) and the tests share the machine with other test workers, so one fewer than the main job's
#: chaos stage, which has the machine beside its suites only (`chaos_stage.PARALLEL`)
PARALLEL = 3


def experiment_files() -> list[Path]:
    """Every shipped experiment file: a new one is covered without editing any test."""
    return sorted(EXPERIMENTS.glob("*.toml"))


def short_plan(file: Path, root: Path):
    """The main job's plan of ``file``'s short run into ``root/chaos-<file>/``, and the experiment
    as that run loads it (overrides and duration applied): (PlannedRun, Experiment)."""
    from brokerconf import chaos_stage
    from chaos.experiment_file import load_experiment, with_overrides
    from chaos.schedule import shortest_duration

    exp = load_experiment(file)
    settings = chaos_stage.short_settings(exp)
    exp = with_overrides(exp, settings=settings)
    duration = chaos_stage.stage_duration(shortest_duration(exp), exp)
    exp = with_overrides(exp, duration_s=duration)
    run = chaos_stage.PlannedRun(file, None, settings, duration, exp.name, exp.target.name, root / f"chaos-{file.stem}")
    return run, exp


def missing_requirement(exp) -> tuple[str, str] | None:
    """(requirement, reason) when this machine lacks what ``exp`` runs on: its target's broker, what
    the target's capability for the topology stands for (`Target.capability_requirements`: the
    PostgreSQL of a JDBC store), FUSE for the simulated NFS; None when it can run. A capability
    that stands for nothing installable is no reason to skip: the run goes ahead and says why not."""
    from chaos.topology import topology_of
    from conformance.requirements import target_requirement
    from conformance.targets.base import why_missing
    from conformance.targets.registry import resolve
    from conformance.topology import capability_of
    from machinery.sharedstore.harness import fuse_unavailable

    target = resolve(exp.target.name)
    available, why = target.availability()
    if not available:
        return target_requirement(target), why
    topology = topology_of(exp)
    needed = capability_of(topology)
    if needed is not None and needed not in target.capabilities() and needed in target.capability_requirements:
        return target.capability_requirements[needed], why_missing(target, needed) or f"{target.name} lacks {needed}"
    if topology.shared_store is not None and topology.shared_store.nfs is not None and (why := fuse_unavailable()):
        return "fuse", why
    return None


class RealRuns:
    """The session's runs under ``root``: made on demand (`ensure`), each once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.verdicts: dict[str, dict] = {}  # file stem -> the stage's verdict entry (with wall_seconds)
        self.missing: dict[str, tuple[str, str]] = {}  # file stem -> (requirement, reason)
        self.plans: dict[str, tuple] = {}  # file stem -> (PlannedRun, Experiment)
        self._lock = threading.Lock()

    def plan(self, file: Path):
        if file.stem not in self.plans:
            self.plans[file.stem] = short_plan(file, self.root)
        return self.plans[file.stem]

    def ensure(self, files: list[Path]) -> None:
        """Make the runs of ``files`` not made yet, `PARALLEL` at a time, as the main job's chaos
        stage makes its own; their lines go to ``<root>/stage.log``."""
        from brokerconf import chaos_stage

        with self._lock:
            todo = []
            for file in files:
                if file.stem in self.verdicts or file.stem in self.missing:
                    continue
                run, exp = self.plan(file)
                if (missing := missing_requirement(exp)) is not None:
                    self.missing[file.stem] = missing
                else:
                    todo.append((file.stem, run))
            if not todo:
                return
            with open(self.root / "stage.log", "a", encoding="utf-8") as log:
                def progress(line: str) -> None:
                    log.write(line + "\n")
                    log.flush()

                verdicts = chaos_stage.run_all([run for _, run in todo], parallel=PARALLEL, progress=progress)
            for (stem, _), verdict in zip(todo, verdicts):
                self.verdicts[stem] = verdict
            times = {stem: v["wall_seconds"] for stem, v in self.verdicts.items()}
            (self.root / "wall_seconds.json").write_text(json.dumps(times, indent=1, sort_keys=True))

    def run_dir(self, file: Path) -> Path:
        """``file``'s run directory, made if it was not; skipped (or failed, where CI requires
        it) when this machine cannot run it."""
        from conformance.requirements import skip_or_fail

        self.ensure([file])
        if file.stem in self.missing:
            skip_or_fail(*self.missing[file.stem])
        return self.plan(file)[0].run_dir
