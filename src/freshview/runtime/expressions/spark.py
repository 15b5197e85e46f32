"""Lowering typed plan expressions to Spark Columns with PostgreSQL semantics.

Spark SQL differs from PostgreSQL in places freshview must hide: integer
division truncates in PostgreSQL, float-to-integer casts round, substring
with a start below 1 shortens the result, EXTRACT returns numeric, day-of-week
numbering differs, date arithmetic wraps around, floor() of a double is a
bigint, text input is more lenient, floats print differently (1.0E-5 vs
1e-05), decimals compared across scales are rounded, unary minus on a
38-digit decimal rounds.  Each such rule is handled once, here.

``arrow`` evaluates the same expressions in-process and must agree with this
lowering value for value (tests/runtime/test_expressions_arrow.py); a change
here needs the same change there.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any, Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from freshview.errors import FreshviewError
from freshview.plan.expr import Call, Case, Cast, ColumnRef, Expr, Literal
from freshview.plan.functions import MORE_THAN_ONE_ROW_BY_DIALECT
from freshview.runtime.expressions import pgtext, spark_functions, spark_json
from freshview.schema import SqlType
from freshview.plan.typing import common_type

DATE_MIN_DAYS, DATE_MAX_DAYS = pgtext.DATE_MIN_DAYS, pgtext.DATE_MAX_DAYS


def lower(expr: Expr, col: Callable[[int], Column]) -> Column:
    """Spark Column for ``expr``; ``col(i)`` gives the input's i-th column."""
    return _Lowering(col).visit(expr)


class _Lowering:
    def __init__(self, col: Callable[[int], Column]) -> None:
        self.col = col

    def visit(self, e: Expr) -> Column:
        method = _VISIT.get(type(e))
        if method is None:
            raise FreshviewError(f"internal: cannot lower {type(e).__name__}")
        return method(self, e)

    def visit_column(self, e: ColumnRef) -> Column:
        return self.col(e.index)

    def visit_literal(self, e: Literal) -> Column:
        return literal(e.value, e.type)

    def visit_cast(self, e: Cast) -> Column:
        return cast(self.visit(e.arg), e.arg.type, e.type)

    def visit_case(self, e: Case) -> Column:
        out = None
        for cond, value in e.whens:
            c, v = self.visit(cond), self.visit(value)
            out = F.when(c, v) if out is None else out.when(c, v)
        default = self.visit(e.default) if e.default is not None else F.lit(None).cast(e.type.spark())
        return out.otherwise(default) if out is not None else default

    def visit_call(self, e: Call) -> Column:
        function = IMPLEMENTATIONS.get(e.op)
        if function is None:
            raise FreshviewError(f"internal: no Spark lowering for {e.op}")
        return function(e, [self.visit(a) for a in e.args], e.param)


_VISIT: dict[type, Callable[[_Lowering, Any], Column]] = {
    ColumnRef: _Lowering.visit_column, Literal: _Lowering.visit_literal, Cast: _Lowering.visit_cast,
    Case: _Lowering.visit_case, Call: _Lowering.visit_call,
}

Lower = Callable[[Call, list[Column], str], Column]  # (the call, its lowered arguments, its parameter)


# -- arithmetic ------------------------------------------------------------------------------------
def _arith(e: Call, args: list[Column], param: str) -> Column:  # + - * %
    op = e.op
    a, b = args
    if e.type.kind == "date":
        # date_add/date_sub wrap around silently; PostgreSQL raises outside its date range.
        date_first = e.args[0].type.kind == "date"
        date, days = (a, b) if date_first else (b, a)
        days = days.cast("long") if op == "+" else -days.cast("long")
        n = F.unix_date(date).cast("long") + days if date_first else days + F.unix_date(date).cast("long")
        return (F.when((n < F.lit(DATE_MIN_DAYS)) | (n > F.lit(DATE_MAX_DAYS)),
                       F.raise_error(F.lit("date out of range")).cast("date"))
                .otherwise(F.date_from_unix_date(n.cast("int"))))
    if op == "-" and e.args[0].type.kind == "date":
        return F.datediff(a, b)
    result = {"+": a + b, "-": a - b, "*": a * b, "%": a % b}[op]
    return result.cast(e.type.spark())


def _divide(e: Call, args: list[Column], param: str) -> Column:
    a, b = args
    if e.type.is_integer:
        # PostgreSQL integer division truncates toward zero; Spark's `div` does too.
        return _div(a, b).cast(e.type.spark())
    if e.type.kind == "numeric":
        # Spark's decimal division keeps only 6 fractional digits once precision
        # reaches 38 (e.g. SUM / SUM); PostgreSQL gives at least 16 significant
        # digits.  float64 gives ~16 significant digits at any magnitude.
        return (a.cast("double") / b.cast("double")).cast(e.type.spark())
    # PostgreSQL: NaN / 0 is NaN (only a non-NaN dividend raises); Spark would raise.
    return F.when(F.isnan(a) & (b == 0), F.lit(float("nan"))).otherwise(a / b).cast(e.type.spark())


def _neg(e: Call, args: list[Column], param: str) -> Column:
    if _exact_via_subtraction(e.type):
        return (F.lit(0) - args[0]).cast(e.type.spark())
    return (-args[0]).cast(e.type.spark())


def _abs(e: Call, args: list[Column], param: str) -> Column:
    if _exact_via_subtraction(e.type):
        return F.when(args[0] < 0, F.lit(0) - args[0]).otherwise(args[0]).cast(e.type.spark())
    return F.abs(args[0])


def _round(e: Call, args: list[Column], param: str) -> Column:
    if len(args) == 1:
        if e.args[0].type.is_float:
            return F.rint(args[0])
        return F.round(args[0], 0).cast(e.type.spark())
    return F.round(args[0], e.args[1].value).cast(e.type.spark())  # type: ignore[attr-defined]


def _floor_ceil(e: Call, args: list[Column], param: str) -> Column:
    fn = F.floor if e.op == "floor" else F.ceil
    if e.args[0].type.kind == "numeric":
        return fn(args[0]).cast(e.type.spark())
    # Spark's floor(double) is a bigint: NaN would become 0 and 1e300 overflow.  Values
    # beyond 2^52 are already integral; a zero result keeps the argument's sign (-0, as C).
    x = args[0].cast("double")
    r = F.when(F.abs(x) < F.lit(2.0 ** 52), fn(x).cast("double")).otherwise(x)
    return F.when(r == 0, x * F.lit(0.0)).otherwise(r)


# -- comparisons and logic --------------------------------------------------------------------------
def _compare(e: Call, args: list[Column], param: str) -> Column:
    a, b = args
    return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[e.op]


def _in(e: Call, args: list[Column], param: str) -> Column:
    target, *values = args
    return target.isin(*values)


def _like(e: Call, args: list[Column], param: str) -> Column:
    fn = F.like if e.op == "like" else F.ilike
    return fn(args[0], _like_pattern(args[1], e.args[1]))


# -- text ---------------------------------------------------------------------------------------------
def _trim(e: Call, args: list[Column], param: str) -> Column:
    fn = {"trim": F.trim, "ltrim": F.ltrim, "rtrim": F.rtrim}[e.op]
    return fn(args[0], args[1]) if len(args) == 2 else fn(args[0])


# -- conditionals ---------------------------------------------------------------------------------
def _nullif(e: Call, args: list[Column], param: str) -> Column:
    a, b = args
    ta, tb = e.args[0].type, e.args[1].type
    common = common_type(ta, tb) or ta
    # Compare in the common type: Spark's own widening of decimal(38,0) vs decimal(38,2)
    # rounds the second to scale 0 (so 1 = 1.49).
    a_cmp = a if ta == common else cast(a, ta, common)
    b_cmp = b if tb == common else cast(b, tb, common)
    return F.when(a_cmp == b_cmp, F.lit(None).cast(e.type.spark())).otherwise(a)


def _single_row(e: Call, args: list[Column], param: str) -> Column:
    """A scalar subquery's value (``sql.single_row``): v at a row count of 0 or 1, the dialect's error above."""
    n, v = args
    message = F.lit(MORE_THAN_ONE_ROW_BY_DIALECT[param])
    return F.when(n > F.lit(1), F.raise_error(message).cast(e.type.spark())).otherwise(v)


def _extreme(e: Call, args: list[Column], param: str) -> Column:
    fn = F.greatest if e.op == "greatest" else F.least
    return fn(*args) if len(args) > 1 else args[0]


# -- dates and times ---------------------------------------------------------------------------------
def _extract_call(e: Call, args: list[Column], field: str) -> Column:
    return _extract(field, args[0], e.args[0].type).cast(e.type.spark())


def _date_trunc(e: Call, args: list[Column], unit: str) -> Column:
    source = args[0]
    if e.args[0].type.kind == "date":
        source = source.cast("timestamp")
    if unit in _TRUNC_YEARS:
        start = F.make_date(_TRUNC_YEARS[unit](F.year(source)), F.lit(1), F.lit(1))
        return start.cast("timestamp").cast(e.type.spark())
    out = F.date_trunc(_TRUNC[unit], source)
    return out.cast(e.type.spark())


def _exact_via_subtraction(t: SqlType) -> bool:
    """Spark's unary minus on a decimal rounds to 34 significant digits (Scala's BigDecimal context),
    so -x overflows for 35..38-digit values; 0 - x is exact and keeps the scale while it is <= 6."""
    return t.kind == "numeric" and t.decimal_precision_scale[1] <= 6


def _div(a: Column, b: Column) -> Column:
    # Spark's `div` truncates toward zero and, under ANSI mode, raises on a zero
    # divisor: both as PostgreSQL's integer division.
    return F.call_function("div", a, b)


def _substring(args: list[Column]) -> Column:
    s, start = args[0], args[1]
    if len(args) == 2:  # (greatest() would turn a NULL start into 1)
        return F.call_function("substring", s, F.when(start < 1, F.lit(1)).otherwise(start))
    length = args[2]
    # PostgreSQL: characters from `start` to `start + length - 1`, clipped at 1 (in bigint, so
    # a huge length reads to the end instead of overflowing).  substring() is strict: a NULL
    # argument gives NULL before the length is checked.
    end = start.cast("long") + length.cast("long")
    first = F.greatest(start, F.lit(1))
    count = F.least(F.greatest(end - first, F.lit(0)), F.lit(2**31 - 1)).cast("int")
    return (F.when(s.isNull() | start.isNull() | length.isNull(), F.lit(None).cast("string"))
            .when(length < 0, F.raise_error(F.lit("negative substring length not allowed")))
            .otherwise(F.call_function("substring", s, first, count)))


_TRUNC = {
    "microseconds": "MICROSECOND", "milliseconds": "MILLISECOND", "second": "SECOND", "minute": "MINUTE",
    "hour": "HOUR", "day": "DAY", "week": "WEEK", "month": "MONTH", "quarter": "QUARTER", "year": "YEAR",
}


def _div_int(a: Column, n: int) -> Column:
    return F.call_function("div", a, F.lit(n)).cast("int")


# PostgreSQL: decades start at years divisible by 10, centuries at 1901, 2001 ..., millennia at 2001.
_TRUNC_YEARS: dict[str, Callable[[Column], Column]] = {
    "decade": lambda y: _div_int(y, 10) * 10,
    "century": lambda y: F.when(y > 0, _div_int(y + 99, 100) * 100 - 99).otherwise(y),
    "millennium": lambda y: F.when(y > 0, _div_int(y + 999, 1000) * 1000 - 999).otherwise(y),
}


def _extract(field: str, arg: Column, arg_type: SqlType) -> Column:
    if field == "year":
        return F.year(arg)
    if field == "month":
        return F.month(arg)
    if field == "day":
        return F.dayofmonth(arg)
    if field == "hour":
        return F.hour(arg)
    if field == "minute":
        return F.minute(arg)
    if field == "second":
        return F.date_part(F.lit("SECOND"), arg)
    if field == "quarter":
        return F.quarter(arg)
    if field == "dow":
        return F.dayofweek(arg) - 1  # PostgreSQL: Sunday = 0
    if field == "isodow":
        return F.weekday(arg) + 1  # PostgreSQL: Monday = 1 ... Sunday = 7
    if field == "doy":
        return F.dayofyear(arg)
    if field == "week":
        return F.weekofyear(arg)
    if field == "epoch":
        if arg_type.kind == "date":
            return F.unix_timestamp(arg.cast("timestamp"))
        # exact: decimal microseconds / 10^6 (a double quotient loses the last microsecond digits)
        return F.unix_micros(arg.cast("timestamp")).cast("decimal(38,0)") / F.lit(decimal.Decimal(1_000_000))
    if field == "decade":
        return F.floor(F.year(arg) / 10)
    if field == "century":
        y = F.year(arg)
        return F.when(y > 0, F.floor((y - 1) / 100) + 1).otherwise(F.floor(y / 100))
    if field == "millennium":
        y = F.year(arg)
        return F.when(y > 0, F.floor((y - 1) / 1000) + 1).otherwise(F.floor(y / 1000))
    if field == "milliseconds":
        return F.date_part(F.lit("SECOND"), arg) * 1000
    if field == "microseconds":
        return F.date_part(F.lit("SECOND"), arg) * 1000000
    raise FreshviewError(f"internal: EXTRACT({field})")


def cast(value: Column, source: SqlType, target: SqlType) -> Column:
    spark_type = target.spark()
    if target.is_integer and (source.is_float):
        return F.rint(value).cast(spark_type)  # PostgreSQL rounds half to even here
    if target.is_integer and source.kind == "numeric":
        return F.round(value, 0).cast(spark_type)  # numeric -> int rounds half away from zero
    if source.kind == "text" and target.kind != "text":
        return _cast_text(value, target)
    if target.kind == "text" and source.kind == "bool":
        return F.when(value, F.lit("true")).when(~value, F.lit("false"))
    if target.kind == "text" and source.is_float:
        return _float_text(value, source.kind)
    if target.kind == "text" and source.kind == "timestamptz":
        return _calendar_text(F.concat(value.cast("string"), F.lit("+00")))  # PostgreSQL prints the offset (UTC)
    if target.kind == "text" and source.is_temporal:
        return _calendar_text(value.cast("string"))
    if target.kind == "numeric" and source.is_float:
        # Spark turns NaN and infinities into NULL; a numeric cannot hold them.
        x = value.cast("double")
        return (F.when(F.isnan(x), F.raise_error(F.lit("cannot convert NaN to numeric")))
                .when(F.abs(x) == F.lit(float("inf")), F.raise_error(F.lit("cannot convert infinity to numeric")))
                .otherwise(value.cast(spark_type)))
    if target.kind == "date" and source.kind == "timestamptz":
        return F.to_date(value)
    return value.cast(spark_type)


def _invalid(value: Column, kind: str) -> Column:
    name = pgtext.TYPE_NAMES[kind]
    return F.raise_error(F.concat(F.lit(f'invalid input syntax for type {name}: "'), value, F.lit('"')))


def _cast_text(value: Column, target: SqlType) -> Column:
    """text -> other types: exactly the spellings of ``pgtext`` (PostgreSQL's, as far as Spark reads them)."""
    kind = target.kind
    trimmed = F.trim(value, F.lit(pgtext.WHITESPACE_CHARS))
    if kind == "bool":
        v = F.lower(trimmed)
        return (F.when(v.isin(*pgtext.BOOL_TRUE), F.lit(True))
                .when(v.isin(*pgtext.BOOL_FALSE), F.lit(False))
                .when(value.isNull(), F.lit(None).cast("boolean"))
                .otherwise(_invalid(value, "bool").cast("boolean")))
    pattern = {"int2": pgtext.INTEGER, "int4": pgtext.INTEGER, "int8": pgtext.INTEGER,
               "numeric": pgtext.NUMERIC, "float4": pgtext.FLOAT, "float8": pgtext.FLOAT,
               "date": pgtext.DATE, "timestamp": pgtext.TIMESTAMP, "timestamptz": pgtext.TIMESTAMP}.get(kind)
    if pattern is None:
        return value.cast(target.spark())
    out = trimmed.cast(target.spark())
    if target.is_float:  # PostgreSQL refuses what overflows; Spark would read infinity
        name = pgtext.TYPE_NAMES[kind]
        out = F.when((F.abs(out) == F.lit(float("inf"))) & ~value.rlike(pgtext.FLOAT_INFINITY),
                     F.raise_error(F.concat(F.lit('"'), trimmed, F.lit(f'" is out of range for type {name}')))
                     ).otherwise(out)
    return F.when(~value.rlike(pattern), _invalid(value, kind).cast(target.spark())).otherwise(out)


def _calendar_text(text: Column) -> Column:
    """Dates and timestamps as PostgreSQL spells them: no ``+`` before years past 9999 (Spark writes
    ``+10000-01-01``), and years before 1 as ``0222-09-04 BC`` (ISO year −221: there is no year 0)."""
    text = F.regexp_replace(text, r"^\+", "")
    m = r"^(-?[0-9]+)(-.*)$"
    year = F.lit(1) - F.regexp_extract(text, m, 1).cast("long")
    bc = F.concat(F.lpad(year.cast("string"), 4, "0"), F.regexp_extract(text, m, 2), F.lit(" BC"))
    return F.when(text.rlike(r"^(-|0000-)"), bc).otherwise(text)


def _shortest_real(value: Column) -> Column:
    """A real's shortest round-trip digits in Java's ``d.dddE±x`` form (Java 17's ``Float.toString`` is
    not always shortest: 1.17549435E-38 for PostgreSQL's 1.1754944e-38): the first of 1 .. 9 significant
    digits that reads back as the same real."""
    x = value.cast("double")
    shortest = None
    for p in range(9, 0, -1):
        text = F.regexp_replace(F.upper(F.format_string(f"%.{p - 1}e", x)), r"E\+?", "E")
        if p == 1:  # 1E-45: with a fraction, as Java's form has one
            text = F.regexp_replace(text, r"^(-?[0-9])E", "$1.0E")
        shortest = text if shortest is None else F.when(text.cast("float") == value, text).otherwise(shortest)
    finite = ~F.isnan(value) & (F.abs(value) != F.lit(float("inf")))
    return F.when(finite, shortest).otherwise(value.cast("string"))


def _float_text(value: Column, kind: str) -> Column:
    """PostgreSQL's float output from Java's: shortest digits, exponent form outside 1e-4 .. 1e15 (1e6 for real).

    Java prints 100.0, 1.0E-5, 1.2345E10; PostgreSQL prints 100, 1e-05, 12345000000.
    """
    limit = 15 if kind == "float8" else 6
    text = value.cast("string") if kind == "float8" else _shortest_real(value)
    parts = r"^(-?)([0-9]+)\.([0-9]+)(?:E(-?[0-9]+))?$"
    sign = F.regexp_extract(text, parts, 1)
    ipart = F.regexp_extract(text, parts, 2)
    digits = F.concat(ipart, F.regexp_extract(text, parts, 3))
    exp = F.coalesce(F.nullif(F.regexp_extract(text, parts, 4), F.lit("")).cast("int"), F.lit(0))
    stripped = F.ltrim(digits, F.lit("0"))
    sig = F.rtrim(stripped, F.lit("0"))
    k = F.length(sig)
    x = F.length(ipart) - 1 - (F.length(digits) - F.length(stripped)) + exp
    zeros = lambda n: F.repeat(F.lit("0"), F.greatest(n, F.lit(0)))  # noqa: E731
    fixed = (F.when(x < 0, F.concat(F.lit("0."), zeros(-x - 1), sig))
             .when(k <= x + 1, F.concat(sig, zeros(x + 1 - k)))
             .otherwise(F.concat(F.substring(sig, F.lit(1), x + 1), F.lit("."), F.substring(sig, x + 2, k))))
    mantissa = F.when(k > 1, F.concat(F.substring(sig, 1, 1), F.lit("."), F.substring(sig, F.lit(2), k))).otherwise(sig)
    ax = F.abs(x).cast("string")
    sci = F.concat(mantissa, F.when(x < 0, F.lit("e-")).otherwise(F.lit("e+")),
                   F.when(F.abs(x) < 10, F.concat(F.lit("0"), ax)).otherwise(ax))
    number = F.when(k == 0, F.lit("0")).when((x < -4) | (x >= limit), sci).otherwise(fixed)
    return (F.when(text == "NaN", F.lit("NaN"))
            .when(text == "Infinity", F.lit("Infinity"))
            .when(text == "-Infinity", F.lit("-Infinity"))
            .otherwise(F.concat(sign, number)))


def _like_pattern(pattern: Column, expr: Expr) -> Column:
    """PostgreSQL's LIKE escape: a backslash makes any character literal; Spark refuses it before
    characters other than %, _ and backslash, so such escapes are reduced to the character."""
    if isinstance(expr, Literal) and isinstance(expr.value, str):
        return F.lit(_PG_ESCAPE.sub(lambda m: m.group(0) if m.group(1) in "\\%_" else m.group(1), expr.value))
    return F.regexp_replace(pattern, r"(?s)(\\[\\%_])|\\(.)", "$1$2")


_PG_ESCAPE = re.compile(r"\\(.)", re.S)


def literal(value, t: SqlType) -> Column:
    if value is None:
        return F.lit(None).cast(t.spark())
    if t.kind == "interval":
        months, days, micros = value
        return F.struct(F.lit(months).cast("int").alias("months"), F.lit(days).cast("int").alias("days"),
                        F.lit(micros).cast("long").alias("micros"))
    if t.kind == "numeric":
        p, s = t.decimal_precision_scale
        return F.lit(decimal.Decimal(value)).cast(f"decimal({p},{s})")
    if t.kind == "timestamp" and isinstance(value, dt.datetime):
        return F.lit(value.replace(tzinfo=None)).cast("timestamp_ntz")
    return F.lit(value).cast(t.spark())


# The Spark lowering of each function in plan.functions, by name (tests/plan/test_functions.py checks that
# every registered function has one): the built-ins above, then the function families' own modules.
IMPLEMENTATIONS: dict[str, Lower] = {
    "+": _arith, "-": _arith, "*": _arith, "%": _arith, "/": _divide, "neg": _neg,
    "=": _compare, "<>": _compare, "<": _compare, "<=": _compare, ">": _compare, ">=": _compare,
    "and": lambda e, a, p: a[0] & a[1], "or": lambda e, a, p: a[0] | a[1], "not": lambda e, a, p: ~a[0],
    "is_null": lambda e, a, p: a[0].isNull(), "in": _in, "like": _like, "ilike": _like,
    "||": lambda e, a, p: F.concat(*a), "concat": lambda e, a, p: F.concat_ws("", *a),
    "lower": lambda e, a, p: F.lower(a[0]), "upper": lambda e, a, p: F.upper(a[0]),
    "length": lambda e, a, p: F.length(a[0]).cast("int"), "substring": lambda e, a, p: _substring(a),
    "trim": _trim, "ltrim": _trim, "rtrim": _trim,
    "coalesce": lambda e, a, p: F.coalesce(*a), "nullif": _nullif, "greatest": _extreme, "least": _extreme,
    "single_row": _single_row,
    "abs": _abs, "round": _round, "floor": _floor_ceil, "ceil": _floor_ceil,
    "extract": _extract_call, "date_trunc": _date_trunc,
    **spark_functions.LOWER,  # PostgreSQL's scalar functions (sqrt, replace, make_date, ...)
    **spark_json.LOWER,  # json/jsonb and arrays
}
