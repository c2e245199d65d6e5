"""A shared-store group's store on the simulated NFS (issue 18, section 4): a fault proxy of its
own, a `machinery.sharedstore.SharedStoreRig` with one FUSE mount per node (each node's storage link
through its own proxy), and the directory each node sees through ITS mount. The group's cluster
keeps it as ``rig`` and closes it after stopping its nodes (`close`). The rig exposes the links;
a lock-loss nemesis built on them by chaos (chaos.nemesis.lock.lock_loss_nemesis) can cut one
node's link while the others keep theirs.
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

    # what chaos needs to fault the nodes' storage links (chaos.nemesis.lock.lock_loss_nemesis)
    @property
    def proxy_api(self) -> str:
        return self.proxy.api_url

    @property
    def links(self) -> dict[str, str]:
        """Node name -> the name of its proxy to the store."""
        return self.rig.links

    @property
    def store_address(self) -> str | None:
        return self.rig.store_address

    def heal(self) -> None:
        """Every node's storage link as it was made, whoever cut it."""
        self.rig.heal()

    def log_tail(self, lines: int = 80) -> str:
        """The end of the store server's log (whose leases expired, and when): the store's side of
        a takeover, kept with the brokers' logs (`SharedStoreCluster.log_tail`)."""
        server = self.rig.server  # its log outlives it (`StoreServerProcess.stop`)
        if server is None:
            return ""
        try:
            return "\n".join(server.log_text().splitlines()[-lines:])
        except OSError as exc:
            return f"(the store server's log could not be read: {exc})"

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
