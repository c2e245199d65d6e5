"""The shared-file locker (reference_broker/ha/locker.py) and the master/slave runner
(reference_broker/ha/runner.py) against the A-MQ "Fault Tolerant Messaging" guide, 3.1.

Lockers are exercised for real (record locks on a temporary directory, a second holder in
another process); the runner's timing is checked by counting what it waits for (a recording
`wait`), never by measuring time."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import textwrap

import pytest

from reference_broker.config import build_config
from reference_broker.ha.locker import LOCK_FILE_NAME, SharedFileLocker
from reference_broker.ha.runner import MasterSlaveRunner, make_locker

HOLD = textwrap.dedent("""
    import sys, time
    from reference_broker.ha.locker import SharedFileLocker
    locker = SharedFileLocker(sys.argv[1])
    print("held" if locker.try_acquire() else "refused", flush=True)
    sys.stdin.readline()   # hold until told to go
""")


class OtherProcess:
    """A locker in another process on the same directory (a second broker host)."""

    def __init__(self, directory) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.answer = self.proc.stdout.readline().strip()

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)


@pytest.fixture
def other(tmp_path):
    started = []

    def start(directory=tmp_path):
        process = OtherProcess(directory)
        started.append(process)
        return process
    yield start
    for process in started:
        process.finish()


def test_a_second_process_cannot_take_a_held_lock_and_takes_it_once_released(tmp_path, other):
    locker = SharedFileLocker(tmp_path)
    assert locker.try_acquire() and locker.held
    assert other().answer == "refused", "FT-SHARED-1: a second broker took the lock the master holds"
    locker.release()
    assert other().answer == "held", "FT-SHARED-3: the released lock could not be taken by the waiting broker"


def test_the_holder_dying_frees_the_lock(tmp_path, other):
    holder = other()
    assert holder.answer == "held"
    locker = SharedFileLocker(tmp_path)
    assert not locker.try_acquire()
    holder.proc.kill()  # kill -9: the kernel drops its locks
    holder.proc.wait(10)
    assert locker.try_acquire(), "FT-SHARED-3: the lock of a killed holder was not freed"
    locker.release()


def test_two_lockers_in_one_process_exclude_each_other(tmp_path):
    """Open-file-description locks: in-process brokers are excluded too (a process-owned lock would
    let both in)."""
    first, second = SharedFileLocker(tmp_path), SharedFileLocker(tmp_path)
    assert first.try_acquire()
    assert not second.try_acquire(), "FT-SHARED-1: two lockers of one process both hold the lock"
    first.release()
    assert second.try_acquire()
    second.release()


def test_a_missing_lock_file_is_recreated_by_the_next_locker(tmp_path):
    locker = SharedFileLocker(tmp_path / "store")
    assert locker.try_acquire()
    locker.release()
    os.unlink(tmp_path / "store" / LOCK_FILE_NAME)
    assert locker.try_acquire(), "FT-SHARED-5: a slave must recreate a missing lock file and lock it"
    assert (tmp_path / "store" / LOCK_FILE_NAME).exists()
    locker.release()


def test_keep_alive_holds_while_the_lock_and_its_file_are_there(tmp_path, other):
    locker = SharedFileLocker(tmp_path)
    assert locker.try_acquire()
    assert locker.keep_alive() and locker.keep_alive()
    assert other().answer == "refused", "FT-SHARED-2: re-checking the lock must not release it"
    locker.release()


def test_keep_alive_fails_when_the_lock_file_is_deleted(tmp_path):
    locker = SharedFileLocker(tmp_path)
    assert locker.try_acquire()
    os.unlink(tmp_path / LOCK_FILE_NAME)
    assert not locker.keep_alive(), "FT-SHARED-2: the master did not notice its lock file was deleted"
    locker.release()


def test_keep_alive_fails_when_the_lock_file_is_replaced(tmp_path, other):
    locker = SharedFileLocker(tmp_path)
    assert locker.try_acquire()
    os.unlink(tmp_path / LOCK_FILE_NAME)
    taker = other()  # recreates the file and locks it: now two "holders" of two files
    assert taker.answer == "held"
    assert not locker.keep_alive(), "FT-SHARED-2: the master kept a lock on a file that is no longer the lock file"
    locker.release()


def test_keep_alive_fails_when_another_holder_took_the_lock(tmp_path, other):
    """What an NFSv4 server does when the master's lease expires: the lock goes, another host takes
    it. Simulated by dropping the master's lock behind its back, then another process locking."""
    locker = SharedFileLocker(tmp_path)
    assert locker.try_acquire()
    locker._fcntl(locker._fd, fcntl.F_UNLCK)  # the server forgot our lock
    assert other().answer == "held"
    assert not locker.keep_alive(), "FT-SHARED-2: the master did not notice another broker holds its lock"
    locker.release()


def test_keep_alive_regains_a_lapsed_lock_nobody_took(tmp_path, other):
    """Guide 3.1: a master that finds its lock invalid first tries to regain it."""
    locker = SharedFileLocker(tmp_path)
    assert locker.try_acquire()
    locker._fcntl(locker._fd, fcntl.F_UNLCK)
    assert locker.keep_alive(), "FT-SHARED-2: a lapsed lock nobody else took must be regained"
    assert other().answer == "refused"
    locker.release()


def test_a_locker_on_an_unusable_directory_says_why(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(OSError, match="lock file"):
        SharedFileLocker(tmp_path / "file").try_acquire()


# ------------------------------------------------------------------ the runner


class FakeLocker:
    """Refuses ``refusals`` attempts, then holds; keep_alive answers from ``alive`` (then True)."""

    def __init__(self, refusals: int = 0, alive: list[bool] | None = None) -> None:
        self.refusals = refusals
        self.alive = list(alive or [])
        self.attempts = 0
        self.checks = 0
        self.held = False
        self.releases = 0

    def try_acquire(self) -> bool:
        self.attempts += 1
        self.held = self.attempts > self.refusals
        return self.held

    def keep_alive(self) -> bool:
        self.checks += 1
        return self.alive.pop(0) if self.alive else True

    def release(self) -> None:
        self.held = False
        self.releases += 1

    def describe(self) -> str:
        return "fake lock"


def _config(tmp_path, keep_alive: int, sleep: int = 10_000):
    return build_config({"name": "t", "stomp": "127.0.0.1:0", "http": None, "data": str(tmp_path),
                         "store": {"kind": "journal", "lock_keep_alive_period": keep_alive,
                                   "locker": {"lock_acquire_sleep_interval": sleep}}})


class Script:
    """A recording ``wait``: notes every requested wait, returns at once, sets ``stop`` after
    ``limit`` waits. ``events`` interleaves the waits with the runner's role changes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.events: list = []

    async def __call__(self, stop: asyncio.Event, seconds: float) -> bool:
        self.events.append(seconds)
        await asyncio.sleep(0)
        if len([e for e in self.events if isinstance(e, float)]) >= self.limit:
            stop.set()
        return stop.is_set()


def _run(runner: MasterSlaveRunner, script: Script) -> None:
    runner.on_master = lambda server: script.events.append(("master", server.stomp_address is not None))
    runner.on_slave = lambda: script.events.append("slave")
    asyncio.run(runner.run(asyncio.Event()))


def test_a_slave_polls_every_acquire_interval_then_waits_one_keep_alive_period(tmp_path):
    locker = FakeLocker(refusals=3)
    script = Script(limit=6)
    runner = MasterSlaveRunner(_config(tmp_path, keep_alive=2000, sleep=700), locker=locker, wait=script)
    _run(runner, script)
    # "slave" once, a poll wait after each refusal, then one keep-alive period before serving
    assert script.events[:6] == ["slave", 0.7, 0.7, 0.7, 2.0, ("master", True)], \
        f"FT-SHARED-3/FT-SHARED-4: slave waits {script.events}"
    assert locker.attempts == 4, "FT-SHARED-3: one lock attempt per acquire interval"
    assert runner.masterships == 1 and locker.releases == 1  # released on stop


def test_a_master_checks_every_keep_alive_period_and_drops_to_slave_when_the_lock_goes(tmp_path):
    locker = FakeLocker(alive=[True, True, True, False])  # 1st check: before serving
    script = Script(limit=8)
    runner = MasterSlaveRunner(_config(tmp_path, keep_alive=1500), locker=locker, wait=script)
    _run(runner, script)
    masters = [e for e in script.events if isinstance(e, tuple)]
    assert masters == [("master", True), ("master", True)], \
        f"FT-SHARED-2: the master did not give up and take over again: {script.events}"
    assert script.events[:6] == [1.5, ("master", True), 1.5, 1.5, 1.5, 1.5], script.events
    assert locker.checks >= 4 and locker.releases == 2


def test_keep_alive_zero_serves_at_once_and_never_rechecks(tmp_path):
    locker = FakeLocker(refusals=1)
    script = Script(limit=100)
    runner = MasterSlaveRunner(_config(tmp_path, keep_alive=0, sleep=250), locker=locker, wait=script)

    async def go():
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        while runner.role != "master":
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # a master with keep-alive 0 just serves
        stop.set()
        await task

    asyncio.run(go())
    # one poll wait, then a zero wait before serving; no keep-alive check at all
    assert script.events[:2] == [0.25, 0.0], script.events
    assert locker.checks == 0, "FT-SHARED-2: keep-alive 0 turns the master's re-check off"


def test_a_slave_has_no_listener_open(tmp_path):
    """FT-SHARED-1 on the runner: while waiting, no BrokerServer exists (no port open)."""
    locker = FakeLocker(refusals=10)
    script = Script(limit=3)
    runner = MasterSlaveRunner(_config(tmp_path, keep_alive=0), locker=locker, wait=script)
    seen = []
    runner.on_slave = lambda: seen.append(runner.server)
    asyncio.run(runner.run(asyncio.Event()))
    assert seen == [None] and runner.masterships == 0, "FT-SHARED-1: a slave opened its listeners"


def test_the_memory_store_takes_no_lock(tmp_path):
    assert make_locker(build_config({"data": str(tmp_path)})) is None
    locker = make_locker(build_config({"data": str(tmp_path), "store": {"kind": "journal"}}))
    assert isinstance(locker, SharedFileLocker) and locker.path == tmp_path / "journal" / LOCK_FILE_NAME


def test_lock_options_have_activemqs_defaults_and_refuse_bad_values():
    from reference_broker.config import ConfigError
    store = build_config({}).store
    assert (store.lock_keep_alive_period, store.locker.lock_acquire_sleep_interval) == (0, 10_000)
    with pytest.raises(ConfigError, match="lock_acquire_sleep_interval"):
        build_config({"store": {"locker": {"lock_acquire_sleep_interval": 0}}})
    with pytest.raises(ConfigError, match="lock_keep_alive_period"):
        build_config({"store": {"lock_keep_alive_period": -1}})
    with pytest.raises(ConfigError, match="did you mean 'lock_keep_alive_period'"):
        build_config({"store": {"lock_keep_alive_periode": 1}})


def test_the_statistics_listener_says_slave_while_waiting_and_master_once_serving(tmp_path):
    import json
    import urllib.error
    import urllib.request

    def get(address, path):
        try:
            with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=5) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    config = build_config({"name": "t", "stomp": "127.0.0.1:0", "http": "127.0.0.1:0", "data": str(tmp_path),
                           "store": {"kind": "journal", "locker": {"lock_acquire_sleep_interval": 50}}})
    locker = FakeLocker(refusals=10**9)  # a slave until the test lets it through
    seen = {}

    async def go():
        stop = asyncio.Event()
        runner = MasterSlaveRunner(config, locker=locker)
        runner.on_slave = lambda: seen.setdefault("slave", True)
        task = asyncio.create_task(runner.run(stop))
        while "slave" not in seen:
            await asyncio.sleep(0.01)
        seen["as slave"] = await asyncio.to_thread(get, runner.http_address, "/health")
        seen["stats as slave"] = await asyncio.to_thread(get, runner.http_address, "/stats")
        locker.refusals = locker.attempts  # the next attempt gets the lock
        while runner.role != "master":
            await asyncio.sleep(0.01)
        seen["as master"] = await asyncio.to_thread(get, runner.http_address, "/health")
        stop.set()
        await task

    asyncio.run(go())
    assert seen["as slave"] == (200, {"status": "slave", "role": "slave"})
    assert seen["stats as slave"][0] == 503 and seen["stats as slave"][1]["role"] == "slave"
    assert seen["as master"][0] == 200 and seen["as master"][1]["role"] == "master"


def test_a_broker_whose_store_directory_is_unusable_exits_with_the_reason(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    proc = subprocess.run([sys.executable, "-m", "reference_broker", "--stomp", "127.0.0.1:0",
                           "--data", str(tmp_path / "file")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "lock file" in proc.stderr and str(tmp_path / "file") in proc.stderr, proc.stderr
