"""Lock-loss faults on a shared store (shared-file locker, lease database): a hook the
shared-store issue fills. It records like every nemesis, so experiments can already name it."""

from __future__ import annotations

from .base import RecordedNemesis


class LockLossNemesis(RecordedNemesis):
    name = "lock-loss"

    def _step(self, f: str, params: dict) -> dict | None:
        if f == "heal":
            return super()._step(f, params)
        raise NotImplementedError("filled by the shared-store issue")
