"""CPU seconds of one local Artemis launch, four ways, interleaved in one run:

- ``console``: the broker's web server and console serving Jolokia, the broker's classes in the
  boot loader's ``URLClassLoader``, no class archive (how launches ran at first);
- ``agent``: Jolokia's JVM agent and no web server, still the boot loader's class loader, no archive;
- ``agent+archive``: as ``agent``, with a class archive made for that layout (the launcher before
  artemis/class_path.py; the benchmark makes this archive itself, in its temporary directory);
- ``class-path+archive``: the launcher as it is (every jar on the application class path) with the
  class archive the set-up made.

For each launch: CPU time of the JVM from its start to STOMP CONNECTED, CPU in the 10 s after
(a console keeps starting after the broker serves), wall time to CONNECTED; each run also reads
the broker's version over Jolokia the way it serves it, so every kind is checked to work.

    .venv/bin/python benchmarks/artemis_launch_cpu.py --repeat 3

Prints each launch, then per kind the median and [min, max] of each figure. The older kinds are
rebuilt from the launcher's own instance: the template's bootstrap.xml (which keeps the web server),
the profile without the agent, without the class path block or with another archive.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launch_rounds import print_medians, run_rounds  # noqa: E402  (beside this file)

from conformance.scenario import Scenario  # noqa: E402  (after the path insert)
from conformance.targets.artemis.dist import installed  # noqa: E402
from conformance.targets.artemis.process import ArtemisProcess, class_archive, jolokia_call  # noqa: E402
from conformance.targets.artemis.class_path import BLOCK_BEGIN, BLOCK_END  # noqa: E402
from conformance.targets.runtime.class_archive import USE_ENV  # noqa: E402

KINDS = ("console", "agent", "agent+archive", "class-path+archive")


def _as_before(broker: ArtemisProcess) -> None:
    """Turn the created instance back into one whose web console serves Jolokia."""
    log = (broker.workdir / "create.log").read_text(encoding="utf-8")
    template = re.search(r"copied from the Artemis template (\S+)", log)
    if template is None:
        raise SystemExit(f"{broker.workdir}: the instance was not copied from a template; cannot rebuild the console")
    made = Path(template.group(1))
    meta = json.loads((made / "template.json").read_text(encoding="utf-8"))
    boot = (made / "instance" / "etc" / "bootstrap.xml").read_text(encoding="utf-8")
    made_at = meta["created_at"]
    boot = boot.replace(f"file:{made_at}", f"file:{broker.instance}").replace(made_at, os.path.realpath(broker.instance))
    boot = boot.replace(f":{meta['http_port']}\"", f":{broker.http_port}\"")  # the template's placeholder port
    (broker.instance / "etc" / "bootstrap.xml").write_text(boot, encoding="utf-8")
    profile = broker.instance / "etc" / "artemis.profile"
    profile.write_text(re.sub(r" -javaagent:\S+", "", profile.read_text(encoding="utf-8")), encoding="utf-8")


def _with_boot_loader(broker: ArtemisProcess, archive: Path | None) -> None:
    """Take the class path block out of the instance's profile (the broker's classes go back into
    the boot loader's URLClassLoader) and map ``archive`` instead of the set-up's, or none."""
    profile = broker.instance / "etc" / "artemis.profile"
    text = profile.read_text(encoding="utf-8")
    begin = text.index(BLOCK_BEGIN)
    text = text[:begin] + text[text.index(BLOCK_END, begin) + len(BLOCK_END):]
    if archive is None:
        text = re.sub(r" -XX:SharedArchiveFile=\S+", "", text)
    else:
        text = re.sub(r"-XX:(SharedArchiveFile|ArchiveClassesAtExit)=\S+", lambda m: f"-XX:{m.group(1)}={archive}", text)
    profile.write_text(text, encoding="utf-8")


def make_boot_loader_archive(work: Path) -> Path:
    """An archive of the boot loader's layout (what ``agent+archive`` maps): one launch that writes it."""
    archive = work / "boot-loader.jsa"
    broker = ArtemisProcess(work / "dump", Scenario(name="bench", protocols=("stomp", "mqtt", "amqp")),
                            jvm_heap_mb=256, class_archive_dump=archive)
    broker._create_instance(timeout=120)
    _with_boot_loader(broker, archive)
    broker.start(timeout=180)
    try:
        broker.jolokia({"type": "read", "mbean": f'org.apache.activemq.artemis:broker="{broker.name}"',
                        "attribute": "Version"})
    finally:
        broker.stop()
    if not archive.is_file():
        raise SystemExit(f"the boot-loader launch wrote no archive; its log's tail:\n{broker.log_tail(40)}")
    return archive


def _cpu(pid: int) -> float:
    process = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [process, *process.children(recursive=True)] if p.is_running())


def one_launch(kind: str, workdir: Path, boot_loader_archive: Path) -> tuple[float, float, float]:
    os.environ[USE_ENV] = "1" if kind.endswith("+archive") else "0"
    broker = ArtemisProcess(workdir, Scenario(name="bench", protocols=("stomp",)), jvm_heap_mb=256)
    broker._create_instance(timeout=120)
    if kind != "class-path+archive":
        _with_boot_loader(broker, boot_loader_archive if kind == "agent+archive" else None)
    if kind == "console":
        _as_before(broker)
    began = time.monotonic()
    broker.start(timeout=180)
    wall = time.monotonic() - began
    try:
        to_serving = _cpu(broker.pid)
        request = {"type": "read", "mbean": f'org.apache.activemq.artemis:broker="{broker.name}"', "attribute": "Version"}
        if kind == "console":
            jolokia_call(broker.host, broker.http_port, broker.admin, request, timeout=60)
        else:
            broker.jolokia(request)
        time.sleep(10)
        return to_serving, _cpu(broker.pid) - to_serving, wall
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="launches of each kind (default 3)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    ok, reason = installed()
    if not ok:
        print(f"Artemis is not installed: {reason}", file=sys.stderr)
        return 1
    if not class_archive(ArtemisProcess(Path("/nonexistent"), Scenario(name="x")).artemis_home).exists():
        print("no class archive: run `.venv/bin/python -m conformance.targets.artemis.class_archive` first",
              file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="brokerconf-launch-bench-") as work:
        os.environ[USE_ENV] = "1"
        boot_loader_archive = make_boot_loader_archive(Path(work))
        results = run_rounds(KINDS, args.repeat, Path(work), after="next 10 s",
                             launch=lambda kind, workdir: one_launch(kind, workdir, boot_loader_archive))
    print_medians(results, after="next 10 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
