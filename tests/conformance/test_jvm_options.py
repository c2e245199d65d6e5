"""The broker JVMs' quick start (conformance/targets/runtime/jvm.py)."""

from conformance.targets.activemq.process import ActiveMQProcess
from conformance.targets.runtime import jvm


def test_broker_jvms_start_quick_unless_turned_off(monkeypatch):
    monkeypatch.delenv(jvm.QUICK_START_ENV, raising=False)
    assert jvm.quick_start_options() == ["-XX:TieredStopAtLevel=1"]
    monkeypatch.setenv(jvm.QUICK_START_ENV, "0")
    assert jvm.quick_start_options() == []


def test_benchmarks_get_the_full_jit(monkeypatch):
    monkeypatch.delenv(jvm.QUICK_START_ENV, raising=False)
    jvm.full_jit_for_benchmarks()
    assert jvm.quick_start_options() == []


def test_the_activemq_command_line_carries_the_quick_start(monkeypatch, tmp_path):
    monkeypatch.delenv(jvm.QUICK_START_ENV, raising=False)
    process = ActiveMQProcess(tmp_path)
    try:
        command = process.build_command()
    except Exception as exc:  # noqa: BLE001 - no Java or ActiveMQ here: nothing to build
        import pytest

        pytest.skip(f"cannot build the ActiveMQ command here: {exc}")
    assert "-XX:TieredStopAtLevel=1" in command
    monkeypatch.setenv(jvm.QUICK_START_ENV, "0")
    assert "-XX:TieredStopAtLevel=1" not in process.build_command()
