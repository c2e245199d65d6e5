"""Process faults on whichever broker is master when the fault starts (master/slave groups).

In a shared-store group the master moves: after node A is killed, B takes the store's lock and
serves, and the restarted A waits as a slave (A-MQ fault-tolerant messaging guide, 3.1). A
schedule that says "kill the master every N seconds" therefore picks its victim at fault time.
The heal step (start / resume) acts on the node that step's fault hit. Each node's own
ProcessNemesis records the events, so the history names the node every fault hit.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from chaos.history import History
from machinery.waiting import poll

from .base import NemesisError
from .process import ProcessNemesis

FAULTS = ("kill", "pause", "stop")
HEALS = ("start", "resume", "restart", "heal")


class CurrentMasterNemesis:
    name = "process"

    def __init__(self, nodes: dict[str, Any], find_master: Callable[[], str | None], history: History | None = None,
                 *, master_timeout: float = 60.0, start_timeout: float = 90.0) -> None:
        self.per_node = {name: ProcessNemesis(handle, history, node=name, start_timeout=start_timeout)
                         for name, handle in nodes.items()}
        self.find_master = find_master
        self.master_timeout = master_timeout
        self.faulted: list[str] = []  # nodes faulted and not yet healed, oldest first

    def setup(self) -> None:
        for nemesis in self.per_node.values():
            nemesis.setup()

    def _wait_for_master(self) -> str:
        name = poll(self.find_master, lambda name: name is not None, timeout=self.master_timeout, interval=0.1)
        if name is None:
            raise NemesisError(f"no node became master within {self.master_timeout}s; nodes: "
                               f"{sorted(self.per_node)} (see the brokers' logs)")
        return name

    def invoke(self, f: str, **params: Any) -> dict:
        if f in FAULTS:
            # A master that has not taken over yet (a slave still acquiring the lock) is waited
            # for: the schedule faults the group's master, not "nothing".
            name = self._wait_for_master()
            result = self.per_node[name].invoke(f, **params)
            self.faulted.append(name)
            return {**result, "node": name}
        if f in HEALS:
            if not self.faulted:
                raise NemesisError(f"{f}: no faulted node to heal")
            name = self.faulted.pop(0)
            return {**self.per_node[name].invoke(f, **params), "node": name}
        raise ValueError(f"{self.name}: unknown step {f!r} (faults {FAULTS}, heals {HEALS})")

    def teardown(self) -> None:
        errors = []
        for name, nemesis in self.per_node.items():
            try:
                nemesis.teardown()  # restarts whatever is still down: it rejoins as a slave
            except Exception as exc:  # noqa: BLE001 - heal every node, then report
                errors.append(f"{name}: {exc}")
        self.faulted.clear()
        if errors:
            raise NemesisError(f"could not heal every node: {errors}")
