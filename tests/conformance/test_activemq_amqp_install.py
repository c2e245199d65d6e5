"""The installer of ActiveMQ's AMQP transport (conformance/targets/activemq/amqp.py), without Maven:
pins parsing, the broker-version check, jar-set and digest verification, the staged fetch."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest_plugins = ["pytester"]

from conformance.targets.activemq import amqp
from conformance.targets import install as install_mod

JAR_A = b"transport jar bytes"
JAR_B = b"engine jar bytes"


def _sha(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest()


@pytest.fixture
def pins(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "pins.toml"
    path.write_text(f"""
[activemq-amqp]
group = "org.apache.activemq"
artifact = "activemq-amqp"
version = "5.17.2"
sha512 = "{_sha(JAR_A)}"

[activemq-amqp.dependencies.proton-j]
group = "org.apache.qpid"
version = "0.33.10"
sha512 = "{_sha(JAR_B)}"
""")
    monkeypatch.setattr(amqp, "PINS_FILE", path)
    return path


def _broker_home(root: Path, version: str | None) -> Path:
    lib = root / "home" / "lib"
    lib.mkdir(parents=True)
    with zipfile.ZipFile(lib / "activemq-broker.jar", "w") as z:
        manifest = "Manifest-Version: 1.0\n" + (f"Implementation-Version: {version}\n" if version else "")
        z.writestr("META-INF/MANIFEST.MF", manifest)
    return root / "home"


def _fill(lib: Path, a: bytes = JAR_A, b: bytes = JAR_B) -> None:
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "activemq-amqp-5.17.2.jar").write_bytes(a)
    (lib / "proton-j-0.33.10.jar").write_bytes(b)


def test_pins_name_the_transport_first_then_its_dependencies(pins):
    jars = amqp.pinned_jars()
    assert [j.coordinates for j in jars] == ["org.apache.activemq:activemq-amqp:5.17.2",
                                             "org.apache.qpid:proton-j:0.33.10"]


def test_the_project_pins_carry_a_digest_for_every_jar():
    jars = amqp.pinned_jars()  # the real machinery/pins.toml
    assert jars[0].artifact == "activemq-amqp"
    assert all(len(j.sha512) == 128 for j in jars), jars


def test_a_pin_without_digest_is_refused(pins):
    pins.write_text('[activemq-amqp]\ngroup = "g"\nartifact = "a"\nversion = "1"\n')
    with pytest.raises(amqp.AmqpTransportError, match=r"\[activemq-amqp\] lacks sha512"):
        amqp.pinned_jars()


def test_broker_version_comes_from_the_manifest(tmp_path):
    assert amqp.broker_version(_broker_home(tmp_path, "5.17.2")) == "5.17.2"
    assert amqp.broker_version(tmp_path / "nowhere") is None


def test_installed_when_the_pinned_jars_verify(pins, tmp_path):
    home = _broker_home(tmp_path, "5.17.2")
    tools = tmp_path / "tools"
    _fill(tools / "activemq-amqp" / "5.17.2" / "lib")
    assert amqp.installed(home=home, tools_dir=tools) == (True, "")
    assert [p.name for p in amqp.jar_paths(home=home, tools_dir=tools)] == ["activemq-amqp-5.17.2.jar",
                                                                            "proton-j-0.33.10.jar"]


@pytest.mark.parametrize("damage, says", [
    (lambda lib: (lib / "proton-j-0.33.10.jar").write_bytes(b"tampered"), "has sha512"),
    (lambda lib: (lib / "extra.jar").write_bytes(b"x"), "expected exactly"),
    (lambda lib: (lib / "proton-j-0.33.10.jar").unlink(), "expected exactly"),
])
def test_a_damaged_jar_set_is_not_installed(pins, tmp_path, damage, says):
    home = _broker_home(tmp_path, "5.17.2")
    tools = tmp_path / "tools"
    lib = tools / "activemq-amqp" / "5.17.2" / "lib"
    _fill(lib)
    damage(lib)
    ok, reason = amqp.installed(home=home, tools_dir=tools)
    assert not ok and says in reason and "targets install activemq-amqp" in reason


def test_another_broker_version_is_refused_before_any_fetch(pins, tmp_path, monkeypatch):
    home = _broker_home(tmp_path, "5.18.3")
    ok, reason = amqp.installed(home=home, tools_dir=tmp_path / "tools")
    assert not ok and "installed ActiveMQ Classic is 5.18.3" in reason and "pins activemq-amqp 5.17.2" in reason
    monkeypatch.setattr(amqp.shutil, "which", lambda name: pytest.fail("no fetch for the wrong broker"))
    with pytest.raises(amqp.AmqpTransportError, match="5.18.3"):
        amqp.ensure_amqp_transport(home=home, tools_dir=tmp_path / "tools", progress=lambda m: None)


def test_fetch_runs_maven_in_a_staging_dir_and_moves_the_verified_set_into_place(pins, tmp_path, monkeypatch):
    home = _broker_home(tmp_path, "5.17.2")
    tools = tmp_path / "tools"
    monkeypatch.setattr(amqp.shutil, "which", lambda name: "/usr/bin/mvn")
    commands = []

    def fake_mvn(argv, cwd):
        commands.append(argv)
        pom = Path(argv[argv.index("-f") + 1]).read_text()
        assert "<artifactId>activemq-amqp</artifactId><version>5.17.2</version>" in pom
        assert "<artifactId>proton-j</artifactId><version>0.33.10</version>" in pom
        out = next(a for a in argv if a.startswith("-DoutputDirectory=")).split("=", 1)[1]
        _fill(Path(out))
        return SimpleNamespace(returncode=0)

    lib = amqp.ensure_amqp_transport(home=home, tools_dir=tools, run=fake_mvn, progress=lambda m: None)
    assert lib == tools / "activemq-amqp" / "5.17.2" / "lib"
    assert "-DexcludeTransitive=true" in commands[0]
    assert amqp.installed(home=home, tools_dir=tools) == (True, "")
    assert sorted(p.name for p in (tools / "activemq-amqp").iterdir()) == ["5.17.2"]  # no staging left
    # a second call finds the set and runs nothing
    amqp.ensure_amqp_transport(home=home, tools_dir=tools, progress=lambda m: None,
                               run=lambda *a, **k: pytest.fail("Maven must not run again"))


def test_a_fetch_that_brings_other_bytes_is_refused_and_leaves_nothing(pins, tmp_path, monkeypatch):
    home = _broker_home(tmp_path, "5.17.2")
    tools = tmp_path / "tools"
    monkeypatch.setattr(amqp.shutil, "which", lambda name: "/usr/bin/mvn")

    def wrong_mvn(argv, cwd):
        _fill(Path(next(a for a in argv if a.startswith("-DoutputDirectory=")).split("=", 1)[1]), b=b"other")
        return SimpleNamespace(returncode=0)

    with pytest.raises(amqp.AmqpTransportError, match="other than the pins"):
        amqp.ensure_amqp_transport(home=home, tools_dir=tools, run=wrong_mvn, progress=lambda m: None)
    assert not (tools / "activemq-amqp").exists() or not any((tools / "activemq-amqp").iterdir())


def test_without_maven_the_error_says_how_to_get_it(pins, tmp_path, monkeypatch):
    home = _broker_home(tmp_path, "5.17.2")
    monkeypatch.setattr(amqp.shutil, "which", lambda name: None)
    with pytest.raises(amqp.AmqpTransportError, match="apt-get install maven"):
        amqp.ensure_amqp_transport(home=home, tools_dir=tmp_path / "tools", progress=lambda m: None)


def test_targets_install_activemq_amqp_needs_no_root(monkeypatch):
    monkeypatch.setattr(install_mod.os, "geteuid", lambda: 1000)
    fetched = []
    monkeypatch.setattr(amqp, "ensure_amqp_transport", lambda **kw: fetched.append(kw))
    install_mod.install(["activemq-amqp"], progress=lambda m: None,
                        run=lambda *a, **k: pytest.fail("no apt-get for a tool"))
    assert len(fetched) == 1


def test_targets_install_names_an_unknown_target():
    with pytest.raises(install_mod.InstallError, match=r"\['nope'\].*activemq-amqp"):
        install_mod.install(["nope"])


# ---------------------------------------------------------------- wiring: launcher and target


def test_the_launcher_adds_the_connector_and_the_jars(tmp_path, monkeypatch):
    from conformance.targets.activemq import process as launcher

    jars = [str(tmp_path / "activemq-amqp-5.17.2.jar"), str(tmp_path / "proton-j-0.33.10.jar")]
    monkeypatch.setattr(launcher, "_amqp_jars", lambda: jars)
    process = launcher.ActiveMQProcess(tmp_path / "w", amqp=True)
    process.amqp_port = 5999
    assert '<transportConnector name="amqp" uri="amqp://127.0.0.1:5999?transport.transformer=jms"/>' in process.render_config()
    assert process._classpath().split(":")[1:] == jars
    plain = launcher.ActiveMQProcess(tmp_path / "p")
    assert "amqp" not in plain.render_config() and plain._classpath() == str(tmp_path / "p" / "conf")


def test_the_container_launcher_refuses_amqp(tmp_path):
    from conformance.targets.activemq.container import ActiveMQContainer

    with pytest.raises(ValueError, match="image has no AMQP transport"):
        ActiveMQContainer(tmp_path, amqp=True)


@pytest.mark.parametrize("transport", [(True, ""), (False, "not installed (x); run `brokerconf targets install activemq-amqp`")])
def test_the_process_target_offers_amqp_only_with_the_transport(monkeypatch, transport):
    from conformance.targets.activemq import launch_modes, target as activemq_target

    monkeypatch.setattr(launch_modes, "activemq_amqp_available", lambda: transport)  # the process mode asks it
    target = activemq_target.ActiveMQTarget(launch="process", process_check=lambda: (True, ""))
    assert ("protocol.amqp" in target.capabilities()) is transport[0]
    assert target.why_missing("protocol.amqp") == (transport[1] or None)
    assert target.capability_requirements["protocol.amqp"] == "activemq-amqp"


def test_the_container_target_never_offers_amqp(monkeypatch):
    from conformance.targets.activemq import launch_modes, target as activemq_target

    monkeypatch.setattr(launch_modes, "activemq_amqp_available", lambda: (True, ""))  # even were it installed
    target = activemq_target.ActiveMQTarget(launch="container", container_check=lambda: (True, ""))
    assert "protocol.amqp" not in target.capabilities()
    assert "image has no AMQP transport" in target.why_missing("protocol.amqp")
    assert target.capability_requirements == {}


TOY_SUITE = '''
import pytest

pytest_plugins = ["pytester"]

@pytest.mark.protocols("amqp")
def test_amqp_case(broker, client):
    raise AssertionError("must not run: the transport is not installed")
'''


@pytest.mark.parametrize("required", [False, True])
def test_a_missing_transport_skips_unless_required(pytester, monkeypatch, required):
    from conformance import requirements
    from conformance.targets.activemq.process import activemq_available

    ok, reason = activemq_available()
    if not ok:
        requirements.skip_or_fail("activemq", reason)
    monkeypatch.setenv("BROKERCONF_TOOLS_DIR", str(pytester.path / "no-tools"))  # nothing fetched there
    if required:
        monkeypatch.setenv(requirements.ENV, "activemq-amqp")
    else:
        monkeypatch.delenv(requirements.ENV, raising=False)
    pytester.makepyfile(test_toy=TOY_SUITE)
    # a subprocess: the plugin's targets read the tools directory when imported
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "--target", "activemq:process")
    if required:
        result.assert_outcomes(errors=1)  # fails at set-up, like a required target that is missing
        result.stdout.fnmatch_lines(["*activemq-amqp is required here*AMQP transport is not installed*"])
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*lacks protocol.amqp*AMQP transport is not installed*"])


def test_activemq_handles_nack_amqp_with_rejected_launched_or_external():
    from conformance.scenario import DEFAULT_SCENARIO
    from conformance.targets.activemq.target import ActiveMQHandle
    from conformance.targets.external import ExternalHandle

    assert ActiveMQHandle.client_options == {"amqp": {"nack_outcome": "rejected"}}
    external = ExternalHandle("staging", "activemq", "127.0.0.1", {"amqp": 5672}, frozenset(), DEFAULT_SCENARIO,
                              (None, None))
    assert external.client_options == ActiveMQHandle.client_options
    other = ExternalHandle("x", "artemis", "127.0.0.1", {"amqp": 5672}, frozenset(), DEFAULT_SCENARIO, (None, None))
    assert other.client_options == {}


def test_the_amqp_adapter_names_a_bad_nack_outcome():
    from conformance.clients.amqp_client import AmqpClient

    with pytest.raises(ValueError, match="nack_outcome must be one of"):
        AmqpClient("127.0.0.1", 1, nack_outcome="released")
