"""Partitions in the kernel's network stack: two network namespaces joined by a veth pair,
closer to a real network than an L4 proxy (Toxiproxy works at L4; real partitions need the
network layer, Toxiproxy issue #100).

The nemesis creates its own namespaces and veth pair at setup (names carry a random tag) and
deletes them at teardown; it touches nothing else. A partition is a ``blackhole`` route to the
peer's address inside a namespace: on side ``a`` it drops what ``a`` sends to ``b``, so one
route is a one-way partition and routes on both sides cut both ways. (Routes need no extra
kernel modules; ``tc netem`` and iptables may be missing where this runs.)

Needs root and the ``ip`` tool: `netns_unavailable()` says why not, for skips.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from typing import Any

from chaos.history import History
from machinery.tether import launch

from .base import NemesisError, RecordedNemesis

SIDES = ("a", "b")


def netns_unavailable() -> str | None:
    """None when namespaces can be made here, else the reason."""
    if shutil.which("ip") is None:
        return "the 'ip' tool (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, or use ProxyNemesis)"
    return None


class NetnsNemesis(RecordedNemesis):
    """Steps: ``partition(direction="both"|"a->b"|"b->a")``, ``heal``.

    ``namespace(side)`` and ``address(side)`` tell where to run each party: `popen(side, argv)`
    starts a command inside a namespace (the caller stops it by its handle)."""

    name = "netns"

    def __init__(self, history: History | None = None, *, node: str | None = None, subnet_octet: int | None = None,
                 command_timeout: float = 10.0) -> None:
        super().__init__(history, node=node)
        tag = secrets.token_hex(3)
        self.namespaces = {"a": f"bc{tag}a", "b": f"bc{tag}b"}  # veth names <= 15 chars
        third = subnet_octet if subnet_octet is not None else int(tag[:2], 16)
        self.addresses = {"a": f"10.231.{third}.1", "b": f"10.231.{third}.2"}
        self.command_timeout = command_timeout
        self._created: list[str] = []

    def namespace(self, side: str) -> str:
        return self.namespaces[side]

    def address(self, side: str) -> str:
        return self.addresses[side]

    def popen(self, side: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        if self.namespaces[side] not in self._created:
            raise NemesisError(f"namespace for side {side!r} does not exist: call setup() first")
        return launch(["ip", "netns", "exec", self.namespaces[side], *argv], **kwargs)

    def _ip(self, *args: str) -> None:
        try:
            result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=self.command_timeout)
        except subprocess.TimeoutExpired:
            raise NemesisError(f"'ip {' '.join(args)}' did not finish within {self.command_timeout}s") from None
        if result.returncode != 0:
            raise NemesisError(f"'ip {' '.join(args)}' failed ({result.returncode}): {result.stderr.strip()}")

    # ------------------------------------------------------------------ lifecycle

    def _setup(self) -> dict:
        reason = netns_unavailable()
        if reason:
            raise NemesisError(f"netns nemesis unavailable: {reason}")
        a, b = self.namespaces["a"], self.namespaces["b"]
        try:
            for ns in (a, b):
                self._ip("netns", "add", ns)
                self._created.append(ns)
            # Created inside namespace a, so deleting the namespaces removes the pair.
            self._ip("-n", a, "link", "add", f"{a}0", "type", "veth", "peer", "name", f"{b}0", "netns", b)
            for side, ns in self.namespaces.items():
                self._ip("-n", ns, "addr", "add", f"{self.addresses[side]}/30", "dev", f"{ns}0")
                self._ip("-n", ns, "link", "set", f"{ns}0", "up")
                self._ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self._teardown()
            raise
        return {"namespaces": self.namespaces, "addresses": self.addresses}

    def _teardown(self) -> None:
        errors = []
        for ns in reversed(self._created):
            try:
                self._ip("netns", "del", ns)
            except NemesisError as exc:
                errors.append(str(exc))
        self._created.clear()
        if errors:
            raise NemesisError("netns teardown left something behind: " + "; ".join(errors))

    # ------------------------------------------------------------------ steps

    def _step(self, f: str, params: dict) -> dict | None:
        if f != "partition":
            return super()._step(f, params)
        direction = params.get("direction", "both")
        senders = {"both": ("a", "b"), "a->b": ("a",), "b->a": ("b",)}.get(direction)
        if senders is None:
            raise ValueError(f"partition direction {direction!r}: use both, a->b or b->a")
        for side in senders:
            key = f"drop {side}->{'b' if side == 'a' else 'a'}"
            if key in self.active:
                continue
            self._blackhole("add", side)
            self.active[key] = {"f": f, "started": self._now(), "direction": direction}
        return {"dropping": sorted(k for k in self.active)}

    def _blackhole(self, action: str, side: str) -> None:
        peer = self.addresses["b" if side == "a" else "a"]
        self._ip("-n", self.namespaces[side], "route", action, "blackhole", f"{peer}/32")

    def _heal(self, key: str, fault: dict) -> None:
        side = key.split()[1][0]
        self._blackhole("del", side)
