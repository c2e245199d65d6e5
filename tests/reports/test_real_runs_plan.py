"""real_runs.py, without running anything: which short run each experiment file gets, and which
files a machine without PostgreSQL or FUSE leaves out, naming the requirement."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerconf import chaos_stage
from chaos.schedule import build_schedule
from tests.reports import real_runs
from tests.reports.real_runs import experiment_files, missing_requirement, short_plan

FILES = experiment_files()


def test_every_shipped_file_is_planned():
    assert len(FILES) >= 19 and all(f.suffix == ".toml" for f in FILES)


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_each_file_runs_as_the_main_job_would_run_it_short(file, tmp_path):
    run, exp = short_plan(file, tmp_path)
    assert run.run_dir == tmp_path / f"chaos-{file.stem}" and run.target is None  # the file's own target
    assert run.settings == chaos_stage.short_settings(exp) and exp.duration_s == run.duration_s
    assert run.duration_s >= exp.min_duration_s
    # every [[nemesis]] entry has a fault in the schedule of that length
    struck = {index for _, step, index, _ in build_schedule(exp) if step == exp.nemesis[index].kind}
    assert struck == set(range(len(exp.nemesis))), (file.name, run.duration_s)
    command = run.command()
    assert command[3:6] == ["chaos", "run", str(file)] and command[command.index("--run-dir") + 1] == str(run.run_dir)


def test_a_machine_without_postgresql_leaves_out_the_jdbc_files_only(monkeypatch, tmp_path):
    from machinery import postgres

    monkeypatch.setattr(postgres, "availability", lambda: (False, "no PostgreSQL server (test)"))
    missing = {f.stem: missing_requirement(short_plan(f, tmp_path)[1]) for f in FILES}
    left_out = {stem: m for stem, m in missing.items() if m is not None}
    assert set(left_out) == {f.stem for f in FILES if "jdbc" in f.read_text()}, left_out
    assert len(left_out) == 3 and all(m[0] == "postgresql" and "(test)" in m[1] for m in left_out.values())


def test_a_machine_without_fuse_leaves_out_the_nfs_files(monkeypatch, tmp_path):
    import machinery.sharedstore.harness as harness

    monkeypatch.setattr(harness, "fuse_unavailable", lambda: "no /dev/fuse (test)")
    missing = {f.stem: missing_requirement(short_plan(f, tmp_path)[1]) for f in FILES}
    left_out = {stem: m for stem, m in missing.items() if m is not None}
    assert set(left_out) == {f.stem for f in FILES if 'store = "nfs"' in f.read_text()}, left_out
    assert len(left_out) == 6 and all(m == ("fuse", "no /dev/fuse (test)") for m in left_out.values())


def test_a_run_left_out_skips_or_fails_and_is_never_made(monkeypatch, tmp_path):
    from machinery import postgres

    monkeypatch.setattr(postgres, "availability", lambda: (False, "no PostgreSQL server (test)"))
    monkeypatch.setattr(chaos_stage, "run_all", lambda *a, **k: pytest.fail("nothing may run"))
    runs = real_runs.RealRuns(tmp_path)
    jdbc = next(f for f in FILES if f.stem == "reference-jdbc-lock-loss")
    monkeypatch.delenv("BROKERCONF_REQUIRE", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"\(test\)"):
        runs.run_dir(jdbc)
    monkeypatch.setenv("BROKERCONF_REQUIRE", "postgresql")
    with pytest.raises(pytest.fail.Exception, match="postgresql is required here"):
        runs.run_dir(jdbc)
    assert runs.verdicts == {} and not Path(tmp_path / "stage.log").exists()
