"""Cluster experiments (issue 19) up to and through the launch, without a cluster launcher: the
experiment files parse and describe the cluster the chapter's options say; a fake target that
declares ``topology.cluster`` gets `Topology(nodes, cluster=ClusterConnection(...))` through
``launch_topology`` and, for a link fault, a ``bridge_route`` putting the fault proxy in front of
each cluster link's peer. Its "cluster" is three reference broker processes that are not joined
(each node on its own): the run exercises the workload, the kill of a node, the cut of the
proxied links, the per-node drain and the cluster checkers end to end, but not clustering. The
real launchers (conformance/targets/artemis/cluster.py, reference/clustering.py) are another
helper's; where they are merged, the main job runs the same files on them."""

from __future__ import annotations

from pathlib import Path

import pytest

import chaos.experiment as experiment_module
from brokerconf.chaos_stage import MAIN_JOB_EXPERIMENTS, cluster_not_applicable
from chaos.experiment import run_experiment
from chaos.experiment_file import ExperimentError, load_experiment, with_overrides
from chaos.history import read_history
from machinery.faultproxy.client import ToxiproxyClient
from chaos.topology import topology_of
from conformance.scenario import Scenario
from conformance.targets.registry import resolve
from conformance.topology import Bridge, Topology
from reports.judge import judge_history

EXPERIMENTS = Path(experiment_module.__file__).parent / "experiments"
FILES = ("reference-cluster-redistribution.toml", "artemis-cluster-redistribution.toml",
         "reference-clustered-grouping.toml", "artemis-clustered-grouping.toml")


@pytest.mark.parametrize("name", FILES)
def test_cluster_experiments_describe_a_symmetric_cluster_with_the_chapters_options(name):
    exp = load_experiment(EXPERIMENTS / name)
    topology = topology_of(exp)
    # Artemis bridges dial the address a node announces, so the fault proxy fronts one link per
    # node (conformance/targets/artemis/cluster.py): its runs have two nodes, the reference's three
    nodes = ("A", "B") if name.startswith("artemis") else ("A", "B", "C")
    assert (topology.kind, topology.capability, topology.nodes) == ("cluster", "topology.cluster", nodes)
    assert topology.proxied == ("cluster",) and topology.persistent
    cluster = topology.cluster
    assert cluster.message_load_balancing == "ON_DEMAND" and cluster.connections is None
    assert len(cluster.links(topology.nodes)) == len(nodes) * (len(nodes) - 1)
    assert exp.checkers.redistribution and 20 <= exp.duration_s <= 30
    kinds = {(n.kind, n.link) for n in exp.nemesis}
    assert ("kill", "clients") in kinds and ("partition", "cluster") in kinds
    if "grouping" in name:
        assert cluster.grouping.local == "A" and cluster.redistribution_delay_ms == -1 and exp.checkers.group_pinning
        # every consumer's demand known before a group's first message, so groups spread over nodes
        assert exp.workload.producers_after_consumers_s == 2.0
    else:
        assert cluster.grouping is None and cluster.redistribution_delay_ms == 2000
        assert exp.workload.consumer_lifetime_s == [1.0, 3.0]


def test_every_cluster_experiment_is_in_the_main_job_on_its_broker():
    entries = {(f, target) for f, target, *_ in MAIN_JOB_EXPERIMENTS if "cluster" in f}
    assert entries == {(FILES[0], None), (FILES[2], None), (FILES[1], "artemis:process"),
                       (FILES[3], "artemis:process")}


@pytest.mark.parametrize("text, message", [
    ('[topology]\nkind = "cluster"\nnodes = 5', "2 to 4 brokers"),
    ('[topology]\nkind = "cluster"\nconsumer_nodes = ["Z"]', "consumer_nodes ['Z']"),
    ('[topology]\nkind = "cluster"\nmessage_load_balancing = "SOMETIMES"', "message_load_balancing"),
    ('[topology]\nkind = "cluster"\n[[nemesis]]\nkind = "partition"\nevery_s = 1', 'set link = "cluster"'),
    ('[[nemesis]]\nkind = "partition"\nlink = "cluster"\nevery_s = 1', "needs a cluster topology"),
    ('[workload]\nconsumer_lifetime_s = [1.0, 2.0]', "consumer churn"),
    ('[workload]\nproducers_after_consumers_s = 1.0', "producers_after_consumers_s needs a cluster"),
    ('[checkers]\ngroup_pinning = true', "judge cluster topologies"),
    ('[topology]\nkind = "cluster"\ngrouping_local = "A"', 'kind = "grouped"'),
])
def test_a_bad_cluster_experiment_is_refused_naming_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(f'name = "bad"\nduration_s = 5\n{text}\n')
    with pytest.raises(ExperimentError) as info:
        load_experiment(path)
    assert message in str(info.value)


class FakeClusterTarget:
    """Declares ``topology.cluster``; "launches" a cluster as one reference broker process per
    node (the harness can kill them), unjoined, and routes each cluster link as a launcher must."""

    name = "fake-cluster"

    def __init__(self, capabilities=("topology.cluster", "process.kill", "protocol.stomp")) -> None:
        self._capabilities = frozenset(capabilities)
        self.launched: list[Topology] = []
        self.routes: dict[tuple[str, str], tuple[str, int]] = {}

    def availability(self):
        return True, ""

    def capabilities(self):
        return self._capabilities

    def why_missing(self, capability):
        return "a fake without it"

    def launch_topology(self, topology, scenario: Scenario, workdir: Path, *, bridge_route=None):
        self.launched.append(topology)
        cluster = FakeCluster(topology, scenario, Path(workdir))
        if bridge_route is not None:
            for source, peer in topology.cluster.links(topology.nodes):
                host, port = cluster[peer].address("stomp")
                self.routes[(source, peer)] = bridge_route(Bridge(source, peer), host, port)
        return cluster


class FakeCluster:
    def __init__(self, topology, scenario, workdir: Path) -> None:
        self.topology = topology
        reference = resolve("reference:process")
        self.singles = {}
        try:
            for node in topology.nodes:
                self.singles[node] = reference.launch_topology(Topology(("A",)), scenario, workdir / node)
        except BaseException:
            self.stop()
            raise
        self.nodes = {node: single["A"] for node, single in self.singles.items()}

    def __getitem__(self, name):
        return self.nodes[name]

    formed = True  # what wait_formed answers
    waited: list = []

    def wait_formed(self, timeout):
        FakeCluster.waited.append(timeout)
        return FakeCluster.formed

    def addresses(self, protocol):
        return [self.nodes[n].address(protocol) for n in self.topology.nodes]

    def serving(self):
        return list(self.topology.nodes)

    def bridge_establishments(self):
        return 0

    def subscription_discards(self, destination):
        return None

    def log_tail(self, lines=40):
        return ""

    def stop(self):
        for single in self.singles.values():
            single.stop()


def test_a_target_without_topology_cluster_is_not_applicable_with_the_reason():
    exp = load_experiment(EXPERIMENTS / FILES[0])
    entry = cluster_not_applicable(exp, FakeClusterTarget(capabilities=("process.kill",)))
    assert entry["skipped"] is True and "valid" not in entry  # not a verdict: no run was judged
    assert "lacks topology.cluster" in entry["error"] and "a fake without it" in entry["error"]
    assert cluster_not_applicable(exp, FakeClusterTarget()) is None
    plain = load_experiment(EXPERIMENTS / "reference-kill-restart.toml")
    assert cluster_not_applicable(plain, FakeClusterTarget(capabilities=())) is None


@pytest.mark.slow
def test_redistribution_experiment_runs_through_the_launch_on_a_fake_cluster(tmp_path, monkeypatch):
    target = FakeClusterTarget()
    monkeypatch.setattr(experiment_module, "resolve", lambda name: target)
    exp = with_overrides(load_experiment(EXPERIMENTS / FILES[0]), duration_s=9, target="fake-cluster",
                         settings=["recovery_s=2", "nemesis.0.every_s=2", "nemesis.0.down_s=1",
                                   "nemesis.1.every_s=3", "nemesis.1.down_s=1", "workload.consumer_lifetime_s=[0.3, 0.8]"])
    proxies = {}
    real_stop = experiment_module.RunningTopology.stop

    def stop_and_look(self):  # the proxies as the run left them, before the proxy goes
        proxies.update({p["name"]: p for p in ToxiproxyClient(self.proxy.api_url).proxies().values()})
        real_stop(self)
    monkeypatch.setattr(experiment_module.RunningTopology, "stop", stop_and_look)
    FakeCluster.waited = []
    result = run_experiment(exp, tmp_path / "run", progress=lambda *_: None)
    assert FakeCluster.waited, "the workload started before the cluster formed"
    [topology] = target.launched
    assert topology.kind == "cluster" and topology.cluster.redistribution_delay_ms == 2000
    # every cluster link dials the fault proxy in front of its peer; the partition cut them all
    assert sorted(target.routes) == sorted(topology.cluster.links(topology.nodes))
    assert len(proxies) == 6 and all(p["enabled"] for p in proxies.values())  # healed at the end
    events = read_history(result.history_path)
    steps = {(e["f"], e["node"]) for e in events if e["process"] == "nemesis" and e["value"].get("phase") == "start"}
    assert {("kill", "B"), ("start", "B"), ("partition", "proxy"), ("heal", "proxy")} <= steps, steps
    verdict = judge_history(result.history_path)
    check = verdict["checks"]["redistribution"]
    # unjoined nodes: nothing crosses, so what A does not hand its own consumers is drained at A
    assert check["valid"] is True and check["stats"]["load_balancing"] == "ON_DEMAND", check
    assert check["stats"]["enqueued"] > 50 and check["stats"]["drained"] is True
    closes = [e for e in events if e["f"] == "close" and e["type"] == "ok"]
    assert {e["node"] for e in closes} == {"B", "C"}


def test_the_main_jobs_chaos_stage_lists_a_cluster_experiment_its_target_cannot_launch(tmp_path, monkeypatch):
    """brokerconf run's chaos stage: a cluster experiment on a target without topology.cluster is
    an entry "not applicable" with the reason, which does not fail the run (the stage runs
    nothing for it)."""
    from brokerconf import chaos_stage
    from conformance.targets import registry

    lacking = FakeClusterTarget(capabilities=("process.kill", "protocol.stomp"))
    monkeypatch.setattr(registry, "resolve", lambda name: lacking)
    monkeypatch.setattr(chaos_stage, "MAIN_JOB_EXPERIMENTS", (("reference-cluster-redistribution.toml", None, None),))
    runs, [entry] = chaos_stage.plan(5, ["reference"], tmp_path, progress=lambda line: None)
    assert runs == []
    assert (entry["experiment"], entry["skipped"], "valid" in entry) == ("reference-cluster-redistribution", True, False)
    assert entry["error"].startswith("not applicable: target reference:process lacks topology.cluster")
    # it does not fail the stage; a run that is not valid does
    assert not chaos_stage.stage_failed([entry])
    assert chaos_stage.stage_failed([entry, {"experiment": "x", "target": "t", "valid": "unknown"}])
    assert not chaos_stage.stage_failed([entry, {"experiment": "x", "target": "t", "valid": True}])
    assert not list(tmp_path.iterdir())  # nothing ran


def test_a_cluster_that_does_not_form_stops_the_experiment_with_the_reason(tmp_path, monkeypatch):
    class NeverForms(FakeCluster):
        def __init__(self, topology, scenario, workdir):  # nothing to start
            self.topology, self.singles, self.nodes, self.stopped = topology, {}, {}, False

        def wait_formed(self, timeout):
            return False

        def stop(self):
            self.stopped = True

    launched = _launch_refused(monkeypatch, tmp_path, NeverForms, match="the cluster did not form within 90 s")
    assert launched[0].stopped


def test_a_cluster_without_the_formation_part_stops_the_experiment_naming_the_part(tmp_path, monkeypatch):
    """A cluster run starts on a formed cluster; a launcher whose cluster cannot say when it formed
    (no `Formation` part, conformance/deployment.py) is refused by name, not trusted as started."""
    class CannotTellFormation(FakeCluster):
        wait_formed = None  # the fake's method taken away: the cluster lacks the part

        def __init__(self, topology, scenario, workdir):  # nothing to start
            self.topology, self.singles, self.nodes, self.stopped = topology, {}, {}, False

        def stop(self):
            self.stopped = True

    launched = _launch_refused(monkeypatch, tmp_path, CannotTellFormation, match="CannotTellFormation.* has no Formation part")
    assert launched[0].stopped


def _launch_refused(monkeypatch, tmp_path, cluster_class, *, match: str) -> list:
    """Launch the cluster experiment on a fake target whose launcher returns ``cluster_class``; the
    launch must fail with ``match``. Returns what was launched (to check it was stopped)."""
    from chaos.topology import launch_topology

    target = FakeClusterTarget()
    launched = []
    monkeypatch.setattr(target, "launch_topology",
                        lambda topology, scenario, workdir, bridge_route=None: launched.append(
                            cluster_class(topology, scenario, workdir)) or launched[-1])
    exp = with_overrides(load_experiment(EXPERIMENTS / FILES[2]), target="fake-cluster")
    with pytest.raises(ExperimentError, match=match):
        launch_topology(exp, target, tmp_path)
    return launched
