"""Starting and stopping the fault proxy: from Python, the CLI entry point, start_fault_proxy."""
from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

import machinery.faultproxy as fault_proxy_pkg
from machinery.faultproxy import FaultProxyServer, RealToxiproxyServer, find_toxiproxy_server, start_fault_proxy
from chaos.proxy_bench import format as format_bench, run_proxy_bench
from machinery.faultproxy.testing import api_json, echo_server
from conformance.requirements import missing_mark

REAL = find_toxiproxy_server()


def test_server_start_stop_closes_proxies():
    echo = echo_server()
    server = FaultProxyServer().start()
    try:
        status, proxy = api_json(server.api_url, "POST", "/proxies",
                                 {"name": "p", "listen": "127.0.0.1:0", "upstream": echo.address})
        assert status == 201
    finally:
        server.stop()
        echo.stop()
    host, port = proxy["listen"].rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()


def test_api_port_in_use_is_a_clear_error():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(RuntimeError, match="cannot listen for the fault proxy API .* choose another --port"):
            FaultProxyServer(port=holder.getsockname()[1]).start()


def test_start_fault_proxy_uses_ours_without_toxiproxy_server(monkeypatch):
    monkeypatch.setattr(fault_proxy_pkg, "find_toxiproxy_server", lambda: None)
    handle = start_fault_proxy()
    try:
        assert isinstance(handle, FaultProxyServer)
        assert api_json(handle.api_url, "GET", "/proxies") == (200, {})
    finally:
        handle.stop()


@missing_mark("toxiproxy", None if REAL else "toxiproxy-server not found in .tools/bin or on PATH")
def test_start_fault_proxy_prefers_the_real_server_it_finds():
    handle = start_fault_proxy()
    try:
        assert isinstance(handle, RealToxiproxyServer) and handle.binary == REAL
        status, body = api_json(handle.api_url, "GET", "/version")
        assert status == 200 and body["version"] != "git", "the installed build names its release"
    finally:
        handle.stop()
    ours = start_fault_proxy(prefer_real=False)
    try:
        assert isinstance(ours, FaultProxyServer)
    finally:
        ours.stop()


def test_main_serves_until_terminated():
    code = "import sys; from machinery.faultproxy.server import main; sys.exit(main(sys.argv[1:]))"
    process = subprocess.Popen([sys.executable, "-c", code, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        url = re.search(r"http://\S+", line).group(0)
        assert api_json(url, "GET", "/version")[0] == 200
    finally:
        process.terminate()
        process.wait(10)
        process.stdout.close()


def test_bench_runs_and_reports_every_number():
    result = run_proxy_bench(round_trips=50, throughput_mb=2, repeats=1, proxy_in_subprocess=False)
    for key in ("p50_us", "p99_us", "mb_per_s"):
        assert isinstance(result["direct"][key], float), key
    columns = ["ours"] + (["real"] if result["real_binary"] else [])
    assert list(result["servers"]) == columns
    for column in columns:
        for key in ("p50_us", "p99_us", "added_p50_us", "added_p99_us", "mb_per_s"):
            assert isinstance(result["servers"][column][key], float), (column, key)
    text = format_bench(result)
    assert "added p50 (us)" in text and "throughput (MB/s)" in text
    if result["real_binary"]:
        assert "ours/real" in text and "target: ours' added p50" in text


def test_bench_without_the_real_server_says_so():
    result = run_proxy_bench(round_trips=20, throughput_mb=1, repeats=1, proxy_in_subprocess=False, real_binary=None)
    assert list(result["servers"]) == ["ours"] and "targets" not in result
    assert "toxiproxy-server not measured" in format_bench(result)
