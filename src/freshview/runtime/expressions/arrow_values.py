"""The values the Arrow evaluator (``arrow``) works on, with PostgreSQL's rules: a datum is an
Arrow array or scalar; NULL masks and broadcasting, checked integer arithmetic, decimals (Spark's
rounding, unscaled int64 fast paths), float and decimal text, character slices, LIKE patterns,
numeric arithmetic and comparisons, EXTRACT and date_trunc; and the few helpers the function families
share (a call's rows, per-row fallback).  No evaluator here: ``arrow`` and the families' modules
(``arrow_numeric``, ``arrow_text``, ``arrow_collation``, ``arrow_temporal``, ``arrow_json``) all build on
these helpers (so none imports another's module).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from decimal import Decimal as Decimal_
from typing import Callable, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import ExecutionError, FreshviewError
from freshview.runtime.expressions import pgtext
from freshview.schema import MAX_DECIMAL_PRECISION, SqlType

Datum = Union[pa.Array, pa.Scalar]


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------

def _fail(message: str) -> ExecutionError:
    return ExecutionError(message)


def _null(t: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, t)


def _broadcast(d: Datum, n: int, t: pa.DataType | None = None) -> pa.Array:
    if isinstance(d, pa.ChunkedArray):
        d = d.combine_chunks()
    if isinstance(d, pa.Scalar):
        if not d.is_valid:
            out = pa.nulls(n, d.type if t is None else t)
        else:
            out = pc.take(pa.array([d.as_py()], d.type), pa.array(np.zeros(n, np.int32)))
    else:
        out = d
    if t is not None and out.type != t:
        out = out.cast(t)
    return out


def _valid_mask(d: Datum, n: int) -> np.ndarray:
    if isinstance(d, pa.Scalar):
        return np.full(n, d.is_valid)
    if d.null_count == 0:
        return np.ones(n, bool)
    return d.is_valid().to_numpy(zero_copy_only=False)


def _truth(d: Datum, n: int, value: bool) -> np.ndarray:
    """Rows where the boolean ``d`` is exactly ``value`` (NULL is neither)."""
    if isinstance(d, pa.Scalar):
        return np.full(n, d.is_valid and d.as_py() is value)
    arr = pc.fill_null(d, not value).to_numpy(zero_copy_only=False)
    return arr if value else ~arr


def _any(d: Datum) -> bool:
    """Whether a boolean datum is true anywhere (NULL is not true)."""
    if isinstance(d, pa.Scalar):
        return bool(d.is_valid and d.as_py())
    return d.true_count > 0


def _is_scalar(d: Datum) -> bool:
    return isinstance(d, pa.Scalar)


def _np(d: Datum, n: int, fill) -> np.ndarray:
    """Values as numpy with NULLs replaced by ``fill``."""
    arr = _broadcast(d, n)
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(fill, arr.type))
    return arr.to_numpy(zero_copy_only=False)


def _raw(d: Datum, n: int) -> np.ndarray:
    """The values buffer of a fixed-width datum as numpy, without copying (NULL slots hold anything)."""
    if isinstance(d, pa.Scalar):
        return np.full(n, d.as_py() if d.is_valid else 0, dtype=d.type.to_pandas_dtype())
    width = d.type.byte_width
    return np.frombuffer(d.buffers()[1], dtype=d.type.to_pandas_dtype(), count=len(d), offset=d.offset * width)


def _from_np(values: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    return pa.array(values, type=t, mask=~valid if not valid.all() else None)


def _int_range_error(kind: str) -> ExecutionError:
    return _fail(pgtext.out_of_range(kind))


def _checked_int(fn: Callable, kind: str, *args: Datum) -> Datum:
    """``fn`` (a checked kernel or a safe cast to the integer type ``kind``); Arrow's overflow is PostgreSQL's."""
    try:
        return fn(*args)
    except pa.ArrowInvalid:
        raise _int_range_error(kind) from None


_MONTH_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm), vectorised."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _days_in_month(y: np.ndarray, m: np.ndarray) -> np.ndarray:
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    return _MONTH_DAYS[np.clip(m, 1, 12) - 1] + ((m == 2) & leap)


# ---------------------------------------------------------------------------
# decimals
# ---------------------------------------------------------------------------

_HALF_AWAY = "half_towards_infinity"  # Arrow's name for "ties away from zero" (PostgreSQL, Spark HALF_UP)
_OVERFLOW = "numeric field overflow"


def _d256(d: Datum, precision: int | None = None) -> Datum:
    t = d.type
    if pa.types.is_decimal(t):
        return d.cast(pa.decimal256(precision or t.precision, t.scale))
    raise TypeError(t)  # pragma: no cover


def _round_decimal(d: Datum, scale: int) -> Datum:
    """Round half away from zero to ``scale`` fractional digits (type unchanged, in decimal256)."""
    if d.type.scale <= scale:
        return d
    d = d.cast(pa.decimal256(76, d.type.scale)) if d.type.precision < 76 else d
    return pc.round(d, ndigits=scale, round_mode=_HALF_AWAY)


def _to_decimal(d: Datum, precision: int, scale: int) -> Datum:
    """A decimal/integer value as decimal128(precision, scale): rounded half away from zero, overflow raises."""
    if not _is_scalar(d) and pa.types.is_decimal128(d.type) and d.type.scale != scale:
        fast = _rescale_int64(d, precision, scale)
        if fast is not None:
            return fast
    if pa.types.is_integer(d.type):
        d = d.cast(pa.decimal256(76, 0))
    if d.type.scale > scale:
        d = _round_decimal(d, scale)
    target = pa.decimal128(precision, scale)
    if d.type == target:
        return d
    try:
        return d.cast(target)
    except pa.ArrowInvalid:
        raise _fail(_OVERFLOW) from None


def _rescale_int64(d: pa.Array, precision: int, scale: int) -> pa.Array | None:
    """``_to_decimal`` on unscaled int64 values, when they fit (the common case); else None."""
    n = len(d)
    unscaled = _unscaled_int64(d, n)
    diff = scale - d.type.scale
    if unscaled is None or abs(diff) > 18 or (np.abs(unscaled) >= 2**62).any():  # (2**63 can't round)
        return None
    if diff < 0:
        out = _round_int64(unscaled, -diff)
    else:
        if (np.abs(unscaled) >= 2**63 // _INT64_POW10[diff]).any():
            return None
        out = unscaled * _INT64_POW10[diff]
    valid = _valid_mask(d, n)
    if not _fits_precision(out[valid], precision):
        raise _fail(_OVERFLOW)
    return _int64_decimal(out, valid, precision, scale)


def _spark_adjust(precision: int, scale: int) -> tuple[int, int]:
    """Spark's DecimalType.adjustPrecisionScale (allowPrecisionLoss on)."""
    if precision <= MAX_DECIMAL_PRECISION:
        return precision, scale
    int_digits = precision - scale
    return MAX_DECIMAL_PRECISION, max(MAX_DECIMAL_PRECISION - int_digits, min(scale, 6))


def _unscaled_int64(d: Datum, n: int) -> np.ndarray | None:
    """The unscaled integers of a decimal128 datum when every one fits in int64 (NULLs as 0), else None.

    Read straight from the buffer: a decimal128 is two little-endian 64-bit words, and fits in
    int64 when the high word only extends the low word's sign.
    """
    t = d.type
    if not pa.types.is_decimal128(t):
        return None
    if _is_scalar(d):
        if not d.is_valid:
            return np.zeros(n, np.int64)
        v = int(d.as_py().scaleb(t.scale))
        return np.full(n, v, np.int64) if -2**63 <= v < 2**63 else None
    words = np.frombuffer(d.buffers()[1], dtype=np.int64, count=2 * len(d), offset=16 * d.offset).reshape(-1, 2)
    lo, hi = words[:, 0], words[:, 1]
    fits = hi == (lo >> 63)
    if d.null_count:
        valid = _valid_mask(d, n)
        if not (fits | ~valid).all():
            return None
        return np.where(valid, lo, 0)
    return lo if fits.all() else None


def _int64_decimal(values: np.ndarray, valid: np.ndarray, precision: int, scale: int) -> pa.Array:
    """decimal128(precision, scale) from unscaled int64 values (which must fit the precision)."""
    n = len(values)
    words = np.empty((n, 2), np.int64)
    words[:, 0] = values
    words[:, 1] = values >> 63
    nulls = int(n - valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.decimal128(precision, scale), n, [validity, pa.py_buffer(words)], nulls)


_INT64_POW10 = [10**k for k in range(19)]


def _round_int64(values: np.ndarray, digits: int) -> np.ndarray:
    """Drop ``digits`` decimal digits, rounding half away from zero."""
    q = _INT64_POW10[digits]
    mag = (np.abs(values) + q // 2) // q
    return np.where(values < 0, -mag, mag)


def _fits_precision(values: np.ndarray, precision: int) -> bool:
    return precision >= 19 or bool((np.abs(values) < _INT64_POW10[precision]).all())


def _decimal_to_float(d: Datum, n: int, t: pa.DataType) -> Datum:
    """Correctly rounded decimal -> float, as Spark's Decimal.toDouble (Arrow's own cast is not)."""
    if _is_scalar(d):
        return pa.scalar(None if not d.is_valid else str(d.as_py())).cast(t)
    if t == pa.float64() and d.type.scale <= 22:
        unscaled = _unscaled_int64(d, n)
        if unscaled is not None and np.abs(unscaled).max(initial=0) < 2**53:
            # Both operands exact in float64, so IEEE division rounds once, correctly.
            values = unscaled.astype(np.float64) / (10.0 ** d.type.scale)
            return _from_np(values, _valid_mask(d, n), t)
    return d.cast(pa.string()).cast(t)  # fast_float parsing is correctly rounded


def _decimal_text(d: Datum) -> Datum:
    """Plain decimal text (Spark's and PostgreSQL's output): 0.0000000001, never 1E-10."""
    t = d.type
    if t.scale == 0:
        return d.cast(pa.string())
    unscaled = d.view(pa.decimal128(t.precision, 0)) if not _is_scalar(d) else \
        pa.scalar(None if not d.is_valid else d.as_py().scaleb(t.scale), pa.decimal128(t.precision, 0))
    digits = pc.abs(unscaled).cast(pa.string())
    padded = pc.utf8_lpad(digits, width=t.scale + 1, padding="0")
    text = pc.replace_substring_regex(padded, pattern=f"([0-9]{{{t.scale}}})$", replacement=r".\1")
    return pc.if_else(pc.less(unscaled, pa.scalar(0, unscaled.type)),
                      pc.binary_join_element_wise("-", text, ""), text)


def _double_to_decimal(d: Datum, precision: int, scale: int) -> Datum:
    """Spark's double -> decimal: the double's shortest decimal text, rounded half away from zero.

    (Spark reads java.lang.Double.toString; on JDK < 19 that text is, for rare
    values, longer than the shortest one, so a last digit can differ.)
    """
    if _is_scalar(d):
        if not d.is_valid:
            return _null(pa.decimal128(precision, scale))
        f = d.as_py()
        if f != f or f in (float("inf"), float("-inf")):
            raise _fail("cannot convert NaN to numeric" if f != f else "cannot convert infinity to numeric")
        value = decimal.Decimal(repr(f)).quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP)
        if value.adjusted() >= precision - scale:
            raise _fail(_OVERFLOW)
        return pa.scalar(value, pa.decimal128(precision, scale))
    if pc.any(pc.is_nan(d)).as_py():
        raise _fail("cannot convert NaN to numeric")
    if pc.any(pc.is_inf(d)).as_py():
        raise _fail("cannot convert infinity to numeric")
    text = d.cast(pa.string())
    largest = pc.max(pc.abs(d)).as_py()
    if scale < MAX_DECIMAL_PRECISION and (largest is None or largest < 0.99 * 10.0 ** (37 - scale)):
        try:  # digits beyond scale + 1 are cut: they cannot change a half-up rounding at scale
            parsed = pc.cast(text, pa.decimal128(MAX_DECIMAL_PRECISION, scale + 1), safe=False)
            return _to_decimal(pc.round(parsed, ndigits=scale, round_mode=_HALF_AWAY), precision, scale)
        except pa.ArrowInvalid:
            pass  # 38 - scale integer digits or more: in 76 digits
    try:
        wide = pc.cast(text, pa.decimal256(76, 38), safe=False)
    except pa.ArrowInvalid:
        raise _fail(_OVERFLOW) from None
    return _to_decimal(wide, precision, scale)


def _literal_decimal(value, precision: int, scale: int) -> pa.Scalar:
    d = decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP)
    if d.adjusted() >= precision - scale and d != 0:
        raise _fail(_OVERFLOW)
    return pa.scalar(d, pa.decimal128(precision, scale))


# ---------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------

def _string_view(s: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a string array as numpy, offsets relative to data (no copy)."""
    bufs = s.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=len(s) + 1, offset=s.offset * 4)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _slice_chars(s: pa.Array, first: np.ndarray, count: np.ndarray, valid: np.ndarray) -> pa.Array:
    """Per-row ``count`` characters from 0-based character ``first`` of each UTF-8 string, vectorised."""
    offsets, data = _string_view(s)
    starts = np.flatnonzero((data & 0xC0) != 0x80)  # byte positions where a character starts
    starts = np.append(starts, len(data))
    ci = np.searchsorted(starts, offsets)  # character index of each row boundary
    nchars = ci[1:] - ci[:-1]
    a = np.clip(first, 0, nchars)
    b = np.clip(first + count, a, nchars)
    bstart = starts[ci[:-1] + a]
    bend = starts[ci[:-1] + b]
    lengths = np.where(valid, bend - bstart, 0)
    new_offsets = np.zeros(len(s) + 1, np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    idx = np.repeat(bstart - new_offsets[:-1], lengths) + np.arange(total)
    new_data = data[idx]
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(len(s), pa.py_buffer(new_offsets.astype(np.int32)),
                                       pa.py_buffer(new_data), validity, int((~valid).sum()))


_FLOAT_PARTS = r"^(?P<sign>-?)(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]+))?(?:e\+?(?P<exp>-?[0-9]+))?$"


def _chars(s: pa.Array, first: np.ndarray, count: np.ndarray) -> pa.Array:
    return _slice_chars(s, first.astype(np.int64), np.maximum(count, 0).astype(np.int64), np.ones(len(s), bool))


def _float_text(x: pa.Array, kind: str) -> pa.Array:
    """PostgreSQL's float output: shortest round-trip digits, exponent form outside 1e-4 .. 1e15 (1e6 for real).

    Arrow's cast gives the shortest digits, in its own layout (1e+14, 0.00001, 2147483600);
    they are re-laid out as PostgreSQL does (100000000000000, 1e-05, 2.1474836e+09).
    """
    n = len(x)
    limit = 15 if kind == "float8" else 6
    text = pc.fill_null(x.cast(pa.string()), "0")
    parts = pc.extract_regex(text, _FLOAT_PARTS)
    field = lambda name: pc.fill_null(pc.struct_field(parts, name), "")  # noqa: E731
    ipart, frac = field("int"), field("frac")
    exp = pc.if_else(pc.equal(field("exp"), ""), "0", field("exp")).cast(pa.int64())
    digits = pc.binary_join_element_wise(ipart, frac, "")
    stripped = pc.utf8_ltrim(digits, characters="0")
    sig = pc.utf8_rtrim(stripped, characters="0")
    num = lambda d: d.to_numpy(zero_copy_only=False).astype(np.int64)  # noqa: E731
    k = num(pc.utf8_length(sig))
    X = num(pc.utf8_length(ipart)) - 1 - (num(pc.utf8_length(digits)) - num(pc.utf8_length(stripped))) + num(exp)
    zeros = lambda count: pc.binary_repeat("0", pa.array(np.maximum(count, 0)))  # noqa: E731
    head = _chars(sig, np.zeros(n), X + 1)
    tail = _chars(sig, np.maximum(X + 1, 0), k)
    fixed = pc.if_else(pa.array(X < 0),
                       pc.binary_join_element_wise("0.", zeros(-X - 1), sig, ""),
                       pc.if_else(pa.array(k <= X + 1),
                                  pc.binary_join_element_wise(sig, zeros(X + 1 - k), ""),
                                  pc.binary_join_element_wise(head, ".", tail, "")))
    mantissa = pc.if_else(pa.array(k > 1),
                          pc.binary_join_element_wise(_chars(sig, np.zeros(n), np.ones(n)), ".",
                                                      _chars(sig, np.ones(n), k), ""), sig)
    exponent = pc.utf8_lpad(pa.array(np.abs(X)).cast(pa.string()), width=2, padding="0")
    sci = pc.binary_join_element_wise(mantissa, pa.array(np.where(X < 0, "e-", "e+")), exponent, "")
    number = pc.if_else(pa.array((X < -4) | (X >= limit)), sci, fixed)
    number = pc.if_else(pa.array(k == 0), "0", number)
    number = pc.binary_join_element_wise(field("sign"), number, "")
    out = pc.if_else(pc.equal(text, "nan"), "NaN",
                     pc.if_else(pc.equal(text, "inf"), "Infinity",
                                pc.if_else(pc.equal(text, "-inf"), "-Infinity", number)))
    return pc.if_else(x.is_valid(), out, _null(pa.string())) if x.null_count else out


def _like_pattern_check(pattern: Datum) -> None:
    odd_escape = r"(^|[^\\])(\\\\)*\\$"
    if _is_scalar(pattern):
        if pattern.is_valid and re.search(odd_escape, pattern.as_py()):
            raise _fail("LIKE pattern must not end with escape character")
    elif pc.any(pc.match_substring_regex(pattern, odd_escape)).as_py():
        raise _fail("LIKE pattern must not end with escape character")


_PG_ESCAPE = re.compile(r"\\(.)", re.S)


def _like_unescape(pattern: Datum) -> Datum:
    r"""Reduce escapes of ordinary characters (PostgreSQL: \a is a literal a): Arrow would read
    them as regular-expression escapes (\a = BEL).  Escaped %, _ and backslash stay."""
    if _is_scalar(pattern):
        if not pattern.is_valid:
            return pattern
        return pa.scalar(_PG_ESCAPE.sub(lambda m: m.group(0) if m.group(1) in "\\%_" else m.group(1),
                                        pattern.as_py()))
    return pc.replace_substring_regex(pattern, pattern=r"(?s)(\\[\\%_])|\\(.)", replacement=r"\1\2")


def _per_pattern(values: pa.Array, patterns: pa.Array, fn: Callable[[pa.Array, str], pa.Array],
                 out_type: pa.DataType) -> pa.Array:
    """Apply a kernel whose pattern is an option once per distinct pattern (fallback: rows with
    different patterns need separate kernel calls; a loop over distinct patterns, not rows)."""
    n = len(values)
    out = pa.nulls(n, out_type)
    codes = pc.dictionary_encode(patterns).combine_chunks() if isinstance(patterns, pa.ChunkedArray) \
        else pc.dictionary_encode(patterns)
    idx = pc.fill_null(codes.indices, -1).to_numpy(zero_copy_only=False)
    valid_values = _valid_mask(values, n)
    for k, pattern in enumerate(codes.dictionary.to_pylist()):
        rows = (idx == k) & valid_values
        if rows.any():
            part = fn(values.filter(pa.array(rows)), pattern)
            out = pc.replace_with_mask(out, pa.array(rows), part)
    return out


# ---------------------------------------------------------------------------
# the evaluator
# ---------------------------------------------------------------------------

_INT_KINDS = ("int2", "int4", "int8")


# ---------------------------------------------------------------------------
# op helpers
# ---------------------------------------------------------------------------

_LITERALS: dict[tuple, pa.Scalar] = {}


def _literal(value, t: SqlType) -> pa.Scalar:
    if value is None:
        return _null(t.arrow)
    kind = t.kind
    if kind in _INT_KINDS:
        try:
            return pa.scalar(int(value), t.arrow)
        except (pa.ArrowInvalid, OverflowError):
            raise _int_range_error(kind) from None
    if kind == "numeric":
        p, s = t.decimal_precision_scale
        return _literal_decimal(value, p, s)
    if kind in ("float4", "float8"):
        return pa.scalar(float(value), t.arrow)
    if kind == "timestamp" and isinstance(value, dt.datetime):
        return pa.scalar(value.replace(tzinfo=None), t.arrow)
    if kind == "timestamptz" and isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return pa.scalar(value.astimezone(dt.timezone.utc), t.arrow)
    if kind in ("timestamp", "timestamptz") and isinstance(value, dt.date):
        tz = dt.timezone.utc if kind == "timestamptz" else None
        return pa.scalar(dt.datetime(value.year, value.month, value.day, tzinfo=tz), t.arrow)
    if kind == "interval":
        months, days, micros = value
        return pa.scalar((months, days, micros * 1000), t.arrow)
    if kind == "null":
        return _null(pa.null())
    return pa.scalar(value, t.arrow)


def _as(d: Datum, t: SqlType) -> Datum:
    return d if d.type == t.arrow else d.cast(t.arrow)


def _as_type(d: Datum, t: pa.DataType) -> Datum:
    return d if d.type == t else d.cast(t)


def _as_decimal(d: Datum, t: SqlType) -> Datum:
    if pa.types.is_decimal(d.type):
        return d
    if pa.types.is_null(d.type):
        return _null(pa.decimal128(38, 0))
    return d.cast(pa.decimal128(38, 0))  # integers (never fractional here)


def _text(d: Datum) -> Datum:
    return d if pa.types.is_string(d.type) else d.cast(pa.string())


def _case_when(conds: list[Datum], values: list[Datum], n: int, t: pa.DataType) -> Datum:
    """First value whose condition is true (NULL counts as false), else the last value."""
    values = [_as_type(v, t) for v in values]
    if pa.types.is_null(t):
        return _null(t)
    out = values[-1]
    for cond, value in zip(reversed(conds), reversed(values[:-1])):
        out = pc.if_else(pc.fill_null(cond, False), value, out)
    return out


def _numeric_arith(op: str, a: Datum, b: Datum, rt: SqlType, n: int) -> Datum:
    """Exact decimal + - *, then Spark's intermediate rounding, then the declared type."""
    (p1, s1), (p2, s2) = (a.type.precision, a.type.scale), (b.type.precision, b.type.scale)
    if not (_is_scalar(a) and _is_scalar(b)):
        fast = _numeric_arith_int64(op, a, b, rt, n)
        if fast is not None:
            return fast
    if op == "*":
        sp, ss = _spark_adjust(p1 + p2 + 1, s1 + s2)
        wa, wb = _d256(a), _d256(b)
        if p1 + p2 + 1 > 76:  # Arrow's decimal256 tops at 76 digits: narrow one side if its values allow
            try:
                wb = _d256(b, 76 - p1 - 1)
            except pa.ArrowInvalid:
                try:
                    wa = _d256(a, 76 - p2 - 1)
                except pa.ArrowInvalid:
                    raise _fail(_OVERFLOW) from None
        exact = pc.multiply_checked(wa, wb)
        big = _rows_beyond(exact, 38)  # Spark multiplies in a 38-digit MathContext (half up) first
        if big is not None:
            exact = _round_significant(exact, big, 38, decimal.ROUND_HALF_UP)
    else:
        sp, ss = _spark_adjust(max(p1 - s1, p2 - s2) + max(s1, s2) + 1, max(s1, s2))
        fn = pc.add_checked if op == "+" else pc.subtract_checked
        exact = fn(_d256(a), _d256(b))
    spark_result = _to_decimal(exact, sp, ss)
    p, s = rt.decimal_precision_scale
    return _to_decimal(spark_result, p, s)


def _rows_beyond(exact: Datum, digits: int) -> np.ndarray | None:
    """Rows of a decimal whose unscaled value has more than ``digits`` digits (None: no such row)."""
    limit = pa.scalar(Decimal_(10) ** digits, pa.decimal256(76, 0)).cast(pa.decimal256(76, 0))
    unscaled = _broadcast(exact, 1 if _is_scalar(exact) else len(exact))
    unscaled = unscaled.cast(pa.decimal256(76, unscaled.type.scale)).view(pa.decimal256(76, 0))
    big = pc.fill_null(pc.greater_equal(pc.abs(unscaled), limit), False).to_numpy(zero_copy_only=False)
    return big if big.any() else None


def _round_significant(exact: Datum, rows: np.ndarray, digits: int, rounding: str) -> Datum:
    """Round the given rows to ``digits`` significant digits (fallback, per row: only values beyond
    ``digits`` digits, which Spark rounds through a java.math.MathContext)."""
    scalar = _is_scalar(exact)
    arr = _broadcast(exact, len(rows))
    ctx = decimal.Context(prec=digits, rounding=rounding)
    values = arr.to_pylist()
    fixed = [ctx.plus(v) if hit and v is not None else v for v, hit in zip(values, rows)]
    scale = arr.type.scale
    quantum = Decimal_(1).scaleb(-scale)
    fixed = [None if v is None else v.quantize(quantum, rounding=decimal.ROUND_HALF_UP,
                                                context=decimal.Context(prec=200)) for v in fixed]
    try:
        out = pa.array(fixed, arr.type)
    except (pa.ArrowInvalid, decimal.InvalidOperation):
        raise _fail(_OVERFLOW) from None
    return out[0] if scalar else out


def _spark_unary_minus(a: Datum, fn: Callable, rt: SqlType) -> Datum:
    """Decimal negation/abs as the Spark lowering computes them: exact for scales <= 6 (0 - x);
    beyond, Spark's unary minus rounds to 34 significant digits (half even) first."""
    p, s = rt.decimal_precision_scale
    if s > 6 and not _is_scalar(a):
        negative = pc.fill_null(pc.less(a, pa.scalar(Decimal_(0), a.type)), False).to_numpy(zero_copy_only=False)
        big = _rows_beyond(a, 34)
        if big is not None:
            rows = big & (negative if fn is pc.abs else True)
            if rows.any():
                a = _round_significant(a.cast(pa.decimal256(76, a.type.scale)), rows, 34, decimal.ROUND_HALF_EVEN)
    return _to_decimal(fn(a), p, s)


def _numeric_arith_int64(op: str, a: Datum, b: Datum, rt: SqlType, n: int) -> pa.Array | None:
    """The same on unscaled int64 values, when everything fits (the common case); else None."""
    ua, ub = _unscaled_int64(a, n), _unscaled_int64(b, n)
    if ua is None or ub is None:
        return None
    (p1, s1), (p2, s2) = (a.type.precision, a.type.scale), (b.type.precision, b.type.scale)
    p, s = rt.decimal_precision_scale
    valid = _valid_mask(a, n) & _valid_mask(b, n)
    if op == "*":
        limit = 2**31
        if ((ua >= limit) | (ua <= -limit) | (ub >= limit) | (ub <= -limit)).any():
            return None
        exact, scale = ua * ub, s1 + s2
        spark_scale = _spark_adjust(p1 + p2 + 1, scale)[1]
    else:
        if s1 != s2:
            return None
        exact = ua + ub if op == "+" else ua - ub
        same_signs = ~(ua ^ ub) if op == "+" else (ua ^ ub)
        if ((same_signs & (ua ^ exact)) < 0).any() or (np.abs(exact) >= 2**62).any():  # overflow, or too
            return None  # close to it to round
        scale = s1
        spark_scale = _spark_adjust(max(p1 - s1, p2 - s2) + max(s1, s2) + 1, scale)[1]
    if spark_scale < scale:
        exact, scale = _round_int64(exact, scale - spark_scale), spark_scale
    if s < scale:
        exact = _round_int64(exact, scale - s)
    elif s > scale:
        if s - scale > 18 or (np.abs(exact) >= 2**63 // _INT64_POW10[s - scale]).any():
            return None
        exact = exact * _INT64_POW10[s - scale]
    if not _fits_precision(exact[valid], p):
        raise _fail(_OVERFLOW)
    return _int64_decimal(np.where(valid, exact, 0), valid, p, s)


def _numeric_mod(a: Datum, b: Datum, valid: np.ndarray, n: int, rt: SqlType) -> Datum:
    scale = max(a.type.scale, b.type.scale)
    a = _to_decimal(a, 38, scale) if a.type.scale != scale else a
    b = _to_decimal(b, 38, scale) if b.type.scale != scale else b
    p, s = rt.decimal_precision_scale
    ua, ub = _unscaled_int64(a, n), _unscaled_int64(b, n)
    if ua is not None and ub is not None:
        ub = np.where(valid & (ub != 0) & (ub != -1), ub, 1)  # x % -1 = 0, and INT64_MIN % -1 traps
        out = np.where(valid, np.fmod(ua, ub), 0)
        return _to_decimal(_int64_decimal(out, valid, 38, scale), p, s)
    # Fallback (per row, Python decimals): unscaled values beyond int64.
    xs, ys = _broadcast(a, n).to_pylist(), _broadcast(b, n).to_pylist()
    ctx = decimal.Context(prec=80)
    out_values = [None if x is None or y is None else ctx.remainder(x, y) for x, y in zip(xs, ys)]
    return _to_decimal(pa.array(out_values, pa.decimal256(76, scale)), p, s)


_CMP = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
        ">": pc.greater, ">=": pc.greater_equal}


def _float_compare(op: str, a: Datum, b: Datum) -> Datum:
    """IEEE comparison corrected to PostgreSQL's order: NaN = NaN, NaN above everything."""
    if not (_has_nan(a) or _has_nan(b)):
        return _CMP[op](a, b)
    if op in (">", ">="):
        return _float_compare({">": "<", ">=": "<="}[op], b, a)
    nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
    if op in ("=", "<>"):
        eq = pc.or_(pc.equal(a, b), pc.and_(nan_a, nan_b))
        return eq if op == "=" else pc.invert(eq)
    if op == "<":
        return pc.or_(pc.less(a, b), pc.and_(pc.invert(nan_a), nan_b))
    return pc.or_(pc.less_equal(a, b), nan_b)  # <=


def _has_nan(d: Datum) -> bool:
    """Whether any value may be NaN (NULL slots may count: a false positive only costs the slow path)."""
    if _is_scalar(d):
        return d.is_valid and d.as_py() != d.as_py()
    return bool(np.isnan(_raw(d, len(d))).any())


# ---------------------------------------------------------------------------
# EXTRACT and date_trunc
# ---------------------------------------------------------------------------

def _micros(a: pa.Array, kind: str) -> np.ndarray:
    if kind == "date":
        return pc.fill_null(a.cast(pa.int32()), 0).to_numpy(zero_copy_only=False).astype(np.int64) * 86_400_000_000
    return pc.fill_null(a.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)


def _micros_of_minute(a: pa.Array, kind: str) -> pa.Array:
    """Seconds (with fraction) as an unscaled integer of microseconds."""
    values = np.mod(_micros(a, kind), 60_000_000)
    return _from_np(values, _valid_mask(a, len(a)), pa.int64()).cast(pa.decimal128(38, 0))


def _scaled(unscaled: pa.Array, scale: int) -> pa.Array:
    return unscaled.view(pa.decimal128(38, scale))


def _year_based(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[pa.Array, str], pa.Array]:
    def extract(a: pa.Array, kind: str) -> pa.Array:
        years = pc.fill_null(pc.year(a), 1).to_numpy(zero_copy_only=False)
        return _from_np(fn(years), _valid_mask(a, len(a)), pa.int64())
    return extract


def _century(y: np.ndarray) -> np.ndarray:
    return np.where(y > 0, (y - 1) // 100 + 1, np.floor_divide(y, 100))


def _millennium(y: np.ndarray) -> np.ndarray:
    return np.where(y > 0, (y - 1) // 1000 + 1, np.floor_divide(y, 1000))


def _epoch(a: pa.Array, kind: str) -> pa.Array:
    if kind == "date":
        return pc.multiply(a.cast(pa.int32()).cast(pa.int64()), 86_400).cast(pa.decimal128(38, 0))
    return _scaled(a.cast(pa.int64()).cast(pa.decimal128(38, 0)), 6)


_EXTRACT: dict[str, Callable[[pa.Array, str], pa.Array]] = {
    "year": lambda a, k: pc.year(a),
    "month": lambda a, k: pc.month(a),
    "day": lambda a, k: pc.day(a),
    "hour": lambda a, k: pc.hour(a),
    "minute": lambda a, k: pc.minute(a),
    "second": lambda a, k: _scaled(_micros_of_minute(a, k), 6),
    "milliseconds": lambda a, k: _scaled(_micros_of_minute(a, k), 3),
    "microseconds": lambda a, k: _micros_of_minute(a, k),
    "quarter": lambda a, k: pc.quarter(a),
    "dow": lambda a, k: pc.day_of_week(a, count_from_zero=True, week_start=7),  # Sunday = 0
    "isodow": lambda a, k: pc.day_of_week(a, count_from_zero=False, week_start=1),  # Monday = 1 .. Sunday = 7
    "doy": lambda a, k: pc.day_of_year(a),
    "week": lambda a, k: pc.iso_week(a),
    "epoch": _epoch,
    "decade": _year_based(lambda y: np.floor_divide(y, 10)),
    "century": _year_based(_century),
    "millennium": _year_based(_millennium),
}

_TRUNC_UNITS = {
    "microseconds": None, "milliseconds": "millisecond", "second": "second", "minute": "minute",
    "hour": "hour", "day": "day", "week": "week", "month": "month", "quarter": "quarter", "year": "year",
}
_TRUNC_YEARS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    # PostgreSQL: decades start at years divisible by 10, centuries at 1901, 2001, millennia at 2001.
    "decade": lambda y: np.floor_divide(y, 10) * 10,
    "century": lambda y: np.where(y > 0, ((y + 99) // 100) * 100 - 99, y),
    "millennium": lambda y: np.where(y > 0, ((y + 999) // 1000) * 1000 - 999, y),
}


def _trunc(a: pa.Array, unit: str) -> pa.Array:
    if unit in _TRUNC_YEARS:
        years = pc.fill_null(pc.year(a), 1970).to_numpy(zero_copy_only=False)
        start = _TRUNC_YEARS[unit](years)
        days = _days_from_civil(start, np.ones_like(start), np.ones_like(start))
        return _from_np(days * 86_400_000_000, _valid_mask(a, len(a)), pa.int64()).cast(a.type)
    arrow_unit = _TRUNC_UNITS.get(unit, "")
    if arrow_unit == "":
        raise FreshviewError(f"internal: date_trunc({unit})")
    if arrow_unit is None:
        return a
    return pc.floor_temporal(a, unit=arrow_unit, week_starts_monday=True)


# -- shared by the function families (arrow_numeric, arrow_text, arrow_collation, arrow_temporal) --------
def _scalar_out(fn: Callable[..., Datum], *args: Datum) -> Datum:
    """Run an array kernel on scalars too (as a one-row array)."""
    if all(_is_scalar(a) for a in args):
        return fn(*[_broadcast(a, 1) for a in args])[0]
    return fn(*args)


def _all_scalar(ev, e) -> bool:
    """Whether every argument of call ``e`` is a literal (the call's result is then one scalar)."""
    return all(a.is_literal for a in e.args)


def _rows(ev, e) -> int:
    """Rows to compute: one for an all-constant call (its scalar result), else the batch's."""
    return 1 if _all_scalar(ev, e) else ev.n


def _per_row(fn: Callable[..., object], args: list[Datum], n: int, out_type: pa.DataType) -> Datum:
    """Fallback: ``fn`` on each row's Python values (None if any is NULL)."""
    if all(_is_scalar(a) for a in args):
        values = [a.as_py() for a in args]
        return pa.scalar(None if None in values else fn(*values), out_type)
    cols = [_broadcast(a, n).to_pylist() for a in args]
    out = [None if None in row else fn(*row) for row in zip(*cols)]
    return pa.array(out, out_type)
