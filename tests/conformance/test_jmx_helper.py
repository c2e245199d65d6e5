"""The JMX helper is compiled once and started from its class (conformance/targets/activemq/jmx.py):
Java's source launcher compiled it again for every broker a run launched."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conformance.requirements import skip_or_fail
from conformance.targets.activemq import jmx
from conformance.targets.activemq.paths import find_java


@pytest.fixture
def tools_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(jmx, "TOOLS_DIR", tmp_path / "tools")
    jmx.compiled_helper.cache_clear()
    yield tmp_path / "tools"
    jmx.compiled_helper.cache_clear()


def _jdk_java() -> str:
    # a JDK is what builds the Java client driver: where CI requires java-clients, its absence fails
    java = find_java()
    if java is None or not Path(java).resolve().with_name("javac").is_file():
        skip_or_fail("java-clients", "no JDK (java with a javac beside it) on this machine")
    return java


def test_workers_compiling_at_once_leave_one_class_directory(tools_dir):
    java = _jdk_java()

    def compile_fresh(_):
        jmx.compiled_helper.cache_clear()  # each call as if from another process
        return jmx.compiled_helper(java)

    with ThreadPoolExecutor(4) as pool:
        found = set(pool.map(compile_fresh, range(4)))
    assert len(found) == 1 and None not in found, found
    classes = found.pop()
    assert (classes / "JmxQuery.class").is_file()
    assert [p.name for p in (tools_dir / "jmx-helper").iterdir()] == [classes.name]  # no scratch copies left
    command = jmx._helper_command("service:jmx:rmi:///jndi/rmi://127.0.0.1:1/jmxrmi")
    assert command[command.index("-cp") + 1:command.index("-cp") + 3] == [str(classes), "JmxQuery"]
    assert str(jmx.HELPER_SOURCE) not in command


def test_without_javac_the_source_launcher_runs_the_helper(tools_dir, tmp_path, monkeypatch):
    java = _jdk_java()
    jre = tmp_path / "jre" / "bin"
    jre.mkdir(parents=True)
    shutil.copy(Path(java).resolve(), jre / "java")  # a java with no javac beside it
    assert jmx.compiled_helper(str(jre / "java")) is None
    monkeypatch.setattr(jmx, "find_java", lambda: str(jre / "java"))
    command = jmx._helper_command("service:jmx:rmi:///jndi/rmi://127.0.0.1:1/jmxrmi")
    assert str(jmx.HELPER_SOURCE) in command and "-cp" not in command


def test_the_compiled_helper_starts_and_answers(tools_dir):
    # no JVM listens on port 1: the helper started from its class says it could not connect (a
    # class that did not start would give no answer line at all)
    java = _jdk_java()
    assert jmx.compiled_helper(java) is not None
    with pytest.raises(jmx.JmxError, match="could not connect"):
        jmx.query_once("service:jmx:rmi:///jndi/rmi://127.0.0.1:1/jmxrmi", "org.apache.activemq:*", timeout=60)
