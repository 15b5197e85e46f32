"""Immutable sorted runs: building, merging and searching the pieces of an arrangement.

A run is one Arrow table holding a consolidated batch of an arrangement's
rows: the layout's columns, ``_weight``, and two uint64 columns the store
computes, ``_fv_key`` (the key hash: ``hashing.hash_rows`` of the key
columns in key order) and ``_fv_row`` (the row hash: the value columns
hashed with the key hash as seed).  Rows are sorted by (key hash, order
column ascending with NULLs last, row hash); each distinct row appears once,
with a nonzero weight.  An arrangement is a list of runs whose weights add up
(``spine``), so a run never changes once built: a write builds a new run, a
merge builds one run from several.

Finding a key's rows is a search of the key-hash column.  Small runs use
``np.searchsorted``; runs of ``INDEX_MIN_ROWS`` or more build an index once
(``Run.index``): their distinct key hashes, bucketed by top bits about two
to a bucket, so a probe reads a few cache lines of a memory-mapped run
instead of a binary search's ~25 misses, whatever the run's size.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra import hashing, parallel
from freshview.algebra.batch import consolidate
from freshview.runtime.state.layout import KEY_HASH, ROW_HASH, Layout
from freshview.schema import WEIGHT

INDEX_MIN_ROWS = 1 << 19  # runs at least this long get an index (below, searchsorted is as fast)
_KEYS_PER_BUCKET = 2
_SCAN_KEYS = 8  # buckets of up to this many keys are read whole; longer ones are searched

__all__ = ["INDEX_MIN_ROWS", "KEY_HASH", "ROW_HASH", "Run", "build_run", "expand", "merge_runs", "run_schema",
           "sort_run", "uint64_column", "with_hashes"]


def run_schema(layout: Layout) -> pa.Schema:
    """The columns of a run of ``layout`` (``Layout.run_schema``, built once per layout)."""
    return layout.run_schema


class Run:
    """One immutable, sorted, consolidated batch of rows (see the module docstring).

    ``path`` names the file the run is stored in (its table is then memory
    mapped), None while it lives only in memory.  ``attach`` swaps the
    in-memory table for the file's identical one.
    """

    __slots__ = ("table", "key_hash", "row_hash", "path", "nbytes", "_index", "_null_rows")

    def __init__(self, table: pa.Table, path: str | None = None) -> None:
        self.table = table
        self.nbytes = table.nbytes
        self.key_hash = uint64_column(table.column(KEY_HASH))
        self.row_hash = uint64_column(table.column(ROW_HASH))
        self.path = path
        self._index: tuple[np.ndarray, np.ndarray | None, int, np.ndarray] | None = None
        self._null_rows: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return self.table.num_rows

    def attach(self, table: pa.Table, path: str) -> None:
        """Back this run by ``table`` read from ``path`` (the same rows, memory mapped)."""
        self.table = table
        self.key_hash = uint64_column(table.column(KEY_HASH))
        self.row_hash = uint64_column(table.column(ROW_HASH))
        self.path = path

    def ranges(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each probe hash, the rows ``[lo, hi)`` whose key hash equals it."""
        kh = self.key_hash
        if len(kh) < INDEX_MIN_ROWS:
            return np.searchsorted(kh, hashes, "left"), np.searchsorted(kh, hashes, "right")
        keys, offsets, shift, starts = self.index()
        bucket = (hashes >> np.uint64(shift)).astype(np.intp)
        first, end = starts[bucket].astype(np.intp), starts[bucket + 1].astype(np.intp)
        # A bucket holds about two keys: read them all at once and count the smaller and equal hashes.
        width = min(int((end - first).max(initial=0)), _SCAN_KEYS)
        idx = first[:, None] + np.arange(width)
        inside = idx < end[:, None]
        values = keys[np.minimum(idx, len(keys) - 1)]
        probe = hashes[:, None]
        lo = first + ((values < probe) & inside).sum(axis=1)
        hi = first + ((values <= probe) & inside).sum(axis=1)
        long = np.flatnonzero(end - first > _SCAN_KEYS)  # rare: binary search the rest
        if long.size:
            lo[long] = _bisect(keys, hashes[long], first[long], end[long], right=False)
            hi[long] = _bisect(keys, hashes[long], lo[long], end[long], right=True)
        return (lo, hi) if offsets is None else (offsets[lo], offsets[hi])

    def index(self) -> tuple[np.ndarray, np.ndarray | None, int, np.ndarray]:
        """The search index (cached): distinct key hashes (and where each one's rows start, when keys
        have several rows), and a directory of hash buckets over them: the keys of bucket
        ``b = hash >> shift`` are ``starts[b] .. starts[b + 1]``."""
        if self._index is None:
            keys, offsets = self.key_hash, None
            new_key = np.flatnonzero(keys[1:] != keys[:-1]) + 1
            if 2 * len(new_key) < len(keys):
                offsets = np.concatenate([[0], new_key, [len(keys)]])
                keys = keys[offsets[:-1]]
            bits = max(1, (len(keys) // _KEYS_PER_BUCKET).bit_length())
            counts = np.bincount((keys >> np.uint64(64 - bits)).astype(np.intp), minlength=1 << bits)
            starts = np.zeros(len(counts) + 1, dtype=np.int32 if len(keys) < 2**31 else np.int64)
            np.cumsum(counts, out=starts[1:])
            self._index = (keys, offsets, 64 - bits, starts)
        return self._index

    def null_rows(self, column: str) -> np.ndarray:
        """Sorted positions of the rows whose ``column`` is NULL (cached)."""
        found = self._null_rows.get(column)
        if found is None:
            col = self.table.column(column)
            found = np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False)) if col.null_count \
                else np.zeros(0, np.intp)
            self._null_rows[column] = found
        return found


def uint64_column(col: pa.ChunkedArray) -> np.ndarray:
    """A uint64 column without NULLs as numpy (zero-copy when it is one chunk)."""
    arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return np.frombuffer(arr.buffers()[1], dtype=np.uint64, count=len(arr), offset=arr.offset * 8)


def _bisect(kh: np.ndarray, hashes: np.ndarray, lo: np.ndarray, hi: np.ndarray, right: bool) -> np.ndarray:
    """Vectorised binary search in ``[lo, hi)``: the first row with key hash ``>= hash`` (``> hash`` if right)."""
    lo, hi = lo.copy(), hi.copy()
    last = len(kh) - 1
    for _ in range(int((hi - lo).max(initial=0)).bit_length()):
        mid = (lo + hi) >> 1
        values = kh[np.minimum(mid, last)]
        go = (values <= hashes) if right else (values < hashes)
        go &= lo < hi
        np.copyto(lo, mid + 1, where=go)
        np.copyto(hi, mid, where=~go & (lo < hi))
    return lo


def expand(lo: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the ranges ``[lo, lo + counts)`` one after another, and each index's range number."""
    total = int(counts.sum())
    firsts = np.cumsum(counts) - counts
    which = np.repeat(np.arange(len(counts)), counts)
    return np.arange(total) - firsts[which] + lo[which], which


# ---------------------------------------------------------------------- building and merging
def build_run(rows: pa.Table, layout: Layout) -> Run | None:
    """The run of ``rows`` (the layout's columns and ``_weight``, floats normalised): hashed, sorted,
    consolidated; None if nothing is left.  Distinct keys with positive weights (a first load, say)
    cost one sort and no grouping."""
    return sort_run(with_hashes(rows, layout), layout)


def with_hashes(rows: pa.Table, layout: Layout) -> pa.Table:
    """``rows`` in run column order with the key-hash and row-hash columns appended."""
    rows = rows.select(layout.weighted_schema.names)
    key_hash = hashing.hash_rows([rows.column(k) for k in layout.key], length=rows.num_rows)
    row_hash = hashing.hash_rows([rows.column(v) for v in layout.values], seed=key_hash, first=len(layout.key))
    return rows.append_column(KEY_HASH, pa.array(key_hash, pa.uint64())) \
        .append_column(ROW_HASH, pa.array(row_hash, pa.uint64()))


def sort_run(table: pa.Table, layout: Layout, consolidated: bool = False,
             run_lengths: list[int] | None = None) -> Run | None:
    """Sort a table of run columns and sum equal rows into a run (None when nothing is left).

    ``consolidated``: the rows are distinct already (only zero weights are
    dropped).  ``run_lengths``: the table is these sorted runs one after
    another (a merge).
    """
    if table.num_rows == 0:
        return None
    kh, rh = uint64_column(table.column(KEY_HASH)), uint64_column(table.column(ROW_HASH))
    order_col = table.column(layout.order) if layout.order else None
    perm = sort_order(kh, rh, order_col, run_lengths)
    if consolidated:
        out = parallel.take(table, perm)
        weight = out.column(WEIGHT)
        if pc.any(pc.equal(weight, 0)).as_py():
            out = out.filter(pc.not_equal(weight, 0))
    else:
        out = consolidate(table, hashes=rh, order=perm)
    return Run(out.combine_chunks()) if out.num_rows else None


def merge_runs(runs: list[Run], layout: Layout) -> Run | None:
    """One run with the rows of ``runs`` added up (None when everything cancelled)."""
    table = pa.concat_tables([r.table for r in runs]).combine_chunks()
    return sort_run(table, layout, run_lengths=[len(r) for r in runs])


def sort_order(kh: np.ndarray, rh: np.ndarray, order: pa.ChunkedArray | None = None,
               run_lengths: list[int] | None = None) -> np.ndarray:
    """The permutation sorting rows by (key hash, ``order`` ascending with NULLs last, row hash).

    Rows are sorted by key hash first; then only rows sharing their key hash
    with another row are sorted by the rest.  ``run_lengths``: the rows are
    sorted runs of these lengths one after another (a merge), so the first
    sort is a linear merge and a key's rows need sorting again only when
    they come from several runs.
    """
    perm = hashing.argsort(kh, presorted=run_lengths is not None)
    sorted_kh = kh[perm]
    tie = sorted_kh[1:] == sorted_kh[:-1]
    if run_lengths is not None and tie.any():  # keys whose rows all come from one run are in order already
        source = np.repeat(np.arange(len(run_lengths)), run_lengths)[perm]
        group = np.cumsum(np.concatenate([[0], ~tie]))
        mixed = np.zeros(group[-1] + 1, dtype=bool)
        mixed[group[1:][tie & (source[1:] != source[:-1])]] = True
        tie &= mixed[group[1:]]
    if not tie.any():
        return perm
    grouped = np.zeros(len(perm), dtype=bool)
    grouped[1:] |= tie
    grouped[:-1] |= tie
    pos = np.flatnonzero(grouped)
    sub = perm[pos]
    inner = hashing.argsort(rh[sub])  # least significant first; each later pass is stable
    if order is not None:
        inner = inner[_value_order(order.take(sub[inner]))]
    inner = inner[hashing.argsort(kh[sub[inner]])]
    perm[pos] = sub[inner]
    return perm


_SIGN = np.uint64(1 << 63)


def _value_order(values: pa.ChunkedArray) -> np.ndarray:
    """A stable argsort of values in SQL order: numbers by value, NaN above them, strings by bytes, NULLs last."""
    arr = values.combine_chunks()
    view = hashing.canonical(arr)
    if view.words is None:  # strings (by UTF-8 bytes, which is Arrow's order), or the null type
        return np.asarray(pc.sort_indices(arr), dtype=np.intp)
    words = view.words
    if words.ndim == 2:  # decimal128: the low word, then the high word as a signed number
        passes = [words[:, 0], words[:, 1] ^ _SIGN]
    elif pa.types.is_floating(arr.type):  # IEEE words made monotonic: negatives flipped, positives above
        passes = [np.where(words >> np.uint64(63) != 0, ~words, words | _SIGN)]
    elif pa.types.is_unsigned_integer(arr.type):
        passes = [words]
    else:  # signed integers, booleans, dates, times, timestamps, durations
        passes = [words ^ _SIGN]
    if view.valid is not None:
        passes.append(~view.valid)  # NULLs last
    perm = np.arange(len(arr))
    for keys in passes:
        perm = perm[hashing.argsort(keys[perm].astype(np.uint64))]
    return perm
