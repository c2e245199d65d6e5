"""Fetch the pinned real Java clients and build brokerconf's driver against each (issue 28).

``machinery/pins.toml`` ``[java-clients.<name>]`` pins each client library (ActiveMQ's
``activemq-client`` in the installed broker's version and in the newest 6.x, Artemis's
``artemis-jms-client``). For each, into ``.tools/java-clients/<name>-<version>/``:

* ``lib/``: the client jar and its transitive dependencies, and SLF4J's simple binding (so the
  client's log lines reach the driver's stderr), copied by Maven
  (``drivers/java/pom.xml`` with the pinned coordinates as properties; Maven reads the machine's
  own settings for mirrors and proxies). The client jar's sha512 is checked against the pin; the
  rest is what that jar's own pom names (fixed versions).
* ``classes/``: the driver (``drivers/java/src``) compiled with ``javac`` against ``lib/``: the
  shared files plus the flavour's own class (the other flavour's library is not there), with
  ``javax.jms`` rewritten to ``jakarta.jms`` for a client on the Jakarta API. A stamp holds the
  digest of the sources it was built from, so an edited driver is rebuilt and an unchanged one
  is re-used.

Both are built in a staging directory and moved into place only once complete, so an interrupted
fetch or build leaves nothing half-made behind. ``python -m conformance.clients.java_build``
(scripts/bootstrap.sh) builds every pinned client; the tests only check (`installed`) and say
what is missing (`conformance.clients.java_driver`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from machinery.tools_cache import PINS_FILE, ROOT, TOOLS_DIR, sha512_of

__all__ = ["JavaBuildError", "JavaClient", "classpath", "ensure_built", "installed", "pinned_clients"]

PIN_SECTION = "java-clients"
DRIVER_DIR = ROOT / "drivers" / "java"
SOURCES = DRIVER_DIR / "src" / "brokerconf" / "driver"
COMMON_SOURCES = ("Json.java", "Flavour.java", "Main.java", "JmsSessions.java")
FLAVOUR_SOURCES = {"activemq": "ActiveMqFlavour.java", "artemis": "ArtemisFlavour.java"}
MAIN_CLASS = "brokerconf.driver.Main"
STAMP = ".brokerconf-driver-sources"
INSTALL_HINT = "run `python -m conformance.clients.java_build` (needs a JDK 17 and Maven: `apt-get install maven`)"


class JavaBuildError(RuntimeError):
    """A client cannot be fetched or the driver cannot be built."""


@dataclass(frozen=True)
class JavaClient:
    name: str       # the pin's key: activemq-5, activemq-6, artemis
    flavour: str    # which driver class speaks to it: activemq, artemis
    group: str
    artifact: str
    version: str
    jms: str        # javax.jms or jakarta.jms
    subject: str    # what the matrix's client column calls it
    sha512: str
    slf4j_simple: str  # SLF4J's simple binding, the client's slf4j-api version: its log to stderr

    @property
    def log_binding_jar(self) -> str:
        return f"slf4j-simple-{self.slf4j_simple}.jar"

    @property
    def jar_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def pinned_clients(pins_file: Path | None = None) -> dict[str, JavaClient]:
    path = pins_file or PINS_FILE
    try:
        pins = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise JavaBuildError(f"cannot read the version pins {path}: {exc}") from None
    section = pins.get(PIN_SECTION)
    if not isinstance(section, dict) or not section:
        raise JavaBuildError(f"{path} has no [{PIN_SECTION}.*] sections")
    clients = {}
    for name, values in section.items():
        missing = [k for k in ("flavour", "group", "artifact", "version", "jms", "subject", "sha512", "slf4j_simple")
                   if not values.get(k)]
        if missing:
            raise JavaBuildError(f"{path} [{PIN_SECTION}.{name}] lacks {', '.join(missing)}")
        if values["flavour"] not in FLAVOUR_SOURCES:
            raise JavaBuildError(f"{path} [{PIN_SECTION}.{name}]: unknown flavour {values['flavour']!r}")
        clients[name] = JavaClient(name=name, **{k: str(values[k]) for k in
                                                 ("flavour", "group", "artifact", "version", "jms", "subject",
                                                  "slf4j_simple")},
                                   sha512=str(values["sha512"]).lower())
    return clients


def home(client: JavaClient, tools_dir: Path | None = None) -> Path:
    return (tools_dir or TOOLS_DIR) / PIN_SECTION / f"{client.name}-{client.version}"


def _source_files(client: JavaClient) -> list[Path]:
    return [SOURCES / name for name in (*COMMON_SOURCES, FLAVOUR_SOURCES[client.flavour])]


def sources_digest(client: JavaClient) -> str:
    """What the classes are built from: the driver's sources, the JMS package and the client."""
    digest = hashlib.sha256(f"{client.jms}\n{client.coordinates}\n".encode())
    for path in _source_files(client):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _lib_problem(lib: Path, client: JavaClient) -> str:
    jar = lib / client.jar_name
    if not jar.is_file():
        return f"{jar} is missing"
    digest = sha512_of(jar)
    if digest != client.sha512:
        return f"{jar} has sha512 {digest[:16]}..., pinned {client.sha512[:16]}..."
    if not (lib / client.log_binding_jar).is_file():
        return f"{lib / client.log_binding_jar} (the client's log binding) is missing"
    return ""


def _classes_problem(classes: Path, client: JavaClient) -> str:
    stamp = classes / STAMP
    if not stamp.is_file():
        return f"the driver is not built ({classes} has no {STAMP})"
    if stamp.read_text().strip() != sources_digest(client):
        return f"the driver in {classes} was built from other sources than drivers/java/src"
    return ""


def java_problem() -> str:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH (a JDK 17 is needed: `apt-get install openjdk-17-jdk-headless`)"
    return ""


def installed(client: JavaClient, tools_dir: Path | None = None) -> tuple[bool, str]:
    """``(True, "")`` when the client's jars are there with their pinned digest and the driver is
    built from the current sources; else ``(False, why)`` with what to run."""
    problem = java_problem()
    if problem:
        return False, problem
    base = home(client, tools_dir)
    problem = _lib_problem(base / "lib", client) or _classes_problem(base / "classes", client)
    if problem:
        return False, f"the Java driver for {client.subject} is not ready: {problem}; {INSTALL_HINT}"
    return True, ""


def classpath(client: JavaClient, tools_dir: Path | None = None) -> str:
    base = home(client, tools_dir)
    return os.pathsep.join([str(base / "classes"), str(base / "lib" / "*")])


def _fetch(client: JavaClient, base: Path, progress, run) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JavaBuildError("Maven (`mvn`) is needed to fetch the Java clients and is not on PATH; "
                             "install it with `apt-get install maven`")
    staging = base / f"lib.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        progress(f"fetching {client.coordinates} and its dependencies with Maven into {base / 'lib'}")
        command = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(DRIVER_DIR / "pom.xml"),
                   f"-Dclient.group={client.group}", f"-Dclient.artifact={client.artifact}",
                   f"-Dclient.version={client.version}", f"-Dslf4j.simple.version={client.slf4j_simple}",
                   "dependency:copy-dependencies",
                   f"-DoutputDirectory={staging}"]
        result = run(command, cwd=str(base))
        if result.returncode != 0:
            raise JavaBuildError(f"`{' '.join(command)}` failed (exit {result.returncode}, its output is above)")
        problem = _lib_problem(staging, client)
        if problem:
            raise JavaBuildError(f"Maven fetched something other than the pin in {PINS_FILE}: {problem}")
        shutil.rmtree(base / "lib", ignore_errors=True)
        staging.rename(base / "lib")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _compile(client: JavaClient, base: Path, progress, run) -> None:
    staging = base / f"classes.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    sources = staging / "src"
    sources.mkdir(parents=True)
    try:
        for path in _source_files(client):
            text = path.read_text(encoding="utf-8")
            if client.jms != "javax.jms":
                text = text.replace("javax.jms", client.jms)
            (sources / path.name).write_text(text, encoding="utf-8")
        progress(f"compiling the Java driver for {client.subject} into {base / 'classes'}")
        command = ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(staging), "-cp", str(base / "lib" / "*"),
                   *sorted(str(p) for p in sources.iterdir())]
        result = run(command, cwd=str(base))
        if result.returncode != 0:
            raise JavaBuildError(f"javac failed for {client.subject} (exit {result.returncode}, its output is above)")
        shutil.rmtree(sources)
        (staging / STAMP).write_text(sources_digest(client) + "\n")
        shutil.rmtree(base / "classes", ignore_errors=True)
        staging.rename(base / "classes")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ensure_built(client: JavaClient, *, progress=print, run=subprocess.run, tools_dir: Path | None = None) -> Path:
    """Fetch the client and build the driver unless both are there already; returns the home."""
    problem = java_problem()
    if problem:
        raise JavaBuildError(problem)
    base = home(client, tools_dir)
    base.mkdir(parents=True, exist_ok=True)
    if _lib_problem(base / "lib", client):
        _fetch(client, base, progress, run)
    if _classes_problem(base / "classes", client):
        _compile(client, base, progress, run)
    ok, reason = installed(client, tools_dir)
    if not ok:  # pragma: no cover - the steps above are the only writers
        raise JavaBuildError(reason)
    return base


def main(argv: list[str] | None = None) -> int:
    """Build the driver for every pinned client (or the names given); exit 1 if any failed."""
    names = list(argv if argv is not None else sys.argv[1:])
    failed = 0
    try:
        clients = pinned_clients()
    except JavaBuildError as exc:
        print(f"brokerconf: Java clients: {exc}", file=sys.stderr)
        return 1
    for name in names or list(clients):
        client = clients.get(name)
        if client is None:
            print(f"brokerconf: no pinned Java client {name!r} (pinned: {', '.join(clients)})", file=sys.stderr)
            failed += 1
            continue
        try:
            print(ensure_built(client, progress=lambda m: print(f"brokerconf: {m}", file=sys.stderr)))
        except JavaBuildError as exc:
            print(f"brokerconf: Java client {client.subject}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
