"""How ActiveMQ Classic runs in each launch mode: one object per mode, asked by `ActiveMQTarget`
for everything that differs between a local JVM and a container (issue 27: the target resolves
its mode once, then never compares the mode's name again).

* `ActiveMQProcessLaunch`: JVMs from the Debian package on this machine. It alone opens +ssl
  connectors, runs the optional transports this machine installed (MQTT, AMQP), and launches
  networks of brokers, the rigs and JDBC / NFS shared-store groups.
* `ActiveMQContainerLaunch`: the same activemq.xml in the brokerconf image; the image brings the
  MQTT transport and no AMQP, and a shared-store group is one container per node on a volume.
"""

from __future__ import annotations

from pathlib import Path

from conformance.targets.activemq.container import ActiveMQContainer
from conformance.targets.activemq.container_network import SharedVolumePair
from conformance.targets.activemq.process import (
    ActiveMQProcess,
    activemq_amqp_available,
    activemq_mqtt_available,
    missing_jdbc_jars,
)
from conformance.targets.activemq.shared_store import SharedStoreGroup
from conformance.targets.base import TargetUnavailable
from machinery import postgres

__all__ = ["ActiveMQProcessLaunch", "ActiveMQContainerLaunch", "LAUNCHES"]


class ActiveMQProcessLaunch:
    """The broker as a local JVM (`ActiveMQProcess`)."""

    name = "process"
    #: the JVM runs from this machine's Debian package
    local = True

    def __init__(self, image: str = "") -> None:
        pass  # the container's constructor: the process needs no image

    #: what a JDBC group needs from this machine (BROKERCONF_REQUIRE's name; the target's table
    #: gives it to the shape)
    jdbc_requirement: str | None = "postgresql"

    @property
    def capability_requirements(self) -> dict[str, str]:
        """Feature capabilities a BROKERCONF_REQUIRE name stands for (the extras this machine may
        install); the shapes' are in the target's table."""
        return {"protocol.amqp": "activemq-amqp"}

    def mqtt_available(self) -> tuple[bool, str]:
        return activemq_mqtt_available()

    def amqp_available(self) -> tuple[bool, str]:
        return activemq_amqp_available()

    def jdbc_available(self) -> tuple[bool, str]:
        """JDBC master/slave on a private PostgreSQL (guide 3.2): the JDBC jars and the server."""
        missing = missing_jdbc_jars()
        if missing:
            return False, missing
        return postgres.availability()

    def network_available(self) -> tuple[bool, str]:
        return True, ""  # networks of local JVMs (activemq/network.py) and the rigs (activemq/rigs.py)

    def capabilities(self, offered: set[str]) -> set[str]:
        """``offered`` (the broker's features and its available protocols) as this mode runs them."""
        return offered | {"tls"}  # +ssl connectors from the run's keystore (the image's launcher has none)

    def why_missing(self, capability: str) -> str | None:
        return None  # what a local JVM lacks, it lacks in either mode (the target says why)

    def handle_pid(self, broker: ActiveMQProcess) -> int | None:
        return broker.pid

    def broker(self, workdir: Path, **options) -> ActiveMQProcess:
        """An unstarted broker with ``options`` (the launcher validates them)."""
        return ActiveMQProcess(Path(workdir) / "activemq", **options)

    def start_timeout(self, configured: float) -> float:
        return configured

    def shared_store_group(self, workdir: Path, *, jvm_heap_mb: int, jdbc: bool, nfs, proxied_database: bool,
                           jdbc_adapter: str, **options) -> SharedStoreGroup:
        """Local JVMs on one KahaDB directory, or with ``jdbc`` on one PostgreSQL database (a
        private server the group stops with itself); unstarted."""
        if jdbc:
            ok, reason = self.jdbc_available()
            if not ok:
                raise TargetUnavailable(reason)
        return SharedStoreGroup(Path(workdir) / ("activemq-jdbc-store" if jdbc else "activemq-shared-store"),
                                jvm_heap_mb=min(jvm_heap_mb, 384), jdbc=jdbc, nfs=nfs,
                                proxied_database=proxied_database, jdbc_adapter=jdbc_adapter, **options)

    def group_start_timeout(self, configured: float) -> float:
        return configured + 30  # several JVMs, each waiting its turn at the store's lock


class ActiveMQContainerLaunch:
    """The broker in the brokerconf/activemq-classic image (`ActiveMQContainer`, the process's
    interface: published loopback ports, JMX through a published port)."""

    name = "container"
    local = False

    def __init__(self, image: str) -> None:
        self.image = image

    #: the image has what it has: nothing to install on this machine
    jdbc_requirement: str | None = None

    @property
    def capability_requirements(self) -> dict[str, str]:
        return {}  # the image has what it has: nothing to install on this machine

    def mqtt_available(self) -> tuple[bool, str]:
        return True, ""  # the image installs the MQTT transport's jars (docker/activemq-classic/Dockerfile)

    def amqp_available(self) -> tuple[bool, str]:
        return False, ("the brokerconf/activemq-classic image has no AMQP transport (Debian does not package "
                       "activemq-amqp); run activemq:process with `brokerconf targets install activemq-amqp`")

    def jdbc_available(self) -> tuple[bool, str]:
        return False, "JDBC master/slave groups are launched as local JVMs (activemq:process)"

    def network_available(self) -> tuple[bool, str]:
        # the network's brokers (and the rigs') are local JVMs joined over loopback ports
        return False, ("networks of ActiveMQ brokers are launched as local processes: use activemq:process with the "
                       "Debian package installed")

    def capabilities(self, offered: set[str]) -> set[str]:
        return set(offered)

    def why_missing(self, capability: str) -> str | None:
        if capability == "tls":
            return "only the local process launcher (activemq:process) opens +ssl connectors with the run's keystore"
        return None

    def handle_pid(self, broker: ActiveMQContainer) -> int | None:
        return None  # no host PID: signal the broker through the container

    def broker(self, workdir: Path, **options) -> ActiveMQContainer:
        return ActiveMQContainer(Path(workdir) / "activemq-container", image=self.image, **options)

    def start_timeout(self, configured: float) -> float:
        # a container also pulls nothing and starts its JVM: the same budget plus its own start-up
        return configured + 30

    def shared_store_group(self, workdir: Path, *, jvm_heap_mb: int, jdbc: bool, nfs, proxied_database: bool,
                           jdbc_adapter: str, **options) -> SharedVolumePair:
        """One container per node, the KahaDB directory on a named Docker volume mounted into
        each; unstarted."""
        if jdbc or jdbc_adapter != "direct":
            raise TargetUnavailable("JDBC groups are launched as local JVMs (activemq:process), not as containers")
        if nfs is not None:
            raise TargetUnavailable("the simulated NFS store is mounted on this machine: launch ActiveMQ as "
                                    "local JVMs (activemq:process) to put a shared store on it")
        # 256 MB heap per JVM: two containers plus the workload share the machine's memory
        return SharedVolumePair(Path(workdir) / "activemq-shared-volume", image=self.image,
                                jvm_heap_mb=min(jvm_heap_mb, 256), **options)

    def group_start_timeout(self, configured: float) -> float:
        # the engine creates the volume, network and containers on top of the JVMs' start-up
        return configured + 60


#: a resolved mode's name (`runtime.launch_choice.choose_launch`) -> its class
LAUNCHES = {"process": ActiveMQProcessLaunch, "container": ActiveMQContainerLaunch}
