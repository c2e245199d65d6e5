"""Node handles of the topology contract (conformance/topology.py) built from what a launcher
already has: a broker process (`ProcessNode`), and a single launched broker seen as a topology of
one node (`SingleNodeCluster`).

Signals go to a broker's own PID, and only while its handle says it runs (a reaped PID may belong
to someone else by now). A broker that leads its own process group (the launchers start JVMs with
``start_new_session``) gets SIGSTOP / SIGCONT on the whole group, so every thread of the tree
stops; never our own group.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from conformance.topology import Cluster, Node, NodeError, Topology
from machinery.waiting import poll


def signal_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pid`` leads, or to ``pid`` alone when it leads none."""
    if not pid or pid == os.getpid():
        raise NodeError(f"refusing to signal pid {pid!r}: it is not a broker process we started")
    try:
        own_group = os.getpgid(pid) == pid and pid != os.getpgid(0)
    except ProcessLookupError:
        own_group = False
    if own_group:
        os.killpg(pid, sig)  # pgid == the leader's pid, which is not reaped: not reused
    else:
        os.kill(pid, sig)


class ProcessNode(Node):
    """A `Node` over a broker process handle (``pid``, ``running``, ``start(timeout=)``,
    ``stop()``, ``kill()``, ``log_tail(lines)``) and the broker handle that reads its counters
    (``host``, ``ports``, ``destination_counters``). ``start_options``: extra keyword arguments of
    the process's ``start`` (ActiveMQ slaves: ``wait_for="lock"``)."""

    def __init__(self, name: str, process: Any, handle: Any = None, **start_options: Any) -> None:
        self.name = name
        self.process = process
        self.handle = handle
        self.start_options = start_options

    @property
    def host(self) -> str:
        return self.handle.host if self.handle is not None else self.process.host

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def running(self) -> bool:
        return bool(self.process.running)

    def address(self, protocol: str) -> tuple[str, int]:
        ports = self.handle.ports if self.handle is not None else self.process.ports
        try:
            return self.host, ports[protocol]
        except KeyError:
            raise KeyError(f"node {self.name} has no {protocol} listener (open: {sorted(ports)})") from None

    def start(self, timeout: float = 60) -> None:
        self.process.start(timeout=timeout, **self.start_options)

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        pid = self._pid()
        os.kill(pid, signal.SIGKILL)
        self.process.kill()  # reaps it and releases what the handle holds (logs, finalizers)

    def pause(self) -> None:
        signal_tree(self._pid(), signal.SIGSTOP)

    def resume(self) -> None:
        signal_tree(self._pid(), signal.SIGCONT)

    def _pid(self) -> int:
        if not self.running:
            raise NodeError(f"node {self.name} is not running: start it first")
        return self.process.pid

    def serving(self) -> bool:
        serving = getattr(self.process, "serving", None)  # noqa: B009 - processes without a slave state always serve
        return serving(timeout=0.5) if serving is not None else self.running

    def _counters(self, destination: str):
        return self.handle.destination_counters(destination) if self.handle is not None else None

    def consumer_count(self, destination: str) -> int:
        counters = self._counters(destination)
        return counters.consumers if counters else 0

    def queue_size(self, destination: str) -> int:
        counters = self._counters(destination)
        return counters.enqueued - counters.dequeued if counters else 0

    def wait_for_consumers(self, destination: str, count: int, timeout: float = 10.0) -> int:
        return poll(lambda: self.consumer_count(destination), lambda seen: seen == count,
                    timeout=timeout, interval=0.1)

    def log_tail(self, lines: int = 80) -> str:
        return self.process.log_tail(lines)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.process!r}>"


class NodeRestarts:
    """`Cluster.restart` / `stop_broker` / `start_broker` for a cluster whose nodes (``self.nodes``,
    name -> ProcessNode) have no bridges to wait for: stop and start the node itself. Shared by
    SingleNodeCluster and ActiveMQ's SharedStoreGroup."""

    nodes: dict[str, Any]

    def restart(self, name: str, timeout: float = 90) -> None:
        self.nodes[name].stop()
        self.nodes[name].start(timeout=timeout)

    def stop_broker(self, name: str) -> None:
        self.nodes[name].stop()

    def start_broker(self, name: str, timeout: float = 90) -> None:
        self.nodes[name].start(timeout=timeout)


class SingleNodeCluster(NodeRestarts, Cluster):
    """One launched broker as a topology of one node, ``A``. ``node``: its `Node` when the harness
    can fault it (a process or container of ours), else None (then ``nodes`` is empty and process
    faults are refused by whoever asks for them)."""

    def __init__(self, topology: Topology, handle: Any, node: Any | None) -> None:
        self.topology = topology
        self.handle = handle
        (name,) = topology.nodes
        self.nodes = {name: node} if node is not None else {}

    def __getitem__(self, name: str):
        return self.nodes[name]

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        try:
            return [(self.handle.host, self.handle.ports[protocol])]
        except KeyError:
            raise KeyError(f"{self.handle.target} has no {protocol} listener (open: {sorted(self.handle.ports)})") \
                from None

    def serving(self) -> list[str]:
        return list(self.topology.nodes)

    def bridge_establishments(self) -> int:
        return 0

    def subscription_discards(self, destination: str) -> list[int] | None:
        if "counters.subscription" not in self.handle.capabilities:
            return None
        return sorted(c.discarded for c in self.handle.subscription_counters(destination))

    def log_tail(self, lines: int = 40) -> str:
        return self.handle.log_tail(lines)

    def config_text(self) -> str:
        return self.handle.config_text()

    def stop(self) -> None:
        self.handle.stop()


def launch_single(target: Any, topology: Topology, scenario: Any, workdir: Any, *, faultable: bool,
                  node_type: type[ProcessNode] = ProcessNode) -> SingleNodeCluster:
    """``target.launch`` as a topology of one node: the targets' launcher of `Shape.SINGLE`
    (conformance/targets/runtime/shape_launch.py picks it by the topology's shape). ``faultable``:
    the handle's ``process`` is ours to kill / pause (the target declares ``process.kill``); else
    the cluster has no node to fault. ``node_type``: the target's own node class when its nodes
    have parts (a real broker's `NativeListener`)."""

    handle = target.launch(scenario, workdir)
    node = node_type(topology.nodes[0], handle.process, handle) if faultable else None
    return SingleNodeCluster(topology, handle, node)
