"""A shared-store master/slave group of reference brokers: N ``python -m reference_broker``
processes on one journal directory, each with the topology's lock settings
(``[store] lock_keep_alive_period``, ``[store.locker] lock_acquire_sleep_interval``;
reference_broker/ha). Processes, not in-process brokers, so the harness can kill -9 the master.
Ports are fixed before the first start (a slave prints none until it serves) and kept. A jdbc
store with ``proxied_database`` has each node dial the database through its own proxy
(runtime/database_links.py), so one node's database link can be cut."""

from __future__ import annotations

import json
from pathlib import Path

from typing import Callable

from conformance.targets.reference.process import ReferenceBrokerProcess
from conformance.targets.runtime.database_links import DatabaseLinks
from conformance.targets.runtime.node import ProcessNode
from conformance.targets.runtime.nfs_store import NfsStore
from machinery.postgres import PostgresServer
from machinery.process import free_ports
from conformance.targets.runtime.shared_group import SharedStoreCluster, node_names
from conformance.topology import Topology, TopologyUnsupported
from reference_broker.ha.locker import LOCK_FILE_NAME

__all__ = ["launch_shared_store"]


def launch_shared_store(topology: Topology, node_config: Callable[[str], dict], protocols: tuple[str, ...],
                        workdir: Path, *, timeout: float = 60,
                        stomp_ports: dict[str, int] | None = None) -> SharedStoreCluster:
    """Start the group: the first node master, the others slaves (`SharedStoreCluster.start`).
    ``node_config(broker_name)``: a node's configuration before its store settings (the scenario's,
    from the target); ``protocols``: the listeners each node opens; ``stomp_ports``: node name ->
    the STOMP port the caller chose for it (brokers of another group name it in their network
    connectors before this group starts); a node not in it gets a free port."""
    if topology.shared_store.jdbc_adapter != "direct":
        raise TopologyUnsupported(f"jdbc_adapter={topology.shared_store.jdbc_adapter!r}: the reference broker's "
                                  "database store has no journal in front of it (ActiveMQ's journaled JDBC adapter "
                                  "only)")
    store = topology.shared_store
    names = node_names(len(topology.nodes), topology.nodes)
    workdir = Path(workdir).absolute() / ("reference-jdbc-store" if store.kind == "jdbc" else "reference-shared-store")
    shared = workdir / "shared-journal"
    database = rig = None
    journal_of = {name: shared for name in names}
    if store.nfs is not None:  # each node opens the journal through its own mount (runtime/nfs_store.py)
        rig = NfsStore(workdir, names, store.nfs, subdir="shared-journal")
        journal_of = {name: rig.path(name) for name in names}
        shared = journal_of[names[0]]
    dsn_of: dict[str, str] = {}
    if store.kind == "jdbc":  # guide 3.2: one database, a lease in it (reference_broker/ha/lease.py)
        database = PostgresServer(workdir / "database").start()
        store_config = {"kind": "database", "dsn": database.dsn,
                        "lock_keep_alive_period": store.lock_keep_alive_period_ms,
                        "locker": {"kind": "lease_database",
                                   "lock_acquire_sleep_interval": store.lock_acquire_sleep_interval_ms}}
        if store.proxied_database:  # each node dials the database through its own proxy
            try:
                rig = DatabaseLinks(database, names)
            except BaseException:
                database.stop()
                raise
            dsn_of = {name: rig.dsn(name) for name in names}
    else:
        store_config = {"kind": "journal", "directory": str(shared),
                        "lock_keep_alive_period": store.lock_keep_alive_period_ms,
                        "locker": {"kind": "shared_file",
                                   "lock_acquire_sleep_interval": store.lock_acquire_sleep_interval_ms}}
    try:
        return _start_group(topology, names, node_config, store_config, protocols, workdir, shared, database, timeout,
                            journal_of, rig, dsn_of, stomp_ports or {})
    except BaseException:
        if database is not None:
            database.stop()  # (a group that started stops it with its nodes)
        if rig is not None:
            rig.close()
        raise


def _start_group(topology, names, node_config, store_config, protocols, workdir, shared, database,
                 timeout, journal_of, rig, dsn_of, stomp_ports) -> SharedStoreCluster:
    nodes: dict[str, ProcessNode] = {}
    for name in names:
        config = node_config(f"{topology.prefix}-{name}")
        config["store"] = {**config.get("store", {}), **store_config}
        if store_config["kind"] == "journal":
            config["store"]["directory"] = str(journal_of[name])
        elif name in dsn_of:
            config["store"]["dsn"] = dsn_of[name]
        node_dir = workdir / f"node-{name}"
        node_dir.mkdir(parents=True, exist_ok=True)
        config_file = node_dir / "broker.json"
        config_file.write_text(json.dumps(config, indent=2))
        process = ReferenceBrokerProcess(name=config["name"], config_file=config_file, data_dir=None,
                                         mqtt="mqtt" in protocols, amqp="amqp" in protocols)
        stomp, mqtt, amqp = free_ports(3)
        process.stomp_port = stomp_ports.get(name, stomp)
        process.mqtt_port = mqtt if process.mqtt else None
        process.amqp_port = amqp if process.amqp else None
        nodes[name] = ProcessNode(name, process, wait_for="lock")
    if database is not None:
        group = SharedStoreCluster(topology, nodes, workdir / "database",
                                   label="reference (database" + (", proxied)" if rig else ")"), database=database,
                                   rig=rig)
    else:
        group = SharedStoreCluster(topology, nodes, shared, label="reference" + (" (nfs)" if rig else ""),
                                   lock_file=shared / LOCK_FILE_NAME, rig=rig)
    group.start(timeout=timeout)  # stops every node (the database, the nfs store) if the group does not form
    return group
