"""A wire tap for MQTT: a TCP relay on loopback between a client and its broker that records, per
connection, the control packets the client sent, in the order the broker was given them.

A test whose subject is what a broker does after a packet (ACK-MQTT-LEAVE-1: a PUBACK followed at
once by DISCONNECT) uses it as its setup check: before a broker is held to a packet, the tap shows
the packet really went out, in that order, and the connection ended with a clean close (the tap
passes the client's end of stream on as its own, ``shutdown(SHUT_WR)``, after the last byte).
Relaying changes nothing in the bytes or their order; it only adds a hop on loopback.

Stopped by its handle (`close`): the listening socket and every relayed connection are closed,
its threads end with them.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

#: MQTT control packet types by the high nibble of the first byte (MQTT 3.1.1 § 2.2.1, 5.0 § 2.1.2)
PACKET_NAMES = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP",
                8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
                14: "DISCONNECT", 15: "AUTH"}
#: packets whose variable header starts with the packet identifier
WITH_PACKET_ID = {"PUBACK", "PUBREC", "PUBREL", "PUBCOMP"}


@dataclass
class TappedConnection:
    """What one client sent: ``packets`` as ("PUBACK", packet id) or ("DISCONNECT", None), and how
    its stream ended (``ended``: "eof" for a clean close, the error otherwise; None while open);
    ``broker_ended`` likewise for the broker's side: once it is set the broker has let the
    connection go, so it is done with everything the client sent on it."""
    packets: list[tuple[str, int | None]] = field(default_factory=list)
    ended: str | None = None
    broker_ended: str | None = None

    def describe(self) -> str:
        shown = [name if pid is None else f"{name} {pid}" for name, pid in self.packets]
        return (f"{' -> '.join(shown)} -> client: {self.ended or 'still open'}, "
                f"broker: {self.broker_ended or 'still open'}")


class MqttWireTap:
    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.connections: list[TappedConnection] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server((host, 0))
        self.address = self._listener.getsockname()[:2]
        threading.Thread(target=self._accept, name="mqtt-wiretap", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by `close`
            try:
                broker = socket.create_connection(self.upstream, timeout=10)
                broker.settimeout(None)
            except OSError:
                client.close()
                continue
            tapped = TappedConnection()
            with self._lock:
                self.connections.append(tapped)
                self._sockets += [client, broker]
            threading.Thread(target=self._relay, args=(client, broker, tapped, True), daemon=True).start()
            threading.Thread(target=self._relay, args=(broker, client, tapped, False), daemon=True).start()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket, tapped: TappedConnection, from_client: bool) -> None:
        pending = b""
        ended = "eof"
        try:
            while data := source.recv(65536):
                if from_client:
                    pending = _parse(pending + data, tapped.packets)
                sink.sendall(data)
        except OSError as exc:
            ended = f"error: {exc}"
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)  # the end of stream passed on, after the last byte
            except OSError:
                pass
            if from_client:
                tapped.ended = ended
            else:
                tapped.broker_ended = ended

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> "MqttWireTap":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parse(buffer: bytes, packets: list[tuple[str, int | None]]) -> bytes:
    """Append every complete packet of ``buffer`` to ``packets``; return the incomplete rest."""
    while len(buffer) >= 2:
        length, multiplier, at = 0, 1, 1
        while True:  # the remaining length: up to four bytes, seven bits each (§ 2.2.3)
            if at >= len(buffer):
                return buffer
            byte = buffer[at]
            length += (byte & 0x7F) * multiplier
            multiplier *= 128
            at += 1
            if not byte & 0x80:
                break
        if len(buffer) < at + length:
            return buffer
        name = PACKET_NAMES.get(buffer[0] >> 4, f"type {buffer[0] >> 4}")
        packet_id = int.from_bytes(buffer[at:at + 2], "big") if name in WITH_PACKET_ID and length >= 2 else None
        packets.append((name, packet_id))
        buffer = buffer[at + length:]
    return buffer
