"""PostgreSQL's scalar functions over Arrow (the in-process executor), op by op.

The companion of ``arrow``: each function here takes the evaluator and the
``Call`` and returns a datum; ``arrow`` registers them in its op table.  The
Spark lowering of the same ops is ``spark_functions``; both follow
PostgreSQL (sql/functions.py binds them):

* math in double precision with PostgreSQL's errors: sqrt and ln/log of a
  negative, ln/log of zero, power's "zero raised to a negative power" and
  "negative number raised to a non-integer power", and "value out of range:
  overflow/underflow" when exp or power of finite arguments leave the
  double range; power's NaN and infinity cases are PostgreSQL's (not C's or
  Java's); sign(NaN) is 0, as PostgreSQL's C comparisons make it.
* text functions count characters, not bytes (left, right, lpad, rpad,
  strpos); lpad/rpad cut a longer string to the length; split_part counts
  from the end for a negative field and refuses field 0.
* make_date checks its fields ("date field value out of range: 2023-02-30")
  and reads a negative year as BC; add_interval adds months (clamping the
  day to the month's end), then days, then microseconds, as PostgreSQL's
  timestamp + interval does; age gives PostgreSQL's symbolic
  (months, days, microseconds) difference.

Text functions whose pattern argument differs per row (replace,
starts_with, lpad's fill ...) fall back to per-row Python for those rows;
literal patterns, the common case, run as one kernel.
"""

from __future__ import annotations

from freshview.collation import fold as collation_fold
from freshview.collation import key as collation_key
import hashlib
from decimal import Decimal
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.plan.expr import Literal
from freshview.runtime.expressions import arrow_values as A
from freshview.runtime.expressions.pgtext import DATE_MAX_DAYS, DATE_MIN_DAYS
from freshview.schema import interval_array, interval_parts

Datum = A.Datum
_F8 = pa.float64()
_DAY_US = 86_400_000_000
# PostgreSQL's timestamp range: 4714-11-24 BC 00:00 .. 294277-01-01 00:00 (exclusive), in µs since 1970.
_TS_MIN_US = -211813488000_000000
_TS_END_US = 2**63 - 1  # (PostgreSQL ends at 294277-01-01, beyond int64 microseconds since 1970)


def _scalar_out(fn: Callable[..., Datum], *args: Datum) -> Datum:
    """Run an array kernel on scalars too (as a one-row array)."""
    if all(A._is_scalar(a) for a in args):
        return fn(*[A._broadcast(a, 1) for a in args])[0]
    return fn(*args)


def _f8(ev, e) -> tuple[np.ndarray, np.ndarray]:
    (x,) = ev.strict_args(e.args)
    n = _rows(ev, e)
    return A._np(A._as(x, e.args[0].type), n, 0.0).astype(np.float64), A._valid_mask(x, n)


def _out_f8(values: np.ndarray, valid: np.ndarray, scalar: bool) -> Datum:
    out = A._from_np(values, valid, _F8)
    return out[0] if scalar else out


def _all_scalar(ev, e) -> bool:
    return all(isinstance(a, Literal) for a in e.args)


def _rows(ev, e) -> int:
    """Rows to compute: one for an all-constant call (its scalar result), else the batch's."""
    return 1 if _all_scalar(ev, e) else ev.n


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
        return _out_f8(np.sqrt(x), valid, _all_scalar(ev, e))


def op_cbrt(ev, e) -> Datum:
    x, valid = _f8(ev, e)
    return _out_f8(np.cbrt(x), valid, _all_scalar(ev, e))


def op_exp(ev, e) -> Datum:
    x, valid = _f8(ev, e)
    with np.errstate(all="ignore"):
        out = np.exp(x)
    _range_checks(np.where(valid, out, 1.0), np.isfinite(x), np.ones(len(x), bool))
    return _out_f8(out, valid, _all_scalar(ev, e))


def _log(ev, e, fn: Callable[[np.ndarray], np.ndarray]) -> Datum:
    x, valid = _f8(ev, e)
    if (valid & (x == 0)).any():
        raise A._fail("cannot take logarithm of zero")
    if (valid & (x < 0)).any():
        raise A._fail("cannot take logarithm of a negative number")
    with np.errstate(all="ignore"):
        return _out_f8(fn(x), valid, _all_scalar(ev, e))


def op_ln(ev, e) -> Datum:
    return _log(ev, e, np.log)


def op_log10(ev, e) -> Datum:
    return _log(ev, e, np.log10)


def op_power(ev, e) -> Datum:
    a, b = ev.strict_args(e.args)
    n = _rows(ev, e)
    valid = A._valid_mask(a, n) & A._valid_mask(b, n)
    x = np.where(valid, A._np(a, n, 1.0), 1.0).astype(np.float64)
    y = np.where(valid, A._np(b, n, 1.0), 1.0).astype(np.float64)
    out, error = power_values(x, y)
    if error is not None:
        raise A._fail(error)
    return _out_f8(out, valid, _all_scalar(ev, e))


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
        return _out_f8(np.trunc(x), valid, _all_scalar(ev, e))
    (x,) = ev.strict_args(e.args[:1])
    places = e.args[1].value
    d = A._as_decimal(x, e.args[0].type)
    wide = d.cast(pa.decimal256(76, d.type.scale))
    if places < d.type.scale:
        wide = pc.round(wide, ndigits=places, round_mode="towards_zero")
    p, s = e.type.decimal_precision_scale
    return A._to_decimal(wide, p, s)


# ---------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------

def _texts(ev, e) -> list[Datum]:
    return [A._text(v) if pa.types.is_string(v.type) or pa.types.is_null(v.type) else v
            for v in ev.strict_args(e.args)]


def _per_row(fn: Callable[..., object], args: list[Datum], n: int, out_type: pa.DataType) -> Datum:
    """Fallback: ``fn`` on each row's Python values (None if any is NULL)."""
    if all(A._is_scalar(a) for a in args):
        values = [a.as_py() for a in args]
        return pa.scalar(None if None in values else fn(*values), out_type)
    cols = [A._broadcast(a, n).to_pylist() for a in args]
    out = [None if None in row else fn(*row) for row in zip(*cols)]
    return pa.array(out, out_type)


def _literal_args(args: list[Datum]) -> bool:
    return all(A._is_scalar(a) for a in args)


def _null_if_any(out: Datum, args: list[Datum]) -> Datum:
    """NULL where a scalar argument is NULL (kernels given a scalar pattern ignore its validity)."""
    if any(A._is_scalar(a) and not a.is_valid for a in args):
        return A._null(out.type)
    return out


def op_replace(ev, e) -> Datum:
    s, old, new = _texts(ev, e)
    if _literal_args([old, new]):
        if not old.is_valid or not new.is_valid:
            return A._null(pa.string())
        if old.as_py() == "":
            return s
        return _scalar_out(lambda v: pc.replace_substring(v, pattern=old.as_py(), replacement=new.as_py()), s)
    return _per_row(lambda a, b, c: a.replace(b, c) if b else a, [s, old, new], ev.n, pa.string())


def _split_part(s: str, delim: str, k: int) -> str:
    if k == 0:
        raise A._fail("field position must not be zero")
    parts = s.split(delim) if delim else [s]
    if s == "" and delim:
        parts = [""]
    idx = k - 1 if k > 0 else len(parts) + k
    return parts[idx] if 0 <= idx < len(parts) else ""


def op_split_part(ev, e) -> Datum:
    s, delim, k = _texts(ev, e)
    n = ev.n
    if A._is_scalar(k) and k.is_valid and k.as_py() == 0 and A._valid_mask(s, n).any() and \
            (not A._is_scalar(delim) or delim.is_valid):
        raise A._fail("field position must not be zero")
    if not _literal_args([delim, k]) or A._is_scalar(s) or not delim.is_valid or not k.is_valid \
            or delim.as_py() == "":
        if not A._is_scalar(k):
            zero = pc.and_(pc.and_(pc.equal(k, 0), pc.is_valid(A._broadcast(s, n))),
                           pc.is_valid(A._broadcast(delim, n)))
            if A._any(zero):
                raise A._fail("field position must not be zero")
        return _per_row(_split_part, [s, delim, k], n, pa.string())
    index = k.as_py()
    lists = pc.split_pattern(s, pattern=delim.as_py())
    lengths = A._np(pc.list_value_length(lists), n, 0).astype(np.int64)
    idx = np.full(n, index - 1, np.int64) if index > 0 else lengths + index
    inside = (idx >= 0) & (idx < lengths)
    starts = lists.offsets.to_numpy()[:n].astype(np.int64)  # into lists.values (the unsliced child)
    flat = lists.values
    take = np.where(inside, starts + idx, 0)
    picked = flat.take(pa.array(take)) if len(flat) else pa.array([""] * n)
    out = pc.if_else(pa.array(inside), picked, "")
    return pc.if_else(pc.is_valid(s), out, A._null(pa.string())) if s.null_count else out


def _char_index(s: pa.Array, byte_pos: np.ndarray) -> np.ndarray:
    """0-based character index of byte offset ``byte_pos`` in each row of a UTF-8 array."""
    offsets, data = A._string_view(s)
    starts = np.flatnonzero((data & 0xC0) != 0x80)
    row = offsets[:-1].astype(np.int64)
    return np.searchsorted(starts, row + byte_pos) - np.searchsorted(starts, row)


def op_strpos(ev, e) -> Datum:
    s, sub = _texts(ev, e)
    n = ev.n
    if not _literal_args([sub]) or A._is_scalar(s):
        return _per_row(lambda a, b: a.find(b) + 1, [s, sub], n, pa.int32())
    if not sub.is_valid:
        return A._null(pa.int32())
    found = A._np(pc.find_substring(s, pattern=sub.as_py()), n, -1).astype(np.int64)
    chars = _char_index(s, np.maximum(found, 0))
    out = np.where(found >= 0, chars + 1, 0).astype(np.int32)
    return A._from_np(out, A._valid_mask(s, n), pa.int32())


def _lengths(s: Datum, n: int) -> np.ndarray:
    return A._np(pc.utf8_length(A._broadcast(s, n, pa.string())), n, 0).astype(np.int64)


def _left_right(ev, e, left: bool) -> Datum:
    s, k = ev.strict_args(e.args)
    scalar = _literal_args([s, k])
    n = 1 if scalar else ev.n
    arr = A._broadcast(s, n, pa.string())
    valid = A._valid_mask(arr, n) & A._valid_mask(k, n)
    length = _lengths(arr, n)
    kk = A._np(k, n, 0).astype(np.int64)
    if left:
        first = np.zeros(n, np.int64)
        count = np.where(kk >= 0, kk, np.maximum(length + kk, 0))
    else:
        first = np.where(kk >= 0, np.maximum(length - kk, 0), np.minimum(-kk, length))
        count = length - first
    out = A._slice_chars(arr, first, count, valid)
    return out[0] if scalar else out


def op_left(ev, e) -> Datum:
    return _left_right(ev, e, True)


def op_right(ev, e) -> Datum:
    return _left_right(ev, e, False)


def _pad(s: str, length: int, fill: str, left: bool) -> str:
    if length <= 0:
        return ""
    if len(s) >= length or fill == "":
        return s[:length]
    k = length - len(s)
    pad = (fill * (k // len(fill) + 1))[:k]
    return pad + s if left else s + pad


def _pad_op(ev, e, left: bool) -> Datum:
    s, k, fill = _texts(ev, e)
    n = ev.n
    if _literal_args([s, k, fill]) or not _literal_args([fill]):
        return _per_row(lambda a, b, c: _pad(a, b, c, left), [s, k, fill], n, pa.string())
    if not fill.is_valid:
        return A._null(pa.string())
    f = fill.as_py()
    arr = A._broadcast(s, n, pa.string())
    valid = A._valid_mask(arr, n) & A._valid_mask(k, n)
    target = np.maximum(A._np(k, n, 0).astype(np.int64), 0)
    length = _lengths(arr, n)
    kept = A._slice_chars(arr, np.zeros(n, np.int64), np.minimum(length, target), valid)
    if f == "":
        return kept
    missing = np.maximum(target - length, 0)
    reps = missing // len(f) + 1
    pad = pc.binary_repeat(pa.scalar(f), pa.array(np.where(missing > 0, reps, 0)))
    pad = A._slice_chars(pad, np.zeros(n, np.int64), missing, np.ones(n, bool))
    parts = (pad, kept) if left else (kept, pad)
    return pc.binary_join_element_wise(*parts, "")


def op_lpad(ev, e) -> Datum:
    return _pad_op(ev, e, True)


def op_rpad(ev, e) -> Datum:
    return _pad_op(ev, e, False)


def op_repeat(ev, e) -> Datum:
    s, k = ev.strict_args(e.args)
    times = pc.max_element_wise(A._as_type(k, pa.int64()), pa.scalar(0, pa.int64()), skip_nulls=False)
    return _scalar_out(lambda a, b: pc.binary_repeat(a, b), A._text(s), times)


def op_reverse(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return _scalar_out(pc.utf8_reverse, A._text(s))


def initcap_text(s: str) -> str:
    """PostgreSQL's initcap: a letter after a non-alphanumeric character is upper-cased, others lower-cased."""
    out, after_alnum = [], False
    for c in s:
        mapped = c.lower() if after_alnum else c.upper()
        out.append(mapped if len(mapped) == 1 else c)
        after_alnum = c.isalnum()
    return "".join(out)


def op_initcap(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return _per_row(initcap_text, [A._text(s)], ev.n, pa.string())


def op_md5(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return _per_row(lambda v: hashlib.md5(v.encode("utf-8")).hexdigest(), [A._text(s)], ev.n, pa.string())


def op_collkey(ev, e, collation: str) -> Datum:
    """``collkey`` (param: the collation): the key text compares by under a MySQL collation (freshview.collation)."""
    return _each_distinct(ev, e, lambda v: collation_key(v, collation))


def op_collfold(ev, e, collation: str) -> Datum:
    """``collfold`` (param: the collation): the collation's weights without PAD SPACE (what LIKE matches)."""
    return _each_distinct(ev, e, collation_fold)


def _each_distinct(ev, e, fn: Callable[[str], str]) -> Datum:
    (s,) = ev.strict_args(e.args)
    s = A._text(s)
    if A._is_scalar(s):
        return _per_row(fn, [s], ev.n, pa.string())
    encoded = pc.dictionary_encode(A._broadcast(s, ev.n))  # each distinct value once
    keys = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return pc.take(keys, encoded.indices)


def op_starts_with(ev, e) -> Datum:
    s, prefix = _texts(ev, e)
    if _literal_args([prefix]) and not A._is_scalar(s):
        if not prefix.is_valid:
            return A._null(pa.bool_())
        return pc.starts_with(s, pattern=prefix.as_py())
    return _per_row(lambda a, b: a.startswith(b), [s, prefix], ev.n, pa.bool_())


def op_octet_length(ev, e) -> Datum:
    (s,) = ev.strict_args(e.args)
    return _scalar_out(lambda v: pc.binary_length(v).cast(pa.int32()), A._text(s))


def op_concat_ws(ev, e) -> Datum:
    sep, *values = [A._text(ev.visit(a)) for a in e.args]
    if _literal_args([sep, *values]):
        if not sep.is_valid:
            return A._null(pa.string())
        return pa.scalar(sep.as_py().join(v.as_py() for v in values if v.is_valid))
    # (binary_join_element_wise's null_handling="skip" drops trailing all-NULL rows in Arrow 26)
    n = ev.n
    sep_text = pc.fill_null(A._broadcast(sep, n, pa.string()), "")
    out: Datum = pa.scalar("")
    seen: Datum = pa.scalar(False)
    for v in values:
        text = pc.fill_null(v, "")
        joined = pc.if_else(seen, pc.binary_join_element_wise(out, sep_text, text, ""), text)
        valid = pc.is_valid(v)
        out = pc.if_else(valid, joined, out)
        seen = pc.or_(seen, valid)
    out = A._broadcast(out, n, pa.string())
    return pc.if_else(pc.is_valid(A._broadcast(sep, n, pa.string())), out, A._null(pa.string()))


def op_regexp_replace(ev, e) -> Datum:
    s = A._text(ev.visit(e.args[0]))
    pattern, repl, every = e.args[1].value, e.args[2].value, e.args[5].value
    return _scalar_out(lambda v: pc.replace_substring_regex(
        v, pattern=pattern, replacement=repl, max_replacements=None if every else 1), s)


# ---------------------------------------------------------------------------
# dates, timestamps, intervals
# ---------------------------------------------------------------------------

def _civil_from_days(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(year, month, day) of days since 1970-01-01, proleptic Gregorian (H. Hinnant), vectorised."""
    z = z + 719468
    era = np.floor_divide(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = np.where(mp < 10, mp + 3, mp - 9)
    return y + (m <= 2), m, d


def op_make_date(ev, e) -> Datum:
    y, m, d = ev.strict_args(e.args)
    n = _rows(ev, e)
    valid = A._valid_mask(y, n) & A._valid_mask(m, n) & A._valid_mask(d, n)
    yy, mm, dd = (A._np(v, n, 1).astype(np.int64) for v in (y, m, d))
    yy, mm, dd = np.where(valid, yy, 1), np.where(valid, mm, 1), np.where(valid, dd, 1)
    astro = np.where(yy < 0, yy + 1, yy)  # 1 BC is year 0
    bad = valid & ((yy == 0) | (mm < 1) | (mm > 12) | (dd < 1) | (dd > A._days_in_month(astro, np.clip(mm, 1, 12))))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise A._fail(f"date field value out of range: {yy[i]}-{mm[i]:02d}-{dd[i]:02d}")
    days = A._days_from_civil(astro, mm, dd)
    out_of = valid & ((days < DATE_MIN_DAYS) | (days > DATE_MAX_DAYS))
    if out_of.any():
        i = int(np.flatnonzero(out_of)[0])
        raise A._fail(f"date out of range: {yy[i]}-{mm[i]:02d}-{dd[i]:02d}")
    out = A._from_np(days.astype(np.int32), valid, pa.int32()).cast(pa.date32())
    return out[0] if _all_scalar(ev, e) else out


def _micros(d: Datum, kind: str, n: int) -> np.ndarray:
    arr = A._broadcast(d, n)
    if kind == "date":
        return A._np(arr.cast(pa.int32()), n, 0).astype(np.int64) * _DAY_US
    return A._np(arr.cast(pa.int64()), n, 0).astype(np.int64)


def op_epoch_us(ev, e) -> Datum:
    (x,) = ev.strict_args(e.args)
    n = _rows(ev, e)
    out = A._from_np(_micros(x, e.args[0].type.kind, n), A._valid_mask(x, n), pa.int64())
    return out[0] if _all_scalar(ev, e) else out


def op_add_interval(ev, e) -> Datum:
    ts, months, days, micros = ev.strict_args(e.args)
    n = _rows(ev, e)
    valid = A._valid_mask(ts, n)
    for part in (months, days, micros):
        valid = valid & A._valid_mask(part, n)
    us = _micros(ts, e.args[0].type.kind, n)
    mo, dd, uu = (np.where(valid, A._np(p, n, 0).astype(np.int64), 0) for p in (months, days, micros))
    day = np.floor_divide(us, _DAY_US)
    tod = us - day * _DAY_US
    y, m, d = _civil_from_days(day)
    total = y * 12 + (m - 1) + mo
    y2, m2 = np.floor_divide(total, 12), np.mod(total, 12) + 1
    d2 = np.minimum(d, A._days_in_month(y2, m2))
    with np.errstate(over="ignore"):
        out = (A._days_from_civil(y2, m2, d2) + dd) * _DAY_US + tod + uu
    big = (np.abs(mo) > 3_000_000) | (np.abs(dd) > 110_000_000) | (np.abs(uu) > 2**62)
    if (valid & (big | (out < _TS_MIN_US) | (out >= _TS_END_US))).any():
        raise A._fail("timestamp out of range")
    res = A._from_np(np.where(valid, out, 0), valid, pa.int64()).cast(e.type.arrow)
    return res[0] if _all_scalar(ev, e) else res


def age_parts(a_us: np.ndarray, b_us: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PostgreSQL's timestamp_age(a, b) as (months, days, microseconds), in closed form.

    PostgreSQL subtracts field by field on the later-minus-earlier pair, borrows a day when
    the time of day goes negative, then borrows months while the day goes negative (adding the
    length of the month of the later timestamp's month as tm1/tm2 give it: a's when a < b, else b's;
    at most two borrows, as the days differ by at most 31) and years for negative months (which
    cancel in the month total), and restores the sign.
    """
    sign = np.where(a_us < b_us, -1, 1)

    def fields(us: np.ndarray):
        day = np.floor_divide(us, _DAY_US)
        y, m, d = _civil_from_days(day)
        return y, m, d, us - day * _DAY_US

    y1, m1, d1, t1 = fields(a_us)
    y2, m2, d2, t2 = fields(b_us)
    borrow = (t1 - t2) * sign < 0
    mday = (d1 - d2) * sign - borrow
    ref_y, ref_m = np.where(sign < 0, y1, y2), np.where(sign < 0, m1, m2)
    dim = A._days_in_month(ref_y, ref_m)
    k = np.where(mday < 0, np.where(mday + dim < 0, 2, 1), 0)
    months = (y1 - y2) * 12 + (m1 - m2) - sign * k
    days = (mday + k * dim) * sign
    micros = (t1 - t2) + sign * borrow * _DAY_US
    return months, days, micros


def op_age(ev, e, part: str) -> Datum:
    a, b = ev.strict_args(e.args)
    n = _rows(ev, e)
    valid = A._valid_mask(a, n) & A._valid_mask(b, n)
    kind = e.args[0].type.kind
    months, days, micros = age_parts(_micros(a, kind, n), _micros(b, kind, n))
    values = {"months": months, "days": days, "micros": micros}[part]
    out = A._from_np(np.where(valid, values, 0), valid, pa.int64())
    return out[0] if _all_scalar(ev, e) else out


def op_make_interval(ev, e) -> Datum:
    """(months, days, microseconds) int8 parts → month_day_nano_interval (NULL if a part is NULL)."""
    parts = ev.strict_args(e.args)
    n = _rows(ev, e)
    valid = np.ones(n, bool)
    for part in parts:
        valid = valid & A._valid_mask(part, n)
    try:
        out = interval_array(*(A._np(p, n, 0).astype(np.int64) for p in parts), valid)
    except OverflowError:
        raise A._fail("interval out of range") from None
    return out[0] if _all_scalar(ev, e) else out


def op_interval_part(ev, e, part: str) -> Datum:
    """One int8 part (months, days, micros) of an interval."""
    (x,) = ev.strict_args(e.args)
    n = _rows(ev, e)
    arr = A._broadcast(x, n, pa.month_day_nano_interval())
    months, days, micros, valid = interval_parts(arr)
    out = A._from_np({"months": months, "days": days, "micros": micros}[part], valid, pa.int64())
    return out[0] if _all_scalar(ev, e) else out


OPS: dict[str, Callable[..., Datum]] = {
    "sqrt": op_sqrt, "cbrt": op_cbrt, "exp": op_exp, "ln": op_ln, "log10": op_log10, "power": op_power,
    "sign": op_sign, "trunc": op_trunc,
    "replace": op_replace, "split_part": op_split_part, "strpos": op_strpos, "left": op_left,
    "right": op_right, "lpad": op_lpad, "rpad": op_rpad, "repeat": op_repeat, "reverse": op_reverse,
    "initcap": op_initcap, "md5": op_md5, "collkey": op_collkey, "collfold": op_collfold, "starts_with": op_starts_with, "octet_length": op_octet_length,
    "concat_ws": op_concat_ws, "regexp_replace": op_regexp_replace,
    "make_date": op_make_date, "epoch_us": op_epoch_us, "add_interval": op_add_interval, "age": op_age,
    "make_interval": op_make_interval, "interval_part": op_interval_part,
}
