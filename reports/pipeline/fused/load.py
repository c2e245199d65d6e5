"""Loading for the fused engine: one history file (or one run's Parquet) into a flat Arrow table,
inside a Spark task, with no JVM in the data path.

Why not Spark's JSON reader: measured here at 1M operations it spent ~40 s where pyarrow's
multithreaded reader with an explicit schema takes ~2 s, and every row then still had to cross from
the JVM to Python for the per-run pass. So the engine hands each Spark task the *path* of a history,
and the task reads it itself (engine.py).

Three readers give the same rows (tests/reports/test_fused_scan.py and test_fused_load.py hold
them to it):

* the C scanner (`_scan.c`, the default where pip compiled it): chunks of the mapped file are
  scanned side by side without the GIL. It takes the plain client lines, the bulk of any history,
  and returns every other line (nemesis steps, drains, escapes, non-ASCII text, odd types,
  malformed lines) by number, which are then taken one by one by the reference rules below. So it
  needs no lenient rule of its own: where it is unsure, the reference decides. Measured at 8M
  operations (1.8 GB): 3–6 s, against ~20 s for pyarrow's reader with the loader's work around it.
* pyarrow's typed read (where the scanner is not built, or a line is 2 GiB or more). It needs
  every line to fit one schema. Two kinds of lines do not, and they are few in any history
  (DESIGN.md, "History format"): nemesis lines (``process`` is the text ``"nemesis"`` where clients
  have integers; their values carry fault windows) and drains (``value`` is a JSON list). They are
  cut out of the buffer by a byte search and parsed one by one with `json`. Whatever else does not
  fit sends the whole file down the slow path.
* the reference rules, line by line (`_line_by_line`): every line parsed in Python by the SQL
  loader's rules (`reports.pipeline.load.line_problem`), which name malformed lines by file and
  line number and, with ``skip_malformed``, leave them out.

The flat table (FLAT_SCHEMA): one row per message an op carries (``pos`` its place in a drain's
list, 0 for a single message) and one row with ``pos`` null for an op without messages; the
nemesis fields the checkers read beside them. Messages follow `reports.pipeline.load.with_messages`,
with one documented difference: a lone message object whose ``id`` is JSON null is not a message
here (a typed read cannot tell a null id from a missing one), where the SQL loader keeps it with
the id "None". No workload writes one; inside a drain's list both loaders keep it.

Parquet is written back per run (partitioned ``run=/target=`` directories, one file per history
file) in this flat shape, so a later analysis reads columns and parses nothing.
"""

from __future__ import annotations

import json
import os
import mmap
import re
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from reports.pipeline.load import (MALFORMED_FILE, OP_TYPES, UNKNOWN_TARGET, Histories, Malformed,
                                   MalformedHistory, line_problem)

try:  # the C line scanner, compiled by `pip install` (optional there: without it, pyarrow parses)
    from reports.pipeline.fused import _scan as SCANNER
except ImportError:  # pragma: no cover - depends on the install
    SCANNER = None

# The flat table and the rules that flatten one event are defined once, beside the checkers that
# read them (a list of events from `brokerconf chaos run` goes through the same rules).
from reports.checkers.history import (  # noqa: E402
    _DICT, _MESSAGE_FIELDS, FAULT_WINDOW_TYPE, FLAT_COLUMNS, FLAT_SCHEMA, MESSAGE_TYPE, PLAIN_SCHEMA as _PLAIN_SCHEMA,
    NEMESIS_FIELDS as _NEMESIS_FIELDS, flat_rows)

#: what the typed read asks of a client line; other fields are ignored
_LINE_SCHEMA = pa.schema([
    ("index", pa.int64()), ("time", pa.int64()), ("process", pa.int64()), ("type", pa.string()), ("f", pa.string()),
    ("value", pa.struct([*_MESSAGE_FIELDS, ("messages", pa.list_(MESSAGE_TYPE))])),
    ("target", pa.string()), ("node", pa.string()), ("run", pa.string()), ("error", pa.string()),
])
#: what marks the lines the typed read cannot take (module docstring): nemesis lines, and values
#: holding the nemesis fields (a client value with them keeps them, by the reference rules)
NEMESIS_BYTES = b'"nemesis"'
_NEMESIS_KEYS = (b'"phase"', b'"fault', b'"started"')
_LIST_VALUE = re.compile(rb'"value"\s*:\s*\[')
#: measured at 8M operations: 16 MiB blocks parsed in 16 s where 4 MiB ones took 22 s
_BLOCK = 16 << 20

#: marks Parquet written by this module (the SQL engine's has ``value`` and ``msgs`` instead)
LEAN_MARK = "_lean_flat"


@dataclass
class FusedHistories(Histories):
    """What the fused engine loaded: no DataFrame (the rows stay in the tasks), the skipped lines,
    the sources, and where the flat Parquet went (when it was written)."""
    parquet: str | None = None
    lean: bool = True
    notes: list[str] = field(default_factory=list)
    timings: list[dict] = field(default_factory=list)  # per task: seconds to read, check, write back


class NotTyped(ValueError):
    """The file does not fit the typed read: take the slow path."""


@dataclass
class FileRead:
    table: pa.Table
    malformed: list[Malformed]
    note: str = ""  # why the slow path was taken, if it was


# ---------------------------------------------------------------------- JSON lines


def read_history_file(path: str | Path, *, skip_malformed: bool = False) -> FileRead:
    """The flat table of one history file. Raises `reports.pipeline.load.MalformedHistory` on the
    first malformed line unless ``skip_malformed`` (then the lines are listed in the result)."""
    path = Path(path)
    if SCANNER is not None:
        read = _scanned(path, skip_malformed)
        if read is not None:
            return read
    try:
        return FileRead(_typed(path), [])
    except (NotTyped, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        note = f"{path}: read line by line ({str(exc).splitlines()[0][:160]})"
    table, malformed = _line_by_line(path.read_bytes(), path, skip_malformed)
    return FileRead(table, malformed, note)


# ---------------------------------------------------------------------- the C scanner

#: bytes of the file per scanner call: the calls run side by side in threads (the scanner runs
#: without the GIL), and a few chunks per core even out lines of different lengths
_SCAN_CHUNK = 64 << 20
#: special lines put back between slices of the scanned rows up to this many; beyond it they follow
#: the scanned rows and the pass sorts (a slice per line would cost more than the sort)
_MAX_PIECES = 512
#: the longest span one scanner call takes (its string offsets are int32)
_MAX_SPAN = (1 << 31) - 1


def read_history_range(path: str | Path, start: int, end: int, first_line: int, *,
                       skip_malformed: bool = False) -> FileRead:
    """The flat table of the lines in bytes [start, end) of a history file (a piece of a run too
    big for one task, engine.py; ``start`` at a line's beginning, ``first_line`` its number)."""
    path = Path(path)
    if SCANNER is not None:
        read = _scanned(path, skip_malformed, (start, end), first_line)
        if read is not None:
            return read
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    table, malformed = _line_by_line(data, path, skip_malformed, first_line)
    return FileRead(table, malformed)


def line_starts(path: str | Path, pieces: int) -> list[tuple[int, int, int]]:
    """(start, end, number of the first line) of about ``pieces`` byte ranges of a history file,
    each ending just after a newline."""
    path = Path(path)
    size = path.stat().st_size
    if not size:
        return []
    out, line = [], 1
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for start, end in _chunk_bounds(data, -(-size // max(1, pieces))):
            out.append((start, end, line))
            for at in range(start, end, _SCAN_CHUNK):  # newlines counted a block at a time
                line += int(np.count_nonzero(np.frombuffer(data, np.uint8, min(_SCAN_CHUNK, end - at), at) == 10))
    return out


def _scanned(path: Path, skip_malformed: bool, span: tuple[int, int] | None = None,
             first_line: int = 1) -> FileRead | None:
    """Read with the C scanner (`_scan.c`): chunks of the mapped file scanned side by side, then
    the special lines it left (nemesis lines, drains, anything unusual or malformed) taken one by one
    by the reference rules, exactly as `_line_by_line` takes every line. None for a file with a
    line of 2 GiB or more (the scanner's string offsets are 32-bit): pyarrow's reader takes it."""
    if path.stat().st_size == 0:
        return FileRead(FLAT_SCHEMA.empty_table(), [])
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        bounds = _chunk_bounds(data, _SCAN_CHUNK, *(span or ()))
        if any(end - start > _MAX_SPAN for start, end in bounds):
            return None
        with ThreadPoolExecutor(max_workers=min(len(bounds), os.cpu_count() or 1)) as pool:
            parts = list(pool.map(lambda span: SCANNER.scan(data, *span), bounds))
        special = []  # (line number, the line's bytes, part, scanned rows of that part before it)
        for k, part in enumerate(parts):
            special += [(first_line + line, data[start:end], k, before) for line, start, end, before in part.pop("special")]
            first_line += part["lines"]
    run_default = path.parent.name
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        tables = list(pool.map(lambda part: _scanned_table(part, path, run_default), parts))
    special_rows, malformed = _rows_by_reference_rules(((n, raw) for n, raw, _, _ in special), path, skip_malformed)
    if malformed:
        malformed = _with_neighbours_run(malformed, {r for t in [*tables, *special_rows] if t is not None
                                                     for r in pc.unique(t["run"]).to_pylist()})
    pieces = _in_file_order(tables, [(k, before, rows) for (_, _, k, before), rows in zip(special, special_rows)])
    return FileRead(pa.concat_tables(pieces).unify_dictionaries() if pieces else FLAT_SCHEMA.empty_table(), malformed)


def _chunk_bounds(data, size: int, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """[start, end) spans of about ``size`` bytes, each ending just after a newline (or at the end)."""
    bounds, n = [], len(data) if end is None else end
    while start < n:
        cut = min(start + max(size, 1), n)
        if cut < n:
            newline = data.find(b"\n", cut - 1, n)
            cut = n if newline < 0 else newline + 1
        bounds.append((start, cut))
        start = cut
    return bounds


def _scanned_table(part: dict, path: Path, run_default: str) -> pa.Table:
    """One scanner result as FLAT_SCHEMA columns; the numbers and offsets are used in place."""
    n = part["rows"]

    def ints(name):
        return np.frombuffer(part[name], dtype=np.int64)

    def flags(name):
        return np.frombuffer(part[name], dtype=np.bool_)

    def optional_ints(name):
        valid = flags(name + "_valid")
        return pa.array(ints(name), mask=~valid) if not valid.all() else pa.array(ints(name))

    def text(name):
        valid = flags(name + "_valid")
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.StringArray.from_buffers(n, pa.py_buffer(part[name + "_offsets"]), pa.py_buffer(part[name + "_data"]),
                                           bitmap)

    def coded(name, default=None):
        codes = np.frombuffer(part[name], dtype=np.int32)
        values = part[name + "_values"]
        missing = codes < 0
        if default is not None and missing.any():
            if default not in values:
                values = [*values, default]
            codes, missing = np.where(missing, np.int32(values.index(default)), codes), None
        indices = pa.array(codes, mask=missing) if missing is not None and missing.any() else pa.array(codes)
        return pa.DictionaryArray.from_arrays(indices, pa.array(values, pa.string()))

    message = flags("has_message")
    redelivered = np.frombuffer(part["redelivered"], dtype=np.int8)
    columns = {
        "run": coded("run", run_default), "target": coded("target", UNKNOWN_TARGET), "node": coded("node"),
        "file": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([str(path)])),
        "index": pa.array(ints("index")), "time": pa.array(ints("time")), "process": _process_text(pa.array(ints("process"))),
        "type": coded("type"), "f": coded("f"), "error": text("error"),
        "pos": pa.array(np.zeros(n, dtype=np.int64), mask=~message),
        "id": text("id"), "producer": optional_ints("producer"), "seq": optional_ints("seq"),
        "destination": coded("destination"), "group": coded("group"), "consumer": optional_ints("consumer"),
        "subscriber": optional_ints("subscriber"), "redelivered": pa.array(redelivered == 1, mask=redelivered < 0),
        **{name: pa.nulls(n, kind) for name, kind in _NEMESIS_FIELDS},
    }
    return pa.table({name: columns[name] for name in FLAT_COLUMNS}, schema=FLAT_SCHEMA)


def _in_file_order(tables: list[pa.Table], special: list[tuple[int, int, pa.Table | None]]) -> list[pa.Table]:
    """The scanned rows with the special lines' rows put back where their lines were, as zero-copy
    slices, so a history written in order stays in order and the pass need not sort it. With very
    many special lines they follow instead (the pass sorts what is out of order)."""
    special = [(k, before, rows) for k, before, rows in special if rows is not None]
    if len(special) > _MAX_PIECES:
        return [*tables, *(rows for _, _, rows in special)]
    pieces = []
    for k, table in enumerate(tables):
        last = 0
        for _, before, rows in (s for s in special if s[0] == k):
            pieces += [table.slice(last, before - last), rows]
            last = before
        pieces.append(table.slice(last))
    return pieces


def _rows_by_reference_rules(lines, path: Path, skip_malformed: bool) -> tuple[list[pa.Table | None], list[Malformed]]:
    """Each line's rows (None for a blank or skipped malformed line) by the rules `_line_by_line`
    applies to every line: the first malformed line raises unless ``skip_malformed``."""
    tables: list[pa.Table | None] = []
    malformed: list[Malformed] = []
    for number, raw in lines:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            tables.append(None)
            continue
        reason = line_problem(text)
        if reason is not None:
            malformed.append(_malformed_line(path, number, reason, text, skip_malformed))
            tables.append(None)
            continue
        tables.append(_special_rows(json.loads(text), path))
    return tables, malformed


def _malformed_line(path: Path, number: int, reason: str, text: str, skip_malformed: bool) -> Malformed:
    bad = Malformed(str(path), number, path.parent.name, reason, text)
    if not skip_malformed:
        raise MalformedHistory(f"{bad.describe()}. Fix or delete the line, or analyse without it with "
                               "--skip-malformed (every verdict of that run is then 'unknown')")
    return bad


def _with_neighbours_run(malformed: list[Malformed], runs: set) -> list[Malformed]:
    """A skipped line belongs to the run its neighbours name, when they name just one."""
    if len(runs) != 1:
        return malformed
    only = next(iter(runs))
    return [Malformed(m.file, m.line, only, m.reason, m.text) for m in malformed]


# ---------------------------------------------------------------------- pyarrow's reader (no scanner)


def _typed(path: Path) -> pa.Table:
    """The typed read. The file is mapped copy-on-write rather than read: only the pages of the
    lines cut out (overwritten with newlines, which the reader skips) are ever copied, so a
    history costs its parsed table in memory, not twice its size in bytes."""
    if path.stat().st_size == 0:
        return FLAT_SCHEMA.empty_table()
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) as data:
        tables = []  # the cut-out lines' rows, in file order
        for start, end in _special_lines(data):
            event = _event(data[start:end])
            if event is None:
                raise NotTyped("a nemesis or drain line is malformed")
            tables.append(_special_rows(event, path))
            data[start:end] = b"\n" * (end - start)
        # The mapping closes only once nothing points into it: not the Arrow buffer, and not an
        # exception whose traceback holds the reader's frames.
        failure = None
        buffer = pa.py_buffer(data)
        try:
            bulk = _typed_bulk(buffer, path)
        except (pa.ArrowInvalid, pa.ArrowTypeError, NotTyped) as exc:
            failure = str(exc)
        buffer = None
    if failure is not None:
        raise NotTyped(failure)
    return pa.concat_tables(_in_place(bulk, tables)).unify_dictionaries()


def _in_place(bulk: pa.Table, special: list[pa.Table]) -> list[pa.Table]:
    """The cut-out lines' rows put back where their lines were (between zero-copy slices of the
    bulk rows), so a history written in order stays in order and the pass need not sort it
    (measured at 8M operations: about half a second of gathers). Where the bulk rows are not in
    index order, or a cut-out line has no single index, they simply follow the bulk."""
    index = bulk["index"].to_numpy()
    if not special or (len(index) > 1 and (np.diff(index) < 0).any()):
        return [bulk, *special]
    pieces, last = [], 0
    for rows in special:
        at = int(np.searchsorted(index, rows["index"][0].as_py(), side="right")) if rows.num_rows else last
        at = max(at, last)
        pieces += [bulk.slice(last, at - last), rows]
        last = at
    pieces.append(bulk.slice(last))
    return pieces


def _special_lines(data) -> list[tuple[int, int]]:
    """(start, end) of the lines the typed read cannot take: nemesis lines and list values. A
    single-byte search (memchr) finds every ``[``, which client lines rarely hold; only the lines
    around the hits are looked at more closely."""
    special: set[tuple[int, int]] = set()

    def line_at(at: int) -> tuple[int, int]:
        end = data.find(b"\n", at)
        return data.rfind(b"\n", 0, at) + 1, len(data) if end < 0 else end

    for marker in (NEMESIS_BYTES, *_NEMESIS_KEYS):
        at = data.find(marker)
        while at >= 0:
            start, end = line_at(at)
            special.add((start, end))
            at = data.find(marker, end)
    at = data.find(b"[")
    while at >= 0:
        start, end = line_at(at)
        if _LIST_VALUE.search(data, start, end):
            special.add((start, end))
        at = data.find(b"[", end)
    return sorted(special)


def _special_rows(event: dict, path: Path) -> pa.Table:
    """The rows of one cut-out line: a drain's list is converted by pyarrow in one call (it can
    hold every message left in a queue); anything else goes through `_flat_rows`."""
    value = event.get("value")
    if isinstance(value, list) and value and all(isinstance(m, dict) and m.get("id", "") is not None for m in value):
        try:
            messages = pa.array(value, type=MESSAGE_TYPE)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError):
            messages = None  # a field of another type or range: the SQL loader's rules, row by row
        if messages is not None:
            op = _flat_rows({**event, "value": None}, path)[0]
            n = len(value)
            columns = {name: pa.array([op.get(name)] * n, _PLAIN_SCHEMA.field(name).type)
                       for name in FLAT_COLUMNS if name not in MESSAGE_TYPE.names and name != "pos"}
            columns["pos"] = pa.array(np.arange(n, dtype=np.int64))
            columns.update({name: messages.field(name) for name in MESSAGE_TYPE.names})
            return pa.table({name: columns[name] for name in FLAT_COLUMNS}, schema=_PLAIN_SCHEMA).cast(FLAT_SCHEMA)
    return pa.Table.from_pylist(_flat_rows(event, path), schema=_PLAIN_SCHEMA).cast(FLAT_SCHEMA)


def _typed_bulk(buffer, path: Path) -> pa.Table:
    lines = pj.read_json(pa.BufferReader(buffer), read_options=pj.ReadOptions(use_threads=True, block_size=_BLOCK),
                         parse_options=pj.ParseOptions(explicit_schema=_LINE_SCHEMA,
                                                       unexpected_field_behavior="ignore"))
    n = lines.num_rows
    for name in ("index", "time", "process", "type", "f"):
        if lines[name].null_count:
            raise NotTyped(f"a line without {name}")
    if not pc.all(pc.is_in(lines["type"], pa.array(OP_TYPES))).as_py():
        raise NotTyped("an unknown op type")
    value = lines["value"]
    lists = pc.struct_field(value, "messages")
    single_id = pc.struct_field(value, "id")
    if lists.null_count == n:  # no wrapped lists: one row per line
        take_op = None
        # a value without an id carries no message: none of its fields are kept (`_flat_rows`)
        has_id = pc.is_valid(single_id)
        messages = {name: _where(has_id, pc.struct_field(value, name)) for name, _ in _MESSAGE_FIELDS}
        pos = pc.if_else(has_id, pa.scalar(0, pa.int64()), pa.scalar(None, pa.int64()))
    else:
        take_op, messages, pos = _explode(_one_chunk(value), _one_chunk(lists), _one_chunk(single_id), n)
    run = _or_default(lines["run"], path.parent.name)
    target = _or_default(lines["target"], UNKNOWN_TARGET)
    ops = {"run": run, "target": target, "node": lines["node"], "index": lines["index"], "time": lines["time"],
           "process": lines["process"], "type": lines["type"], "f": lines["f"], "error": lines["error"]}
    if take_op is not None:
        ops = {k: pc.take(_one_chunk(v), take_op) for k, v in ops.items()}
    rows = len(pos)
    # the hash encodes release the GIL: spread them over the cores
    encoded = _encode_all({"run": ops["run"], "target": ops["target"], "node": ops["node"], "type": ops["type"],
                           "f": ops["f"], "destination": messages["destination"], "group": messages["group"]})
    columns = {
        "run": encoded["run"], "target": encoded["target"], "node": encoded["node"],
        "file": pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array([str(path)])),
        "index": ops["index"], "time": ops["time"], "process": _process_text(ops["process"]),
        "type": encoded["type"], "f": encoded["f"], "error": ops["error"], "pos": pos,
        **{name: encoded.get(name, messages[name]) for name, _ in _MESSAGE_FIELDS},
        **{name: pa.nulls(rows, kind) for name, kind in _NEMESIS_FIELDS},
    }
    table = pa.table({name: columns[name] for name in FLAT_COLUMNS}, schema=FLAT_SCHEMA)
    # pyarrow's reader does not check UTF-8: text that is not goes to the reference rules, which
    # decode it with replacement characters
    for name in ("error", "id"):
        try:
            table[name].validate(full=True)
        except pa.ArrowInvalid as exc:
            raise NotTyped(f"{name}: {exc}") from None
    for name in ("run", "target", "node", "type", "f", "destination", "group", "process"):
        try:
            for chunk in table[name].chunks:
                chunk.dictionary.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise NotTyped(f"{name}: {exc}") from None
    return table


def _where(mask, array):
    """``array`` where ``mask``, null elsewhere."""
    return pc.if_else(mask, array, pa.scalar(None, array.type))


def _or_default(text, default: str):
    """``text`` with null and empty values replaced by ``default`` (the reference rules' ``or``)."""
    return pc.if_else(pc.fill_null(pc.equal(text, ""), True), pa.scalar(default), text)


def _explode(value, lists, single_id, n):
    """Rows for lines whose value is ``{"messages": [...]}``: one per message (an empty list
    still leaves the op its row, with ``pos`` null)."""
    lengths = pc.fill_null(pc.list_value_length(lists), -1).to_numpy(zero_copy_only=False)
    has_single = pc.is_valid(single_id).to_numpy(zero_copy_only=False)
    per_op = np.where(lengths > 0, lengths, 1)
    take_op = np.repeat(np.arange(n), per_op)
    starts = np.cumsum(per_op) - per_op
    k = np.arange(len(take_op)) - np.repeat(starts, per_op)
    offsets = lists.offsets.to_numpy()[:-1] if len(lists) else np.zeros(0, dtype=np.int64)
    is_list = np.repeat(lengths > 0, per_op)
    is_single = np.repeat((lengths < 0) & has_single, per_op)
    # one struct array holding the lone messages, then every list's messages
    lone = pa.StructArray.from_arrays([pc.struct_field(value, name) for name, _ in _MESSAGE_FIELDS],
                                      names=[name for name, _ in _MESSAGE_FIELDS])
    listed = pc.list_flatten(lists)
    pool = pa.concat_arrays([lone, listed.cast(lone.type)])
    first = int(lists.offsets[0].as_py()) if len(lists) else 0
    source = np.where(is_list, n + np.repeat(offsets - first, per_op) + k, take_op)
    valid = is_list | is_single
    index = pa.array(source, mask=~valid)
    picked = pc.take(pool, index)
    messages = {name: pc.struct_field(picked, name) for name, _ in _MESSAGE_FIELDS}
    pos = pa.array(np.where(is_list, k, 0), mask=~valid)
    return pa.array(take_op), messages, pos


def _encode_all(columns: dict) -> dict:
    with ThreadPoolExecutor(max_workers=min(len(columns), os.cpu_count() or 1)) as pool:
        return dict(zip(columns, pool.map(_dict, columns.values())))


def _dict(array) -> pa.Array:
    return pc.dictionary_encode(array) if array.type != _DICT else array


def _process_text(process) -> pa.Array:
    """Client processes as text (the history's ``process`` is an integer or "nemesis"): encode the
    integers first and render only the distinct ones."""
    if pa.types.is_dictionary(process.type):
        return process
    codes = pc.dictionary_encode(process)
    if isinstance(codes, pa.ChunkedArray):  # one dictionary shared by every chunk
        if not codes.num_chunks:
            return pa.array([], _DICT)
        text = pc.cast(codes.chunk(0).dictionary, pa.string())
        return pa.chunked_array([pa.DictionaryArray.from_arrays(c.indices, text) for c in codes.chunks], _DICT)
    return pa.DictionaryArray.from_arrays(codes.indices, pc.cast(codes.dictionary, pa.string()))


def _one_chunk(array):
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _event(raw: bytes) -> dict | None:
    text = raw.decode("utf-8", "replace")
    if line_problem(text) is not None:
        return None
    return json.loads(text)


# ---------------------------------------------------------------------- rows in Python


def _line_by_line(data: bytes, path: Path, skip_malformed: bool,
                  first_line: int = 1) -> tuple[pa.Table, list[Malformed]]:
    rows: list[dict] = []
    malformed: list[Malformed] = []
    for number, raw in enumerate(data.split(b"\n"), start=first_line):
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            continue
        reason = line_problem(text)
        if reason is not None:
            malformed.append(_malformed_line(path, number, reason, text, skip_malformed))
            continue
        rows += _flat_rows(json.loads(text), path)
    if malformed:
        malformed = _with_neighbours_run(malformed, {r["run"] for r in rows})
    table = pa.Table.from_pylist(rows, schema=_PLAIN_SCHEMA).cast(FLAT_SCHEMA) if rows else FLAT_SCHEMA.empty_table()
    return table, malformed


def _flat_rows(event: dict, path: Path) -> list[dict]:
    """One line's flat rows, by `reports.pipeline.load.with_messages`' rules (reports/checkers/history.py)."""
    return flat_rows(event, str(path))


# ---------------------------------------------------------------------- Parquet


#: rows per Parquet file written back: a big run is written as several files side by side
_ROWS_PER_FILE = 2_000_000


def write_runs(table: pa.Table, out_dir: str | Path, stem: str | None = None) -> list[str]:
    """Write one history file's flat rows under ``out_dir/run=R/target=T/`` (new file names on
    every call, so tasks never overwrite each other; ``stem``: names of one's own, the same when
    the same piece is written again); returns the files written."""
    out_dir = Path(out_dir)
    jobs = []
    keys = run_keys(table)
    for run, target in keys:
        part = table if len(keys) == 1 else table.filter(
            pc.and_(pc.equal(_decoded(table, "run"), run), pc.equal(_decoded(table, "target"), target)))
        where = out_dir / f"run={quote(run, safe='')}" / f"target={quote(target, safe='')}"
        where.mkdir(parents=True, exist_ok=True)
        part = part.drop_columns(["run", "target"])
        stem_ = stem or uuid.uuid4().hex
        for i, start in enumerate(range(0, max(part.num_rows, 1), _ROWS_PER_FILE)):
            jobs.append((part.slice(start, _ROWS_PER_FILE), where / f"part-{stem_}-{i:04d}.parquet"))
    # Writing a file is single-threaded and releases the GIL: the files go side by side.
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        list(pool.map(lambda job: _write_file(*job), jobs))
    return [str(name) for _, name in jobs]


def _write_file(rows: pa.Table, name: Path) -> None:
    # Measured at 8M operations: LZ4 reads back in about half Snappy's time at the same size;
    # dictionaries only for the columns that are dictionaries (trying one for ids and times only
    # to give it up costs a fifth of the write); no statistics (nothing here filters on them;
    # another fifth).
    dictionaries = [f.name for f in rows.schema if pa.types.is_dictionary(f.type)]
    pq.write_table(rows, name, compression="lz4", use_dictionary=dictionaries, write_statistics=False)


def _decoded(table: pa.Table, column: str):
    return pc.cast(table[column], pa.string())


def run_keys(table: pa.Table) -> list[tuple[str, str]]:
    """The (run, target) pairs in a flat table."""
    pairs = pa.table({"run": _decoded(table, "run"), "target": _decoded(table, "target")}).group_by(
        ["run", "target"]).aggregate([])
    return sorted(zip(pairs["run"].to_pylist(), pairs["target"].to_pylist()))


def runs_of(table: pa.Table):
    """(run, target, that run's rows) for every run in a flat table (one slice when it holds one)."""
    keys = run_keys(table)
    if len(keys) == 1:
        yield (*keys[0], table)
        return
    run, target = pc.cast(table["run"], pa.string()), pc.cast(table["target"], pa.string())
    for key in keys:
        yield (*key, table.filter(pc.and_(pc.equal(run, key[0]), pc.equal(target, key[1]))))


def json_plain(value):
    """``json.dumps(default=...)`` for a task's facts: numpy scalars (and NaN) as JSON values."""
    if hasattr(value, "item"):
        value = value.item()
        return None if isinstance(value, float) and value != value else value
    raise TypeError(f"not JSON: {type(value).__name__}")


def clear_parquet(out_dir: str | Path) -> None:
    """Remove histories Parquet written before (ours or the SQL engine's), refusing anything else."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return
    if out_dir.is_dir() and (is_lean(out_dir) or (out_dir / "_SUCCESS").exists() or (out_dir / MALFORMED_FILE).exists()):
        shutil.rmtree(out_dir)
        return
    raise FileExistsError(f"{out_dir} exists and is not histories Parquet written by `brokerconf analyze`; "
                          "choose another --out")


def finish_parquet(out_dir: str | Path, malformed: list[Malformed]) -> None:
    """The marker and the skipped lines beside the written runs (on the driver, once)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MALFORMED_FILE).write_text(json.dumps([m.__dict__ for m in malformed], indent=1))
    (out_dir / LEAN_MARK).write_text("flat: one row per message (reports/pipeline/fused/load.py)\n")


def is_lean(path: str | Path) -> bool:
    return (Path(path) / LEAN_MARK).exists()


def run_dirs(path: str | Path) -> list[tuple[str, str, str]]:
    """(run, target, directory) of every run in lean Parquet."""
    found = []
    for run_dir in sorted(Path(path).glob("run=*")):
        for target_dir in sorted(run_dir.glob("target=*")):
            found.append((unquote(run_dir.name[4:]), unquote(target_dir.name[7:]), str(target_dir)))
    return found


def read_run_parquet(run: str, target: str, directory: str | Path, files: list[str] | None = None) -> pa.Table:
    """One run's flat rows from lean Parquet (its files, columns as written; ``files``: only these)."""
    files = files if files is not None else run_files(directory)
    tables = [pq.read_table(f, memory_map=True) for f in files]
    if not tables:
        return FLAT_SCHEMA.empty_table()
    # several files: their chunks keep their own dictionaries (the pass numbers them together)
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    rows = table.num_rows
    constant = lambda text: pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array([text]))  # noqa: E731
    table = table.append_column("run", constant(run)).append_column("target", constant(target))
    return table.select(list(FLAT_COLUMNS)).cast(FLAT_SCHEMA)


def run_files(directory: str | Path) -> list[str]:
    return sorted(str(p) for p in Path(directory).glob("*.parquet"))


def parquet_rows(directory: str | Path) -> int:
    """A run's rows, from its files' footers."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in run_files(directory))


def malformed_beside(path: str | Path) -> list[Malformed]:
    sidecar = Path(path) / MALFORMED_FILE
    return [Malformed(**m) for m in json.loads(sidecar.read_text())] if sidecar.exists() else []
