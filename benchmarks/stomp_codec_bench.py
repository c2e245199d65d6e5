"""Micro-benchmark of the STOMP frame codec (no sockets, no broker).

Parses and serializes 10,000 typical SEND frames (5 headers plus content-length, 256-byte body)
and prints frames/s and microseconds per frame, best of several rounds. No assertions: this is for
watching the codec's share of the broker's per-message budget (~60k msg/s on 2 cores).

    python3 benchmarks/stomp_codec_bench.py [--frames N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from reference_broker.protocols.stomp.codec import (  # noqa: E402
    StompParser,
    encode_message_frame,
    serialize_frame,
)

BODY = bytes(range(256))  # binary, so content-length is required


def send_headers(i: int) -> list[tuple[str, str]]:
    return [
        ("destination", "/queue/orders"),
        ("content-type", "application/octet-stream"),
        ("persistent", "true"),
        ("priority", "4"),
        ("receipt", f"r-{i}"),
    ]


def best_of(rounds: int, fn) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def report(name: str, n: int, seconds: float) -> None:
    print(f"{name:<44} {n / seconds:>12,.0f} frames/s {seconds / n * 1e6:>8.2f} us/frame")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    n, rounds = args.frames, args.rounds

    headers = [send_headers(i) for i in range(n)]
    frames = [serialize_frame("SEND", h, BODY) for h in headers]
    stream = b"".join(frames)
    print(f"python {sys.version.split()[0]}, {n} SEND frames of {len(frames[0])} bytes")

    def parse_one_feed() -> None:
        # All 10,000 frames stay alive in the returned list, so this case also pays for the
        # cyclic GC walking them; the chunked cases below are closer to a broker's read loop.
        assert len(StompParser().feed(stream)) == n

    def parse_64k_chunks() -> None:
        # What a socket read loop hands over: chunks that split frames anywhere.
        parser = StompParser()
        feed = parser.feed
        for i in range(0, len(stream), 65536):
            feed(stream[i : i + 65536])

    def parse_frame_per_feed() -> None:
        feed = StompParser().feed
        for data in frames:
            feed(data)

    def serialize() -> None:
        for h in headers:
            serialize_frame("SEND", h, BODY)

    extra = [("content-type", "application/octet-stream"), ("persistent", "true"),
             ("priority", "4")]

    def encode_message() -> None:
        for i in range(n):
            encode_message_frame("/queue/orders", "ID:b-1-1:1:1", "sub-0", BODY, extra,
                                 ack="42")

    report("parse (one feed of all frames)", n, best_of(rounds, parse_one_feed))
    report("parse (64 KiB chunks)", n, best_of(rounds, parse_64k_chunks))
    report("parse (one feed per frame)", n, best_of(rounds, parse_frame_per_feed))
    report("serialize_frame (SEND)", n, best_of(rounds, serialize))
    report("encode_message_frame (MESSAGE)", n, best_of(rounds, encode_message))


if __name__ == "__main__":
    main()
