"""Class-data archives for the broker JVMs (conformance/targets/runtime/class_archive.py): keyed by
what the archived classes depend on, used only when made, published atomically; and for Artemis,
made by the set-up and mapped by every local launch, while a broken archive never stops a start."""

from __future__ import annotations

import time

import pytest

from conformance.requirements import skip_or_fail
from conformance.scenario import Scenario
from conformance.targets.artemis.dist import installed
from conformance.targets.artemis.process import ArtemisProcess, class_archive
from conformance.targets.runtime import class_archive as archives
from conformance.targets.runtime.class_archive import ClassArchive


def test_the_key_follows_what_the_classes_depend_on_and_the_jdk(tmp_path, monkeypatch):
    one = ClassArchive("broker", {"home": "/a"}, directory=tmp_path)
    assert one.path == ClassArchive("broker", {"home": "/a"}, directory=tmp_path).path
    assert one.path != ClassArchive("broker", {"home": "/b"}, directory=tmp_path).path
    assert one.path != ClassArchive("broker", {"home": "/a"}, with_agent=True, directory=tmp_path).path
    with_this_jdk = one.path
    monkeypatch.setattr(archives, "java_identity", lambda: "/other/jdk/bin/java@1")
    assert ClassArchive("broker", {"home": "/a"}, directory=tmp_path).path != with_this_jdk, "another JDK, another key"


def test_an_archive_is_used_only_once_made_and_while_use_is_on(tmp_path, monkeypatch):
    archive = ClassArchive("broker", {"home": "/a"}, with_agent=True, directory=tmp_path)
    assert archive.use_options() == [], "no archive yet: the JVM starts without one"
    staging = archive.staging_path()
    assert staging.parent == tmp_path and staging != archive.staging_path(), "each dumping process has its own file"
    assert archive.dump_options(staging)[-1] == f"-XX:ArchiveClassesAtExit={staging}"
    staging.write_bytes(b"classes")
    assert archive.publish(staging) and not staging.exists()
    assert archive.use_options() == ["-XX:+UnlockDiagnosticVMOptions", "-XX:+AllowArchivingWithJavaAgent",
                                     f"-XX:SharedArchiveFile={archive.path}"]
    monkeypatch.setenv(archives.USE_ENV, "0")
    assert archive.use_options() == []


def test_a_jvm_that_wrote_nothing_publishes_nothing(tmp_path):
    archive = ClassArchive("broker", directory=tmp_path)
    empty = archive.staging_path()
    empty.write_bytes(b"")
    assert not archive.publish(empty) and not empty.exists() and not archive.exists()
    assert not archive.publish(archive.staging_path())


def _require_artemis() -> None:
    ok, reason = installed()
    if not ok:
        skip_or_fail("artemis", reason)


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        return {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}


def _java_pid(broker: ArtemisProcess) -> int:
    """The broker's JVM (bin/artemis execs java, so the launched PID is the JVM's)."""
    with open(f"/proc/{broker.pid}/cmdline", "rb") as f:
        assert b"java" in f.read().split(b"\0")[0], "bin/artemis exec'd java in place"
    return broker.pid


@pytest.mark.slow
@pytest.mark.real_broker
def test_the_set_up_made_the_artemis_archive_and_a_launch_maps_it(tmp_path):
    _require_artemis()
    archive = class_archive(ArtemisProcess(tmp_path / "probe", Scenario(name="probe")).artemis_home)
    if not archive.exists():
        skip_or_fail("artemis", f"the set-up made no class archive for the Artemis JVMs ({archive.path}): "
                                "run `python -m conformance.targets.artemis.class_archive`")
    broker = ArtemisProcess(tmp_path / "broker", Scenario(name="archive", protocols=("stomp",)), jvm_heap_mb=128)
    broker.start(timeout=120)
    try:
        assert str(archive.path) in _mapped_files(_java_pid(broker)), "the JVM maps the archive"
        assert broker.jolokia({"type": "read", "mbean": f'org.apache.activemq.artemis:broker="{broker.name}"',
                               "attribute": "Version"}), "and serves its counters through the agent"
    finally:
        broker.stop()


@pytest.mark.slow
@pytest.mark.real_broker
def test_a_damaged_archive_costs_speed_never_a_start(tmp_path, monkeypatch):
    _require_artemis()
    home = ArtemisProcess(tmp_path / "probe", Scenario(name="probe")).artemis_home
    damaged = ClassArchive("artemis", class_archive(home).depends_on, with_agent=True, directory=tmp_path / "archives")
    damaged.path.parent.mkdir()
    damaged.path.write_bytes(b"not a class archive" * 100)
    monkeypatch.setattr("conformance.targets.artemis.process.class_archive", lambda artemis_home: damaged)
    broker = ArtemisProcess(tmp_path / "broker", Scenario(name="damaged", protocols=("stomp",)), jvm_heap_mb=128)
    began = time.monotonic()
    broker.start(timeout=120)
    try:
        assert broker.serving(), f"started {time.monotonic() - began:.1f} s after launch with a damaged archive"
        assert str(damaged.path) not in _mapped_files(_java_pid(broker))
    finally:
        broker.stop()
