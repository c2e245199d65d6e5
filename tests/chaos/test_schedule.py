"""The nemesis schedule (chaos/schedule.py): drawn timings replay from the experiment's seed, and a
file that asks for nothing random keeps the fixed grid it always had."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerconf.chaos_stage import LOCK_LOSS_SHORT
from chaos.experiment_file import ExperimentError, load_experiment, with_overrides
from chaos.schedule import build_schedule, postpone

EXPERIMENTS = sorted((Path(__file__).resolve().parents[2] / "chaos" / "experiments").glob("*.toml"))


def grid_before_seeds(exp) -> list[tuple]:
    """The schedule as chaos/experiment.py laid it out before seeds drove anything (its
    `_schedule`, kept here only as the yardstick of "unchanged")."""
    events = []
    for index, nemesis in enumerate(exp.nemesis):
        at = nemesis.every_s
        while at + nemesis.down_s + exp.recovery_s <= exp.duration_s:
            events.append((at, nemesis.kind, index, nemesis.fault_params()))
            events.append((at + nemesis.down_s, nemesis.heal_step, index, {}))
            at += nemesis.down_s + nemesis.every_s
    return sorted(events, key=lambda event: event[:3])


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "e.toml"
    path.write_text(text)
    return path


def drawn(tmp_path, *, seed: int = 0, duration_s: float = 120, extra: str = ""):
    """An experiment whose one kill entry draws its gaps from [2, 6] s and its lengths from [0.5, 3] s."""
    return load_experiment(write(tmp_path, f'name = "x"\nduration_s = {duration_s}\nseed = {seed}\n'
                                           '[[nemesis]]\nkind = "kill"\nevery_s = 2\nevery_max_s = 6\n'
                                           f'down_s = 0.5\ndown_max_s = 3\n{extra}'))


# ---------------------------------------------------------------- files without drawn timing


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_experiment_file_keeps_its_schedule(path):
    exp = load_experiment(path)
    assert build_schedule(exp) == grid_before_seeds(exp)
    # ... at the main job's durations too, and with the shortened lock-loss settings it applies
    for duration in (5.0, 20.0, 37.5, 90.0):
        for settings in ((), LOCK_LOSS_SHORT if exp.topology.on_simulated_nfs else ()):
            short = with_overrides(exp, duration_s=duration, settings=settings)
            assert build_schedule(short) == grid_before_seeds(short), (duration, settings)


def test_two_shipped_files_give_exactly_these_steps():
    """Captured from the old `_schedule` before the schedule moved to chaos/schedule.py."""
    kill = load_experiment(next(p for p in EXPERIMENTS if p.name == "reference-kill-restart.toml"))
    assert build_schedule(kill) == [(5.0, "kill", 0, {}), (6.0, "start", 0, {}), (11.0, "kill", 0, {}),
                                     (12.0, "start", 0, {}), (17.0, "kill", 0, {}), (18.0, "start", 0, {}),
                                     (23.0, "kill", 0, {}), (24.0, "start", 0, {})]
    slow = load_experiment(next(p for p in EXPERIMENTS if p.name == "slow-topic-subscriber.toml"))
    latency, bandwidth = {"latency": 50, "jitter": 10, "stream": "both"}, {"rate": 4, "stream": "both"}
    # two entries: at 7 s one heals as the other faults again (ties: by step name, then entry)
    assert build_schedule(slow) == [(1.0, "latency", 0, latency), (2.0, "bandwidth", 1, bandwidth),
                                    (6.0, "heal", 0, {}), (7.0, "heal", 1, {}), (7.0, "latency", 0, latency),
                                    (9.0, "bandwidth", 1, bandwidth), (12.0, "heal", 0, {}), (14.0, "heal", 1, {})]


def test_fixed_entries_ignore_the_seed():
    for path in EXPERIMENTS:
        exp = load_experiment(path)
        schedules = {tuple(step[:3] for step in build_schedule(exp.model_copy(update={"seed": seed})))
                     for seed in (0, 1, 7, 2**40, -3)}
        assert len(schedules) == 1, path.name


# ---------------------------------------------------------------- drawn timing


def test_the_same_seed_gives_the_same_schedule(tmp_path):
    first = build_schedule(drawn(tmp_path, seed=7))
    again = build_schedule(drawn(tmp_path, seed=7))
    assert first == again
    assert len(first) >= 2 * 10  # 120 s of 2.5-9 s cycles: enough draws to tell schedules apart


def test_different_seeds_give_different_drawn_schedules(tmp_path):
    schedules = [tuple(step.at for step in build_schedule(drawn(tmp_path, seed=seed))) for seed in range(10)]
    assert len(set(schedules)) == 10


def test_drawn_gaps_and_lengths_stay_in_their_ranges_and_faults_never_overlap(tmp_path):
    for seed in range(20):
        exp = drawn(tmp_path, seed=seed)
        steps = build_schedule(exp)
        faults, heals = steps[0::2], steps[1::2]
        assert [s.step for s in faults] == ["kill"] * len(faults) and [s.step for s in heals] == ["start"] * len(heals)
        lengths = [heal.at - fault.at for fault, heal in zip(faults, heals)]
        gaps = [faults[0].at] + [fault.at - heal.at for heal, fault in zip(heals, faults[1:])]
        assert all(0.5 - 1e-9 <= length <= 3 + 1e-9 for length in lengths), lengths
        assert all(2 - 1e-9 <= gap <= 6 + 1e-9 for gap in gaps), gaps
        assert heals[-1].at + exp.recovery_s <= exp.duration_s
        # the draws use the range, not one end of it
        assert max(gaps) - min(gaps) > 1 and max(lengths) - min(lengths) > 0.5


def test_only_the_asked_for_timing_is_drawn(tmp_path):
    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 60\nseed = 5\n[[nemesis]]\nkind = "kill"\n'
                                          'every_s = 2\nevery_max_s = 6\ndown_s = 1.5\n'))
    steps = build_schedule(exp)
    assert {heal.at - fault.at for fault, heal in zip(steps[0::2], steps[1::2])} == {1.5}
    assert len({fault.at for fault in steps[0::2]}) == len(steps) // 2


def test_adding_an_entry_does_not_reshuffle_the_others(tmp_path):
    alone = build_schedule(drawn(tmp_path, seed=3))
    with_partition = build_schedule(drawn(tmp_path, seed=3, extra='[[nemesis]]\nkind = "partition"\nevery_s = 4\n'
                                                                  'every_max_s = 8\ndown_s = 1\ndown_max_s = 2\n'))
    assert [step for step in with_partition if step.index == 0] == alone
    assert any(step.index == 1 for step in with_partition)


def test_a_longer_run_only_adds_steps(tmp_path):
    short = build_schedule(drawn(tmp_path, seed=11, duration_s=40))
    long = build_schedule(drawn(tmp_path, seed=11, duration_s=120))
    assert long[:len(short)] == short and len(long) > len(short)


def test_a_late_heal_moves_a_drawn_schedule_with_its_drawn_lengths(tmp_path):
    exp = drawn(tmp_path, seed=7, duration_s=60)
    rest = build_schedule(exp)[2:]  # the first kill and its restart are done; the restart came late
    assert len(rest) >= 6
    # the last kill's drawn length is well above down_s: judged by down_s it would still fit below
    assert rest[-1].at - rest[-2].at > exp.nemesis[0].down_s + 0.2
    # the slack of the last restart: how late it may come and still leave recovery_s before the end
    # (a hair less, so that float rounding cannot push it over)
    slack = exp.duration_s - exp.recovery_s - rest[-1].at - 1e-6
    shifted = [(at + slack, step, i, params) for at, step, i, params in rest]
    assert postpone(rest, exp, 0, slack) == shifted  # every drawn gap and length as drawn, later
    # a little later and the last kill can no longer heal in time: it goes with its restart
    late = slack + 0.1
    assert postpone(rest, exp, 0, late) == [(at + late, step, i, params) for at, step, i, params in rest[:-2]]


# ---------------------------------------------------------------- the file and the overrides


@pytest.mark.parametrize(("keys", "message"), [
    ("every_s = 5\nevery_max_s = 3\n", r"every_max_s \(3\) is below every_s \(5\)"),
    ("every_s = 5\ndown_s = 2\ndown_max_s = 1\n", r"down_max_s \(1\) is below down_s \(2\)"),
])
def test_a_drawn_range_upside_down_is_refused_naming_the_option(tmp_path, keys, message):
    with pytest.raises(ExperimentError, match=r"'nemesis\.0'.*" + message):
        load_experiment(write(tmp_path, f'name = "x"\nduration_s = 20\n[[nemesis]]\nkind = "kill"\n{keys}'))


def test_a_range_of_one_value_is_that_value(tmp_path):
    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 20\n[[nemesis]]\nkind = "kill"\nevery_s = 5\n'
                                          'every_max_s = 5\ndown_max_s = 1\n'))
    assert build_schedule(exp) == grid_before_seeds(exp)


def test_the_command_lines_seed_overrides_the_files(tmp_path):
    exp = drawn(tmp_path, seed=1)
    assert with_overrides(exp).seed == 1
    assert with_overrides(exp, seed=7).seed == 7
    assert build_schedule(with_overrides(exp, seed=7)) == build_schedule(drawn(tmp_path, seed=7))


# ---------------------------------------------------------------- the shortest honest run


def _entries_struck(exp) -> set[int]:
    return {index for _, step, index, _ in build_schedule(exp) if step == exp.nemesis[index].kind}


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_the_shortest_duration_is_the_first_in_which_every_entry_strikes(path):
    from brokerconf.chaos_stage import short_settings
    from chaos.schedule import shortest_duration

    for settings in ((), short_settings(load_experiment(path))):
        exp = with_overrides(load_experiment(path), settings=settings)
        shortest = shortest_duration(exp)
        everyone = set(range(len(exp.nemesis)))
        assert _entries_struck(with_overrides(exp, duration_s=shortest)) == everyone, settings
        # a moment less and some entry never strikes: nothing shorter is honest
        assert _entries_struck(with_overrides(exp, duration_s=shortest - 0.01)) != everyone, settings


def test_the_shortest_duration_follows_a_drawn_first_fault(tmp_path):
    from chaos.schedule import shortest_duration

    exp = drawn(tmp_path, seed=4)
    [(at, _, _, _), (healed, _, _, _), *_] = build_schedule(exp)
    assert 2 <= at <= 6 and shortest_duration(exp) == healed + exp.recovery_s
    assert _entries_struck(with_overrides(exp, duration_s=shortest_duration(exp))) == {0}
