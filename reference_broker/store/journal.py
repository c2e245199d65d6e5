"""An append-only journal on disk, with group commit, crash recovery and compaction.

Files
-----
``directory`` (created if missing) holds numbered segments ``journal-000001.log``,
``journal-000002.log``, ... and a ``lock`` file. Only the newest segment is written to; when it
has grown past ``segment_size`` the next flush starts a new segment (so a segment overshoots
by at most one batch). A new segment is written as ``journal-N.log.tmp`` (header and first
batch in one write, synced first under ``SyncPolicy.ALWAYS``) and only then renamed to
``journal-N.log``, so a named segment always has its header (see "Damaged segments").

Every segment starts with a 20-byte header: magic ``b"BCJRNL\\r\\n"``, format version (u16),
flags (u16; bit 0 = BASE), the segment number (u32, must match the file name) and a CRC32 of
the preceding 16 bytes. A BASE segment starts from the empty state: it is either the very first
segment or the output of a compaction, which holds the complete live state. Recovery replays
the newest BASE segment and the segments numbered after it; anything older is obsolete.

Records follow the header, back to back, each framed as::

    u32 payload length | u32 CRC32 | u8 type | payload

all little-endian. The CRC covers (segment number u32, file offset u64, payload length u32,
type u8) followed by the payload, so a record is only valid at the exact place it was written:
a stale copy, or a frame that happens to sit inside a message body, never validates.
Record types and payloads (``str`` = u32 byte length + UTF-8, ``surrogatepass``):

    1 ADD         str store_key, message (below)
    2 REMOVE      str store_key, str message_id
    3 REDELIVERY  str store_key, str message_id, u32 count
    4 SUB_ADD     str sub_key, metadata as compact JSON (rest of the payload)
    5 SUB_REMOVE  str sub_key

A message is ``<Bhqqq``-packed fixed fields (flags: bit 0 persistent, bits 1-6 which of
correlation_id / reply_to / type / group_id / content_type / producer_id are present;
priority; timestamp; expiration; group_seq), then the strings message_id, destination and the
present optional ones, then ``str`` properties as compact JSON in insertion order (empty when
there are none; JSON keeps ``bool``, ``int`` and ``float`` apart exactly, so each value comes
back with the type it had), then the raw body bytes up to the end of the payload. The encoding
is deterministic (same message, same bytes) and uses no pickle. Property keys must be ``str``
and values ``str``/``int``/``float``/``bool``; a value JSON cannot encode (e.g. ``bytes``) is
rejected by ``add`` with ``TypeError``, a priority outside int16 or a time or group_seq outside
int64 with ``struct.error``. Message fields declared with ``compare=False`` (per-protocol
caches such as ``wire_cache``) are not persisted.

Group commit and the fsync policy
---------------------------------
``add``/``remove``/... only encode a record into an in-memory buffer. ``flush()`` (called by the
broker once per network read batch, and before it sends receipts for persistent sends) writes
the whole buffer with ONE ``os.write`` and then applies the sync policy:

* ``SyncPolicy.ALWAYS``: ``fdatasync`` the segment after every write (and ``fsync`` the directory
  when a segment was created), before ``flush()`` returns. An acknowledged message survives
  power loss or a kernel crash. Costs one disk flush per batch, shared by every message in the
  batch.
* ``SyncPolicy.INTERVAL``: write at every flush, so the data is in the OS page cache and
  survives the broker process being killed (even with SIGKILL); ``fdatasync`` only when
  ``sync_interval_ms`` has passed since the last sync. The elapsed time is checked on every
  ``flush()`` (including one with nothing new to write) and ``close()`` always syncs, so on power
  loss at most roughly the last ``sync_interval_ms`` of acknowledged messages (plus however long
  the broker stayed idle without calling ``flush()``) can be lost.
* ``SyncPolicy.NEVER``: write at every flush and never sync; the OS writes the data back when it
  chooses. Survives the process being killed, not power loss.

With every policy ``flush()`` has handed the data to the kernel before it returns, and the
broker sends receipts only after ``flush()`` returns, so an acknowledged persistent send always
survives ``kill -9`` of the broker. Compaction always syncs its output (whatever the policy),
and rolling over to a new segment syncs the old one under ``ALWAYS`` and ``INTERVAL``.

Recovery
--------
``recover()`` (at startup, before any new writes; any other call on a fresh store runs it first)
takes the newest BASE segment and replays it and every later segment in order, checking each
record's CRC. Live messages are rebuilt per store key in add order, minus removed ones; REMOVE
or REDELIVERY of an unknown id is ignored. An invalid record in the last segment (incomplete
frame, CRC mismatch, length past the end of the file) with no valid record anywhere after it
is a torn tail from a crash mid-write: it is truncated away and logged as a warning on the
``reference_broker.store`` logger. An invalid record with valid records after it, or anywhere
in an earlier segment, is corruption: `JournalCorruptError` names the file and offset, because
data after it cannot be trusted. (A record corrupted by the disk *immediately* before a torn
tail is indistinguishable from the torn tail and is dropped with it.) Leftover temp files (a
new segment or a compaction not yet renamed: nothing in them was confirmed) and obsolete
segments are deleted. After recovery ``recover()`` returns the current live state.

Damaged segments
----------------
Because a segment is named only once its header is in it, no crash leaves a named segment that
is empty or shorter than its header. The newest segment found so (with no valid record in it)
was damaged afterwards: truncated, badly copied, or lost by the disk or file system. It may
have held confirmed messages, and the journal cannot tell how many, so recovery refuses with
`JournalDamagedError` (a `JournalCorruptError`) naming the file and what was found, as for a
corrupt record (issue 20: such a segment used to be deleted as "torn", and 500 confirmed
messages with it). ``discard_damaged=True`` (config ``store.discard_damaged``) is the operator
saying to delete it instead: it is logged as an error and recovery goes on without it. Only
that case is discarded: an older segment with a bad header, or a bad header followed by valid
records, is corruption either way. (Journals written before segments were renamed into place
could hold an empty newest segment after a crash at its creation; they need the option once.)
A segment cut back to exactly its header looks like one that was never written to, and is
taken as such: telling them apart would need a record of each segment's length elsewhere.

Compaction
----------
The store keeps an index of the live state with the encoded size of each live record, so the
live byte count is maintained incrementally and the check is O(1). After each flush, when there
is more than one segment and live bytes are less than ``compact_ratio`` of the journal's bytes,
the live state is rewritten (subscriptions, then per store key its messages in order with their
redelivery counts) as a BASE segment numbered one past the newest: written to
``journal-N.log.tmp``, fsynced, renamed to ``journal-N.log``, the directory fsynced, and only
then are the older segments deleted. A crash before the rename leaves a temp file recovery
deletes; after the rename, the new BASE segment supersedes the older ones whether or not they
were deleted, so recovery never sees duplicates or loses messages. Compaction costs a pause
proportional to the live data (it happens inside ``flush()``); ``compact_ratio = 0`` disables it.

Locking
-------
``__init__`` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``directory/lock`` (and writes its pid
there); a second opener, in this or another process, gets `JournalLockedError` naming the
directory. The lock is released by ``close()`` or when the process dies. ``lock=False`` skips it:
the caller guards the directory itself (the master/slave runner's shared-file locker,
reference_broker/ha, which waits for the lock instead of failing). ``abandon()`` closes the files
without writing anything more: a master that lost its lock must not touch the shared store.

Errors while writing or syncing (``ENOSPC``, ``EIO``) leave the store unusable: the
operation raises `JournalIOError` and so does every later one (a failed fsync cannot be
retried safely). Not thread-safe.

Stalled file system
-------------------
With ``io_timeout_s`` set (config ``store.io_timeout_ms``) every flush's writes, syncs and
compaction, the sync in ``close()``, and each file system call of recovery (the replay itself
stays on the caller's thread, unbounded) run on one worker thread with that deadline
(store/bounded_io.py), while the caller waits. A journal on NFS whose server is cut off blocks
in the kernel instead of failing (a soft mount for ``timeo`` x ``retrans``, a hard one until the
link heals); on the event loop that wait would stop the whole broker (issue 18). Past the
deadline the operation raises `JournalStallError` (a `JournalIOError`) and the store is failed
as after a write error: nothing of the batch is confirmed, every later call raises, the worker
issues no further system call once the stuck one returns, and the files are closed only after it
has returned. ``on_failure(exc)`` is called once when the store becomes unusable this way or by a
write error, so the broker can stop serving. None (the default for direct use) keeps the I/O on
the caller's thread.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import struct
import time
import zlib
from pathlib import Path
from typing import Callable

from reference_broker.engine.message import Message
from reference_broker.store.base import RecoveredState, StoreError, StoreStalled, SyncPolicy
from reference_broker.store.bounded_io import BoundedIO, IOStalled

__all__ = [
    "JournalCorruptError",
    "JournalDamagedError",
    "JournalIOError",
    "JournalLockedError",
    "JournalStallError",
    "JournalStore",
]

log = logging.getLogger("reference_broker.store")


class JournalCorruptError(StoreError):
    """A record in the middle of the journal is invalid; nothing after it can be trusted."""

    def __init__(self, path: Path | str, offset: int, reason: str) -> None:
        self.path = str(path)
        self.offset = offset
        self.reason = reason
        super().__init__(f"journal corrupt: {self.path} at offset {offset}: {reason}")


class JournalDamagedError(JournalCorruptError):
    """The newest segment has no valid header and no valid record: it is empty or was cut
    short, and it may have held confirmed messages (see "Damaged segments")."""

    def __init__(self, path: Path | str, size: int, reason: str) -> None:
        what = "is empty (0 bytes)" if size == 0 else f"has no valid header ({reason})"
        super().__init__(
            path, 0,
            f"the newest segment {what} and holds no valid record. No crash leaves a segment "
            "like this (a segment is named only once its header is written), so it was damaged "
            "afterwards and may have held confirmed messages. Restore it from a backup, or set "
            "store.discard_damaged = true to delete it and start without whatever it held")
        self.size = size


class JournalLockedError(StoreError):
    """Another JournalStore (another broker) has the journal directory open."""


class JournalIOError(StoreError):
    """Writing or syncing the journal failed; the store is no longer usable."""


class JournalStallError(JournalIOError, StoreStalled):
    """A journal write, sync or read did not return within ``io_timeout_s`` (the file system
    stopped answering); the store is no longer usable."""


# --- on-disk format -------------------------------------------------------------------------

MAGIC = b"BCJRNL\r\n"
FORMAT_VERSION = 1
FLAG_BASE = 0x0001

_SEG_HEAD = struct.Struct("<8sHHI")  # magic, version, flags, segment number
_SEG_HEADER_SIZE = _SEG_HEAD.size + 4  # + CRC32 of the above
_FRAME = struct.Struct("<IIB")  # payload length, CRC32, type
_FRAME_SIZE = _FRAME.size
_CRC_SEED = struct.Struct("<IQIB")  # segment number, file offset, payload length, type
_U32 = struct.Struct("<I")
_MSG_FIXED = struct.Struct("<Bhqqq")  # flags, priority, timestamp, expiration, group_seq

ADD, REMOVE, REDELIVERY, SUB_ADD, SUB_REMOVE = 1, 2, 3, 4, 5
_RECORD_NAMES = {ADD: "ADD", REMOVE: "REMOVE", REDELIVERY: "REDELIVERY", SUB_ADD: "SUB_ADD",
                 SUB_REMOVE: "SUB_REMOVE"}
_TYPE_BYTE = re.compile(rb"[\x01-\x05]")  # where a frame's type byte could be (resync search)

_SEGMENT_NAME = re.compile(r"^journal-(\d{6,})\.log$")
_TMP_NAME = re.compile(r"^journal-(\d{6,})\.log\.tmp$")

_OPTIONAL_FIELDS = ("correlation_id", "reply_to", "type", "group_id", "content_type",
                    "producer_id")
# Every Message field that is part of the message's identity (``compare=True``) is encoded;
# fields declared with ``compare=False`` are caches (e.g. ``wire_cache``) and are not persisted.
_ENCODED_FIELDS = frozenset(
    ("message_id", "destination", "body", "properties", "persistent", "priority", "timestamp",
     "expiration", "group_seq") + _OPTIONAL_FIELDS)

_json_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode
_json_decode = json.JSONDecoder().decode


def segment_name(number: int) -> str:
    return f"journal-{number:06d}.log"


def _segment_header(number: int, flags: int) -> bytes:
    head = _SEG_HEAD.pack(MAGIC, FORMAT_VERSION, flags, number)
    return head + _U32.pack(zlib.crc32(head))


def _parse_segment_header(data: bytes, number: int) -> tuple[int | None, str]:
    """(flags, "") for a valid header of segment `number`, else (None, reason)."""
    if len(data) < _SEG_HEADER_SIZE:
        return None, f"segment header incomplete ({len(data)} bytes)"
    magic, version, flags, seg = _SEG_HEAD.unpack_from(data, 0)
    (crc,) = _U32.unpack_from(data, _SEG_HEAD.size)
    if magic != MAGIC:
        return None, "bad segment magic"
    if zlib.crc32(data[: _SEG_HEAD.size]) != crc:
        return None, "segment header CRC mismatch"
    if version != FORMAT_VERSION:
        return None, f"unsupported journal format version {version}"
    if seg != number:
        return None, f"segment header says number {seg}, file name says {number}"
    return flags, ""


def _crc(segno: int, offset: int, rtype: int, payload) -> int:
    return zlib.crc32(payload, zlib.crc32(_CRC_SEED.pack(segno, offset, len(payload), rtype)))


def _str(value: str) -> bytes:
    b = value.encode("utf-8", "surrogatepass")
    return _U32.pack(len(b)) + b


def encode_message(m: Message) -> bytes:
    """The deterministic binary form of a message (see the module docstring)."""
    flags = 1 if m.persistent else 0
    mid = m.message_id.encode("utf-8", "surrogatepass")
    dest = m.destination.encode("utf-8", "surrogatepass")
    parts = [b"", _U32.pack(len(mid)), mid, _U32.pack(len(dest)), dest]
    bit = 2
    for value in (m.correlation_id, m.reply_to, m.type, m.group_id, m.content_type,
                  m.producer_id):
        if value is not None:
            flags |= bit
            b = value.encode("utf-8", "surrogatepass")
            parts.append(_U32.pack(len(b)))
            parts.append(b)
        bit <<= 1
    if m.properties:
        props = _json_encode(m.properties).encode("utf-8", "surrogatepass")
        parts.append(_U32.pack(len(props)))
        parts.append(props)
    else:
        parts.append(b"\0\0\0\0")
    parts.append(m.body)
    parts[0] = _MSG_FIXED.pack(flags, m.priority, m.timestamp, m.expiration, m.group_seq)
    return b"".join(parts)


def _read_str(data: bytes, pos: int, end: int) -> tuple[str, int]:
    if pos + 4 > end:
        raise ValueError("string length past end of record")
    (n,) = _U32.unpack_from(data, pos)
    pos += 4
    if pos + n > end:
        raise ValueError("string past end of record")
    return data[pos:pos + n].decode("utf-8", "surrogatepass"), pos + n


def decode_message(data: bytes, pos: int, end: int) -> Message:
    """Inverse of `encode_message` for ``data[pos:end]``."""
    flags, priority, timestamp, expiration, group_seq = _MSG_FIXED.unpack_from(data, pos)
    pos += _MSG_FIXED.size
    unpack = _U32.unpack_from
    raw = []
    # message_id, destination, the optional strings present, properties
    for _ in range(3 + (flags & 0x7E).bit_count()):
        (n,) = unpack(data, pos)
        pos += 4
        raw.append(data[pos:pos + n])
        pos += n
    if pos > end:
        raise ValueError("message fields extend past the end of the record")
    message_id = raw[0].decode("utf-8", "surrogatepass")
    destination = raw[1].decode("utf-8", "surrogatepass")
    optional = [None] * 6
    i = 2
    for j in range(6):
        if flags & (2 << j):
            optional[j] = raw[i].decode("utf-8", "surrogatepass")
            i += 1
    props_json = raw[i]
    properties = _json_decode(props_json.decode("utf-8", "surrogatepass")) if props_json else {}
    if not isinstance(properties, dict):
        raise ValueError("properties are not a JSON object")
    return Message(
        message_id=message_id, destination=destination, body=data[pos:end],
        properties=properties, persistent=bool(flags & 1), priority=priority,
        timestamp=timestamp, expiration=expiration, correlation_id=optional[0],
        reply_to=optional[1], type=optional[2], group_id=optional[3], group_seq=group_seq,
        content_type=optional[4], producer_id=optional[5],
    )


def _frame(parts: list, segno: int, offset: int, rtype: int, payload: bytes) -> int:
    """Append one framed record, to be written at `offset` of segment `segno`, to `parts`."""
    n = len(payload)
    crc = zlib.crc32(payload, zlib.crc32(_CRC_SEED.pack(segno, offset, n, rtype)))
    parts.append(_FRAME.pack(n, crc, rtype))
    parts.append(payload)
    return _FRAME_SIZE + n


def _find_valid_frame(data: bytes, segno: int, start: int, end: int) -> int | None:
    """Offset of the first valid record frame starting in [start, end), if any."""
    view = memoryview(data)
    for match in _TYPE_BYTE.finditer(data, start + _FRAME_SIZE - 1, end):
        offset = match.start() - (_FRAME_SIZE - 1)
        n, crc, rtype = _FRAME.unpack_from(data, offset)
        stop = offset + _FRAME_SIZE + n
        if stop <= end and _crc(segno, offset, rtype, view[offset + _FRAME_SIZE:stop]) == crc:
            return offset
    return None


def _fdatasync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(_SEG_HEADER_SIZE)


def _write_all(fd: int, data) -> None:
    written = os.write(fd, data)
    if written < len(data):  # short writes only happen on signals / nearly full disks
        view = memoryview(data)
        while written < len(data):
            written += os.write(fd, view[written:])


class _Entry:
    """A live message in the index: the message, its ADD record size, its redelivery state."""

    __slots__ = ("message", "size", "count", "rsize")

    def __init__(self, message: Message, size: int) -> None:
        self.message = message
        self.size = size  # bytes of its ADD record
        self.count = 0  # redelivery count
        self.rsize = 0  # bytes of its latest REDELIVERY record (0 when count == 0)


class JournalStore:
    """A `MessageStore` backed by an append-only journal in `directory` (see module docs)."""

    def __init__(
        self,
        directory: str | Path,
        sync: SyncPolicy = SyncPolicy.ALWAYS,
        sync_interval_ms: int = 1000,
        segment_size: int = 32 * 1024 * 1024,
        compact_ratio: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        discard_damaged: bool = False,
        lock: bool = True,
        io_timeout_s: float | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        if segment_size <= 0:
            raise ValueError("segment_size must be positive")
        if not 0.0 <= compact_ratio <= 1.0:
            raise ValueError("compact_ratio must be between 0 and 1")
        if sync_interval_ms < 0:
            raise ValueError("sync_interval_ms must not be negative")
        self.directory = Path(directory)
        self.sync = SyncPolicy(sync)
        self.sync_interval_ms = sync_interval_ms
        self.segment_size = segment_size
        self.compact_ratio = compact_ratio
        self.discard_damaged = discard_damaged
        self._clock = clock
        self._interval = sync_interval_ms / 1000.0
        # See "Stalled file system": None runs the file I/O on the caller's thread, unbounded.
        self._io = BoundedIO(io_timeout_s, name="journal-io") if io_timeout_s is not None else None
        #: called (on the caller's thread) once, when the store becomes unusable; the broker
        #: stops serving then (reference_broker/server.py)
        self.on_failure = on_failure

        # live index
        self._live: dict[str, dict[str, _Entry]] = {}
        self._subs: dict[str, tuple[dict, int]] = {}  # sub_key -> (metadata, record size)
        self._live_bytes = 0
        self._nmessages = 0

        # files
        self._fd: int | None = None  # the segment being appended to
        self._segno = 0  # its number (0: no segment yet)
        self._cur_size = 0
        self._segment_sizes: dict[int, int] = {}  # every segment in use -> bytes
        self._journal_bytes = 0
        self._records = 0  # records in the segments in use
        self._unsynced = False  # data written since the last sync of the current segment
        self._dir_dirty = False  # a segment was created since the last directory fsync
        self._last_sync = clock()

        # pending batch (group commit)
        self._pending: list[bytes] = []
        self._pend_bytes = 0  # record bytes in _pending (not counting a segment header)
        self._pend_records = 0
        self._pend_seg = 0  # segment the batch goes to
        self._pend_off = 0  # offset of the batch's first record in that segment
        self._pend_new = False  # the batch starts a new segment

        self._key_cache: dict[str, bytes] = {}
        self._recovered = False
        self._closed = False
        self._failed: BaseException | None = None
        self._compaction_blocked_until = 0  # segment number after a failed compaction
        self._abandoned = False  # abandon(): writes are dropped from then on
        self._syncs = 0
        self._writes = 0
        self._compactions = 0
        self._truncations = 0

        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._acquire_lock() if lock else None

    # --- locking ------------------------------------------------------------------------------

    def _acquire_lock(self) -> int:
        path = self.directory / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            except OSError:
                holder = ""
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise JournalLockedError(
                f"journal directory {self.directory} is already in use by another broker"
                f"{who}: could not lock {path}: {exc.strerror}") from None
        try:  # fixed width, so no truncation (a metadata write) is needed
            os.pwrite(fd, f"{os.getpid():<15}\n".encode("ascii"), 0)
        except OSError:
            pass  # the pid is informational only
        return fd

    # --- MessageStore -------------------------------------------------------------------------

    def add(self, store_key: str, message: Message) -> None:
        if self._abandoned:
            return  # a broker that lost the lock: see abandon()
        self._check()
        key = self._key_cache.get(store_key)
        if key is None:
            key = self._cache_key(store_key)
        size = self._append(ADD, key + encode_message(message))
        self._index_add(store_key, message, size)

    def remove(self, store_key: str, message_id: str) -> None:
        if self._abandoned:
            return  # a broker that lost the lock: see abandon()
        self._check()
        queue = self._live.get(store_key)
        if queue is None or message_id not in queue:
            return
        self._append(REMOVE, self._cache_key(store_key) + _str(message_id))
        self._index_remove(store_key, message_id)

    def update_redelivery(self, store_key: str, message_id: str, count: int) -> None:
        if self._abandoned:
            return  # a broker that lost the lock: see abandon()
        self._check()
        queue = self._live.get(store_key)
        entry = queue.get(message_id) if queue is not None else None
        if entry is None or entry.count == count:
            return
        size = self._append(REDELIVERY,
                            self._cache_key(store_key) + _str(message_id) + _U32.pack(count))
        self._index_redelivery(entry, count, size)

    def add_durable_subscription(self, sub_key: str, metadata: dict) -> None:
        if self._abandoned:
            return  # a broker that lost the lock: see abandon()
        self._check()
        meta_json = _json_encode(metadata).encode("utf-8", "surrogatepass")
        size = self._append(SUB_ADD, _str(sub_key) + meta_json)
        self._index_sub_add(sub_key, _json_decode(meta_json.decode("utf-8", "surrogatepass")),
                            size)

    def remove_durable_subscription(self, sub_key: str) -> None:
        if self._abandoned:
            return  # a broker that lost the lock: see abandon()
        self._check()
        if sub_key not in self._subs and sub_key not in self._live:
            return
        self._append(SUB_REMOVE, _str(sub_key))
        self._index_sub_remove(sub_key)

    def flush(self) -> None:
        if self._abandoned:
            return
        if self._pend_bytes:
            self._check()
            self._bounded(self._flush_batch, "journal write")
        elif (self._unsynced and self.sync is SyncPolicy.INTERVAL and not self._closed
              and self._failed is None and self._clock() - self._last_sync >= self._interval):
            self._bounded(self._sync, "journal sync")

    def _flush_batch(self) -> None:
        self._write_batch()
        self._still_wanted()
        self._maybe_compact()

    def recover(self) -> RecoveredState:
        self._check()
        return RecoveredState(
            messages={key: [e.message for e in queue.values()]
                      for key, queue in self._live.items() if queue},
            durable_subscriptions={key: dict(meta) for key, (meta, _size) in self._subs.items()},
            redelivery_counts={(key, mid): e.count for key, queue in self._live.items()
                               for mid, e in queue.items() if e.count > 0},
        )

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._failed is None and self._recovered:
                self.flush()
                if self._unsynced and self.sync is not SyncPolicy.NEVER:
                    self._bounded(self._sync, "journal sync")
        finally:
            self._closed = True
            self._close_files()

    def abandon(self) -> None:
        """Close the files without flushing or syncing, and drop every later write: what was not
        written was never confirmed to a client, and a broker that lost the store's lock must not
        touch it again. Used when the master/slave runner gives up mastership: the engine's
        connections are closed after this, and the bookkeeping that closing does (redelivery
        counts of messages in flight) is for the next master to redo from what it recovers."""
        if self._closed:
            return
        self._abandoned = True
        self._pending.clear()
        self._pend_bytes = 0
        self._pend_records = 0
        self._closed = True
        self._close_files()

    def _close_files(self) -> None:
        fd, self._fd = self._fd, None
        lock_fd, self._lock_fd = self._lock_fd, None

        def close() -> None:
            if fd is not None:
                os.close(fd)
            if lock_fd is not None:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
                os.close(lock_fd)

        if self._io is None:
            close()
        else:  # a stuck call may still be using fd: close it only once that call returned
            self._io.after_stall(close)
            self._io.close()

    def _bounded(self, operation: Callable[[], object], what: str):
        """``operation()`` within the I/O deadline (see "Stalled file system"); past it, or on
        an earlier stall, the store is failed (`JournalStallError`)."""
        try:
            if self._io is None:
                return operation()
            return self._io.call(operation, what)
        except IOStalled as exc:
            self._failed = exc
            error = JournalStallError(f"journal {self.directory}: {exc}")
            self._report_failure(error)
            raise error from exc
        except JournalIOError as exc:
            self._report_failure(exc)
            raise

    def _still_wanted(self) -> None:
        """Between two system calls on the worker: stop if the caller gave up waiting (the
        store is failed and its files may be abandoned under us)."""
        if self._io is not None:
            self._io.checkpoint()

    def _report_failure(self, exc: BaseException) -> None:
        callback, self.on_failure = self.on_failure, None  # once
        if callback is not None:
            log.error("%s: the store is unusable", exc)
            callback(exc)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def stats(self) -> dict:
        return {
            "kind": "journal",
            "directory": str(self.directory),
            "sync": self.sync.value,
            "bytes": self._journal_bytes,
            "live_bytes": self._live_bytes,
            "records": self._records,
            "segments": len(self._segment_sizes),
            "messages": self._nmessages,
            "subscriptions": len(self._subs),
            "pending_bytes": self._pend_bytes,
            "syncs": self._syncs,
            "writes": self._writes,
            "compactions": self._compactions,
            "truncated_tails": self._truncations,
        }

    def compact(self) -> None:
        """Flush, then rewrite the live state into a fresh BASE segment now."""
        self.flush()
        self._check()
        self._bounded(self._compact, "journal compaction")

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JournalStore({str(self.directory)!r}, sync={self.sync.value!r})"

    # --- the live index (shared by writes and replay, so both agree) ---------------------------

    def _index_add(self, store_key: str, message: Message, size: int) -> None:
        queue = self._live.get(store_key)
        if queue is None:
            queue = self._live[store_key] = {}
        old = queue.get(message.message_id)
        if old is not None:
            self._live_bytes -= old.size + old.rsize
            self._nmessages -= 1
        queue[message.message_id] = _Entry(message, size)
        self._live_bytes += size
        self._nmessages += 1

    def _index_remove(self, store_key: str, message_id: str) -> None:
        queue = self._live.get(store_key)
        if queue is None:
            return
        entry = queue.pop(message_id, None)
        if entry is None:
            return
        self._live_bytes -= entry.size + entry.rsize
        self._nmessages -= 1
        if not queue:
            del self._live[store_key]

    def _index_redelivery(self, entry: _Entry, count: int, size: int) -> None:
        self._live_bytes -= entry.rsize
        entry.count = count
        entry.rsize = size if count > 0 else 0
        self._live_bytes += entry.rsize

    def _index_sub_add(self, sub_key: str, metadata: dict, size: int) -> None:
        old = self._subs.get(sub_key)
        if old is not None:
            self._live_bytes -= old[1]
        self._subs[sub_key] = (metadata, size)
        self._live_bytes += size

    def _index_sub_remove(self, sub_key: str) -> None:
        old = self._subs.pop(sub_key, None)
        if old is not None:
            self._live_bytes -= old[1]
        queue = self._live.pop(sub_key, None)
        if queue:
            for entry in queue.values():
                self._live_bytes -= entry.size + entry.rsize
            self._nmessages -= len(queue)

    # --- writing ------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"journal {self.directory} is closed")
        if self._failed is not None:
            raise JournalIOError(
                f"journal {self.directory} failed earlier and is unusable: {self._failed}")
        if not self._recovered:
            # replayed on the caller's thread: only its file system calls are bounded, so a long
            # journal on a working disk is not cut short by the I/O deadline
            self._recover()

    def _cache_key(self, store_key: str) -> bytes:
        key = self._key_cache.get(store_key)
        if key is None:
            if len(self._key_cache) >= 10_000:
                self._key_cache.clear()
            key = self._key_cache[store_key] = _str(store_key)
        return key

    def _append(self, rtype: int, payload: bytes) -> int:
        if not self._pend_bytes:
            self._start_batch()
        size = _frame(self._pending, self._pend_seg, self._pend_off + self._pend_bytes, rtype,
                      payload)
        self._pend_bytes += size
        self._pend_records += 1
        return size

    def _start_batch(self) -> None:
        """Decide where the next batch goes: the current segment, or a new one (rollover)."""
        self._pending.clear()
        if self._fd is None or self._cur_size >= self.segment_size:
            self._pend_seg = self._segno + 1
            self._pend_off = _SEG_HEADER_SIZE
            self._pend_new = True
            # the first segment of an empty journal starts from the empty state: BASE
            flags = FLAG_BASE if not self._segment_sizes else 0
            self._pending.append(_segment_header(self._pend_seg, flags))  # one write with it
        else:
            self._pend_seg = self._segno
            self._pend_off = self._cur_size
            self._pend_new = False

    def _write_batch(self) -> None:
        data = b"".join(self._pending)
        nbytes = len(data)
        data_synced = False
        try:
            if self._pend_new:
                self._open_new_segment(self._pend_seg)
            _write_all(self._fd, data)
            self._still_wanted()  # after a stall: no sync, no rename
            self._writes += 1
            if self._pend_new:
                data_synced = self._name_new_segment(self._pend_seg)
        except OSError as exc:
            self._fail(exc)
        self._pending.clear()
        self._cur_size += nbytes
        self._segment_sizes[self._segno] = self._cur_size
        self._journal_bytes += nbytes
        self._records += self._pend_records
        self._pend_bytes = 0
        self._pend_records = 0
        self._pend_new = False
        self._unsynced = True
        if self.sync is SyncPolicy.ALWAYS or (
                self.sync is SyncPolicy.INTERVAL
                and self._clock() - self._last_sync >= self._interval):
            self._sync(data_synced)

    def _open_new_segment(self, number: int) -> None:
        """Open segment `number` under its temporary name; `_name_new_segment` renames it once
        its header and first batch are written (see "Damaged segments" in the module docs)."""
        if self._fd is not None:
            if self._unsynced and self.sync is not SyncPolicy.NEVER:
                _fdatasync(self._fd)  # don't leave unsynced data behind in an old segment
                self._still_wanted()
                self._syncs += 1
            os.close(self._fd)
            self._fd = None
        final = self.directory / segment_name(number)
        if final.exists():  # the directory lock keeps other writers out; never overwrite
            raise FileExistsError(errno.EEXIST, "segment already exists", str(final))
        tmp = final.with_name(final.name + ".tmp")
        self._fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                           | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._segno = number
        self._cur_size = 0
        self._segment_sizes[number] = 0
        self._unsynced = False
        self._dir_dirty = True

    def _name_new_segment(self, number: int) -> bool:
        """Give the new segment, header and first batch written, its real name; True when its
        data was synced first. Under SyncPolicy.ALWAYS it is (the sync flush() owes anyway,
        done before the rename instead of after), so not even a power loss leaves the name on
        a file shorter than its header unless the disk lost synced data. Under INTERVAL and
        NEVER confirmed data may be lost on power loss, and an empty segment then says so."""
        synced = self.sync is SyncPolicy.ALWAYS
        if synced:
            _fdatasync(self._fd)
        final = self.directory / segment_name(number)
        os.rename(final.with_name(final.name + ".tmp"), final)
        return synced

    def _sync(self, data_synced: bool = False) -> None:
        try:
            if not data_synced:
                _fdatasync(self._fd)
                self._still_wanted()
            if self._dir_dirty:
                _fsync_dir(self.directory)
                self._dir_dirty = False
        except OSError as exc:
            self._fail(exc)
        self._syncs += 1
        self._unsynced = False
        self._last_sync = self._clock()

    def _fail(self, exc: OSError):
        self._failed = exc
        raise JournalIOError(f"journal {self.directory}: {exc}") from exc

    # --- compaction ---------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        if (len(self._segment_sizes) > 1
                and self._live_bytes < self.compact_ratio * self._journal_bytes
                and self._segno >= self._compaction_blocked_until):
            self._compact()

    def _compact(self) -> None:
        number = self._segno + 1
        final = self.directory / segment_name(number)
        tmp = final.with_name(final.name + ".tmp")
        try:
            fd, size, records = self._write_compacted(tmp, number)
        except OSError as exc:
            log.error("journal %s: compaction into %s failed, keeping the old segments: %s",
                      self.directory, tmp.name, exc)
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            self._compaction_blocked_until = self._segno + 1  # retry after the next rollover
            return
        try:
            self._install_compacted(tmp, final)
        except OSError as exc:
            os.close(fd)
            self._fail(exc)
        except BaseException:
            os.close(fd)
            raise
        old = sorted(self._segment_sizes)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._segno = number
        self._cur_size = size
        self._segment_sizes = {number: size}
        self._journal_bytes = size
        self._records = records
        self._unsynced = False
        self._compactions += 1
        log.info("journal %s: compacted %d segments into %s (%d live bytes)",
                 self.directory, len(old), final.name, size)
        self._delete_segments(old)

    def _write_compacted(self, tmp: Path, number: int) -> tuple[int, int, int]:
        """Write the live state as BASE segment `number` to `tmp`, fsynced; (fd, size, records)."""
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                     | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            parts = [_segment_header(number, FLAG_BASE)]
            offset = _SEG_HEADER_SIZE
            buffered = _SEG_HEADER_SIZE
            records = 0
            for sub_key, (metadata, _size) in self._subs.items():
                payload = _str(sub_key) + _json_encode(metadata).encode("utf-8", "surrogatepass")
                n = _frame(parts, number, offset, SUB_ADD, payload)
                offset += n
                buffered += n
                records += 1
            for store_key, queue in self._live.items():
                key = _str(store_key)
                for mid, entry in queue.items():
                    n = _frame(parts, number, offset, ADD, key + encode_message(entry.message))
                    offset += n
                    buffered += n
                    records += 1
                    if entry.count > 0:
                        n = _frame(parts, number, offset, REDELIVERY,
                                   key + _str(mid) + _U32.pack(entry.count))
                        offset += n
                        buffered += n
                        records += 1
                    if buffered >= 1 << 20:
                        _write_all(fd, b"".join(parts))
                        parts.clear()
                        buffered = 0
            if parts:
                _write_all(fd, b"".join(parts))
            _fdatasync(fd)
            self._syncs += 1
        except BaseException:
            os.close(fd)
            raise
        return fd, offset, records

    def _install_compacted(self, tmp: Path, final: Path) -> None:
        """Make the compacted segment visible, durably. From here on it supersedes the rest."""
        os.rename(tmp, final)
        _fsync_dir(self.directory)

    def _delete_segments(self, numbers: list[int]) -> None:
        for number in numbers:
            try:
                (self.directory / segment_name(number)).unlink(missing_ok=True)
            except OSError as exc:  # harmless: recovery ignores segments older than a BASE
                log.warning("journal %s: could not delete obsolete %s: %s", self.directory,
                            segment_name(number), exc)

    # --- recovery -----------------------------------------------------------------------------

    def _recover(self) -> None:
        try:
            self._recover_journal()
        except BaseException:
            # leave nothing half-replayed behind: a retry starts from scratch
            self._live, self._subs, self._segment_sizes = {}, {}, {}
            self._live_bytes = self._nmessages = self._journal_bytes = self._records = 0
            raise

    def _recover_journal(self) -> None:
        directory = self.directory
        numbers: list[int] = []
        temps: list[Path] = []
        entries = self._bounded(lambda: [(e.name, e.path) for e in os.scandir(directory)],
                                "journal recovery: list the directory")
        for name, entry_path in entries:
            if m := _SEGMENT_NAME.match(name):
                numbers.append(int(m.group(1)))
            elif _TMP_NAME.match(name):
                temps.append(Path(entry_path))
        numbers.sort()

        # Walk back from the newest segment to the newest BASE segment.
        damaged_segment: tuple[int, int, str] | None = None  # number, size, what is wrong
        chain: list[int] = []
        base_found = False
        for i in range(len(numbers) - 1, -1, -1):
            number = numbers[i]
            path = directory / segment_name(number)
            head = self._bounded(lambda: _read_head(path), "journal recovery: read a segment header")
            flags, reason = _parse_segment_header(head, number)
            if flags is None:
                if i == len(numbers) - 1:
                    # A segment gets its name only once its header and first batch are written
                    # (synced first unless sync is NEVER), so no crash leaves a named segment
                    # that is empty or shorter than its header: that is damage done afterwards
                    # (a truncation, a bad copy, a file system that lost the data), and the
                    # segment may have held confirmed messages. Older versions created the
                    # file first, so a crash could leave it empty; we cannot tell that apart
                    # from a truncated one and refuse both, as for a corrupt record, unless the
                    # operator says to discard it (store.discard_damaged).
                    data = self._bounded(path.read_bytes, "journal recovery: read a segment")
                    nxt = _find_valid_frame(data, number, 0, len(data))
                    if nxt is None and self.discard_damaged:
                        damaged_segment = (number, len(data), reason)
                        continue
                    if nxt is None:
                        raise JournalDamagedError(path, len(data), reason)
                    reason += f"; valid records follow at offset {nxt}"
                raise JournalCorruptError(path, 0, reason)
            if chain and chain[-1] != number + 1:
                raise JournalCorruptError(
                    path, 0, f"segment {segment_name(number + 1)} is missing")
            chain.append(number)
            if flags & FLAG_BASE:
                base_found = True
                break
        if chain and not base_found:
            raise JournalCorruptError(
                directory / segment_name(chain[-1]), 0,
                "no BASE segment: the journal's first segments are missing")
        chain.reverse()
        obsolete = [n for n in numbers if chain and n < chain[0]]

        # Replay.
        truncate: tuple[Path, int, int, str] | None = None
        for i, number in enumerate(chain):
            path = directory / segment_name(number)
            data = self._bounded(path.read_bytes, "journal recovery: read a segment")
            end, torn = self._replay(path, number, data, last=(i == len(chain) - 1))
            if torn is not None:
                truncate = (path, end, len(data) - end, torn)
            self._segment_sizes[number] = end
            self._journal_bytes += end

        self._bounded(lambda: self._repair_and_open(temps, damaged_segment, obsolete, truncate, chain),
                      "journal recovery: repair and open")
        self._recovered = True
        log.debug("journal %s: recovered %d messages in %d store keys, %d subscriptions "
                  "from %d segments", directory, self._nmessages, len(self._live),
                  len(self._subs), len(chain))

    def _repair_and_open(self, temps, damaged_segment, obsolete, truncate, chain) -> None:
        """Recovery's writes, only now that the whole journal has been read successfully."""
        directory = self.directory
        for tmp in temps:
            log.warning("journal %s: deleting unfinished segment or compaction output %s "
                        "(a crash before it was named: nothing in it was confirmed)", directory,
                        tmp.name)
            tmp.unlink(missing_ok=True)
        if damaged_segment is not None:
            number, size, reason = damaged_segment
            log.error("journal %s: discarding damaged %s (%d bytes, %s) because "
                      "store.discard_damaged is set: whatever it held is lost", directory,
                      segment_name(number), size, reason)
            (directory / segment_name(number)).unlink(missing_ok=True)
        if obsolete:
            log.info("journal %s: deleting %d segments superseded by compacted %s", directory,
                     len(obsolete), segment_name(chain[0]))
            self._delete_segments(obsolete)
        if truncate is not None:
            path, end, dropped, reason = truncate
            log.warning("journal %s: truncating torn tail of %s at offset %d (%d bytes "
                        "dropped: %s)", directory, path.name, end, dropped, reason)
            fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.ftruncate(fd, end)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._truncations += 1
        if temps or damaged_segment is not None or obsolete:
            _fsync_dir(directory)

        if chain:
            self._segno = chain[-1]
            self._cur_size = self._segment_sizes[self._segno]
            self._fd = os.open(directory / segment_name(self._segno),
                               os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))

    def _replay(self, path: Path, number: int, data: bytes, last: bool) -> tuple[int, str | None]:
        """Apply segment `number`'s records; (end of the valid records, torn-tail reason)."""
        view = memoryview(data)
        pos = _SEG_HEADER_SIZE
        end = len(data)
        while pos < end:
            bad = None
            if end - pos < _FRAME_SIZE:
                bad = "incomplete record header"
            else:
                n, crc, rtype = _FRAME.unpack_from(data, pos)
                stop = pos + _FRAME_SIZE + n
                if rtype not in _RECORD_NAMES:
                    bad = f"unknown record type {rtype}"
                elif stop > end:
                    bad = f"record of {n} bytes extends past the end of the file"
                elif _crc(number, pos, rtype, view[pos + _FRAME_SIZE:stop]) != crc:
                    bad = "CRC mismatch"
            if bad is not None:
                if not last:
                    raise JournalCorruptError(path, pos, bad)
                nxt = _find_valid_frame(data, number, pos + 1, end)
                if nxt is not None:
                    raise JournalCorruptError(path, pos,
                                              f"{bad}; valid records follow at offset {nxt}")
                return pos, bad
            try:
                self._apply(rtype, data, pos + _FRAME_SIZE, stop, stop - pos)
            except (ValueError, struct.error, TypeError) as exc:
                raise JournalCorruptError(
                    path, pos, f"undecodable {_RECORD_NAMES[rtype]} record: {exc}") from None
            self._records += 1
            pos = stop
        return pos, None

    def _apply(self, rtype: int, data: bytes, pos: int, end: int, size: int) -> None:
        key, pos = _read_str(data, pos, end)
        if rtype == ADD:
            self._index_add(key, decode_message(data, pos, end), size)
        elif rtype == REMOVE:
            mid, pos = _read_str(data, pos, end)
            self._index_remove(key, mid)
        elif rtype == REDELIVERY:
            mid, pos = _read_str(data, pos, end)
            if pos + 4 != end:
                raise ValueError("bad REDELIVERY length")
            (count,) = _U32.unpack_from(data, pos)
            queue = self._live.get(key)
            entry = queue.get(mid) if queue is not None else None
            if entry is not None:
                self._index_redelivery(entry, count, size)
        elif rtype == SUB_ADD:
            metadata = _json_decode(data[pos:end].decode("utf-8", "surrogatepass"))
            if not isinstance(metadata, dict):
                raise ValueError("subscription metadata is not a JSON object")
            self._index_sub_add(key, metadata, size)
        else:  # SUB_REMOVE
            self._index_sub_remove(key)
