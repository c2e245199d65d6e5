"""Make the class-data archive every local Artemis launch maps (runtime/class_archive.py says why).

One broker of the installed distribution is launched with ``-XX:ArchiveClassesAtExit``, made to
load what a test's launch loads (its acceptors for every protocol, a STOMP session as its readiness
check, a management read through the Jolokia agent) and stopped with SIGTERM; the JVM writes the
archive as it exits, and it is renamed into place. scripts/bootstrap.sh runs this after the
distribution is installed (``python -m conformance.targets.artemis.class_archive``), as does
``brokerconf targets install artemis``; with an archive for the current key already there it does
nothing. A launch that finds no archive starts without one, so a failure here costs speed only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.artemis.dist import home, installed
from conformance.targets.artemis.process import ArtemisProcess, ArtemisStartError, JolokiaError, class_archive
from conformance.targets.runtime.class_archive import ClassArchiveError, command_line, make_by_one_launch, say

__all__ = ["ClassArchiveError", "ensure"]


def _read_version(broker: ArtemisProcess) -> None:
    """A management read through the Jolokia agent, as the tests' counters are read."""
    broker.jolokia({"type": "read", "mbean": f'org.apache.activemq.artemis:broker="{broker.name}"',
                    "attribute": "Version"})


def ensure(artemis_home: Path | None = None, progress=say, timeout: float = 180) -> Path:
    """The archive of ``artemis_home``'s launches (default: the installed distribution), made now
    when there is none for the current key."""
    artemis_home = Path(artemis_home) if artemis_home else home()
    ok, reason = installed(artemis_home.parent.parent)
    if not ok:
        raise ClassArchiveError(reason)

    def launch(work: Path, staging: Path) -> ArtemisProcess:
        return ArtemisProcess(work, Scenario(name="class-archive", protocols=("stomp", "mqtt", "amqp")),
                              artemis_home=artemis_home, class_archive_dump=staging)

    return make_by_one_launch(class_archive(artemis_home), kind="Artemis", launch=launch, exercise=_read_version,
                              failures=(ArtemisStartError, JolokiaError), progress=progress, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.targets.artemis.class_archive`` (for bootstrap.sh): exit 1 with a
    warning when it could not be made (launches then start without it)."""
    return command_line(ensure, "Artemis")


if __name__ == "__main__":
    sys.exit(main())
