"""Where the installed ActiveMQ Classic lives (Debian's package by default).

Its own module so the launcher (`activemq.process`) and the AMQP transport's installer (`activemq.amqp`,
which reads the installed broker's version) share it without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

ACTIVEMQ_HOME = Path(os.environ.get("BROKERCONF_ACTIVEMQ_HOME", "/usr/share/activemq"))
JAVA_SHARE = Path(os.environ.get("BROKERCONF_JAVA_SHARE", "/usr/share/java"))
