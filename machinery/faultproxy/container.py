"""Run Toxiproxy in a container as a fault proxy for the chaos harness (issue 8): the image
docker/toxiproxy/ builds offline from the pinned toxiproxy-server, or the official
``ghcr.io/shopify/toxiproxy`` (same entrypoint, command and API port) named by
$BROKERCONF_TOXIPROXY_IMAGE. Its API is the one the project's embedded proxy (`machinery.faultproxy`) serves, so
any Toxiproxy client (toxiproxy-python, `machinery.faultproxy.api`) drives either unchanged.

Two ways to place it:

* On a scenario network (default): the container joins a Docker network (one handed in, e.g. the
  brokers' scenario network, else one of its own) under the alias ``toxiproxy``; the API port
  (8474, REFERENCES.md "Toxiproxy") and the proxy ports named in ``proxy_ports`` are published on
  127.0.0.1. Proxies then listen on ``0.0.0.0:<port>`` inside and point at brokers by their
  network aliases (``artemis-a:61616``); `published(port)` gives the host address of a listen port.
* ``host_network=True``: the container shares the host's network namespace and serves the API on
  ``127.0.0.1:<free port>``, so proxies listen on host loopback ports and reach upstreams on host
  loopback exactly like ``toxiproxy-server`` on PATH (what the chaos tests' ``fault_proxy`` fixture
  needs: its upstreams are loopback echo servers).

Readiness: ``GET /version`` answers through the API address. `start_toxiproxy()` starts the
container where its image is present and otherwise falls back to the embedded proxy, saying why.
The image is never pulled.
"""

from __future__ import annotations

import os
import uuid
import weakref
from pathlib import Path
from typing import Any

from machinery.faultproxy.client import ToxiproxyClient, ToxiproxyError
from machinery.faultproxy.install import pin as toxiproxy_pin
from machinery.faultproxy.server import FaultProxyServer
from machinery.container import _configure_reaper, _remove_quietly, release_network_and_client, \
    remove_container, init_container_state
from machinery.container import docker_container as _docker_container  # tests replace it
from machinery.container import new_network as _new_network  # tests replace it
from machinery.docker_env import DockerUnavailable, docker_client, image_available
from machinery.process import free_ports
from machinery.waiting import Deadline, poll

__all__ = ["TOXIPROXY_IMAGE", "API_PORT", "ToxiproxyContainer", "ToxiproxyStartError", "start_toxiproxy"]

#: the image docker/toxiproxy/build.sh builds offline from the pinned toxiproxy-server, with the
#: official image's interface; $BROKERCONF_TOXIPROXY_IMAGE picks the official one
#: (ghcr.io/shopify/toxiproxy, REFERENCES.md "Toxiproxy") where a registry serves it
TOXIPROXY_IMAGE = os.environ.get("BROKERCONF_TOXIPROXY_IMAGE") or f"brokerconf/toxiproxy:{toxiproxy_pin().version}"
#: the API port Toxiproxy serves by default
API_PORT = 8474
LABEL = "org.brokerconf.launcher"


class ToxiproxyStartError(RuntimeError):
    """The Toxiproxy container did not answer ``GET /version``; the message carries its log."""


def _get_version(api_url: str, timeout: float) -> tuple[bool, str]:
    try:
        return True, ToxiproxyClient(api_url, timeout).version()
    except ToxiproxyError as exc:
        return False, str(exc)


class ToxiproxyContainer:
    """One Toxiproxy server in a container; `start()` returns the API URL, `stop()` removes it all.

    Same handle shape as `machinery.faultproxy.RealToxiproxyServer` (``api_url``, ``start``, ``stop``)."""

    host = "127.0.0.1"
    kind = "container"

    def __init__(self, *, image: str = TOXIPROXY_IMAGE, network: Any = None, host_network: bool = False,
                 proxy_ports: tuple[int, ...] = (), alias: str = "toxiproxy", workdir: Path | None = None) -> None:
        if host_network and (network is not None or proxy_ports):
            raise ValueError("host_network=True shares the host's ports: give neither a network nor proxy_ports")
        self.image = image
        self.host_network = host_network
        self.proxy_ports = tuple(proxy_ports)
        self.alias = alias
        self.log_path = Path(workdir) / "toxiproxy.log" if workdir is not None else None
        self.api_port = 0  # host port of the API
        self._published: dict[int, int] = {}  # container port -> host port
        init_container_state(self, network)

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    @property
    def network_name(self) -> str | None:
        net = self._given_network or self._own_network
        return net.name if net is not None else None

    def published(self, port: int) -> tuple[str, int]:
        """Host address of a proxy listening on ``0.0.0.0:port`` inside the container."""
        if self.host_network:
            return (self.host, port)
        if port not in self._published:
            raise KeyError(f"port {port} is not published by the Toxiproxy container (published: "
                           f"{sorted(self._published)}); name it in proxy_ports=")
        return (self.host, self._published[port])

    def command(self) -> list[str]:
        # host network: the API binds loopback only (nothing beyond this machine may reach it)
        if self.host_network:
            return [f"-host={self.host}", f"-port={self.api_port}"]
        return ["-host=0.0.0.0", f"-port={API_PORT}"]

    def start(self, timeout: float = 30) -> str:
        """Start the container and wait until ``GET /version`` answers; returns the API URL.
        Raises `DockerUnavailable` (engine, permission, image: with what to do) or
        `ToxiproxyStartError`; nothing is left running on failure."""
        if self._tc is not None:
            raise RuntimeError(f"Toxiproxy container {self.container_id} is already started")
        ok, reason = image_available(self.image)
        if not ok:
            raise DockerUnavailable(reason)
        deadline = Deadline(timeout)  # the whole start: the image pull, the container, the API
        try:
            self._client = self._client or docker_client()
            _configure_reaper(self._client)
            if not self.host_network and self._given_network is None:
                self._own_network = _new_network(f"brokerconf-toxiproxy-{uuid.uuid4().hex[:8]}",
                                                  {LABEL: "toxiproxy_container"})
            self._tc = self._build_container()
            self._tc.start()
            self.container_id = self._tc._container.id
            self._finalizer = weakref.finalize(self, _remove_quietly, self._tc._container, self._own_network)
            self._read_published_ports()
            self._wait_api(deadline)
        except BaseException:
            self.stop()
            raise
        return self.api_url

    def _build_container(self) -> Any:
        if self.host_network:
            self.api_port = free_ports(1)[0]
            tc = _docker_container(self.image)
            tc.with_kwargs(network_mode="host", labels={LABEL: "toxiproxy_container"})
        else:
            tc = _docker_container(self.image, network=self._given_network or self._own_network,
                                   network_aliases=[self.alias])
            tc.ports[f"{API_PORT}/tcp"] = (self.host, None)  # loopback only; Docker picks the host port
            for port in self.proxy_ports:
                tc.ports[f"{port}/tcp"] = (self.host, None)
            tc.with_kwargs(labels={LABEL: "toxiproxy_container"})
        tc.with_name(f"brokerconf-toxiproxy-{uuid.uuid4().hex[:8]}")
        tc.with_command(self.command())
        return tc

    def _read_published_ports(self) -> None:
        if self.host_network:
            return
        container = self._tc._container
        container.reload()
        bindings = container.attrs["NetworkSettings"]["Ports"] or {}
        for port in (API_PORT, *self.proxy_ports):
            found = bindings.get(f"{port}/tcp") or []
            if not found:
                raise ToxiproxyStartError(f"container port {port} of the Toxiproxy container is not published: "
                                          f"{bindings}")
            self._published[port] = int(found[0]["HostPort"])
        self.api_port = self._published[API_PORT]

    def _running(self) -> bool:
        try:
            self._tc._container.reload()
            return self._tc._container.status == "running"
        except Exception:  # noqa: BLE001 - removed behind our back
            return False

    def _wait_api(self, deadline: Deadline) -> None:
        def answered() -> tuple[bool, str]:
            ok, last = _get_version(self.api_url, 2.0)
            if not ok and not self._running():
                raise self._api_silent(last)
            return ok, last

        ok, last = poll(answered, lambda answer: answer[0], timeout=deadline, interval=0.1)
        if not ok:
            raise self._api_silent(last)

    def _api_silent(self, last: str) -> ToxiproxyStartError:
        return ToxiproxyStartError(f"Toxiproxy container ({self.image}) did not answer GET {self.api_url}/version "
                                   f"({last}); its log:\n{self.log_tail(30)}")

    def log_tail(self, lines: int = 50) -> str:
        container = self._tc._container if self._tc is not None else None
        if container is None:
            return "(no container)"
        try:
            return container.logs(tail=lines).decode("utf-8", "replace").rstrip()
        except Exception as exc:  # noqa: BLE001
            return f"(log not readable: {exc})"

    def stop(self) -> None:
        """Remove the container (its log saved to ``workdir/toxiproxy.log`` when a workdir was given)
        and the network this launcher made. Idempotent."""
        tc, self._tc = self._tc, None
        container = tc._container if tc is not None else None
        try:
            if container is not None:
                if self.log_path is not None:
                    self._save_log(container)
                remove_container(container)
        finally:
            self.container_id = None
            release_network_and_client(self)

    def _save_log(self, container: Any) -> None:
        try:
            text = container.logs(stdout=True, stderr=True)
        except Exception:  # noqa: BLE001 - vanished
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_bytes(text)

    def __enter__(self) -> "ToxiproxyContainer":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_toxiproxy(*, host_network: bool = True, **options: Any) -> Any:
    """A started Toxiproxy-API server for chaos code: the container where its image is present,
    else the embedded `machinery.faultproxy.FaultProxyServer`. The handle has ``api_url``, ``stop()``,
    ``kind`` ("container" or "ours") and ``fallback_reason`` (why the container was not used, "" if
    it was)."""
    ok, reason = image_available(options.get("image", TOXIPROXY_IMAGE))
    if ok:
        handle = ToxiproxyContainer(host_network=host_network, **options)
        handle.start()
        handle.fallback_reason = ""
        return handle

    handle = FaultProxyServer().start()
    handle.kind = "ours"
    handle.fallback_reason = f"using the embedded fault proxy: {reason}"
    return handle
