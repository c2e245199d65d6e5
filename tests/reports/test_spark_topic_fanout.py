"""Topic fan-out through `brokerconf analyze` (a Spark task reads each topic run and computes
reports/checkers/topic_fanout.py's facts; the driver judges them with the run record) on literal
histories named after the anomaly, and its agreement with what `brokerconf chaos run` concludes
(reports/judge.py: the same checker, its pairing of the broker's counters) on those and on real
topic runs: one made for the session, and those under reports/out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.history import read_history
from reports.checkers import slow_consumer, topic_fanout
from reports.pipeline.analyze import analyze
from reports.pipeline.session import LOCAL, get_session
from reports.judge import topic_checks
from reports.run_record import RunRecord

T = "topic://prices"
REAL_OUT = Path(__file__).resolve().parents[2] / "reports" / "out"


# ---------------------------------------------------------------------- literal histories


def ev(process, type_, f, value=None):
    return {"process": process, "type": type_, "f": f, "value": value}


def msg(producer, seq, **extra):
    return {"id": f"r-{producer}-{seq}", "producer": producer, "seq": seq, "destination": T, **extra}


def subscribe(process, subscriber=None, slow=False):
    value = {"destination": T, **({"subscriber": subscriber} if subscriber is not None else {}),
             **({"slow": True} if slow else {})}
    return [ev(process, "invoke", "connect"), ev(process, "ok", "connect"),
            ev(process, "invoke", "subscribe", value), ev(process, "ok", "subscribe", value)]


def send(process, producer, seq, outcome="ok"):
    return [ev(process, "invoke", "send", msg(producer, seq)), ev(process, outcome, "send", msg(producer, seq))]


def sends(process, producer, seqs, outcome="ok"):
    return [e for s in seqs for e in send(process, producer, s, outcome)]


def receive(process, subscriber, producer, seq):
    return [ev(process, "invoke", "receive"), ev(process, "ok", "receive", msg(producer, seq, subscriber=subscriber))]


def drain(process, subscriber, *messages):
    got = [dict(m, subscriber=subscriber) for m in messages]
    return [ev(process, "invoke", "drain", {"subscriber": subscriber}), ev(process, "ok", "drain", got)]


def two_subscribers_one_slow():
    """Subscriber 0 gets seq 0..3; subscriber 1 (slow) lost the two oldest, 0 and 1."""
    return (subscribe(0, 0) + subscribe(1, 1, slow=True) + sends(9, 0, range(4))
            + receive(0, 0, 0, 0) + receive(0, 0, 0, 1)
            + drain(0, 0, msg(0, 2), msg(0, 3)) + drain(1, 1, msg(0, 2), msg(0, 3)))


HISTORIES = {
    "every_subscriber_got_everything": subscribe(0) + subscribe(1) + sends(9, 0, range(3)) + receive(0, 0, 0, 0)
    + drain(0, 0, msg(0, 1), msg(0, 2)) + drain(1, 1, msg(0, 0), msg(0, 1), msg(0, 2)),
    "subscriber_missed_message": subscribe(0) + subscribe(1) + sends(9, 0, range(3))
    + drain(0, 0, msg(0, 0), msg(0, 1), msg(0, 2)) + drain(1, 1, msg(0, 0), msg(0, 2)),
    "slow_subscriber_discards": two_subscribers_one_slow(),
    "no_drain": subscribe(0) + sends(9, 0, range(3)) + receive(0, 0, 0, 0) + receive(0, 0, 0, 1),
    "gap_in_cut_window": subscribe(0) + sends(9, 0, range(3)) + receive(0, 0, 0, 0) + receive(0, 0, 0, 2)
    + [ev(0, "invoke", "receive"), ev(0, "info", "receive", None)],
    # The subscriber retired (info) and resubscribed as process 4: seq 1 went out after its last
    # delivery on the dying connection, seq 2 while it was away.
    "cut_window_allows_cut_off": subscribe(0) + send(9, 0, 0) + receive(0, 0, 0, 0) + send(9, 0, 1)
    + [ev(0, "invoke", "receive"), ev(0, "info", "receive", None)]
    + send(9, 0, 2) + subscribe(4) + send(9, 0, 3) + drain(4, 0, msg(0, 3)),
    "reconnect_opens_new_window": subscribe(0) + send(9, 0, 0) + receive(0, 0, 0, 0)
    + [ev(0, "invoke", "receive"), ev(0, "fail", "receive", None)] + subscribe(0) + send(9, 0, 1) + drain(0, 0),
    "unexpected_message": subscribe(0) + send(9, 0, 0) + drain(0, 0, msg(0, 0), {"id": "ghost", "producer": 5, "seq": 0}),
    "foreign_message_without_id": subscribe(0) + drain(0, 0, {"id": None, "body": "hello", "producer": None,
                                                             "seq": None}),
    "failed_send_arrives": subscribe(0) + send(9, 0, 0, outcome="fail") + drain(0, 0, msg(0, 0)),
    "info_send_may_not_arrive": subscribe(0) + subscribe(1) + send(9, 0, 0, outcome="info")
    + drain(0, 0, msg(0, 0)) + drain(1, 1),
    "published_before_subscription": send(9, 0, 0) + subscribe(0) + send(9, 0, 1) + drain(0, 0, msg(0, 0), msg(0, 1)),
    "send_overlapping_subscribe": subscribe(0)[:3] + [ev(9, "invoke", "send", msg(0, 0))] + subscribe(0)[3:]
    + [ev(9, "ok", "send", msg(0, 0))] + drain(0, 0, msg(0, 0)),
    "duplicate_delivery": subscribe(0) + send(9, 0, 0) + receive(0, 0, 0, 0) + drain(0, 0, msg(0, 0)),
    "gaps_per_producer": subscribe(0, 0, slow=True) + sends(8, 0, range(6)) + sends(9, 1, range(3))
    + drain(0, 0, msg(0, 2), msg(0, 5), msg(1, 0)),
    "nemesis_ignored": subscribe(0) + [{"process": "nemesis", "type": "info", "f": "kill", "value": {"phase": "start"}}]
    + send(9, 0, 0) + drain(0, 0, msg(0, 0)),
    "queue_run": [ev(0, "invoke", "subscribe", {"destination": "queue://q"}), ev(0, "ok", "subscribe", {"destination": "queue://q"}),
                  ev(9, "invoke", "send", {"id": "q1", "producer": 0, "seq": 0, "destination": "queue://q"}),
                  ev(9, "ok", "send", {"id": "q1", "producer": 0, "seq": 0, "destination": "queue://q"})],
}


def write_history(root: Path, run: str, events: list[dict], broker_discards: list[int] | None = None,
                  slow_subscribers: list[int] | None = None) -> Path:
    """A run directory as `brokerconf chaos run` leaves it: history.jsonl (index = line, 1 ms per
    op) and, when counters are given, a verdict.json with the run_stats the pipeline reads."""
    directory = root / run
    directory.mkdir(parents=True)
    lines = [{**e, "index": i, "time": (i + 1) * 1_000_000, "target": "t", "node": "A", "run": run}
             for i, e in enumerate(events)]
    (directory / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    if broker_discards is not None or slow_subscribers is not None:
        (directory / "verdict.json").write_text(json.dumps(
            {"run_stats": {"broker_discards": broker_discards, "slow_subscribers": slow_subscribers or []}}))
    return directory / "history.jsonl"


def analyse(spark, root: Path) -> dict[str, dict]:
    analysis = analyze(spark, root, checkers=[topic_fanout.NAME, slow_consumer.NAME])
    out: dict[str, dict] = {"_tables": dict(analysis.tables)}
    for r in analysis.results:
        out.setdefault(r.run, {})[r.checker] = {
            "result": r, "anomalies": [a for a in analysis.anomalies if a["run"] == r.run and a["checker"] == r.checker]}
    return out


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, _spark_lifetime):
    root = tmp_path_factory.mktemp("topic")
    for name, events in HISTORIES.items():
        write_history(root, name, events)
    return analyse(get_session(LOCAL), root)


def fanout(analysed, run):
    return analysed[run][topic_fanout.NAME]["result"]


def kinds(analysed, run, checker=topic_fanout.NAME):
    return sorted((a["kind"], a["message_id"]) for a in analysed[run][checker]["anomalies"])


def line_of(events: list[dict], predicate) -> int:
    return next(i for i, e in enumerate(events) if predicate(e))


# ---------------------------------------------------------------------- named anomalies


def test_every_subscriber_got_everything(analysed):
    r = fanout(analysed, "every_subscriber_got_everything")
    assert r.valid is True, r.reason
    assert (r.stats["attempted"], r.stats["acknowledged"]) == (3, 3)
    assert {s: (v["expected"], v["received"], v["missing"]) for s, v in r.stats["subscribers"].items()} == \
        {"0": (3, 3, 0), "1": (3, 3, 0)}


def test_subscriber_missed_message(analysed):
    events = HISTORIES["subscriber_missed_message"]
    r = fanout(analysed, "subscriber_missed_message")
    assert r.valid is False and "subscriber 1 missed 1" in r.reason
    [row] = analysed["subscriber_missed_message"][topic_fanout.NAME]["anomalies"]
    sent = line_of(events, lambda e: e["f"] == "send" and e["type"] == "invoke" and e["value"]["seq"] == 1)
    subscribed = line_of(events, lambda e: e["process"] == 1 and e["f"] == "subscribe" and e["type"] == "ok")
    drained = line_of(events, lambda e: e["process"] == 1 and e["f"] == "drain" and e["type"] == "ok")
    assert (row["kind"], row["message_id"], row["ops"]) == ("missing", "r-0-1", [sent, subscribed, drained])
    assert r.stats["subscribers"]["1"]["gaps"] == {"0": [[1, 1]]}


def test_slow_subscriber_discards_are_documented(analysed):
    r = fanout(analysed, "slow_subscriber_discards")
    assert r.valid is True, r.reason
    assert r.stats["documented_discards_for"] == ["1"]
    assert r.stats["subscribers"]["1"]["missing"] == 2 and r.stats["subscribers"]["1"]["gaps"] == {"0": [[0, 1]]}
    assert kinds(analysed, "slow_subscriber_discards") == []


def test_no_drain_is_unknown(analysed):
    r = fanout(analysed, "no_drain")
    assert r.valid == "unknown" and "no final ok drain" in r.reason
    assert r.stats["subscribers"]["0"]["cut_off"] == 1 and r.stats["subscribers"]["0"]["missing"] == 0


def test_gap_in_cut_window_is_missing_even_without_drain(analysed):
    r = fanout(analysed, "gap_in_cut_window")
    assert r.valid is False and kinds(analysed, "gap_in_cut_window") == [("missing", "r-0-1")]


def test_cut_window_allows_cut_off(analysed):
    r = fanout(analysed, "cut_window_allows_cut_off")
    assert r.valid is True, r.reason
    s = r.stats["subscribers"]["0"]
    assert (s["windows"], s["expected"], s["cut_off"], s["missing"]) == (2, 2, 1, 0)


def test_reconnect_of_the_same_process_opens_a_new_window(analysed):
    r = fanout(analysed, "reconnect_opens_new_window")
    assert r.valid is False and r.stats["subscribers"]["0"]["windows"] == 2
    assert kinds(analysed, "reconnect_opens_new_window") == [("missing", "r-0-1")]


def test_unexpected_message(analysed):
    r = fanout(analysed, "unexpected_message")
    assert r.valid is False and "1 unexpected" in r.reason
    assert kinds(analysed, "unexpected_message") == [("unexpected", "ghost")]


def test_foreign_message_without_id_is_unexpected(analysed):
    assert fanout(analysed, "foreign_message_without_id").valid is False
    [(kind, message_id)] = kinds(analysed, "foreign_message_without_id")
    assert kind == "unexpected" and message_id.startswith("<no id: 'hello'")


def test_failed_send_that_arrives_is_unexpected(analysed):
    assert fanout(analysed, "failed_send_arrives").valid is False
    assert kinds(analysed, "failed_send_arrives") == [("unexpected", "r-0-0")]


def test_info_send_may_or_may_not_arrive(analysed):
    r = fanout(analysed, "info_send_may_not_arrive")
    assert r.valid is True, r.reason
    assert r.stats["acknowledged"] == 0 and r.stats["subscribers"]["1"]["expected"] == 0


def test_message_published_before_subscription_is_reported_not_invalid(analysed):
    r = fanout(analysed, "published_before_subscription")
    assert r.valid is True, r.reason
    assert kinds(analysed, "published_before_subscription") == [("out_of_window", "r-0-0")]
    [row] = analysed["published_before_subscription"][topic_fanout.NAME]["anomalies"]
    assert row["ops"][0] == 0, "names the send's invoke, then the delivery"


def test_send_overlapping_the_subscribe_may_match_it(analysed):
    r = fanout(analysed, "send_overlapping_subscribe")
    assert r.valid is True and kinds(analysed, "send_overlapping_subscribe") == []
    assert r.stats["subscribers"]["0"]["expected"] == 0


def test_duplicate_delivery_is_reported(analysed):
    assert fanout(analysed, "duplicate_delivery").valid is True
    assert kinds(analysed, "duplicate_delivery") == [("duplicated", "r-0-0")]


def test_gaps_are_ranges_per_producer(analysed):
    r = fanout(analysed, "gaps_per_producer")
    assert r.valid is True, "subscriber 0 subscribed as a slow subscriber: its losses are documented"
    assert r.stats["subscribers"]["0"]["gaps"] == {"0": [[0, 1], [3, 4]], "1": [[1, 2]]}


def test_nemesis_events_are_ignored(analysed):
    assert fanout(analysed, "nemesis_ignored").valid is True


def test_queue_run_is_not_applicable(analysed):
    r = fanout(analysed, "queue_run")
    assert r.applicable is False and r.valid == "unknown"


# ---------------------------------------------------------------------- agreement with the Python checker


def python_side(history_file: Path) -> dict:
    """What `brokerconf chaos run` concludes (reports/judge.py, topic_checks) from the history and
    the run record beside it."""
    record = history_file.parent / "verdict.json"
    stats = json.loads(record.read_text()).get("run_stats", {}) if record.exists() else {}
    history = read_history(history_file)
    slow = set(stats.get("slow_subscribers") or [])
    slow |= {e["value"]["subscriber"] for e in history if e.get("f") == "subscribe" and e.get("type") == "invoke"
             and isinstance(e.get("value"), dict) and e["value"].get("slow")}
    record = RunRecord("", "", slow_subscribers={str(s) for s in slow}, broker_discards=stats.get("broker_discards"))
    return topic_checks(history, record)


def assert_agree(spark_run: dict, checks: dict, where: str) -> None:
    python = checks["topic_fanout"]
    r = spark_run[topic_fanout.NAME]["result"]
    if not r.applicable:  # no topic subscription: the Python checker has no subscriber to judge either
        assert python["subscribers"] == {} and python["valid"] == "unknown", where
        return
    assert r.valid == python["valid"], f"{where}: spark {r.valid} ({r.reason}) vs python {python['valid']} ({python['reason']})"
    assert (r.stats["attempted"], r.stats["acknowledged"]) == (python["attempted"], python["acknowledged"]), where
    assert sorted(r.stats["subscribers"]) == sorted(python["subscribers"]), where
    for name, p in python["subscribers"].items():
        s = r.stats["subscribers"][name]
        assert (s["windows"], s["drained"], s["expected"], s["received"], s["missing"], s["cut_off"], s["gaps"]) == \
            (p["windows"], p["drained"], p["expected"], p["received"], p["observed_discards"], p["cut_off"],
             p["gaps"]), f"{where}: subscriber {name}"
    ids = {}
    for a in spark_run[topic_fanout.NAME]["anomalies"]:
        ids.setdefault(a["kind"], set()).add(a["message_id"])
    py_ids = {"unexpected": set(python["unexpected"]),
              "duplicated": {i for p in python["subscribers"].values() for i in p["duplicated"]},
              "out_of_window": {i for p in python["subscribers"].values() for i in p["out_of_window"]}}
    for kind, expected in py_ids.items():
        assert ids.get(kind, set()) == expected, f"{where}: {kind}"
    # Slow consumer: reports/judge.py judges it with the same function (reports/check_plan.py),
    # so the two agree everywhere now, also without the broker's counters (unknown in both).
    sc = spark_run[slow_consumer.NAME]["result"]
    assert (sc.valid, sc.applicable) == (checks["slow_consumer"]["valid"], checks["slow_consumer"]["applicable"]), \
        f"{where}: slow consumer {sc.valid} ({sc.reason}) vs {checks['slow_consumer']}"


def test_agrees_on_literal_histories(analysed, tmp_path):
    for name, events in HISTORIES.items():
        if name == "queue_run":
            continue
        path = write_history(tmp_path, name, events)
        assert_agree(analysed[name], python_side(path), name)


def _real_topic_runs(limit: int = 5, max_bytes: int = 5_000_000) -> list[Path]:
    """The smallest finished topic runs (with the verdict.json that holds the broker's counters)."""
    if not REAL_OUT.is_dir():
        return []
    found = []
    for path in REAL_OUT.glob("*/history.jsonl"):
        if not (path.parent / "verdict.json").exists():
            continue
        size = path.stat().st_size
        if 0 < size <= max_bytes and b'"topic://' in path.read_bytes()[:200_000]:
            found.append((size, path))
    return [p for _, p in sorted(found)[:limit]]


@pytest.mark.slow
def test_agrees_on_real_topic_runs(spark, tmp_path, fresh_topic_run):
    """A topic run made for this session (conftest's fresh_topic_run), and the smallest finished
    topic runs under reports/out when there are any."""
    sources = [fresh_topic_run / "history.jsonl", *_real_topic_runs()]
    for i, path in enumerate(sources):
        copy = tmp_path / f"{i}-{path.parent.name}"
        copy.mkdir()
        (copy / "history.jsonl").write_bytes(path.read_bytes())
        if (path.parent / "verdict.json").exists():
            (copy / "verdict.json").write_bytes((path.parent / "verdict.json").read_bytes())
    spark_runs = analyse(spark, tmp_path)
    for i, path in enumerate(sources):
        [run] = {json.loads(line)["run"] for line in path.read_text().splitlines()[:1]}
        assert_agree(spark_runs[run], python_side(tmp_path / f"{i}-{path.parent.name}" / "history.jsonl"), str(path))
