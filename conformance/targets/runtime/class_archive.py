"""Class-data sharing archives for the broker JVMs the harness launches (JDK 17 dynamic CDS).

A test run launches a few hundred broker JVMs on a CPU-bound 2-core machine, and each spends most
of its start-up loading, parsing and verifying the same classes. A dynamic archive
(``-XX:ArchiveClassesAtExit``, written when one JVM exits) holds them already parsed and verified;
a JVM started with ``-XX:SharedArchiveFile`` maps it instead. Measured on Artemis 2.40 with the
Jolokia agent (benchmarks/artemis_launch_cpu.py, medians of 3 interleaved launches): 3.87 s of CPU
to STOMP CONNECTED without an archive, 3.13 s with one; 3.14 s and 2.28 s of wall time.

An archive is made once per *key*: the JDK (`java_identity`), and whatever the caller says the
archived classes depend on (the distribution, the agent); a changed JDK or distribution gets a new
key, so no archive is ever invalidated in place. The JVM checks an archive itself too and, finding
it does not match, starts without it (``-Xshare:auto``, the default) after a warning line, so a
stale archive costs speed, never a start. Archives are made at set-up (scripts/bootstrap.sh, `brokerconf
targets install`), by launching one broker and stopping it cleanly; a launch that finds none for its
key starts without one. ``BROKERCONF_JVM_CLASS_ARCHIVES=0`` turns their use off.

A JVM with a ``-javaagent`` may only dump or use an archive with ``AllowArchivingWithJavaAgent``
(a diagnostic option), and the setting must be the same at both ends, so it is part of both sets
of options when ``with_agent``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from conformance.targets.runtime.jvm import java_identity
from machinery.tools_cache import TOOLS_DIR

__all__ = ["ARCHIVES_DIR", "ClassArchive", "ClassArchiveError", "USE_ENV", "command_line", "make_by_one_launch", "say"]

ARCHIVES_DIR = TOOLS_DIR / "class-archives"
#: set to "0" to launch broker JVMs without their class archives
USE_ENV = "BROKERCONF_JVM_CLASS_ARCHIVES"
_AGENT_OPTIONS = ("-XX:+UnlockDiagnosticVMOptions", "-XX:+AllowArchivingWithJavaAgent")


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one kind of broker JVM (``name``), keyed by the JDK and ``depends_on``."""

    name: str
    depends_on: dict = field(default_factory=dict)
    with_agent: bool = False
    directory: Path = ARCHIVES_DIR

    @property
    def key(self) -> str:
        material = json.dumps({"java": java_identity(), "with_agent": self.with_agent, **self.depends_on},
                              sort_keys=True, default=str)
        return hashlib.sha256(material.encode()).hexdigest()[:16]

    @property
    def path(self) -> Path:
        return Path(self.directory) / f"{self.name}-{self.key}.jsa"

    def exists(self) -> bool:
        return self.path.is_file()

    def use_options(self) -> list[str]:
        """The JVM options that map the archive; none when it is not made yet or use is off."""
        if os.environ.get(USE_ENV, "1") == "0" or not self.exists():
            return []
        return [*self._agent_options(), f"-XX:SharedArchiveFile={self.path}"]

    def staging_path(self) -> Path:
        """A unique file a dumping JVM writes (several processes may make the same archive at once;
        `publish` renames the first complete one into place)."""
        return self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")

    def dump_options(self, staging: Path) -> list[str]:
        """The JVM options that write the classes a run loads into ``staging`` when it exits."""
        return [*self._agent_options(), f"-XX:ArchiveClassesAtExit={staging}"]

    def publish(self, staging: Path) -> bool:
        """Put a dumped archive in place (atomically); False when the JVM wrote none."""
        if not staging.is_file() or staging.stat().st_size == 0:
            staging.unlink(missing_ok=True)
            return False
        os.replace(staging, self.path)
        return True

    def _agent_options(self) -> list[str]:
        return list(_AGENT_OPTIONS) if self.with_agent else []


class ClassArchiveError(RuntimeError):
    """An archive could not be made; the message says why."""


class _DumpingBroker(Protocol):
    def start(self, timeout: float) -> None: ...
    def stop(self) -> None: ...
    def log_tail(self, lines: int = 50) -> str: ...


def make_by_one_launch(archive: ClassArchive, *, kind: str, launch: Callable[[Path, Path], _DumpingBroker],
                       exercise: Callable[[_DumpingBroker], None], failures: tuple[type[BaseException], ...],
                       progress: Callable[[str], None], timeout: float) -> Path:
    """``archive``'s path, made now when it is not there: ``launch(workdir, staging)`` gives a broker
    of ``kind`` whose JVM dumps to ``staging``; it is started, ``exercise``-d (so it loads what a
    test's launch loads) and stopped with SIGTERM, and the JVM writes the archive on its way out.
    One of ``failures`` on the way becomes a ClassArchiveError."""
    if archive.exists():
        return archive.path
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    staging = archive.staging_path()
    progress(f"making the {kind} JVMs' class archive {archive.path.name} (one broker launch) ...")
    with tempfile.TemporaryDirectory(prefix=f"brokerconf-{kind.lower()}-classes-") as work:
        broker = launch(Path(work), staging)
        try:
            broker.start(timeout=timeout)
            exercise(broker)
        except failures as exc:
            staging.unlink(missing_ok=True)
            raise ClassArchiveError(f"the broker launched to make the archive failed: {exc}") from exc
        finally:
            broker.stop()  # SIGTERM: the JVM writes the archive on its way out
        if not archive.publish(staging):
            raise ClassArchiveError(f"the broker exited without writing {staging}; its log's tail:\n"
                                    + broker.log_tail(30))
    progress(f"made {archive.path} ({archive.path.stat().st_size // (1 << 20)} MiB)")
    return archive.path


def say(message: str) -> None:
    """The set-up's progress line (stderr, so ``python -m ...class_archive`` prints only the path)."""
    print(f"brokerconf: {message}", file=sys.stderr, flush=True)


def command_line(ensure: Callable[[], Path], kind: str) -> int:
    """``python -m conformance.targets.<broker>.class_archive`` (for bootstrap.sh): the archive's
    path, or exit 1 with a warning when it could not be made (launches then start without it)."""
    try:
        print(ensure())
    except (ClassArchiveError, OSError) as exc:
        print(f"brokerconf: warning: no class archive for the {kind} JVMs (they start more slowly): {exc}",
              file=sys.stderr)
        return 1
    return 0
