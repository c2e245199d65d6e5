"""Docker availability reasons (machinery.docker_env), with a fake docker SDK client:
each way Docker can be unusable gives its own reason, saying what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import docker.errors
import pytest

from machinery import docker_env
from machinery.docker_env import DockerUnavailable, docker_available, docker_client, image_available


class FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, name: str):
        if name not in self.present:
            raise docker.errors.ImageNotFound(f"No such image: {name}")
        return object()


class FakeClient:
    def __init__(self, images: set[str] = frozenset()) -> None:
        self.images = FakeImages(set(images))
        self.closed = False

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def raising(exc: BaseException):
    def factory():
        raise exc
    return factory


def with_dockerd(name: str) -> str | None:
    return f"/usr/sbin/{name}"


def without_dockerd(name: str) -> None:
    return None


# The text docker-py 7 puts in its exception when the socket is missing / not ours.
NO_SOCKET = docker.errors.DockerException(
    "Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))")
NO_PERMISSION = docker.errors.DockerException(
    "Error while fetching server API version: ('Connection aborted.', PermissionError(13, 'Permission denied'))")


@pytest.fixture(autouse=True)
def _local_engine(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)


def test_engine_answers_and_image_present():
    client = FakeClient({"brokerconf/activemq-classic:5.17"})
    assert image_available("brokerconf/activemq-classic:5.17", client_factory=lambda: client) == (True, "")
    assert client.closed, "the availability check must close the client it opened"


def test_engine_installed_but_not_running():
    ok, reason = docker_available(client_factory=raising(NO_SOCKET), which=with_dockerd)
    assert not ok
    assert "not running" in reason and "unix:///var/run/docker.sock" in reason
    assert "docker/start-engine.sh" in reason


def test_no_engine_installed():
    ok, reason = docker_available(client_factory=raising(NO_SOCKET), which=without_dockerd)
    assert not ok
    assert "no Docker engine is installed" in reason and "apt-get install docker.io" in reason


def test_permission_denied_on_socket_from_message():
    ok, reason = docker_available(client_factory=raising(NO_PERMISSION), which=with_dockerd)
    assert not ok
    assert "permission denied" in reason and "docker` group" in reason
    assert "not running" not in reason


def test_permission_denied_found_in_exception_cause():
    try:
        try:
            raise PermissionError(13, "Permission denied")
        except PermissionError as inner:
            raise docker.errors.DockerException("Error while fetching server API version") from inner
    except docker.errors.DockerException as outer:
        wrapped = outer
    ok, reason = docker_available(client_factory=raising(wrapped), which=with_dockerd)
    assert not ok and "permission denied" in reason


def test_missing_local_image_names_it_and_the_build_script():
    ok, reason = image_available("brokerconf/activemq-classic:5.17", client_factory=lambda: FakeClient(),
                                 which=with_dockerd)
    assert not ok
    assert "brokerconf/activemq-classic:5.17" in reason and "docker/build-images.sh" in reason


def test_missing_registry_image_says_pull():
    ok, reason = image_available("apache/activemq-artemis:2.31.2", client_factory=lambda: FakeClient())
    assert not ok
    assert "docker pull apache/activemq-artemis:2.31.2" in reason


def test_engine_reason_comes_before_image_reason():
    ok, reason = image_available("brokerconf/activemq-classic:5.17", client_factory=raising(NO_SOCKET),
                                 which=with_dockerd)
    assert not ok and "not running" in reason and "build-images" not in reason


def test_remote_docker_host_not_reported_as_missing_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    ok, reason = docker_available(client_factory=raising(docker.errors.DockerException("Connection refused")),
                                  which=without_dockerd)
    assert not ok and "not running" in reason and "tcp://127.0.0.1:1" in reason


def test_missing_sdk_is_its_own_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "testcontainers", None)  # import now raises ImportError
    with pytest.raises(DockerUnavailable, match="'testcontainers' is not installed"):
        docker_client()
    ok, reason = docker_available()
    assert not ok and "pip install" in reason


def test_reasons_are_distinct():
    reasons = {
        docker_available(client_factory=raising(NO_SOCKET), which=with_dockerd)[1],
        docker_available(client_factory=raising(NO_SOCKET), which=without_dockerd)[1],
        docker_available(client_factory=raising(NO_PERMISSION), which=with_dockerd)[1],
        image_available("brokerconf/x:1", client_factory=lambda: FakeClient())[1],
    }
    assert len(reasons) == 4


def test_default_image_name_matches_build_script():
    # docker/build-images.sh tags this name; the two must not drift apart.
    script = Path(docker_env.__file__).resolve().parents[1] / "docker" / "build-images.sh"
    with open(script, encoding="utf-8") as f:
        assert "brokerconf/activemq-classic:5.17" in f.read()
