"""What this machine must have, and how a test reports a thing it needs but cannot find.

On a user's laptop a test whose broker or tool is missing is *skipped*, with the reason: the rest
of the suite still says something. In CI that same skip would be a green run that checked
nothing, so CI declares what must be present::

    BROKERCONF_REQUIRE=activemq,artemis,rabbitmq,mosquitto,toxiproxy,docker

and every test that would skip because one of those is missing *fails* instead, naming it.

A test never calls ``pytest.skip`` for a missing broker or tool itself: it calls
`skip_or_fail(requirement, reason)` (or, for a reason known at collection time, puts
`missing_mark(...)` on the test), so there is one place that decides, and a grep for
``pytest.skip`` finds only skips that are not about the machine (a protocol that cannot express
an operation, a rule documented for another broker).
"""

from __future__ import annotations

import difflib
import os
from typing import NoReturn

import pytest

#: every name BROKERCONF_REQUIRE may hold, and what it stands for
KNOWN: dict[str, str] = {
    "activemq": "ActiveMQ Classic as a local JVM (Debian package activemq)",
    "activemq-amqp": ("ActiveMQ Classic's AMQP transport (activemq-amqp + proton-j fetched into .tools/ by "
                      "`brokerconf targets install activemq-amqp`, on the local broker's class path)"),
    "artemis": "Apache Artemis as a local JVM (the binary distribution from Maven Central)",
    "rabbitmq": "RabbitMQ (Debian package rabbitmq-server)",
    "mosquitto": "Mosquitto (Debian package mosquitto)",
    "toxiproxy": "the real toxiproxy-server (built from the Go module proxy into .tools/bin)",
    "docker": "a running Docker engine with the project's images (docker/build-images.sh)",
    "netns": "iproute2 network namespaces (root)",
    "postgresql": "a PostgreSQL server (Debian package postgresql)",
    "fuse": "FUSE mounts: /dev/fuse, fusermount3 (Debian package fuse3) and mfusepy (the shared store, issue 18)",
    "atheris": "the atheris fuzzer (PyPI, in the test extra; fuzz/)",
    "java-clients": ("the real Java clients (activemq-client, artemis-jms-client) fetched with Maven and brokerconf's "
                     "driver built against each into .tools/java-clients (`python -m conformance.clients.java_build`)"),
}

ENV = "BROKERCONF_REQUIRE"


class UnknownRequirement(ValueError):
    pass


def parse(text: str) -> frozenset[str]:
    """``"activemq, artemis"`` -> {"activemq", "artemis"}; an unknown name is an error with a
    did-you-mean (a typo in CI's list must not quietly require nothing)."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    for name in sorted(names):
        if name not in KNOWN:
            hint = difflib.get_close_matches(name, KNOWN, n=1)
            raise UnknownRequirement(f"{ENV}: unknown requirement {name!r}"
                                     + (f"; did you mean {hint[0]!r}?" if hint else "")
                                     + f" (known: {', '.join(KNOWN)})")
    return names


def required() -> frozenset[str]:
    """The requirements this run declared (empty on a laptop)."""
    return parse(os.environ.get(ENV, ""))


def is_required(requirement: str) -> bool:
    if requirement not in KNOWN:
        raise UnknownRequirement(f"unknown requirement {requirement!r} (known: {', '.join(KNOWN)})")
    return requirement in required()


def target_requirement(target) -> str:
    """The requirement a conformance target stands for: its ``requirement`` attribute where it has
    one (ActiveMQ forced into a container needs ``docker``), else its kind."""
    return getattr(target, "requirement", target.kind)


def failure_message(requirement: str, reason: str) -> str:
    return (f"{requirement} is required here ({ENV}={os.environ.get(ENV, '')}) but missing: {reason} "
            f"(wanted: {KNOWN[requirement]}; install it, or drop it from {ENV})")


def skip_or_fail(requirement: str, reason: str) -> NoReturn:
    """Skip the running test because ``requirement`` is missing, or fail it where it is required."""
    if is_required(requirement):
        pytest.fail(failure_message(requirement, reason), pytrace=False)
    pytest.skip(reason)


def missing_mark(requirement: str, reason: str | None) -> pytest.MarkDecorator:
    """A mark for a test whose requirement is known missing at collection (``reason`` not None):
    skip with the reason, or, where it is required, an xfail-free mark that makes the test fail at
    set-up. ``reason`` None (present) gives a mark that does nothing."""
    if reason is None:
        return pytest.mark.brokerconf_requirement_present
    if is_required(requirement):
        return pytest.mark.brokerconf_required_missing(failure_message(requirement, reason))
    return pytest.mark.skip(reason=reason)


def check_required_marks(item: pytest.Item) -> None:
    """Called from set-up: a test carrying `missing_mark` for a required thing fails here."""
    mark = item.get_closest_marker("brokerconf_required_missing")
    if mark is not None:
        pytest.fail(mark.args[0], pytrace=False)
