"""How fast this machine's CPU was when a run started and ended: the CPU time of one fixed piece of
pure-Python work. The same machine (a VM on a shared host) has run that work 1.8 times slower at
one moment than a minute later, with nothing of ours running, and the main job's broker JVMs
needed half as much CPU again in its afternoon as after its morning boot. A run's times are read
against this figure: two runs with different probes did not run at the same machine speed,
whatever their code did."""

from __future__ import annotations

import time

#: the fixed work: 0.2 to 0.4 s of CPU on this project's 2-core machines
PROBE_RANGE = 10**7


def probe_seconds(repeats: int = 3) -> float:
    """The least process CPU time (s) of `repeats` runs of the fixed work: process time, so time
    spent waiting for a core is left out; the least, so one interruption does not count."""
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        sum(range(PROBE_RANGE))
        best = min(best, time.process_time() - began)
    return round(best, 3)
