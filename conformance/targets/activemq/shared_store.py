"""A shared-store master/slave group of ActiveMQ Classic brokers: N JVMs on one KahaDB directory.

What the A-MQ fault-tolerant messaging guide (section 3.1, "Shared File System Master/Slave")
describes, and this launcher sets up on one machine:
* every broker of the group uses the same KahaDB directory; whichever takes the store's lock
  file first is the master, the others wait as slaves with no transport connector open;
* ``lockKeepAlivePeriod`` (the master re-checks its lock at that interval) and the shared-file
  locker's ``lockAcquireSleepInterval`` (how often a slave retries the lock) come from the
  experiment (the guide's "File locking requirements" and Example 3.1);
* when the master dies its lock is released, a slave takes it and opens its connectors;
  clients find it through a failover URL listing every broker (Example 3.2);
* a restarted former master rejoins as a slave ("Reintroducing a failed node").

Each node keeps its own ports across restarts, so the failover URL stays valid. The store lives
on the local file system, or with ``nfs`` on the simulated NFS store (runtime/nfs_store.py): each
JVM opens the KahaDB directory through its own FUSE mount, its storage link through its own proxy.
A JDBC group (guide 3.2) with ``proxied_database`` has each JVM dial the database through its own
proxy (runtime/database_links.py), so one broker's database link can be cut.
"""

from __future__ import annotations

from pathlib import Path

from conformance.deployment import SharedStorage
from conformance.topology import Cluster, NfsOptions, SharedStore, Topology

from conformance.targets.activemq.process import ActiveMQProcess, JdbcStore
from conformance.targets.activemq.network import NetworkNode
from conformance.targets.runtime.database_links import DatabaseLinks
from conformance.targets.runtime.node import NodeRestarts
from conformance.targets.runtime.nfs_store import NfsStore
from conformance.targets.runtime.shared_group import group_log_tail
from machinery.postgres import PostgresServer
from machinery.waiting import Deadline, poll

#: node names, in start order: A is started first and becomes the first master
NODE_NAMES = "ABCDEFGH"


class SharedStoreNode(NetworkNode):
    """One broker of the group (`Node`). ``start`` returns once the broker either serves or waits
    for the lock: a restarted node normally comes back as a slave."""

    def __init__(self, name: str, process: ActiveMQProcess) -> None:
        super().__init__(name, process, wait_for="lock")

    def port(self, protocol: str) -> int:
        try:
            return self.address(protocol)[1]
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None

    def __repr__(self) -> str:
        return f"<SharedStoreNode {self.name} {self.process!r}>"


class SharedStoreGroup(NodeRestarts, Cluster, SharedStorage):
    """``nodes`` ActiveMQ brokers sharing ``workdir/shared-kahadb``. `start()` brings up node A as
    master and the others as slaves (and checks that they are); `stop()` stops them all."""

    host = "127.0.0.1"

    def __init__(self, workdir: Path, *, nodes: int = 2, lock_keep_alive_period_ms: int = 2000,
                 lock_acquire_sleep_interval_ms: int = 1000, stomp: bool = True, mqtt: bool = False,
                 amqp: bool = False, jvm_heap_mb: int = 384, broker_name: str = "shared-store",
                 jdbc: bool = False, nfs: NfsOptions | None = None, proxied_database: bool = False,
                 jdbc_adapter: str = "direct") -> None:
        if not 2 <= nodes <= len(NODE_NAMES):
            raise ValueError(f"a shared-store group has 2 to {len(NODE_NAMES)} nodes, not {nodes}")
        self.workdir = Path(workdir).absolute()
        self.store = self.workdir / ("database" if jdbc else "shared-kahadb")
        #: KahaDB's lock file (its SharedFileLocker locks <directory>/lock); a JDBC group has none
        self.lock_file: Path | None = None if jdbc else self.store / "lock"
        #: guide 3.2: the group's private PostgreSQL server, started with the group (`start`)
        self.database: PostgresServer | None = PostgresServer(self.store) if jdbc else None
        self.lock_keep_alive_period_ms = lock_keep_alive_period_ms
        self.lock_acquire_sleep_interval_ms = lock_acquire_sleep_interval_ms
        self.topology = Topology(tuple(NODE_NAMES[:nodes]), shared_store=SharedStore(
            kind="jdbc" if jdbc else "file", lock_keep_alive_period_ms=lock_keep_alive_period_ms,
            lock_acquire_sleep_interval_ms=lock_acquire_sleep_interval_ms, nfs=nfs,
            proxied_database=proxied_database, jdbc_adapter=jdbc_adapter))
        #: the store on the simulated NFS (runtime/nfs_store.py), or a JDBC store's database links
        #: through the fault proxy (runtime/database_links.py); made in `start`, closed by `stop`
        self.rig: NfsStore | DatabaseLinks | None = None
        self._node_options = dict(stomp=stomp, mqtt=mqtt, amqp=amqp, jvm_heap_mb=jvm_heap_mb,
                                  broker_name=broker_name)
        self.nodes: dict[str, SharedStoreNode] = {}
        if not jdbc and nfs is None:  # a JDBC or NFS group's nodes need the store's address: made in `start`
            self._make_nodes(kahadb_directory=self.store, lock_keep_alive_period_ms=lock_keep_alive_period_ms,
                             lock_acquire_sleep_interval_ms=lock_acquire_sleep_interval_ms)

    def _make_nodes(self, kahadb_of=None, jdbc_of=None, **store) -> None:
        """``kahadb_of``: node -> its KahaDB directory (each node's own mount of an NFS store);
        ``jdbc_of``: node -> its `JdbcStore` (each node's own link to the database)."""
        o = self._node_options
        per_node = {name: ({"kahadb_directory": kahadb_of[name]} if kahadb_of else
                           {"jdbc": jdbc_of[name]} if jdbc_of else {}) for name in self.topology.nodes}
        # jmx: the nodes' counters are read over JMX (`NetworkNode`), e.g. by a chaos run that waits
        # for the workload's consumers to be gone before its drain; without it every such read
        # failed (a TypeError on the missing JMX URL, said in every ActiveMQ shared-store run's output)
        self.nodes = {name: SharedStoreNode(name, ActiveMQProcess(
            self.workdir / f"node-{name}", name=f"{o['broker_name']}-{name}", stomp=o["stomp"], mqtt=o["mqtt"],
            amqp=o["amqp"], openwire=True, persistent=True, jvm_heap_mb=o["jvm_heap_mb"], jmx=True, **store,
            **per_node[name]))
            for name in self.topology.nodes}

    def start(self, timeout: float = 90) -> None:
        deadline = Deadline(timeout)
        try:
            if self.database is not None and not self.database.running:
                self.database.start()
                store = self.topology.shared_store
                if store.proxied_database and self.rig is None:  # each JVM through its own proxy
                    self.rig = DatabaseLinks(self.database, self.topology.nodes)
                credentials = self.database.credentials
                self._make_nodes(jdbc_of={name: JdbcStore(
                    self.rig.jdbc_url(name) if store.proxied_database else self.database.jdbc_url,
                    credentials.user, credentials.password,
                    lock_keep_alive_period_ms=store.lock_keep_alive_period_ms,
                    lock_acquire_sleep_interval_ms=store.lock_acquire_sleep_interval_ms,
                    journal_directory=(str(self.workdir / f"node-{name}" / "journal")
                                       if store.jdbc_adapter == "journaled" else None))
                    for name in self.topology.nodes})
            store = self.topology.shared_store
            if store.nfs is not None and self.rig is None:
                self.rig = NfsStore(self.workdir, self.topology.nodes, store.nfs, subdir="shared-kahadb")
                kahadb_of = {name: self.rig.path(name) for name in self.topology.nodes}
                self.store = kahadb_of[self.topology.nodes[0]]
                self.lock_file = self.store / "lock"
                self._make_nodes(kahadb_of, lock_keep_alive_period_ms=store.lock_keep_alive_period_ms,
                                 lock_acquire_sleep_interval_ms=store.lock_acquire_sleep_interval_ms)
            first, *others = self.nodes.values()
            first.process.start(timeout=timeout)  # alone on the store: it must become master
            for node in others:
                node.start(timeout=max(1.0, deadline.remaining()))
                if node.serving():
                    raise RuntimeError(f"node {node.name} serves while node {first.name} holds the store's lock: "
                                       f"both are masters of {self.store}\n{node.log_tail(30)}")
        except BaseException:
            self.stop()
            raise

    def master(self) -> SharedStoreNode | None:
        """The node whose connectors accept connections now (only a master opens them)."""
        serving = [node for node in self.nodes.values() if node.running and node.serving()]
        if len(serving) > 1:
            raise RuntimeError(f"more than one master on {self.store}: {[n.name for n in serving]}")
        return serving[0] if serving else None

    def wait_for_master(self, timeout: float) -> SharedStoreNode | None:
        return poll(self.master, lambda node: node is not None, timeout=timeout, interval=0.1)

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        """Every node's address for ``protocol``, in node order (the failover URL's order)."""
        return [(self.host, node.port(protocol)) for node in self.nodes.values()]

    # ------------------------------------------------------------ the Cluster contract

    def __getitem__(self, name: str) -> SharedStoreNode:
        return self.nodes[name]

    def serving(self) -> list[str]:
        node = self.master()
        return [node.name] if node else []

    def bridge_establishments(self) -> int:
        return 0

    def subscription_discards(self, destination: str) -> list[int] | None:
        return None

    def config_text(self) -> str:
        return "\n".join(f"--- node {node.name} ---\n{node.config_text()}" for node in self.nodes.values())

    def log_tail(self, lines: int = 80) -> str:
        rig = getattr(self, "rig", None) or getattr(self, "_stopped_rig", None)
        return group_log_tail(self.nodes, rig, lines)

    # getattr: the container pair (container_network.SharedVolumePair) shares this stop() but has
    # neither an NFS rig nor a database of its own
    def stop(self) -> None:
        errors = []
        if self.rig is not None:
            try:  # heal first: a broker blocked on a cut storage link cannot stop cleanly
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
            self._stopped_rig, self.rig = self.rig, None  # its server's log stays readable (`log_tail`)
        if errors:
            raise RuntimeError(f"could not stop every node of {self.store}: {errors}")

    def __repr__(self) -> str:
        return f"<SharedStoreGroup {self.store} nodes={list(self.nodes)}>"
