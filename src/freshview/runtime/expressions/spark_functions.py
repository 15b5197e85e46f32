"""PostgreSQL's scalar functions lowered to Spark Columns (the Spark executor), op by op.

The companion of ``spark``'s lowering and the twin of ``arrow_functions``
(same ops, same results, same error messages through ``raise_error``).
Where Spark's own function differs from PostgreSQL the difference is
handled here: ``log(0)`` is NULL in Spark (PostgreSQL raises), ``sqrt(-1)``
is NaN, ``pow`` follows Java (``pow(1, NaN)`` is NaN; PostgreSQL says 1),
NaN compares above every number (so ``sign(NaN)`` needs its own case),
``floor(double)`` is a bigint, ``left``/``right`` treat a negative length as
zero, ``initcap`` splits words at spaces only.  Date and timestamp
arithmetic (make_date, timestamp + interval, age) is done on day and
microsecond counts with the same integer formulas as the Arrow executor, so
month-end clamping and ranges are PostgreSQL's, not Spark's.
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from freshview.plan.expr import Call
from freshview.runtime.expressions.pgtext import DATE_MAX_DAYS, DATE_MIN_DAYS

_DAY_US = 86_400_000_000
_TS_MIN_US = -211813488000_000000
_TS_END_US = 9224318016000_000000
_INF = float("inf")


def _raise(message: str | Column, spark_type: str) -> Column:
    return F.raise_error(message if isinstance(message, Column) else F.lit(message)).cast(spark_type)


def _finite(x: Column) -> Column:
    return ~F.isnan(x) & (F.abs(x) != F.lit(_INF))


def _lit_long(v: int) -> Column:
    return F.lit(v).cast("long")


def _div(a: Column, b: Column | int) -> Column:
    return F.call_function("div", a, b if isinstance(b, Column) else _lit_long(b))


def _floordiv(a: Column, b: int) -> Column:
    return _div(a - F.pmod(a, _lit_long(b)), b)


# ---------------------------------------------------------------------------
# math
# ---------------------------------------------------------------------------

def sqrt(e: Call, a: list[Column], param: str) -> Column:
    x = a[0]
    return F.when(x < 0, _raise("cannot take square root of a negative number", "double")).otherwise(F.sqrt(x))


def cbrt(e: Call, a: list[Column], param: str) -> Column:
    return F.cbrt(a[0])


def exp(e: Call, a: list[Column], param: str) -> Column:
    x = a[0]
    r = F.exp(x)
    return (F.when(_finite(x) & (F.abs(r) == F.lit(_INF)), _raise("value out of range: overflow", "double"))
            .when(_finite(x) & (r == 0), _raise("value out of range: underflow", "double"))
            .otherwise(r))


def _log(fn: Callable[[Column], Column]) -> Callable[[Call, list[Column], str], Column]:
    def lower(e: Call, a: list[Column], param: str) -> Column:
        x = a[0]
        return (F.when(x == 0, _raise("cannot take logarithm of zero", "double"))
                .when(x < 0, _raise("cannot take logarithm of a negative number", "double"))
                .otherwise(fn(x)))
    return lower


def power(e: Call, a: list[Column], param: str) -> Column:
    x, y = a
    nan = F.lit(float("nan"))
    r = F.pow(x, y)
    finite = _finite(x) & _finite(y)
    return (F.when(F.isnan(x), F.when(~F.isnan(y) & (y == 0), F.lit(1.0)).otherwise(nan))
            .when(F.isnan(y), F.when(x == 1, F.lit(1.0)).otherwise(nan))
            .when((x == 0) & (y < 0), _raise("zero raised to a negative power is undefined", "double"))
            .when((x < 0) & (F.rint(y) != y),
                  _raise("a negative number raised to a non-integer power yields a complex result", "double"))
            .when((F.abs(y) == F.lit(_INF)) & (F.abs(x) == 1), F.lit(1.0))
            .when(finite & (F.abs(r) == F.lit(_INF)), _raise("value out of range: overflow", "double"))
            .when(finite & (r == 0) & (x != 0), _raise("value out of range: underflow", "double"))
            .otherwise(r))


def sign(e: Call, a: list[Column], param: str) -> Column:
    x = a[0]
    if e.type.kind == "numeric":
        return (F.when(x > 0, F.lit(1)).when(x < 0, F.lit(-1)).when(x.isNotNull(), F.lit(0))
                .cast(e.type.spark()))
    return (F.when(F.isnan(x), F.lit(0.0)).when(x > 0, F.lit(1.0)).when(x < 0, F.lit(-1.0))
            .when(x.isNotNull(), F.lit(0.0)))


def trunc(e: Call, a: list[Column], param: str) -> Column:
    x = a[0]
    if len(e.args) == 1:  # double: Spark's floor/ceil of a double are bigints (see spark.py's floor)
        x = x.cast("double")
        whole = F.when(x < 0, F.ceil(x)).otherwise(F.floor(x)).cast("double")
        r = F.when(F.abs(x) < F.lit(2.0 ** 52), whole).otherwise(x)
        return F.when(r == 0, x * F.lit(0.0)).otherwise(r)
    places = F.lit(e.args[1].value)  # type: ignore[attr-defined]
    return F.when(x < 0, F.ceil(x, places)).otherwise(F.floor(x, places)).cast(e.type.spark())


# ---------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------

def replace(e: Call, a: list[Column], param: str) -> Column:
    return F.replace(*a)


def split_part(e: Call, a: list[Column], param: str) -> Column:
    s, delim, k = a
    return (F.when(s.isNull() | delim.isNull() | k.isNull(), F.lit(None).cast("string"))
            .when(k == 0, _raise("field position must not be zero", "string"))
            .when(delim == "", F.when((k == 1) | (k == -1), s).otherwise(F.lit("")))
            .otherwise(F.split_part(s, delim, k)))


def strpos(e: Call, a: list[Column], param: str) -> Column:
    return F.call_function("instr", a[0], a[1]).cast("int")


def left(e: Call, a: list[Column], param: str) -> Column:
    s, k = a
    count = F.when(k >= 0, k).otherwise(F.greatest(F.length(s) + k, F.lit(0)))
    return F.call_function("substring", s, F.lit(1), count)


def right(e: Call, a: list[Column], param: str) -> Column:
    s, k = a
    n = F.length(s)
    first = F.when(k >= 0, F.greatest(n - k, F.lit(0))).otherwise(F.least(-k, n))
    return F.when(k.isNull(), F.lit(None).cast("string")).otherwise(F.call_function("substring", s, first + 1))


def _pad(fn: str) -> Callable[[Call, list[Column], str], Column]:
    def lower(e: Call, a: list[Column], param: str) -> Column:
        s, k, fill = a
        cut = F.call_function("substring", s, F.lit(1), F.greatest(k, F.lit(0)))
        return (F.when(s.isNull() | k.isNull() | fill.isNull(), F.lit(None).cast("string"))
                .when(k <= 0, F.lit(""))
                .when((F.length(s) >= k) | (fill == ""), cut)
                .otherwise(F.call_function(fn, s, k, fill)))
    return lower


def repeat(e: Call, a: list[Column], param: str) -> Column:
    s, k = a
    return F.call_function("repeat", s, F.greatest(k, F.lit(0)))


def reverse(e: Call, a: list[Column], param: str) -> Column:
    return F.reverse(a[0])


def initcap(e: Call, a: list[Column], param: str) -> Column:
    """PostgreSQL's initcap: upper-case a character unless it follows a letter or digit (Spark's: a space)."""
    s = a[0]
    chars = F.split(s, "(?!$)")  # one element per character (Java splits between UTF-16 units)

    def case(c: Column, i: Column) -> Column:
        up, lo = F.upper(c), F.lower(c)
        up = F.when(F.length(up) == 1, up).otherwise(c)  # (as Arrow: a one-to-many mapping keeps the character)
        lo = F.when(F.length(lo) == 1, lo).otherwise(c)
        after_alnum = (i > 0) & F.element_at(chars, i).rlike(r"^[\p{L}\p{N}]$")
        return F.when(after_alnum, lo).otherwise(up)

    return F.when(s.isNull(), F.lit(None).cast("string")).otherwise(
        F.array_join(F.transform(chars, lambda c, i: case(c, i)), ""))


def md5(e: Call, a: list[Column], param: str) -> Column:
    return F.md5(a[0].cast("binary"))


def starts_with(e: Call, a: list[Column], param: str) -> Column:
    return a[0].startswith(a[1])


def octet_length(e: Call, a: list[Column], param: str) -> Column:
    return F.octet_length(a[0]).cast("int")


def concat_ws(e: Call, a: list[Column], param: str) -> Column:
    return F.call_function("concat_ws", *a)


def regexp_replace(e: Call, a: list[Column], param: str) -> Column:
    java_pattern, java_repl = e.args[3].value, e.args[4].value  # type: ignore[attr-defined]
    return F.regexp_replace(a[0], F.lit(java_pattern), F.lit(java_repl))


# ---------------------------------------------------------------------------
# dates, timestamps, intervals (integer formulas shared with arrow_functions)
# ---------------------------------------------------------------------------

def _days_from_civil(y: Column, m: Column, d: Column) -> Column:
    y = y - F.when(m <= 2, _lit_long(1)).otherwise(_lit_long(0))
    era = _floordiv(y, 400)
    yoe = y - era * 400
    mp = F.pmod(m + 9, _lit_long(12))
    doy = _div(153 * mp + 2, 5) + d - 1
    doe = yoe * 365 + _div(yoe, 4) - _div(yoe, 100) + doy
    return era * 146097 + doe - 719468


def _civil_from_days(z: Column) -> tuple[Column, Column, Column]:
    z = z + 719468
    era = _floordiv(z, 146097)
    doe = z - era * 146097
    yoe = _div(doe - _div(doe, 1460) + _div(doe, 36524) - _div(doe, 146096), 365)
    y = yoe + era * 400
    doy = doe - (yoe * 365 + _div(yoe, 4) - _div(yoe, 100))
    mp = _div(doy * 5 + 2, 153)
    d = doy - _div(mp * 153 + 2, 5) + 1
    m = F.when(mp < 10, mp + 3).otherwise(mp - 9)
    return y + F.when(m <= 2, _lit_long(1)).otherwise(_lit_long(0)), m, d


def _days_in_month(y: Column, m: Column) -> Column:
    leap = ((F.pmod(y, _lit_long(4)) == 0) & (F.pmod(y, _lit_long(100)) != 0)) | (F.pmod(y, _lit_long(400)) == 0)
    base = F.element_at(F.array(*[F.lit(v) for v in (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)]),
                        F.least(F.greatest(m, _lit_long(1)), _lit_long(12)).cast("int"))
    return base + F.when((m == 2) & leap, F.lit(1)).otherwise(F.lit(0))


def make_date(e: Call, a: list[Column], param: str) -> Column:
    y, m, d = (c.cast("long") for c in a)
    astro = F.when(y < 0, y + 1).otherwise(y)
    days = _days_from_civil(astro, m, d)
    shown = F.concat(y.cast("string"), F.lit("-"), F.lpad(m.cast("string"), 2, "0"), F.lit("-"),
                     F.lpad(d.cast("string"), 2, "0"))
    bad = (y == 0) | (m < 1) | (m > 12) | (d < 1) | (d > _days_in_month(astro, m))
    return (F.when(y.isNull() | m.isNull() | d.isNull(), F.lit(None).cast("date"))
            .when(bad, _raise(F.concat(F.lit("date field value out of range: "), shown), "date"))
            .when((days < DATE_MIN_DAYS) | (days > DATE_MAX_DAYS),
                  _raise(F.concat(F.lit("date out of range: "), shown), "date"))
            .otherwise(F.date_from_unix_date(days.cast("int"))))


def _micros(x: Column, kind: str) -> Column:
    if kind == "date":
        return F.unix_date(x).cast("long") * _DAY_US
    return F.unix_micros(x.cast("timestamp"))  # (a timestamp without time zone read in the UTC session)


def epoch_us(e: Call, a: list[Column], param: str) -> Column:
    return _micros(a[0], e.args[0].type.kind)


def _from_micros(us: Column, kind: str) -> Column:
    ts = F.timestamp_micros(us)
    return ts.cast("timestamp_ntz") if kind == "timestamp" else ts


def add_interval(e: Call, a: list[Column], param: str) -> Column:
    ts, months, days, micros = a
    us = _micros(ts, e.args[0].type.kind)
    day = _floordiv(us, _DAY_US)
    tod = us - day * _DAY_US
    y, m, d = _civil_from_days(day)
    total = y * 12 + (m - 1) + months
    y2, m2 = _floordiv(total, 12), F.pmod(total, _lit_long(12)) + 1
    d2 = F.least(d, _days_in_month(y2, m2))
    big = (F.abs(months) > 3_000_000) | (F.abs(days) > 110_000_000) | (F.abs(micros) > _lit_long(2**62))
    out = (_days_from_civil(y2, m2, d2) + days) * _DAY_US + tod + micros
    kind = e.type.kind
    return (F.when(big, _raise("timestamp out of range", e.type.spark().simpleString()))
            .when((out < _lit_long(_TS_MIN_US)) | (out >= _lit_long(_TS_END_US)),
                  _raise("timestamp out of range", e.type.spark().simpleString()))
            .otherwise(_from_micros(out, kind)))


def age(e: Call, a: list[Column], part: str) -> Column:
    """PostgreSQL's timestamp_age, as arrow_functions.age_parts."""
    kind = e.args[0].type.kind
    a_us, b_us = _micros(a[0], kind), _micros(a[1], kind)
    neg = a_us < b_us
    sign = F.when(neg, _lit_long(-1)).otherwise(_lit_long(1))

    def fields(us: Column):
        day = _floordiv(us, _DAY_US)
        y, m, d = _civil_from_days(day)
        return y, m, d, us - day * _DAY_US

    y1, m1, d1, t1 = fields(a_us)
    y2, m2, d2, t2 = fields(b_us)
    tod = (t1 - t2) * sign
    mday = (d1 - d2) * sign
    mon = (m1 - m2) * sign
    year = (y1 - y2) * sign
    borrow = F.when(tod < 0, _lit_long(1)).otherwise(_lit_long(0))
    tod = tod + borrow * _DAY_US
    mday = mday - borrow
    dim = _days_in_month(F.when(neg, y1).otherwise(y2), F.when(neg, m1).otherwise(m2))
    for _ in range(2):
        short = F.when(mday < 0, _lit_long(1)).otherwise(_lit_long(0))
        mday = mday + short * dim
        mon = mon - short
    for _ in range(2):
        short = F.when(mon < 0, _lit_long(1)).otherwise(_lit_long(0))
        mon = mon + short * 12
        year = year - short
    out = {"months": (year * 12 + mon) * sign, "days": mday * sign, "micros": tod * sign}[part]
    return out.cast("long")


LOWER: dict[str, Callable[[Call, list[Column], str], Column]] = {
    "sqrt": sqrt, "cbrt": cbrt, "exp": exp, "ln": _log(F.log), "log10": _log(F.log10), "power": power,
    "sign": sign, "trunc": trunc,
    "replace": replace, "split_part": split_part, "strpos": strpos, "left": left, "right": right,
    "lpad": _pad("lpad"), "rpad": _pad("rpad"), "repeat": repeat, "reverse": reverse, "initcap": initcap,
    "md5": md5, "starts_with": starts_with, "octet_length": octet_length, "concat_ws": concat_ws,
    "regexp_replace": regexp_replace,
    "make_date": make_date, "epoch_us": epoch_us, "add_interval": add_interval, "age": age,
}
