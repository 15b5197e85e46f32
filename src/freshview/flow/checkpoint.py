"""Checkpoints of a flow's state to a path or object storage, and restore from them.

A checkpoint is taken between ticks from the state store's own consistent
copy point (``SpineStateStore.export``: every committed run in an immutable
file, and a manifest naming them with every metadata key: the catalog, the
step, each connector's position, the flow's counters, dedup sequence
counters).  The destination (a local path, ``file://``, ``s3://``, any other
URI ``pyarrow.fs`` understands, or, when ``fsspec`` is installed, any URI it
understands) holds::

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

Where and how (``open_location``): ``s3://bucket/prefix`` is opened with
``pyarrow.fs.S3FileSystem``, configured, in increasing precedence, from the
environment (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` as the endpoint,
like the AWS CLI and boto3; credentials ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, region ``AWS_DEFAULT_REGION``
and profiles are read by the AWS SDK itself), the URI's query
(``?endpoint_override=host:port&scheme=http&region=…``, as
``FileSystem.from_uri``) and ``storage_options`` (``S3FileSystem`` keyword
arguments; the fsspec/s3fs names ``endpoint_url``, ``key``, ``secret``,
``token`` and ``region_name`` are accepted too).  Small files go up in one
``PutObject`` (``allow_delayed_open=True`` unless given): a checkpoint's
files are mostly small, and one request is cheaper than a multipart upload's
three.  Other URIs go to ``pyarrow.fs.FileSystem.from_uri``, or with
``storage_options`` (or a scheme pyarrow does not know) to fsspec's
``url_to_fs(uri, **storage_options)`` wrapped as a pyarrow filesystem.

Crash safety: run files first, then the checkpoint's document, then
``LATEST``; nothing is ever deleted, so a crash while writing leaves the
previous checkpoint restorable.  A restore refuses a document of another
format or version with a clear error.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

import pyarrow.fs as pafs

from freshview.errors import StateError

FORMAT = "freshview-checkpoint"
VERSION = 1
LATEST = "LATEST"
MANIFEST = "MANIFEST"  # the store's manifest file in a state directory (runtime/state/log.py)

__all__ = ["CheckpointInfo", "write", "read_latest", "fetch", "to_upload", "check_document", "open_location",
           "s3_options"]

# S3FileSystem arguments that are booleans or numbers (a URI's query gives text).
_S3_BOOLS = {"anonymous", "background_writes", "allow_delayed_open", "allow_bucket_creation", "allow_bucket_deletion",
             "check_directory_existence_before_creation", "force_virtual_addressing"}
_S3_NUMBERS = {"request_timeout": float, "connect_timeout": float, "load_frequency": int}
# fsspec/s3fs spellings of S3FileSystem arguments.
_S3_ALIASES = {"endpoint_url": "endpoint_override", "key": "access_key", "secret": "secret_key",
               "token": "session_token", "region_name": "region"}
Options = Mapping[str, Any] | None


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


def s3_options(uri: str, storage_options: Options = None, environ: Mapping[str, str] | None = None
               ) -> tuple[dict[str, Any], str]:
    """``S3FileSystem`` keyword arguments and the path (``bucket/prefix``) for an ``s3://`` URI: from
    ``environ``'s endpoint, then the URI's user info and query, then ``storage_options`` (see the
    module docstring)."""
    environ = os.environ if environ is None else environ
    parts = urlsplit(uri)
    if parts.scheme.lower() != "s3" or not parts.hostname:
        raise ValueError(f"not an s3://bucket/prefix URI: {uri!r}")
    options: dict[str, Any] = {"allow_delayed_open": True}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_override"] = endpoint
    if parts.username:
        options["access_key"] = unquote(parts.username)
        options["secret_key"] = unquote(parts.password or "")
    for key, value in parse_qsl(parts.query):
        options[key] = value
    for key, value in (storage_options or {}).items():
        options[_S3_ALIASES.get(key, key)] = value
    for key in list(options):
        value = options[key]
        if key in _S3_BOOLS and isinstance(value, str):
            options[key] = value.strip().lower() in ("1", "true", "yes", "on")
        elif key in _S3_NUMBERS and isinstance(value, str):
            options[key] = _S3_NUMBERS[key](value)
    bucket = parts.netloc.rpartition("@")[2]
    return options, posixpath.join(bucket, parts.path.strip("/")).rstrip("/")


def open_location(uri: str, storage_options: Options = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and base path of a checkpoint location (see the module docstring)."""
    try:
        if "://" not in uri:
            if storage_options:
                raise ValueError("storage_options apply to a URI (s3://, gs://, ...), not to a local path")
            return pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve())
        scheme = uri.split("://", 1)[0].lower()
        if scheme == "s3":
            options, path = s3_options(uri, storage_options)
            if "region" not in options and "endpoint_override" not in options \
                    and not os.environ.get("AWS_DEFAULT_REGION") and not os.environ.get("AWS_REGION"):
                options["region"] = pafs.resolve_s3_region(path.split("/", 1)[0])  # as from_uri does
            return pafs.S3FileSystem(**options), path
        if not storage_options:
            try:
                return pafs.FileSystem.from_uri(uri)
            except (ValueError, OSError) as exc:
                unknown = exc
        else:
            unknown = None
        return _fsspec(uri, storage_options, unknown)
    except (ValueError, TypeError, OSError) as exc:
        raise StateError(f"cannot open the checkpoint location {uri!r}: {exc}") from None


def _fsspec(uri: str, storage_options: Options, unknown: Exception | None) -> tuple[pafs.FileSystem, str]:
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        if unknown is not None:
            raise unknown from None
        raise ValueError("storage_options for this URI need fsspec (pip install fsspec and its "
                         "filesystem's package)") from None
    fs, path = url_to_fs(uri, **dict(storage_options or {}))
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path.rstrip("/")



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


def write(uri: str, state_dir: Path, manifest: dict, runs: Sequence[str], step: int, full: bool,
          storage_options: Options = None) -> CheckpointInfo:
    """Write a checkpoint of the exported state (``manifest``, ``runs`` under ``state_dir``) to ``uri``."""
    started = time.perf_counter()
    fs, base = open_location(uri, storage_options)
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


def read_latest(uri: str, storage_options: Options = None) -> tuple[int, dict]:
    """The number and document of the last complete checkpoint at ``uri``."""
    fs, base = open_location(uri, storage_options)
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


def fetch(uri: str, doc: dict, state_dir: Path, storage_options: Options = None) -> tuple[int, int]:
    """Copy a checkpoint's run files and manifest into the empty ``state_dir``; (files, bytes) read."""
    fs, base = open_location(uri, storage_options)
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


def stage(uri: str, doc: dict, parent: Path, verify: Callable[[Path], None],
          storage_options: Options = None) -> tuple[Path, int, int]:
    """Fetch checkpoint ``doc`` into a new directory under ``parent`` and ``verify`` it there (opens as a
    state store), before anything of the flow changes: (the directory, files, bytes).  On an error the
    directory is removed."""
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=parent))
    try:
        files, size = fetch(uri, doc, staging, storage_options)
        verify(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, files, size


def write_document(uri: str, data: bytes, storage_options: Options = None) -> None:
    """One small file at ``uri`` (a partitioned flow's coordinator document beside its shards' checkpoints)."""
    fs, path = open_location(uri, storage_options)
    fs.create_dir(posixpath.dirname(path), recursive=True)
    _write_bytes(fs, path, data)


def read_document(uri: str, storage_options: Options = None) -> bytes:
    fs, path = open_location(uri, storage_options)
    text = _read_text(fs, path)
    if text is None:
        raise StateError(f"no checkpoint at {uri}")
    return text.encode()
