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
    from chaos.schedule import build_schedule

    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 20\n[[nemesis]]\nkind = "partition"\n'
                                          'every_s = 4\ndown_s = 10\n'))
    assert build_schedule(exp) == [(4, "partition", 0, {"direction": "both"}), (14, "heal", 0, {})]
    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 20\n[[nemesis]]\nkind = "kill"\nevery_s = 5\n'))
    # 17 s + 1 s down + 3 s of recovery would end after the run: the third kill is not scheduled
    assert [(at, step) for at, step, _, _ in build_schedule(exp)] == [(5, "kill"), (6, "start"), (11, "kill"), (12, "start")]
    exp = exp.model_copy(update={"recovery_s": 0.0})
    assert [at for at, step, _, _ in build_schedule(exp) if step == "kill"] == [5, 11, 17]


def test_a_late_heal_moves_that_nemesis_next_faults(tmp_path):
    from chaos.schedule import build_schedule, postpone

    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 30\n[[nemesis]]\nkind = "kill"\nevery_s = 5\n'
                                          '[[nemesis]]\nkind = "partition"\nevery_s = 7\ndown_s = 2\n'))
    schedule = build_schedule(exp)
    assert [(at, step) for at, step, i, _ in schedule if i == 0] == [(5, "kill"), (6, "start"), (11, "kill"),
                                                                      (12, "start"), (17, "kill"), (18, "start"),
                                                                      (23, "kill"), (24, "start")]
    # the restart scheduled at 6 s finished at 14 s: the next kill comes every_s (5 s) after it,
    # at 19 s; the last one (25 s + 1 s down + 3 s of recovery = 29 s) still fits, the one after
    # (31 s) was never scheduled; the other nemesis keeps its slots
    rest = [e for e in schedule if e[0] > 6 or e[2] == 1]
    moved = postpone(rest, exp, 0, 8.0)
    assert [(at, step) for at, step, i, _ in moved if i == 0] == [(19, "kill"), (20, "start"), (25, "kill"),
                                                                   (26, "start")]
    assert [e for e in moved if e[2] == 1] == [e for e in rest if e[2] == 1]
    # late by 10 s: the kill moved to 27 s would heal at 28 s, 1 s before the end instead of 3:
    # it is dropped with its restart
    assert [(at, step) for at, step, i, _ in postpone(rest, exp, 0, 10.0) if i == 0] == [
        (21, "kill"), (22, "start")]


def test_toxic_attributes_reach_the_schedule(tmp_path):
    from chaos.schedule import build_schedule

    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 10\n[workload]\nkind = "topic"\n'
                                          'destination = "topic://t"\nslow_subscribers = 1\n'
                                          '[[nemesis]]\nkind = "latency"\nclients = "slow"\nlatency_ms = 250\n'
                                          'jitter_ms = 5\nevery_s = 2\ndown_s = 3\n'))
    assert build_schedule(exp)[:2] == [(2, "latency", 0, {"latency": 250, "jitter": 5, "stream": "both"}), (5, "heal", 0, {})]


def test_workload_destination_must_fit_its_kind(tmp_path):
    with pytest.raises(ExperimentError, match="a topic workload needs destination topic://NAME"):
        load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[workload]\nkind = "topic"\n'
                                        'destination = "queue://q"\n'))


def test_slow_proxy_fault_needs_slow_subscribers(tmp_path):
    with pytest.raises(ExperimentError, match="slow_subscribers = 0"):
        load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[[nemesis]]\nkind = "bandwidth"\n'
                                        'clients = "slow"\nevery_s = 1\n'))


def test_master_is_a_node_only_of_a_shared_store(tmp_path):
    with pytest.raises(ExperimentError, match=r"node 'master' is not a node of this single topology"):
        load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[[nemesis]]\nkind = "kill"\n'
                                        'node = "master"\nevery_s = 1\n'))
    exp = load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[topology]\nkind = "shared-store"\n'
                                          'nodes = 3\n[[nemesis]]\nkind = "kill"\nnode = "master"\nevery_s = 1\n'))
    assert exp.topology.node_names == ["A", "B", "C"]


def test_bad_policy_is_refused_with_its_reason(tmp_path):
    with pytest.raises(ExperimentError, match="must be queue://NAME or topic://NAME"):
        load_experiment(write(tmp_path, 'name = "x"\nduration_s = 5\n[[policy]]\npattern = "slow.>"\n'
                                        'pending_message_limit = 3\n'))
