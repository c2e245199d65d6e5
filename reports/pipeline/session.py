"""One SparkSession per process for the analysis pipeline.

Local mode (``local[*]``) is the embedded default; ``master="spark://host:port"`` runs the same
jobs on a standalone cluster. The driver binds to loopback only (the project talks to
127.0.0.1 and nothing else), the web UI is off, and shuffles use few partitions because one
machine's histories are small next to what Spark's default of 200 partitions is sized for.

Starting a JVM takes seconds, so the session is created once and reused: `get_session` returns
the running one when its master matches, and `stop_session` ends it (tests stop it once, at the
end of their process). ``BROKERCONF_SPARK_MEMORY`` sets the driver's memory (default 2g).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path

LOCAL = "local[*]"
LOOPBACK = "127.0.0.1"

_MASTER_RE = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://[^/\s]+:\d+(,[^/\s]+:\d+)*)$")

# Spark logs INFO and WARN lines to the console by default; a command line tool prints only what
# it means to say. Errors still come through.
_LOG4J = """\
# PySpark counts as an interpreter: Spark announces "Setting default log level" unless the
# logger of its shell class (under org.apache) is configured at the root's level.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.apache.name = org.apache
logger.apache.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""


class SessionError(RuntimeError):
    """Spark could not start (no Java, a bad master URL, a cluster that does not answer)."""


_lock = threading.Lock()
_state: dict = {"session": None, "master": None, "tmp": None}


def check_master(master: str) -> str:
    """The master URL, or SessionError saying which forms are accepted."""
    if not _MASTER_RE.match(master):
        raise SessionError(f"unsupported Spark master {master!r}: use local[*], local[N] or "
                           "spark://HOST:PORT (a standalone cluster)")
    return master


def get_session(master: str = LOCAL, *, shuffle_partitions: int | None = None, app_name: str = "brokerconf-analyze"):
    """The process's SparkSession on ``master``, started on first use.

    Asking for a different master than the running session's stops that one first: a JVM has one
    SparkContext, and silently reusing a local session for a cluster request would hide that the
    cluster was never used.
    """
    check_master(master)
    with _lock:
        session = _state["session"]
        if session is not None and _state["master"] == master and _alive(session):
            return session
        if session is not None:
            _stop_locked()
        _state["session"] = _start(master, shuffle_partitions, app_name)
        _state["master"] = master
        return _state["session"]


def stop_session() -> None:
    """Stop the process's session (if any) and remove its temporary files."""
    with _lock:
        _stop_locked()


def _alive(session) -> bool:
    try:
        return not session.sparkContext._jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - a dead gateway: start a new session
        return False


def _stop_locked() -> None:
    session, tmp = _state["session"], _state["tmp"]
    _state.update(session=None, master=None, tmp=None)
    if session is not None:
        session.stop()
        _stop_gateway()
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def _stop_gateway() -> None:
    """End the JVM pyspark launched (spark-submit): SparkSession.stop() stops the context but
    leaves that process until the interpreter exits, which outlives a test session (the leak
    check names it) and holds its memory. The JVM exits when its stdin closes (pyspark's
    PythonGatewayServer watches it); a later get_session launches a new one."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    SparkContext._gateway = None
    SparkContext._jvm = None
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - a gateway already gone
        pass
    if proc is not None:
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - stuck: end it by its own handle
            proc.kill()
            proc.wait(timeout=10)


def _start(master: str, shuffle_partitions: int | None, app_name: str):
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SessionError("Spark needs Java 17 (java on PATH or JAVA_HOME); on Debian: apt-get install openjdk-17-jre-headless")
    from pyspark.sql import SparkSession

    tmp = Path(tempfile.mkdtemp(prefix="brokerconf-spark-"))
    (tmp / "log4j2.properties").write_text(_LOG4J)
    # Spark reads these from the environment when it launches the JVM and when executors start
    # Python workers; the pipeline's own jobs use no Python UDFs, but a cluster's executors must
    # still run the same interpreter if one ever does.
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if shuffle_partitions is None:
        shuffle_partitions = max(2, 2 * (os.cpu_count() or 1))
    log_option = f"-Dlog4j2.configurationFile=file:{tmp / 'log4j2.properties'}"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.host", LOOPBACK)
               .config("spark.driver.bindAddress", LOOPBACK)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.local.dir", str(tmp))
               # local mode runs everything in the driver JVM; Spark's default (1g) spills early
               .config("spark.driver.memory", os.environ.get("BROKERCONF_SPARK_MEMORY", "2g"))
               .config("spark.driver.extraJavaOptions", log_option)
               .config("spark.executor.extraJavaOptions", log_option))
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - py4j / JVM start-up errors have many types
        shutil.rmtree(tmp, ignore_errors=True)
        raise SessionError(f"could not start Spark on {master}: {exc}".splitlines()[0]
                           + (" (is the master running and reachable?)" if master.startswith("spark://") else "")) from exc
    session.sparkContext.setLogLevel("ERROR")
    _state["tmp"] = tmp
    # A process that ends without stop_session() (a script, an interrupted run) still stops the
    # context and removes its temporary directory.
    if not _state.get("atexit"):
        atexit.register(stop_session)
        _state["atexit"] = True
    return session
