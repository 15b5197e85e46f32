"""A state directory in use: its lock, recovery, the log commits go to, checkpoints, garbage.

``log`` defines the files; this module runs their life cycle for one open
store.  Opening locks the directory (``flock``: a second process gets a clear
error), reads the manifest, maps its run files, and replays the log's
records; a checkpoint writes the runs held in memory to files, then a new
manifest (atomically), then starts an empty log and deletes every file
neither the state nor a merge under way uses.

A failed write (a full disk above all) changes nothing committed: the log
and the files (``log``) clean up after themselves, and a checkpoint switches
to its new manifest and log in one rename, after everything they name is
written; errors of the disk are ``DiskFull`` (ENOSPC, EDQUOT: retry once
there is room, ``probe_space`` says when) or ``StateError``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path

import pyarrow as pa

from freshview.errors import DiskFull, StateError, StateInUse, StateTooNew
from freshview.runtime.state import log
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.runs import Run, merge_runs

_LOCK = "LOCK"

__all__ = ["Recovered", "StateFiles", "disk_error", "is_disk_full", "probe_space"]

_FULL = (errno.ENOSPC, errno.EDQUOT)
PROBE = "SPACE.probe"


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


def disk_error(exc: OSError, directory: Path, doing: str = "write state") -> StateError:
    """The state error for an OS error: ``DiskFull`` for a full disk or quota, else ``StateError``."""
    kind = DiskFull if is_disk_full(exc) else StateError
    return kind(f"cannot {doing} in {directory}: {exc.strerror or exc}")


def probe_space(directory: Path, nbytes: int = 1 << 20) -> None:
    """Raise ``DiskFull`` unless ``nbytes`` can be allocated in ``directory`` now (a file allocated, then
    deleted): whether stepping, paused by a full disk, may resume."""
    path = directory / PROBE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                chunk = b"\0" * (64 << 10)  # a file system without fallocate: write it out
                for _ in range(0, nbytes, len(chunk)):
                    os.write(fd, chunk)
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise disk_error(exc, directory, f"allocate {nbytes} bytes") from None
    finally:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass

Recovered = tuple[dict[str, str], dict[str, tuple[Layout, list[Run]]]]


class StateFiles:
    """The files of one open state directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = _lock(directory)
        except StateInUse:
            raise
        except OSError as exc:
            raise disk_error(exc, directory, "open state") from None
        self._log: log.Log | None = None

    @property
    def log_size(self) -> int:
        return self._log.size if self._log is not None else 0

    def recover(self) -> Recovered:
        """The committed metadata and arrangements (layout, runs oldest first); the log is opened for appends."""
        if not (self.directory / log.MANIFEST).exists() and (self.directory / "state.sqlite").exists():
            raise StateError(f"{self.directory} holds state of the SQLite store; delete it to start afresh")
        try:
            manifest = log.read_manifest(self.directory) or log.Manifest()
        except StateTooNew:
            raise
        except (ValueError, KeyError) as exc:
            raise StateError(f"{self.directory} holds state of another format ({exc}); delete it to start afresh") \
                from None
        self.generation = manifest.generation
        meta = dict(manifest.meta)
        arrangements: dict[str, tuple[Layout, list[Run]]] = {}
        try:
            for name, entry in manifest.arrangements.items():
                runs = [Run(log.map_run(self.directory, p), p) for p in entry["runs"]]
                arrangements[name] = (Layout.from_json(entry["layout"]), runs)
            self._log = log.Log(self.directory / manifest.log)
            for record in self._log.records:
                self._replay(record, meta, arrangements)
        except OSError as exc:
            if is_disk_full(exc):  # (opening the log creates it)
                raise disk_error(exc, self.directory, "open the state log") from None
            raise StateError(f"cannot read state in {self.directory}: {exc}") from None
        except pa.ArrowException as exc:
            raise StateError(f"cannot read state in {self.directory}: {exc}") from None
        referenced = {p for entry in manifest.arrangements.values() for p in entry["runs"]}
        referenced |= {r for record in self._log.records for _, r in record.runs if isinstance(r, str)}
        self._log.records = []
        self.collect_garbage(referenced)
        return meta, {name: (layout, _merge_memory_stretches(runs, layout))
                      for name, (layout, runs) in arrangements.items()}

    def _replay(self, record: log.Record, meta: dict[str, str],
                arrangements: dict[str, tuple[Layout, list[Run]]]) -> None:
        for key, text in record.meta.items():
            if text is None:
                meta.pop(key, None)
            else:
                meta[key] = text
        for op in record.catalog:
            if op[0] == "create":
                arrangements[op[1]] = (Layout.from_json(op[2]), [])
            else:
                del arrangements[op[1]]
        for name, run in record.runs:
            stored = Run(log.map_run(self.directory, run), run) if isinstance(run, str) else Run(run)
            arrangements[name][1].append(stored)

    def append(self, record: log.Record, sync: bool) -> None:
        """Commit ``record``: one write to the log (and an fsync if ``sync``)."""
        assert self._log is not None
        self._log.append(log.encode_record(record), sync)

    def write_run(self, run: Run) -> None:
        """Store an in-memory run in its own file (fsynced) and map it back."""
        path = log.write_run_file(self.directory, run.table)
        run.attach(log.map_run(self.directory, path), path)

    def link_run(self, path: Path) -> Run:
        """Another state directory's run file ``path`` (immutable) under a new name in this one, mapped: a
        hard link (no byte copied), or a copy where the file systems differ.  Named by no manifest or log
        record until a commit's record names it: a crash before that leaves a stray file, which the next
        open (``recover``) or checkpoint deletes."""
        relative = log.new_run_path()
        target = self.directory / relative
        target.parent.mkdir(exist_ok=True)
        try:
            os.link(path, target)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
            try:
                shutil.copyfile(path, target)
                log.fsync_directory(target)  # (a file's bytes)
            except BaseException:
                target.unlink(missing_ok=True)
                raise
        return Run(log.map_run(self.directory, relative), relative)

    def checkpoint(self, meta: dict[str, str], arrangements: dict[str, tuple[Layout, list[Run]]],
                   keep: set[str]) -> None:
        """Write in-memory runs to files, a manifest naming all runs, and start an empty log.

        ``keep``: files a merge under way may still install, spared by the garbage collection.
        Until the manifest's rename nothing committed changes (a failure leaves the current manifest
        and log in use, and only files they do not name); after it, the new log is the one in use.
        """
        assert self._log is not None
        for _, runs in arrangements.values():
            for run in runs:
                if run.path is None:
                    self.write_run(run)
        if (self.directory / log.RUNS).exists():
            log.fsync_directory(self.directory / log.RUNS)
        manifest = log.Manifest(self.generation + 1, dict(meta), {
            name: {"layout": layout.to_json(), "runs": [r.path for r in runs]}
            for name, (layout, runs) in arrangements.items()})
        new_log = log.Log(self.directory / manifest.log)
        try:
            log.prepare_manifest(self.directory, manifest)
            log.install_manifest(self.directory)
        except BaseException:
            new_log.close()
            (self.directory / manifest.log).unlink(missing_ok=True)
            raise
        self._log.close()
        self._log, self.generation = new_log, manifest.generation
        log.fsync_directory(self.directory)
        self.collect_garbage({r.path for _, runs in arrangements.values() for r in runs if r.path} | keep)

    def collect_garbage(self, keep: set[str]) -> None:
        """Delete run files not in ``keep``, and logs and manifests that are not the current ones."""
        runs_dir = self.directory / log.RUNS
        for path in runs_dir.iterdir() if runs_dir.exists() else ():
            if f"{log.RUNS}/{path.name}" not in keep:
                path.unlink(missing_ok=True)
        for path in self.directory.glob("wal-*.log"):
            if self._log is None or path != self._log.path:
                path.unlink(missing_ok=True)
        (self.directory / (log.MANIFEST + ".tmp")).unlink(missing_ok=True)

    def close(self) -> None:
        """Release the log and the lock (everything committed is in the log already)."""
        if self._log is not None:
            self._log.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _lock(directory: Path) -> int:
    fd = os.open(directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateInUse(f"state directory {directory} is in use by another process") from None
    return fd


def _merge_memory_stretches(runs: list[Run], layout: Layout) -> list[Run]:
    """Merge each stretch of consecutive in-memory runs (a replayed log's, one per commit) into one."""
    out: list[Run] = []
    stretch: list[Run] = []
    for run in [*runs, None]:
        if run is not None and run.path is None:
            stretch.append(run)
            continue
        merged = merge_runs(stretch, layout) if len(stretch) > 1 else (stretch[0] if stretch else None)
        if merged is not None:
            out.append(merged)
        stretch = []
        if run is not None:
            out.append(run)
    return out
