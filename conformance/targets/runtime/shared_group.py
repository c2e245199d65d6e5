"""A shared-store master/slave group as a `Cluster` (conformance/topology.py), whatever the broker:
N broker processes of ours on one store, one master at a time (A-MQ "Fault Tolerant Messaging"
guide, 3.1). A broker's folder builds the processes (its configuration, its lock settings) and
hands them here as `ProcessNode`s; this module only knows the guide's shape:

* `start` starts the first node alone and waits until it serves (it must become master), then
  the others until each either serves or says it waits for the lock (``wait_for="lock"``), and
  refuses a second node that serves (two masters of one store);
* `master` is the one node whose listeners accept clients (only the master opens them);
* a node's ports are fixed before its first start and kept across restarts, so a failover URL
  listing every node stays valid while the master moves.

Each process handle needs ``start(timeout, wait_for=...)``, ``serving(timeout)``,
``waiting_for_lock()``, ``stop()``, ``kill()``, ``pid``, ``running``, ``ports``, ``log_tail``,
``render_config()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.deployment import SharedStorage
from conformance.topology import Cluster, Topology
from conformance.targets.runtime.node import NodeRestarts, ProcessNode
from machinery.waiting import Deadline, poll

__all__ = ["SharedStoreCluster", "SharedStoreError"]


class SharedStoreError(RuntimeError):
    """The group is not in the guide's shape (no master, or two)."""


def group_log_tail(nodes: dict, rig: Any, lines: int) -> str:
    """The end of each node's log, then of the store server's when the store is on the simulated
    NFS (its lease expiries: the store's side of a takeover); shared by every broker's group."""
    parts = [f"--- node {node.name} ---\n{node.log_tail(lines)}" for node in nodes.values()]
    store_log = getattr(rig, "log_tail", None)  # a database's links (DatabaseLinks) keep no log
    if store_log is not None and (text := store_log(lines)):
        parts.append(f"--- store server ---\n{text}")
    return "\n".join(parts)


class SharedStoreCluster(NodeRestarts, Cluster, SharedStorage):
    """``nodes`` (name -> ProcessNode, start order: the first becomes master) on the store at
    ``store``, locked through ``lock_file``."""

    host = "127.0.0.1"

    def __init__(self, topology: Topology, nodes: dict[str, ProcessNode], store: Path, *, label: str,
                 lock_file: Path | None = None, database: Any = None, rig: Any = None) -> None:
        self.topology = topology
        self.nodes = nodes
        self.store = Path(store)
        self.label = label
        #: the file whose lock makes a node master, when the harness can reach it (lock-loss tests)
        self.lock_file = Path(lock_file) if lock_file is not None else None
        #: a jdbc store's database server (machinery/postgres.py PostgresServer), stopped after the nodes
        self.database = database
        #: what faults one node's link to the store, closed after the nodes (and the database): a
        #: store on the simulated NFS (runtime/nfs_store.py NfsStore) or a jdbc store's database
        #: links through the fault proxy (runtime/database_links.py DatabaseLinks); its ``nemesis``
        #: is healed before the nodes stop
        self.rig = rig

    def start(self, timeout: float = 120) -> None:
        deadline = Deadline(timeout)
        try:
            first, *others = self.nodes.values()
            first.process.start(timeout=timeout)  # alone on the store: it must become master
            for node in others:
                node.start(timeout=max(1.0, deadline.remaining()))
                if node.serving():
                    raise SharedStoreError(f"{self.label} node {node.name} serves while node {first.name} holds the "
                                           f"store's lock: both are masters of {self.store}\n{node.log_tail(30)}")
        except BaseException:
            self.stop()
            raise

    def master(self) -> ProcessNode | None:
        """The node whose listeners accept clients now (only a master opens them)."""
        serving = [node for node in self.nodes.values() if node.running and node.serving()]
        if len(serving) > 1:
            raise SharedStoreError(f"more than one master on {self.store}: {[n.name for n in serving]}")
        return serving[0] if serving else None

    def wait_for_master(self, timeout: float) -> ProcessNode | None:
        return poll(self.master, lambda node: node is not None, timeout=timeout, interval=0.1)

    # ------------------------------------------------------------ the Cluster contract
    def __getitem__(self, name: str) -> ProcessNode:
        return self.nodes[name]

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [node.address(protocol) for node in self.nodes.values()]

    def serving(self) -> list[str]:
        node = self.master()
        return [node.name] if node else []

    def bridge_establishments(self) -> int:
        return 0

    def subscription_discards(self, destination: str) -> list[int] | None:
        return None

    def config_text(self) -> str:
        return "\n".join(f"--- node {node.name} ---\n{node.process.render_config()}" for node in self.nodes.values())

    def log_tail(self, lines: int = 80) -> str:
        return group_log_tail(self.nodes, self.rig, lines)

    def stop(self) -> None:
        errors = []
        if self.rig is not None:
            try:  # heal first: a node blocked on a cut storage link cannot stop cleanly
                self.rig.heal()
            except Exception as exc:  # noqa: BLE001
                errors.append(f"nfs store heal: {exc}")
        for node in self.nodes.values():
            try:
                node.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
                errors.append(f"{node.name}: {exc}")
        if self.database is not None:
            try:
                self.database.stop()
            except Exception as exc:  # noqa: BLE001
                errors.append(f"database: {exc}")
        if self.rig is not None:
            try:
                self.rig.close()
            except Exception as exc:  # noqa: BLE001
                errors.append(f"nfs store: {exc}")
        if errors:
            raise SharedStoreError(f"could not stop every node of {self.store}: {errors}")

    def __repr__(self) -> str:
        return f"<SharedStoreCluster {self.label} {self.store} nodes={list(self.nodes)}>"


def node_names(count: int, names: Any = "ABCDEFGH") -> tuple[str, ...]:
    if not 2 <= count <= len(names):
        raise ValueError(f"a shared-store group has 2 to {len(names)} nodes, not {count}")
    return tuple(names[:count])
