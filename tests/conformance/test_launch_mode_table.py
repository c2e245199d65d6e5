"""What each target answers in each concrete launch mode, pinned to what the code answered before
the modes became objects (issue 27: `activemq.launch_modes`, `artemis.launch_modes`,
`reference.launch_modes`): capabilities, capability requirements, the reason for every capability
it lacks, the start timeout of one broker and of a group or cluster, and the refusals (TLS in a
container, JDBC or NFS groups in containers).

EXPECTED was computed ONCE from the old code (commit 763165f, before the launch-mode objects) by a
small script that ran `observe` below against that tree with the same fakes, and is written here as
literals; nothing in it is computed from the code under test. Both states of the machine are
pinned: every optional extra installed (MQTT / AMQP jars, the JDBC driver, PostgreSQL) and none.
One deliberate change since: the network's rigs (``topology.discovery``, ``topology.masterslave-
connector``) are variants of the network shape, and when the targets' capabilities came to follow
their shape tables (conformance/targets/runtime/shape_launch.py) they took the network row's
reason, so Artemis now says why it lacks them (it forms clusters, not Classic networks) where the
old code gave none. And a single Artemis container's start timeout is the process's plus 60 s
(`ArtemisContainerLaunch.start_timeout`: its first start runs `artemis create` and the web console
too; two containers missed 120 s in a loaded CI run). Every other answer is the old code's.
No broker starts: each launcher's ``start`` is replaced by one that records its timeout and stops.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.scenario import Scenario
from conformance.targets.activemq import launch_modes as activemq_modes
from conformance.targets.activemq.container import ActiveMQContainer
from conformance.targets.activemq.container_network import SharedVolumePair
from conformance.targets.activemq.process import ActiveMQProcess
from conformance.targets.activemq.shared_store import SharedStoreGroup
from conformance.targets.activemq.target import ActiveMQTarget
from conformance.targets.artemis import cluster as artemis_cluster
from conformance.targets.artemis import container as artemis_container
from conformance.targets.artemis import container_cluster as artemis_container_cluster
from conformance.targets.artemis import process as artemis_process
from conformance.targets.artemis import shared_store as artemis_shared_store
from conformance.targets.artemis.target import ArtemisTarget
from conformance.targets.base import CAPABILITIES, TargetUnavailable
from conformance.targets.reference import handles as reference_handles
from conformance.targets.reference import target as reference_target
from conformance.topology import ClusterConnection, SharedStore, Topology
from machinery import postgres

#: every capability a reason is asked for: the catalogue's, and those only a reason names
ASKED = sorted(set(CAPABILITIES) | {"stomp.group_header", "groups.reset", "topology.masterslave-connector",
                                    "topology.discovery"})


def names(*lines: str) -> frozenset[str]:
    return frozenset(" ".join(lines).split())


class Started(Exception):
    """A launcher's start was reached (with the timeout recorded); nothing runs."""


def fake_machine(monkeypatch, extras: bool) -> None:
    """The optional extras all installed (``extras``) or none; the broker itself is 'installed'
    through the targets' check seams."""
    monkeypatch.setattr(postgres, "availability", lambda: (True, "") if extras else (False, "no postgres here"))
    monkeypatch.setattr(postgres, "JDBC_DRIVER_JAR",
                        Path(__file__).resolve() if extras else Path("/nonexistent/postgresql.jar"))
    monkeypatch.setattr(activemq_modes, "activemq_mqtt_available", lambda: (True, "") if extras else (False, "no mqtt jars"))
    monkeypatch.setattr(activemq_modes, "activemq_amqp_available", lambda: (True, "") if extras else (False, "no amqp jars"))
    monkeypatch.setattr(activemq_modes, "missing_jdbc_jars", lambda: "" if extras else "no jdbc jars")


def record_starts(monkeypatch, classes, seen: list) -> None:
    def start(self, timeout=None, **kw):
        seen.append(timeout)
        raise Started()
    for cls in classes:
        monkeypatch.setattr(cls, "start", start)


def attempt(launch, seen: list):
    """What a launch came to ("started", or the refusal) and the timeouts it started with."""
    try:
        launch()
        outcome = "returned"
    except Started:
        outcome = "started"
    except TargetUnavailable as e:
        outcome = f"TargetUnavailable: {e}"
    except ValueError as e:
        outcome = f"ValueError: {e}"
    timeouts = tuple(seen)
    seen.clear()
    return outcome, timeouts


def answers(target) -> dict:
    return {"launch_mode": target.launch_mode,
            "capabilities": frozenset(target.capabilities()),
            "capability_requirements": dict(target.capability_requirements),
            "why_missing": {c: r for c in ASKED if (r := target.why_missing(c)) is not None}}


def observe_activemq(mode: str, workdir: Path, monkeypatch) -> dict:
    target = ActiveMQTarget(name=f"activemq:{mode}", launch=mode, process_check=lambda: (True, ""),
                            container_check=lambda: (True, ""))
    seen: list = []
    record_starts(monkeypatch, (ActiveMQProcess, ActiveMQContainer, SharedStoreGroup, SharedVolumePair), seen)
    plain, tls = Scenario("s", protocols=("stomp",)), Scenario("t", protocols=("stomp",), tls=True)
    return {
        **answers(target),
        "single": attempt(lambda: target.launch(plain, workdir / "a"), seen),
        # the process launches a TLS broker for real (certificates): only the container's refusal is pinned
        "single_tls": attempt(lambda: target.launch(tls, workdir / "b"), seen)[0] if mode == "container" else "n/a",
        "group": attempt(lambda: target.launch_shared_store(plain, workdir / "c"), seen),
        "group_jdbc": attempt(lambda: target.launch_shared_store(plain, workdir / "d", jdbc=True,
                                                                 lock_keep_alive_period_ms=500), seen),
        "group_adapter": attempt(lambda: target.launch_shared_store(plain, workdir / "e", jdbc_adapter="journaled"),
                                 seen),
        "group_nfs": attempt(lambda: target.launch_shared_store(plain, workdir / "f", nfs=object()), seen),
    }


def observe_artemis(mode: str, workdir: Path, monkeypatch) -> dict:
    target = ArtemisTarget(name=f"artemis:{mode}", launch=mode, process_check=lambda: (True, ""),
                           image_check=lambda image: (True, ""))
    seen: list = []
    record_starts(monkeypatch, (artemis_process.ArtemisProcess, artemis_container.ArtemisContainer), seen)

    def launcher(name):
        def launch(*args, **kw):
            seen.append((name, kw.get("timeout"), kw.get("jvm_heap_mb")))
            raise Started()
        return launch
    monkeypatch.setattr(artemis_cluster, "launch_cluster", launcher("process-cluster"))
    monkeypatch.setattr(artemis_container_cluster, "launch_container_cluster", launcher("container-cluster"))
    monkeypatch.setattr(artemis_shared_store, "launch_shared_store", launcher("shared-store"))
    plain, tls = Scenario("s", protocols=("stomp",)), Scenario("t", protocols=("stomp",), tls=True)
    cluster = Topology(("A", "B"), cluster=ClusterConnection())
    return {
        **answers(target),
        "single": attempt(lambda: target.launch(plain, workdir / "a"), seen),
        "single_tls": attempt(lambda: target.launch(tls, workdir / "b"), seen)[0] if mode == "container" else "n/a",
        "cluster": attempt(lambda: target.launch_topology(cluster, plain, workdir / "c"), seen),
        "cluster_tls": attempt(lambda: target.launch_topology(cluster, tls, workdir / "d"), seen),
        "shared_store": attempt(lambda: target.launch_topology(Topology(("A", "B"), shared_store=SharedStore()),
                                                               plain, workdir / "e"), seen),
        "single_topology": attempt(lambda: target.launch_topology(Topology(("A",)), plain, workdir / "f"), seen),
    }


def observe_reference(mode: str, workdir: Path, monkeypatch) -> dict:
    target = reference_target.ReferenceTarget(name=f"reference:{mode}", launch=mode)
    faultable_seen: list = []
    monkeypatch.setattr(reference_target, "launch_single",
                        lambda *args, faultable: faultable_seen.append(faultable))
    target.launch_topology(Topology(("A",)), Scenario("s"), workdir / "r")
    for name in ("InProcessReference", "ProcessReference"):
        def refuse(self, *args, _name=name, **kw):
            raise Started(_name)
        monkeypatch.setattr(getattr(reference_handles, name), "__init__", refuse)
    with pytest.raises(Started) as started:
        target.launch(Scenario("s"), workdir / "r2")
    return {**answers(target), "faultable": tuple(faultable_seen), "handle": started.value.args[0]}


OBSERVE = {"activemq": observe_activemq, "artemis": observe_artemis, "reference": observe_reference}


@pytest.mark.parametrize("extras", [True, False], ids=["extras-installed", "no-extras"])
@pytest.mark.parametrize("target_mode", ["activemq:process", "activemq:container", "artemis:process",
                                         "artemis:container", "reference:in-process", "reference:process"])
def test_each_launch_mode_answers_as_before(monkeypatch, tmp_path, extras, target_mode):
    fake_machine(monkeypatch, extras)
    kind, mode = target_mode.split(":")
    observed = OBSERVE[kind](mode, tmp_path, monkeypatch)
    expected = EXPECTED[extras][target_mode]
    for key in expected:  # one key at a time, so a failure names what changed
        assert observed[key] == expected[key], f"{target_mode} ({'extras' if extras else 'no extras'}): {key}"
    assert set(observed) == set(expected)


def test_an_unknown_launch_mode_is_refused_as_before():
    # the messages the constructors gave before the modes were objects (same commit)
    with pytest.raises(ValueError) as activemq:
        ActiveMQTarget(launch="vm")
    with pytest.raises(ValueError) as artemis:
        ArtemisTarget(launch="vm")
    with pytest.raises(ValueError) as reference:
        reference_target.ReferenceTarget(launch="container")
    assert str(activemq.value) == str(artemis.value) == "launch must be one of auto, process, container, not 'vm'"
    assert str(reference.value) == "reference target: launch must be 'in-process' or 'process', not 'container'"


def test_the_requirement_follows_the_request_not_the_resolved_mode():
    # "auto" that fell back to the container still asks for the local install (as before)
    missing = lambda: (False, "not installed")  # noqa: E731
    auto = ActiveMQTarget(launch="auto", process_check=missing, container_check=lambda: (True, ""))
    assert (auto.launch_mode, auto.requirement) == ("container", "activemq")
    assert ActiveMQTarget(launch="container", container_check=lambda: (True, "")).requirement == "docker"
    assert ArtemisTarget(launch="auto", process_check=missing, image_check=lambda i: (True, "")).requirement == "artemis"
    assert ArtemisTarget(launch="container", image_check=lambda i: (True, "")).requirement == "docker"


def test_the_table_pins_both_machines_and_every_mode():
    # the literals must not be thinned out unnoticed: six modes, each with reasons and timeouts
    for extras in (True, False):
        assert set(EXPECTED[extras]) == {"activemq:process", "activemq:container", "artemis:process",
                                         "artemis:container", "reference:in-process", "reference:process"}
    assert EXPECTED[True]["activemq:container"]["single"] == ("started", (90.0,))  # 60 s + 30 s for the container
    assert EXPECTED[False]["activemq:process"]["why_missing"]["protocol.amqp"] == "no amqp jars"


# Computed from the old code (see the module's docstring); keys as `observe_*` return them.
EXPECTED = {
    True: {
        'activemq:container': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.reassign_on_close',
                'memory.limits message_priority nack process.kill protocol.mqtt protocol.stomp',
                'scenario.policies selectors slow_consumer.eviction slow_consumer.pending_limit',
                'topology.shared-store transactions'),
            'capability_requirements': {},
            'group': ('started', (120.0,)),
            'group_adapter': ('TargetUnavailable: JDBC groups are launched as local JVMs (activemq:process), not '
                'as containers', ()),
            'group_jdbc': ('TargetUnavailable: JDBC groups are launched as local JVMs (activemq:process), not as '
                'containers', ()),
            'group_nfs': ('TargetUnavailable: the simulated NFS store is mounted on this machine: launch ActiveMQ '
                'as local JVMs (activemq:process) to put a shared store on it', ()),
            'launch_mode': 'container',
            'single': ('started', (90.0,)),
            'single_tls': "TargetUnavailable: ActiveMQ (activemq:container, container) cannot run scenario 't' "
                'over TLS: only the local process launcher opens +ssl connectors',
            'why_missing': {
                'groups.first_key': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'groups.rebalance': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'protocol.amqp': 'the brokerconf/activemq-classic image has no AMQP transport (Debian does not '
                    'package activemq-amqp); run activemq:process with `brokerconf targets install activemq-amqp`',
                'protocol.mqtt': '',
                'stomp.group_header': "ActiveMQ Classic's STOMP MESSAGE frames carry no JMSXGroupID header (its "
                    'STOMP page lists it for SEND only; AMQ-7395)',
                'tls': "only the local process launcher (activemq:process) opens +ssl connectors with the run's "
                    'keystore',
                'topology.discovery': 'networks of ActiveMQ brokers are launched as local processes: use '
                    'activemq:process with the Debian package installed',
                'topology.jdbc-store': 'JDBC master/slave groups are launched as local JVMs (activemq:process)',
                'topology.masterslave-connector': 'networks of ActiveMQ brokers are launched as local processes: '
                    'use activemq:process with the Debian package installed',
                'topology.network': 'networks of ActiveMQ brokers are launched as local processes: use '
                    'activemq:process with the Debian package installed',
            },
        },
        'activemq:process': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.reassign_on_close',
                'memory.limits message_priority nack process.kill protocol.amqp protocol.mqtt protocol.stomp',
                'scenario.policies selectors slow_consumer.eviction slow_consumer.pending_limit tls',
                'topology.discovery topology.jdbc-store topology.masterslave-connector topology.network',
                'topology.shared-store transactions'),
            'capability_requirements': {
                'protocol.amqp': 'activemq-amqp',
                'topology.jdbc-store': 'postgresql',
            },
            'group': ('started', (90.0,)),
            'group_adapter': ("ValueError: jdbc_adapter applies to a kind 'jdbc' shared store, not 'file'", ()),
            'group_jdbc': ('started', (90.0,)),
            'group_nfs': ('started', (90.0,)),
            'launch_mode': 'process',
            'single': ('started', (60.0,)),
            'single_tls': 'n/a',
            'why_missing': {
                'groups.first_key': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'groups.rebalance': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'protocol.mqtt': '',
                'stomp.group_header': "ActiveMQ Classic's STOMP MESSAGE frames carry no JMSXGroupID header (its "
                    'STOMP page lists it for SEND only; AMQ-7395)',
            },
        },
        'artemis:container': {
            'capabilities': names(
                'consumer_priority dead_letter durable_subscriptions expiry groups groups.buckets groups.close',
                'groups.first_key groups.reassign_on_close groups.rebalance message_priority nack process.kill',
                'protocol.amqp protocol.mqtt protocol.stomp scenario.policies selectors topology.cluster',
                'transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'cluster': ('started', (('container-cluster', 240, 256),)),
            'cluster_tls': ("TargetUnavailable: Apache Artemis (container) cannot run scenario 't' over TLS: only "
                'the local process launcher opens TLS acceptors', ()),
            'launch_mode': 'container',
            'shared_store': ('ValueError: target artemis:container lacks topology.shared-store (it cannot launch a'
                ' shared-store topology here)', ()),
            'single': ('started', (180.0,)),
            'single_tls': "TargetUnavailable: Apache Artemis (container) cannot run scenario 't' over TLS: only "
                'the local process launcher opens TLS acceptors',
            'single_topology': ('started', (180.0,)),
            'why_missing': {
                'counters.destination': 'a single Artemis container reads no broker counters (only the nodes of a '
                    'container cluster read theirs, over their published Jolokia)',
                'counters.subscription': 'Artemis keeps no per-subscriber matched / discarded counters (a Classic '
                    'slow-consumer view)',
                'exclusive_consumers': "ActiveMQ Classic's per-consumer exclusive flag; Artemis has exclusive "
                    'queues (a queue setting), not exclusive consumers',
                'groups.reset': 'a single Artemis container has no management channel (resetAllGroups goes over '
                    'Jolokia)',
                'memory.limits': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.eviction': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.pending_limit': 'an ActiveMQ Classic policy with no Artemis setting of the same '
                    'meaning (artemis_config.py)',
                'tls': "only the local process launcher (artemis:process) opens TLS acceptors with the run's "
                    'keystore',
                # these two since the shape tables (see the module's docstring); before, no reason
                'topology.discovery': 'ActiveMQ Classic network connectors; Artemis forms clusters instead '
                    '(another document)',
                'topology.jdbc-store': 'JDBC shared-store pairs are launched as local JVMs (artemis:process)',
                'topology.masterslave-connector': 'ActiveMQ Classic network connectors; Artemis forms clusters '
                    'instead (another document)',
                'topology.network': 'ActiveMQ Classic network connectors; Artemis forms clusters instead (another '
                    'document)',
                'topology.shared-store': 'shared-store pairs are launched as local JVMs (artemis/shared_store.py),'
                    ' not as containers',
            },
        },
        'artemis:process': {
            'capabilities': names(
                'consumer_priority counters.destination dead_letter durable_subscriptions expiry groups',
                'groups.buckets groups.close groups.first_key groups.reassign_on_close groups.rebalance',
                'groups.reset message_priority nack process.kill protocol.amqp protocol.mqtt protocol.stomp',
                'scenario.policies selectors tls topology.cluster topology.jdbc-store topology.shared-store',
                'transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'cluster': ('started', (('process-cluster', 240, 256),)),
            'cluster_tls': ('started', (('process-cluster', 240, 256),)),
            'launch_mode': 'process',
            'shared_store': ('started', (('shared-store', 240, 256),)),
            'single': ('started', (120.0,)),
            'single_tls': 'n/a',
            'single_topology': ('started', (120.0,)),
            'why_missing': {
                'counters.subscription': 'Artemis keeps no per-subscriber matched / discarded counters (a Classic '
                    'slow-consumer view)',
                'exclusive_consumers': "ActiveMQ Classic's per-consumer exclusive flag; Artemis has exclusive "
                    'queues (a queue setting), not exclusive consumers',
                'memory.limits': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.eviction': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.pending_limit': 'an ActiveMQ Classic policy with no Artemis setting of the same '
                    'meaning (artemis_config.py)',
                # these two since the shape tables (see the module's docstring); before, no reason
                'topology.discovery': 'ActiveMQ Classic network connectors; Artemis forms clusters instead '
                    '(another document)',
                'topology.masterslave-connector': 'ActiveMQ Classic network connectors; Artemis forms clusters '
                    'instead (another document)',
                'topology.network': 'ActiveMQ Classic network connectors; Artemis forms clusters instead (another '
                    'document)',
            },
        },
        'reference:in-process': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.first_key',
                'groups.reassign_on_close groups.rebalance groups.reset memory.limits message_priority nack',
                'protocol.amqp protocol.mqtt protocol.stomp scenario.policies selectors slow_consumer.eviction',
                'slow_consumer.pending_limit stomp.group_header tls topology.cluster topology.discovery',
                'topology.jdbc-store topology.masterslave-connector topology.network topology.shared-store',
                'transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'faultable': (False,),
            'handle': 'InProcessReference',
            'launch_mode': 'in-process',
            'why_missing': {
                'process.kill': 'the in-process reference broker cannot be killed: use the reference:process target',
            },
        },
        'reference:process': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.first_key',
                'groups.reassign_on_close groups.rebalance memory.limits message_priority nack process.kill',
                'protocol.amqp protocol.mqtt protocol.stomp scenario.policies selectors slow_consumer.eviction',
                'slow_consumer.pending_limit stomp.group_header tls topology.cluster topology.discovery',
                'topology.jdbc-store topology.masterslave-connector topology.network topology.shared-store',
                'transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'faultable': (True,),
            'handle': 'ProcessReference',
            'launch_mode': 'process',
            'why_missing': {
                'groups.reset': "the reference broker's HTTP listener has no management operations: use the "
                    'in-process target',
            },
        },
    },
    False: {
        'activemq:container': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.reassign_on_close',
                'memory.limits message_priority nack process.kill protocol.mqtt protocol.stomp',
                'scenario.policies selectors slow_consumer.eviction slow_consumer.pending_limit',
                'topology.shared-store transactions'),
            'capability_requirements': {},
            'group': ('started', (120.0,)),
            'group_adapter': ('TargetUnavailable: JDBC groups are launched as local JVMs (activemq:process), not '
                'as containers', ()),
            'group_jdbc': ('TargetUnavailable: JDBC groups are launched as local JVMs (activemq:process), not as '
                'containers', ()),
            'group_nfs': ('TargetUnavailable: the simulated NFS store is mounted on this machine: launch ActiveMQ '
                'as local JVMs (activemq:process) to put a shared store on it', ()),
            'launch_mode': 'container',
            'single': ('started', (90.0,)),
            'single_tls': "TargetUnavailable: ActiveMQ (activemq:container, container) cannot run scenario 't' "
                'over TLS: only the local process launcher opens +ssl connectors',
            'why_missing': {
                'groups.first_key': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'groups.rebalance': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'protocol.amqp': 'the brokerconf/activemq-classic image has no AMQP transport (Debian does not '
                    'package activemq-amqp); run activemq:process with `brokerconf targets install activemq-amqp`',
                'protocol.mqtt': '',
                'stomp.group_header': "ActiveMQ Classic's STOMP MESSAGE frames carry no JMSXGroupID header (its "
                    'STOMP page lists it for SEND only; AMQ-7395)',
                'tls': "only the local process launcher (activemq:process) opens +ssl connectors with the run's "
                    'keystore',
                'topology.discovery': 'networks of ActiveMQ brokers are launched as local processes: use '
                    'activemq:process with the Debian package installed',
                'topology.jdbc-store': 'JDBC master/slave groups are launched as local JVMs (activemq:process)',
                'topology.masterslave-connector': 'networks of ActiveMQ brokers are launched as local processes: '
                    'use activemq:process with the Debian package installed',
                'topology.network': 'networks of ActiveMQ brokers are launched as local processes: use '
                    'activemq:process with the Debian package installed',
            },
        },
        'activemq:process': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.reassign_on_close',
                'memory.limits message_priority nack process.kill protocol.stomp scenario.policies selectors',
                'slow_consumer.eviction slow_consumer.pending_limit tls topology.discovery',
                'topology.masterslave-connector topology.network topology.shared-store transactions'),
            'capability_requirements': {
                'protocol.amqp': 'activemq-amqp',
                'topology.jdbc-store': 'postgresql',
            },
            'group': ('started', (90.0,)),
            'group_adapter': ("ValueError: jdbc_adapter applies to a kind 'jdbc' shared store, not 'file'", ()),
            'group_jdbc': ('TargetUnavailable: no jdbc jars', ()),
            'group_nfs': ('started', (90.0,)),
            'launch_mode': 'process',
            'single': ('started', (60.0,)),
            'single_tls': 'n/a',
            'why_missing': {
                'groups.first_key': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'groups.rebalance': 'an Artemis address setting with no ActiveMQ Classic equivalent',
                'protocol.amqp': 'no amqp jars',
                'protocol.mqtt': 'no mqtt jars',
                'stomp.group_header': "ActiveMQ Classic's STOMP MESSAGE frames carry no JMSXGroupID header (its "
                    'STOMP page lists it for SEND only; AMQ-7395)',
                'topology.jdbc-store': 'no jdbc jars',
            },
        },
        'artemis:container': {
            'capabilities': names(
                'consumer_priority dead_letter durable_subscriptions expiry groups groups.buckets groups.close',
                'groups.first_key groups.reassign_on_close groups.rebalance message_priority nack process.kill',
                'protocol.amqp protocol.mqtt protocol.stomp scenario.policies selectors topology.cluster',
                'transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'cluster': ('started', (('container-cluster', 240, 256),)),
            'cluster_tls': ("TargetUnavailable: Apache Artemis (container) cannot run scenario 't' over TLS: only "
                'the local process launcher opens TLS acceptors', ()),
            'launch_mode': 'container',
            'shared_store': ('ValueError: target artemis:container lacks topology.shared-store (it cannot launch a'
                ' shared-store topology here)', ()),
            'single': ('started', (180.0,)),
            'single_tls': "TargetUnavailable: Apache Artemis (container) cannot run scenario 't' over TLS: only "
                'the local process launcher opens TLS acceptors',
            'single_topology': ('started', (180.0,)),
            'why_missing': {
                'counters.destination': 'a single Artemis container reads no broker counters (only the nodes of a '
                    'container cluster read theirs, over their published Jolokia)',
                'counters.subscription': 'Artemis keeps no per-subscriber matched / discarded counters (a Classic '
                    'slow-consumer view)',
                'exclusive_consumers': "ActiveMQ Classic's per-consumer exclusive flag; Artemis has exclusive "
                    'queues (a queue setting), not exclusive consumers',
                'groups.reset': 'a single Artemis container has no management channel (resetAllGroups goes over '
                    'Jolokia)',
                'memory.limits': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.eviction': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.pending_limit': 'an ActiveMQ Classic policy with no Artemis setting of the same '
                    'meaning (artemis_config.py)',
                'tls': "only the local process launcher (artemis:process) opens TLS acceptors with the run's "
                    'keystore',
                # these two since the shape tables (see the module's docstring); before, no reason
                'topology.discovery': 'ActiveMQ Classic network connectors; Artemis forms clusters instead '
                    '(another document)',
                'topology.jdbc-store': 'JDBC shared-store pairs are launched as local JVMs (artemis:process)',
                'topology.masterslave-connector': 'ActiveMQ Classic network connectors; Artemis forms clusters '
                    'instead (another document)',
                'topology.network': 'ActiveMQ Classic network connectors; Artemis forms clusters instead (another '
                    'document)',
                'topology.shared-store': 'shared-store pairs are launched as local JVMs (artemis/shared_store.py),'
                    ' not as containers',
            },
        },
        'artemis:process': {
            'capabilities': names(
                'consumer_priority counters.destination dead_letter durable_subscriptions expiry groups',
                'groups.buckets groups.close groups.first_key groups.reassign_on_close groups.rebalance',
                'groups.reset message_priority nack process.kill protocol.amqp protocol.mqtt protocol.stomp',
                'scenario.policies selectors tls topology.cluster topology.shared-store transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'cluster': ('started', (('process-cluster', 240, 256),)),
            'cluster_tls': ('started', (('process-cluster', 240, 256),)),
            'launch_mode': 'process',
            'shared_store': ('started', (('shared-store', 240, 256),)),
            'single': ('started', (120.0,)),
            'single_tls': 'n/a',
            'single_topology': ('started', (120.0,)),
            'why_missing': {
                'counters.subscription': 'Artemis keeps no per-subscriber matched / discarded counters (a Classic '
                    'slow-consumer view)',
                'exclusive_consumers': "ActiveMQ Classic's per-consumer exclusive flag; Artemis has exclusive "
                    'queues (a queue setting), not exclusive consumers',
                'memory.limits': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.eviction': 'an ActiveMQ Classic policy with no Artemis setting of the same meaning '
                    '(artemis_config.py)',
                'slow_consumer.pending_limit': 'an ActiveMQ Classic policy with no Artemis setting of the same '
                    'meaning (artemis_config.py)',
                # these two since the shape tables (see the module's docstring); before, no reason
                'topology.discovery': 'ActiveMQ Classic network connectors; Artemis forms clusters instead '
                    '(another document)',
                'topology.jdbc-store': 'the PostgreSQL JDBC driver /nonexistent/postgresql.jar is missing (Debian '
                    'package libpostgresql-jdbc-java)',
                'topology.masterslave-connector': 'ActiveMQ Classic network connectors; Artemis forms clusters '
                    'instead (another document)',
                'topology.network': 'ActiveMQ Classic network connectors; Artemis forms clusters instead (another '
                    'document)',
            },
        },
        'reference:in-process': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.first_key',
                'groups.reassign_on_close groups.rebalance groups.reset memory.limits message_priority nack',
                'protocol.amqp protocol.mqtt protocol.stomp scenario.policies selectors slow_consumer.eviction',
                'slow_consumer.pending_limit stomp.group_header tls topology.cluster topology.discovery',
                'topology.masterslave-connector topology.network topology.shared-store transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'faultable': (False,),
            'handle': 'InProcessReference',
            'launch_mode': 'in-process',
            'why_missing': {
                'process.kill': 'the in-process reference broker cannot be killed: use the reference:process target',
                'topology.jdbc-store': 'no postgres here',
            },
        },
        'reference:process': {
            'capabilities': names(
                'consumer_priority counters.destination counters.subscription dead_letter durable_subscriptions',
                'exclusive_consumers expiry groups groups.buckets groups.close groups.first_key',
                'groups.reassign_on_close groups.rebalance memory.limits message_priority nack process.kill',
                'protocol.amqp protocol.mqtt protocol.stomp scenario.policies selectors slow_consumer.eviction',
                'slow_consumer.pending_limit stomp.group_header tls topology.cluster topology.discovery',
                'topology.masterslave-connector topology.network topology.shared-store transactions'),
            'capability_requirements': {
                'topology.jdbc-store': 'postgresql',
            },
            'faultable': (True,),
            'handle': 'ProcessReference',
            'launch_mode': 'process',
            'why_missing': {
                'groups.reset': "the reference broker's HTTP listener has no management operations: use the "
                    'in-process target',
                'topology.jdbc-store': 'no postgres here',
            },
        },
    },
}
