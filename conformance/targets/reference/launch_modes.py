"""How the reference broker runs in each launch mode: one object per mode, asked by
`ReferenceTarget` for everything that differs between the two (issue 27: the target resolves its
mode once, then never compares the mode's name again).

* `InProcessLaunch`: a `BrokerServer` in this process, started in milliseconds; its engine is at
  hand (the resetAllGroups operation), but it has no process of its own to kill.
* `ProcessLaunch`: ``python -m reference_broker``, a process the harness can kill and restart; its
  HTTP listener offers statistics, no management operations.
"""

from __future__ import annotations

from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.reference.handles import InProcessReference, ProcessReference

__all__ = ["InProcessLaunch", "ProcessLaunch", "LAUNCHES", "launch_for"]


class InProcessLaunch:
    name = "in-process"
    #: the same broker code a reference:process runs, inside this process
    local = True
    #: the handle has no process of its own: a topology of one broker has no node to fault
    faultable = False
    #: the in-process handle reaches the engine directly
    capabilities = frozenset({"groups.reset"})

    def why_missing(self, capability: str) -> str | None:
        if capability == "process.kill":
            return "the in-process reference broker cannot be killed: use the reference:process target"
        return None

    def launch(self, scenario: Scenario, workdir: Path, target: str) -> InProcessReference:
        return InProcessReference(scenario, target=target, workdir=workdir)


class ProcessLaunch:
    name = "process"
    local = True
    faultable = True
    capabilities = frozenset({"process.kill"})

    def why_missing(self, capability: str) -> str | None:
        if capability == "groups.reset":
            return "the reference broker's HTTP listener has no management operations: use the in-process target"
        return None

    def launch(self, scenario: Scenario, workdir: Path, target: str) -> ProcessReference:
        return ProcessReference(scenario, workdir, target=target)


#: a launch mode's name -> its object; the reference target has no "auto": it is told which
LAUNCHES = {"in-process": InProcessLaunch(), "process": ProcessLaunch()}


def launch_for(requested: str) -> InProcessLaunch | ProcessLaunch:
    """The object for ``requested``, else ValueError naming the two."""
    try:
        return LAUNCHES[requested]
    except KeyError:
        raise ValueError(f"reference target: launch must be 'in-process' or 'process', not {requested!r}") from None
