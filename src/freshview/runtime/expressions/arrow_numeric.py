"""PostgreSQL's numeric functions over Arrow (the in-process executor), the ``numeric`` family of
``plan.functions``: round, floor, ceil, sqrt, cbrt, exp, ln, log10, power, sign, trunc.  ``spark_functions``
(and ``spark``'s built-ins) lower the same functions for Spark.

Math in double precision with PostgreSQL's errors: sqrt and ln/log of a negative, ln/log of zero, power's
"zero raised to a negative power" and "negative number raised to a non-integer power", and "value out of
range: overflow/underflow" when exp or power of finite arguments leave the double range; power's NaN and
infinity cases are PostgreSQL's (not C's or Java's); sign(NaN) is 0, as PostgreSQL's C comparisons make it.
round/floor/ceil of numerics are exact (decimal256), of floats rint/floor/ceil.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.plan.expr import Call
from freshview.runtime.expressions import arrow_values as A

Datum = A.Datum
_F8 = pa.float64()


def op_round(ev, e: Call) -> Datum:
    a = ev.visit(e.args[0])
    at = e.args[0].type
    if len(e.args) == 1:
        if at.is_float:
            return pc.round(a, 0, round_mode="half_to_even")  # rint, as PostgreSQL
        if at.is_integer:
            return a
        p, s = e.type.decimal_precision_scale
        return A._to_decimal(a, p, s)
    places = e.args[1].value  # type: ignore[attr-defined]
    p, s = e.type.decimal_precision_scale
    d = A._as_decimal(a, at)
    if places < 0:
        d = pc.round(d.cast(pa.decimal256(76, d.type.scale)), ndigits=places, round_mode=A._HALF_AWAY)
    return A._to_decimal(d, p, s)  # (s = places: rounds half away from zero)


def op_floor(ev, e: Call) -> Datum:
    return _floor_ceil(ev, e, pc.floor)


def op_ceil(ev, e: Call) -> Datum:
    return _floor_ceil(ev, e, pc.ceil)


def _floor_ceil(ev, e: Call, fn: Callable) -> Datum:
    a = ev.visit(e.args[0])
    at = e.args[0].type
    if at.kind == "numeric":
        p, s = e.type.decimal_precision_scale
        return A._to_decimal(fn(a.cast(pa.decimal256(76, a.type.scale))), p, s)
    return fn(a.cast(pa.float64()))


def _f8(ev, e) -> tuple[np.ndarray, np.ndarray]:
    (x,) = ev.strict_args(e.args)
    n = A._rows(ev, e)
    return A._np(A._as(x, e.args[0].type), n, 0.0).astype(np.float64), A._valid_mask(x, n)


def _out_f8(values: np.ndarray, valid: np.ndarray, scalar: bool) -> Datum:
    out = A._from_np(values, valid, _F8)
    return out[0] if scalar else out


def _range_checks(result: np.ndarray, finite_in: np.ndarray, nonzero_in: np.ndarray) -> None:
    if (np.isinf(result) & finite_in).any():
        raise A._fail("value out of range: overflow")
    if ((result == 0) & finite_in & nonzero_in).any():
        raise A._fail("value out of range: underflow")


def op_sqrt(ev, e) -> Datum:
    x, valid = _f8(ev, e)
    if (valid & (x < 0)).any():
        raise A._fail("cannot take square root of a negative number")
    with np.errstate(all="ignore"):
        return _out_f8(np.sqrt(x), valid, A._all_scalar(ev, e))


def op_cbrt(ev, e) -> Datum:
    x, valid = _f8(ev, e)
    return _out_f8(np.cbrt(x), valid, A._all_scalar(ev, e))


def op_exp(ev, e) -> Datum:
    x, valid = _f8(ev, e)
    with np.errstate(all="ignore"):
        out = np.exp(x)
    _range_checks(np.where(valid, out, 1.0), np.isfinite(x), np.ones(len(x), bool))
    return _out_f8(out, valid, A._all_scalar(ev, e))


def _log(ev, e, fn: Callable[[np.ndarray], np.ndarray]) -> Datum:
    x, valid = _f8(ev, e)
    if (valid & (x == 0)).any():
        raise A._fail("cannot take logarithm of zero")
    if (valid & (x < 0)).any():
        raise A._fail("cannot take logarithm of a negative number")
    with np.errstate(all="ignore"):
        return _out_f8(fn(x), valid, A._all_scalar(ev, e))


def op_ln(ev, e) -> Datum:
    return _log(ev, e, np.log)


def op_log10(ev, e) -> Datum:
    return _log(ev, e, np.log10)


def op_power(ev, e) -> Datum:
    a, b = ev.strict_args(e.args)
    n = A._rows(ev, e)
    valid = A._valid_mask(a, n) & A._valid_mask(b, n)
    x = np.where(valid, A._np(a, n, 1.0), 1.0).astype(np.float64)
    y = np.where(valid, A._np(b, n, 1.0), 1.0).astype(np.float64)
    out, error = power_values(x, y)
    if error is not None:
        raise A._fail(error)
    return _out_f8(out, valid, A._all_scalar(ev, e))


def power_values(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, str | None]:
    """PostgreSQL's dpow, vectorised: (results, the error message of the first failing rule or None)."""
    xnan, ynan = np.isnan(x), np.isnan(y)
    plain = ~xnan & ~ynan
    with np.errstate(all="ignore"):
        if (plain & (x == 0) & (y < 0)).any():
            return x, "zero raised to a negative power is undefined"
        if (plain & (x < 0) & (np.floor(y) != y)).any():
            return x, "a negative number raised to a non-integer power yields a complex result"
        out = np.power(x, y)
        finite = plain & np.isfinite(x) & np.isfinite(y)
        if (finite & np.isinf(out)).any():
            return x, "value out of range: overflow"
        if (finite & (out == 0) & (x != 0)).any():
            return x, "value out of range: underflow"
        absx = np.abs(x)
        # infinite exponent (PostgreSQL: |x| = 1 gives 1; C agrees, Java gives NaN)
        out = np.where(plain & np.isinf(y) & (absx == 1.0), 1.0, out)
        out = np.where(xnan, np.where(~ynan & (y == 0), 1.0, np.nan), out)
        out = np.where(~xnan & ynan, np.where(x == 1.0, 1.0, np.nan), out)
    return out, None


def op_sign(ev, e) -> Datum:
    (x,) = ev.strict_args(e.args)
    if e.type.kind == "numeric":
        zero = pa.scalar(Decimal(0), x.type)
        pos = pc.if_else(pc.greater(x, zero), 1, pc.if_else(pc.less(x, zero), -1, 0))
        p, s = e.type.decimal_precision_scale
        return A._to_decimal(A._as_type(pos, pa.int64()), p, s)
    n = 1 if A._is_scalar(x) else ev.n
    values, valid = A._np(x, n, 0.0), A._valid_mask(x, n)
    out = np.where(values > 0, 1.0, np.where(values < 0, -1.0, 0.0))  # NaN: 0, as PostgreSQL's C comparisons
    return _out_f8(out, valid, A._is_scalar(x))


def op_trunc(ev, e) -> Datum:
    if len(e.args) == 1:  # double precision
        x, valid = _f8(ev, e)
        return _out_f8(np.trunc(x), valid, A._all_scalar(ev, e))
    (x,) = ev.strict_args(e.args[:1])
    places = e.args[1].value
    d = A._as_decimal(x, e.args[0].type)
    wide = d.cast(pa.decimal256(76, d.type.scale))
    if places < d.type.scale:
        wide = pc.round(wide, ndigits=places, round_mode="towards_zero")
    p, s = e.type.decimal_precision_scale
    return A._to_decimal(wide, p, s)


OPS: dict[str, Callable[..., Datum]] = {
    "round": op_round,
    "floor": op_floor,
    "ceil": op_ceil,
    "sqrt": op_sqrt,
    "cbrt": op_cbrt,
    "exp": op_exp,
    "ln": op_ln,
    "log10": op_log10,
    "power": op_power,
    "sign": op_sign,
    "trunc": op_trunc,
}
