"""A shared store reached over TCP the way an NFS mount is (issue 18, section 4).

The machines have no kernel NFS, but they have FUSE. One server process (`server`) holds the
data directory and the lock table; each broker "host" mounts it with its own FUSE client process
(`mount`) whose every operation, data and POSIX locks alike, is a request over TCP to that server,
dialled through the fault proxy, so a partition, latency or reset of that host's proxy is a fault
of its storage link, as a cut NFS link is.

Modules, one job each:
- `mountopts`: the NFS mount options we model (soft/hard, timeo, retrans, lookupcache, sync, vers)
  and the retry schedule they imply (the 12 s detection figure follows from it);
- `leases`: the server's client leases and byte-range lock table (NFSv4 leases, NFSv3 none);
- `wire`: the request/response framing;
- `server`: the store server (``python -m machinery.sharedstore.server``);
- `rpc`: the client side of a request: timeouts, retransmissions, soft/hard, the lease heartbeat;
- `mount`: the FUSE client (``python -m machinery.sharedstore.mount``);
- `control`: requests to the server itself (expire a lease, read the state);
- `holder`: a master's stand-in on a mount (open, lock, write), for tests and the benchmark;
- `harness`: start a server and mounts as processes, stop them by handle; `SharedStoreRig`.

Where the model differs from a kernel NFS mount (known, deliberate):
- Files are named by path on the server, not by file handle, and so are locks. A lock file deleted
  or replaced by another host keeps its lock for the path: a slave's lock on the recreated file
  conflicts with the master's, where NFS would lock the new file. Path-keyed is the safer side:
  libfuse's high-level API cannot report a replaced file's new inode to a process that still has
  the old one open (fstat reaches the file system by path, without the open file), so an
  inode-keyed table would make a split brain that no identity check could end.
- An open file whose lease expired answers EIO for good (the Linux client's default for lost
  locks, no reclaim); path operations carry on in a new session.
- close() returns before FUSE's release reaches the store (the kernel sends it asynchronously), so
  an open-file-description lock ends a moment after the close; process locks end with the close.
"""
