"""The nodes of a deployment that no fault of the experiment may stop, watched while it runs: one
that stops anyway ends the run at once, with the reason in the history.

Seen in a main job: the Artemis broker of ``client-partition`` stopped 3 s after it started (its
web console could not bind its port, AMQ221002 in its log); the workload went on retrying for
264 s against no broker and the verdict came out "unknown" with nothing saying why.

Which faults may stop which node is declared with each nemesis kind (chaos/experiment_file.py,
`FaultKind.stops`): a fault of the fault proxy never stops a broker, ``kill`` and ``stop`` stop
their node (``pause`` freezes it, the process stays), a process fault aimed at ``master`` may hit
any node, and so may a ``lock-loss`` fault.
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from chaos.experiment_file import FAULT_KINDS, Stops
from conformance.topology import Node

#: how often the watched nodes are asked whether they still run (a poll of each process)
CHECK_EVERY_S = 1.0


def nodes_a_fault_may_stop(nemeses: Iterable, names: Iterable[str]) -> set[str]:
    """The node names the experiment's nemesis sections (kind, node) may stop."""
    names = set(names)
    may: set[str] = set()
    for section in nemeses:
        stops = FAULT_KINDS[section.kind].stops
        if stops is Stops.ANY_NODE or (stops is Stops.ITS_NODE and section.node == "master"):
            may |= names
        elif stops is Stops.ITS_NODE:
            may.add(section.node)
    return may


class ExitWatch:
    """``stopped()`` names the first watched node that no longer runs, with its log's last lines."""

    def __init__(self, nodes: Mapping[str, Node], watched: Iterable[str], *, every_s: float = CHECK_EVERY_S) -> None:
        self.nodes = nodes
        self.watched = sorted(watched)
        self.every_s = every_s
        self._next = 0.0

    def stopped(self) -> str | None:
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.every_s
        for name in self.watched:
            node = self.nodes[name]
            if not node.running:
                return (f"node {name} stopped on its own (no fault of this experiment stops it); the run ended "
                        f"there. Its log's last lines:\n{node.log_tail(15)}")
        return None
