"""What the brokers' launchers share above the ground floor (processes, containers and the
event-loop thread are in `machinery`): the node and cluster shapes of the topology contract
(node.py, shared_group.py, conformance/topology.py), readiness probes, launch choice, and the
rigs a group's store is put on (nfs_store.py, database_links.py)."""
