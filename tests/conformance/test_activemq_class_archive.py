"""The ActiveMQ JVM on the application class path with its class-data archive
(conformance/targets/activemq/class_path.py, class_archive.py, process.py's `build_command`): the
class path's order and main class, the archive's options only once it is made and while use is on,
a dump launch on the base class path alone, a key that follows the jars, and a real launch that
maps the archive the set-up made and serves."""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

import pytest

import conformance.targets.activemq.class_archive as making
import conformance.targets.activemq.class_path as class_path_mod
import conformance.targets.activemq.process as amq_mod
from conformance.targets import install as install_mod
from conformance.requirements import skip_or_fail
from conformance.targets.activemq.class_path import MAIN_CLASS, base_class_path, class_archive
from conformance.targets.activemq.process import (
    JDBC_JARS,
    JOURNALED_JDBC_JARS,
    MQTT_JARS,
    ActiveMQProcess,
    JdbcStore,
    activemq_available,
    activemq_mqtt_available,
    installed_class_archive,
)
from conformance.targets.runtime.class_archive import USE_ENV

AMQP_JARS = ["/tools/activemq-amqp.jar", "/tools/proton-j.jar"]


def _write(path: Path, content: bytes = b"jar") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _fake_home(root: Path) -> Path:
    """An installation laid out like Debian's, its names out of order on purpose."""
    for name in ("bin/activemq.jar", "lib/activemq-stomp.jar", "lib/activemq-broker.jar", "lib/activemq-rar.txt",
                 "lib/optional/xbean-spring.jar", "lib/optional/commons-pool2.jar"):
        _write(root / name)
    return root


@pytest.fixture
def installation(tmp_path, monkeypatch):
    """Launches of a fake installation, their archives in a directory of the test's own."""
    home = _fake_home(tmp_path / "activemq")
    java = _write(tmp_path / "jdk" / "bin" / "java")
    monkeypatch.setattr(amq_mod, "ACTIVEMQ_HOME", home)
    monkeypatch.setattr(amq_mod, "find_java", lambda: str(java))
    monkeypatch.setattr(class_path_mod, "find_java", lambda: str(java))
    monkeypatch.setattr(amq_mod, "_amqp_jars", lambda: list(AMQP_JARS))
    real = amq_mod.class_archive
    monkeypatch.setattr(amq_mod, "class_archive",
                        lambda activemq_home: dataclasses.replace(real(activemq_home), directory=tmp_path / "archives"))
    monkeypatch.delenv(USE_ENV, raising=False)
    return home


def _option(command: list[str], prefix: str) -> str | None:
    found = [arg for arg in command if arg.startswith(prefix)]
    assert len(found) <= 1, found
    return found[0][len(prefix):] if found else None


def _class_path(command: list[str]) -> list[str]:
    return command[command.index("-cp") + 1].split(os.pathsep)


def test_every_jar_is_on_the_class_path_and_console_main_runs_directly(installation, tmp_path):
    journal = JdbcStore("jdbc:postgresql://h/db", "u", "p", journal_directory=str(tmp_path / "journal"))
    process = ActiveMQProcess(tmp_path / "w", mqtt=True, amqp=True, persistent=True, jdbc=journal)
    command = process.build_command()
    share = amq_mod.JAVA_SHARE
    launch_jars = [*(str(share / jar) for jar, _ in MQTT_JARS), *AMQP_JARS,
                   *(str(share / jar) for jar, _ in JDBC_JARS), *(str(share / jar) for jar, _ in JOURNALED_JDBC_JARS)]
    assert _class_path(command) == [
        str(installation / "bin/activemq.jar"),
        str(installation / "lib/activemq-broker.jar"), str(installation / "lib/activemq-stomp.jar"),
        str(installation / "lib/optional/commons-pool2.jar"), str(installation / "lib/optional/xbean-spring.jar"),
        *launch_jars,
    ], "activemq.jar, lib and lib/optional sorted by name, then this launch's jars"
    assert "-jar" not in command
    assert command[command.index("-cp") + 2:] == [MAIN_CLASS, "start", f"xbean:file:{process.config_path}"]
    # console.Main's own loader is still built from activemq.classpath: the conf directory first
    assert _option(command, "-Dactivemq.classpath=") == os.pathsep.join([str(tmp_path / "w" / "conf"), *launch_jars])


def test_a_plain_launch_adds_no_transport_jars(installation, tmp_path):
    command = ActiveMQProcess(tmp_path / "w").build_command()
    assert _class_path(command) == [str(jar) for jar in base_class_path(installation)]
    assert _option(command, "-Dactivemq.classpath=") == str(tmp_path / "w" / "conf")


def test_the_archive_is_mapped_only_once_made_and_while_use_is_on(installation, tmp_path, monkeypatch):
    process = ActiveMQProcess(tmp_path / "w", amqp=True)
    assert _option(process.build_command(), "-XX:SharedArchiveFile=") is None, "no archive made yet"
    archive = installed_class_archive()
    _write(archive.path, b"classes")
    command = process.build_command()
    assert _option(command, "-XX:SharedArchiveFile=") == str(archive.path)
    assert command.index(f"-XX:SharedArchiveFile={archive.path}") < command.index("-cp")
    monkeypatch.setenv(USE_ENV, "0")
    assert _option(process.build_command(), "-XX:SharedArchiveFile=") is None


def test_a_dump_launch_writes_the_archive_on_the_base_class_path_alone(installation, tmp_path):
    staging = tmp_path / "staging.jsa"
    _write(installed_class_archive().path, b"an older archive")  # a dump never maps one
    command = ActiveMQProcess(tmp_path / "w", amqp=True, class_archive_dump=staging).build_command()
    assert _option(command, "-XX:ArchiveClassesAtExit=") == str(staging)
    assert _option(command, "-XX:SharedArchiveFile=") is None
    assert _class_path(command) == [str(jar) for jar in base_class_path(installation)], \
        "so the archive maps under every launch's class path, which starts with the base"
    assert _option(command, "-Dactivemq.classpath=").split(os.pathsep)[1:] == AMQP_JARS, \
        "the AMQP transport is loaded by console.Main's own loader instead"


def test_a_dump_launch_cannot_serve_mqtt(tmp_path):
    with pytest.raises(ValueError, match="cannot serve MQTT"):
        ActiveMQProcess(tmp_path / "w", mqtt=True, class_archive_dump=tmp_path / "staging.jsa")


def test_the_key_follows_the_base_jars_and_the_java(installation, tmp_path, monkeypatch):
    key = class_archive(installation).key
    assert class_archive(installation).key == key, "nothing changed, same archive"
    _write(installation / "lib/activemq-rar.txt", b"not a jar on the class path")
    assert class_archive(installation).key == key
    broker_jar = installation / "lib/activemq-broker.jar"
    _write(broker_jar, b"an upgraded jar")
    upgraded = class_archive(installation).key
    assert upgraded != key, "a jar's size changed"
    os.utime(broker_jar, ns=(1, 1))
    assert class_archive(installation).key != upgraded, "a jar's mtime changed"
    touched = class_archive(installation).key
    _write(installation / "lib/optional/added.jar")
    assert class_archive(installation).key != touched, "a jar was added"
    (installation / "lib/optional/added.jar").unlink()
    assert class_archive(installation).key == touched
    other_java = _write(tmp_path / "other-jdk" / "bin" / "java", b"another java")
    monkeypatch.setattr(class_path_mod, "find_java", lambda: str(other_java))
    assert class_archive(installation).key != touched, "another java for the broker"


def test_a_symlinked_jar_is_keyed_by_its_target(tmp_path):
    """Debian's lib/ entries link into /usr/share/java, which other packages upgrade."""
    home = _fake_home(tmp_path / "activemq")
    target = _write(tmp_path / "share" / "slf4j-api.jar", b"1.7")
    (home / "lib" / "slf4j-api.jar").symlink_to(target)
    key = class_archive(home).key
    _write(target, b"2.0.9")
    assert class_archive(home).key != key


def test_an_archive_already_made_is_not_made_again(tmp_path, monkeypatch):
    made = dataclasses.replace(installed_class_archive(), directory=tmp_path)
    _write(made.path, b"classes")
    monkeypatch.setattr(making, "activemq_available", lambda: (True, ""))
    monkeypatch.setattr(making, "installed_class_archive", lambda: made)

    def no_launch(*args, **kwargs):
        raise AssertionError("launched a broker though the archive was there")

    monkeypatch.setattr(making, "ActiveMQProcess", no_launch)
    assert making.ensure(progress=lambda m: None) == made.path


def test_no_archive_without_activemq_is_a_warning_of_the_set_up(monkeypatch, capsys):
    monkeypatch.setattr(making, "activemq_available", lambda: (False, "ActiveMQ Classic is not installed"))
    assert making.main([]) == 1
    assert "warning: no class archive for the ActiveMQ JVMs" in capsys.readouterr().err
    said: list[str] = []
    install_mod.make_activemq_class_archive(said.append)
    assert said == ["warning: no class archive for the ActiveMQ JVMs (they start more slowly): "
                    "ActiveMQ Classic is not installed"]


# ---------------------------------------------------------------- a real broker


@pytest.fixture
def real_activemq(monkeypatch):
    """The installed ActiveMQ, its launches mapping their class archive (use on)."""
    ok, reason = activemq_available()
    if not ok:
        skip_or_fail("activemq", reason)
    monkeypatch.delenv(USE_ENV, raising=False)


def _archive_elsewhere(directory: Path):
    """The installation's archive, kept in ``directory`` instead of the set-up's."""
    return dataclasses.replace(installed_class_archive(), directory=directory)


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        return {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}


@pytest.mark.real_broker
@pytest.mark.slow
def test_the_set_up_made_the_archive_and_an_mqtt_launch_maps_it_and_serves(tmp_path, monkeypatch):
    ok, reason = activemq_mqtt_available()
    if not ok:
        skip_or_fail("activemq", reason)
    monkeypatch.delenv(USE_ENV, raising=False)
    archive = installed_class_archive()
    if not archive.exists():
        skip_or_fail("activemq", f"the set-up made no class archive for the ActiveMQ JVMs ({archive.path}): "
                                 "run `python -m conformance.targets.activemq.class_archive`")
    # MQTT appends its jars to the class path the archive was dumped with, which it must still map
    with ActiveMQProcess(tmp_path / "amq", mqtt=True, jvm_heap_mb=256) as amq:
        assert str(archive.path.resolve()) in _mapped_files(amq.pid), "the JVM maps the archive"
        with socket.create_connection(("127.0.0.1", amq.mqtt_port), timeout=10) as s:
            # MQTT 3.1.1 CONNECT, clean session, keepalive 60, empty client id: the MQTT classes,
            # defined by the application loader, resolve mqtt-client's from the same class path
            s.sendall(bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 60, 0, 0]))
            assert s.recv(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted


@pytest.mark.real_broker
@pytest.mark.slow
def test_a_damaged_archive_costs_speed_never_a_start(real_activemq, tmp_path, monkeypatch):
    damaged = _archive_elsewhere(tmp_path / "archives")
    _write(damaged.path, b"not a class archive" * 100)
    monkeypatch.setattr(amq_mod, "installed_class_archive", lambda: damaged)
    with ActiveMQProcess(tmp_path / "amq", jvm_heap_mb=256) as amq:
        assert f"-XX:SharedArchiveFile={damaged.path}" in amq.command
        assert amq.serving() and str(damaged.path.resolve()) not in _mapped_files(amq.pid)


@pytest.mark.real_broker
@pytest.mark.slow
def test_ensure_dumps_an_archive_that_a_launch_with_amqp_maps(real_activemq, tmp_path, monkeypatch):
    fresh = _archive_elsewhere(tmp_path / "archives")
    monkeypatch.setattr(making, "installed_class_archive", lambda: fresh)
    monkeypatch.setattr(amq_mod, "installed_class_archive", lambda: fresh)
    said: list[str] = []
    assert making.ensure(progress=said.append) == fresh.path and fresh.exists()
    assert said[-1].startswith(f"made {fresh.path}")
    assert list(fresh.path.parent.iterdir()) == [fresh.path], "the staging file was renamed into place"
    amqp = amq_mod.activemq_amqp_available()[0]  # with it, AMQP's jars follow the dump's class path
    with ActiveMQProcess(tmp_path / "amq", amqp=amqp, jvm_heap_mb=256) as amq:
        assert str(fresh.path.resolve()) in _mapped_files(amq.pid)
