"""A history too big for one task, on Spark: read in pieces, split by each checker's own key,
combined again (reports/checkers/split.py has the rules; this is the job around them).

1. Pieces: byte ranges of the history file(s) at line boundaries (fused/load.py
   `read_history_range`), or the run's Parquet files. A task reads one piece, writes its
   Parquet back when asked, and reports its share of each run's span and of the process ->
   client claims. The pieces stay cached (memory, else disk) for step 2.
2. The driver merges the spans (each run's bounds) and the claims (each process's client) and
   broadcasts them: small, a few numbers and one name per process.
3. Each piece's rows go to part ``crc32(key) % k`` of every key (id, producer, group, client),
   the nemesis steps and the ops that release a group to every part that reads them; Spark's
   shuffle brings a part's rows together (spilling to disk), and one task per (run, key, part)
   computes its facts with the same checker functions as a whole run's.
4. The driver combines each run's parts (each checker's ``combine``) and judges as for any run.

Topic fan-out and slow consumer read a run's events whole (reports/checkers/topic_fanout.py):
a split run with topics gets no topic verdict, with the reason.

When: a history whose estimated rows exceed the threshold (``split_rows``, else the environment's
BROKERCONF_SPLIT_ROWS, else `default_split_rows`: what one task's memory holds).
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from reports.checkers import failover_downtime, split
from reports.checkers.history import Columns, Rows
from reports.checkers import topic_fanout as topic_checker
from reports.pipeline.load import MalformedHistory

from . import load as fused_load

ENV = "BROKERCONF_SPLIT_ROWS"
#: bytes of JSON lines per flat row, to estimate a file's rows from its size without reading it:
#: the queue workloads' lines are 200-250 bytes (benchmarks/pipeline_bench.py: 1.8 GB for 8M);
#: a low figure errs towards splitting
BYTES_PER_ROW = 200
#: peak memory of a task per row it judges (the flat table, its numpy columns, the checkers'
#: temporaries): measured 530 MB peak RSS for reading and judging the benchmark's 1M-operation
#: history (1.02M rows) in one process; a margin on top for the Parquet written beside it
PEAK_BYTES_PER_ROW = 600


#: rows per piece at most: a piece crosses from its Python worker to the executor's JVM as one
#: record (Arrow IPC, lz4), and an executor's heap is 1 GB unless configured; measured on a
#: standalone cluster, pieces of 3.8M rows (about 600 MB of IPC) killed the executors
#: (exit code 52, out of memory) where pieces of 0.8M rows went through
PIECE_ROWS = 500_000


def default_split_rows(spark) -> int:
    """Rows one task can judge in the memory it has: ``spark.executor.pyspark.memory`` when set,
    else half the driver machine's memory (local mode: the tasks run there)."""
    conf = spark.sparkContext.getConf().get("spark.executor.pyspark.memory", None)
    if conf:
        memory = _bytes(conf)
    else:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    return max(100_000, memory // PEAK_BYTES_PER_ROW)


def split_rows_setting(spark, given: int | None) -> int:
    """The threshold: ``given``, else the environment's, else `default_split_rows`."""
    if given is not None:
        if given < 1:
            raise ValueError(f"split_rows must be a positive number of rows, not {given}")
        return given
    value = split_rows_from_env()
    return default_split_rows(spark) if value is None else value


def split_rows_from_env() -> int | None:
    """BROKERCONF_SPLIT_ROWS, checked (a ValueError naming it when it is not a positive integer)."""
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{ENV}={text!r}: a number of rows expected") from None
    if value < 1:
        raise ValueError(f"{ENV}={text!r}: a positive number of rows expected")
    return value


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = text.strip().lower().rstrip("b")
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text) << 20


def estimated_rows(unit) -> int:
    if unit.kind == "parquet":
        return fused_load.parquet_rows(unit.path)
    return sum(Path(p).stat().st_size for p in (unit.path, *unit.more)) // BYTES_PER_ROW


@dataclass(frozen=True)
class Piece:
    number: int
    kind: str  # "jsonl" | "parquet"
    path: str
    start: int = 0
    end: int = 0
    first_line: int = 1
    run: str = ""
    target: str = ""


def pieces_of(unit, n: int) -> list[Piece]:
    if unit.kind == "parquet":
        return [Piece(i, "parquet", f, run=unit.run, target=unit.target)
                for i, f in enumerate(fused_load.run_files(unit.path))]
    files = [unit.path, *unit.more]
    total = sum(Path(f).stat().st_size for f in files) or 1
    out: list[Piece] = []
    for f in files:
        share = max(1, round(n * Path(f).stat().st_size / total))
        out += [Piece(len(out) + i, "jsonl", f, a, b, line) for i, (a, b, line) in enumerate(fused_load.line_starts(f, share))]
    return out


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    table = table.unify_dictionaries()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def read_piece(piece: Piece, skip_malformed: bool, parquet_out: str | None) -> tuple[dict, bytes]:
    """Step 1 (a task): (what the driver needs, the piece's rows as Arrow IPC)."""
    pa.set_cpu_count(os.cpu_count() or 1)  # as engine.run_unit: the task gets the machine's cores
    started = time.perf_counter()
    try:
        if piece.kind == "jsonl":
            read = fused_load.read_history_range(piece.path, piece.start, piece.end, piece.first_line,
                                                 skip_malformed=skip_malformed)
            table, malformed, note = read.table, read.malformed, read.note
        else:
            table = fused_load.read_run_parquet(piece.run, piece.target, "", files=[piece.path])
            malformed, note = [], ""
    except MalformedHistory as exc:
        return {"error": str(exc)}, b""
    info: dict = {"malformed": [m.__dict__ for m in malformed], "note": note, "runs": {},
                  "timing": {"piece": piece.number, "rows": table.num_rows, "read_s": time.perf_counter() - started}}
    if parquet_out is not None and table.num_rows:
        # a name of the piece's own: a piece read again (a lost cache) overwrites its files
        fused_load.write_runs(table, parquet_out, stem=f"split{piece.number:05d}-{Path(piece.path).stem}")
    for run, target, rows in fused_load.runs_of(table):
        r = Rows(rows)
        info["runs"][json.dumps([run, target])] = {"span": split.span(r),
                                                   "claims": failover_downtime.worker_claims(r)}
    info["timing"]["piece_s"] = time.perf_counter() - started
    return info, _ipc(table)


def to_parts(data: bytes, runs: dict, k: int):
    """Step 3, the map side: ((run slot, key, part) as one integer, the part's rows as IPC)."""
    table = _table(data)
    for run, target, rows in fused_load.runs_of(table):
        slot, _, clients = runs[json.dumps([run, target])]
        encoded = Rows(rows)
        for f, family in enumerate(split.FAMILIES):
            for p, part in split.parts(rows, family, k, clients, encoded).items():
                yield (slot * len(split.FAMILIES) + f) * k + p, _ipc(part)


def part_facts(key: int, blobs, runs_by_slot: dict, k: int) -> tuple[int, int, dict, dict]:
    """Step 3, the reduce side (a task): (run slot, key number, facts, timing) of one part."""
    started = time.perf_counter()
    slot, rest = divmod(key, len(split.FAMILIES) * k)
    family = split.FAMILIES[rest // k]
    table = split.gathered([_table(b) for b in blobs])
    bounds = runs_by_slot[slot]
    facts = split.part_facts(Columns(table, bounds), family)
    return slot, rest // k, facts, {"part": key, "rows": table.num_rows, "check_s": time.perf_counter() - started}


def analyze_split(sc, unit, split_rows: int, skip_malformed: bool, parquet_out: str | None) -> list[tuple]:
    """The records engine.run_unit returns for ``unit``, computed in pieces and parts."""
    from pyspark import StorageLevel  # pylint: disable=import-outside-toplevel

    started = time.perf_counter()
    rows = estimated_rows(unit)
    k = max(2, sc.defaultParallelism, math.ceil(2 * rows / split_rows))
    pieces = pieces_of(unit, max(k, math.ceil(rows / PIECE_ROWS)))
    read = (sc.parallelize(pieces, len(pieces)).map(lambda p: read_piece(p, skip_malformed, parquet_out))
            .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        infos = read.map(lambda x: x[0]).collect()
        errors = [i["error"] for i in infos if "error" in i]
        if errors:
            return [("", "", "_error", json.dumps(sorted(errors)[0]))]
        out: list[tuple] = [("", "", "_unit", json.dumps(unit.path))]
        out += [(m["run"], "", "_malformed", json.dumps(m)) for i in infos for m in i["malformed"]]
        out += [("", "", "_note", json.dumps(i["note"])) for i in infos if i["note"]]
        keys = sorted({key for i in infos for key in i["runs"]})
        spans = {key: split.merge_spans([i["runs"][key]["span"] for i in infos if key in i["runs"]]) for key in keys}
        clients = {key: failover_downtime.client_names(failover_downtime.merge_claims(
            [i["runs"][key]["claims"] for i in infos if key in i["runs"]])) for key in keys}
        runs = {key: (slot, (spans[key]["t0"], spans[key]["t1"]), clients[key]) for slot, key in enumerate(keys)}
        by_slot = {slot: bounds for slot, bounds, _ in runs.values()}
        shared = sc.broadcast(runs)
        n_parts = max(1, len(keys) * len(split.FAMILIES) * k)
        parted = (read.flatMap(lambda x: to_parts(x[1], shared.value, k))
                  .groupByKey(n_parts, partitionFunc=lambda key: key)
                  .map(lambda kv: part_facts(kv[0], kv[1], by_slot, k))
                  .collect())
        shared.unpersist()
    finally:
        read.unpersist()
    family_parts: dict[int, dict[str, list]] = {}
    for slot, f, facts, timing in parted:
        family_parts.setdefault(slot, {}).setdefault(split.FAMILIES[f], []).append(facts)
    for key in keys:
        run, target = json.loads(key)
        slot = runs[key][0]
        facts = split.combine(family_parts.get(slot, {}), spans[key])
        facts[topic_checker.NAME], facts["topic_unreadable"] = None, ""
        if spans[key]["topic"]:
            facts["topic_unreadable"] = (f"the run was split into {k} parts per key ({rows:,} rows estimated, above "
                                         f"the {split_rows:,} one task takes): topic fan-out reads a run's events "
                                         "whole and is not split yet")
        out.append((run, target, "facts", json.dumps(facts, default=fused_load.json_plain)))
    timing = {"unit": unit.path, "rows": sum(i["timing"]["rows"] for i in infos), "split": k, "pieces": len(pieces),
              "read_s": max(i["timing"]["read_s"] for i in infos),
              "check_s": max((t["check_s"] for *_, t in parted), default=0.0), "task_s": time.perf_counter() - started}
    out.append(("", "", "_timing", json.dumps(timing)))
    return out
