"""A ``lock-loss`` [[nemesis]] entry of an experiment: fault the storage link of the node that is
master when the fault starts, heal it later, and time what the group does meanwhile.

The lock-loss nemesis (chaos/nemesis/lock.py) records the fault and the heal in the history. What
the experiment asks besides (issue 18, section 5) is measured here by watching every node's
listeners (a master opens them, a slave keeps them closed: A-MQ fault-tolerant messaging guide,
3.1) from the fault on, every ``poll_s``:

- ``detection_s``: from the fault until the faulted master stopped serving (None: it never did
  while watched, i.e. it went on serving without its lock). "Serving" is the node handle's own
  probe (`serving()`): the reference broker's is a STOMP handshake within 1 s, so a master whose
  event loop is stuck in a write to the cut mount counts as not serving (its clients get nothing
  either); ActiveMQ's and Artemis's is a TCP accept, which the kernel answers for a JVM stuck in
  I/O, so for them only a closed listener counts. ``back_s``: when the faulted master served again
  after that (a stall, not a demotion), None if it did not while watched;
- ``takeover_s``: from the fault until another node served (None: none did, the NFSv3 shape);
- ``overlap_s``: how long two or more nodes served at once (two masters on one store), and
  ``timeline``: each change of the set of serving nodes, (seconds since the fault, nodes).

The watch ends when both ends were seen and ``settle_s`` passed, when the next fault of this
entry starts, or at teardown. Each fault's figures go to ``results`` (the run-end record).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from chaos.nemesis.base import NemesisError


class LockLossFault:
    name = "lock-loss"

    def __init__(self, nemesis, serving_nodes: Callable[[], list[str]], *, fault: str = "partition",
                 node: str = "master", params: dict | None = None, master_timeout: float = 60.0,
                 poll_s: float = 0.1, settle_s: float = 3.0) -> None:
        self.nemesis = nemesis
        self.serving_nodes = serving_nodes
        self.fault, self.node = fault, node
        self.params = dict(params or {})
        self.master_timeout, self.poll_s, self.settle_s = master_timeout, poll_s, settle_s
        self.results: list[dict[str, Any]] = []
        self._faulted: list[str] = []
        self._watch: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = 0.0

    def setup(self) -> None:
        self.nemesis.setup()

    def _victim(self) -> str:
        if self.node != "master":
            return self.node
        deadline = time.monotonic() + self.master_timeout
        while True:
            serving = self.serving_nodes()
            if len(serving) == 1:
                return serving[0]
            if time.monotonic() >= deadline:
                raise NemesisError(f"lock-loss: no single master within {self.master_timeout:.0f} s (serving: "
                                   f"{serving})")
            time.sleep(self.poll_s)

    def invoke(self, f: str, **params: Any) -> dict:
        if f == "lock-loss":
            self._end_watch()
            host = self._victim()
            result = self.nemesis.invoke(self.fault, host=host, **self.params)
            if self.fault != "expire":
                self._faulted.append(host)
            record: dict[str, Any] = {"node": host, "fault": self.fault, "detection_s": None, "takeover_s": None,
                                      "overlap_s": 0.0, "back_s": None, "timeline": [],
                                      "healed_at_s": None}
            self.results.append(record)
            self._stop = threading.Event()
            self._started = time.monotonic()
            self._watch = threading.Thread(target=self._watch_group, args=(record, self._started, self._stop),
                                           name="lock-loss-watch", daemon=True)
            self._watch.start()
            return {**result, "node": host}
        if f == "heal":
            if self.results and self.results[-1]["healed_at_s"] is None:
                self.results[-1]["healed_at_s"] = round(time.monotonic() - self._started, 3)
            if not self._faulted:
                return {"healed": []}  # an expired lease: nothing to undo
            return self.nemesis.invoke("heal", host=self._faulted.pop(0))
        raise NemesisError(f"lock-loss: unknown step {f!r}")

    def _watch_group(self, record: dict, started: float, stop: threading.Event) -> None:
        host, last, both_since, done_at = record["node"], None, None, None
        while not stop.is_set():
            now = time.monotonic()
            try:
                serving = sorted(self.serving_nodes())
            except Exception:  # noqa: BLE001 - a probe that failed is no observation
                serving = last or []
            at = round(now - started, 3)
            if serving != last:
                record["timeline"].append([at, serving])
                last = serving
            if record["detection_s"] is None and host not in serving:
                record["detection_s"] = at
            elif record["detection_s"] is not None and record["back_s"] is None and host in serving:
                record["back_s"] = at
            if record["takeover_s"] is None and any(n != host for n in serving):
                record["takeover_s"] = at
            if len(serving) > 1:
                both_since = both_since if both_since is not None else now
            elif both_since is not None:
                record["overlap_s"] = round(record["overlap_s"] + now - both_since, 3)
                both_since = None
            if done_at is None and record["detection_s"] is not None and record["takeover_s"] is not None:
                done_at = now
            if done_at is not None and now - done_at >= self.settle_s:
                break
            stop.wait(self.poll_s)
        if both_since is not None:
            record["overlap_s"] = round(record["overlap_s"] + time.monotonic() - both_since, 3)

    def _end_watch(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join(10)
            self._watch = None

    def teardown(self) -> None:
        try:
            self._end_watch()
        finally:
            self.nemesis.teardown()
