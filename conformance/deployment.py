"""The optional parts of a launched deployment, and the one way a caller asks for a part.

Every launched topology implements the small core contract (`conformance.topology.Cluster`, whose
nodes are `conformance.topology.Node`s): what every caller may use on any deployment. What only
some deployments can do is a part, a Protocol of its own here:

* `Renaming`: rename a node's network connector (networks of brokers only: an Artemis-style
  cluster's connections and a shared store have no connector names);
* `Formation`: wait until every cluster connection is up (Artemis-style clusters);
* `SharedStorage`: one store, one master at a time: the master, the lock file, and the rig whose
  links to the store a lock-loss nemesis can fault (``rig``; None when the store has none);
* on a node, `Forwarding`: the messages a cluster node holds for another node;
* on a node, `InFlight`: messages dispatched to consumers and not acknowledged yet (networks);
* on a node, `NativeListener`: the real broker's own wire protocol (ActiveMQ's OpenWire, Artemis's
  core), which the harness's clients do not speak and the product's Java clients dial.

A launcher claims a part by naming it among its bases (``class ReferenceNetwork(Cluster,
Renaming)``): the claim is written where the class is, a type checker checks the methods against
the Protocol, and tests/conformance/test_deployment_parts.py checks that every claim is kept (each
member defined by the launcher, not inherited from the Protocol's own body) and that no launcher
keeps a method that only raises (a stub). A deployment that cannot do something simply does not
claim that part.

A caller asks with `part` (the part, or None when the deployment lacks it) or `require` (the part,
or `MissingPart` naming the deployment, the part and what it was needed for). Why functions over
``isinstance`` and not one property per part on the core: a property would put every part back
into the core, and each launcher would answer None for the parts it lacks, which is the stub this
module replaces; the Protocols are ``runtime_checkable``, so a test's fake that has the methods
counts too, without naming the part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, TypeVar, cast, runtime_checkable

from conformance.topology import Node
from machinery.store_links import StoreLinks

__all__ = ["DEPLOYMENT_PARTS", "NODE_PARTS", "Formation", "Forwarding", "InFlight", "MissingPart", "NativeListener",
           "Renaming", "SharedStorage", "part", "require"]

Part = TypeVar("Part")


class MissingPart(TypeError):
    """A deployment (or node) lacks a part a caller needs; the message names both."""


@runtime_checkable
class Renaming(Protocol):
    """Networks of brokers: a node's network connector renamed (the durable-name checks)."""

    def rename_connector(self, source: str, old: str, new: str) -> None:
        """Rename node ``source``'s connector ``old`` to ``new``, effective at its next start
        (`Cluster.start_broker`); ValueError when it has no such connector or has ``new`` already."""
        ...


@runtime_checkable
class Formation(Protocol):
    """Clusters whose nodes join by cluster connections: formed once every link is up."""

    def wait_formed(self, timeout: float) -> None:
        """Return once every cluster link between running nodes is up; raise (naming the links still
        down) when they are not within ``timeout`` seconds."""
        ...


@runtime_checkable
class SharedStorage(Protocol):
    """Nodes on one shared store, whichever holds its lock the master (A-MQ fault-tolerant
    messaging guide, chapter 3)."""

    #: where the store is (a shared directory, a node's view of the NFS store, a database's directory)
    store: Path
    #: the file whose lock makes a node master; None when the harness cannot reach it (a database
    #: lease, a container volume)
    lock_file: Path | None
    #: the links from each node to the store, through a fault proxy (the simulated NFS store, a
    #: JDBC store's proxied database links): what a lock-loss nemesis faults; None: a plain store
    rig: StoreLinks | None

    def master(self) -> Node | None:
        """The one node serving clients now; None while none does (raises when two do)."""
        ...

    def wait_for_master(self, timeout: float) -> Node | None:
        """`master`, polled for up to ``timeout`` seconds."""
        ...


@runtime_checkable
class Forwarding(Protocol):
    """A cluster node that holds messages on their way to other nodes (an Artemis store-and-forward
    queue, a reference cluster link's unacknowledged forwards)."""

    def forwarding_count(self) -> int:
        """Messages this node holds for other nodes now."""
        ...


@runtime_checkable
class InFlight(Protocol):
    """A network node that counts what it dispatched and was not acknowledged yet."""

    def in_flight_count(self, destination: str) -> int:
        """Messages of ``destination`` dispatched here (network consumers included) and not yet
        acknowledged; 0 when the node does not know the destination."""
        ...


@runtime_checkable
class NativeListener(Protocol):
    """A real broker's node listening on the product's own wire protocol beside the harness's ones
    (STOMP, MQTT, AMQP, which `Node.address` answers for): ActiveMQ's OpenWire transport connector,
    Artemis's core acceptor. What that product's Java clients dial (suites/java_support.py)."""

    #: the protocol's name: "openwire" (ActiveMQ) or "core" (Artemis)
    native_protocol: str

    def native_address(self) -> tuple[str, int]:
        """(host, port) of that listener now (read at each call: a restart may move a port);
        KeyError when the broker runs without it."""
        ...


#: the parts a deployment may have, and the parts a node may have (what the claims test walks)
DEPLOYMENT_PARTS: tuple[type, ...] = (Renaming, Formation, SharedStorage)
NODE_PARTS: tuple[type, ...] = (Forwarding, InFlight, NativeListener)


def part(deployment: object, kind: type[Part]) -> Part | None:
    """``deployment`` as part ``kind`` (one of `DEPLOYMENT_PARTS` or `NODE_PARTS`), or None when it
    lacks that part."""
    # isinstance on a runtime_checkable Protocol: true for a launcher that claims the part, and for
    # any object that has its members (a test's fake); a member set to None counts as missing
    return cast(Part, deployment) if isinstance(deployment, kind) else None


def require(deployment: object, kind: type[Part], purpose: str = "") -> Part:
    """``deployment`` as part ``kind``; MissingPart naming the deployment, the part and
    ``purpose`` (what the caller needs it for) when it lacks it."""
    found = part(deployment, kind)
    if found is None:
        raise MissingPart(f"{deployment!r} ({type(deployment).__name__}) has no {kind.__name__} part"
                          + (f", needed to {purpose}" if purpose else "")
                          + f" ({(kind.__doc__ or '').strip().splitlines()[0]})")
    return found
