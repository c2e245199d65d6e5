"""Where the installed ActiveMQ Classic and the Java that runs it live (Debian's packages by default).

Its own module so the launcher (`activemq.process`) and the AMQP transport's installer (`activemq.amqp`,
which reads the installed broker's version) share it without importing each other.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ACTIVEMQ_HOME = Path(os.environ.get("BROKERCONF_ACTIVEMQ_HOME", "/usr/share/activemq"))
JAVA_SHARE = Path(os.environ.get("BROKERCONF_JAVA_SHARE", "/usr/share/java"))


def find_java() -> str | None:
    """A ``java`` (11+): $BROKERCONF_JAVA, Debian's default-java, PATH, $JAVA_HOME, first executable wins.

    Shared by the launcher (`activemq.process`) and the JMX helper (`activemq.jmx`, Java's source launcher).
    """
    candidates: list[str | None] = [
        os.environ.get("BROKERCONF_JAVA"),
        "/usr/lib/jvm/default-java/bin/java",  # Debian's default-jre symlink, as the package uses
        shutil.which("java"),
    ]
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None
