"""Micro-benchmark of the MQTT packet codec (no sockets, no broker).

Parses and encodes PUBLISH packets with a 256-byte payload, MQTT 3.1.1 and 5.0 (no properties),
QoS 0 and QoS 1, and prints packets/s and microseconds per packet, best of several rounds. Also
times a 5.0 PUBLISH with a few typical properties and the PUBACK a QoS 1 flow answers with. No
assertions: this is for watching the codec's share of the broker's per-message budget (its MQTT
target is well over 50,000 msg/s on 2 cores).

    python3 benchmarks/mqtt_codec_bench.py [--packets N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from reference_broker.protocols.mqtt.codec import (  # noqa: E402
    MQTT_5,
    MQTT_311,
    MqttParser,
    Properties,
    Puback,
    Publish,
    encode,
)

PAYLOAD = bytes(range(256))
TOPIC = "sensors/building-7/floor-3/temperature"


def best_of(rounds: int, fn) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def report(name: str, n: int, seconds: float) -> None:
    print(f"{name:<60} {n / seconds:>12,.0f} packets/s {seconds / n * 1e6:>8.2f} us/packet")


def bench_publish(label: str, level: int, qos: int, n: int, rounds: int,
                  properties: Properties | None = None) -> None:
    packets = [
        Publish(TOPIC, PAYLOAD, qos, packet_id=(i % 65535) + 1 if qos else None,
                properties=properties if properties is not None else Properties())
        for i in range(n)
    ]
    frames = [encode(p, level) for p in packets]
    stream = b"".join(frames)
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def parse_64k_chunks() -> None:
        # What a socket read loop hands over: chunks that split packets anywhere.
        feed = MqttParser(protocol_level=level).feed
        for chunk in chunks:
            feed(chunk)

    def parse_packet_per_feed() -> None:
        feed = MqttParser(protocol_level=level).feed
        for data in frames:
            feed(data)

    def encode_all() -> None:
        for p in packets:
            encode(p, level)

    size = len(frames[0])
    report(f"parse  {label} ({size} B, 64 KiB chunks)", n, best_of(rounds, parse_64k_chunks))
    report(f"parse  {label} (one feed per packet)", n, best_of(rounds, parse_packet_per_feed))
    report(f"encode {label}", n, best_of(rounds, encode_all))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    n, rounds = args.packets, args.rounds
    print(f"python {sys.version.split()[0]}, {n} packets per round, best of {rounds} rounds")

    bench_publish("PUBLISH 3.1.1 QoS 0", MQTT_311, 0, n, rounds)
    bench_publish("PUBLISH 3.1.1 QoS 1", MQTT_311, 1, n, rounds)
    bench_publish("PUBLISH 5.0 QoS 0", MQTT_5, 0, n, rounds)
    bench_publish("PUBLISH 5.0 QoS 1", MQTT_5, 1, n, rounds)
    typical = Properties(
        payload_format_indicator=0,
        message_expiry_interval=3600,
        content_type="application/octet-stream",
        user_properties=[("trace-id", "4bf92f3577b34da6")],
    )
    bench_publish("PUBLISH 5.0 QoS 1 + 4 properties", MQTT_5, 1, n, rounds, typical)

    acks = [Puback((i % 65535) + 1) for i in range(n)]
    ack_stream = b"".join(encode(a, MQTT_5) for a in acks)
    ack_chunks = [ack_stream[i : i + 65536] for i in range(0, len(ack_stream), 65536)]

    def parse_acks() -> None:
        feed = MqttParser(protocol_level=MQTT_5).feed
        for chunk in ack_chunks:
            feed(chunk)

    def encode_acks() -> None:
        for a in acks:
            encode(a, MQTT_5)

    report("parse  PUBACK 5.0 (64 KiB chunks)", n, best_of(rounds, parse_acks))
    report("encode PUBACK 5.0", n, best_of(rounds, encode_acks))


if __name__ == "__main__":
    main()
