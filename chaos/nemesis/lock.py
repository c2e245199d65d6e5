"""Lock-loss faults on a shared store: one host's storage link cut or slowed, or its lease ended.

The hosts reach the store server (machinery/sharedstore) each through its own Toxiproxy proxy, so a
fault of one host's proxy is a fault of that host's storage link and of nothing else, as a cut
NFS link would be. A JDBC group's brokers reach their database the same way, each through its
own proxy (conformance/targets/runtime/database_links.py), so the same steps cut, slow or reset
one broker's database link; `lock_loss_nemesis` builds the nemesis on any such rig. Steps (``host``
names a host of ``links``):

- ``partition(host)``: the host's proxy disabled (refuses and drops connections): its requests go
  unanswered, the soft/hard retry schedule runs, and its lease runs out on the server;
- ``latency(host, latency=ms, jitter=ms)``: a latency toxic on both streams of its proxy (a wait
  longer than the mount's ``timeo`` turns into retransmissions, then EIO on a soft mount);
- ``reset(host, timeout=ms)``: a reset_peer toxic on both streams (connections reset);
- ``expire(host)``: the server ends the host's lease now and releases its locks (NFSv4's lease
  expiry without waiting for it; the store refuses it in NFSv3 mode, which has no leases). An
  instant event, not a fault with a window: nothing to heal, the host recovers with a new session;
  only the simulated NFS store has it (a database behind the proxies keeps its own lease rows);
- ``heal(host=None)``: undo one host's faults, or all.

Recorded like every nemesis (base.py); teardown heals whatever is still active.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from chaos.history import History
from machinery.faultproxy.client import ToxiproxyClient, ToxiproxyError
from machinery.sharedstore.control import control
from machinery.store_links import StoreLinks  # what a rig exposes: the links this nemesis faults

from .base import NemesisError, RecordedNemesis

STREAMS = ("upstream", "downstream")


def lock_loss_nemesis(rig: StoreLinks, history: History | None = None, *, node: str | None = None,
                      timeout: float = 5.0) -> "LockLossNemesis":
    """A `LockLossNemesis` over ``rig``'s links (host names are the rig's), recording into
    ``history``. Faults it leaves are healed by its `teardown`, and in any case by the rig's close."""
    return LockLossNemesis(history, proxy_api=rig.proxy_api, store=rig.store_address, links=rig.links, node=node,
                           timeout=timeout)


class LockLossNemesis(RecordedNemesis):
    name = "lock-loss"

    def __init__(self, history: History | None, *, proxy_api: str, store: str | None, links: dict[str, str],
                 node: str | None = None, timeout: float = 5.0) -> None:
        """``proxy_api``: the Toxiproxy API URL; ``store``: the store server's own address
        (HOST:PORT, for ``expire``), None for a store with no lease table of ours to expire (a
        database behind the proxies: runtime/database_links.py); ``links``: host name -> the name
        of its proxy to the store."""
        super().__init__(history, node=node)
        if not links:
            raise ValueError("lock-loss nemesis: links must name at least one host's proxy")
        self.proxies = ToxiproxyClient(proxy_api, timeout=timeout)
        self.store = store
        self.links = dict(links)
        self.timeout = timeout

    @staticmethod
    @contextmanager
    def _api() -> Iterator[None]:
        try:
            yield
        except ToxiproxyError as exc:
            raise NemesisError(str(exc)) from None

    def _proxy(self, params: dict, f: str) -> tuple[str, str]:
        host = params.get("host")
        if host not in self.links:
            raise ValueError(f"lock-loss step {f!r}: host={host!r} is not one of {sorted(self.links)}")
        return host, self.links[host]

    # ------------------------------------------------------------------ steps

    def _setup(self) -> dict:
        with self._api():
            known = self.proxies.proxies()
        missing = sorted(p for p in self.links.values() if p not in known)
        if missing:
            raise NemesisError(f"lock-loss: proxies {missing} do not exist at {self.proxies.api_url}")
        return {"links": self.links}

    def _step(self, f: str, params: dict) -> dict | None:
        if f == "heal":
            host = params.get("host")
            if host is None:
                return self._heal_all()
            self._proxy(params, f)
            keys = [k for k in self.active if k.split("/", 1)[0] == host]
            for key in keys:
                self._heal(key, self.active[key])
            return {"healed": keys}
        if f == "expire":
            host, _ = self._proxy(params, f)
            if self.store is None:
                raise NemesisError(f"lock-loss expire({host}): this store has no lease server of ours to expire a "
                                   "host's lease at (a database link: partition, latency or reset it)")
            try:
                reply = control(self.store, {"op": "expire", "client": host}, timeout=self.timeout)
            except (OSError, RuntimeError) as exc:
                raise NemesisError(f"lock-loss expire({host}): the store at {self.store} refused or did not "
                                   f"answer: {exc}") from None
            return {"expired_sessions": reply["expired_sessions"]}
        host, proxy = self._proxy(params, f)
        key = f"{host}/{f}"
        if key in self.active:
            raise NemesisError(f"lock-loss {f}({host}): already active; heal it first")
        if f == "partition":
            with self._api():
                self.proxies.disable(proxy)
            return {"fault": key, "proxy": proxy}
        if f in ("latency", "reset"):
            kind, attributes = (("latency", {"latency": params.get("latency", 1000), "jitter": params.get("jitter", 0)})
                                if f == "latency" else ("reset_peer", {"timeout": params.get("timeout", 0)}))
            added = []
            try:
                for stream in STREAMS:
                    with self._api():
                        self.proxies.add_toxic(proxy, kind, stream=stream, name=f"bc_lockloss_{f}_{stream}",
                                               attributes=attributes)
                    added.append(stream)
            except NemesisError:
                for stream in added:   # no half-applied fault left behind
                    self.proxies.remove_toxic(proxy, f"bc_lockloss_{f}_{stream}", missing_ok=True)
                raise
            return {"fault": key, "proxy": proxy}
        return super()._step(f, params)

    def _heal(self, key: str, fault: dict) -> None:
        host, _, f = key.partition("/")
        proxy = self.links[host]
        with self._api():
            if f == "partition":
                self.proxies.enable(proxy)
            else:
                for stream in STREAMS:
                    self.proxies.remove_toxic(proxy, f"bc_lockloss_{f}_{stream}", missing_ok=True)
