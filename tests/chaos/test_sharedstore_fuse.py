"""Two hosts on one shared store through FUSE, each host's storage link through the fault proxy
(machinery/sharedstore, chaos/nemesis/lock.py; issue 18 section 4).

Host A's "broker" is a small process (`machinery.sharedstore.holder`) that opens a lock file on A's mount, takes an
fcntl write lock and writes a data file when told, as a master's journal would. Host B tries the
same lock through its own mount. Short settings keep the runs short: a 2 s lease and
``soft,timeo=5,retrans=2`` (0.5 + 1 + 1.5 = 3 s before EIO); the guide's own settings run in the
slow test at the end.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.history import History, read_history
from chaos.nemesis.lock import lock_loss_nemesis
from machinery.faultproxy import start_fault_proxy
from machinery.faultproxy.client import ToxiproxyClient
from machinery.sharedstore.harness import SharedStoreRig, fuse_unavailable, mounted
from machinery.sharedstore.mountopts import MountOptions
from conformance.requirements import missing_mark

pytestmark = missing_mark("fuse", fuse_unavailable())

LEASE = 2.0
SHORT = "soft,timeo=5,retrans=2,lookupcache=none,sync"

class Holder:
    """`machinery.sharedstore.holder` on one host's mount, driven line by line; stopped by its process group."""

    def __init__(self, root: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "machinery.sharedstore.holder", str(root)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        start_new_session=True)
        self.elapsed = 0.0   # how long the last answered call took, as the holder measured it

    def send(self, command: str) -> None:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def answer(self, timeout: float) -> str | None:
        """The next answer ("ok", "err EIO"...), or None if none came within ``timeout`` s (blocked)."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            return None
        status, _, elapsed = self.process.stdout.readline().strip().rpartition(" ")
        self.elapsed = float(elapsed)
        return status

    def do(self, command: str, timeout: float = 20.0) -> str | None:
        self.send(command)
        return self.answer(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        # its exit releases its lock: a request to the store, which may wait out one retry schedule
        self.process.wait(60)
        self.process.stdin.close()
        self.process.stdout.close()


def try_lock(path: Path) -> bool:
    """One F_SETLK for a write lock on host B (this test process); True when taken (and kept)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    try_lock.held.append(fd)
    return True


try_lock.held = []


def poll_lock(path: Path, within: float) -> float | None:
    """Seconds until host B takes the lock, or None if not within ``within`` s."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        if try_lock(path):
            return time.monotonic() - start
        time.sleep(0.1)
    return None


class Store(SharedStoreRig):
    """The rig with its own fault proxy, the lock-loss nemesis chaos builds on its links
    (``store.nemesis``, set up, recording into ``history``), and the names the tests use."""

    def __init__(self, base: Path, history: History, vers: int, options: str) -> None:
        self.proxy = start_fault_proxy()
        try:
            super().__init__(str(base), self.proxy.api_url, ("A", "B"), options=options, lease=LEASE, vers=vers)
        except BaseException:
            self.proxy.stop()
            raise
        try:
            self.nemesis = lock_loss_nemesis(self, history)
            self.nemesis.setup()
        except BaseException:
            self.close()
            raise

    def path(self, host: str) -> Path:
        return Path(super().path(host))

    def close(self) -> None:
        for fd in try_lock.held:
            os.close(fd)
        try_lock.held.clear()
        try:
            super().close()
        finally:
            self.proxy.stop()


@pytest.fixture
def history(tmp_path):
    with History(tmp_path / "history.jsonl", run="t", target="sharedstore", node="A") as h:
        yield h


@pytest.fixture
def make_store(tmp_path, history):
    made: list[Store] = []
    holders: list[Holder] = []

    def make(vers: int = 4, options: str = SHORT) -> tuple[Store, Holder]:
        store = Store(tmp_path / f"mnt{len(made)}", history, vers, options)
        made.append(store)
        holder = Holder(store.path("A"))
        holders.append(holder)
        return store, holder

    yield make
    points = [m.mountpoint for store in made for m in store.mounts.values()]
    try:
        for store in made:
            store.nemesis.teardown()   # heal first: a dying holder's unlock must reach the store
        for holder in holders:
            holder.stop()
    finally:
        for store in made:
            store.close()
    assert not any(mounted(p) for p in points), f"mounts left behind: {points}"


def a_holds_the_lock(store: Store, holder: Holder) -> None:
    assert holder.do("open") == "ok"
    assert holder.do("lock") == "ok"
    assert holder.do("write") == "ok"
    assert (store.path("B") / "journal").read_bytes() == b"record\n", "B sees A's write through the store"
    assert not try_lock(store.path("B") / "lock"), "host B must not get the lock host A holds"
    assert [lock["client"] for lock in store.server.state()["locks"]] == ["A"]


def test_lease_expiry_hands_the_lock_to_b_and_a_soft_mount_fails_with_eio(make_store, history):
    store, holder = make_store()
    a_holds_the_lock(store, holder)
    store.nemesis.invoke("partition", host="A")
    taken = poll_lock(store.path("B") / "lock", within=10 * LEASE)
    assert taken is not None, f"host B never got the lock after A's link was cut (lease {LEASE} s)"
    # A last renewed at most 2/3 of a lease before the cut: its lease cannot end sooner than that
    assert taken >= LEASE / 3, f"B got the lock {taken:.2f} s after the cut, before A's lease could expire"
    assert [e[0] for e in store.server.state()["expiries"]] == ["A"]

    soft_after = MountOptions.parse(SHORT).soft_failure_after()
    assert holder.do("write", timeout=soft_after * 4) == "err EIO", "a soft mount fails the write with EIO"
    assert holder.elapsed >= soft_after * 0.95, f"EIO after {holder.elapsed} s, before the retransmissions were spent"

    store.nemesis.invoke("heal", host="A")
    assert holder.do("write") == "err EIO", "after the heal, A's old open file is stale: its lease expired"
    assert holder.do("open") == "ok", "a new open works in A's new session"
    assert holder.do("lock") == "err EAGAIN", "and the lock is now B's"
    assert [lock["client"] for lock in store.server.state()["locks"]] == ["B"]

    steps = [(e["f"], e["value"]["phase"]) for e in read_history(history.path) if e["process"] == "nemesis"]
    assert steps == [("setup", "start"), ("setup", "end"), ("partition", "start"), ("partition", "end"),
                     ("heal", "start"), ("heal", "end")]


def test_hard_mount_blocks_the_write_until_the_link_heals(make_store):
    store, holder = make_store(options="hard,timeo=5,retrans=2,lookupcache=none,sync")
    a_holds_the_lock(store, holder)
    store.nemesis.invoke("partition", host="A")
    assert poll_lock(store.path("B") / "lock", within=10 * LEASE) is not None
    soft_after = MountOptions.parse("timeo=5,retrans=2").soft_failure_after()
    holder.send("write")
    assert holder.answer(timeout=2 * soft_after) is None, "a hard mount must not give up while the link is cut"
    store.nemesis.invoke("heal", host="A")
    assert holder.answer(timeout=20) == "err EIO", "once answered, the write's lease had expired: EIO"


def test_nfsv3_never_releases_the_cut_hosts_lock(make_store):
    store, holder = make_store(vers=3)
    a_holds_the_lock(store, holder)
    store.nemesis.invoke("partition", host="A")
    waited = 4 * LEASE   # as long as the v4 tests need, twice over
    assert poll_lock(store.path("B") / "lock", within=waited) is None, \
        f"FT-SHARED-7 NFSv3: the slave's host got the cut-off host's lock within {waited} s"
    with pytest.raises(Exception, match="NFSv3 has no leases"):
        store.nemesis.invoke("expire", host="A")
    store.nemesis.invoke("heal", host="A")
    assert holder.do("write") == "ok", "NFSv3: A still holds its open file and lock after the heal"
    assert [lock["client"] for lock in store.server.state()["locks"]] == ["A"]


def test_expire_step_releases_the_lock_at_once(make_store, history):
    store, holder = make_store()
    a_holds_the_lock(store, holder)
    result = store.nemesis.invoke("expire", host="A")
    assert result["expired_sessions"], "the store expired A's session"
    assert try_lock(store.path("B") / "lock"), "B takes the lock right after A's lease was expired"
    assert holder.do("write") == "err EIO", "A's open file belonged to the expired lease"
    ends = [e["value"] for e in read_history(history.path)
            if e["process"] == "nemesis" and e["f"] == "expire" and e["value"]["phase"] == "end"]
    assert ends and ends[0]["expired_sessions"] == result["expired_sessions"]


def test_latency_beyond_timeo_makes_a_soft_mount_fail(make_store):
    store, holder = make_store()
    assert holder.do("open") == "ok"
    store.nemesis.invoke("latency", host="A", latency=2500)
    # every try waits at most 1.5 s (timeo=5, retrans=2) for an answer that takes 5 s round trip
    assert holder.do("write", timeout=30) == "err EIO"
    store.nemesis.invoke("heal", host="A")
    toxics = ToxiproxyClient(store.proxy.api_url).toxics(store.links["A"])
    assert toxics == [], f"heal left toxics behind: {toxics}"


JAVA_TRYLOCK = r"""
import java.nio.channels.*; import java.nio.file.*;
public class TryLock {
  public static void main(String[] a) throws Exception {
    FileChannel ch = FileChannel.open(Paths.get(a[0]), StandardOpenOption.WRITE);
    FileLock lock = ch.tryLock();
    System.out.println(lock == null ? "null" : "acquired"); System.out.flush();
    long end = System.currentTimeMillis() + 60000;
    while (lock == null && System.currentTimeMillis() < end) { Thread.sleep(100); lock = ch.tryLock(); }
    System.out.println(lock == null ? "timeout" : "acquired"); System.out.flush();
  }
}
"""


@pytest.mark.slow
def test_java_trylock_on_the_mount_follows_the_store(make_store, tmp_path):
    java = shutil.which("java")
    assert java, "java not on PATH: the project needs Java 17 anyway (pyspark, the JVM brokers)"
    store, holder = make_store()
    a_holds_the_lock(store, holder)
    source = tmp_path / "TryLock.java"
    source.write_text(JAVA_TRYLOCK)
    jvm = subprocess.Popen([java, str(source), str(store.path("B") / "lock")], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        assert jvm.stdout.readline().strip() == "null", "Java's tryLock on B must not get A's lock"
        store.nemesis.invoke("expire", host="A")
        assert jvm.stdout.readline().strip() == "acquired", "Java's tryLock gets the lock once A's lease expired"
    finally:
        if jvm.poll() is None:
            os.killpg(jvm.pid, signal.SIGKILL)
        jvm.wait(10)
        jvm.stdout.close()


@pytest.mark.slow
def test_guide_mount_options_detect_a_cut_link_in_the_computed_time(make_store):
    options = "soft,timeo=20,retrans=2,lookupcache=none,sync"
    expected = MountOptions.parse(options).soft_failure_after()
    store, holder = make_store(options=options)
    assert holder.do("open") == "ok"
    store.nemesis.invoke("partition", host="A")
    answer = holder.do("write", timeout=3 * expected)
    detected = holder.elapsed
    print(f"detection with {options}: {detected:.2f} s (model: {expected:.1f} s)")
    assert answer == "err EIO", f"FT-SHARED-8 the write under a cut link must fail with EIO, got {answer!r}"
    assert detected >= expected * 0.95, f"FT-SHARED-8 EIO after {detected:.2f} s, before the {expected} s of retries"


def ofd_lock(fd: int, kind: int = fcntl.F_WRLCK) -> bool:
    """An open-file-description write lock on the whole file (F_OFD_SETLK); False when refused."""
    flock = struct.pack("hhqqi4x", kind, os.SEEK_SET, 0, 0, 0)   # struct flock on x86-64 / aarch64
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, flock)
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise


def test_locks_end_with_their_owner_process_or_open_file(make_store):
    store, holder = make_store()
    a_holds_the_lock(store, holder)
    holder.stop()   # a process's record locks end with it (its exit closes the file: flush + unlock)
    assert poll_lock(store.path("B") / "lock", within=5) is not None, "A's process died: B takes the lock"
    for fd in try_lock.held:
        os.close(fd)   # B's process lock goes with the close
    try_lock.held.clear()

    # F_OFD_SETLK (the reference broker's locker): owned by the open file, released by its last close
    a_fd = os.open(store.path("A") / "ofd", os.O_RDWR | os.O_CREAT)
    b_fd = os.open(store.path("B") / "ofd", os.O_RDWR)
    try:
        assert ofd_lock(a_fd), "A takes the open-file lock"
        assert not ofd_lock(b_fd), "B must not get the open-file lock A holds"
        os.close(a_fd)
        a_fd = None
        # the kernel sends FUSE's release after close() has returned: poll briefly
        deadline = time.monotonic() + 5
        while not (taken := ofd_lock(b_fd)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert taken, "closing A's open file released its open-file lock"
    finally:
        if a_fd is not None:
            os.close(a_fd)
        os.close(b_fd)
    deadline = time.monotonic() + 5
    while (left := store.server.state()["locks"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], "B's open-file lock ends with its last close too"


def test_an_idle_host_keeps_its_lock_through_the_heartbeat(make_store):
    store, holder = make_store()
    a_holds_the_lock(store, holder)
    # A does nothing for three leases: only its renew heartbeat (every 2/3 lease) talks to the store
    assert poll_lock(store.path("B") / "lock", within=3 * LEASE) is None, \
        "an idle host lost its lock: the heartbeat did not renew its lease"
    assert store.server.state()["expiries"] == []
    assert holder.do("write") == "ok"


def test_an_open_file_follows_its_rename_through_the_same_mount(make_store):
    """A journal writes a new segment as NAME.tmp, renames it NAME and keeps writing through the
    same descriptor (reference_broker/store/journal.py): as over NFS, whose file handles survive a
    rename, the later writes reach NAME, and the other host reads them there."""
    store, _ = make_store()
    a, b = Path(store.path("A")), Path(store.path("B"))
    fd = os.open(a / "seg.tmp", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"head-")
        os.rename(a / "seg.tmp", a / "seg")
        os.write(fd, b"tail")
        os.fsync(fd)
    finally:
        os.close(fd)
    assert (b / "seg").read_bytes() == b"head-tail"
    assert not (b / "seg.tmp").exists()
