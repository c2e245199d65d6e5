"""Target names -> targets: the built-in ones and those of a user's targets file.

Built-in names: ``reference`` (in-process), ``reference:process``, ``activemq`` (a local process
when the Debian package is installed, else a container; the matrix records which),
``activemq:process`` and ``activemq:container`` (force one), ``rabbitmq``, ``mosquitto``,
``artemis`` (a local JVM when the distribution is installed in .tools/artemis, else a container;
`conformance.targets.artemis.target`), ``artemis:process`` and ``artemis:container`` (force one).

A targets file (``--targets-file``, TOML) names brokers that are already running::

    [target.staging-amq]
    kind = "activemq"          # whose documented rules apply (reference, activemq, artemis, ...)
    host = "127.0.0.1"
    stomp = 61613              # a port per protocol it speaks
    mqtt = 1883
    login = "admin"            # optional credentials
    passcode = "admin"
    capabilities = ["groups", "transactions"]   # features you vouch for (protocol.* come from the ports)
    tls = { ca_file = "ca.pem" }   # optional: the ports are TLS listeners (also cert_file, key_file,
                                   # server_name; files relative to this file); adds the tls capability

An external broker is never configured by the harness, so tests needing a scenario's policies are
not applicable to it, and its counters cannot be read.
"""

from __future__ import annotations

import difflib
from typing import Callable

from conformance.targets.activemq.target import ActiveMQTarget
from conformance.targets.artemis.target import ArtemisTarget
from conformance.targets.base import Target, UnknownTarget
from conformance.targets.external import ExternalTarget, load_targets_file
from conformance.targets.mosquitto.target import MosquittoTarget
from conformance.targets.rabbitmq.target import RabbitMQTarget
from conformance.targets.reference.target import ReferenceTarget

__all__ = ["BUILTIN", "FACTORIES", "UnknownTarget", "builtin_target", "load_targets_file", "resolve"]

#: built-in target name -> the factory of its target
FACTORIES: dict[str, Callable[[], Target]] = {
    "reference": ReferenceTarget,
    "reference:process": lambda: ReferenceTarget(name="reference:process", launch="process"),
    "activemq": lambda: ActiveMQTarget(name="activemq", launch="auto"),
    "activemq:process": lambda: ActiveMQTarget(name="activemq:process", launch="process"),
    "activemq:container": lambda: ActiveMQTarget(name="activemq:container", launch="container"),
    "rabbitmq": RabbitMQTarget,
    "mosquitto": MosquittoTarget,
    "artemis": lambda: ArtemisTarget(name="artemis", launch="auto"),
    "artemis:process": lambda: ArtemisTarget(name="artemis:process", launch="process"),
    "artemis:container": lambda: ArtemisTarget(name="artemis:container", launch="container"),
}
BUILTIN = tuple(FACTORIES)


def builtin_target(name: str) -> Target:
    try:
        return FACTORIES[name]()
    except KeyError:
        raise UnknownTarget(name) from None


def resolve(name: str, external: dict[str, ExternalTarget] | None = None) -> Target:
    """The target called ``name``; UnknownTarget says which names exist (with a did-you-mean)."""
    external = external or {}
    if name in external:
        return external[name]
    if name in BUILTIN:
        return builtin_target(name)
    known = [*BUILTIN, *external]
    hint = difflib.get_close_matches(name, known, n=1)
    raise UnknownTarget(f"unknown target {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                        + f" (known: {', '.join(known)})")
