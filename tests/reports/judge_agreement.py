"""The comparison of the three judges of one run (issue 27, "Two judges"), shared by the test on
synthetic histories of every experiment file's shape (test_judges_agree_on_every_experiment.py) and
the one on real short runs of every file (test_judges_agree_on_real_runs.py), so both hold the
judges to the same account."""

from __future__ import annotations

from brokerconf import chaos_stage
from reports.check_plan import MEASUREMENTS, plan_checks
from reports.checkers import registry
from reports.pipeline import main_job
from reports.run_record import read_record


def assert_three_judges_agree(label: str, history, expected_list: dict, chaos_verdict: dict, spark_stage: dict,
                              spark_verdict: dict) -> None:
    """``chaos_verdict``: the run's verdict.json as the main job's chaos stage reads it;
    ``spark_verdict``: the Spark stage's verdict of the same run (``spark_stage`` its whole
    result); ``expected_list``: the checker list `chaos run` writes for the run's experiment."""
    record = read_record(history)
    plan = plan_checks(record)
    # the list the judges used is the one `chaos run` wrote in the header, not one they decided again
    assert plan.source == "history" and record.checker_list == expected_list, label
    counted_by_spark = {name for name in spark_verdict["checks"] if name not in MEASUREMENTS}
    assert set(chaos_verdict["checks"]) == counted_by_spark, (
        f"{label}: chaos run applied {sorted(chaos_verdict['checks'])}, Spark {sorted(counted_by_spark)}")
    # every check that counted is on the list, and the list's others say why they did not
    assert set(chaos_verdict["checks"]) <= set(plan.options), label
    assert set(chaos_verdict["not_applied"]) == (set(plan.skipped) | set(plan.options)) - set(chaos_verdict["checks"])
    for check, result in chaos_verdict["checks"].items():
        assert result["valid"] == spark_verdict["checks"][check]["valid"], (
            f"{label}: {check}: chaos run {result['valid']}, Spark {spark_verdict['checks'][check]}")
    assert chaos_verdict["valid"] == spark_verdict["valid"], (
        f"{label}: chaos run says {chaos_verdict['valid']} ({chaos_verdict.get('summary')}), Spark "
        f"{spark_verdict['valid']} (failed {spark_verdict.get('failed')}, unknown {spark_verdict.get('unknown')})")
    # beside the verdict, what the ops' outcomes and latencies were: the same words from both
    # (throughput is left out: the Spark side's run span also covers the harness records)
    for name in ("outcomes", "latency"):
        assert spark_verdict["measurements"][name] == registry.describe(name, chaos_verdict["measurements"][name]), (
            f"{label}: {name}")
    # the main job fails on this run exactly when the run is not valid, from its chaos stage and
    # from its Spark stage alike
    assert chaos_stage.stage_failed([chaos_verdict]) is (chaos_verdict["valid"] is not True)
    assert main_job.stage_failed({**spark_stage, "verdicts": [spark_verdict]}) is chaos_stage.stage_failed([chaos_verdict])
