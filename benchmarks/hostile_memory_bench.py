"""The two memory attacks of issue 20 (items 4 and 5) against a reference broker subprocess, with
the broker's RSS printed before and after each. No assertions: the tests in
tests/reference_broker/test_connection_limits.py check the behaviour at small scale; this shows
the memory at the issue's scale (memory_limit 32 MB).

1. Transaction: BEGIN, then 1 KB SENDs that are never committed, a receipt every 1000. The
   connection limits on transaction size are raised here so the memory limit is what stops it.
2. Retained: 1 KB retained MQTT messages, then `#` subscribers that never read.

    python3 benchmarks/hostile_memory_bench.py [--sends N] [--retained N] [--subscribers N]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from conformance.targets.reference.process import ReferenceBrokerProcess  # noqa: E402
from reference_broker.protocols.mqtt.codec import (  # noqa: E402
    MQTT_311,
    Connect,
    Publish,
    Subscribe,
    Subscription,
    encode,
)
from reference_broker.protocols.stomp.codec import StompParser, serialize_frame  # noqa: E402

BODY = b"x" * 1024
CONFIG = """
[system_usage]
memory_limit = 33554432
[connection_limits]
max_transaction_messages = 100000000
max_transaction_bytes = 1099511627776
"""


def rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return -1


def transaction_attack(broker: ReferenceBrokerProcess, sends: int) -> str:
    parser = StompParser()
    receipted, error = 0, None
    with socket.create_connection(broker.stomp_address) as sock:
        sock.sendall(serialize_frame("CONNECT", [("accept-version", "1.2"), ("host", "x")], b"", "1.0",
                                     content_length=False))
        sock.sendall(serialize_frame("BEGIN", [("transaction", "t")], b"", "1.2", content_length=False))
        plain = serialize_frame("SEND", [("destination", "/queue/attack"), ("transaction", "t")], BODY, "1.2",
                                content_length=True)
        for start in range(0, sends, 1000):
            last = serialize_frame("SEND", [("destination", "/queue/attack"), ("transaction", "t"),
                                            ("receipt", str(start + 1000))], BODY, "1.2", content_length=True)
            try:
                sock.sendall(plain * 999 + last)
            except OSError:
                break
            outcome = None
            while outcome is None:
                data = sock.recv(65536)
                if not data:
                    outcome = "closed"
                for event in parser.feed(data):
                    command = getattr(event, "command", None)
                    if command == "RECEIPT":
                        receipted, outcome = int(event.get("receipt-id")), "ok"
                    elif command == "ERROR":
                        error, outcome = event.get("message"), "error"
            if outcome != "ok":
                break
    return f"{receipted} sends receipted; refused: {error!r}"


def retained_attack(broker: ReferenceBrokerProcess, retained: int, subscribers: int) -> tuple[int, list]:
    address = ("127.0.0.1", broker.mqtt_port)
    with socket.create_connection(address) as pub:
        pub.sendall(encode(Connect(protocol_level=MQTT_311, client_id="pub", clean_start=True), MQTT_311))
        pub.sendall(b"".join(encode(Publish(f"ret/{i}", BODY, 0, retain=True), MQTT_311) for i in range(retained)))
        pub.sendall(encode(Subscribe(1, [Subscription("none", 0)]), MQTT_311))
        received = b""
        while len(received) < 4 + 5:  # CONNACK, SUBACK: every PUBLISH before them was read
            received += pub.recv(64)
    after_publish = rss_mb(broker.pid)
    idle = []
    for n in range(subscribers):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(address)
        sock.sendall(encode(Connect(protocol_level=MQTT_311, client_id=f"idle-{n}", clean_start=True), MQTT_311))
        sock.sendall(encode(Subscribe(1, [Subscription("#", 0)]), MQTT_311))
        idle.append(sock)
    return after_publish, idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200_000)
    parser.add_argument("--retained", type=int, default=20_000)
    parser.add_argument("--subscribers", type=int, default=10)
    args = parser.parse_args()
    config = Path(tempfile.mkdtemp(prefix="hostile-memory-")) / "broker.toml"
    config.write_text(CONFIG)

    broker = ReferenceBrokerProcess(config_file=config, http=False).start()
    try:
        before = rss_mb(broker.pid)
        outcome = transaction_attack(broker, args.sends)
        print(f"transaction: {args.sends} uncommitted 1 KB sends: {outcome}; "
              f"broker RSS {before} MB -> {rss_mb(broker.pid)} MB")
    finally:
        broker.stop()

    broker = ReferenceBrokerProcess(config_file=config, http=False, mqtt=True).start()
    idle: list = []
    try:
        before = rss_mb(broker.pid)
        after_publish, idle = retained_attack(broker, args.retained, args.subscribers)
        time.sleep(5)  # let the broker write what the idle subscribers' sockets take
        print(f"retained: {args.retained} retained 1 KB messages: broker RSS {before} MB -> {after_publish} MB; "
              f"{args.subscribers} idle '#' subscribers -> {rss_mb(broker.pid)} MB")
    finally:
        for sock in idle:
            sock.close()
        broker.stop()


if __name__ == "__main__":
    main()
