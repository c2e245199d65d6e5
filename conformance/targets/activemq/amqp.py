"""ActiveMQ Classic's AMQP 1.0 transport (activemq-amqp), fetched with Maven into ``.tools/``.

Debian packages ActiveMQ Classic without its AMQP transport. The transport is one jar
(``activemq-amqp``, whose ``META-INF/services/org/apache/activemq/transport/amqp`` names
``AmqpTransportFactory``) plus the AMQP engine it is built on (``proton-j``). ``mvn
dependency:tree`` of activemq-amqp 5.17.2 lists, besides those two, only jars the broker already
ships in ``/usr/share/activemq/lib`` (activemq-broker, activemq-client, activemq-openwire-legacy,
slf4j-api, hawtbuf, jackson-*, the geronimo JMS and J2EE-management specs) and
javax.annotation-api, which the broker runs without (the transport's classes do not reference
it). So exactly the two jars pinned in ``pins.toml`` (``[activemq-amqp]`` and
``[activemq-amqp.dependencies.*]``, each with its sha512) are copied, nothing transitive: a second
copy of a broker jar on the class path could shadow the packaged one.

Layout: ``.tools/activemq-amqp/<version>/lib/<artifact>-<version>.jar``. `installed` verifies the
jar set and every digest each time (two jars, well under a millisecond of hashing each) and that
the installed broker is the pinned version: the transport's classes are compiled against that
broker's internals, so a mismatch is refused rather than risked. `ensure_amqp_transport` fetches
with the machine's own Maven configuration (mirrors, proxies: ``mvn`` reads them) into a staging
directory and moves it into place only after it verified, so an interrupted fetch leaves no half
set behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from conformance.targets.activemq.paths import ACTIVEMQ_HOME
from machinery.tools_cache import PINS_FILE, TOOLS_DIR
from machinery.tools_cache import sha512_of as _sha512
import sys

__all__ = [
    "AmqpTransportError",
    "Jar",
    "broker_version",
    "ensure_amqp_transport",
    "installed",
    "jar_paths",
    "pinned_jars",
]

PIN_SECTION = "activemq-amqp"
INSTALL_HINT = "run `brokerconf targets install activemq-amqp` (needs Maven: `apt-get install maven`)"


class AmqpTransportError(RuntimeError):
    """The AMQP transport cannot be fetched or does not fit the installed broker."""


@dataclass(frozen=True)
class Jar:
    group: str
    artifact: str
    version: str
    sha512: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def _jar(section: dict, where: str, artifact: str | None = None) -> Jar:
    values = {"artifact": artifact, **section}
    missing = [k for k in ("group", "artifact", "version", "sha512") if not values.get(k)]
    if missing:
        raise AmqpTransportError(f"{PINS_FILE} [{where}] lacks {', '.join(missing)}")
    return Jar(str(values["group"]), str(values["artifact"]), str(values["version"]), str(values["sha512"]).lower())


def pinned_jars(pins_file: Path | None = None) -> list[Jar]:
    """The transport jar first, then its dependencies, as pinned in pins.toml."""
    path = pins_file or PINS_FILE
    try:
        pins = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AmqpTransportError(f"cannot read the version pins {path}: {exc}") from None
    section = pins.get(PIN_SECTION)
    if not isinstance(section, dict):
        raise AmqpTransportError(f"{path} has no [{PIN_SECTION}] section")
    dependencies = section.get("dependencies", {})
    main = _jar({k: v for k, v in section.items() if k != "dependencies"}, PIN_SECTION)
    return [main, *(_jar(dep, f"{PIN_SECTION}.dependencies.{name}", name) for name, dep in dependencies.items())]


def broker_version(home: Path | None = None) -> str | None:
    """The installed ActiveMQ Classic's version, from activemq-broker.jar's manifest
    (``Implementation-Version``); None when the jar or the entry is missing."""
    jar = (home or ACTIVEMQ_HOME) / "lib" / "activemq-broker.jar"
    try:
        with zipfile.ZipFile(jar) as z:
            manifest = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Implementation-Version" and value.strip():
            return value.strip()
    return None


def _version_mismatch(jars: list[Jar], home: Path | None) -> str:
    installed_version = broker_version(home)
    wanted = jars[0].version
    if installed_version is None:
        return (f"the AMQP transport goes with an installed ActiveMQ Classic, and none was found "
                f"({(home or ACTIVEMQ_HOME) / 'lib/activemq-broker.jar'} missing or without a version)")
    if installed_version != wanted:
        return (f"the installed ActiveMQ Classic is {installed_version} but {PINS_FILE.name} pins "
                f"{jars[0].artifact} {wanted}; the transport must match the broker it runs in: set "
                f"[{PIN_SECTION}] version (and its sha512) to {installed_version}")
    return ""


def lib_dir(jars: list[Jar] | None = None, tools_dir: Path | None = None) -> Path:
    jars = jars or pinned_jars()
    return (tools_dir or TOOLS_DIR) / PIN_SECTION / jars[0].version / "lib"


def _verify(directory: Path, jars: list[Jar]) -> str:
    """'' when ``directory`` holds exactly the pinned jars with their digests, else why not."""
    if not directory.is_dir():
        return f"{directory} does not exist"
    present = sorted(p.name for p in directory.iterdir())
    expected = sorted(j.file_name for j in jars)
    if present != expected:
        return f"{directory} holds {present}, expected exactly {expected}"
    for jar in jars:
        digest = _sha512(directory / jar.file_name)
        if digest != jar.sha512:
            return f"{directory / jar.file_name} has sha512 {digest[:16]}..., pinned {jar.sha512[:16]}..."
    return ""


def installed(*, home: Path | None = None, tools_dir: Path | None = None) -> tuple[bool, str]:
    """``(True, "")`` when the pinned transport jars are in ``.tools`` and fit the installed broker."""
    try:
        jars = pinned_jars()
    except AmqpTransportError as exc:
        return False, str(exc)
    reason = _version_mismatch(jars, home)
    if reason:
        return False, reason
    problem = _verify(lib_dir(jars, tools_dir), jars)
    if problem:
        return False, f"ActiveMQ Classic's AMQP transport is not installed ({problem}); {INSTALL_HINT}"
    return True, ""


def jar_paths(*, home: Path | None = None, tools_dir: Path | None = None) -> list[Path]:
    """The verified jars to put on the broker's class path; AmqpTransportError when not installed."""
    ok, reason = installed(home=home, tools_dir=tools_dir)
    if not ok:
        raise AmqpTransportError(reason)
    jars = pinned_jars()
    directory = lib_dir(jars, tools_dir)
    return [directory / j.file_name for j in jars]


def _pom(jars: list[Jar]) -> str:
    dependencies = "\n".join(
        f"    <dependency><groupId>{escape(j.group)}</groupId><artifactId>{escape(j.artifact)}</artifactId>"
        f"<version>{escape(j.version)}</version></dependency>" for j in jars)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- generated by brokerconf (conformance/targets/activemq/amqp.py): the pinned jars of ActiveMQ's AMQP transport -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>brokerconf.tools</groupId>
  <artifactId>activemq-amqp-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


def ensure_amqp_transport(*, progress=print, run=subprocess.run, home: Path | None = None,
                          tools_dir: Path | None = None) -> Path:
    """Fetch the pinned jars unless they are there already; returns their directory.

    Refuses (AmqpTransportError) when the installed broker is not the pinned version, when Maven
    is missing or fails, or when what it fetched does not match the pins."""
    jars = pinned_jars()
    reason = _version_mismatch(jars, home)
    if reason:
        raise AmqpTransportError(reason)
    target = lib_dir(jars, tools_dir)
    if not _verify(target, jars):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise AmqpTransportError("Maven (`mvn`) is needed to fetch ActiveMQ's AMQP transport and is not on PATH; "
                                 "install it with `apt-get install maven`")
    version_dir = target.parent
    staging = version_dir.with_name(f"{version_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        (staging / "pom.xml").write_text(_pom(jars), encoding="utf-8")
        progress(f"fetching {', '.join(j.coordinates for j in jars)} with Maven into {version_dir}")
        # -B: no colours or progress bars; excludeTransitive: only the pinned jars (module notes)
        command = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(staging / "pom.xml"), "dependency:copy-dependencies",
                   "-DexcludeTransitive=true", f"-DoutputDirectory={staging / 'lib'}"]
        result = run(command, cwd=str(staging))
        if result.returncode != 0:
            raise AmqpTransportError(f"`{' '.join(command)}` failed (exit {result.returncode}, its output is above)")
        problem = _verify(staging / "lib", jars)
        if problem:
            raise AmqpTransportError(f"Maven fetched something other than the pins in {PINS_FILE}: {problem}")
        shutil.rmtree(version_dir, ignore_errors=True)
        try:
            staging.rename(version_dir)
        except OSError:
            if _verify(target, jars):  # not another fetch that finished first: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    problem = _verify(target, jars)
    if problem:  # pragma: no cover - the rename above is the only writer
        raise AmqpTransportError(problem)
    progress(f"ActiveMQ's AMQP transport is in {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.targets.activemq.amqp``: fetch (or check) the transport; exit 1 on failure."""

    try:
        path = ensure_amqp_transport(progress=lambda m: print(f"brokerconf: {m}", file=sys.stderr))
    except AmqpTransportError as exc:
        print(f"brokerconf: ActiveMQ AMQP transport: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
