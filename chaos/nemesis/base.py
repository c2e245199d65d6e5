"""What every nemesis shares: the setup / invoke / teardown protocol and its recording.

Following Jepsen's nemesis (REFERENCES.md, "Jepsen"): the nemesis is its own process
(``process: "nemesis"``) and each step is an ``info`` event when it starts and another when it
ends. The end event carries the step's window (``started`` / ``ended``, ns since the run
started); healing a fault also records the fault's own window (``fault_window``: from the step
that started it to the step that ended it), which the report shades on its plots.

Teardown heals every fault still active, whatever happened before: a failed invoke or a failed
experiment must not leave a broker paused or a network cut (Jepsen's final generators do the
same). Use a nemesis as a context manager to get that guarantee.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from chaos.history import History


class NemesisError(RuntimeError):
    """A fault could not be injected or healed; the message says which and what to check."""


@runtime_checkable
class Nemesis(Protocol):
    name: str

    def setup(self) -> None:
        """Prepare (create namespaces, check the proxy answers...); recorded."""

    def invoke(self, f: str, **params: Any) -> dict:
        """Run one step (``kill``, ``pause``, ``partition``, ``heal``...); recorded; returns what it did."""

    def teardown(self) -> None:
        """Heal everything still active and release what setup made; recorded; never skipped."""


class RecordedNemesis:
    """Base class: subclasses implement ``_setup``, ``_step(f, params)``, ``_heal(key, fault)``,
    ``_teardown`` and say which fs start a fault (``_step`` returns ``{"fault": key, ...}``) and
    which end one (``{"healed": [keys]}``)."""

    name = "nemesis"

    def __init__(self, history: History | None, *, node: str | None = None) -> None:
        self.history = history
        self.node = node
        # key -> {"f": ..., "started": ns, ...}: what teardown must undo
        self.active: dict[str, dict] = {}
        self.torn_down = False

    # ------------------------------------------------------------------ recording

    def _record(self, f: str, value: dict, error: str | None = None) -> None:
        if self.history is not None:
            self.history.nemesis(f, {"nemesis": self.name, **value}, error=error, node=self.node)

    def _now(self) -> int:
        return self.history.now() if self.history is not None else 0

    def _recorded(self, f: str, params: dict, action) -> dict:
        started = self._now()
        self._record(f, {"phase": "start", **params})
        try:
            result = action() or {}
        except BaseException as exc:
            self._record(f, {"phase": "end", **params, "started": started, "ended": self._now()},
                         error=f"{type(exc).__name__}: {exc}")
            raise
        self._record(f, {"phase": "end", **params, **result, "started": started, "ended": self._now()})
        return result

    # ------------------------------------------------------------------ protocol

    def setup(self) -> None:
        self.torn_down = False
        self._recorded("setup", {}, self._setup)

    def invoke(self, f: str, **params: Any) -> dict:
        if f in ("setup", "teardown"):
            raise ValueError(f"{f!r} is not a step: call nemesis.{f}() instead")

        def act() -> dict:
            started = self._now()
            result = dict(self._step(f, params) or {})
            key = result.get("fault")
            if key is not None:
                self.active[key] = {"f": f, "started": started, **params}
            windows = [self._close(k) for k in result.pop("healed", [])]
            if windows:
                result["fault_window"] = windows
            return result

        return self._recorded(f, params, act)

    def heal(self) -> dict:
        """Heal every active fault (the same as ``invoke("heal")`` on any nemesis)."""
        return self.invoke("heal")

    def _heal_all(self) -> dict:
        windows, errors = [], []
        for key in list(self.active):
            try:
                self._heal(key, self.active[key])
                windows.append(self._close(key))
            except Exception as exc:  # noqa: BLE001 - heal the others, then report
                errors.append(f"{key}: {type(exc).__name__}: {exc}")
        if errors:
            raise NemesisError(f"{self.name}: could not heal {'; '.join(errors)} (still active: "
                               f"{sorted(self.active)}); check the target by hand")
        return {"fault_window": windows} if windows else {}

    def _close(self, key: str) -> dict:
        fault = self.active.pop(key)
        return {"fault": key, "f": fault["f"], "start": fault["started"], "end": self._now()}

    def teardown(self) -> None:
        if self.torn_down:
            return

        def act() -> dict:
            try:
                return self._heal_all()
            finally:
                self._teardown()

        try:
            self._recorded("teardown", {}, act)
        finally:
            self.torn_down = True

    def __enter__(self):
        self.setup()
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    # ------------------------------------------------------------------ hooks

    def _setup(self) -> dict | None:
        return None

    def _step(self, f: str, params: dict) -> dict | None:
        if f == "heal":
            return self._heal_all()
        raise ValueError(f"{self.name}: unknown step {f!r}")

    def _heal(self, key: str, fault: dict) -> None:
        raise NotImplementedError

    def _teardown(self) -> None:
        return None
