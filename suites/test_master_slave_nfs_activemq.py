"""ActiveMQ Classic master/slave on the simulated NFS store: KahaDB of broker A on host A's FUSE
mount and of broker B on host B's, one store behind both (A-MQ FT guide 3.1, "Shared File System
Master/Slave"; issue 18 sections 4 and 5). Host A's storage link is cut through the fault proxy.

NFSv4: A's keep-alive check of its lock fails once the soft mount gives up, A stops serving; the
store releases A's lock when its lease runs out, B takes it and serves. NFSv3: the lock is never
released, so B never serves (the guide's documented negative). The times are printed; which
broker stops or starts first depends on lease, timeo/retrans and keep-alive, and is a
measurement, not a check. A suite (moved from tests/chaos, issue 26): generated for the run's
ActiveMQ targets (`experiment_support.parametrize_by_kind`), so its statements reach the
conformance matrix; the pair is built by hand from the local-process launcher on the rig, the
way the topology contract builds it (test_master_slave_nfs.py), to watch each broker directly.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.nemesis.lock import lock_loss_nemesis
from machinery.faultproxy import start_fault_proxy
from machinery.sharedstore.harness import SharedStoreRig, fuse_unavailable
from conformance.requirements import missing_mark, skip_or_fail
from suites.experiment_support import experiment_target, parametrize_by_kind
from conformance.targets.activemq.process import ActiveMQProcess, activemq_available

pytestmark = [pytest.mark.slow, missing_mark("fuse", fuse_unavailable())]

OPTIONS = "soft,timeo=5,retrans=2,lookupcache=none,sync"   # 3 s to EIO: the guide's shape, shorter
LEASE = 5.0
KEEP_ALIVE_MS, ACQUIRE_MS = 2000, 1000


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_kind(metafunc, {metafunc.definition.originalname: ("activemq",)})


@pytest.fixture
def pair(tmp_path, request, target_name):
    experiment_target(request, target_name, "topology.shared-store")  # a local-process ActiveMQ, or not applicable
    ok, reason = activemq_available()
    if not ok:
        skip_or_fail("activemq", reason)
    proxy = start_fault_proxy()
    rig = brokers = None
    try:
        rig = SharedStoreRig(str(tmp_path / "mnt"), proxy.api_url, options=OPTIONS, lease=LEASE, vers=request.param)
        brokers = {h: ActiveMQProcess(tmp_path / f"node-{h}", name=f"lockloss-{h}", persistent=True, stomp=True,
                                      openwire=True, kahadb_directory=Path(rig.path(h)) / "kahadb", jvm_heap_mb=256,
                                      lock_keep_alive_period_ms=KEEP_ALIVE_MS,
                                      lock_acquire_sleep_interval_ms=ACQUIRE_MS) for h in "AB"}
        brokers["A"].start(timeout=180)
        brokers["B"].start(timeout=180, wait_for="lock")
        yield rig, brokers
    finally:
        if rig is not None:
            rig.heal()
        for broker in (brokers or {}).values():
            broker.stop()
        if rig is not None:
            rig.close()
        proxy.stop()


def watch(brokers, within: float) -> dict[str, float | None]:
    """Seconds until A stops serving and until B serves (None: not within ``within`` s)."""
    cut, seen = time.monotonic(), {"A stops": None, "B serves": None}
    while time.monotonic() - cut < within and None in seen.values():
        if seen["A stops"] is None and not brokers["A"].serving(0.5):
            seen["A stops"] = time.monotonic() - cut
        if seen["B serves"] is None and brokers["B"].serving(0.5):
            seen["B serves"] = time.monotonic() - cut
        time.sleep(0.1)
    return seen


@pytest.mark.spec("FT-SHARED-1", "FT-SHARED-2")
@pytest.mark.parametrize("pair", [4], indirect=True, ids=["nfsv4"])
def test_cut_master_link_nfsv4_slave_takes_over(pair):
    rig, brokers = pair
    assert not brokers["B"].serving(), "FT-SHARED-1 the slave keeps its connectors closed"
    lock_loss_nemesis(rig).invoke("partition", host="A")
    seen = watch(brokers, within=120)
    print(f"ActiveMQ on the store, {OPTIONS}, lease {LEASE} s, keep-alive {KEEP_ALIVE_MS} ms: {seen}")
    assert seen["A stops"] is not None, \
        f"FT-SHARED-2 the master whose storage link is cut must give up mastership\n{brokers['A'].log_tail(40)}"
    assert seen["B serves"] is not None, \
        f"the slave must take over once the store released A's lock (lease {LEASE} s)\n{brokers['B'].log_tail(40)}"


@pytest.mark.spec("FT-SHARED-7")
@pytest.mark.parametrize("pair", [3], indirect=True, ids=["nfsv3"])
def test_cut_master_link_nfsv3_slave_never_takes_over(pair):
    rig, brokers = pair
    lock_loss_nemesis(rig).invoke("partition", host="A")
    waited = 6 * LEASE   # as long as NFSv4 needs, several times over
    seen = watch(brokers, within=waited)
    print(f"ActiveMQ on the store (NFSv3), {OPTIONS}: {seen}")
    assert seen["B serves"] is None, \
        f"FT-SHARED-7 NFSv3 never releases the cut-off master's lock: the slave must not take over in {waited} s"
    assert seen["A stops"] is not None, "the cut-off master still gives up (its keep-alive check fails)"
