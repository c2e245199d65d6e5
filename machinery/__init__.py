"""The ground floor (issue 27): machinery that knows nothing of brokers' semantics, targets or
experiments, used by the conformance targets and by chaos alike.

- managed processes in their own session and their stop (process.py, managed.py), every launched
  process ended with the Python process that launched it (tether.py), a coroutine
  server on a background event-loop thread (loop_thread.py);
- containers and the Docker engine's environment (container.py, docker_env.py);
- pinned tool downloads (tools_cache.py, pins.toml) and a private PostgreSQL server (postgres.py);
- the fault plane: the Toxiproxy-API fault proxy and its client (faultproxy/), and the simulated
  NFS store with its FUSE mounts (sharedstore/).

Nothing here imports a package above it (tests/test_import_graph.py, LAYERS).
"""
