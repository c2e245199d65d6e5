"""What every container launcher shares (ActiveMQ Classic, Artemis): the testcontainers reaper
switch, the finalizer that removes what a dropped launcher left behind, and the lifecycle of one
broker container (stop and remove with its log saved, kill, pause, resume, log tail).

A class using `ContainerLifecycle` keeps ``_tc`` (the testcontainers DockerContainer of the current
run), ``_given_network`` / ``_own_network``, ``_client``, ``_finalizer``, ``container_id``,
``image`` and ``log_path``.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class NetworkedContainer(Protocol):
    """A broker container on a scenario network, as the container-partition nemesis drives it
    (chaos/nemesis/container.py): which container, on which network, and how to re-read its host
    ports after a reconnect. `ActiveMQContainer` and `ArtemisContainer` implement it."""

    container_id: str | None  # the docker container of the current run, None when not running

    @property
    def network_name(self) -> str | None:
        """The Docker network the container's broker is reached on by its peers."""
        ...

    def refresh_ports(self) -> None:
        """Re-read the host ports Docker published: a reconnect to the network re-publishes them,
        and a port published as "any free host port" comes back with a new number."""
        ...

def docker_container(image: str, **kwargs: Any) -> Any:
    """A testcontainers generic container. Launchers import it as ``_docker_container``, a seam
    their tests replace with a fake."""
    from testcontainers.core.container import DockerContainer  # noqa: PLC0415 - optional dependency

    return DockerContainer(image, **kwargs)


def new_network(name: str, labels: dict[str, str]) -> Any:
    """Create a labelled Docker network (testcontainers); launchers import it as ``_new_network``."""
    from testcontainers.core.network import Network  # noqa: PLC0415 - optional dependency

    net = Network(docker_network_kw={"labels": labels})
    net.name = name
    net.create()
    return net


def init_container_state(launcher: Any, network: Any) -> None:
    """The state a container launcher keeps (see the module docstring), before its first start:
    the network it was given (None: it creates its own at start), no container, client or finalizer."""
    launcher.container_id = None  # the docker container of the current run
    launcher._given_network = network
    launcher._own_network = None
    launcher._tc = None  # testcontainers DockerContainer of the current run
    launcher._client = None
    launcher._finalizer = None


def remove_container(container: Any) -> None:
    """Force-remove a container with its anonymous volumes; one already gone is fine."""
    try:
        container.remove(force=True, v=True)
    except Exception as exc:  # noqa: BLE001
        if "no such container" not in str(exc).lower() and "not found" not in str(exc).lower():
            raise


def release_network_and_client(launcher: Any) -> None:
    """The end of a launcher's stop(): remove the network it created (one already gone is fine),
    detach its finalizer and close its Docker client. A failed network removal propagates."""
    net, launcher._own_network = launcher._own_network, None
    if net is not None:
        try:
            net.remove()
        except Exception as exc:  # noqa: BLE001 - report, but do not hide the container cleanup
            if "not found" not in str(exc).lower():
                raise
    if launcher._finalizer is not None:
        launcher._finalizer.detach()
        launcher._finalizer = None
    if launcher._client is not None:
        launcher._client.close()
        launcher._client = None


def _configure_reaper(client: Any) -> None:
    """Switch testcontainers' Ryuk reaper off when its image is not present and the user did not
    choose: pulling it would fail offline and abort every start."""
    from testcontainers.core.config import testcontainers_config as tc  # noqa: PLC0415 - optional dependency

    if "TESTCONTAINERS_RYUK_DISABLED" in os.environ or tc.ryuk_disabled:
        return
    try:
        client.images.get(tc.ryuk_image)
    except Exception:  # noqa: BLE001 - missing or not inspectable: either way it cannot be relied on
        tc.ryuk_disabled = True


def _remove_quietly(container: Any, network: Any) -> None:
    """Finalizer: remove what a dropped launcher left behind (never raises)."""
    for thing in (container, network):
        if thing is None:
            continue
        try:
            # v=True: an image that declares a VOLUME leaves an anonymous volume otherwise
            thing.remove(force=True, v=True) if thing is container else thing.remove()
        except Exception:  # noqa: BLE001 - already gone, or the engine went away
            pass


class ContainerLifecycle:
    @property
    def network_name(self) -> str | None:
        net = self._given_network or self._own_network
        return net.name if net is not None else None

    @property
    def running(self) -> bool:
        container = self._reloaded()
        return container is not None and container.status == "running"

    def _arm_finalizer(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _remove_quietly, self._wrapped(), self._own_network)

    def stop(self, timeout: float = 20) -> None:
        """Stop and remove the container (its log is appended to ``log_path`` first) and the network
        this launcher created. Idempotent; a later start() creates both again."""
        try:
            self._discard_container(timeout)
        finally:
            release_network_and_client(self)

    def kill(self) -> None:
        """SIGKILL the broker (a crash, for chaos tests); the container stays until start() or stop(),
        which bring it back on the same host ports or remove it."""
        container = self._wrapped()
        if container is not None and self.running:
            container.kill(signal="SIGKILL")
            container.wait(timeout=30)

    def pause(self) -> None:
        """Freeze every process of the container (cgroup freezer), like SIGSTOP for the local process."""
        container = self._wrapped()
        if container is not None:
            container.pause()

    def resume(self) -> None:
        container = self._wrapped()
        if container is not None:
            container.unpause()

    def _wrapped(self) -> Any:
        return self._tc._container if self._tc is not None else None

    def _reloaded(self) -> Any:
        """The current run's container with its state re-read from the engine; None when there is
        none or it was removed behind our back."""
        container = self._wrapped()
        if container is None:
            return None
        try:
            container.reload()
        except Exception:  # noqa: BLE001 - removed behind our back
            return None
        return container

    def _discard_container(self, timeout: float = 20) -> None:
        tc, self._tc = self._tc, None
        container = tc._container if tc is not None else None
        if container is None:
            if tc is not None:
                tc.get_docker_client().client.close()
            return
        try:
            try:
                container.reload()
                if container.status == "running":
                    container.stop(timeout=int(timeout))  # SIGTERM (broker shutdown hook), then SIGKILL
            except Exception:  # noqa: BLE001 - already gone: still try to save logs and remove
                pass
            self._save_logs(container)
        finally:
            try:
                remove_container(container)
            finally:
                self.container_id = None
                tc.get_docker_client().client.close()

    def _save_logs(self, container: Any) -> None:
        try:
            text = container.logs(stdout=True, stderr=True)
        except Exception:  # noqa: BLE001 - container vanished: nothing to keep
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as f:
            f.write(f"--- container {container.short_id} ({self.image}) ---\n".encode())
            f.write(text)

    def log_tail(self, lines: int = 50) -> str:
        """The last lines of the broker's log: live from Docker, or the saved log once removed."""
        container = self._wrapped()
        if container is not None:
            try:
                return container.logs(tail=lines).decode("utf-8", "replace").rstrip()
            except Exception:  # noqa: BLE001 - fall back to what was saved
                pass
        try:
            text = self.log_path.read_bytes()[-max(65536, lines * 400):].decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def __exit__(self, *exc: Any) -> None:
        self.stop()
