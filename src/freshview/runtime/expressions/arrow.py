"""Evaluating typed plan expressions over Arrow arrays, in-process, with PostgreSQL semantics.

The second executor of the plan's scalar expressions (``spark`` is the first):
small steps run on the driver over Arrow and must produce exactly what the
Spark lowering produces, which matches PostgreSQL.  The rules are therefore
the Spark lowering's, op by op:

* Integer arithmetic is checked (``*_checked`` kernels) and overflows at the
  result type's range ("integer out of range"); ``/`` truncates toward zero,
  ``%`` takes the dividend's sign; a zero divisor raises "division by zero"
  (float ``NaN / 0`` is NaN, as in PostgreSQL).
* Numeric ``+ - * %`` are exact, then rounded as Spark's decimal arithmetic
  rounds (``DecimalPrecision``: a result wider than 38 digits keeps
  ``max(6, 38 - integer digits)`` fractional digits, half away from zero;
  products beyond 38 significant digits and negations beyond 34 go through
  Spark's ``MathContext``) before the cast to the declared type.  Numeric
  ``/`` is computed in float64, as the Spark lowering does, and the quotient
  becomes a decimal the way Spark converts a double: its shortest decimal
  spelling, rounded half away from zero.
* NULLs: an operand is evaluated only where the operands Spark evaluates
  before it are non-NULL (Spark's generated code skips it; PostgreSQL would
  evaluate it), so ``NULL + 1/0`` is NULL in both executors; for ``/`` and
  ``%`` Spark evaluates the divisor first.
* CASE, COALESCE, AND and OR are lazy: a sub-expression that can fail is
  first tried on the whole batch, and only if that raises, evaluated again on
  the rows that need it (take, evaluate, scatter back); sub-expressions that
  cannot fail are simply evaluated on the whole batch.
* Floats compare as in PostgreSQL and Spark: NaN equals NaN and sorts above
  every other value; -0 equals 0.
* Text input (casts from text) accepts exactly ``pgtext``'s spellings, the
  same as the Spark lowering; text output of floats is PostgreSQL's.

Literals stay Arrow scalars (broadcast only in the final result), so
``x + 1`` is one kernel call.  Decimals whose unscaled values fit in int64 are
computed on those integers with numpy, others in decimal256 kernels.
Per-row Python is left only where Arrow has no kernel and the case is rare:
numeric ``%`` on unscaled values beyond int64, Spark's significant-digit
rounding of products beyond 38 digits and negations beyond 34 (those rows
only), LIKE and trim with a different pattern on each row (one kernel call
per distinct pattern), and error messages that name the offending value.

Errors are ``ExecutionError`` with PostgreSQL's messages, never Arrow's.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from decimal import Decimal as Decimal_
from typing import Callable, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import ExecutionError, FreshviewError
from freshview.plan.expr import Call, Case, Cast, ColumnRef, Expr, Literal
from freshview.runtime.expressions import pgtext
from freshview.runtime.expressions.pgtext import DATE_MAX_DAYS, DATE_MIN_DAYS
from freshview.schema import MAX_DECIMAL_PRECISION, SqlType
from freshview.sql.typing import common_type

Datum = Union[pa.Array, pa.Scalar]

__all__ = ["evaluate", "evaluate_filter"]


def evaluate(expr: Expr, table: pa.Table | pa.RecordBatch) -> pa.Array:
    """``expr`` over ``table`` (columns ``c0, c1, ...``): an array of ``expr.type.arrow``, one value per row."""
    ev = _Evaluator.of_table(table)
    try:
        out = ev.visit(expr)
        return _broadcast(out, ev.n, expr.type.arrow)
    except FreshviewError:
        raise
    except (pa.ArrowException, OverflowError, decimal.InvalidOperation) as exc:  # pragma: no cover - a bug
        raise ExecutionError(f"internal: evaluating {expr}: {exc}") from None


def evaluate_filter(expr: Expr, table: pa.Table | pa.RecordBatch) -> pa.BooleanArray:
    """WHERE semantics: a boolean array without NULLs (NULL counts as false), for ``table.filter``."""
    return pc.fill_null(evaluate(expr, table), False)


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

# Expressions that never raise, by op (arguments permitting).
_SAFE_OPS = frozenset({
    "=", "<>", "<", "<=", ">", ">=", "and", "or", "not", "is_null", "in", "||", "concat",
    "lower", "upper", "length", "coalesce", "nullif", "greatest", "least", "trim", "ltrim", "rtrim",
    "extract", "date_trunc", "round", "floor", "ceil",  # rounding never gains digits beyond the result type
})


class _Evaluator:
    def __init__(self, column: Callable[[int], pa.Array], n: int, memo: dict[int, bool]) -> None:
        self._column = column
        self._cols: dict[int, pa.Array] = {}
        self.n = n
        self._fails = memo  # id(expr) -> can it raise?

    @staticmethod
    def of_table(table: pa.Table | pa.RecordBatch) -> "_Evaluator":
        def column(i: int) -> pa.Array:
            col = table.column(f"c{i}")
            if isinstance(col, pa.ChunkedArray):
                return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            return col
        return _Evaluator(column, table.num_rows, {})

    def column(self, i: int) -> pa.Array:
        col = self._cols.get(i)
        if col is None:
            col = self._cols[i] = self._column(i)
        return col

    # -- laziness ------------------------------------------------------------
    def can_fail(self, e: Expr) -> bool:
        key = id(e)
        known = self._fails.get(key)
        if known is None:
            known = self._fails[key] = _can_fail(e, self.can_fail)
        return known

    def where(self, e: Expr, mask: np.ndarray | Callable[[], np.ndarray]) -> Datum:
        """``e`` as if evaluated on the rows of ``mask`` only: values on those rows; other rows hold
        anything (NULL, or the value ``e`` has there).  Only an error decides: a row outside the mask
        must not raise.  So ``e`` is first tried on the whole batch (one pass; most batches have no
        failing row at all), and only if that raises, evaluated again on the masked rows alone.
        ``mask`` may be a function, called only then.
        """
        if not self.can_fail(e):
            return self.visit(e)
        if callable(mask) or not mask.all():
            try:
                return self.visit(e)
            except ExecutionError:
                pass
        if callable(mask):
            mask = mask()
        if mask.all():
            return self.visit(e)  # (raises)
        t = e.type.arrow
        if not mask.any():
            return _null(t)
        idx = pa.array(np.flatnonzero(mask).astype(np.int32))
        sub = _Evaluator(lambda i: self.column(i).take(idx), len(idx), self._fails)
        part = sub.visit(e)
        if _is_scalar(part):
            return part
        positions = np.cumsum(mask, dtype=np.int64) - 1
        return part.take(pa.array(positions, mask=~mask))

    def strict_args(self, args: Sequence[Expr], order: Sequence[int] | None = None) -> list[Datum]:
        """Operands in Spark's order; each evaluated only where the ones before it are non-NULL.

        (Tried eagerly first: if no operand raises anywhere, which rows were skipped cannot matter.)
        """
        order = list(order) if order is not None else list(range(len(args)))
        if not any(self.can_fail(args[i]) for i in order[1:]):
            return [self.visit(a) for a in args]
        try:
            return [self.visit(a) for a in args]
        except ExecutionError:
            pass
        out: list[Datum] = [None] * len(args)  # type: ignore[list-item]
        alive: np.ndarray | None = None
        for k, i in enumerate(order):
            out[i] = self.where(args[i], alive) if alive is not None else self.visit(args[i])
            if any(self.can_fail(args[j]) for j in order[k + 1:]):
                valid = _valid_mask(out[i], self.n)
                alive = valid if alive is None else alive & valid
        return out

    # -- dispatch ------------------------------------------------------------
    def visit(self, e: Expr) -> Datum:
        return getattr(self, "visit_" + type(e).__name__)(e)

    def visit_ColumnRef(self, e: ColumnRef) -> Datum:
        col = self.column(e.index)
        return col if col.type == e.type.arrow else col.cast(e.type.arrow)

    def visit_Literal(self, e: Literal) -> Datum:
        key = (e.type, type(e.value), repr(e.value))  # repr tells -0.0 from 0.0 (equal, same hash)
        scalar = _LITERALS.get(key)
        if scalar is None:
            scalar = _literal(e.value, e.type)
            if len(_LITERALS) < 10_000:
                _LITERALS[key] = scalar
        return scalar

    def visit_Cast(self, e: Cast) -> Datum:
        return self.cast(self.visit(e.arg), e.arg.type, e.type)

    def visit_Call(self, e: Call) -> Datum:
        name, _, param = e.op.partition(":")
        method = _OPS.get(name)
        if method is None:
            raise FreshviewError(f"internal: no Arrow evaluation for {e.op}")
        return method(self, e, param) if param else method(self, e)

    def visit_Case(self, e: Case) -> Datum:
        t = e.type.arrow
        default = e.default if e.default is not None else Literal(e.type, None)
        lazy = any(self.can_fail(c) for c, _ in e.whens[1:]) or \
            any(self.can_fail(v) for _, v in e.whens) or self.can_fail(default)
        try:  # every branch on every row: right unless some row raises (then lazily, below)
            conds = [self.visit(c) for c, _ in e.whens]
            values = [self.visit(v) for _, v in e.whens] + [self.visit(default)]
            return _case_when(conds, values, self.n, t)
        except ExecutionError:
            if not lazy:
                raise
        remaining = np.ones(self.n, bool)
        masks: list[np.ndarray] = []
        for cond, _ in e.whens:
            taken = _truth(self.where(cond, remaining), self.n, True) & remaining
            masks.append(taken)
            remaining &= ~taken
        masks.append(remaining)
        values = [self.where(v, m) for (_, v), m in zip(e.whens, masks)] + [self.where(default, remaining)]
        return _case_when([pa.array(m) for m in masks[:-1]], values, self.n, t)

    # -- arithmetic ----------------------------------------------------------
    def op_add(self, e: Call) -> Datum:
        return self._arith(e, "+")

    def op_sub(self, e: Call) -> Datum:
        return self._arith(e, "-")

    def op_mul(self, e: Call) -> Datum:
        return self._arith(e, "*")

    def _arith(self, e: Call, op: str) -> Datum:
        ta, tb = e.args[0].type, e.args[1].type
        if e.type.kind == "date" or (ta.kind == "date" and tb.kind == "date"):
            return self._date_arith(e, op)
        a, b = self.strict_args(e.args)
        rt = e.type
        if rt.is_integer:
            fn = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}[op]
            return _checked_int(fn, rt.kind, _as(a, rt), _as(b, rt))
        if rt.is_float:
            fn = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op]
            return fn(_as(a, rt), _as(b, rt))
        return _numeric_arith(op, _as_decimal(a, ta), _as_decimal(b, tb), rt, self.n)

    def _date_arith(self, e: Call, op: str) -> Datum:
        ta, tb = e.args[0].type, e.args[1].type
        if ta.kind == "date" and tb.kind == "date":  # date - date: days, int4
            a, b = self.strict_args(e.args)
            return _checked_int(pc.subtract_checked, "int4", a.cast(pa.int32()), b.cast(pa.int32()))
        a, b = self.strict_args(e.args)
        date, days = (a, b) if ta.kind == "date" else (b, a)
        fn = pc.add if op == "+" else pc.subtract
        n = fn(date.cast(pa.int32()).cast(pa.int64()), days.cast(pa.int64()))
        lo, hi = (n.as_py(), n.as_py()) if _is_scalar(n) else pc.min_max(n).values()
        lo, hi = (lo.as_py(), hi.as_py()) if isinstance(lo, pa.Scalar) else (lo, hi)
        if (lo is not None and lo < DATE_MIN_DAYS) or (hi is not None and hi > DATE_MAX_DAYS):
            raise _fail("date out of range")
        return n.cast(pa.int32()).cast(pa.date32())

    def op_div(self, e: Call) -> Datum:
        if e.type.is_float:
            a, b = self.visit(e.args[0]), self.visit(e.args[1])
            zero = pc.and_(pc.equal(b, 0), pc.invert(pc.is_nan(a)))
            if (zero.as_py() if _is_scalar(zero) else pc.any(zero).as_py()):
                raise _fail("division by zero")
            return pc.divide(_as(a, e.type), _as(b, e.type))  # NaN / 0 is NaN, as in PostgreSQL
        b, a = self._divmod_args(e)
        rt = e.type
        if rt.is_integer:
            return _checked_int(pc.divide_checked, rt.kind, _as(a, rt), _as(b, rt))
        # numeric: in float64, as the Spark lowering (see spark.py)
        fa = _decimal_to_float(_as_decimal(a, e.args[0].type), self.n, pa.float64())
        fb = _decimal_to_float(_as_decimal(b, e.args[1].type), self.n, pa.float64())
        p, s = rt.decimal_precision_scale
        return _double_to_decimal(pc.divide(fa, fb), p, s)

    def op_mod(self, e: Call) -> Datum:
        b, a = self._divmod_args(e)
        rt = e.type
        n = self.n
        valid = _valid_mask(a, n) & _valid_mask(b, n)
        if rt.is_integer or rt.is_float:
            t = rt.arrow
            x, y = _raw(_as(a, rt), n), _raw(_as(b, rt), n)
            if rt.is_integer:  # x % -1 = 0 (INT_MIN % -1 traps in C); a zero divisor is a NULL row's
                y = np.where((y == 0) | (y == -1), np.ones_like(y), y)
            with np.errstate(all="ignore"):
                out = np.fmod(x, y)  # C's remainder: the dividend's sign
            return _from_np(out, valid, t)
        return _numeric_mod(_as_decimal(a, e.args[0].type), _as_decimal(b, e.args[1].type), valid, n, rt)

    def _divmod_args(self, e: Call) -> tuple[Datum, Datum]:
        """Spark's DivModLike: divisor first, dividend where the divisor is non-NULL; zero raises."""
        a, b = self.strict_args(e.args, (1, 0))
        zero = pc.equal(b, pa.scalar(0, b.type) if not pa.types.is_decimal(b.type) else
                        pa.scalar(decimal.Decimal(0), b.type))
        if _any(zero) and _any(pc.and_(zero, pc.is_valid(a))):
            raise _fail("division by zero")
        return b, a

    def op_neg(self, e: Call) -> Datum:
        (a,) = self.strict_args(e.args)
        if e.type.is_integer:
            return _checked_int(pc.negate_checked, e.type.kind, a)
        if e.type.kind == "numeric":
            return _spark_unary_minus(a, pc.negate, e.type)
        return pc.negate(a)

    def op_abs(self, e: Call) -> Datum:
        (a,) = self.strict_args(e.args)
        if e.type.is_integer:
            return _checked_int(pc.abs_checked, e.type.kind, a)
        if e.type.kind == "numeric":
            return _spark_unary_minus(a, pc.abs, e.type)
        return pc.abs(a)

    # -- comparisons and logic ----------------------------------------------
    def op_cmp(self, e: Call) -> Datum:
        a, b = self.strict_args(e.args)
        return _compare(e.op, a, b, e.args[0].type, e.args[1].type, self.n)

    def op_and(self, e: Call) -> Datum:
        a = self.visit(e.args[0])
        b = self.where(e.args[1], lambda: ~_truth(a, self.n, False))
        return pc.and_kleene(a, b)

    def op_or(self, e: Call) -> Datum:
        a = self.visit(e.args[0])
        b = self.where(e.args[1], lambda: ~_truth(a, self.n, True))
        return pc.or_kleene(a, b)

    def op_not(self, e: Call) -> Datum:
        return pc.invert(self.visit(e.args[0]))

    def op_is_null(self, e: Call) -> Datum:
        return pc.is_null(self.visit(e.args[0]))

    def op_in(self, e: Call) -> Datum:
        target_e, *items = e.args
        target = self.visit(target_e)
        tt = target_e.type
        if all(isinstance(i, Literal) for i in items) and not tt.is_float and tt.kind != "null":
            values = [i.value for i in items]
            present = [_literal(v, tt) for v in values if v is not None]
            if present:
                hit = pc.is_in(target, value_set=pa.array([p.as_py() for p in present], tt.arrow))
            else:
                hit = pa.scalar(False)
            if None in values:
                hit = pc.if_else(hit, True, _null(pa.bool_()))
            if not _is_scalar(target) and target.null_count == 0:
                return hit
            return pc.if_else(pc.is_null(target), _null(pa.bool_()), hit)
        # Spark's In: items in order, each only where the target is non-NULL and no item matched yet.
        result: Datum = pa.scalar(False)
        pending = _valid_mask(target, self.n)
        for item in items:
            value = self.where(item, pending)
            eq = _compare("=", target, value, tt, item.type, self.n)
            result = pc.or_kleene(result, eq)
            if any(self.can_fail(i) for i in items):
                pending = pending & ~_truth(eq, self.n, True)
        return pc.if_else(pc.is_null(target), _null(pa.bool_()), result)

    def op_like(self, e: Call, ignore_case: bool = False) -> Datum:
        s, pattern = self.strict_args(e.args)
        if e.args[0].type.kind == "null" or e.args[1].type.kind == "null":
            return _null(pa.bool_())
        _like_pattern_check(pattern)
        pattern = _like_unescape(pattern)
        if ignore_case:  # Spark: lower(a) LIKE lower(b)
            s, pattern = pc.utf8_lower(s), pc.utf8_lower(pattern)
        if _is_scalar(pattern):
            if not pattern.is_valid:
                return _null(pa.bool_())
            if _is_scalar(s):
                return pc.match_like(pa.array([s.as_py()], pa.string()), pattern.as_py())[0]
            return pc.match_like(s, pattern.as_py())
        return _per_pattern(_broadcast(s, self.n, pa.string()), pattern,
                            lambda v, p: pc.match_like(v, p), pa.bool_())

    def op_ilike(self, e: Call) -> Datum:
        return self.op_like(e, ignore_case=True)

    # -- text ------------------------------------------------------------------
    def op_concat_op(self, e: Call) -> Datum:  # ||
        args = [_text(a) for a in (self.visit(x) for x in e.args)]
        if all(_is_scalar(a) for a in args):
            return pa.scalar(None if any(not a.is_valid for a in args) else "".join(a.as_py() for a in args))
        return pc.binary_join_element_wise(*args, "", null_handling="emit_null")

    def op_concat(self, e: Call) -> Datum:  # concat(): NULL arguments are skipped
        args = [pc.fill_null(_text(self.visit(x)), "") for x in e.args]
        if all(_is_scalar(a) for a in args):
            return pa.scalar("".join(a.as_py() for a in args))
        return pc.binary_join_element_wise(*args, "", null_handling="emit_null")

    def op_lower(self, e: Call) -> Datum:
        return pc.utf8_lower(_text(self.visit(e.args[0])))

    def op_upper(self, e: Call) -> Datum:
        return pc.utf8_upper(_text(self.visit(e.args[0])))

    def op_length(self, e: Call) -> Datum:
        return pc.utf8_length(_text(self.visit(e.args[0]))).cast(pa.int32())

    def op_substring(self, e: Call) -> Datum:
        vals = self.strict_args(e.args)
        s, start = _text(vals[0]), vals[1]
        length = vals[2] if len(vals) == 3 else None
        n = self.n
        if length is not None:
            neg = pc.and_(pc.less(length, 0), pc.and_(pc.is_valid(s), pc.is_valid(start)))
            if (neg.as_py() if _is_scalar(neg) else pc.any(neg).as_py()):
                raise _fail("negative substring length not allowed")
        if _is_scalar(start) and (length is None or _is_scalar(length)):
            if not start.is_valid or (length is not None and not length.is_valid):
                return _null(pa.string())
            st = start.as_py()
            first = max(st, 1) - 1
            if length is None:
                return pc.utf8_slice_codeunits(s, start=first)
            stop = st - 1 + length.as_py()  # PostgreSQL: characters start .. start+length-1, clipped at 1
            if stop <= first:
                return pc.if_else(pc.is_valid(s), "", _null(pa.string()))
            return pc.utf8_slice_codeunits(s, start=first, stop=stop)
        # per-row start/length
        arr = _broadcast(s, n, pa.string())
        valid = _valid_mask(arr, n) & _valid_mask(start, n)
        st = _np(start, n, 1).astype(np.int64)
        first = np.maximum(st, 1) - 1
        if length is None:
            count = np.full(n, 2**40, np.int64)
        else:
            valid &= _valid_mask(length, n)
            count = np.maximum(st - 1 + _np(length, n, 0).astype(np.int64) - first, 0)
        return _slice_chars(arr, first, count, valid)

    def _trim(self, e: Call, which: str) -> Datum:
        vals = self.strict_args(e.args)
        s = _text(vals[0])
        kernel = {"trim": pc.utf8_trim, "ltrim": pc.utf8_ltrim, "rtrim": pc.utf8_rtrim}[which]
        chars = _text(vals[1]) if len(vals) == 2 else pa.scalar(" ")
        if _is_scalar(chars):
            if not chars.is_valid:
                return _null(pa.string())
            if chars.as_py() == "":
                return s
            if _is_scalar(s):
                return kernel(pa.array([s.as_py()], pa.string()), characters=chars.as_py())[0]
            return kernel(s, characters=chars.as_py())
        return _per_pattern(_broadcast(s, self.n, pa.string()), chars,
                            lambda v, c: kernel(v, characters=c) if c else v, pa.string())

    def op_trim(self, e: Call) -> Datum:
        return self._trim(e, "trim")

    def op_ltrim(self, e: Call) -> Datum:
        return self._trim(e, "ltrim")

    def op_rtrim(self, e: Call) -> Datum:
        return self._trim(e, "rtrim")

    # -- conditionals ----------------------------------------------------------
    def op_coalesce(self, e: Call) -> Datum:
        t = e.type.arrow
        out = _as_type(self.visit(e.args[0]), t)
        for arg in e.args[1:]:
            if _is_scalar(out) and out.is_valid or not _is_scalar(out) and out.null_count == 0:
                break
            missing = out
            out = pc.coalesce(out, _as_type(self.where(arg, lambda: ~_valid_mask(missing, self.n)), t))
        return out

    def op_nullif(self, e: Call) -> Datum:
        a, b = self.strict_args(e.args)
        eq = _compare("=", a, b, e.args[0].type, e.args[1].type, self.n)
        return pc.if_else(pc.fill_null(eq, False), _null(e.type.arrow), _as_type(a, e.type.arrow))

    def op_greatest(self, e: Call) -> Datum:
        return self._extreme(e, greatest=True)

    def op_least(self, e: Call) -> Datum:
        return self._extreme(e, greatest=False)

    def _extreme(self, e: Call, greatest: bool) -> Datum:
        t = e.type.arrow
        args = [_as_type(self.visit(a), t) for a in e.args]
        if len(args) == 1:
            return args[0]
        if pa.types.is_boolean(t):
            out = self._extreme_of([a.cast(pa.int8()) for a in args], greatest)
            return out.cast(pa.bool_())
        if pa.types.is_null(t):
            return _null(t)
        if pa.types.is_temporal(t):  # no element-wise min/max kernel for dates and timestamps
            storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
            return self._extreme_of([a.cast(storage) for a in args], greatest).cast(t)
        out = self._extreme_of(args, greatest)
        if pa.types.is_floating(t) and greatest:
            # Arrow skips NaN; PostgreSQL and Spark order NaN above every number.
            any_nan = None
            for a in args:
                isnan = pc.fill_null(pc.is_nan(a), False)
                any_nan = isnan if any_nan is None else pc.or_(any_nan, isnan)
            out = pc.if_else(any_nan, pa.scalar(float("nan"), t), out)
        return out

    @staticmethod
    def _extreme_of(args: list[Datum], greatest: bool) -> Datum:
        fn = pc.max_element_wise if greatest else pc.min_element_wise
        return fn(*args, skip_nulls=True)

    # -- numbers -------------------------------------------------------------
    def op_round(self, e: Call) -> Datum:
        a = self.visit(e.args[0])
        at = e.args[0].type
        if len(e.args) == 1:
            if at.is_float:
                return pc.round(a, 0, round_mode="half_to_even")  # rint, as PostgreSQL
            if at.is_integer:
                return a
            p, s = e.type.decimal_precision_scale
            return _to_decimal(a, p, s)
        places = e.args[1].value  # type: ignore[attr-defined]
        p, s = e.type.decimal_precision_scale
        d = _as_decimal(a, at)
        if places < 0:
            d = pc.round(d.cast(pa.decimal256(76, d.type.scale)), ndigits=places, round_mode=_HALF_AWAY)
        return _to_decimal(d, p, s)  # (s = places: rounds half away from zero)

    def op_floor(self, e: Call) -> Datum:
        return self._floor_ceil(e, pc.floor)

    def op_ceil(self, e: Call) -> Datum:
        return self._floor_ceil(e, pc.ceil)

    def _floor_ceil(self, e: Call, fn: Callable) -> Datum:
        a = self.visit(e.args[0])
        at = e.args[0].type
        if at.kind == "numeric":
            p, s = e.type.decimal_precision_scale
            return _to_decimal(fn(a.cast(pa.decimal256(76, a.type.scale))), p, s)
        return fn(a.cast(pa.float64()))

    # -- dates and times ---------------------------------------------------------
    def op_extract(self, e: Call, field: str) -> Datum:
        a = self.visit(e.args[0])
        kind = e.args[0].type.kind
        p, s = e.type.decimal_precision_scale
        if _is_scalar(a):
            a = _broadcast(a, 1)
            return self.op_extract_arr(a, kind, field, p, s)[0]
        return self.op_extract_arr(a, kind, field, p, s)

    @staticmethod
    def op_extract_arr(a: pa.Array, kind: str, field: str, p: int, s: int) -> pa.Array:
        fn = _EXTRACT.get(field)
        if fn is None:
            raise FreshviewError(f"internal: EXTRACT({field})")
        out = fn(a, kind)
        if pa.types.is_integer(out.type):
            out = out.cast(pa.decimal128(38, 0))
        return _to_decimal(out, p, s)

    def op_date_trunc(self, e: Call, unit: str) -> Datum:
        a = self.visit(e.args[0])
        kind = e.args[0].type.kind
        scalar = _is_scalar(a)
        arr = _broadcast(a, 1) if scalar else a
        if kind == "date":
            arr = arr.cast(pa.timestamp("us", tz="UTC"))
        out = _trunc(arr, unit)
        out = out.cast(e.type.arrow)
        return out[0] if scalar else out

    # -- casts -----------------------------------------------------------------
    def cast(self, v: Datum, src: SqlType, dst: SqlType) -> Datum:
        if src.kind == "null":
            return _null(dst.arrow)
        fn = _CASTS.get((_group(src), _group(dst)))
        if fn is None:
            raise _fail(f"cannot cast type {src} to {dst}")
        return fn(v, src, dst, self.n)


def _can_fail(e: Expr, rec: Callable[[Expr], bool]) -> bool:
    """Whether evaluating ``e`` may raise for some row (division, checked arithmetic, casts ...)."""
    if isinstance(e, (ColumnRef, Literal)):
        return False
    if any(rec(c) for c in e.children()):
        return True
    if isinstance(e, Case):
        return False
    if isinstance(e, Cast):
        return not _safe_cast(e.arg.type, e.type)
    assert isinstance(e, Call)
    op = e.op.partition(":")[0]
    if op in _SAFE_OPS:
        return False
    if op in ("like", "ilike"):  # a pattern ending in the escape character raises
        pattern = e.args[1]
        return not (isinstance(pattern, Literal) and
                    (pattern.value is None or not re.search(r"(^|[^\\])(\\\\)*\\$", pattern.value)))
    if op in ("+", "-", "*", "neg", "abs"):
        return not e.type.is_float
    if op == "substring":
        return len(e.args) == 3  # negative length
    return True  # / % and anything new


def _safe_cast(src: SqlType, dst: SqlType) -> bool:
    if src == dst or src.kind == "null":
        return True
    if dst.kind == "text":
        return True
    if src.is_integer and dst.is_integer:
        return _INT_KINDS.index(src.kind) <= _INT_KINDS.index(dst.kind)
    if src.is_integer and dst.is_float:
        return True
    if src.kind == "float4" and dst.kind == "float8":
        return True
    if src.kind == "date" and dst.kind in ("timestamp", "timestamptz"):
        return True
    if src.kind in ("timestamp", "timestamptz") and dst.kind in ("date", "timestamp", "timestamptz"):
        return True
    if src.kind == "bool" and dst.is_integer:
        return True
    return False


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


def _compare(op: str, a: Datum, b: Datum, ta: SqlType, tb: SqlType, n: int) -> Datum:
    if ta.kind == "null" or tb.kind == "null":
        return _null(pa.bool_())
    if ta != tb:  # as the Spark lowering: both sides cast to the common type first
        common = common_type(ta, tb) or ta
        convert = lambda d, t: d if t == common else _CASTS[(_group(t), _group(common))](d, t, common, n)  # noqa: E731
        a, b = convert(a, ta), convert(b, tb)
    if pa.types.is_floating(a.type):
        return _float_compare(op, a, b)
    return _CMP[op](a, b)


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


# ---------------------------------------------------------------------------
# casts
# ---------------------------------------------------------------------------

def _group(t: SqlType) -> str:
    if t.is_integer:
        return "int"
    if t.is_float:
        return "float"
    return t.kind


def _cast_int_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return _checked_int(lambda x: x.cast(dst.arrow), dst.kind, v)


def _cast_to_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    p, s = dst.decimal_precision_scale
    return _to_decimal(v, p, s)


def _cast_int_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.cast(v, dst.arrow, safe=False)


def _cast_int_bool(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.not_equal(v, pa.scalar(0, v.type))


def _cast_numeric_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    try:
        rounded = _to_decimal(v, MAX_DECIMAL_PRECISION, 0)  # half away from zero, as PostgreSQL
    except ExecutionError:  # (not an integer's range anyway)
        raise _int_range_error(dst.kind) from None
    return _checked_int(lambda x: x.cast(dst.arrow), dst.kind, rounded)


def _cast_numeric_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return _decimal_to_float(v, n, dst.arrow)


def _cast_float_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    rounded = pc.round(v.cast(pa.float64()), 0, round_mode="half_to_even")  # rint, as PostgreSQL
    return _checked_int(lambda x: x.cast(dst.arrow), dst.kind, rounded)


def _cast_float_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    p, s = dst.decimal_precision_scale
    return _double_to_decimal(v.cast(pa.float64()), p, s)


def _cast_float_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.cast(v, dst.arrow, safe=False)


def _cast_numeric_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    p, s = dst.decimal_precision_scale
    return _to_decimal(v, p, s)


def _cast_bool_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return pc.if_else(v, "true", "false")


def _cast_bool_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return v.cast(dst.arrow)


def _cast_to_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return v.cast(pa.string())


def _cast_numeric_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return _decimal_text(v)


def _cast_float_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if _is_scalar(v):
        return _float_text(_broadcast(v, 1), src.kind)[0]
    return _float_text(v, src.kind)


def _cast_date_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if _is_scalar(v):
        return _calendar_text(_broadcast(v, 1).cast(pa.string()))[0]
    return _calendar_text(v.cast(pa.string()))


def _calendar_text(text: pa.Array) -> pa.Array:
    """ISO text of dates/timestamps spelled as PostgreSQL: no ``+`` before years past 9999, and years
    before 1 as ``YYYY-MM-DD… BC`` (ISO year 0 is 1 BC, -1 is 2 BC)."""
    text = pc.replace_substring_regex(text, pattern=r"^\+", replacement="")
    bc = pc.fill_null(pc.match_substring_regex(text, r"^(-|0000-)"), False)
    if not pc.any(bc).as_py():
        return text
    import re as _re

    def era(s: str) -> str:  # (BC rows only: rare, so Python per row)
        m = _re.fullmatch(r"(-?\d+)(-.*)", s, _re.S)
        return f"{1 - int(m.group(1)):04d}{m.group(2)} BC"
    bc_rows = bc.to_pylist()
    return pa.array([era(x) if b else x for x, b in zip(text.to_pylist(), bc_rows)], pa.string())


def _cast_timestamp_text(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if _is_scalar(v):
        return _cast_timestamp_text(_broadcast(v, 1), src, dst, 1)[0]
    text = v.cast(pa.string())
    text = pc.replace_substring_regex(text, pattern=r"Z$", replacement="")
    text = pc.replace_substring_regex(text, pattern=r"\.0+$", replacement="")
    text = pc.replace_substring_regex(text, pattern=r"(\.[0-9]*[1-9])0+$", replacement=r"\1")
    if src.kind == "timestamptz":
        text = pc.binary_join_element_wise(text, "+00", "")
    return _calendar_text(text)


def _cast_temporal(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    if dst.kind == "date":
        return pc.cast(pc.floor_temporal(v, unit="day"), pa.date32(), safe=False) if src.kind != "date" else v
    if src.kind == "date":
        return v.cast(pa.timestamp("us")).cast(dst.arrow)
    return v.cast(pa.int64()).cast(dst.arrow)  # timestamp <-> timestamptz: the same instant in UTC


def _cast_identity(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    return v if v.type == dst.arrow else v.cast(dst.arrow)


def _text_rows_failing(v: Datum, pattern: str) -> Datum:
    return pc.invert(pc.match_substring_regex(v, pattern))


def _first_bad(v: Datum, bad: Datum) -> str | None:
    if _is_scalar(bad):
        return v.as_py() if bad.is_valid and bad.as_py() else None
    hits = pc.fill_null(bad, False)
    if not pc.any(hits).as_py():
        return None
    return v.filter(hits)[0].as_py()


def _check_grammar(v: Datum, pattern: str, kind: str) -> None:
    bad = _first_bad(v, _text_rows_failing(v, pattern))
    if bad is not None:
        raise _fail(pgtext.invalid_input(kind, bad))


def _strip(v: Datum) -> Datum:
    return pc.utf8_trim(v, characters=pgtext.WHITESPACE_CHARS)


def _cast_text_int(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    try:  # Arrow reads plain [-]digits only: anything it reads, PostgreSQL reads the same
        return v.cast(dst.arrow)
    except pa.ArrowInvalid:
        pass
    _check_grammar(v, pgtext.INTEGER, dst.kind)
    digits = pc.replace_substring_regex(_strip(v), pattern=r"^\+", replacement="")
    try:
        wide = digits.cast(pa.decimal128(38, 0))
        return wide.cast(dst.arrow)
    except pa.ArrowInvalid:
        # name the offending value, as PostgreSQL does (error path only)
        lo, hi = {"int2": (-2**15, 2**15 - 1), "int4": (-2**31, 2**31 - 1), "int8": (-2**63, 2**63 - 1)}[dst.kind]
        values = [v.as_py()] if _is_scalar(v) else v.to_pylist()
        for text in values:
            if text is not None and not lo <= int(text.strip(pgtext.WHITESPACE_CHARS)) <= hi:
                raise _fail(f'value "{text}" is out of range for type {pgtext.TYPE_NAMES[dst.kind]}') from None
        raise  # pragma: no cover


def _cast_text_numeric(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    _check_grammar(v, pgtext.NUMERIC, "numeric")
    p, s = dst.decimal_precision_scale
    try:
        wide = pc.cast(_strip(v), pa.decimal256(76, 38), safe=False)
    except pa.ArrowInvalid:
        raise _fail(_OVERFLOW) from None
    return _to_decimal(wide, p, s)


def _cast_text_float(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    _check_grammar(v, pgtext.FLOAT, dst.kind)
    out = pc.cast(_strip(v), dst.arrow)
    overflow = pc.and_(pc.invert(pc.is_finite(out)), pc.invert(pc.is_nan(out)))
    overflow = pc.and_(overflow, _text_rows_failing(v, pgtext.FLOAT_INFINITY))
    bad = _first_bad(v, overflow)
    if bad is not None:
        raise _fail(f'"{bad.strip(pgtext.WHITESPACE_CHARS)}" is out of range for type {pgtext.TYPE_NAMES[dst.kind]}')
    return out


def _cast_text_bool(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    word = pc.utf8_lower(_strip(v))
    true = pc.is_in(word, value_set=pa.array(pgtext.BOOL_TRUE))
    false = pc.is_in(word, value_set=pa.array(pgtext.BOOL_FALSE))
    bad = _first_bad(v, pc.and_(pc.invert(true), pc.invert(false)))
    if bad is not None:
        raise _fail(pgtext.invalid_input("bool", bad))
    return pc.if_else(pc.is_null(v), _null(pa.bool_()), true)


def _cast_text_temporal(v: Datum, src: SqlType, dst: SqlType, n: int) -> Datum:
    scalar = _is_scalar(v)
    arr = _broadcast(v, 1) if scalar else v
    pattern = pgtext.DATE if dst.kind == "date" else pgtext.TIMESTAMP
    _check_grammar(arr, pattern, dst.kind)
    names = ["y", "mo", "d", "h", "mi", "s", "f", "z"][: 3 if dst.kind == "date" else 8]
    named = pattern
    for name in names:  # name the capture groups for extract_regex
        named = re.sub(r"(?<!\\)\((?!\?)", f"(?P<{name}>", named, count=1)
    parts = pc.extract_regex(arr, named)
    m = len(arr)

    def field(name: str, default: int = 0) -> np.ndarray:
        col = pc.struct_field(parts, name)
        col = pc.if_else(pc.equal(col, ""), _null(pa.string()), col) if pa.types.is_string(col.type) else col
        return pc.fill_null(col.cast(pa.int64()), default).to_numpy(zero_copy_only=False)

    y, mo, d = field("y", 1970), field("mo", 1), field("d", 1)
    valid = _valid_mask(arr, m)
    bad = valid & ((mo < 1) | (mo > 12) | (d < 1) | (d > _days_in_month(y, mo)))
    micros = _days_from_civil(y, mo, d) * 86_400_000_000
    if dst.kind != "date":
        h, mi, s = field("h"), field("mi"), field("s")
        frac = pc.utf8_rpad(pc.fill_null(pc.struct_field(parts, "f"), ""), width=6, padding="0")
        f = frac.cast(pa.int64()).to_numpy(zero_copy_only=False)
        bad |= valid & ((h > 23) | (mi > 59) | (s > 59))
        micros = micros + ((h * 60 + mi) * 60 + s) * 1_000_000 + f
        if dst.kind == "timestamptz":
            zone = pc.fill_null(pc.struct_field(parts, "z"), "")
            digits = pc.utf8_rpad(pc.replace_substring_regex(zone, pattern=r"[^0-9]", replacement=""),
                                  width=4, padding="0")
            zh = _np(pc.utf8_slice_codeunits(digits, 0, 2).cast(pa.int64()), m, 0)
            zm = _np(pc.utf8_slice_codeunits(digits, 2, 4).cast(pa.int64()), m, 0)
            sign = np.where(_np(pc.starts_with(zone, pattern="-"), m, False), -1, 1)
            offset = sign * (zh * 60 + zm) * 60_000_000
            micros = micros - offset
    if bad.any():
        raise _fail(f'date/time field value out of range: "{arr.filter(pa.array(bad))[0].as_py()}"')
    if dst.kind == "date":
        out = _from_np((micros // 86_400_000_000).astype(np.int32), valid, pa.int32()).cast(pa.date32())
    else:
        out = _from_np(micros, valid, pa.int64()).cast(dst.arrow)
    return out[0] if scalar else out


_CASTS: dict[tuple[str, str], Callable[[Datum, SqlType, SqlType, int], Datum]] = {
    ("int", "int"): _cast_int_int,
    ("int", "numeric"): _cast_to_numeric,
    ("int", "float"): _cast_int_float,
    ("int", "text"): _cast_to_text,
    ("int", "bool"): _cast_int_bool,
    ("numeric", "int"): _cast_numeric_int,
    ("numeric", "numeric"): _cast_numeric_numeric,
    ("numeric", "float"): _cast_numeric_float,
    ("numeric", "text"): _cast_numeric_text,
    ("float", "int"): _cast_float_int,
    ("float", "numeric"): _cast_float_numeric,
    ("float", "float"): _cast_float_float,
    ("float", "text"): _cast_float_text,
    ("bool", "text"): _cast_bool_text,
    ("bool", "int"): _cast_bool_int,
    ("bool", "bool"): _cast_identity,
    ("text", "text"): _cast_identity,
    ("text", "int"): _cast_text_int,
    ("text", "numeric"): _cast_text_numeric,
    ("text", "float"): _cast_text_float,
    ("text", "bool"): _cast_text_bool,
    ("text", "date"): _cast_text_temporal,
    ("text", "timestamp"): _cast_text_temporal,
    ("text", "timestamptz"): _cast_text_temporal,
    ("date", "text"): _cast_date_text,
    ("timestamp", "text"): _cast_timestamp_text,
    ("timestamptz", "text"): _cast_timestamp_text,
    **{(a, b): _cast_temporal for a in ("date", "timestamp", "timestamptz")
       for b in ("date", "timestamp", "timestamptz")},
    ("interval", "interval"): _cast_identity,
}


_OPS: dict[str, Callable[..., Datum]] = {
    "+": _Evaluator.op_add, "-": _Evaluator.op_sub, "*": _Evaluator.op_mul,
    "/": _Evaluator.op_div, "%": _Evaluator.op_mod, "neg": _Evaluator.op_neg,
    "=": _Evaluator.op_cmp, "<>": _Evaluator.op_cmp, "<": _Evaluator.op_cmp,
    "<=": _Evaluator.op_cmp, ">": _Evaluator.op_cmp, ">=": _Evaluator.op_cmp,
    "and": _Evaluator.op_and, "or": _Evaluator.op_or, "not": _Evaluator.op_not,
    "is_null": _Evaluator.op_is_null, "in": _Evaluator.op_in,
    "like": _Evaluator.op_like, "ilike": _Evaluator.op_ilike,
    "||": _Evaluator.op_concat_op, "concat": _Evaluator.op_concat,
    "lower": _Evaluator.op_lower, "upper": _Evaluator.op_upper, "length": _Evaluator.op_length,
    "substring": _Evaluator.op_substring,
    "trim": _Evaluator.op_trim, "ltrim": _Evaluator.op_ltrim, "rtrim": _Evaluator.op_rtrim,
    "coalesce": _Evaluator.op_coalesce, "nullif": _Evaluator.op_nullif,
    "greatest": _Evaluator.op_greatest, "least": _Evaluator.op_least,
    "abs": _Evaluator.op_abs, "round": _Evaluator.op_round,
    "floor": _Evaluator.op_floor, "ceil": _Evaluator.op_ceil,
    "extract": _Evaluator.op_extract, "date_trunc": _Evaluator.op_date_trunc,
}


# PostgreSQL's scalar functions (sqrt, replace, make_date, ...) live in their own module.
from freshview.runtime.expressions import arrow_functions as _functions  # noqa: E402

_OPS.update(_functions.OPS)
_SAFE_OPS = _SAFE_OPS | _functions.SAFE_OPS
