"""The one client of the Toxiproxy HTTP API in the project: ours (machinery/faultproxy/server.py) or a real
``toxiproxy-server`` (or its container) answer it alike.

Routes, bodies and status codes as Shopify/toxiproxy's api.go (README, "HTTP API"): create proxy
201, populate 201, delete proxy / delete toxic / reset 204, the rest 200; errors carry
``{"error": ..., "status": ...}``. Every call is bounded by ``timeout`` seconds (on each socket
operation): deleting a toxic under traffic can hang or answer 503 on the real server (issues #412,
#558), and a stuck call must become an error the caller can record, not a hung run.

Two layers:
- `ToxiproxyClient.exchange`: one request, the answer's status and raw body whatever the status
  (for the tests of the API itself, which assert error codes and bodies);
- the named operations (`create_proxy`, `add_toxic`, `disable`, `reset`, ...), which decode the
  JSON answer and raise `ToxiproxyError` naming the operation, the proxy, the HTTP status and the
  server's body on any answer other than the one the API documents.
"""
from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import quote, urlparse

from machinery.process import free_ports
from machinery.waiting import poll

#: bound on one call; the real server bounds a request at 25 s (api.go http.TimeoutHandler), ours at
#: 5 s per control operation (machinery/faultproxy/api.py CONTROL_TIMEOUT)
DEFAULT_TIMEOUT = 5.0
STREAMS = ("upstream", "downstream")


#: picks of a listen port for a new proxy before giving up (each a fresh free port)
_LISTEN_ATTEMPTS = 3


class ToxiproxyError(RuntimeError):
    """The API answered with an unexpected status (``status`` and ``body`` set) or could not be
    reached (``status`` None)."""

    def __init__(self, message: str, *, method: str, path: str, proxy: str | None = None,
                 status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.method, self.path, self.proxy, self.status, self.body = method, path, proxy, status, body


class ToxiproxyUnreachable(ToxiproxyError):
    """No HTTP answer at all: refused, timed out, connection dropped."""


def split_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:8474"`` or ``"[::1]:8474"`` -> (host, port), as a proxy's ``listen`` field reads."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


class ToxiproxyClient:
    """``ToxiproxyClient("http://127.0.0.1:8474")``; every method is one bounded HTTP call."""

    def __init__(self, api_url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        url = urlparse(api_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"Toxiproxy API URL must be http://HOST:PORT, got {api_url!r}")
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self._host = url.hostname
        self._port = url.port or 80

    def __repr__(self) -> str:
        return f"ToxiproxyClient({self.api_url!r}, timeout={self.timeout})"

    # ------------------------------------------------------------------ transport

    def exchange(self, method: str, path: str, body: Any = None, *, data: bytes | None = None,
                 headers: dict[str, str] | None = None, timeout: float | None = None) -> tuple[int, bytes]:
        """One request; returns (status, body bytes) for any HTTP answer. ``body`` is sent as JSON,
        ``data`` as given (e.g. a malformed body). Raises `ToxiproxyUnreachable` with no answer."""
        payload = data if data is not None else (json.dumps(body).encode() if body is not None else None)
        sent_headers = {"Content-Type": "application/json"} if payload is not None else {}
        sent_headers.update(headers or {})
        bound = self.timeout if timeout is None else timeout
        conn = http.client.HTTPConnection(self._host, self._port, timeout=bound)
        try:
            conn.request(method, path, body=payload, headers=sent_headers)
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ToxiproxyUnreachable(
                f"toxiproxy {method} {path} at {self.api_url} got no answer: {exc or type(exc).__name__} (is the "
                f"proxy server running there? every call is bounded by {bound} s)",
                method=method, path=path) from None
        finally:
            conn.close()

    def call(self, method: str, path: str, body: Any = None, *, expect: int = 200, proxy: str | None = None) -> Any:
        """One request that must answer ``expect``; returns the decoded JSON (None for an empty body)."""
        status, raw = self.exchange(method, path, body)
        text = raw.decode(errors="replace").strip()
        if status != expect:
            about = f" (proxy {proxy!r})" if proxy is not None else ""
            raise ToxiproxyError(f"toxiproxy {method} {path}{about} at {self.api_url} answered {status}: "
                                 f"{text or '(empty body)'} (expected {expect})",
                                 method=method, path=path, proxy=proxy, status=status, body=text)
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text  # older servers answer GET /version in plain text

    # ------------------------------------------------------------------ server

    def version(self) -> str:
        answer = self.call("GET", "/version")
        return answer["version"] if isinstance(answer, dict) else str(answer)

    def wait_ready(self, timeout: float, *, interval: float = 0.05) -> str:
        """Poll ``GET /version`` until the server answers (a freshly started server); its version."""
        def answer() -> str | ToxiproxyError:
            try:
                return ToxiproxyClient(self.api_url, timeout=min(self.timeout, 1.0)).version()
            except ToxiproxyError as exc:
                return exc

        last = poll(answer, lambda got: not isinstance(got, ToxiproxyError), timeout=timeout, interval=interval)
        if isinstance(last, ToxiproxyError):
            raise ToxiproxyUnreachable(f"toxiproxy at {self.api_url} did not answer GET /version within "
                                       f"{timeout} s: {last}", method="GET", path="/version",
                                       status=last.status, body=last.body)
        return last

    def reset(self) -> None:
        """Enable every proxy and remove every toxic (``POST /reset``)."""
        self.call("POST", "/reset", expect=204)

    def populate(self, proxies: list[dict]) -> list[dict]:
        """Create or replace proxies in one call (``POST /populate``); the proxies as created."""
        return self.call("POST", "/populate", proxies, expect=201)["proxies"]

    # ------------------------------------------------------------------ proxies

    @staticmethod
    def _proxy_path(name: str) -> str:
        return f"/proxies/{quote(name, safe='')}"

    def proxies(self) -> dict[str, dict]:
        return self.call("GET", "/proxies")

    def proxy(self, name: str) -> dict:
        return self.call("GET", self._proxy_path(name), proxy=name)

    def create_proxy(self, name: str, upstream: str, listen: str | None = None, *, enabled: bool = True) -> dict:
        """A new proxy (409 from the server when the name is taken); its JSON, with the bound ``listen``.

        ``listen`` None: a free loopback port below the kernel's ephemeral range. A partition
        disables the proxy, which closes its listener until the heal binds the port again; a port
        from the ephemeral range could meanwhile become the local port of any outgoing connection
        on the machine (seen in a main job on six workers: the heal of a store link answered
        "bind: address already in use"), one below it only another chosen listener's."""
        if listen is not None:
            return self._create(name, upstream, listen, enabled)
        for _ in range(_LISTEN_ATTEMPTS - 1):
            try:
                return self._create(name, upstream, f"127.0.0.1:{free_ports(1)[0]}", enabled)
            except ToxiproxyError as exc:
                # a listener outside brokerconf (whose picks machinery/port_picks.py keeps apart)
                # took the picked port between the pick and toxiproxy's bind
                if "address already in use" not in str(exc):
                    raise
        return self._create(name, upstream, f"127.0.0.1:{free_ports(1)[0]}", enabled)

    def _create(self, name: str, upstream: str, listen: str, enabled: bool) -> dict:
        return self.call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream,
                                              "enabled": enabled}, expect=201, proxy=name)

    def update_proxy(self, name: str, **fields: Any) -> dict:
        """Change ``upstream``, ``listen`` (both drop the proxy's connections) or ``enabled``."""
        return self.call("POST", self._proxy_path(name), fields, proxy=name)

    def enable(self, name: str) -> dict:
        return self.update_proxy(name, enabled=True)

    def disable(self, name: str) -> dict:
        """Stop listening and drop the proxy's connections (a partition both ways)."""
        return self.update_proxy(name, enabled=False)

    def delete_proxy(self, name: str) -> None:
        self.call("DELETE", self._proxy_path(name), expect=204, proxy=name)

    def restore(self, name: str) -> None:
        """One proxy as it was made: its toxics removed, then enabled. Toxiproxy's ``reset`` does
        this for every proxy of the server; a rig on a shared server restores only its own."""
        for toxic in self.toxics(name):
            self.remove_toxic(name, toxic["name"], missing_ok=True)
        self.enable(name)

    # ------------------------------------------------------------------ toxics

    def toxics(self, proxy: str) -> list[dict]:
        return self.call("GET", f"{self._proxy_path(proxy)}/toxics", proxy=proxy)

    def add_toxic(self, proxy: str, type_: str, *, stream: str = "downstream", name: str | None = None,
                  toxicity: float = 1.0, attributes: dict | None = None) -> dict:
        """A toxic on one stream (``upstream`` client -> server, ``downstream`` server -> client);
        the server names it ``<type>_<stream>`` when ``name`` is None. Its JSON."""
        if stream not in STREAMS:
            raise ValueError(f"stream {stream!r}: use upstream or downstream")
        body: dict[str, Any] = {"type": type_, "stream": stream, "toxicity": toxicity, "attributes": attributes or {}}
        if name is not None:
            body["name"] = name
        return self.call("POST", f"{self._proxy_path(proxy)}/toxics", body, proxy=proxy)

    def update_toxic(self, proxy: str, name: str, **fields: Any) -> dict:
        """Change a toxic's ``attributes`` or ``toxicity``."""
        return self.call("POST", f"{self._proxy_path(proxy)}/toxics/{quote(name, safe='')}", fields, proxy=proxy)

    def remove_toxic(self, proxy: str, name: str, *, missing_ok: bool = False) -> bool:
        """Delete a toxic; False when it was already gone and ``missing_ok`` (e.g. after a reset)."""
        try:
            self.call("DELETE", f"{self._proxy_path(proxy)}/toxics/{quote(name, safe='')}", expect=204, proxy=proxy)
        except ToxiproxyError as exc:
            if missing_ok and exc.status == 404:
                return False
            raise
        return True
