"""Container targets in the registry (issue 8 part 2): `activemq` / `activemq:process` /
`activemq:container` selection and reasons, Artemis's container-only reason, `targets install docker`.

Fast tests use fake availability checks; suites through the container targets are run by
tests/docker/test_container_suites.py."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.scenario import Scenario
from conformance.targets import install as install_mod
from conformance.targets.activemq.target import ActiveMQTarget
from machinery.docker_env import ACTIVEMQ_IMAGE
from conformance.targets.artemis.target import ArtemisTarget
from conformance.targets.artemis.dist import ARTEMIS_IMAGE
from conformance.targets.registry import BUILTIN, resolve

ROOT = Path(__file__).resolve().parents[2]
NO_PACKAGE = "ActiveMQ is not installed: apt-get install activemq"
NO_ENGINE = "no Docker engine is installed (no dockerd on PATH)"


def _target(launch: str, process=(True, ""), container=(True, "")) -> ActiveMQTarget:
    calls = {"process": 0, "container": 0}

    def process_check():
        calls["process"] += 1
        return process

    def container_check():
        calls["container"] += 1
        return container

    target = ActiveMQTarget(name="activemq" if launch == "auto" else f"activemq:{launch}", launch=launch,
                            process_check=process_check, container_check=container_check)
    target.calls = calls  # type: ignore[attr-defined]
    return target


# ---------------------------------------------------------------- selection


def test_registry_names_both_launch_modes():
    assert {"activemq", "activemq:process", "activemq:container"} <= set(BUILTIN)
    assert resolve("activemq").launch_requested == "auto"
    assert resolve("activemq:process").launch_requested == "process"
    container = resolve("activemq:container")
    assert (container.name, container.kind, container.launch_requested) == ("activemq:container", "activemq", "container")


def test_plain_activemq_prefers_the_local_process():
    target = _target("auto", process=(True, ""), container=(True, ""))
    assert target.availability() == (True, "")
    assert target.launch_mode == "process"
    assert target.calls == {"process": 1, "container": 0}  # no engine asked when the package is there


def test_plain_activemq_falls_back_to_the_container():
    target = _target("auto", process=(False, NO_PACKAGE), container=(True, ""))
    assert target.availability() == (True, "")
    assert target.launch_mode == "container"


def test_plain_activemq_unavailable_gives_both_reasons():
    ok, reason = _target("auto", process=(False, NO_PACKAGE), container=(False, NO_ENGINE)).availability()
    assert not ok
    assert NO_PACKAGE in reason and NO_ENGINE in reason


def test_forced_container_reports_docker_reason_even_with_the_package():
    target = _target("container", process=(True, ""), container=(False, NO_ENGINE))
    assert target.availability() == (False, NO_ENGINE)
    assert target.launch_mode == "container"
    assert target.calls["process"] == 0


def test_forced_process_ignores_docker():
    target = _target("process", process=(False, NO_PACKAGE), container=(True, ""))
    assert target.availability() == (False, NO_PACKAGE)
    assert target.launch_mode == "process"
    assert target.calls["container"] == 0


def test_checks_run_once_per_target():
    target = _target("auto", process=(False, NO_PACKAGE), container=(True, ""))
    for _ in range(3):
        target.availability(), target.launch_mode, target.capabilities()
    assert target.calls == {"process": 1, "container": 1}


def test_container_offers_mqtt_from_the_image(monkeypatch):
    # the process mode asks the machine (`launch_modes.ActiveMQProcessLaunch`); the image has the jars
    from conformance.targets.activemq import launch_modes as activemq_launch_modes

    monkeypatch.setattr(activemq_launch_modes, "activemq_mqtt_available", lambda: (False, "libmqtt-client-java missing"))
    assert "protocol.mqtt" in _target("container").capabilities()
    process = _target("process")
    assert "protocol.mqtt" not in process.capabilities()
    assert process.why_missing("protocol.mqtt") == "libmqtt-client-java missing"


def test_unknown_launch_mode_is_refused():
    with pytest.raises(ValueError, match="launch must be one of auto, process, container"):
        ActiveMQTarget(launch="vm")


def test_unavailable_container_target_raises_its_reason_on_launch(tmp_path):
    from conformance.targets.base import TargetUnavailable

    with pytest.raises(TargetUnavailable, match="no Docker engine"):
        _target("container", container=(False, NO_ENGINE)).launch(Scenario(name="x"), tmp_path)


def test_container_launch_hands_back_a_container_handle(tmp_path, monkeypatch):
    """The container path builds an ActiveMQContainer with the scenario's options; the handle says
    launch="container" and has no host PID (the start itself is faked)."""
    from conformance.targets.activemq import container as activemq_container

    started = []
    monkeypatch.setattr(activemq_container.ActiveMQContainer, "start",
                        lambda self, timeout=90, wait_for="serving": started.append((self, timeout)))
    handle = _target("container").launch(Scenario(name="sel", protocols=("stomp",)), tmp_path)
    (container, timeout), = started
    assert isinstance(container, activemq_container.ActiveMQContainer)
    assert container.image == ACTIVEMQ_IMAGE and container.jmx and container.openwire
    assert (handle.launch, handle.pid, handle.kind) == ("container", None, "activemq")
    assert ET.fromstring(handle.config_text()).find(".//{*}broker").get("brokerName") == "brokerconf-sel"


# ---------------------------------------------------------------- artemis


def test_artemis_is_not_applicable_with_the_image_reason():
    missing = f"the Docker image {ARTEMIS_IMAGE} is not present in the engine; build it with docker/build-images.sh"
    seen = []
    target = ArtemisTarget(launch="container", image_check=lambda image: (seen.append(image), (False, missing))[1])
    ok, reason = target.availability()
    assert not ok and seen == [ARTEMIS_IMAGE]
    assert reason == f"no Artemis container: {missing}"
    assert target.launch_mode == "container"


def test_artemis_with_its_image_is_available():
    assert ArtemisTarget(launch="container", image_check=lambda image: (True, "")).availability() == (True, "")


def test_default_artemis_image_is_the_local_build_of_the_pinned_version():
    """Without $BROKERCONF_ARTEMIS_IMAGE the target runs the image docker/artemis/build.sh tags:
    brokerconf/artemis:<the version pinned in pins.toml>."""
    env = {k: v for k, v in os.environ.items() if k != "BROKERCONF_ARTEMIS_IMAGE"}
    default = subprocess.run([sys.executable, "-c", "from conformance.targets.artemis.dist import ARTEMIS_IMAGE; "
                              "print(ARTEMIS_IMAGE)"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    pinned = tomllib.loads((ROOT / "machinery" / "pins.toml").read_text())["artemis"]["version"]
    assert default.stdout.strip() == f"brokerconf/artemis:{pinned}"
    assert 'IMAGE="brokerconf/artemis:$VERSION"' in (ROOT / "docker" / "artemis" / "build.sh").read_text()


# ---------------------------------------------------------------- targets install docker


def test_install_docker_runs_engine_then_image_scripts(monkeypatch, tmp_path):
    monkeypatch.setattr(install_mod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(install_mod.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(install_mod, "POLICY_RC_D", tmp_path / "policy-rc.d")
    commands = []
    install_mod.install(["docker"], progress=lambda m: None,
                        run=lambda argv, **kw: (commands.append(argv), SimpleNamespace(returncode=0))[1])
    assert commands[0][:4] == ["apt-get", "install", "-y", "--no-install-recommends"]
    assert commands[0][4:] == ["docker.io", "debootstrap"]
    assert commands[1:] == [["bash", str(ROOT / "docker" / "start-engine.sh")],
                            ["bash", str(ROOT / "docker" / "build-images.sh")]]
    assert not (tmp_path / "policy-rc.d").exists()


def test_failing_image_build_names_the_script(tmp_path):
    (tmp_path / "start-engine.sh").write_text("")
    (tmp_path / "build-images.sh").write_text("")
    codes = iter([0, 3])
    with pytest.raises(install_mod.InstallError, match=r"build-images.sh failed \(exit 3"):
        install_mod.docker_steps(progress=lambda m: None, docker_dir=tmp_path,
                                 run=lambda argv, **kw: SimpleNamespace(returncode=next(codes)))


def test_install_docker_needs_root(monkeypatch):
    monkeypatch.setattr(install_mod.os, "geteuid", lambda: 1000)
    with pytest.raises(install_mod.InstallError, match="needs root.*docker.io debootstrap"):
        install_mod.install(["docker"], run=lambda *a, **k: pytest.fail("nothing may run without root"))


# ---------------------------------------------------------------- CLI


def test_targets_list_shows_launch_mode(capsys, monkeypatch):
    from brokerconf import cli
    from conformance.targets import registry

    real = registry.builtin_target

    def fake(name):
        if name.startswith("activemq"):
            _, _, mode = name.partition(":")
            return _target(mode or "auto", process=(False, NO_PACKAGE), container=(True, ""))
        if name == "artemis":
            return ArtemisTarget(launch="container", image_check=lambda image: (False, "image missing"))
        return real(name)

    monkeypatch.setattr(registry, "builtin_target", fake)
    assert cli.main(["targets", "list"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["activemq"][2:4] == ["container", "yes"]   # fell back to the container
    assert rows["activemq:process"][2:4] == ["process", "no"]
    assert rows["artemis"][2:4] == ["container", "no"]


# ---------------------------------------------------------------- a real suite through containers
# A suite through each container target (the launch recorded, its tests passed) is checked by
# tests/docker/test_container_suites.py, whose runs of every suite include test_core_queues.py
# (check_core_queue_suite_ran); this module ran that suite through both targets a second time.
