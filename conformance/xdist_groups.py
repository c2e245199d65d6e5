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


def group_suffix(item: pytest.Item) -> str | None:
    """``@<group>`` as pytest-xdist builds it from the item's ``xdist_group`` marks (None: no mark)."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    bad = sorted(name for name in names if "@" in name or "]" in name)
    if bad:
        # the controller reads the group after the last "@" of a node ID, and only when no "]"
        # follows it (xdist/scheduler/loadgroup.py): such a name would group nothing
        raise pytest.UsageError(f"{item.nodeid}: xdist_group name(s) {bad} contain '@' or ']'")
    return "@" + "_".join(sorted(names)) if names else None


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
            suffix = group_suffix(item)
            if suffix is not None and not item.nodeid.endswith(suffix):
                _set_nodeid(item, item.nodeid + suffix)
                if not item.nodeid.endswith(suffix):
                    raise pytest.UsageError(
                        f"{item.nodeid}: cannot give the test its pytest-xdist group {suffix} on this pytest; "
                        "run without -n (conformance/xdist_groups.py)")


def register(config: pytest.Config) -> None:
    """Register `GroupSuffix` when this process is a pytest-xdist worker under loadgroup."""
    if hasattr(config, "workerinput") and getattr(config.option, "loadgroup", False):
        config.pluginmanager.register(GroupSuffix(), "brokerconf-xdist-group-suffix")
