"""How a target that can run its broker as a local process or in a container picks one.

Shared by the ActiveMQ Classic and Artemis targets (``launch="auto"|"process"|"container"``):
an explicit choice is checked as given; ``auto`` prefers the local process (no image to load)
and falls back to the container, and when neither is available the process is reported with
both reasons so the skip/failure message says what to install.
"""

from __future__ import annotations

from typing import Callable

Check = Callable[[], "tuple[bool, str]"]


def choose_launch(requested: str, process_check: Check, container_check: Check,
                  neither: Callable[[str, str], str]) -> tuple[str, bool, str]:
    """(mode, ok, reason) for ``requested``; ``neither(process_reason, container_reason)`` words
    the reason when ``auto`` finds neither available."""
    if requested == "process":
        return ("process", *process_check())
    if requested == "container":
        return ("container", *container_check())
    ok, reason = process_check()
    if ok:
        return ("process", True, "")
    c_ok, c_reason = container_check()
    if c_ok:
        return ("container", True, "")
    return ("process", False, neither(reason, c_reason))


def check_requested(requested: str, modes: tuple[str, ...]) -> str:
    """``requested`` when it is one of ``modes``, else ValueError naming them."""
    if requested not in modes:
        raise ValueError(f"launch must be one of {', '.join(modes)}, not {requested!r}")
    return requested


def requirement_of(requested: str, local: str) -> str:
    """What the machine must provide (conformance.requirements' names) for ``requested``: a forced
    container needs the Docker engine and image; otherwise the ``local`` install (``auto`` falls
    back to a container, but the local install is what a machine is expected to provide)."""
    return "docker" if requested == "container" else local


class LaunchedByMode:
    """Mixin for a target that asks one object per launch mode (``self.mode``, with ``name`` and
    ``local``; the targets' ``launch_modes`` modules): what it reports about how it launches is
    that object's."""

    @property
    def launch_mode(self) -> str:
        """The resolved mode's name ("process", "container", "in-process"): for messages and the
        matrix, never to branch on (ask ``self.mode``)."""
        return self.mode.name

    @property
    def launches_locally(self) -> bool:
        """Its brokers run from this machine's install (a process here or inside this one)."""
        return self.mode.local
