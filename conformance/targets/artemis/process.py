"""Apache Artemis as a local JVM: one broker instance per launcher, from the distribution
`artemis_dist` keeps under ``.tools/artemis``.

Start-up (REFERENCES.md, "Artemis from its binary distribution"):

1. ``bin/artemis create WORKDIR/instance --silent --user A --password P --require-login |
   --allow-anonymous --host 127.0.0.1 --http-host 127.0.0.1 --http-port N --relax-jolokia
   --java-options "-Xms64m -Xmx<heap>m -javaagent:<Jolokia agent>=..."``, once per launcher (a
   restart after `kill` re-uses the instance and its journal). ``A`` is the management user Jolokia
   is read with; the scenario's own users are the clients'. The web server (and its console) is
   then taken out of ``etc/bootstrap.xml``: Jolokia's JVM agent serves the harness's management
   reads on the http port instead, on loopback (artemis/jolokia_agent.py says why). ``-Xms`` comes
   with ``-Xmx``: the profile's own ``-Xms512M`` would otherwise exceed a smaller maximum. The
   instance is copied from a template made by that ``create`` once per shape (user, anonymous or not, hosts; artemis/template.py) and rewritten
   where ``create`` would have written it differently (its path, the http port, the java options,
   the password hash): ``create`` is a JVM start of its own. ``WORKDIR/create.log`` says which
   template, and has its ``create`` output.
2. ``etc/broker.xml`` and the users / roles files are replaced by `artemis_config`'s output
   (acceptors on free loopback ports, the scenario's address settings and users).
3. ``bin/artemis run`` in the foreground, as a child in its own process group
   (``start_new_session``), stdout and stderr into ``WORKDIR/artemis.log`` (kept as evidence).
   Ready when a STOMP CONNECT on its port is answered with CONNECTED; if the JVM exits first, the
   start fails at once with the log's key lines and tail.
4. `stop` sends SIGTERM to the group, then SIGKILL; `kill` sends SIGKILL (a crash). Both by PID.

Class-data sharing: each launch maps the archive of the distribution's classes that the set-up
made (`class_archive`, artemis/class_archive.py; runtime/class_archive.py has the measurements),
when there is one for its key. The broker's jars go on the application class path
(artemis/class_path.py, written into ``etc/artemis.profile``), so the archive serves their classes.

Counters come from Artemis's management MBeans through Jolokia (``POST /jolokia/`` to the agent,
with basic auth checked against the broker's JAAS realm): see `jolokia_call` and
`QueueManagement.queue_attributes` (both also used for the containers of a cluster,
artemis/container_cluster.py, which keep the image's web console and read ``/console/jolokia/``).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from conformance.scenario import Scenario

from conformance.targets.runtime.probes import stomp_handshake
from conformance.targets.artemis.config import ArtemisConfig, ArtemisDatabase, render
from conformance.targets.artemis import class_path, jolokia_agent
from conformance.targets.artemis.dist import MARKER, home, installed
from conformance.targets.artemis.template import ArtemisCreateError, CreateOptions, create_instance
from conformance.targets.runtime.class_archive import ClassArchive
from conformance.targets.runtime.jvm import quick_start_options
from machinery.managed import ManagedProcess
from machinery.postgres import JDBC_DRIVER_JAR
from machinery.process import free_ports
from conformance.targets.tls_setup import prepare as prepare_tls
from machinery.waiting import Deadline

__all__ = ["ArtemisProcess", "ArtemisStartError", "ArtemisNotInstalled", "JolokiaError", "LISTENERS", "QueueManagement",
           "class_archive", "jolokia_call"]

#: listeners every instance opens besides the scenario's protocols: core (Artemis's own tools)
LISTENERS = ("core", "stomp", "mqtt", "amqp")
ADMIN_USER = "brokerconf-admin"
#: where Artemis's web console serves Jolokia (the container images keep the console)
CONSOLE_JOLOKIA_PATH = "/console/jolokia/"


class ArtemisNotInstalled(RuntimeError):
    pass


class ArtemisStartError(RuntimeError):
    """The broker did not become ready; the message carries its log's key lines and tail."""


class JolokiaError(RuntimeError):
    """A management read over Jolokia failed (the message has the HTTP status or Jolokia's error)."""


def _object_name_value(value: str) -> str:
    # a quoted ObjectName value: backslash-escape the characters JMX gives meaning inside quotes
    escaped = "".join("\\" + c if c in '"*?\\' else c for c in value)
    return f'"{escaped}"'


def jolokia_call(host: str, port: int, credentials: tuple[str, str], request: dict, *, timeout: float = 10.0,
                 alive: Callable[[], bool] = lambda: True, path: str = CONSOLE_JOLOKIA_PATH) -> dict:
    """One Jolokia request (POST, JSON) to ``http://host:port<path>`` with basic auth
    ``credentials``; the response's ``value``. Retries while the server is still coming up (a web
    console starts after the acceptors) and ``alive()`` says the broker runs. Shared by the local
    JVM (the Jolokia agent, ``path`` `jolokia_agent.PATH`) and the containers of a cluster
    (artemis/container_cluster.py: the image's console port published on loopback)."""
    url = f"http://{host}:{port}{path}"
    auth = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
    headers = {"Content-Type": "application/json", "Authorization": f"Basic {auth}", "Origin": f"http://{host}"}
    deadline = Deadline(timeout)
    # a loop, not a `wait_until`: each round sends the request again, and the error of the last
    # attempt is chained to the one raised
    while True:
        try:
            req = urllib.request.Request(url, data=json.dumps(request).encode(), headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=max(1.0, deadline.remaining())) as response:
                body = json.loads(response.read().decode("utf-8"))
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            status = getattr(exc, "code", None)
            if status not in (None, 404, 503) or deadline.expired() or not alive():
                raise JolokiaError(f"Jolokia {url} ({request.get('type')} {request.get('mbean')}): {exc}") from exc
            time.sleep(0.3)
    if body.get("status") != 200:
        raise JolokiaError(f"Jolokia {request.get('type')} {request.get('mbean')}: status {body.get('status')}: "
                           f"{body.get('error_type', '')} {body.get('error', '')}".strip())
    return body["value"]


def class_archive(artemis_home: Path) -> ClassArchive:
    """The class-data archive of this distribution's broker JVMs with the Jolokia agent (made at
    set-up by artemis/class_archive.py; runtime/class_archive.py says why)."""
    home = Path(artemis_home).resolve()
    try:
        distribution = (home / MARKER).read_text(encoding="utf-8").strip()  # its pinned sha512
    except OSError:
        distribution = "unverified"
    agent = jolokia_agent.jar(home.parent.parent)
    # the class path is part of the key: an archive serves only a JVM whose class path starts with
    # the one it was made with (artemis/class_path.py)
    return ClassArchive("artemis", {"home": str(home), "distribution": distribution, "agent": str(agent),
                                    "agent_sha512": jolokia_agent.pin().sha512,
                                    "class_path": [p.name for p in class_path.distribution_jars(home)] + [agent.name]},
                        with_agent=True)


def _remove_web_server(bootstrap: Path) -> None:
    """Take the web server (console and all) out of an instance's bootstrap.xml: the Jolokia agent
    serves the management reads (artemis/jolokia_agent.py)."""
    text = bootstrap.read_text(encoding="utf-8")
    new, count = re.subn(r"(?s)\n?[ \t]*<web\b.*?</web>", "", text)
    if count != 1:
        raise ArtemisStartError(f"{bootstrap}: expected one <web> element, found {count} "
                                "(a new Artemis version writes it differently: update artemis/process.py)")
    bootstrap.write_text(new, encoding="utf-8")


class QueueManagement:
    """Queue MBeans read through ``self.jolokia(request, timeout)`` of a broker named ``self.name``
    (its ``<name>`` in broker.xml, part of every MBean name)."""

    name: str

    def queue_mbean(self, address: str, queue: str, routing: str) -> str:
        return (f"org.apache.activemq.artemis:broker={_object_name_value(self.name)},component=addresses,"
                f"address={_object_name_value(address)},subcomponent=queues,routing-type={_object_name_value(routing)},"
                f"queue={_object_name_value(queue)}")

    def queue_attributes(self, address: str, routing: str, attributes: tuple[str, ...]) -> dict[str, dict]:
        """ObjectName -> attributes of every queue of ``address`` with ``routing`` (anycast: the
        queue named like the address; multicast: one queue per subscription)."""
        pattern = self.queue_mbean(address, "*", routing).replace('queue="\\*"', "queue=*")
        value = self.jolokia({"type": "read", "mbean": pattern, "attribute": list(attributes)})
        return value


class ArtemisProcess(QueueManagement, ManagedProcess):
    """One Artemis broker instance under ``workdir`` (created on the first `start`)."""

    host = "127.0.0.1"
    label = "Artemis"
    start_error = ArtemisStartError
    stop_timeout = 30.0

    def __init__(self, workdir: Path, scenario: Scenario, *, name: str = "brokerconf-artemis",
                 jvm_heap_mb: int = 384, artemis_home: Path | None = None, ha_policy: str | None = None,
                 shared_data: Path | None = None, database: ArtemisDatabase | None = None,
                 journal_file_size: str = "10M", class_archive_dump: Path | None = None) -> None:
        """``ha_policy`` ("primary" / "backup") with ``shared_data``: one node of a shared-store
        pair (`artemis.shared_store`), its journal, bindings, paging and large messages there; or
        with ``database``: the pair's store (and its lock) in PostgreSQL tables instead, the driver
        jar put in the instance's lib directory. ``class_archive_dump``: this JVM writes the classes it
        loaded there when it exits (artemis/class_archive.py makes the launches' archive so); every
        other launch maps that archive when it is made (`class_archive`)."""
        if (ha_policy is None) != (shared_data is None and database is None):
            raise ValueError("ha_policy goes with shared_data or database (a shared-store node needs a store)")
        self.ha_policy = ha_policy
        self.shared_data = Path(shared_data).absolute() if shared_data is not None else None
        self.database = database
        self.journal_file_size = journal_file_size
        self.workdir = Path(workdir).absolute()
        self.scenario = scenario
        self.name = name
        self.jvm_heap_mb = jvm_heap_mb
        self.artemis_home = Path(artemis_home) if artemis_home else home()
        self.instance = self.workdir / "instance"
        self.log_path = self.workdir / "artemis.log"
        self.listeners = ("core", *(p for p in ("stomp", "mqtt", "amqp") if p in scenario.protocols or p == "stomp"))
        # Scenario(tls=True): a TLS acceptor (stomp_ssl...) beside each plain one, the run's keystore
        self.tls = prepare_tls(scenario, self.workdir)
        if self.tls is not None:
            self.listeners += tuple(f"{p}_ssl" for p in scenario.protocols)
        self.class_archive_dump = class_archive_dump
        self.admin = (ADMIN_USER, secrets.token_hex(8))
        self.ready_login = tuple(scenario.users[0]) if scenario.users else None
        self.ports: dict[str, int] = {}
        self.http_port = 0
        self.config: ArtemisConfig | None = None
        self._init_process()
        self._created = False

    # ----------------------------------------------------------------- configuration
    @property
    def config_path(self) -> Path:
        return self.instance / "etc" / "broker.xml"

    def _pick_ports(self) -> None:
        ports = free_ports(len(self.listeners) + 1)
        self.ports = dict(zip(self.listeners, ports))
        self.http_port = ports[-1]

    def _create_instance(self, timeout: float) -> None:
        ok, reason = installed(self.artemis_home.parent.parent)
        if not ok:
            raise ArtemisNotInstalled(reason)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._pick_ports()
        tls = {} if self.tls is None else {"tls_keystore": str(self.tls.pki.server_keystore),
                                           "tls_password": self.tls.pki.password}
        self.config = render(self.scenario, name=self.name, host=self.host, ports=self.ports, admin=self.admin,
                             ha_policy=self.ha_policy,
                             data_directory=str(self.shared_data) if self.shared_data else "data",
                             database=self.database, journal_file_size=self.journal_file_size, **tls)
        agent_jar = jolokia_agent.jar(self.artemis_home.parent.parent)
        agent = jolokia_agent.java_option(agent_jar, host=self.host, port=self.http_port)
        archive = class_archive(self.artemis_home)
        classes = (archive.dump_options(self.class_archive_dump) if self.class_archive_dump is not None
                   else archive.use_options())
        options = CreateOptions(user=self.admin[0], password=self.admin[1], anonymous=self.config.anonymous,
                                host=self.host, http_host=self.host, http_port=self.http_port,
                                java_options=" ".join([f"-Xms64m -Xmx{self.jvm_heap_mb}m", *quick_start_options(),
                                                       *classes, agent]))
        try:
            log = create_instance(self.artemis_home, self.instance, options, timeout=timeout)
        except ArtemisCreateError as exc:
            (self.workdir / "create.log").write_text(str(exc) + "\n", encoding="utf-8")
            raise ArtemisStartError(str(exc)) from exc
        (self.workdir / "create.log").write_text(log, encoding="utf-8")
        _remove_web_server(self.instance / "etc" / "bootstrap.xml")
        if self.database is not None:
            # Artemis puts <instance>/lib on its class path ("Persistence", JDBC: the driver jar there)
            shutil.copy(JDBC_DRIVER_JAR, self.instance / "lib" / "postgresql.jar")
        try:
            class_path.write_into_profile(self.instance, self.artemis_home, agent=agent_jar)
        except ValueError as exc:
            raise ArtemisStartError(str(exc)) from exc
        self._write_config()
        self._created = True

    def _write_config(self) -> None:
        etc = self.instance / "etc"
        self.config_path.write_text(self.config.broker_xml(), encoding="utf-8")
        (etc / "artemis-users.properties").write_text(self.config.users_properties(), encoding="utf-8")
        (etc / "artemis-roles.properties").write_text(self.config.roles_properties(), encoding="utf-8")

    def render_config(self) -> str:
        return self.config.broker_xml() if self.config else "(not created yet)"

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 120, wait_for: str = "serving") -> None:
        """Create the instance (first start), run the broker and wait for a STOMP CONNECTED
        (``wait_for="serving"``), or until it either serves or logs that it waits for the shared
        store's lock (``wait_for="lock"``, `waiting_for_lock`).
        Raises ArtemisNotInstalled / ArtemisStartError; nothing is left running on failure."""
        if wait_for not in ("serving", "lock"):
            raise ValueError(f"wait_for must be 'serving' or 'lock', not {wait_for!r}")
        if self.running:
            raise RuntimeError(f"Artemis {self.name!r} is already running (pid {self.pid})")
        deadline = Deadline(timeout)
        if not self._created:
            self._create_instance(timeout=max(10.0, deadline.remaining()))
        with open(self.log_path, "ab") as f:
            f.write(f"--- brokerconf: starting {self.instance}/bin/artemis run at {time.strftime('%H:%M:%S')}\n"
                    .encode())
        self._log_offset = self.log_path.stat().st_size
        self._spawn_until_ready([str(self.instance / "bin" / "artemis"), "run"],
                                lambda: self._wait_ready(deadline, wait_for), cwd=self.instance, output=self.log_path)

    def _wait_ready(self, deadline: Deadline, wait_for: str = "serving") -> None:
        self._await_ready(deadline, lambda budget: stomp_handshake(self.ports["stomp"], budget, self.ready_login),
                          done=self.waiting_for_lock if wait_for == "lock" else None,
                          poll=0.2, where=f" (STOMP CONNECT on {self.host}:{self.ports['stomp']}); log {self.log_path}")

    def log_since_start(self) -> str:
        """This run's part of the log (the file keeps every run's, each after a marker line)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(getattr(self, "_log_offset", 0))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def waiting_for_lock(self) -> bool:
        """Whether this run logged that it waits for the shared store's lock: a backup started and
        waiting for the primary to fail (AMQ221109), a primary waiting for the primary lock a
        backup holds (AMQ221034), or a backup waiting for the backup lock (AMQ221032, "Waiting to
        become backup node": a group's second backup stays there while the first holds that lock);
        `serving` tells whether it took over since."""
        log = self.log_since_start()
        return self.running and any(code in log for code in ("AMQ221109", "AMQ221034", "AMQ221032"))

    # ----------------------------------------------------------------- observation
    def serving(self, timeout: float = 1.0) -> bool:
        return self.running and stomp_handshake(self.ports["stomp"], timeout, self.ready_login)[0]

    def _failure_report(self, tail: int = 40) -> str:
        lines = self.log_tail(2000).splitlines()
        key = list(dict.fromkeys(ln[:400] for ln in lines
                                 if " ERROR " in ln or "AMQ22" in ln or ln.startswith(("Caused by:", "Error:",
                                                                                         "Exception"))))
        frames = [ln for ln in lines if not ln.startswith(("\tat ", "\t... "))][-tail:]
        parts = ["key lines:\n  " + "\n  ".join(key[-8:])] if key else []
        parts.append("log tail (stack frames omitted):\n" + "\n".join(frames))
        return "\n".join(parts)

    # ----------------------------------------------------------------- management over Jolokia
    def jolokia(self, request: dict, timeout: float = 10.0) -> dict:
        """One Jolokia request on this instance's loopback web server (`jolokia_call`)."""
        return jolokia_call(self.host, self.http_port, self.admin, request, timeout=timeout,
                            alive=lambda: self.running, path=jolokia_agent.PATH)

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<ArtemisProcess {self.name} {state} ports={self.ports} http={self.http_port}>"
