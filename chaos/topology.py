"""The brokers an experiment runs against ([topology] in the experiment file), behind one shape:
node handles the process nemesis can fault, each node's client address, who is master, and the
broker's own counters for the checkers.

* ``single``: one broker launched by its target (conformance.targets), node ``A``.
* ``shared-store``: ``nodes`` brokers on one store, one master at a time (A-MQ fault-tolerant
  messaging guide, 3.1); only targets with a ``launch_shared_store`` method have one (ActiveMQ
  Classic). Clients list every node in their failover URL (the guide's Example 3.2). With
  ``--target activemq:container`` the nodes are containers on one Docker volume holding the
  KahaDB directory (conformance.targets.activemq_container_network.SharedVolumePair); their
  nodes have the same pid / running / start / kill shape, so nothing below differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.experiment_file import Experiment, ExperimentError
from conformance.scenario import Scenario
from conformance.targets.base import TargetUnavailable


class Topology:
    """Base shape; `launch_topology` returns one of the subclasses."""

    kind = "single"

    def __init__(self, nodes: dict[str, Any]) -> None:
        self.nodes = nodes  # name -> a handle with pid / running / start / stop / kill

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        raise NotImplementedError

    def master(self) -> str | None:
        """The node serving clients now (None while no node does)."""
        raise NotImplementedError

    def subscription_discards(self, destination: str) -> list[int] | None:
        """The broker's discarded counter of every subscription on ``destination`` (None when
        this topology cannot read it)."""
        return None

    def log_tail(self, lines: int = 60) -> str:
        return ""

    def stop(self) -> None:
        raise NotImplementedError


class SingleBroker(Topology):
    def __init__(self, handle) -> None:
        # Process faults drive the broker's own process handle (kill -9 its PID, start it again).
        super().__init__({"A": getattr(handle, "process", handle)})
        self.handle = handle

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [(self.handle.host, self.handle.ports[protocol])]

    def master(self) -> str | None:
        return "A"

    def subscription_discards(self, destination: str) -> list[int] | None:
        if "counters.subscription" not in getattr(self.handle, "capabilities", frozenset()):
            return None
        return sorted(c.discarded for c in self.handle.subscription_counters(destination))

    def log_tail(self, lines: int = 60) -> str:
        tail = getattr(self.handle, "log_tail", None)
        return tail(lines) if tail else ""

    def stop(self) -> None:
        self.handle.stop()


class SharedStore(Topology):
    kind = "shared-store"

    def __init__(self, group) -> None:
        super().__init__({node.name: node for node in group.nodes})
        self.group = group

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return self.group.addresses(protocol)

    def master(self) -> str | None:
        node = self.group.master()
        return node.name if node else None

    def log_tail(self, lines: int = 60) -> str:
        return self.group.log_tail(lines)

    def stop(self) -> None:
        self.group.stop()


def launch_topology(exp: Experiment, target, workdir: Path) -> Topology:
    """Start what ``exp`` describes on ``target``; raises ExperimentError when it cannot."""
    scenario = Scenario(name=exp.name, protocols=(exp.target.protocol,),
                        policies=tuple(p.to_policy() for p in exp.policy))
    topo = exp.topology
    if topo.kind == "single":
        try:
            return SingleBroker(target.launch(scenario, workdir))
        except TargetUnavailable as exc:
            raise ExperimentError(f"target {exp.target.name} could not start: {exc}") from None
    launch = getattr(target, "launch_shared_store", None)
    if launch is None:
        raise ExperimentError(f"target {exp.target.name} has no shared-store master/slave launcher "
                              "(ActiveMQ Classic has one: [target] name = \"activemq\")")
    try:
        group = launch(scenario, workdir, nodes=topo.nodes, lock_keep_alive_period_ms=topo.lock_keep_alive_period_ms,
                       lock_acquire_sleep_interval_ms=topo.lock_acquire_sleep_interval_ms)
    except TargetUnavailable as exc:
        raise ExperimentError(f"target {exp.target.name} could not start a shared-store group: {exc}") from None
    return SharedStore(group)
