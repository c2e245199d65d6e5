"""JVM options the harness gives every broker JVM it launches (ActiveMQ and Artemis processes).

Quick start: ``-XX:TieredStopAtLevel=1`` keeps the JIT at its first tier (C1). A broker in a test
lives seconds to minutes and handles a few thousand messages, so the optimising compiler's work
(C2, running on the same two cores as every other worker) is spent before it could pay back.
Measured on one Artemis 2.40 launch to STOMP CONNECTED, 4 launches each, interleaved (README,
"Time"): 3.63 s of CPU without it, 1.98 s with it; 1.70 s and 1.28 s of wall time. The main job
and the tests are CPU-bound on two cores, so that CPU is wall time.

Benchmarks measure throughput, which the optimising compiler is for: `brokerconf bench` turns the
quick start off (``BROKERCONF_JVM_QUICK_START=0``, see `full_jit_for_benchmarks`), so its JVM
brokers run as they would in production.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: set to "0" to launch broker JVMs with the JVM's default (tiered C1 + C2) compilation
QUICK_START_ENV = "BROKERCONF_JVM_QUICK_START"
#: the options of a quick start (see the module docstring)
QUICK_START_OPTIONS = ("-XX:TieredStopAtLevel=1",)


def quick_start_options() -> list[str]:
    """The quick-start options, unless ``BROKERCONF_JVM_QUICK_START=0`` turns them off."""
    return [] if os.environ.get(QUICK_START_ENV, "1") == "0" else list(QUICK_START_OPTIONS)


def full_jit_for_benchmarks() -> None:
    """Launch this process's broker JVMs with full compilation from now on (benchmarks)."""
    os.environ[QUICK_START_ENV] = "0"


def java_identity() -> str:
    """The java a broker's launcher script runs (JAVA_HOME's, else PATH's), resolved, with its
    mtime: what is made with one JDK (an Artemis template, a class archive) is keyed by it, so a
    different or upgraded JDK gets its own."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if not java:
        return "none"
    real = Path(java).resolve()
    try:
        return f"{real}@{real.stat().st_mtime_ns}"
    except OSError:
        return str(real)
