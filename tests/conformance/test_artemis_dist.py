"""The Artemis distribution cache: fetched once with Maven, verified against the pin, re-used."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.targets.artemis import dist as artemis_dist


def _archive_bytes(version: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"#!/bin/sh\necho artemis\n"
        info = tarfile.TarInfo(f"apache-artemis-{version}/bin/artemis")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FakeMaven:
    """Stands in for `mvn dependency:copy`: writes the archive into -DoutputDirectory."""

    def __init__(self, payload: bytes, name: str) -> None:
        self.payload, self.name, self.calls = payload, name, []

    def __call__(self, command, **kwargs):
        self.calls.append(command)
        out = Path(next(a for a in command if a.startswith("-DoutputDirectory=")).split("=", 1)[1])
        (out / self.name).write_bytes(self.payload)
        return subprocess.CompletedProcess(command, 0, stdout="")


def test_pin_is_read_from_pins_toml():
    p = artemis_dist.pin()
    assert p.coordinates == f"org.apache.activemq:apache-artemis:{p.version}:tar.gz:bin"
    assert len(p.sha512) == 128


def test_fetches_verifies_unpacks_once_then_reuses(tmp_path):
    payload = _archive_bytes("9.9.9")
    p = replace(artemis_dist.pin(), version="9.9.9", sha512=hashlib.sha512(payload).hexdigest())
    mvn = FakeMaven(payload, p.archive_name)
    messages = []
    home = artemis_dist.ensure_distribution(tmp_path, run=mvn, progress=messages.append, p=p)
    assert (home / "bin" / "artemis").stat().st_mode & 0o111, "the launcher script keeps its exec bit"
    assert artemis_dist.installed(tmp_path, p)[0]
    assert len(mvn.calls) == 1 and f"-Dartifact={p.coordinates}" in mvn.calls[0]
    assert any("downloading" in m for m in messages)
    again = artemis_dist.ensure_distribution(tmp_path, run=mvn, progress=messages.append, p=p)
    assert again == home and len(mvn.calls) == 1, "a verified distribution is re-used, not fetched again"


def test_digest_mismatch_is_refused_and_moved_aside(tmp_path):
    payload = _archive_bytes("9.9.9")
    p = replace(artemis_dist.pin(), version="9.9.9", sha512="0" * 128)
    with pytest.raises(artemis_dist.ArtemisDistError, match="does not match the pin"):
        artemis_dist.ensure_distribution(tmp_path, run=FakeMaven(payload, p.archive_name), progress=lambda m: None,
                                         p=p)
    ok, reason = artemis_dist.installed(tmp_path, p)
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
    artemis_dist.ensure_distribution(tmp_path, run=FakeMaven(payload, p.archive_name), progress=lambda m: None, p=p)
    ok, reason = artemis_dist.installed(tmp_path, replace(p, sha512="1" * 128))
    assert not ok and "pinned sha512" in reason
