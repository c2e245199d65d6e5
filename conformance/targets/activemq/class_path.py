"""The ActiveMQ JVM's application class path, and the class-data archive keyed by it.

Every jar of the installation is put on the JVM's own class path (``-cp``) and
``org.apache.activemq.console.Main`` is run directly, rather than ``-jar bin/activemq.jar``
letting ``console.Main`` define the broker's classes in a URLClassLoader of its own: classes the
application loader defines are found without scanning every jar per lookup, and they are what a
class-data archive (runtime/class_archive.py) can map (process.py's docstring has the numbers).

`base_class_path` is the part every launch has: ``bin/activemq.jar``, then ``lib/*.jar`` and
``lib/optional/*.jar``, each sorted by name (``console.Main`` sorts its extension directories the
same way, so a class found twice resolves as before). A launch appends the jars its transports or
store need after it. The archive (activemq/class_archive.py makes it) is dumped by a JVM whose class
path is this base alone: the JVM maps an archive when its class path *starts* with the dump's, so
every kind of launch, whatever it appends, maps the one archive.
"""

from __future__ import annotations

import os
from pathlib import Path

from conformance.targets.activemq.paths import find_java
from conformance.targets.runtime.class_archive import ClassArchive

__all__ = ["MAIN_CLASS", "base_class_path", "class_archive"]

#: what ``bin/activemq.jar``'s manifest names as its main class
MAIN_CLASS = "org.apache.activemq.console.Main"


def base_class_path(activemq_home: Path) -> list[Path]:
    """``bin/activemq.jar``, then the jars of ``lib`` and ``lib/optional``, each sorted by name."""
    home = Path(activemq_home)
    return [home / "bin" / "activemq.jar",
            *sorted((home / "lib").glob("*.jar"), key=lambda p: p.name),
            *sorted((home / "lib" / "optional").glob("*.jar"), key=lambda p: p.name)]


def _file_identity(path: Path) -> str:
    """Path, target and size + mtime of one jar: what the JVM compares before it maps an archive
    (Debian's lib/ entries are symlinks into /usr/share/java, upgraded by other packages than
    ``activemq``, so the installed package's version alone would not see such a change)."""
    try:
        real = path.resolve()
        stat = real.stat()
    except OSError:
        return f"{path} missing"
    return f"{path} -> {real} {stat.st_size} {stat.st_mtime_ns}"


def _java_identity() -> str:
    """The java ActiveMQ launches run (`find_java`: BROKERCONF_JAVA first, so not necessarily the
    JAVA_HOME / PATH one runtime/class_archive.py keys every archive by), resolved, with its mtime."""
    java = find_java()
    return _file_identity(Path(java)) if java else "none"


def class_archive(activemq_home: Path) -> ClassArchive:
    """The archive of this installation's broker JVMs, keyed by the java that runs them and every
    jar of the base class path (a changed, added or removed jar gets a new key)."""
    jars = base_class_path(activemq_home)
    return ClassArchive("activemq", {"home": os.path.abspath(activemq_home), "activemq_java": _java_identity(),
                                     "class_path": [_file_identity(jar) for jar in jars]})
