"""Benchmark of the analysis pipeline (issue 6): not a timed test, numbers for orientation.

Generates histories of N operations (default 1 million and 10 million) shaped like the queue
workloads' (chaos/workloads/queue.py: producers send, consumers receive and ack, message groups,
process kills with in-doubt sends, a final drain), then times, side by side:

  python    one pass in plain CPython over the JSON lines: the pure-Python total-queue checker
            (reports/checkers/total_queue.py) fed by json.loads line by line
  spark     `analyze` with every checker (local[*]) on the JSON lines, and again on the Parquet
            the first run wrote back

and prints seconds and operations per second, and the growth from the smallest to the largest
size (close to linear is the goal).

    .venv/bin/python benchmarks/pipeline_bench.py [--ops 1000000,10000000] [--engine fused] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def generate(path: str | Path, ops: int, *, seed: int = 1, producers: int = 4, consumers: int = 4,
             groups: int = 16, kill_every: int = 200_000, run: str | None = None) -> int:
    """Write a history of about ``ops`` operations; returns the number of lines written."""
    rng = random.Random(seed)
    run = run or f"bench-{ops}"
    head = f'"target":"bench","node":"A","run":"{run}"'
    lines: list[str] = []
    index = 0
    now = 0
    dest = "queue://bench"
    seqs = [0] * producers
    pid = {f"p{p}": p for p in range(producers)} | {f"c{c}": producers + c for c in range(consumers)}
    next_pid = producers + consumers
    queue: list[str] = []  # message values waiting, in send order
    written = 0
    next_kill = kill_every

    def emit(process, kind, f, value) -> None:
        nonlocal index, now
        now += rng.randint(20_000, 60_000)
        v = "null" if value is None else value
        p = '"nemesis"' if process == "nemesis" else str(process)
        lines.append(f'{{"index":{index},"time":{now},"process":{p},"type":"{kind}","f":"{f}","value":{v},{head}}}\n')
        index += 1

    with open(path, "w") as out:
        while index < ops - 10:
            if kill_every and index >= next_kill:
                next_kill += kill_every
                emit("nemesis", "info", "kill", '{"nemesis":"process","phase":"start"}')
                emit("nemesis", "info", "kill", f'{{"nemesis":"process","phase":"end","fault":"down","started":{now - 10}}}')
                start = now
                now += 500_000_000
                emit("nemesis", "info", "start", '{"nemesis":"process","phase":"start"}')
                emit("nemesis", "info", "start", f'{{"nemesis":"process","phase":"end","fault_window":[{{"fault":"down",'
                                                  f'"f":"kill","start":{start - 10},"end":{now}}}]}}')
            p = rng.randrange(producers)
            seq = seqs[p]
            seqs[p] += 1
            msg = (f'{{"id":"{run}-{p}-{seq}","producer":{p},"seq":{seq},"destination":"{dest}",'
                   f'"group":"g{(p * 7 + seq) % groups}"}}')
            key = f"p{p}"
            emit(pid[key], "invoke", "send", msg)
            if rng.random() < 0.0005:  # in doubt: the process retires (chaos/history.py)
                emit(pid[key], "info", "send", msg)
                pid[key] = next_pid
                next_pid += 1
                if rng.random() < 0.5:
                    queue.append(msg)
            else:
                emit(pid[key], "ok", "send", msg)
                queue.append(msg)
            if queue and rng.random() < 0.9:
                got = queue.pop(0)
                # a group stays with one consumer (message groups pin it: GRP-PIN-1)
                c = int(got.rsplit('"group":"g', 1)[1].split('"')[0]) % consumers
                value = got[:-1] + f',"consumer":{c}}}'
                emit(pid[f"c{c}"], "invoke", "receive", None)
                emit(pid[f"c{c}"], "ok", "receive", value)
                emit(pid[f"c{c}"], "invoke", "ack", value)
                emit(pid[f"c{c}"], "ok", "ack", value)
            if len(lines) > 50_000:
                out.writelines(lines)
                written += len(lines)
                lines.clear()
        drainer = next_pid
        emit(drainer, "invoke", "drain", None)
        emit(drainer, "ok", "drain", "[" + ",".join(queue) + "]")
        out.writelines(lines)
        written += len(lines)
    return written


def python_pass(path: Path) -> tuple[float, object]:
    from reports.checkers.total_queue import check_total_queue

    started = time.perf_counter()
    with open(path, "rb") as handle:
        result = check_total_queue(json.loads(line) for line in handle)
    return time.perf_counter() - started, result


def spark_pass(path: Path, out: Path, engine: str) -> tuple[float, object]:
    from reports.pipeline.analyze import analyze, write
    from reports.pipeline.load import find_sources
    from reports.pipeline.session import get_session

    spark = get_session()
    started = time.perf_counter()
    # JSON lines are written back as Parquet (part of the pipeline's work, so timed); the second
    # pass reads that Parquet
    histories_out = out / "histories.parquet" if find_sources(path)[0] == "jsonl" else None
    analysis = analyze(spark, path, engine=engine, histories_out=histories_out)
    write(analysis, out, spark=spark)
    seconds = time.perf_counter() - started
    spark.catalog.clearCache()
    return seconds, analysis


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="1000000,10000000", help="comma-separated history sizes")
    parser.add_argument("--dir", help="work directory (default: a temporary one, removed afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--skip-python", action="store_true")
    parser.add_argument("--engine", default="fused", help="comma-separated analysis engines (fused: the only one since issue 17)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.ops.split(",")]
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="brokerconf-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    from reports.pipeline.session import get_session, stop_session

    started = time.perf_counter()
    get_session()
    print(f"Spark session start-up: {time.perf_counter() - started:.1f} s")
    from reports.pipeline.fused.load import SCANNER
    print("fused engine parses with " + ("the C scanner (reports/pipeline/fused/_scan.c)" if SCANNER is not None
                                         else "pyarrow: the C scanner is not built (pip install -e .)"))
    engines = [e for e in args.engine.split(",") if e]
    rows = []
    try:
        for n in sizes:
            path = work / f"h{n}" / "history.jsonl"
            path.parent.mkdir(exist_ok=True)
            if path.exists() and args.dir:
                lines = sum(1 for _ in open(path, "rb"))
                print(f"reusing {path}: {lines:,} operations ({path.stat().st_size / 1e6:,.0f} MB)")
            else:
                t = time.perf_counter()
                lines = generate(path, n)
                print(f"generated {lines:,} operations ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t:.1f} s")
            py = python_pass(path)[0] if not args.skip_python else None
            row = {"ops": lines, "python": py}
            line = [f"  load {_load()}", f"python {py if py is None else round(py, 1)} s"]
            for engine in engines:
                js, analysis = spark_pass(path, work / f"out-{engine}{n}", engine)
                pq, again = spark_pass(work / f"out-{engine}{n}" / "histories.parquet", work / f"outpq-{engine}{n}", engine)
                row[engine] = (js, pq, analysis.valid)
                line.append(f"{engine}/jsonl {js:.1f} s  {engine}/parquet {pq:.1f} s  verdict {analysis.valid}")
                print(f"  {engine} checks: {_checks(analysis)}", flush=True)
                for source, result in (("jsonl", analysis), ("parquet", again)):
                    for t in getattr(result.histories, "timings", []):
                        print(f"  {engine}/{source} task: " + ", ".join(
                            f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in t.items() if k != "unit"),
                            flush=True)
            rows.append(row)
            print("   ".join(line), flush=True)
    finally:
        stop_session()
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    head = f"{'operations':>12} {'python s':>9} {'ops/s':>10}"
    for engine in engines:
        head += f" {engine + ' jsonl s':>15} {'ops/s':>10} {engine + ' parquet s':>17} {'ops/s':>10}"
    print("\n" + head)
    for row in rows:
        n, py = row["ops"], row["python"]
        text = f"{n:>12,} {py or 0:>9.1f} {n / py if py else 0:>10,.0f}"
        for engine in engines:
            js, pq, _ = row[engine]
            text += f" {js:>15.1f} {n / js:>10,.0f} {pq:>17.1f} {n / pq:>10,.0f}"
        print(text)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"\ngrowth x{b['ops'] / a['ops']:.0f} in size: "
              + ", ".join(f"{e}/jsonl x{b[e][0] / a[e][0]:.1f}, {e}/parquet x{b[e][1] / a[e][1]:.1f}" for e in engines)
              + (f", python x{b['python'] / a['python']:.1f}" if a["python"] and b["python"] else ""))
    return 0


def _checks(analysis) -> str:
    """Every checker that ran and its result: the timing covers all of them, not just one."""
    marks = {True: "true", False: "FALSE", "unknown": "unknown"}
    return ", ".join(f"{r.checker} {marks[r.valid] if r.applicable else 'n/a'}" for r in analysis.results)


def _load() -> str:
    """The machine's load average: the numbers mean little on a busy machine."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
