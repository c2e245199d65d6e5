"""conformance/clients/mqtt_wiretap.py: the tap relays bytes unchanged and names the client's
packets in order, split across reads or not, and tells when each side let the connection go."""

from __future__ import annotations

import socket
import threading
import time

from conformance.clients.mqtt_wiretap import MqttWireTap, _parse

PUBACK_5 = bytes([0x40, 0x02, 0x00, 0x05])
DISCONNECT = bytes([0xE0, 0x00])
PUBLISH_QOS1 = bytes([0x32, 0x09, 0x00, 0x03]) + b"a/b" + bytes([0x00, 0x07]) + b"xx"


def test_packets_are_named_in_order_even_when_split_across_reads():
    packets: list = []
    rest = _parse(PUBLISH_QOS1 + PUBACK_5[:3], packets)
    assert packets == [("PUBLISH", None)] and rest == PUBACK_5[:3]
    assert _parse(rest + PUBACK_5[3:] + DISCONNECT, packets) == b""
    assert packets == [("PUBLISH", None), ("PUBACK", 5), ("DISCONNECT", None)]


def test_the_tap_relays_unchanged_and_records_both_ends():
    received = bytearray()
    server = socket.create_server(("127.0.0.1", 0))

    def broker() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1024):
                received.extend(data)
        # closing after the client's end of stream, as a broker does after DISCONNECT

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    with MqttWireTap(server.getsockname()[:2]) as tap:
        with socket.create_connection(tap.address) as client:
            client.sendall(PUBACK_5)
            client.sendall(DISCONNECT)
        thread.join(5)
        deadline = time.monotonic() + 5
        while (not tap.connections or tap.connections[0].broker_ended is None) and time.monotonic() < deadline:
            time.sleep(0.01)
        (tapped,) = tap.connections
    server.close()
    assert bytes(received) == PUBACK_5 + DISCONNECT
    assert tapped.packets == [("PUBACK", 5), ("DISCONNECT", None)]
    assert tapped.ended == "eof" and tapped.broker_ended == "eof", tapped.describe()
    assert tapped.describe() == "PUBACK 5 -> DISCONNECT -> client: eof, broker: eof"
