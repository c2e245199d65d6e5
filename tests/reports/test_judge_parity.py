"""The two judges of a run, `brokerconf chaos run` (reports/judge.py) and the Spark pipeline
(reports/pipeline/fused/engine.py), apply the same checks with the same options
(reports/check_plan.py), so the same history gets the same verdict from both.

Seen on a fresh machine: the main job exited 1 because the Spark stage measured failover downtime
on the cluster experiments, whose files say ``failover_downtime = false`` (their churning
consumers close on purpose), and called them unknown where `chaos run` called them true. The
cluster history here has that shape (a consumer of the killed node that never works again); the
session's fresh short runs (conftest.py) and the old excerpt without harness records are judged
by both as well, in one Spark analysis."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import chaos
from chaos.experiment_file import load_experiment
from chaos.history import History
from reports.check_plan import MEASUREMENTS, RECORD_CHECKS, VERDICT_CHECKS, plan_checks
from reports.judge import judge_history
from reports.pipeline.analyze import analyze
from reports.run_record import read_record
from reports.verdicts import UNKNOWN

EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"
DATA = Path(__file__).parent / "data"
Q = "queue://chaos.cluster.redistribution"


def cluster_history(path: Path) -> Path:
    """A short history of reference-cluster-redistribution.toml's shape, its experiment record the
    file as loaded: a producer on A, a consumer on A and one on B; B is killed and comes back, and
    B's consumer never works again (it closed, as the churn makes them); the drain on A takes the
    rest. Nothing is lost or delivered twice."""
    exp = load_experiment(EXPERIMENTS / "reference-cluster-redistribution.toml")
    run = "reference-cluster-redistribution-20260101T000000Z"
    with History(path, run=run, target="reference:process") as h:
        h.harness("experiment", {"format": 1, "experiment": exp.model_dump(mode="json")})
        for proc, node in ((1, "A"), (2, "B")):
            op = h.invoke(proc, "connect", node=node)
            h.ok(op)
        messages = [{"id": f"{run}-0-{seq}", "producer": 0, "seq": seq, "destination": Q} for seq in range(6)]
        for m in messages[:3]:
            op = h.invoke(0, "send", m, node="A")
            h.ok(op, node="A")
        # B's consumer takes the first message and acks it
        op = h.invoke(2, "receive", node="B")
        h.ok(op, {**messages[0], "consumer": 1}, node="B")
        op = h.invoke(2, "ack", {**messages[0], "consumer": 1}, node="B")
        h.ok(op, node="B")
        h.nemesis("kill", {"nemesis": "process", "phase": "start"}, node="B")
        h.nemesis("kill", {"nemesis": "process", "phase": "end", "pid": None, "fault": "down"}, node="B")
        # B's consumer fails while B is down, and never works again
        op = h.invoke(2, "receive", node="B")
        h.fail(op, "connection refused", node="B")
        for m in messages[3:]:
            op = h.invoke(0, "send", m, node="A")
            h.ok(op, node="A")
        for m in messages[1:4]:
            op = h.invoke(1, "receive", node="A")
            h.ok(op, {**m, "consumer": 0}, node="A")
            op = h.invoke(1, "ack", {**m, "consumer": 0}, node="A")
            h.ok(op, node="A")
        h.nemesis("start", {"nemesis": "process", "phase": "start"}, node="B")
        h.nemesis("start", {"nemesis": "process", "phase": "end", "fault_window": [
            {"fault": "down", "f": "kill", "start": 0, "end": h.now()}]}, node="B")
        op = h.invoke(3, "drain", {"consumer": -1}, node="A")
        h.ok(op, [{**m, "consumer": -1} for m in messages[4:]], node="A")
        h.harness("run-end", {"seconds": 1.0, "sent_ok": 6, "received_ok": 4, "drained": 2, "faults": 1,
                              "topology": "cluster", "broker_discards": None, "slow_subscribers": [],
                              "nemesis_errors": [], "workload_errors": [], "bridge_establishments": None,
                              "transport_events": None})
    return h.path


@pytest.fixture(scope="module")
def histories(tmp_path_factory, fresh_queue_run, fresh_topic_run) -> dict[str, Path]:
    """Every history of the comparison in one directory (one Spark analysis judges them all)."""
    root = tmp_path_factory.mktemp("parity")
    out = {"cluster": cluster_history(root / "cluster" / "history.jsonl")}
    for name, run_dir in (("queue", fresh_queue_run), ("topic", fresh_topic_run)):
        (root / name).mkdir()
        out[name] = Path(shutil.copy(run_dir / "history.jsonl", root / name / "history.jsonl"))
    (root / "old").mkdir()
    out["old"] = Path(shutil.copy(DATA / "kill_restart_excerpt.jsonl", root / "old" / "history.jsonl"))
    return out


@pytest.fixture(scope="module")
def spark_verdicts(_spark_lifetime, histories) -> dict[str, dict]:
    from reports.pipeline.session import LOCAL, get_session

    spark = get_session(LOCAL)  # the session's shared one (conftest.py)
    root = next(iter(histories.values())).parent.parent
    analysis = analyze(spark, root)
    spark.catalog.clearCache()
    by_run = {v["run"]: v for v in analysis.verdicts}
    return {name: by_run[judge_history(path)["run"]] for name, path in histories.items()}


def counted_by_spark(verdict: dict) -> set[str]:
    return {name for name, check in verdict["checks"].items() if check["applicable"] and name not in MEASUREMENTS}


@pytest.mark.parametrize("name", ["cluster", "queue", "topic", "old"])
def test_both_judges_apply_the_same_checks_and_agree(histories, spark_verdicts, name):
    chaos_verdict = judge_history(histories[name])
    spark_verdict = spark_verdicts[name]
    applied = set(chaos_verdict["checks"])
    assert applied <= set(VERDICT_CHECKS) | set(RECORD_CHECKS), applied
    assert applied == counted_by_spark(spark_verdict), (
        f"{name}: chaos run applied {sorted(applied)}, Spark {sorted(counted_by_spark(spark_verdict))}")
    assert chaos_verdict["valid"] == spark_verdict["valid"], (
        f"{name}: chaos run says {chaos_verdict['valid']} ({chaos_verdict['summary']}), Spark says "
        f"{spark_verdict['valid']} (failed {spark_verdict['failed']}, unknown {spark_verdict['unknown']})")
    for check, result in chaos_verdict["checks"].items():
        assert result["valid"] == spark_verdict["checks"][check]["valid"], f"{name}: {check}"


def test_the_cluster_run_is_judged_without_failover_downtime(histories, spark_verdicts):
    """The experiment turns failover downtime off: neither judge measures it into the verdict,
    though the history has a kill and a client that never recovered."""
    plan = plan_checks(read_record(histories["cluster"]))
    assert "failover_downtime" not in plan and "failover_downtime = false" in plan.skipped["failover_downtime"]
    chaos_verdict = judge_history(histories["cluster"])
    assert chaos_verdict["valid"] is True, chaos_verdict["summary"]
    assert "failover_downtime" in chaos_verdict["not_applied"]
    downtime = spark_verdicts["cluster"]["checks"]["failover_downtime"]
    # shown with what it found (a client that never recovered), not counted
    assert downtime["applicable"] is False and downtime["valid"] == UNKNOWN and "not applied" in downtime["reason"]
    assert spark_verdicts["cluster"]["valid"] is True


def test_measurements_never_decide_a_verdict():
    from reports.checkers.result import CheckResult
    from reports.pipeline.verdicts import run_verdicts

    [verdict] = run_verdicts([CheckResult("latency", "r", "t", True), CheckResult("throughput", "r", "t", True)])
    assert verdict["valid"] == UNKNOWN  # nothing judged is no evidence, as in `brokerconf chaos run`
