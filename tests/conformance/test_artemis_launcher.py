"""End-to-end check of the local Artemis launcher (artemis_process / artemis_target): a real
broker from the pinned distribution, messages over STOMP, MQTT and AMQP, counters over Jolokia,
kill / restart, and cleanup by PID."""

from __future__ import annotations

import os
import time
import zipfile

import psutil
import pytest

from conformance.clients import connect
from conformance.clients.base import ConnectFailed
from conformance.requirements import skip_or_fail
from conformance.scenario import DestinationPolicy, Scenario
from conformance.targets.artemis.dist import installed
from conformance.targets.artemis import jolokia_agent
from conformance.targets.artemis.class_path import distribution_jars
from conformance.targets.artemis.process import ArtemisProcess, ArtemisStartError, class_archive
from conformance.targets.artemis.target import ArtemisTarget
from conformance.targets.base import TargetUnavailable
from machinery.waiting import poll

pytestmark = [pytest.mark.slow, pytest.mark.real_broker]


def _require() -> None:
    ok, reason = installed()
    if not ok:
        skip_or_fail("artemis", reason)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_not_installed_is_a_reason_not_a_crash():
    target = ArtemisTarget(name="artemis:process", launch="process",
                           process_check=lambda: (False, "the Artemis 2.40.0 distribution is not installed"))
    assert target.availability() == (False, "the Artemis 2.40.0 distribution is not installed")
    with pytest.raises(TargetUnavailable, match="not installed"):
        target.launch(Scenario("s"), None)


def test_broker_serves_three_protocols_counts_and_is_cleaned_up(tmp_path):
    _require()
    scenario = Scenario("launcher", users=(("alice", "alice-pw"),),
                        policies=(DestinationPolicy("queue://launch.grp.>", group_buckets=4),))
    handle = ArtemisTarget(name="artemis:process", launch="process").launch(scenario, tmp_path)
    pid = handle.pid
    try:
        assert set(handle.ports) == {"stomp", "mqtt", "amqp"} and handle.credentials == ("alice", "alice-pw")
        assert "<default-group-buckets>4</default-group-buckets>" in handle.config_text()
        login = dict(login="alice", passcode="alice-pw")
        # STOMP -> STOMP on a queue, with the counters read back over Jolokia
        stomp = connect(handle.host, handle.ports["stomp"], "stomp", **login)
        for i in range(3):
            stomp.send("queue://launch.q", f"m{i}", persistent=True)
        before = handle.destination_counters("queue://launch.q")
        assert (before.enqueued, before.dequeued, before.consumers) == (3, 0, 0), before
        assert before.raw["MessageCount"] == 3
        sub = stomp.subscribe("queue://launch.q", ack="client-individual")
        got = sub.receive_n(3, timeout=10)
        assert [m.text for m in got] == ["m0", "m1", "m2"]
        for m in got:
            sub.ack(m)
        after = poll(lambda: handle.destination_counters("queue://launch.q"), lambda c: c.dequeued >= 3,
                     timeout=10, interval=0.2)
        assert (after.enqueued, after.dequeued, after.consumers) == (3, 3, 1), after
        assert after.raw["MessageCount"] == 0 and after.raw["DeliveringCount"] == 0
        assert handle.destination_counters("queue://launch.never-used") is None
        # everything the broker listens on (acceptors, the Jolokia web server) is on loopback
        pids = {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
        listening = [c.laddr for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.pid in pids]
        assert len(listening) >= 5 and all(a.ip in ("127.0.0.1", "::ffff:127.0.0.1") for a in listening), listening
        # AMQP -> STOMP and MQTT -> MQTT
        amqp = connect(handle.host, handle.ports["amqp"], "amqp", **login)
        amqp.send("queue://launch.q", "from-amqp")
        assert sub.receive(10).text == "from-amqp"
        mqtt = connect(handle.host, handle.ports["mqtt"], "mqtt", **login)
        msub = mqtt.subscribe("topic://launch.t")
        mqtt.send("topic://launch.t", "from-mqtt")
        assert msub.receive(10).text == "from-mqtt"
        for c in (stomp, amqp, mqtt):
            c.close()
        # a wrong password is refused: the scenario asked for login
        with pytest.raises(ConnectFailed, match="refused CONNECT"):  # the broker's ERROR, not a dead port
            connect(handle.host, handle.ports["stomp"], "stomp", login="alice", passcode="wrong")
        # kill (crash) and restart on the same ports with the same journal
        ports = dict(handle.ports)
        stomp = connect(handle.host, handle.ports["stomp"], "stomp", **login)
        stomp.send("queue://launch.keep", "survives", persistent=True)
        stomp.close()
        handle.kill()
        assert _gone(pid), f"Artemis JVM {pid} still alive after kill()"
        handle.restart()
        assert handle.ports == ports and handle.pid != pid
        pid = handle.pid
        stomp = connect(handle.host, handle.ports["stomp"], "stomp", **login)
        assert stomp.subscribe("queue://launch.keep").receive(10).text == "survives"
        stomp.close()
        # the log is kept across the restart as evidence: both runs are in it
        log = handle.log_tail(5000)
        assert log.count("--- brokerconf: starting") == 2 and log.count("AMQ221007") == 2, log[-2000:]
    finally:
        handle.stop()
    assert _gone(pid), f"Artemis JVM {pid} still alive after stop()"
    children = [p for p in psutil.process_iter(["pid", "cmdline"])
                if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not children, f"processes of this broker left behind: {[p.info for p in children]}"


def test_a_jvm_that_exits_fails_fast_with_its_log(tmp_path):
    _require()
    broker = ArtemisProcess(tmp_path / "bad", Scenario("bad"), jvm_heap_mb=384)
    broker._created = False
    # an impossible heap makes the JVM exit at once: the start must say so, not wait out its timeout
    broker.jvm_heap_mb = 1 << 30
    started = time.monotonic()
    with pytest.raises(ArtemisStartError, match="exited with code"):
        broker.start(timeout=120)
    assert time.monotonic() - started < 100
    assert not broker.running and os.path.exists(broker.log_path)


def test_the_brokers_classes_come_from_the_application_class_path_and_its_archive(tmp_path):
    """artemis/class_path.py: the JVM itself reports the jars on its class path (the launcher script
    passes two -classpath options; the last must win), the set-up's archive is mapped, and no jar
    holds a file of the instance's etc that the boot loader would have found there first."""
    _require()
    broker = ArtemisProcess(tmp_path / "cp", Scenario("cp"), jvm_heap_mb=256)
    archive = class_archive(broker.artemis_home)
    if not archive.exists():  # made at set-up (scripts/bootstrap.sh, `brokerconf targets install artemis`)
        skip_or_fail("artemis", f"no class archive {archive.path}: run python -m conformance.targets.artemis.class_archive")
    broker.start(timeout=120)
    try:
        reported = broker.jolokia({"type": "read", "mbean": "java.lang:type=Runtime", "attribute": "ClassPath"})
        agent = jolokia_agent.jar(broker.artemis_home.parent.parent)
        assert reported.split(":") == [str(j) for j in [*distribution_jars(broker.artemis_home), agent]]
        with open(f"/proc/{broker.pid}/maps", encoding="utf-8") as maps:
            assert str(archive.path) in maps.read(), "the JVM did not map the class archive"
    finally:
        broker.stop()
    etc_names = {p.name for p in (broker.instance / "etc").iterdir()}
    for jar in distribution_jars(broker.artemis_home):
        with zipfile.ZipFile(jar) as z:
            assert not etc_names & set(z.namelist()), f"{jar} holds a file of the instance's etc"
