"""Interleaved broker launches and their medians, shared by the launch benchmarks
(artemis_launch_cpu.py, activemq_launch_cpu.py): one launch of each kind per round, so the
machine's other load falls on every kind alike."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path
from typing import Callable

#: CPU to serving, CPU in the window after it, wall time to serving (seconds)
Launch = tuple[float, float, float]


def run_rounds(kinds: tuple[str, ...], repeat: int, work: Path, launch: Callable[[str, Path], Launch],
               after: str) -> dict[str, list[Launch]]:
    """``repeat`` rounds of ``launch(kind, workdir)`` for each kind, each launch printed as it ends;
    ``after`` names the window of the second figure ("next 10 s")."""
    results: dict[str, list[Launch]] = {kind: [] for kind in kinds}
    for round_ in range(repeat):
        for kind in kinds:
            workdir = Path(work) / f"{kind.replace('+', '-')}-{round_}"
            results[kind].append(launch(kind, workdir))
            shutil.rmtree(workdir, ignore_errors=True)
            start, later, wall = results[kind][-1]
            print(f"{kind:>18}  CPU to serving {start:5.2f} s  {after} {later:5.2f} s  wall {wall:5.2f} s", flush=True)
    return results


def print_medians(results: dict[str, list[Launch]], after: str) -> None:
    """Per kind: the median and [min, max] of each figure, and the median of the two CPU figures' sum."""
    print()
    print(f"{'kind':>18}  {'CPU to serving':>22}  {'CPU ' + after:>22}  {'CPU total':>8}  {'wall to serving':>22}")
    for kind, runs in results.items():
        def figure(i: int) -> str:
            values = [r[i] for r in runs]
            return f"{statistics.median(values):5.2f} [{min(values):.2f}, {max(values):.2f}]"
        total = statistics.median(r[0] + r[1] for r in runs)
        print(f"{kind:>18}  {figure(0):>22}  {figure(1):>22}  {total:8.2f}  {figure(2):>22}")
