"""The project's Toxiproxy API client (machinery/faultproxy/client.py), against our fault proxy server and
the real toxiproxy-server (tests/chaos/conftest.py: the ``fault_proxy`` fixture runs each test on
both; without the real binary its runs skip, or fail where BROKERCONF_REQUIRE names toxiproxy)."""
from __future__ import annotations

import asyncio
import socket

import pytest

from machinery.faultproxy.client import ToxiproxyClient, ToxiproxyError, ToxiproxyUnreachable, split_address
from machinery.faultproxy.testing import LoopbackServer, echo_server


@pytest.fixture
def echo():
    server = echo_server()
    yield server
    server.stop()


@pytest.fixture
def client(fault_proxy):
    return ToxiproxyClient(fault_proxy.api_url)


def round_trip(listen: str, payload: bytes = b"ping") -> bytes:
    with socket.create_connection(split_address(listen), timeout=5) as sock:
        sock.sendall(payload)
        data = b""
        while len(data) < len(payload):
            chunk = sock.recv(len(payload) - len(data))
            if not chunk:
                break
            data += chunk
        return data


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_version_names_a_release(client):
    version = client.version()
    assert isinstance(version, str) and version.lstrip("v").startswith("2."), version  # real: v2.12.0


def test_create_show_list_and_delete_a_proxy(client, echo):
    created = client.create_proxy("p", upstream=echo.address)
    host, port = split_address(created["listen"])
    assert host == "127.0.0.1" and port != 0 and created["enabled"] is True
    assert round_trip(created["listen"]) == b"ping"
    assert list(client.proxies()) == ["p"]
    assert client.proxy("p")["upstream"] == echo.address
    client.delete_proxy("p")
    assert client.proxies() == {}


def test_disable_and_enable(client, echo):
    listen = client.create_proxy("p", upstream=echo.address)["listen"]
    assert client.disable("p")["enabled"] is False
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(split_address(listen), timeout=5).close()
    assert client.enable("p")["enabled"] is True
    assert round_trip(listen) == b"ping"


def test_update_moves_the_upstream(client, echo):
    other = echo_server()
    try:
        listen = client.create_proxy("p", upstream=f"127.0.0.1:{free_port()}")["listen"]
        assert client.update_proxy("p", upstream=other.address)["upstream"] == other.address
        assert round_trip(listen) == b"ping"
    finally:
        other.stop()


def test_add_update_list_and_remove_toxics(client, echo):
    client.create_proxy("p", upstream=echo.address)
    toxic = client.add_toxic("p", "latency", attributes={"latency": 10})
    assert toxic["name"] == "latency_downstream" and toxic["stream"] == "downstream"  # the server's default name
    client.add_toxic("p", "timeout", stream="upstream", name="held", attributes={"timeout": 0}, toxicity=0.5)
    assert {t["name"] for t in client.toxics("p")} == {"latency_downstream", "held"}
    updated = client.update_toxic("p", "latency_downstream", attributes={"latency": 20})
    assert updated["attributes"]["latency"] == 20
    assert client.remove_toxic("p", "held") is True
    assert [t["name"] for t in client.toxics("p")] == ["latency_downstream"]


def test_reset_enables_every_proxy_and_removes_every_toxic(client, echo):
    client.create_proxy("p", upstream=echo.address)
    client.create_proxy("q", upstream=echo.address)
    client.disable("p")
    client.add_toxic("q", "latency", attributes={"latency": 10})
    client.reset()
    assert client.proxy("p")["enabled"] is True and client.toxics("q") == []


def test_populate_creates_the_proxies(client, echo):
    created = client.populate([{"name": "a", "listen": "127.0.0.1:0", "upstream": echo.address},
                               {"name": "b", "listen": "127.0.0.1:0", "upstream": echo.address}])
    assert [p["name"] for p in created] == ["a", "b"]
    assert sorted(client.proxies()) == ["a", "b"]
    assert round_trip(created[1]["listen"]) == b"ping"


def test_an_unknown_proxy_is_an_error_naming_it_with_status_and_body(client):
    with pytest.raises(ToxiproxyError) as caught:
        client.add_toxic("nope", "latency")
    error = caught.value
    assert (error.status, error.proxy, error.method) == (404, "nope", "POST")
    assert "proxy not found" in error.body
    message = str(error)
    assert "'nope'" in message and "404" in message and "proxy not found" in message and client.api_url in message


def test_a_taken_name_is_a_409_error(client, echo):
    client.create_proxy("p", upstream=echo.address)
    with pytest.raises(ToxiproxyError, match=r"POST /proxies \(proxy 'p'\) .* answered 409"):
        client.create_proxy("p", upstream=echo.address)


def test_removing_a_missing_toxic(client, echo):
    client.create_proxy("p", upstream=echo.address)
    with pytest.raises(ToxiproxyError) as caught:
        client.remove_toxic("p", "gone")
    assert caught.value.status == 404 and "toxic not found" in str(caught.value)
    assert client.remove_toxic("p", "gone", missing_ok=True) is False


def test_wait_ready_answers_with_the_version(client):
    assert client.wait_ready(timeout=5) == client.version()


# --- without a server: no answer is an error, never a hang -----------------------------------


def test_nothing_listening_is_unreachable_with_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ToxiproxyUnreachable, match="GET /proxies at " + url) as caught:
        ToxiproxyClient(url).proxies()
    assert caught.value.status is None
    with pytest.raises(ToxiproxyUnreachable, match=r"did not answer GET /version within 0\.2 s"):
        ToxiproxyClient(url).wait_ready(timeout=0.2)


def test_a_server_that_never_answers_is_cut_off_by_the_timeout():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads the request, answers nothing until the client goes

    server = LoopbackServer(silent).start()
    try:
        with pytest.raises(ToxiproxyUnreachable, match=r"bounded by 0\.3 s"):
            ToxiproxyClient(f"http://{server.address}", timeout=0.3).version()
    finally:
        server.stop()


@pytest.mark.parametrize("url", ["127.0.0.1:8474", "https://127.0.0.1:8474", "http://"])
def test_a_bad_api_url_is_refused(url):
    with pytest.raises(ValueError, match="Toxiproxy API URL"):
        ToxiproxyClient(url)


def test_split_address():
    assert split_address("127.0.0.1:8474") == ("127.0.0.1", 8474)
    assert split_address("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError, match="host:port"):
        split_address("localhost")


def test_a_picked_listen_port_taken_before_the_bind_is_picked_again(client, echo, monkeypatch):
    """The first pick is a port something else already listens on (as if taken between the pick and
    toxiproxy's bind): the proxy is created on the next pick; other errors are not retried."""
    from machinery.faultproxy import client as client_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        picks = iter([[taken.getsockname()[1]], [free_port()]])
        monkeypatch.setattr(client_module, "free_ports", lambda n: next(picks))
        proxy = client.create_proxy("retried", f"127.0.0.1:{echo.port}")
    assert round_trip(proxy["listen"]) == b"ping"
    client.delete_proxy("retried")
