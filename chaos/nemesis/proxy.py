"""Network faults through a Toxiproxy HTTP API: ours (chaos/proxy/) or a real toxiproxy-server.

Plain urllib, every call bounded by ``timeout`` (REFERENCES.md, Toxiproxy: deleting a toxic
under traffic can hang or answer 503, issues #412 / #558), so a stuck heal is recorded as a
failure instead of hanging the run.

Mapping (Toxiproxy README, "HTTP API" and "Toxics"):
- partition both ways: update the proxy with ``enabled: false`` (it stops listening and drops
  its connections); healed by ``enabled: true``.
- partition one way: a ``timeout`` toxic with ``timeout: 0`` on one stream holds that
  direction's data until the toxic is removed. ``upstream`` is client -> server, ``downstream``
  server -> client.
- ``latency`` (latency, jitter ms), ``bandwidth`` (rate KB/s), ``reset_peer`` (timeout ms):
  toxics on one stream, or on both (latency on one stream only delays one direction, #655).
Toxics this nemesis adds are named ``bc_<f>_<stream>`` so heal removes only its own.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from chaos.history import History

from .base import NemesisError, RecordedNemesis

STREAMS = ("upstream", "downstream")
_TOXIC_STEPS = {
    "latency": ("latency", {"latency": 1000, "jitter": 0}),
    "bandwidth": ("bandwidth", {"rate": 1}),
    "reset_peer": ("reset_peer", {"timeout": 0}),
}


class ProxyNemesis(RecordedNemesis):
    """Steps (``proxy`` names the Toxiproxy proxy):
    ``partition(proxy, direction="both"|"upstream"|"downstream")``,
    ``latency(proxy, latency=ms, jitter=ms, stream="both"|...)``, ``bandwidth(proxy, rate=KB/s, stream)``,
    ``reset_peer(proxy, timeout=ms, stream)``, ``heal(proxy=None)`` (one proxy, or everything)."""

    name = "proxy"

    def __init__(self, api_url: str, history: History | None = None, *, node: str | None = None,
                 timeout: float = 5.0, reset_on_failed_heal: bool = False) -> None:
        super().__init__(history, node=node)
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        # POST /reset also touches proxies we did not fault: only as a last resort, when asked.
        self.reset_on_failed_heal = reset_on_failed_heal

    # ------------------------------------------------------------------ HTTP

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as response:
                text = response.read().decode() or "null"
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            raise NemesisError(f"toxiproxy {method} {path} answered {exc.code}: {detail or exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise NemesisError(f"toxiproxy {method} {path} at {self.api_url} failed: {reason} (is the proxy "
                               f"server running there? every call is bounded by {self.timeout}s)") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def _proxy_path(self, proxy: str) -> str:
        return f"/proxies/{quote(proxy, safe='')}"

    # ------------------------------------------------------------------ steps

    def _setup(self) -> dict:
        proxies = self.request("GET", "/proxies")
        return {"proxies": sorted(proxies) if isinstance(proxies, dict) else proxies}

    def _step(self, f: str, params: dict) -> dict | None:
        if f == "heal":
            proxy = params.get("proxy")
            if proxy is None:
                return self._heal_all()
            keys = [k for k in self.active if k.split("/", 1)[0] == proxy]
            for key in keys:
                self._heal(key, self.active[key])
            return {"healed": keys}
        proxy = params.get("proxy")
        if not proxy:
            raise ValueError(f"{self.name}: step {f!r} needs proxy=NAME (a Toxiproxy proxy name)")
        if f == "partition":
            direction = params.get("direction", "both")
            if direction == "both":
                self.request("POST", self._proxy_path(proxy), {"enabled": False})
                return {"fault": f"{proxy}/disabled"}
            if direction not in STREAMS:
                raise ValueError(f"partition direction {direction!r}: use both, upstream or downstream")
            # timeout 0: hold the data until the toxic goes (Toxiproxy README, "timeout").
            return self._add_toxics(proxy, "partition", "timeout", direction, {"timeout": 0}, 1.0)
        if f in _TOXIC_STEPS:
            kind, defaults = _TOXIC_STEPS[f]
            attributes = {k: params.get(k, v) for k, v in defaults.items()}
            return self._add_toxics(proxy, f, kind, params.get("stream", "both"), attributes,
                                    params.get("toxicity", 1.0))
        return super()._step(f, params)

    def _add_toxics(self, proxy: str, f: str, kind: str, stream: str, attributes: dict, toxicity: float) -> dict:
        if stream not in (*STREAMS, "both"):
            raise ValueError(f"stream {stream!r}: use upstream, downstream or both")
        streams = STREAMS if stream == "both" else (stream,)
        keys = []
        for s in streams:
            name = f"bc_{f}_{s}"
            self.request("POST", f"{self._proxy_path(proxy)}/toxics",
                         {"name": name, "type": kind, "stream": s, "toxicity": toxicity, "attributes": attributes})
            key = f"{proxy}/toxic/{name}"
            keys.append(key)
            if len(streams) > 1:  # record each stream as its own fault so heal undoes each
                self.active[key] = {"f": f, "started": self._now(), "proxy": proxy}
        if len(streams) == 1:
            return {"fault": keys[0], "toxics": keys}
        return {"toxics": keys}

    def _heal(self, key: str, fault: dict) -> None:
        proxy, _, what = key.partition("/")
        if what == "disabled":
            self.request("POST", self._proxy_path(proxy), {"enabled": True})
        elif what.startswith("toxic/"):
            name = what[len("toxic/"):]
            try:
                self.request("DELETE", f"{self._proxy_path(proxy)}/toxics/{quote(name, safe='')}")
            except NemesisError as exc:
                if " 404:" not in str(exc):  # already gone (a /reset by someone else): healed
                    raise

    def _heal_all(self) -> dict:
        try:
            return super()._heal_all()
        except NemesisError:
            if not self.reset_on_failed_heal:
                raise
            self.request("POST", "/reset")
            windows = [self._close(k) for k in list(self.active)]
            return {"fault_window": windows, "reset": True}
