"""The on-disk format of a state directory: write-ahead log, run files, manifest.

A state directory holds::

    LOCK                    locked (flock) by the one process that has the store open
    MANIFEST                the last checkpoint, JSON (below); absent before the first
    wal-<generation>.log    the write-ahead log: every commit since that checkpoint
    runs/<uuid>.arrow       one immutable run each: Arrow IPC file format, uncompressed,
                            one record batch, so it is memory-mapped without copying

``MANIFEST`` is ``{"format": "freshview-spine", "version": 1, "hash_version": 1,
"generation": g, "log": "wal-<g>.log", "meta": {key: JSON text},
"arrangements": {name: {"layout": Layout.to_json(), "runs": [path, ...]}}}``,
runs oldest first, paths relative to the directory.  It is replaced
atomically: written to ``MANIFEST.tmp``, fsynced, renamed, directory fsynced.

The log is a sequence of records, one per commit, each written with a single
``write`` call::

    b"FVL1" | payload length (u64 LE) | CRC-32 of payload (u32 LE) | payload
    payload = header length (u32 LE) | header (UTF-8 JSON) | blobs

The header is ``{"meta": {key: JSON text, or null when deleted}, "catalog":
[["create", name, layout] | ["drop", name], ...], "runs": [[name, "inline",
nbytes] | [name, "file", path], ...]}``: metadata changes, catalog changes in
the order they happened, then the runs the commit appended to each
arrangement, each an Arrow IPC stream among the blobs or a run file written
(and fsynced) before the record.  Replay applies them in that order.  A record
whose frame is torn or whose checksum fails ends the log: it and anything
after it were never committed (the tail of a write cut short by a crash).

Commits are not fsynced (``sync=False``, like SQLite's WAL with
``synchronous=NORMAL``): once ``write`` returns, the operating system has the
bytes, so killing the process loses nothing committed, while a power failure
may lose the last commits but never leaves a partial one.  Checkpoints fsync
run files and the manifest before the old log is deleted.

A full disk (or any failed write) leaves no partial file behind: an append
that fails cuts the log back to its last whole record (else the next record
would follow a torn one, and replay would stop before it), a run file or
``MANIFEST.tmp`` that cannot be written whole is deleted, and the manifest is
only ever replaced by a complete one.  A manifest of this format but a newer
version is ``StateTooNew``: left alone for the freshview that wrote it.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from freshview.algebra.hashing import HASH_VERSION
from freshview.errors import StateTooNew

FORMAT = "freshview-spine"
VERSION = 1
MAGIC = b"FVL1"
_FRAME = struct.Struct("<4sQI")
_HEADER_LENGTH = struct.Struct("<I")
MANIFEST = "MANIFEST"
RUNS = "runs"

__all__ = ["Log", "Manifest", "Record", "encode_record", "fsync_directory", "install_manifest", "map_run",
           "new_run_path", "prepare_manifest", "read_manifest", "read_records", "serialize_run", "write_manifest",
           "write_run_file"]


@dataclass
class Record:
    """One commit: metadata changes, catalog changes (in order), runs appended (in order)."""

    meta: dict[str, str | None] = field(default_factory=dict)
    catalog: list[list[Any]] = field(default_factory=list)
    runs: list[tuple[str, pa.Table | str]] = field(default_factory=list)  # table inline, or a run file path


def serialize_run(table: pa.Table) -> pa.Buffer:
    """A run as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def encode_record(record: Record) -> bytes:
    """The framed bytes of a record; inline runs are serialised here."""
    runs, blobs = [], []
    for name, run in record.runs:
        if isinstance(run, str):
            runs.append([name, "file", run])
        else:
            blob = serialize_run(run)
            runs.append([name, "inline", blob.size])
            blobs.append(blob)
    header = json.dumps({"meta": record.meta, "catalog": record.catalog, "runs": runs}).encode()
    payload = b"".join([_HEADER_LENGTH.pack(len(header)), header, *[memoryview(b) for b in blobs]])
    return _FRAME.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def read_records(data: pa.Buffer) -> tuple[list[Record], int]:
    """The valid records at the start of a log, and the length they span (the rest is a torn tail)."""
    records, pos, view = [], 0, memoryview(data)
    while pos + _FRAME.size <= len(view):
        magic, length, checksum = _FRAME.unpack_from(view, pos)
        start = pos + _FRAME.size
        if magic != MAGIC or start + length > len(view) or zlib.crc32(view[start:start + length]) != checksum:
            break
        records.append(_decode_payload(data.slice(start, length)))
        pos = start + length
    return records, pos


def _decode_payload(payload: pa.Buffer) -> Record:
    (header_length,) = _HEADER_LENGTH.unpack_from(memoryview(payload), 0)
    offset = _HEADER_LENGTH.size + header_length
    header = json.loads(payload.slice(_HEADER_LENGTH.size, header_length).to_pybytes())
    record = Record(header["meta"], header["catalog"])
    for name, kind, value in header["runs"]:
        if kind == "file":
            record.runs.append((name, value))
        else:
            record.runs.append((name, pa.ipc.open_stream(payload.slice(offset, value)).read_all()))
            offset += value
    return record


class Log:
    """The open write-ahead log: replayed once when opened, then appended to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = pa.py_buffer(os.pread(self._fd, os.fstat(self._fd).st_size, 0))
        self.records, self.size = read_records(data)
        if self.size < len(data):  # a torn tail: cut it off so new records follow the last good one
            os.ftruncate(self._fd, self.size)
        os.lseek(self._fd, self.size, os.SEEK_SET)

    def append(self, frame: bytes, sync: bool = False) -> None:
        """Write one record; if that fails (a full disk), the log is cut back to its last whole record
        and the error raised: the record was not committed."""
        view = memoryview(frame)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if sync:
                os.fsync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, self.size)  # shrinking needs no space
            os.lseek(self._fd, self.size, os.SEEK_SET)
            raise
        self.size += len(frame)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ---------------------------------------------------------------------- run files and manifest
def new_run_path() -> str:
    """A fresh run file name, relative to the state directory."""
    return f"{RUNS}/{uuid.uuid4().hex}.arrow"


def write_run_file(directory: Path, table: pa.Table, relative: str | None = None) -> str:
    """Write a run to a new file under ``runs/`` and fsync it; its path relative to ``directory``."""
    relative = relative or new_run_path()
    path = directory / relative
    path.parent.mkdir(exist_ok=True)
    try:
        with pa.OSFile(str(path), "wb") as sink:
            with pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=max(table.num_rows, 1))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        path.unlink(missing_ok=True)  # no partial run file
        raise
    return relative


def map_run(directory: Path, relative: str) -> pa.Table:
    """A run file's table, memory-mapped (no copy)."""
    with pa.memory_map(str(directory / relative)) as source:
        table = pa.ipc.open_file(source).read_all()
    return table.combine_chunks() if any(c.num_chunks > 1 for c in table.columns) else table


@dataclass
class Manifest:
    """The last checkpoint: metadata, arrangements (layout JSON and run files), the log that follows."""

    generation: int = 0
    meta: dict[str, str] = field(default_factory=dict)
    arrangements: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def log(self) -> str:
        return f"wal-{self.generation}.log"


def read_manifest(directory: Path) -> Manifest | None:
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    if data.get("format") == FORMAT and (_newer(data.get("version"), VERSION) or
                                         _newer(data.get("hash_version"), HASH_VERSION)):
        raise StateTooNew(f"{directory} holds state of a newer freshview (format version {data.get('version')}, "
                          f"hash version {data.get('hash_version')}; this freshview reads {VERSION}, "
                          f"{HASH_VERSION}): run that version, or point --state-dir elsewhere")
    if data.get("format") != FORMAT or data.get("version") != VERSION or data.get("hash_version") != HASH_VERSION:
        raise ValueError(f"format {data.get('format')} {data.get('version')}, hash version {data.get('hash_version')}")
    return Manifest(data["generation"], data["meta"], data["arrangements"])


def _newer(version: Any, ours: int) -> bool:
    return isinstance(version, int) and version > ours


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically and durably."""
    prepare_manifest(directory, manifest)
    install_manifest(directory)
    fsync_directory(directory)


def prepare_manifest(directory: Path, manifest: Manifest) -> None:
    """Write the new manifest to ``MANIFEST.tmp`` and fsync it; on failure none is left (the current
    manifest is untouched either way)."""
    data = {"format": FORMAT, "version": VERSION, "hash_version": HASH_VERSION, "generation": manifest.generation,
            "log": manifest.log, "meta": manifest.meta, "arrangements": manifest.arrangements}
    tmp = directory / (MANIFEST + ".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def install_manifest(directory: Path) -> None:
    """Make the prepared manifest the current one: one atomic rename (the caller fsyncs the directory)."""
    os.replace(directory / (MANIFEST + ".tmp"), directory / MANIFEST)


def fsync_directory(directory: Path) -> None:
    """fsync a directory (its entries) or a file (its bytes)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
