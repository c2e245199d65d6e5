"""Time the fused engine's per-run pass (reports/pipeline/fused/checks.py) on one history file.

    .venv/bin/python benchmarks/fused_pass_bench.py /tmp/pb/h1m.jsonl [--old] [--repeat N] [--scale K] [--shuffle]

The history is read with pyarrow (no Spark): ordinary lines by pyarrow's JSON reader, the few
lines it cannot type (nemesis steps, a drain's list at the root of ``value``) with `json`, then
flattened to one row per message like fused/load.py (FLAT_COLUMNS). ``--old`` also times the
pandas implementation frozen in tests/reports/_fused_checks_pandas_reference.py (the same input
through ``to_pandas``) and checks that both return the same records. ``--scale 8`` runs the
history eight times over (8M operations from the 1M one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.pipeline.fused import checks  # noqa: E402  (after the path insert)

MSG_FIELDS = [("id", pa.string()), ("producer", pa.int64()), ("seq", pa.int64()), ("destination", pa.string()),
              ("group", pa.string()), ("consumer", pa.int64()), ("subscriber", pa.int64()), ("redelivered", pa.bool_())]
MSG = pa.struct(MSG_FIELDS)
OP_FIELDS = [("index", pa.int64()), ("time", pa.int64()), ("process", pa.int64()), ("type", pa.string()),
             ("f", pa.string()), ("target", pa.string()), ("node", pa.string()), ("run", pa.string()),
             ("error", pa.string())]
LINE = pa.schema([*OP_FIELDS, ("value", MSG)])
FAULT_WINDOW = pa.list_(pa.struct([("fault", pa.string()), ("f", pa.string()), ("start", pa.int64()), ("end", pa.int64())]))
FLAT = pa.schema([("run", pa.string()), ("target", pa.string()), ("node", pa.string()), ("file", pa.string()),
                  ("index", pa.int64()), ("time", pa.int64()), ("process", pa.string()), ("type", pa.string()),
                  ("f", pa.string()), ("error", pa.string()), ("pos", pa.int64()), *MSG_FIELDS,
                  ("phase", pa.string()), ("fault", pa.string()), ("started", pa.int64()), ("fault_window", FAULT_WINDOW)])


def flat_table(path: Path) -> pa.Table:
    data = path.read_bytes()
    plain, special = [], []
    for line in data.split(b"\n"):
        if not line:
            continue
        (special if b'"nemesis"' in line or b'"value":[' in line else plain).append(line)
    typed = pj.read_json(pa.BufferReader(b"\n".join(plain)),
                         parse_options=pj.ParseOptions(explicit_schema=LINE, unexpected_field_behavior="ignore"))
    v = typed.column("value").combine_chunks()
    cols = {name: typed.column(name) for name, _ in OP_FIELDS}
    cols["process"] = pc.cast(typed.column("process"), pa.string())
    cols["file"] = pa.array([str(path)] * typed.num_rows, pa.string())
    for name, _ in MSG_FIELDS:
        cols[name] = v.field(name)
    cols["pos"] = pc.if_else(pc.is_null(cols["id"]), pa.scalar(None, pa.int64()), pa.scalar(0, pa.int64()))
    for name in ("phase", "fault", "started", "fault_window"):
        cols[name] = pa.nulls(typed.num_rows, FLAT.field(name).type)
    rows = []
    for raw in special:
        e = json.loads(raw)
        op = {k: e.get(k) for k, _ in OP_FIELDS}
        op["process"], op["file"] = str(e["process"]), str(path)
        value = e.get("value")
        if isinstance(value, list):
            rows += [{**op, "pos": i, **m} for i, m in enumerate(value)] or [op]
        else:
            rows.append({**op, **{k: (value or {}).get(k) for k in ("phase", "fault", "started", "fault_window")}})
    main = pa.table({f.name: cols[f.name] for f in FLAT}).cast(FLAT)
    extra = pa.Table.from_pylist(rows, schema=FLAT)
    return pa.concat_tables([main, extra])


def scaled(table: pa.Table, times: int) -> pa.Table:
    """``times`` copies of the run one after the other: indexes and times shifted past the previous
    copy, message ids suffixed with the copy's number and producers renumbered (so that ids stay
    distinct and each copy's seqs do not run backwards after the previous one's)."""
    if times == 1:
        return table
    span_index = pc.max(table["index"]).as_py() + 1
    span_time = pc.max(table["time"]).as_py() + 1
    copies = []
    for k in range(times):
        c = table.set_column(table.schema.get_field_index("index"), "index", pc.add(table["index"], k * span_index))
        c = c.set_column(c.schema.get_field_index("time"), "time", pc.add(c["time"], k * span_time))
        c = c.set_column(c.schema.get_field_index("id"), "id", pc.binary_join_element_wise(c["id"], pa.scalar(f"~{k}"), ""))
        c = c.set_column(c.schema.get_field_index("producer"), "producer", pc.add(c["producer"], k * 1_000_000))
        copies.append(c)
    return pa.concat_tables(copies)


def _timed(fn, repeat: int):
    best, out = None, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        took = time.perf_counter() - t
        best = took if best is None else min(best, took)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("history", type=Path)
    ap.add_argument("--old", action="store_true", help="also time the frozen pandas implementation")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shuffle", action="store_true", help="rows in reverse order (the pass must sort them)")
    ap.add_argument("--scale", type=int, default=1, help="the history this many times over, one after the other")
    args = ap.parse_args()
    t = time.perf_counter()
    table = scaled(flat_table(args.history), args.scale)
    if args.shuffle:
        table = table.take(pa.array(range(table.num_rows - 1, -1, -1)))
    ops = int(pc.sum(pc.or_kleene(pc.is_null(table["pos"]), pc.equal(table["pos"], 0))).as_py())
    print(f"read {args.history}: {table.num_rows} rows, {ops} ops in {time.perf_counter() - t:.1f}s", flush=True)
    took, new = _timed(lambda: checks.facts_from_table(table), args.repeat)
    anomalies = sum(k == "anomaly" for k, _ in new)
    print(f"new facts_from_table: {took:.2f}s (best of {args.repeat}), {len(new)} records, {anomalies} anomalies", flush=True)
    if args.old:
        sys.path.insert(0, str(ROOT / "tests" / "reports"))
        import _fused_checks_pandas_reference as old  # pylint: disable=import-outside-toplevel
        df = table.to_pandas()
        took, ref = _timed(lambda: old.facts(df), 1)
        print(f"old pandas facts: {took:.2f}s", flush=True)
        same = _normalised(ref) == _normalised(new)
        print("same records:", same)


def _normalised(records):
    out = [(k, json.loads(json.dumps(p, default=checks._none))) for k, p in records]  # pylint: disable=protected-access
    anomalies = sorted((json.dumps(p, sort_keys=True) for k, p in out if k == "anomaly"))
    return [r for r in out if r[0] != "anomaly"], anomalies


if __name__ == "__main__":
    main()
