"""What every target's host-pair rig (FT-NOB-4: two master/slave groups whose members share hosts,
A1 with B2 and B1 with A2, bridged as one network) answers the same way, once its ``groups``
(group name -> shared-store group) and ``hosts`` (host -> the two nodes on it) are set."""

from __future__ import annotations


class HostPairQueries:
    groups: dict
    hosts: dict[str, tuple]

    def masters(self) -> dict[str, object]:
        """Group name -> its master node now (None when it has none)."""
        return {g: group.master() for g, group in self.groups.items()}

    def wait_for_master(self, group: str, timeout: float):
        return self.groups[group].wait_for_master(timeout)

    def fail_host(self, host: str) -> None:
        """Both nodes of ``host`` die at once (one of each group), as when the machine goes down."""
        for node in self.hosts[host]:
            node.kill()

    def log_tail(self) -> str:
        return "\n".join(f"=== group {g} ===\n{group.log_tail(20)}" for g, group in self.groups.items())
