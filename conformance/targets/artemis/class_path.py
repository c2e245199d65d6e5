"""A local Artemis broker's jars on the JVM's application class path.

``bin/artemis run`` starts ``org.apache.activemq.artemis.boot.Artemis`` with only
``lib/artemis-boot.jar`` on the class path; that class builds a ``URLClassLoader`` over the instance's
``etc``, the distribution's ``etc``, ``lib/*.jar`` and the instance's ``lib/*.jar`` (each directory
sorted by name) and runs the broker in it. Classes a custom loader defines are found by scanning
those ~100 jars one by one, and most of them fall outside what the class archive
(runtime/class_archive.py) can serve from memory: a JFR profile of one launch had the main thread in
``JarFile.getEntry`` more often than anywhere else.

Here the same jars, in the same order, go on the application class path. The boot loader still
builds its ``URLClassLoader``, but it asks its parent (the application loader) first, which now
defines every class from the archive. Resources still come from the same places: no jar holds a file
of the instance's ``etc`` (checked for 2.40 in the test), and the ``etc`` directories stay in the
boot loader's list only. Measured with ``benchmarks/artemis_launch_cpu.py`` (README, "Time").

How it reaches the JVM: ``bin/artemis`` puts ``$JAVA_ARGS_APPEND`` after its own ``-classpath``,
and the java launcher keeps the last ``-classpath`` it is given. The instance's
``etc/artemis.profile`` (sourced by ``bin/artemis``) sets it, in a block this module owns.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BLOCK_BEGIN", "BLOCK_END", "distribution_jars", "instance_jars", "write_into_profile"]

BLOCK_BEGIN = "# brokerconf: the broker's jars on the application class path (artemis/class_path.py)"
BLOCK_END = "# brokerconf: end of the class path"
_UNSAFE = " \t\n\"'$`\\"


def _jars(directory: Path) -> list[Path]:
    # the boot loader's rule: *.jar and *.zip of the directory, sorted by file name
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if p.name.endswith((".jar", ".zip"))), key=lambda p: p.name)


def distribution_jars(artemis_home: Path) -> list[Path]:
    """The distribution's jars, in the boot loader's order: the part every launch shares (what
    its class archive is made with)."""
    return _jars(Path(artemis_home) / "lib")


def instance_jars(instance: Path) -> list[Path]:
    """The instance's own jars (a JDBC driver), after the distribution's as the boot loader puts them."""
    return _jars(Path(instance) / "lib")


def write_into_profile(instance: Path, artemis_home: Path, agent: Path | None = None) -> list[Path]:
    """Set the class path in ``instance``'s ``etc/artemis.profile`` (replacing an earlier block, so a
    jar added to the instance's lib later is taken in by calling this again); the jars, in order.

    ``agent``: the ``-javaagent`` jar, put right after the distribution's. The JVM appends an agent's
    jar to the class path itself, but only after start-up, where the archive cannot serve its classes
    (all 400 of Jolokia's were read from the jar); on the class path from the start, they are archived."""
    jars = [*distribution_jars(artemis_home), *([agent] if agent else []), *instance_jars(instance)]
    profile = Path(instance) / "etc" / "artemis.profile"
    text = profile.read_text(encoding="utf-8")
    begin = text.find(BLOCK_BEGIN)
    if begin != -1:
        end = text.index(BLOCK_END, begin) + len(BLOCK_END)
        text = text[:begin].rstrip("\n") + "\n" + text[end:].lstrip("\n")
    class_path = ":".join(str(j) for j in jars)
    unsafe = sorted(set(class_path) & set(_UNSAFE))
    if unsafe:
        # bin/artemis expands $JAVA_ARGS_APPEND unquoted: a blank would split the path, quotes stay literal
        raise ValueError(f"the Artemis class path has {unsafe!r} in it, which bin/artemis cannot pass on: {class_path}")
    block = (f"{BLOCK_BEGIN}\n"
             f"JAVA_ARGS_APPEND=\"${{JAVA_ARGS_APPEND:-}} -classpath {class_path}\"\n"
             f"{BLOCK_END}\n")
    profile.write_text(text.rstrip("\n") + "\n\n" + block, encoding="utf-8")
    return jars
