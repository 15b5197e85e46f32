"""Local kernels: a step's relational work in-process over Arrow (the "local" executor).

Expressions are evaluated by ``runtime.expressions.arrow`` (PostgreSQL
semantics, the same results as the Spark lowering); group sums are Arrow's
Acero hash aggregation; an equi-join pairs rows by hashing their keys with
numpy (``batch.equal_pairs``: a step's few hundred rows cost a few numpy
passes, where Acero plans a hash join per call), Acero's hash join where
the key types differ or cannot be hashed (intervals, lists).  No Spark is imported: a flow
whose steps all run locally never starts a JVM after its first computation.

Join keys are compared as SQL ``=`` does: a NULL key matches nothing (both
ways), floats after normalisation (``-0.0`` = ``0.0``, NaN = NaN, as in
PostgreSQL).  Group sums group NULL with NULL (GROUP BY semantics).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra import parallel
from freshview.algebra.batch import consolidate, equal_pairs, grouped, normalize_floats
from freshview.errors import ExecutionError
from freshview.plan.expr import ColumnRef, Expr
from freshview.plan.flatmap import FlatMap
from freshview.runtime.expressions import srf
from freshview.runtime.expressions.arrow import evaluate, evaluate_filter
from freshview.runtime.kernels import Term, sums_schema
from freshview.runtime.relation import arrow_schema, col_name, conform
from freshview.schema import WEIGHT


class ArrowKernels:
    """The ``Kernels`` protocol in-process; a relation is a ``pa.Table``."""

    name = "local"
    streams = False

    def finish(self) -> None:
        """Nothing to release."""

    def of_arrow(self, table: pa.Table) -> pa.Table:
        return table

    def arrow(self, rel: pa.Table) -> pa.Table:
        return consolidate(rel)

    def shared(self, rel: pa.Table) -> pa.Table:
        return rel

    def filter(self, rel: pa.Table, predicate: Expr, memo: dict) -> pa.Table:
        if rel.num_rows == 0:
            return rel
        return rel.filter(evaluate_filter(predicate, rel))

    def project(self, rel: pa.Table, exprs: Sequence[Expr], schema: pa.Schema, memo: dict) -> pa.Table:
        arrays = [_value(e, rel) for e in exprs] + [rel.column(WEIGHT)]
        return conform(pa.Table.from_arrays(arrays, names=schema.names), schema)

    def union(self, rels: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
        return pa.concat_tables([conform(r, schema) for r in rels])

    def reweight(self, rel: pa.Table, weight: Expr, memo: dict) -> pa.Table:
        if rel.num_rows == 0:
            return rel
        factor = _broadcast_int64(evaluate(weight, rel), rel.num_rows)
        try:
            w = pc.multiply_checked(rel.column(WEIGHT), factor)
        except pa.ArrowInvalid:
            raise ExecutionError("bigint out of range (a row's multiplicity)") from None
        out = rel.set_column(rel.schema.get_field_index(WEIGHT), WEIGHT, w)
        return out.filter(pc.not_equal(w, 0))

    def flat_map(self, rel: pa.Table, node: FlatMap, memo: dict) -> pa.Table:
        schema = arrow_schema(node.columns)
        if rel.num_rows == 0:
            return schema.empty_table()
        calls = [srf.rows(c, [_value(a, rel) for a in c.args]) for c in node.calls]
        parent, added, position = srf.zipped(calls, rel.num_rows, node.outer)
        taken = pa.array(parent, pa.int64())
        arrays = [rel.column(col_name(i)).take(taken) for i in range(len(node.input.columns))] + added
        if node.ordinality:
            arrays.append(position)
        arrays.append(rel.column(WEIGHT).take(taken))
        return conform(pa.Table.from_arrays(arrays, names=schema.names), schema)

    def evaluate(self, rel: pa.Table, exprs: Sequence[Expr], schema: pa.Schema, memo: dict) -> pa.Table:
        return self.project(rel, exprs, schema, memo)

    def join(self, left: pa.Table, right: pa.Table, nkeys: int, schema: pa.Schema, memo: dict) -> pa.Table:
        nl = left.num_columns - nkeys - 1
        nr = right.num_columns - nkeys - 1
        pairs = _equi_pairs(left, right, nl, nr, nkeys)
        if pairs is not None:  # the rows' pairs by key hash (or every pair: a cross product)
            li, ri = (pa.array(p, pa.int64()) for p in pairs)  # each side's data and weight taken at once
            lt = left.select(list(range(nl)) + [nl + nkeys]).take(li)
            rt = right.select(list(range(nr)) + [nr + nkeys]).take(ri)
            if nkeys:  # floats normalised, as Acero's inputs were
                lt, rt = normalize_floats(lt), normalize_floats(rt)
            lw, rw = lt.column(nl), rt.column(nr)
            arrays = lt.columns[:nl] + rt.columns[:nr]
        else:
            arrays, lw, rw = _acero_join(left, right, nl, nr, nkeys)
        try:
            weight = pc.multiply_checked(lw, rw)
        except pa.ArrowInvalid:
            raise ExecutionError("bigint out of range (a row's multiplicity)") from None
        return conform(pa.Table.from_arrays(arrays + [weight], names=schema.names), schema)

    def sums(self, rel: pa.Table, groups: Sequence[Expr], terms: Sequence[Term], memo: dict) -> pa.Table:
        schema = sums_schema(groups, terms)
        if not groups and rel.num_rows == 0:
            return schema.empty_table()
        w = rel.column(WEIGHT)
        names = [f"g{i}" for i in range(len(groups))]
        values: dict[int, pa.Array | pa.ChunkedArray] = {}

        def value(e: Expr) -> pa.Array | pa.ChunkedArray:  # once per expression: SUM's Σ x·w and Σ w share x
            if id(e) not in values:
                values[id(e)] = _value(e, rel)
            return values[id(e)]

        arrays = [value(g) for g in groups] + [w]
        for t in terms:
            if t.expr is None:
                arrays.append(w)
                continue
            x = value(t.expr)
            if t.op != "sum":
                arrays.append(x)
            else:
                arrays.append(pc.if_else(pc.is_valid(x), w, 0) if t.sum_type is None else _times(x, w, t.sum_type))
        table = pa.Table.from_arrays(arrays, names=schema.names)
        sums = [("cnt", "sum")] + [(t.name, t.op) for t in terms]
        out = grouped(table, names, sums)  # (list and interval keys too)
        named = {f"{c}_{op}": c for c, op in sums}
        out = out.rename_columns([named.get(c, c) for c in out.column_names])
        try:
            return pa.Table.from_arrays([out.column(f.name).cast(f.type) for f in schema], schema=schema)
        except pa.ArrowInvalid:
            raise ExecutionError("numeric field overflow (a sum beyond 38 digits)") from None

    # streamed results: everything is on the driver already, one batch (``Kernels``; never called, ``streams``)
    def stage(self, rel: pa.Table, exprs: Sequence[Expr], schema: pa.Schema, memo: dict) -> pa.Table:
        return self.evaluate(rel, exprs, schema, memo)

    def batches(self, rel: pa.Table) -> Iterator[pa.Table]:
        yield rel

    def join_staged(self, left: pa.Table, right: pa.Table, nkeys: int, schema: pa.Schema, memo: dict) -> pa.Table:
        return self.join(left, right, nkeys, schema, memo)

    def sums_batches(self, rel: pa.Table, groups: Sequence[Expr], terms: Sequence[Term], memo: dict
                     ) -> Iterator[pa.Table]:
        yield self.sums(rel, groups, terms, memo)


def _value(e: Expr, rel: pa.Table) -> pa.Array | pa.ChunkedArray:
    if isinstance(e, ColumnRef) and rel.schema.field(col_name(e.index)).type == e.type.arrow:
        return rel.column(col_name(e.index))
    return evaluate(e, rel)


def _equi_pairs(left: pa.Table, right: pa.Table, nl: int, nr: int, nkeys: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The row pairs of an equi-join found by hashing the key columns (``batch.equal_pairs``, SQL ``=``: a
    NULL key matches nothing, floats compared normalised), or None where Acero's join is kept: keys of
    different types on the two sides, or of a type the hash does not take.  On a step's few hundred rows
    this is a few numpy passes, where Acero plans and runs a hash join per call (~0.3 ms)."""
    if not nkeys:  # a cross product: every left row with every right row
        return np.repeat(np.arange(left.num_rows), right.num_rows), np.tile(np.arange(right.num_rows), left.num_rows)
    lkeys = [left.column(nl + i) for i in range(nkeys)]
    rkeys = [right.column(nr + i) for i in range(nkeys)]
    if any(a.type != b.type or _nested(a.type) or pa.types.is_interval(a.type) for a, b in zip(lkeys, rkeys)):
        return None
    try:
        return equal_pairs(lkeys, rkeys, left.num_rows, right.num_rows, nulls_match=False)
    except TypeError:  # a type ``hashing`` does not take
        return None


def _acero_join(left: pa.Table, right: pa.Table, nl: int, nr: int, nkeys: int):
    """Acero's hash join of the two sides: their data columns, and the two weight columns."""
    lkeys, rkeys = [f"lk{i}" for i in range(nkeys)], [f"rk{i}" for i in range(nkeys)]
    lt = normalize_floats(left.rename_columns([f"l{i}" for i in range(nl)] + lkeys + ["lw"]))
    rt = normalize_floats(right.rename_columns([f"r{i}" for i in range(nr)] + rkeys + ["rw"]))
    if any(_nested(f.type) for f in lt.schema) or any(_nested(f.type) for f in rt.schema):
        # Acero's hash join carries no list column: join the keys and row numbers, then take the rows
        lnum = lt.select(lkeys).append_column("_fv_l", pa.array(np.arange(lt.num_rows), pa.int64()))
        rnum = rt.select(rkeys).append_column("_fv_r", pa.array(np.arange(rt.num_rows), pa.int64()))
        pairs = lnum.join(rnum, lkeys, rkeys, join_type="inner", coalesce_keys=False, use_threads=False)
        joined = pa.Table.from_arrays(lt.take(pairs.column("_fv_l")).columns + rt.take(pairs.column("_fv_r")).columns,
                                      names=lt.column_names + rt.column_names)
    else:  # (Acero's own threads for a large join, a first computation's: the rows in another order)
        threads = parallel.workers(lt.num_rows + rt.num_rows) > 1
        joined = lt.join(rt, lkeys, rkeys, join_type="inner", coalesce_keys=False, use_threads=threads)
    arrays = [joined.column(f"l{i}") for i in range(nl)] + [joined.column(f"r{i}") for i in range(nr)]
    return arrays, joined.column("lw"), joined.column("rw")


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_struct(t)


def _broadcast_int64(d, n: int) -> pa.Array:
    """An evaluated weight factor as an int64 array of ``n`` rows (a scalar repeated; NULL as 0)."""
    if isinstance(d, pa.Scalar):
        d = pa.array([d.as_py()] * n, pa.int64())
    return pc.fill_null(pc.cast(d, pa.int64()), 0)


def _times(x, w, sum_type: pa.DataType):
    """CAST(x AS sum_type)·w where x is non-NULL, else 0 in ``sum_type`` (exact for integers and decimals)."""
    valid = pc.is_valid(x)
    if pa.types.is_decimal(sum_type):
        wide = pa.decimal256(sum_type.precision, sum_type.scale)
        product = pc.multiply_checked(pc.cast(x, wide), pc.cast(w, pa.decimal256(19, 0)))
        zero = pa.scalar(0, pa.int64()).cast(product.type)
        return pc.cast(pc.if_else(valid, product, zero), pa.decimal256(76, sum_type.scale))
    # An integer sum type is int64: products are checked, the per-step sum of a step's change is not
    # (2**63 over one step's rows cannot happen with int2/int4 inputs).
    if pa.types.is_floating(sum_type):
        return pc.if_else(valid, pc.multiply(pc.cast(x, sum_type), pc.cast(w, sum_type)), 0.0)
    try:
        return pc.if_else(valid, pc.multiply_checked(pc.cast(x, sum_type), w), 0)
    except pa.ArrowInvalid:
        raise ExecutionError("bigint out of range") from None
