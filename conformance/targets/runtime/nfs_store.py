"""A shared-store group's store on the simulated NFS (issue 18, section 4): a fault proxy of its
own, a `machinery.sharedstore.SharedStoreRig` with one FUSE mount per node (each node's storage link
through its own proxy), and the directory each node sees through ITS mount. The group's cluster
keeps it as ``rig`` and closes it after stopping its nodes (`close`), so a lock-loss nemesis
(``rig.nemesis``) can cut one node's link while the others keep theirs.
"""

from __future__ import annotations

from pathlib import Path

from conformance.topology import NfsOptions

__all__ = ["NfsStore", "NfsUnavailable"]


class NfsUnavailable(RuntimeError):
    """FUSE cannot be used here (the reason says why)."""


class NfsStore:
    """``hosts``' mounts of one store server under ``workdir/mounts/<host>``; ``path(host)`` is
    the shared directory ``subdir`` as seen through that host's mount."""

    def __init__(self, workdir: Path, hosts: tuple[str, ...], options: NfsOptions, subdir: str = "store") -> None:
        from machinery.faultproxy import start_fault_proxy
        from machinery.sharedstore.harness import SharedStoreRig, fuse_unavailable

        why = fuse_unavailable()
        if why:
            raise NfsUnavailable(f"the simulated NFS store needs FUSE: {why}")
        self.options = options
        self.subdir = subdir
        self.proxy = start_fault_proxy()
        try:
            self.rig = SharedStoreRig(str(Path(workdir) / "mounts"), self.proxy.api_url, hosts,
                                      options=self.options.mount_options, lease=options.lease_s,
                                      vers=options.version)
        except BaseException:
            self.proxy.stop()
            raise
        try:
            (Path(self.rig.path(hosts[0])) / subdir).mkdir(exist_ok=True)
        except BaseException:
            self.close()
            raise

    @property
    def nemesis(self):
        """The rig's `LockLossNemesis` (host names = node names)."""
        return self.rig.nemesis

    def lock_nemesis(self, history=None):
        """A `LockLossNemesis` recording into ``history`` over the nodes' storage links (an
        experiment's own, beside the rig's, which only heals at close)."""
        from chaos.nemesis.lock import LockLossNemesis

        return LockLossNemesis(history, proxy_api=self.proxy.api_url, store=self.rig.server.address,
                               links=self.rig.links, node="store")

    def path(self, host: str) -> Path:
        return Path(self.rig.path(host)) / self.subdir

    def close(self) -> None:
        """Heal, unmount, stop the server and the proxy; a second call does nothing."""
        if self.proxy is None:
            return
        try:
            self.rig.close()
        finally:
            self.proxy.stop()
            self.proxy = None
