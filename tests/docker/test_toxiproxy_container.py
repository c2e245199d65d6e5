"""Toxiproxy from its official image (machinery.faultproxy.container).

Fast tests use a fake testcontainers container and serve ``GET /version`` from the embedded proxy
(the same API), so readiness, ports, command and cleanup are checked without an engine. The
`container` test starts the Toxiproxy image (docker/toxiproxy, built by docker/build-images.sh)
and is skipped with docker_env's reason where it is missing (failed where CI requires docker)."""

from __future__ import annotations

import uuid

import pytest

from machinery.faultproxy import FaultProxyServer
from machinery.faultproxy import container as mod
from machinery.faultproxy.client import ToxiproxyClient
from machinery.faultproxy.container import (
    TOXIPROXY_IMAGE,
    ToxiproxyContainer,
    ToxiproxyStartError,
    start_toxiproxy,
)
from conformance.requirements import skip_or_fail
from machinery.docker_env import DockerUnavailable, image_available


class FakeDockerContainer:
    def __init__(self, ports: dict) -> None:
        self.id = uuid.uuid4().hex
        self.status = "running"
        self.attrs = {"NetworkSettings": {"Ports": {k: [{"HostIp": h, "HostPort": str(p)}] for k, (h, p) in ports.items()}}}
        self.removed = False

    def reload(self):
        pass

    def logs(self, **kw):
        return b"msg=\"Starting Toxiproxy HTTP server\"\n"

    def remove(self, force, v):
        self.removed = True


class FakeTC:
    def __init__(self, image, api_port, **kw) -> None:
        self.image, self.kw, self.api_port = image, kw, api_port
        self.ports: dict = {}
        self.kwargs: dict = {}
        self.command = None
        self._container = None

    def with_name(self, name):
        return self

    def with_kwargs(self, **kw):
        self.kwargs.update(kw)
        return self

    def with_command(self, command):
        self.command = command
        return self

    def start(self):
        # Docker "publishes" the API port where the embedded proxy listens; proxy ports anywhere
        published = {k: (h, self.api_port if k == "8474/tcp" else 40000 + i) for i, (k, (h, _)) in enumerate(self.ports.items())}
        self._container = FakeDockerContainer(published)
        return self


class FakeNetwork:
    def __init__(self, name):
        self.name, self.removed = name, False

    def remove(self):
        self.removed = True


@pytest.fixture
def engine(monkeypatch):
    api = FaultProxyServer().start()  # answers GET /version like the real server
    port = int(api.api_url.rsplit(":", 1)[1])
    made, networks = [], []
    monkeypatch.setattr(mod, "image_available", lambda image: (True, ""))
    monkeypatch.setattr(mod, "docker_client", lambda: type("C", (), {"close": lambda self: None})())
    monkeypatch.setattr(mod, "_configure_reaper", lambda client: None)
    monkeypatch.setattr(mod, "_new_network", lambda name, labels: networks.append(FakeNetwork(name)) or networks[-1])
    monkeypatch.setattr(mod, "_docker_container", lambda image, **kw: made.append(FakeTC(image, port, **kw)) or made[-1])
    # host-network mode picks the API port itself: hand it the embedded proxy's
    monkeypatch.setattr(mod, "free_ports", lambda n: [port])
    try:
        yield {"made": made, "networks": networks, "port": port, "api": api}
    finally:
        api.stop()


def test_scenario_network_publishes_api_and_proxy_ports_on_loopback(engine):
    proxy = ToxiproxyContainer(proxy_ports=(20000, 20001))
    url = proxy.start(timeout=5)
    tc = engine["made"][0]
    assert tc.image == TOXIPROXY_IMAGE
    assert url == f"http://127.0.0.1:{engine['port']}"
    assert set(tc.ports) == {"8474/tcp", "20000/tcp", "20001/tcp"}
    assert {h for h, _ in tc.ports.values()} == {"127.0.0.1"}
    assert tc.command == ["-host=0.0.0.0", "-port=8474"]
    assert tc.kw["network"] is engine["networks"][0] and tc.kw["network_aliases"] == ["toxiproxy"]
    assert proxy.published(20001)[0] == "127.0.0.1"
    with pytest.raises(KeyError, match="proxy_ports"):
        proxy.published(20002)
    proxy.stop()
    assert tc._container.removed and engine["networks"][0].removed


def test_host_network_mode_serves_api_on_loopback(engine):
    with ToxiproxyContainer(host_network=True) as proxy:
        tc = engine["made"][0]
        assert tc.kwargs["network_mode"] == "host" and tc.ports == {}
        assert tc.command == ["-host=127.0.0.1", f"-port={engine['port']}"]
        assert proxy.published(26000) == ("127.0.0.1", 26000)
    assert engine["networks"] == [] and tc._container.removed


def test_api_not_answering_fails_and_removes(engine):
    engine["api"].stop()  # nothing serves the API port now
    proxy = ToxiproxyContainer()
    with pytest.raises(ToxiproxyStartError, match="GET .*/version"):
        proxy.start(timeout=0.5)
    assert engine["made"][0]._container.removed and engine["networks"][0].removed


def test_missing_image_raises_reason(monkeypatch):
    monkeypatch.setattr(mod, "image_available", lambda image: (False, "the Docker image X is not present; pull it"))
    with pytest.raises(DockerUnavailable, match="pull it"):
        ToxiproxyContainer().start()


def test_start_toxiproxy_falls_back_to_embedded_with_reason(monkeypatch):
    monkeypatch.setattr(mod, "image_available", lambda image: (False, "the Docker image X is not present; pull it"))
    handle = start_toxiproxy()
    try:
        assert handle.kind == "ours" and "pull it" in handle.fallback_reason
        assert isinstance(handle, FaultProxyServer) and handle.api_url.startswith("http://127.0.0.1:")
    finally:
        handle.stop()


def test_host_network_excludes_published_ports():
    with pytest.raises(ValueError, match="host_network"):
        ToxiproxyContainer(host_network=True, proxy_ports=(1,))


@pytest.mark.container
@pytest.mark.slow
def test_real_container_answers_version_and_proxies(tmp_path):
    ok, reason = image_available(TOXIPROXY_IMAGE)
    if not ok:
        skip_or_fail("docker", reason)

    with ToxiproxyContainer(proxy_ports=(20000,), workdir=tmp_path) as proxy:
        client = ToxiproxyClient(proxy.api_url)
        assert client.version()  # raises unless GET /version answers 200
        client.create_proxy("p", upstream="toxiproxy:8474", listen="0.0.0.0:20000")  # raises unless 201
        # through the proxy to the container's own API: a published proxy port carries traffic
        host, port = proxy.published(20000)
        assert ToxiproxyClient(f"http://{host}:{port}").version()
