"""Is Docker usable here? Detected, never assumed (issue 8).

`docker_available()` and `image_available()` return ``(ok, reason)`` like
`conformance.targets.activemq.process.activemq_available`, so a container target that cannot run is
reported not applicable with the reason, never as a failure. The reasons are distinct, each
saying what to do:

* the docker Python SDK (or testcontainers) is not installed,
* no Docker engine is installed, or one is installed but not running,
* the engine runs but this user may not use its socket,
* the engine runs but the image is missing (named, with the script that builds it).

The Docker client is made by ``client_factory`` (default ``docker.from_env``) so tests can hand in
a fake.
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any, Callable

__all__ = [
    "ACTIVEMQ_IMAGE",
    "BUILD_SCRIPT",
    "START_SCRIPT",
    "docker_available",
    "image_available",
    "container_target_available",
    "docker_client",
    "DockerUnavailable",
]

#: the image docker/build-images.sh builds (override with $BROKERCONF_ACTIVEMQ_IMAGE, as the script)
ACTIVEMQ_IMAGE = os.environ.get("BROKERCONF_ACTIVEMQ_IMAGE", "brokerconf/activemq-classic:5.17")
BUILD_SCRIPT = "docker/build-images.sh"
START_SCRIPT = "docker/start-engine.sh"
_INSTALL_HINT = "install it as root with `apt-get install docker.io` (Debian), then run " + START_SCRIPT


class DockerUnavailable(RuntimeError):
    """Docker (engine, permission or image) is not usable; the message says why and what to do."""


def _default_factory() -> Any:
    import docker  # noqa: PLC0415 - optional dependency, imported only when asked

    return docker.from_env(timeout=10)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, its causes/contexts and exceptions nested in their args (requests wraps
    urllib3, which wraps the socket's OSError in args)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen) or len(seen) > 20:
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        reason = getattr(e, "reason", None)
        if isinstance(reason, BaseException):
            todo.append(reason)
    return seen


def _is_permission_error(exc: BaseException) -> bool:
    for e in _chain(exc):
        if isinstance(e, PermissionError) or getattr(e, "errno", None) in (errno.EACCES, errno.EPERM):
            return True
        if "permission denied" in str(e).lower():
            return True
    return False


def _engine_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _engine_reason(exc: BaseException, which: Callable[[str], str | None]) -> str:
    host = _engine_host()
    if _is_permission_error(exc):
        return (f"the Docker engine at {host} refused this user (permission denied on its socket); "
                "run as root, or add the user to the `docker` group (`usermod -aG docker $USER`, then log in again)")
    if which("dockerd") is None and not os.environ.get("DOCKER_HOST"):
        return f"no Docker engine is installed (no dockerd on PATH, nothing at {host}); {_INSTALL_HINT}"
    return (f"the Docker engine is not running (cannot reach {host}: {type(exc).__name__}: {str(exc)[:200]}); "
            f"start it as root with {START_SCRIPT} (or `systemctl start docker` where systemd runs)")


def docker_client(client_factory: Callable[[], Any] | None = None,
                  which: Callable[[str], str | None] = shutil.which) -> Any:
    """A connected docker SDK client; raises `DockerUnavailable` with the reason otherwise."""
    if client_factory is None:
        try:
            import docker  # noqa: F401, PLC0415 - optional dependency
            import testcontainers  # noqa: F401, PLC0415 - optional dependency
        except ImportError as exc:
            raise DockerUnavailable(
                f"the Python package {exc.name or 'docker'!r} is not installed; container targets need the docker "
                "SDK and testcontainers (`pip install -e '.[test]'` installs both)") from None
        client_factory = _default_factory
    try:
        client = client_factory()
        client.ping()
    except DockerUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - every SDK/transport error means "engine unusable"; reason says which
        raise DockerUnavailable(_engine_reason(exc, which)) from exc
    return client


def docker_available(client_factory: Callable[[], Any] | None = None,
                     which: Callable[[str], str | None] = shutil.which) -> tuple[bool, str]:
    """``(True, "")`` when a Docker engine answers and may be used by this user, else ``(False, reason)``."""
    try:
        client = docker_client(client_factory, which)
    except DockerUnavailable as exc:
        return False, str(exc)
    _close(client)
    return True, ""


def _image_reason(client: Any, image: str) -> str:
    try:
        client.images.get(image)
        return ""
    except Exception as exc:  # noqa: BLE001
        if type(exc).__name__ == "ImageNotFound" or getattr(exc, "status_code", None) == 404:
            hint = (f"build it with {BUILD_SCRIPT} (as root; it builds the Debian base image offline when no "
                    "registry is reachable)") if image.startswith("brokerconf/") else f"pull it with `docker pull {image}`"
            return f"the Docker image {image} is not present in the engine; {hint}"
        if _is_permission_error(exc):
            return f"cannot inspect the Docker image {image}: permission denied ({exc})"
        return f"cannot inspect the Docker image {image}: {type(exc).__name__}: {str(exc)[:200]}"


def image_available(image: str = ACTIVEMQ_IMAGE, client_factory: Callable[[], Any] | None = None,
                    which: Callable[[str], str | None] = shutil.which) -> tuple[bool, str]:
    """``(True, "")`` when the engine is usable and holds ``image`` locally, else ``(False, reason)``.

    Never pulls: a missing image is a reason, so offline machines say what to build."""
    try:
        client = docker_client(client_factory, which)
    except DockerUnavailable as exc:
        return False, str(exc)
    try:
        reason = _image_reason(client, image)
    finally:
        _close(client)
    return not reason, reason


def container_target_available(image: str = ACTIVEMQ_IMAGE) -> tuple[bool, str]:
    """What a container target's ``availability()`` reports (engine, permission, then image)."""
    return image_available(image)


def _close(client: Any) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - closing a fake or a broken client: nothing to report
        pass
