"""Benchmark of the analysis pipeline (issue 17, "Pipeline speed"): numbers side by side, not a timed test.

Generates histories of N operations (default 1 million and 8 million) shaped like the queue
workloads' (chaos/workloads/queue.py: producers send, consumers receive and ack, message groups,
process kills with in-doubt sends, a final drain), then times, side by side:

  plain     one pass in plain CPython over the JSON lines: json.loads line by line into the
            total-queue checker (reports/checkers/total_queue.py `check_total_queue`)
  jsonl     `analyze` with every checker (local[*]) on the JSON lines, writing its Parquet back
  parquet   `analyze` again on that Parquet

Wall time of the whole `analyze` (and writing its results), without the Spark session's start-up
(printed on its own); operations per second; ratios against the plain pass; growth from the
smallest to the largest size; the machine's load average (a shared machine: the numbers mean
little when it is busy); and the issue's targets, met or not.

``--cluster``: a standalone Spark cluster (a master and two workers, one core each, started on
loopback from the installed pyspark's ``spark-class`` and stopped by their process handles)
analyses ONE run of ``--cluster-ops`` operations through the split-by-key path
(reports/pipeline/fused/split_job.py), with a threshold that splits it (``--cluster-split-rows``).

    .venv/bin/python benchmarks/pipeline_bench.py [--ops 1000000,8000000] [--dir DIR] [--keep]
        [--skip-python] [--cluster [--cluster-ops 100000000] [--cluster-split-rows N] [--skip-local]]
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


def spark_pass(path: Path, out: Path, master: str | None = None, split_rows: int | None = None):
    """(seconds, analysis) of the whole `analyze` and its written results; JSON lines are
    written back as Parquet (part of the pipeline's work, so timed)."""
    from reports.pipeline.analyze import analyze, write
    from reports.pipeline.load import find_sources
    from reports.pipeline.session import get_session

    spark = get_session(master) if master else get_session()
    shutil.rmtree(out, ignore_errors=True)  # the benchmark's own output, perhaps left by a failed pass
    started = time.perf_counter()
    histories_out = out / "histories.parquet" if find_sources(path)[0] == "jsonl" else None
    analysis = analyze(spark, path, histories_out=histories_out, split_rows=split_rows)
    write(analysis, out, spark=spark)
    seconds = time.perf_counter() - started
    spark.catalog.clearCache()
    return seconds, analysis


def _history(work: Path, n: int, reuse: bool) -> tuple[Path, int]:
    path = work / f"h{n}" / "history.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and reuse:
        lines = sum(1 for _ in open(path, "rb"))
        print(f"reusing {path}: {lines:,} operations ({path.stat().st_size / 1e6:,.0f} MB)", flush=True)
    else:
        t = time.perf_counter()
        lines = generate(path, n)
        print(f"generated {lines:,} operations ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t:.1f} s",
              flush=True)
    return path, lines


def local_rows(sizes: list[int], work: Path, reuse: bool, skip_python: bool) -> tuple[list[dict], float]:
    from reports.pipeline.session import get_session, stop_session

    started = time.perf_counter()
    _warm(get_session())
    startup = time.perf_counter() - started
    print(f"Spark session start-up (local[*]): {startup:.1f} s", flush=True)
    rows = []
    try:
        for n in sizes:
            path, lines = _history(work, n, reuse)
            load_before = _load()
            py = None if skip_python else python_pass(path)[0]
            row = {"ops": lines, "python": py, "load": load_before}
            try:
                js, analysis = spark_pass(path, work / f"out{n}")
                pq, again = spark_pass(work / f"out{n}" / "histories.parquet", work / f"outpq{n}")
                row.update(jsonl=js, parquet=pq, verdict=analysis.valid, same=_same(analysis, again))
                print(f"  checks: {_checks(analysis)}", flush=True)
                for source, result in (("jsonl", analysis), ("parquet", again)):
                    for t in getattr(result.histories, "timings", []):
                        print(f"  {source} task: " + _timing(t), flush=True)
            except Exception as exc:  # noqa: BLE001 - an out-of-memory or a crash is a result to print
                row["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                print(f"  analysis failed: {row['failed']}", flush=True)
            row["load_after"] = _load()
            rows.append(row)
            if not reuse:  # the big histories go as soon as they are measured
                shutil.rmtree(path.parent, ignore_errors=True)
    finally:
        stop_session()
    return rows, startup


def print_local(rows: list[dict], startup: float) -> None:
    print(f"\nSpark session start-up (not in the times below): {startup:.1f} s")
    head = (f"{'operations':>12} {'plain s':>8} {'ops/s':>9} {'jsonl s':>8} {'ops/s':>9} {'x plain':>7} "
            f"{'parquet s':>9} {'ops/s':>9} {'x plain':>7}  load 1/5/15 min (before; after)")
    print(head)
    for r in rows:
        n, py = r["ops"], r["python"]
        text = f"{n:>12,} " + (f"{py:>8.1f} {n / py:>9,.0f} " if py else f"{'-':>8} {'-':>9} ")
        if "failed" in r:
            text += f"FAILED: {r['failed']}"
        else:
            js, pq = r["jsonl"], r["parquet"]
            text += (f"{js:>8.1f} {n / js:>9,.0f} {(py / js if py else 0):>7.1f} "
                     f"{pq:>9.1f} {n / pq:>9,.0f} {(py / pq if py else 0):>7.1f}")
        print(text + f"  {r['load']}; {r['load_after']}")
    ok = [r for r in rows if "failed" not in r]
    if len(ok) > 1:
        a, b = ok[0], ok[-1]
        size = b["ops"] / a["ops"]
        print(f"growth x{size:.1f} in size: jsonl x{b['jsonl'] / a['jsonl']:.1f}, parquet x{b['parquet'] / a['parquet']:.1f}"
              + (f", plain x{b['python'] / a['python']:.1f}" if a["python"] and b["python"] else ""))
    print("verdicts: " + ", ".join(f"{r['ops']:,}: {r.get('verdict')} (jsonl and parquet agree: {r.get('same')})"
                                   for r in ok))
    print("\ntargets (issue 17, at the largest size):")
    big = max(rows, key=lambda r: r["ops"]) if rows else None
    if big is None:
        return
    if "failed" in big:
        print(f"  every target: NOT MET ({big['ops']:,} failed: {big['failed']})")
        return
    if big["python"]:
        ratio = big["python"] / big["jsonl"]
        print(f"  JSON lines >= 5x the plain pass: x{ratio:.1f} -> {'met' if ratio >= 5 else 'NOT met'}")
    print(f"  Parquet under 4 s: {big['parquet']:.1f} s -> {'met' if big['parquet'] < 4 else 'NOT met'}")
    if len(ok) > 1:
        a = ok[0]
        size = big["ops"] / a["ops"]
        for source in ("jsonl", "parquet"):
            growth = big[source] / a[source]
            print(f"  growth within x{size:.1f} +-20% ({source}): x{growth:.1f} -> "
                  f"{'met' if 0.8 * size <= growth <= 1.2 * size else 'NOT met'}"
                  + (" (below: fixed costs dominate the small size)" if growth < 0.8 * size else ""))
    print(f"  no out-of-memory in local mode: {'met' if all('failed' not in r for r in rows) else 'NOT met'}")


# ---------------------------------------------------------------------- a standalone cluster


def cluster_run(work: Path, ops: int, split_rows: int | None, reuse: bool) -> dict:
    from reports.pipeline.session import get_session, stop_session
    from reports.pipeline.standalone import StandaloneCluster

    path, lines = _history(work, ops, reuse)
    split_rows = split_rows or max(1_000, lines // 4)
    out: dict = {"ops": lines, "bytes": path.stat().st_size, "split_rows": split_rows, "load": _load()}
    (work / "cluster").mkdir(exist_ok=True)
    with StandaloneCluster(work / "cluster", workers=2, memory="3g") as url:
        started = time.perf_counter()
        _warm(get_session(url))
        out["startup"] = time.perf_counter() - started
        try:
            out["jsonl"], analysis = spark_pass(path, work / "cluster-out", url, split_rows)
            out["parquet"], again = spark_pass(work / "cluster-out" / "histories.parquet", work / "cluster-outpq", url,
                                               split_rows)
            out["verdict"], out["same"] = analysis.valid, _same(analysis, again)
            out["timings"] = [t for t in analysis.histories.timings] + [t for t in again.histories.timings]
            print(f"  checks: {_checks(analysis)}", flush=True)
        except Exception as exc:  # noqa: BLE001 - printed as the result
            out["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        finally:
            stop_session()
    out["load_after"] = _load()
    if not reuse:
        shutil.rmtree(path.parent, ignore_errors=True)
    return out


def print_cluster(r: dict) -> None:
    print(f"\nstandalone cluster (a master and two 1-core workers on loopback), ONE run of {r['ops']:,} operations "
          f"({r['bytes'] / 1e9:.2f} GB of JSON lines), split above {r['split_rows']:,} rows:")
    print(f"  session start-up (not below): {r.get('startup', 0):.1f} s; load {r['load']}; after {r['load_after']}")
    if "failed" in r:
        print(f"  FAILED: {r['failed']}")
        return
    for t in r["timings"]:
        print("  " + _timing(t))
    print(f"  jsonl {r['jsonl']:.1f} s ({r['ops'] / r['jsonl']:,.0f} ops/s), parquet {r['parquet']:.1f} s "
          f"({r['ops'] / r['parquet']:,.0f} ops/s), verdict {r['verdict']}, jsonl and parquet agree: {r['same']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="1000000,8000000", help="comma-separated history sizes (local mode)")
    parser.add_argument("--dir", help="work directory (default: a temporary one, removed afterwards); "
                                      "histories found there are reused")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--skip-python", action="store_true", help="leave out the plain-Python pass")
    parser.add_argument("--skip-local", action="store_true", help="only the cluster run (with --cluster)")
    parser.add_argument("--cluster", action="store_true", help="also one big run on a standalone cluster")
    parser.add_argument("--cluster-ops", type=int, default=100_000_000, help="operations of the cluster's run")
    parser.add_argument("--cluster-split-rows", type=int, help="the split threshold there (default: a quarter of the run)")
    parser.add_argument("--engine", default="fused", help=argparse.SUPPRESS)  # one engine since issue 17
    args = parser.parse_args(argv)
    try:
        sizes = sorted(int(s) for s in args.ops.split(",") if s)
    except ValueError:
        parser.error(f"--ops: comma-separated integers expected, not {args.ops!r}")
    if not sizes or min(sizes) < 100 or args.cluster_ops < 100:
        parser.error("--ops / --cluster-ops: at least 100 operations")
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="brokerconf-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    from reports.pipeline.fused.load import SCANNER

    print(f"{os.cpu_count()} cores; load average {_load()}; the fused engine parses with "
          + ("the C scanner" if SCANNER is not None else "pyarrow (the C scanner is not built: pip install -e .)"),
          flush=True)
    reuse = bool(args.dir) or args.keep
    try:
        if not args.skip_local:
            rows, startup = local_rows(sizes, work, reuse, args.skip_python)
        cluster = cluster_run(work, args.cluster_ops, args.cluster_split_rows, reuse) if args.cluster else None
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    if not args.skip_local:
        print_local(rows, startup)
    if cluster is not None:
        print_cluster(cluster)
    return 0


def _warm(spark) -> None:
    """Start-up includes the executors and their Python workers: one task per core."""
    sc = spark.sparkContext
    sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).map(lambda x: x).count()


def _same(a, b) -> bool:
    key = lambda analysis: json.dumps(analysis.verdicts, sort_keys=True, default=str)  # noqa: E731
    return key(a) == key(b)


def _timing(t: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in t.items() if k != "unit")


def _checks(analysis) -> str:
    """Every checker that ran and its result: the timing covers all of them, not just one."""
    marks = {True: "true", False: "FALSE", "unknown": "unknown"}
    return ", ".join(f"{r.checker} {marks[r.valid] if r.applicable else 'n/a'}" for r in analysis.results)


def _load() -> str:
    """The machine's load average: the numbers mean little on a busy machine."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
