"""The per-run pass of the fused engine: every checker's facts from one run's flat rows.

Each function mirrors the Spark SQL checker of the same name (reports/pipeline/checkers/) and
keeps its definitions; read those docstrings for the rules and their sources. `facts_from_table`
returns records ``(kind, payload)``; engine.py turns them into CheckResults exactly as the SQL
checkers do (the parts that need the run record, a bound or the merge of several runs stay on the
driver).

The pass works on numpy arrays of integer codes (strings dictionary-encoded once): groupings are
``np.bincount`` over dense codes or a stable sort on one small integer key, never a per-row Python
loop; Python runs only over the anomalies, the nemesis rows and the (few) per-group summaries.
A pandas version of this pass (the first implementation) is kept as the tests' oracle in
tests/reports/_fused_checks_pandas_reference.py; both must return the same records.

Percentiles are exact (nearest rank); the SQL engine's ``percentile_approx(..., 1000)`` returns
the same element while a group has fewer than about a thousand values and stays within its 0.1 %
rank error above that.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NEMESIS = "nemesis"
_NOT_FAULTS = ("setup", "teardown")
_CLOSING_FS = ("close", "unsubscribe")
_REOPENING_FS = ("connect", "subscribe")
QUANTILES = (0.5, 0.9, 0.99, 0.999)
SECOND = 1_000_000_000

FAULT_WINDOW = pa.list_(pa.struct([("fault", pa.string()), ("f", pa.string()), ("start", pa.int64()), ("end", pa.int64())]))
#: the string columns read for every row (ids apart)
_CLIENT_TEXT = ("process", "type", "f", "node", "destination", "group")
_THREADS = max(1, min(4, os.cpu_count() or 1))


# ---------------------------------------------------------------------- columns as codes


class Text:
    """A string column as int32 codes (-1 for null) into ``values``."""

    def __init__(self, codes: np.ndarray, values: pa.Array) -> None:
        self.codes, self.values = codes, values
        self._code_of: dict | None = None

    @classmethod
    def encode(cls, col: pa.ChunkedArray) -> "Text":
        n = len(col)
        if pa.types.is_null(col.type) or col.null_count == n:
            return cls(np.full(n, -1, dtype=np.int32), pa.array([], pa.string()))
        if not pa.types.is_dictionary(col.type):
            # one dictionary shared by every chunk, its values distinct: the indices are the codes
            # (encoding the chunks as they are spares copying them together first)
            encoded = pc.dictionary_encode(col)
            if not encoded.num_chunks:
                return cls(np.zeros(0, dtype=np.int32), pa.array([], pa.string()))
            codes = np.concatenate([_indices(c.indices) for c in encoded.chunks])
            values = encoded.chunk(0).dictionary.cast(pa.string())
        else:
            codes, values = _unify(list(col.chunks))
        return cls(codes, values)

    def rank(self) -> np.ndarray:
        """Each code's place in sorted value order (pandas sorts its categoricals' values so), null
        (code -1, the last slot) after them all."""
        order = np.argsort(np.array(self.values.to_pylist(), dtype=object), kind="stable")
        rank = np.empty(self.n_values + 1, dtype=np.int64)
        rank[order] = np.arange(self.n_values)
        rank[-1] = self.n_values
        return rank

    def sorted_values(self) -> list[str]:
        return sorted(self.values.to_pylist())

    def take(self, order: np.ndarray | None) -> "Text":
        return self if order is None else Text(self.codes[order], self.values)

    @property
    def n_values(self) -> int:
        return len(self.values)

    def code(self, value: str) -> int:
        """The code of ``value``; -2 (matching no row) when the column never holds it."""
        if self._code_of is None:
            self._code_of = {v: i for i, v in enumerate(self.values.to_pylist())}
        return self._code_of.get(value, -2)

    def eq(self, value: str) -> np.ndarray:
        return self.codes == self.code(value)

    def isin(self, values) -> np.ndarray:
        lut = np.zeros(self.n_values + 1, dtype=bool)  # the last slot: null (code -1)
        for v in values:
            c = self.code(v)
            if c >= 0:
                lut[c] = True
        return lut[self.codes]

    def value(self, code) -> str | None:
        return None if code < 0 else self.values[int(code)].as_py()


def _indices(indices: pa.Array) -> np.ndarray:
    """Dictionary indices as int32 codes, -1 for null."""
    if indices.null_count:
        indices = pc.fill_null(indices, -1)
    return indices.to_numpy().astype(np.int32, copy=False)


def _unify(chunks: list) -> tuple[np.ndarray, pa.Array]:
    """Codes over dictionary chunks that may each carry their own dictionary (duplicates allowed):
    their values numbered once over all of them."""
    dictionaries = [c.dictionary.cast(pa.string()) for c in chunks]
    unified = pc.dictionary_encode(pa.concat_arrays(dictionaries))
    to_global = np.append(_indices(unified.indices), np.int32(-1))  # the last slot: a null index
    parts, offset = [], 0
    for c, d in zip(chunks, dictionaries):
        local = _indices(c.indices).astype(np.int64)
        parts.append(to_global[np.where(local < 0, -1, local + offset)])
        offset += len(d)
    return np.concatenate(parts).astype(np.int32, copy=False), unified.dictionary


def _ints(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with 0 for null, validity)."""
    n = len(col)
    if pa.types.is_null(col.type) or col.null_count == n:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not pa.types.is_integer(arr.type):  # pandas hands integer columns with nulls over as floats
        arr = pc.if_else(pc.is_valid(arr), arr.cast(pa.int64(), safe=False), pa.scalar(None, pa.int64()))
    elif arr.type != pa.int64():
        arr = arr.cast(pa.int64())
    if not arr.null_count:
        return arr.to_numpy(), np.ones(n, dtype=bool)
    # the buffers as they are (a copy through fill_null costs more than the read)
    bitmap, data = arr.buffers()[:2]
    values = np.frombuffer(data, dtype=np.int64, count=arr.offset + n)[arr.offset:]
    valid = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=arr.offset + n, bitorder="little")[arr.offset:]
    valid = valid.view(bool)
    return np.where(valid, values, 0), valid


def _small_uint(key: np.ndarray) -> np.ndarray:
    """``key`` (>= 0) in the narrowest unsigned type: numpy's stable sort is a radix sort up to 16 bits."""
    top = int(key.max()) if len(key) else 0
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return key.astype(t)
    return key.astype(np.int64)


def _dense(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Integers as codes 0..k-1 (their order kept) and k."""
    if not len(values):
        return values.astype(np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < 1 << 20:
        return values - lo, hi - lo + 1
    uniq, inv = np.unique(values, return_inverse=True)
    return inv, len(uniq)


class Rows:
    """One run's flat rows as numpy arrays, sorted by (index, pos) with a null pos first. The
    nemesis fields (phase, fault, started, fault_window) are read for the nemesis rows only."""

    def __init__(self, table: pa.Table) -> None:
        missing = [c for c in ("index", "time", "process", "type", "f", "pos", "id") if c not in table.column_names]
        if missing:
            raise ValueError(f"the flat rows lack the columns {', '.join(missing)}: build them with "
                             "reports/pipeline/fused/load.py (FLAT_COLUMNS)")
        self.table = table
        self.n = table.num_rows
        index, _ = _ints(self.column("index"))
        pos, has_pos = _ints(self.column("pos"))
        pos = np.where(has_pos, pos, -1)
        self.order = order = _order(index, pos)
        # Hashing the strings is most of the pass: Arrow's kernels and numpy's gathers release the
        # GIL, so the columns are read side by side (the ids, the longest, first).
        with ThreadPoolExecutor(_THREADS) as pool:
            texts = {name: pool.submit(lambda c: Text.encode(c).take(order), self.column(name))
                     for name in ("id", *_CLIENT_TEXT)}
            ints = {name: pool.submit(self._sorted_ints, name, order) for name in ("time", "producer", "seq", "consumer")}
            files = pool.submit(_files, table)
            self.index, self.pos, self.has_pos = _take(index, order), _take(pos, order), _take(has_pos, order)
            self.time = ints["time"].result()[0]
            self.producer, self.has_producer = ints["producer"].result()
            self.seq, self.has_seq = ints["seq"].result()
            self.consumer, self.has_consumer = ints["consumer"].result()
            self.files = files.result()
            self.process, self.type, self.f, self.node, self.destination, self.group, self.id = (
                texts[name].result() for name in (*_CLIENT_TEXT, "id"))

    def _sorted_ints(self, name: str, order: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        values, valid = _ints(self.column(name))
        return _take(values, order), _take(valid, order)

    def column(self, name: str) -> pa.ChunkedArray:
        if name in self.table.column_names:
            return self.table.column(name)
        return pa.chunked_array([pa.nulls(self.n)])

    def original(self, rows: np.ndarray) -> np.ndarray:
        """Positions in the input table of the sorted ``rows``."""
        return rows if self.order is None else self.order[rows]

    def values_at(self, name: str, rows: np.ndarray) -> list:
        """Column ``name`` at the sorted ``rows`` (few) as Python values."""
        if not len(rows):
            return []
        return self.column(name).take(pa.array(self.original(rows))).to_pylist()


def _take(a: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return a if order is None else a[order]


def _order(index: np.ndarray, pos: np.ndarray) -> np.ndarray | None:
    """The permutation sorting the rows by (index, pos) stably; None when they already are."""
    step = np.diff(index)
    if (step >= 0).all() and (np.diff(pos)[step == 0] >= 0).all():
        return None
    lo, width = int(index.min()), int(pos.max()) + 2
    if (int(index.max()) - lo + 1) * width < 1 << 62:
        # one integer key: a stable sort on it is adaptive to the runs a nearly sorted input has
        return np.argsort((index - lo) * width + (pos + 1), kind="stable")
    return np.lexsort((pos, index))


# ---------------------------------------------------------------------- the pass


def facts_from_table(table: pa.Table) -> list[tuple[str, object]]:
    """Every checker's facts from one run's flat rows (FLAT_COLUMNS of fused/load.py, any order;
    string columns plain or dictionary-encoded)."""
    r = Rows(table)
    is_op = ~r.has_pos | (r.pos == 0)
    if not is_op.any():
        raise ValueError("a run without any operation row: the flat table must hold one row per op "
                         "(reports/pipeline/fused/load.py)")
    out: list[tuple[str, object]] = []
    op_time = r.time[is_op]
    out.append(("span", {"t0": int(op_time.min()), "t1": int(op_time.max()), "n": int(is_op.sum()),
                         "drained": bool((is_op & r.f.eq("drain") & r.type.eq("ok")).any()),
                         "files": r.files}))
    is_nemesis = r.process.eq(NEMESIS)
    nem = nemesis_rows(r, np.flatnonzero(is_op & is_nemesis))
    out.append(("nemesis", nem))
    client = ~is_nemesis
    msgs = client & r.has_pos
    topic_lut = np.array([str(v).startswith("topic://") for v in r.destination.values.to_pylist()] + [False], dtype=bool)
    topic = topic_lut[r.destination.codes]
    out.append(("topic", bool((msgs & topic).any() or (client & r.f.eq("subscribe")).any())))
    queue = msgs & ~topic
    delivered = queue & r.f.isin(("receive", "drain")) & r.type.eq("ok")
    # the checkers share nothing but the read-only arrays; numpy releases the GIL in its loops
    with ThreadPoolExecutor(_THREADS) as pool:
        parts = [pool.submit(total_queue, r, queue, delivered), pool.submit(fifo, r, queue, delivered),
                 pool.submit(groups, r, delivered, is_op, nem),
                 pool.submit(_done, r, is_op & client, int(op_time.max()), nem)]
        for part in parts:
            out += part.result()
    return out


def _done(r: Rows, client_ops: np.ndarray, t1: int, nem: list[dict]) -> list:
    return [("done", _completed_summary(completed(r, client_ops), t1, nem))]


def _files(table: pa.Table) -> list[str]:
    if "file" not in table.column_names or pa.types.is_null(table.column("file").type):
        return []
    return sorted(str(f) for f in pc.unique(table.column("file")).to_pylist() if f is not None)


def nemesis_rows(r: Rows, rows: np.ndarray) -> list[dict]:
    fields = {name: r.values_at(name, rows) for name in ("phase", "fault", "started", "fault_window")}
    return [{"index": int(r.index[i]), "time": int(r.time[i]), "f": r.f.value(r.f.codes[i]),
             "phase": phase, "fault": fault, "started": None if started is None else int(started),
             "fault_window": None if w is None else [dict(x) for x in w]}
            for i, phase, fault, started, w in zip(rows, fields["phase"], fields["fault"], fields["started"],
                                                   fields["fault_window"])]


# ---------------------------------------------------------------------- total queue

_TQ_DETAIL = {"lost": "confirmed send never received", "unexpected": "received but never sent",
              "recovered": "send outcome unknown (info), yet it arrived"}


def total_queue(r: Rows, queue: np.ndarray, delivered: np.ndarray) -> list:
    send = queue & r.f.eq("send")
    rel = np.flatnonzero(send | delivered)
    if not len(rel):
        return [("tq_totals", None)]
    # one bin per id code, bin 0 for every null id (pandas' dropna=False group)
    key = r.id.codes[rel] + 1
    bins = r.id.n_values + 1
    s, ty = send[rel], r.type.codes[rel]

    def count(where):
        return np.bincount(key[where], minlength=bins)

    deq = count(~s)
    sends = count(s)
    present = (sends > 0) | (deq > 0)
    att = np.maximum(count(s & (ty == r.type.code("invoke"))) - count(s & (ty == r.type.code("fail"))), 0)
    enq = (count(s & (ty == r.type.code("ok"))) > 0).astype(np.int64)
    totals = {"attempted": int(att[present].sum()), "enqueued": int(enq[present].sum()), "dequeued": int(deq[present].sum())}
    out: list = [("tq_totals", totals)]
    lost = present & (enq == 1) & (deq == 0)
    unexpected = present & ~lost & (deq > 0) & (att == 0)
    duplicated = present & ~lost & ~unexpected & (att > 0) & (deq > att)
    recovered = present & ~lost & ~unexpected & ~duplicated & (deq > 0) & (att > 0) & (enq == 0)
    flagged = [(k, b) for k, mask in (("lost", lost), ("unexpected", unexpected), ("duplicated", duplicated),
                                      ("recovered", recovered)) for b in np.flatnonzero(mask)]
    # a duplicate whose send was never confirmed is also a recovered one
    flagged += [("recovered", b) for b in np.flatnonzero(duplicated & (enq == 0))]
    if not flagged:
        return out
    ops_of = _ops_by_id(r, queue, [b - 1 for _, b in flagged if b > 0])
    for kind, b in flagged:
        detail = _TQ_DETAIL.get(kind) or f"received {int(deq[b])} times, sent {int(att[b])}"
        out.append(("anomaly", {"checker": "total_queue", "kind": kind, "message_id": r.id.value(b - 1),
                                "ops": ops_of.get(b - 1, []), "detail": detail}))
    return out


def _ops_by_id(r: Rows, rows: np.ndarray, codes: list[int]) -> dict[int, list[int]]:
    """The sorted op indexes of the ``rows`` that carry each id code of ``codes``."""
    lut = np.zeros(r.id.n_values + 1, dtype=bool)
    lut[np.array(codes, dtype=np.int64)] = True
    hit = np.flatnonzero(rows & lut[r.id.codes])
    out: dict[int, list[int]] = {}
    for c, i in sorted(zip(r.id.codes[hit].tolist(), r.index[hit].tolist())):
        out.setdefault(c, []).append(i)
    return out


# ---------------------------------------------------------------------- order


def first_deliveries(r: Rows, rows: np.ndarray) -> np.ndarray:
    """Of ``rows`` (positions in (index, pos) order), each id's first; one row for all null ids,
    like Spark's window partition over a null key. Arrow numbers values in order of first
    appearance, so a row is an id's first exactly where its number exceeds all the earlier ones."""
    if not len(rows):
        return rows
    seen = pc.dictionary_encode(pa.array(r.id.codes[rows])).indices.to_numpy().astype(np.int64)
    before = np.maximum.accumulate(np.concatenate([[-1], seen[:-1]]))
    return rows[seen > before]


def order_inversions(r: Rows, first: np.ndarray, keys: list[Text], checker: str, label) -> list:
    """Per (keys, producer) in delivery order: each row whose seq is below an earlier one's, with
    the row holding the running maximum (the latest whose seq equals it)."""
    rows = first[r.has_producer[first] & r.has_seq[first]]
    if not len(rows):
        return []
    key = np.zeros(len(rows), dtype=np.int64)
    for t in keys:  # a null key value (code -1) is a group of its own, as pandas' dropna=False
        key = key * (t.n_values + 1) + (t.codes[rows].astype(np.int64) + 1)
    producer, n_producers = _dense(r.producer[rows])
    key = key * n_producers + producer
    key, _ = _dense(key)
    by = np.argsort(_small_uint(key), kind="stable")
    rows, key = rows[by], key[by]
    seq = r.seq[rows]
    start = np.ones(len(rows), dtype=bool)
    start[1:] = key[1:] != key[:-1]
    running = _segment_running_max(seq, start)
    late = np.flatnonzero(seq < running)
    if not len(late):
        return []
    # the row holding the running maximum: the latest one whose seq equals it (a segment's first
    # row always does, so the accumulation never reaches into the previous segment)
    holder = np.maximum.accumulate(np.where(seq == running, np.arange(len(rows)), -1))
    out = []
    for i in late:
        a, b = rows[i], rows[holder[i]]
        bid = r.id.value(r.id.codes[b])
        text = label(a)
        detail = None if bid is None or text is None else (
            f"{text}: seq {int(r.seq[a])} of producer {int(r.producer[a])} arrived after seq {int(r.seq[b])} ({bid})")
        out.append(("anomaly", {"checker": checker, "kind": "reordered", "message_id": r.id.value(r.id.codes[a]),
                                "ops": [int(r.index[b]), int(r.index[a])], "detail": detail}))
    return out


def _segment_running_max(values: np.ndarray, start: np.ndarray) -> np.ndarray:
    """np.maximum.accumulate restarted at each ``start``: each segment is lifted above the
    previous ones by a multiple of the value range, so one accumulation serves all."""
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    segment = np.cumsum(start) - 1
    if int(segment[-1]) * span < 1 << 62:
        lift = segment * span
        return np.maximum.accumulate(values - lo + lift) - lift + lo
    out = np.empty_like(values)  # a range too wide to lift: one accumulation per segment
    bounds = [*np.flatnonzero(start), len(values)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


# ---------------------------------------------------------------------- FIFO


def fifo(r: Rows, queue: np.ndarray, delivered: np.ndarray) -> list:
    m = queue & (r.destination.codes >= 0)
    rows = np.flatnonzero(m)
    if not len(rows):
        return [("fifo_scope", {})]
    n_dest = r.destination.n_values
    dest = r.destination.codes[rows].astype(np.int64)
    nodes = _distinct_per(dest, n_dest, r.node.codes[rows].astype(np.int64) + 1, r.node.n_values + 1,
                          r.node.codes[rows] >= 0)
    # the consumer of a receive: its number, else "process N" (a value of another kind)
    receive_ok = r.f.eq("receive")[rows] & r.type.eq("ok")[rows]
    has_consumer = r.has_consumer[rows]
    number, n_numbers = _dense(np.where(has_consumer, r.consumer[rows], 0))
    consumer = np.where(has_consumer, number, n_numbers + r.process.codes[rows].astype(np.int64) + 1)
    consumers = _distinct_per(dest, n_dest, consumer, n_numbers + r.process.n_values + 1, receive_ok)
    deliveries = np.bincount(dest[delivered[rows]], minlength=n_dest)
    scope: dict[str, str] = {}
    for d in _in_order_of_appearance(dest):
        if nodes[d] > 1:
            reason = f"{nodes[d]} nodes: a network of brokers does not keep total order"
        elif consumers[d] > 1:
            reason = f"{consumers[d]} consumers compete for the queue: order is promised to a single consumer"
        elif deliveries[d] == 0:
            reason = "nothing was received"
        else:
            reason = ""
        scope[r.destination.value(d)] = reason
    out: list = [("fifo_scope", scope)]
    eligible = np.zeros(n_dest + 1, dtype=bool)
    for d in _in_order_of_appearance(dest):
        eligible[d] = scope[r.destination.value(d)] == ""
    if eligible.any():
        first = first_deliveries(r, np.flatnonzero(m & delivered & eligible[r.destination.codes]))
        out += order_inversions(r, first, [r.destination], "fifo", lambda a: r.destination.value(r.destination.codes[a]))
    return out


def _distinct_per(group: np.ndarray, n_groups: int, value: np.ndarray, n_values: int, where: np.ndarray) -> np.ndarray:
    """How many distinct ``value`` (0..n_values-1) each group has among the rows ``where``."""
    seen = np.bincount(group[where] * n_values + value[where], minlength=n_groups * n_values) > 0
    return seen.reshape(n_groups, n_values).sum(axis=1)


def _in_order_of_appearance(codes: np.ndarray) -> list[int]:
    return pc.unique(pa.array(codes)).to_pylist()  # Arrow keeps the order of first appearance


# ---------------------------------------------------------------------- groups


def groups(r: Rows, delivered: np.ndarray, is_op: np.ndarray, nem: list[dict]) -> list:
    gm = delivered & (r.group.codes >= 0)
    rows = np.flatnonzero(gm)
    if not len(rows):
        return [("groups_sizes", {"groups": 0, "n": 0, "handovers": 0})]
    # consecutive deliveries of one (destination, group), a null destination sorted last
    n_dest = r.destination.n_values
    dest = r.destination.codes[rows].astype(np.int64)
    key = np.where(dest < 0, n_dest, dest) * r.group.n_values + r.group.codes[rows]
    by = np.argsort(_small_uint(key), kind="stable")
    g, key = rows[by], key[by]
    same = np.zeros(len(g), dtype=bool)
    same[1:] = key[1:] == key[:-1]
    proc = r.process.codes[g]
    prev_proc = np.concatenate([[-1], proc[:-1]])
    changed = same & (prev_proc >= 0) & (proc != prev_proc)
    named_keys = key[r.destination.codes[g] >= 0]
    sizes = {"groups": int((np.bincount(named_keys) > 0).sum()), "n": int(len(g)), "handovers": int(changed.sum())}
    out: list = [("groups_sizes", sizes)]
    at = np.flatnonzero(changed)
    if len(at):
        out += _stolen(r, g[at], g[at - 1], is_op, nem)
    first = first_deliveries(r, rows)

    def label(a):
        d = r.destination.codes[a]
        return None if d < 0 else f"{r.destination.value(d)} group {r.group.value(r.group.codes[a])}"

    out += order_inversions(r, first, [r.destination, r.group], "groups", label)
    return out


def _stolen(r: Rows, cur: np.ndarray, prev: np.ndarray, is_op: np.ndarray, nem: list[dict]) -> list:
    """Handovers (delivery ``prev`` then ``cur`` to another process) that nothing explains: no
    fault, rebalance or drain by anyone, no close/reconnect/in-doubt op by the previous owner."""
    client = is_op & ~r.process.eq(NEMESIS)
    own = client & ((r.f.isin(_REOPENING_FS) & r.type.eq("invoke")) | r.f.isin(_CLOSING_FS) | r.type.eq("info"))
    everyone = is_op & (r.f.eq("rebalance") | (r.f.eq("drain") & r.type.eq("invoke")))
    faults = [n["index"] for n in nem if n["f"] not in _NOT_FAULTS and n["phase"] == "start"]
    e = np.sort(np.concatenate([r.index[everyone], np.array(faults, dtype=np.int64)]))
    lo, hi = r.index[prev], r.index[cur]
    covered = np.searchsorted(e, lo, "right") < np.searchsorted(e, hi, "left")
    # the previous owner's own ops, keyed (process, index) in one sorted integer
    base = int(r.index.min())
    width = int(r.index.max()) - base + 2
    own_key = np.sort(r.process.codes[own].astype(np.int64) * width + (r.index[own] - base))
    owner = r.process.codes[prev].astype(np.int64) * width
    released = np.searchsorted(own_key, owner + lo - base, "right") < np.searchsorted(own_key, owner + hi - base, "left")
    out = []
    for a, b in zip(cur[~covered & ~released], prev[~covered & ~released]):
        d = r.destination.codes[a]
        detail = None if d < 0 else (
            f"{r.destination.value(d)} group {r.group.value(r.group.codes[a])}: delivered to process "
            f"{r.process.value(r.process.codes[a])} while process {r.process.value(r.process.codes[b])} still owned it "
            f"(no close, fault or rebalance since op {int(r.index[b])})")
        out.append(("anomaly", {"checker": "groups", "kind": "stolen", "message_id": r.id.value(r.id.codes[a]),
                                "ops": [int(r.index[b]), int(r.index[a])], "detail": detail}))
    return out


# ---------------------------------------------------------------------- completed ops: downtime, latency, throughput


class Done:
    """Each completed client op with its invoke (the process's previous line; chaos/history.py),
    ordered by (process, index)."""

    def __init__(self, r: Rows, client_ops: np.ndarray) -> None:
        rows = np.flatnonzero(client_ops)
        proc = r.process.codes[rows].astype(np.int64)
        by = np.argsort(_small_uint(r.process.rank()[proc]), kind="stable")
        c = rows[by]
        proc, ty, f = r.process.codes[c], r.type.codes[c], r.f.codes[c]
        invoke = r.type.code("invoke")
        keep = np.zeros(len(c), dtype=bool)
        keep[1:] = ((proc[1:] == proc[:-1]) & (proc[1:] >= 0) & (ty[1:] != invoke) & (ty[:-1] == invoke)
                    & (f[1:] == f[:-1]) & (f[1:] >= 0))
        at = np.flatnonzero(keep)
        done, inv = c[at], c[at - 1]
        self.r = r
        self.process, self.f, self.type = proc[at], f[at], ty[at]
        self.index, self.time = r.index[done], r.time[done]
        self.invoke_index, self.invoke_time = r.index[inv], r.time[inv]
        self.latency = self.time - self.invoke_time

    def __len__(self) -> int:
        return len(self.index)


def completed(r: Rows, client_ops: np.ndarray) -> Done:
    return Done(r, client_ops)


def _completed_summary(done: Done, t1: int, nem: list[dict]) -> dict:
    """Everything downtime, latency and throughput need from the completed ops, given the run's
    merged fault intervals (common.disturbances over common.fault_windows_of_steps, as the SQL
    engine reads them)."""
    from reports.pipeline.checkers.common import disturbances, fault_windows_of_steps

    merged = disturbances(fault_windows_of_steps(("", ""), nem, t1))
    fr, to, in_place = (np.array([m[k] for m in merged], dtype=np.int64) for k in range(3))
    return {"downtime": downtime_rows(done, fr, to, in_place), "latency": latency_rows(done, fr, to),
            "throughput": throughput_rows(done, fr, to)}


def _inside(t: np.ndarray, fr: np.ndarray, to: np.ndarray) -> np.ndarray:
    """True where t lies in a merged interval [fr, to) (intervals sorted, disjoint)."""
    if not len(fr):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(fr, t, "right") - 1
    return (k >= 0) & (t < to[np.maximum(k, 0)])


def _slices(key: np.ndarray, n_keys: int):
    """(key, positions) for each key present, positions in their original order."""
    by = np.argsort(_small_uint(key), kind="stable")
    counts = np.bincount(key, minlength=n_keys)
    ends = np.cumsum(counts)
    for k in np.flatnonzero(counts):
        yield int(k), by[ends[k] - counts[k]:ends[k]]


def downtime_rows(done: Done, fr: np.ndarray, to: np.ndarray, in_place: np.ndarray) -> list[dict]:
    """Per (disturbance, process): its first ok op invoked after the fault was in place
    (reports/pipeline/checkers/downtime.py)."""
    if not len(fr) or not len(done):
        return []
    epoch = np.searchsorted(fr, done.invoke_time, "right")
    sel = np.flatnonzero(epoch > 0)
    if not len(sel):
        return []
    # groups (epoch, process) in order of first appearance, as pandas' groupby(sort=False)
    n_proc = done.r.process.n_values + 1
    key = epoch[sel].astype(np.int64) * n_proc + (done.process[sel].astype(np.int64) + 1)
    key, n_keys = _dense(key)
    groups_ = sorted(_slices(key, n_keys), key=lambda kv: kv[1][0])
    ok_code, info_code = done.r.type.code("ok"), done.r.type.code("info")
    rows = []
    for _, part in groups_:
        g = sel[part]
        e = int(epoch[g[0]])
        if done.invoke_time[g].min() >= to[e - 1]:
            continue
        ok = g[(done.type[g] == ok_code) & (done.invoke_time[g] > in_place[e - 1])]
        if len(ok):
            best = ok[np.argmin(done.time[ok])]
            first_ok_time, first_ok_index = int(done.time[best]), int(done.index[best])
        else:
            first_ok_time = first_ok_index = None
        start = int(fr[e - 1])
        rows.append({"process": str(done.r.process.value(done.process[g[0]])), "fault_start": start,
                     "next_fault_start": int(fr[e]) if e < len(fr) else None,
                     "downtime": None if first_ok_time is None else first_ok_time - start,
                     "first_ok_index": first_ok_index, "ops": int(len(g)),
                     "retired": bool((done.type[g] == info_code).any())})
    return rows


def _nearest_rank(values: np.ndarray, q: float) -> int:
    return int(values[max(0, min(len(values) - 1, math.ceil(q * len(values)) - 1))])


def latency_rows(done: Done, fr: np.ndarray, to: np.ndarray) -> list[dict]:
    if not len(done):
        return []
    fault = _inside(done.invoke_time, fr, to)
    has_f = np.flatnonzero(done.f >= 0)  # pandas' groupby drops a null key
    # (f in value order, then "fault" before "normal")
    names = done.r.f.sorted_values()
    key = done.r.f.rank()[done.f[has_f]] * 2 + ~fault[has_f]
    ok_code, fail_code, info_code = (done.r.type.code(t) for t in ("ok", "fail", "info"))
    rows = []
    for k, part in _slices(key, 2 * done.r.f.n_values):
        g = has_f[part]
        ty = done.type[g]
        ok = np.sort(done.latency[g[ty == ok_code]])
        rows.append({"f": names[k // 2], "phase": "fault" if k % 2 == 0 else "normal", "ok": int(len(ok)),
                     "fail": int((ty == fail_code).sum()), "info": int((ty == info_code).sum()),
                     "max": int(ok[-1]) if len(ok) else None, "mean": float(ok.mean()) if len(ok) else None,
                     "quantiles": [_nearest_rank(ok, q) for q in QUANTILES] if len(ok) else None})
    return rows


def throughput_rows(done: Done, fr: np.ndarray, to: np.ndarray) -> dict:
    ok = np.flatnonzero((done.type == done.r.type.code("ok")) & (done.f >= 0))
    if not len(ok):
        return {"seconds": [], "phases": []}
    t = done.time[ok]
    f = done.r.f.rank()[done.f[ok]]
    second = np.floor_divide(t, SECOND)
    s0 = int(second.min())
    n_seconds = int(second.max()) - s0 + 1
    per, counts = np.unique(f * n_seconds + (second - s0), return_counts=True)
    per_f, per_second = per // n_seconds, per % n_seconds + s0
    lo, hi = per_second * SECOND, (per_second + 1) * SECOND
    if len(fr):
        # some merged interval overlaps [lo, hi): the first one ending after lo starts before hi
        k = np.searchsorted(to, lo, "right")
        fault = (k < len(fr)) & (fr[np.minimum(k, len(fr) - 1)] < hi)
    else:
        fault = np.zeros(len(per), dtype=bool)
    names = done.r.f.sorted_values()
    seconds = [{"f": names[a], "second": int(s), "ok": int(n), "fault": bool(x)}
               for a, s, n, x in zip(per_f.tolist(), per_second.tolist(), counts.tolist(), fault.tolist())]
    phase_key = f * 2 + ~_inside(t, fr, to)
    keys, n = np.unique(phase_key, return_counts=True)
    phases = [{"f": names[k // 2], "phase": "fault" if k % 2 == 0 else "normal", "count": int(c)}
              for k, c in zip(keys.tolist(), n.tolist())]
    return {"seconds": seconds, "phases": phases}
