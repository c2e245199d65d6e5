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
from dataclasses import dataclass, field
from pathlib import Path

from conformance.targets.runtime.jvm import java_identity
from machinery.tools_cache import TOOLS_DIR

__all__ = ["ARCHIVES_DIR", "ClassArchive", "USE_ENV"]

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
