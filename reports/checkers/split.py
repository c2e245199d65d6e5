"""A run too big for one task, split by each checker's own key and combined again (issue 17).

A run's flat rows come in pieces (chunks of its history file, files of its Parquet: whatever a
task can hold). Each checker declares the key its facts decompose by (``SPLIT_KEY`` in its
module):

* ``id``        total_queue, no_redelivery_after_ack, redistribution: every count and finding is per message id;
* ``producer``  fifo: order is per (queue, producer); a queue's scope (its nodes, consumers,
                deliveries) is kept as sets and counts that merge;
* ``group``     groups, group_pinning: a group's deliveries stay together; the ops that release a group (a
                close, a reconnect, an in-doubt op, a rebalance, a drain, a fault) go to every part;
* ``client``    failover_downtime, latency, throughput, split_brain, redistribution's consumers: every row of a client's processes stays
                together (an op's invoke and completion are its process's consecutive lines);
                the client of a process comes from `failover_downtime.worker_claims`, merged over
                the pieces before any row is assigned.

Every piece's row goes to part ``crc32(key) % k`` of its key (a deterministic hash: the pieces are
read by different processes). The nemesis steps are few and every checker reads the run's fault
windows from them, so they go to every part that needs them (broadcast), and each part's
`Columns` gets the run's bounds (a fault never healed lasts to the run's end). Each part's facts
come from the same checker functions as a whole run's; each checker's ``combine`` puts them
together (`combine`). `facts_split` does all of it in one process, for tests: for every run,
``facts_split(table, k) == facts_of(Columns(table))``.

An op whose messages fall into several parts (a drain's list) keeps, in each part, the messages
of that part, renumbered 0.. in their order (`renumbered`): the part sees an op carrying those.
The renumbering happens where a part's rows are gathered from every piece (`gathered`), never per
piece: a piece may end inside an op's rows (a row slice, a Parquet file), and two pieces each
renumbering their share from 0 would give the part colliding places that misorder the op's list.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import failover_downtime, groups, registry
from .history import NEMESIS, Columns, Rows

FAMILIES = ("id", "producer", "group", "client")
#: fact families by the key that splits them (each family declares its key: reports/checkers/registry.py)
CHECKERS_OF = {family: tuple(name for name, f in registry.FACTS.items() if f.split_key == family) for family in FAMILIES}
assert sum(map(len, CHECKERS_OF.values())) == len(registry.FACTS), "a fact family splits by an unknown key"


# ---------------------------------------------------------------------- per piece (a chunk of a run)


def span(r: Rows) -> dict:
    """A piece's share of the run's span (registry.facts_of's ``span``); `merge_spans` adds them."""
    is_op = ~r.has_pos | (r.pos == 0)
    client = ~r.process.eq(NEMESIS)
    topic_lut = np.array([str(v).startswith("topic://") for v in r.destination.values.to_pylist()] + [False],
                         dtype=bool)
    topic = bool((client & r.has_pos & topic_lut[r.destination.codes]).any() or (client & r.f.eq("subscribe")).any())
    times = r.time[is_op]
    return {"t0": int(times.min()) if len(times) else None, "t1": int(times.max()) if len(times) else None,
            "n": int(is_op.sum()), "drained": bool((is_op & r.f.eq("drain") & r.type.eq("ok")).any()),
            "files": list(r.files), "topic": topic,
            "topic_messages": bool((client & r.has_pos & topic_lut[r.destination.codes]).any())}


def merge_spans(pieces: list[dict]) -> dict:
    t0 = [p["t0"] for p in pieces if p["t0"] is not None]
    t1 = [p["t1"] for p in pieces if p["t1"] is not None]
    return {"t0": min(t0) if t0 else None, "t1": max(t1) if t1 else None, "n": sum(p["n"] for p in pieces),
            "drained": any(p["drained"] for p in pieces), "files": sorted({f for p in pieces for f in p["files"]}),
            "topic": any(p["topic"] for p in pieces), "topic_messages": any(p["topic_messages"] for p in pieces)}


def parts(table: pa.Table, family: str, k: int, clients: dict[str, str] | None = None,
          rows_: Rows | None = None) -> dict[int, pa.Table]:
    """A piece of one run's flat rows as the rows of each part (only the parts that get rows) for
    the checkers split by ``family``, with their places (``pos``) as in the run: `gathered` puts
    a part's rows from every piece together; ``clients``: process -> client name (`client_names`
    of the run's merged `worker_claims`), for the ``client`` family; ``rows_``: `Rows` of
    ``table`` when the caller has them (one encoding serves every family)."""
    if not table.num_rows:
        return {}
    r = rows_ if rows_ is not None else Rows(table)
    part, broadcast = assign(r, family, k, clients or {})
    out = {}
    shared = np.flatnonzero(broadcast)
    for p in range(k):
        rows = np.flatnonzero(part == p)
        if len(shared):
            rows = np.union1d(rows, shared)
        if len(rows):
            out[p] = table.take(pa.array(r.original(rows)))
    return out


def assign(r: Rows, family: str, k: int, clients: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """(each row's part, -1 for a row no checker of the family reads; rows every part gets)."""
    client = ~r.process.eq(NEMESIS)
    messages = r.has_pos & client
    none = np.zeros(r.n, dtype=bool)
    if family == "id":
        part = np.where(messages, _hashed(r.id, k), -1)
        # a drain that returned nothing still says the run was drained (total_queue reads it)
        drained = ~r.has_pos & r.f.eq("drain") & r.type.eq("ok")
        return np.where(drained, 0, part), none
    if family == "producer":
        by_producer = _hash_ints(r.producer, k)
        return np.where(messages, np.where(r.has_producer, by_producer, _hashed(r.id, k)), -1), none
    if family == "group":
        releasing = ~client | r.type.eq("info")
        for f, ty in groups.RELEASING:
            releasing |= r.f.eq(f) & (r.type.eq(ty) if ty is not None else True)
        keyed = messages & (r.group.codes >= 0) & ~releasing
        return np.where(keyed, _hashed(r.group, k), -1), releasing
    if family == "client":
        names = [clients.get(p, f"process-{p}") for p in r.process.values.to_pylist()]
        lut = np.array([_hash(n, k) for n in names] + [_hash("process-None", k)], dtype=np.int64)
        return np.where(client, lut[r.process.codes], -1), ~client
    raise ValueError(f"unknown split key {family!r}; known: {', '.join(FAMILIES)}")


def _hash(value: str, k: int) -> int:
    # a hash every process computes alike (Python's own is salted per process)
    return zlib.crc32(value.encode("utf-8", "surrogatepass")) % k


def _hashed(text, k: int) -> np.ndarray:
    """Each row's part by the value of a text column (a null value: part 0)."""
    lut = np.array([_hash(v, k) for v in text.values.to_pylist()] + [0], dtype=np.int64)
    return lut[text.codes]


def _hash_ints(values: np.ndarray, k: int) -> np.ndarray:
    uniq, inverse = np.unique(values, return_inverse=True)
    return np.array([_hash(f"#{v}", k) for v in uniq.tolist()], dtype=np.int64)[inverse]


def gathered(tables: list[pa.Table]) -> pa.Table:
    """A part's rows from every piece (`parts` of each) as the table its facts are computed on:
    each op's messages renumbered 0.. over all of them, in their places in the run."""
    return renumbered(pa.concat_tables(tables))


def renumbered(table: pa.Table) -> pa.Table:
    """``pos`` renumbered 0.. within each op, in its order: a part that holds some of an op's
    messages sees an op that carried those (its first row then marks the op, history.Columns)."""
    pos_col = table.column("pos")
    if pos_col.null_count == len(pos_col):
        return table
    index = table.column("index").to_numpy()
    valid = pc.is_valid(pos_col).to_numpy(zero_copy_only=False)
    pos = pc.fill_null(pos_col, -1).to_numpy()
    rows = np.flatnonzero(valid)
    order = rows[np.lexsort((pos[rows], index[rows]))]
    start = np.ones(len(order), dtype=bool)
    start[1:] = index[order][1:] != index[order][:-1]
    first = np.maximum.accumulate(np.where(start, np.arange(len(order)), 0))
    new = np.zeros(len(pos), dtype=np.int64)
    new[order] = np.arange(len(order)) - first
    if not (new[valid] == pos[valid]).all():
        at = table.schema.get_field_index("pos")
        table = table.set_column(at, table.schema.field("pos"), pa.array(new, pa.int64(), mask=~valid))
    return table


# ---------------------------------------------------------------------- per part, and the run


def part_facts(c: Columns, family: str) -> dict:
    """The facts of the checkers split by ``family`` over one part (the same functions as a whole
    run's; latency keeps its distribution to merge)."""
    out = {}
    for name in CHECKERS_OF[family]:
        family_facts = registry.FACTS[name]
        out[name] = (family_facts.compute_part or family_facts.compute)(c)
    return out


def combine(family_parts: dict[str, list[dict]], run_span: dict) -> dict:
    """A run's facts (registry.facts_of's shape) from each family's part facts."""
    out = {}
    for family, names in CHECKERS_OF.items():
        for name in names:
            out[name] = registry.FACTS[name].combine([p[name] for p in family_parts.get(family, [])])
    if not family_parts.get("client"):  # no client and no nemesis row: what an empty run's facts say
        out[failover_downtime.NAME] = {"windows": [], "run_end": run_span["t1"], "rows": []}
    out["span"] = run_span
    return out


def facts_split(table: pa.Table, k: int, pieces: int = 1) -> dict:
    """One run's facts computed as the split path computes them, in one process: the rows cut
    into ``pieces`` pieces, each piece's rows spread over ``k`` parts per key, each part's facts,
    combined. For tests: equal to `registry.facts_of(Columns(table))` for every run."""
    size = -(-table.num_rows // max(1, pieces))
    chunks = [table.slice(i, size) for i in range(0, table.num_rows, size)] if table.num_rows else []
    rows = [Rows(t) for t in chunks]
    run_span = merge_spans([span(r) for r in rows])
    clients = failover_downtime.client_names(failover_downtime.merge_claims(
        [failover_downtime.worker_claims(r) for r in rows]))
    bounds = (run_span["t0"], run_span["t1"])
    family_parts: dict[str, list[dict]] = {}
    for family in FAMILIES:
        by_part: dict[int, list[pa.Table]] = {}
        for t, r in zip(chunks, rows):
            for p, rows_ in parts(t, family, k, clients, r).items():
                by_part.setdefault(p, []).append(rows_)
        family_parts[family] = [part_facts(Columns(gathered(ts).unify_dictionaries(), bounds), family)
                                for _, ts in sorted(by_part.items())]
    return combine(family_parts, run_span)
