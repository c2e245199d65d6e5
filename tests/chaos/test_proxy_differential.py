"""Differential tests: one scenario against our proxy and the real toxiproxy-server, side by side.

Each test runs the same scenario on both servers (fresh ones, same loopback upstreams), then
checks two things: that each side shows the toxic's documented effect (Toxiproxy README "Toxics"
and toxics/*.go at v2.12.0), so a test fails when either side misbehaves, not only when they
disagree; and that the two observations agree within the tolerance the test states. Times are
measured on one loaded 2-core machine, so timing tolerances are generous and stated in seconds;
outcomes (bytes received, how a connection ended) must be equal.

Without the real server these tests skip, or fail where BROKERCONF_REQUIRE names toxiproxy.
"""
from __future__ import annotations

import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import pytest

from machinery.faultproxy import FaultProxyServer, RealToxiproxyServer, find_toxiproxy_server
from machinery.faultproxy.client import ToxiproxyClient, ToxiproxyError
from machinery.faultproxy.testing import echo_server, greet_and_close_server
from conformance.requirements import skip_or_fail

pytestmark = pytest.mark.slow  # each test waits out real delays on two servers (about 1-3 s)


@dataclass
class Side:
    kind: str  # "ours" or "real"
    url: str

    @property
    def client(self) -> ToxiproxyClient:
        return ToxiproxyClient(self.url, timeout=5)

    @contextmanager
    def _named(self):
        """A call answered with any status but the documented one fails the test, saying which side."""
        try:
            yield
        except ToxiproxyError as exc:
            pytest.fail(f"{self.kind}: {exc}")

    def proxy(self, upstream: str, name: str = "p", listen: str = "127.0.0.1:0") -> str:
        with self._named():
            return self.client.create_proxy(name, upstream=upstream, listen=listen)["listen"]

    def toxic(self, type_: str, stream: str = "downstream", toxicity: float = 1.0, **attributes) -> str:
        with self._named():
            return self.client.add_toxic("p", type_, stream=stream, toxicity=toxicity, attributes=attributes)["name"]

    def remove(self, name: str) -> None:
        with self._named():
            self.client.remove_toxic("p", name)

    def update(self, **fields) -> dict:
        with self._named():
            return self.client.update_proxy("p", **fields)


@pytest.fixture
def sides():
    binary = find_toxiproxy_server()
    if binary is None:
        skip_or_fail("toxiproxy", "toxiproxy-server not found in .tools/bin or on PATH "
                                  "(brokerconf targets install toxiproxy builds it); nothing to compare ours with")
    ours = FaultProxyServer().start()
    try:
        real = RealToxiproxyServer(binary).start()
    except BaseException:
        ours.stop()
        raise
    try:
        yield [Side("ours", ours.api_url), Side("real", real.api_url)]
    finally:
        real.stop()
        ours.stop()


@pytest.fixture
def echo():
    server = echo_server()
    yield server
    server.stop()


def both(sides: list[Side], scenario: Callable[[Side], object]) -> dict[str, object]:
    """Run the scenario on each side in turn; {"ours": observation, "real": observation}."""
    return {side.kind: scenario(side) for side in sides}


# --- socket helpers -------------------------------------------------------------------------


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


def round_trip(sock: socket.socket, payload: bytes = b"ping") -> float:
    start = time.monotonic()
    sock.sendall(payload)
    got = read_exactly(sock, len(payload))
    assert got == payload, f"echo through the proxy returned {got!r}, sent {payload!r}"
    return time.monotonic() - start


def ending(sock: socket.socket) -> tuple[str, bytes]:
    """Read until the connection ends: ("eof" | "reset" | "timeout", the bytes read before)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        return "reset", data
    except socket.timeout:
        return "timeout", data
    return "eof", data


def refused(listen: str) -> bool:
    try:
        connect(listen, timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def agree_within(observed: dict[str, float], tolerance: float, what: str) -> None:
    assert abs(observed["ours"] - observed["real"]) <= tolerance, (
        f"{what}: ours {observed['ours']:.3f} s, real {observed['real']:.3f} s, differ by more than {tolerance} s")


# --- latency ----------------------------------------------------------------------------------

LATENCY_S = 0.3


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
def test_latency_added_then_removed_on_a_live_connection(sides, echo, stream):
    """Compares: the round trip on one open connection with a 300 ms latency toxic, and after its
    removal. Effect (toxics/latency.go): >= 300 ms with it; back under 150 ms once removed, on the
    same connection. Tolerance: the two sides' delayed round trips within 100 ms of each other."""

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        with connect(listen) as sock:
            round_trip(sock)
            name = side.toxic("latency", stream=stream, latency=int(LATENCY_S * 1000))
            delayed = round_trip(sock)
            side.remove(name)
            after = round_trip(sock)
        return delayed, after

    seen = both(sides, scenario)
    for kind, (delayed, after) in seen.items():
        assert delayed >= LATENCY_S - 0.01, f"{kind}: {stream} latency {LATENCY_S} s gave a {delayed:.3f} s round trip"
        assert after < LATENCY_S / 2, f"{kind}: {after:.3f} s round trip after the latency toxic was removed"
    agree_within({k: v[0] for k, v in seen.items()}, 0.1, f"{stream} latency round trip")


# --- bandwidth --------------------------------------------------------------------------------


def test_bandwidth_limits_the_rate_alike(sides, echo):
    """Compares: the time 50 kB takes back through a 100 KB/s downstream bandwidth toxic.
    Effect (toxics/bandwidth.go: rate in KB/s): at least 0.45 s (0.5 s nominal). Tolerance: the
    two times within a factor 1.5 of each other."""

    payload = b"b" * 50_000

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        side.toxic("bandwidth", rate=100)
        with connect(listen, timeout=10) as sock:
            return round_trip(sock, payload)

    seen = both(sides, scenario)
    for kind, elapsed in seen.items():
        assert elapsed >= 0.45, f"{kind}: 50 kB through 100 KB/s took {elapsed:.3f} s"
    ratio = seen["ours"] / seen["real"]
    assert 1 / 1.5 <= ratio <= 1.5, f"bandwidth: ours {seen['ours']:.3f} s vs real {seen['real']:.3f} s (ratio {ratio:.2f})"


# --- timeout ----------------------------------------------------------------------------------


def test_timeout_closes_after_its_delay_alike(sides, echo):
    """Compares: how and when a connection ends under a 300 ms downstream timeout toxic.
    Effect (toxics/timeout.go): no data passes, then the connection is closed (EOF) after >= 300 ms.
    Tolerance: same outcome; close times within 150 ms of each other."""

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        side.toxic("timeout", timeout=300)
        with connect(listen) as sock:
            start = time.monotonic()
            sock.sendall(b"x")
            how = ending(sock)
            return how, time.monotonic() - start

    seen = both(sides, scenario)
    for kind, (how, elapsed) in seen.items():
        assert how == ("eof", b""), f"{kind}: a 300 ms timeout toxic ended the connection with {how}"
        assert elapsed >= 0.29, f"{kind}: closed after {elapsed:.3f} s, before the 300 ms timeout"
    agree_within({k: v[1] for k, v in seen.items()}, 0.15, "timeout close")


def test_timeout_zero_then_removed_alike(sides, echo):
    """Compares: what a connection sees under an upstream timeout toxic with timeout 0 and after its
    removal, and whether a new connection flows. Effect (toxics/timeout.go: timeout 0 swallows
    data and never closes; Cleanup closes the stub on removal): nothing back for 300 ms, then the
    held connection is closed, and a new one echoes. Tolerance: identical observations."""

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        name = side.toxic("timeout", stream="upstream", timeout=0)
        with connect(listen) as sock:
            sock.sendall(b"lost")
            sock.settimeout(0.3)
            during = ending(sock)
            side.remove(name)
            sock.settimeout(5)
            after = ending(sock)
        with connect(listen) as sock:
            sock.sendall(b"flows")
            fresh = read_exactly(sock, 5)
        return during, after, fresh

    seen = both(sides, scenario)
    for kind, observed in seen.items():
        assert observed == (("timeout", b""), ("eof", b""), b"flows"), f"{kind}: {observed}"
    assert seen["ours"] == seen["real"]


# --- reset_peer -------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout_ms", [0, 300])
def test_reset_peer_alike(sides, echo, timeout_ms):
    """Compares: how and when a connection ends under an upstream reset_peer toxic once data is
    sent. Effect (toxics/reset_peer.go and link.go's SetLinger(0)): a TCP reset, no data, after
    `timeout` ms. Tolerance: same outcome; reset times within 150 ms of each other."""

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        side.toxic("reset_peer", stream="upstream", timeout=timeout_ms)
        with connect(listen) as sock:
            start = time.monotonic()
            sock.sendall(b"x")
            how = ending(sock)
            return how, time.monotonic() - start

    seen = both(sides, scenario)
    for kind, (how, elapsed) in seen.items():
        assert how == ("reset", b""), f"{kind}: reset_peer ended the connection with {how}"
        assert elapsed >= timeout_ms / 1000 - 0.01, f"{kind}: reset after {elapsed:.3f} s, before {timeout_ms} ms"
    agree_within({k: v[1] for k, v in seen.items()}, 0.15, "reset_peer")


# --- slicer, limit_data, slow_close -------------------------------------------------------------


def test_slicer_alike(sides, echo):
    """Compares: the reads a client needs for 100 bytes through a downstream slicer (average 10,
    variation 0, 20 ms between slices). Effect (toxics/slicer.go: recursive halving until a piece
    is at most average + variation): the bytes intact, in pieces of at most 10 bytes, at least 10
    reads. Tolerance: read counts within 2 of each other (TCP may merge two slices into one read)."""

    payload = bytes(range(100))

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        side.toxic("slicer", average_size=10, size_variation=0, delay=20_000)
        with connect(listen) as sock:
            sock.sendall(payload)
            pieces = []
            while sum(map(len, pieces)) < len(payload):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                pieces.append(chunk)
        return pieces

    seen = both(sides, scenario)
    for kind, pieces in seen.items():
        assert b"".join(pieces) == payload, f"{kind}: slicer changed the bytes"
        assert len(pieces) >= 10, f"{kind}: 100 bytes came in {len(pieces)} reads: {list(map(len, pieces))}"
    assert abs(len(seen["ours"]) - len(seen["real"])) <= 2, {k: list(map(len, v)) for k, v in seen.items()}


def test_limit_data_alike(sides, echo):
    """Compares: what comes back for 100 bytes through a downstream limit_data of 10 bytes.
    Effect (toxics/limit_data.go): exactly the first 10 bytes, then the connection is closed.
    Tolerance: identical observations."""

    payload = bytes(range(100))

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        side.toxic("limit_data", bytes=10)
        with connect(listen) as sock:
            sock.sendall(payload)
            return ending(sock)

    seen = both(sides, scenario)
    for kind, observed in seen.items():
        assert observed == ("eof", payload[:10]), f"{kind}: {observed}"
    assert seen["ours"] == seen["real"]


def test_slow_close_alike(sides):
    """Compares: when the client sees the close of an upstream that greets and closes at once,
    through a downstream slow_close of 300 ms. Effect (toxics/slow_close.go): the greeting, then
    EOF no earlier than 300 ms after connecting. Tolerance: same bytes; times within 150 ms."""

    upstream = greet_and_close_server(b"bye")
    try:
        def scenario(side: Side):
            listen = side.proxy(upstream.address)
            side.toxic("slow_close", delay=300)
            with connect(listen) as sock:
                start = time.monotonic()
                how = ending(sock)
                return how, time.monotonic() - start

        seen = both(sides, scenario)
    finally:
        upstream.stop()
    for kind, (how, elapsed) in seen.items():
        assert how == ("eof", b"bye"), f"{kind}: {how}"
        assert elapsed >= 0.29, f"{kind}: closed {elapsed:.3f} s after connecting, before the 300 ms slow_close"
    agree_within({k: v[1] for k, v in seen.items()}, 0.15, "slow_close")


# --- enabled, toxicity, proxy update --------------------------------------------------------------


def test_disable_then_enable_alike(sides, echo):
    """Compares: an open connection and new connects across `enabled: false` then `true`.
    Effect (proxy.go Stop/Start via api.go ProxyUpdate): disabling closes open connections and
    stops listening (connects refused); enabling listens on the same address again and traffic
    flows. Tolerance: identical observations."""

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        with connect(listen) as sock:
            round_trip(sock)
            assert side.update(enabled=False)["enabled"] is False
            open_one = ending(sock)
        off_refused = refused(listen)
        assert side.update(enabled=True)["enabled"] is True
        with connect(listen) as sock:
            round_trip(sock, b"again")
        return open_one, off_refused

    seen = both(sides, scenario)
    for kind, observed in seen.items():
        assert observed == (("eof", b""), True), f"{kind}: {observed}"
    assert seen["ours"] == seen["real"]


@pytest.mark.parametrize("toxicity", [0.0, 1.0, 0.5])
def test_toxicity_alike(sides, echo, toxicity):
    """Compares: the fraction of 60 connections a limit_data toxic (2 bytes, downstream) applies to.
    Effect (toxics/toxic.go ToxicStub: toxicity is rolled once per connection and direction):
    toxicity 0 -> none, 1 -> all. For 0.5 each side's fraction lies in [0.30, 0.70] (about 3
    binomial standard deviations at n=60) and the two within 0.30 of each other."""

    connections = 60

    def scenario(side: Side):
        listen = side.proxy(echo.address)
        side.toxic("limit_data", bytes=2, toxicity=toxicity)
        hit = 0
        for _ in range(connections):
            with connect(listen) as sock:
                sock.sendall(b"ping")
                got = read_exactly(sock, 4)
                assert got in (b"pi", b"ping"), f"{side.kind}: {got!r}"
                hit += got == b"pi"
        return hit / connections

    seen = both(sides, scenario)
    for kind, fraction in seen.items():
        if toxicity in (0.0, 1.0):
            assert fraction == toxicity, f"{kind}: toxicity {toxicity} applied to {fraction:.2f} of connections"
        else:
            assert 0.30 <= fraction <= 0.70, f"{kind}: toxicity 0.5 applied to {fraction:.2f} of {connections}"
    assert abs(seen["ours"] - seen["real"]) <= 0.30, seen


def test_upstream_and_listen_update_alike(sides, echo):
    """Compares: a proxy's upstream, then its listen address, changed through POST /proxies/p.
    Effect (api.go ProxyUpdate -> proxy.go Update: a change restarts the proxy): the open
    connection is closed; new connections reach the new upstream; after the listen change the old
    address refuses and the new one serves. Tolerance: identical observations."""

    greeter = greet_and_close_server(b"other")
    try:
        def scenario(side: Side):
            listen = side.proxy(echo.address)
            with connect(listen) as sock:
                round_trip(sock)
                side.update(upstream=greeter.address)
                open_one = ending(sock)
            with connect(listen) as sock:
                new_upstream = ending(sock)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                new_listen = f"127.0.0.1:{probe.getsockname()[1]}"
            shown = side.update(listen=new_listen)
            old_refused = refused(listen)
            with connect(new_listen) as sock:
                via_new = ending(sock)
            return open_one, new_upstream, shown["listen"] == new_listen, old_refused, via_new

        seen = both(sides, scenario)
    finally:
        greeter.stop()
    for kind, observed in seen.items():
        assert observed == (("eof", b""), ("eof", b"other"), True, True, ("eof", b"other")), f"{kind}: {observed}"
    assert seen["ours"] == seen["real"]
