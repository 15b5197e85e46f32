"""DeltaBatch: a consolidated set of weighted rows, as an Arrow table.

Consolidation sums the weights of equal rows and drops rows whose weight is
zero.  Five ``+1`` rows for the same group become one ``+5`` row.  Rows are
equal as in GROUP BY: NULL equals NULL, and floats compare after
normalisation (``-0.0`` is ``0.0``, every NaN is one NaN that equals itself).
``consolidate`` is the one implementation of these semantics; the state
store uses it too, passing the row hashes and the sort order it already has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra import hashing, parallel
from freshview.errors import DeltaError
from freshview.schema import WEIGHT

_POSITION = "_fv_position"
_GROUP = "_fv_group"


def consolidate(table: pa.Table, *, hashes: np.ndarray | None = None, order: np.ndarray | None = None,
                keep_zero: bool = False) -> pa.Table:
    """Sum the weights of equal rows and drop rows whose weight is 0 (kept with ``keep_zero``).

    Column order and types are kept.  Floats are normalised first (callers
    passing ``hashes`` have normalised them), then rows are grouped by value
    with Arrow's hash aggregation, in order of first appearance.

    A caller that already hashed its rows (any function of the row) passes
    ``hashes``, and ``order``, a permutation under which equal rows are
    adjacent, if it has one (the state store's runs are sorted by key hash
    and row hash); the result is then in that order.  Neighbours with equal
    hashes are compared exactly (``rows_equal_at``) and summed; only if two
    different rows share a hash are the rows grouped by value instead.
    """
    if table.num_rows == 0:
        return table
    columns = [c for c in table.column_names if c != WEIGHT]
    weight = np.asarray(table.column(WEIGHT), dtype=np.int64)
    if not columns:
        total = int(weight.sum())
        return pa.table({WEIGHT: pa.array([total] if total or keep_zero else [], pa.int64())})
    if hashes is None:
        # Rows hashed with numpy (``hashing``): far cheaper than a hash aggregation's plan per call on
        # the small tables of a step, and as fast on large ones.  Floats first made canonical.
        table = normalize_floats(table)
        try:
            hashes = hashing.hash_rows(table.select(columns).columns, length=table.num_rows)
        except TypeError:  # a type the hash does not know
            return _group_by_value(table, columns, keep_zero)
    perm = hashing.argsort(hashes) if order is None else order
    sorted_hashes = hashes[perm]
    same = sorted_hashes[1:] == sorted_hashes[:-1]
    candidates = np.flatnonzero(same)
    data = table.select(columns)
    if candidates.size:
        if not rows_equal_at(data, perm[candidates], perm[candidates + 1]).all():  # two rows share a hash
            return _group_stretches(table, perm, same, keep_zero, order is None)
    elif keep_zero or weight.all():  # every row distinct and nonzero: nothing to do
        return table if order is None else parallel.take(table, order)
    starts = np.flatnonzero(np.concatenate([[True], ~same]))
    totals = np.cumsum(weight[perm])
    sums = np.diff(totals[np.append(starts[1:], len(perm)) - 1], prepend=0)  # each group's weight
    firsts = perm[starts]
    if not keep_zero:
        nonzero = sums != 0
        firsts, sums = firsts[nonzero], sums[nonzero]
    if order is None:  # first appearance; a group's first rows are distinct positions, so scatter
        present = np.zeros(len(perm), dtype=bool)
        present[firsts] = True
        placed = np.zeros(len(perm), dtype=np.int64)
        placed[firsts] = sums
        firsts, sums = np.flatnonzero(present), placed[present]
    return _with_weights(parallel.take(data, firsts), sums, table.schema)


def group_ids(columns: list[pa.Array | pa.ChunkedArray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense group numbers of the rows of ``columns`` (equal rows, NULL equal NULL, one number) and each
    group's first row: grouping for key types Arrow's hash aggregation cannot key on (lists, intervals)."""
    if not columns:
        return np.zeros(n, np.int64), np.zeros(min(n, 1), np.int64)
    data = pa.table({f"c{i}": c for i, c in enumerate(columns)})
    hashes = hashing.hash_rows(data.columns)
    perm = hashing.argsort(hashes)
    same = hashes[perm][1:] == hashes[perm][:-1]
    candidates = np.flatnonzero(same)
    if candidates.size:
        equal = rows_equal_at(data, perm[candidates], perm[candidates + 1])
        if not equal.all():  # two different rows share a hash (rare): number the rows by value
            seen: dict = {}
            rows = list(zip(*[c.to_pylist() for c in data.columns]))
            ids = np.array([seen.setdefault(repr(r), len(seen)) for r in rows], np.int64)
            firsts = np.zeros(len(seen), np.int64)
            firsts[ids[::-1]] = np.arange(n)[::-1]
            return ids, firsts
    starts = np.concatenate([[True], ~same]) if n else np.zeros(0, bool)
    ids = np.empty(n, np.int64)
    ids[perm] = np.cumsum(starts) - 1
    return ids, perm[starts]


def equal_pairs(probe: Sequence[pa.Array | pa.ChunkedArray], stored: Sequence[pa.Array | pa.ChunkedArray],
                probe_rows: int, stored_rows: int, nulls_match: bool = True,
                hashes: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(i, j)`` of a probe row and a stored row whose key columns are equal, as two index
    arrays, probe rows in order and each one's stored rows in ascending order: rows hashed with
    ``hashing.hash_rows`` (the stored side sorted by hash, the probes searched in it), candidates with
    equal hashes compared exactly.  Values compare as in GROUP BY (NaN equals NaN, ``-0.0`` ``0.0``);
    NULL equals NULL, or with ``nulls_match=False`` a row with a NULL key matches nothing (SQL ``=``).
    Both sides' columns must have the same types; with no key columns every pair matches.  ``hashes``:
    the probe's and the stored rows' hashes, when the caller has them (any function of the key columns,
    the same on both sides: the state store's row hashes); not computed again."""
    if not probe_rows or not stored_rows:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    if not probe:
        return np.repeat(np.arange(probe_rows), stored_rows), np.tile(np.arange(stored_rows), probe_rows)
    probe_hash, stored_hash = hashes if hashes is not None else (hashing.hash_rows(probe), hashing.hash_rows(stored))
    order = hashing.argsort(stored_hash)
    sorted_hash = stored_hash[order]
    lo = np.searchsorted(sorted_hash, probe_hash, "left")
    counts = np.searchsorted(sorted_hash, probe_hash, "right") - lo
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    which = np.repeat(np.arange(probe_rows), counts)
    candidates = order[np.arange(total) - (np.cumsum(counts) - counts)[which] + lo[which]]
    equal = np.ones(total, dtype=bool)
    for p, s in zip(probe, stored):
        x = _canonical(p)
        equal &= hashing.values_equal(x, _canonical(s), which, candidates)
        if not nulls_match and x.valid is not None:
            equal &= x.valid[which]  # (a NULL stored key then equals no valid probe key either)
    return which[equal], candidates[equal]  # a probe's equal rows share a hash: stable-sorted, in stored order


def grouped(table: pa.Table, keys: list[str], aggs: list[tuple[str, str]]) -> pa.Table:
    """``table.group_by(keys).aggregate(aggs)`` (columns: the keys, then ``<column>_<op>``), also for keys
    Arrow's hash aggregation cannot key on (lists, intervals): those rows are grouped by dense group
    numbers (``group_ids``) and the keys taken from each group's first row."""
    if not any(pa.types.is_list(table.schema.field(k).type) or pa.types.is_large_list(table.schema.field(k).type)
               or pa.types.is_interval(table.schema.field(k).type) for k in keys):
        out = table.group_by(keys, use_threads=False).aggregate(aggs)
        return out.select(keys + [n for n in out.column_names if n not in keys])
    ids, firsts = group_ids([table.column(k) for k in keys], table.num_rows)
    numbered = table.drop_columns(keys).append_column("_fv_g", pa.array(ids, pa.int64()))
    out = numbered.group_by(["_fv_g"], use_threads=False).aggregate(aggs)
    at = np.asarray(out.column("_fv_g"), dtype=np.int64)
    key_rows = table.select(keys).take(pa.array(firsts[at], pa.int64()))
    names = [f"{c}_{op}" for c, op in aggs]
    return pa.Table.from_arrays(key_rows.columns + [out.column(n) for n in names], names=keys + names)


def _group_by_value(table: pa.Table, columns: list[str], keep_zero: bool) -> pa.Table:
    """Consolidate by grouping on ``columns`` with Arrow's hash aggregation (groups in order of appearance)."""
    grouped = table.group_by(columns, use_threads=False).aggregate([(WEIGHT, "sum")])
    grouped = grouped.rename_columns(columns + [WEIGHT])
    if not keep_zero:
        grouped = grouped.filter(pc.not_equal(grouped.column(WEIGHT), 0))
    return grouped.select(table.column_names).cast(table.schema)


def _group_stretches(table: pa.Table, perm: np.ndarray, same_hash: np.ndarray, keep_zero: bool,
                     by_appearance: bool) -> pa.Table:
    """Consolidate by value within each stretch of equal hashes along ``perm``, in ``perm``'s order
    (or by first appearance): the exact path for when different rows share a hash."""
    columns = [c for c in table.column_names if c != WEIGHT]
    keys = table.take(perm).select(columns + [WEIGHT])
    keys = keys.append_column(_GROUP, pa.array(np.cumsum(np.concatenate([[True], ~same_hash])), pa.int64()))
    keys = keys.append_column(_POSITION, pa.array(np.arange(len(perm)), pa.int64()))
    grouped = keys.group_by(columns + [_GROUP], use_threads=False).aggregate([(_POSITION, "min"), (WEIGHT, "sum")])
    positions = np.asarray(grouped.column(f"{_POSITION}_min"), dtype=np.int64)
    sums = np.asarray(grouped.column(f"{WEIGHT}_sum"), dtype=np.int64)
    if not keep_zero:
        positions, sums = positions[sums != 0], sums[sums != 0]
    firsts = perm[positions]
    ordered = np.argsort(firsts if by_appearance else positions)
    return _with_weights(table.select(columns).take(firsts[ordered]), sums[ordered], table.schema)


def _with_weights(data: pa.Table, weights: np.ndarray, schema: pa.Schema) -> pa.Table:
    out = data.append_column(pa.field(WEIGHT, pa.int64()), pa.array(weights, pa.int64()))
    return out.select(schema.names) if out.schema.names != schema.names else out


def normalize_floats(table: pa.Table) -> pa.Table:
    """Floats made canonical for equality and storage: ``-0.0`` becomes ``0.0``, every NaN the one NaN."""
    for i, field in enumerate(table.schema):
        if not pa.types.is_floating(field.type):
            continue
        col = table.column(i)
        values = col.to_numpy()  # NULL slots read as NaN: they only make the check below fire needlessly
        if np.isnan(values).any() or (np.signbit(values) & (values == 0)).any():
            col = pc.add(col, pa.scalar(0.0, field.type))
            col = pc.if_else(pc.is_nan(col), pa.scalar(float("nan"), field.type), col)
            table = table.set_column(i, field, col)
    return table


def rows_equal(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Row-by-row equality of two equally long tables of the same columns (NULL equals NULL, NaN NaN)."""
    everything = np.arange(a.num_rows)
    result = np.ones(a.num_rows, dtype=bool)
    for x, y in zip(a.columns, b.columns):
        result &= hashing.values_equal(_canonical(x), _canonical(y), everything, everything)
    return result


def rows_equal_at(table: pa.Table, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Whether row ``left[i]`` of ``table`` equals its row ``right[i]`` (NULL equals NULL, NaN NaN)."""
    if 4 * len(left) < table.num_rows:  # few pairs: compare copies of just those rows
        return rows_equal(table.take(left), table.take(right))
    result = np.ones(len(left), dtype=bool)
    for col in table.columns:
        view = _canonical(col)
        result &= hashing.values_equal(view, view, left, right)
    return result


def _canonical(col: pa.ChunkedArray | pa.Array) -> hashing.Canonical:
    if isinstance(col, pa.ChunkedArray):
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return hashing.canonical(col)


def negate(table: pa.Table) -> pa.Table:
    idx = table.column_names.index(WEIGHT)
    return table.set_column(idx, WEIGHT, pc.negate(table.column(WEIGHT)))


def with_unit_weight(data: Any) -> Any:
    """Rows given without ``_weight`` (Arrow or pandas) with ``_weight`` 1 each; others as they are."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data if WEIGHT in data.column_names else \
            data.append_column(WEIGHT, pa.array(np.ones(data.num_rows, np.int64)))
    if hasattr(data, "columns") and hasattr(data, "assign") and WEIGHT not in data.columns:
        return data.assign(**{WEIGHT: 1})  # a pandas DataFrame
    return data


def to_arrow_delta(data: Any, schema: pa.Schema) -> pa.Table:
    """Accept a pyarrow Table/RecordBatch or a pandas DataFrame and conform it to ``schema``.

    ``schema`` includes the ``_weight`` field.  Missing columns, extra
    columns and values that cannot be converted are reported by name.
    """
    if isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    elif isinstance(data, pa.Table):
        table = data
    else:
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover
            pd = None
        if pd is not None and isinstance(data, pd.DataFrame):
            table = pa.Table.from_pandas(data, preserve_index=False)
        else:
            raise DeltaError(
                f"a delta must be a pyarrow Table/RecordBatch or a pandas DataFrame, not {type(data).__name__}"
            )
    names = set(table.column_names)
    expected = [f.name for f in schema]
    missing = [n for n in expected if n not in names]
    if missing:
        raise DeltaError(f"delta lacks column(s) {', '.join(missing)} (expected {', '.join(expected)})")
    extra = [n for n in table.column_names if n not in set(expected)]
    if extra:
        raise DeltaError(f"delta has unknown column(s) {', '.join(extra)} (expected {', '.join(expected)})")
    arrays = []
    for field in schema:
        col = table.column(field.name)
        if col.type != field.type:
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise DeltaError(
                    f"column {field.name!r}: cannot convert {col.type} to {field.type}: {exc}"
                ) from None
        arrays.append(col)
    out = pa.Table.from_arrays(arrays, schema=schema)
    if out.column(WEIGHT).null_count:
        raise DeltaError(f"column {WEIGHT!r} must not contain NULL")
    return out


@dataclass
class DeltaBatch:
    """The changes of one relation in one step: columns plus ``_weight``, consolidated."""

    table: pa.Table
    step: int = 0

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self):
        return self.table.to_pandas()

    def inserts(self) -> pa.Table:
        """Rows with positive weight (weight kept)."""
        return self.table.filter(pc.greater(self.table.column(WEIGHT), 0))

    def deletes(self) -> pa.Table:
        """Rows with negative weight (weight kept)."""
        return self.table.filter(pc.less(self.table.column(WEIGHT), 0))

    def __repr__(self) -> str:
        return f"DeltaBatch(step={self.step}, rows={self.num_rows}, columns={self.table.column_names})"


def repeat_by_weight(table: pa.Table) -> pa.Table:
    """Each row of a consolidated table (with ``_weight``) repeated its weight's times (rows at weight ≤ 0 go)."""
    weights = table.column(WEIGHT).to_numpy()
    if len(weights) and (weights != 1).any():
        table = table.take(pa.array(np.repeat(np.arange(len(weights)), np.maximum(weights, 0))))
    return table


def ipc_bytes(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream (``pa.ipc.open_stream(data).read_all()`` reads it back)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()

