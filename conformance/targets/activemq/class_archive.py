"""Make the class-data archive every local ActiveMQ launch maps (runtime/class_archive.py says why,
activemq/class_path.py why it maps under every launch's class path).

One broker of the installation is launched with ``-XX:ArchiveClassesAtExit`` and the base class
path alone, made to load what a test's launch loads (its STOMP, OpenWire and, when installed, AMQP
connectors, the JDK's JMX agent the target always starts, a STOMP session sending and receiving a
persistent message through KahaDB) and stopped with SIGTERM; the JVM writes the archive as it exits,
and it is renamed into place. Its MQTT connector stays closed: on the base class path alone
``lib/activemq-mqtt.jar``'s classes cannot see the mqtt-client jar's, so an MQTT launch loads
those classes itself. scripts/bootstrap.sh runs this (``python -m
conformance.targets.activemq.class_archive``), as does ``brokerconf targets install activemq``;
with an archive for the current key already there it does nothing. A launch that finds no archive
starts without one, so a failure here costs speed only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.clients import ClientError, connect
from conformance.targets.activemq.process import (
    ActiveMQNotInstalled,
    ActiveMQProcess,
    ActiveMQStartError,
    activemq_amqp_available,
    activemq_available,
    installed_class_archive,
)
from conformance.targets.runtime.class_archive import ClassArchiveError, command_line, make_by_one_launch, say

__all__ = ["ClassArchiveError", "ensure"]


def _stomp_session(broker: ActiveMQProcess) -> None:
    """Send one persistent message to a queue and receive it with a client acknowledgement."""
    with connect(broker.host, broker.stomp_port, "stomp", timeout=30) as client:
        consumer = client.subscribe("queue://brokerconf.class-archive", ack="client")
        client.send("queue://brokerconf.class-archive", "classes")
        message = consumer.receive(timeout=30)
        if message is None:
            raise ClassArchiveError("the broker launched to make the archive delivered no message")
        consumer.ack(message)
        consumer.close()


def _launch(work: Path, staging: Path) -> ActiveMQProcess:
    return ActiveMQProcess(work, name="class-archive", stomp=True, openwire=True,
                           amqp=activemq_amqp_available()[0], jmx=True, persistent=True,
                           jvm_heap_mb=256, class_archive_dump=staging)


def ensure(progress=say, timeout: float = 120) -> Path:
    """The archive of the installation's launches, made now when there is none for the current key."""
    ok, reason = activemq_available()
    if not ok:
        raise ClassArchiveError(reason)
    return make_by_one_launch(installed_class_archive(), kind="ActiveMQ", launch=_launch, exercise=_stomp_session,
                              failures=(ActiveMQNotInstalled, ActiveMQStartError, ClientError, OSError, ClassArchiveError),
                              progress=progress, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.targets.activemq.class_archive`` (for bootstrap.sh): exit 1 with a
    warning when it could not be made (launches then start without it)."""
    return command_line(ensure, "ActiveMQ")


if __name__ == "__main__":
    sys.exit(main())
