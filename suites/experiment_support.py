"""What the lock-loss experiment suites share (test_nfs_lock_loss_experiments.py,
test_jdbc_lock_loss_experiments.py): a shipped chaos experiment (chaos/experiments/) run end to end
as `brokerconf chaos run` runs it, shortened by overrides only, once per target of the run, and the
checks that keep the harness's own faults apart from the broker's behaviour.

Not a suite (the name does not match pytest's ``test_*.py``): the suite files import from it.
These suites parametrize ``target_name`` themselves (as network_support.py does) so the plugin
gives them what every suite gets: the catalogue statements they check reach the conformance
matrix, and a known deviation is booked only through the narrowed path
(conformance/known_deviations/*.toml: an AssertionError whose message matches the recorded one).

A harness fault (a process the run left behind, a mount still there, a nemesis that failed, a
fault schedule not kept) raises `HarnessFault`, which is not an AssertionError: it fails the test
whatever deviation the test has, instead of being booked as the broker's misbehaviour.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path

import pytest

import chaos
from conformance.plugin import NOT_APPLICABLE, STATE
from conformance.targets.base import why_missing
from machinery.tether import watchdog_pid

# the experiment files ship inside the chaos package (pyproject package-data), wherever it is installed
EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"


class HarnessFault(RuntimeError):
    """The harness itself went wrong, so the run says nothing about the broker."""


def parametrize_by_kind(metafunc: pytest.Metafunc, kinds: dict[str, tuple[str, ...]]) -> None:
    """One run per target of the run whose kind the test knows an experiment for (``kinds``: test
    name -> target kinds; a test not listed runs on every kind that has an experiment file)."""
    if "target_name" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash[STATE]
    wanted = kinds.get(metafunc.definition.originalname, ("reference", "activemq", "artemis"))
    names = [n for n in dict.fromkeys(state.target_names) if state.targets[n].kind in wanted]
    metafunc.parametrize("target_name", names, ids=names)


def experiment_target(request: pytest.FixtureRequest, target_name: str, capability: str) -> str:
    """The target the experiment runs on for the run's ``target_name``: the experiment file's own
    local-process launcher of that kind (``<kind>:process``, what the files ship and the deviations'
    evidence was measured with). A container target, or one that cannot launch ``capability``
    groups (an external broker), is not applicable, with the reason."""
    target = request.config.stash[STATE].targets[target_name]
    if not target.launches_locally:
        # a container target's broker is not the one the experiment would run: say so, rather
        # than record a local process's outcome under its name
        pytest.skip(f"{NOT_APPLICABLE}{target_name} launches {target.launch_mode} brokers; the experiment runs a "
                    f"local-process {target.kind} pair")
    if capability not in target.capabilities():
        why = why_missing(target, capability)
        pytest.skip(f"{NOT_APPLICABLE}{target_name} lacks {capability}" + (f" ({why})" if why else ""))
    return f"{target.kind}:process"


def child_pids() -> set[int]:
    """Live processes whose parent is this test process (brokers, mounts, the store, proxies), but
    not its tether watchdog (machinery/tether.py), which lives as long as this process: started by
    the first launch, it is new after a run that launched first, and left over by none."""
    watchdog = watchdog_pid()
    mine = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z" and int(entry) != watchdog:
                mine.add(int(entry))
    return mine


def command_of(pid: int) -> str:
    """A process's command line, to name what was left behind (gone already: "(ended)")."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "(ended)"


def mounts_under(path: Path) -> list[str]:
    """Lines of /proc/mounts naming ``path`` (a FUSE mount the run should have unmounted)."""
    return [line for line in Path("/proc/mounts").read_text().splitlines() if str(path) in line]


def check_harness(verdict: dict, *, left: set[int], mounts: list[str], faults: int = 1) -> None:
    """HarnessFault when the run itself went wrong: processes or mounts it left behind, a nemesis
    step that failed, or not the ``faults`` lock-loss faults its schedule has."""
    if left:
        raise HarnessFault(f"harness: processes left behind by the experiment: "
                           f"{ {pid: command_of(pid) for pid in sorted(left)} }")
    if mounts:
        raise HarnessFault(f"harness: mounts left behind by the experiment: {mounts}")
    stats = verdict["run_stats"]
    if stats["nemesis_errors"]:
        raise HarnessFault(f"harness: the nemesis failed: {stats['nemesis_errors']}")
    if len(stats["lock_loss"]) != faults:
        raise HarnessFault(f"harness: {faults} lock-loss fault(s) were scheduled, the run made "
                           f"{len(stats['lock_loss'])}: {stats['lock_loss']}")


def run_checked(exp, workdir: Path) -> dict:
    """``exp`` run and judged as `brokerconf chaos run` does (in ``workdir`` / "run"); the verdict once the harness checks
    passed (`check_harness`). What each fault took is printed, not asserted."""
    from brokerconf.chaos_job import run_and_judge

    before = child_pids()
    verdict = run_and_judge(exp, workdir / "run", progress=lambda line: None)
    left = child_pids() - before
    stats = verdict["run_stats"]
    total = verdict["checks"]["total_queue"]
    print(f"{exp.name} on {exp.target.name}: lock_loss {json.dumps(stats['lock_loss'])}; total_queue lost "
          f"{len(total['lost'])} duplicated {len(total['duplicated'])}; split_brain "
          f"{verdict['checks'].get('split_brain', {}).get('valid')}")
    print(key_log_lines(workdir / "run" / "broker-log-tail.txt"))
    check_harness(verdict, left=left, mounts=mounts_under(workdir))
    return verdict


#: what a lock-loss run's logs say about who held the store when: ActiveMQ's lock, start and stop
#: lines, Artemis's activation and shutdown codes, the store server's lease expiries, and any line
#: naming a master or backup (ours among them); the store server's lock grants
KEY_LOG_LINE = re.compile(r"locked by|slave mode|lock file|\bis (starting|shutting down|shutdown)\b|\) started"
                          r"|Connector \w+ (started|stopped)|AMQ22?1\d{3}|lease of|master|backup|granted to",
                          re.IGNORECASE)
#: a log line's leading timestamp (ActiveMQ's date and time, Artemis's and the store's time)
TIMESTAMP = re.compile(r"^[\d\-:,. ]+(?=\S)")
#: lines that would crowd the rest out: a stopping ActiveMQ's per connection, an Artemis start's
#: per protocol module and per deployed address, stack frames
NOISE = ("Transport Connection to", "Suppressing reply", "AMQ221043", "AMQ221080", "AMQ221003", "AMQ221057",
         "\tat ", "\t... ")


def key_log_lines(path: Path, per_section: int = 30) -> str:
    """The lines of a run's kept broker logs (chaos/experiment.py, ``broker-log-tail.txt``: each
    node's section, then the store server's) that say who held the store when, the last
    ``per_section`` of each section (the takeover is near the end; a long section does not crowd
    the store's out): printed with the test, so a run whose outcome differs from the others' (a
    strict xfail that passed) carries its timeline into the report after its run directory is gone."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"(no broker logs kept: {exc})"
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in lines:
        if line.startswith("--- "):
            sections.append((line, []))
        elif KEY_LOG_LINE.search(line) and not any(noise in line for noise in NOISE):
            sections[-1][1].append(line[:240])
    sections = [(header, _collapse_repeats(kept)) for header, kept in sections]
    out = [f"key lines of {path.name}:"]
    for header, kept in sections:
        if header:
            out.append(header)
        if len(kept) > per_section:
            out.append(f"({len(kept) - per_section} earlier lines in {path.name})")
        out += kept[-per_section:]
    return "\n".join(out)


def _collapse_repeats(lines: list[str]) -> list[str]:
    """A run of lines that differ only in their timestamps as its first line and a count (ActiveMQ
    logs "giving up being a master" once per pending lock check, a dozen in one millisecond)."""
    out: list[str] = []
    for _, run in itertools.groupby(lines, key=lambda line: TIMESTAMP.sub("", line)):
        first, *more = run
        out.append(first)
        if more:
            out.append(f"  (the line above {len(more)} more times)")
    return out


def the_fault(verdict: dict) -> dict:
    (fault,) = verdict["run_stats"]["lock_loss"]
    return fault
