"""Checkpoints of a flow's state to a path or object storage, and restore from them.

A checkpoint is taken between ticks from the state store's own consistent
copy point (``SpineStateStore.export``: every committed run in an immutable
file, and a manifest naming them with the metadata: the catalog, the step,
each connector's position).  The destination (any local path, ``file://`` or
URI ``pyarrow.fs`` understands, e.g. ``s3://bucket/prefix?endpoint_override=…``)
holds::

    runs/<uuid>.arrow        run files, immutable and uniquely named, shared by the checkpoints
    checkpoints/<n>.json     checkpoint n (below), complete: it names every run file it needs
    LATEST                   the number of the last complete checkpoint, written last

``checkpoints/<n>.json`` is ``{"format": "freshview-checkpoint", "version": 1,
"kind": "full" | "delta", "parent": n - 1 | null, "step", "created_at",
"state": <the store's manifest>, "files": [run paths], "bytes": written}``.
A full checkpoint writes every run file and starts a chain (``parent``
null); a delta writes only the run files the destination does not hold yet
and chains on the previous checkpoint (the first checkpoint to an empty
destination is full).  Since each checkpoint names all its files, restoring
the end of a chain of any length reads one document and its files.

Crash safety: run files first, then the checkpoint's document, then
``LATEST``; nothing is ever deleted, so a crash while writing leaves the
previous checkpoint restorable.  A restore refuses a document of another
format or version with a clear error.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pyarrow.fs as pafs

from freshview.errors import StateError

FORMAT = "freshview-checkpoint"
VERSION = 1
LATEST = "LATEST"
MANIFEST = "MANIFEST"  # the store's manifest file in a state directory (runtime/state/log.py)

__all__ = ["CheckpointInfo", "write", "read_latest", "fetch", "to_upload", "check_document"]


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint or restore did."""

    uri: str
    checkpoint: int  # its number at the destination
    kind: str  # "full" | "delta"
    step: int
    bytes_written: int  # (restore: bytes read)
    files: int  # run files written (restore: read)
    duration_s: float


def to_upload(runs: Sequence[str], present: set[str], full: bool) -> list[str]:
    """The run files a checkpoint writes: all for a full one, else those the destination lacks."""
    return list(runs) if full else [r for r in runs if r not in present]


def check_document(doc: Any, where: str) -> dict:
    """``doc`` if it is a checkpoint this version reads, else a ``StateError`` saying what it is."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise StateError(f"{where} is not a freshview checkpoint")
    if doc.get("version") != VERSION:
        raise StateError(f"{where} is a freshview checkpoint of format version {doc.get('version')!r}; this "
                         f"freshview reads version {VERSION} (restore it with the freshview that wrote it)")
    return doc


def _open(uri: str) -> tuple[pafs.FileSystem, str]:
    try:
        if "://" not in uri:
            return pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve())
        return pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:
        raise StateError(f"cannot open the checkpoint location {uri!r}: {exc}") from None


def _read_text(fs: pafs.FileSystem, path: str) -> str | None:
    try:
        with fs.open_input_stream(path) as f:
            return f.read().decode()
    except FileNotFoundError:
        return None


def _write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    with fs.open_output_stream(path) as f:
        f.write(data)


def _latest(fs: pafs.FileSystem, base: str) -> int | None:
    text = _read_text(fs, posixpath.join(base, LATEST))
    return None if text is None else int(text.strip())


def write(uri: str, state_dir: Path, manifest: dict, runs: Sequence[str], step: int, full: bool) -> CheckpointInfo:
    """Write a checkpoint of the exported state (``manifest``, ``runs`` under ``state_dir``) to ``uri``."""
    started = time.perf_counter()
    fs, base = _open(uri)
    try:
        fs.create_dir(posixpath.join(base, "runs"), recursive=True)
        fs.create_dir(posixpath.join(base, "checkpoints"), recursive=True)
        previous = _latest(fs, base)
        full = full or previous is None
        present = set() if full else {
            f"runs/{info.base_name}" for info in fs.get_file_info(pafs.FileSelector(posixpath.join(base, "runs")))}
        written = 0
        todo = to_upload(runs, present, full)
        for run in todo:
            data = (state_dir / run).read_bytes()
            _write_bytes(fs, posixpath.join(base, run), data)
            written += len(data)
        number = 1 if previous is None else previous + 1
        doc = {"format": FORMAT, "version": VERSION, "kind": "full" if full else "delta",
               "parent": None if full else previous, "step": step,
               "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "state": manifest, "files": list(runs), "bytes": written}
        text = json.dumps(doc).encode()
        _write_bytes(fs, posixpath.join(base, "checkpoints", f"{number:08d}.json"), text)
        _write_bytes(fs, posixpath.join(base, LATEST), str(number).encode())
    except OSError as exc:
        raise StateError(f"cannot write a checkpoint to {uri!r}: {exc}") from None
    return CheckpointInfo(uri, number, doc["kind"], step, written + len(text), len(todo),
                          time.perf_counter() - started)


def read_latest(uri: str) -> tuple[int, dict]:
    """The number and document of the last complete checkpoint at ``uri``."""
    fs, base = _open(uri)
    try:
        number = _latest(fs, base)
        if number is None:
            raise StateError(f"no checkpoint at {uri!r} (no {LATEST} file)")
        text = _read_text(fs, posixpath.join(base, "checkpoints", f"{number:08d}.json"))
    except (OSError, ValueError) as exc:
        raise StateError(f"cannot read the checkpoint at {uri!r}: {exc}") from None
    if text is None:
        raise StateError(f"{uri!r}: {LATEST} names checkpoint {number}, which is missing")
    try:
        doc = json.loads(text)
    except ValueError:
        raise StateError(f"{uri!r}: checkpoint {number} is not JSON") from None
    return number, check_document(doc, f"{uri!r} checkpoint {number}")


def fetch(uri: str, doc: dict, state_dir: Path) -> tuple[int, int]:
    """Copy a checkpoint's run files and manifest into the empty ``state_dir``; (files, bytes) read."""
    fs, base = _open(uri)
    total = 0
    (state_dir / "runs").mkdir(parents=True, exist_ok=True)
    try:
        for run in doc["files"]:
            with fs.open_input_stream(posixpath.join(base, run)) as f:
                data = f.read()
            (state_dir / run).write_bytes(data)
            total += len(data)
    except (OSError, FileNotFoundError) as exc:
        raise StateError(f"cannot read the checkpoint's run files at {uri!r}: {exc}") from None
    (state_dir / MANIFEST).write_text(json.dumps(doc["state"]))
    return len(doc["files"]), total


def write_document(uri: str, data: bytes) -> None:
    """One small file at ``uri`` (a partitioned flow's coordinator document beside its shards' checkpoints)."""
    fs, path = _open(uri)
    fs.create_dir(posixpath.dirname(path), recursive=True)
    _write_bytes(fs, path, data)


def read_document(uri: str) -> bytes:
    fs, path = _open(uri)
    text = _read_text(fs, path)
    if text is None:
        raise StateError(f"no checkpoint at {uri}")
    return text.encode()
