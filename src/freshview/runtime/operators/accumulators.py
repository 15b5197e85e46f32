"""Per-group accumulators of an incremental GROUP BY, merged and finalised with Arrow compute.

Pure functions over Arrow tables (no Spark, no state store): ``merge`` takes
the change's per-group partial sums, the groups' stored accumulators and the
probed MIN/MAX extremes, and returns the accumulator delta and the output
delta of ``aggregate``'s rule

    Δout(g) = −finalize(acc_old(g)) + finalize(acc_old(g) + Σ_Δ(g)).

No Python runs per row or per group: groups are matched by key with the
deterministic row hashes of ``freshview.algebra.hashing`` (exact equality
decides: NULL is a group, ``-0.0`` is ``0.0``, NaN equals NaN), and every
column is computed by Arrow kernels over all touched groups at once.

Tables (``n`` group columns, aggregates ``j``):

* partial, Σ_Δ per group: ``g0..g{n-1}`` (values, NULL a group), ``cnt``
  (Σ w), and per aggregate ``s{j}`` (Σ x·w, SUM/AVG) and ``n{j}`` (Σ w over
  non-NULL x, COUNT/SUM/AVG).  NULL partial values count as 0.
* accumulators: ``k{i}`` (the value, NULL replaced by ``null_default``),
  ``z{i}`` (is NULL), ``cnt``, then per aggregate the columns of
  ``AggSpec.acc`` (``s{j}``, ``n{j}``; ``m{j}``, the current extreme, for
  MIN/MAX; ``m{j}`` and ``mix{j}`` for a collation group's spelling).

A collation group's spelling (``spelling``, ``sql.collate_groups``) is MIN
of its members' spellings, kept without a multiset while the group has one
spelling (almost always): ``m`` is that spelling and ``mix`` is false, so
the group's multiset would be ``(m, cnt)``.  The change's partial carries the
least and greatest spelling it touched per group (``lo{j}``, ``hi{j}``,
rows of any weight).  A group stays single-spelled, ``m`` = ``lo``, when
``lo`` = ``hi`` and the group is new or single-spelled with ``m`` = ``lo``
(``spelling_slow`` is the complement).  Any other group is mixed from then
on (``mix`` true until it is empty): its multiset holds its rows, seeded
with ``(m, cnt)`` when it turns mixed, and ``m`` is the multiset's probed
MIN, as for MIN (``aggregate``).
* output: ``c0..`` (groups, then aggregates) and ``_weight``.

Accumulators add exactly (integers checked for overflow, decimals through
decimal256 and back, an overflow raising).  Finalising is PostgreSQL's:
COUNT(*) is ``cnt``, COUNT ``n``; SUM is ``s`` unless ``n`` is 0 (then NULL),
a numeric SUM rounded half away from zero to the result's scale; AVG is
``s / n`` (NULL when ``n`` is 0), float64 division for floats, and for
numerics the exact quotient rounded half away from zero to the result's
scale, computed with decimal256 integer arithmetic (Arrow's truncated
quotient, corrected and rounded by its remainder), so no column falls back
to Python.  That equals what the former per-row code computed (Python
``Decimal`` division to 60 significant digits, then quantised half-up): the
60-digit intermediate rounds differently only if it keeps ``k`` digits past
the result's scale with ``10^k <= n``; as ``n < 10^19``, ``k <= 18``, so the
result would have at least 42 digits, more than its type's 38 (both raise).

Two things differ from the former per-row code, both its bugs: a NaN group
finds its accumulators (a Python dict lookup missed it, NaN != NaN, and the
group was stored twice), and decimal sums are exact (Python's default
decimal context, 28 digits, rounded wider sums: 10^30 + 1 became 10^30).
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate
from freshview.runtime.operators.exact import (
    array as _array, as_integer as _as_integer, div_half_up as _div_half_up,
    with_scale as _with_scale,
)
from freshview.runtime.operators.group_keys import encode_keys, match_keys
from freshview.runtime.relation import conform
from freshview.schema import WEIGHT

_MORE_FUNCS = ("bool_and", "bool_or", "var_samp", "var_pop", "stddev_samp", "stddev_pop")  # see linear_aggs
_POSITION = "_fv_position"


@dataclass(frozen=True)
class AggSpec:
    """One aggregate: ``func`` (count_star, count, sum, avg, min, max; and those of ``linear_aggs``;
    string_agg finalises like min/max, from ``m``), its accumulator columns (name suffix, Arrow type)
    and its result type."""

    func: str
    acc: tuple[tuple[str, pa.DataType], ...]
    result: pa.DataType


@dataclass(frozen=True)
class GroupSpec:
    """An aggregate node's shape: group column types (accumulator keys), group output types, aggregates
    (immutable: its schemas are built once)."""

    group_types: tuple[pa.DataType, ...]
    group_results: tuple[pa.DataType, ...]
    aggs: tuple[AggSpec, ...]

    @property
    def is_global(self) -> bool:
        return not self.group_types

    @cached_property
    def key_schema(self) -> pa.Schema:
        n = len(self.group_types)
        return pa.schema([pa.field(f"k{i}", t) for i, t in enumerate(self.group_types)]
                         + [pa.field(f"z{i}", pa.bool_()) for i in range(n)])

    @cached_property
    def acc_schema(self) -> pa.Schema:
        fields = list(self.key_schema) + [pa.field("cnt", pa.int64())]
        for j, a in enumerate(self.aggs):
            fields += [pa.field(f"{suffix}{j}", t) for suffix, t in a.acc]
        return pa.schema(fields)

    @cached_property
    def out_schema(self) -> pa.Schema:
        types = list(self.group_results) + [a.result for a in self.aggs]
        return pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(types)] + [pa.field(WEIGHT, pa.int64())])

    @cached_property
    def partial_schema(self) -> pa.Schema:
        """The partial table's columns (``g*``, ``cnt``, ``s{j}``/``n{j}``; ``lo{j}``/``hi{j}`` of a spelling)."""
        fields = [pa.field(f"g{i}", t) for i, t in enumerate(self.group_types)] + [pa.field("cnt", pa.int64())]
        for j, a in enumerate(self.aggs):
            if a.func == "spelling":
                fields += [pa.field(f"lo{j}", a.result), pa.field(f"hi{j}", a.result)]
                continue
            fields += [pa.field(f"{suffix}{j}", t) for suffix, t in a.acc if suffix != "m"]
        return pa.schema(fields)


@dataclass(frozen=True)
class Touched:
    """The groups a step touches (one per row of ``partial``), aligned with their stored accumulators."""

    partial: pa.Table
    keys: list  # the partial's groups as accumulator key columns (``k*``, ``z*``), typed as stored
    old: pa.Table  # the stored rows found (``acc_schema``)
    old_idx: np.ndarray  # per touched group, its row in ``old`` or -1
    old_at: pa.Table  # per touched group, its stored row (NULLs where there is none)

    @property
    def has_old(self) -> np.ndarray:
        return self.old_idx >= 0

    @property
    def rows(self) -> int:
        return self.partial.num_rows


@dataclass(frozen=True)
class Spelled:
    """A spelling aggregate's step outside the rule for single-spelled groups: which touched groups
    are mixed (``slow``, aligned with ``Touched``) and their probed MIN spellings (``k*``, ``z*``,
    ``v``; a group left empty is absent)."""

    slow: np.ndarray
    probed: pa.Table | None


# ---------------------------------------------------------------------- merge
def merge(spec: GroupSpec, partial: pa.Table | None, old: "pa.Table | Touched",
          extremes: Sequence["pa.Table | Spelled"] | None) -> tuple[pa.Table, pa.Table]:
    """Apply Σ_Δ to the touched groups: ``(accumulator delta, output delta)``.

    ``partial``: Σ_Δ, one row per touched group (distinct groups), or None
    (a global aggregate's one group is then touched with nothing).  ``old``:
    the stored accumulator rows of those groups (``acc_schema``, extra
    columns such as ``_weight`` ignored); groups not in ``partial`` are left
    alone; or ``align(spec, partial, old)``, done once by a caller that
    needs it too.  ``extremes``: per aggregate with an ``m`` accumulator
    (MIN/MAX, string_agg, spelling), in aggregate order, the probed current
    extreme (or recomputed string_agg) of each group (key columns ``k*``/``z*``
    and ``v``; a group without non-NULL values is absent), a spelling's
    ``Spelled``, or None if the extremes were not probed (the old ``m{j}``
    then stays).

    A group's new accumulators are old + partial, column by column (a
    missing old row or NULL counts as 0).  The accumulator delta removes
    each old row (−1) and adds each new row (+1) unless its ``cnt`` is 0
    (a global aggregate's row always stays).  The output delta is
    ``−finalize(old)`` for old rows with ``cnt > 0`` (or global),
    ``+finalize(new)`` for new rows with ``cnt > 0`` (or global),
    consolidated.  Rows come group by group in ``partial``'s order.
    """
    acc_schema = spec.acc_schema
    acc_delta_schema = pa.schema(list(acc_schema) + [pa.field(WEIGHT, pa.int64())])
    touched = old if isinstance(old, Touched) else align(spec, partial, old)
    if touched is None:
        return acc_delta_schema.empty_table(), spec.out_schema.empty_table()
    partial, keys, old, old_idx, old_at = touched.partial, touched.keys, touched.old, touched.old_idx, touched.old_at
    rows, has_old = touched.rows, touched.has_old
    key_names = spec.key_schema.names

    new_cols: dict[str, pa.Array | pa.ChunkedArray] = dict(zip(key_names, keys))
    new_cols["cnt"] = _add(old_at.column("cnt"), _part(partial, "cnt", pa.int64()), pa.int64())
    probed = iter(extremes) if extremes is not None else None
    for j, a in enumerate(spec.aggs):
        for suffix, t in a.acc:
            name = f"{suffix}{j}"
            if suffix == "mix":
                continue  # with its m (below)
            if suffix != "m":
                new_cols[name] = _add(old_at.column(name), _part(partial, name, t), t)
            elif probed is None:
                new_cols[name] = old_at.column(name)
                if a.func == "spelling":
                    new_cols[f"mix{j}"] = old_at.column(f"mix{j}")
            elif a.func == "spelling":
                new_cols[name], new_cols[f"mix{j}"] = _spelling(spec, touched, j, t, next(probed))
            else:
                new_cols[name] = _probed(spec, keys, rows, next(probed), t)
    new = pa.Table.from_arrays([_cast(new_cols[f.name], f.type) for f in acc_schema], schema=acc_schema)

    old_rows = np.flatnonzero(has_old)
    gone = old.take(old_idx[old_rows])
    new_live = np.ones(rows, dtype=bool) if spec.is_global else _true(pc.greater(new.column("cnt"), 0))
    old_live = has_old if spec.is_global else has_old & _true(pc.greater(old_at.column("cnt"), 0))
    new_rows = np.flatnonzero(new_live)
    acc_delta = _interleave(_weighted(gone, -1), old_rows, _weighted(new.take(new_rows), 1), new_rows)

    shown = np.flatnonzero(old_live)
    out = _interleave(_weighted(finalize(spec, old_at.take(shown)), -1), shown,
                      _weighted(finalize(spec, new.take(new_rows)), 1), new_rows)
    return conform(acc_delta, acc_delta_schema), consolidate(conform(out, spec.out_schema))


def align(spec: GroupSpec, partial: pa.Table | None, old: pa.Table) -> Touched | None:
    """The touched groups of ``partial`` with their rows of ``old`` (see ``merge``); None when no group
    is touched (a global aggregate's one group always is)."""
    acc_schema = spec.acc_schema
    if partial is None or partial.num_rows == 0:
        if not spec.is_global:
            return None
        partial = pa.Table.from_arrays([pa.nulls(1, f.type) for f in spec.partial_schema],
                                       schema=spec.partial_schema)
    rows = partial.num_rows
    key_names = spec.key_schema.names
    keys = encode_keys([partial.column(f"g{i}") for i in range(len(spec.group_types))], spec.group_types)
    keys = [_cast(k, f.type) for k, f in zip(keys, spec.key_schema)]
    old = conform(old, acc_schema) if old.num_rows else acc_schema.empty_table()
    old_idx = match_keys(keys, [old.column(k) for k in key_names], rows, old.num_rows)
    old_at = old.take(pa.array(old_idx, pa.int64(), mask=old_idx < 0))  # NULL rows where there is none
    return Touched(partial, keys, old, old_idx, old_at)


def spelling_slow(touched: Touched, j: int) -> np.ndarray:
    """Per touched group, whether spelling aggregate ``j`` leaves the single-spelling rule (module
    docstring): the change touched two spellings, or one other than the group's, or the group is mixed."""
    lo, hi = touched.partial.column(f"lo{j}"), touched.partial.column(f"hi{j}")
    m, mix = touched.old_at.column(f"m{j}"), touched.old_at.column(f"mix{j}")
    single = _same(lo, hi)
    kept = ~_true(mix) & _same(lo, m)
    return ~(single & (~touched.has_old | kept))


def _same(a, b) -> np.ndarray:
    """``a IS NOT DISTINCT FROM b``, row by row."""
    return _true(pc.equal(a, b)) | (_true(pc.is_null(a)) & _true(pc.is_null(b)))


def _spelling(spec: GroupSpec, touched: Touched, j: int, t: pa.DataType, spelled: Spelled):
    """A spelling aggregate's new ``m`` and ``mix``: ``lo`` for single-spelled groups, the probed MIN
    for mixed ones."""
    lo = _cast(touched.partial.column(f"lo{j}"), t)
    slow = pa.array(spelled.slow, pa.bool_())
    if not spelled.slow.any() or spelled.probed is None:
        return lo, slow
    return pc.if_else(slow, _probed(spec, touched.keys, touched.rows, spelled.probed, t), lo), slow


def _probed(spec: GroupSpec, keys: list, rows: int, ext: pa.Table, t: pa.DataType):
    """Per group of ``keys`` (``rows`` of them), its value ``v`` in the probed table ``ext`` (NULL where absent)."""
    at = match_keys(keys, [_cast(ext.column(k), f.type) for k, f in zip(spec.key_schema.names, spec.key_schema)],
                    rows, ext.num_rows)
    return _cast(ext.column("v"), t).take(pa.array(at, pa.int64(), mask=at < 0))


def _part(partial: pa.Table, name: str, t: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if name in partial.column_names:
        return _cast(partial.column(name), t)
    return pa.nulls(partial.num_rows, t)


def _add(old: pa.Array | pa.ChunkedArray, part: pa.Array | pa.ChunkedArray, t: pa.DataType):
    """``coalesce(old, 0) + coalesce(part, 0)`` in type ``t`` (an overflow raises)."""
    if pa.types.is_decimal(t):
        wide = pa.decimal256(t.precision, t.scale)
        zero = pa.scalar(decimal.Decimal(0), wide)
        total = pc.add(pc.fill_null(old.cast(wide), zero), pc.fill_null(part.cast(wide), zero))
        return total.cast(t)
    zero = pa.scalar(0, t)
    add = pc.add if pa.types.is_floating(t) else pc.add_checked
    return add(pc.fill_null(old, zero), pc.fill_null(part, zero))


def _weighted(table: pa.Table, weight: int) -> pa.Table:
    return table.append_column(pa.field(WEIGHT, pa.int64()), pa.array(np.full(table.num_rows, weight, np.int64)))


def _interleave(removed: pa.Table, removed_at: np.ndarray, added: pa.Table, added_at: np.ndarray) -> pa.Table:
    """Both tables' rows ordered by group position, a group's removal before its addition."""
    both = pa.concat_tables([removed, added])
    order = np.argsort(np.concatenate([2 * removed_at, 2 * added_at + 1]), kind="stable")
    return both.take(order)


def _true(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(mask, False), dtype=bool)


def _cast(col, t: pa.DataType):
    return col if col.type == t else col.cast(t)


# ---------------------------------------------------------------------- finalize
def finalize(spec: GroupSpec, acc: pa.Table) -> pa.Table:
    """The output rows (``c0..``, no weight) of accumulator rows ``acc``."""
    ngroups = len(spec.group_types)
    cols = []
    for i, t in enumerate(spec.group_results):
        k = acc.column(f"k{i}")
        cols.append(_cast(pc.if_else(acc.column(f"z{i}"), pa.scalar(None, k.type), k), t))
    for j, a in enumerate(spec.aggs):
        if a.func in _MORE_FUNCS or any(suffix == "nan" for suffix, _ in a.acc):  # float SUM/AVG too
            from freshview.runtime.operators import linear_aggs

            col = linear_aggs.finalize(a.func, acc, j, a.result)
        elif a.func == "count_star":
            col = acc.column("cnt")
        elif a.func == "count":
            col = acc.column(f"n{j}")
        elif a.func == "sum":
            s = acc.column(f"s{j}")
            col = pc.if_else(pc.not_equal(acc.column(f"n{j}"), 0), s, pa.scalar(None, s.type))
            if pa.types.is_decimal(a.result) and pa.types.is_decimal(s.type) and a.result.scale < s.type.scale:
                col = _rescale_half_up(col, a.result)
        elif a.func == "avg":
            col = _avg(acc.column(f"s{j}"), acc.column(f"n{j}"), a.result)
        else:
            col = acc.column(f"m{j}")
        cols.append(_cast(col, a.result))
    names = [f"c{i}" for i in range(ngroups + len(spec.aggs))]
    return pa.Table.from_arrays(cols, names=names)


def _avg(s, n, result: pa.DataType):
    has = pc.not_equal(n, 0)
    if not pa.types.is_decimal(result):  # float: float64 division
        quotient = pc.divide(_cast(s, pa.float64()), n.cast(pa.float64(), safe=False))
        return pc.if_else(has, quotient, pa.scalar(None, pa.float64()))
    s, n = _array(s), _array(n)
    scale_s = s.type.scale if pa.types.is_decimal(s.type) else 0
    e = max(result.scale, scale_s)  # Q = round(s·10^e / (n·10^(e − scale))), e ≥ both scales
    den = _as_integer(pc.if_else(has, n, pa.scalar(1, n.type)), e - result.scale)  # n = 0 gives NULL below
    q = _div_half_up(_as_integer(s, e), den)
    q = pc.if_else(has, q, pa.scalar(None, q.type))
    return _with_scale(q, result.scale).cast(result)


def _rescale_half_up(x, result: pa.DataType):
    """Decimal ``x`` rounded half away from zero to ``result``'s (smaller) scale."""
    x = _array(x)
    shift = x.type.scale - result.scale
    den = _as_integer(pa.array(np.ones(len(x), np.int64)), shift)
    return _with_scale(_div_half_up(_as_integer(x, x.type.scale), den), result.scale).cast(result)
