"""Experiment files are refused up front, naming the offending key."""

import pytest

from chaos.experiment_file import ExperimentError, load_experiment


def write(tmp_path, text):
    path = tmp_path / "e.toml"
    path.write_text(text)
    return path


def test_defaults_fill_a_minimal_file(tmp_path):
    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[[nemesis]]\nkind = "kill"\nevery_s = 2\n'))
    assert exp.target.name == "reference:process" and exp.workload.producers == 2
    assert exp.nemesis[0].down_s == 1.0 and exp.checkers.total_queue


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    with pytest.raises(ExperimentError, match=r"unknown key 'producer' in workload: did you mean 'producers'\?"):
        load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[workload]\nproducer = 3\n'))


def test_bad_value_is_named(tmp_path):
    with pytest.raises(ExperimentError, match=r"'nemesis.0.kind'"):
        load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[[nemesis]]\nkind = "meteor"\nevery_s = 1\n'))


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ExperimentError, match="not found"):
        load_experiment(tmp_path / "nope.toml")
    with pytest.raises(ExperimentError, match="not valid TOML"):
        load_experiment(write(tmp_path, "name = \n"))


def test_faults_never_overlap_and_end_before_the_run(tmp_path):
    from chaos.experiment import _schedule

    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 20\n[[nemesis]]\nkind = "partition"\n'
                                          'every_s = 4\ndown_s = 10\n'))
    assert _schedule(exp) == [(4, "partition", 0, {"proxy": "broker", "direction": "both"}),
                              (14, "heal", 0, {"proxy": "broker"})]
    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 20\n[[nemesis]]\nkind = "kill"\nevery_s = 5\n'))
    assert [(at, step) for at, step, _, _ in _schedule(exp)] == [(5, "kill"), (6, "start"), (11, "kill"), (12, "start"), (17, "kill"), (18, "start")]
