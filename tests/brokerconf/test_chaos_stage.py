"""The main job's chaos stage runs its experiments side by side (brokerconf/chaos_stage.py)."""

import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from brokerconf import chaos_stage


@dataclass(frozen=True)
class ScriptRun(chaos_stage.PlannedRun):
    """A planned run whose process is a short script instead of `brokerconf chaos run`."""

    script: str = ""

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.script]


def _run(tmp_path: Path, name: str, script: str) -> ScriptRun:
    return ScriptRun(Path(f"{name}.toml"), None, (), 1.0, name, "reference", tmp_path / name, script=script)


def _writes_verdict(barrier: Path, others: int, name: str) -> str:
    """Marks itself started, waits until ``others`` more have (so it passes only when they run at
    the same time), then writes its verdict into its run directory (the current one's name)."""
    return textwrap.dedent(f"""
        import json, pathlib, sys, time
        barrier = pathlib.Path({str(barrier)!r})
        (barrier / {name!r}).touch()
        deadline = time.monotonic() + 30
        while len(list(barrier.iterdir())) < {others + 1} and time.monotonic() < deadline:
            time.sleep(0.05)
        together = len(list(barrier.iterdir())) >= {others + 1}
        print("progress line of", {name!r})
        pathlib.Path({str(barrier.parent / name)!r}, "verdict.json").write_text(
            json.dumps({{"experiment": {name!r}, "valid": together}}))
    """)


def test_runs_go_side_by_side_and_come_back_in_their_order(tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    names = ["one", "two", "three"]
    runs = [_run(tmp_path, n, _writes_verdict(barrier, len(names) - 1, n)) for n in names]
    lines: list[str] = []
    verdicts = chaos_stage.run_all(runs, parallel=3, progress=lines.append)
    assert [v["experiment"] for v in verdicts] == names
    # each saw the other two started while it waited: they ran at the same time
    assert all(v["valid"] is True for v in verdicts), verdicts
    assert "[one on reference] progress line of one" in lines
    assert (tmp_path / "two" / "console.log").read_text() == "progress line of two\n"


def test_a_run_without_a_verdict_is_unknown_with_its_exit_status_and_last_lines(tmp_path):
    broken = _run(tmp_path, "broken", "import sys; print('could not start the broker'); sys.exit(3)")
    [verdict] = chaos_stage.run_all([broken], parallel=2, progress=lambda line: None)
    assert verdict["valid"] == "unknown"
    assert "exited with 3" in verdict["error"] and "could not start the broker" in verdict["error"]


def test_the_run_command_is_brokerconf_chaos_run_into_its_directory(tmp_path):
    run = chaos_stage.PlannedRun(Path("/x/artemis-nfs-lock-loss.toml"), "artemis:process", ("recovery_s=6",),
                                 20.0, "artemis-nfs-lock-loss", "artemis:process", tmp_path / "r")
    command = run.command()
    assert command[1:5] == ["-m", "brokerconf.cli", "chaos", "run"]
    assert command[command.index("--run-dir") + 1] == str(tmp_path / "r")
    assert command[command.index("--target") + 1] == "artemis:process"
    assert command[command.index("--set") + 1] == "recovery_s=6"
    assert command[command.index("--duration") + 1] == "20"


def test_stage_times_total_is_measured_not_summed_and_each_target_is_shown():
    from brokerconf.stage_times import StageClock, format_times

    clock = StageClock(setup_seconds=30.0)
    clock.add("conformance suites", 540.0)
    clock.add("chaos experiments (beside the suites)", 200.0)
    lines = format_times({"stages": clock.to_json(), "total_seconds": 600.0, "workers": 4,
                          "targets": {"artemis": {"wall_seconds": 530.0, "test_seconds": 1050.0}}})
    assert lines[1].split() == ["set-up", "(scripts/bootstrap.sh)", "0", "m", "30.0", "s"]
    assert "total (set-up included)" in lines[4] and lines[4].endswith("10 m 00.0 s")  # not 12 m 50 s
    assert "artemis" in lines[6] and "wall 8 m 50.0 s, tests 17 m 30.0 s" in lines[6]
    assert not any("machine speed" in line for line in lines), "no probe taken, no line"


def test_the_machine_speed_probe_is_shown_with_the_stage_times_and_in_the_report():
    from brokerconf.machine_speed import probe_seconds
    from brokerconf.stage_times import format_times
    from reports.render.run_report import _times_html

    taken = probe_seconds(repeats=1)
    assert 0 < taken < 30, taken
    times = {"stages": [{"stage": "conformance suites", "seconds": 10.0}], "total_seconds": 10.0,
             "machine_speed": {"start_seconds": 0.31, "end_seconds": 0.52}}
    assert format_times(times)[-1] == ("machine speed (CPU time of a fixed piece of work; more is slower): "
                                       "at the start 0.31 s, at the end 0.52 s")
    html = _times_html(times)
    assert "took 0.31 s of CPU before the run, 0.52 s after it" in html, html


# --------------------------------------------------------------------------- minimum durations

#: file -> the stage's minimum duration for it, as the file-name rule gave it before each file
#: declared its own ``min_duration_s`` (computed once with the old rule: 20 s for a name containing
#: "shared-store" or "cluster", else 0)
OLD_MINIMUM = {
    "activemq-jdbc-lock-loss.toml": 0.0, "activemq-nfs-lease-expiry.toml": 0.0, "activemq-nfs-lock-loss.toml": 0.0,
    "activemq-shared-store-failover.toml": 20.0, "artemis-cluster-redistribution.toml": 20.0,
    "artemis-clustered-grouping.toml": 20.0, "artemis-jdbc-lock-loss.toml": 0.0, "artemis-kill-restart.toml": 0.0,
    "artemis-nfs-lease-expiry.toml": 0.0, "artemis-nfs-lock-loss.toml": 0.0, "client-partition.toml": 0.0,
    "network-bridge-partition.toml": 0.0, "reference-cluster-redistribution.toml": 20.0,
    "reference-clustered-grouping.toml": 20.0, "reference-jdbc-lock-loss.toml": 0.0,
    "reference-kill-restart.toml": 0.0, "reference-nfs-lease-expiry.toml": 0.0, "reference-nfs-lock-loss.toml": 0.0,
    "slow-topic-subscriber.toml": 0.0,
}
#: the stage's own runs, with their overrides: the old rule also gave 20 s to any run with
#: overrides (the shortened lock-loss runs, `LOCK_LOSS_SHORT`)
OLD_STAGE_MINIMUM = [0.0, 0.0, 0.0, 20.0, 20.0, 20.0, 0.0, 0.0, 0.0, 0.0, 20.0, 20.0, 20.0, 20.0, 20.0, 20.0, 20.0]


def _experiments() -> list[Path]:
    import chaos

    return sorted((Path(chaos.__file__).parent / "experiments").glob("*.toml"))


def test_every_experiment_file_gets_the_minimum_the_file_name_rule_gave():
    from chaos.experiment_file import load_experiment

    minimum = {path.name: chaos_stage.stage_duration(0.0, load_experiment(path)) for path in _experiments()}
    assert minimum == OLD_MINIMUM


def test_the_stages_runs_get_the_minimum_the_old_rule_gave_and_a_longer_stage_its_own_length():
    import chaos
    from chaos.experiment_file import load_experiment, with_overrides

    planned = []
    for file_name, target, _needs, *settings in chaos_stage.MAIN_JOB_EXPERIMENTS:
        exp = with_overrides(load_experiment(Path(chaos.__file__).parent / "experiments" / file_name), target=target,
                             settings=tuple(settings[0]) if settings else ())
        planned.append(chaos_stage.stage_duration(0.0, exp))
        assert chaos_stage.stage_duration(35.0, exp) == 35.0  # the floor only lifts a shorter stage
    assert planned == OLD_STAGE_MINIMUM


def test_the_stage_picks_no_duration_by_the_file_name():
    import ast
    import inspect

    source = inspect.getsource(chaos_stage)
    name_tests = [ast.unparse(node) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                  and any(isinstance(side, ast.Name) and side.id == "file_name" for side in node.comparators)]
    assert not name_tests, f"the stage dispatches on the experiment's file name: {name_tests}"


def test_the_stage_shortens_exactly_the_lock_loss_cuts_short_settings_names():
    """`short_settings` (what a short run of any file applies, tests/reports/real_runs.py) gives
    each of the stage's runs the overrides the stage lists for it: the NFS lock-loss cuts theirs,
    the others none."""
    import chaos
    from chaos.experiment_file import load_experiment

    for file_name, _target, _needs, *settings in chaos_stage.MAIN_JOB_EXPERIMENTS:
        exp = load_experiment(Path(chaos.__file__).parent / "experiments" / file_name)
        assert chaos_stage.short_settings(exp) == (tuple(settings[0]) if settings else ()), file_name


def test_a_database_lock_loss_cut_gets_its_own_short_settings_and_an_expired_lease_none():
    import chaos
    from chaos.experiment_file import load_experiment, with_overrides
    from chaos.schedule import shortest_duration

    experiments = Path(chaos.__file__).parent / "experiments"
    for kind in ("reference", "activemq", "artemis"):
        jdbc = load_experiment(experiments / f"{kind}-jdbc-lock-loss.toml")
        assert chaos_stage.short_settings(jdbc) == chaos_stage.JDBC_LOCK_LOSS_SHORT
        # its own 6 s lease and 24 s cut need 40 s; shortened, one cut heals in time in 22 s
        assert shortest_duration(jdbc) == 40.0
        assert shortest_duration(with_overrides(jdbc, settings=chaos_stage.JDBC_LOCK_LOSS_SHORT)) == 22.0
        assert chaos_stage.short_settings(load_experiment(experiments / f"{kind}-nfs-lease-expiry.toml")) == ()
