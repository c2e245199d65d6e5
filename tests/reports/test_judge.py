"""Judging a run from its history alone (reports/judge.py, reports/run_record.py) and the one
verdict merge (reports/verdicts.py), on literal histories named after what they show; and, on a
real short run, a lone copy of the history judged in an empty directory."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from chaos.history import HARNESS, History, read_history
from reports.judge import judge_history, judge_run, pair_broker_discards
from reports.pipeline.load import line_problem
from reports.run_record import read_record
from reports.verdicts import UNKNOWN, merge

T = "topic://prices"


# ---------------------------------------------------------------------- the merge


def test_no_evidence_is_unknown_not_a_pass():
    assert merge([]) == UNKNOWN


@pytest.mark.parametrize("values, expected", [
    ([True, True], True), ([True, UNKNOWN], UNKNOWN), ([UNKNOWN, False, True], False), ([False], False)])
def test_false_beats_unknown_beats_true(values, expected):
    assert merge(values) == expected


@pytest.mark.parametrize("bad", [None, "true", "valid"])
def test_a_value_that_is_no_verdict_is_refused(bad):
    with pytest.raises(ValueError, match="true, false or 'unknown'"):
        merge([True, bad])


def test_the_pipeline_merge_is_the_same_function():
    from reports.pipeline import verdicts as pipeline_verdicts

    assert pipeline_verdicts.merge is merge and pipeline_verdicts.UNKNOWN == UNKNOWN


# ---------------------------------------------------------------------- literal histories


def experiment(kind: str = "queue", destination: str = "queue://q", nemesis: tuple = (), **checkers) -> dict:
    return {"format": 1, "experiment": {
        "name": "exp", "workload": {"kind": kind, "destination": destination},
        "nemesis": [{"kind": k} for k in nemesis],
        "checkers": {"total_queue": True, "duplicates_allowed": False, "topic_fanout": True,
                     "failover_downtime": True, "max_downtime_s": None, **checkers}}}


def run_end(**extra) -> dict:
    return {"seconds": 1.0, "sent_ok": 1, "received_ok": 1, "drained": 1, "faults": 0, "topology": "single",
            "broker_discards": None, "slow_subscribers": [], "nemesis_errors": [], "workload_errors": [],
            "bridge_establishments": None, "transport_events": None, **extra}


def queue_ops(h: History, *, duplicate: bool = False) -> None:
    m = {"id": "m1", "producer": 0, "seq": 0, "destination": "queue://q"}
    op = h.invoke(0, "send", m)
    h.ok(op)
    op = h.invoke(1, "receive")
    h.ok(op, m)
    op = h.invoke(2, "drain")
    h.ok(op, [m] if duplicate else [])


def write(tmp_path: Path, name: str, *, records: bool = True, end: dict | None = None, ops=queue_ops,
          settings: dict | None = None) -> Path:
    with History(tmp_path / name / "history.jsonl", run=f"exp-{name}-20260101T000000Z", target="reference") as h:
        if records:
            h.harness("experiment", settings or experiment())
        ops(h)
        if records and end is not None:
            h.harness("run-end", end)
    return h.path


def test_duplicate_allowed_by_the_experiment_in_the_history_is_valid(tmp_path):
    path = write(tmp_path, "dup", end=run_end(), settings=experiment(duplicates_allowed=True),
                 ops=lambda h: queue_ops(h, duplicate=True))
    verdict = judge_history(path)
    assert verdict["checks"]["total_queue"]["duplicated"] == {"m1": 2}, verdict
    assert verdict["valid"] is True and verdict["checker_options"]["duplicates_allowed"] is True, verdict["summary"]


def test_duplicate_not_allowed_is_invalid(tmp_path):
    path = write(tmp_path, "dup", end=run_end(), ops=lambda h: queue_ops(h, duplicate=True))
    assert judge_history(path)["valid"] is False


def test_old_history_without_records_is_unknown_with_the_reason_not_a_crash(tmp_path):
    path = write(tmp_path, "old", records=False, ops=lambda h: queue_ops(h, duplicate=True))
    verdict = judge_history(path)
    assert verdict["valid"] == UNKNOWN and verdict["self_contained"] is False
    assert "no harness records" in verdict["checks"]["history_records"]["reason"]
    # only the missing "duplicates allowed" setting decides: unknown, saying so
    total = verdict["checks"]["total_queue"]
    assert total["valid"] == UNKNOWN and "allowed" in total["reason"], total
    assert verdict["experiment"] == "exp-old" and verdict["target"] == "reference"


def test_history_cut_before_run_end_is_unknown(tmp_path):
    path = write(tmp_path, "cut", end=None)
    verdict = judge_history(path)
    assert verdict["checks"]["total_queue"]["valid"] is True
    assert verdict["valid"] == UNKNOWN and "run-end" in verdict["checks"]["history_records"]["reason"]


def test_nemesis_and_workload_errors_come_from_the_history(tmp_path):
    path = write(tmp_path, "errors", end=run_end(nemesis_errors=["kill at 1.0 s: no process"],
                                                 workload_errors=["consumer 1 crashed"]))
    checks = judge_history(path)["checks"]
    assert checks["nemesis_schedule"]["valid"] == UNKNOWN and checks["workload"]["reason"] == "consumer 1 crashed"


def topic_ops(lost_by_slow: int):
    def ops(h: History) -> None:
        for sub in (0, 1):
            op = h.invoke(10 + sub, "subscribe", {"destination": T, "subscriber": sub, **({"slow": True} if sub == 0 else {})})
            h.ok(op)
        for seq in range(3):
            m = {"id": f"p-{seq}", "producer": 0, "seq": seq, "destination": T}
            op = h.invoke(0, "send", m)
            h.ok(op)
            for sub in (0, 1):
                if sub == 0 and seq < lost_by_slow:
                    continue
                op = h.invoke(10 + sub, "receive")
                h.ok(op, {**m, "subscriber": sub})
        for sub in (0, 1):
            op = h.invoke(10 + sub, "drain", {"subscriber": sub})
            h.ok(op, [])
    return ops


@pytest.mark.parametrize("counters, expected", [([0, 2], True), ([0, 1], False), ([2], False)])
def test_broker_counters_in_the_history_are_paired_with_the_subscribers(tmp_path, counters, expected):
    def ops(h):
        topic_ops(2)(h)
        h.harness("broker-counters", {"destination": T, "subscription_discards": counters})
    path = write(tmp_path, "topic", settings=experiment("topic", T), ops=ops, end=run_end(slow_subscribers=[0]))
    verdict = judge_history(path)
    assert verdict["valid"] is expected, verdict["summary"]
    assert verdict["run_stats"]["broker_discards"] == counters
    # the broker's counters are the slow_consumer check's (the Spark pipeline's name and function)
    slow = verdict["checks"]["slow_consumer"]
    if len(counters) == 2:
        assert slow["discards"] == 2 and slow["valid"] is expected
    else:
        assert slow["valid"] is False and "subscriptions" in slow["reason"]


def test_slow_subscriber_that_lost_nothing_was_not_exercised(tmp_path):
    def ops(h):
        topic_ops(0)(h)
        h.harness("broker-counters", {"destination": T, "subscription_discards": [0, 0]})
    path = write(tmp_path, "idle", settings=experiment("topic", T), ops=ops, end=run_end(slow_subscribers=[0]))
    verdict = judge_history(path)
    assert verdict["valid"] == UNKNOWN and verdict["checks"]["slow_consumer"]["valid"] == UNKNOWN


def test_pairing_by_rank():
    assert pair_broker_discards({"0": 5, "1": 0}, [0, 5]) == {"1": 0, "0": 5}
    assert pair_broker_discards({"0": 5}, [0, 5]) is None


def test_readers_take_harness_lines(tmp_path):
    path = write(tmp_path, "read", end=run_end())
    events = read_history(path)
    harness = [e for e in events if e["process"] == HARNESS]
    assert [e["f"] for e in harness] == ["experiment", "run-end"]
    assert all(line_problem(line) is None for line in path.read_text().splitlines())
    record = read_record(path)
    assert record.self_contained and record.run_end["sent_ok"] == 1


def test_history_writer_refuses_an_unknown_record(tmp_path):
    with History(tmp_path / "h.jsonl", run="r") as h, pytest.raises(ValueError, match="harness record"):
        h.harness("settings", {})


# ---------------------------------------------------------------------- a real run, its history alone


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["fresh_topic_run", "fresh_queue_run"])
def test_lone_history_copied_anywhere_is_judged_as_in_its_run_directory(request, tmp_path, fixture):
    run_dir: Path = request.getfixturevalue(fixture)
    written = json.loads((run_dir / "verdict.json").read_text())
    lone = tmp_path / "elsewhere" / "copy.jsonl"
    lone.parent.mkdir()
    shutil.copy(run_dir / "history.jsonl", lone)
    assert list(lone.parent.iterdir()) == [lone]
    verdict = judge_history(lone)
    assert verdict["self_contained"] is True
    assert {k: v for k, v in verdict.items() if k != "history"} == \
        {k: v for k, v in written.items() if k not in ("history", "report")}
    again = judge_run(lone.parent, history=lone.name, render=False)
    assert again["valid"] == written["valid"] and (lone.parent / "verdict.json").is_file()


def test_record_of_a_file_reads_head_and_tail_only(tmp_path, monkeypatch):
    import reports.run_record as run_record

    def ops(h):
        for n in range(400):  # more than the tail read below
            queue_ops_n(h, n)
        h.harness("broker-counters", {"destination": T, "subscription_discards": [4]})
    path = write(tmp_path, "long", settings=experiment(duplicates_allowed=True), ops=ops, end=run_end(faults=3))
    monkeypatch.setattr(run_record, "TAIL_BYTES", 2000)
    record = run_record.read_record(path)
    assert record.self_contained and record.run_end["faults"] == 3 and record.broker_discards == [4]
    shaped = run_record.pipeline_record_of_file(path.as_uri())
    assert shaped["checker_options"]["duplicates_allowed"] is True and shaped["run_stats"]["broker_discards"] == [4]


def test_record_of_an_old_file_falls_back_to_the_verdict_beside_it(tmp_path):
    from reports.run_record import pipeline_record_of_file

    path = write(tmp_path, "old", records=False)
    assert pipeline_record_of_file(str(path)) == {}
    (path.parent / "verdict.json").write_text(json.dumps({"checker_options": {"duplicates_allowed": True}}))
    assert pipeline_record_of_file(str(path))["checker_options"] == {"duplicates_allowed": True}


def queue_ops_n(h: History, n: int) -> None:
    m = {"id": f"m{n}", "producer": 0, "seq": n, "destination": "queue://q"}
    op = h.invoke(0, "send", m)
    h.ok(op)


# ---------------------------------------------------------------------- split brain (issue 18)


def split_brain_ops(*, overlap: bool):
    def ops(h: History) -> None:
        for i, node in enumerate(("A", "B", "A") if overlap else ("A", "B", "B")):
            m = {"id": f"m{i}", "producer": 0, "seq": i, "destination": "queue://q"}
            h.ok(h.invoke(0, "send", m), node=node)
        h.ok(h.invoke(1, "drain"), [{"id": f"m{i}", "producer": 0, "seq": i, "destination": "queue://q"}
                                    for i in range(3)], node="B")
    return ops


def test_split_brain_reaches_the_verdict_when_the_experiment_asks_for_it(tmp_path):
    asked = experiment(split_brain=True)
    bad = judge_history(write(tmp_path, "sb", end=run_end(), settings=asked, ops=split_brain_ops(overlap=True)))
    assert bad["checks"]["split_brain"]["valid"] is False and bad["valid"] is False, bad["summary"]
    assert bad["checks"]["split_brain"]["stats"]["windows"][0]["nodes"] == ["A", "B"]
    assert any(line.startswith("split brain: False (served by A, B; handovers: 1)") for line in bad["summary"])
    assert any(line.startswith("  nodes A and B both accepted operations") for line in bad["summary"])
    good = judge_history(write(tmp_path, "clean", end=run_end(), settings=asked, ops=split_brain_ops(overlap=False)))
    assert good["checks"]["split_brain"]["valid"] is True and good["valid"] is True, good["summary"]
    # a history whose operations name no node cannot show one master at a time
    unnamed = judge_history(write(tmp_path, "unnamed", end=run_end(), settings=asked))
    assert unnamed["checks"]["split_brain"]["valid"] == UNKNOWN and unnamed["valid"] == UNKNOWN
    # not asked for: not judged
    off = judge_history(write(tmp_path, "off", end=run_end(), ops=split_brain_ops(overlap=True)))
    assert "split_brain" not in off["checks"]


def test_the_shared_store_experiments_ask_for_split_brain():
    from chaos.experiment_file import load_experiment
    files = sorted(Path(__file__).resolve().parents[2].glob("chaos/experiments/*shared-store*.toml"))
    assert files, "no shared-store experiment found"
    for path in files:
        assert load_experiment(path).checkers.split_brain is True, path.name


# ---------------------------------------------------------------------- clusters (issue 19)


def cluster_ops(*, stranded: bool):
    """A sent to node A; B's only consumer closed long before; the drain finds it at B
    (``stranded``) or at A."""
    def ops(h: History) -> None:
        m = {"id": "m1", "producer": 0, "seq": 0, "destination": "queue://q"}
        h.ok(h.invoke(1, "subscribe", {"destination": "queue://q", "node": "B"}), node="B")
        h.ok(h.invoke(1, "close", {"destination": "queue://q", "node": "B"}), node="B")
        time.sleep(0.002)  # the history's clock: the close and the send are apart
        h.ok(h.invoke(0, "send", m), node="A")
        for i, node in enumerate("AB"):
            h.ok(h.invoke(2 + i, "drain", {"node": node}), [m] if (node == "B") == stranded else [], node=node)
    return ops


def test_cluster_checkers_reach_the_verdict_with_the_clusters_load_balancing(tmp_path, monkeypatch):
    from reports.checkers import redistribution

    monkeypatch.setattr(redistribution, "NOTIFICATION_GRACE_NS", 1_000)  # the literal's clock runs in ms
    asked = experiment(redistribution=True, group_pinning=True)
    asked["experiment"]["topology"] = {"kind": "cluster", "message_load_balancing": "ON_DEMAND",
                                       "redistribution_delay_ms": -1}
    bad = judge_history(write(tmp_path, "stranded", end=run_end(), settings=asked, ops=cluster_ops(stranded=True)))
    assert bad["checks"]["redistribution"]["valid"] is False and bad["valid"] is False, bad["summary"]
    assert any(line.startswith("redistribution: False") for line in bad["summary"]), bad["summary"]
    assert any("drained at node B, which had no consumer open" in line for line in bad["summary"])
    good = judge_history(write(tmp_path, "home", end=run_end(), settings=asked, ops=cluster_ops(stranded=False)))
    assert good["checks"]["redistribution"]["valid"] is True, good["summary"]
    # no grouped message: group pinning has nothing to judge, and says so
    assert good["checks"]["group_pinning"]["valid"] == UNKNOWN and good["valid"] == UNKNOWN
    strict = {**asked, "experiment": {**asked["experiment"], "topology": {
        "kind": "cluster", "message_load_balancing": "STRICT", "redistribution_delay_ms": -1}}}
    assert judge_history(write(tmp_path, "strict", end=run_end(), settings=strict, ops=cluster_ops(stranded=True))
                         )["checks"]["redistribution"]["valid"] is True
    off = judge_history(write(tmp_path, "off", end=run_end(), ops=cluster_ops(stranded=True)))
    assert "redistribution" not in off["checks"] and "group_pinning" not in off["checks"]


def test_a_node_that_stopped_on_its_own_makes_the_verdict_unknown_and_says_so(tmp_path):
    path = write(tmp_path, "exited", end=run_end(deployment_errors=["at 3.1 s: node A stopped on its own"]))
    verdict = judge_history(path)
    assert verdict["valid"] == UNKNOWN
    assert "node A stopped on its own" in verdict["checks"]["deployment"]["reason"], verdict["checks"]
