"""CPU seconds of one local ActiveMQ Classic launch, three ways, interleaved in one run:

- ``jar``: ``-jar bin/activemq.jar`` (how launches ran before): console.Main defines the broker's
  classes in a URLClassLoader of its own; no class archive;
- ``class-path``: the launcher as it is, every jar on the application class path, no archive;
- ``class-path+archive``: the launcher as it is, with the class archive the set-up made.

Each launch is the target's kind (STOMP and OpenWire connectors, the JDK's JMX agent; ``--mqtt``
adds the MQTT connector and its jars). For each: CPU time of the JVM from its start to STOMP
CONNECTED, CPU in the 3 s after, wall time to CONNECTED; each launch then sends and receives one
message over STOMP, so every kind is checked to work.

    .venv/bin/python benchmarks/activemq_launch_cpu.py --repeat 3

Prints each launch, then per kind the median and [min, max] of each figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launch_rounds import print_medians, run_rounds  # noqa: E402  (beside this file)

from conformance.clients import connect  # noqa: E402  (after the path insert)
from conformance.targets.activemq.class_path import MAIN_CLASS  # noqa: E402
from conformance.targets.activemq.paths import ACTIVEMQ_HOME  # noqa: E402
from conformance.targets.activemq.process import (  # noqa: E402
    ActiveMQProcess,
    activemq_available,
    activemq_mqtt_available,
    installed_class_archive,
)
from conformance.targets.runtime.class_archive import USE_ENV  # noqa: E402

KINDS = ("jar", "class-path", "class-path+archive")


class JarLaunchedActiveMQ(ActiveMQProcess):
    """The launch as it was: the same options, ``-jar bin/activemq.jar`` instead of ``-cp``."""

    def build_command(self) -> list[str]:
        command = super().build_command()
        at = command.index("-cp")
        assert command[at + 2] == MAIN_CLASS
        return [*command[:at], "-jar", str(ACTIVEMQ_HOME / "bin" / "activemq.jar"), *command[at + 3:]]


def _cpu(pid: int) -> float:
    process = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [process, *process.children(recursive=True)] if p.is_running())


def _send_and_receive(broker: ActiveMQProcess) -> None:
    with connect(broker.host, broker.stomp_port, "stomp", timeout=30) as client:
        consumer = client.subscribe("queue://bench", ack="auto")
        client.send("queue://bench", "launched")
        if consumer.receive(timeout=30) is None:
            raise SystemExit(f"{broker!r} delivered nothing")


def one_launch(kind: str, workdir: Path, mqtt: bool) -> tuple[float, float, float]:
    os.environ[USE_ENV] = "1" if kind == "class-path+archive" else "0"
    launcher = JarLaunchedActiveMQ if kind == "jar" else ActiveMQProcess
    broker = launcher(workdir, name="bench", mqtt=mqtt, jmx=True, jvm_heap_mb=512)
    began = time.monotonic()
    broker.start(timeout=120)
    wall = time.monotonic() - began
    try:
        to_serving = _cpu(broker.pid)
        mapped = str(installed_class_archive().path.resolve()) in Path(f"/proc/{broker.pid}/maps").read_text()
        if mapped != (kind == "class-path+archive"):
            raise SystemExit(f"{kind}: the class archive is {'' if mapped else 'not '}mapped")
        time.sleep(3)
        after = _cpu(broker.pid) - to_serving
        _send_and_receive(broker)
        return to_serving, after, wall
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="launches of each kind (default 3)")
    parser.add_argument("--mqtt", action="store_true", help="open the MQTT connector too")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    ok, reason = activemq_mqtt_available() if args.mqtt else activemq_available()
    if not ok:
        print(f"ActiveMQ cannot be launched: {reason}", file=sys.stderr)
        return 1
    if not installed_class_archive().exists():
        print("no class archive: run `.venv/bin/python -m conformance.targets.activemq.class_archive` first",
              file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="brokerconf-activemq-launch-bench-") as work:
        results = run_rounds(KINDS, args.repeat, Path(work), after="next 3 s",
                             launch=lambda kind, workdir: one_launch(kind, workdir, args.mqtt))
    print_medians(results, after="next 3 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
