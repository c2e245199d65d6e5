"""The Artemis distribution cache: fetched once with Maven, verified against the pin, re-used; the
Jolokia agent a local launch reads its counters through comes with it."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.targets.artemis import dist as artemis_dist
from conformance.targets.artemis import jolokia_agent

AGENT_JAR = b"PK\x03\x04 a stand-in for the agent's jar"
#: the pinned agent, with the stand-in's digest
AGENT = replace(jolokia_agent.pin(), sha512=hashlib.sha512(AGENT_JAR).hexdigest())


def _archive_bytes(version: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"#!/bin/sh\necho artemis\n"
        info = tarfile.TarInfo(f"apache-artemis-{version}/bin/artemis")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FakeMaven:
    """Stands in for `mvn dependency:copy`: writes the archive (or, asked for the agent, its jar)
    into -DoutputDirectory."""

    def __init__(self, payload: bytes, name: str, agent: bytes = AGENT_JAR) -> None:
        self.files = {name: payload, AGENT.file_name: agent}
        self.calls = []

    def __call__(self, command, **kwargs):
        self.calls.append(command)
        out = Path(next(a for a in command if a.startswith("-DoutputDirectory=")).split("=", 1)[1])
        name = AGENT.file_name if f"-Dartifact={AGENT.coordinates}" in command else next(
            n for n in self.files if n != AGENT.file_name)
        (out / name).write_bytes(self.files[name])
        return subprocess.CompletedProcess(command, 0, stdout="")

    @property
    def archive_calls(self) -> list:
        return [c for c in self.calls if f"-Dartifact={AGENT.coordinates}" not in c]


def test_pin_is_read_from_pins_toml():
    p = artemis_dist.pin()
    assert p.coordinates == f"org.apache.activemq:apache-artemis:{p.version}:tar.gz:bin"
    assert len(p.sha512) == 128


def test_fetches_verifies_unpacks_once_then_reuses(tmp_path):
    payload = _archive_bytes("9.9.9")
    p = replace(artemis_dist.pin(), version="9.9.9", sha512=hashlib.sha512(payload).hexdigest())
    mvn = FakeMaven(payload, p.archive_name)
    messages = []
    home = artemis_dist.ensure_distribution(tmp_path, run=mvn, progress=messages.append, p=p, agent=AGENT)
    assert (home / "bin" / "artemis").stat().st_mode & 0o111, "the launcher script keeps its exec bit"
    assert artemis_dist.installed(tmp_path, p, AGENT)[0]
    assert len(mvn.archive_calls) == 1 and f"-Dartifact={p.coordinates}" in mvn.archive_calls[0]
    assert len(mvn.calls) == 2, "the agent is fetched beside the distribution"
    assert jolokia_agent.jar(tmp_path, AGENT).read_bytes() == AGENT_JAR
    assert any("downloading" in m for m in messages)
    again = artemis_dist.ensure_distribution(tmp_path, run=mvn, progress=messages.append, p=p, agent=AGENT)
    assert again == home and len(mvn.calls) == 2, "a verified distribution and agent are re-used, not fetched again"


def test_a_distribution_without_its_agent_is_not_installed(tmp_path):
    payload = _archive_bytes("9.9.9")
    p = replace(artemis_dist.pin(), version="9.9.9", sha512=hashlib.sha512(payload).hexdigest())
    artemis_dist.ensure_distribution(tmp_path, run=FakeMaven(payload, p.archive_name), progress=lambda m: None, p=p,
                                     agent=AGENT)
    jolokia_agent.jar(tmp_path, AGENT).unlink()
    ok, reason = artemis_dist.installed(tmp_path, p, AGENT)
    assert not ok and "Jolokia's JVM agent" in reason and "brokerconf targets install artemis" in reason


def test_an_agent_jar_that_does_not_match_its_pin_is_refused_and_moved_aside(tmp_path):
    with pytest.raises(jolokia_agent.JolokiaAgentError, match="does not match the pin"):
        jolokia_agent.ensure(tmp_path, run=FakeMaven(b"", "unused", agent=b"tampered"), progress=lambda m: None,
                             p=AGENT)
    assert not jolokia_agent.installed(tmp_path, AGENT)[0]
    assert jolokia_agent.jar(tmp_path, AGENT).with_name(AGENT.file_name + ".bad").read_bytes() == b"tampered"


def test_the_agent_option_serves_loopback_and_authenticates_through_the_broker_s_realm():
    option = jolokia_agent.java_option(Path("/x/agent.jar"), host="127.0.0.1", port=18161)
    assert option.startswith("-javaagent:/x/agent.jar=")
    settings = dict(pair.split("=", 1) for pair in option.split("=", 1)[1].split(","))
    assert settings == {"host": "127.0.0.1", "port": "18161", "authMode": "jaas", "realm": "activemq",
                        "discoveryEnabled": "false"}


def test_digest_mismatch_is_refused_and_moved_aside(tmp_path):
    payload = _archive_bytes("9.9.9")
    p = replace(artemis_dist.pin(), version="9.9.9", sha512="0" * 128)
    with pytest.raises(artemis_dist.ArtemisDistError, match="does not match the pin"):
        artemis_dist.ensure_distribution(tmp_path, run=FakeMaven(payload, p.archive_name), progress=lambda m: None,
                                         p=p, agent=AGENT)
    ok, reason = artemis_dist.installed(tmp_path, p, AGENT)
    assert not ok and "not installed" in reason
    assert (tmp_path / "artemis" / (p.archive_name + ".bad")).is_file()


def test_maven_failure_names_the_command(tmp_path):
    p = replace(artemis_dist.pin(), version="9.9.9")

    def failing(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, stdout="[ERROR] could not resolve")

    with pytest.raises(artemis_dist.ArtemisDistError, match="(?s)dependency:copy.*could not resolve"):
        artemis_dist.ensure_distribution(tmp_path, run=failing, progress=lambda m: None, p=p)


def test_pin_change_makes_the_marker_stale(tmp_path):
    payload = _archive_bytes("9.9.9")
    p = replace(artemis_dist.pin(), version="9.9.9", sha512=hashlib.sha512(payload).hexdigest())
    artemis_dist.ensure_distribution(tmp_path, run=FakeMaven(payload, p.archive_name), progress=lambda m: None, p=p,
                                     agent=AGENT)
    ok, reason = artemis_dist.installed(tmp_path, replace(p, sha512="1" * 128), AGENT)
    assert not ok and "pinned sha512" in reason
