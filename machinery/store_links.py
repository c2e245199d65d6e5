"""What a store's fault rig exposes: the links from each host to its store, each a proxy of one
fault proxy, so that one host's link can be cut while the others keep theirs.

The rigs that have this shape: the simulated NFS store (machinery/sharedstore's SharedStoreRig, and
the targets' NfsStore over it) and a JDBC group's database links (the targets' DatabaseLinks). A
rig starts its proxies and heals them when it closes; it builds no nemesis itself: chaos builds
one on these links (chaos.nemesis.lock.lock_loss_nemesis). Declared on the ground floor so that
both a launched deployment's contract (conformance) and the nemesis (chaos) can name it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["StoreLinks"]


@runtime_checkable
class StoreLinks(Protocol):
    """A rig's links to its store."""

    @property
    def proxy_api(self) -> str:
        """The fault proxy's (Toxiproxy's) API URL; the links are proxies of it."""

    @property
    def links(self) -> dict[str, str]:
        """Host name -> the name of its proxy to the store."""

    @property
    def store_address(self) -> str | None:
        """The store server's HOST:PORT, whose lease table a nemesis can expire; None for a
        database, whose lease rows are the brokers' own."""
