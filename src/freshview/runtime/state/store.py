"""``SpineStateStore``: operator state as spines of immutable sorted runs, with a write-ahead log.

Each arrangement is a spine: a tuple of runs (``runs``), oldest first, whose
weights add up.  A write hashes, sorts and consolidates the change into a new
run and appends it; reads search every run (``reads``); after each commit the
spine rule (``policy``) picks runs to merge so there are ``O(log N)`` of them,
and background threads merge them (``merger``).

Durability (``log`` documents the files, ``files`` runs them): a commit
appends one record to the write-ahead log, holding the step's metadata and
catalog changes and every run it appended, inline as Arrow IPC (or, for large runs, a run file written
first).  Merges change no content, so they are not logged.  When the log or
the runs held only in memory outgrow ``cache_mb``, and on ``close``, a
checkpoint writes those runs to files, a new manifest naming every run file,
and starts an empty log.  Opening maps the manifest's run files (zero-copy;
the OS page cache holds their hot pages), replays the log, and merges the
replayed runs.  Memory is therefore the cache budget plus what the page cache
chooses to keep.

Transactions: ``begin`` remembers the catalog, the metadata and (on first
write) each spine's runs; ``rollback`` puts them back.  Calls outside a
transaction commit on their own.  One thread uses a store at a time.

A full disk: a commit that cannot be written raises ``DiskFull`` and is
rolled back (the store holds the last committed state, on disk and in
memory), so the caller may retry it once there is room.  What only tidies
up after a commit (a checkpoint, a merge's run file) does not fail the
commit: it is tried again later (the log holds everything meanwhile), and
``close`` on a full disk releases the directory without its checkpoint
rather than raise over the caller's own error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from freshview.algebra import hashing
from freshview.algebra.batch import consolidate, normalize_floats
from freshview.errors import StateError
from freshview.runtime.state import bulk, log, policy, reads
from freshview.runtime.state.layout import Layout, NullKeys
from freshview.runtime.state.files import StateFiles, disk_error, is_disk_full
from freshview.runtime.state.merger import Merger, MergeJob
from freshview.runtime.state.runs import (KEY_HASH, ROW_HASH, Run, build_run, merge_runs, run_schema, sort_run,
                                         uint64_column, with_hashes)
from freshview.schema import WEIGHT

OLD_WEIGHT = "_old_weight"
CHECKPOINT_RETRY_S = 10.0  # a checkpoint that found the disk full is tried again after this long
logger = logging.getLogger("freshview.state")

__all__ = ["SpineStateStore"]


@dataclass(eq=False)
class _Spine:
    """One arrangement: its layout and runs; ``runs[:committed]`` are committed."""

    name: str
    layout: Layout
    runs: tuple[Run, ...] = ()
    committed: int = 0

    @property
    def memory(self) -> int:
        """Bytes of committed runs held only in memory."""
        return sum(r.nbytes for r in self.runs[:self.committed] if r.path is None)


@dataclass
class _Transaction:
    catalog: dict[str, _Spine]
    meta: dict[str, str]
    saved: dict[int, tuple[_Spine, tuple[Run, ...], int]] = field(default_factory=dict)
    meta_changed: set[str] = field(default_factory=set)
    catalog_ops: list[list[Any]] = field(default_factory=list)


class SpineStateStore:
    """The ``StateStore`` protocol on spines of sorted runs (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike, cache_mb: float = 256, sync: bool = False) -> None:
        """Open (or create) the state in ``directory``.

        ``cache_mb``: how much state may live only in memory, and how long the
        log may grow, before a checkpoint writes run files.  ``sync``: fsync
        the log at every commit (durable across power loss, not only crashes).
        """
        self.directory = Path(directory)
        self._budget = int(cache_mb * 2**20)
        self._sync = sync
        self._tx: _Transaction | None = None
        self._files = StateFiles(self.directory)
        try:
            meta, arrangements = self._files.recover()
        except BaseException:
            self._files.close()
            raise
        self._meta: dict[str, str] = meta
        self._catalog = {name: _Spine(name, layout, tuple(runs), len(runs))
                         for name, (layout, runs) in arrangements.items()}
        self._merger = Merger(self.directory)
        self._checkpoint_after = 0.0  # monotonic time before which a checkpoint that failed is not retried
        self._closed = False

    def close(self) -> None:
        """Roll back an open transaction, finish merges, checkpoint, release the directory."""
        if self._closed:
            return
        if self._tx is not None:
            self.rollback()
        try:
            self._merger.close()
            self._install_merges(go_on=False)
            if self._files.log_size or any(s.memory for s in self._catalog.values()) or not self._files.generation:
                self._checkpoint()
        except OSError as exc:  # everything committed is in the log: replayed at the next open
            if not is_disk_full(exc):
                raise disk_error(exc, self.directory, "checkpoint state") from None
            logger.warning("state in %s closed without a checkpoint (%s); its log is replayed when it is next "
                         "opened", self.directory, exc.strerror)
        finally:
            self._release()

    def export(self) -> tuple[dict, list[str]]:
        """A consistent copy point of the committed state, outside a transaction: every run in its
        file and a manifest naming them (a local checkpoint).  Returns the manifest's JSON and the run
        files (paths relative to the directory); they stay until a later checkpoint replaces them.

        The state is settled first: merges in flight are waited for and swapped in, and no new one
        starts (the next commit of an arrangement plans its merges again).  So an export names the
        runs a later export of the same committed state names too: back-to-back exports share every
        file, and a delta checkpoint after them copies nothing."""
        self._check_open()
        if self._tx is not None:
            raise StateError("cannot export the state inside a transaction")
        self._merger.wait()
        self._install_merges(go_on=False)
        self._checkpoint()
        manifest = json.loads((self.directory / log.MANIFEST).read_text())
        return manifest, sorted({p for entry in manifest["arrangements"].values() for p in entry["runs"]})

    def _checkpoint(self) -> None:
        arrangements = {name: (s.layout, list(s.runs)) for name, s in self._catalog.items()}
        self._files.checkpoint(self._meta, arrangements, self._merger.reserved_paths())

    def _release(self) -> None:
        self._closed = True
        self._files.close()

    def __del__(self) -> None:
        # Everything committed is in the log already; an unclosed store only needs its files released.
        # No module globals (contextlib ...): at interpreter exit they may already be gone.
        try:
            if not self._closed:
                self._release()
        except Exception:
            pass

    # ------------------------------------------------------------------ transactions
    def begin(self) -> None:
        self._check_open()
        if self._tx is not None:
            raise StateError("a state transaction is already open")
        self._install_merges()
        self._tx = _Transaction(dict(self._catalog), dict(self._meta))

    def commit(self) -> None:
        self._check_open()
        tx = self._tx
        if tx is None:
            raise StateError("no state transaction to commit")
        written = [s for s, _, _ in tx.saved.values() if self._catalog.get(s.name) is s]
        record = log.Record({k: self._meta.get(k) for k in tx.meta_changed}, tx.catalog_ops)
        try:
            for spine in written:
                for run in spine.runs[spine.committed:]:
                    if len(run) >= policy.FILE_ROWS and run.path is None:
                        self._files.write_run(run)  # large runs go to their own file, which the log names
                    record.runs.append((spine.name, run.path or run.table))
            if record.meta or record.catalog or record.runs:
                self._files.append(record, self._sync)
        except OSError as exc:
            self.rollback()
            raise disk_error(exc, self.directory) from None
        for spine in written:
            spine.committed = len(spine.runs)
        self._tx = None
        self._maintain(written)

    def rollback(self) -> None:
        self._check_open()
        tx, self._tx = self._tx, None
        if tx is None:
            return
        self._catalog, self._meta = tx.catalog, tx.meta
        for spine, runs, committed in tx.saved.values():
            spine.runs, spine.committed = runs, committed

    @property
    def in_transaction(self) -> bool:
        return self._tx is not None

    @contextlib.contextmanager
    def _write(self) -> Iterator[_Transaction]:
        """The open transaction, or a transaction of its own around one call."""
        self._check_open()
        if self._tx is not None:
            yield self._tx
            return
        self.begin()
        try:
            yield self._tx  # type: ignore[misc]
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def _check_open(self) -> None:
        if self._closed:
            raise StateError("the state store is closed")

    # ------------------------------------------------------------------ merging
    def _maintain(self, spines: list[_Spine]) -> None:
        """After a commit: swap in finished merges, start the merges the spine rule asks for, checkpoint if due."""
        self._install_merges()
        for spine in spines:
            if len(spine.runs) > policy.MAX_RUNS:  # the merge threads fall behind: wait for them
                self._merger.wait()
                self._install_merges()
            self._start_merge(spine)
        memory = sum(s.memory for s in self._catalog.values())
        if policy.should_checkpoint(self._files.log_size, memory, self._budget) and \
                time.monotonic() >= self._checkpoint_after:
            try:
                self._checkpoint()
            except OSError as exc:  # the step is committed; only tidying up failed (the log holds the state)
                if not is_disk_full(exc):
                    raise disk_error(exc, self.directory) from None
                if not self._checkpoint_after:
                    logger.warning("cannot checkpoint state in %s (%s): the log holds it meanwhile; retrying "
                                   "every %.0f s", self.directory, exc.strerror, CHECKPOINT_RETRY_S)
                self._checkpoint_after = time.monotonic() + CHECKPOINT_RETRY_S
                return
            if self._checkpoint_after:
                logger.info("state in %s checkpointed again", self.directory)
            self._checkpoint_after = 0.0

    def _start_merge(self, spine: _Spine) -> None:
        merge = self._plan(spine)
        if merge is not None:
            self._merger.submit(MergeJob(spine, spine.layout, spine.runs[merge.start:merge.stop], merge.large))

    def _plan(self, spine: _Spine) -> policy.Merge | None:
        """The next merge of ``spine``'s runs newer than those being merged, if its thread is free for it."""
        jobs = self._merger.busy(spine)
        first = max((spine.runs.index(job.inputs[-1]) + 1 for job in jobs), default=0)
        merge = policy.plan_merge([len(r) for r in spine.runs], first)
        if merge is None or any(job.large == merge.large for job in jobs):
            return None
        return merge

    def _install_merges(self, go_on: bool = True) -> None:
        """Swap finished merges in, then (``go_on``) start the next merges of those arrangements.

        Their input runs are still there: merges take committed runs, and only
        a merge removes committed runs.  (A dropped arrangement's merge lands
        in the dropped spine.)  All are swapped in before any new merge is
        planned, since a plan may only take runs no merge is working on.
        """
        finished = self._merger.finished()
        errors = [job.error for job in finished if job.error is not None and not is_disk_full(job.error)]
        if any(job.error is not None and is_disk_full(job.error) for job in finished):
            logger.warning("a merge of state in %s found no room for its run file; its runs stay as they are",
                         self.directory)  # merges change no content: planned again at a later commit
        for job in finished:
            if job.error is None:
                self._replace(job.owner, job.inputs, job.result)
        if go_on:
            for owner in {id(job.owner): job.owner for job in finished}.values():
                if self._catalog.get(owner.name) is owner:
                    self._start_merge(owner)
        if errors:
            raise StateError(f"a background merge of state failed: {errors[0]!r}")

    @staticmethod
    def _replace(spine: _Spine, inputs: tuple[Run, ...], merged: Run | None) -> None:
        start = spine.runs.index(inputs[0])
        spine.runs = spine.runs[:start] + ((merged,) if merged is not None else ()) + spine.runs[start + len(inputs):]
        spine.committed = len(spine.runs)

    def _append(self, tx: _Transaction, spine: _Spine, run: Run | None) -> None:
        if run is None:
            return
        if id(spine) not in tx.saved:
            tx.saved[id(spine)] = (spine, spine.runs, spine.committed)
        spine.runs += (run,)
        # A transaction's own runs are merged among themselves (they are few and small, usually one).
        merge = policy.plan_merge([len(r) for r in spine.runs], spine.committed)
        if merge is not None:
            inputs = spine.runs[merge.start:merge.stop]
            spine.runs = spine.runs[:merge.start] + tuple(
                r for r in [merge_runs(list(inputs), spine.layout)] if r is not None)

    # ------------------------------------------------------------------ metadata
    def get_meta(self, key: str, default: Any = None) -> Any:
        self._check_open()
        text = self._meta.get(key)
        return default if text is None else json.loads(text)

    def set_meta(self, key: str, value: Any) -> None:
        text = json.dumps(value)
        with self._write() as tx:
            tx.meta_changed.add(key)
            self._meta[key] = text

    def delete_meta(self, key: str) -> None:
        with self._write() as tx:
            if key in self._meta:
                tx.meta_changed.add(key)
                del self._meta[key]

    # ------------------------------------------------------------------ catalog
    def ensure_arrangement(self, name: str, layout: Layout) -> None:
        self._check_open()
        existing = self._catalog.get(name)
        if existing is not None:
            if existing.layout != layout:
                raise StateError(f"state {name!r} exists with another layout ({existing.layout}); drop it first")
            return
        _check_types(name, layout)
        with self._write() as tx:
            self._catalog[name] = _Spine(name, layout)
            tx.catalog_ops.append(["create", name, layout.to_json()])

    def layout(self, name: str) -> Layout:
        return self._get(name).layout

    def has_arrangement(self, name: str) -> bool:
        self._check_open()
        return name in self._catalog

    def drop_arrangement(self, name: str) -> None:
        self._get(name)
        with self._write() as tx:
            del self._catalog[name]
            tx.catalog_ops.append(["drop", name])

    def list_arrangements(self, prefix: str = "") -> list[str]:
        self._check_open()
        return sorted(n for n in self._catalog if n.startswith(prefix))

    def _get(self, name: str) -> _Spine:
        self._check_open()
        if self._tx is None:  # between steps: swap in finished merges before reading
            self._install_merges()
        try:
            return self._catalog[name]
        except KeyError:
            raise StateError(f"no state named {name!r}") from None

    # ------------------------------------------------------------------ writes
    def apply(self, name: str, delta: pa.Table) -> None:
        spine = self._get(name)
        if delta.schema.equals(run_schema(spine.layout)):  # ``prepare_rows``' output: hashed already
            run = sort_run(delta, spine.layout)
        else:
            run = build_run(_conform(delta, spine.layout.weighted_schema, name), spine.layout)
        with self._write() as tx:
            self._append(tx, spine, run)

    def apply_report(self, name: str, delta: pa.Table) -> pa.Table:
        spine = self._get(name)
        layout = spine.layout
        rows = with_hashes(_conform(delta, layout.weighted_schema, name), layout)
        distinct = consolidate(rows, hashes=uint64_column(rows.column(ROW_HASH)), keep_zero=True)
        if layout.key:
            current = reads.lookup(spine.runs, layout, distinct.select(list(layout.key)), NullKeys.EQUAL)
        else:
            current = reads.scan(spine.runs, layout)
        found = reads.match_rows(distinct, current, layout.schema.names)
        stored = np.asarray(current.column(WEIGHT), dtype=np.int64)
        old = np.where(found >= 0, stored[np.maximum(found, 0)] if len(stored) else 0, 0)
        new = old + np.asarray(distinct.column(WEIGHT), dtype=np.int64)
        with self._write() as tx:
            self._append(tx, spine, sort_run(distinct, layout, consolidated=True))
        report = distinct.select(list(layout.schema.names))
        report = report.append_column(pa.field(OLD_WEIGHT, pa.int64()), pa.array(old, pa.int64()))
        return report.append_column(pa.field(WEIGHT, pa.int64()), pa.array(new, pa.int64()))

    def prepare_rows(self, name: str, delta: pa.Table) -> pa.Table:
        spine = self._get(name)
        return with_hashes(_conform(delta, spine.layout.weighted_schema, name), spine.layout)

    def load(self, name: str, rows: pa.Table) -> None:
        spine = self._get(name)
        if spine.runs:
            raise StateError(f"state {name!r} is not empty: load fills only an empty arrangement")
        self.apply(name, rows)

    def load_runs(self, name: str, tables: Iterable[pa.Table]) -> int:
        """Fill an EMPTY arrangement from ``tables`` (its columns + ``_weight``; weights add up across
        them): each table one sorted run (``bulk``), a large one written to its own file at once, built
        on a helper thread while the next table is taken in (``bulk.ahead``: memory holds two tables).
        A load of up to ``bulk.MERGE_ROWS`` rows ends as one run; a larger one is merged after the
        commit, in the background.  Returns the rows loaded."""
        spine = self._get(name)
        if spine.runs:
            raise StateError(f"state {name!r} is not empty: a bulk load fills only an empty arrangement")
        loaded = 0
        with self._write() as tx:
            tx.saved.setdefault(id(spine), (spine, spine.runs, spine.committed))

            def built(table: pa.Table) -> tuple[Run | None, int]:  # (on bulk.ahead's helper thread)
                run = build_run(_conform(table, spine.layout.weighted_schema, name), spine.layout)
                return (None if run is None else self._spill(run)), table.num_rows

            for run, rows in bulk.ahead(built, tables):
                if run is not None:
                    spine.runs += (run,)  # (a rolled-back load's files: collected at a checkpoint)
                loaded += rows
            if bulk.merge_now([len(r) for r in spine.runs]):  # one run: scans and lookups read one
                merged = merge_runs(list(spine.runs), spine.layout)
                spine.runs = (self._spill(merged),) if merged is not None else ()
        return loaded

    def adopt_runs(self, name: str, runs: Iterable[Run], directory: Path) -> int:
        """Append another store's committed runs of this arrangement (the same layout; that store in
        ``directory``), inside the transaction, copying no row: a run file is linked here
        (``StateFiles.link_run``) and the commit's log record names it; a run held only in memory is
        logged as any commit's.  A crash before the commit leaves this store as before (``adopt``).
        Returns the run files linked."""
        spine = self._get(name)
        linked = 0
        with self._write() as tx:
            tx.saved.setdefault(id(spine), (spine, spine.runs, spine.committed))
            for run in runs:
                if run.path is not None:
                    try:
                        run = self._files.link_run(directory / run.path)
                        linked += 1
                    except FileNotFoundError:  # a pinned run its store's checkpoint has deleted since:
                        run = Run(run.table)  # its rows (memory-mapped, still readable) logged as a commit's
                    except OSError as exc:
                        raise disk_error(exc, self.directory, "adopt state") from None
                else:
                    run = Run(run.table)  # (its own object: a commit may attach it to a file of this store)
                spine.runs += (run,)
            if linked and self._sync:
                log.fsync_directory(self.directory / log.RUNS)
        return linked

    def _spill(self, run: Run) -> Run:
        """A large run written to its own file at once (then memory mapped), a small one as it is."""
        if len(run) >= policy.FILE_ROWS and run.path is None:
            try:
                self._files.write_run(run)
            except OSError as exc:
                raise disk_error(exc, self.directory) from None
        return run

    def repeated(self, name: str) -> pa.Table:
        """The keys held by more than one row, with their rows' weights summed (NULL keys equal): a bulk
        load's duplicate check, done once (``bulk.repeated``)."""
        spine = self._get(name)
        return bulk.repeated(spine.runs, spine.layout)

    # ------------------------------------------------------------------ reads
    def committed_runs(self, name: str) -> tuple[Layout, tuple[Run, ...]]:
        """An arrangement's layout and committed runs now (immutable: ``pin``)."""
        spine = self._get(name)
        return spine.layout, spine.runs[:spine.committed]

    def lookup(self, name: str, keys: pa.Table) -> pa.Table:
        spine = self._get(name)
        layout = spine.layout
        if not layout.key:
            return self.scan(name)
        if not spine.runs:  # (a first computation's joins probe empty sides with whole inputs)
            return layout.weighted_schema.empty_table()
        found = reads.lookup(spine.runs, layout, _conform(keys, layout.key_schema, name))
        return found.select(layout.weighted_schema.names)

    def lookup_prepared(self, name: str, keys: pa.Table) -> pa.Table:
        spine = self._get(name)
        layout = spine.layout
        if not layout.key:
            return reads.scan(spine.runs, layout)
        if not spine.runs:  # (a first computation's joins probe empty sides with whole inputs)
            return run_schema(layout).empty_table()
        hashes = uint64_column(keys.column(KEY_HASH)) if KEY_HASH in keys.column_names else None
        return reads.lookup(spine.runs, layout, _conform(keys, layout.key_schema, name), hashes=hashes)

    def extreme(self, name: str, keys: pa.Table, kind: str) -> pa.Table:
        spine = self._get(name)
        layout = spine.layout
        if kind not in ("min", "max"):
            raise StateError(f"extreme kind must be 'min' or 'max', not {kind!r}")
        if layout.order is None:
            raise StateError(f"state {name!r} has no order column, so no extremes")
        probes = _conform(keys, layout.key_schema, name) if layout.key else pa.table({"_": [0]}).drop(["_"])
        return reads.extreme(spine.runs, layout, probes, kind)

    def scan(self, name: str) -> pa.Table:
        spine = self._get(name)
        return reads.scan(spine.runs, spine.layout).select(spine.layout.weighted_schema.names)

    def scan_chunks(self, name: str, rows: int) -> Iterator[pa.Table]:
        """The arrangement's runs as they are now, in slices of at most ``rows`` rows (run columns
        with ``_weight``; a row and its retraction in two runs are two rows here, so the slices add up to the
        arrangement's content only as a change does: a first computation in chunks, ``Engine``)."""
        spine = self._get(name)
        names = spine.layout.weighted_schema.names
        for run in spine.runs:
            for start in range(0, len(run), rows):
                yield run.table.slice(start, rows).select(names)

    def stored_rows(self, name: str) -> int:
        """The rows the arrangement's runs hold, before weights are added up across runs: ``count``'s estimate
        (exact for a bulk load's runs), without reading a row."""
        return sum(len(r) for r in self._get(name).runs)

    def is_empty(self, name: str) -> bool:
        return not self._get(name).runs

    def count(self, name: str) -> int:
        spine = self._get(name)
        if len(spine.runs) == 1:
            return len(spine.runs[0])
        return reads.scan(spine.runs, spine.layout).num_rows


# ---------------------------------------------------------------------- helpers
def _conform(table: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """``table``'s columns of ``schema``, cast to its types, floats normalised, one chunk each."""
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise StateError(f"input for state {name!r} lacks column(s) {missing}")
    table = table.select(schema.names)
    if table.schema != schema:
        try:
            table = table.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise StateError(f"input for state {name!r} does not fit its columns {schema}: {exc}") from None
    if WEIGHT in schema.names and table.column(WEIGHT).null_count:
        raise StateError(f"input for state {name!r} has NULL weights")
    return normalize_floats(table.combine_chunks())


def _check_types(name: str, layout: Layout) -> None:
    for f in layout.schema:
        try:
            hashing.canonical(pa.array([], f.type))
        except TypeError as exc:
            raise StateError(f"state {name!r}, column {f.name!r}: {exc}") from None
