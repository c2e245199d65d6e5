"""`brokerconf targets install`: the Debian packages each local-process target needs, and the
pinned downloads some targets add on top (`TOOLS`: fetched into ``.tools/``, no root needed).

The same packages `scripts/bootstrap.sh` installs on first use (the shell script runs before any
Python environment exists, so it keeps its own copy of this list). As with the bootstrap, the
packages' own system services are kept from starting: brokerconf runs private broker instances
on free loopback ports and a system RabbitMQ or Mosquitto would only hold ports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from conformance.targets.activemq import amqp as activemq_amqp
from conformance.targets.activemq import class_archive as activemq_class_archive
from conformance.targets.artemis import class_archive
from conformance.targets.artemis import dist as artemis_dist

PACKAGES: dict[str, tuple[str, ...]] = {
    "activemq": ("activemq", "libmqtt-client-java", "libhawtdispatch-java"),
    "rabbitmq": ("rabbitmq-server",),
    "mosquitto": ("mosquitto",),
    # container targets: the engine, and debootstrap for the offline base image (docker/)
    "docker": ("docker.io", "debootstrap"),
}
#: installed from a registry into .tools/ with the tool's own client (no root): name -> what it adds
TOOLS: dict[str, str] = {
    "activemq-amqp": "ActiveMQ Classic's AMQP transport (activemq-amqp + proton-j, with Maven)",
    "artemis": "the pinned Apache Artemis binary distribution (with Maven; conformance/targets/artemis/dist.py)",
}
#: Debian targets that also get these tools, as a best effort (a failure is a warning: the
#: target runs without them, e.g. ActiveMQ without AMQP)
TOOLS_WITH_TARGET: dict[str, tuple[str, ...]] = {"activemq": ("activemq-amqp",)}
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
#: the checkout's docker/ directory (start-engine.sh, build-images.sh)
DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
#: after the packages of the `docker` target: start the engine when no service manager did (the
#: policy-rc.d above keeps apt from starting it), then build the local images, offline if need be
DOCKER_STEPS = ("start-engine.sh", "build-images.sh")


class InstallError(RuntimeError):
    pass


def packages_for(targets: list[str]) -> list[str]:
    unknown = [t for t in targets if t not in PACKAGES and t not in TOOLS]
    if unknown:
        raise InstallError(f"nothing known to install for target(s) {unknown} "
                           f"(installable: {', '.join([*PACKAGES, *TOOLS])})")
    return [p for t in targets if t in PACKAGES for p in PACKAGES[t]]


def install_tool(name: str, progress=print, run=subprocess.run) -> None:
    """Fetch one of `TOOLS` into .tools/ (quick when it is there and verifies)."""
    if name == "activemq-amqp":
        try:
            activemq_amqp.ensure_amqp_transport(progress=progress, run=run)
        except activemq_amqp.AmqpTransportError as exc:
            raise InstallError(f"activemq-amqp: {exc}") from None
        return
    if name == "artemis":
        try:
            where = artemis_dist.ensure_distribution(run=run)
        except (artemis_dist.ArtemisDistError, OSError) as exc:
            raise InstallError(f"Apache Artemis: {exc}") from exc
        progress(f"Apache Artemis ready in {where}")
        if run is subprocess.run:  # a real installation: make its JVMs' class archive (a broker launch)
            try:
                progress(f"Artemis class archive: {class_archive.ensure(progress=progress)}")
            except (class_archive.ClassArchiveError, OSError) as exc:
                progress(f"warning: no class archive for the Artemis JVMs (they start more slowly): {exc}")
        return
    raise InstallError(f"no installer for tool {name!r} (known: {', '.join(TOOLS)})")


def docker_steps(progress=print, run=subprocess.run, docker_dir: Path | None = None) -> None:
    """Run docker/start-engine.sh, then docker/build-images.sh (both idempotent; root)."""
    docker_dir = docker_dir or DOCKER_DIR
    for script in DOCKER_STEPS:
        path = docker_dir / script
        if not path.is_file():
            raise InstallError(f"{path} not found: `brokerconf targets install docker` runs from a brokerconf "
                               "checkout (its docker/ directory holds the engine and image scripts)")
        progress(f"running {path}")
        code = run(["bash", str(path)]).returncode
        if code != 0:
            raise InstallError(f"{path} failed (exit {code}, its output is above); fix that and run "
                               "`brokerconf targets install docker` again (every step skips what is done)")


def install(targets: list[str], progress=print, run=subprocess.run) -> None:
    packages = packages_for(targets)
    if packages:
        _install_packages(targets, packages, progress, run)
    for name in targets:
        if name in TOOLS:
            install_tool(name, progress, run)
        for tool in TOOLS_WITH_TARGET.get(name, ()):
            if tool in targets:
                continue
            try:
                install_tool(tool, progress, run)
            except InstallError as exc:
                progress(f"warning: {exc}; {name} runs without it")
    if "activemq" in targets and run is subprocess.run:  # a real installation: after its AMQP transport
        make_activemq_class_archive(progress)


def make_activemq_class_archive(progress=print) -> None:
    """The class archive the local ActiveMQ JVMs map (a broker launch; activemq/class_archive.py);
    a failure is a warning: they start without it, more slowly."""
    try:
        progress(f"ActiveMQ class archive: {activemq_class_archive.ensure(progress=progress)}")
    except (activemq_class_archive.ClassArchiveError, OSError) as exc:
        progress(f"warning: no class archive for the ActiveMQ JVMs (they start more slowly): {exc}")


def _install_packages(targets: list[str], packages: list[str], progress, run) -> None:
    if os.geteuid() != 0:
        raise InstallError(f"installing needs root: run `sudo apt-get install {' '.join(packages)}` "
                           "or `sudo brokerconf targets install`")
    if shutil.which("apt-get") is None:
        raise InstallError(f"apt-get not found: install {' '.join(packages)} with your system's package manager")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    made_policy = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text("#!/bin/sh\n# temporary, from brokerconf targets install: start no services\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
        made_policy = True
    try:
        progress(f"apt-get install {' '.join(packages)}")
        if run(command, env=env).returncode != 0:
            progress("apt-get install failed; running apt-get update and retrying")
            run(["apt-get", "update"], env=env, check=False)
            if run(command, env=env).returncode != 0:
                raise InstallError(f"apt-get install {' '.join(packages)} failed (see its output above)")
    finally:
        if made_policy:
            POLICY_RC_D.unlink(missing_ok=True)
    if "docker" in targets:
        docker_steps(progress, run)
