"""Run ActiveMQ Classic 5.17 (Debian package) as a plain JVM process.

The broker gets a private ``ACTIVEMQ_BASE`` under a work directory with a
generated ``conf/activemq.xml``, logging configuration and data directory, and
listens on free loopback ports only.

How it is launched
------------------
Debian's ``/usr/bin/activemq`` wrapper only adds ``--add-opens`` flags and a
few ``-Dactivemq.*`` properties before running ``$ACTIVEMQ_HOME/bin/activemq.jar``
(``org.apache.activemq.console.Main``) through ``sh -c ... &``, which would
hide the JVM's PID behind a shell and pull in ``/usr/share/activemq/activemq-options``.
We invoke ``java`` directly with the same flags instead, so that the PID we
hold *is* the JVM, in its own process group::

    java -Xmx<heap>m <add-opens...> -Dactivemq.home=/usr/share/activemq \
         -Dactivemq.base=W -Dactivemq.conf=W/conf -Dactivemq.data=W/data \
         -Djava.io.tmpdir=W/tmp -Dactivemq.classpath=W/conf[:launch jars] \
         [-XX:SharedArchiveFile=<class archive>] \
         -cp bin/activemq.jar:lib/*.jar:lib/optional/*.jar[:launch jars] \
         org.apache.activemq.console.Main start xbean:file:W/conf/activemq.xml

``console.Main`` builds a class loader from every entry of ``activemq.classpath``
(directories and jar files as given), then every jar in ``$ACTIVEMQ_HOME/lib`` and
``lib/optional`` (the Debian symlinks into ``/usr/share/java``) and ``$ACTIVEMQ_BASE/lib``,
each directory sorted by name, as a child of the loader that loaded it.  Run as
``-jar bin/activemq.jar``, that child defined every broker class: each lookup scanned its jars,
and a class-data archive could do little for classes of a custom loader.  So the JVM gets those
jars on its own class path (activemq/class_path.py), in that order, and runs ``console.Main``
directly.  Finding its task class on its own loader's class path, ``console.Main`` then adds no
extension directory (``canUseExtdir``; the log's "Extensions classpath" is ``[]``); the child
loader it still builds holds ``activemq.classpath`` alone and asks its parent first, so the
application loader defines every class, and the launch maps the class archive the set-up made
(activemq/class_archive.py, `installed_class_archive`; none until made, or with
``BROKERCONF_JVM_CLASS_ARCHIVES=0``).  Measured (medians of 4 interleaved launches to STOMP
CONNECTED, each layout with a dynamic archive of its own): ``-jar`` 1.24 s of CPU and 0.96 s of
wall time, the class path 1.02 s and 0.85 s; ``-jar`` without an archive took 1.29 s of CPU.
benchmarks/activemq_launch_cpu.py compares the launch as it was with the one as it is, as the
target launches it (JMX agent on; medians of 3 interleaved launches): ``-jar`` without an archive
1.36 s of CPU and 1.28 s of wall time to serving, the class path without one 1.46 s and 1.27 s,
with the set-up's archive 1.04 s and 0.87 s.

``activemq.classpath`` is as before: ``W/conf`` first, so our ``log4j.properties`` wins
(Debian's build logs through log4j 1.2 via ``slf4j-log4j12``; a ``log4j2.properties`` is written
too for upstream builds), then the jars this launch needs beyond the package's (``launch jars``),
which are also appended to ``-cp``: ``lib/activemq-mqtt.jar``'s classes, now defined by the
application loader, resolve mqtt-client's from that same loader.  The MQTT transport needs
``mqtt-client.jar`` (libmqtt-client-java) and ``hawtdispatch*.jar`` (libhawtdispatch-java) from
``/usr/share/java`` (``mqtt=True``); the JDBC store its driver and pool (``jdbc=``).  Debian does
not package the AMQP transport: with ``amqp=True`` the jars `conformance.targets.activemq.amqp`
fetched into ``.tools/`` (the version-checked activemq-amqp + proton-j) are added the same way, so
nothing is written into the package's directories, and an ``amqp://`` connector opens on a free
loopback port.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import quoteattr

from conformance.targets.activemq.amqp import installed, jar_paths
from conformance.targets.activemq.class_path import MAIN_CLASS, base_class_path, class_archive
from conformance.targets.activemq.paths import ACTIVEMQ_HOME, JAVA_SHARE, find_java
from conformance.targets.runtime.class_archive import ClassArchive
from conformance.targets.runtime.jvm import quick_start_options
from machinery.managed import ManagedProcess
from conformance.targets.runtime.probes import stomp_handshake, tcp_accepts
from machinery.process import free_ports
from machinery.waiting import Deadline

if TYPE_CHECKING:
    from conformance.targets.tls_setup import TlsSetup

__all__ = [
    "ActiveMQNotInstalled",
    "ActiveMQStartError",
    "ActiveMQProcess",
    "activemq_available",
    "activemq_mqtt_available",
    "activemq_amqp_available",
    "installed_class_archive",
    "DEFAULT_STOMP_SCHEME",
]

INSTALL_HINT = (
    "install it with `apt-get install activemq libmqtt-client-java libhawtdispatch-java` "
    "(or run ./scripts/test.sh as root on Debian, which installs them)"
)

#: jars the MQTT transport needs beyond $ACTIVEMQ_HOME/lib, with their Debian package
#: the JDBC store's jars on the broker's class path (A-MQ FT guide 3.2, Example 3.3's data source):
#: PostgreSQL's driver and commons-dbcp2's pool (commons-pool2 comes with the activemq package)
JDBC_JARS: tuple[tuple[str, str], ...] = (
    ("postgresql.jar", "libpostgresql-jdbc-java"),
    ("commons-dbcp2.jar", "libcommons-dbcp2-java"),
    ("commons-pool2.jar", "libcommons-pool2-java"),
)

#: the journaled JDBC adapter's journal (activeio), which Debian ships beside ActiveMQ's own jars
JOURNALED_JDBC_JARS: tuple[tuple[str, str], ...] = (("activeio-core.jar", "libactivemq-activeio-java"),)


@dataclass(frozen=True)
class JdbcStore:
    """A JDBC master/slave store (guide 3.2): the plain ``jdbcPersistenceAdapter`` (the guide
    requires the direct adapter, not the journaled one) on a PostgreSQL database, locked with
    ActiveMQ's lease database locker. ``lock_acquire_sleep_interval_ms`` is both how often a slave
    tries and how long a lease lasts (``LeaseDatabaseLocker``); ``lock_keep_alive_period_ms`` is
    the master's renewal period (the adapter's; ActiveMQ's default for JDBC is 30 s)."""

    jdbc_url: str
    user: str
    password: str
    lock_keep_alive_period_ms: int = 30000
    lock_acquire_sleep_interval_ms: int = 10000
    max_allowable_diff_from_db_time_ms: int = 0
    #: the journaled adapter instead (FT-JDBC-3: the guide rules it out for a shared database):
    #: ActiveMQ's journal in this directory, local to the broker, checkpointed into the database
    journal_directory: str | None = None

    def persistence_factory_xml(self) -> str:
        """The journaled adapter (``journalPersistenceAdapterFactory``, a ``<persistenceFactory>``,
        not a ``<persistenceAdapter>``), locking with the JDBC adapter's database lock."""
        return ("<journalPersistenceAdapterFactory dataSource=\"#brokerconf-ds\" useDatabaseLock=\"true\" "
                f"createTablesOnStartup=\"true\" journalLogFiles=\"5\" dataDirectory={quoteattr(str(self.journal_directory))}/>")

    def persistence_xml(self) -> str:
        return ("<jdbcPersistenceAdapter dataSource=\"#brokerconf-ds\" createTablesOnStartup=\"true\" "
                f"lockKeepAlivePeriod=\"{int(self.lock_keep_alive_period_ms)}\">\n"
                "        <locker>\n"
                f"          <lease-database-locker lockAcquireSleepInterval=\"{int(self.lock_acquire_sleep_interval_ms)}\" "
                f"maxAllowableDiffFromDBTime=\"{int(self.max_allowable_diff_from_db_time_ms)}\"/>\n"
                "        </locker>\n"
                "      </jdbcPersistenceAdapter>")

    def data_source_xml(self) -> str:
        # a bean beside <broker>, as in the guide's Example 3.3 (dbcp2: Debian ships no dbcp 1)
        return f"""
  <bean id="brokerconf-ds" class="org.apache.commons.dbcp2.BasicDataSource" destroy-method="close">
    <property name="driverClassName" value="org.postgresql.Driver"/>
    <property name="url" value={quoteattr(self.jdbc_url)}/>
    <property name="username" value={quoteattr(self.user)}/>
    <property name="password" value={quoteattr(self.password)}/>
    <property name="poolPreparedStatements" value="true"/>
  </bean>
"""


def missing_jdbc_jars() -> str | None:
    """Why the JDBC store cannot run here (a missing jar and its Debian package), or None."""
    for jar, package in JDBC_JARS:
        if not (JAVA_SHARE / jar).is_file():
            return f"ActiveMQ's JDBC store needs {JAVA_SHARE / jar} (Debian package {package})"
    return None


MQTT_JARS: tuple[tuple[str, str], ...] = (
    ("mqtt-client.jar", "libmqtt-client-java"),
    ("hawtdispatch.jar", "libhawtdispatch-java"),
    ("hawtdispatch-transport.jar", "libhawtdispatch-java"),
)

#: STOMP transport scheme.  Measured here (2 cores, conformance.bench.stomp_load,
#: 200k x 256 B, 1 producer -> 1 consumer, runs 3-5 after JIT warm-up): plain
#: ``stomp`` (blocking, a thread per connection) 29k-46k msg/s vs ``stomp+nio``
#: 18k-24k msg/s, so plain ``stomp`` is the default.  ``stomp+nio`` peaks at a
#: lower RSS (about 380-500 MiB vs 570-840 MiB) because the producer gets less
#: far ahead of the consumer.
DEFAULT_STOMP_SCHEME = "stomp"

# Same module flags as Debian's /usr/bin/activemq uses for Java > 8.
_JDK9_FLAGS = (
    "--add-reads=java.xml=java.logging",
    "--add-opens", "java.base/java.security=ALL-UNNAMED",
    "--add-opens", "java.base/java.net=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens", "java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED",
    "--add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED",
    "--add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED",
)


class ActiveMQNotInstalled(RuntimeError):
    """ActiveMQ Classic (or a jar / Java it needs) is not installed."""


class ActiveMQStartError(RuntimeError):
    """The broker process exited or did not become ready; the message has the log tail."""


# --------------------------------------------------------------------------- discovery


def _missing_core() -> str:
    run_jar = ACTIVEMQ_HOME / "bin" / "activemq.jar"
    if not run_jar.is_file():
        return f"ActiveMQ Classic is not installed: {run_jar} is missing (Debian package `activemq`); {INSTALL_HINT}"
    for jar in ("activemq-broker.jar", "activemq-stomp.jar", "activemq-client.jar"):
        p = ACTIVEMQ_HOME / "lib" / jar
        if not p.is_file():
            return f"ActiveMQ Classic installation is incomplete: {p} is missing (Debian package `activemq`); {INSTALL_HINT}"
    if not (ACTIVEMQ_HOME / "lib" / "optional" / "xbean-spring.jar").is_file():
        return (f"ActiveMQ Classic installation is incomplete: {ACTIVEMQ_HOME / 'lib/optional/xbean-spring.jar'} "
                f"is missing (Debian package `activemq`); {INSTALL_HINT}")
    if find_java() is None:
        return ("no Java runtime found for ActiveMQ (looked at $BROKERCONF_JAVA, /usr/lib/jvm/default-java, "
                "PATH, $JAVA_HOME); install it with `apt-get install default-jre-headless` (pulled in by `activemq`)")
    return ""


def _missing_mqtt() -> str:
    for jar, pkg in MQTT_JARS:
        if not (JAVA_SHARE / jar).is_file():
            return (f"ActiveMQ's MQTT transport needs {JAVA_SHARE / jar}, which is missing "
                    f"(Debian package `{pkg}`); install it with `apt-get install {pkg}`")
    if not (ACTIVEMQ_HOME / "lib" / "activemq-mqtt.jar").is_file():
        return (f"{ACTIVEMQ_HOME / 'lib/activemq-mqtt.jar'} is missing (Debian package `activemq`); {INSTALL_HINT}")
    return ""


def _missing_amqp() -> str:
    return installed()[1]


def _amqp_jars() -> list[str]:
    return [str(p) for p in jar_paths()]


def installed_class_archive() -> ClassArchive:
    """The class archive of the installation's broker JVMs (activemq/class_path.py; made at set-up
    by activemq/class_archive.py), whether made yet or not."""
    return class_archive(ACTIVEMQ_HOME)


def activemq_available() -> tuple[bool, str]:
    """``(True, "")`` when ActiveMQ Classic can be launched, else ``(False, reason)``."""
    reason = _missing_core()
    return (not reason, reason)


def activemq_mqtt_available() -> tuple[bool, str]:
    """Like :func:`activemq_available`, additionally requiring the MQTT transport's jars."""
    reason = _missing_core() or _missing_mqtt()
    return (not reason, reason)


def activemq_amqp_available() -> tuple[bool, str]:
    """Like :func:`activemq_available`, additionally requiring the AMQP transport in ``.tools/``
    (`conformance.targets.activemq.amqp`: fetched, digests verified, same version as the broker)."""
    reason = _missing_core() or _missing_amqp()
    return (not reason, reason)


# --------------------------------------------------------------------------- helpers


_LOG4J1 = """\
# generated by brokerconf
log4j.rootLogger=INFO, logfile
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.logger.org.apache.activemq.spring=WARN
log4j.appender.logfile=org.apache.log4j.FileAppender
log4j.appender.logfile.File={log}
log4j.appender.logfile.Append=true
log4j.appender.logfile.layout=org.apache.log4j.PatternLayout
log4j.appender.logfile.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
"""

_LOG4J2 = """\
# generated by brokerconf (used only by log4j2-based ActiveMQ builds)
rootLogger.level=INFO
rootLogger.appenderRef.logfile.ref=LogFile
logger.spring.name=org.springframework
logger.spring.level=WARN
logger.xbean.name=org.apache.xbean
logger.xbean.level=WARN
appender.logfile.type=File
appender.logfile.name=LogFile
appender.logfile.fileName={log}
appender.logfile.append=true
appender.logfile.layout.type=PatternLayout
appender.logfile.layout.pattern=%d | %-5p | %m | %c | %t%n
"""


# --------------------------------------------------------------------------- the process


#: logged by KahaDB's SharedFileLocker when the store is locked and the broker waits as a slave
_SLAVE_LINE = "is locked by another server"
#: logged by the JDBC store's lease database locker when it starts waiting for the lease
_LEASE_SLAVE_LINE = "attempting to acquire exclusive lease to become the master"
#: logged by the JDBC store's default (blocking) database locker, which the journaled adapter uses
_DATABASE_LOCK_SLAVE_LINE = "Attempting to acquire the exclusive lock to become the Master broker"


class ActiveMQAddresses:
    """Where clients reach a broker, from its ``host`` and published ports; shared by the local
    process and the container (ActiveMQContainer), which fill the same attributes."""

    host: str
    stomp_port: int
    openwire_port: int
    mqtt_port: int | None
    jmx: bool
    jmx_port: int

    @property
    def stomp_address(self) -> tuple[str, int]:
        return (self.host, self.stomp_port)

    @property
    def openwire_url(self) -> str:
        return f"tcp://{self.host}:{self.openwire_port}"

    @property
    def mqtt_address(self) -> tuple[str, int] | None:
        return (self.host, self.mqtt_port) if self.mqtt_port else None

    @property
    def jmx_url(self) -> str | None:
        """JMX service URL of the JDK agent (``jmx=True``), e.g. for conformance.targets.activemq.jmx."""
        if not (self.jmx and self.jmx_port):
            return None
        return f"service:jmx:rmi:///jndi/rmi://{self.host}:{self.jmx_port}/jmxrmi"


class ActiveMQProcess(ActiveMQAddresses, ManagedProcess):
    """One ActiveMQ Classic broker JVM with generated configuration on loopback ports.

    Non-persistent (``persistent="false"``, in-memory store) unless
    ``persistent=True`` (KahaDB under ``workdir/data/kahadb``); ``useJmx="false"``,
    ``schedulerSupport="false"``.  Advisory support stays on by default, as in a
    stock broker: switching it off made no measurable difference to 1->1 STOMP
    throughput here (advisories cost per destination/consumer, not per message);
    pass ``advisory_support=False`` to drop it.  ``policy_entries_xml`` is pasted
    verbatim inside ``<destinationPolicy><policyMap><policyEntries>``.
    ``extra_jvm_args`` go before ``-cp`` and the main class. ``class_archive_dump``: this JVM runs
    on the base class path alone and writes the classes it loaded there when it exits (no MQTT
    then; activemq/class_archive.py makes the archive every other launch maps so).

    Optional extras (all off by default, so the defaults above hold):
    ``jmx=True`` turns ``useJmx`` on and serves the platform MBean server over the JDK's own
    JMX agent on a free loopback port (``jmx_port``, ``jmx_url``); ActiveMQ's own connector
    (``managementContext createConnector``) is left off because its RMI registry binds every
    interface (``LocateRegistry.createRegistry(port)`` in ManagementContext), while the JDK agent
    honours ``com.sun.management.jmxremote.host``.  (The JDK agent also opens its local
    connector on an ephemeral port of every interface; its LocalRMIServerSocketFactory closes
    connections that do not come from this host.)  ``scheduler_support=True`` sets
    ``schedulerSupport`` (the redelivery plugin needs it); ``plugins_xml`` is pasted inside
    ``<plugins>``; ``memory_limit_bytes`` overrides ``memory_limit_mb`` with an exact byte count;
    ``ready_login`` (user, password) is sent with the readiness CONNECT when anonymous access is off.

    Shared-store master/slave (A-MQ fault-tolerant messaging guide, 3.1): ``kahadb_directory``
    puts KahaDB (``persistent=True``) in a directory other brokers share; ``lock_keep_alive_period_ms``
    and ``lock_acquire_sleep_interval_ms`` set the KahaDB attribute and the shared-file locker's
    attribute of that section's Example 3.1. A broker that finds the store locked waits as a slave
    with no transport connector open, so such a broker is started with ``start(wait_for="lock")``
    (ready once it either serves or logs that it waits for the lock).
    """

    host = "127.0.0.1"
    label = "ActiveMQ"
    start_error = ActiveMQStartError
    stop_timeout = 20.0

    def __init__(
        self,
        workdir: Path,
        *,
        name: str = "brokerconf",
        stomp: bool = True,
        openwire: bool = True,
        mqtt: bool = False,
        amqp: bool = False,
        persistent: bool = False,
        policy_entries_xml: str = "",
        memory_limit_mb: int = 512,
        jvm_heap_mb: int = 1024,
        advisory_support: bool = True,
        stomp_scheme: str = DEFAULT_STOMP_SCHEME,
        extra_jvm_args: tuple[str, ...] = (),
        jmx: bool = False,
        scheduler_support: bool = False,
        plugins_xml: str = "",
        memory_limit_bytes: int | None = None,
        ready_login: tuple[str, str] | None = None,
        kahadb_directory: Path | None = None,
        lock_keep_alive_period_ms: int | None = None,
        lock_acquire_sleep_interval_ms: int | None = None,
        network_connectors_xml: str = "",
        broker_attributes: dict[str, str] | None = None,
        discovery_uri: str | None = None,
        openwire_attributes: dict[str, str] | None = None,
        destination_interceptors_xml: str = "",
        tls: "TlsSetup | None" = None,
        jdbc: JdbcStore | None = None,
        class_archive_dump: Path | None = None,
    ) -> None:
        if not (stomp or openwire or mqtt or amqp):
            raise ValueError("enable at least one of stomp, openwire, mqtt, amqp")
        if mqtt and class_archive_dump is not None:
            # the dump's class path is the base alone, where lib/activemq-mqtt.jar's classes cannot
            # see mqtt-client's (measured: the first MQTT CONNECT fails with NoClassDefFoundError)
            raise ValueError("a class archive dump launch cannot serve MQTT: its class path has no mqtt-client")
        if stomp_scheme not in ("stomp", "stomp+nio"):
            raise ValueError(f"stomp_scheme must be 'stomp' or 'stomp+nio', not {stomp_scheme!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"broker name must match [A-Za-z0-9_.-]+: {name!r}")
        self.workdir = Path(workdir).absolute()
        self.name = name
        self.stomp = stomp
        self.openwire = openwire
        self.mqtt = mqtt
        self.amqp = amqp
        self.persistent = persistent
        self.policy_entries_xml = policy_entries_xml
        self.memory_limit_mb = int(memory_limit_mb)
        self.jvm_heap_mb = int(jvm_heap_mb)
        self.advisory_support = advisory_support
        self.stomp_scheme = stomp_scheme
        self.extra_jvm_args = tuple(extra_jvm_args)
        self.jmx = jmx
        self.scheduler_support = scheduler_support
        self.plugins_xml = plugins_xml
        if memory_limit_bytes is not None and int(memory_limit_bytes) <= 0:
            raise ValueError(f"memory_limit_bytes must be a positive byte count, not {memory_limit_bytes!r}")
        self.memory_limit_bytes = None if memory_limit_bytes is None else int(memory_limit_bytes)
        self.jmx_port: int = 0
        self.ready_login = ready_login
        if jdbc is not None and (not persistent or kahadb_directory is not None):
            raise ValueError("a JDBC store needs persistent=True and no kahadb_directory")
        self.jdbc = jdbc
        if kahadb_directory is not None and not persistent:
            raise ValueError("kahadb_directory needs persistent=True (a shared store is a KahaDB store)")
        for label, value in (("lock_keep_alive_period_ms", lock_keep_alive_period_ms),
                             ("lock_acquire_sleep_interval_ms", lock_acquire_sleep_interval_ms)):
            if value is not None and int(value) < 0:
                raise ValueError(f"{label} must be >= 0 milliseconds, not {value!r}")
        self.lock_keep_alive_period_ms = lock_keep_alive_period_ms
        self.lock_acquire_sleep_interval_ms = lock_acquire_sleep_interval_ms
        # Networks of brokers (conformance.targets.activemq.network): pasted verbatim inside
        # <networkConnectors>, and extra <broker> attributes such as networkConnectorStartAsync.
        self.network_connectors_xml = network_connectors_xml
        self.broker_attributes = dict(broker_attributes or {})
        for attr in self.broker_attributes:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", attr):
                raise ValueError(f"broker attribute names are XML attribute names like 'useVirtualDestSubs', not {attr!r}")

        # "Example using multicast discovery": the transportConnector's discoveryUri, set on the
        # OpenWire connector (what an ActiveMQ bridge connects to), else on the STOMP one.
        self.discovery_uri = discovery_uri
        # Extra attributes of the OpenWire <transportConnector> (the A-MQ guide's Table 2.2:
        # updateClusterClients, rebalanceClusterClients, updateClusterFilter...): only what a
        # scenario sets is written, so a default stays the broker's own.
        self.openwire_attributes = dict(openwire_attributes or {})
        for attr in self.openwire_attributes:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", attr):
                raise ValueError(f"transport connector attribute names are XML attribute names like "
                                 f"'updateClusterClients', not {attr!r}")
        # A whole <destinationInterceptors> element (virtual topics, composite destinations), pasted
        # inside <broker> (conformance.targets.activemq.network.render_destination_interceptors).
        self.destination_interceptors_xml = destination_interceptors_xml

        self.config_path = self.workdir / "conf" / "activemq.xml"
        self.log_path = self.workdir / "activemq.log"
        self.data_dir = self.workdir / "data"
        self.kahadb_directory = Path(kahadb_directory).absolute() if kahadb_directory else self.data_dir / "kahadb"
        self.stomp_port: int = 0
        self.openwire_port: int = 0
        self.mqtt_port: int | None = None
        self.amqp_port: int = 0
        # TLS (conformance/targets/tls_setup.py): a stomp+ssl / mqtt+ssl / amqp+ssl connector beside
        # each plain one, with the run's PKCS12 keystore in <sslContext>; protocol -> port
        self.tls = tls
        self.tls_ports: dict[str, int] = {}
        # this JVM writes the classes it loaded there when it exits (activemq/class_archive.py
        # makes the launches' archive so); every other launch maps that archive once it is made
        self.class_archive_dump = Path(class_archive_dump) if class_archive_dump is not None else None
        self.command: list[str] = []
        self._init_process()

    # ----------------------------------------------------------------- urls
    @property
    def amqp_address(self) -> tuple[str, int] | None:
        return (self.host, self.amqp_port) if self.amqp_port else None

    # ----------------------------------------------------------------- config
    def _jmx_jvm_args(self) -> list[str]:
        if not self.jmx:
            return []
        p = self.jmx_port
        # Registry and RMI server on the same loopback port (JDK 9+ `jmxremote.host`), no auth:
        # nothing but this machine can reach it, and only the harness knows the port.
        return [
            f"-Dcom.sun.management.jmxremote.port={p}",
            f"-Dcom.sun.management.jmxremote.rmi.port={p}",
            f"-Dcom.sun.management.jmxremote.host={self.host}",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false",
            f"-Djava.rmi.server.hostname={self.host}",
        ]

    def _connectors_xml(self) -> str:
        h = self.host
        rows = []
        discovery = "" if self.discovery_uri is None else f" discoveryUri={quoteattr(self.discovery_uri)}"
        if self.stomp:
            rows.append(f'<transportConnector name="stomp" '
                        f'uri="{self.stomp_scheme}://{h}:{self.stomp_port}?transport.closeAsync=false"'
                        f'{"" if self.openwire else discovery}/>')
        if self.openwire:
            extra = "".join(f" {name}={quoteattr(value)}" for name, value in self.openwire_attributes.items())
            rows.append(f'<transportConnector name="openwire" uri="tcp://{h}:{self.openwire_port}"{discovery}{extra}/>')
        if self.mqtt:
            rows.append(f'<transportConnector name="mqtt" uri="mqtt://{h}:{self.mqtt_port}"/>')
        if self.amqp:
            # transformer=jms: the ActiveMQ "AMQP" page, "Mapping to JMS": `native` wraps the whole
            # encoded AMQP message into a BytesMessage body, so a STOMP or OpenWire consumer would
            # get AMQP sections instead of the payload; `jms` maps the AMQP body to the JMS body,
            # the page's setting to inter-operate with JMS at the payload level. It is also the
            # default of the 5.17.2 transport (AmqpWireFormat's transformer field starts as "jms",
            # read with javap); written so a build defaulting to native maps bodies the same way.
            rows.append(f'<transportConnector name="amqp" '
                        f'uri="amqp://{h}:{self.amqp_port}?transport.transformer=jms"/>')
        for protocol, port in self.tls_ports.items():
            # ActiveMQ "SSL Transport Reference": the +ssl schemes take the broker's <sslContext>
            params = {"stomp": "?transport.closeAsync=false", "amqp": "?transport.transformer=jms"}.get(protocol, "")
            rows.append(f'<transportConnector name="{protocol}+ssl" uri="{protocol}+ssl://{h}:{port}{params}"/>')
        return "\n      ".join(rows)

    def _ssl_context_xml(self) -> str:
        """The broker's <sslContext> (ActiveMQ "How do I use SSL"): keystore and truststore as
        PKCS12, which Java 17 reads; clients are not required to present a certificate."""
        if self.tls is None:
            return ""
        pki = self.tls.pki
        return ("\n    <sslContext>\n      <sslContext keyStore=" + quoteattr(str(pki.server_keystore))
                + f' keyStorePassword={quoteattr(pki.password)} keyStoreType="pkcs12"'
                + f" trustStore={quoteattr(str(pki.truststore))} trustStorePassword={quoteattr(pki.password)}"
                + ' trustStoreType="pkcs12"/>\n    </sslContext>')

    def render_config(self) -> str:
        """The activemq.xml for the current settings and ports."""
        data = quoteattr(str(self.data_dir))
        persistence = ""
        if self.persistent:
            keep_alive = ("" if self.lock_keep_alive_period_ms is None
                          else f' lockKeepAlivePeriod="{int(self.lock_keep_alive_period_ms)}"')
            locker = ""
            if self.lock_acquire_sleep_interval_ms is not None:
                locker = ("\n        <locker>\n          <shared-file-locker lockAcquireSleepInterval="
                          f'"{int(self.lock_acquire_sleep_interval_ms)}"/>\n        </locker>\n      ')
            kahadb = f"<kahaDB directory={quoteattr(str(self.kahadb_directory))}{keep_alive}"
            kahadb += f">{locker}</kahaDB>" if locker else "/>"
            if self.jdbc is not None and self.jdbc.journal_directory is not None:
                persistence = (f"\n    <persistenceFactory>\n      {self.jdbc.persistence_factory_xml()}\n"
                               "    </persistenceFactory>")
            else:
                adapter = self.jdbc.persistence_xml() if self.jdbc is not None else kahadb
                persistence = f"\n    <persistenceAdapter>\n      {adapter}\n    </persistenceAdapter>"
        policy = ""
        if self.policy_entries_xml.strip():
            policy = ("\n    <destinationPolicy>\n      <policyMap>\n        <policyEntries>\n"
                      f"{self.policy_entries_xml}\n        </policyEntries>\n      </policyMap>\n"
                      "    </destinationPolicy>")
        bool_s = lambda b: "true" if b else "false"  # noqa: E731
        management = ""
        if self.jmx:
            management = ("\n    <managementContext>\n      <managementContext createConnector=\"false\"/>"
                          "\n    </managementContext>")
        plugins = ""
        if self.plugins_xml.strip():
            plugins = f"\n    <plugins>\n{self.plugins_xml}\n    </plugins>"
        networks = ""
        if self.destination_interceptors_xml.strip():
            networks += f"\n{self.destination_interceptors_xml}"
        if self.network_connectors_xml.strip():
            networks += f"\n    <networkConnectors>\n{self.network_connectors_xml}\n    </networkConnectors>"
        extra_attributes = "".join(f"\n          {k}={quoteattr(str(v))}" for k, v in self.broker_attributes.items())
        memory = (f"{self.memory_limit_bytes} b" if self.memory_limit_bytes is not None
                  else f"{self.memory_limit_mb} mb")
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- generated by brokerconf (conformance.targets.activemq.process) -->
<beans
  xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">

  <broker xmlns="http://activemq.apache.org/schema/core"
          brokerName={quoteattr(self.name)}
          persistent="{bool_s(self.persistent)}"
          useJmx="{bool_s(self.jmx)}"
          schedulerSupport="{bool_s(self.scheduler_support)}"
          advisorySupport="{bool_s(self.advisory_support)}"
          useShutdownHook="true"{extra_attributes}
          dataDirectory={data}>{persistence}{policy}{management}{plugins}{networks}{self._ssl_context_xml()}
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="{memory}"/></memoryUsage>
        <storeUsage><storeUsage limit="1 gb"/></storeUsage>
        <tempUsage><tempUsage limit="1 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      {self._connectors_xml()}
    </transportConnectors>
  </broker>{self.jdbc.data_source_xml() if self.jdbc is not None else ""}
</beans>
"""

    def _write_layout(self) -> None:
        conf = self.workdir / "conf"
        for d in (conf, self.data_dir, self.workdir / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config(), encoding="utf-8")
        log = str(self.log_path).replace("\\", "/")
        (conf / "log4j.properties").write_text(_LOG4J1.format(log=log), encoding="utf-8")
        (conf / "log4j2.properties").write_text(_LOG4J2.format(log=log), encoding="utf-8")

    def _launch_jars(self) -> list[str]:
        """The jars this launch's transports and store need beyond the installation's own."""
        entries = []
        if self.mqtt:
            entries += [str(JAVA_SHARE / jar) for jar, _ in MQTT_JARS]
        if self.amqp:
            entries += _amqp_jars()
        if self.jdbc is not None:
            entries += [str(JAVA_SHARE / jar) for jar, _ in JDBC_JARS]
            if self.jdbc.journal_directory is not None:
                entries += [str(JAVA_SHARE / jar) for jar, _ in JOURNALED_JDBC_JARS]
        return entries

    def _classpath(self) -> str:
        """``activemq.classpath``: the conf directory (its log4j files win), then `_launch_jars`."""
        return os.pathsep.join([str(self.workdir / "conf"), *self._launch_jars()])

    def _jvm_class_path(self) -> list[str]:
        """The JVM's ``-cp``: the installation's base class path, then `_launch_jars`; a dump
        launch gets the base alone, so the archive it writes maps under any launch's class path
        (activemq/class_path.py)."""
        base = [str(jar) for jar in base_class_path(ACTIVEMQ_HOME)]
        return base if self.class_archive_dump is not None else [*base, *self._launch_jars()]

    def _class_archive_options(self) -> list[str]:
        archive = installed_class_archive()
        if self.class_archive_dump is not None:
            return archive.dump_options(self.class_archive_dump)
        return archive.use_options()

    def build_command(self) -> list[str]:
        java = find_java()
        if java is None:
            raise ActiveMQNotInstalled(_missing_core())
        w = self.workdir
        return [
            java,
            f"-Xmx{self.jvm_heap_mb}m",
            *quick_start_options(),
            "-Djava.awt.headless=true",
            *_JDK9_FLAGS,
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={w}",
            f"-Dactivemq.conf={w / 'conf'}",
            f"-Dactivemq.data={self.data_dir}",
            f"-Djava.io.tmpdir={w / 'tmp'}",
            f"-Dactivemq.classpath={self._classpath()}",
            f"-Dlog4j.configuration=file:{w / 'conf' / 'log4j.properties'}",
            f"-Dlog4j2.configurationFile={w / 'conf' / 'log4j2.properties'}",
            *self._jmx_jvm_args(),
            *self._class_archive_options(),
            *self.extra_jvm_args,
            "-cp", os.pathsep.join(self._jvm_class_path()), MAIN_CLASS,
            "start", f"xbean:file:{self.config_path}",
        ]

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 60, wait_for: str = "serving") -> None:
        """Write the configuration, launch the JVM and wait until STOMP answers CONNECTED
        (``wait_for="serving"``), or until it either serves or waits as a slave for the shared
        store's lock (``wait_for="lock"``; see `waiting_for_lock`).

        Ports are picked on the first start and kept across stop()/start() (re-picked
        only if one is taken meanwhile).  Raises ActiveMQNotInstalled / ActiveMQStartError.
        """
        if wait_for not in ("serving", "lock"):
            raise ValueError(f"wait_for must be 'serving' or 'lock', not {wait_for!r}")
        if self.running:
            raise RuntimeError(f"ActiveMQ {self.name!r} is already running (pid {self.pid})")
        reason = _missing_core() or (_missing_mqtt() if self.mqtt else "") or (_missing_amqp() if self.amqp else "")
        if reason:
            raise ActiveMQNotInstalled(reason)
        deadline = Deadline(timeout)
        attempts = 3  # a picked port can be taken by someone else before the JVM binds it
        for attempt in range(1, attempts + 1):
            try:
                # A restart keeps the previous ports (stable addresses for reconnecting
                # clients), and a first start the ones a rig set beforehand, unless they turn out
                # to be taken.
                self._start_once(deadline, keep_ports=attempt == 1, wait_for=wait_for)
                return
            except ActiveMQStartError as e:
                bind_race = "Address already in use" in str(e)
                if bind_race and attempt < attempts and not deadline.expired():
                    continue
                raise

    def _ports_assigned(self) -> bool:
        return ((not self.stomp or self.stomp_port > 0) and (not self.openwire or self.openwire_port > 0)
                and (not self.mqtt or bool(self.mqtt_port)) and (not self.amqp or self.amqp_port > 0)
                and (not self.jmx or self.jmx_port > 0) and (self.tls is None or bool(self.tls_ports)))

    def _start_once(self, deadline: Deadline, keep_ports: bool = False, wait_for: str = "serving") -> None:
        """``keep_ports``: keep every port already set (a restart's, or one a rig fixed before the
        first start so another broker's configuration can name it) and pick only the missing ones;
        otherwise pick them all anew (a port turned out to be taken)."""
        if not (keep_ports and self._ports_assigned()):
            keep = keep_ports  # then the ports set so far stay and those left at 0 / None are picked
            picks = iter(free_ports(5))
            self.stomp_port = (keep and self.stomp_port or next(picks)) if self.stomp else 0
            self.openwire_port = (keep and self.openwire_port or next(picks)) if self.openwire else 0
            self.mqtt_port = (keep and self.mqtt_port or next(picks)) if self.mqtt else None
            self.jmx_port = (keep and self.jmx_port or next(picks)) if self.jmx else 0
            self.amqp_port = (keep and self.amqp_port or next(picks)) if self.amqp else 0
            if self.tls is not None and not (keep and self.tls_ports):
                opened = [p for p, on in (("stomp", self.stomp), ("mqtt", self.mqtt), ("amqp", self.amqp)) if on]
                self.tls_ports = dict(zip(opened, free_ports(len(opened))))
        self._write_layout()
        self.command = self.build_command()
        self.log_path.write_bytes(b"")  # fresh log for this attempt
        self._spawn_until_ready(self.command, lambda: self._wait_ready(deadline, wait_for),
                                cwd=self.workdir, output=self.log_path)

    def _wait_ready(self, deadline: Deadline, wait_for: str = "serving") -> None:
        def probe(budget: float) -> tuple[bool, str]:
            # the TLS connectors start after the plain ones: a client of the TLS port right after
            # the plain STOMP handshake was refused once (a loaded main job)
            closed = [port for port in self.tls_ports.values() if not tcp_accepts(port, 1.0)]
            if closed:
                return False, f"TLS port(s) {closed} not accepting yet"
            if self.stomp:
                return stomp_handshake(self.stomp_port, timeout=budget, login=self.ready_login)
            port = self.openwire_port or self.mqtt_port or self.amqp_port or 0
            return (tcp_accepts(port, 1.0) and ") started" in self.log_tail(200),
                    "port not accepting or 'started' not yet logged")

        self._await_ready(deadline, probe, done=self.waiting_for_lock if wait_for == "lock" else None,
                          where=f"; log {self.log_path}")

    # ----------------------------------------------------------------- observation
    def waiting_for_lock(self) -> bool:
        """Whether this run of the broker logged that the store is locked by another broker and
        it waits as a slave (KahaDB's SharedFileLocker says so once, when it first fails); it may
        have taken the lock since: `serving` tells."""
        line = (_SLAVE_LINE if self.jdbc is None else
                _DATABASE_LOCK_SLAVE_LINE if self.jdbc.journal_directory is not None else _LEASE_SLAVE_LINE)
        return self.running and line in self.log_tail(400)

    def serving(self, timeout: float = 1.0) -> bool:
        """Whether the broker accepts connections: only a master opens its transport connectors."""
        port = self.stomp_port or self.openwire_port or self.mqtt_port or self.amqp_port or 0
        return self.running and bool(port) and tcp_accepts(port, timeout)

    def _failure_report(self, tail: int = 40) -> str:
        """Key error lines of the log (deduplicated) plus its tail without Java stack frames."""
        try:
            with open(self.log_path, "rb") as f:
                text = f.read(4 << 20).decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        key: list[str] = []
        for ln in text.splitlines():
            if (" ERROR " in ln or ln.startswith(("ERROR:", "Caused by:", "Error:", "Exception"))
                    or "Address already in use" in ln):
                short = ln[:400]
                if short not in key:
                    key.append(short)
        tail_lines = [ln for ln in self.log_tail(tail * 4).splitlines() if not ln.startswith("\tat ")][-tail:]
        parts = []
        if key:
            parts.append("key lines:\n  " + "\n  ".join(key[-8:]))
        parts.append("log tail (stack frames omitted):\n" + "\n".join(tail_lines))
        return "\n".join(parts)

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return (f"<ActiveMQProcess {self.name} {state} stomp={self.stomp_port} "
                f"openwire={self.openwire_port} mqtt={self.mqtt_port} amqp={self.amqp_port}>")
