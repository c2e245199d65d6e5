"""Client-side connection load balancing over the nodes of a cluster, as the Artemis "Clusters"
chapter describes it for its client factories (../shared/spec/artemis-clusters.md, "Client-Side
Load balancing"; catalogue artemis_clusters.toml, CLU-CLIENT-*): successive connections made by
one factory land on different nodes according to a policy.

Policies (each picks an index into the factory's address list):

- ``round_robin`` (the default, CLU-CLIENT-6): the first pick is random, every later one the next
  address in list order, wrapping around (CLU-CLIENT-2);
- ``random``: a fresh random pick every time (CLU-CLIENT-3);
- ``random_sticky``: a random first pick, reused for every later connection (CLU-CLIENT-4);
- ``first_element``: always index 0 (CLU-CLIENT-5).

Where the chapter is silent we follow Artemis's own policies (RoundRobin- and
RandomStickyConnectionLoadBalancingPolicy in its client): a policy keeps its position across
picks, and one whose remembered position no longer fits a shorter list starts afresh.

`BalancedConnections` is the factory: give it the cluster's addresses (``Cluster.addresses(
protocol)`` order) and a policy name; each ``connect()`` opens one `conformance.clients.connect`
session on the address the policy picks. A refused connection raises (naming the address): moving
on to another node is the failover transport's job (failover.py), not the balancer's:
``connect_failover()`` opens a `FailoverClient` whose list starts at the picked node and goes on
round the others in order (``randomize=false``), so its first connection is where the policy says.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from .base import Client
from .direct import connect as connect_direct

__all__ = [
    "ARTEMIS_CLASS_NAMES", "DEFAULT_POLICY", "POLICIES", "BalancedConnections", "FirstElement",
    "LoadBalancingPolicy", "Random", "RandomSticky", "RoundRobin", "load_balancing_policy",
]


class LoadBalancingPolicy(Protocol):
    name: str

    def select(self, size: int) -> int:
        """The index (0 <= index < size) of the node the next connection goes to."""


def _check_size(size: int) -> None:
    if size < 1:
        raise ValueError(f"a load-balancing policy picks among 1 or more addresses, not {size}")


class RoundRobin:
    """First pick random, then the next index in order, wrapping (CLU-CLIENT-2)."""

    name = "round_robin"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.position: int | None = None

    def select(self, size: int) -> int:
        _check_size(size)
        if self.position is None or self.position >= size:
            self.position = self.rng.randrange(size)
        else:
            self.position = (self.position + 1) % size
        return self.position


class Random:
    """A random pick every time (CLU-CLIENT-3)."""

    name = "random"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()

    def select(self, size: int) -> int:
        _check_size(size)
        return self.rng.randrange(size)


class RandomSticky:
    """A random first pick, then always that one (CLU-CLIENT-4)."""

    name = "random_sticky"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.position: int | None = None

    def select(self, size: int) -> int:
        _check_size(size)
        if self.position is None or self.position >= size:
            self.position = self.rng.randrange(size)
        return self.position


class FirstElement:
    """Always index 0 (CLU-CLIENT-5)."""

    name = "first_element"

    def __init__(self, rng: random.Random | None = None) -> None:  # same signature as the others
        del rng

    def select(self, size: int) -> int:
        _check_size(size)
        return 0


_BY_NAME: dict[str, Callable[[random.Random | None], LoadBalancingPolicy]] = {
    "round_robin": RoundRobin, "random": Random, "random_sticky": RandomSticky, "first_element": FirstElement,
}
POLICIES = tuple(_BY_NAME)
#: the chapter's default when a client names no policy (CLU-CLIENT-6)
DEFAULT_POLICY = "round_robin"
#: how a suite names this client as the subject of the client statements it checks with it
#: (``@pytest.mark.client_subject``, the matrix column ``client: <this>``; conformance/matrix.py)
CLIENT_SUBJECT = "brokerconf load balancing (python)"
#: the class names Artemis's ``connectionLoadBalancingPolicyClassName`` takes, accepted as aliases
ARTEMIS_CLASS_NAMES = {
    f"org.apache.activemq.artemis.api.core.client.loadbalance.{cls}ConnectionLoadBalancingPolicy": name
    for cls, name in (("RoundRobin", "round_robin"), ("Random", "random"), ("RandomSticky", "random_sticky"),
                      ("FirstElement", "first_element"))
}


def load_balancing_policy(name: str | None = None, rng: random.Random | None = None) -> LoadBalancingPolicy:
    """A fresh policy by name (None: the default, round robin); Artemis's class names are
    accepted too. ValueError names the option and the valid names."""
    key = DEFAULT_POLICY if name is None else ARTEMIS_CLASS_NAMES.get(name, name)
    if key not in _BY_NAME:
        raise ValueError(f"load_balancing_policy {name!r} is not one of {', '.join(POLICIES)} "
                         "(or an Artemis ...loadbalance.*ConnectionLoadBalancingPolicy class name)")
    return _BY_NAME[key](rng)


def _address(value: tuple[str, int] | str) -> tuple[str, int]:
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"address {value!r} must be host:port")
        return host, int(port)
    host, port = value
    return str(host), int(port)


class BalancedConnections:
    """A client factory over a cluster's addresses: each `connect` opens a session on the node the
    policy picks. ``addresses``: ``(host, port)`` pairs or ``"host:port"`` strings, in the order
    the policy indexes (a cluster's ``addresses(protocol)``); ``policy``: a name
    (`load_balancing_policy`) or a policy object; ``rng`` seeds the random picks;
    ``connect_options`` go to every `conformance.clients.connect` call (login, passcode,
    timeout...). Thread-safe: concurrent ``connect`` calls each get their own pick."""

    def __init__(self, addresses: Sequence[tuple[str, int] | str], protocol: str, *,
                 policy: str | LoadBalancingPolicy | None = None, rng: random.Random | None = None,
                 connect: Callable[..., Client] = connect_direct, **connect_options) -> None:
        self.addresses = [_address(a) for a in addresses]
        if not self.addresses:
            raise ValueError("BalancedConnections needs one or more addresses")
        self.protocol = protocol
        self.policy = policy if policy is not None and not isinstance(policy, str) \
            else load_balancing_policy(policy, rng)
        self._connect = connect
        self.connect_options = connect_options
        self._lock = threading.Lock()
        #: the index picked for each connection, in order (evidence for a test's message)
        self.picks: list[int] = []

    def _pick(self) -> int:
        with self._lock:
            index = self.policy.select(len(self.addresses))
            self.picks.append(index)
            return index

    def next_address(self) -> tuple[str, int]:
        """The address the next connection goes to (advances the policy)."""
        return self.addresses[self._pick()]

    def connect(self, **options) -> Client:
        """One session on the next picked node; ``options`` override the factory's."""
        host, port = self.next_address()
        return self._connect(host, port, self.protocol, **{**self.connect_options, **options})

    def failover_uri(self, start: int, query: str = "") -> str:
        """``failover:(...)?randomize=false[&query]`` over every address, starting at index
        ``start`` and wrapping: a failover client that begins on that node."""
        n = len(self.addresses)
        ordered = [self.addresses[(start + i) % n] for i in range(n)]
        inner = ",".join(f"{self.protocol}://{host}:{port}" for host, port in ordered)
        return f"failover:({inner})?randomize=false" + (f"&{query}" if query else "")

    def connect_failover(self, query: str = "", **options):
        """A `FailoverClient` (failover.py) whose first connection goes to the picked node and
        that fails over to the others; ``query``: more failover options (``timeout=5000``...)."""
        from .failover import FailoverClient  # failover.py imports direct.py only; keep this module light
        return FailoverClient(self.failover_uri(self._pick(), query), self.protocol, connect=self._connect,
                              **{**self.connect_options, **options})
