"""Each toxic's observable effect on traffic through the fault proxy to a loopback echo server.

Timing is asserted as lower bounds only ("took at least the configured delay"); never an upper
bound. Parametrized over our server and the real toxiproxy-server (tests/chaos/conftest.py).
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from machinery.faultproxy.client import ToxiproxyClient
from machinery.faultproxy.testing import echo_server, greet_and_close_server
from machinery.faultproxy.toxics import Slicer

@pytest.fixture
def echo():
    server = echo_server()
    yield server
    server.stop()


class Api:
    """The toxics tests' view of one proxy ``p``, through the project's Toxiproxy client (a call
    answered with any status but the documented one raises, naming status and body)."""

    def __init__(self, url: str) -> None:
        self.url = url
        # timeout=5: a removal that hung under traffic (Toxiproxy #412/#558) fails the test.
        self.client = ToxiproxyClient(url, timeout=5)

    def proxy(self, upstream: str, name: str = "p") -> str:
        return self.client.create_proxy(name, upstream=upstream)["listen"]

    def toxic(self, type_: str, stream: str = "downstream", toxicity: float = 1.0, name=None, **attributes):
        return self.client.add_toxic("p", type_, stream=stream, toxicity=toxicity, name=name,
                                     attributes=attributes)["name"]

    def remove(self, name: str) -> None:
        self.client.remove_toxic("p", name)


@pytest.fixture
def api(fault_proxy):
    return Api(fault_proxy.api_url)


def connect(listen: str, timeout: float = 5.0) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def read_to_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def timed_round_trip(sock: socket.socket, payload: bytes = b"ping") -> float:
    start = time.monotonic()
    sock.sendall(payload)
    assert read_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency_delays_at_least_the_configured_time(api, echo, stream):
    listen = api.proxy(echo.address)
    api.toxic("latency", stream=stream, latency=150)
    with connect(listen) as sock:
        assert timed_round_trip(sock) >= 0.150


def test_latency_applies_to_connections_open_before_it_was_added(api, echo):
    listen = api.proxy(echo.address)
    with connect(listen) as sock:
        timed_round_trip(sock)
        api.toxic("latency", latency=120)
        assert timed_round_trip(sock) >= 0.120


def test_latency_on_both_streams_adds_up(api, echo):
    listen = api.proxy(echo.address)
    api.toxic("latency", stream="upstream", latency=80)
    api.toxic("latency", stream="downstream", latency=80)
    with connect(listen) as sock:
        assert timed_round_trip(sock) >= 0.160


def test_toxicity_zero_never_applies(api, echo):
    # A timeout toxic that applied would swallow the data; with toxicity 0 it never applies
    # (Toxiproxy #603 reports the opposite for reset_peer).
    listen = api.proxy(echo.address)
    api.toxic("timeout", toxicity=0.0, timeout=0)
    for _ in range(5):
        with connect(listen) as sock:
            sock.sendall(b"through")
            assert read_exactly(sock, 7) == b"through"


def test_bandwidth_limits_the_rate(api, echo):
    listen = api.proxy(echo.address)
    api.toxic("bandwidth", rate=100)  # KB/s
    payload = b"b" * 50_000
    with connect(listen, timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(payload)
        assert read_exactly(sock, len(payload)) == payload
        assert time.monotonic() - start >= 0.45  # 50 KB at 100 KB/s is 0.5 s


def test_timeout_zero_drops_data_and_removal_closes_the_connection(api, echo):
    # Toxiproxy README "timeout" and timeout_test.go: with timeout 0 data is dropped (not held)
    # while the toxic is there, and removing it closes the connections it held.
    listen = api.proxy(echo.address)
    api.toxic("timeout", stream="upstream", timeout=0)
    with connect(listen) as sock:
        sock.settimeout(0.3)
        sock.sendall(b"lost")
        with pytest.raises(socket.timeout):
            sock.recv(10)
        api.remove("timeout_upstream")
        sock.settimeout(5)
        assert read_to_eof(sock) == b""
    with connect(listen) as sock:
        sock.sendall(b"flows")
        assert read_exactly(sock, 5) == b"flows"


def test_timeout_closes_the_connection_after_the_timeout(api, echo):
    listen = api.proxy(echo.address)
    api.toxic("timeout", timeout=200)
    with connect(listen) as sock:
        start = time.monotonic()
        sock.sendall(b"x")
        assert read_to_eof(sock) == b""
        assert time.monotonic() - start >= 0.19


def test_reset_peer_resets_the_connection(api, echo):
    listen = api.proxy(echo.address)
    api.toxic("reset_peer", stream="upstream", timeout=0)
    with connect(listen) as sock:
        sock.sendall(b"x")
        with pytest.raises(ConnectionResetError):
            while sock.recv(10):
                pass


def test_reset_peer_does_not_break_later_connections_once_removed(api, echo):
    # Toxiproxy #465: users saw connections keep failing after a reset_peer was removed.
    listen = api.proxy(echo.address)
    api.toxic("reset_peer", stream="upstream", timeout=0)
    with connect(listen) as sock:
        sock.sendall(b"x")
        with pytest.raises(ConnectionResetError):
            while sock.recv(10):
                pass
    api.remove("reset_peer_upstream")
    with connect(listen) as sock:
        sock.sendall(b"again")
        assert read_exactly(sock, 5) == b"again"


def test_slicer_delivers_data_intact_in_several_reads(api, echo):
    listen = api.proxy(echo.address)
    api.toxic("slicer", average_size=100, size_variation=10, delay=2000)
    payload = bytes(range(256)) * 4
    with connect(listen) as sock:
        sock.sendall(payload)
        reads = []
        while sum(map(len, reads)) < len(payload):
            reads.append(sock.recv(65536))
            assert reads[-1], "connection closed early"
    assert b"".join(reads) == payload
    assert len(reads) > 1


def test_slicer_offsets_cover_the_chunk_in_small_pieces():
    bounds = Slicer.offsets(0, 1000, 100, 10)
    pieces = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    assert pieces[0][0] == 0 and pieces[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert all(0 < end - start <= 110 for start, end in pieces)


def test_limit_data_closes_after_n_bytes(api, echo):
    listen = api.proxy(echo.address)
    api.toxic("limit_data", bytes=10)
    with connect(listen) as sock:
        sock.sendall(b"0123456789abcdef")
        assert read_to_eof(sock) == b"0123456789"


def test_slow_close_holds_the_close_back(api):
    server = greet_and_close_server(b"bye")
    try:
        listen = api.proxy(server.address)
        api.toxic("slow_close", delay=200)
        with connect(listen) as sock:
            start = time.monotonic()
            assert read_to_eof(sock) == b"bye"
            assert time.monotonic() - start >= 0.19
    finally:
        server.stop()


def test_removing_a_toxic_under_traffic_does_not_hang_or_lose_data(api, echo):
    listen = api.proxy(echo.address)
    api.toxic("latency", latency=300, jitter=50)
    api.toxic("bandwidth", stream="upstream", rate=200)
    total = 200_000
    received = bytearray()
    with connect(listen, timeout=20) as sock:
        def reader():
            while len(received) < total:
                data = sock.recv(65536)
                if not data:
                    return
                received.extend(data)

        thread = threading.Thread(target=reader)
        thread.start()
        sender = threading.Thread(target=sock.sendall, args=(b"z" * total,))
        sender.start()
        time.sleep(0.2)  # let data pile up inside both toxics
        api.remove("latency_downstream")
        api.remove("bandwidth_upstream")
        sender.join(20)
        thread.join(20)
    assert bytes(received) == b"z" * total


def test_timeout_toxic_added_and_removed_under_traffic_returns(api, echo):
    listen = api.proxy(echo.address)
    with connect(listen) as sock:
        stop = threading.Event()

        def pump():
            try:
                while not stop.is_set():
                    sock.sendall(b"t" * 1024)
                    sock.recv(65536)
            except OSError:
                pass

        thread = threading.Thread(target=pump)
        thread.start()
        time.sleep(0.05)
        api.toxic("timeout", name="t", timeout=0)
        time.sleep(0.05)
        api.remove("t")
        stop.set()
        try:  # the removal closed the connection (timeout Cleanup); unblock the pump if not
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        thread.join(5)
        assert not thread.is_alive()
    with connect(listen) as sock:
        sock.sendall(b"ok")
        assert read_exactly(sock, 2) == b"ok"
