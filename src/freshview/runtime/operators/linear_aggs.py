"""The linear aggregates beyond COUNT/SUM/AVG: bool_and/bool_or, var/stddev, and COUNT/SUM/AVG(DISTINCT).

Each is a function of per-group linear accumulators, so ``aggregate``'s rule

    Δout(g) = −finalize(acc_old(g)) + finalize(acc_old(g) + Σ_Δ(g))

covers them unchanged; this module says which accumulators (``acc_types``),
how the change's partial sums are computed (``terms``, run by the kernels),
and how they finalise (``finalize``, Arrow compute over all groups at once).

* bool_and(x): ``n`` = Σw over non-NULL x, ``f`` = Σw over x false;
  NULL if n = 0, else f = 0.  bool_or(x): ``n`` and ``t`` = Σw over x true;
  NULL if n = 0, else t > 0.
* var_samp/var_pop/stddev_samp/stddev_pop(x): ``n``, ``s`` = Σx·w,
  ``q`` = Σx²·w.  var = (n·q − s²) / (n·(n−1)) (samp; NULL when n <= 1) or
  / n² (pop; NULL when n = 0), a negative numerator (float rounding) is 0,
  as in PostgreSQL.  Integers and numerics: exact (decimal256 integer
  arithmetic), the quotient rounded half away from zero to the result's
  scale (at least 16, PostgreSQL's minimum significant digits); stddev is
  the float64 square root of that exact variance (15+ significant digits).
  Floats: float64 over the finite values, plus ``x`` = Σw over non-finite values
  (NaN, ±Infinity): while that is > 0 (and n is enough for a result) the result
  is NaN, as PostgreSQL's float8_accum makes it; counting them apart keeps
  the sums finite, so deleting an Infinity brings the exact result back.
* SUM/AVG(x) of floats (also DISTINCT): ``s`` = Σx·w over the finite x,
  ``n``, and the counts of NaN, +Infinity and −Infinity apart (``nan``,
  ``pinf``, ``ninf``): the result is NaN while a NaN or both infinities are
  in, else ±Infinity while one is, else the finite sum (or ``s / n``), as
  PostgreSQL's float8 addition gives.  Summing them into ``s`` would keep
  NaN after they are deleted (Infinity − Infinity is NaN).
* COUNT/SUM/AVG/var/stddev(DISTINCT x): per aggregate a multiset arrangement of
  (group, x) rows with their multiplicities.  ``store.apply_report`` gives
  each changed (group, x) its old and new weight; x enters the group's set
  when its weight goes 0 → >0 and leaves when >0 → 0, so the aggregate is
  the same aggregate over the ±1 presence transitions
  ``p = [new > 0] − [old > 0]``: ``n`` = Σp, ``s`` = Σx·p, ``q`` = Σx²·p per
  group (``distinct_partials``), added to the partial sums like any other
  term.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import decimal
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra import batch
from freshview.algebra.batch import consolidate
from freshview.plan.expr import AggCall, Call, Case, Cast, Expr, Literal
from freshview.runtime import ttl
from freshview.runtime.kernels import Term
from freshview.runtime.operators import exact
from freshview.runtime.operators.group_keys import match_keys
from freshview.schema import WEIGHT, SqlType
from freshview.plan import typing as ty

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

VARIANCE = ("var_samp", "var_pop", "stddev_samp", "stddev_pop")
BOOLS = ("bool_and", "bool_or")
_TRUE = Literal(ty.BOOL, True)


def handles(agg: AggCall) -> bool:
    return agg.func in BOOLS + VARIANCE or is_float_sum(agg)


def is_float_sum(agg: AggCall) -> bool:
    """SUM/AVG of a float: finite sum plus counts of the non-finite values (module docstring)."""
    return agg.func in ("sum", "avg") and agg.arg is not None and agg.arg.type.is_float


def acc_types(agg: AggCall, sum_acc_type) -> list[tuple[str, pa.DataType]]:
    """Accumulator columns of bool_* and var/stddev (name suffix, Arrow type)."""
    if agg.func == "bool_and":
        return [("n", pa.int64()), ("f", pa.int64())]
    if agg.func == "bool_or":
        return [("n", pa.int64()), ("t", pa.int64())]
    arg = agg.arg.type  # type: ignore[union-attr]
    if is_float_sum(agg):
        return [("s", pa.float64()), ("n", pa.int64())] + [(c, pa.int64()) for c in _NON_FINITE]
    if arg.is_float:
        return [("s", pa.float64()), ("q", pa.float64()), ("n", pa.int64()), ("x", pa.int64())]
    return [("s", sum_acc_type(arg)), ("q", sum_acc_type(_square(agg.arg).type)), ("n", pa.int64())]  # type: ignore[arg-type]


def terms(j: int, agg: AggCall, sum_acc_type) -> list[Term]:
    """The partial sums Σ_Δ needs for aggregate ``j`` (see the module docstring)."""
    x = agg.arg
    assert x is not None
    if agg.func == "bool_and":
        return [Term(f"n{j}", x), Term(f"f{j}", Case(ty.BOOL, ((Call(ty.BOOL, "not", (x,)), _TRUE),), None))]
    if agg.func == "bool_or":
        return [Term(f"n{j}", x), Term(f"t{j}", Case(ty.BOOL, ((x, _TRUE),), None))]
    if x.type.is_float:
        x8 = x if x.type.kind == "float8" else Cast(ty.FLOAT8, x)
        finite = Call(ty.BOOL, "=", (Call(ty.FLOAT8, "-", (x8, x8)), Literal(ty.FLOAT8, 0.0)))
        xf = Case(ty.FLOAT8, ((finite, x8),), None)  # NULL for NaN and ±Infinity
        if is_float_sum(agg):
            pinf = Call(ty.BOOL, "=", (x8, Literal(ty.FLOAT8, math.inf)))
            ninf = Call(ty.BOOL, "=", (x8, Literal(ty.FLOAT8, -math.inf)))
            nan = Call(ty.BOOL, "and", (Call(ty.BOOL, "not", (finite,)),
                                        Call(ty.BOOL, "not", (Call(ty.BOOL, "or", (pinf, ninf)),))))
            only = lambda c: Case(ty.BOOL, ((c, _TRUE),), None)  # noqa: E731  (counted where true)
            return [Term(f"s{j}", xf, pa.float64()), Term(f"n{j}", x), Term(f"nan{j}", only(nan)),
                    Term(f"pinf{j}", only(pinf)), Term(f"ninf{j}", only(ninf))]
        infinite = Case(ty.BOOL, ((Call(ty.BOOL, "not", (finite,)), _TRUE),), None)
        return [Term(f"s{j}", xf, pa.float64()), Term(f"q{j}", Call(ty.FLOAT8, "*", (xf, xf)), pa.float64()),
                Term(f"n{j}", x), Term(f"x{j}", infinite)]
    sq = _square(x)
    return [Term(f"s{j}", x, sum_acc_type(x.type)), Term(f"q{j}", sq, sum_acc_type(sq.type)), Term(f"n{j}", x)]


def _square(x: Expr) -> Expr:
    """x·x as an exact numeric (integers widened first, so no integer overflow)."""
    if x.type.kind != "numeric":
        x = Cast(SqlType.numeric(None, 0), x)
    t = ty.arithmetic_type("*", x.type, x.type)
    return Call(t, "*", (x, x))  # type: ignore[arg-type]


_NON_FINITE = ("nan", "pinf", "ninf")


# ---------------------------------------------------------------------- finalize
def finalize(func: str, acc: pa.Table, j: int, result: pa.DataType):
    """The result column of bool_* / var / stddev / float SUM, AVG aggregate ``j`` from accumulator rows ``acc``."""
    n = acc.column(f"n{j}")
    if func in ("sum", "avg"):
        s = acc.column(f"s{j}")
        value = pc.divide(s, n.cast(pa.float64())) if func == "avg" else s
        nan, pinf, ninf = (pc.greater(acc.column(f"{c}{j}"), 0) for c in _NON_FINITE)
        value = pc.if_else(pinf, math.inf, pc.if_else(ninf, -math.inf, value))
        value = pc.if_else(pc.or_(nan, pc.and_(pinf, ninf)), math.nan, value)
        return pc.if_else(pc.greater(n, 0), value, pa.scalar(None, pa.float64()))
    if func in BOOLS:
        other = acc.column(f"f{j}" if func == "bool_and" else f"t{j}")
        value = pc.equal(other, 0) if func == "bool_and" else pc.greater(other, 0)
        return pc.if_else(pc.greater(n, 0), value, pa.scalar(None, pa.bool_()))
    sample = func in ("var_samp", "stddev_samp")
    has = pc.greater(n, 1 if sample else 0)
    s, q = acc.column(f"s{j}"), acc.column(f"q{j}")
    if pa.types.is_floating(result):
        nf = n.cast(pa.float64())
        num = pc.subtract(pc.multiply(nf, q), pc.multiply(s, s))
        num = pc.if_else(pc.less(num, 0.0), 0.0, num)
        den = pc.multiply(nf, pc.subtract(nf, 1.0) if sample else nf)
        var = pc.divide(num, pc.if_else(has, den, 1.0))
        var = pc.if_else(pc.greater(acc.column(f"x{j}"), 0), math.nan, var)
        out = pc.sqrt(var) if func.startswith("stddev") else var
        return pc.if_else(has, out, pa.scalar(None, pa.float64()))
    var = _exact_variance(exact.array(s), exact.array(q), exact.array(n), has, sample,
                          result.scale)
    if func.startswith("stddev"):
        root = pc.sqrt(var.cast(pa.float64()))
        var = _float_to_decimal(root, result)
    return pc.if_else(has, var.cast(result), pa.scalar(None, result))


def _exact_variance(s: pa.Array, q: pa.Array, n: pa.Array, has, sample: bool, scale: int) -> pa.Array:
    """(n·q − s²) / (n(n−1) or n²) at ``scale``, rounded half away from zero (decimal256; 0 where not ``has``)."""
    scale_s = s.type.scale if pa.types.is_decimal(s.type) else 0
    e = 2 * scale_s  # q's scale; s² has the same
    one = pa.scalar(1, n.type)
    n = pc.if_else(has, n, pa.scalar(2, n.type))  # groups without a result divide by something nonzero
    s_int = _narrow(exact.as_integer(s, scale_s))
    q_int = _narrow(exact.as_integer(q, e))
    n_int = _narrow(exact.as_integer(n, 0))
    num = _narrow(pc.subtract(_narrow(pc.multiply(n_int, q_int)), _narrow(pc.multiply(s_int, s_int))))
    num = pc.if_else(pc.less(num, pa.scalar(decimal.Decimal(0), pa.decimal256(1, 0))),
                     pa.scalar(decimal.Decimal(0), num.type), num)
    num = _narrow(_shift(num, scale - e))
    den = pc.multiply(n_int, _narrow(exact.as_integer(pc.subtract(n, one) if sample else n, 0)))
    q_out = exact.div_half_up(num, _narrow(den))
    return exact.with_scale(q_out, scale)


def _shift(x: pa.Array, digits: int) -> pa.Array:
    """Integer decimal256 ``x · 10^digits`` (``digits >= 0``)."""
    if digits == 0:
        return x
    factor = pa.scalar(decimal.Decimal(10) ** digits, pa.decimal256(digits + 1, 0))
    return pc.multiply(x, factor)


def _narrow(x: pa.Array) -> pa.Array:
    """Integer decimal256 ``x`` retyped to the fewest digits its values need (so products fit 76 digits)."""
    x = exact.array(x)
    if x.type.scale != 0:
        raise ValueError("integer decimals only")
    big = pc.max(pc.abs(x)).as_py() if len(x) and x.null_count < len(x) else None
    digits = len(str(int(big))) if big else 1
    if digits > exact.MAX_DECIMAL256:
        raise NotImplementedError("an exact variance intermediate exceeds 76 digits")
    return x.cast(pa.decimal256(digits, 0))


def _float_to_decimal(x, result: pa.DataType) -> pa.Array:
    """float64 ``x`` (finite) as decimal ``result``, rounded at its scale."""
    x = exact.array(x)
    rounded = pc.round(x, result.scale)
    return rounded.cast(pa.decimal256(exact.MAX_DECIMAL256, result.scale), safe=False).cast(result)


# ---------------------------------------------------------------------- DISTINCT
def distinct_partials(store: StateStore, name: str, keys: list, value, weight, parts: list[tuple[str, pa.DataType]],
                      key_names: list[str], clamp: bool = False) -> pa.Table:
    """Apply one DISTINCT aggregate's (group, x) changes to its multiset ``name``; per group whose set
    changed: its key columns and each accumulator of ``parts`` summed over the presence transitions
    ``p``: ``n`` = Σp, ``s`` = Σx·p, ``q`` = Σx²·p (floats: over finite x), ``x`` = Σp over non-finite x.

    ``keys``: the change's encoded group key columns (``k*``, ``z*``), ``value`` its x, ``weight`` its weights.
    ``clamp`` (a state TTL): deletes of (group, x) rows the multiset no longer holds are dropped.
    """
    sub = pa.Table.from_arrays(list(keys) + [value, weight], names=key_names + ["v", WEIGHT])
    sub = sub.filter(pc.is_valid(value))
    if sub.num_rows and clamp:
        sub = ttl.clamp_deletes(store, name, sub)[0]
    if sub.num_rows == 0:
        return pa.table({})  # no set changed
    report = store.apply_report(name, consolidate(sub))
    old = np.asarray(report.column("_old_weight"), dtype=np.int64)
    new = np.asarray(report.column(WEIGHT), dtype=np.int64)
    p = (new > 0).astype(np.int64) - (old > 0).astype(np.int64)
    moved = np.flatnonzero(p)
    report = report.take(moved)
    p_np = p[moved]
    v = report.column("v")
    finite = None
    if pa.types.is_floating(v.type):
        vf = v.cast(pa.float64())
        finite = np.isfinite(np.asarray(pc.fill_null(vf, 0.0), dtype=np.float64))
        v = pc.if_else(pa.array(finite), vf, 0.0)
    cols = {c: report.column(c) for c in key_names}
    for suffix, t in parts:
        if suffix == "n":
            cols["n"] = pa.array(p_np, pa.int64())
        elif suffix == "x":
            cols["x"] = pa.array(np.where(finite, 0, p_np) if finite is not None else np.zeros_like(p_np), pa.int64())
        elif suffix in _NON_FINITE:
            raw = np.asarray(pc.fill_null(report.column("v").cast(pa.float64()), 0.0), dtype=np.float64)
            is_class = {"nan": np.isnan(raw), "pinf": raw == math.inf, "ninf": raw == -math.inf}[suffix]
            cols[suffix] = pa.array(np.where(is_class, p_np, 0), pa.int64())
        elif suffix == "s":
            cols["s"] = _times(v, pa.array(p_np, pa.int64()), t)
        elif suffix == "q":
            cols["q"] = _times(_square_values(v, t), pa.array(p_np, pa.int64()), t)
    table = pa.table(cols)
    aggs = [(suffix, "sum") for suffix, _ in parts]
    if key_names:
        grouped = batch.grouped(table, key_names, aggs)  # (array keys too)
        grouped = grouped.rename_columns([c.removesuffix("_sum") for c in grouped.column_names])
    else:
        grouped = pa.table({c: pa.array([pc.sum(table.column(c)).as_py() if table.num_rows else 0],
                                        table.schema.field(c).type) for c, _ in aggs})
    for suffix, t in parts:
        col = grouped.column(suffix)
        col = pc.fill_null(col, pa.scalar(0, pa.int64()).cast(col.type))
        grouped = grouped.set_column(grouped.schema.get_field_index(suffix), suffix, col.cast(t))
    return grouped


def _square_values(v, t: pa.DataType):
    """x² in (or exactly castable to) accumulator type ``t``."""
    if pa.types.is_decimal(t):
        scale = v.type.scale if pa.types.is_decimal(v.type) else 0
        wide = exact.array(v.cast(pa.decimal256(38, scale)))
        big = pc.max(pc.abs(wide)).as_py() if len(wide) and wide.null_count < len(wide) else None
        digits = min(max(len(str(int(big))) + scale if big else 1, scale + 1), 37)  # so the product fits 76 digits
        narrow = wide.cast(pa.decimal256(digits, scale))
        return pc.multiply(narrow, narrow)  # scale 2·scale, exact
    if pa.types.is_floating(t):
        return pc.multiply(v.cast(t), v.cast(t))
    return pc.multiply_checked(v.cast(t), v.cast(t))


def _times(v, p: pa.Array, sum_type: pa.DataType):
    """x·p in ``sum_type`` for transitions p = ±1 (exact: a sign, no product)."""
    x = v.cast(pa.decimal256(76, sum_type.scale)) if pa.types.is_decimal(sum_type) else v.cast(sum_type)
    return pc.if_else(pc.greater(p, 0), x, pc.negate(x))


def add_to_partial(partial: pa.Table, partial_keys: list, group: pa.Table, key_names: list[str],
                   j: int, parts: list[tuple[str, pa.DataType]]) -> pa.Table:
    """``partial`` with columns ``{suffix}{j}`` of ``parts`` set from one DISTINCT aggregate's per-group sums."""
    if group.num_columns == 0:
        at = np.full(partial.num_rows, -1, dtype=np.int64)
    else:
        at = match_keys(partial_keys, [group.column(k) for k in key_names],
                                     partial.num_rows, group.num_rows)
    idx = pa.array(at, pa.int64(), mask=at < 0)
    for suffix, t in parts:
        col = group.column(suffix).take(idx) if group.num_columns else pa.nulls(partial.num_rows, t)
        col = pc.fill_null(col.cast(t), pa.scalar(0, pa.int64()).cast(t))
        name = f"{suffix}{j}"
        if name in partial.column_names:
            partial = partial.set_column(partial.schema.get_field_index(name), name, col)
        else:
            partial = partial.append_column(name, col)
    return partial


__all__ = ["VARIANCE", "BOOLS", "handles", "acc_types", "terms", "finalize", "distinct_partials", "add_to_partial"]
