"""Chaos experiment 2 (shared-store master/slave, master killed) with ActiveMQ in containers and
the KahaDB directory on a shared Docker volume (issue 8, "Tests and CI").

Fast tests: `ActiveMQTarget.launch_shared_store` in container mode builds a `SharedVolumePair`
(its start faked), and `ContainerSharedStoreNode` answers ``pid`` / ``running`` from a pidfd
(a fake engine and a child process stand in for the container).

Slow test: ``brokerconf chaos run chaos/experiments/activemq-shared-store-failover.toml --target
activemq:container --duration 20``; the verdict must be valid with at least one kill, nothing
lost and the failover downtime measured (A-MQ fault-tolerant messaging guide, 3.1: the slave
takes the store's lock and serves what the master had accepted).

Slow test on Artemis in a container (issue 16): experiment 1 (chaos/experiments/reference-kill-
restart.toml: one broker SIGKILLed and restarted under persistent queue load, failover clients)
with ``--target`` the Artemis container target. The shared-store experiment does not apply: it is
ActiveMQ Classic's KahaDB master/slave."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.requirements import skip_or_fail
from conformance.scenario import Scenario
from conformance.targets.activemq import container_network as acn
from conformance.targets.activemq.target import ActiveMQTarget
from conformance.requirements import skip_or_fail
from machinery.docker_env import ACTIVEMQ_IMAGE, docker_client, image_available
from conformance.targets.artemis.dist import ARTEMIS_IMAGE
from conformance.targets.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "chaos" / "experiments" / "activemq-shared-store-failover.toml"
KILL_RESTART = ROOT / "chaos" / "experiments" / "reference-kill-restart.toml"
#: the target that runs Artemis in a container (plain "artemis" before the registry named launch modes)
ARTEMIS_CONTAINER = "artemis:container" if "artemis:container" in BUILTIN else "artemis"


def _container_target() -> ActiveMQTarget:
    return ActiveMQTarget(name="activemq:container", launch="container", process_check=lambda: (True, ""),
                          container_check=lambda: (True, ""))


# ---------------------------------------------------------------- without an engine


def test_container_mode_launches_a_shared_volume_pair(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(acn.SharedVolumePair, "start", lambda self, timeout=120: started.append(timeout))
    group = _container_target().launch_shared_store(Scenario(name="exp2", protocols=("stomp",)), tmp_path, nodes=2,
                                                    lock_keep_alive_period_ms=1500,
                                                    lock_acquire_sleep_interval_ms=700)
    assert isinstance(group, acn.SharedVolumePair) and len(started) == 1
    assert [n.name for n in group.nodes.values()] == ["A", "B"]
    assert all(isinstance(n, acn.ContainerSharedStoreNode) for n in group.nodes.values())
    for node in group.nodes.values():
        container = node.process
        assert (container.volume, container.image, container.stomp, container.mqtt) == \
               (group.volume_name, ACTIVEMQ_IMAGE, True, False)
        config = container.render_config()
        # the lock timings of the experiment reach every broker's activemq.xml
        assert 'lockKeepAlivePeriod="1500"' in config and 'lockAcquireSleepInterval="700"' in config, config
    assert group.volume_name.startswith("brokerconf-brokerconf-exp2-kahadb-")


def test_container_mode_refuses_policies_like_the_process_mode(tmp_path):
    from conformance.scenario import DestinationPolicy
    from conformance.targets.base import TargetUnavailable

    scenario = Scenario(name="p", protocols=("stomp",), policies=(DestinationPolicy(pattern="queue://>"),))
    with pytest.raises(TargetUnavailable, match="takes no destination policies"):
        _container_target().launch_shared_store(scenario, tmp_path)


class _FakeEngine:
    """containers.get(id).attrs["State"] as the engine reports it; counts the round trips."""

    def __init__(self, pid: int) -> None:
        self.state = {"Running": True, "Pid": pid}
        self.calls = 0

    def __call__(self):
        return self

    @property
    def containers(self):
        return self

    def get(self, cid):
        self.calls += 1
        return SimpleNamespace(attrs={"State": dict(self.state)})

    def close(self):
        pass


def test_container_node_pid_is_held_by_a_pidfd(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        engine = _FakeEngine(child.pid)
        monkeypatch.setattr(acn, "docker_client", engine)
        monkeypatch.setattr(acn, "_in_container", lambda pid, cid: pid == child.pid and cid == "c0ffee")
        node = acn.ContainerSharedStoreNode("A", SimpleNamespace(container_id="c0ffee"))
        assert node.pid == child.pid and node.running
        assert engine.calls == 1
        assert node.pid == child.pid and node.running  # answered from the pidfd: no engine round trip
        assert engine.calls == 1
        child.send_signal(signal.SIGKILL)
        child.wait()
        engine.state = {"Running": False, "Pid": 0}
        assert node.pid is None and not node.running  # the pidfd saw the exit; the engine agrees
        assert engine.calls >= 2
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_container_node_does_not_trust_a_pid_outside_its_container(monkeypatch):
    engine = _FakeEngine(1)  # e.g. a PID reused by a process of another cgroup
    monkeypatch.setattr(acn, "docker_client", engine)
    monkeypatch.setattr(acn, "_in_container", lambda pid, cid: False)
    node = acn.ContainerSharedStoreNode("B", SimpleNamespace(container_id="c0ffee"))
    assert node.pid is None and not node.running


# ---------------------------------------------------------------- experiment 2 in containers


def _volumes(prefix: str) -> set[str]:
    client = docker_client()
    try:
        return {v.name for v in client.volumes.list(filters={"label": "org.brokerconf.launcher=shared_volume_pair"})
                if v.name.startswith(prefix)}
    finally:
        client.close()


@pytest.mark.container
@pytest.mark.slow
@pytest.mark.timeout(600)  # two broker containers start, 20 s of load, a restart, the drain
def test_shared_store_failover_experiment_in_containers(tmp_path):
    ok, reason = image_available(ACTIVEMQ_IMAGE)
    if not ok:
        skip_or_fail("docker", reason)
    prefix = "brokerconf-brokerconf-activemq-shared-store-failover-kahadb-"
    before = _volumes(prefix)
    out = tmp_path / "out"
    result = subprocess.run(
        [str(Path(sys.executable).with_name("brokerconf")), "chaos", "run", str(EXPERIMENT),
         "--target", "activemq:container", "--duration", "20", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    verdicts = sorted(out.glob("*/verdict.json"))
    assert verdicts, f"no verdict (exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    verdict = json.loads(verdicts[-1].read_text())
    context = "\n".join(verdict.get("summary", [])) + "\n" + result.stdout[-2000:]
    assert verdict["target"] == "activemq:container" and verdict["run_stats"]["topology"] == "shared-store"
    assert verdict["valid"] is True, context
    assert result.returncode == 0, context
    assert verdict["run_stats"]["faults"] >= 1, context
    assert verdict["checks"]["total_queue"]["lost"] == [], context
    downtime = verdict["checks"]["failover_downtime"]
    kills = [f for f in downtime["faults"] if f["f"] == "kill"]
    assert kills and all(f["downtime_ms"] for f in kills), downtime
    assert downtime["summary"]["never_recovered"] == 0, downtime
    # the kill reached the container's JVM: clients saw their connections to it break
    history = [json.loads(line) for line in (verdicts[-1].parent / "history.jsonl").read_text().splitlines()]
    first_kill = min(f["start_ns"] for f in kills)
    broken = [e for e in history if e["process"] != "nemesis" and e["time"] > first_kill
              and e["type"] in ("info", "fail")]
    assert broken, "no client operation failed or went indeterminate after the kill: did the master die?"
    assert _volumes(prefix) - before == set(), "the experiment left its KahaDB volume behind"


def _artemis_containers(workdir_under: Path) -> set[str]:
    """Artemis containers whose launcher's workdir lies under ``workdir_under``: this test's own,
    not those another pytest-xdist worker's test started meanwhile (CI once counted two of those
    as left behind by this run; none was there after the run)."""
    from conformance.targets.artemis.container import LABEL  # noqa: PLC0415 - needs the docker SDK

    client = docker_client()
    try:
        # the SDK lists, then inspects each container; the run removes its containers meanwhile
        # (stop 36's CI: 404 on a container removed between the two), so a vanished one is skipped
        listed = client.containers.list(all=True, filters={"label": f"{LABEL}=artemis_container"},
                                        ignore_removed=True)
        return {c.id for c in listed
                if c.labels.get("org.brokerconf.workdir", "").startswith(str(workdir_under))}
    finally:
        client.close()


@pytest.mark.container
@pytest.mark.slow
@pytest.mark.timeout(600)  # one broker container, 20 s of load with two kill/restart cycles, the drain
def test_kill_restart_experiment_on_artemis_container(tmp_path):
    ok, reason = image_available(ARTEMIS_IMAGE)
    if not ok:  # build it with docker/build-images.sh
        skip_or_fail("docker", reason)
    # the run's temporary directory (its broker workdir) under tmp_path: its containers are told
    # apart from other tests' by their workdir label
    runtime = tmp_path / "tmp"
    runtime.mkdir()
    out = tmp_path / "out"
    run = subprocess.Popen(
        [str(Path(sys.executable).with_name("brokerconf")), "chaos", "run", str(KILL_RESTART),
         "--target", ARTEMIS_CONTAINER, "--duration", "20", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(runtime)}, start_new_session=True)
    seen: set[str] = set()
    try:
        stdout, stderr = "", ""
        deadline = time.monotonic() + 560
        while run.poll() is None and time.monotonic() < deadline:
            seen |= _artemis_containers(runtime)  # what the run's own containers look like
            time.sleep(1.0)
        stdout, stderr = run.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
    result = subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)
    assert seen, "setup: no container of this run was ever seen under its workdir label: the leak check would be blind"
    verdicts = sorted(out.glob("*/verdict.json"))
    assert verdicts, f"no verdict (exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    verdict = json.loads(verdicts[-1].read_text())
    context = "\n".join(verdict.get("summary", [])) + "\n" + result.stdout[-2000:]
    assert verdict["target"] == ARTEMIS_CONTAINER and verdict["run_stats"]["topology"] == "single"
    assert verdict["valid"] is True and result.returncode == 0, context
    assert verdict["run_stats"]["faults"] >= 1 and verdict["run_stats"]["sent_ok"] > 0, context
    assert verdict["checks"]["total_queue"]["lost"] == [], context
    kills = [f for f in verdict["checks"]["failover_downtime"]["faults"] if f["f"] == "kill"]
    assert kills and all(f["downtime_ms"] for f in kills), verdict["checks"]["failover_downtime"]
    assert _artemis_containers(runtime) == set(), "the experiment left its Artemis container behind"
