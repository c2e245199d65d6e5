"""Topic fan-out as a Spark job: every subscriber got every message published while it was
subscribed, minus the discards the broker documents.

The definitions are those of the pure-Python checker, reports/checkers/topic_fanout.py (read its
docstring: windows, clean vs cut, expected / missing / cut_off / unexpected / out_of_window /
duplicated, gaps), and tests/reports/test_spark_topic_fanout.py checks that both agree. "Position
in the history" is the op's ``index`` (file order), and a window never closed ends after the
last op.

Which losses are documented discards follows `brokerconf chaos run` (brokerconf/chaos_job.py,
``_topic_checks``): a slow subscriber may lose its oldest messages (ActiveMQ Classic, "Slow
Consumer Handling": pending-message limit strategies); when the broker's per-subscription
``discarded`` counters were recorded (the run's verdict.json, ``run_stats.broker_discards``),
any subscriber may lose messages as long as its paired counter says exactly how many. The
comparison with the counters is also the slow-consumer checker's own verdict (slow_consumer.py).

Spark work: the windows come from one window-function pass over each process's ops; the
per-subscriber numbers and the findings (each missing / unexpected / duplicated / out-of-window
message) are two collects, shared with the slow-consumer checker through `facts` (computed once
per Context).
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from reports.pipeline.load import NEMESIS

from .common import UNKNOWN, CheckOutput, CheckResult, Context, RunKey, count_by_run, read_run_record

NAME = "topic_fanout"
#: where a chaos run keeps the broker's counters (written by brokerconf/chaos_job.py)
#: "after the last op": the end of a window that was never closed
_END = 2**62
_INFO_KINDS = ("duplicated", "out_of_window")  # reported, never a reason for "false"


# ---------------------------------------------------------------------- facts shared with slow_consumer


@dataclass
class Subscriber:
    name: str
    windows: int = 0
    drained: bool = False
    expected: int = 0
    received: int = 0  # distinct ids
    cut_off: int = 0
    window_ops: list[int] = field(default_factory=list)  # subscribe ok and close indexes, for anomaly rows
    missing: list[dict] = field(default_factory=list)  # finding rows: id, producer, seq, ops

    @property
    def observed_discards(self) -> int:
        return len(self.missing)

    def gaps(self) -> dict[str, list[list[int]]]:
        """Missing sequence numbers per producer as inclusive ranges (oldest-first eviction shows
        as runs of consecutive losses)."""
        seqs: dict[str, list[int]] = defaultdict(list)
        for m in self.missing:
            if m["seq"] is not None:
                seqs[str(m["producer"])].append(m["seq"])
        out: dict[str, list[list[int]]] = {}
        for producer, values in sorted(seqs.items()):
            ranges: list[list[int]] = []
            for s in sorted(values):
                if ranges and s == ranges[-1][1] + 1:
                    ranges[-1][1] = s
                else:
                    ranges.append([s, s])
            out[producer] = ranges
        return out


@dataclass
class RunFacts:
    """What one run's history says about its topic subscriptions (plus its run record)."""
    key: RunKey
    attempted: int = 0
    acknowledged: int = 0
    subscribers: dict[str, Subscriber] = field(default_factory=dict)
    findings: list[dict] = field(default_factory=list)  # unexpected / duplicated / out_of_window rows
    slow: set[str] = field(default_factory=set)  # subscribers that subscribed through the slow path
    broker_discards: list[int] | None = None  # the broker's counter per subscription, unpaired
    record: str | None = None  # the file the counters came from

    @property
    def losses(self) -> dict[str, int]:
        return {name: s.observed_discards for name, s in self.subscribers.items()}

    @property
    def paired(self) -> dict[str, int] | None:
        return None if self.broker_discards is None else pair_discards(self.losses, self.broker_discards)

    @property
    def allowed(self) -> set[str]:
        """Subscribers whose losses are documented discards (brokerconf/chaos_job.py, _topic_checks)."""
        return set(self.subscribers) if self.paired is not None else set(self.slow)


def pair_discards(observed: dict[str, int], broker: list[int]) -> dict[str, int] | None:
    """Each subscriber's broker counter. The broker does not say which connection a subscription
    belongs to, so counters pair with subscribers by rank (most with most); None when the numbers
    of subscriptions differ. The same rule as brokerconf/chaos_job.pair_broker_discards (reports/
    may not import the command line layer)."""
    if len(broker) != len(observed):
        return None
    ranked = sorted(observed, key=lambda name: (observed[name], name))
    return dict(zip(ranked, sorted(broker)))


def run_record_stats(history_file: str | None) -> tuple[list[int] | None, set[str], str | None]:
    """(broker_discards, slow subscribers, record path) from the run record beside a history
    (``run_stats``, as `brokerconf chaos run` writes it); (None, set(), None) when there is none."""
    record = read_run_record(history_file)
    stats = record.get("run_stats") if isinstance(record.get("run_stats"), dict) else {}
    discards = stats.get("broker_discards")
    if not isinstance(discards, list) or not all(isinstance(n, int) for n in discards):
        discards = None
    slow = {str(s) for s in stats.get("slow_subscribers") or []}
    return discards, slow, record.get("_path")


_FACTS: "weakref.WeakKeyDictionary[Context, dict[RunKey, RunFacts]]" = weakref.WeakKeyDictionary()


def facts(ctx: Context) -> dict[RunKey, RunFacts]:
    """The topic facts of every run that has a subscription, computed once per Context."""
    if ctx not in _FACTS:
        _FACTS[ctx] = _compute(ctx)
    return _FACTS[ctx]


# ---------------------------------------------------------------------- the Spark part


def _is(f: str, *types: str):
    return (F.col("f") == f) & F.col("type").isin(*types)


def _tag_windows(ctx: Context) -> DataFrame:
    """Client ops, each with what one window-function pass over its process can tell: ``window``,
    the index of the ``subscribe`` ok that opened the subscription it belongs to (null outside
    one); on subscribe ok rows how it began (``subscribe_invoked``) and ended (``closed``,
    ``clean``); on send invokes the outcome; and the process's subscriber ``name``. One pass, so
    one shuffle: on small histories each shuffle's fixed cost is what the user waits for."""
    ops = ctx.ops.where(F.col("process") != NEMESIS).select("run", "target", "file", "process", "index", "type", "f",
                                                           "value", "msgs")
    if len(ctx.topic_runs) < len(ctx.runs):  # a tree of runs: leave the queue runs out
        wanted = [f"{run}\u0000{target}" for run, target in sorted(ctx.topic_runs)]
        ops = ops.where(F.concat_ws("\u0000", "run", "target").isin(wanted))
    opens = _is("subscribe", "ok")
    # What ends a subscription (reports/checkers/topic_fanout.py): a resubscribe, a reconnect,
    # a drain, or any op ending `info` (the process retires: chaos/history.py).
    closes = opens | _is("connect", "invoke") | _is("drain", "ok", "info") | (F.col("type") == "info")
    w = Window.partitionBy("run", "target", "process").orderBy("index")
    upto = w.rowsBetween(Window.unboundedPreceding, 0)
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    # "The next one after": a running frame over the reversed order. Spark recomputes a frame
    # ending at unboundedFollowing for every row (quadratic in a process's ops); a growing frame
    # is updated row by row.
    after = (Window.partitionBy("run", "target", "process").orderBy(F.col("index").desc())
             .rowsBetween(Window.unboundedPreceding, -1))
    whole = w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    last_open = F.max(F.when(opens, F.col("index"))).over(upto)
    last_close = F.max(F.when(closes, F.col("index"))).over(before)
    next_close = F.min(F.when(closes, F.struct(F.col("index").alias("at"), _is("drain", "ok").alias("clean")))).over(after)
    # A send is completed by its process's next send op when that is not another invoke.
    next_send = F.min(F.when(F.col("f") == "send", F.struct(F.col("index").alias("at"), F.col("type").alias("type")))).over(after)
    # A process is named after the first subscriber its deliveries, acks and drain request carry.
    first_msg = F.col("msgs")[0]
    sub = F.when(F.col("msgs").isNotNull(),
                 F.coalesce(F.when(first_msg["subscriber"] != -1, first_msg["subscriber"]),
                            F.when(first_msg["consumer"] != -1, first_msg["consumer"])).cast("string"))
    from_value = F.coalesce(*[F.when(F.get_json_object("value", f"$.{k}") != "-1", F.get_json_object("value", f"$.{k}"))
                              for k in ("subscriber", "consumer")])
    sub = F.when(F.col("f").isin("receive", "drain", "ack"), F.coalesce(sub, F.when(F.col("msgs").isNull(), from_value)))
    name = F.min(F.when(sub.isNotNull(), F.struct(F.col("index").alias("at"), sub.alias("sub")))).over(whole)["sub"]
    completes = _is("send", "invoke") & next_send.isNotNull() & (next_send["type"] != "invoke")
    return ops.select(
        "*",
        F.coalesce(name, F.concat(F.lit("process-"), F.col("process"))).alias("name"),
        F.when(last_open.isNotNull() & (F.coalesce(last_close, F.lit(-1)) <= last_open), last_open).alias("window"),
        F.when(opens, F.coalesce(F.max(F.when(_is("subscribe", "invoke"), F.col("index"))).over(upto), F.col("index"))
               ).alias("subscribe_invoked"),
        F.when(opens, F.coalesce(next_close["at"], F.lit(_END))).alias("closed"),
        F.when(opens, F.coalesce(next_close["clean"], F.lit(False))).alias("clean"),
        F.when(completes, next_send["type"]).alias("outcome"),
        F.when(completes, next_send["at"]).alias("completed"),
        F.when(_is("subscribe", "invoke") & (F.get_json_object("value", "$.slow") == "true"),
               F.get_json_object("value", "$.subscriber")).alias("slow_sub"))


def _compute(ctx: Context) -> dict[RunKey, RunFacts]:
    keys = ["run", "target"]
    if not ctx.topic_runs:
        return {}  # no history mentions a topic: nothing to subscribe to, no job to run
    tagged = _tag_windows(ctx).cache()
    windows = tagged.where(F.col("closed").isNotNull()).select(
        *keys, "process", "name", F.col("index").alias("subscribed"), "subscribe_invoked", "closed", "clean")
    # Deliveries, windowed or stray; a foreign message without an id still counts (as unexpected).
    foreign = F.array(F.struct(F.concat(F.lit("<no id: '"), F.substring(F.get_json_object("value", "$.body"), 1, 40),
                                        F.lit("'>")).alias("id"), F.lit(None).cast("bigint").alias("producer"),
                               F.lit(None).cast("bigint").alias("seq")))
    got = tagged.where(F.col("f").isin("receive", "drain") & F.col("type").isin("ok", "info")).select(
        *keys, "process", "name", "index", "window",
        # load.py keeps a JSON null id as "None"; name such a message by its body, like the Python checker.
        F.coalesce(F.expr("""transform(msgs, (m, i) -> named_struct(
                       'id', if(m.id = 'None' and get_json_object(value, if(substr(ltrim(value), 1, 1) = '[',
                                concat('$[', i, '].body'), '$.body')) is not null,
                                concat('<no id: \\'', substr(get_json_object(value, if(substr(ltrim(value), 1, 1) = '[',
                                concat('$[', i, '].body'), '$.body')), 1, 40), '\\'>'), m.id),
                       'producer', m.producer, 'seq', m.seq))"""),
                   F.when(F.get_json_object("value", "$.body").isNotNull(), foreign)).alias("ms"))
    received = got.select(*keys, "process", "name", "index", "window", F.explode("ms").alias("m")).select(
        *keys, "process", "name", "index", "window", "m.id", "m.producer", "m.seq")
    # An id names one attempt; a repeated id keeps its last invoke, as the Python checker does.
    invokes = tagged.where(_is("send", "invoke")).select(*keys, F.col("index").alias("invoked"), "outcome", "completed",
                                                        F.explode("msgs").alias("m"))
    sends = (invokes.groupBy(*keys, F.col("m.id").alias("id"))
             .agg(F.max(F.struct("invoked", "m.producer", "m.seq", "outcome", "completed")).alias("s"))
             .select(*keys, "id", "s.*").where(F.coalesce(F.col("outcome"), F.lit("")) != "fail")).cache()
    # Every attempted send against every window of its run (windows are few: broadcast them).
    pairs = sends.join(F.broadcast(windows), keys).where(
        ((F.col("invoked") > F.col("subscribed")) & (F.col("invoked") < F.col("closed")))
        | ((F.col("invoked") < F.col("subscribed"))
           & (F.col("completed").isNull() | (F.col("completed") > F.col("subscribe_invoked")))))
    acked = pairs.where((F.col("invoked") > F.col("subscribed")) & (F.col("outcome") == "ok"))
    # A cut window owes each producer's messages only up to the last one it delivered.
    last_seq = (received.where(F.col("window").isNotNull() & F.col("seq").isNotNull())
                .groupBy(*keys, "process", F.col("window").alias("subscribed"), "producer").agg(F.max("seq").alias("last_seq")))
    owed = F.col("clean") | (F.col("seq").isNotNull() & (F.col("seq") <= F.coalesce("last_seq", F.lit(-1))))
    acked = acked.join(F.broadcast(last_seq), [*keys, "process", "subscribed", "producer"], "left")
    ops_of = F.filter(F.array("invoked", "subscribed", "closed"), lambda i: i.isNotNull() & (i < _END))
    none = F.lit(None)
    # One row per (subscriber, message id): what was owed, what arrived, what may have arrived.
    facts_rows = (
        acked.select(*keys, "name", "id", F.when(owed, F.struct(ops_of.alias("ops"), "producer", "seq")).alias("e"),
                     F.lit(0).alias("got"), none.cast("bigint").alias("at"), F.lit(0).alias("may"),
                     F.when(~owed, 1).otherwise(0).alias("cut"))
        .unionByName(pairs.select(*keys, "name", "id", none.alias("e"), F.lit(0).alias("got"), none.cast("bigint").alias("at"),
                                  F.lit(1).alias("may"), F.lit(0).alias("cut")), allowMissingColumns=True)
        .unionByName(received.select(*keys, "name", "id", F.lit(1).alias("got"), F.col("index").alias("at"),
                                     F.lit(0).alias("may"), F.lit(0).alias("cut")), allowMissingColumns=True))
    ledger = (facts_rows.groupBy(*keys, "name", "id").agg(
        F.min("e").alias("e"), F.sum("got").alias("n"), F.sort_array(F.collect_list("at")).alias("got_ops"),
        F.max("may").alias("may"), F.sum("cut").alias("cut"))
        .join(sends.select(*keys, "id", "invoked"), [*keys, "id"], "left")).cache()
    sub_stats = ledger.groupBy(*keys, "name").agg(
        F.count(F.col("e")).alias("expected"), F.count(F.when(F.col("n") > 0, 1)).alias("received"),
        F.sum(F.when(F.col("n") == 0, F.col("cut")).otherwise(0)).alias("cut_off"))
    window_stats = windows.groupBy(*keys, "name").agg(
        F.count(F.lit(1)).alias("windows"), F.max(F.struct("subscribed", "clean"))["clean"].alias("drained"),
        F.sort_array(F.flatten(F.collect_list(F.array("subscribed", "closed")))).alias("window_ops"))
    run_stats = (tagged.groupBy(*keys).agg(
        F.first("file").alias("file"), F.collect_set("slow_sub").alias("slow"),
        F.max(_is("subscribe", "ok") & F.coalesce(F.get_json_object("value", "$.destination").startswith("topic://"),
                                                  F.lit(False))).alias("subscribed"))
        .join(sends.groupBy(*keys).agg(F.count(F.lit(1)).alias("attempted"),
                                       F.count(F.when(F.col("outcome") == "ok", 1)).alias("acknowledged")), keys, "left"))
    # Collect 1: per-subscriber and per-run numbers (small).
    summary = (sub_stats.join(window_stats, [*keys, "name"], "full")
               .unionByName(run_stats, allowMissingColumns=True)).collect()
    out: dict[RunKey, RunFacts] = {}
    for r in summary:
        if r["name"] is None and r["subscribed"]:
            discards, slow, record = run_record_stats(r["file"])
            out[(r["run"], r["target"])] = RunFacts((r["run"], r["target"]), r["attempted"] or 0, r["acknowledged"] or 0,
                                                    slow=set(r["slow"]) | slow, broker_discards=discards, record=record)
    for r in summary:
        run = out.get((r["run"], r["target"]))
        if r["name"] is not None and run is not None:
            run.subscribers[r["name"]] = Subscriber(r["name"], r["windows"] or 0, bool(r["drained"]), r["expected"] or 0,
                                                    r["received"] or 0, r["cut_off"] or 0, list(r["window_ops"] or []))
    # Collect 2: the findings, one row per message (the anomalies name every one of them).
    n = F.coalesce(F.col("n"), F.lit(0))
    kind = (F.when(F.col("e").isNotNull() & (n == 0), "missing")
            .when((n > 0) & F.col("invoked").isNull(), "unexpected")
            .when((n > 0) & (F.col("may") == 0), "out_of_window"))
    findings = ledger.select("*", kind.alias("kind")).where(F.col("kind").isNotNull() | (n > 1))
    for r in findings.collect():
        run = out.get((r["run"], r["target"]))
        if run is None or r["name"] not in run.subscribers:
            continue
        base = {"subscriber": r["name"], "id": r["id"], "n": r["n"]}
        if r["kind"] == "missing":
            run.subscribers[r["name"]].missing.append(
                {**base, "kind": "missing", "producer": r["e"]["producer"], "seq": r["e"]["seq"], "ops": list(r["e"]["ops"])})
            continue
        got_ops = list(r["got_ops"] or [])
        if r["kind"] is not None:
            sent = [r["invoked"]] if r["kind"] == "out_of_window" else []
            run.findings.append({**base, "kind": r["kind"], "ops": sent + got_ops})
        if (r["n"] or 0) > 1:
            run.findings.append({**base, "kind": "duplicated", "ops": got_ops})
    for run in out.values():  # producer, then sequence order: the eviction pattern reads off the list
        for s in run.subscribers.values():
            s.missing.sort(key=lambda m: (str(m["producer"]), m["seq"] or 0, m["id"]))
    for df in (ledger, sends, tagged):
        df.unpersist()
    return out


# ---------------------------------------------------------------------- the checker


def judge(run: RunFacts) -> tuple[bool | str, str]:
    """The verdict of reports/checkers/topic_fanout.check_topic_fanout with the documented
    discards of `RunFacts.allowed` and the paired broker counters."""
    problems: list[str] = []
    allowed = run.allowed
    for name, s in sorted(run.subscribers.items()):
        if s.missing and name not in allowed:
            problems.append(f"subscriber {name} missed {len(s.missing)} acknowledged message(s)")
    unexpected = {f["id"] for f in run.findings if f["kind"] == "unexpected"}
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected message(s)")
    for name, count in sorted((run.paired or {}).items()):
        if count != run.subscribers[name].observed_discards:
            problems.append(f"subscriber {name}: the broker counted {count} discarded, the history shows "
                            f"{run.subscribers[name].observed_discards} missing")
    if problems:
        return False, "; ".join(problems)
    undrained = sorted(name for name, s in run.subscribers.items() if not s.drained)
    if not run.subscribers:
        return UNKNOWN, "the history has no subscriptions: nothing to check"
    if undrained:
        return UNKNOWN, (f"subscriber(s) {', '.join(undrained)} have no final ok drain: messages still on their way "
                         "would look missing; drain each subscription after stop()")
    return True, ""


_DETAIL = {
    "missing": "acknowledged send published while subscriber {s} was subscribed, never received by it",
    "unexpected": "subscriber {s} received it, but no send of it was attempted (or every attempt failed)",
    "duplicated": "subscriber {s} received it {n} times",
    "out_of_window": "subscriber {s} received it, but it was published before that subscription existed "
                     "(a subscription recovery policy may replay it)",
}


def anomaly(run: RunFacts, checker: str, kind: str, finding: dict, detail: str | None = None) -> dict:
    return {"run": run.key[0], "target": run.key[1], "checker": checker, "kind": kind, "message_id": finding["id"],
            "ops": finding["ops"], "detail": detail or _DETAIL[finding["kind"]].format(s=finding["subscriber"],
                                                                                     n=finding["n"])}


def check(ctx: Context) -> CheckOutput:
    runs = facts(ctx)
    results: list[CheckResult] = []
    rows: list[dict] = []
    for key in ctx.runs:
        run = runs.get(key)
        if run is None:
            results.append(CheckResult(NAME, *key, UNKNOWN, "no topic subscription in this history", applicable=False))
            continue
        allowed = run.allowed
        for s in run.subscribers.values():
            if s.name not in allowed:
                rows += [anomaly(run, NAME, "missing", m) for m in s.missing]
        rows += [anomaly(run, NAME, f["kind"], f) for f in run.findings]
        valid, reason = judge(run)
        paired = run.paired or {}
        stats = {"attempted": run.attempted, "acknowledged": run.acknowledged,
                 "documented_discards_for": sorted(allowed), "broker_record": run.record,
                 "subscribers": {name: {"windows": s.windows, "drained": s.drained, "expected": s.expected,
                                        "received": s.received, "missing": s.observed_discards, "cut_off": s.cut_off,
                                        "broker_discards": paired.get(name), "gaps": s.gaps()}
                                 for name, s in sorted(run.subscribers.items())}}
        results.append(CheckResult(NAME, *key, valid, reason, stats=stats))
    rows.sort(key=lambda r: (r["run"], r["target"], r["checker"], r["kind"], r["message_id"] or ""))
    counts = count_by_run(rows)
    for result in results:
        result.stats["anomalies"] = counts.get((result.run, result.target), {})
    return CheckOutput(results, ctx.spark.createDataFrame(rows, ctx.empty_anomalies().schema) if rows
                       else ctx.empty_anomalies(), rows)

