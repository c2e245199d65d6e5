"""Benchmark: what the fault proxy costs with no toxics, on loopback.

Latency: request/response round trips (one small message, echoed) directly to an echo server
and through the proxy; reports p50/p99 of each and the difference in microseconds.
Throughput: one connection streaming bytes to a sink, directly and through the proxy, in MB/s.
Targets (issue 5): under 100 us added at p50 (Toxiproxy's published overhead), >= 200 MB/s.

The proxy runs in its own process by default (``chaos.proxy.server.main``), so it does not
share the GIL with the load generator, like a real toxiproxy-server. Run:
``python -m chaos.proxy.bench``.
"""
from __future__ import annotations

import asyncio
import json
import multiprocessing
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

from .server import FaultProxyServer, new_event_loop


def _upstream_servers(port_queue) -> None:
    """Child process: an echo server and a sink (counts bytes, answers b'!' when told 'done')."""

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data):
            self.transport.write(data)

    class Sink(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.expected = None
            self.buffer = b""
            self.received = 0

        def data_received(self, data):
            if self.expected is None:
                self.buffer += data
                if b"\n" in self.buffer:
                    header, _, rest = self.buffer.partition(b"\n")
                    self.expected = int(header)
                    data = rest
                else:
                    return
            self.received += len(data)
            if self.received >= self.expected:
                self.transport.write(b"!")

    async def main():
        loop = asyncio.get_running_loop()
        echo = await loop.create_server(Echo, "127.0.0.1", 0)
        sink = await loop.create_server(Sink, "127.0.0.1", 0)
        port_queue.put((echo.sockets[0].getsockname()[1], sink.sockets[0].getsockname()[1]))
        await asyncio.Event().wait()

    loop = new_event_loop()
    loop.run_until_complete(main())


def _round_trips(address: tuple[str, int], count: int, size: int) -> list[float]:
    message = b"x" * size
    samples = []
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count + count // 10):  # the first tenth warms up and is discarded
            start = time.perf_counter_ns()
            sock.sendall(message)
            got = 0
            while got < size:
                got += len(sock.recv(65536))
            if i >= count // 10:
                samples.append((time.perf_counter_ns() - start) / 1000.0)
    return samples


def _throughput(address: tuple[str, int], total_bytes: int) -> float:
    block = b"\0" * (256 * 1024)
    with socket.create_connection(address) as sock:
        start = time.perf_counter()
        sock.sendall(f"{total_bytes}\n".encode())
        sent = 0
        while sent < total_bytes:
            chunk = block[: total_bytes - sent]
            sock.sendall(chunk)
            sent += len(chunk)
        if sock.recv(1) != b"!":
            raise RuntimeError("sink closed before acknowledging the data")
        elapsed = time.perf_counter() - start
    return total_bytes / elapsed / 1e6


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# `-m chaos.proxy.server` would import the module twice (the package imports it); call main().
_PROXY_MAIN = "import sys; from chaos.proxy.server import main; sys.exit(main(sys.argv[1:]))"


class _ProxyProcess:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _PROXY_MAIN, "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE, text=True,
        )
        line = self.process.stdout.readline()
        match = re.search(r"(http://\S+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"fault proxy process did not report its address: {line!r}")
        self.api_url = match.group(1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process.stdout.close()


def _create_proxy(api_url: str, name: str, upstream_port: int) -> tuple[str, int]:
    body = json.dumps({"name": name, "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{upstream_port}"})
    request = urllib.request.Request(api_url + "/proxies", body.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        listen = json.load(response)["listen"]
    host, port = listen.rsplit(":", 1)
    return host, int(port)


def run_proxy_bench(round_trips: int = 5000, message_size: int = 64, throughput_mb: int = 200,
                    proxy_in_subprocess: bool = True) -> dict[str, Any]:
    """Measure the proxy with no toxics; returns latencies in microseconds and MB/s."""
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    upstream = ctx.Process(target=_upstream_servers, args=(ports,), daemon=True)
    upstream.start()
    proxy: Any = None
    try:
        echo_port, sink_port = ports.get(timeout=30)
        proxy = _ProxyProcess() if proxy_in_subprocess else FaultProxyServer().start()
        echo_via_proxy = _create_proxy(proxy.api_url, "bench_echo", echo_port)
        sink_via_proxy = _create_proxy(proxy.api_url, "bench_sink", sink_port)
        direct = _round_trips(("127.0.0.1", echo_port), round_trips, message_size)
        proxied = _round_trips(echo_via_proxy, round_trips, message_size)
        total = throughput_mb * 1_000_000
        direct_mbps = _throughput(("127.0.0.1", sink_port), total)
        proxied_mbps = _throughput(sink_via_proxy, total)
    finally:
        if proxy is not None:
            proxy.stop()
        upstream.terminate()
        upstream.join(5)
    direct_p50, proxied_p50 = _percentile(direct, 0.5), _percentile(proxied, 0.5)
    direct_p99, proxied_p99 = _percentile(direct, 0.99), _percentile(proxied, 0.99)
    return {
        "round_trips": len(proxied),
        "message_size": message_size,
        "direct_p50_us": direct_p50,
        "direct_p99_us": direct_p99,
        "proxy_p50_us": proxied_p50,
        "proxy_p99_us": proxied_p99,
        "added_p50_us": proxied_p50 - direct_p50,
        "added_p99_us": proxied_p99 - direct_p99,
        "proxy_mean_us": statistics.fmean(proxied),
        "throughput_bytes": throughput_mb * 1_000_000,
        "direct_mb_per_s": direct_mbps,
        "proxy_mb_per_s": proxied_mbps,
        "proxy_in_subprocess": proxy_in_subprocess,
    }


def format(result: dict[str, Any]) -> str:  # noqa: A001 - the brief names it `format`
    """Human-readable summary against the issue's targets."""
    p50_ok = "meets" if result["added_p50_us"] < 100 else "MISSES"
    mbps_ok = "meets" if result["proxy_mb_per_s"] >= 200 else "MISSES"
    return "\n".join([
        f"fault proxy, no toxics, loopback ({result['round_trips']} round trips of "
        f"{result['message_size']} B; {result['throughput_bytes'] / 1e6:.0f} MB streamed)",
        f"  round trip direct : p50 {result['direct_p50_us']:8.1f} us   p99 {result['direct_p99_us']:8.1f} us",
        f"  round trip proxied: p50 {result['proxy_p50_us']:8.1f} us   p99 {result['proxy_p99_us']:8.1f} us",
        f"  added by the proxy: p50 {result['added_p50_us']:8.1f} us   p99 {result['added_p99_us']:8.1f} us"
        f"   ({p50_ok} the < 100 us p50 target)",
        f"  throughput direct : {result['direct_mb_per_s']:8.1f} MB/s",
        f"  throughput proxied: {result['proxy_mb_per_s']:8.1f} MB/s   ({mbps_ok} the >= 200 MB/s target)",
    ])


if __name__ == "__main__":  # pragma: no cover
    print(format(run_proxy_bench()))
