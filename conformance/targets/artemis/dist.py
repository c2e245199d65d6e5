"""The Apache Artemis binary distribution, fetched with Maven and cached under ``.tools/artemis/``.

The version and the archive's sha512 are pinned in ``pins.toml`` (section ``[artemis]``). Maven
resolves the archive through the machine's own settings (its mirror configuration), so no
registry host is written here:

    mvn -q -B dependency:copy -Dartifact=GROUP:ARTIFACT:VERSION:PACKAGING:CLASSIFIER -DoutputDirectory=DIR

Layout of the cache (all re-used on the next run)::

    .tools/artemis/apache-artemis-<version>-bin.tar.gz      the archive as Maven copied it
    .tools/artemis/apache-artemis-<version>/                the unpacked distribution (bin/artemis)
    .tools/artemis/apache-artemis-<version>/.brokerconf-verified
                                                            marker: the archive it came from matched
                                                            the pinned sha512 (holds the digest)
    .tools/artemis/jolokia-agent-jvm-<version>-javaagent.jar (+ its marker)
                                                            how a local launch serves its counters
                                                            (artemis/jolokia_agent.py)

The archive is hashed once, when it is unpacked; afterwards the marker (with the pinned digest in
it) says the tree came from a verified archive, so a warm start costs a file read. A pin change
(new version or digest) makes the marker stale and the archive is checked again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from machinery.tools_cache import PINS_FILE as PINS
from machinery.tools_cache import TOOLS_DIR as TOOLS
from machinery.tools_cache import (MavenCopyError, MavenPin, UnsafeArchiveError, extract_tar, maven_copy, maven_pin,
                                   sha512_of)
from conformance.targets.artemis import jolokia_agent
MARKER = ".brokerconf-verified"


class ArtemisDistError(RuntimeError):
    """The distribution could not be fetched, verified or unpacked; the message says what to do."""


class ArtemisPin(MavenPin):
    """The distribution's pin (pins.toml ``[artemis]``)."""

    @property
    def archive_name(self) -> str:
        return self.file_name


def pin(path: Path = PINS) -> ArtemisPin:
    return ArtemisPin(**vars(maven_pin("artemis", path)))


#: the local image docker/build-images.sh (docker/artemis/build.sh) builds from the pinned
#: distribution: same ports, variables, instance directory and entrypoint as the official image;
#: never pulled by availability checks. $BROKERCONF_ARTEMIS_IMAGE picks another image, e.g. the
#: official ``apache/activemq-artemis`` (REFERENCES.md, "ActiveMQ Artemis") where it can be pulled.
ARTEMIS_IMAGE = os.environ.get("BROKERCONF_ARTEMIS_IMAGE") or f"brokerconf/artemis:{pin().version}"


def cache_dir(tools: Path | None = None) -> Path:
    return Path(tools or TOOLS) / "artemis"


def home(tools: Path | None = None, p: ArtemisPin | None = None) -> Path:
    """ARTEMIS_HOME: the unpacked distribution (may not exist yet)."""
    p = p or pin()
    return cache_dir(tools) / f"apache-artemis-{p.version}"


def installed(tools: Path | None = None, p: ArtemisPin | None = None,
              agent: jolokia_agent.AgentPin | None = None) -> tuple[bool, str]:
    """(True, "") when the verified distribution is unpacked here with the Jolokia agent a local
    launch reads its counters through (artemis/jolokia_agent.py), and Java runs; else the reason."""
    p = p or pin()
    where = home(tools, p)
    marker = where / MARKER
    if not (where / "bin" / "artemis").is_file():
        return False, (f"the Artemis {p.version} distribution is not installed in {where} "
                       "(run `brokerconf targets install artemis`, or scripts/bootstrap.sh)")
    try:
        verified = marker.read_text(encoding="utf-8").strip()
    except OSError:
        verified = ""
    if verified != p.sha512:
        return False, (f"{where} was not unpacked from an archive matching the pinned sha512 "
                       "(run `brokerconf targets install artemis` to verify it again)")
    if shutil.which("java") is None:
        return False, "java not found on PATH: Artemis 2.40 needs a Java 17 runtime (Debian: openjdk-17-jre-headless)"
    return jolokia_agent.installed(tools, agent)


def _say(message: str) -> None:
    print(f"brokerconf: {message}", file=sys.stderr, flush=True)


def fetch_archive(p: ArtemisPin, dest_dir: Path, run=subprocess.run, progress=_say) -> Path:
    """The archive in ``dest_dir``, copied there by Maven when it is not already."""
    try:
        return maven_copy(p.coordinates, p.archive_name, dest_dir, label=f"Apache Artemis {p.version}", run=run,
                          progress=progress)
    except MavenCopyError as exc:
        raise ArtemisDistError(str(exc)) from None


def _unpack(archive: Path, target: Path, p: ArtemisPin) -> None:
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(archive, "r:gz") as tar:
        try:
            extract_tar(tar, staging)
        except UnsafeArchiveError as exc:
            raise ArtemisDistError(f"{archive}: {exc}") from None
    top = staging / f"apache-artemis-{p.version}"
    if not (top / "bin" / "artemis").is_file():
        raise ArtemisDistError(f"{archive} has no apache-artemis-{p.version}/bin/artemis")
    shutil.rmtree(target, ignore_errors=True)
    top.rename(target)
    shutil.rmtree(staging, ignore_errors=True)


def ensure_distribution(tools: Path | None = None, run=subprocess.run, progress=_say,
                        p: ArtemisPin | None = None, agent: jolokia_agent.AgentPin | None = None) -> Path:
    """ARTEMIS_HOME, fetched, verified and unpacked when needed, and the Jolokia agent beside it
    (quick when cached)."""
    p = p or pin()
    target = home(tools, p)
    try:
        jolokia_agent.ensure(tools, run=run, progress=progress, p=agent)
    except jolokia_agent.JolokiaAgentError as exc:
        raise ArtemisDistError(str(exc)) from None
    if installed(tools, p, agent)[0]:
        return target
    archive = fetch_archive(p, cache_dir(tools), run=run, progress=progress)
    progress(f"verifying {archive.name} (sha512) ...")
    actual = sha512_of(archive)
    if actual != p.sha512:
        bad = archive.with_name(archive.name + ".bad")
        archive.replace(bad)  # never re-used; the next run downloads again
        raise ArtemisDistError(f"{archive.name}: sha512 {actual} does not match the pin in {PINS} ({p.sha512}); "
                               f"moved aside to {bad}")
    progress(f"unpacking into {target} ...")
    _unpack(archive, target, p)
    (target / MARKER).write_text(p.sha512 + "\n", encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.targets.artemis.dist``: ensure the distribution (for bootstrap.sh)."""
    try:
        print(ensure_distribution())
    except (ArtemisDistError, OSError, tarfile.TarError) as exc:
        print(f"brokerconf: warning: Apache Artemis not installed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
