"""Lock loss on the simulated NFS store (machinery/sharedstore): for each mount-option setting, cut host
A's storage link while it holds the lock and measure, over ``--repeat`` runs,

- detection: how long A's next write takes to fail (soft mounts: EIO after the retries), next to
  the figure the options imply (`MountOptions.soft_failure_after`);
- takeover: how long until host B's F_SETLK gets the lock (the lease running out on the store).

    .venv/bin/python benchmarks/lockloss_bench.py --repeat 5 --lease 2 \\
        --options soft,timeo=5,retrans=2 --options soft,timeo=20,retrans=2,lookupcache=none,sync

Prints one line per setting: median and [min, max] of each figure.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from machinery.faultproxy import start_fault_proxy  # noqa: E402  (after the path insert)
from machinery.sharedstore.harness import SharedStoreRig  # noqa: E402
from chaos.nemesis.lock import lock_loss_nemesis  # noqa: E402
from machinery.sharedstore.mountopts import MountOptionError, MountOptions  # noqa: E402


def read_answer(process: subprocess.Popen, timeout: float) -> tuple[str, float] | None:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        return None
    status, _, elapsed = process.stdout.readline().strip().rpartition(" ")
    return status, float(elapsed)


def one_run(proxy_api: str, options: str, lease: float, vers: int) -> tuple[float | None, float | None]:
    model = MountOptions.parse(options)
    limit = max(10 * lease, 3 * model.soft_failure_after())
    with tempfile.TemporaryDirectory(prefix="bc-lockloss-") as base, \
            SharedStoreRig(base, proxy_api, options=options, lease=lease, vers=vers) as rig:
        holder = subprocess.Popen([sys.executable, "-m", "machinery.sharedstore.holder", rig.path("A")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        held: list[int] = []
        cut_link = lock_loss_nemesis(rig)
        try:
            for command in ("open", "lock"):
                holder.stdin.write(command + "\n")
                holder.stdin.flush()
                answer = read_answer(holder, 20)
                if answer is None or answer[0] != "ok":
                    raise RuntimeError(f"host A could not {command}: {answer}")
            cut_link.invoke("partition", host="A")
            cut = time.monotonic()
            holder.stdin.write("write\n")
            holder.stdin.flush()
            takeover = None
            fd = os.open(os.path.join(rig.path("B"), "lock"), os.O_RDWR)
            held.append(fd)
            while time.monotonic() - cut < limit:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    takeover = time.monotonic() - cut
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                time.sleep(0.05)
            answer = read_answer(holder, max(0.0, limit - (time.monotonic() - cut)))
            detection = answer[1] if answer and answer[0] == "err EIO" else None
            cut_link.invoke("heal", host="A")
            return detection, takeover
        finally:
            for fd in held:
                os.close(fd)
            cut_link.teardown()
            holder.kill()
            holder.wait(60)
            holder.stdin.close()
            holder.stdout.close()


def spread(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "never"
    text = f"{statistics.median(got):6.2f} s [{min(got):.2f}, {max(got):.2f}]"
    return text + (f" ({len(values) - len(got)} never)" if len(got) < len(values) else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lease", type=float, default=2.0, help="the store's NFSv4 lease, seconds")
    ap.add_argument("--vers", type=int, choices=(3, 4), default=4)
    ap.add_argument("--options", action="append", help="mount options (repeatable)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat: needs at least 1 run")
    settings = args.options or ["soft,timeo=5,retrans=2,lookupcache=none,sync"]
    for options in settings:
        try:
            MountOptions.parse(options)
        except MountOptionError as exc:
            ap.error(f"--options: {exc}")
    proxy = start_fault_proxy()
    try:
        print(f"{'options':48} {'model EIO':>9}  {'detection (median [min, max])':32} {'lease':>6}  takeover")
        for options in settings:
            runs = [one_run(proxy.api_url, options, args.lease, args.vers) for _ in range(args.repeat)]
            model = MountOptions.parse(options)
            model_eio = f"{model.soft_failure_after():7.1f} s" if model.soft else "    never"
            print(f"{options:48} {model_eio:>9}  {spread([r[0] for r in runs]):32} {args.lease:5.1f}s  "
                  f"{spread([r[1] for r in runs])}  (v{args.vers}, {args.repeat} runs)", flush=True)
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
