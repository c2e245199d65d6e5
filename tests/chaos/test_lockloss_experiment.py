"""The lock-loss experiment's pieces without brokers (issue 18, section 5): the experiment file's
NFS store and lock-loss nemesis, ``--set`` overrides, the timing of a fault
(chaos/lockloss_fault.py) against a scripted group, and the repeat table."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from brokerconf.chaos_repeat import figures, render_table
from chaos.experiment_file import Experiment, ExperimentError, apply_setting, load_experiment, with_overrides
from chaos.lockloss_fault import LockLossFault
from chaos.schedule import build_schedule
from chaos.topology import topology_of
from conformance.topology import NfsOptions, SharedStore

EXPERIMENTS = Path(__file__).resolve().parents[2] / "chaos" / "experiments"
FILES = ("reference-nfs-lock-loss.toml", "activemq-nfs-lock-loss.toml", "artemis-nfs-lock-loss.toml")


def base(**topology) -> dict:
    return {"name": "x", "duration_s": 40,
            "topology": {"kind": "shared-store", "store": "nfs", **topology},
            "nemesis": [{"kind": "lock-loss", "every_s": 5, "down_s": 20, "node": "master"}]}


@pytest.mark.parametrize("name", FILES)
def test_shipped_files_put_the_store_on_nfs_with_the_guides_settings(name):
    exp = load_experiment(EXPERIMENTS / name)
    store = topology_of(exp).shared_store
    assert store.nfs == NfsOptions(mount_options="soft,timeo=20,retrans=2,lookupcache=none,sync", version=4,
                                   lease_s=10.0)
    assert store.lock_keep_alive_period_ms == 2000
    # the fault heals inside the run: a schedule with no fault would measure nothing
    assert [step for _, step, _, _ in build_schedule(exp)] == ["lock-loss", "heal"]


def test_lock_loss_needs_the_nfs_store():
    data = base()
    data["topology"]["store"] = "local"
    with pytest.raises(ValueError, match="lock-loss fault needs a shared store on the simulated NFS"):
        Experiment.model_validate(data)


def test_nfs_store_needs_a_shared_store_topology():
    with pytest.raises(ValueError, match='store = "nfs" needs kind = "shared-store"'):
        Experiment.model_validate({"name": "x", "duration_s": 5, "topology": {"kind": "single", "store": "nfs"}})


def test_bad_mount_option_is_named():
    with pytest.raises(ValueError, match="nfs_mount_options: .*timeo=0"):
        Experiment.model_validate(base(nfs_mount_options="soft,timeo=0"))


def test_lock_loss_node_must_be_a_node():
    data = base()
    data["nemesis"][0]["node"] = "Z"
    with pytest.raises(ValueError, match=r"nemesis\[0\].node 'Z'"):
        Experiment.model_validate(data)


def test_set_overrides_keep_alive_and_nfs_version():
    exp = Experiment.model_validate(base())
    changed = with_overrides(exp, settings=["topology.lock_keep_alive_period_ms=0", "topology.nfs_version=3",
                                            "nemesis.0.fault=expire"])
    store = topology_of(changed).shared_store
    assert (store.lock_keep_alive_period_ms, store.nfs.version) == (0, 3)
    assert changed.nemesis[0].fault == "expire"


@pytest.mark.parametrize("setting, message", [
    ("topology.nfs_version=5", "nfs_version"),
    ("topology.no_such_key=1", "no_such_key"),
    ("nemesis.3.fault=expire", "not an entry"),
    ("nonsense", "KEY=VALUE"),
])
def test_bad_set_is_refused_by_name(setting, message):
    exp = Experiment.model_validate(base())
    with pytest.raises(ExperimentError, match=message):
        with_overrides(exp, settings=[setting])


def test_apply_setting_reads_toml_values():
    data = {"topology": {"store": "local"}, "duration_s": 1}
    apply_setting(data, 'topology.store="nfs"')
    apply_setting(data, "duration_s=2.5")
    assert data == {"topology": {"store": "nfs"}, "duration_s": 2.5}


def test_nfs_options_are_checked():
    with pytest.raises(ValueError, match="version must be 3 or 4"):
        NfsOptions(version=2)
    with pytest.raises(ValueError, match="retrans"):
        NfsOptions(mount_options="soft,retrans=x")
    with pytest.raises(ValueError, match="vers=3 but version is 4"):
        NfsOptions(mount_options="soft,vers=3", version=4)
    with pytest.raises(ValueError, match="kind 'file'"):
        SharedStore(kind="jdbc", lock_keep_alive_period_ms=500, nfs=NfsOptions())


class ScriptedNemesis:
    def __init__(self):
        self.calls = []

    def setup(self):
        self.calls.append(("setup",))

    def invoke(self, f, **params):
        self.calls.append((f, params))
        return {}

    def teardown(self):
        self.calls.append(("teardown",))


class ScriptedGroup:
    """Who serves, as a function of the seconds since `cut` was called."""

    def __init__(self, script):
        self.script, self.cut_at = script, None

    def __call__(self):
        if self.cut_at is None:
            return ["A"]
        elapsed = time.monotonic() - self.cut_at
        return next(serving for until, serving in self.script if elapsed < until)


def test_fault_timing_of_a_master_that_serves_on_after_the_takeover():
    group = ScriptedGroup([(0.3, ["A"]), (0.6, ["A", "B"]), (float("inf"), ["B"])])
    # A's listener stays open longer than A answers (a JVM stuck in I/O): closed at 0.9 s
    listening = ScriptedGroup([(0.3, ["A"]), (0.9, ["A", "B"]), (float("inf"), ["B"])])
    nemesis = ScriptedNemesis()
    fault = LockLossFault(nemesis, group, listening_nodes=listening, fault="partition", poll_s=0.02, settle_s=0.1)
    fault.setup()
    original = nemesis.invoke

    def cut(f, **params):
        group.cut_at = listening.cut_at = time.monotonic()
        return original(f, **params)
    nemesis.invoke = cut
    fault.invoke("lock-loss")
    time.sleep(1.3)
    fault.invoke("heal")
    fault.teardown()
    (record,) = fault.results
    assert record["node"] == "A" and nemesis.calls[1] == ("partition", {"host": "A"})
    assert nemesis.calls[2] == ("heal", {"host": "A"})
    assert 0.25 <= record["takeover_s"] <= 0.45, record
    assert 0.55 <= record["detection_s"] <= 0.75, record
    assert 0.85 <= record["closed_s"] <= 1.05, record
    assert 0.2 <= record["overlap_s"] <= 0.4, record
    assert 0.5 <= record["open_overlap_s"] <= 0.7, record
    assert [serving for _, serving, _ in record["timeline"]] == [["A"], ["A", "B"], ["B"], ["B"]]
    assert record["back_s"] is None


def test_fault_timing_when_no_slave_takes_over():
    group = ScriptedGroup([(0.2, ["A"]), (float("inf"), [])])
    nemesis = ScriptedNemesis()
    fault = LockLossFault(nemesis, group, poll_s=0.02, settle_s=0.1)
    original = nemesis.invoke
    nemesis.invoke = lambda f, **p: (setattr(group, "cut_at", time.monotonic()), original(f, **p))[1]
    fault.invoke("lock-loss")
    time.sleep(0.6)
    fault.teardown()
    (record,) = fault.results
    assert record["takeover_s"] is None and record["detection_s"] is not None and record["overlap_s"] == 0.0
    row = figures({"valid": True, "run_stats": {"lock_loss": fault.results},
                   "checks": {"total_queue": {"lost": [], "duplicated": ["m1"]}}})
    assert row["takeover_s_never"] and row["duplicated"] == 1


def test_expire_has_nothing_to_heal():
    nemesis = ScriptedNemesis()
    fault = LockLossFault(nemesis, lambda: ["A"], fault="expire", poll_s=0.02, settle_s=0.05)
    fault.invoke("lock-loss")
    assert fault.invoke("heal") == {"healed": []}
    fault.teardown()
    assert ("expire", {"host": "A"}) in nemesis.calls and not any(c[0] == "heal" for c in nemesis.calls)


def _watched_past_the_runs_end(fault: str, healed_first: bool = False) -> dict:
    """The record of a ``fault`` whose victim A stops serving at 0.1 s and after which B serves
    from 0.5 s on; the run ends (teardown) at 0.3 s and its drain lasts until 0.8 s.
    ``healed_first``: the fault's schedule healed it at 0.2 s, before the run's end."""
    group = ScriptedGroup([(0.1, ["A"]), (0.5, []), (float("inf"), ["B"])])
    nemesis = ScriptedNemesis()
    watched = LockLossFault(nemesis, group, fault=fault, poll_s=0.02, settle_s=5)
    original = nemesis.invoke

    def fault_starts_the_script(f, **params):
        if f != "heal":
            group.cut_at = time.monotonic()
        return original(f, **params)
    nemesis.invoke = fault_starts_the_script
    watched.invoke("lock-loss")
    if healed_first:
        time.sleep(0.2)
        watched.invoke("heal")
        time.sleep(0.1)
    else:
        time.sleep(0.3)
    watched.teardown()  # the run's end: nobody serves yet
    time.sleep(0.5)     # the drain
    watched.end_watch()
    (record,) = watched.results
    return record


def test_an_expired_leases_watch_goes_on_through_the_drain_until_ended():
    """mj41: a node served again only after the run's end, during the drain (which read every
    message), yet the record said none did: the watch had ended at teardown. An expired lease has
    nothing to heal, so its watch goes on until `end_watch`; a cut's still ends at teardown, since
    the heal changes what it watches."""
    expired = _watched_past_the_runs_end("expire")
    assert expired["detection_s"] is not None and 0.45 <= expired["takeover_s"] <= 0.7, expired
    cut = _watched_past_the_runs_end("partition")
    assert cut["detection_s"] is not None and cut["takeover_s"] is None, cut


def test_a_cut_healed_before_the_runs_end_is_watched_through_the_drain():
    """mj51: the slave of a cut master had not served 23 s after the cut (healed at 16 s, then the
    run's end) on a loaded machine, and the record said no slave took over while the drain still
    waited for one. The heal came from the fault's schedule, so the run's end changes nothing the
    watch sees: it goes on until `end_watch`."""
    healed = _watched_past_the_runs_end("partition", healed_first=True)
    assert healed["detection_s"] is not None and 0.45 <= healed["takeover_s"] <= 0.7, healed
    assert healed["healed_at_s"] is not None and healed["healed_at_s"] < 0.3, healed


def test_repeat_table_shows_median_spread_and_never():
    rows = [figures({"valid": True, "run_stats": {"lock_loss": [{"detection_s": d, "takeover_s": t, "overlap_s": 0}]},
                     "checks": {"total_queue": {"lost": [], "duplicated": []}}})
            for d, t in ((1.0, 12.0), (3.0, 13.0), (2.0, None))]
    table = render_table({"exp on ref": rows})
    assert "2.0 [1.0..3.0]" in table          # detection: median of three
    assert "12.5 [12.0..13.0] never 1/3" in table  # takeover: one run never saw it
    assert table.splitlines()[1].split()[4] == "3/3"  # valid runs


def test_drain_clients_give_up_when_no_broker_came_back(monkeypatch):
    """Both Artemis nodes stopped after their NFS leases were expired one after the other
    (AMQ222010 on each): the drain's failover client retried for ever and the run never ended. A
    drain's clients now get startupMaxReconnectAttempts unless the experiment chose its own."""
    from chaos.experiment import DRAIN_STARTUP_ATTEMPTS, _bounded_startup, _client_factory
    from conformance.clients.failover import FailoverExhausted
    from machinery.process import free_ports

    assert _bounded_startup("timeout=1") == f"timeout=1&startupMaxReconnectAttempts={DRAIN_STARTUP_ATTEMPTS}"
    assert _bounded_startup("") == f"startupMaxReconnectAttempts={DRAIN_STARTUP_ATTEMPTS}"
    assert _bounded_startup("startupMaxReconnectAttempts=3") == "startupMaxReconnectAttempts=3", "the file's own wins"

    monkeypatch.setattr("chaos.experiment.DRAIN_STARTUP_ATTEMPTS", 3)  # a pass to a closed port takes ~0.2 s
    exp = load_experiment(EXPERIMENTS / "artemis-nfs-lock-loss.toml")
    fast = exp.target.model_copy(update={"failover_options": "initialReconnectDelay=5&maxReconnectDelay=5"})
    exp = exp.model_copy(update={"target": fast})
    (dead,) = free_ports(1)  # nothing listens there
    with pytest.raises(FailoverExhausted, match="startupMaxReconnectAttempts=3"):
        _client_factory(exp, [("127.0.0.1", dead)], for_drain=True)()
