"""An ActiveMQ broker as a node of a launched topology: a `ProcessNode` that also knows the broker's
OpenWire transport connector (the `NativeListener` part), which the harness's own clients never
use and ActiveMQ's Java clients dial. One class for a single broker, a network's nodes and a
shared-store group's (`NetworkNode` builds on it), local JVM or container alike: both fill the
same ``openwire_port`` (`ActiveMQAddresses`)."""

from __future__ import annotations

from conformance.deployment import NativeListener
from conformance.targets.runtime.node import ProcessNode


class ActiveMQNode(ProcessNode, NativeListener):
    native_protocol = "openwire"

    def native_address(self) -> tuple[str, int]:
        port = self.process.openwire_port  # read now: a restart may have moved it
        if not port:
            raise KeyError(f"node {self.name} runs without its OpenWire connector")
        return self.host, port
