"""pytest plugin: the run fails if the session left a process, network namespace, mount, Docker
object or temporary directory behind (conformance/leaks.py records what it started).

tests/conftest.py registers it for the project's tests; `-p conformance.leak_plugin` adds it to
any other run. Under pytest-xdist each worker records and checks what it started itself and
sends the list to the controller with its results (`workeroutput`); the controller, which runs
no tests, checks nothing of its own and fails the run if any worker found something. The check
runs last in `pytest_sessionfinish`, after session-scoped fixtures are torn down, and the list
is printed in a "left behind by the tests" section of the summary.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance import leaks, xdist_groups

_REGISTRY = pytest.StashKey[leaks.StartedRegistry]()
_FOUND = pytest.StashKey[list[str]]()
WORKER_KEY = "brokerconf_leftovers"
#: the summary section's title, and the words of its last line (what a parent reads back from a
#: child pytest's output: tests/conformance/fault_batches.py `left_behind`)
SECTION_TITLE = "left behind by the tests"
STILL_THERE = "thing(s) the tests started are still there"


def _controller(config: pytest.Config) -> bool:
    return not xdist_groups.in_worker(config) and bool(getattr(config.option, "numprocesses", None))


def pytest_configure(config: pytest.Config) -> None:
    if _controller(config) or _REGISTRY in config.stash:
        return
    registry = leaks.StartedRegistry()
    if config.rootpath.resolve() != leaks.ROOT:
        registry.roots.append(config.rootpath.resolve())
    registry.install()
    config.stash[_REGISTRY] = registry


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    found = getattr(node, "workeroutput", {}).get(WORKER_KEY) or []
    worker = getattr(node, "gateway", None)
    label = getattr(worker, "id", "worker")
    node.config.stash.setdefault(_FOUND, []).extend(f"[{label}] {line}" for line in found)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    registry = config.stash.get(_REGISTRY, None)
    if registry is not None:
        basetemp = getattr(getattr(config, "_tmp_path_factory", None), "_basetemp", None)
        if basetemp is not None:  # set once a test used tmp_path; this session's (or worker's) own
            registry.own_dirs.append(Path(basetemp))
        found = registry.leftovers()
        registry.uninstall()
        if xdist_groups.in_worker(config):
            config.workeroutput[WORKER_KEY] = found
        config.stash.setdefault(_FOUND, []).extend(found)
    if config.stash.get(_FOUND, None) and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    found = config.stash.get(_FOUND, None)
    if not found:
        return
    terminalreporter.section(SECTION_TITLE, red=True)
    for line in found:
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"{len(found)} {STILL_THERE}; clean them up "
                                "by handle or PID in the test that started them")
