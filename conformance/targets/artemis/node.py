"""An Artemis broker as a node of a launched topology: a `ProcessNode` that also knows the broker's
core acceptor (the `NativeListener` part), which the harness's own clients never use and
Artemis's core (JMS) client dials. Every Artemis launcher opens one (``LISTENERS`` of the local
process, the image's 61616 of a container), listed in the process's ``ports``."""

from __future__ import annotations

from conformance.deployment import NativeListener
from conformance.targets.runtime.node import ProcessNode


class ArtemisNode(ProcessNode, NativeListener):
    native_protocol = "core"

    def native_address(self) -> tuple[str, int]:
        try:
            return self.host, self.process.ports["core"]  # read now: a restart may have moved it
        except KeyError:
            raise KeyError(f"node {self.name} has no core acceptor (open: {sorted(self.process.ports)})") from None
