"""The Artemis target's launch-mode choice, capabilities and reasons (no JVM, no Docker)."""

from __future__ import annotations

from conformance.targets.artemis.target import (
    CONTAINER_CAPABILITIES,
    PROCESS_CAPABILITIES,
    STOMP_UNSUPPORTED,
    ArtemisTarget,
)
from conformance.targets.base import CAPABILITIES
from conformance.targets.registry import BUILTIN, resolve
from conformance.topology import TOPOLOGY_CAPABILITIES

INSTALLED = lambda: (True, "")  # noqa: E731
MISSING = lambda: (False, "the Artemis 2.40.0 distribution is not installed in .tools/artemis")  # noqa: E731


def test_registry_names_the_three_artemis_targets():
    assert {"artemis", "artemis:process", "artemis:container"} <= set(BUILTIN)
    assert (resolve("artemis:process").launch_requested, resolve("artemis:container").launch_requested) == \
        ("process", "container")


def test_plain_artemis_prefers_the_process_then_the_container():
    assert ArtemisTarget(process_check=INSTALLED, image_check=lambda i: (True, "")).launch_mode == "process"
    fallback = ArtemisTarget(process_check=MISSING, image_check=lambda i: (True, ""))
    assert fallback.launch_mode == "container" and fallback.availability() == (True, "")


def test_neither_way_says_both_reasons():
    target = ArtemisTarget(process_check=MISSING, image_check=lambda i: (False, "image apache/activemq-artemis missing"))
    ok, reason = target.availability()
    assert not ok and "not installed" in reason and "image apache/activemq-artemis missing" in reason


def test_requirement_follows_the_launch():
    assert ArtemisTarget(launch="process", process_check=INSTALLED).requirement == "artemis"
    assert ArtemisTarget(launch="container", image_check=lambda i: (True, "")).requirement == "docker"


def test_capabilities_are_known_and_classic_only_ones_say_why():
    process = ArtemisTarget(launch="process", process_check=INSTALLED)
    # the topologies come from the target's table: a shared store and clusters, and a JDBC shared
    # store on top where PostgreSQL and its driver are installed
    topology = set(process.capabilities()) & set(TOPOLOGY_CAPABILITIES)
    assert process.capabilities() - topology == PROCESS_CAPABILITIES
    assert topology - {"topology.jdbc-store"} == {"topology.shared-store", "topology.cluster"}
    assert PROCESS_CAPABILITIES | {"topology.jdbc-store"} <= set(CAPABILITIES)
    assert CONTAINER_CAPABILITIES < PROCESS_CAPABILITIES
    for missing in ("counters.subscription", "slow_consumer.eviction", "memory.limits", "topology.network",
                    "exclusive_consumers"):
        assert missing not in PROCESS_CAPABILITIES and process.why_missing(missing), missing
    assert {"prefetch", "exclusive", "priority"} == set(STOMP_UNSUPPORTED)
