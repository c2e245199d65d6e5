"""What every broker's launcher shares: processes in their own session (process.py), containers
(container.py), a broker on a background event-loop thread (loop_thread.py), and the node and
cluster shapes of the topology contract (node.py, conformance/topology.py)."""
