"""Artemis configuration from a `Scenario`: the ``broker.xml`` of a local broker instance
(`artemis.process`), and the ``<address-setting>`` elements the container launcher
(`artemis.container`) adds to its image's ``broker.xml``.

What each part of the scenario becomes (Artemis 2.40 documentation, chapters named):

==============================  ==================================================================
scenario                        broker.xml
==============================  ==================================================================
protocols stomp / mqtt / amqp   one acceptor each on its own free loopback port ("Configuring the
                                Transport"), plus a core acceptor for Artemis's own tools
policy ``group_buckets``        ``default-group-buckets``   ("Message Grouping")
policy ``group_rebalance``      ``default-group-rebalance`` ("Message Grouping")
policy ``group_first_key``      ``default-group-first-key`` ("Message Grouping")
policy ``maximum_redeliveries`` ``max-delivery-attempts`` = N + 1 ("Message Redelivery and
                                Undelivered Messages": Artemis counts every delivery, ActiveMQ
                                Classic's maximumRedeliveries counts the ones after the first)
users                           ``artemis-users.properties`` / ``-roles.properties`` (role
                                ``amq``) and one ``security-setting`` giving that role every
                                permission; no users = anonymous login (``artemis create
                                --allow-anonymous``)
==============================  ==================================================================

Always set, for every address (``#``): dead letters go to the ``DLQ`` address and expired
messages to ``ExpiryQueue`` (both pre-created anycast queues, as ``artemis create`` writes them),
``redelivery-delay`` 0, queues and addresses auto-created and never auto-deleted (so counters of a
drained queue stay readable), ``redistribution-delay`` 0 (only matters in a cluster; a cluster
member gets its topology's value and its cluster elements from artemis/cluster.py).

Destination names. The acceptors carry the prefixes that turn the harness's canonical names into
Artemis routing types ("Address Model", "Using Prefixes to Determine Routing Type"): STOMP
``/queue/X`` and AMQP ``queue://X`` are the anycast address X, ``/topic/X`` and ``topic://X`` the
multicast address X; MQTT topic ``a/b`` is the multicast address ``a.b`` (Artemis's MQTT mapping).
So one destination is the same Artemis address whichever protocol names it.

Refused by name (`UnsupportedArtemisPolicy`): ActiveMQ Classic settings with no Artemis
counterpart of the same meaning: topic pending-message limits and eviction strategies
(Artemis has no per-subscriber pending limit; it pages or blocks a whole address), per-destination
and broker-wide memory limits and producer flow control (Artemis's ``max-size-bytes`` /
``global-max-size`` with ``address-full-policy`` page or block an address, a different contract
from Classic's per-destination memory usage). A scenario using one cannot run on Artemis, and
the reason names the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from conformance.scenario import DestinationPolicy, Scenario

__all__ = ["UnsupportedArtemisPolicy", "artemis_match", "address_settings_xml", "ArtemisConfig", "render",
           "DEAD_LETTER_ADDRESS", "EXPIRY_ADDRESS", "ROLE", "FRAGMENT_MARK"]

#: the addresses `artemis create` pre-creates and points every address at
DEAD_LETTER_ADDRESS = "DLQ"
EXPIRY_ADDRESS = "ExpiryQueue"
#: the role `artemis create` gives its user, and which management.xml lets read MBeans
ROLE = "amq"
#: marks the generated address settings (the container's start script greps for it)
FRAGMENT_MARK = "brokerconf address settings"

_GROUP_FIELDS = {"group_buckets": "default-group-buckets", "group_rebalance": "default-group-rebalance",
                 "group_first_key": "default-group-first-key"}
_CLASSIC_ONLY = ("pending_message_limit", "prefetch_rate_multiplier", "eviction", "eviction_property",
                 "memory_limit", "producer_flow_control")
_PERMISSIONS = ("createNonDurableQueue", "deleteNonDurableQueue", "createDurableQueue", "deleteDurableQueue",
                "createAddress", "deleteAddress", "consume", "browse", "send", "manage")


class UnsupportedArtemisPolicy(ValueError):
    """A scenario field has no Artemis setting of the same meaning; the message names the field."""


def artemis_match(pattern: str) -> str:
    """``queue://grp.>`` -> ``grp.#``: ActiveMQ wildcards in Artemis syntax (``.`` separates words,
    ``*`` one word, ``#`` any number; ActiveMQ's ``>`` is Artemis's ``#``)."""
    name = pattern.partition("://")[2]
    return ".".join("#" if word == ">" else word for word in name.split("."))


def _setting_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value))


def _policy_settings(policy: DestinationPolicy) -> dict[str, str]:
    unsupported = [f for f in _CLASSIC_ONLY if getattr(policy, f) is not None]
    if unsupported:
        raise UnsupportedArtemisPolicy(
            f"policy {policy.pattern!r} sets {', '.join(unsupported)}: an ActiveMQ Classic setting with no Artemis "
            "address setting of the same meaning (Artemis maps group_buckets, group_rebalance, group_first_key and "
            "maximum_redeliveries; see conformance/targets/artemis/config.py)")
    settings = {element: _setting_value(getattr(policy, f)) for f, element in _GROUP_FIELDS.items()
                if getattr(policy, f) is not None}
    if policy.maximum_redeliveries is not None:
        if policy.maximum_redeliveries < 0:
            # Classic's -1 (redeliver forever) is Artemis's max-delivery-attempts -1
            settings["max-delivery-attempts"] = "-1"
        else:
            settings["max-delivery-attempts"] = str(policy.maximum_redeliveries + 1)
    return settings


def _by_match(policies: tuple[DestinationPolicy, ...]) -> dict[str, dict[str, str]]:
    by_match: dict[str, dict[str, str]] = {}
    for policy in policies:
        settings = _policy_settings(policy)
        if not settings:
            continue
        match = artemis_match(policy.pattern)
        earlier = by_match.setdefault(match, {})
        clash = [k for k in settings if k in earlier and earlier[k] != settings[k]]
        if clash:
            raise UnsupportedArtemisPolicy(
                f"policies give the Artemis address {match!r} different {clash[0]} values ({earlier[clash[0]]} and "
                f"{settings[clash[0]]}); queue:// and topic:// patterns with one name share an address in Artemis")
        earlier.update(settings)
    return by_match


def address_settings_xml(policies: tuple[DestinationPolicy, ...]) -> str:
    """``<address-setting>`` elements for the policies' Artemis fields ("" when none has any).

    Raises `UnsupportedArtemisPolicy` naming the first field Artemis cannot be given, or two
    policies that give one address different values."""
    by_match = _by_match(tuple(policies))
    if not by_match:
        return ""
    lines = [f"<!-- {FRAGMENT_MARK} (generated; see conformance/targets/artemis/config.py) -->"]
    for match, settings in by_match.items():
        lines.append(f"<address-setting match={quoteattr(match)}>")
        lines += [f"   <{k}>{v}</{k}>" for k, v in settings.items()]
        lines.append("</address-setting>")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ broker.xml of a local instance

#: acceptor URL parameters per listener (the first three as `artemis create` writes them)
_ACCEPTOR_PARAMS = {
    "core": "protocols=CORE",
    "stomp": "protocols=STOMP;anycastPrefix=/queue/;multicastPrefix=/topic/",
    "mqtt": "protocols=MQTT",
    "amqp": "protocols=AMQP;anycastPrefix=queue://;multicastPrefix=topic://;amqpCredits=1000;amqpLowCredits=300",
}


@dataclass(frozen=True)
class ArtemisConfig:
    """Everything the launcher writes into an instance's ``etc/`` for one scenario."""

    name: str
    host: str
    ports: dict[str, int]  # listener (core, stomp, mqtt, amqp) -> port
    users: tuple[tuple[str, str], ...]  # scenario users, role amq
    admin: tuple[str, str]  # the instance user (management over Jolokia)
    policies: tuple[DestinationPolicy, ...] = field(default=())
    journal_sync: bool = True  # journal-datasync: a confirmed persistent send survives a kill -9
    # Scenario(tls=True): the PKCS12 keystore and its password for the ``*_ssl`` acceptors
    tls_keystore: str | None = None
    tls_password: str | None = None
    #: shared-store HA ("High Availability and Failover", "Shared Store"): "primary" or "backup"
    #: on one set of data directories (``data_directory``, shared by the pair); None: no HA policy
    ha_policy: str | None = None
    data_directory: str = "data"
    #: the JDBC shared store (Artemis "Persistence", "JDBC Persistence"; HA "Shared Store" on a
    #: database): messages, bindings and the node manager's lock in PostgreSQL tables
    database: "ArtemisDatabase | None" = None
    #: the ``redistribution-delay`` of every address (ms; -1 never): matters in a cluster only
    #: ("Message Redistribution"); the cluster launcher gives the topology's value, None when the
    #: topology leaves it unset (the element is then left out: Artemis's default applies)
    redistribution_delay_ms: int | None = 0
    #: ``(match, delay_ms)``: address settings with a redistribution-delay of their own (Artemis
    #: merges them over ``#``: the most specific match's value wins)
    redistribution_delays: tuple[tuple[str, int], ...] = ()
    #: ``<core>`` elements a cluster member adds (connectors, cluster credentials, broadcast and
    #: discovery groups, cluster connection, grouping handler, scale-down ha-policy): rendered by
    #: artemis/cluster.py, "" for a broker alone
    cluster_xml: str = ""
    #: ``journal-file-size``: each journal file is written out in full when created (min-files of
    #: them at the first start), so on a slow store (the simulated NFS) it is start-up time
    journal_file_size: str = "10M"

    @property
    def anonymous(self) -> bool:
        return not self.users

    def acceptors_xml(self) -> str:
        lines = []
        for listener, port in self.ports.items():
            protocol, _, secure = listener.partition("_")
            params = _ACCEPTOR_PARAMS[protocol]
            if secure == "ssl":
                # "Configuring the Transport", TLS parameters of an acceptor: a second acceptor per
                # protocol with sslEnabled and the keystore (PKCS12, which Java 17 reads)
                params += (f";sslEnabled=true;keyStorePath={self.tls_keystore};keyStorePassword={self.tls_password}"
                           ";keyStoreType=PKCS12")
            url = f"tcp://{self.host}:{port}?{params}"
            lines.append(f"         <acceptor name={quoteattr(listener)}>{escape(url)}</acceptor>")
        return "\n".join(lines)

    def broker_xml(self) -> str:
        scenario_settings = address_settings_xml(self.policies)
        indented = "\n".join("         " + line for line in scenario_settings.splitlines())
        for match, delay in self.redistribution_delays:
            indented += (f"\n         <address-setting match={quoteattr(match)}>"
                         f"<redistribution-delay>{int(delay)}</redistribution-delay></address-setting>")
        permissions = "\n".join(f'            <permission type="{p}" roles="{ROLE}"/>' for p in _PERMISSIONS)
        redistribution = ("" if self.redistribution_delay_ms is None else
                          f"            <redistribution-delay>{int(self.redistribution_delay_ms)}</redistribution-delay>\n")
        return f"""<?xml version='1.0'?>
<!-- generated by brokerconf (conformance/targets/artemis/config.py) for one scenario -->
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
               xsi:schemaLocation="urn:activemq /schema/artemis-configuration.xsd">
   <core xmlns="urn:activemq:core">
      <name>{escape(self.name)}</name>
      <persistence-enabled>true</persistence-enabled>
      <journal-type>NIO</journal-type>
      <journal-datasync>{'true' if self.journal_sync else 'false'}</journal-datasync>
      <journal-min-files>2</journal-min-files>
      <journal-pool-files>10</journal-pool-files>
      <journal-file-size>{escape(self.journal_file_size)}</journal-file-size>
      <journal-buffer-timeout>100000</journal-buffer-timeout>
      <paging-directory>{escape(self.data_directory)}/paging</paging-directory>
      <bindings-directory>{escape(self.data_directory)}/bindings</bindings-directory>
      <journal-directory>{escape(self.data_directory)}/journal</journal-directory>
      <large-messages-directory>{escape(self.data_directory)}/large-messages</large-messages-directory>
{self.ha_policy_xml()}{self.database.store_xml() if self.database is not None else ""}{self.cluster_xml}      <!-- a busy shared machine must not make the broker halt itself (its default policy) -->
      <critical-analyzer>false</critical-analyzer>
      <max-disk-usage>100</max-disk-usage>
      <security-enabled>true</security-enabled>
      <acceptors>
{self.acceptors_xml()}
      </acceptors>
      <security-settings>
         <security-setting match="#">
{permissions}
         </security-setting>
      </security-settings>
      <address-settings>
{indented}
         <address-setting match="#">
            <dead-letter-address>{DEAD_LETTER_ADDRESS}</dead-letter-address>
            <expiry-address>{EXPIRY_ADDRESS}</expiry-address>
            <redelivery-delay>0</redelivery-delay>
{redistribution}            <auto-create-queues>true</auto-create-queues>
            <auto-create-addresses>true</auto-create-addresses>
            <auto-delete-queues>false</auto-delete-queues>
            <auto-delete-addresses>false</auto-delete-addresses>
            <address-full-policy>PAGE</address-full-policy>
            <max-size-bytes>-1</max-size-bytes>
         </address-setting>
      </address-settings>
      <addresses>
         <address name="{DEAD_LETTER_ADDRESS}"><anycast><queue name="{DEAD_LETTER_ADDRESS}"/></anycast></address>
         <address name="{EXPIRY_ADDRESS}"><anycast><queue name="{EXPIRY_ADDRESS}"/></anycast></address>
      </addresses>
   </core>
</configuration>
"""

    def ha_policy_xml(self) -> str:
        """The shared-store ``<ha-policy>`` (Artemis 2.40 "High Availability and Failover", "Shared
        Store"), or nothing. ``failover-on-shutdown``: the backup also takes over when the primary
        is stopped cleanly, as a slave does in the A-MQ guide's 3.1 ("shut down or failed"). The
        backup's ``allow-failback`` is false: a restarted primary then waits for the lock instead of
        taking the store back, the guide's "rejoins as a slave" (with Artemis's default, true, the
        backup would hand the store back to the restarted primary). Artemis has no setting for how
        often the lock is polled or re-checked (its FileLockNodeManager uses fixed periods), so the
        topology's lock timings do not reach it."""
        if self.ha_policy is None:
            return ""
        if self.ha_policy == "primary":
            role = "<primary><failover-on-shutdown>true</failover-on-shutdown></primary>"
        elif self.ha_policy == "backup":
            role = ("<backup><allow-failback>false</allow-failback>"
                    "<failover-on-shutdown>true</failover-on-shutdown></backup>")
        else:
            raise ValueError(f"ha_policy must be 'primary', 'backup' or None, not {self.ha_policy!r}")
        return f"      <ha-policy><shared-store>{role}</shared-store></ha-policy>\n"

    def users_properties(self) -> str:
        # PropertiesLoginModule takes plain-text passwords as well as ENC(...) hashes
        return "".join(f"{u} = {p}\n" for u, p in (self.admin, *self.users))

    def roles_properties(self) -> str:
        return f"{ROLE} = {','.join(u for u, _ in (self.admin, *self.users))}\n"


@dataclass(frozen=True)
class ArtemisDatabase:
    """A ``<database-store>`` on PostgreSQL. ``lock_renew_period_ms`` / ``lock_expiration_ms``:
    Artemis's jdbc-lock-renew-period (default 2000) and jdbc-lock-expiration (default 20000), the
    lease the live renews and a backup waits out: the topology's keep-alive and lease."""

    jdbc_url: str
    user: str
    password: str
    lock_renew_period_ms: int = 2000
    lock_expiration_ms: int = 20000

    @property
    def network_timeout_ms(self) -> int:
        """Artemis's jdbc-network-timeout (default 20000): how long a JDBC call may wait on the
        network. Artemis recommends it no longer than jdbc-lock-expiration with a shared store, and
        warns at start when it is not (JdbcNodeManager: "jdbc-network-timeout isn't properly
        configured"): a renewal stuck on a slow link for longer than the lease would let a primary
        serve on after its backup took over. So it is the lease here."""
        return int(self.lock_expiration_ms)

    def store_xml(self) -> str:
        rows = [("jdbc-driver-class-name", "org.postgresql.Driver"), ("jdbc-connection-url", self.jdbc_url),
                ("jdbc-user", self.user), ("jdbc-password", self.password),
                ("bindings-table-name", "BINDINGS"), ("message-table-name", "MESSAGES"),
                ("large-message-table-name", "LARGE_MESSAGES"), ("page-store-table-name", "PAGE_STORE"),
                ("node-manager-store-table-name", "NODE_MANAGER_STORE"),
                ("jdbc-lock-renew-period", str(int(self.lock_renew_period_ms))),
                ("jdbc-lock-expiration", str(int(self.lock_expiration_ms))),
                ("jdbc-network-timeout", str(self.network_timeout_ms))]
        inner = "".join(f"\n            <{tag}>{escape(value)}</{tag}>" for tag, value in rows)
        return f"      <store>\n         <database-store>{inner}\n         </database-store>\n      </store>\n"


def render(scenario: Scenario, *, name: str, host: str, ports: dict[str, int],
           admin: tuple[str, str], tls_keystore: str | None = None, tls_password: str | None = None,
           ha_policy: str | None = None, data_directory: str = "data",
           database: ArtemisDatabase | None = None, journal_file_size: str = "10M") -> ArtemisConfig:
    """The instance configuration for ``scenario``; raises `UnsupportedArtemisPolicy` naming what
    Artemis cannot express, before anything starts."""
    if scenario.memory_limit is not None:
        raise UnsupportedArtemisPolicy(
            f"scenario {scenario.name!r} sets memory_limit: ActiveMQ Classic's broker-wide memory usage has no "
            "Artemis setting of the same meaning (global-max-size pages or blocks addresses instead)")
    config = ArtemisConfig(name=name, host=host, ports=dict(ports), users=tuple(scenario.users), admin=admin,
                           policies=tuple(scenario.policies), tls_keystore=tls_keystore, tls_password=tls_password,
                           ha_policy=ha_policy, data_directory=data_directory, database=database,
                           journal_file_size=journal_file_size)
    if any(listener.endswith("_ssl") for listener in ports) and not tls_keystore:
        raise UnsupportedArtemisPolicy(f"scenario {scenario.name!r}: TLS acceptors need a keystore")
    names = [u for u, _ in config.users]
    if admin[0] in names:
        raise UnsupportedArtemisPolicy(f"scenario {scenario.name!r} has a user named {admin[0]!r}, the name the "
                                       "launcher keeps for the broker's management user")
    for user, password in config.users:
        if any(c in user for c in "=:#! \n") or "\n" in password:
            raise UnsupportedArtemisPolicy(f"scenario {scenario.name!r}: user name {user!r} cannot be written to "
                                           "artemis-users.properties")
    config.broker_xml()  # raises on unsupported policies now, not at start
    return config
