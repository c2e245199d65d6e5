"""What TLS costs on the reference broker's STOMP listener: the same load over the plain listener
and over its TLS twin (``stomp_ssl``) of one broker process, printed side by side.

    .venv/bin/python benchmarks/tls_overhead_bench.py [--messages 20000] [--size 256] [--connects 50]

Per listener: connect latency (TCP, plus the TLS handshake on the TLS one, plus CONNECT ->
CONNECTED; median and p95 of ``--connects`` connections) and the rate of persistent-free SENDs one
raw-socket producer gets through, ending with a receipt (so every frame was processed). The broker
runs as ``python -m reference_broker`` with the memory store; certificates are made for the run.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.certificates import make_pki  # noqa: E402  (after the path insert)
from conformance.clients.tls import ClientTls  # noqa: E402
from conformance.targets.reference.process import ReferenceBrokerProcess  # noqa: E402

CONNECT = b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"


def _open(port: int, context: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
    sock.sendall(CONNECT)
    _read_until(sock, b"CONNECTED")
    return sock


def _read_until(sock: socket.socket, marker: bytes) -> None:
    got = b""
    while marker not in got:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before {marker!r}: {got[-200:]!r}")
        got += chunk


def connect_latencies(port: int, context: ssl.SSLContext | None, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        sock = _open(port, context)
        times.append(time.perf_counter() - start)
        sock.sendall(b"DISCONNECT\n\n\x00")
        sock.close()
    return times


def send_rate(port: int, context: ssl.SSLContext | None, messages: int, size: int) -> float:
    sock = _open(port, context)
    frame = b"SEND\ndestination:/queue/bench.tls\ncontent-length:%d\n\n%s\x00" % (size, b"x" * size)
    batch = frame * 100
    start = time.perf_counter()
    for _ in range(messages // 100):
        sock.sendall(batch)
    sock.sendall(b"SEND\ndestination:/queue/bench.tls\nreceipt:end\n\nend\x00")
    _read_until(sock, b"receipt-id:end")
    elapsed = time.perf_counter() - start
    sock.close()
    return (messages // 100 * 100 + 1) / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--connects", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="brokerconf-tls-bench-") as tmp:
        pki = make_pki(Path(tmp) / "pki")
        config = Path(tmp) / "broker.json"
        config.write_text('{"stomp_ssl": {"address": "127.0.0.1:0", "tls_cert_file": "%s", "tls_key_file": "%s"}}'
                          % (pki.server_cert, pki.server_key))
        broker = ReferenceBrokerProcess(name="tls-bench", config_file=config, http=False, log_level="WARNING")
        broker.start()
        try:
            context = ClientTls(pki.ca_cert).context()
            rows = []
            for label, port, ctx in (("plain", broker.stomp_port, None), ("tls", broker.tls_ports["stomp_ssl"], context)):
                latencies = sorted(connect_latencies(port, ctx, args.connects))
                rate = send_rate(port, ctx, args.messages, args.size)
                rows.append((label, statistics.median(latencies) * 1000,
                             latencies[int(len(latencies) * 0.95) - 1] * 1000, rate))
        finally:
            broker.stop()
    print(f"reference broker STOMP, {args.messages} SENDs of {args.size} B, {args.connects} connects")
    print(f"{'listener':<9} {'connect median ms':>18} {'connect p95 ms':>15} {'SEND/s':>10}")
    for label, median, p95, rate in rows:
        print(f"{label:<9} {median:>18.2f} {p95:>15.2f} {rate:>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
