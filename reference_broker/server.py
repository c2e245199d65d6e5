"""Assembles a running broker: the store, the engine, and the network listeners, with the
periodic housekeeping (heart-beats, expiry) and a clean shutdown."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from .config import BrokerConfig
from .engine.broker import Broker
from .engine.network_principal import register_stomp_port, unregister_stomp_port
from .listeners.amqp import AmqpProtocol
from .listeners.http import serve_http
from .listeners.mqtt import MqttProtocol
from .listeners.stomp import StompProtocol
from .loop_lag import LoopLag
from .store.base import MessageStore, StoreError, SyncPolicy
from .protocols.mqtt.session import MqttSessionRegistry
from .tls import READY_NAMES, TLS_LISTENERS, server_contexts
from .store.memory import MemoryStore
from .store.journal import JournalStore

log = logging.getLogger("reference_broker")

TICK_SECONDS = 0.25  # heart-beat resolution; well under the smallest sensible heart-beat


def store_directory(config: BrokerConfig) -> Path:
    """The journal's directory: what master/slave brokers share (and lock)."""
    return Path(config.store.directory or Path(config.data) / "journal")


def open_store(config: BrokerConfig, *, lock: bool = True) -> MessageStore:
    """The configured store; ``lock=False``: the caller already guards the journal's directory
    (the master/slave runner's locker), so the journal takes no lock of its own."""
    if config.store.kind == "memory":
        return MemoryStore()
    if config.store.kind == "database":
        from .store.database import DatabaseStore  # psycopg only where a database is configured

        # a flush that waits on the database holds the event loop: bound it well inside the lease,
        # so a master cut off from its database fails its sends before the lease passes on
        return DatabaseStore(config.store.dsn, call_timeout_s=config.store.locker.lock_acquire_sleep_interval / 2000)

    return JournalStore(
        store_directory(config),
        sync=SyncPolicy(config.store.sync),
        sync_interval_ms=config.store.sync_interval_ms,
        segment_size=config.store.segment_size,
        compact_ratio=config.store.compact_ratio,
        discard_damaged=config.store.discard_damaged,
        lock=lock,
        io_timeout_s=config.store.io_timeout_ms / 1000,
    )


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class BrokerServer:
    """`await server.start()` binds the listeners; `server.stomp_address` is then the bound
    (host, port), useful with port 0. `await server.stop()` closes everything."""

    def __init__(self, config: BrokerConfig, store: MessageStore | None = None) -> None:
        self.config = config
        self.store = store if store is not None else open_store(config)
        self.broker = Broker(config, self.store)
        self.broker.recover()
        #: set when the store became unusable (a write failed or stalled): the server has stopped
        #: serving by then, and the master/slave runner gives up mastership (ha/runner.py)
        self.store_failed = asyncio.Event()
        self._aborted = False
        if hasattr(self.store, "on_failure"):
            self.store.on_failure = self._on_store_failure
        self._connections: set[StompProtocol | AmqpProtocol] = set()
        self._servers: list[asyncio.AbstractServer] = []
        self._tick_task: asyncio.Task | None = None
        self.loop_lag = LoopLag()
        self.broker.loop_lag = self.loop_lag  # shown by /health
        self._lag_task: asyncio.Task | None = None
        self.stomp_address: tuple[str, int] | None = None
        self.amqp_address: tuple[str, int] | None = None
        self.mqtt_address: tuple[str, int] | None = None
        # MQTT sessions outlive their connections (in memory): one registry per broker.
        self.mqtt_sessions = MqttSessionRegistry(self.broker, config.mqtt_options)
        self.http_address: tuple[str, int] | None = None
        # TLS listener option (stomp_ssl, mqtt_ssl, amqp_ssl, https) -> bound (host, port)
        self.tls_addresses: dict[str, tuple[str, int]] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        if cfg.stomp:
            host, port = _split(cfg.stomp)
            try:
                server = await loop.create_server(
                    lambda: StompProtocol(self.broker, cfg.stomp_options, self._connections), host, port,
                    reuse_address=True,
                )
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen for STOMP on {cfg.stomp} (option 'stomp'): {exc.strerror}") from None
            self._servers.append(server)
            self.stomp_address = server.sockets[0].getsockname()[:2]
            register_stomp_port(self.stomp_address[1])  # bridges of this process may say who they are
        if cfg.amqp:
            host, port = _split(cfg.amqp)
            try:
                server = await loop.create_server(
                    lambda: AmqpProtocol(self.broker, cfg.amqp_options, self._connections), host, port,
                    reuse_address=True,
                )
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen for AMQP on {cfg.amqp} (option 'amqp'): {exc.strerror}") from None
            self._servers.append(server)
            self.amqp_address = server.sockets[0].getsockname()[:2]
        if cfg.mqtt:
            host, port = _split(cfg.mqtt)
            try:
                server = await loop.create_server(
                    lambda: MqttProtocol(self.broker, cfg.mqtt_options, self.mqtt_sessions, self._connections),
                    host, port, reuse_address=True,
                )
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen for MQTT on {cfg.mqtt} (option 'mqtt'): {exc.strerror}") from None
            self._servers.append(server)
            self.mqtt_address = server.sockets[0].getsockname()[:2]
        if cfg.http:
            host, port = _split(cfg.http)
            try:
                server = await serve_http(self.broker, host, port)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen for HTTP on {cfg.http} (option 'http'): {exc.strerror}") from None
            self._servers.append(server)
            self.http_address = server.sockets[0].getsockname()[:2]
        await self._start_tls_listeners()
        self._tick_task = asyncio.create_task(self._housekeeping())
        self._lag_task = asyncio.create_task(self.loop_lag.run())

    def _protocol_factory(self, protocol: str):
        cfg = self.config
        if protocol == "stomp":
            return lambda: StompProtocol(self.broker, cfg.stomp_options, self._connections)
        if protocol == "amqp":
            return lambda: AmqpProtocol(self.broker, cfg.amqp_options, self._connections)
        return lambda: MqttProtocol(self.broker, cfg.mqtt_options, self.mqtt_sessions, self._connections)

    async def _start_tls_listeners(self) -> None:
        """The TLS listeners (reference_broker/tls.py): the same protocols behind asyncio's TLS
        transport, which finishes the handshake before a session sees the connection. The
        contexts are built first, so a bad file stops start-up before any TLS port opens."""
        loop = asyncio.get_running_loop()
        for option, context in server_contexts(self.config).items():
            listener = getattr(self.config, option)
            protocol = TLS_LISTENERS[option]
            host, port = _split(listener.address)
            timeout = listener.tls_handshake_timeout_ms / 1000
            try:
                if protocol == "http":
                    server = await serve_http(self.broker, host, port, ssl=context, ssl_handshake_timeout=timeout)
                else:
                    server = await loop.create_server(self._protocol_factory(protocol), host, port, reuse_address=True,
                                                      ssl=context, ssl_handshake_timeout=timeout)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot listen for {READY_NAMES[option]} on {listener.address} "
                                         f"(option '{option}.address'): {exc.strerror}") from None
            self._servers.append(server)
            self.tls_addresses[option] = server.sockets[0].getsockname()[:2]

    def _tick_period(self) -> float:
        """Timer period: TICK_SECONDS, or less when the configured heart-beats are short, so the
        timer fires at least twice per negotiated interval (negotiation never goes below the
        configured values) and no heart-beat is sent late."""
        o = self.config.stomp_options
        shortest = [ms / 2000 for ms in (o.heart_beat_send_ms, o.heart_beat_receive_ms) if ms]
        return max(0.005, min([TICK_SECONDS, *shortest]))

    async def _housekeeping(self) -> None:
        last_expiry = time.monotonic()
        period = self.config.expiry_check_period_ms / 1000
        period = self._tick_period()
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for connection in list(self._connections):
                connection.tick(now, period)
            self.mqtt_sessions.tick(now)  # MQTT session expiry and delayed wills
            if now - last_expiry >= period:
                last_expiry = now
                self.broker.tick()
            try:
                self.broker.flush()
            except StoreError:
                return  # the store failed: the server is stopping (_on_store_failure logged why)

    async def stop(self) -> None:
        if self._tick_task is not None:
            self._tick_task.cancel()
        if self._lag_task is not None:
            self._lag_task.cancel()
        self.mqtt_sessions.close()  # connections closed by the shutdown publish no wills
        if self.stomp_address is not None:
            unregister_stomp_port(self.stomp_address[1])
        for server in self._servers:
            server.close()
        for connection in list(self._connections):
            if connection.transport is not None:
                connection.transport.close()
        for server in self._servers:
            await server.wait_closed()
        self.broker.close()
        log.info("broker %r stopped", self.config.name)

    def _on_store_failure(self, exc: BaseException) -> None:
        """The store failed in the middle of serving (called from inside a flush, on the loop):
        stop serving at once, as a master that lost its lock does. Nothing the failed write held
        was confirmed (receipts leave only after a flush returns), and clients of a master/slave
        group fail over to the master that takes the store over."""
        log.error("broker %r: the message store failed (%s): closing the listeners and every client connection",
                  self.config.name, exc)
        self.store_failed.set()
        self._abort_now(f"its message store failed: {exc}")

    async def abort(self, reason: str = "it no longer holds the store's lock") -> None:
        """Stop serving at once without writing to the store again: a master that lost the
        store's lock (reference_broker/ha/runner.py), or whose store failed. The store is abandoned
        first, so nothing the closing connections trigger reaches the shared files; then listeners
        and client connections are closed (clients see the connection drop and fail over).
        Idempotent."""
        self._abort_now(reason)
        for server in self._servers:
            await server.wait_closed()

    def _abort_now(self, reason: str) -> None:
        if self._aborted:
            return
        self._aborted = True
        if self._tick_task is not None:
            self._tick_task.cancel()
        abandon = getattr(self.store, "abandon", None)
        if abandon is not None:
            abandon()
        self.mqtt_sessions.close()
        for server in self._servers:
            server.close()
        for connection in list(self._connections):
            if connection.transport is not None:
                connection.transport.abort()
        log.warning("broker %r stopped serving: %s", self.config.name, reason)
