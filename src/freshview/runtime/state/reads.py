"""Reading an arrangement held as a list of runs: lookup, extreme, scan, matching rows.

Every function takes the runs (oldest first) and the layout, and inputs
already conformed to the layout's types with floats normalised.  A row's
weight is the sum of its weights in all runs, so whatever is gathered from
several runs is consolidated before it is returned.  Hash equality only
proposes candidates; keys and rows are compared exactly.

``extreme`` does not read a whole group.  Within a key, a run is sorted by
the order column (NULLs last), so each run's first ``k`` non-NULL rows of a
key are its ``k`` smallest.  A value ``v`` is known completely when every run
either showed all its rows of the key or showed a row above ``v``; the
smallest completely known value whose row has a positive total weight is
the minimum.  Keys left undecided are retried with ``k`` four times larger,
all keys of a round at once.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra import hashing
from freshview.algebra.batch import consolidate, rows_equal_at
from freshview.runtime.state.layout import Layout, NullKeys
from freshview.runtime.state.runs import KEY_HASH, ROW_HASH, Run, expand, run_schema, uint64_column
from freshview.schema import WEIGHT

_PROBE = "_fv_probe"
_FIRST_WINDOW = 4  # rows per run and key that extreme reads first

__all__ = ["distinct_keys", "extreme", "lookup", "match_rows", "scan"]


def distinct_keys(keys: pa.Table, nulls: NullKeys, hashes: np.ndarray | None = None
                  ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The distinct probe keys that can match (NULL keys dropped under ``NullKeys.DISTINCT``), their
    hashes, and the permutation sorting the hashes.  ``hashes``: the keys' hashes, when the caller has
    them (the key-hash column of rows the store prepared); not computed again."""
    if nulls is NullKeys.DISTINCT and any(c.null_count for c in keys.columns):
        if hashes is not None:
            valid = np.ones(keys.num_rows, dtype=bool)
            for col in keys.columns:
                valid &= np.asarray(pc.is_valid(col))
            hashes = hashes[valid]
        keys = keys.drop_null()
    if hashes is None:
        hashes = hashing.hash_rows(keys.columns, length=keys.num_rows)
    perm = hashing.argsort(hashes)
    same = hashes[perm][1:] == hashes[perm][:-1]
    if not same.any():
        return keys, hashes, perm
    pairs = np.flatnonzero(same)
    if rows_equal_at(keys, perm[pairs], perm[pairs + 1]).all():
        firsts = perm[np.flatnonzero(np.concatenate([[True], ~same]))]
        return keys.take(firsts), hashes[firsts], np.arange(len(firsts))
    tagged = keys.append_column(KEY_HASH, pa.array(hashes, pa.uint64()))  # different keys share a hash
    tagged = tagged.append_column(WEIGHT, pa.array(np.ones(keys.num_rows, np.int64)))
    distinct = consolidate(tagged, hashes=hashes)
    hashes = uint64_column(distinct.column(KEY_HASH))
    return distinct.select(keys.column_names), hashes, hashing.argsort(hashes)


def lookup(runs: Sequence[Run], layout: Layout, keys: pa.Table, nulls: NullKeys | None = None,
           hashes: np.ndarray | None = None) -> pa.Table:
    """The consolidated rows whose key equals a row of ``keys`` (the run's columns: the layout's,
    ``_weight``, the key hash and the row hash); ``nulls`` overrides the layout's NULL semantics;
    ``hashes``: the keys' hashes, if the caller has them."""
    probes, hashes, by_hash = distinct_keys(keys, nulls or layout.nulls, hashes)
    sorted_hashes = hashes[by_hash]  # sorted probes make each run's search cache-friendly
    columns = run_schema(layout).names
    parts, probe_of = [], []
    for run in runs:
        lo, hi = run.ranges(sorted_hashes)
        counts = hi - lo
        if counts.any():
            idx, which = expand(lo, counts)
            whole = len(idx) == len(run) and np.array_equal(idx, np.arange(len(run)))  # a small run, all touched
            parts.append(run.table.select(columns) if whole else run.table.select(columns).take(idx))
            probe_of.append(by_hash[which])
    if not parts:
        return run_schema(layout).empty_table()
    found = pa.concat_tables(parts)
    match = _keys_match(found, layout.key, _views(probes), np.concatenate(probe_of))
    if not match.all():
        found = found.filter(match)
    return _sum_runs(found, len(parts) > 1)


def _sum_runs(rows: pa.Table, several: bool) -> pa.Table:
    """Consolidate rows gathered from runs (only rows from different runs can be equal)."""
    if not several or rows.num_rows < 2:
        return rows
    return consolidate(rows, hashes=uint64_column(rows.column(ROW_HASH)))


def scan(runs: Sequence[Run], layout: Layout) -> pa.Table:
    """Every row with a nonzero weight (run columns)."""
    if not runs:
        return run_schema(layout).empty_table()
    return _sum_runs(pa.concat_tables([r.table for r in runs]), len(runs) > 1)


def match_rows(rows: pa.Table, stored: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """For each row of ``rows``, the index of the equal row of ``stored`` (distinct rows), or -1."""
    found = np.full(rows.num_rows, -1, dtype=np.int64)
    if not stored.num_rows or not rows.num_rows:
        return found
    stored_hash = uint64_column(stored.column(ROW_HASH))
    order = hashing.argsort(stored_hash)
    sorted_hash = stored_hash[order]
    row_hash = uint64_column(rows.column(ROW_HASH))
    lo = np.searchsorted(sorted_hash, row_hash, "left")
    counts = np.searchsorted(sorted_hash, row_hash, "right") - lo
    idx, which = expand(lo, counts)
    candidates = order[idx]
    equal = np.ones(len(idx), dtype=bool)
    for c in columns:
        equal &= hashing.values_equal(_view(rows.column(c)), _view(stored.column(c)), which, candidates)
    found[which[equal]] = candidates[equal]
    return found


# ---------------------------------------------------------------------- extreme
def extreme(runs: Sequence[Run], layout: Layout, keys: pa.Table, kind: str) -> pa.Table:
    """Per distinct key of ``keys``: the min or max of ``layout.order`` over rows of positive weight."""
    assert layout.order is not None
    out_schema = pa.schema(list(layout.key_schema) + [layout.schema.field(layout.order)])
    probes, hashes, by_hash = distinct_keys(keys, layout.nulls)
    views = _views(probes)
    answered: list[np.ndarray] = []
    values: list[pa.ChunkedArray] = []
    todo = by_hash  # probes in hash order search runs faster
    window = _FIRST_WINDOW
    while todo.size and runs:
        done, found, todo = _extreme_round(runs, layout, views, hashes, todo, window, kind)
        answered.append(done)
        values.append(found)
        window *= 4
    if not answered:
        return out_schema.empty_table()
    which = np.concatenate(answered)
    found = pa.chunked_array([c for v in values for c in v.chunks], out_schema.field(layout.order).type)
    return pa.Table.from_arrays([probes.column(k).take(which) for k in layout.key] + [found], schema=out_schema)


def _extreme_round(runs: Sequence[Run], layout: Layout, views: list[hashing.Canonical], hashes: np.ndarray,
                   todo: np.ndarray, window: int, kind: str) -> tuple[np.ndarray, pa.ChunkedArray, np.ndarray]:
    """One round over probes ``todo`` reading ``window`` rows per run: (answered probes, their values, undecided)."""
    order = layout.order
    probe_hashes = hashes[todo]
    parts, probe_of, edges, edge_probes = [], [], [], []
    gathered = 0
    for run in runs:
        lo, hi = run.ranges(probe_hashes)
        nulls = run.null_rows(order)
        end = hi - (np.searchsorted(nulls, hi) - np.searchsorted(nulls, lo)) if nulls.size else hi
        start = lo if kind == "min" else np.maximum(end - window, lo)
        stop = np.minimum(lo + window, end) if kind == "min" else end
        counts = stop - start
        if not counts.any():
            continue
        idx, which = expand(start, counts)
        parts.append(run.table.take(idx))
        probe_of.append(which)
        # Windows that stop short of the key's last non-NULL row: their row nearest the rest bounds what is known.
        unseen = np.flatnonzero(counts < end - lo)
        last = np.cumsum(counts) - 1
        edges.append(gathered + (last[unseen] if kind == "min" else last[unseen] - counts[unseen] + 1))
        edge_probes.append(unseen)
        gathered += len(idx)
    limit = np.full(len(todo), np.iinfo(np.int64).max, dtype=np.int64)
    best = np.full(len(todo), -1, dtype=np.int64)
    empty = pa.chunked_array([], layout.schema.field(order).type)
    if not parts:
        return todo[:0], empty, todo[:0]
    rows = pa.concat_tables(parts)
    which = np.concatenate(probe_of)
    edge_rows, edge_probes = np.concatenate(edges), np.concatenate(edge_probes)
    rows = rows.append_column(_PROBE, pa.array(which, pa.int64()))
    match = _keys_match(rows, layout.key, views, todo[which])
    candidates = _sum_runs(rows if match.all() else rows.filter(match), len(parts) > 1)
    candidates = candidates.filter(pc.greater(candidates.column(WEIGHT), 0))
    ranks = _ranks([candidates.column(order), rows.column(order).take(edge_rows)], kind)
    n = candidates.num_rows
    np.minimum.at(limit, edge_probes, ranks[n:])
    probe = np.asarray(candidates.column(_PROBE), dtype=np.int64)
    rank = ranks[:n]
    accepted = np.flatnonzero(rank < limit[probe])
    by_probe = accepted[np.lexsort((-rank[accepted], probe[accepted]))]
    best[probe[by_probe]] = by_probe  # the last write per probe wins: its smallest rank
    answered = np.flatnonzero(best >= 0)
    found = candidates.column(order).take(best[answered]) if answered.size else empty
    undecided = np.flatnonzero((best < 0) & (limit < np.iinfo(np.int64).max))
    return todo[answered], found, todo[undecided]


def _ranks(columns: list[pa.ChunkedArray], kind: str) -> np.ndarray:
    """Dense ranks of all values in SQL order (NaN above numbers), negated for max so smaller is better."""
    values = pa.chunked_array([c for col in columns for c in col.chunks], columns[0].type).combine_chunks()
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    ranks = np.asarray(pc.rank(values, sort_keys="ascending", tiebreaker="dense"), dtype=np.int64)
    return ranks if kind == "min" else -ranks


# ---------------------------------------------------------------------- helpers
def _views(table: pa.Table) -> list[hashing.Canonical]:
    return [_view(c) for c in table.columns]


def _view(col: pa.ChunkedArray) -> hashing.Canonical:
    return hashing.canonical(col.chunk(0) if col.num_chunks == 1 else col.combine_chunks())


def _keys_match(part: pa.Table, key: Sequence[str], probe_views: list[hashing.Canonical],
                probe_of: np.ndarray) -> np.ndarray:
    """Whether each gathered row's key equals its probe's key exactly (hashes only proposed it)."""
    rows = np.arange(part.num_rows)
    match = np.ones(part.num_rows, dtype=bool)
    for name, view in zip(key, probe_views):
        match &= hashing.values_equal(_view(part.column(name)), view, rows, probe_of)
    return match
