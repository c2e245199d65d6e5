"""The nemesis schedule of one run: the experiment's [[nemesis]] entries and its seed turned into
the time-ordered list of fault and heal steps (Jepsen's generator idea, REFERENCES.md: the
schedule is data drawn from a seed, so a failing run replays exactly from that seed).

Each entry is laid out on its own, from the start of the run: quiet for a gap, the fault, down
for a while, the heal, quiet for the next gap, and so on while a fault can still heal
``recovery_s`` before the end. An entry that asks for nothing random has a fixed gap
(``every_s``) and a fixed fault length (``down_s``): the grid every experiment file had before
seeds drove anything, unchanged. An entry with ``every_max_s`` draws each gap uniformly from
[every_s, every_max_s], one with ``down_max_s`` each fault's length from [down_s, down_max_s].

The draws of entry N come from their own generator, seeded with the experiment's seed and N, so
adding, removing or editing another entry never reshuffles this one's timings, and a longer run
only appends steps (each fault draws its gap, then its length, in order).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from chaos.experiment_file import Experiment, NemesisSection


class Step(NamedTuple):
    """One step of the schedule: at ``at`` seconds into the run, nemesis ``index`` does ``step``
    (a fault kind or its heal) with ``params``. A plain tuple too: ``(at, step, index, params)``."""

    at: float
    step: str
    index: int
    params: dict


def draws_for(seed: int, index: int) -> random.Random:
    """The generator of entry ``index``'s timings. A string seed is hashed (SHA-512) by `random`,
    the same on every machine and Python run, and keeps (seed, index) pairs apart."""
    return random.Random(f"brokerconf-schedule:{seed}:{index}")


def _timings(nemesis: NemesisSection, rng: random.Random):
    """(gap before the fault, fault length) for each fault of the entry, for ever, in order."""
    while True:
        gap = nemesis.every_s if nemesis.every_max_s is None else rng.uniform(nemesis.every_s, nemesis.every_max_s)
        down = nemesis.down_s if nemesis.down_max_s is None else rng.uniform(nemesis.down_s, nemesis.down_max_s)
        yield gap, down


def build_schedule(exp: Experiment) -> list[Step]:
    """The whole run's steps, faults and their heals, in time order (ties: by step, then entry);
    every heal comes at least ``recovery_s`` before the end, and an entry's faults never overlap."""
    steps: list[Step] = []
    for index, nemesis in enumerate(exp.nemesis):
        timings = _timings(nemesis, draws_for(exp.seed, index))
        gap, down = next(timings)
        at = gap
        while at + down + exp.recovery_s <= exp.duration_s:
            steps.append(Step(at, nemesis.kind, index, nemesis.fault_params()))
            steps.append(Step(at + down, nemesis.heal_step, index, {}))
            gap, next_down = next(timings)
            # summed as the fixed grid always was (this fault's length plus the next gap, then
            # added), so a file without drawn timings keeps its schedule to the last bit
            at += down + gap
            down = next_down
    return sorted(steps, key=lambda step: step[:3])


def postpone(schedule: list[Step], exp: Experiment, index: int, late: float) -> list[Step]:
    """The rest of ``schedule`` after nemesis ``index``'s heal finished ``late`` seconds after its
    slot: that nemesis's later steps move by as much, so its next fault still comes its gap after
    the heal (the experiment file's promise; a JVM broker's restart takes seconds, the reference
    broker's a fraction of one). A moved fault whose heal can no longer come ``recovery_s``
    before the end is dropped with its heal, as `build_schedule` never schedules one. Each fault's
    length is read from its own heal's slot, so drawn lengths move as they were drawn."""
    heal = exp.nemesis[index].heal_step
    heal_slots = sorted(at for at, step, i, _ in schedule if i == index and step == heal)
    kept, dropping = [], False
    for at, step, i, params in schedule:
        if i != index:
            kept.append(Step(at, step, i, params))
            continue
        if step != heal:  # a fault: keep it (moved) only if its heal (the first slot from it on) still comes in time
            heal_at = next((slot for slot in heal_slots if slot >= at), at)
            dropping = heal_at + late + exp.recovery_s > exp.duration_s
        if not dropping:
            kept.append(Step(at + late, step, i, params))
    return sorted(kept, key=lambda step: step[:3])


def shortest_duration(exp: Experiment) -> float:
    """The shortest ``duration_s`` in which every [[nemesis]] entry strikes at least once: each
    entry's first fault (its first gap and length, drawn as `build_schedule` draws them) heals
    ``recovery_s`` before the end. A shorter run of ``exp`` would leave an entry out of the
    schedule, and a run where a nemesis never struck says nothing about it."""
    ends = []
    for index, nemesis in enumerate(exp.nemesis):
        gap, down = next(_timings(nemesis, draws_for(exp.seed, index)))
        ends.append(gap + down)
    return max(ends, default=0.0) + exp.recovery_s
