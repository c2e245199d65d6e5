"""A ``lock-loss`` [[nemesis]] entry of an experiment: fault the storage link of the node that is
master when the fault starts, heal it later, and time what the group does meanwhile.

The lock-loss nemesis (chaos/nemesis/lock.py) records the fault and the heal in the history. What
the experiment asks besides (issue 18, section 5) is measured here by watching every node's
listeners (a master opens them, a slave keeps them closed: A-MQ fault-tolerant messaging guide,
3.1) from the fault on, every ``poll_s``:

- ``detection_s``: from the fault until the faulted master stopped serving (None: it never did
  while watched, i.e. it went on serving without its lock). "Serving" is answering a STOMP
  CONNECT within 1 s (`RunningTopology.answering_nodes`, the same for every broker): a master stuck
  in a write to the cut mount does not serve, its clients get nothing either. ``back_s``: when the
  faulted master served again after that (a stall, not a demotion), None if it did not;
- ``closed_s``: from the fault until the faulted master's listener refused TCP connections (a
  master that gave up mastership closes its connectors; a JVM stuck in I/O still has the kernel
  accept for it), None if it did not while watched;
- ``takeover_s``: from the fault until another node served (None: none did, the NFSv3 shape);
- ``overlap_s``: how long two or more nodes served at once (two masters on one store);
  ``open_overlap_s``: how long two or more had their listeners open; ``timeline``: each change,
  (seconds since the fault, serving nodes, listening nodes).

The watch ends when both ends were seen and ``settle_s`` passed, when the next fault of this
entry starts, or at teardown (an expired lease's: after the drain, `end_watch`). Each fault's
figures go to ``results`` (the run-end record).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from chaos.nemesis.base import NemesisError
from machinery.waiting import poll


class LockLossFault:
    name = "lock-loss"

    def __init__(self, nemesis, serving_nodes: Callable[[], list[str]], *,
                 listening_nodes: Callable[[], list[str]] | None = None, fault: str = "partition",
                 node: str = "master", params: dict | None = None, master_timeout: float = 60.0,
                 poll_s: float = 0.1, settle_s: float = 3.0) -> None:
        self.nemesis = nemesis
        self.serving_nodes = serving_nodes
        self.listening_nodes = listening_nodes or serving_nodes
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
        serving = poll(self.serving_nodes, lambda serving: len(serving) == 1, timeout=self.master_timeout,
                       interval=self.poll_s)
        if len(serving) != 1:
            raise NemesisError(f"lock-loss: no single master within {self.master_timeout:.0f} s (serving: "
                               f"{serving})")
        return serving[0]

    def invoke(self, f: str, **params: Any) -> dict:
        if f == "lock-loss":
            self.end_watch()
            host = self._victim()
            result = self.nemesis.invoke(self.fault, host=host, **self.params)
            if self.heals:
                self._faulted.append(host)
            record: dict[str, Any] = {"node": host, "fault": self.fault, "detection_s": None, "takeover_s": None,
                                      "overlap_s": 0.0, "back_s": None, "closed_s": None,
                                      "open_overlap_s": 0.0, "timeline": [],
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
        host, last, done_at = record["node"], None, None
        since = {"overlap_s": None, "open_overlap_s": None}
        while not stop.is_set():
            now = time.monotonic()
            try:
                serving, listening = sorted(self.serving_nodes()), sorted(self.listening_nodes())
            except Exception:  # noqa: BLE001 - a probe that failed is no observation
                stop.wait(self.poll_s)
                continue
            at = round(now - started, 3)
            if (serving, listening) != last:
                record["timeline"].append([at, serving, listening])
                last = (serving, listening)
            if record["detection_s"] is None and host not in serving:
                record["detection_s"] = at
            elif record["detection_s"] is not None and record["back_s"] is None and host in serving:
                record["back_s"] = at
            if record["closed_s"] is None and host not in listening:
                record["closed_s"] = at
            if record["takeover_s"] is None and any(n != host for n in serving):
                record["takeover_s"] = at
            for key, nodes in (("overlap_s", serving), ("open_overlap_s", listening)):
                if len(nodes) > 1:
                    since[key] = since[key] if since[key] is not None else now
                elif since[key] is not None:
                    record[key] = round(record[key] + now - since[key], 3)
                    since[key] = None
            if done_at is None and None not in (record["detection_s"], record["takeover_s"], record["closed_s"]):
                done_at = now
            if done_at is not None and now - done_at >= self.settle_s:
                break
            stop.wait(self.poll_s)
        for key, began in since.items():
            if began is not None:
                record[key] = round(record[key] + time.monotonic() - began, 3)

    @property
    def heals(self) -> bool:
        """Whether the fault leaves something to undo: an expired lease is an instant event."""
        return self.fault != "expire"

    def end_watch(self) -> None:
        """Stop watching the group (a new fault, teardown, or the experiment once its drain is over)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.join(10)
            self._watch = None

    def teardown(self) -> None:
        """Heal what is still faulted. A watch over a cut still in place ends here, since this heal
        changes what it watches. A fault already healed (by its schedule) or with nothing to heal
        (an expired lease) leaves the group doing what the fault made it do, so that watch goes on
        through the drain until `end_watch`: a node that takes the lock after the workload stopped
        serves all the same. In mj41, under a load average of 26, ActiveMQ's drain read every message
        after a lease expiry, so a node served, yet the record ended at the run's end said none did;
        in mj51 the slave of a cut master had not served 23 s after the cut (the heal at 16 s, then
        the run's end), while the clients' drain still waited for it."""
        try:
            if self._faulted:
                self.end_watch()
        finally:
            self.nemesis.teardown()
