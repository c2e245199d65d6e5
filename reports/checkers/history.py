"""A run's history in columnar form, and what every checker derives from it once.

Every checker in this package is a pure function of `Columns`: one run's flat rows (one row per
message an operation carries, ``pos`` its place in a drain's list; one row with ``pos`` null for an
operation without messages; the nemesis fields beside them; FLAT_SCHEMA) as numpy arrays of
integer codes. The same columns come from a list of history events (`Columns.of_events`, what
`brokerconf chaos run` judges with), from the JSON lines loaders or from Parquet
(reports/pipeline/fused/load.py, inside a Spark task): one code path from history to verdict.

Derived here once, for every checker: the fault windows of the nemesis steps (`fault_windows`),
their merged intervals (`disturbances`), and each completed client operation with its invoke
(`Done`). Groupings are ``np.bincount`` over dense codes or a stable sort on one small integer
key, never a per-row Python loop; Python runs only over anomalies and nemesis rows.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NEMESIS = "nemesis"
UNKNOWN_TARGET = "unknown"
#: nemesis steps that prepare or clean up rather than inject a fault
NOT_FAULTS = ("setup", "teardown")
SECOND = 1_000_000_000
MS = 1_000_000

_MESSAGE_FIELDS = (("id", pa.string()), ("producer", pa.int64()), ("seq", pa.int64()), ("destination", pa.string()),
                   ("group", pa.string()), ("consumer", pa.int64()), ("subscriber", pa.int64()),
                   ("redelivered", pa.bool_()))
MESSAGE_TYPE = pa.struct(list(_MESSAGE_FIELDS))
FAULT_WINDOW_TYPE = pa.list_(pa.struct([("fault", pa.string()), ("f", pa.string()), ("start", pa.int64()),
                                        ("end", pa.int64())]))
NEMESIS_FIELDS = (("phase", pa.string()), ("fault", pa.string()), ("started", pa.int64()),
                  ("fault_window", FAULT_WINDOW_TYPE))
_DICT = pa.dictionary(pa.int32(), pa.string())

#: the flat table; few-valued text columns are dictionary-encoded (small integer codes for the
#: checkers, and Parquet stores them as such)
FLAT_SCHEMA = pa.schema([
    ("run", _DICT), ("target", _DICT), ("node", _DICT), ("file", _DICT), ("index", pa.int64()), ("time", pa.int64()),
    ("process", _DICT), ("type", _DICT), ("f", _DICT), ("error", pa.string()), ("pos", pa.int64()),
    ("id", pa.string()), ("producer", pa.int64()), ("seq", pa.int64()), ("destination", _DICT), ("group", _DICT),
    ("consumer", pa.int64()), ("subscriber", pa.int64()), ("redelivered", pa.bool_()),
    *NEMESIS_FIELDS,
])
FLAT_COLUMNS = tuple(FLAT_SCHEMA.names)
PLAIN_SCHEMA = pa.schema([pa.field(f.name, pa.string()) if f.type == _DICT else f for f in FLAT_SCHEMA])

#: the string columns read for every row (ids apart)
_CLIENT_TEXT = ("process", "type", "f", "node", "destination", "group")
THREADS = max(1, min(4, os.cpu_count() or 1))


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


def small_uint(key: np.ndarray) -> np.ndarray:
    """``key`` (>= 0) in the narrowest unsigned type: numpy's stable sort is a radix sort up to 16 bits."""
    top = int(key.max()) if len(key) else 0
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return key.astype(t)
    return key.astype(np.int64)


def dense(values: np.ndarray) -> tuple[np.ndarray, int]:
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
        with ThreadPoolExecutor(THREADS) as pool:
            texts = {name: pool.submit(lambda c: Text.encode(c).take(order), self.column(name))
                     for name in ("id", *_CLIENT_TEXT)}
            ints = {name: pool.submit(self._sorted_ints, name, order)
                    for name in ("time", "producer", "seq", "consumer", "subscriber")}
            files = pool.submit(_files, table)
            self.index, self.pos, self.has_pos = _take(index, order), _take(pos, order), _take(has_pos, order)
            self.time = ints["time"].result()[0]
            self.producer, self.has_producer = ints["producer"].result()
            self.seq, self.has_seq = ints["seq"].result()
            self.consumer, self.has_consumer = ints["consumer"].result()
            self.subscriber, self.has_subscriber = ints["subscriber"].result()
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


class Columns(Rows):
    """One run's history in columnar form, with what several checkers share, derived once."""

    def __init__(self, table: pa.Table, bounds: tuple[int, int] | None = None) -> None:
        """``bounds``: the run's first and last operation times when ``table`` is one part of a
        run split by a checker's key (reports/checkers/split.py): a fault never healed lasts until
        the run's end, not the part's."""
        super().__init__(table)
        self.is_op = ~self.has_pos | (self.pos == 0)  # an operation's first (or only) row
        if not self.is_op.any():
            raise ValueError("a run without any operation row: the flat table must hold one row per op "
                             "(reports/checkers/history.py, FLAT_SCHEMA)")
        self.is_nemesis = self.process.eq(NEMESIS)
        self.client = ~self.is_nemesis
        self.msgs = self.client & self.has_pos
        topic_lut = np.array([str(v).startswith("topic://") for v in self.destination.values.to_pylist()] + [False],
                             dtype=bool)
        self.topic = topic_lut[self.destination.codes]
        #: messages on queues (topics fan out: one send, a delivery per subscriber)
        self.queue = self.msgs & ~self.topic
        #: queue messages a client got: ``receive`` and ``drain`` ops that completed ``ok``
        self.delivered = self.queue & self.f.isin(("receive", "drain")) & self.type.eq("ok")
        op_time = self.time[self.is_op]
        self.t0, self.t1, self.n_ops = int(op_time.min()), int(op_time.max()), int(self.is_op.sum())
        if bounds is not None:
            self.t0, self.t1 = (int(b) for b in bounds)
        self.drained = bool((self.is_op & self.f.eq("drain") & self.type.eq("ok")).any())
        self.has_topic = bool((self.msgs & self.topic).any() or (self.client & self.f.eq("subscribe")).any())
        self.nemesis = nemesis_rows(self, np.flatnonzero(self.is_op & self.is_nemesis))
        #: the faults (`fault_windows`) and their merged intervals (`disturbances`) as arrays
        self.windows = fault_windows(self.nemesis, self.t1)
        merged = disturbances(self.windows)
        self.fault_from, self.fault_to, self.fault_in_place = (
            np.array([m[k] for m in merged], dtype=np.int64) for k in range(3))
        self._done: Done | None = None

    @classmethod
    def of_events(cls, events: Iterable[dict], file: str = "") -> "Columns":
        return cls(flat_table(events, file))

    @property
    def done(self) -> "Done":
        """Each completed client operation with its invoke (computed on first use)."""
        if self._done is None:
            self._done = Done(self, self.is_op & self.client)
        return self._done


def _files(table: pa.Table) -> list[str]:
    if "file" not in table.column_names or pa.types.is_null(table.column("file").type):
        return []
    return sorted(str(f) for f in pc.unique(table.column("file")).to_pylist() if f is not None)


def nemesis_rows(r: Rows, rows: np.ndarray) -> list[dict]:
    """The nemesis steps at ``rows`` as dicts (what `fault_windows` reads)."""
    fields = {name: r.values_at(name, rows) for name in ("phase", "fault", "started", "fault_window", "error")}
    return [{"index": int(r.index[i]), "time": int(r.time[i]), "f": r.f.value(r.f.codes[i]),
             "node": r.node.value(r.node.codes[i]), "phase": phase, "fault": fault,
             "started": None if started is None else int(started),
             "fault_window": None if w is None else [dict(x) for x in w], "error": error}
            for i, phase, fault, started, w, error in zip(rows, fields["phase"], fields["fault"], fields["started"],
                                                          fields["fault_window"], fields["error"])]


def ops_by_id(r: Rows, rows: np.ndarray, codes: list[int]) -> dict[int, list[int]]:
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
    """Of ``rows`` (positions in (index, pos) order), each id's first; a row without an id is
    none: nothing tells its first delivery from a redelivery. (Once one row stood for all null
    ids, as a Spark window over a null key: which one depended on the rows of every producer or
    group, so a run split by producer or group (split.py) kept one per part, and judged them.)
    Arrow numbers values in order of first appearance, so a row is an id's first exactly where
    its number exceeds all the earlier ones."""
    rows = rows[r.id.codes[rows] >= 0]
    if not len(rows):
        return rows
    seen = pc.dictionary_encode(pa.array(r.id.codes[rows])).indices.to_numpy().astype(np.int64)
    before = np.maximum.accumulate(np.concatenate([[-1], seen[:-1]]))
    return rows[seen > before]


def order_inversions(r: Rows, first: np.ndarray, keys: list[Text], label) -> list[dict]:
    """Per (keys, producer) in delivery order: each row whose seq is below an earlier one's, with
    the row holding the running maximum (the latest whose seq equals it)."""
    rows = first[r.has_producer[first] & r.has_seq[first]]
    if not len(rows):
        return []
    key = np.zeros(len(rows), dtype=np.int64)
    for t in keys:  # a null key value (code -1) is a group of its own, as pandas' dropna=False
        key = key * (t.n_values + 1) + (t.codes[rows].astype(np.int64) + 1)
    producer, n_producers = dense(r.producer[rows])
    key = key * n_producers + producer
    key, _ = dense(key)
    by = np.argsort(small_uint(key), kind="stable")
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
        out.append({"kind": "reordered", "message_id": r.id.value(r.id.codes[a]),
                    "ops": [int(r.index[b]), int(r.index[a])], "detail": detail,
                    "destination": r.destination.value(r.destination.codes[a])})
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


def distinct_per(group: np.ndarray, n_groups: int, value: np.ndarray, n_values: int, where: np.ndarray) -> np.ndarray:
    """How many distinct ``value`` (0..n_values-1) each group has among the rows ``where``."""
    seen = np.bincount(group[where] * n_values + value[where], minlength=n_groups * n_values) > 0
    return seen.reshape(n_groups, n_values).sum(axis=1)


def in_order_of_appearance(codes: np.ndarray) -> list[int]:
    return pc.unique(pa.array(codes)).to_pylist()  # Arrow keeps the order of first appearance


# ---------------------------------------------------------------------- completed ops: downtime, latency, throughput


class Done:
    """Each completed client op with its invoke (the process's previous line; chaos/history.py),
    ordered by (process, index)."""

    def __init__(self, r: Rows, client_ops: np.ndarray) -> None:
        rows = np.flatnonzero(client_ops)
        proc = r.process.codes[rows].astype(np.int64)
        by = np.argsort(small_uint(r.process.rank()[proc]), kind="stable")
        c = rows[by]
        proc, ty, f = r.process.codes[c], r.type.codes[c], r.f.codes[c]
        invoke = r.type.code("invoke")
        keep = np.zeros(len(c), dtype=bool)
        keep[1:] = ((proc[1:] == proc[:-1]) & (proc[1:] >= 0) & (ty[1:] != invoke) & (ty[:-1] == invoke)
                    & (f[1:] == f[:-1]) & (f[1:] >= 0))
        at = np.flatnonzero(keep)
        done, inv = c[at], c[at - 1]
        self.r = r
        self.rows = done  # the completions' positions in the run's rows
        self.process, self.f, self.type = proc[at], f[at], ty[at]
        self.index, self.time = r.index[done], r.time[done]
        self.invoke_index, self.invoke_time = r.index[inv], r.time[inv]
        self.latency = self.time - self.invoke_time

    def __len__(self) -> int:
        return len(self.index)


def open_ops(r: Rows, client_ops: np.ndarray) -> np.ndarray:
    """The rows of client operations still open when the history ended: a process's last op row
    is an invoke (a process runs one operation at a time, chaos/history.py)."""
    rows = np.flatnonzero(client_ops)
    if not len(rows):
        return rows
    proc = r.process.codes[rows]
    by = np.argsort(small_uint(proc.astype(np.int64) + 1), kind="stable")
    rows, proc = rows[by], proc[by]
    last = np.ones(len(rows), dtype=bool)
    last[:-1] = proc[1:] != proc[:-1]
    rows = rows[last]
    return rows[r.type.codes[rows] == r.type.code("invoke")]


def inside(t: np.ndarray, fr: np.ndarray, to: np.ndarray) -> np.ndarray:
    """True where t lies in a merged interval [fr, to) (intervals sorted, disjoint)."""
    if not len(fr):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(fr, t, "right") - 1
    return (k >= 0) & (t < to[np.maximum(k, 0)])


def slices(key: np.ndarray, n_keys: int):
    """(key, positions) for each key present, positions in their original order."""
    by = np.argsort(small_uint(key), kind="stable")
    counts = np.bincount(key, minlength=n_keys)
    ends = np.cumsum(counts)
    for k in np.flatnonzero(counts):
        yield int(k), by[ends[k] - counts[k]:ends[k]]


def nearest_rank(values: np.ndarray, q: float) -> int:
    return int(values[max(0, min(len(values) - 1, math.ceil(q * len(values)) - 1))])


# ---------------------------------------------------------------------- fault windows

@dataclass(frozen=True)
class FaultWindow:
    fault: str  # the nemesis's own key (down, paused, proxy/disabled...)
    f: str  # the step that started it (kill, pause, partition...)
    start: int
    end: int
    open_at_end: bool = False  # never healed in the history: ends with the run
    #: when the step that injected the fault completed (its end event): from then on the fault is
    #: surely in place. None when the history does not say (a heal of a fault begun before it).
    in_place: int | None = None
    node: str | None = None


def fault_windows(steps: list[dict], run_end: int) -> list[FaultWindow]:
    """The faults of one run from its nemesis steps in history order (chaos/nemesis/base.py;
    `nemesis_rows`). A step's ``end`` event names the fault it started: ``fault``, or a JSON list
    of keys (a toxic on each stream of a link: one fault, healed when every key is; `flat_rows`
    puts a step's ``toxics`` there). It began at the step's ``started`` (else its ``start``
    event) and is surely in place from the end event's ``time``. Later steps heal it
    (``fault_window`` entries). A fault never healed lasts until the run's last operation. A step
    that ended with an error injected nothing one can rely on: it opens no fault (its heals still
    count). A restart of a running broker takes it down for the step (`flat_rows` marks it with
    the fault "restart"). Every checker reads its faults here."""
    step_started: dict = {}
    open_faults: dict[str, tuple[str, int, int, str | None]] = {}
    windows: list[FaultWindow] = []
    for step in steps:
        if step.get("phase") == "start":
            step_started[step.get("node")] = step["time"]  # a nemesis runs one step at a time
            continue
        if step.get("phase") != "end":
            continue
        begun = step_started.pop(step.get("node"), step["time"])
        for healed in step.get("fault_window") or []:
            if healed.get("start") is None or healed.get("end") is None:
                continue
            opened = open_faults.pop(str(healed.get("fault")), None)
            windows.append(FaultWindow(str(healed.get("fault")), str(healed.get("f")), int(healed["start"]),
                                       int(healed["end"]), in_place=None if opened is None else opened[2],
                                       node=None if opened is None else opened[3]))
        fault = step.get("fault")
        if fault is None or step["f"] in NOT_FAULTS or step.get("error"):
            continue
        start = int(begun if step.get("started") is None else step["started"])
        if step["f"] == "restart" and fault == "restart":
            windows.append(FaultWindow("restart", "restart", start, int(step["time"]), node=step.get("node")))
            continue
        for key in _fault_keys(fault):
            open_faults[key] = (step["f"], start, int(step["time"]), step.get("node"))
    for fault, (f, start, in_place, node) in open_faults.items():
        windows.append(FaultWindow(fault, f, start, max(run_end, start), open_at_end=True, in_place=in_place,
                                   node=node))
    return sorted(windows, key=lambda w: (w.start, w.end))


def _fault_keys(fault: str) -> list[str]:
    if fault.startswith("["):
        try:
            keys = json.loads(fault)
        except ValueError:
            return [fault]
        return [str(k) for k in keys] if isinstance(keys, list) else [fault]
    return [fault]


def disturbances(windows: list[FaultWindow]) -> list[tuple[int, int, int]]:
    """The merged fault intervals (overlapping faults are one disturbance, from the first start) as
    (start, end, in place): when the fault that began it was surely in place (its start when the
    history does not say). Failover downtime counts recovery only from operations invoked after
    that (reports/checkers/failover_downtime.py says why: an operation invoked while the step was
    still injecting may have gone through before the fault took hold)."""
    out = []
    for start, end in merge_intervals([(w.start, w.end) for w in windows]):
        first = [w.start if w.in_place is None else w.in_place for w in windows if w.start == start]
        out.append((start, end, max(first)))
    return out


def in_canonical_order(found: list[dict]) -> list[dict]:
    """Findings in an order that does not depend on how the rows were coded or split: by their ops,
    then kind and message id (a run judged whole and one combined from parts list them alike)."""
    return sorted(found, key=lambda f: (f.get("ops") or [], f["kind"], str(f.get("message_id", f.get("id")))))


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


# ---------------------------------------------------------------------- events -> flat rows


def flat_rows(event: dict, file: str = "") -> list[dict]:
    """One history event's flat rows (the rules of `reports.pipeline.load.with_messages`)."""
    value = event.get("value")
    op = {"run": _text(event.get("run")) or (Path(file).parent.name if file else ""),
          "target": _text(event.get("target")) or UNKNOWN_TARGET,
          "node": _text(event.get("node")), "file": file or None, "index": event["index"], "time": event["time"],
          "process": _text(event["process"]), "type": _text(event["type"]), "f": _text(event["f"]),
          "error": _text(event.get("error"))}
    nemesis = {}
    if isinstance(value, dict):
        fault = value.get("fault")
        if fault is None and isinstance(value.get("toxics"), list) and value["toxics"]:
            fault = [str(t) for t in value["toxics"]]  # one fault with a key per stream (`fault_windows`)
        elif fault is None and event.get("f") == "restart" and value.get("old_pid") is not None:
            fault = "restart"  # a restart of a running broker: down for the step
        nemesis = {"phase": _text(value.get("phase")), "fault": _text(fault),
                   "started": _integer(value.get("started")), "fault_window": _fault_windows(value.get("fault_window"))}
    if isinstance(value, list):
        messages = value
    elif isinstance(value, dict) and isinstance(value.get("messages"), list):
        messages = value["messages"]
    elif isinstance(value, dict) and value.get("id") is not None:
        messages = [value]
    else:
        messages = []
    if not messages:
        return [{**op, **nemesis, "pos": None}]
    return [{**op, **nemesis, "pos": pos, **_message(m)} for pos, m in enumerate(messages)]


def flat_table(events: Iterable[dict], file: str = "") -> pa.Table:
    """A run's history events (dicts, as chaos/history.py writes them) as the flat table."""
    rows = []
    for i, event in enumerate(events):
        if "index" not in event or "time" not in event:  # a literal history in a test may leave them out
            event = {"index": i, **event}
            event.setdefault("time", event["index"])
        rows += flat_rows(event, file)
    if not rows:
        return FLAT_SCHEMA.empty_table()
    # column by column: measured at 200k operations, Table.from_pylist over the row dicts took 17 s
    columns = [pa.array([r.get(f.name) for r in rows], f.type) for f in PLAIN_SCHEMA]
    return pa.Table.from_arrays(columns, schema=PLAIN_SCHEMA).cast(FLAT_SCHEMA)


def _message(m) -> dict:
    if not isinstance(m, dict):
        return {}
    out = {"id": None if "id" not in m else ("None" if m["id"] is None else _text(m["id"]))}
    for name in ("destination", "group"):
        out[name] = _text(m.get(name))
    for name in ("producer", "seq", "consumer", "subscriber"):
        out[name] = _integer(m.get(name))
    out["redelivered"] = m.get("redelivered") if isinstance(m.get("redelivered"), bool) else None
    return out


def _fault_windows(windows) -> list | None:
    if not isinstance(windows, list):
        return None
    return [{"fault": _text(w.get("fault")), "f": _text(w.get("f")), "start": _integer(w.get("start")),
             "end": _integer(w.get("end"))} for w in windows if isinstance(w, dict)]


def _text(value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"))
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape ("\\ud83d"): "?", as Spark's reader gives
            return value.encode("utf-8", "replace").decode("utf-8")
    return value


def _integer(value) -> int | None:
    """An integer that fits 64 bits, else None (as Spark's reader reads a field it cannot type)."""
    if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63):
        return value
    return None
