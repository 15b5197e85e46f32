"""Top-k (ORDER BY … LIMIT/OFFSET) and window functions: one "per-partition recompute" operator.

Delta rule.  The operator keeps its input integrated, ``I``, in an
arrangement keyed by the partition columns (``NullKeys.EQUAL``: a NULL
partition is a partition; no PARTITION BY, and top-k: one partition).  For a
change ``Δ`` touching partitions ``P`` (the distinct partition keys of ``Δ``):

    old = I[P]                 (lookup, before the change is applied)
    new = old + Δ              (consolidated; I += Δ is applied)
    Δout = f(new) − f(old)

where ``f`` is the non-incremental function of one partition's rows: for
``TopK`` the rows at positions ``offset+1 .. offset+limit`` in the sort
order, for ``Window`` every row with its window columns appended.  As ``f``
acts on each partition alone, ``f(I + Δ) − f(I) = f(new) − f(old)`` exactly:
the rule is exact by construction, whatever ``f`` is.

Cost.  A step reads and recomputes the touched partitions whole:
O(size of touched partitions · log) time and a lookup of their rows, plus
O(|Δ|) to apply the change; untouched partitions cost nothing.  Top-k and a
window without PARTITION BY have one partition, the whole input.  Top-k
avoids reading it when it can: it also keeps its current result (at most
``offset + limit`` rows) and, when every changed row sorts strictly after
the last row of that result (and the result is full), the output cannot
change, so the step only applies the change (O(k + |Δ|)).  Otherwise it
reads the whole input (O(|I|)).

``f`` runs in-process on Arrow and numpy for both executors (the Spark
kernels hand the change over as Arrow): rows are sorted once by (partition,
ORDER BY keys, tie-break), each column turned into dense integer sort codes
by Arrow's ``rank`` (no Python per row), then ranks and frames are index
arithmetic.  Duplicate rows (weight > 1) are expanded into copies first:
ROW_NUMBER gives each copy its own number, as PostgreSQL does.

Tie rule, where ORDER BY is not a total order: rows equal in every ORDER BY
key are ordered by all their input columns, left to right, ascending with
NULLs last.  Rows equal in every column are indistinguishable in the output,
so the result is deterministic.  Sort order is PostgreSQL's: NULLS LAST for
ASC and FIRST for DESC unless given, NaN above every number, strings by
UTF-8 bytes (the C collation), false < true.

PostgreSQL semantics of the functions: ROW_NUMBER, RANK (1 + rows before
the peer group), DENSE_RANK (peer groups so far) and COUNT are bigint;
NTILE(n) gives the first ``N mod n`` buckets one row more; LAG/LEAD read the
row ``n`` before/after within the partition, else the default (NULL when
absent); FIRST_VALUE/LAST_VALUE the first/last row of the frame;
COUNT/SUM/AVG/MIN/MAX over the frame ignore NULLs, SUM/AVG/MIN/MAX over a
frame without a non-NULL value are NULL and COUNT 0; SUM(int2/int4) is
bigint, SUM(int8) and AVG of integers numeric (AVG to 16 decimal places,
rounded half away from zero).  Frames: ROWS with UNBOUNDED/n
PRECEDING/FOLLOWING and CURRENT ROW; RANGE with UNBOUNDED, CURRENT ROW (the
row's peers) and offsets over one numeric ORDER BY key (rows whose key is
within the offset, found by binary search per partition; exact for integers
and numerics; NULL keys compare by their sort position, as in PostgreSQL: a
NULL row's frame is its NULL peers); the default frame is RANGE BETWEEN
UNBOUNDED PRECEDING AND CURRENT ROW, so without ORDER BY the whole partition.
"""

from __future__ import annotations

import decimal
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate, negate
from freshview.errors import ExecutionError
from freshview.plan import nodes as pn
from freshview.runtime.kernels import Kernels, Rel
from freshview.runtime.relation import arrow_schema
from freshview.runtime.state.layout import Layout, NullKeys
from freshview.schema import WEIGHT

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

# ---------------------------------------------------------------------- sort codes


def sort_codes(col: pa.Array | pa.ChunkedArray, descending: bool = False, nulls_first: bool = False) -> np.ndarray:
    """Dense int64 codes whose ascending order is ``col``'s SQL order in the direction given."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    if n == 0:
        return np.zeros(0, np.int64)
    if pa.types.is_null(col.type):
        return np.zeros(n, np.int64)
    if pa.types.is_floating(col.type):  # -0.0 is 0.0 (rank already ties them); NaN above all numbers
        col = pc.if_else(pc.equal(col, 0.0), pa.scalar(0.0, col.type), col)
    if pa.types.is_interval(col.type):
        codes = _interval_codes(col)
    elif pa.types.is_list(col.type):
        codes = _list_codes(col)
    else:
        codes = np.asarray(pc.rank(col, sort_keys="ascending", tiebreaker="dense")).astype(np.int64)
    valid = np.asarray(col.is_valid()).astype(bool) if col.null_count else np.ones(n, bool)
    if descending:
        codes = -codes
    if not valid.all():
        live = codes[valid]
        if nulls_first:
            codes[~valid] = (live.min() if live.size else 0) - 1
        else:
            codes[~valid] = (live.max() if live.size else 0) + 1
    return codes


def _interval_codes(col: pa.Array) -> np.ndarray:
    """Dense codes of intervals in PostgreSQL's order: by months·30 days + days + time (Python per row:
    Arrow has no comparison of intervals)."""
    day = 86_400 * 10**9
    spans = [0 if v is None else (v.months * 30 + v.days) * day + v.nanoseconds for v in col.to_pylist()]
    distinct = {v: i for i, v in enumerate(sorted(set(spans)))}
    return np.array([distinct[v] + 1 for v in spans], np.int64)


def _list_codes(col: pa.Array) -> np.ndarray:
    """Dense codes of arrays in PostgreSQL's order (element by element, a NULL element above every value,
    NaN above every number, then the shorter first; Python per row, as Arrow cannot sort lists)."""
    def element(x):
        nan = isinstance(x, float) and x != x
        return (x is None, nan, 0 if x is None or nan else x)
    keys = [() if v is None else tuple(element(x) for x in v) for v in col.to_pylist()]
    distinct = {v: i for i, v in enumerate(sorted(set(keys)))}
    return np.array([distinct[v] + 1 for v in keys], np.int64)


def sort_order(table: pa.Table, keys: Sequence[pn.SortKey], lead: Sequence[np.ndarray] = ()) -> np.ndarray:
    """The permutation sorting ``table`` by ``lead`` codes, then ``keys``, then the tie rule (every column
    ascending, NULLs last)."""
    codes = list(lead)
    codes += [sort_codes(table.column(k.column), k.descending, k.nulls_go_first) for k in keys]
    codes += [sort_codes(table.column(i)) for i in range(table.num_columns)]
    if table.num_rows == 0 or not codes:
        return np.arange(table.num_rows)
    return np.lexsort(codes[::-1])


def _changes(codes: Sequence[np.ndarray], n: int) -> np.ndarray:
    """True where a row differs from the previous one in any of ``codes`` (and at row 0)."""
    out = np.zeros(n, bool)
    if n:
        out[0] = True
    for c in codes:
        out[1:] |= c[1:] != c[:-1]
    return out


def _starts(change: np.ndarray) -> np.ndarray:
    """Index of the first row of each row's run (runs start where ``change``)."""
    idx = np.where(change, np.arange(len(change)), 0)
    return np.maximum.accumulate(idx) if len(idx) else idx


def _ends(change: np.ndarray) -> np.ndarray:
    """Exclusive end index of each row's run."""
    n = len(change)
    firsts = np.flatnonzero(change)
    run = np.cumsum(change) - 1
    ends = np.append(firsts[1:], n)
    return ends[run]


# ---------------------------------------------------------------------- f: top-k


def topk_rows(node: pn.TopK, rows: pa.Table) -> pa.Table:
    """The rows (c*, ``_weight`` the copies kept) at positions offset+1 .. offset+limit of consolidated
    ``rows`` (positive weights) in ``node``'s order."""
    data = rows.drop_columns([WEIGHT])
    perm = sort_order(data, node.order)
    w = np.asarray(rows.column(WEIGHT), np.int64)[perm]
    end = np.cumsum(w)
    begin = end - w
    lo = node.offset
    hi = np.iinfo(np.int64).max if node.limit is None else node.offset + node.limit
    kept = np.clip(np.minimum(end, hi) - np.maximum(begin, lo), 0, None)
    take = kept > 0
    out = rows.take(pa.array(perm[take]))
    return out.set_column(out.num_columns - 1, WEIGHT, pa.array(kept[take], pa.int64()))


# ---------------------------------------------------------------------- f: window


def window_rows(node: pn.Window, rows: pa.Table) -> pa.Table:
    """Every row of consolidated ``rows`` (positive weights; a row of weight w as w copies) with its
    window columns appended, each copy weight 1 (not consolidated)."""
    out_schema = arrow_schema(node.columns)
    weights = np.asarray(rows.column(WEIGHT), np.int64)
    data = rows.drop_columns([WEIGHT])
    if data.num_rows:
        data = data.take(pa.array(np.repeat(np.arange(data.num_rows), weights)))
    n = data.num_rows
    part_codes = [sort_codes(data.column(c)) for c in node.partition]
    perm = sort_order(data, node.order, part_codes)
    data = data.take(pa.array(perm))
    part_codes = [c[perm] for c in part_codes]
    order_codes = [sort_codes(data.column(k.column), k.descending, k.nulls_go_first) for k in node.order]
    part_change = _changes(part_codes, n)
    peer_change = part_change | _changes(order_codes, n)
    g = _Geometry(part_change, peer_change)
    if node.order:
        g.range_key = (data.column(node.order[0].column).combine_chunks(), node.order[0].descending)
    cols = list(data.columns)
    for f in node.functions:
        cols.append(_function(f, data, g).cast(f.type.arrow))
    cols.append(pa.array(np.ones(n, np.int64)))
    return pa.Table.from_arrays(cols, schema=out_schema)


class _Geometry:
    """Row positions of a sorted, expanded input: partitions and peer groups as index arrays."""

    def __init__(self, part_change: np.ndarray, peer_change: np.ndarray) -> None:
        self.n = len(part_change)
        self.i = np.arange(self.n)
        self.part_start = _starts(part_change)
        self.part_end = _ends(part_change)  # exclusive
        self.peer_start = _starts(peer_change)
        self.peer_end = _ends(peer_change)
        self.peer_id = np.cumsum(peer_change) - 1
        self.part_id = np.cumsum(part_change) - 1
        self.range_key: tuple[pa.Array, bool] | None = None  # the ORDER BY key of RANGE offsets, descending

    def frame(self, frame: pn.Frame) -> tuple[np.ndarray, np.ndarray]:
        """Inclusive frame bounds per row, clipped to the partition (empty where start > end)."""
        start = self._bound(frame, frame.start, True)
        end = self._bound(frame, frame.end, False)
        return np.maximum(start, self.part_start), np.minimum(end, self.part_end - 1)

    def _bound(self, frame: pn.Frame, b: pn.FrameBound, is_start: bool) -> np.ndarray:
        if b.kind == "unbounded_preceding":
            return self.part_start
        if b.kind == "unbounded_following":
            return self.part_end - 1
        if b.kind == "current_row":
            if frame.mode == "rows":
                return self.i
            return self.peer_start if is_start else self.peer_end - 1
        if frame.mode != "rows":
            return self._range_bound(b, is_start)
        return self.i - b.offset if b.kind == "preceding" else self.i + b.offset

    def _range_bound(self, b: pn.FrameBound, is_start: bool) -> np.ndarray:
        """RANGE ``offset`` PRECEDING/FOLLOWING: the first (start) or last (end) row of the partition whose
        key is within the offset, found by binary search in each partition's sorted keys.  A row whose key
        is NULL has its NULL peers as frame; NULL keys are never within an offset of a value."""
        if self.range_key is None:
            raise ExecutionError("internal: a RANGE frame with an offset needs an ORDER BY key")
        col, descending = self.range_key
        keys, offset = _range_values(col, b.offset)
        if descending:  # ascending in -key: "preceding" rows are those with larger keys
            keys = -keys
        valid = np.asarray(col.is_valid()).astype(bool) if self.n else np.zeros(0, bool)
        out = np.where(valid, 0, self.peer_start if is_start else self.peer_end - 1)
        firsts = np.flatnonzero(np.diff(self.part_id, prepend=-1))
        for a, z in zip(firsts, np.append(firsts[1:], self.n)):
            rows = np.flatnonzero(valid[a:z])
            if not len(rows):
                continue
            lo, hi = a + rows[0], a + rows[-1] + 1  # non-NULL keys are contiguous (NULLs sort at one end)
            vals = keys[lo:hi]
            target = vals - offset if b.kind == "preceding" else vals + offset
            pos = np.searchsorted(vals, target, side="left" if is_start else "right")
            out[lo:hi] = lo + pos if is_start else lo + pos - 1
        return out


def _range_values(col: pa.Array, offset) -> tuple[np.ndarray, object]:
    """The key column and a RANGE offset in one exact unit: integers as int64, numerics as unscaled
    integers at the larger of the two scales, floats as float64 (PostgreSQL's own float arithmetic)."""
    t = col.type
    if pa.types.is_floating(t):
        return np.asarray(col.fill_null(0.0).cast(pa.float64()), np.float64), float(offset)
    if pa.types.is_decimal(t):
        off = decimal.Decimal(offset)
        scale = max(t.scale, -off.as_tuple().exponent, 0)  # type: ignore[operator]
        keys = _unscaled(col)
        factor = 10 ** (scale - t.scale)
        if factor != 1 or keys.dtype == object:
            keys = keys.astype(object) * factor
        return keys, int(off.scaleb(scale))
    return np.asarray(col.fill_null(0).cast(pa.int64()), np.int64), int(offset)


def _function(f: pn.WindowFunc, data: pa.Table, g: _Geometry) -> pa.Array:
    n = g.n
    if f.func == "row_number":
        return pa.array(g.i - g.part_start + 1, pa.int64())
    if f.func == "rank":
        return pa.array(g.peer_start - g.part_start + 1, pa.int64())
    if f.func == "dense_rank":
        return pa.array(g.peer_id - g.peer_id[g.part_start] + 1 if n else g.i, pa.int64())
    if f.func == "ntile":
        size = g.part_end - g.part_start
        i = g.i - g.part_start
        q, r = size // f.n, size % f.n
        big = r * (q + 1)  # rows in the first r buckets, of q + 1 rows each
        bucket = np.where(i < big, i // np.maximum(q + 1, 1), r + (i - big) // np.maximum(q, 1))
        return pa.array(bucket + 1, pa.int32())
    arg = data.column(f.arg).combine_chunks() if f.arg is not None else None
    if f.func in ("lag", "lead"):
        j = g.i - f.n if f.func == "lag" else g.i + f.n
        inside = (j >= g.part_start) & (j < g.part_end)
        values = arg.take(pa.array(np.where(inside, j, 0))) if n else arg  # type: ignore[union-attr]
        if f.default is None:
            other = pa.nulls(n, values.type)
        else:
            other = data.column(f.default).combine_chunks().cast(values.type)
        return pc.if_else(pa.array(inside), values, other)
    start, end = g.frame(f.frame)
    empty = start > end
    if f.func == "count_star":
        return pa.array(np.where(empty, 0, end - start + 1), pa.int64())
    if f.func in ("first_value", "last_value"):
        at = start if f.func == "first_value" else end
        values = arg.take(pa.array(np.where(empty, 0, at))) if n else arg  # type: ignore[union-attr]
        return pc.if_else(pa.array(empty), pa.nulls(n, values.type), values)
    valid = np.asarray(arg.is_valid()).astype(np.int64) if n else np.zeros(0, np.int64)  # type: ignore[union-attr]
    counts = np.where(empty, 0, _range_sums(valid, start, end))
    if f.func == "count":
        return pa.array(counts, pa.int64())
    none = counts == 0
    if f.func in ("min", "max"):
        return _extreme(arg, start, end, none, f.func, g, f.frame)  # type: ignore[arg-type]
    total = _frame_sum(arg, start, end, none, g, f.frame)  # type: ignore[arg-type]
    if f.func == "sum":
        return total
    return _average(total, counts, none, f.type.arrow)


def _range_sums(values: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Σ values[start..end] per row (exact integers, by prefix sums; rows with start > end arbitrary)."""
    prefix = np.concatenate([[0], np.cumsum(values)]) if values.dtype != object else \
        np.concatenate([np.array([0], dtype=object), np.cumsum(values)])
    s = np.clip(start, 0, len(values))
    e = np.clip(end + 1, 0, len(values))
    return prefix[np.maximum(e, s)] - prefix[s]


def _frame_sum(arg: pa.Array, start: np.ndarray, end: np.ndarray, none: np.ndarray, g: _Geometry,
               frame: pn.Frame) -> pa.Array:
    """SUM over each row's frame, NULL where the frame holds no value; exact for integers and numerics,
    for floats summed in row order like PostgreSQL (running sums per partition, else each frame)."""
    n = len(arg)
    t = arg.type
    if pa.types.is_floating(t):
        values = np.asarray(arg.fill_null(0.0).cast(pa.float64()), np.float64)
        out = np.zeros(n)
        if n:
            running = frame.start.kind == "unbounded_preceding"
            if running:  # one cumulative sum per partition (rows of a partition are contiguous)
                firsts = np.flatnonzero(np.diff(g.part_id, prepend=-1))
                for a, b in zip(firsts, np.append(firsts[1:], n)):
                    out[a:b] = np.cumsum(values[a:b])[end[a:b] - a]
            else:
                live = np.flatnonzero(~none)
                idx = np.empty(2 * len(live), np.int64)
                idx[0::2], idx[1::2] = start[live], end[live] + 1
                padded = np.append(values, 0.0)
                out[live] = np.add.reduceat(padded, idx)[0::2] if len(live) else out[live]
        return pc.if_else(pa.array(none), pa.nulls(n, pa.float64()), pa.array(out, pa.float64()))
    if pa.types.is_decimal(t):  # exact: the unscaled integers, summed in int64 when they cannot overflow
        scale = t.scale
        unscaled = _unscaled(arg)
        return _exact_sums(unscaled, start, end, none, scale)
    values = np.asarray(arg.fill_null(0).cast(pa.int64()), np.int64)
    if pa.types.is_int64(t):  # SUM(bigint) is numeric: exact, no overflow
        return _exact_sums(values, start, end, none, 0)
    sums = _range_sums(values, start, end)
    return pc.if_else(pa.array(none), pa.nulls(n, pa.int64()), pa.array(sums, pa.int64()))


_INT64_SAFE = 2**62


def _unscaled(arg: pa.Array) -> np.ndarray:
    """A decimal column's unscaled integers (NULL as 0): int64 when its precision allows, else Python ints."""
    t = arg.type
    arg = arg.fill_null(pa.scalar(decimal.Decimal(0), t))
    if t.precision <= 18:
        as_int = pa.Array.from_buffers(pa.decimal128(t.precision, 0), len(arg), arg.buffers(), 0, arg.offset)
        return np.asarray(as_int.cast(pa.int64()), np.int64)
    return np.array([int(v.scaleb(t.scale)) for v in arg.to_pylist()], dtype=object)


def _exact_sums(values: np.ndarray, start: np.ndarray, end: np.ndarray, none: np.ndarray, scale: int) -> pa.Array:
    """Σ values[start..end] as decimal128(38, scale) of the unscaled integers ``values``; NULL where ``none``."""
    n = len(values)
    result = pa.decimal128(38, scale)
    if n == 0:
        return pa.array([], result)
    if values.dtype != object and float(np.abs(values).max()) * n >= _INT64_SAFE:
        values = values.astype(object)
    sums = _range_sums(values, start, end)
    if sums.dtype == object:
        with decimal.localcontext() as ctx:
            ctx.prec = 100
            out = [None if z else decimal.Decimal(int(v)).scaleb(-scale) for v, z in zip(sums, none)]
        return pa.array(out, result)
    ints = pa.array(sums, pa.int64()).cast(pa.decimal128(38, 0))
    scaled = pa.Array.from_buffers(result, n, ints.buffers(), 0, ints.offset)
    return pc.if_else(pa.array(none), pa.nulls(n, result), scaled)


def _average(total: pa.Array, counts: np.ndarray, none: np.ndarray, result: pa.DataType) -> pa.Array:
    from freshview.runtime.operators.accumulators import _avg

    if pa.types.is_decimal(result) and pa.types.is_integer(total.type):
        total = total.cast(pa.decimal128(38, 0))
    return _avg(total, pa.array(counts, pa.int64()), result)


def _extreme(arg: pa.Array, start: np.ndarray, end: np.ndarray, none: np.ndarray, func: str, g: _Geometry,
             frame: pn.Frame) -> pa.Array:
    """MIN/MAX over each row's frame, on the values' sort codes: a running minimum per partition when the
    frame starts (or ends) unbounded, else a sparse table of range minima over the longest frame (O(n log w))."""
    n = len(arg)
    if n == 0:
        return arg
    codes = sort_codes(arg)
    valid = np.asarray(arg.is_valid()).astype(bool)
    keyed = codes if func == "min" else -codes
    lo = int(keyed.min())
    keyed = np.where(valid, keyed - lo, int(keyed.max()) - lo + 1)  # 0.., NULL above every value
    span = int(keyed.max()) + 1
    part = g.part_id
    if frame.start.kind == "unbounded_preceding":  # min over part_start..end: a running minimum
        offset = (int(part[-1]) - part) * span  # earlier partitions sort above, so never win
        best = (np.minimum.accumulate(keyed + offset) - offset)[np.clip(end, 0, n - 1)]
    elif frame.end.kind == "unbounded_following":  # min over start..part_end-1: a running minimum backwards
        offset = part * span
        best = (np.minimum.accumulate((keyed + offset)[::-1])[::-1] - offset)[np.clip(start, 0, n - 1)]
    else:
        s = np.clip(start, 0, n - 1)
        length = np.maximum(end - start + 1, 1)
        widest = int(length[~none].max()) if (~none).any() else 1
        levels = [keyed]
        while (1 << len(levels)) <= widest:
            prev, half = levels[-1], 1 << (len(levels) - 1)
            nxt = prev.copy()
            nxt[:n - half] = np.minimum(prev[:n - half], prev[half:])
            levels.append(nxt)
        k = np.minimum(np.floor(np.log2(length)).astype(np.int64), len(levels) - 1)
        table = np.stack(levels)
        best = np.minimum(table[k, s], table[k, np.clip(s + length - (1 << k), 0, n - 1)])
    # a row holding each best value: the first in value order
    order = np.argsort(keyed, kind="stable")
    pos = np.searchsorted(keyed[order], np.where(none, keyed[order][0], best))
    at = order[np.clip(pos, 0, n - 1)]
    values = arg.take(pa.array(at))
    return pc.if_else(pa.array(none), pa.nulls(n, arg.type), values)


# ---------------------------------------------------------------------- the operator


class PartitionRecompute:
    """The stateful operator of one TopK or Window node: see the module docstring for its delta rule."""

    def __init__(self, node: pn.TopK | pn.Window, state: str, top: str | None = None) -> None:
        self.node = node
        self.state = state
        self.top = top  # TopK: its current result, for the no-change shortcut
        schema = pa.schema([f for f in arrow_schema(node.input.columns) if f.name != WEIGHT])
        key = tuple(schema.names[c] for c in node.partition) if isinstance(node, pn.Window) else ()
        self.layout = Layout(schema, key, NullKeys.EQUAL)
        self.key = key

    def f(self, rows: pa.Table) -> pa.Table:
        if isinstance(self.node, pn.TopK):
            return topk_rows(self.node, rows)
        return window_rows(self.node, rows)

    def step(self, k: Kernels, store: StateStore, d: Rel | None) -> Rel | None:
        store.ensure_arrangement(self.state, self.layout)
        if self.top is not None:
            store.ensure_arrangement(self.top, self.layout)
        if d is None:
            return None
        delta = k.arrow(d)
        if delta.num_rows == 0:
            return None
        delta = delta.cast(self.layout.weighted_schema)
        if self.top is not None and self._unchanged_topk(store, delta):
            store.apply(self.state, delta)
            return None
        keys = delta.select(list(self.key)) if self.key else pa.table({})
        old = store.lookup(self.state, keys).select(self.layout.weighted_schema.names)
        store.apply(self.state, delta)
        new = consolidate(pa.concat_tables([old, delta]))
        if new.num_rows and np.asarray(new.column(WEIGHT)).min() < 0:
            raise ExecutionError(f"internal: {type(self.node).__name__} input has a row with negative weight")
        out = consolidate(pa.concat_tables([self.f(new), negate(self.f(old))]))
        if self.top is not None and out.num_rows:
            store.apply(self.top, out)
        return k.of_arrow(out) if out.num_rows else None

    def _unchanged_topk(self, store: StateStore, delta: pa.Table) -> bool:
        """True when every changed row sorts strictly after the last row of a full current result."""
        node = self.node
        assert isinstance(node, pn.TopK)
        if node.limit is None:
            return False
        top = store.scan(self.top)
        if top.num_rows == 0 or int(np.asarray(top.column(WEIGHT)).sum()) < node.limit:
            return False
        data = top.drop_columns([WEIGHT])
        last = data.take(pa.array([sort_order(data, node.order)[-1]]))
        both = pa.concat_tables([last, delta.drop_columns([WEIGHT])])
        codes = [sort_codes(both.column(key.column), key.descending, key.nulls_go_first) for key in node.order]
        codes += [sort_codes(both.column(i)) for i in range(both.num_columns)]
        if not codes:
            return False
        ranks = np.lexsort(codes[::-1])
        # strictly after: the boundary sorts first and differs from the next row in some code
        if ranks[0] != 0:
            return False
        second = ranks[1]
        return any(c[0] != c[second] for c in codes)
