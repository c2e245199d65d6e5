"""A private PostgreSQL server for one test or experiment: the JDBC master/slave stores of the
A-MQ fault-tolerant messaging guide (3.2) keep their data and their lock in a database, and
brokerconf never touches a database it did not create.

`PostgresServer` runs Debian's PostgreSQL binaries on a cluster of its own: ``initdb`` into a
fresh directory, the server on a free loopback port with its Unix socket in that directory too
(never the system's /var/run/postgresql), a login role with a password for TCP clients (the
brokers' JDBC drivers, our Python stores) and a database. The server is our child process, started
directly (not through ``pg_ctl``) so the handle holds its PID; `stop` asks it to shut down fast
(SIGINT) and waits, `kill` is the crash (SIGKILL of its process group), and the directory is
removed at stop.

PostgreSQL refuses to run as root, so under root the cluster belongs to the ``postgres`` system user
the Debian package creates, in a directory of its own outside any 0700 test directory that user
could not enter; the server's log is copied into the caller's work directory for evidence.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .process import free_ports, stop_group
from .tether import launch
from .waiting import poll

#: Debian installs each major version's server binaries here (postgresql-common's layout)
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
SYSTEM_USER = "postgres"
#: Debian's PostgreSQL JDBC driver (libpostgresql-jdbc-java), what the JVM brokers connect with
JDBC_DRIVER_JAR = Path("/usr/share/java/postgresql.jar")


class PostgresNotInstalled(RuntimeError):
    pass


class PostgresStartError(RuntimeError):
    pass


def find_bindir() -> Path:
    """The newest installed PostgreSQL's binary directory (where initdb and postgres live)."""
    candidates = sorted(Path("/").glob(DEBIAN_BIN_GLOB.lstrip("/")),
                        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1)
    for bindir in reversed(candidates):
        if (bindir / "initdb").exists() and (bindir / "postgres").exists():
            return bindir
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    raise PostgresNotInstalled("PostgreSQL server binaries not found (Debian: apt-get install postgresql; "
                               f"looked in {DEBIAN_BIN_GLOB} and on PATH)")


@functools.lru_cache(maxsize=None)
def availability() -> tuple[bool, str]:
    """Whether a private server can run here (binaries, the user to run them as, the Python
    driver), and why not; asked once per process."""
    try:
        find_bindir()
    except PostgresNotInstalled as e:
        return False, str(e)
    try:
        import psycopg  # noqa: F401 - the reference broker's store and the tests talk through it
    except ImportError:
        return False, "the Python driver psycopg is not installed (pip install 'psycopg[binary]')"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            return False, f"running as root, and there is no {SYSTEM_USER!r} user to run PostgreSQL as"
    return True, ""


@dataclass(frozen=True)
class Credentials:
    user: str = "brokerconf"
    password: str = "brokerconf-secret"
    database: str = "brokerconf"


class PostgresServer:
    """``with PostgresServer(workdir) as pg: pg.dsn`` -- started on enter, stopped and removed on exit."""

    def __init__(self, workdir: Path, *, credentials: Credentials = Credentials(), start_timeout: float = 60.0) -> None:
        self.workdir = Path(workdir)
        self.credentials = credentials
        self.start_timeout = start_timeout
        self.bindir = find_bindir()
        self.port: int | None = None
        self.root: Path | None = None  # the cluster's own directory (data, socket, log)
        self._proc: subprocess.Popen | None = None
        self._run_as = self._system_user() if os.geteuid() == 0 else None

    # ------------------------------------------------------------------ addresses

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def dsn(self) -> str:
        """A libpq connection string for TCP clients (psycopg)."""
        c = self.credentials
        return f"host={self.host} port={self.port} user={c.user} password={c.password} dbname={c.database}"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.credentials.database}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    @property
    def log_file(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "PostgresServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "PostgresServer":
        """initdb (first start only), then the server; returns once it answers a login over TCP."""
        if self.running:
            return self
        if self.root is None:
            self._init_cluster()
        if self.port is None:
            self.port = free_ports(1)[0]
        self._proc = self._spawn()
        self._wait_ready()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT: abort transactions, disconnect clients, checkpoint), then the
        directory goes; the log is kept in the work directory. Idempotent."""
        self._halt(signal.SIGINT, timeout)
        self._remove()

    def kill(self) -> None:
        """A crash: SIGKILL of the server's process group. The cluster stays for `start`."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP the server and its backends: connections stay open and nothing answers (what a
        database behind a black hole looks like). Each backend leads a process group of its own
        (PostgreSQL's children call setsid), so the postmaster's group alone does not reach them."""
        for process in self._processes():
            process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        for process in self._processes():
            process.send_signal(signal.SIGCONT)

    def _processes(self) -> list:
        import psutil

        if self.pid is None:
            return []
        master = psutil.Process(self.pid)
        return [master, *master.children(recursive=True)]

    def log_tail(self, lines: int = 40) -> str:
        if self.root is None or not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ internals

    def _system_user(self) -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            raise PostgresNotInstalled(f"running as root, PostgreSQL must run as {SYSTEM_USER!r}, which does not exist") from None

    def _popen_user(self) -> dict:
        if self._run_as is None:
            return {}
        return {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid, "extra_groups": []}

    def _init_cluster(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Not under the work directory: a pytest tmp directory is 0700 root's, which the postgres
        # user cannot enter. Short, too: a Unix socket path has a 107-byte limit.
        self.root = Path(tempfile.mkdtemp(prefix="brokerconf-pg-"))
        if self._run_as is not None:
            os.chown(self.root, self._run_as.pw_uid, self._run_as.pw_gid)
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.credentials.password + "\n")
        if self._run_as is not None:
            os.chown(pwfile, self._run_as.pw_uid, self._run_as.pw_gid)
        pwfile.chmod(0o600)
        # The login role is the cluster's superuser, which owns the database it creates: the
        # brokers create their own tables (ActiveMQ's JDBC adapter, Artemis's JDBC store).
        # Password (scram) for TCP, as brokers log in; trust over this cluster's own socket only.
        result = subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.root / "data"), "-U", self.credentials.user,
             f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
             "--locale=C", "--no-instructions"],
            capture_output=True, text=True, timeout=120, **self._popen_user())
        pwfile.unlink()
        if result.returncode != 0:
            raise PostgresStartError(f"initdb failed ({result.returncode}): {result.stderr.strip()[-2000:]}")

    def _spawn(self) -> subprocess.Popen:
        assert self.root is not None and self.port is not None
        log = open(self.log_file, "ab")
        if self._run_as is not None:
            os.chown(self.log_file, self._run_as.pw_uid, self._run_as.pw_gid)
        try:
            return launch(
                [str(self.bindir / "postgres"), "-D", str(self.root / "data"), "-p", str(self.port),
                 "-k", str(self.root), "-c", f"listen_addresses={self.host}",
                 # the default 100 reserves shared memory for nothing; brokers pool a few connections
                 "-c", "max_connections=50", "-c", "shared_buffers=16MB"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                **self._popen_user())
        finally:
            log.close()

    def _wait_ready(self) -> None:
        isready = [str(self.bindir / "pg_isready"), "-h", self.host, "-p", str(self.port), "-q"]

        def accepting() -> bool:
            if self._proc.poll() is not None:
                raise PostgresStartError(f"postgres exited with {self._proc.returncode}:\n{self.log_tail()}")
            return subprocess.run(isready, capture_output=True).returncode == 0

        if not poll(accepting, timeout=self.start_timeout, interval=0.1):
            self._halt(signal.SIGKILL, 10)
            raise PostgresStartError(f"postgres did not accept connections within {self.start_timeout:.0f} s:\n"
                                     f"{self.log_tail()}")
        self._ensure_database()

    def _ensure_database(self) -> None:
        """The login role's database, created over the cluster's own socket (trust)."""
        psql = [str(self.bindir / "psql")] if (self.bindir / "psql").exists() else ["psql"]
        c = self.credentials
        exists = subprocess.run(
            [*psql, "-h", str(self.root), "-p", str(self.port), "-U", c.user, "-d", "postgres", "-tAc",
             f"SELECT 1 FROM pg_database WHERE datname = '{c.database}'"],
            capture_output=True, text=True, timeout=30, **self._popen_user())
        if exists.returncode != 0:
            raise PostgresStartError(f"psql could not query the new cluster: {exists.stderr.strip()}")
        if exists.stdout.strip() != "1":
            created = subprocess.run(
                [*psql, "-h", str(self.root), "-p", str(self.port), "-U", c.user, "-d", "postgres", "-c",
                 f'CREATE DATABASE "{c.database}"'], capture_output=True, text=True, timeout=30, **self._popen_user())
            if created.returncode != 0:
                raise PostgresStartError(f"could not create database {c.database!r}: {created.stderr.strip()}")

    def _halt(self, sig: int, timeout: float) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, sig)  # the postmaster takes its backends down itself
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(proc, timeout=5)
        except ProcessLookupError:
            pass

    def _remove(self) -> None:
        if self.root is None:
            return
        if self.log_file.exists():
            shutil.copy(self.log_file, self.workdir / "postgres.log")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
