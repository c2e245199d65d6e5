"""Benchmark: what the fault proxy costs with no toxics, on loopback, ours beside the real one.

Latency: request/response round trips (one small message, echoed) directly to an echo server,
through our proxy and through the real toxiproxy-server; reports p50/p99 of each and what each
proxy adds over the direct connection, in microseconds. Throughput: one connection streaming
bytes to a sink, directly and through each proxy, in MB/s. Both proxies forward to the same
upstream processes under the same loads in one run.
Targets (issue 16): ours adds no more p50 latency than toxiproxy-server and reaches at least
half its throughput.

Our proxy runs in its own process by default (``machinery.faultproxy.server.main``), so it does not
share the GIL with the load generator, like the real toxiproxy-server. Run:
``brokerconf bench proxy`` or ``python -m chaos.proxy_bench``.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import re
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

from machinery.faultproxy import RealToxiproxyServer
from machinery.faultproxy.client import ToxiproxyClient, split_address
from machinery.faultproxy.install import find_toxiproxy_server
from machinery.faultproxy.server import FaultProxyServer, new_event_loop
from machinery.tether import launch


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


# `-m machinery.faultproxy.server` would import the module twice (the package imports it); call main().
_PROXY_MAIN = "import sys; from machinery.faultproxy.server import main; sys.exit(main(sys.argv[1:]))"


class _ProxyProcess:
    def __init__(self) -> None:
        self.process = launch(
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
    created = ToxiproxyClient(api_url, timeout=10).create_proxy(name, upstream=f"127.0.0.1:{upstream_port}")
    return split_address(created["listen"])


#: the project's targets for ours against the real server (issue 16): added p50 latency no worse
#: than toxiproxy-server's, and at least half its throughput
THROUGHPUT_SHARE_TARGET = 0.5
SERVERS = ("ours", "real")


def _start_server(kind: str, proxy_in_subprocess: bool, real_binary: str | None) -> Any:
    if kind == "real":
        return RealToxiproxyServer(real_binary).start()
    return _ProxyProcess() if proxy_in_subprocess else FaultProxyServer().start()


def _summary(samples: list[float], mbps: list[float]) -> dict[str, float]:
    return {"p50_us": _percentile(samples, 0.5), "p99_us": _percentile(samples, 0.99),
            "mean_us": statistics.fmean(samples), "mb_per_s": statistics.median(mbps),
            "mb_per_s_rounds": mbps}


def run_proxy_bench(round_trips: int = 5000, message_size: int = 64, throughput_mb: int = 200,
                    proxy_in_subprocess: bool = True, repeats: int = 3,
                    real_binary: str | None | bool = True) -> dict[str, Any]:
    """Ours and the real toxiproxy-server, no toxics, against the same echo/sink upstream.

    ``repeats`` rounds each measure direct, ours and real in turn (the order rotates each round,
    so neither server always runs right after the other on a shared machine); latency samples
    are pooled per column, throughput is the median of the rounds. ``real_binary`` True finds
    the server (`find_toxiproxy_server`); None or False measures ours only.
    Latencies in microseconds, throughput in MB/s (1 MB = 10^6 bytes)."""
    if real_binary is True:
        real_binary = find_toxiproxy_server()
    kinds = ["ours"] + (["real"] if real_binary else [])
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    upstream = ctx.Process(target=_upstream_servers, args=(ports,), daemon=True)
    upstream.start()
    servers: dict[str, Any] = {}
    latency: dict[str, list[float]] = {k: [] for k in ["direct", *kinds]}
    mbps: dict[str, list[float]] = {k: [] for k in ["direct", *kinds]}
    total = throughput_mb * 1_000_000
    try:
        echo_port, sink_port = ports.get(timeout=30)
        addresses = {"direct": (("127.0.0.1", echo_port), ("127.0.0.1", sink_port))}
        for kind in kinds:
            servers[kind] = _start_server(kind, proxy_in_subprocess, real_binary or None)
            addresses[kind] = (_create_proxy(servers[kind].api_url, "bench_echo", echo_port),
                               _create_proxy(servers[kind].api_url, "bench_sink", sink_port))
        columns = list(addresses)
        for round_no in range(repeats):
            order = columns[round_no % len(columns):] + columns[:round_no % len(columns)]
            for column in order:
                echo_address, sink_address = addresses[column]
                latency[column] += _round_trips(echo_address, round_trips, message_size)
                mbps[column].append(_throughput(sink_address, total))
    finally:
        for handle in servers.values():
            handle.stop()
        upstream.terminate()
        upstream.join(5)
    direct = _summary(latency["direct"], mbps["direct"])
    result: dict[str, Any] = {
        "round_trips": round_trips, "repeats": repeats, "message_size": message_size,
        "throughput_bytes": total, "proxy_in_subprocess": proxy_in_subprocess,
        "real_binary": real_binary or None,
        "real_missing": None if real_binary else
        "toxiproxy-server not found in .tools/bin or on PATH (brokerconf targets install toxiproxy builds it)",
        "direct": direct, "servers": {},
    }
    for kind in kinds:
        row = _summary(latency[kind], mbps[kind])
        row["added_p50_us"] = row["p50_us"] - direct["p50_us"]
        row["added_p99_us"] = row["p99_us"] - direct["p99_us"]
        result["servers"][kind] = row
    if "real" in result["servers"]:
        ours, real = result["servers"]["ours"], result["servers"]["real"]
        result["targets"] = {
            "added_p50_no_worse_than_real": ours["added_p50_us"] <= real["added_p50_us"],
            "added_p50_excess_us": ours["added_p50_us"] - real["added_p50_us"],
            "throughput_share_of_real": ours["mb_per_s"] / real["mb_per_s"],
            "throughput_at_least_half_of_real": ours["mb_per_s"] >= THROUGHPUT_SHARE_TARGET * real["mb_per_s"],
        }
    return result


def _ratio(a: float, b: float) -> str:
    return f"{a / b:8.2f}x" if b > 0 else "       -"


def format(result: dict[str, Any]) -> str:  # noqa: A001 - the brief names it `format`
    """The side-by-side table (direct, ours, real, ours/real) and the verdict on each target."""
    direct, servers = result["direct"], result["servers"]
    ours, real = servers["ours"], servers.get("real")
    lines = [
        f"fault proxy, no toxics, loopback: {result['repeats']} rounds of {result['round_trips']} round trips "
        f"of {result['message_size']} B and {result['throughput_bytes'] / 1e6:.0f} MB streamed, per column",
        f"  {'':26}{'direct':>10}{'ours':>10}{'toxiproxy':>10}{'ours/real':>10}",
    ]

    def row(label: str, key: str, with_direct: bool = True, digits: int = 1) -> str:
        d = f"{direct[key]:10.{digits}f}" if with_direct else f"{'':10}"
        r = f"{real[key]:10.{digits}f}" if real else f"{'n/a':>10}"
        ratio = _ratio(ours[key], real[key]) if real else f"{'':>9}"
        return f"  {label:26}{d}{ours[key]:10.{digits}f}{r} {ratio}"

    lines += [row("round trip p50 (us)", "p50_us"), row("round trip p99 (us)", "p99_us"),
              row("added p50 (us)", "added_p50_us", with_direct=False),
              row("added p99 (us)", "added_p99_us", with_direct=False),
              row("throughput (MB/s)", "mb_per_s")]
    if real is None:
        lines.append(f"  toxiproxy-server not measured: {result['real_missing']}; the targets compare ours "
                     "with it, so none is judged")
        return "\n".join(lines)
    targets = result["targets"]
    p50 = ("meets" if targets["added_p50_no_worse_than_real"]
           else f"MISSES by {targets['added_p50_excess_us']:.1f} us")
    share = targets["throughput_share_of_real"]
    thr = ("meets" if targets["throughput_at_least_half_of_real"]
           else f"MISSES: {share:.2f} of real, {THROUGHPUT_SHARE_TARGET - share:.2f} short")
    lines += [
        f"  target: ours' added p50 no worse than toxiproxy-server's ({ours['added_p50_us']:.1f} vs "
        f"{real['added_p50_us']:.1f} us): {p50}",
        f"  target: ours' throughput at least {THROUGHPUT_SHARE_TARGET:.0%} of toxiproxy-server's "
        f"({share:.0%}): {thr}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(format(run_proxy_bench()))
