"""Spreading a parallel run by cost, and telling where its time went.

Under pytest-xdist's ``--dist loadgroup`` the controller hands out *work units* (an ``xdist_group``,
or a single ungrouped test) in the order the collection first names them. pytest-xdist's own
reordering (on by default) sorts them by their number of tests, which says little here: a module
of four cluster tests costs minutes, a codec module of two hundred costs seconds. So the scheduled
runs (``brokerconf run``, ``scripts/test.sh`` with workers) pass ``--no-loadscope-reorder`` and
this plugin orders the collection by each unit's *recorded* cost, longest first (the classic
longest-processing-time rule: the long units start at once, the short ones fill the gaps at the
end). The costs come from earlier runs (`COSTS_FILE`, refreshed with ``scripts/record_costs.py``).
A unit never recorded (a new or renamed test, a suite module new to a target) gets an estimate
(`estimated_cost`): a suite module's cost on the other targets, a slow test's the typical cost of
its module's recorded tests. Counted as free, a new slow unit would go out last and a worker would
still be on it minutes after the others finished; a fast one (no ``slow`` mark) still fills the tail.

It also keeps the timing of a run (``--timing-report FILE``, written by the controller or a serial
run): each unit's summed test time, each target's wall time (first test start to last test end:
targets overlap on parallel workers) and its summed test time, and each module's per target. The
main job prints them and puts them in its report; ``scripts/record_costs.py`` turns them into the
next run's `COSTS_FILE`.

Beside the seconds, each test phase carries its CPU seconds (`CpuMeter`, in the process that runs
the test): its own process's CPU (every thread: the in-process reference broker included) plus
the CPU of the child processes it reaped meanwhile (a broker JVM counts when the phase that stops it
ends: a module's shared broker in the module's last teardown). The runs are CPU-bound on two cores,
so CPU, not waiting, is what a unit costs the others; the report sums it per unit and target. A
child reaped late counts where it is reaped (Python's subprocess module, for one, reaps the
children of `Popen` objects dropped without a wait when the next `Popen` starts): in ci19 a 2.3 s
test that started one `python -S` showed 84 s, a child it reaped that had run long before. Per unit
the figure can therefore be off; a run's total is not. One such case is told apart: the teardown of
the last test a process runs also ends its session-scoped fixtures (a Spark session's JVM, say),
and their CPU went to whichever cheap test came last (two CI runs: 154 s and 130 s of CPU on tests of
1.4 s and 1.6 s). That phase's CPU is booked under `SESSION_TEARDOWN` instead.
"""

from __future__ import annotations

import json
import re
import resource
import time
from pathlib import Path

import pytest

#: the recorded cost (seconds of test time) of each work unit, from earlier parallel runs
COSTS_FILE = Path(__file__).resolve().parent / "unit_costs.json"
#: a unit's cost when it was never recorded and nothing says it is slow: cheap, so it fills the tail
UNRECORDED = 0.0
#: a suite test's group is "<module>(<target>)" (conformance/plugin.py's xdist_group_name)
_SUITE_GROUP = re.compile(r"^(?P<module>[^()]+\.py)\((?P<target>[^()]+)\)$")


def load_costs(path: Path = COSTS_FILE) -> dict[str, float]:
    """Unit -> seconds; {} when the file is missing (a fresh checkout may have none yet)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"{path}: not a readable cost file ({exc}); refresh it with scripts/record_costs.py")
    return {str(unit): float(seconds) for unit, seconds in data.get("units", {}).items()}


def unit_of_nodeid(nodeid: str) -> str:
    """The work unit of a node ID as pytest-xdist's loadgroup reads it: the text after the last
    "@" when no "]" follows it (the group), else the node ID itself (xdist/scheduler/loadgroup.py)."""
    at = nodeid.rfind("@")
    return nodeid[at + 1:] if at > nodeid.rfind("]") else nodeid


def unit_of_item(item: pytest.Item) -> str:
    """The work unit ``item`` will be scheduled in: its xdist_group (several marks join with "_",
    as pytest-xdist joins them), else its own node ID."""
    names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                    for mark in item.iter_markers("xdist_group")})
    return "_".join(names) if names else item.nodeid.split("@", 1)[0]


def _file_of_unit(unit: str) -> str:
    """The test file a unit belongs to: "f.py" of "f.py::test[...]", "f.py(target)" or "f.py"."""
    return unit.split("::", 1)[0].split("(", 1)[0]


def estimated_cost(unit: str, slow: bool, costs: dict[str, float]) -> float:
    """A unit's recorded cost, or an estimate when it has none (``slow``: a test of the unit is
    marked slow). A suite module new to a target costs what it costs on the targets it was recorded
    for (the most: they run the same scenarios); a slow test, the median of its file's recorded
    units, or of all recorded units if its file has none (a new file of slow tests); anything else
    counts as cheap (`UNRECORDED`). Only the order depends on it, never a verdict."""
    if unit in costs:
        return costs[unit]
    where = suite_target_and_module(unit)
    if where is not None:
        same_module = [seconds for other, seconds in costs.items()
                       if (other_where := suite_target_and_module(other)) and other_where[1] == where[1]]
        suites = [seconds for other, seconds in costs.items() if suite_target_and_module(other)]
        return max(same_module) if same_module else _median(suites)
    if slow:
        siblings = [seconds for other, seconds in costs.items() if _file_of_unit(other) == _file_of_unit(unit)]
        return _median(siblings or list(costs.values()))
    return UNRECORDED


def _median(values: list[float]) -> float:
    if not values:
        return UNRECORDED
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def order_by_cost(items: list[pytest.Item], costs: dict[str, float]) -> None:
    """Sort ``items`` in place: the units in falling cost (recorded, else `estimated_cost`), each
    unit's tests together and in their collected order (a stable sort on the unit's cost, then on
    where the unit first appeared, so units of equal cost keep the collection's order and the
    result is the same on every worker: pytest-xdist aborts a run whose workers collected
    different orders)."""
    first_seen: dict[str, int] = {}
    slow: set[str] = set()
    units = []
    for index, item in enumerate(items):
        unit = unit_of_item(item)
        first_seen.setdefault(unit, index)
        if any(True for _ in item.iter_markers("slow")):
            slow.add(unit)
        units.append(unit)
    cost = {unit: estimated_cost(unit, unit in slow, costs) for unit in first_seen}
    keyed = sorted(zip(items, units), key=lambda pair: (-cost[pair[1]], first_seen[pair[1]]))
    items[:] = [item for item, _ in keyed]


def suite_target_and_module(unit: str) -> tuple[str, str] | None:
    """(target, module) of a conformance suite's unit "<module>(<target>)"; None for other units."""
    match = _SUITE_GROUP.match(unit)
    return (match["target"], match["module"]) if match else None


#: the attribute of a test report that holds the CPU seconds of its phase (it travels with the
#: report from a pytest-xdist worker to the controller: reports are serialised with their attributes)
CPU_ATTRIBUTE = "brokerconf_cpu_seconds"
#: set (True) on the report of a process's last teardown, which also ends its session-scoped fixtures
SESSION_TEARDOWN_ATTRIBUTE = "brokerconf_session_teardown"
#: the CPU line under which those last teardowns' CPU is summed (it is not the last test's own)
SESSION_TEARDOWN = "(session-scoped fixtures' teardown, all workers)"


def process_cpu_seconds() -> float:
    """This process's CPU (all threads) plus that of the children it has reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuMeter:
    """The process-running-tests side: puts each test phase's CPU seconds (since the test's start
    or its previous phase) on the phase's report."""

    def __init__(self) -> None:
        self._mark = process_cpu_seconds()
        self._last_item = False

    def pytest_runtest_logstart(self) -> None:
        self._mark = process_cpu_seconds()  # time spent waiting for work is not the test's

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        # no next item: this test's teardown also tears down the session-scoped fixtures
        self._last_item = nextitem is None
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, call):
        outcome = yield
        now = process_cpu_seconds()
        report = outcome.get_result()
        setattr(report, CPU_ATTRIBUTE, round(now - self._mark, 3))
        if call.when == "teardown" and self._last_item:
            setattr(report, SESSION_TEARDOWN_ATTRIBUTE, True)
        self._mark = now


class RunTiming:
    """Collects each finished test phase's time, by unit, target and module (in the process that
    sees every report: the controller under pytest-xdist, the only process otherwise)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.units: dict[str, float] = {}
        #: unit -> summed CPU seconds of its test phases (`CpuMeter`)
        self.units_cpu: dict[str, float] = {}
        self.targets: dict[str, dict] = {}
        self.modules: dict[str, dict[str, float]] = {}
        #: worker id -> its units in the order it ran them, each [unit, first start, last stop, seconds]
        self.workers: dict[str, list[list]] = {}

    def add(self, report: pytest.TestReport) -> None:
        unit = unit_of_nodeid(report.nodeid)
        self.units[unit] = self.units.get(unit, 0.0) + report.duration
        cpu = getattr(report, CPU_ATTRIBUTE, 0.0)
        cpu_unit = SESSION_TEARDOWN if getattr(report, SESSION_TEARDOWN_ATTRIBUTE, False) else unit
        self.units_cpu[cpu_unit] = self.units_cpu.get(cpu_unit, 0.0) + cpu
        self._add_to_worker(unit, report)
        where = suite_target_and_module(unit)
        if where is None:
            return
        target, module = where
        span = self.targets.setdefault(target, {"first_start": report.start, "last_stop": report.stop,
                                                "test_seconds": 0.0, "cpu_seconds": 0.0})
        span["first_start"] = min(span["first_start"], report.start)
        span["last_stop"] = max(span["last_stop"], report.stop)
        span["test_seconds"] += report.duration
        span["cpu_seconds"] += cpu
        per_target = self.modules.setdefault(module, {})
        per_target[target] = per_target.get(target, 0.0) + report.duration

    def _add_to_worker(self, unit: str, report: pytest.TestReport) -> None:
        # pytest-xdist's reports carry the worker's id ("gw0"); a serial run's have none
        spans = self.workers.setdefault(str(getattr(report, "worker_id", None) or "main"), [])
        if spans and spans[-1][0] == unit:
            span = spans[-1]
            span[1], span[2] = min(span[1], report.start), max(span[2], report.stop)
            span[3] += report.duration
        else:
            spans.append([unit, report.start, report.stop, report.duration])

    def worker_summary(self) -> dict[str, dict]:
        """Per worker: its busy seconds (summed test phases), when its first test started and its
        last test ended (seconds from the run's start), and the seconds it stood idle at the end
        while another worker still ran: the tail that decides a parallel run's wall time."""
        if not self.workers:
            return {}
        run_end = max(spans[-1][2] for spans in self.workers.values() if spans)
        summary = {}
        for worker, spans in sorted(self.workers.items()):
            first, last = min(span[1] for span in spans), max(span[2] for span in spans)
            summary[worker] = {"busy_seconds": round(sum(span[3] for span in spans), 1),
                               "first_start": round(first - self.started, 1),
                               "last_stop": round(last - self.started, 1),
                               "idle_at_end": round(run_end - last, 1),
                               "units": len(spans)}
        return summary

    def timeline(self) -> dict[str, list[list]]:
        """Each worker's units in the order it ran them: [unit, start, stop (seconds from the run's
        start), summed test seconds]. Gaps between a unit's stop and the next one's start are time
        the worker spent outside tests (collection, waiting for work, module-scoped set-up is inside)."""
        return {worker: [[unit, round(start - self.started, 1), round(stop - self.started, 1), round(seconds, 1)]
                         for unit, start, stop, seconds in spans]
                for worker, spans in sorted(self.workers.items())}

    def to_json(self) -> dict:
        return {
            "wall_seconds": round(time.time() - self.started, 1),
            "workers": self.worker_summary(),
            "timeline": self.timeline(),
            "units": {unit: round(seconds, 2) for unit, seconds in sorted(self.units.items())},
            "units_cpu": {unit: round(seconds, 2) for unit, seconds in sorted(self.units_cpu.items())},
            "targets": {target: {"wall_seconds": round(span["last_stop"] - span["first_start"], 1),
                                 "test_seconds": round(span["test_seconds"], 1),
                                 "cpu_seconds": round(span["cpu_seconds"], 1)}
                        for target, span in sorted(self.targets.items())},
            "modules": {module: {t: round(s, 1) for t, s in sorted(per.items())}
                        for module, per in sorted(self.modules.items())},
        }


#: units named in the terminal summary's CPU lines
CPU_LINES = 12


class CostScheduling:
    """The pytest side: orders a worker's collection by cost (``--no-loadscope-reorder`` runs only,
    where nothing else reorders the units), and writes ``--timing-report``."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.timing = RunTiming()

    @pytest.hookimpl(trylast=True)  # after every hook that adds xdist_group marks
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if _by_cost(self.config):
            order_by_cost(items, load_costs())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not hasattr(self.config, "workerinput"):  # a worker's reports reach the controller too
            self.timing.add(report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        """Under pytest-xdist: one line per worker, so a run whose wall time grew shows whether a
        worker stood idle at the end while another finished a long unit (the schedule's tail)."""
        summary = self.timing.worker_summary()
        if hasattr(self.config, "workerinput") or len(summary) < 2:
            return
        terminalreporter.write_sep("=", "time per worker (conformance/schedule.py)")
        for worker, row in summary.items():
            last_unit = self.timing.workers[worker][-1][0]
            terminalreporter.write_line(
                f"{worker}: busy {row['busy_seconds']:.0f} s in {row['units']} units, last test ended at "
                f"{row['last_stop']:.0f} s, idle {row['idle_at_end']:.0f} s at the end; last unit {last_unit}")
        self._write_cpu(terminalreporter)

    def _write_cpu(self, terminalreporter) -> None:
        """The units that cost the most CPU: on two cores, what a unit takes from all the others."""
        cpu = self.timing.units_cpu
        total = sum(cpu.values())
        if not total:
            return
        terminalreporter.write_sep("=", f"CPU of the tests: {total / 60:.1f} min; the {CPU_LINES} costliest units")
        for unit, seconds in sorted(cpu.items(), key=lambda item: -item[1])[:CPU_LINES]:
            terminalreporter.write_line(f"{seconds:7.1f} s CPU  {self.timing.units.get(unit, 0.0):7.1f} s of test time  {unit}")

    def pytest_sessionfinish(self) -> None:
        path = self.config.getoption("brokerconf_timing_report", None)
        if path and not hasattr(self.config, "workerinput"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(json.dumps(self.timing.to_json(), indent=2))


def _by_cost(config: pytest.Config) -> bool:
    """Only a parallel loadgroup run that turned pytest-xdist's own reordering off is ordered by
    cost: a serial run keeps the file order people read, and with the reordering on, pytest-xdist
    would sort the units again by their number of tests."""
    option = config.option
    # a worker sees ``loadgroup`` (remote.py sets it from the controller's --dist, and dist to "no")
    loadgroup = getattr(option, "loadgroup", False) or getattr(option, "dist", "no") == "loadgroup"
    return loadgroup and getattr(option, "loadscopereorder", True) is False


def add_options(group) -> None:
    """The plugin's option group gets ``--timing-report``."""
    group.addoption("--timing-report", dest="brokerconf_timing_report", metavar="FILE",
                    help="write the run's timing as JSON to FILE: each work unit's test time, each target's wall "
                         "and test time, each module's per target (conformance/schedule.py)")


def register(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("brokerconf-cost-scheduling"):
        config.pluginmanager.register(CostScheduling(config), "brokerconf-cost-scheduling")
        config.pluginmanager.register(CpuMeter(), "brokerconf-cpu-meter")
