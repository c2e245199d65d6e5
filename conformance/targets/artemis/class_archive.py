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
import tempfile
from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.artemis.dist import home, installed
from conformance.targets.artemis.process import ArtemisProcess, ArtemisStartError, JolokiaError, class_archive

__all__ = ["ClassArchiveError", "ensure"]


class ClassArchiveError(RuntimeError):
    """The archive could not be made; the message says why."""


def _say(message: str) -> None:
    print(f"brokerconf: {message}", file=sys.stderr, flush=True)


def ensure(artemis_home: Path | None = None, progress=_say, timeout: float = 180) -> Path:
    """The archive of ``artemis_home``'s launches (default: the installed distribution), made now
    when there is none for the current key."""
    artemis_home = Path(artemis_home) if artemis_home else home()
    ok, reason = installed(artemis_home.parent.parent)
    if not ok:
        raise ClassArchiveError(reason)
    archive = class_archive(artemis_home)
    if archive.exists():
        return archive.path
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    staging = archive.staging_path()
    progress(f"making the Artemis JVMs' class archive {archive.path.name} (one broker launch) ...")
    with tempfile.TemporaryDirectory(prefix="brokerconf-artemis-classes-") as work:
        broker = ArtemisProcess(Path(work), Scenario(name="class-archive", protocols=("stomp", "mqtt", "amqp")),
                                artemis_home=artemis_home, class_archive_dump=staging)
        try:
            broker.start(timeout=timeout)
            broker.jolokia({"type": "read", "mbean": f'org.apache.activemq.artemis:broker="{broker.name}"',
                            "attribute": "Version"})
        except (ArtemisStartError, JolokiaError) as exc:
            staging.unlink(missing_ok=True)
            raise ClassArchiveError(f"the broker launched to make the archive failed: {exc}") from exc
        finally:
            broker.stop()  # SIGTERM: the JVM writes the archive on its way out
        if not archive.publish(staging):
            raise ClassArchiveError(f"the broker exited without writing {staging}; its log's tail:\n"
                                    + broker.log_tail(3000))
    progress(f"made {archive.path} ({archive.path.stat().st_size // (1 << 20)} MiB)")
    return archive.path


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.targets.artemis.class_archive`` (for bootstrap.sh): exit 1 with a
    warning when it could not be made (launches then start without it)."""
    try:
        print(ensure())
    except (ClassArchiveError, OSError) as exc:
        print(f"brokerconf: warning: no class archive for the Artemis JVMs (they start more slowly): {exc}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
