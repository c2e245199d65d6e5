"""Issue 26, item 1, beyond the modelled options: the values the harness's configuration templates
write whatever the scenario says. test_unset_options_are_left_to_the_broker.py checks the options
the model has (an unset one is left out); this module lists everything else each renderer writes
for a scenario that sets nothing, per target and per shape the suites launch (one broker, a
shared store, a network, a cluster member), each with why it may stay:

* ``equal``: the value is the broker's own default (or what its stock instance, Artemis's
  ``artemis create`` broker.xml, writes), so writing it changes nothing a statement can see;
* ``needed``: the harness cannot run without it (ports, data directories, logins, management for
  the counters, loopback-only discovery) and no statement is about it;
* ``differs``: not the broker's default, for the reason given; no catalogued statement about a
  default runs under it (the second check below keeps that true).

Two checks, both without starting a broker:

1. the inventory is complete: a renderer that starts writing another value on its own fails here
   until the value is listed with its reason;
2. no catalogued statement about a default names a listed option without the inventory saying so:
   a statement whose section or paraphrase names an item's option and says "default" must be
   acknowledged by that item,
   with why its test still meets the broker's own default. A statement that is about the listed
   option's default needs the option in the model instead, left out unless set, as
   ClusterConnection's and NetworkConnectorOptions' options are.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from conformance.scenario import Scenario
from conformance.spec.catalogue import load_catalogue
from conformance.targets.activemq.network import ActiveMQNetwork
from conformance.targets.activemq.policy import render as activemq_render
from conformance.targets.activemq.process import ActiveMQProcess, JdbcStore
from conformance.targets.artemis.cluster import UdpGroup, cluster_xml
from conformance.targets.artemis.config import ArtemisDatabase
from conformance.targets.artemis.config import render as artemis_render
from conformance.targets.reference.clustering import ReferenceClusterNode
from conformance.targets.reference.handles import scenario_config
from conformance.targets.reference.network import ReferenceNode
from conformance.topology import ClusterConnection, Topology

#: a value that depends on the launch (a name, a port, a directory), not fixed by the template
VARIES = "<varies>"


@dataclass(frozen=True)
class Fixed:
    """One value a template writes on its own. ``option``: the name a document would give it (what
    the catalogue is searched for; by default the element, attribute or key itself when that reads
    as a configuration name, `searched_option`); ``acknowledged``: statement ID -> why its test is
    unaffected."""

    value: str
    kind: str  # equal | needed | differs
    why: str
    option: str = ""
    acknowledged: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- the inventory

_ARTEMIS_STOCK = "as Artemis's stock instance (`artemis create`) writes it"
ARTEMIS_SINGLE = {
    "name": Fixed(VARIES, "needed", "the broker's name (management object names carry it)"),
    "persistence-enabled": Fixed("true", "equal", "Artemis's default"),
    "journal-type": Fixed("NIO", "equal", f"{_ARTEMIS_STOCK} (no libaio here)", "journal-type"),
    "journal-datasync": Fixed("true", "equal", "Artemis's default: a confirmed persistent send survives kill -9"),
    "journal-min-files": Fixed("2", "equal", "Artemis's default"),
    "journal-pool-files": Fixed("10", "equal", _ARTEMIS_STOCK),
    "journal-file-size": Fixed("10M", "equal", "Artemis's default; 1M on the simulated NFS store (start-up time)"),
    "journal-buffer-timeout": Fixed("100000", "differs", "`artemis create` measures the disk for it; a fixed "
                                    "value keeps instances alike; no statement is about journal timing"),
    "paging-directory": Fixed(VARIES, "needed", "the instance's (or the shared store's) data directory"),
    "bindings-directory": Fixed(VARIES, "needed", "as paging-directory"),
    "journal-directory": Fixed(VARIES, "needed", "as paging-directory"),
    "large-messages-directory": Fixed(VARIES, "needed", "as paging-directory"),
    "critical-analyzer": Fixed("false", "differs", "stock is on with the HALT policy: a loaded shared machine "
                               "must not make the broker stop itself; no statement is about the analyzer",
                               "critical-analyzer"),
    "max-disk-usage": Fixed("100", "differs", "stock is 90 (producers block past 90 % of the disk): how full "
                            "a shared CI disk is must not decide a test; no statement is about disk limits",
                            "max-disk-usage"),
    "security-enabled": Fixed("true", "equal", "Artemis's default"),
    "acceptors/acceptor[core]": Fixed("protocols=CORE", "needed", "Artemis's own tools and a cluster's links"),
    "acceptors/acceptor[stomp]": Fixed("protocols=STOMP;anycastPrefix=/queue/;multicastPrefix=/topic/", "needed",
                                       "the harness's canonical names as Artemis routing types (config.py)",
                                       "anycastPrefix"),
    "acceptors/acceptor[mqtt]": Fixed("protocols=MQTT", "needed", "the MQTT listener"),
    "acceptors/acceptor[amqp]": Fixed("protocols=AMQP;anycastPrefix=queue://;multicastPrefix=topic://;amqpCredits=1000;"
                                      "amqpLowCredits=300", "equal", "the prefixes as for STOMP; the credits are "
                                      "Artemis's defaults, as `artemis create` writes them", "amqpCredits"),
    "security-settings/security-setting[#]/permission": Fixed(
        "browse,consume,createAddress,createDurableQueue,createNonDurableQueue,deleteAddress,deleteDurableQueue,"
        "deleteNonDurableQueue,manage,send", "needed", "every permission to the scenario's role: no statement "
        "is about authorization"),
    "address-settings/address-setting[#]/dead-letter-address": Fixed("DLQ", "equal", _ARTEMIS_STOCK,
                                                                     "dead-letter-address"),
    "address-settings/address-setting[#]/expiry-address": Fixed("ExpiryQueue", "equal", _ARTEMIS_STOCK,
                                                                "expiry-address"),
    "address-settings/address-setting[#]/redelivery-delay": Fixed("0", "equal", "Artemis's default",
                                                                  "redelivery-delay"),
    "address-settings/address-setting[#]/redistribution-delay": Fixed(
        "0", "differs", "a broker alone has no cluster to redistribute to; a cluster member gets its topology's "
        "value or none (cluster.py, checked by test_unset_options_are_left_to_the_broker.py)",
        "redistribution-delay", {"CLU-REDIST-4": "its test runs on a cluster, whose members leave the element "
                                                "out when the topology does (test_artemis_leaves_out_every_"
                                                "cluster_option_not_set)"}),
    "address-settings/address-setting[#]/auto-create-queues": Fixed("true", "equal", "Artemis's default",
                                                                    "auto-create-queues"),
    "address-settings/address-setting[#]/auto-create-addresses": Fixed("true", "equal", "Artemis's default",
                                                                       "auto-create-addresses"),
    "address-settings/address-setting[#]/auto-delete-queues": Fixed(
        "false", "differs", f"Artemis's default is true, {_ARTEMIS_STOCK}: a drained queue keeps its counters and a "
        "cluster node keeps the queue a suite made by subscribing once (STRICT forwards only to nodes with the "
        "queue)", "auto-delete-queues"),
    "address-settings/address-setting[#]/auto-delete-addresses": Fixed("false", "differs", "as auto-delete-queues",
                                                                       "auto-delete-addresses"),
    "address-settings/address-setting[#]/address-full-policy": Fixed("PAGE", "equal", "Artemis's default",
                                                                     "address-full-policy"),
    "address-settings/address-setting[#]/max-size-bytes": Fixed("-1", "equal", "Artemis's default",
                                                                "max-size-bytes"),
    "addresses/address[DLQ]": Fixed("anycast queue DLQ", "equal", _ARTEMIS_STOCK),
    "addresses/address[ExpiryQueue]": Fixed("anycast queue ExpiryQueue", "equal", _ARTEMIS_STOCK),
}

_REQUIRED = "says it is required (no default); the default it names is local-bind-address's and -port's"
#: what a cluster member adds, with every ClusterConnection option unset (static and udp discovery)
ARTEMIS_CLUSTER_MEMBER = {
    "connectors/connector[node-A]": Fixed(VARIES, "needed", "the connector the node announces"),
    "connectors/connector[link-A-B]": Fixed(VARIES, "needed", "one static connector per peer it dials"),
    "cluster-user": Fixed(VARIES, "needed", "generated: the chapter warns against the shipped credentials "
                          "(a test leaves them out on purpose)", "cluster-user"),
    "cluster-password": Fixed(VARIES, "needed", "as cluster-user", "cluster-password"),
    "cluster-connections/cluster-connection[brokerconf-cluster]/address": Fixed(
        "", "equal", "the topology's address; empty serves every address (CLU-ADDR-1's own wording)"),
    "cluster-connections/cluster-connection[brokerconf-cluster]/connector-ref": Fixed(VARIES, "needed",
                                                                                      "mandatory"),
    "cluster-connections/cluster-connection[brokerconf-cluster]/static-connectors/connector-ref": Fixed(
        VARIES, "needed", "the topology's links"),
    "broadcast-groups/broadcast-group[bg-A]/local-bind-address": Fixed(
        "127.0.0.1", "needed", "multicast stays on the loopback device (no traffic off the machine)",
        "local-bind-address", {"CLU-DISC-3": "its wildcard case is not run (its note says why); its other "
                                             "cases are hand-written fragments"}),
    "broadcast-groups/broadcast-group[bg-A]/group-address": Fixed(VARIES, "needed", "a fresh group per launch",
                                                                  acknowledged={"CLU-DISC-3": _REQUIRED}),
    "broadcast-groups/broadcast-group[bg-A]/group-port": Fixed(VARIES, "needed", "as group-address",
                                                               acknowledged={"CLU-DISC-3": _REQUIRED}),
    "broadcast-groups/broadcast-group[bg-A]/connector-ref": Fixed(VARIES, "needed", "what the node announces"),
    "discovery-groups/discovery-group[dg]/local-bind-address": Fixed(
        "127.0.0.1", "needed", "as the broadcast group's", "local-bind-address",
        {"CLU-DISC-3": "as the broadcast group's"}),
    "discovery-groups/discovery-group[dg]/group-address": Fixed(VARIES, "needed", "as the broadcast group's",
                                                                acknowledged={"CLU-DISC-3": _REQUIRED}),
    "discovery-groups/discovery-group[dg]/group-port": Fixed(VARIES, "needed", "as the broadcast group's",
                                                             acknowledged={"CLU-DISC-3": _REQUIRED}),
    "cluster-connections/cluster-connection[brokerconf-cluster]/discovery-group-ref": Fixed(VARIES, "needed",
                                                                                            "discovery udp"),
}

#: the shared-store pair's ha-policy (config.py, ArtemisConfig.ha_policy_xml says why)
ARTEMIS_HA = {
    "ha-policy/shared-store/primary/failover-on-shutdown": Fixed(
        "true", "differs", "Artemis's default is false; the A-MQ guide's slave takes over when the master is shut "
        "down or fails (3.1), which the FT statements check on Artemis", "failover-on-shutdown"),
    "ha-policy/shared-store/backup/failover-on-shutdown": Fixed("true", "differs", "as the primary's",
                                                                "failover-on-shutdown"),
    "ha-policy/shared-store/backup/allow-failback": Fixed(
        "false", "differs", "Artemis's default is true; the guide's restarted master rejoins as a slave",
        "allow-failback"),
}

#: the JDBC shared store's <database-store> (config.py, ArtemisDatabase)
ARTEMIS_JDBC = {f"store/database-store/{tag}": Fixed(value, kind, why, tag) for tag, value, kind, why in (
    ("jdbc-driver-class-name", "org.postgresql.Driver", "needed", "the database the harness runs"),
    ("jdbc-connection-url", VARIES, "needed", "the private PostgreSQL"),
    ("jdbc-user", VARIES, "needed", "the private PostgreSQL"),
    ("jdbc-password", VARIES, "needed", "the private PostgreSQL"),
    ("bindings-table-name", "BINDINGS", "equal", "Artemis's default"),
    ("message-table-name", "MESSAGES", "equal", "Artemis's default"),
    ("large-message-table-name", "LARGE_MESSAGES", "equal", "Artemis's default"),
    ("page-store-table-name", "PAGE_STORE", "equal", "Artemis's default"),
    ("node-manager-store-table-name", "NODE_MANAGER_STORE", "equal", "Artemis's default"),
    ("jdbc-lock-renew-period", VARIES, "needed", "the topology's keep-alive"),
    ("jdbc-lock-expiration", VARIES, "needed", "the topology's lease"),
    ("jdbc-network-timeout", VARIES, "needed", "the lease, as Artemis asks of a shared store (config.py)"),
)}

ACTIVEMQ_SINGLE = {
    "broker@brokerName": Fixed(VARIES, "needed", "MBean names carry it"),
    "broker@persistent": Fixed("false", "differs", "ActiveMQ's default is true (KahaDB): a broker alone keeps "
                               "messages in memory, so nothing survives between tests; the shapes that restart a "
                               "broker (shared store, persistent networks) write true with their store",
                               "persistent", {
                                   "EXP-DLQ-1": "names the message's persistence, not the broker's store; the "
                                                "test passes on ActiveMQ, which dead-letters it from memory"}),
    "broker@useJmx": Fixed("true", "equal", "ActiveMQ's default; the counters are read over JMX"),
    "broker@schedulerSupport": Fixed("false", "equal", "ActiveMQ's default; true with a redelivery policy "
                                     "(the redeliveryPlugin needs it)", "schedulerSupport"),
    "broker@advisorySupport": Fixed("true", "equal", "ActiveMQ's default; false only when a topology sets it",
                                    "advisorySupport"),
    "broker@useShutdownHook": Fixed("true", "equal", "ActiveMQ's default"),
    "broker@dataDirectory": Fixed(VARIES, "needed", "the broker's work directory"),
    "destinationPolicy/policyMap/policyEntries/policyEntry[queue=>]@prioritizedMessages": Fixed(
        "true", "differs", "ActiveMQ's default is false; Q-PRIO-1 is about the enabled behaviour and a PolicyMap "
        "gives a destination one entry, so every queue entry carries it (policy.py); equal-priority sends, as "
        "every other statement's test makes, keep their order either way", "prioritizedMessages",
        {"Q-PRIO-1": "checks the enabled behaviour only; its 'off by default' clause is not asserted on any "
                     "target (the reference broker orders by priority by default)"}),
    "managementContext/managementContext@createConnector": Fixed(
        "false", "needed", "ActiveMQ's own connector binds every interface; the JDK agent on loopback serves "
                           "JMX instead (process.py)"),
    "systemUsage/systemUsage/memoryUsage/memoryUsage@limit": Fixed(
        "512 mb", "differs", "the harness's broker-wide limit (ActiveMQ's BrokerService default: 1 GB) "
        "within the JVM's heap; statements about memory set a destination's limit or the scenario's "
        "memory_limit", "memoryUsage"),
    "systemUsage/systemUsage/storeUsage/storeUsage@limit": Fixed("1 gb", "differs", "ActiveMQ's default 100 GB "
                                                                 "is cut down to the disk at start with a "
                                                                 "warning; no statement is about store limits",
                                                                 "storeUsage"),
    "systemUsage/systemUsage/tempUsage/tempUsage@limit": Fixed("1 gb", "differs", "as storeUsage (default 50 GB)",
                                                               "tempUsage"),
    "transportConnectors/transportConnector[stomp]@uri": Fixed(
        "transport.closeAsync=false", "differs", "ActiveMQ's Stomp page advises it for STOMP's short-lived "
        "connections (the default closes sockets asynchronously, which many quick connections can exhaust)",
        "closeAsync"),
    "transportConnectors/transportConnector[openwire]@uri": Fixed("", "needed", "bridges, JMX-free readiness "
                                                                  "and the real clients"),
    "transportConnectors/transportConnector[mqtt]@uri": Fixed("", "needed", "the MQTT listener"),
    "transportConnectors/transportConnector[amqp]@uri": Fixed(
        "transport.transformer=jms", "equal", "the 5.17.2 transport's own default (AmqpWireFormat); written so a "
        "build defaulting to native (which hands a STOMP or OpenWire consumer the encoded AMQP sections) maps "
        "bodies the same way (process.py)", "transformer"),
}

#: a network's brokers open STOMP and OpenWire only
ACTIVEMQ_NETWORK_NODE = {
    **{k: v for k, v in ACTIVEMQ_SINGLE.items() if not k.startswith("destinationPolicy")
       and not k.endswith(("[mqtt]@uri", "[amqp]@uri"))},
    "systemUsage/systemUsage/memoryUsage/memoryUsage@limit": Fixed("96 mb", "differs", "as a broker alone's, "
                                                                   "sized to the network broker's smaller heap",
                                                                   "memoryUsage"),
}

#: a shared-store node adds its KahaDB store (persistent="true"); lockKeepAlivePeriod and the
#: locker's lockAcquireSleepInterval come from the topology's SharedStore, always given there
_MEMORY_LIMIT = "systemUsage/systemUsage/memoryUsage/memoryUsage@limit"
ACTIVEMQ_SHARED_STORE_NODE = {
    **ACTIVEMQ_NETWORK_NODE,
    "broker@persistent": Fixed("true", "equal", "ActiveMQ's default"),
    _MEMORY_LIMIT: ACTIVEMQ_SINGLE[_MEMORY_LIMIT],
    "persistenceAdapter/kahaDB@directory": Fixed(VARIES, "needed", "the directory the group shares"),
    "persistenceAdapter/kahaDB@lockKeepAlivePeriod": Fixed(VARIES, "needed", "the topology's keep-alive",
                                                           "lockKeepAlivePeriod"),
    "persistenceAdapter/kahaDB/locker/shared-file-locker@lockAcquireSleepInterval": Fixed(
        VARIES, "needed", "the topology's acquire interval", "lockAcquireSleepInterval"),
}

ACTIVEMQ_JDBC_STORE = {
    "jdbcPersistenceAdapter@dataSource": Fixed("#brokerconf-ds", "needed", "the data source bean beside <broker>"),
    "jdbcPersistenceAdapter@createTablesOnStartup": Fixed("true", "equal", "ActiveMQ's default",
                                                          "createTablesOnStartup"),
    "jdbcPersistenceAdapter@lockKeepAlivePeriod": Fixed(VARIES, "needed", "the topology's keep-alive",
                                                        "lockKeepAlivePeriod"),
    "jdbcPersistenceAdapter/locker/lease-database-locker@lockAcquireSleepInterval": Fixed(
        VARIES, "needed", "the topology's acquire interval", "lockAcquireSleepInterval"),
    "jdbcPersistenceAdapter/locker/lease-database-locker@maxAllowableDiffFromDBTime": Fixed(
        "0", "equal", "ActiveMQ's default", "maxAllowableDiffFromDBTime"),
}

REFERENCE_SINGLE = {
    "name": Fixed(VARIES, "needed", "the broker's name"),
    "http": Fixed("None", "needed", "no statistics listener in-process (the counters are read directly)"),
    "stomp": Fixed(VARIES, "needed", "a free loopback port"),
    "mqtt": Fixed(VARIES, "needed", "a free loopback port"),
    "amqp": Fixed(VARIES, "needed", "a free loopback port"),
    "policy_entries": Fixed("[]", "needed", "the scenario's policies (none here)"),
    "address_settings": Fixed("[]", "needed", "the scenario's group settings (none here)"),
    "expiry_check_period_ms": Fixed("100", "differs", "the reference's sweep every second (like ActiveMQ's "
                                    "expireMessagesPeriod, 30 s) is a timer whose number no statement is about; "
                                    "short so expiry tests need not wait", "expiry_check_period"),
}


def _as_alone(*keys: str) -> dict:
    """The entries a node shares with a reference broker alone."""
    return {key: REFERENCE_SINGLE[key] for key in keys}


REFERENCE_NETWORK_NODE = {
    **_as_alone("name", "stomp", "expiry_check_period_ms"),
    "policy_entries": Fixed("[]", "needed", "the topology's bridge filter policies (none here)"),
    "advisory_support": Fixed("True", "equal", "ActiveMQ's default (advisorySupport true), which the reference "
                              "broker keeps off for a broker alone; a topology that sets advisorySupport=false "
                              "overrides it", "advisorySupport"),
}

REFERENCE_CLUSTER_NODE = {
    **_as_alone("name", "stomp", "mqtt", "amqp", "expiry_check_period_ms"),
    "advisory_support": Fixed("False", "equal", "the reference broker's own default: an Artemis-style cluster "
                              "learns demand over its cluster link, not from ActiveMQ advisories",
                              "advisory_support"),
}

INVENTORIES = {
    "artemis single": ARTEMIS_SINGLE, "artemis cluster member": ARTEMIS_CLUSTER_MEMBER, "artemis ha": ARTEMIS_HA,
    "artemis jdbc": ARTEMIS_JDBC, "activemq single": ACTIVEMQ_SINGLE, "activemq network node": ACTIVEMQ_NETWORK_NODE,
    "activemq shared-store node": ACTIVEMQ_SHARED_STORE_NODE, "activemq jdbc store": ACTIVEMQ_JDBC_STORE,
    "reference single": REFERENCE_SINGLE, "reference network node": REFERENCE_NETWORK_NODE,
    "reference cluster node": REFERENCE_CLUSTER_NODE,
}

# --------------------------------------------------------------------------- what the renderers write

NS = {"c": "urn:activemq:core"}
#: a scenario that sets nothing but opens every listener (each has its own fixed parameters)
DEFAULT = Scenario(name="defaults", protocols=("stomp", "mqtt", "amqp"))


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _query(url: str) -> str:
    """An acceptor or connector URL's parameters, without its (varying) host and port."""
    split = urlsplit(url.split("?", 1)[0] + "?" + url.split("?", 1)[1].replace(";", "&")) if "?" in url else None
    return "" if split is None else ";".join(f"{k}={v}" for k, v in parse_qsl(split.query))


def _artemis_items(element: ET.Element, prefix: str = "") -> dict[str, str]:
    """``path -> value`` of every leaf under ``element``: an element with a name or match attribute
    is keyed by it, repeated leaves of one path are joined (sorted), acceptor URLs reduced to their
    parameters."""
    found: dict[str, list[str]] = {}
    for child in element:
        if not isinstance(child.tag, str):
            continue  # a comment
        key = _local(child.tag)
        label = child.get("name") or child.get("match")
        if label is not None and key not in ("permission",):
            key += f"[{label}]"
        path = f"{prefix}/{key}" if prefix else key
        if key.startswith("address[") and prefix == "addresses":
            queues = [f"{_local(kind.tag)} queue {q.get('name')}" for kind in child for q in kind]
            found.setdefault(path, []).append(", ".join(queues))
        elif len(child):
            for sub, value in _artemis_items(child, path).items():
                found.setdefault(sub, []).append(value)
        elif key == "permission":
            found.setdefault(path, []).append(child.get("type"))
        elif key.startswith("acceptor["):
            found.setdefault(path, []).append(_query(child.text or ""))
        else:
            found.setdefault(path, []).append(child.text or "")
    return {path: ",".join(sorted(values)) for path, values in found.items()}


def _activemq_items(element: ET.Element, prefix: str = "") -> dict[str, str]:
    """``path@attribute -> value`` of every attribute under ``element`` (a connector's URI reduced
    to its parameters); elements keyed by their name / queue / topic attribute."""
    found: dict[str, str] = {}
    for child in element:
        if not isinstance(child.tag, str):
            continue
        key = _local(child.tag)
        label = child.get("name") or (f"queue={child.get('queue')}" if child.get("queue") else None)
        if label is not None:
            key += f"[{label}]"
        path = f"{prefix}/{key}" if prefix else key
        for attribute, value in child.attrib.items():
            if attribute in ("name", "queue") and label is not None:
                continue
            found[f"{path}@{attribute}"] = _query(value) if attribute == "uri" else value
        found.update(_activemq_items(child, path))
    return found


def _broker_items(config_xml: str) -> dict[str, str]:
    broker = ET.fromstring(config_xml).find("{http://activemq.apache.org/schema/core}broker")
    items = {f"broker@{attribute}": value for attribute, value in broker.attrib.items()}
    items.update(_activemq_items(broker))
    return items


def _artemis_config(**options):
    return artemis_render(DEFAULT, name="n-A", host="127.0.0.1", admin=("adm", "pw"),
                          ports={"core": 1001, "stomp": 1002, "mqtt": 1004, "amqp": 1005}, **options)


def _artemis_core(config) -> ET.Element:
    return ET.fromstring(config.broker_xml()).find("c:core", NS)


def written_artemis_single() -> dict[str, str]:
    return _artemis_items(_artemis_core(_artemis_config()))


def written_artemis_cluster_member() -> dict[str, str]:
    """What a cluster member's broker.xml has beyond a broker alone's, both discoveries, every
    option unset (what launch_cluster renders: the topology's redistribution delay, None)."""
    single = written_artemis_single()
    found: dict[str, str] = {}
    for discovery in ("static", "udp"):
        topology = Topology(("A", "B"), cluster=ClusterConnection(discovery=discovery))
        fragment = cluster_xml(topology, "A", host="127.0.0.1", core_ports={"A": 1001, "B": 1003},
                               credentials=("u", "p"), udp=UdpGroup.fresh() if discovery == "udp" else None)
        config = replace(_artemis_config(), cluster_xml=fragment, redistribution_delay_ms=None)
        member = _artemis_items(_artemis_core(config))
        assert "address-settings/address-setting[#]/redistribution-delay" not in member
        found.update({k: v for k, v in member.items() if k not in single})
    return found


def written_artemis_ha() -> dict[str, str]:
    single = written_artemis_single()
    found: dict[str, str] = {}
    for role in ("primary", "backup"):
        items = _artemis_items(_artemis_core(_artemis_config(ha_policy=role, data_directory="/shared")))
        found.update({k: v for k, v in items.items() if k not in single})
    return found


def written_artemis_jdbc() -> dict[str, str]:
    single = written_artemis_single()
    database = ArtemisDatabase("jdbc:postgresql://127.0.0.1:5432/db", "user", "password")
    items = _artemis_items(_artemis_core(_artemis_config(ha_policy="primary", database=database)))
    return {k: v for k, v in items.items() if k not in single and not k.startswith("ha-policy/")}


def written_activemq_single(tmp: Path) -> dict[str, str]:
    # as ActiveMQTarget.launch: the scenario's fragments, JMX on, OpenWire always
    process = ActiveMQProcess(tmp / "single", jmx=True, openwire=True, mqtt=True, amqp=True,
                              **activemq_render(DEFAULT).process_options())
    return _broker_items(process.render_config())


def written_activemq_network_node(tmp: Path) -> dict[str, str]:
    return _broker_items(ActiveMQNetwork(tmp / "network", ("A", "B")).nodes["A"].process.render_config())


def written_activemq_shared_store_node(tmp: Path) -> dict[str, str]:
    # as SharedStoreGroup makes its nodes (the topology's SharedStore timings)
    process = ActiveMQProcess(tmp / "node-A", openwire=True, persistent=True, jmx=True, jvm_heap_mb=384,
                              kahadb_directory=tmp / "store", lock_keep_alive_period_ms=2000,
                              lock_acquire_sleep_interval_ms=1000)
    return _broker_items(process.render_config())


def written_activemq_jdbc_store() -> dict[str, str]:
    store = JdbcStore("jdbc:postgresql://127.0.0.1:5432/db", "user", "password", lock_keep_alive_period_ms=2000,
                      lock_acquire_sleep_interval_ms=1000)
    return _activemq_items(ET.fromstring(f"<a>{store.persistence_xml()}</a>"))


def written_reference_single() -> dict[str, str]:
    return {key: str(value) for key, value in scenario_config(Scenario(name="d", protocols=("stomp", "mqtt", "amqp")),
                                                              name="r").items()}


def _node_config(node: ReferenceNode) -> dict[str, str]:
    try:
        return {key: str(value) for key, value in node.config_data.items()}
    finally:
        node.close()  # a node starts its loop thread when made; never started, it just ends that


def written_reference_network_node() -> dict[str, str]:
    return _node_config(ReferenceNode("A", "nob-A"))


def written_reference_cluster_node() -> dict[str, str]:
    return _node_config(ReferenceClusterNode("A", "cl-A", extra_config={}))


def written(inventory: str, tmp: Path) -> dict[str, str]:
    makers = {
        "artemis single": written_artemis_single, "artemis cluster member": written_artemis_cluster_member,
        "artemis ha": written_artemis_ha, "artemis jdbc": written_artemis_jdbc,
        "activemq single": lambda: written_activemq_single(tmp),
        "activemq network node": lambda: written_activemq_network_node(tmp),
        "activemq shared-store node": lambda: written_activemq_shared_store_node(tmp),
        "activemq jdbc store": written_activemq_jdbc_store,
        "reference single": written_reference_single, "reference network node": written_reference_network_node,
        "reference cluster node": written_reference_cluster_node,
    }
    return makers[inventory]()


# --------------------------------------------------------------------------- the checks


@pytest.mark.parametrize("inventory", sorted(INVENTORIES))
def test_every_value_a_template_writes_on_its_own_is_listed_with_its_reason(inventory, tmp_path):
    listed = INVENTORIES[inventory]
    got = written(inventory, tmp_path)
    unlisted = {path: value for path, value in got.items() if path not in listed}
    assert not unlisted, (f"{inventory}: the template writes values no scenario set and this inventory does not "
                          f"list: {unlisted}. List each with why it may stay (equal / needed / differs), or leave "
                          "it out unless the scenario sets it")
    gone = sorted(set(listed) - set(got))
    assert not gone, f"{inventory}: listed but no longer written (drop them from the inventory): {gone}"
    changed = {path: (listed[path].value, got[path]) for path in got
               if listed[path].value != VARIES and listed[path].value != got[path]}
    assert not changed, f"{inventory}: listed value -> written value changed: {changed}"


def test_each_listed_value_says_why_it_may_stay():
    for inventory, items in INVENTORIES.items():
        for path, item in items.items():
            assert item.kind in ("equal", "needed", "differs"), (inventory, path, item.kind)
            assert item.why.strip(), (inventory, path)


def searched_option(path: str, item: Fixed) -> str:
    """The name the catalogue is searched for: ``item.option``, else the path's last element,
    attribute or key when it is hyphenated, camelCase or snake_case (a plain word such as "name" or
    "uri" is everywhere in the documents' prose; such an item gives ``option`` when it matters)."""
    if item.option:
        return item.option
    leaf = path.rsplit("/", 1)[-1]
    leaf = leaf.split("@", 1)[1] if "@" in leaf else re.sub(r"\[.*\]$", "", leaf)
    return leaf if re.search(r"[-_A-Z]", leaf) else ""


def _statements_about_a_default_naming(option: str, catalogue) -> set[str]:
    name = re.compile(rf"(?<![\w-]){re.escape(option)}(?![\w-])", re.IGNORECASE)
    return {s.id for s in catalogue.values()
            if name.search(f"{s.section} {s.paraphrase}") and "default" in s.paraphrase.lower()}


def test_no_catalogued_default_statement_names_a_listed_value_unacknowledged():
    catalogue = load_catalogue()
    problems = []
    for inventory, items in INVENTORIES.items():
        for path, item in items.items():
            option = searched_option(path, item)
            if not option:
                continue
            about = _statements_about_a_default_naming(option, catalogue)
            if about != set(item.acknowledged):
                problems.append(f"{inventory} {path} ({option}): statements naming it with 'default' "
                                f"{sorted(about)}, acknowledged {sorted(item.acknowledged)}")
    assert not problems, ("a statement about a default may be checked under a value the harness writes; make the "
                          "option a scenario option left out unless set, or acknowledge why its test is "
                          "unaffected:\n" + "\n".join(problems))


def test_the_catalogue_search_finds_a_statement_about_a_default():
    # the check above is void if the search cannot find what it looks for: CLU-REDIST-4 is about
    # redistribution-delay's default, and the cluster options' statements about theirs
    catalogue = load_catalogue()
    assert "CLU-REDIST-4" in _statements_about_a_default_naming("redistribution-delay", catalogue)
    assert _statements_about_a_default_naming("check-period", catalogue)
    assert not _statements_about_a_default_naming("no-such-option-anywhere", catalogue)
    # configuration names are searched, plain words only when an item names them
    assert searched_option("broker@useJmx", Fixed("true", "equal", "x")) == "useJmx"
    assert searched_option("address-settings/address-setting[#]/max-size-bytes", Fixed("-1", "equal", "x")) == \
        "max-size-bytes"
    assert searched_option("name", Fixed(VARIES, "needed", "x")) == ""
    assert searched_option("broker@persistent", Fixed("false", "differs", "x", "persistent")) == "persistent"
