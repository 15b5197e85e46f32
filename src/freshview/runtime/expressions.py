"""Lowering typed plan expressions to Spark Columns with PostgreSQL semantics.

Spark SQL differs from PostgreSQL in places freshview must hide: integer
division truncates in PostgreSQL, float-to-integer casts round, substring
with a start below 1 shortens the result, EXTRACT returns numeric, day-of-week
numbering differs.  Each such rule is handled once, here.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from freshview.errors import FreshviewError
from freshview.plan.expr import Call, Case, Cast, ColumnRef, Expr, Literal
from freshview.schema import SqlType


def lower(expr: Expr, col: Callable[[int], Column]) -> Column:
    """Spark Column for ``expr``; ``col(i)`` gives the input's i-th column."""
    return _Lowering(col).visit(expr)


class _Lowering:
    def __init__(self, col: Callable[[int], Column]) -> None:
        self.col = col

    def visit(self, e: Expr) -> Column:
        if isinstance(e, ColumnRef):
            return self.col(e.index)
        if isinstance(e, Literal):
            return literal(e.value, e.type)
        if isinstance(e, Cast):
            return cast(self.visit(e.arg), e.arg.type, e.type)
        if isinstance(e, Case):
            out = None
            for cond, value in e.whens:
                c, v = self.visit(cond), self.visit(value)
                out = F.when(c, v) if out is None else out.when(c, v)
            default = self.visit(e.default) if e.default is not None else F.lit(None).cast(e.type.spark())
            return out.otherwise(default) if out is not None else default
        if isinstance(e, Call):
            return self.call(e)
        raise FreshviewError(f"internal: cannot lower {type(e).__name__}")

    def call(self, e: Call) -> Column:
        op = e.op
        args = [self.visit(a) for a in e.args]
        if op in ("+", "-", "*", "%"):
            a, b = args
            if e.type.kind == "date":
                if op == "+":
                    return F.date_add(a, b) if e.args[0].type.kind == "date" else F.date_add(b, a)
                return F.date_sub(a, b)
            if op == "-" and e.args[0].type.kind == "date":
                return F.datediff(a, b)
            result = {"+": a + b, "-": a - b, "*": a * b, "%": a % b}[op]
            return result.cast(e.type.spark())
        if op == "/":
            a, b = args
            if e.type.is_integer:
                # PostgreSQL integer division truncates toward zero; Spark's `div` does too.
                return _div(a, b).cast(e.type.spark())
            if e.type.kind == "numeric":
                # Spark's decimal division keeps only 6 fractional digits once precision
                # reaches 38 (e.g. SUM / SUM); PostgreSQL gives at least 16 significant
                # digits.  float64 gives ~16 significant digits at any magnitude.
                return (a.cast("double") / b.cast("double")).cast(e.type.spark())
            return (a / b).cast(e.type.spark())
        if op == "neg":
            return (-args[0]).cast(e.type.spark())
        if op in ("=", "<>", "<", "<=", ">", ">="):
            a, b = args
            return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        if op == "and":
            return args[0] & args[1]
        if op == "or":
            return args[0] | args[1]
        if op == "not":
            return ~args[0]
        if op == "is_null":
            return args[0].isNull()
        if op == "in":
            target, *values = args
            return target.isin(*values)
        if op == "like":
            return F.like(args[0], args[1])
        if op == "ilike":
            return F.ilike(args[0], args[1])
        if op == "||":
            return F.concat(*args)
        if op == "concat":
            return F.concat_ws("", *args)
        if op == "lower":
            return F.lower(args[0])
        if op == "upper":
            return F.upper(args[0])
        if op == "length":
            return F.length(args[0]).cast("int")
        if op == "substring":
            return _substring(args)
        if op in ("trim", "ltrim", "rtrim"):
            fn = {"trim": F.trim, "ltrim": F.ltrim, "rtrim": F.rtrim}[op]
            return fn(args[0], args[1]) if len(args) == 2 else fn(args[0])
        if op == "coalesce":
            return F.coalesce(*args)
        if op == "nullif":
            return F.when(args[0] == args[1], F.lit(None).cast(e.type.spark())).otherwise(args[0])
        if op == "greatest":
            return F.greatest(*args) if len(args) > 1 else args[0]
        if op == "least":
            return F.least(*args) if len(args) > 1 else args[0]
        if op == "abs":
            return F.abs(args[0])
        if op == "round":
            if len(args) == 1:
                if e.args[0].type.is_float:
                    return F.rint(args[0])
                return F.round(args[0], 0).cast(e.type.spark())
            return F.round(args[0], e.args[1].value).cast(e.type.spark())  # type: ignore[attr-defined]
        if op in ("floor", "ceil"):
            fn = F.floor if op == "floor" else F.ceil
            return fn(args[0]).cast(e.type.spark())
        if op.startswith("extract:"):
            return _extract(op.split(":", 1)[1], args[0], e.args[0].type).cast(e.type.spark())
        if op.startswith("date_trunc:"):
            unit = op.split(":", 1)[1]
            source = args[0]
            if e.args[0].type.kind == "date":
                source = source.cast("timestamp")
            out = F.date_trunc(_TRUNC[unit], source)
            return out.cast(e.type.spark())
        raise FreshviewError(f"internal: no Spark lowering for {op}")


def _div(a: Column, b: Column) -> Column:
    # Spark's `div` truncates toward zero and, under ANSI mode, raises on a zero
    # divisor: both as PostgreSQL's integer division.
    return F.call_function("div", a, b)


def _substring(args: list[Column]) -> Column:
    s, start = args[0], args[1]
    if len(args) == 2:
        return F.call_function("substring", s, F.greatest(start, F.lit(1)))
    length = args[2]
    # PostgreSQL: characters from `start` to `start + length - 1`, clipped at 1.
    end = start + length
    first = F.greatest(start, F.lit(1))
    count = F.greatest(end - first, F.lit(0))
    return F.when(length < 0, F.raise_error(F.lit("negative substring length not allowed"))).otherwise(
        F.call_function("substring", s, first, count))


_TRUNC = {
    "microseconds": "MICROSECOND", "milliseconds": "MILLISECOND", "second": "SECOND", "minute": "MINUTE",
    "hour": "HOUR", "day": "DAY", "week": "WEEK", "month": "MONTH", "quarter": "QUARTER", "year": "YEAR",
    "decade": "YEAR", "century": "YEAR", "millennium": "YEAR",
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
        return F.unix_micros(arg.cast("timestamp")) / F.lit(1_000_000)
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
    if target.is_integer and source.kind == "text":
        return F.trim(value).cast(spark_type)
    if target.kind == "text" and source.kind == "bool":
        return F.when(value, F.lit("true")).when(~value, F.lit("false"))
    if target.kind == "bool" and source.kind == "text":
        v = F.lower(F.trim(value))
        return (F.when(v.isin("t", "true", "yes", "y", "on", "1"), F.lit(True))
                .when(v.isin("f", "false", "no", "n", "off", "0"), F.lit(False))
                .when(value.isNull(), F.lit(None).cast("boolean"))
                .otherwise(F.raise_error(F.concat(F.lit('invalid input syntax for type boolean: "'), value, F.lit('"'))).cast("boolean")))
    if target.kind == "date" and source.kind == "timestamptz":
        return F.to_date(value)
    return value.cast(spark_type)


def literal(value, t: SqlType) -> Column:
    if value is None:
        return F.lit(None).cast(t.spark())
    if t.kind == "numeric":
        p, s = t.decimal_precision_scale
        return F.lit(decimal.Decimal(value)).cast(f"decimal({p},{s})")
    if t.kind == "timestamp" and isinstance(value, dt.datetime):
        return F.lit(value.replace(tzinfo=None)).cast("timestamp_ntz")
    return F.lit(value).cast(t.spark())
