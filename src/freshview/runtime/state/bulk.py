"""Bulk loading: an empty arrangement filled from batches as sorted runs, and the keys it holds twice.

A snapshot of a table arrives as many batches of new rows.  Applied one step
at a time, each batch would be looked up (to find the rows it replaces),
checked and merged into the spine; filled in bulk, each group of batches is
hashed, sorted and consolidated into one run (``runs.build_run``, the run
format of every other write) and appended as it is, with no lookups: an
empty arrangement has nothing to find.  ``regroup`` gathers small batches into
runs of ``RUN_ROWS`` rows, so memory holds one run being built; the store
writes each large run to its own file at once (``SpineStateStore.load_runs``)
and, for a load of up to ``MERGE_ROWS`` rows, merges the runs into one before
the commit (a linear merge: each is sorted), so the first computation scans one
run and later lookups search one; a larger load is left to the background
merger, as any spine is.

The two ends overlap (``ahead``): while a helper thread builds and writes one
run, the caller's thread takes in the next group of batches (the snapshot
read, its conversion and checks), so memory holds two groups; the build's own
hashing, sorting and reordering are split over threads too
(``freshview.algebra.parallel``).

What a step's checks did batch by batch, ``repeated`` does once for the whole
load: the key hashes of every run, sorted together (each run's are sorted
already), propose the keys that may hold more than one row; only those rows
are read from the runs and grouped by their key values (hashes only propose).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.runtime.state.layout import Layout
from freshview.runtime.state.runs import Run, expand
from freshview.schema import WEIGHT

RUN_ROWS = 1 << 20  # a bulk load's batches are gathered into runs of about this many rows

MERGE_ROWS = 1 << 24  # a load of up to this many rows ends as one run (more: the background merger merges them)

_T = TypeVar("_T")
_R = TypeVar("_R")

__all__ = ["MERGE_ROWS", "RUN_ROWS", "ahead", "merge_now", "regroup", "repeated"]


def merge_now(sizes: Sequence[int], limit: int | None = None) -> bool:
    """Whether a bulk load's runs of ``sizes`` are merged into one before its commit: several, and at
    most ``limit`` rows in all (the merge holds its output in memory once; each run is sorted already,
    so it is a linear merge)."""
    return len(sizes) > 1 and sum(sizes) <= (MERGE_ROWS if limit is None else limit)


def ahead(fn: Callable[[_T], _R], items: Iterable[_T]) -> Iterator[_R]:
    """``fn(x)`` for each of ``items``, in order, each computed on a helper thread while this thread
    takes the next item from ``items`` (one result computed ahead).  An exception from either side is
    raised here, once the helper has finished what it was doing."""
    with ThreadPoolExecutor(1, thread_name_prefix="freshview-bulk") as helper:
        pending: Future[_R] | None = None
        try:
            for item in items:
                following = helper.submit(fn, item)
                if pending is not None:
                    yield pending.result()
                pending = following
            if pending is not None:
                result, pending = pending.result(), None
                yield result
        finally:
            if pending is not None:
                pending.cancel()


def regroup(batches: Iterable[pa.Table], rows: int | None = None) -> Iterator[pa.Table]:
    """``batches`` (one schema) gathered into tables of at least ``rows`` rows (the last may be fewer);
    a batch is never split, and only the batches of one table are held at a time."""
    rows = RUN_ROWS if rows is None else rows
    held: list[pa.Table] = []
    count = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield held[0] if len(held) == 1 else pa.concat_tables(held)
            held, count = [], 0
    if held:
        yield held[0] if len(held) == 1 else pa.concat_tables(held)


def repeated(runs: Sequence[Run], layout: Layout) -> pa.Table:
    """The keys (``layout.key_schema`` + ``_weight``: their rows' weights summed) held by more than one
    row, or by a row of weight above 1, over all ``runs`` together; NULL keys compare equal here.  Costs
    one sort of the runs' key hashes; only the rows whose key hash repeats are read and grouped by their
    key values (usually none)."""
    key = list(layout.key)
    empty = pa.schema(list(layout.key_schema) + [pa.field(WEIGHT, pa.int64())]).empty_table()
    if not runs:
        return empty
    hashes = np.sort(np.concatenate([r.key_hash for r in runs]), kind="stable")  # sorted pieces: a merge
    repeats = hashes[1:][hashes[1:] == hashes[:-1]]
    heavy = [r.key_hash[np.asarray(pc.greater(r.table.column(WEIGHT), 1))] for r in runs]
    candidates = np.unique(np.concatenate([repeats] + heavy))
    if not len(candidates):
        return empty
    parts = []
    for run in runs:  # every row whose key hash is a candidate's (an equal hash proposes; the values decide)
        lo = np.searchsorted(run.key_hash, candidates, "left")
        idx, _ = expand(lo, np.searchsorted(run.key_hash, candidates, "right") - lo)
        if len(idx):
            parts.append(run.table.select(key + [WEIGHT]).take(pa.array(idx)))
    counted = pa.concat_tables(parts).group_by(key, use_threads=False).aggregate([(WEIGHT, "sum")])
    many = counted.filter(pc.greater(counted.column(f"{WEIGHT}_sum"), 1))
    return many.rename_columns(key + [WEIGHT]).cast(empty.schema)
