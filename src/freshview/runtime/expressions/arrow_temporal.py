"""Dates, timestamps and intervals over Arrow (the in-process executor), the ``temporal`` family of
``plan.functions``: extract, date_trunc, make_date, epoch_us, add_interval, age, make_interval,
interval_part.  ``spark`` and ``spark_functions`` lower the same functions for Spark.

EXTRACT gives numeric (as PostgreSQL) from ``arrow_values._EXTRACT``'s fields; date_trunc truncates in UTC;
make_date checks its fields ("date field value out of range: 2023-02-30") and reads a negative year as BC;
add_interval adds months (clamping the day to the month's end), then days, then microseconds, as
PostgreSQL's timestamp + interval does; age gives PostgreSQL's symbolic (months, days, microseconds)
difference.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from freshview.plan.expr import Call
from freshview.runtime.expressions import arrow_values as A
from freshview.errors import FreshviewError
from freshview.runtime.expressions.pgtext import DATE_MAX_DAYS, DATE_MIN_DAYS
from freshview.schema import interval_array, interval_parts

Datum = A.Datum
_DAY_US = 86_400_000_000
# PostgreSQL's timestamp range: 4714-11-24 BC 00:00 .. 294277-01-01 00:00 (exclusive), in µs since 1970.
_TS_MIN_US = -211813488000_000000
_TS_END_US = 2**63 - 1  # (PostgreSQL ends at 294277-01-01, beyond int64 microseconds since 1970)


def op_extract(ev, e: Call, field: str) -> Datum:
    a = ev.visit(e.args[0])
    kind = e.args[0].type.kind
    p, s = e.type.decimal_precision_scale
    if A._is_scalar(a):
        a = A._broadcast(a, 1)
        return extract_values(a, kind, field, p, s)[0]
    return extract_values(a, kind, field, p, s)


def extract_values(a: pa.Array, kind: str, field: str, p: int, s: int) -> pa.Array:
    fn = A._EXTRACT.get(field)
    if fn is None:
        raise FreshviewError(f"internal: EXTRACT({field})")
    out = fn(a, kind)
    if pa.types.is_integer(out.type):
        out = out.cast(pa.decimal128(38, 0))
    return A._to_decimal(out, p, s)


def op_date_trunc(ev, e: Call, unit: str) -> Datum:
    a = ev.visit(e.args[0])
    kind = e.args[0].type.kind
    scalar = A._is_scalar(a)
    arr = A._broadcast(a, 1) if scalar else a
    if kind == "date":
        arr = arr.cast(pa.timestamp("us", tz="UTC"))
    out = A._trunc(arr, unit)
    out = out.cast(e.type.arrow)
    return out[0] if scalar else out


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
    n = A._rows(ev, e)
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
    return out[0] if A._all_scalar(ev, e) else out


def _micros(d: Datum, kind: str, n: int) -> np.ndarray:
    arr = A._broadcast(d, n)
    if kind == "date":
        return A._np(arr.cast(pa.int32()), n, 0).astype(np.int64) * _DAY_US
    return A._np(arr.cast(pa.int64()), n, 0).astype(np.int64)


def op_epoch_us(ev, e) -> Datum:
    (x,) = ev.strict_args(e.args)
    n = A._rows(ev, e)
    out = A._from_np(_micros(x, e.args[0].type.kind, n), A._valid_mask(x, n), pa.int64())
    return out[0] if A._all_scalar(ev, e) else out


def op_add_interval(ev, e) -> Datum:
    ts, months, days, micros = ev.strict_args(e.args)
    n = A._rows(ev, e)
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
    return res[0] if A._all_scalar(ev, e) else res


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
    n = A._rows(ev, e)
    valid = A._valid_mask(a, n) & A._valid_mask(b, n)
    kind = e.args[0].type.kind
    months, days, micros = age_parts(_micros(a, kind, n), _micros(b, kind, n))
    values = {"months": months, "days": days, "micros": micros}[part]
    out = A._from_np(np.where(valid, values, 0), valid, pa.int64())
    return out[0] if A._all_scalar(ev, e) else out


def op_make_interval(ev, e) -> Datum:
    """(months, days, microseconds) int8 parts → month_day_nano_interval (NULL if a part is NULL)."""
    parts = ev.strict_args(e.args)
    n = A._rows(ev, e)
    valid = np.ones(n, bool)
    for part in parts:
        valid = valid & A._valid_mask(part, n)
    try:
        out = interval_array(*(A._np(p, n, 0).astype(np.int64) for p in parts), valid)
    except OverflowError:
        raise A._fail("interval out of range") from None
    return out[0] if A._all_scalar(ev, e) else out


def op_interval_part(ev, e, part: str) -> Datum:
    """One int8 part (months, days, micros) of an interval."""
    (x,) = ev.strict_args(e.args)
    n = A._rows(ev, e)
    arr = A._broadcast(x, n, pa.month_day_nano_interval())
    months, days, micros, valid = interval_parts(arr)
    out = A._from_np({"months": months, "days": days, "micros": micros}[part], valid, pa.int64())
    return out[0] if A._all_scalar(ev, e) else out


OPS: dict[str, Callable[..., Datum]] = {
    "extract": op_extract,
    "date_trunc": op_date_trunc,
    "make_date": op_make_date,
    "epoch_us": op_epoch_us,
    "add_interval": op_add_interval,
    "age": op_age,
    "make_interval": op_make_interval,
    "interval_part": op_interval_part,
}
