"""Start a store server and FUSE mounts as processes; stop them by their handles.

Each process runs in its own process group and is stopped through its PID; a mount is taken
down by ``fusermount3 -u`` on the path it was mounted at, then its client PID is waited for
(libfuse leaves its loop when the kernel unmounts). When that does not work (a client blocked
on a hard mount, files still open) the client is terminated and the mount detached lazily
(``fusermount3 -u -z``), so nothing stays in /proc/mounts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile

from machinery.process import stop_if_interrupted
from machinery.tether import launch
from machinery.waiting import wait_until

from .control import control


def fuse_unavailable() -> str | None:
    """Why FUSE mounts cannot be made here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 not found (Debian package fuse3; scripts/bootstrap.sh installs it)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy / libfuse3 unusable: {exc}"
    return None


def mounted(path: str) -> bool:
    """Is ``path`` a mount point now (/proc/mounts; escaped as the kernel writes it)?"""
    target = os.path.realpath(path).replace(" ", "\\040")
    with open("/proc/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts if len(line.split()) > 1)


def _stop_process(process: subprocess.Popen, grace: float = 5.0) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace)


def _discard(log) -> None:
    log.close()
    try:
        os.unlink(log.name)
    except FileNotFoundError:
        pass


class StoreServerProcess:
    """``python -m machinery.sharedstore.server`` on a data directory (a new temporary one by default)."""

    def __init__(self, root: str | None = None, *, lease: float = 10.0, vers: int = 4) -> None:
        self._tmp = None if root else tempfile.mkdtemp(prefix="bc-store-")
        self.root = root or self._tmp
        self.lease, self.vers = lease, vers
        self.process: subprocess.Popen | None = None
        self.address = ""
        self.log = tempfile.NamedTemporaryFile(prefix="bc-store-", suffix=".log", delete=False)
        self._final_log: str | None = None

    def start(self, timeout: float = 10.0) -> "StoreServerProcess":
        self.process = launch(
            [sys.executable, "-m", "machinery.sharedstore.server", "--root", self.root, "--lease", str(self.lease),
             "--vers", str(self.vers)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        # "listening HOST:PORT", or EOF if it died
        line = stop_if_interrupted(self.process.stdout.readline, self.stop)
        if not line.startswith("listening "):
            self.process.wait(5)
            output = self.log_text()
            self.stop()
            raise RuntimeError(f"store server did not start: {line!r} {output}")
        self.address = line.split()[1]
        return self

    def expire(self, client: str) -> list[int]:
        return control(self.address, {"op": "expire", "client": client})["expired_sessions"]

    def state(self) -> dict:
        return control(self.address, {"op": "state"})

    def log_text(self) -> str:
        """The server's log (lease expiries); after `stop`, what it was when the server stopped."""
        if self._final_log is not None:
            return self._final_log
        with open(self.log.name, errors="replace") as handle:
            return handle.read()

    def stop(self) -> None:
        if self.process is not None:
            _stop_process(self.process)
            if self.process.stdout:
                self.process.stdout.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        if self._final_log is None:
            try:  # kept for the run's evidence (a run keeps its logs after the store is gone)
                self._final_log = self.log_text()
            except OSError:
                self._final_log = ""
        _discard(self.log)

    def __enter__(self) -> "StoreServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class MountProcess:
    """One host's FUSE client, dialling ``server`` (the host's proxy address) as ``client``."""

    def __init__(self, mountpoint: str, server: str, client: str, options: str = "") -> None:
        self.mountpoint = os.path.realpath(mountpoint)
        self.server, self.client, self.options = server, client, options
        self.process: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"bc-mount-{client}-", suffix=".log", delete=False)

    def start(self, timeout: float = 20.0) -> "MountProcess":
        os.makedirs(self.mountpoint, exist_ok=True)
        self.process = launch(
            [sys.executable, "-m", "machinery.sharedstore.mount", "--server", self.server, "--client", self.client,
             "-o", self.options, self.mountpoint],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        stop_if_interrupted(lambda: self._wait_mounted(timeout), self.stop)
        return self

    def _wait_mounted(self, timeout: float) -> None:
        def appeared() -> bool:
            if mounted(self.mountpoint):
                return True
            if self.process.poll() is not None:
                raise self._mount_missing()
            return False

        wait_until(appeared, timeout, 0.05, on_timeout=lambda _: self._mount_missing())

    def _mount_missing(self) -> RuntimeError:
        """Stops the client (what it printed goes into the error) and says the mount did not appear."""
        output = self.log_text()
        self.stop()
        return RuntimeError(f"mount of {self.mountpoint} for {self.client} did not appear: {output}")

    def log_text(self) -> str:
        with open(self.log.name, errors="replace") as handle:
            return handle.read()

    def stop(self, timeout: float = 10.0) -> None:
        """``fusermount3 -u`` on our mount point, then wait for the client; a client that does not
        leave is terminated and the mount detached lazily."""
        if self.process is None:
            return
        if mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True, timeout=timeout)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop_process(self.process)
        if mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True, timeout=timeout)
        self.process = None
        _discard(self.log)

    def __enter__(self) -> "MountProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SharedStoreRig:
    """A store server and one FUSE mount per host, each host's link through its own proxy on a
    Toxiproxy API (``proxy_api``): what an experiment or a test needs to put brokers on a shared
    store. Faults are chaos's to inject (chaos.nemesis.lock.lock_loss_nemesis builds them on
    ``proxy_api``, ``links`` and ``store_address``); the rig only undoes them (`heal`).

    ``rig.path("A")`` is host A's mount point; `close` heals, unmounts and stops everything it
    started (also after a failed start)."""

    def __init__(self, base: str, proxy_api: str, hosts=("A", "B"), *, options: str = "", lease: float = 10.0,
                 vers: int = 4) -> None:
        from machinery.faultproxy.client import ToxiproxyClient

        self.server: StoreServerProcess | None = None
        self.mounts: dict[str, MountProcess] = {}
        self.proxy_api = proxy_api
        self.links: dict[str, str] = {}  # host -> the name of its proxy to the store
        self._proxies = ToxiproxyClient(proxy_api)
        try:
            self.server = StoreServerProcess(lease=lease, vers=vers).start()
            for host in hosts:
                name = f"store-{host}-{os.getpid()}-{id(self) & 0xffff:x}"
                listen = self._proxies.create_proxy(name, self.server.address)["listen"]
                self.links[host] = name
                self.mounts[host] = MountProcess(os.path.join(base, host), listen, host, options)
                self.mounts[host].start()
        except BaseException:
            self.close()
            raise

    @property
    def store_address(self) -> str | None:
        """The store server's own address (HOST:PORT), where a host's lease can be ended."""
        return self.server.address if self.server is not None else None

    def path(self, host: str) -> str:
        return self.mounts[host].mountpoint

    def reboot(self, host: str) -> None:
        """The host's NFS client comes back as after a reboot: it unmounts and a new client mounts
        the same point, introducing itself afresh, which drops the locks of its earlier life (an
        NFSv3 client's reboot notice, an NFSv4 client's new verifier: leases.py open_session)."""
        old = self.mounts[host]
        old.stop()
        self.mounts[host] = MountProcess(old.mountpoint, old.server, old.client, old.options).start()

    def heal(self) -> None:
        """Every host's link as it was made (no toxic, enabled), whoever cut it: a mount or a
        broker blocked on a cut link cannot be stopped cleanly."""
        for name in self.links.values():
            self._proxies.restore(name)

    def close(self) -> None:
        try:
            self.heal()
        finally:
            for mount in self.mounts.values():
                mount.stop()
            if self.server is not None:
                self.server.stop()
            for name in self.links.values():
                try:
                    self._proxies.delete_proxy(name)
                except Exception:  # noqa: BLE001 - the proxy server may be gone already
                    pass

    def __enter__(self) -> "SharedStoreRig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
