"""An Artemis cluster in containers: 2 to 4 ``brokerconf/artemis`` containers on one Docker network
of their own, joined by static cluster connections generated from the same topology model as the
local JVMs (``Topology(nodes, cluster=ClusterConnection(...))``; `cluster.cluster_xml`), handed out
as the same `Cluster` of nodes (issue 19). The links are real TCP connections between network
namespaces, so `chaos.nemesis.container.ContainerPartitionNemesis` cuts them with iptables
(``cluster.containers``, ``cluster.network_name``).

Addresses. Each node's container has two aliases on the cluster network: the node's name (``A``)
and its broker name (``<prefix>-A``). A node's connector, the one it announces and the ones its
peers dial, is ``tcp://<node name>:61616`` (`cluster_xml(addresses=...)`), so nothing waits for a
published port. Clients use the host ports published on 127.0.0.1 (STOMP, MQTT, AMQP as the
scenario asks; 61616 always), and the harness reads Jolokia through the published console port
(8161), with the local JVM's client (`process.jolokia_call`).

Configuration: a full broker.xml, not a fragment. The start script lets the image's entrypoint
create the instance (``/docker-run.sh version``: its bootstrap.xml with the console on 0.0.0.0 and
relaxed Jolokia, login.config, management.xml), then copies the broker.xml, users and roles
`config.render` made for this node over the created ones, at every start. Why not the single
container's way (a fragment added after ``<address-settings>``): a cluster member needs elements
in several places of ``<core>`` (connectors, cluster user, cluster connection, ha-policy,
grouping handler) and address settings of its own on ``#`` (redistribution-delay, queues never
auto-deleted so counters stay readable), which would collide with the ``#`` setting ``artemis
create`` writes (Artemis keeps one setting per match). Rendering the same broker.xml as the local
JVM's cluster member, acceptors on 0.0.0.0 and the container ports, keeps the two launchers'
brokers alike except for addresses. Copying at every start also lets
`ArtemisCluster.use_cluster_credentials` take effect at the node's next start, as with the JVMs.
The heap: ``artemis create`` writes ``-Xms512M -Xmx2G`` into etc/artemis.profile; the script
lowers it to the launcher's ``jvm_heap_mb`` (several JVMs share a small machine).

Node lifecycle. ``stop`` is a ``docker stop`` (SIGTERM: Artemis's shutdown hook, what scale-down
needs) that keeps the container, its instance and journal, so ``start`` brings the same node (same
node id, same journal, same host ports) back, like a JVM restarted on its instance; ``kill`` is
SIGKILL; ``pause`` / ``resume`` freeze the container (cgroup freezer). `ArtemisContainerCluster.stop`
removes every container and the network (labelled ``org.brokerconf.launcher=artemis_container_cluster``
with the cluster's workdir, so tests count what is left).

Not offered in containers, said by name (`TopologyUnsupported`): discovery ``udp`` (the local
launcher binds the multicast group to loopback; across containers it would need the group routed
over the Docker bridge, not tried here) and ``"cluster"`` in ``topology.proxied`` (links through
the fault proxy: in containers the container nemesis cuts the real links instead).

``copy_node_data`` (CLU-NODEID-1) reads the source's data directory as a tar through the engine
and stages it in the target's mounted configuration directory; the target's start script swaps it
in for its own data directory once.
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from conformance.scenario import Scenario
from conformance.targets.artemis.cluster import ArtemisCluster, ArtemisClusterNode, ClusterManagement, cluster_xml
from conformance.targets.artemis.config import ArtemisConfig, render
from conformance.targets.artemis.container import (CONTAINER_PORTS, DEFAULT_EXTRA_ARGS, LABEL, ArtemisContainer,
                                                   _MOUNT)
from conformance.targets.artemis.dist import ARTEMIS_IMAGE
from conformance.targets.artemis.process import ADMIN_USER, JolokiaError, QueueManagement, jolokia_call
from machinery.process import free_ports
from machinery.container import new_network
from conformance.topology import Topology, TopologyUnsupported
from machinery.waiting import Deadline

__all__ = ["CLUSTER_LABEL", "ArtemisClusterContainer", "ArtemisContainerCluster", "ContainerClusterNode",
           "launch_container_cluster"]

#: the ``org.brokerconf.launcher`` label value on the cluster's containers and network
CLUSTER_LABEL = "artemis_container_cluster"
WORKDIR_LABEL = "org.brokerconf.workdir"
#: a node name is a network alias (a DNS label on the Docker network)
_ALIAS = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")

#: the instance directory inside the image (docker/artemis/Dockerfile)
INSTANCE = "/var/lib/artemis-instance"

_START_SCRIPT = f"""#!/bin/sh
# brokerconf: let the image's entrypoint create the instance (first start only), lower the heap
# artemis create asks for, put this node's broker.xml, users and roles in place (every start: a
# changed cluster user applies at the next start), then run the broker
# (conformance/targets/artemis/container_cluster.py).
set -e
cd {INSTANCE}
/docker-run.sh version
# a data directory staged by copy_node_data (CLU-NODEID-1), unpacked once (its token kept)
if [ -f {_MOUNT}/data.token ] && [ "$(cat {_MOUNT}/data.token)" != "$(cat data.token 2>/dev/null)" ]; then
  rm -rf data
  tar -xf {_MOUNT}/data.tar
  cp {_MOUNT}/data.token data.token
fi
heap="$(cat {_MOUNT}/heap-mb)"
sed -i -e "s/-Xms[0-9]*[mMgG]/-Xms64M/" -e "s/-Xmx[0-9]*[mMgG]/-Xmx${{heap}}M/" etc/artemis.profile
for f in broker.xml artemis-users.properties artemis-roles.properties; do
  cp {_MOUNT}/$f etc/$f
done
exec /docker-run.sh run
"""


class ArtemisClusterContainer(ClusterManagement, QueueManagement, ArtemisContainer):
    """One cluster member in a container: an `ArtemisContainer` started with this node's full
    broker.xml (see the module doc), its console published for Jolokia, and the management reads
    the cluster and the counters need (node id, connected nodes, store-and-forward and queue
    MBeans)."""

    tls = None  # the container has no TLS acceptors (ArtemisProcessHandle reads this)

    def __init__(self, workdir: Path, scenario: Scenario, *, name: str, alias: str,
                 config_of: Callable[[], ArtemisConfig], admin: tuple[str, str], image: str = ARTEMIS_IMAGE,
                 jvm_heap_mb: int = 256) -> None:
        super().__init__(workdir, name=name, image=image, stomp=True, mqtt="mqtt" in scenario.protocols,
                         amqp="amqp" in scenario.protocols, users=tuple(scenario.users[:1]),
                         network_aliases=(alias,))
        self.users = tuple(scenario.users)  # every user goes into artemis-users.properties, not the image's one
        self.alias = alias
        self.admin = admin
        self.jvm_heap_mb = int(jvm_heap_mb)
        self._config_of = config_of
        self.config: ArtemisConfig = config_of()  # raises on an unsupported scenario before anything starts
        self._created = False
        # host ports chosen now, not at the first start: the node's counters handle and the
        # cluster's addresses are built before it (_build_container publishes exactly these)
        self.ports.update(zip(self.listeners(), free_ports(len(self.listeners()))))

    # ----------------------------------------------------------------- configuration
    def environment(self) -> dict[str, str]:
        # the instance user is the management user Jolokia is read with, as for the local JVM
        return {"ARTEMIS_USER": self.admin[0], "ARTEMIS_PASSWORD": self.admin[1],
                "ANONYMOUS_LOGIN": "false" if self.users else "true",
                # --no-autotune: the journal timing artemis create would measure is replaced by
                # broker.xml's anyway (config.py), and the measurement costs seconds per node
                "EXTRA_ARGS": f"{DEFAULT_EXTRA_ARGS} --no-autotune"}

    def listeners(self) -> list[str]:
        return [*super().listeners(), "console"]

    def _labels(self) -> dict[str, str]:
        return {LABEL: CLUSTER_LABEL, "org.brokerconf.broker": self.name}

    def _write_config(self) -> None:
        """Write this node's broker.xml (the cluster elements rendered now), users, roles, heap and
        start script into the directory mounted at /etc/brokerconf; the script copies them into
        the instance at the container's next start."""
        self.config = self._config_of()
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "broker.xml").write_text(self.config.broker_xml(), encoding="utf-8")
        (self.conf_dir / "artemis-users.properties").write_text(self.config.users_properties(), encoding="utf-8")
        (self.conf_dir / "artemis-roles.properties").write_text(self.config.roles_properties(), encoding="utf-8")
        (self.conf_dir / "heap-mb").write_text(f"{self.jvm_heap_mb}\n", encoding="utf-8")
        script = self.conf_dir / "start-artemis.sh"
        script.write_text(_START_SCRIPT, encoding="utf-8")
        script.chmod(0o755)
        self._created = True

    def render_config(self) -> str:
        return self.config.broker_xml()

    def config_text(self) -> str:
        return f"# {self.image}, broker.xml of node {self.alias} ({self.name})\n{self.render_config()}"

    def data_archive(self) -> bytes:
        """A tar of the instance's data directory (journal with the node id, bindings, paging, large
        messages), read through the engine; the container may be stopped."""
        stream, _ = self._wrapped().get_archive(f"{INSTANCE}/data")
        return b"".join(stream)

    def stage_data(self, archive: bytes) -> None:
        """Replace the instance's data directory by ``archive`` (a `data_archive`) at the next start
        (the start script unpacks it once)."""
        (self.conf_dir / "data.tar").write_bytes(archive)
        (self.conf_dir / "data.token").write_text(uuid.uuid4().hex, encoding="utf-8")

    def join(self, network: Any) -> None:
        """Join ``network`` at the first start (the cluster's; never removed by this launcher)."""
        if self._tc is not None:
            raise RuntimeError(f"Artemis container {self.name!r} already runs on a network")
        self._given_network = network

    # ----------------------------------------------------------------- lifecycle
    def halt(self, timeout: float = 30) -> None:
        """Stop the broker gracefully (``docker stop``: SIGTERM, then SIGKILL after ``timeout``) and
        keep the container, so `start` runs the same instance and journal again."""
        container = self._wrapped()
        if container is not None and self.running:
            container.stop(timeout=int(timeout))

    # ----------------------------------------------------------------- management over Jolokia
    def jolokia(self, request: dict, timeout: float = 10.0) -> Any:
        port = self.ports.get("console")
        if not port:
            raise JolokiaError(f"Artemis container {self.name!r} has no published console port (not started)")
        return jolokia_call(self.host, port, self.admin, request, timeout=timeout, alive=lambda: self.running)


class ContainerClusterNode(ArtemisClusterNode):
    """A cluster member in a container: `ArtemisClusterNode` (MessageCount queue sizes,
    store-and-forward counts) whose stop keeps the container (`ArtemisClusterContainer.halt`), and
    whose kill / pause / resume go through the engine."""

    def stop(self) -> None:
        self.process.halt()

    def kill(self) -> None:
        self.process.kill()

    def pause(self) -> None:
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()


class ArtemisContainerCluster(ArtemisCluster):
    """A launched Artemis cluster in containers (implements `conformance.topology.Cluster`; see the
    module doc). ``containers``: node -> its `ArtemisClusterContainer`, what
    `ContainerPartitionNemesis` takes; ``network_name``: the cluster's Docker network."""

    def __init__(self, topology: Topology, nodes: dict[str, ContainerClusterNode], workdir: Path,
                 network_labels: dict[str, str]) -> None:
        super().__init__(topology, nodes, workdir, proxied={})
        self.network: Any = None
        self._network_labels = network_labels
        #: seconds from `start` until every container served / every link was connected (evidence)
        self.timings: dict[str, float] = {}

    @property
    def containers(self) -> dict[str, ArtemisClusterContainer]:
        return {name: node.process for name, node in self.nodes.items()}

    @property
    def network_name(self) -> str | None:
        return self.network.name if self.network is not None else None

    def start(self, timeout: float = 240) -> None:
        """Create the network, start every container at once, wait until every link is connected;
        on failure everything started is removed again."""
        began = time.monotonic()
        deadline = Deadline(timeout)
        try:
            if self.network is None:
                self.network = new_network(f"brokerconf-{self.topology.prefix}-{uuid.uuid4().hex[:8]}",
                                           self._network_labels)
                for container in self.containers.values():
                    container.join(self.network)
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                for future in [pool.submit(node.start, timeout) for node in self.nodes.values()]:
                    future.result()
            self.timings["serving"] = time.monotonic() - began
            self.wait_formed(max(10.0, deadline.remaining()))
            self.timings["formed"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise

    def copy_node_data(self, source: str, target: str, timeout: float = 90) -> None:
        """`ArtemisCluster.copy_node_data` in containers (CLU-NODEID-1): stop both, stage a copy of
        ``source``'s data directory for ``target`` (read through the engine, unpacked by the start
        script in place of ``target``'s own), start both again without waiting for the cluster to
        form (it is not expected to)."""
        for name in (target, source):
            self.nodes[name].stop()
        self.containers[target].stage_data(self.containers[source].data_archive())
        for name in (source, target):
            self.nodes[name].start(timeout=timeout)

    def stop(self) -> None:
        """Remove every container (its log saved under its workdir first) and the network."""
        errors = []
        for node in self.nodes.values():
            try:
                node.process.stop()
            except Exception as exc:  # noqa: BLE001 - remove the others whatever happens
                errors.append(f"{node.name}: {exc}")
        net, self.network = self.network, None
        if net is not None:
            try:
                net.remove()
            except Exception as exc:  # noqa: BLE001
                if "not found" not in str(exc).lower():
                    errors.append(f"network {net.name}: {exc}")
        if errors:
            raise RuntimeError(f"could not remove every part of the Artemis container cluster: {errors}")

    def __repr__(self) -> str:
        return (f"<ArtemisContainerCluster {list(self.nodes)} {self.topology.cluster.message_load_balancing} "
                f"network={self.network_name}>")


def check_container_topology(topology: Topology) -> None:
    """TopologyUnsupported naming what a container cluster does not do (see the module doc)."""
    cc = topology.cluster
    if cc is None:
        raise ValueError("launch_container_cluster needs a topology with a cluster connection")
    if not 2 <= len(topology.nodes) <= 4:
        raise TopologyUnsupported(f"an Artemis cluster here has 2 to 4 nodes, not {len(topology.nodes)}")
    if cc.discovery == "udp":
        raise TopologyUnsupported("discovery 'udp' is launched on local JVMs only (artemis:process, multicast on "
                                  "loopback); the container cluster uses static connectors")
    if "cluster" in topology.proxied:
        raise TopologyUnsupported("cluster links through the fault proxy are launched on local JVMs only "
                                  "(artemis:process); in containers the container partition nemesis "
                                  "(chaos/nemesis/container.py) cuts the real links instead")
    bad = [n for n in topology.nodes if not _ALIAS.match(n)]
    if bad:
        raise TopologyUnsupported(f"node names {bad} cannot be network aliases (letters, digits and '-')")


def launch_container_cluster(topology: Topology, scenario: Scenario, workdir: Path, *,
                             counters: Callable[[ArtemisClusterContainer], Any], image: str = ARTEMIS_IMAGE,
                             jvm_heap_mb: int = 256, timeout: float = 240) -> ArtemisContainerCluster:
    """Start ``topology``'s nodes as Artemis containers on a network of their own and wait until
    every link is connected. ``counters``: the broker handle of a node's container (host, ports,
    ``destination_counters``: artemis/handles.py's ArtemisProcessHandle over its Jolokia)."""
    check_container_topology(topology)
    cc = topology.cluster
    workdir = Path(workdir).absolute() / "artemis-container-cluster"
    credentials = ("brokerconf-cluster", secrets.token_hex(12))
    admin = (ADMIN_USER, secrets.token_hex(8))
    listeners = ("core", "stomp", *(p for p in ("mqtt", "amqp") if p in scenario.protocols))
    ports = {listener: CONTAINER_PORTS[listener] for listener in listeners}
    addresses = {name: (name, CONTAINER_PORTS["core"]) for name in topology.nodes}
    cluster_nodes: dict[str, ContainerClusterNode] = {}
    cluster: ArtemisContainerCluster | None = None

    def config_of(name: str) -> ArtemisConfig:
        own = cluster.credentials_of if cluster is not None else {}
        fragment = cluster_xml(topology, name, addresses=addresses,
                               credentials=own[name] if name in own else credentials)
        base = render(scenario, name=f"{topology.prefix}-{name}", host="0.0.0.0", ports=ports, admin=admin)
        return replace(base, cluster_xml=fragment, redistribution_delay_ms=cc.redistribution_delay_ms,
                       redistribution_delays=cc.redistribution_delays)

    labels = {WORKDIR_LABEL: str(workdir)}
    for name in topology.nodes:
        container = ArtemisClusterContainer(workdir / f"node-{name}", scenario, name=f"{topology.prefix}-{name}",
                                            alias=name, config_of=lambda name=name: config_of(name), admin=admin,
                                            image=image, jvm_heap_mb=jvm_heap_mb)
        cluster_nodes[name] = ContainerClusterNode(name, container, counters(container))
    cluster = ArtemisContainerCluster(topology, cluster_nodes, workdir, {LABEL: CLUSTER_LABEL, **labels})
    cluster.start(timeout=timeout)
    return cluster
