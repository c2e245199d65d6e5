"""Jolokia's JVM agent: how the harness reads a local Artemis JVM's management MBeans.

The harness reads broker counters (queue depths, cluster topology, message counts) over Jolokia,
the HTTP bridge to JMX. Artemis serves Jolokia inside its web console (Hawtio, on the embedded web
server), so every launch used to start the web server and the console for those reads alone, and
a test run launches a few hundred Artemis JVMs on a CPU-bound 2-core machine. The agent serves the
same reads without them. CPU of one Artemis 2.40 launch to STOMP CONNECTED plus its next 10 s,
medians of 3 interleaved launches (benchmarks/artemis_launch_cpu.py): 4.29 s with the console,
4.04 s with the agent (it starts before the broker, the console after: 3.87 s against 3.47 s to
serving, then 0.16 s against 0.82 s), and 3.27 s with the agent and a class archive
(runtime/class_archive.py).

The agent runs in the broker's JVM (``-javaagent:<jar>=<options>``) on the JDK's own HTTP server,
bound to loopback, with the same protocol at ``/jolokia/``; the launcher removes the web server
from ``etc/bootstrap.xml``. Requests authenticate against the broker's own JAAS realm
(``authMode=jaas,realm=activemq``: ``etc/login.config``, the users file the launcher writes; no
credential is on the command line), so they run as the harness's admin user with its roles, which
Artemis's management authorisation (``etc/management.xml``) checks as it did behind the console;
without JAAS the agent's requests carry no subject and every MBean read is refused ("User not
authorized").

The jar is pinned in ``machinery/pins.toml`` (``[jolokia-agent]``), copied by Maven into
``.tools/artemis/`` beside the distribution (artemis/dist.py fetches both) and verified against the
pinned sha512 once; a marker beside it holds the digest it matched.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from machinery.tools_cache import (PINS_FILE, TOOLS_DIR, MavenCopyError, MavenPin, maven_copy, maven_pin,
                                   sha512_of)

__all__ = ["AgentPin", "JolokiaAgentError", "PATH", "ensure", "installed", "jar", "java_option", "pin"]

#: where the agent serves Jolokia (the console served it at /console/jolokia/)
PATH = "/jolokia/"


class JolokiaAgentError(RuntimeError):
    """The agent could not be fetched or verified; the message says what to do."""


#: the agent's pin (pins.toml ``[jolokia-agent]``)
AgentPin = MavenPin


def pin(path: Path = PINS_FILE) -> AgentPin:
    return maven_pin("jolokia-agent", path)


def jar(tools: Path | None = None, p: AgentPin | None = None) -> Path:
    """Where the agent's jar is kept (may not exist yet)."""
    p = p or pin()
    return Path(tools or TOOLS_DIR) / "artemis" / p.file_name


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".brokerconf-verified")


def installed(tools: Path | None = None, p: AgentPin | None = None) -> tuple[bool, str]:
    """(True, "") when the verified jar is here, else the reason."""
    p = p or pin()
    path = jar(tools, p)
    try:
        verified = _marker(path).read_text(encoding="utf-8").strip()
    except OSError:
        verified = ""
    if not path.is_file() or verified != p.sha512:
        return False, (f"Jolokia's JVM agent {p.version} (how the harness reads Artemis's counters) is not installed "
                       f"and verified in {path} (run `brokerconf targets install artemis`, or scripts/bootstrap.sh)")
    return True, ""


def _say(message: str) -> None:
    print(f"brokerconf: {message}", file=sys.stderr, flush=True)


def ensure(tools: Path | None = None, run=subprocess.run, progress=_say, p: AgentPin | None = None) -> Path:
    """The agent's jar, fetched and verified when needed (a file read when it is)."""
    p = p or pin()
    if installed(tools, p)[0]:
        return jar(tools, p)
    path = jar(tools, p)
    try:
        maven_copy(p.coordinates, p.file_name, path.parent, label=f"Jolokia's JVM agent {p.version}", run=run,
                   progress=progress)
    except MavenCopyError as exc:
        raise JolokiaAgentError(str(exc)) from None
    actual = sha512_of(path)
    if actual != p.sha512:
        bad = path.with_name(path.name + ".bad")
        path.replace(bad)  # never used; the next run downloads again
        raise JolokiaAgentError(f"{path.name}: sha512 {actual} does not match the pin in {PINS_FILE} ({p.sha512}); "
                                f"moved aside to {bad}")
    _marker(path).write_text(p.sha512 + "\n", encoding="utf-8")
    return path


def java_option(agent_jar: Path, *, host: str, port: int) -> str:
    """The ``-javaagent`` option that serves Jolokia on ``host:port``, every request authenticated
    through the broker's JAAS realm (as the console's were: an instance made with
    ``--allow-anonymous`` lets its guest in there too). ``discoveryEnabled=false``: the agent would
    otherwise answer multicast discovery queries."""
    return f"-javaagent:{agent_jar}=host={host},port={port},authMode=jaas,realm=activemq,discoveryEnabled=false"
