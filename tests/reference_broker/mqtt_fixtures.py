"""Fixtures and helpers for the MQTT front-end tests (imported by the MQTT test modules; the
shared `broker_factory` comes from conftest.py).

* `mqtt_broker_factory(**config)` / `mqtt_broker`: an in-process broker with the MQTT listener on
  127.0.0.1:0 (and STOMP, for cross-protocol tests); `mqtt_address(running)` is its bound address.
* `RawMqtt`: a blocking raw-socket MQTT client that speaks through the project's own codec, for
  exact packets (packet ids, DUP flags, malformed input, keep-alive silence).
* `Paho` / `paho_factory`: paho-mqtt 2.x clients (MQTTv311 or MQTTv5) with thread-safe queues of
  what their network thread saw.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
import uuid
from collections import deque
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

from reference_broker.protocols.mqtt.codec import (
    MQTT_5,
    MQTT_311,
    Connect,
    MqttParser,
    MqttProtocolError,
    Properties,
    encode,
)

TIMEOUT = 5.0


def mqtt_address(running) -> tuple[str, int]:
    return tuple(running.server.mqtt_address)  # type: ignore[return-value]


@pytest.fixture
def mqtt_broker_factory(broker_factory):
    def factory(**config: Any):
        return broker_factory(mqtt="127.0.0.1:0", **config)

    return factory


@pytest.fixture
def mqtt_broker(mqtt_broker_factory):
    return mqtt_broker_factory()


def unique(prefix: str = "t") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- raw socket client


class ConnectionClosed(AssertionError):
    pass


class RawMqtt:
    """A raw MQTT peer: `send(packet)`, `read()`, `expect(cls)`; parses with the project codec."""

    def __init__(self, address: tuple[str, int], version: int = MQTT_311, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.version = version
        self.timeout = timeout
        self.parser = MqttParser(protocol_level=version, max_packet_size=1 << 28)
        self.packets: deque = deque()
        self.eof = False

    def send(self, packet) -> None:
        self.sock.sendall(encode(packet, self.version))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, client_id: str = "", clean: bool = True, keep_alive: int = 60, **kwargs: Any):
        """CONNECT and return the CONNACK."""
        self.send(Connect(protocol_level=self.version, clean_start=clean, keep_alive=keep_alive,
                          client_id=client_id, **kwargs))
        return self.read()

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no packet from the broker in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no packet from the broker in time") from None
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.packets.extend(self.parser.feed(data))
        return True

    def read(self, timeout: float | None = None):
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.packets:
            if self.eof or not self._fill(deadline):
                raise ConnectionClosed("the broker closed the connection")
        return self.packets.popleft()

    def expect(self, cls, timeout: float | None = None):
        packet = self.read(timeout)
        assert isinstance(packet, cls), f"expected {cls.__name__}, got {packet!r}"
        return packet

    def no_packet(self, within: float = 0.3) -> None:
        deadline = time.monotonic() + within
        try:
            while not self.packets and not self.eof:
                self._fill(deadline)
        except TimeoutError:
            pass
        assert not self.packets, f"unexpected packet {self.packets[0]!r}"

    def wait_closed(self, timeout: float = TIMEOUT) -> list:
        """Read until the broker closes the connection; returns the packets read meanwhile."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            self._fill(deadline)
        packets = list(self.packets)
        self.packets.clear()
        return packets

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawMqtt":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@pytest.fixture
def raw_mqtt():
    opened: list[RawMqtt] = []

    def factory(address: tuple[str, int], version: int = MQTT_311) -> RawMqtt:
        client = RawMqtt(address, version)
        opened.append(client)
        return client

    yield factory
    for client in opened:
        client.close()


# --------------------------------------------------------------------------- paho-mqtt client


class Paho:
    """A paho-mqtt 2.x client (network loop in its own thread) with queues of what it saw."""

    def __init__(self, address: tuple[str, int], version: int, client_id: str = "", **kwargs: Any) -> None:
        self.address = address
        self.version = version
        protocol = paho.MQTTv5 if version == MQTT_5 else paho.MQTTv311
        # No automatic reconnection: a test decides when to connect again.
        args: dict[str, Any] = {"callback_api_version": CallbackAPIVersion.VERSION2, "client_id": client_id,
                                "protocol": protocol, "reconnect_on_failure": False}
        if version != MQTT_5:
            args["clean_session"] = kwargs.pop("clean_session", True)
        args.update(kwargs)
        self.client = paho.Client(**args)
        self.messages: queue.Queue = queue.Queue()
        self.connacks: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self._subacks: dict[int, list] = {}
        self._cond = threading.Condition()
        self.client.on_message = lambda c, u, msg: self.messages.put(msg)
        self.client.on_connect = lambda c, u, flags, rc, props: self.connacks.put((flags, rc, props))
        self.client.on_disconnect = lambda c, u, flags, rc, props: self.disconnects.put(rc)
        self.client.on_subscribe = self._on_subscribe

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        with self._cond:
            self._subacks[mid] = list(reason_codes)
            self._cond.notify_all()

    def connect(self, keepalive: int = 60, clean_start: bool | None = None, properties: PahoProperties | None = None,
                will: tuple | None = None, expect_success: bool = True):
        if will is not None:
            topic, payload, qos, retain, *rest = will
            self.client.will_set(topic, payload, qos, retain, properties=rest[0] if rest else None)
        kwargs: dict[str, Any] = {"keepalive": keepalive}
        if self.version == MQTT_5:
            kwargs["clean_start"] = True if clean_start is None else clean_start
            if properties is not None:
                kwargs["properties"] = properties
        self.client.connect(*self.address, **kwargs)
        self.client.loop_start()
        flags, rc, props = self.connacks.get(timeout=TIMEOUT)
        if expect_success:
            assert not rc.is_failure, f"CONNACK refused: {rc}"
        return flags, rc, props

    def subscribe(self, topic: str, qos: int = 0, **options: Any) -> list:
        """SUBSCRIBE and wait for the SUBACK; returns its reason codes."""
        if self.version == MQTT_5:
            props = options.pop("properties", None)
            result, mid = self.client.subscribe(topic, options=SubscribeOptions(qos=qos, **options), properties=props)
        else:
            result, mid = self.client.subscribe(topic, qos)
        assert result == paho.MQTT_ERR_SUCCESS
        with self._cond:
            assert self._cond.wait_for(lambda: mid in self._subacks, TIMEOUT), "no SUBACK"
            return self._subacks.pop(mid)

    def publish(self, topic: str, payload: bytes | str = b"", qos: int = 0, retain: bool = False,
                properties: PahoProperties | None = None) -> None:
        info = self.client.publish(topic, payload, qos, retain, properties=properties)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), "publish not acknowledged in time"

    def get(self, timeout: float = TIMEOUT):
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message arrived in time") from None

    def get_n(self, n: int, timeout: float = TIMEOUT) -> list:
        return [self.get(timeout) for _ in range(n)]

    def assert_no_message(self, within: float = 0.3) -> None:
        try:
            msg = self.messages.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected message on {msg.topic}: {msg.payload!r}")

    def sync(self) -> None:
        """A round trip through the broker (a QoS 1 publish to a private topic)."""
        self.publish(f"sync/{uuid.uuid4().hex}", b"", qos=1)

    def disconnect(self, properties: PahoProperties | None = None, reasoncode=None) -> None:
        self.client.disconnect(reasoncode=reasoncode, properties=properties)
        self.client.loop_stop()

    def kill(self) -> None:
        """Drop the connection without DISCONNECT (an abnormal close, for wills): the socket is
        shut down under paho, which then sees a lost connection and stops."""
        sock = self.client.socket()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        assert self.disconnects.get(timeout=TIMEOUT) is not None
        self.client.loop_stop()

    def close(self) -> None:
        try:
            self.client.disconnect()
        except Exception:  # noqa: BLE001 - best effort at teardown
            pass
        self.client.loop_stop()


@pytest.fixture
def paho_factory():
    made: list[Paho] = []

    def factory(address: tuple[str, int], version: int = MQTT_311, client_id: str = "", **kwargs: Any) -> Paho:
        client = Paho(address, version, client_id, **kwargs)
        made.append(client)
        return client

    yield factory
    for client in made:
        client.close()


def props(packet_type: int = PacketTypes.PUBLISH, **values: Any) -> PahoProperties:
    """paho Properties of a packet type, e.g. props(MessageExpiryInterval=5)."""
    p = PahoProperties(packet_type)
    for name, value in values.items():
        setattr(p, name, value)
    return p


__all__ = [
    "MQTT_311", "MQTT_5", "TIMEOUT", "ConnectionClosed", "MqttProtocolError", "Paho", "PacketTypes",
    "Properties", "RawMqtt", "mqtt_address", "props", "unique",
]
