"""Multi-broker ActiveMQ Classic topologies in containers on one scenario network (issue 8).

* `ActiveMQContainerNetwork`: the network of brokers of `activemq.network.ActiveMQNetwork`
  (same `Bridge` / `NetworkConnectorOptions`, same rendered ``<networkConnector>``), but each
  broker is an `ActiveMQContainer` and each connector points at its peer's *internal* OpenWire
  address (``tcp://<broker name>:61616`` on the scenario network), so the bridge is a real TCP
  link between two network namespaces that `chaos.nemesis.container` can cut.
* `SharedVolumePair`: the shared-file master/slave group of `activemq.shared_store` (A-MQ
  fault-tolerant messaging guide, 3.1), with the KahaDB directory on one named Docker volume
  mounted into every broker container. Node A starts first and becomes master. Its nodes
  (`ContainerSharedStoreNode`) have the process nemesis's shape, so chaos experiment 2 runs on
  it (``ActiveMQTarget.launch_shared_store`` in container mode).

Both create their Docker network (and volume) at `start()` and remove them, with every container,
at `stop()` — also when `start()` fails. Everything carries the ``org.brokerconf.launcher`` label.
"""

from __future__ import annotations

import os
import re
import signal
import select
import threading
import uuid
from pathlib import Path
from typing import Any

from conformance.topology import SharedStore, Topology

from conformance.targets.activemq.container import _SHARED_KAHADB, CONTAINER_PORTS, LABEL, ActiveMQContainer
from conformance.targets.activemq.network import _ESTABLISHED, ActiveMQNetwork, Bridge, NetworkNode, NetworkStartError, \
    render_network_connector
from conformance.targets.activemq.shared_store import NODE_NAMES, SharedStoreGroup, SharedStoreNode
from machinery.docker_env import ACTIVEMQ_IMAGE, docker_client
from machinery.container import new_network
from machinery.waiting import Deadline, wait_until

__all__ = ["ActiveMQContainerNetwork", "ContainerNetworkNode", "ContainerSharedStoreNode", "SharedVolumePair",
           "scenario_network"]


def scenario_network(kind: str, name: str) -> Any:
    """A created testcontainers ``Network`` with the project's labels (the caller removes it)."""
    return new_network(f"brokerconf-{name}-{uuid.uuid4().hex[:8]}", {LABEL: kind, "org.brokerconf.broker": name})


def _remove_network(net: Any) -> None:
    try:
        net.remove()
    except Exception as exc:  # noqa: BLE001
        if "not found" not in str(exc).lower():
            raise


class ContainerNetworkNode(NetworkNode):
    """A `NetworkNode` whose broker runs in a container: bridge log lines come from ``docker logs``."""

    def established_bridges(self) -> list[str]:
        text = self.process.log_tail(20000)
        return [m.group("remote") for m in _ESTABLISHED.finditer(text) if m.group("local") == self.process.name]

    def address(self) -> str | None:
        """The broker's address on the scenario network."""
        return self.process.ip_address


class ActiveMQContainerNetwork(ActiveMQNetwork):
    """Brokers ``names`` in containers, joined by ``bridges`` over the scenario network.

    ``nodes[name].process`` is the `ActiveMQContainer` (``container_id``, ``ip_address``), what
    `chaos.nemesis.container.ContainerPartitionNemesis` takes."""

    def __init__(self, workdir: Path, names: tuple[str, ...] = ("A", "B"), bridges: tuple[Bridge, ...] = (), *,
                 prefix: str = "nob", jvm_heap_mb: int = 256, memory_limit_mb: int = 96,
                 image: str = ACTIVEMQ_IMAGE, persistent: bool = False) -> None:
        super().__init__(workdir, names, bridges, prefix=prefix, jvm_heap_mb=jvm_heap_mb,
                         memory_limit_mb=memory_limit_mb)  # validates names and bridges
        self.prefix = prefix
        self.network: Any = None
        # replace the local processes the base class made by containers with the same options;
        # peers' internal addresses depend on names only, so every connector renders up front
        self.nodes = {
            name: ContainerNetworkNode(name, ActiveMQContainer(
                self.workdir / name, name=f"{prefix}-{name}", image=image, stomp=True, openwire=True, jmx=True,
                persistent=persistent, jvm_heap_mb=jvm_heap_mb, memory_limit_mb=memory_limit_mb,
                network_connectors_xml=self.connectors_xml(name)))
            for name in names
        }

    def connectors_xml(self, name: str) -> str:
        # the peer's address inside the scenario network: its broker name is its network alias
        # (ActiveMQContainer.internal_openwire_url), so nothing waits for a port to be published
        return "\n".join(render_network_connector([f"tcp://{self.prefix}-{b.target}:{CONTAINER_PORTS['openwire']}"],
                                                  b.options)
                         for b in self.bridges if b.source == name)

    def start(self, timeout: float = 120) -> None:
        """Create the network, start every container at once, wait until every bridge is up."""
        deadline = Deadline(timeout)
        try:
            self.network = scenario_network("activemq_container_network", self.prefix)
            errors: dict[str, BaseException] = {}
            for node in self.nodes.values():
                # join the shared network (a launcher never removes a network it was handed); the
                # network exists only from start() on, so it is handed over here, not in __init__
                node.process.join(self.network)

            def start_one(name: str) -> None:
                try:
                    self.nodes[name].process.start(timeout=max(1.0, deadline.remaining()))
                except BaseException as exc:  # noqa: BLE001 - reported below with every broker's error
                    errors[name] = exc

            threads = [threading.Thread(target=start_one, args=(n,), name=f"start-{n}") for n in self.start_order()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise NetworkStartError("broker container(s) did not start: "
                                        + "; ".join(f"{n}: {e}" for n, e in errors.items()))
            self.wait_for_bridges(max(1.0, deadline.remaining()))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            net, self.network = self.network, None
            if net is not None:
                _remove_network(net)

    def __enter__(self) -> "ActiveMQContainerNetwork":
        self.start()
        return self


class _VolumeKahaDBContainer(ActiveMQContainer):
    """An `ActiveMQContainer` whose shared KahaDB directory is a named Docker volume, not a bind mount."""

    def __init__(self, workdir: Path, *, volume: str, **options: Any) -> None:
        # kahadb_directory makes the renderer point KahaDB at the shared mount point; the host
        # directory itself is replaced by the volume below and stays empty
        super().__init__(workdir, kahadb_directory=Path(workdir) / "unused-kahadb-mountpoint", **options)
        self.volume = volume

    def _build_container(self) -> Any:
        tc = super()._build_container()
        tc.volumes.pop(str(self.kahadb_directory), None)
        tc.with_volume_mapping(self.volume, str(_SHARED_KAHADB), "rw")
        return tc


def _not_running_error(exc: BaseException) -> bool:
    """The engine's answer when a container already exited (HTTP 409 "... is not running")."""
    return "is not running" in str(exc) or getattr(getattr(exc, "response", None), "status_code", None) == 409


def _in_container(pid: int, container_id: str) -> bool:
    """Whether host process ``pid`` runs in the container: its cgroup path names the container id
    (``/docker/<id>`` with the cgroupfs driver, ``docker-<id>.scope`` with systemd's)."""
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
        return container_id in f.read()


class ContainerSharedStoreNode(SharedStoreNode):
    """A shared-store node whose broker is an `ActiveMQContainer`, shaped for
    `chaos.nemesis.process.ProcessNemesis` like the local-process node.

    ``pid`` is the host PID of the container's main process: the image's entrypoint ``exec``s the
    JVM (docker/activemq-classic/entrypoint.sh), so it is the broker itself, and runc makes it the
    leader of its own process group, so the nemesis's SIGSTOP/SIGCONT reach every JVM thread.
    Signalling it needs the rights of the engine's user (root on the project's CI machine); a
    SIGKILL of a container's init ends the container, which is the crash the experiment wants.

    ``running`` and ``pid`` answer from a pidfd held on that process while it lives, not from
    the engine: a fault's recorded window starts when its step starts, and one engine round trip
    before the signal (about 100 ms measured on this 2-core machine under load) let client
    operations completed before the crash count as "recovered", shrinking the measured failover
    downtime to tens of ms. A pidfd cannot outlive its process into a reused PID."""

    def __init__(self, name: str, process: ActiveMQContainer) -> None:
        super().__init__(name, process)
        self._host_pid: int | None = None
        self._pidfd: int | None = None

    def _live_cached_pid(self) -> int | None:
        if self._pidfd is None:
            return None
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        if not poller.poll(0):  # a pidfd turns readable when its process exits
            return self._host_pid
        self._forget_pid()
        return None

    def _forget_pid(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
        self._pidfd = self._host_pid = None

    def _read_pid(self) -> int | None:
        """Ask the engine for the container's main process; hold a pidfd on it when it runs."""
        cid = self.process.container_id
        if cid is None:
            return None
        client = docker_client()
        try:
            state = client.containers.get(cid).attrs.get("State") or {}
        except Exception:  # noqa: BLE001 - removed meanwhile: no process
            return None
        finally:
            client.close()
        if not (state.get("Running") and state.get("Pid")):
            return None
        pid = int(state["Pid"])
        try:
            pidfd = os.pidfd_open(pid)
            same = _in_container(pid, cid)  # still this container's process, not a PID reused since
        except OSError:
            return pid  # no pidfd (old kernel) or already gone: answer, but keep nothing
        if same:
            self._pidfd, self._host_pid = pidfd, pid
        else:
            os.close(pidfd)
        return pid if same else None

    @property
    def pid(self) -> int | None:
        return self._live_cached_pid() or self._read_pid()

    @property
    def running(self) -> bool:
        return self.pid is not None

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self._forget_pid()

    def kill(self) -> None:
        # SIGKILL the JVM first (the container's init: the crash the experiment wants, with no
        # engine round trip before it); the engine then answers 409 "not running" to its own
        # kill, and what is left is waiting for the container to exit.
        pid = self.pid
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._forget_pid()
        try:
            self.process.kill()
        except Exception as exc:  # noqa: BLE001 - docker.errors.APIError without importing the SDK here
            if not _not_running_error(exc):
                raise
        # the engine's view: start() refuses a container it sees running
        wait_until(lambda: not self.process.running, 30, 0.05,
                   on_timeout=lambda _: RuntimeError(f"container of node {self.name} still runs 30 s after SIGKILL"))


class SharedVolumePair(SharedStoreGroup):
    """``nodes`` ActiveMQ containers on one KahaDB volume; `start()` makes A master, the rest slaves."""

    def __init__(self, workdir: Path, *, nodes: int = 2, lock_keep_alive_period_ms: int = 2000,
                 lock_acquire_sleep_interval_ms: int = 1000, jvm_heap_mb: int = 256,
                 broker_name: str = "shared-volume", image: str = ACTIVEMQ_IMAGE, stomp: bool = True,
                 mqtt: bool = False) -> None:
        if not 2 <= nodes <= len(NODE_NAMES):
            raise ValueError(f"a shared-store group has 2 to {len(NODE_NAMES)} nodes, not {nodes}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", broker_name):
            raise ValueError(f"broker name must match [A-Za-z0-9_.-]+: {broker_name!r}")
        self.workdir = Path(workdir).absolute()
        self.volume_name = f"brokerconf-{broker_name}-kahadb-{uuid.uuid4().hex[:8]}"
        self.store = self.volume_name  # what error messages name: the volume, not a host path
        self.lock_file = None  # inside the volume: not a host path the harness can remove
        # the Docker volume is the store: no database server and no simulated NFS mount to start or stop
        self.database = None
        self.rig = None
        self.lock_keep_alive_period_ms = lock_keep_alive_period_ms
        self.lock_acquire_sleep_interval_ms = lock_acquire_sleep_interval_ms
        self.broker_name = broker_name
        self.network: Any = None
        self._volume: Any = None
        self._client: Any = None
        self.topology = Topology(tuple(NODE_NAMES[:nodes]), shared_store=SharedStore(
            lock_keep_alive_period_ms=lock_keep_alive_period_ms,
            lock_acquire_sleep_interval_ms=lock_acquire_sleep_interval_ms))
        self.nodes = {name: ContainerSharedStoreNode(name, _VolumeKahaDBContainer(
                self.workdir / f"node-{name}", volume=self.volume_name, name=f"{broker_name}-{name}", image=image,
                stomp=stomp, mqtt=mqtt, openwire=True, persistent=True, jvm_heap_mb=jvm_heap_mb,
                lock_keep_alive_period_ms=lock_keep_alive_period_ms,
                lock_acquire_sleep_interval_ms=lock_acquire_sleep_interval_ms))
            for name in NODE_NAMES[:nodes]}

    def start(self, timeout: float = 120) -> None:
        try:
            self._client = docker_client()
            self._volume = self._client.volumes.create(
                self.volume_name, labels={LABEL: "shared_volume_pair", "org.brokerconf.broker": self.broker_name})
            self.network = scenario_network("shared_volume_pair", self.broker_name)
            for node in self.nodes.values():
                node.process.join(self.network)
        except BaseException:
            self.stop()
            raise
        super().start(timeout)  # stops everything (self.stop) when it fails

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            net, self.network = self.network, None
            volume, self._volume = self._volume, None
            try:
                if net is not None:
                    _remove_network(net)
            finally:
                if volume is not None:
                    try:
                        volume.remove(force=True)
                    except Exception as exc:  # noqa: BLE001
                        if "no such volume" not in str(exc).lower() and "not found" not in str(exc).lower():
                            raise
                if self._client is not None:
                    self._client.close()
                    self._client = None

    def __enter__(self) -> "SharedVolumePair":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SharedVolumePair volume={self.volume_name} nodes={list(self.nodes)}>"
