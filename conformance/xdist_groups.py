"""Makes pytest-xdist's ``--dist loadgroup`` honour ``xdist_group`` marks on pytest >= 9.2.

How loadgroup works (pytest-xdist 3.8, xdist/remote.py and xdist/scheduler/loadgroup.py): each
worker appends ``@<group>`` to the node ID of a test marked ``xdist_group`` (in its
``pytest_collection_modifyitems``), and the controller, which sees only node IDs, sends all tests
with the same suffix to one worker. It appends by assigning ``item._nodeid``; pytest 9.2 keeps
the ID in a structured ``item._id`` instead, so the assignment changes nothing and the groups are
silently ignored: each test goes to whichever worker is free (pytest-dev/pytest-xdist issue
#1386, fix proposed in pull request #1388). For the conformance suites that would start each
module's broker on both workers.

`GroupSuffix` runs after pytest-xdist's hook on a loadgroup worker and gives every grouped test
the suffix pytest-xdist meant to give it, where it is missing; where pytest-xdist already added
it (older pytest, or a fixed pytest-xdist) it does nothing.
"""

from __future__ import annotations

import pytest


def in_worker(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker (the controller and a serial run have no ``workerinput``)."""
    return hasattr(config, "workerinput")


def add_group(item: pytest.Item, name: str) -> None:
    """Mark ``item`` ``xdist_group(name)`` in a pytest-xdist worker (elsewhere the mark means
    nothing, and without pytest-xdist installed it would be an unknown mark)."""
    if in_worker(item.config):
        item.add_marker(pytest.mark.xdist_group(name))


#: fixtures of these scopes are set up once per worker that runs a test needing them
_SHARED_SCOPES = ("module", "class", "package")


def shared_fixture_group(item: pytest.Item) -> str | None:
    """A group for a test that uses a module-, class- or package-scoped fixture: its module, and
    the values of such fixtures' parameters (None when it uses none).

    Without it pytest-xdist spreads a module's tests over the workers and each sets the fixture
    up again: a broker container, a real broker, a whole suite run (tests/docker/
    test_container_suites.py's ``suite_run`` runs every suite in containers). Session fixtures
    are left alone: each worker has its own session (a Spark session per worker)."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's FuncFixtureInfo (no public accessor)
    if info is None:
        return None
    # the last definition of a name is the one the test gets (the others are overridden)
    shared = [name for name in item.fixturenames
              if info.name2fixturedefs.get(name) and info.name2fixturedefs[name][-1].scope in _SHARED_SCOPES]
    if not shared:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    values = [_param_label(item, name, params[name]) for name in shared if name in params]
    module = item.nodeid.split("::", 1)[0]
    return f"{module}({','.join(values)})" if values else module


def _param_label(item: pytest.Item, name: str, value) -> str:
    if isinstance(value, (str, int, float, bool)) and not any(c in str(value) for c in "@]"):
        return f"{name}={value}"
    return f"{name}#{item.callspec.indices[name]}"


class UnreadableGroup(ValueError):
    """A group name pytest-xdist's scheduler would not read as one."""


def group_suffix(item: pytest.Item) -> str | None:
    """``@<group>`` as pytest-xdist builds it from the item's ``xdist_group`` marks (None: no mark)."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    bad = sorted(name for name in names if "@" in name or "]" in name)
    if bad:
        # the controller reads the group after the last "@" of a node ID, and only when no "]"
        # follows it (xdist/scheduler/loadgroup.py): such a name would group nothing
        raise UnreadableGroup(f"xdist_group name(s) {bad} contain '@' or ']', which pytest-xdist cannot "
                              "read back from the node ID: the test would not stay with its group")
    return "@" + "_".join(sorted(names)) if names else None


#: why a test could not be put in its group (it then fails at set-up with this message: an error
#: raised in a worker's collection reaches the controller only as a crash without the message)
UNGROUPED = pytest.StashKey[str]()


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    try:
        from _pytest.nodeid import NodeId  # pytest >= 9.2: the structured ID
    except ImportError:
        item._nodeid = nodeid  # what pytest-xdist itself does on older pytest
        return
    item._id = NodeId.parse(nodeid)


class GroupSuffix:
    """Registered on pytest-xdist workers that run with ``--dist loadgroup``."""

    # trylast: after pytest-xdist's own hook, and after every hook that adds xdist_group marks
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            try:
                suffix = group_suffix(item)
            except UnreadableGroup as exc:
                item.stash[UNGROUPED] = str(exc)
                continue
            if suffix is not None and not item.nodeid.endswith(suffix):
                _set_nodeid(item, item.nodeid + suffix)
                if not item.nodeid.endswith(suffix):
                    item.stash[UNGROUPED] = (f"cannot give the test its pytest-xdist group {suffix} on this pytest "
                                             "(conformance/xdist_groups.py); run without -n")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if UNGROUPED in item.stash:
            pytest.fail(item.stash[UNGROUPED], pytrace=False)


def register(config: pytest.Config) -> None:
    """Register `GroupSuffix` when this process is a pytest-xdist worker under loadgroup."""
    if in_worker(config) and getattr(config.option, "loadgroup", False):
        config.pluginmanager.register(GroupSuffix(), "brokerconf-xdist-group-suffix")
