"""Assembles a running broker: the store, the engine, and the network listeners, with the
periodic housekeeping (heart-beats, expiry) and a clean shutdown."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from .config import BrokerConfig
from .engine.broker import Broker
from .listeners.amqp import AmqpProtocol
from .listeners.http import serve_http
from .listeners.mqtt import MqttProtocol
from .listeners.stomp import StompProtocol
from .loop_lag import LoopLag
from .store.base import MessageStore, SyncPolicy
from .protocols.mqtt.session import MqttSessionRegistry
from .store.memory import MemoryStore
from .store.journal import JournalStore

log = logging.getLogger("reference_broker")

TICK_SECONDS = 0.25  # heart-beat resolution; well under the smallest sensible heart-beat


def open_store(config: BrokerConfig) -> MessageStore:
    if config.store.kind == "memory":
        return MemoryStore()

    directory = Path(config.store.directory or Path(config.data) / "journal")
    return JournalStore(
        directory,
        sync=SyncPolicy(config.store.sync),
        sync_interval_ms=config.store.sync_interval_ms,
        segment_size=config.store.segment_size,
        compact_ratio=config.store.compact_ratio,
    )


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class BrokerServer:
    """`await server.start()` binds the listeners; `server.stomp_address` is then the bound
    (host, port), useful with port 0. `await server.stop()` closes everything."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store = open_store(config)
        self.broker = Broker(config, self.store)
        self.broker.recover()
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
        self._tick_task = asyncio.create_task(self._housekeeping())
        self._lag_task = asyncio.create_task(self.loop_lag.run())

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
            self.broker.flush()

    async def stop(self) -> None:
        if self._tick_task is not None:
            self._tick_task.cancel()
        if self._lag_task is not None:
            self._lag_task.cancel()
        self.mqtt_sessions.close()  # connections closed by the shutdown publish no wills
        for server in self._servers:
            server.close()
        for connection in list(self._connections):
            if connection.transport is not None:
                connection.transport.close()
        for server in self._servers:
            await server.wait_closed()
        self.broker.close()
        log.info("broker %r stopped", self.config.name)
