"""Network faults through a Toxiproxy HTTP API: ours (machinery/faultproxy/) or a real toxiproxy-server.

Through `machinery.faultproxy.client.ToxiproxyClient`, every call bounded by ``timeout`` (REFERENCES.md,
Toxiproxy: deleting a toxic under traffic can hang or answer 503, issues #412 / #558), so a stuck
heal is recorded as a failure instead of hanging the run.

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

from contextlib import contextmanager
from typing import Iterator

from chaos.history import History
from machinery.faultproxy.client import ToxiproxyClient, ToxiproxyError

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
        self.client = ToxiproxyClient(api_url, timeout=timeout)
        self.api_url = self.client.api_url
        self.timeout = timeout
        # POST /reset also touches proxies we did not fault: only as a last resort, when asked.
        self.reset_on_failed_heal = reset_on_failed_heal

    @staticmethod
    @contextmanager
    def _api() -> Iterator[None]:
        """A failed API call is a nemesis failure; the client's message names the call, the proxy,
        the status and the server's answer."""
        try:
            yield
        except ToxiproxyError as exc:
            raise NemesisError(str(exc)) from None

    # ------------------------------------------------------------------ steps

    def _setup(self) -> dict:
        with self._api():
            proxies = self.client.proxies()
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
                with self._api():
                    self.client.disable(proxy)
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
            with self._api():
                self.client.add_toxic(proxy, kind, stream=s, name=name, toxicity=toxicity, attributes=attributes)
            key = f"{proxy}/toxic/{name}"
            keys.append(key)
            if len(streams) > 1:  # record each stream as its own fault so heal undoes each
                self.active[key] = {"f": f, "started": self._now(), "proxy": proxy}
        if len(streams) == 1:
            return {"fault": keys[0], "toxics": keys}
        return {"toxics": keys}

    def _heal(self, key: str, fault: dict) -> None:
        proxy, _, what = key.partition("/")
        with self._api():
            if what == "disabled":
                self.client.enable(proxy)
            elif what.startswith("toxic/"):
                # already gone (a /reset by someone else): healed
                self.client.remove_toxic(proxy, what[len("toxic/"):], missing_ok=True)

    def _heal_all(self) -> dict:
        try:
            return super()._heal_all()
        except NemesisError:
            if not self.reset_on_failed_heal:
                raise
            with self._api():
                self.client.reset()
            windows = [self._close(k) for k in list(self.active)]
            return {"fault_window": windows, "reset": True}
