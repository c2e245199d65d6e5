"""Short versions of the lock-loss experiments (chaos/experiments/*-nfs-lock-loss.toml; issue 18,
section 5), run end to end as `brokerconf chaos run` runs them: a shared-store pair on the
simulated NFS, persistent queue load with failover clients, the master's storage link cut and
healed, the history judged. Shortened by overrides only (a shorter soft-mount timeout and lease,
one shorter fault), so the files' own shape is what runs. A suite (moved from tests/chaos, issue
26): one run per target of the run (`experiment_support`), so each statement reaches the
conformance matrix and a known deviation goes through the plugin's narrowed path.

Checked (A-MQ fault-tolerant messaging guide, 3.1; IDs in conformance/spec/fault_tolerance.toml):
the master stops serving once its lock check fails (FT-SHARED-2), the slave takes over (FT-SHARED-3),
no acknowledged persistent message is lost (FT-SHARED-9); with NFSv3 the slave never takes over
(FT-SHARED-7, the reference broker); one master at a time (FT-SHARED-1, ActiveMQ: its known
deviation; Artemis's overlap of 0.2-1.0 s is racy, reported by the experiment, not asserted). How
long each took is printed, not asserted (speed is the benchmark's business: `brokerconf chaos run
... --repeat 5`). Every process the run started (brokers, mounts, store server, proxies) is gone
after it, or the harness failed (`experiment_support.HarnessFault`, never a booked deviation).
"""

from __future__ import annotations

import pytest

from chaos.experiment_file import load_experiment, with_overrides
from machinery.sharedstore.harness import fuse_unavailable
from conformance.requirements import missing_mark
from suites.experiment_support import (EXPERIMENTS, HarnessFault, experiment_target,
                                                   parametrize_by_kind, run_checked, the_fault)

CAPABILITY = "topology.shared-store"
pytestmark = [pytest.mark.slow, pytest.mark.requires(CAPABILITY), missing_mark("fuse", fuse_unavailable())]

#: soft,timeo=10,retrans=2: EIO 1 + 2 + 3 = 6 s after a cut; a 5 s lease; one 16 s cut
SHORT = ["duration_s=27", "recovery_s=6", "topology.nfs_mount_options=\"soft,timeo=10,retrans=2,lookupcache=none,sync\"",
         "topology.nfs_lease_s=5.0", "nemesis.0.every_s=4", "nemesis.0.down_s=16", "workload.rate=10"]
#: FT-SHARED-1 with the guide's own mount options (3.1, "File locking requirements": timeo=20, so EIO
#: 2 + 4 + 6 = 12 s after a cut) and SHORT's 5 s lease. With SHORT's timeo=10 the question "does the
#: old master still serve when the slave starts serving" became a race between ActiveMQ's detection
#: (12.1 s: two soft-mount timeouts) and the slave's start (8.3 to 13.4 s after the cut, by machine
#: load): one main job in about twenty saw no overlap (detection 12.2 s, takeover 13.4 s) and the
#: strict xfail passed. Here detection comes about 12 s after the slave could serve, as in the full
#: experiment; the cut lasts past it (28 s), and the run ends after the heal and a recovery.
GUIDE_MOUNT = ["topology.nfs_mount_options=\"soft,timeo=20,retrans=2,lookupcache=none,sync\"",
               "nemesis.0.down_s=28", "duration_s=39"]
#: the target kinds each test is generated for (by test name; others: every kind with a file)
KINDS = {"test_nfsv3_slave_never_takes_over": ("reference", "activemq", "artemis"),
         "test_activemq_has_one_master_when_its_nfs_lock_is_lost": ("activemq",)}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_kind(metafunc, KINDS)


def run_short(request, tmp_path, target_name: str, experiment: str, extra=()) -> dict:
    """The short ``<kind>-<experiment>.toml`` of ``target_name``'s kind, run and judged."""
    target = experiment_target(request, target_name, CAPABILITY)
    kind = target.split(":")[0]
    exp = with_overrides(load_experiment(EXPERIMENTS / f"{kind}-{experiment}.toml"), target=target,
                         settings=[*SHORT, *extra])
    return run_checked(exp, tmp_path)


@pytest.mark.spec("FT-SHARED-2", "FT-SHARED-3", "FT-SHARED-9")
def test_master_loses_its_nfs_lock_and_the_slave_takes_over(request, tmp_path, target_name):
    verdict = run_short(request, tmp_path, target_name, "nfs-lock-loss")
    fault = the_fault(verdict)
    assert fault["detection_s"] is not None, \
        f"FT-SHARED-2 the master whose storage link was cut went on serving: {fault['timeline']}"
    assert fault["takeover_s"] is not None, \
        f"FT-SHARED-3 no slave served after the master's lease ran out: {fault['timeline']}"
    total = verdict["checks"]["total_queue"]
    assert total["lost"] == [], f"FT-SHARED-9 acknowledged persistent messages lost: {total['lost'][:10]}"


@pytest.mark.spec("FT-SHARED-7")
def test_nfsv3_slave_never_takes_over(request, tmp_path, target_name):
    """While the master's link is cut the NFSv3 server never releases its lock, so no slave may serve.
    Once the link heals, the former master (alive, and no longer serving: it gave mastership up)
    may give its lock back itself, its unlock having waited on the cut link, and the slave then
    takes over: that is the master's doing, not the server's, so only a takeover before the heal
    breaks FT-SHARED-7."""
    verdict = run_short(request, tmp_path, target_name, "nfs-lock-loss", extra=["topology.nfs_version=3"])
    fault = the_fault(verdict)
    healed = fault["healed_at_s"]
    if healed is None:
        raise HarnessFault(f"harness: the fault was never healed: nothing to judge: {fault}")
    assert fault["takeover_s"] is None or fault["takeover_s"] >= healed, \
        (f"FT-SHARED-7 a slave served {fault['takeover_s']} s after the cut, before the heal at {healed} s, although "
         f"NFSv3 never releases the cut master's lock: {fault['timeline']}")


@pytest.mark.spec("FT-SHARED-1")
def test_activemq_has_one_master_when_its_nfs_lock_is_lost(request, tmp_path, target_name):
    """FT-SHARED-1: one master at a time; a known deviation on ActiveMQ
    (conformance/known_deviations/fault_tolerance.toml), booked only for the assertion below. A run
    that never got to a takeover, or whose harness failed, raises something else and fails the test."""
    verdict = run_short(request, tmp_path, target_name, "nfs-lock-loss", extra=GUIDE_MOUNT)
    check_one_master(the_fault(verdict))


def check_one_master(fault: dict) -> None:
    if fault["takeover_s"] is None or fault["detection_s"] is None:
        raise RuntimeError(f"the run never got to a takeover and a stopped master: nothing to judge: {fault['timeline']}")
    assert fault["overlap_s"] == 0, (f"FT-SHARED-1: two masters served at once for {fault['overlap_s']:.1f} s: the "
                                     f"slave from {fault['takeover_s']:.1f} s, the old master until "
                                     f"{fault['detection_s']:.1f} s after its storage link was cut: {fault['timeline']}")


@pytest.mark.spec("FT-SHARED-1", "FT-SHARED-2", "FT-SHARED-3", "FT-SHARED-9")
def test_master_whose_lease_expired_stops_before_another_serves(request, tmp_path, target_name):
    """The ARTEMIS-4143 shape (chaos/experiments/*-nfs-lease-expiry.toml): the store server ends
    the master's NFSv4 lease while its link stays up. The old master must stop serving (its lock is
    gone: FT-SHARED-2) and never serve alongside the node that takes the lock next (FT-SHARED-1);
    a node serves again (the slave, or the old master having taken the free lock back first) and
    no acknowledged persistent message is lost (FT-SHARED-9)."""
    verdict = run_short(request, tmp_path, target_name, "nfs-lease-expiry",
                        extra=["duration_s=16", "nemesis.0.fault=\"expire\"", "nemesis.0.every_s=6",
                               "nemesis.0.down_s=1"])
    fault = the_fault(verdict)
    assert fault["detection_s"] is not None, \
        f"FT-SHARED-2 the master whose lease expired went on serving: {fault['timeline']}"
    assert fault["overlap_s"] == 0, (f"FT-SHARED-1 two masters served at once for {fault['overlap_s']:.1f} s after "
                                     f"the master's lease expired: {fault['timeline']}")
    assert fault["takeover_s"] is not None or fault["back_s"] is not None, \
        f"FT-SHARED-3 no node served again after the master's lease expired: {fault['timeline']}"
    total = verdict["checks"]["total_queue"]
    assert total["lost"] == [], f"FT-SHARED-9 acknowledged persistent messages lost: {total['lost'][:10]}"
    assert total["unexpected"] == [], f"messages delivered that no send could have put there: {total['unexpected']}"
