"""Partitions between broker containers: real links cut at the network layer (issue 8).

Brokers in containers have their own addresses on the scenario's Docker network, so this nemesis
cuts what a real network fault cuts, in two ways:

* ``disconnect(node=X)`` / ``reconnect(node=X)``: take a container off the scenario network and put
  it back (docker SDK ``network.disconnect`` / ``network.connect``, with the network aliases it had,
  so ``tcp://<broker name>:61616`` resolves again). Docker may hand it a different address on
  reconnect when the network has no configured subnet; `setup` and every step re-read addresses.
  A disconnect also cuts the host's published ports of that container (they ride on the scenario
  network), and the reconnect publishes them again on *new* host ports where they were
  ephemeral: the step records them (``published``) and has an `ActiveMQContainer` re-read them.
* ``partition(shape=...)``: iptables ``DROP`` rules inside the containers (they need NET_ADMIN;
  `ActiveMQContainer` grants it and its image has iptables), in Jepsen's shapes (REFERENCES.md,
  "Jepsen", nemesis: ``partition-random-node``, ``partition-halves``, bridge, plus one-way):

  - ``isolate`` (``node=X``): X can neither reach nor be reached by any other node;
  - ``halves`` (``groups=[[...], [...]]``, default: the sorted nodes split at the middle, the
    smaller half first as Jepsen does): no traffic crosses between the halves;
  - ``bridge`` (``bridge=X``, default the middle node): the others are split into halves that
    cannot talk to each other, while X talks to both (Jepsen's "bridge" grudge);
  - ``one-way`` (``src=[...]``, ``dst=[...]``): packets from src to dst are dropped, dst to src flow.

  A cut from S to D is two rules, ``iptables -A INPUT -s ip(S) -j DROP`` in D and the mirror
  ``iptables -A OUTPUT -d ip(D) -j DROP`` in S, so it holds even if one container restarts its
  rules. Healing deletes exactly the rules this nemesis added (``iptables -D`` with the same
  spec); a container that stopped meanwhile lost its network namespace, rules included.

Only ``DROP`` rules naming the project's own containers' addresses on the scenario network are
added: traffic to the host (published ports, the harness's clients) is never touched. One
partition at a time (a second ``partition`` asks to ``heal`` first); disconnects are per node.
Every fault heals at teardown, also after a failed step (`RecordedNemesis`).
"""

from __future__ import annotations

from itertools import product
from typing import Any, Callable

from chaos.history import History

from .base import NemesisError, RecordedNemesis
from machinery.container import NetworkedContainer
from machinery.docker_env import docker_client

SHAPES = ("isolate", "halves", "bridge", "one-way")
PARTITION = "partition"  # fault key of the (single) iptables partition


def grudge(shape: str, nodes: list[str], **params: Any) -> set[tuple[str, str]]:
    """The directed cuts ``(src, dst)`` (packets from src to dst dropped) of a partition shape.

    Pure: tested without containers. Raises ValueError naming what is wrong with the parameters."""
    nodes = sorted(nodes)

    def known(names: Any, what: str) -> list[str]:
        names = [names] if isinstance(names, str) else list(names or [])
        unknown = [n for n in names if n not in nodes]
        if unknown:
            raise ValueError(f"{what} names unknown node(s) {unknown} (nodes: {nodes})")
        return names

    def both_ways(left: list[str], right: list[str]) -> set[tuple[str, str]]:
        return {(a, b) for a, b in product(left, right)} | {(b, a) for a, b in product(left, right)}

    if shape == "isolate":
        node = params.get("node")
        if node is None:
            raise ValueError("partition shape 'isolate' needs node=NAME")
        (node,) = known(node, "node")
        return both_ways([node], [n for n in nodes if n != node])
    if shape == "halves":
        groups = params.get("groups")
        if groups is None:
            cut = len(nodes) // 2  # Jepsen's partition-halves: the smaller half first
            groups = [nodes[:cut], nodes[cut:]]
        if len(groups) != 2 or not all(groups):
            raise ValueError(f"partition shape 'halves' needs two non-empty groups, got {groups!r}")
        left, right = known(groups[0], "groups"), known(groups[1], "groups")
        if set(left) & set(right):
            raise ValueError(f"a node cannot be in both halves: {sorted(set(left) & set(right))} (use shape 'bridge')")
        return both_ways(left, right)
    if shape == "bridge":
        if len(nodes) < 3:
            raise ValueError(f"partition shape 'bridge' needs at least 3 nodes (two halves and the bridge), not {nodes}")
        (bridge,) = known(params.get("bridge", nodes[len(nodes) // 2]), "bridge")
        rest = [n for n in nodes if n != bridge]
        cut = len(rest) // 2
        return both_ways(rest[:cut], rest[cut:])
    if shape == "one-way":
        src, dst = known(params.get("src"), "src"), known(params.get("dst"), "dst")
        if not src or not dst:
            raise ValueError("partition shape 'one-way' needs src=[...] and dst=[...] (packets src -> dst are dropped)")
        if set(src) & set(dst):
            raise ValueError(f"one-way partition: {sorted(set(src) & set(dst))} in both src and dst")
        return set(product(src, dst))
    raise ValueError(f"unknown partition shape {shape!r} (shapes: {', '.join(SHAPES)})")


def _container_id(node: NetworkedContainer | str) -> str:
    cid = node if isinstance(node, str) else node.container_id
    if not cid:
        raise NemesisError(f"{node!r} has no running container (start it before the nemesis's setup)")
    return cid


class ContainerPartitionNemesis(RecordedNemesis):
    """Steps: ``partition(shape, ...)``, ``disconnect(node)``, ``reconnect(node)``, ``heal``.

    ``nodes`` maps node names to containers: launchers implementing
    `machinery.container.NetworkedContainer` (`ActiveMQContainer`,
    `ArtemisContainer`) or container ids. ``network`` is the scenario network's name (default: the
    first launcher's ``network_name``). ``client_factory`` makes the docker SDK client (tests may
    hand in a fake; default `machinery.docker_env.docker_client`)."""

    name = "container-partition"

    def __init__(self, nodes: dict[str, NetworkedContainer | str], history: History | None = None, *, network: str | None = None,
                 node: str | None = None, client_factory: Callable[[], Any] | None = None) -> None:
        super().__init__(history, node=node)
        if len(nodes) < 2:
            raise ValueError(f"a partition needs at least two containers, got {sorted(nodes)}")
        self.nodes = dict(nodes)
        self.network_name = network or next(
            (n.network_name for n in nodes.values() if not isinstance(n, str) and n.network_name), None)
        if not self.network_name:
            raise ValueError("say which Docker network the containers share (network=NAME)")
        self._client_factory = client_factory
        self._client: Any = None
        self._rules: list[tuple[str, list[str]]] = []  # (node, iptables spec after -A/-D) of the partition
        self._aliases: dict[str, list[str]] = {}  # node -> its aliases on the network, before a disconnect

    # ------------------------------------------------------------------ docker access

    def _docker(self) -> Any:
        if self._client is None:
            if self._client_factory is not None:
                self._client = self._client_factory()
            else:
                self._client = docker_client()
        return self._client

    def _container(self, name: str) -> Any:
        if name not in self.nodes:
            raise NemesisError(f"unknown node {name!r} (nodes: {sorted(self.nodes)})")
        try:
            return self._docker().containers.get(_container_id(self.nodes[name]))
        except NemesisError:
            raise
        except Exception as exc:  # noqa: BLE001 - NotFound or engine error: say which node
            raise NemesisError(f"container of node {name!r} is not there: {type(exc).__name__}: {exc}") from exc

    def address(self, name: str) -> str:
        """Node ``name``'s IPv4 address on the scenario network (read now: reconnects may change it)."""
        container = self._container(name)
        container.reload()
        net = (container.attrs.get("NetworkSettings", {}).get("Networks") or {}).get(self.network_name) or {}
        ip = net.get("IPAddress")
        if not ip:
            raise NemesisError(f"node {name!r} has no address on network {self.network_name!r} "
                               "(disconnected? reconnect it first)")
        return ip

    def _iptables(self, name: str, action: str, spec: list[str], *, missing_ok: bool = False) -> None:
        container = self._container(name)
        code, output = container.exec_run(["iptables", "-w", "5", action, *spec])
        if code != 0:
            text = output.decode("utf-8", "replace").strip() if isinstance(output, bytes) else str(output)
            if missing_ok and ("does a matching rule exist" in text or "Bad rule" in text):
                return
            raise NemesisError(f"iptables {action} {' '.join(spec)} in node {name!r} failed ({code}): {text}; the "
                               "container needs NET_ADMIN (ActiveMQContainer(net_admin=True)) and iptables in its image")

    # ------------------------------------------------------------------ lifecycle

    def _setup(self) -> dict:
        addresses = {name: self.address(name) for name in sorted(self.nodes)}
        for name in addresses:  # fail now, not mid-experiment, when iptables cannot run in a container
            self._iptables(name, "-S", ["OUTPUT"])
        return {"network": self.network_name, "addresses": addresses}

    def _teardown(self) -> None:
        if self._client is not None and self._client_factory is None:
            self._client.close()
        self._client = None

    # ------------------------------------------------------------------ steps

    def _step(self, f: str, params: dict) -> dict | None:
        if f == "partition":
            return self._partition(**params)
        if f == "disconnect":
            return self._disconnect(params.get("node"))
        if f == "reconnect":
            name = params.get("node")
            key = f"disconnected:{name}"
            if key not in self.active:
                raise NemesisError(f"node {name!r} is not disconnected (disconnected: "
                                   f"{sorted(k.split(':', 1)[1] for k in self.active if k.startswith('disconnected:'))})")
            return {"published": self._reconnect(name), "healed": [key]}
        return super()._step(f, params)

    def _partition(self, shape: str = "halves", **params: Any) -> dict:
        if PARTITION in self.active:
            raise NemesisError(f"a partition is already active ({self.active[PARTITION].get('shape')}); heal it first")
        cuts = grudge(shape, list(self.nodes), **params)
        addresses = {n: self.address(n) for n in sorted({n for cut in cuts for n in cut})}
        self._rules = []
        try:
            for src, dst in sorted(cuts):
                for name, spec in ((dst, ["INPUT", "-s", addresses[src], "-j", "DROP"]),
                                   (src, ["OUTPUT", "-d", addresses[dst], "-j", "DROP"])):
                    self._iptables(name, "-A", spec)
                    self._rules.append((name, spec))
        except BaseException:
            self._remove_rules()  # half a partition is not the one asked for: undo what was added
            raise
        return {"fault": PARTITION, "shape": shape, "cuts": sorted(f"{s}->{d}" for s, d in cuts),
                "addresses": addresses, "rules": len(self._rules)}

    def _remove_rules(self) -> None:
        errors = []
        for name, spec in reversed(self._rules):
            try:
                container = self._container(name)
                container.reload()
                if container.status != "running":
                    continue  # its network namespace, and the rule, went with it
                self._iptables(name, "-D", spec, missing_ok=True)
            except NemesisError as exc:
                if "is not there" in str(exc):
                    continue  # removed container: nothing left to heal
                errors.append(str(exc))
        self._rules = []
        if errors:
            raise NemesisError("; ".join(errors))

    def _disconnect(self, name: str | None) -> dict:
        if name is None:
            raise NemesisError("disconnect needs node=NAME")
        key = f"disconnected:{name}"
        if key in self.active:
            raise NemesisError(f"node {name!r} is already disconnected")
        container = self._container(name)
        container.reload()
        net_info = (container.attrs["NetworkSettings"]["Networks"] or {}).get(self.network_name) or {}
        # Docker adds the short container id as an alias itself; keep the ones the launcher gave
        self._aliases[name] = [a for a in (net_info.get("Aliases") or []) if not container.id.startswith(a)]
        ip = net_info.get("IPAddress")
        self._docker().networks.get(self.network_name).disconnect(container)
        return {"fault": key, "address": ip, "aliases": self._aliases[name]}

    def _reconnect(self, name: str) -> dict:
        container = self._container(name)
        self._docker().networks.get(self.network_name).connect(container, aliases=self._aliases.get(name) or None)
        # Docker re-publishes ports on a reconnect, and a port published as "any free host port"
        # gets a new one (measured on Docker 20.10: 32817 -> 32818), so the launcher re-reads its
        # addresses; clients connected through the old host port must reconnect to the new one.
        node = self.nodes[name]
        if not isinstance(node, str):  # a bare container id has no launcher to tell
            node.refresh_ports()
        container.reload()
        ports = container.attrs.get("NetworkSettings", {}).get("Ports") or {}
        return {f"{k}": v[0]["HostPort"] for k, v in ports.items() if v}

    def _heal(self, key: str, fault: dict) -> None:
        if key == PARTITION:
            self._remove_rules()
        elif key.startswith("disconnected:"):
            name = key.split(":", 1)[1]
            try:
                self._reconnect(name)
            except NemesisError as exc:
                if "is not there" not in str(exc):
                    raise  # a removed container needs no reconnect
        else:
            raise NemesisError(f"unknown fault {key!r}")
