"""The reference broker as master or slave of a shared store (A-MQ "Fault Tolerant Messaging"
guide, 3.1: "Initial state", "File locking requirements", "State after failure of the master",
"Reintroducing a failed node").

`MasterSlaveRunner.run` is the broker's life when its store is shared:

1. **Slave.** Try the store's lock (`reference_broker.ha.locker`); while another broker holds it,
   log ``waiting for lock on ...`` once and try again every ``lock_acquire_sleep_interval``. No
   STOMP / AMQP / MQTT listener is open and no network connector runs: only the master opens its
   connectors. The statistics listener (HTTP) stays open and answers ``slave``.
2. **Taking over.** With the lock, wait one ``lock_keep_alive_period`` before serving (the guide's
   slave does), check the lock is still ours, then open the store (recovering what the previous
   master wrote), the listeners and the network connectors.
3. **Master.** Every ``lock_keep_alive_period`` check that the lock is still held and the lock
   file still exists (`Locker.keep_alive`). When either fails, stop serving at once: abandon the
   store without writing to it again, close the listeners and every client connection, then go
   back to 1 as a slave. ``lock_keep_alive_period = 0`` turns the check off (ActiveMQ's default).

Going back to slave rather than exiting: the guide says the master "enters Slave mode". ActiveMQ
reaches the same state by stopping the broker and asking for a restart (LockableServiceSupport.
stopBroker calls BrokerService.requestRestart when restartAllowed, its default, and the
``activemq`` start command starts the broker again, which then waits for the lock); here the
process stays and only the broker inside it is replaced, so the statistics listener and the
process id survive the change of role.

Without a locker (the memory store) the runner serves at once, as a lone broker does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from ..config import BrokerConfig
from ..listeners.http import serve_http
from ..server import BrokerServer, _split, open_store, store_directory
from ..store.base import StoreError, StoreStalled
from ..store.bounded_db import dsn_without_password, one_line
from .locker import Locker, LockerError, SharedFileLocker

__all__ = ["MasterSlaveRunner", "make_locker"]

log = logging.getLogger("reference_broker.ha")


def make_locker(config: BrokerConfig) -> Locker | None:
    """The locker guarding ``config``'s store: the shared-file locker on the journal's directory,
    the lease in the database of a database store; None for the memory store, which nothing else
    can open."""
    if config.store.kind == "database":
        from .lease import LeaseDatabaseLocker

        locker = config.store.locker
        return LeaseDatabaseLocker(config.store.dsn, holder=config.name, lease_ms=locker.lock_acquire_sleep_interval,
                                   max_allowable_diff_from_db_time_ms=locker.max_allowable_diff_from_db_time)
    if config.store.kind != "journal":
        return None
    return SharedFileLocker(store_directory(config), holder=f"broker {config.name!r}")


class MasterSlaveRunner:
    """Runs one broker as master or slave until ``stop`` is set (see the module documentation).

    ``serve(server)`` is called each time the broker becomes master, with its started
    `BrokerServer`, and may start more on it (network connectors); it returns an async
    ``shutdown(graceful)`` for what it started. ``on_master(server)`` / ``on_slave()`` report
    the role to whoever watches (the command line prints a line launchers wait for). ``wait(s)``
    sleeps ``s`` seconds unless ``stop`` is set first (True then): a seam for tests that count
    polls rather than measure time."""

    def __init__(self, config: BrokerConfig, *, locker: Locker | None = None,
                 serve: Callable[[BrokerServer], Awaitable[Callable[[bool], Awaitable[None]]]] | None = None,
                 on_master: Callable[[BrokerServer], None] | None = None,
                 on_slave: Callable[[], None] | None = None,
                 wait: Callable[[asyncio.Event, float], Awaitable[bool]] | None = None) -> None:
        self.config = config
        self.locker = locker if locker is not None else make_locker(config)
        self.serve = serve
        self.on_master = on_master or (lambda server: None)
        self.on_slave = on_slave or (lambda: None)
        self._wait = wait or _wait_or_stop
        self.server: BrokerServer | None = None
        self.role = "starting"
        self.masterships = 0  # how often this broker became master
        self.polls = 0  # lock attempts made as a slave
        self.http_address: tuple[str, int] | None = None
        # The statistics listener belongs to the runner (open as slave and master alike), the
        # protocol listeners to each mastership's BrokerServer.
        self._server_config = config.model_copy(update={"http": None})

    @property
    def keep_alive_s(self) -> float:
        return self.config.store.lock_keep_alive_period / 1000

    @property
    def acquire_sleep_s(self) -> float:
        return self.config.store.locker.lock_acquire_sleep_interval / 1000

    def current_broker(self):
        """The serving broker's engine, None while a slave (the HTTP listener's view)."""
        return self.server.broker if self.server is not None else None

    async def open_http(self) -> None:
        """Open the statistics listener, if configured (before `run`, so its port is known even
        while the broker waits as a slave)."""
        if self.config.http and self.http_address is None:
            host, port = _split(self.config.http)
            try:
                server = await serve_http(self.current_broker, host, port)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen for HTTP on {self.config.http} (option 'http'): "
                                         f"{exc.strerror}") from None
            self._http = server
            self.http_address = server.sockets[0].getsockname()[:2]

    async def run(self, stop: asyncio.Event) -> None:
        """Serve as master whenever this broker holds the lock, until ``stop`` is set."""
        await self.open_http()
        try:
            await self._run(stop)
        finally:
            http = getattr(self, "_http", None)
            if http is not None:
                http.close()
                await http.wait_closed()

    async def _run(self, stop: asyncio.Event) -> None:
        await self._prepare_store()
        while not stop.is_set():
            if self.locker is not None and not await self._become_master(stop):
                return
            store = None
            try:
                store = open_store(self.config, lock=self.locker is None)
                server = BrokerServer(self._server_config, store=store)
            except StoreStalled as exc:
                # The shared file system stopped answering, or the database did not answer within
                # the lease's budget, while the new master opened or read the store: not a broken
                # store, so wait as a slave again instead of exiting (a CI run's loaded machine
                # kept a new master's first database call past 1.5 s, and the group was left with
                # no broker at all).
                log.error("could not open or recover the store (%s): giving the lock back, waiting as a slave again", exc)
                if store is not None:
                    store.abandon()
                await self._release_bounded()
                continue
            except BaseException:
                self._release()  # a store that cannot be opened: give the lock back, say why
                raise
            shutdown = None
            try:
                await server.start()
                if self.serve is not None:
                    shutdown = await self.serve(server)
            except BaseException:
                await server.stop()
                self._release()
                raise
            self.server, self.role = server, "master"
            self.masterships += 1
            self.on_master(server)
            lost = await self._master(stop, server)
            self.server = None
            if shutdown is not None:
                await shutdown(not lost)
            if lost:
                await server.abort()
                await self._release_bounded()
                continue  # back to waiting as a slave
            await server.stop()
            self._release()
            return

    async def _prepare_store(self) -> None:
        """What a store needs once, before this broker tries the lock: a database store's tables.
        Created inside the lease, they would cost a DDL commit (and its fsync) in the time the
        new master has before its first renewal; a slow database would then fail a start that
        had nothing to do with the lease."""
        if self.config.store.kind != "database":
            return
        from ..store.database import create_schema  # psycopg only where a database is configured

        try:
            await asyncio.to_thread(create_schema, self.config.store.dsn)
        except Exception as exc:
            raise StoreError(f"could not create the tables in the database "
                             f"({dsn_without_password(self.config.store.dsn)}): {one_line(exc)}") from exc

    async def _become_master(self, stop: asyncio.Event) -> bool:
        """Wait as a slave until the lock is ours and one keep-alive period has passed; False
        when ``stop`` came first."""
        self.role = "slave"
        announced = False
        while True:
            self.polls += 1
            try:
                got = await asyncio.to_thread(self.locker.try_acquire)
            except LockerError as exc:
                if self.polls == 1:
                    raise  # at start-up: a store directory that cannot be used is a configuration error
                # later (e.g. the shared file system stopped answering): a slave keeps trying
                log.error("cannot try the store's lock: %s", exc)
                got = False
            if got:
                log.info("got the %s; becoming master in one keep-alive period (%d ms)",
                         self.locker.describe(), self.config.store.lock_keep_alive_period)
                if await self._wait(stop, self.keep_alive_s):
                    self._release()
                    return False
                if self.keep_alive_s == 0 or await asyncio.to_thread(self.locker.keep_alive):
                    return True
                log.error("lost the %s while waiting to become master; waiting as a slave again",
                          self.locker.describe())
                self._release()
            elif not announced:
                announced = True
                log.info("waiting for lock on the %s: another broker is master, this broker is a slave "
                         "(trying again every %d ms)", self.locker.describe(),
                         self.config.store.locker.lock_acquire_sleep_interval)
                self.on_slave()
            if await self._wait(stop, self.acquire_sleep_s):
                return False

    async def _master(self, stop: asyncio.Event, server: BrokerServer) -> bool:
        """Serve until ``stop`` (False), or until the keep-alive check fails or the store fails
        (True: give mastership up). A keep-alive check that does not answer within the store's
        I/O deadline (``store.io_timeout_ms``: the shared file system stopped answering) counts as
        failed: waiting for it would leave a master serving whose lock may be gone."""
        wake = asyncio.Event()  # stop, or the store failed (the server has stopped serving then)
        watchers = [asyncio.create_task(_relay(event, wake)) for event in (stop, server.store_failed)]
        try:
            if self.locker is None or self.keep_alive_s == 0:
                await wake.wait()
            else:
                while not await self._wait(wake, self.keep_alive_s):
                    if not await self._keep_alive_bounded():
                        log.error("no longer able to keep the %s: giving up being master", self.locker.describe())
                        self.role = "slave"
                        return True
        finally:
            for watcher in watchers:
                watcher.cancel()
        if server.store_failed.is_set() and not stop.is_set():
            log.error("the message store failed: giving up being master of the %s",
                      self.locker.describe() if self.locker is not None else "store")
            self.role = "slave"
            return True
        return False

    @property
    def io_timeout_s(self) -> float:
        return self.config.store.io_timeout_ms / 1000

    async def _keep_alive_bounded(self) -> bool:
        if self.config.store.kind != "journal":  # the database lease bounds its own calls (ha/lease.py)
            return await asyncio.to_thread(self.locker.keep_alive)
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.locker.keep_alive), self.io_timeout_s)
        except asyncio.TimeoutError:
            log.error("the check of the %s did not answer within store.io_timeout_ms (%d ms)",
                      self.locker.describe(), self.config.store.io_timeout_ms)
            return False

    async def _release_bounded(self) -> None:
        """Give the lock up without waiting longer than the I/O deadline on a file system that
        stopped answering (the release goes on in its thread; the lock ends with the lease)."""
        if self.locker is None:
            return
        if self.config.store.kind != "journal":
            self._release()
            return
        try:
            await asyncio.wait_for(asyncio.to_thread(self.locker.release), self.io_timeout_s)
        except asyncio.TimeoutError:
            log.error("releasing the %s did not answer within store.io_timeout_ms (%d ms)",
                      self.locker.describe(), self.config.store.io_timeout_ms)

    def _release(self) -> None:
        if self.locker is not None:
            self.locker.release()


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _wait_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` unless ``stop`` is set first; whether it was."""
    if stop.is_set():
        return True
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
        return True
    except asyncio.TimeoutError:
        return False
