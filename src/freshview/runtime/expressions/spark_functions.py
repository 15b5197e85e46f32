"""PostgreSQL's scalar functions lowered to Spark Columns (the Spark executor), op by op.

The companion of ``spark``'s lowering and the twin of ``arrow_numeric``, ``arrow_text``, ``arrow_collation`` and ``arrow_temporal``
(same ops, same results, same error messages through ``raise_error``).
Where Spark's own function differs from PostgreSQL the difference is
handled here: ``log(0)`` is NULL in Spark (PostgreSQL raises), ``sqrt(-1)``
is NaN, ``pow`` follows Java (``pow(1, NaN)`` is NaN; PostgreSQL says 1),
NaN compares above every number (so ``sign(NaN)`` needs its own case),
``floor(double)`` is a bigint, ``left``/``right`` treat a negative length as
zero, ``initcap`` splits words at spaces only.  Date and timestamp
arithmetic (make_date, timestamp + interval, age) is done on day and
microsecond counts, with Spark's proleptic Gregorian dates for calendar
fields (``add_months`` clamps to the month's end as PostgreSQL does) and
PostgreSQL's ranges checked explicitly.  (Column expressions are trees:
a formula that reuses a sub-expression copies it, so deep integer calendar
formulas would grow exponentially; built-in date functions keep them small.)
"""

from __future__ import annotations

from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from freshview import collation
from freshview.plan.expr import Call
from freshview.runtime.expressions.pgtext import DATE_MAX_DAYS, DATE_MIN_DAYS

_DAY_US = 86_400_000_000
_TS_MIN_US = -211813488000_000000
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
    return F.when(k.isNull(), F.lit(None).cast("string")).otherwise(F.call_function("substring", s, F.lit(1), count))


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
    return F.when(k.isNull(), F.lit(None).cast("string")).otherwise(F.call_function("repeat", s, F.greatest(k, F.lit(0))))


def reverse(e: Call, a: list[Column], param: str) -> Column:
    return F.reverse(a[0])


def initcap(e: Call, a: list[Column], param: str) -> Column:
    """PostgreSQL's initcap: a letter is upper-cased unless it follows a letter or digit.

    Spark's initcap starts words after spaces only, so a space is put after every character
    that is not a letter or digit, Spark's initcap runs, and the added spaces are removed (each
    such character, original spaces included, is followed by exactly one added space).
    """
    spaced = F.regexp_replace(a[0], r"([^\p{L}\p{N}])", "$1 ")
    return F.regexp_replace(F.initcap(spaced), r"([^\p{L}\p{N}]) ", "$1")


def md5(e: Call, a: list[Column], param: str) -> Column:
    return F.md5(a[0].cast("binary"))


def collkey(e: Call, a: list[Column], param: str) -> Column:
    """The key text compares by under MySQL collation ``param`` (freshview.collation: PAD SPACE, then the weights)."""
    how = collation.kind(param)
    if how is None:  # the front end refuses such columns; never compare by a wrong key
        raise ValueError(f"freshview has no key for collation {param!r}")
    s = F.rtrim(a[0])  # Spark's rtrim removes spaces only, as PAD SPACE ignores them
    return _fold(s) if how == "ci" else s


def collfold(e: Call, a: list[Column], param: str) -> Column:
    """The general_ci weights of a text without PAD SPACE (what LIKE matches)."""
    return _fold(a[0])


def _fold(s: Column) -> Column:
    s = F.regexp_replace(s, "[\\x{10000}-\\x{10FFFF}]", collation.REPLACEMENT)
    return F.translate(s, collation.FOLD_FROM, collation.FOLD_TO)


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
# dates, timestamps, intervals (integer formulas shared with arrow_temporal)
# ---------------------------------------------------------------------------

def _civil(day: Column) -> tuple[Column, Column, Column]:
    """(year, month, day) of a day count since 1970-01-01 (Spark's dates are proleptic Gregorian)."""
    date = F.date_from_unix_date(day.cast("int"))
    return F.year(date).cast("long"), F.month(date).cast("long"), F.dayofmonth(date).cast("long")


def _days_in_month(y: Column, m: Column) -> Column:
    leap = ((F.pmod(y, _lit_long(4)) == 0) & (F.pmod(y, _lit_long(100)) != 0)) | (F.pmod(y, _lit_long(400)) == 0)
    base = F.element_at(F.array(*[F.lit(v) for v in (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)]),
                        F.least(F.greatest(m, _lit_long(1)), _lit_long(12)).cast("int"))
    return base + F.when((m == 2) & leap, F.lit(1)).otherwise(F.lit(0))


def make_date(e: Call, a: list[Column], param: str) -> Column:
    y, m, d = (c.cast("long") for c in a)
    astro = F.when(y < 0, y + 1).otherwise(y)
    shown = F.concat(y.cast("string"), F.lit("-"), F.lpad(m.cast("string"), 2, "0"), F.lit("-"),
                     F.lpad(d.cast("string"), 2, "0"))
    bad = (y == 0) | (m < 1) | (m > 12) | (d < 1) | (d > _days_in_month(astro, m))
    # PostgreSQL's dates: 4713-11-24 BC (astronomical -4712) .. 5874897-12-31
    early = (astro < -4712) | ((astro == -4712) & ((m < 11) | ((m == 11) & (d < 24))))
    return (F.when(y.isNull() | m.isNull() | d.isNull(), F.lit(None).cast("date"))
            .when(bad, _raise(F.concat(F.lit("date field value out of range: "), shown), "date"))
            .when(early | (astro > 5874897), _raise(F.concat(F.lit("date out of range: "), shown), "date"))
            .otherwise(F.make_date(astro.cast("int"), m.cast("int"), d.cast("int"))))


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
    """Months first (Spark's add_months clamps the day to the month's end, as PostgreSQL), then days, then µs."""
    ts, months, days, micros = a
    us = _micros(ts, e.args[0].type.kind)
    day = _floordiv(us, _DAY_US)
    tod = us - day * _DAY_US
    moved = F.unix_date(F.add_months(F.date_from_unix_date(day.cast("int")), months.cast("int"))).cast("long")
    big = (F.abs(months) > 3_000_000) | (F.abs(days) > 110_000_000) | (F.abs(micros) > _lit_long(2**62))
    out = (moved + days) * _DAY_US + tod + micros
    spark_type = e.type.spark().simpleString()
    return (F.when(big, _raise("timestamp out of range", spark_type))
            .when(out < _lit_long(_TS_MIN_US), _raise("timestamp out of range", spark_type))
            .otherwise(_from_micros(out, e.type.kind)))


def age(e: Call, a: list[Column], part: str) -> Column:
    """PostgreSQL's timestamp_age, in the closed form of arrow_temporal.age_parts."""
    kind = e.args[0].type.kind
    a_us, b_us = _micros(a[0], kind), _micros(a[1], kind)
    sign = F.when(a_us < b_us, _lit_long(-1)).otherwise(_lit_long(1))

    def fields(us: Column):
        day = _floordiv(us, _DAY_US)
        y, m, d = _civil(day)
        return y, m, d, us - day * _DAY_US

    y1, m1, d1, t1 = fields(a_us)
    y2, m2, d2, t2 = fields(b_us)
    borrow = F.when((t1 - t2) * sign < 0, _lit_long(1)).otherwise(_lit_long(0))
    if part == "micros":
        return ((t1 - t2) + sign * borrow * _DAY_US).cast("long")
    mday = (d1 - d2) * sign - borrow
    dim = _days_in_month(F.when(a_us < b_us, y1).otherwise(y2), F.when(a_us < b_us, m1).otherwise(m2))
    k = F.when(mday < 0, F.when(mday + dim < 0, _lit_long(2)).otherwise(_lit_long(1))).otherwise(_lit_long(0))
    if part == "months":
        return ((y1 - y2) * 12 + (m1 - m2) - sign * k).cast("long")
    return ((mday + k * dim) * sign).cast("long")


def make_interval(e: Call, a: list[Column], param: str) -> Column:
    """(months, days, microseconds) → Spark's interval struct (``SqlType``), NULL if a part is NULL."""
    m, d, u = a
    big = (F.abs(m) > _lit_long(2**31 - 1)) | (F.abs(d) > _lit_long(2**31 - 1)) | (F.abs(u) > _lit_long((2**63 - 1) // 1000))
    value = F.struct(m.cast("int").alias("months"), d.cast("int").alias("days"), u.cast("long").alias("micros"))
    spark_type = e.type.spark().simpleString()
    return (F.when(m.isNull() | d.isNull() | u.isNull(), F.lit(None).cast(spark_type))
            .when(big, _raise("interval out of range", spark_type)).otherwise(value))


def interval_part(e: Call, a: list[Column], part: str) -> Column:
    return a[0].getField(part).cast("long")


LOWER: dict[str, Callable[[Call, list[Column], str], Column]] = {
    "sqrt": sqrt, "cbrt": cbrt, "exp": exp, "ln": _log(F.log), "log10": _log(F.log10), "power": power,
    "sign": sign, "trunc": trunc,
    "replace": replace, "split_part": split_part, "strpos": strpos, "left": left, "right": right,
    "lpad": _pad("lpad"), "rpad": _pad("rpad"), "repeat": repeat, "reverse": reverse, "initcap": initcap,
    "md5": md5, "collkey": collkey, "collfold": collfold, "starts_with": starts_with, "octet_length": octet_length, "concat_ws": concat_ws,
    "regexp_replace": regexp_replace,
    "make_date": make_date, "epoch_us": epoch_us, "add_interval": add_interval, "age": age,
    "make_interval": make_interval, "interval_part": interval_part,
}
