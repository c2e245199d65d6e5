"""Short versions of the lock-loss experiments (chaos/experiments/*-nfs-lock-loss.toml; issue 18,
section 5), run end to end as `brokerconf chaos run` runs them: a shared-store pair on the
simulated NFS, persistent queue load with failover clients, the master's storage link cut and
healed, the history judged. Shortened by overrides only (a shorter soft-mount timeout and lease,
one shorter fault), so the files' own shape is what runs.

Checked (A-MQ fault-tolerant messaging guide, 3.1; IDs in conformance/spec/fault_tolerance.toml):
the master stops serving once its lock check fails (FT-SHARED-2), the slave takes over (FT-SHARED-3),
no acknowledged persistent message is lost (FT-SHARED-9); with NFSv3 the slave never takes over
(FT-SHARED-7). How long each took, and whether two nodes served at once, is measured and printed,
not asserted (speed is the benchmark's business: `brokerconf chaos run ... --repeat 5`). Every
process the run started (brokers, mounts, store server, proxies) is gone after it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from brokerconf.chaos_job import run_and_judge
from chaos.experiment_file import load_experiment, with_overrides
from chaos.sharedstore.harness import fuse_unavailable
from conformance.requirements import missing_mark, skip_or_fail
from conformance.targets.registry import resolve

pytestmark = [pytest.mark.slow, missing_mark("fuse", fuse_unavailable())]

EXPERIMENTS = Path(__file__).resolve().parents[2] / "chaos" / "experiments"
#: soft,timeo=10,retrans=2: EIO 1 + 2 + 3 = 6 s after a cut; a 5 s lease; one 16 s cut
SHORT = ["duration_s=27", "recovery_s=6", "topology.nfs_mount_options=\"soft,timeo=10,retrans=2,lookupcache=none,sync\"",
         "topology.nfs_lease_s=5.0", "nemesis.0.every_s=4", "nemesis.0.down_s=16", "workload.rate=10"]
CASES = [("reference-nfs-lock-loss.toml", None, None), ("activemq-nfs-lock-loss.toml", "activemq", "activemq:process"),
         ("artemis-nfs-lock-loss.toml", "artemis", "artemis:process")]


def child_pids() -> set[int]:
    """Live processes whose parent is this test process (brokers, mounts, the store, proxies)."""
    mine = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                mine.add(int(entry))
    return mine


def run_short(tmp_path, file_name: str, requirement: str | None, target: str | None, extra=()) -> dict:
    if requirement is not None:
        ok, reason = resolve(target).availability()
        if not ok:
            skip_or_fail(requirement, reason)
    exp = with_overrides(load_experiment(EXPERIMENTS / file_name), settings=[*SHORT, *extra])
    before = child_pids()
    verdict = run_and_judge(exp, tmp_path / "run", progress=lambda line: None)
    left = child_pids() - before
    assert not left, f"processes left behind by the experiment: {sorted(left)}"
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(tmp_path) in line]
    stats = verdict["run_stats"]
    print(f"{exp.name}: lock_loss {json.dumps(stats['lock_loss'])}; total_queue lost "
          f"{len(verdict['checks']['total_queue']['lost'])} duplicated "
          f"{len(verdict['checks']['total_queue']['duplicated'])}")
    assert stats["nemesis_errors"] == [], stats["nemesis_errors"]
    assert len(stats["lock_loss"]) == 1, f"one lock-loss fault was scheduled: {stats['lock_loss']}"
    return verdict


@pytest.mark.parametrize("file_name, requirement, target", CASES, ids=["reference", "activemq", "artemis"])
def test_master_loses_its_nfs_lock_and_the_slave_takes_over(tmp_path, file_name, requirement, target):
    verdict = run_short(tmp_path, file_name, requirement, target)
    (fault,) = verdict["run_stats"]["lock_loss"]
    assert fault["detection_s"] is not None, \
        f"FT-SHARED-2 the master whose storage link was cut went on serving: {fault['timeline']}"
    assert fault["takeover_s"] is not None, \
        f"FT-SHARED-3 no slave served after the master's lease ran out: {fault['timeline']}"
    total = verdict["checks"]["total_queue"]
    assert total["lost"] == [], f"FT-SHARED-9 acknowledged persistent messages lost: {total['lost'][:10]}"


def test_nfsv3_slave_never_takes_over(tmp_path):
    """While the master's link is cut the NFSv3 server never releases its lock, so no slave may serve.
    Once the link heals, the former master (alive, and no longer serving: it gave mastership up)
    may give its lock back itself, its unlock having waited on the cut link, and the slave then
    takes over: that is the master's doing, not the server's, so only a takeover before the heal
    breaks FT-SHARED-7."""
    verdict = run_short(tmp_path, "reference-nfs-lock-loss.toml", None, None, extra=["topology.nfs_version=3"])
    (fault,) = verdict["run_stats"]["lock_loss"]
    healed = fault["healed_at_s"]
    assert healed is not None, f"the fault was never healed: nothing to judge: {fault}"
    assert fault["takeover_s"] is None or fault["takeover_s"] >= healed, \
        (f"FT-SHARED-7 a slave served {fault['takeover_s']} s after the cut, before the heal at {healed} s, although "
         f"NFSv3 never releases the cut master's lock: {fault['timeline']}")


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="known deviation FT-SHARED-1 on activemq (conformance/known_deviations/fault_tolerance.toml): "
                          "the old master keeps serving for seconds after the slave took over")
def test_activemq_has_one_master_when_its_nfs_lock_is_lost(tmp_path):
    """FT-SHARED-1: one master at a time. Only an AssertionError is the recorded deviation: a run
    that never got to a takeover raises something else and fails the test."""
    verdict = run_short(tmp_path, "activemq-nfs-lock-loss.toml", "activemq", "activemq:process")
    (fault,) = verdict["run_stats"]["lock_loss"]
    if fault["takeover_s"] is None or fault["detection_s"] is None:
        raise RuntimeError(f"the run never got to a takeover and a stopped master: nothing to judge: {fault['timeline']}")
    assert fault["overlap_s"] == 0, (f"FT-SHARED-1: two masters served at once for {fault['overlap_s']:.1f} s: the "
                                     f"slave from {fault['takeover_s']:.1f} s, the old master until "
                                     f"{fault['detection_s']:.1f} s after its storage link was cut: {fault['timeline']}")


EXPIRY_CASES = [("reference-nfs-lease-expiry.toml", None, None),
                ("activemq-nfs-lease-expiry.toml", "activemq", "activemq:process"),
                ("artemis-nfs-lease-expiry.toml", "artemis", "artemis:process")]


@pytest.mark.parametrize("file_name, requirement, target", EXPIRY_CASES, ids=["reference", "activemq", "artemis"])
def test_master_whose_lease_expired_stops_before_another_serves(tmp_path, file_name, requirement, target):
    """The ARTEMIS-4143 shape (chaos/experiments/*-nfs-lease-expiry.toml): the store server ends
    the master's NFSv4 lease while its link stays up. The old master must stop serving (its lock is
    gone: FT-SHARED-2) and never serve alongside the node that takes the lock next (FT-SHARED-1);
    a node serves again (the slave, or the old master having taken the free lock back first) and
    no acknowledged persistent message is lost (FT-SHARED-9)."""
    verdict = run_short(tmp_path, file_name, requirement, target,
                        extra=["duration_s=16", "nemesis.0.fault=\"expire\"", "nemesis.0.every_s=6",
                              "nemesis.0.down_s=1"])
    (fault,) = verdict["run_stats"]["lock_loss"]
    assert fault["detection_s"] is not None, \
        f"FT-SHARED-2 the master whose lease expired went on serving: {fault['timeline']}"
    assert fault["overlap_s"] == 0, (f"FT-SHARED-1 two masters served at once for {fault['overlap_s']:.1f} s after "
                                     f"the master's lease expired: {fault['timeline']}")
    assert fault["takeover_s"] is not None or fault["back_s"] is not None, \
        f"FT-SHARED-3 no node served again after the master's lease expired: {fault['timeline']}"
    total = verdict["checks"]["total_queue"]
    assert total["lost"] == [], f"FT-SHARED-9 acknowledged persistent messages lost: {total['lost'][:10]}"
    assert total["unexpected"] == [], f"messages delivered that no send could have put there: {total['unexpected']}"
