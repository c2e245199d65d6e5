"""A shared-store HA group of Artemis brokers (Artemis 2.40 "High Availability and Failover",
"Shared Store"): node A with ``<ha-policy><shared-store><primary>``, the others ``<backup>``, all
on one set of data directories (journal, bindings, paging, large messages) under the topology's
work directory. What ``artemis create --shared-store [--backup] --failover-on-shutdown`` sets up,
written into the launcher's own broker.xml (artemis/config.py, `ArtemisConfig.ha_policy_xml`).

Artemis's file lock lives in the journal directory (``server.lock``; FileLockNodeManager) and
is a Java ``FileChannel`` lock, so the reference broker's and ActiveMQ's locks meet it on the same
kind of record lock. Its polling and re-check periods are fixed in Artemis (no setting): the
topology's lock timings are not rendered, and the group's configuration says so. With the
topology's ``nfs`` the data directories live on the simulated NFS store, each JVM through its own
FUSE mount (runtime/nfs_store.py), so one node's storage link can be cut.
"""

from __future__ import annotations

from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.artemis.config import ArtemisDatabase
from conformance.targets.artemis.process import ArtemisProcess
from conformance.targets.runtime.database_links import DatabaseLinks
from conformance.targets.runtime.nfs_store import NfsStore
from conformance.targets.artemis.node import ArtemisNode
from machinery.postgres import PostgresServer
from conformance.targets.runtime.shared_group import SharedStoreCluster, node_names
from conformance.topology import Topology, TopologyUnsupported

__all__ = ["launch_shared_store"]

#: journal-file-size on the simulated NFS store: 1M instead of the launcher's 10M. The primary writes
#: out its journal-min-files (2) in full at its first start, and through the FUSE mount and its
#: fault-proxy link that took about 45 of a group's 60-90 s start; no statement checked on the NFS
#: group (FT-SHARED-*: locks, leases, mount options) is about the journal's file size.
NFS_JOURNAL_FILE_SIZE = "1M"


class ArtemisSharedStoreCluster(SharedStoreCluster):
    def config_text(self) -> str:
        store = self.topology.shared_store
        note = (f"(topology lock timings not rendered: Artemis has no setting for them; asked "
                f"lock_keep_alive_period_ms={store.lock_keep_alive_period_ms}, "
                f"lock_acquire_sleep_interval_ms={store.lock_acquire_sleep_interval_ms})\n")
        return note + super().config_text()


def launch_shared_store(topology: Topology, scenario: Scenario, workdir: Path, *, jvm_heap_mb: int = 256,
                        timeout: float = 240) -> SharedStoreCluster:
    """Start the group: node A primary and serving, the others backups waiting for its lock."""
    if topology.shared_store.jdbc_adapter != "direct":
        raise TopologyUnsupported(f"jdbc_adapter={topology.shared_store.jdbc_adapter!r}: Artemis's database store "
                                  "has no journaled variant (ActiveMQ's journaled JDBC adapter only)")
    names = node_names(len(topology.nodes), topology.nodes)
    store = topology.shared_store
    if store.kind == "jdbc":
        return _launch_jdbc(topology, scenario, Path(workdir).absolute() / "artemis-jdbc-store", names,
                            jvm_heap_mb=jvm_heap_mb, timeout=timeout)
    workdir = Path(workdir).absolute() / "artemis-shared-store"
    store = topology.shared_store
    rig = None
    data_of = {name: workdir / "shared-data" for name in names}
    if store.nfs is not None:  # each JVM opens the data directories through its own mount (runtime/nfs_store.py)
        rig = NfsStore(workdir, names, store.nfs, subdir="shared-data")
        data_of = {name: rig.path(name) for name in names}
    shared = data_of[names[0]]
    try:
        nodes = {}
        for index, name in enumerate(names):
            process = ArtemisProcess(workdir / f"node-{name}", scenario, name=f"{topology.prefix}-{name}",
                                     jvm_heap_mb=jvm_heap_mb, ha_policy="primary" if index == 0 else "backup",
                                     shared_data=data_of[name],
                                     journal_file_size=NFS_JOURNAL_FILE_SIZE if rig is not None else "10M")
            nodes[name] = ArtemisNode(name, process, wait_for="lock")
        # FileLockNodeManager's lock file: server.lock in the journal directory (node-manager-lock-directory
        # defaults to it)
        group = ArtemisSharedStoreCluster(topology, nodes, shared, label="artemis" + (" (nfs)" if rig else ""),
                                          lock_file=shared / "journal" / "server.lock", rig=rig)
    except BaseException:
        if rig is not None:
            rig.close()
        raise
    group.start(timeout=timeout)  # stops the nodes and closes the nfs store if the group does not form
    return group


def _launch_jdbc(topology: Topology, scenario: Scenario, workdir: Path, names, *, jvm_heap_mb: int,
                 timeout: float) -> SharedStoreCluster:
    """The JDBC shared store: the pair's store and its lease lock (JdbcNodeManager) in a private
    PostgreSQL server; the topology's keep-alive is the lease's renew period and its acquire
    interval the lease's expiration (Artemis has no separate polling setting). With the topology's
    ``proxied_database`` each node's link to the database runs through its own fault proxy."""
    store = topology.shared_store
    database = PostgresServer(workdir / "database").start()
    links = None
    try:
        # with proxied_database each JVM dials the database through its own proxy (runtime/database_links.py)
        links = DatabaseLinks(database, names) if store.proxied_database else None
        nodes = {}
        for index, name in enumerate(names):
            settings = ArtemisDatabase(links.jdbc_url(name) if links else database.jdbc_url,
                                       database.credentials.user, database.credentials.password,
                                       lock_renew_period_ms=store.lock_keep_alive_period_ms,
                                       lock_expiration_ms=store.lock_acquire_sleep_interval_ms)
            process = ArtemisProcess(workdir / f"node-{name}", scenario, name=f"{topology.prefix}-{name}",
                                     jvm_heap_mb=jvm_heap_mb, ha_policy="primary" if index == 0 else "backup",
                                     database=settings)
            nodes[name] = ArtemisNode(name, process, wait_for="lock")
        group = SharedStoreCluster(topology, nodes, workdir / "database",
                                   label="artemis (database" + (", proxied)" if links else ")"), database=database,
                                   rig=links)
    except BaseException:
        database.stop()
        if links is not None:
            links.close()
        raise
    group.start(timeout=timeout)  # stops the nodes and the database if the pair does not form
    return group
