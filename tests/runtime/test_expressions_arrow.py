"""The Arrow evaluator of plan expressions against PostgreSQL and against the Spark lowering.

Three families:

1. Per-op tables of edge cases checked against PostgreSQL itself (the ``pg``
   fixture): each case runs as ``SELECT <sql>`` over typed VALUES, is bound by
   freshview's own binder, and the Arrow evaluator must give PostgreSQL's
   values, or raise PostgreSQL's error message.  The same tables also go
   through the Spark lowering (one Spark job), so spark.py is pinned to
   PostgreSQL as well.
2. A property test: random well-typed expression trees (depth <= 4) over
   random columns of every type (NULLs, NaN, -0.0, extremes), evaluated by
   ``arrow.evaluate`` and by the Spark lowering on the same rows, must agree:
   same values (floats within a relative tolerance) and the same
   error/no-error behaviour.  Plus: slices and chunked tables give the same rows.
3. Laziness: CASE, COALESCE, AND and OR never raise for rows that do not
   take the failing branch, and cheap expressions are not evaluated lazily.

``-m "not slow"`` keeps the file under a minute; the slow variants run many
more random expressions and check that Spark raises wherever PostgreSQL does.
"""

from __future__ import annotations

import os

import datetime as dt
import math
import random
import re
from decimal import Decimal
from typing import Any, Callable, Sequence

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshview.errors import ExecutionError
from freshview.plan.expr import Call, Case, Cast, ColumnRef, Expr, Literal
from freshview.runtime.expressions import arrow as ev
from freshview.schema import SqlType
from freshview.plan import typing as ty

INT2, INT4, INT8 = SqlType("int2"), SqlType("int4"), SqlType("int8")
FLOAT4, FLOAT8 = SqlType("float4"), SqlType("float8")
TEXT, BOOL, DATE = SqlType("text"), SqlType("bool"), SqlType("date")
TS, TSTZ = SqlType("timestamp"), SqlType("timestamptz")
NUM = SqlType.numeric(None, 6)  # unconstrained numeric
NUM2 = SqlType.numeric(10, 2)
UTC = dt.timezone.utc


def num(scale: int) -> SqlType:
    return SqlType.numeric(None, scale)


def col(i: int, t: SqlType) -> ColumnRef:
    return ColumnRef(t, i)


def lit(value: Any, t: SqlType) -> Literal:
    return Literal(t, value)


def call(op: str, t: SqlType, *args: Expr) -> Call:
    return Call(t, op, tuple(args))


def table_of(columns: Sequence[tuple[SqlType, Sequence[Any]]]) -> pa.Table:
    return pa.table({f"c{i}": pa.array(list(values), t.arrow) for i, (t, values) in enumerate(columns)})


def arrow_values(expr: Expr, table: pa.Table) -> list[Any] | ExecutionError:
    try:
        out = ev.evaluate(expr, table)
    except ExecutionError as exc:
        return exc
    assert out.type == expr.type.arrow, f"{expr}: type {out.type}, expected {expr.type.arrow}"
    assert len(out) == table.num_rows
    return _comparable(out, expr.type)


def _comparable(arr: pa.Array, t: SqlType) -> list[Any]:
    """Python values for comparison; dates/timestamps as integers (no year-range limits)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if t.kind == "date":
        return arr.cast(pa.int32()).to_pylist()
    if t.kind in ("timestamp", "timestamptz"):
        return arr.cast(pa.int64()).to_pylist()
    return arr.to_pylist()


def same_value(a: Any, b: Any, via_double_text: bool = False) -> bool:
    """Whether Arrow's ``a`` equals Spark's ``b``: exactly, but floats within a relative 1e-12 (NaN = NaN).

    ``via_double_text``: the value went through a double's decimal digits (float -> text or
    numeric, numeric /).  Spark reads them from java.lang.Double.toString, which before JDK 19
    prints some doubles with more digits than the shortest that reads back (2.14748365E9 for
    2.1474836E9, 4.9E-324 for 5E-324); Arrow, like PostgreSQL, uses the shortest.  Then Spark's
    value may carry those extra digits: same double, more significant digits.
    """
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return fa == fb or math.isclose(fa, fb, rel_tol=1e-12, abs_tol=1e-300)
    if type(a) is type(b) and a == b:
        return True
    if via_double_text and isinstance(a, Decimal) and isinstance(b, Decimal):
        return _longer_spelling_of_same_double(str(a), str(b))
    if via_double_text and isinstance(a, str) and isinstance(b, str):
        return _same_float_spellings(a, b)
    return False


def _significant_digits(text: str) -> int:
    mantissa = re.sub(r"[eE].*", "", text)
    return len(re.sub(r"\D", "", mantissa).strip("0"))


def _longer_spelling_of_same_double(ours: str, theirs: str) -> bool:
    """Spark's number reads as the same double as ours (or the same real) but has more digits."""
    if _significant_digits(theirs) <= _significant_digits(ours):
        return False
    import numpy as np

    x, y = float(ours), float(theirs)
    return x == y or np.float32(x) == np.float32(y)


_FLOAT_LITERAL = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]\d+)?")  # (upper() may have run)


def _same_float_spellings(ours: str, theirs: str) -> bool:
    """Texts equal but for float spellings where Spark's is a longer spelling of the same float.

    Float texts may run into each other or into digits (concat('1E-45', '1')), so the
    texts are aligned by search: at each position either the characters agree or a
    number spelled in each (any of its possible lengths) reads as the same float.
    """
    from functools import lru_cache

    def spellings(text: str, i: int) -> list[int]:
        m = _FLOAT_LITERAL.match(text, i)
        if not m:
            return []
        return [k for k in range(m.end(), i, -1) if _FLOAT_LITERAL.fullmatch(text, i, k)]

    @lru_cache(maxsize=None)
    def aligned(i: int, j: int) -> bool:
        if i == len(ours) or j == len(theirs):
            return i == len(ours) and j == len(theirs)
        if ours[i] == theirs[j] and aligned(i + 1, j + 1):
            return True
        return any(aligned(k, m)
                   for k in spellings(ours, i) for m in spellings(theirs, j)
                   if _longer_spelling_of_same_double(ours[i:k], theirs[j:m]))

    return aligned(0, 0)


def _via_double_text(e: Expr) -> bool:
    if isinstance(e, Cast) and e.arg.type.is_float and e.type.kind in ("text", "numeric"):
        return True
    if isinstance(e, Call) and e.op == "/" and e.type.kind == "numeric":
        return True
    return any(_via_double_text(c) for c in e.children())


# ---------------------------------------------------------------------------
# Spark side
# ---------------------------------------------------------------------------

def spark_values(spark: Any, table: pa.Table, exprs: Sequence[Expr],
                 raw: bool = False) -> list[list[Any] | Exception]:
    """Each expression through the Spark lowering over ``table``: its values, or the exception it raised.

    All expressions run in one Spark job; a failing job is split in halves until
    every failing expression is alone.  ``raw``: plain Python values (else as ``_comparable``).
    """
    from freshview.runtime.delta import column, spark_schema
    from freshview.runtime.expressions.spark import lower

    df = spark.createDataFrame(table, schema=spark_schema(table.schema))

    def run(batch: list[int]) -> dict[int, list[Any] | Exception]:
        cols = [lower(exprs[k], column).cast(exprs[k].type.spark()).alias(f"r{k}") for k in batch]
        try:
            out = df.select(*cols).toArrow()
        except Exception as exc:  # a JVM error: split to find which expression raised
            if len(batch) == 1:
                return {batch[0]: exc}
            half = len(batch) // 2
            return {**run(batch[:half]), **run(batch[half:])}
        columns = {k: out.column(j).cast(exprs[k].type.arrow) for j, k in enumerate(batch)}
        return {k: c.to_pylist() if raw else _comparable(c, exprs[k].type) for k, c in columns.items()}

    results = run(list(range(len(exprs)))) if exprs else {}
    return [results[k] for k in range(len(exprs))]


def compare_with_spark(spark: Any, table: pa.Table, exprs: Sequence[Expr]) -> list[str]:
    """Problems found evaluating ``exprs`` both ways (empty when both executors agree)."""
    arrow_out = [arrow_values(e, table) for e in exprs]
    # Expressions Arrow evaluates run together; each one Arrow refuses runs alone.
    ok = [k for k, out in enumerate(arrow_out) if not isinstance(out, Exception)]
    failing = [k for k, out in enumerate(arrow_out) if isinstance(out, Exception)]
    spark_out: dict[int, Any] = dict(zip(ok, spark_values(spark, table, [exprs[k] for k in ok])))
    for k in failing:
        spark_out[k] = spark_values(spark, table, [exprs[k]])[0]
    problems = []
    for k, e in enumerate(exprs):
        a, s = arrow_out[k], spark_out[k]
        if isinstance(a, Exception) or isinstance(s, Exception):
            if not (isinstance(a, Exception) and isinstance(s, Exception)):
                what = f"Arrow raised {a}" if isinstance(a, Exception) else \
                    f"Spark raised {str(s).splitlines()[0][:200]}"
                problems.append(f"{e}\n    {what}; the other did not")
            continue
        loose = _via_double_text(e)
        for row, (x, y) in enumerate(zip(a, s)):
            if not same_value(x, y, loose):
                inputs = {name: table.column(name)[row].as_py() for name in table.column_names}
                problems.append(f"{e}\n    row {row}: Arrow {x!r} vs Spark {y!r}; inputs {inputs}")
                break
    return problems


# ---------------------------------------------------------------------------
# random rows and random well-typed expressions (family 2)
# ---------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
_EPOCH = dt.date(1970, 1, 1)
_D = Decimal


def _days(d: dt.date) -> int:
    return (d - _EPOCH).days


_MICROS_MIN = -62135596800_000000  # 0001-01-01
_MICROS_MAX = 253402300799_999999  # 9999-12-31 23:59:59.999999

# (type, special values, random value) per column of the property test's relation.
_INT_SPELLINGS = ["0", "12", "-7", " 42 ", "+5", "0012", "\t3\n", "-32768", "32767", "100"]
_NUM_SPELLINGS = ["0", "1.5", "-2.25", " 3.14159 ", "1e3", ".5", "5.", "+0.125", "1E-3", "12345.678901",
                  "-0.0000005", "2.5"]
_BOOL_SPELLINGS = ["t", "true", "TRUE", "yes", "y", "on", "1", "f", "false", "No", "off", " of ", "tr",
                   "fal", "0", "ye", "\tTrue\n"]
_DATE_SPELLINGS = ["2023-01-05", "1969-12-31", " 2000-02-29 ", "2023-1-5", "0001-01-01", "9999-12-31",
                   "2021-01-03"]
_TS_SPELLINGS = ["2023-01-05 10:00:00", "1969-12-31 23:59:59.999999", "2000-02-29T12:34",
                 "2023-1-5 1:02:03.5", "2023-01-05 10:00:00+02", "2023-01-05 10:00:00Z",
                 "2023-01-05 10:00:00-05:30", "1900-01-01 00:00:00.000001", " 2023-06-30 23:59 "]
_TEXTS = ["", " ", "abc", "ABC", "a_c", "a%c", "aXc", "héllo wörld", "  pad  ", "x\\y", "tab\tnew\nline",
          "Ünïcödé", "12", "zz", "Abc", "xxabcxx", "ab", "%"]

COLUMNS: list[tuple[SqlType, list[Any], Callable[[random.Random], Any]]] = [
    (INT2, [0, 1, -1, 2, -2, 7, -7, 100, -32768, 32767, 12, 255], lambda r: r.randint(-1000, 1000)),
    (INT4, [0, 1, -1, 3, -3, 10, 2**31 - 1, -2**31, 65536, 46341], lambda r: r.randint(-10**6, 10**6)),
    (INT4, [0, 1, -1, 2, -2, 3, 5, -5, 7, 10, 30], lambda r: r.randint(-40, 40)),
    (INT8, [0, 1, -1, 2**63 - 1, -2**63, 2**32, 10**12, -7, 3037000500],
     lambda r: r.randint(-10**15, 10**15)),
    (NUM, [_D(0), _D("0.000001"), _D("-0.000001"), _D("0.5"), _D("-0.5"), _D("1.5"), _D("2.5"), _D("-2.5"),
           _D("123456.789"), _D("99999999999999999999999999999999.999999"), _D("-1E+20"), _D("3.141593")],
     lambda r: _D(r.randint(-10**12, 10**12)).scaleb(-6)),
    (NUM2, [_D("0.00"), _D("0.01"), _D("-0.01"), _D("0.50"), _D("-0.50"), _D("1.25"), _D("99999999.99"),
            _D("-99999999.99"), _D("12.35"), _D("2.50")], lambda r: _D(r.randint(-10**6, 10**6)).scaleb(-2)),
    (FLOAT4, [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, NAN, INF, -INF, 3.4e38, 1e-45, 0.1, 16777217.0],
     lambda r: r.uniform(-1e4, 1e4)),
    (FLOAT8, [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, NAN, INF, -INF, 1e300, -1e-300, 5e-324, 1 / 3, 100 / 7,
              1e15, 123456789.125, 2.0**53 + 2],
     lambda r: r.uniform(-1e6, 1e6)),
    (FLOAT8, [0.0, 0.5, 1.5, 2.5, -2.5, 3.0, 0.1, -0.1, 1e-5, 12.345], lambda r: round(r.uniform(-100, 100), 3)),
    (TEXT, _TEXTS, lambda r: "".join(r.choice("abcXYZ _%é") for _ in range(r.randint(0, 6)))),
    (TEXT, _INT_SPELLINGS, lambda r: str(r.randint(-999, 999))),
    (TEXT, _NUM_SPELLINGS, lambda r: f"{r.uniform(-1000, 1000):.4f}"),
    (TEXT, _BOOL_SPELLINGS, lambda r: r.choice(_BOOL_SPELLINGS)),
    (TEXT, _DATE_SPELLINGS, lambda r: (dt.date(1900, 1, 1) + dt.timedelta(days=r.randint(0, 80000))).isoformat()),
    (TEXT, _TS_SPELLINGS,
     lambda r: (dt.datetime(1900, 1, 1) + dt.timedelta(seconds=r.randint(0, 4 * 10**9))).isoformat(" ")),
    (BOOL, [True, False], lambda r: r.random() < 0.5),
    (DATE, [_days(d) for d in (dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2000, 2, 29),
                               dt.date(2020, 12, 31), dt.date(2021, 1, 3), dt.date(2021, 1, 4), dt.date(1, 1, 1),
                               dt.date(9999, 12, 31), dt.date(1900, 3, 1), dt.date(2001, 1, 1), dt.date(2100, 12, 31))],
     lambda r: r.randint(-719162, 2932896)),
    (TS, [0, -1, 1, 1672531200_123456, _MICROS_MIN, _MICROS_MAX, -86_400_000_000, 1609632000_000000,
          951782400_500000], lambda r: r.randint(_MICROS_MIN, _MICROS_MAX)),
    (TSTZ, [0, -1, 1, 1672531200_123456, _MICROS_MIN, _MICROS_MAX, 1609718399_999999],
     lambda r: r.randint(_MICROS_MIN, _MICROS_MAX)),
]
COLUMN_TYPES = [t for t, _, _ in COLUMNS]
_SPELLING_COLUMN = {"int": 10, "numeric": 11, "float": 11, "bool": 12, "date": 13, "timestamp": 14, "timestamptz": 14}


def random_table(seed: int, rows: int = 24) -> pa.Table:
    rng = random.Random(seed)
    arrays = {}
    for i, (t, special, make) in enumerate(COLUMNS):
        values = [None if rng.random() < 0.12 else (rng.choice(special) if rng.random() < 0.6 else make(rng))
                  for _ in range(rows)]
        storage = {"date": pa.int32(), "timestamp": pa.int64(), "timestamptz": pa.int64()}.get(t.kind)
        arrays[f"c{i}"] = pa.array(values, storage).cast(t.arrow) if storage else pa.array(values, t.arrow)
    return pa.table(arrays)


_KINDS = ["int2", "int4", "int8", "numeric", "float4", "float8", "text", "bool", "date", "timestamp", "timestamptz"]
_INTS = ["int2", "int4", "int8"]
_EXTRACT_FIELDS = ["year", "month", "day", "hour", "minute", "second", "quarter", "dow", "isodow", "doy",
                   "week", "epoch", "decade", "century", "millennium", "milliseconds", "microseconds"]
_TRUNC_UNITS = ["microseconds", "milliseconds", "second", "minute", "hour", "day", "week", "month",
                "quarter", "year", "decade", "century", "millennium"]
_LIKE_PATTERNS = ["a%", "%c", "a_c", "%b%", "_", "%", "", "a\\%c", "a\\_c", "x\\\\y", "\\a%", "AB%", "h_llo%",
                  "%\n%", "ü%"]


def coerce(e: Expr, t: SqlType) -> Expr:
    """What the binder does to make ``e`` a ``t`` (literals converted, anything else cast)."""
    from freshview.sql.bind_expr import _convert_literal

    if e.type == t:
        return e
    if isinstance(e, Literal):
        try:
            return Literal(t, _convert_literal(e.value, t))
        except (ValueError, ArithmeticError):
            return Cast(t, e)
    return Cast(t, e)


def _unify(types: Sequence[SqlType]) -> SqlType:
    out = types[0]
    for t in types[1:]:
        out = ty.common_type(out, t) or out
    return out


class ExprGen:
    """Random well-typed expressions, shaped as the binder shapes them (coercions as casts)."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        self.draw = draw

    def pick(self, seq: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(seq)))

    def chance(self, p: float) -> bool:
        return self.draw(st.integers(0, 99)) < p * 100

    # -- leaves -----------------------------------------------------------------
    def leaf(self, kind: str) -> Expr:
        cols = [i for i, t in enumerate(COLUMN_TYPES) if t.kind == kind and not (kind == "text" and i != 9)]
        if cols and not self.chance(0.3):
            i = self.pick(cols)
            return ColumnRef(COLUMN_TYPES[i], i)
        return self.literal(kind)

    def literal(self, kind: str) -> Literal:
        if self.chance(0.08):
            return Literal(num(self.pick([0, 2])) if kind == "numeric" else SqlType(kind), None)
        if kind == "numeric":
            value = self.pick([_D("0"), _D("1"), _D("2.5"), _D("-0.5"), _D("0.001"), _D("3.14159"), _D("-7"),
                               _D("100.25"), _D("0.3333333")])
            return Literal(num(max(-value.as_tuple().exponent, 0)), value)
        pools: dict[str, list[Any]] = {
            "int2": [0, 1, -1, 2, 3, 10, -32768, 32767],
            "int4": [0, 1, -1, 2, 3, 7, -7, 10, 100, 2**31 - 1, -2**31],
            "int8": [0, 1, -1, 2, 10, 2**63 - 1, -2**63, 10**10],
            "float4": [0.0, -0.0, 0.5, 1.5, 2.5, -2.5, NAN, INF, 0.1],
            "float8": [0.0, -0.0, 0.5, 1.5, 2.5, -2.5, NAN, INF, -INF, 0.1, 1e300, 1e-7, 123456.75],
            "text": _TEXTS,
            "bool": [True, False],
            "date": [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2021, 1, 3), dt.date(2000, 2, 29)],
            "timestamp": [dt.datetime(1970, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                          dt.datetime(2023, 6, 30, 12, 34, 56, 789000)],
            "timestamptz": [dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(2021, 1, 3, 23, 0, tzinfo=UTC)],
        }
        return Literal(SqlType(kind), self.pick(pools[kind]))

    # -- recursion ------------------------------------------------------------
    def expr(self, kind: str, depth: int) -> Expr:
        if depth <= 0 or self.chance(0.25):
            return self.leaf(kind)
        productions = _GENERIC if self.chance(0.2) else _PRODUCTIONS[kind]
        return self.pick(productions)(self, kind, depth - 1)

    def typed(self, t: SqlType, depth: int) -> Expr:
        return coerce(self.expr(t.kind, depth), t)

    def any_kind(self) -> str:
        return self.pick(_KINDS)

    def text_spelling(self, family: str) -> Expr:
        """Text that should parse as ``family`` (a spelling column, or a literal that may not parse)."""
        if self.chance(0.7):
            i = _SPELLING_COLUMN[family]
            return ColumnRef(TEXT, i)
        pool = {"int": _INT_SPELLINGS + ["1.5", "x", "99999999999"],
                "numeric": _NUM_SPELLINGS + ["1.2.3", "e5", "NaN"],
                "float": _NUM_SPELLINGS + ["NaN", "-Infinity", "inf", "1e400", "1d"],
                "bool": _BOOL_SPELLINGS + ["o", "maybe", ""],
                "date": _DATE_SPELLINGS + ["2023", "2023-02-30", "Jan 5 2023"],
                "timestamp": _TS_SPELLINGS + ["2023-01-05 25:00", "2023-01-05T10"],
                "timestamptz": _TS_SPELLINGS}[family]
        return Literal(TEXT, self.pick(pool))


# Productions: (gen, kind, depth) -> an expression of that kind.

def _p_int_arith(g: ExprGen, kind: str, d: int) -> Expr:
    op = g.pick(["+", "-", "*", "/", "%"])
    a = g.expr(kind, d)
    b = g.expr(g.pick(_INTS[: _INTS.index(kind) + 1]), d)
    if g.chance(0.5):
        a, b = b, a
    rt = ty.arithmetic_type(op, a.type, b.type)
    assert rt is not None and rt.kind == kind
    return call(op, rt, coerce(a, rt), coerce(b, rt))


def _p_unary(g: ExprGen, kind: str, d: int) -> Expr:
    a = g.expr(kind, d)
    return call(g.pick(["neg", "abs"]), a.type, a)


def _p_cast_to_int(g: ExprGen, kind: str, d: int) -> Expr:
    src = g.pick(["int2", "int4", "int8", "numeric", "float4", "float8", "text"] + (["bool"] if kind == "int4" else []))
    a = g.text_spelling("int") if src == "text" else g.expr(src, d)
    return Cast(SqlType(kind), a)


def _p_length(g: ExprGen, kind: str, d: int) -> Expr:
    return call("length", INT4, g.expr("text", d))


def _p_datediff(g: ExprGen, kind: str, d: int) -> Expr:
    return call("-", INT4, g.expr("date", d), g.expr("date", d))


def _p_num_arith(g: ExprGen, kind: str, d: int) -> Expr:
    op = g.pick(["+", "-", "*", "/", "%"])
    a = g.expr("numeric", d)
    b = g.expr(g.pick(["numeric", "numeric", "int4", "int8"]), d)
    if g.chance(0.5):
        a, b = b, a
    rt = ty.arithmetic_type(op, a.type, b.type)
    assert rt is not None and rt.kind == "numeric"
    if op in "*/":
        to_num = lambda e: e if e.type.kind == "numeric" else coerce(e, num(0))  # noqa: E731
        return call(op, rt, to_num(a), to_num(b))
    operand = num(max(ty.numeric_scale(a.type), ty.numeric_scale(b.type)))
    return call(op, rt, coerce(a, operand), coerce(b, operand))


def _p_round(g: ExprGen, kind: str, d: int) -> Expr:
    if kind == "numeric":
        a = g.expr(g.pick(["numeric", "numeric", "int4"]), d)
        if g.chance(0.5) or a.type.kind != "numeric":
            places = g.pick([-2, -1, 0, 1, 2, 4])
            arg = a if a.type.kind == "numeric" else coerce(a, num(0))
            return call("round", num(max(places, 0)), arg, lit(places, INT4))
        return call(g.pick(["round", "floor", "ceil"]), num(0), a)
    a = g.expr(g.pick(["float8", "float4", "int4"]) if kind == "float8" else kind, d)
    if kind == "float8" and g.chance(0.6):
        return call(g.pick(["floor", "ceil"]), FLOAT8, a)
    if a.type.kind != kind:
        return Cast(SqlType(kind), a)
    return call("round", a.type, a)


def _p_extract(g: ExprGen, kind: str, d: int) -> Expr:
    src = g.pick(["date", "timestamp", "timestamptz"])
    fields = _EXTRACT_FIELDS if src != "date" else \
        [f for f in _EXTRACT_FIELDS if f not in ("hour", "minute", "second", "milliseconds", "microseconds")]
    field = g.pick(fields)
    scale = 6 if field in ("second", "epoch", "milliseconds") else 0
    return Call(num(scale), "extract", (g.expr(src, d),), field)


def _p_cast_to_numeric(g: ExprGen, kind: str, d: int) -> Expr:
    target = g.pick([num(0), num(2), num(6), SqlType.numeric(10, 2), SqlType.numeric(5, 1), SqlType.numeric(20, 10)])
    src = g.pick(["int2", "int4", "int8", "numeric", "float8", "float4", "text"])
    a = g.text_spelling("numeric") if src == "text" else g.expr(src, d)
    return Cast(target, a)


def _p_float_arith(g: ExprGen, kind: str, d: int) -> Expr:
    op = g.pick(["+", "-", "*", "/", "%"])
    if kind == "float4":
        return call(op, FLOAT4, g.expr("float4", d), g.expr("float4", d))
    a = g.expr("float8", d)
    b = g.expr(g.pick(["float8", "float4", "int4", "numeric"]), d)
    if g.chance(0.5):
        a, b = b, a
    return call(op, FLOAT8, coerce(a, FLOAT8), coerce(b, FLOAT8))


def _p_cast_to_float(g: ExprGen, kind: str, d: int) -> Expr:
    src = g.pick(["int2", "int4", "int8", "numeric", "float4", "float8", "text"])
    a = g.text_spelling("float") if src == "text" else g.expr(src, d)
    return Cast(SqlType(kind), a)


def _to_text(e: Expr) -> Expr:
    return e if e.type.kind == "text" else coerce(e, TEXT)


def _p_concat(g: ExprGen, kind: str, d: int) -> Expr:
    n = g.pick([2, 2, 3])
    args = [_to_text(g.expr(g.pick(["text", "text", g.any_kind()]), d)) for _ in range(n)]
    return call(g.pick(["||", "concat"]), TEXT, *args)


def _p_text_fn(g: ExprGen, kind: str, d: int) -> Expr:
    return call(g.pick(["lower", "upper"]), TEXT, g.expr("text", d))


def _p_substring(g: ExprGen, kind: str, d: int) -> Expr:
    s = g.expr("text", d)
    start = coerce(g.expr(g.pick(["int4", "int2"]), d), INT4) if g.chance(0.4) else \
        lit(g.pick([-2, 0, 1, 2, 3, 5]), INT4)
    if g.chance(0.3):
        return call("substring", TEXT, s, start)
    length = coerce(g.expr("int4", d), INT4) if g.chance(0.4) else lit(g.pick([-1, 0, 1, 2, 4, 2**31 - 1]), INT4)
    return call("substring", TEXT, s, start, length)


def _p_trim(g: ExprGen, kind: str, d: int) -> Expr:
    op = g.pick(["trim", "ltrim", "rtrim"])
    s = g.expr("text", d)
    if g.chance(0.4):
        return call(op, TEXT, s)
    chars = g.expr("text", d) if g.chance(0.3) else lit(g.pick(["x", "ab", " ", "", "é%", "a"]), TEXT)
    return call(op, TEXT, s, chars)


def _p_cast_to_text(g: ExprGen, kind: str, d: int) -> Expr:
    return Cast(TEXT, g.expr(g.pick([k for k in _KINDS if k != "text"]), d))


def _p_compare(g: ExprGen, kind: str, d: int) -> Expr:
    k = g.any_kind()
    a = g.expr(k, d)
    b = g.expr(g.pick(["int4", "numeric", "float8"]) if k in _INTS + ["numeric", "float4", "float8"] else k, d)
    t = _unify([a.type, b.type])
    return call(g.pick(["=", "<>", "<", "<=", ">", ">="]), BOOL, coerce(a, t), coerce(b, t))


def _p_logic(g: ExprGen, kind: str, d: int) -> Expr:
    op = g.pick(["and", "or", "not", "is_null"])
    if op == "not":
        return call(op, BOOL, g.expr("bool", d))
    if op == "is_null":
        return call(op, BOOL, g.expr(g.any_kind(), d))
    return call(op, BOOL, g.expr("bool", d), g.expr("bool", d))


def _p_in(g: ExprGen, kind: str, d: int) -> Expr:
    k = g.pick(["int4", "int8", "numeric", "float8", "text", "date", "bool", "int2"])
    target = g.expr(k, d)
    items = [g.expr(k, d - 1) if g.chance(0.25) else g.literal(k) for _ in range(g.pick([1, 2, 3, 4]))]
    t = _unify([target.type] + [i.type for i in items])
    return call("in", BOOL, coerce(target, t), *[coerce(i, t) for i in items])


def _p_like(g: ExprGen, kind: str, d: int) -> Expr:
    pattern = g.expr("text", d) if g.chance(0.2) else lit(g.pick(_LIKE_PATTERNS), TEXT)
    return call(g.pick(["like", "ilike"]), BOOL, g.expr("text", d), pattern)


def _p_cast_to_bool(g: ExprGen, kind: str, d: int) -> Expr:
    if g.chance(0.3):
        return Cast(BOOL, g.expr("int4", d))
    return Cast(BOOL, g.text_spelling("bool"))


def _p_date_arith(g: ExprGen, kind: str, d: int) -> Expr:
    days = g.expr(g.pick(["int4", "int2"]), d)
    date = g.expr("date", d)
    op = g.pick(["+", "-"])
    if op == "+" and g.chance(0.4):
        return call("+", DATE, days, date)
    return call(op, DATE, date, days)


def _p_cast_to_temporal(g: ExprGen, kind: str, d: int) -> Expr:
    src = g.pick([k for k in ("date", "timestamp", "timestamptz", "text") if k != kind])
    a = g.text_spelling(kind) if src == "text" else g.expr(src, d)
    return Cast(SqlType(kind), a)


def _p_trunc(g: ExprGen, kind: str, d: int) -> Expr:
    src = kind if kind == "timestamp" else g.pick(["date", "timestamptz"])
    return Call(SqlType(kind), "date_trunc", (g.expr(src, d),), g.pick(_TRUNC_UNITS))


def _p_case(g: ExprGen, kind: str, d: int) -> Expr:
    values = [g.expr(kind, d) for _ in range(g.pick([2, 3]))]
    t = _unify([v.type for v in values])
    conds = [g.expr("bool", d) for _ in values[:-1]]
    default = coerce(values[-1], t) if g.chance(0.8) else None
    return Case(t, tuple((c, coerce(v, t)) for c, v in zip(conds, values)), default)


def _p_coalesce(g: ExprGen, kind: str, d: int) -> Expr:
    op = g.pick(["coalesce", "greatest", "least"])
    args = [g.expr(kind, d) for _ in range(g.pick([2, 3]))]
    t = _unify([a.type for a in args])
    return call(op, t, *[coerce(a, t) for a in args])


def _p_nullif(g: ExprGen, kind: str, d: int) -> Expr:
    a, b = g.expr(kind, d), g.expr(kind, d)
    t = _unify([a.type, b.type])
    return call("nullif", a.type, a, coerce(b, t) if b.type != a.type else b)


_INT_PRODUCTIONS = [_p_int_arith, _p_int_arith, _p_unary, _p_cast_to_int]
_PRODUCTIONS: dict[str, list[Callable[[ExprGen, str, int], Expr]]] = {
    "int2": _INT_PRODUCTIONS,
    "int4": _INT_PRODUCTIONS + [_p_length, _p_datediff, _p_cast_to_int],
    "int8": _INT_PRODUCTIONS,
    "numeric": [_p_num_arith, _p_num_arith, _p_unary, _p_round, _p_extract, _p_extract, _p_cast_to_numeric],
    "float4": [_p_float_arith, _p_unary, _p_round, _p_cast_to_float],
    "float8": [_p_float_arith, _p_float_arith, _p_unary, _p_round, _p_cast_to_float],
    "text": [_p_concat, _p_text_fn, _p_substring, _p_trim, _p_cast_to_text],
    "bool": [_p_compare, _p_compare, _p_logic, _p_in, _p_like, _p_cast_to_bool],
    "date": [_p_date_arith, _p_cast_to_temporal],
    "timestamp": [_p_cast_to_temporal, _p_trunc],
    "timestamptz": [_p_cast_to_temporal, _p_trunc],
}
_GENERIC = [_p_case, _p_coalesce, _p_nullif]


@st.composite
def expressions(draw: Callable[[Any], Any], depth: int = 4) -> Expr:
    g = ExprGen(draw)
    return g.expr(g.any_kind(), depth)


# ---------------------------------------------------------------------------
# family 1: per-op edge cases against PostgreSQL
# ---------------------------------------------------------------------------

def bind(sql: str, types: Sequence[SqlType]) -> Expr:
    """``sql`` over columns c0, c1 ... of ``types``, bound by freshview's own binder."""
    from sqlglot import parse_one

    from freshview.sql.bind_expr import ExprBinder, Scope, ScopeColumn

    node = parse_one(f"SELECT {sql}", read="postgres").expressions[0]
    scope = Scope([ScopeColumn("t", f"c{i}", t, i) for i, t in enumerate(types)])
    return ExprBinder(scope, sql).bind(node)


class PgCase:
    def __init__(self, sql: str, types: Sequence[SqlType], rows: Sequence[tuple], error: str | None = None,
                 approx: bool = False) -> None:
        self.sql, self.types, self.rows, self.error, self.approx = sql, list(types), list(rows), error, approx

    def __repr__(self) -> str:
        more = "..." if len(self.rows) > 2 else ""
        return f"{self.sql} :: {','.join(t.kind for t in self.types)} {self.rows[:2]}{more}"


def _pg_query(conn: Any, case: PgCase) -> list[Any] | Exception:
    import psycopg

    width = len(case.types)
    names = ", ".join(f"c{i}" for i in range(width))
    row_sql = "(" + ", ".join(f"%s::{t.pg}" for t in case.types) + ")"
    sql = f"SELECT {case.sql.replace('%', '%%')} FROM (VALUES {', '.join([row_sql] * len(case.rows))}) AS t({names})"
    params = [v for row in case.rows for v in row]
    try:
        return [r[0] for r in conn.execute(sql, params).fetchall()]
    except psycopg.Error as exc:
        return exc


def _pg_equal(ours: Any, theirs: Any, approx: bool, t: SqlType) -> bool:
    if ours is None or theirs is None:
        return ours is None and theirs is None
    if t.kind == "float4":  # PostgreSQL sends a real as its shortest text
        import numpy as np

        return _pg_equal(float(np.float32(ours)), float(np.float32(theirs)), approx, FLOAT8)
    if isinstance(theirs, Decimal) and isinstance(ours, Decimal):
        if approx:
            return abs(ours - theirs) <= Decimal("1e-14") * max(abs(theirs), Decimal(1))
        return ours == theirs
    if isinstance(theirs, float) or isinstance(ours, float):
        if math.isnan(float(theirs)) or math.isnan(float(ours)):
            return math.isnan(float(theirs)) and math.isnan(float(ours))
        if theirs == 0 and ours == 0:  # -0 is not 0 in the output
            return math.copysign(1, float(theirs)) == math.copysign(1, float(ours))
        return float(ours) == float(theirs) or (approx and math.isclose(float(ours), float(theirs), rel_tol=1e-12))
    if isinstance(theirs, dt.datetime) and isinstance(ours, dt.datetime):
        return ours == theirs and (ours.tzinfo is None) == (theirs.tzinfo is None)
    return type(ours) is type(theirs) and ours == theirs if not isinstance(theirs, int) else ours == theirs


I, B, N, F_, T_ = INT4, INT8, NUM, FLOAT8, TEXT
_NUMERIC_PAIRS = [(_D("7"), _D("2")), (_D("-7"), _D("2")), (_D("7.5"), _D("-2")), (_D("-7.5"), _D("-2")),
                  (_D("0.000001"), _D("3")), (_D("1"), _D("3")), (_D("2"), _D("3"))]
_DATES = [dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(2020, 12, 31), dt.date(2021, 1, 1),
          dt.date(2021, 1, 3), dt.date(2021, 1, 4), dt.date(2000, 2, 29), dt.date(1900, 1, 1),
          dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2001, 1, 1), dt.date(2000, 12, 31),
          dt.date(1999, 1, 1), dt.date(2024, 12, 30)]
_TIMESTAMPS = [dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(1970, 1, 1),
               dt.datetime(1900, 1, 1, 0, 0, 0, 1), dt.datetime(2021, 1, 3, 12, 34, 56, 789012),
               dt.datetime(2020, 12, 31, 23, 59, 59, 500000), dt.datetime(1, 1, 1, 1, 2, 3, 4),
               dt.datetime(2000, 2, 29, 6, 0), dt.datetime(1960, 6, 15, 0, 0, 0, 250000)]
_FIELDS = ["year", "month", "day", "quarter", "dow", "isodow", "doy", "week", "epoch", "decade", "century",
           "millennium"]
_TIME_FIELDS = ["hour", "minute", "second", "milliseconds", "microseconds"]

PG_CASES: list[PgCase] = [
    # integer division truncates toward zero, % takes the dividend's sign
    *[PgCase(f"c0 {op} c1", [t, t], [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 5), (None, 1), (1, None),
                                    (-2**15 if t == INT2 else -2**31 if t == I else -2**63, -1 if op == "%" else 1)])
      for op in ("/", "%") for t in (INT2, I, B)],
    PgCase("c0 / c1", [N, N], _NUMERIC_PAIRS, approx=True),
    PgCase("c0 % c1", [N, N], _NUMERIC_PAIRS),
    PgCase("c0 / c1", [F_, F_], [(7.0, 2.0), (-7.0, 2.0), (1.0, 3.0), (float("nan"), 1.0), (float("inf"), 2.0),
                                 (float("nan"), 0.0), (None, 0.0)]),
    PgCase("c0 + c1 * 2 - c0", [N, N], [(_D("0.1"), _D("0.2")), (_D("-1.5"), _D("2.25"))]),
    PgCase("c0 * c1", [NUM2, NUM2], [(_D("1.25"), _D("-3.50")), (_D("99999.99"), _D("99999.99"))]),
    # division by zero and overflow raise, with PostgreSQL's message
    *[PgCase(sql, types, rows, error=msg) for sql, types, rows, msg in [
        ("c0 / c1", [I, I], [(1, 0)], "division by zero"),
        ("c0 % c1", [I, I], [(1, 0)], "division by zero"),
        ("c0 / c1", [B, B], [(-2**63, -1)], "bigint out of range"),
        ("c0 / c1", [I, I], [(-2**31, -1)], "integer out of range"),
        ("c0 / c1", [N, N], [(_D("1.5"), _D("0"))], "division by zero"),
        ("c0 % c1", [N, N], [(_D("1.5"), _D("0"))], "division by zero"),
        ("c0 / c1", [F_, F_], [(1.0, 0.0)], "division by zero"),
        ("c0 / c1", [F_, F_], [(-0.0, 0.0)], "division by zero"),
        ("c0 + c1", [I, I], [(2**31 - 1, 1)], "integer out of range"),
        ("c0 - c1", [I, I], [(-2**31, 1)], "integer out of range"),
        ("c0 * c1", [I, I], [(65536, 32768)], "integer out of range"),
        ("c0 + c1", [INT2, INT2], [(32767, 1)], "smallint out of range"),
        ("c0 * c1", [B, B], [(2**62, 2)], "bigint out of range"),
        ("-c0", [I], [(-2**31,)], "integer out of range"),
        ("abs(c0)", [INT2], [(-2**15,)], "smallint out of range"),
        ("abs(c0)", [B], [(-2**63,)], "bigint out of range"),
        ("CAST(c0 AS integer)", [B], [(2**31,)], "integer out of range"),
        ("CAST(c0 AS smallint)", [I], [(40000,)], "smallint out of range"),
        ("CAST(c0 AS integer)", [F_], [(2147483647.5,)], "integer out of range"),
        ("CAST(c0 AS integer)", [F_], [(float("nan"),)], "integer out of range"),
        ("CAST(c0 AS bigint)", [N], [(_D("9223372036854775807.5"),)], "bigint out of range"),
        ("CAST(c0 AS numeric(5,2))", [N], [(_D("1234.5"),)], "numeric field overflow"),
        ("CAST(c0 AS numeric(5,2))", [N], [(_D("999.995"),)], "numeric field overflow"),
        ("c0 + c1", [DATE, I], [(dt.date(2020, 1, 1), 2**31 - 1)], "date out of range"),
        ("CAST(c0 AS integer)", [T_], [("12.5",)], 'invalid input syntax for type integer: "12.5"'),
        ("CAST(c0 AS integer)", [T_], [("",)], 'invalid input syntax for type integer: ""'),
        ("CAST(c0 AS integer)", [T_], [("1e3",)], 'invalid input syntax for type integer: "1e3"'),
        ("CAST(c0 AS integer)", [T_], [("99999999999",)], 'value "99999999999" is out of range for type integer'),
        ("CAST(c0 AS smallint)", [T_], [(" 40000",)], 'value " 40000" is out of range for type smallint'),
        ("CAST(c0 AS numeric)", [T_], [("1.2.3",)], 'invalid input syntax for type numeric: "1.2.3"'),
        ("CAST(c0 AS double precision)", [T_], [("1e400",)], '"1e400" is out of range for type double precision'),
        ("CAST(c0 AS double precision)", [T_], [("abc",)], 'invalid input syntax for type double precision: "abc"'),
        ("CAST(c0 AS boolean)", [T_], [("o",)], 'invalid input syntax for type boolean: "o"'),
        ("CAST(c0 AS boolean)", [T_], [("maybe",)], 'invalid input syntax for type boolean: "maybe"'),
        ("CAST(c0 AS date)", [T_], [("2023-02-30",)], 'date/time field value out of range: "2023-02-30"'),
        ("substring(c0, c1, c2)", [T_, I, I], [("abc", 1, -1)], "negative substring length not allowed"),
        ("c0 LIKE c1", [T_, T_], [("a\\", "a\\")], "LIKE pattern must not end with escape character"),
    ]],
    # rounding: numeric half away from zero, float half to even
    PgCase("round(c0)", [N], [(_D(v),) for v in ("0.5", "1.5", "2.5", "-0.5", "-1.5", "-2.5", "2.499999")]),
    PgCase("round(c0, 1)", [N], [(_D(v),) for v in ("0.25", "0.35", "-0.25", "-0.35", "1.04999")]),
    PgCase("round(c0, -1)", [N], [(_D(v),) for v in ("15", "25", "-15", "-25", "14.9")]),
    PgCase("round(c0, 2)", [I], [(7,), (-7,)]),
    PgCase("round(c0)", [F_], [(v,) for v in (0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e300, float("nan"), -0.0)]),
    PgCase("floor(c0)", [F_], [(v,) for v in (1.5, -1.5, -0.5, 0.5, 1e300, float("nan"), float("-inf"), -0.0)]),
    PgCase("ceil(c0)", [F_], [(v,) for v in (1.5, -1.5, -0.5, 0.5, 1e300, float("nan"), float("inf"))]),
    PgCase("floor(c0)", [N], [(_D(v),) for v in ("1.5", "-1.5", "-0.000001", "7")]),
    PgCase("ceil(c0)", [N], [(_D(v),) for v in ("1.5", "-1.5", "0.000001", "-7")]),
    PgCase("CAST(c0 AS integer)", [F_], [(v,) for v in (0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e9)]),
    PgCase("CAST(c0 AS smallint)", [FLOAT4], [(v,) for v in (0.5, 1.5, 2.5, -2.5)]),
    PgCase("CAST(c0 AS integer)", [N], [(_D(v),) for v in ("0.5", "1.5", "2.5", "-0.5", "-2.5", "7.49")]),
    PgCase("CAST(c0 AS numeric(10,2))", [N], [(_D(v),) for v in ("1.005", "-1.005", "2.004999", "0.000001")]),
    PgCase("CAST(c0 AS numeric(10,2))", [F_], [(v,) for v in (1.25, -1.25, 2.675, 0.125, 1e-7, 1234.5678)]),
    PgCase("abs(c0)", [N], [(_D("-1.5"),), (_D("0"),), (None,)]),
    PgCase("-c0", [F_], [(0.0,), (-0.0,), (float("nan"),)]),
    # comparisons: NaN equals NaN and sorts above everything; -0 = 0
    *[PgCase(f"c0 {op} c1", [F_, F_], [(float("nan"), float("nan")), (float("nan"), 1e308), (1e308, float("nan")),
                                        (float("inf"), float("nan")), (-0.0, 0.0), (1.0, None)])
      for op in ("=", "<>", "<", "<=", ">", ">=")],
    PgCase("c0 < c1", [T_, T_], [("a", "B"), ("B", "a"), ("é", "z"), ("ab", "a"), ("", "a")]),
    PgCase("c0 < c1", [BOOL, BOOL], [(False, True), (True, False), (None, True)]),
    PgCase("c0 = c1", [N, NUM2], [(_D("1.5"), _D("1.50")), (_D("1.505"), _D("1.50"))]),
    PgCase("greatest(c0, c1, c2)", [F_, F_, F_], [(float("nan"), 1.0, None), (None, None, None), (1.0, None, 2.0)]),
    PgCase("least(c0, c1, c2)", [F_, F_, F_], [(float("nan"), 1.0, None), (None, None, None), (1.0, None, -2.0)]),
    PgCase("greatest(c0, c1)", [T_, T_], [("a", None), ("b", "ab"), (None, None)]),
    PgCase("least(c0, c1)", [DATE, DATE], [(dt.date(2020, 1, 1), None), (dt.date(2020, 1, 1), dt.date(1969, 1, 1))]),
    PgCase("greatest(c0, c1)", [TS, TS], [(_TIMESTAMPS[0], _TIMESTAMPS[1]), (None, _TIMESTAMPS[2])]),
    PgCase("nullif(c0, c1)", [I, I], [(1, 1), (1, 2), (None, 1), (1, None)]),
    PgCase("nullif(c0, c1)", [F_, F_], [(float("nan"), float("nan")), (-0.0, 0.0)]),
    PgCase("nullif(c0, c1)", [num(0), num(2)], [(_D("1"), _D("1.49")), (_D("-1"), _D("-0.50")), (_D("2"), _D("2.00"))]),
    PgCase("-c0", [N], [(_D("99999999999999999999999999999999.999999"),), (_D("-12345678901234567890123456789.5"),)]),
    PgCase("abs(c0)", [N], [(_D("-99999999999999999999999999999999.999999"),)]),
    PgCase("coalesce(c0, c1, 7)", [I, I], [(None, None), (None, 2), (1, 2)]),
    # IN with NULLs (three-valued)
    PgCase("c0 IN (1, NULL)", [I], [(1,), (2,), (None,)]),
    PgCase("c0 IN (1, 2)", [I], [(1,), (3,), (None,)]),
    PgCase("c0 NOT IN (1, NULL)", [I], [(1,), (2,)]),
    PgCase("c0 IN (c1, 3)", [I, I], [(1, 1), (3, None), (2, None), (None, 1)]),
    PgCase("c0 IN ('NaN', 0)", [F_], [(float("nan"),), (-0.0,), (1.0,)]),
    PgCase("c0 IN ('a', 'B')", [T_], [("a",), ("b",), ("B",)]),
    # three-valued logic
    *[PgCase(f"c0 {op} c1", [BOOL, BOOL], [(a, b) for a in (True, False, None) for b in (True, False, None)])
      for op in ("AND", "OR")],
    PgCase("NOT c0", [BOOL], [(True,), (False,), (None,)]),
    PgCase("c0 IS NULL", [F_], [(float("nan"),), (None,)]),
    # text
    PgCase("substring(c0, c1, c2)", [T_, I, I],
           [("hello", 0, 3), ("hello", -2, 5), ("hello", -5, 3), ("hello", 2, 0), ("hello", 4, 100),
            ("héllo", 2, 2), ("hello", 9, 2), (None, 1, -1), ("hello", None, -1), ("hello", 2, 2147483647),
            ("hello", 2147483647, 10), ("hello", -2147483647, 2147483647)]),
    PgCase("substring(c0, c1)", [T_, I], [("hello", 0), ("hello", -3), ("hello", 3), ("héllo", 2), ("x", None)]),
    PgCase("substring(c0 FROM 2 FOR 3)", [T_], [("hello",), ("hé",), (None,)]),
    *[PgCase(f"substring(c0, {start}, {length})", [T_], [("hello",), ("hé",), (None,)])
      for start, length in [(0, 3), (-1, 3), (-2, 2), (1, 0), (4, 2147483647)]],
    *[PgCase(f"substring(c0, {start})", [T_], [("hello",), (None,)]) for start in (-1, 0, 2, 6)],
    PgCase("trim(c0)", [T_], [("  a b  ",), ("\ta\t",), ("",)]),
    PgCase("btrim(c0, c1)", [T_, T_], [("xxhixx", "x"), ("abcba", "ab"), ("hi", ""), ("hi", None), ("éaé", "é")]),
    PgCase("ltrim(c0, c1)", [T_, T_], [("xxhixx", "x"), ("abcba", "ba")]),
    PgCase("rtrim(c0, c1)", [T_, T_], [("xxhixx", "x"), ("abcba", "ab")]),
    PgCase("trim(BOTH 'x' FROM c0)", [T_], [("xxhixx",)]),
    PgCase("trim(LEADING FROM c0)", [T_], [("  hi  ",)]),
    PgCase("c0 LIKE c1", [T_, T_],
           [("abc", "a_c"), ("abc", "a%"), ("abc", "%c"), ("a_c", "a\\_c"), ("abc", "a\\_c"), ("a%c", "a\\%c"),
            ("abc", "a\\%c"), ("a\\c", "a\\\\c"), ("abc", "\\a%"), ("a\nb", "a%b"), ("a\nb", "a_b"), ("", "%"),
            ("é", "_"), ("ab", "a"), ("a.c", "a.c"), ("abc", "a.c"), ("a+", "a+"), (None, "%"), ("x", None)]),
    PgCase("c0 ILIKE c1", [T_, T_], [("ABC", "a_c"), ("abc", "A%"), ("Éa", "éA"), ("a_C", "A\\_c")]),
    PgCase("c0 NOT LIKE 'a%'", [T_], [("abc",), ("bca",), (None,)]),
    PgCase("c0 || c1", [T_, T_], [("a", "b"), ("a", None), (None, None), ("", "")]),
    PgCase("c0 || c1", [T_, I], [("n=", 7), ("n=", None)]),
    PgCase("concat(c0, c1, c2)", [T_, T_, I], [("a", None, 1), (None, None, None), ("a", "b", None)]),
    PgCase("lower(c0) || upper(c0)", [T_], [("HeLLo",), ("ÉtÉ",), (None,)]),
    PgCase("length(c0)", [T_], [("héllo",), ("",), (None,), ("  ",)]),
    # casts
    PgCase("CAST(c0 AS integer)", [T_], [(" 12 ",), ("+5",), ("-0012",), ("\t7\n",), (None,), ("-2147483648",)]),
    PgCase("CAST(c0 AS bigint)", [T_], [("9223372036854775807",), ("-9223372036854775808",)]),
    PgCase("CAST(c0 AS numeric(10,2))", [T_],
           [(v,) for v in ("1.555", "-1.555", "1e3", ".5", "5.", " 2.5 ", "+0.125", "1E-3")]),
    PgCase("CAST(c0 AS numeric(20,10))", [T_], [("3.1415926535",), ("-0.0000004",), ("0.00000000005",)]),
    PgCase("CAST(c0 AS double precision)", [T_],
           [(v,) for v in ("1.5", " -2e-3 ", "NaN", "Infinity", "-inf", "1e308", ".5")]),
    PgCase("CAST(c0 AS real)", [T_], [("0.1",), ("3.4e38",), ("-Infinity",)]),
    PgCase("CAST(c0 AS boolean)", [T_], [(v,) for v in ("t", "tr", "tru", "TRUE", "y", "ye", "YES", "on", "ON", "1",
                                                          "f", "fa", "fals", "False", "n", "no", "of", "off", "0",
                                                          " true ", "\tno\n", None)]),
    PgCase("CAST(c0 AS text)", [BOOL], [(True,), (False,), (None,)]),
    PgCase("CAST(c0 AS boolean)", [I], [(0,), (7,), (-1,), (None,)]),
    PgCase("CAST(c0 AS integer)", [BOOL], [(True,), (False,)]),
    PgCase("CAST(c0 AS text)", [F_], [(v,) for v in (0.1, 1.0, 1e20, 1.5e-7, 100 / 7, -0.0, float("nan"),
                                                     float("inf"), float("-inf"), 1e15, 1e14, 123456789012345.0,
                                                     0.0001, 0.00001, 2.5e-5, 1e-310, 5e-324, -1.25e100)]),
    PgCase("CAST(c0 AS text)", [FLOAT4], [(v,) for v in (0.1, 1.0, 1e6, 123456.0, 1.5e-5, 0.0001, 3.4e38, -0.0)]),
    # (Java 17's Float.toString is not always shortest: 1.17549435E-38 for 1.1754944e-38)
    PgCase("CAST(c0 AS text)", [FLOAT4], [(v,) for v in (1.17549435e-38, 16777216.0, 1 / 3, 2.0 ** -149, 9.999999e-5,
                                                         123456.7, 1234567.0, float("nan"), float("-inf"))]),
    # years past 9999 (no '+') and before 1 (BC; there is no year 0)
    PgCase("CAST(c0 + 1 AS text)", [DATE], [(dt.date(9999, 12, 31),), (dt.date(2000, 1, 1),)]),
    PgCase("CAST(c0 - 1 AS text)", [DATE], [(dt.date(1, 1, 1),), (dt.date(1, 3, 1),)]),
    PgCase("CAST(c0 + INTERVAL '1 day' AS text)", [TS], [(dt.datetime(9999, 12, 31, 12, 30, 0, 5),)]),
    PgCase("CAST(c0 - INTERVAL '1 day' AS text)", [TSTZ], [(dt.datetime(1, 1, 1, 1, 2, 3, tzinfo=UTC),)]),
    PgCase("CAST(c0 AS text)", [SqlType.numeric(20, 6)], [(_D("1.5"),), (_D("-0.000001"),), (_D("0"),),
                                                           (_D("12345678901234.345678"),)]),
    PgCase("CAST(c0 AS text)", [NUM2], [(_D("-0.05"),), (_D("10.00"),)]),
    PgCase("CAST(c0 AS text)", [I], [(-7,), (None,)]),
    PgCase("CAST(c0 AS text)", [DATE], [(dt.date(2023, 1, 5),), (dt.date(1, 1, 1),)]),
    PgCase("CAST(c0 AS text)", [TS], [(t,) for t in _TIMESTAMPS if t.year >= 1000]),
    PgCase("CAST(c0 AS text)", [TSTZ], [(t.replace(tzinfo=UTC),) for t in _TIMESTAMPS if t.year >= 1000]),
    PgCase("CAST(c0 AS date)", [T_], [("2023-01-05",), (" 2000-2-29 ",), ("0001-01-01",)]),
    PgCase("CAST(c0 AS timestamp)", [T_], [("2023-01-05 10:00:00",), ("2023-1-5 1:02:03.5",), ("2023-01-05T10:00",),
                                            ("1969-12-31 23:59:59.999999",), ("2023-01-05 10:00:00+02",),
                                            ("2023-01-05",)]),
    PgCase("CAST(c0 AS timestamptz)", [T_], [("2023-01-05 10:00:00+02",), ("2023-01-05 10:00:00-05:30",),
                                              ("2023-01-05 10:00:00Z",), ("2023-01-05 10:00:00",)]),
    PgCase("CAST(c0 AS date)", [TS], [(t,) for t in _TIMESTAMPS]),
    PgCase("CAST(c0 AS date)", [TSTZ], [(t.replace(tzinfo=UTC),) for t in _TIMESTAMPS]),
    PgCase("CAST(c0 AS timestamp)", [DATE], [(d,) for d in _DATES]),
    PgCase("CAST(c0 AS timestamptz)", [DATE], [(d,) for d in _DATES]),
    PgCase("CAST(c0 AS timestamptz)", [TS], [(t,) for t in _TIMESTAMPS]),
    PgCase("CAST(c0 AS timestamp)", [TSTZ], [(t.replace(tzinfo=UTC),) for t in _TIMESTAMPS]),
    PgCase("CAST(c0 AS real)", [F_], [(0.1,), (1 / 3,), (-0.0,), (float("nan"),)]),
    PgCase("CAST(c0 AS double precision)", [N], [(_D("0.1"),), (_D("12345678901234567.123456"),), (_D("-1E-6"),)]),
    PgCase("CAST(c0 AS numeric)", [I], [(2**31 - 1,), (None,)]),
    # dates
    PgCase("c0 + c1", [DATE, I], [(dt.date(2020, 2, 28), 1), (dt.date(1970, 1, 1), -1), (dt.date(2020, 1, 1), None)]),
    PgCase("c1 + c0", [DATE, I], [(dt.date(2020, 2, 28), 366)]),
    PgCase("c0 - c1", [DATE, I], [(dt.date(2021, 3, 1), 1), (dt.date(1, 1, 2), 1)]),
    PgCase("c0 - c1", [DATE, DATE],
           [(dt.date(2021, 3, 1), dt.date(2020, 3, 1)), (dt.date(1, 1, 1), dt.date(9999, 12, 31))]),
    *[PgCase(f"EXTRACT({f} FROM c0)", [DATE], [(d,) for d in _DATES]) for f in _FIELDS],
    *[PgCase(f"EXTRACT({f} FROM c0)", [TS], [(t,) for t in _TIMESTAMPS]) for f in _FIELDS + _TIME_FIELDS],
    *[PgCase(f"EXTRACT({f} FROM c0)", [TSTZ], [(t.replace(tzinfo=UTC),) for t in _TIMESTAMPS])
      for f in ("year", "dow", "epoch", "hour", "second", "week")],
    *[PgCase(f"date_trunc('{u}', c0)", [TS], [(t,) for t in _TIMESTAMPS + [dt.datetime(2000, 1, 1)]
                                              if u != "decade" or t.year > 9])
      for u in ("microseconds", "milliseconds", "second", "minute", "hour", "day", "week", "month", "quarter",
                "year", "decade", "century", "millennium")],
    # (the decade of year 1 starts in 1 BC, which the client library cannot read)
    *[PgCase(f"date_trunc('{u}', c0)", [DATE], [(d,) for d in _DATES if u != "decade" or d.year > 9])
      for u in ("day", "week", "quarter", "year", "decade", "century", "millennium")],
    *[PgCase(f"date_trunc('{u}', c0)", [TSTZ], [(t.replace(tzinfo=UTC),) for t in _TIMESTAMPS])
      for u in ("week", "quarter", "century")],
    PgCase("CASE WHEN c0 > 0 THEN 'pos' WHEN c0 < 0 THEN 'neg' END", [I], [(1,), (-1,), (0,), (None,)]),
    PgCase("CASE c0 WHEN 1 THEN 10 WHEN 2 THEN 20 ELSE c0 END", [I], [(1,), (2,), (3,), (None,)]),
    PgCase("c0 BETWEEN 1 AND 3", [N], [(_D("1"),), (_D("3.000001"),), (None,)]),
]


@pytest.fixture(scope="module")
def pg_conn(pg: str) -> Any:
    import psycopg

    conn = psycopg.connect(pg, autocommit=True)
    conn.execute("SET TIME ZONE 'UTC'")
    conn.execute("SET extra_float_digits = 1")  # floats exactly (the default since PostgreSQL 12)
    yield conn
    conn.close()


def check_arrow_against_postgresql(case: PgCase, pg_conn: Any) -> None:
    """The Arrow evaluator gives PostgreSQL's values for ``case`` (or raises PostgreSQL's error message)."""
    expected = _pg_query(pg_conn, case)
    expr = bind(case.sql, case.types)
    table = table_of([(t, [row[i] for row in case.rows]) for i, t in enumerate(case.types)])
    if isinstance(expected, Exception) or case.error:
        assert isinstance(expected, Exception), f"PostgreSQL did not raise for {case}: {expected}"
        message = expected.diag.message_primary
        if case.error:
            assert message == case.error, f"PostgreSQL says {message!r}"
        with pytest.raises(ExecutionError) as info:
            ev.evaluate(expr, table)
        assert str(info.value) == message
        return
    out = ev.evaluate(expr, table)
    assert out.type == expr.type.arrow
    got = out.to_pylist()
    bad = [(row, g, e) for row, g, e in zip(case.rows, got, expected) if not _pg_equal(g, e, case.approx, expr.type)]
    assert not bad, f"{case.sql}: (input, ours, PostgreSQL) = {bad}"


@pytest.mark.parametrize("case", PG_CASES, ids=repr)
def test_matches_postgresql(case: PgCase, pg_conn: Any) -> None:
    check_arrow_against_postgresql(case, pg_conn)


def test_spark_lowering_matches_postgresql(spark: Any, pg_conn: Any) -> None:
    """The same tables through the Spark lowering (all cases side by side, one Spark job)."""
    from freshview.plan.expr import remap_columns

    cases = [c for c in PG_CASES if not c.error]
    rows = max(len(c.rows) for c in cases)
    columns: list[tuple[SqlType, list[Any]]] = []
    exprs = []
    for case in cases:
        mapping = {i: len(columns) + i for i in range(len(case.types))}
        exprs.append(remap_columns(bind(case.sql, case.types), mapping))
        for i, t in enumerate(case.types):
            values = [row[i] for row in case.rows]
            columns.append((t, values + [None] * (rows - len(values))))
    results = spark_values(spark, table_of(columns), exprs, raw=True)
    bad = []
    for case, expr, got in zip(cases, exprs, results):
        expected = _pg_query(pg_conn, case)
        assert not isinstance(expected, Exception), (case, expected)
        if isinstance(got, Exception):
            bad.append(f"{case.sql}: Spark raised {str(got).splitlines()[0][:160]}")
            continue
        # (Spark's float text may be a longer spelling of the same double: see same_value)
        diffs = [(row, g, e) for row, g, e in zip(case.rows, got, expected)
                 if not _pg_equal(g, e, case.approx, expr.type)
                 and not (_via_double_text(expr) and isinstance(g, str) and isinstance(e, str)
                          and _same_float_spellings(e, g))]
        if diffs:
            bad.append(f"{case.sql} :: {[t.kind for t in case.types]}: (input, Spark, PostgreSQL) = {diffs[:3]}")
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in PG_CASES if c.error], ids=repr)
def test_spark_lowering_raises_where_postgresql_does(case: PgCase, spark: Any) -> None:
    table = table_of([(t, [row[i] for row in case.rows]) for i, t in enumerate(case.types)])
    (out,) = spark_values(spark, table, [bind(case.sql, case.types)])
    assert isinstance(out, Exception), f"Spark gave {out} where PostgreSQL says {case.error!r}"


# ---------------------------------------------------------------------------
# family 2: the Arrow evaluator against the Spark lowering, on random expressions
# ---------------------------------------------------------------------------

# Derandomized so a CI run is reproducible; FRESHVIEW_HYPOTHESIS_EXPLORE=1 draws new examples each run
# (known open difference it finds: the spelling of some CAST(float4 AS text) results, see the notes).
_PROPERTY = dict(deadline=None, derandomize=os.environ.get("FRESHVIEW_HYPOTHESIS_EXPLORE") != "1",
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                        HealthCheck.data_too_large])


def _check_against_spark(spark: Any, seed: int, exprs: list[Expr]) -> None:
    table = random_table(seed)
    problems = compare_with_spark(spark, table, exprs)
    assert not problems, f"{len(problems)} of {len(exprs)} expressions differ (table seed {seed}):\n" + \
        "\n".join(problems)


# No shrinking: every shrink step is a Spark job, and the report already names each expression and row.
@settings(max_examples=10, phases=[p for p in __import__("hypothesis").Phase if p.name != "shrink"], **_PROPERTY)
@given(seed=st.integers(0, 2**31), exprs=st.lists(expressions(4), min_size=16, max_size=16))
def test_arrow_matches_spark(spark: Any, seed: int, exprs: list[Expr]) -> None:
    _check_against_spark(spark, seed, exprs)


@pytest.mark.slow
@settings(max_examples=150, **_PROPERTY)
@given(seed=st.integers(0, 2**31), exprs=st.lists(expressions(4), min_size=20, max_size=20))
def test_arrow_matches_spark_long(spark: Any, seed: int, exprs: list[Expr]) -> None:
    _check_against_spark(spark, seed, exprs)


def test_generated_expressions_are_well_typed() -> None:
    """The generator only builds what the binder would: every node has operands of the types its op takes."""
    from hypothesis import find

    for kind in _KINDS:
        e = find(expressions(4), lambda x, k=kind: x.type.kind == k, settings=settings(max_examples=500, database=None))
        assert e.type.kind == kind
        table = random_table(7)
        out = arrow_values(e, table)
        assert isinstance(out, (list, ExecutionError))


# ---------------------------------------------------------------------------
# family 3: laziness
# ---------------------------------------------------------------------------

D0 = [4, 0, -2, None, 0, 5]  # divisors with zeros


def _ints(*columns: Sequence[Any]) -> pa.Table:
    return table_of([(INT4, c) for c in columns])


def _div(a: Expr, b: Expr) -> Expr:
    return call("/", INT4, a, b)


def test_case_evaluates_a_branch_only_for_its_rows() -> None:
    d = col(0, INT4)
    expr = Case(INT4, ((call("=", BOOL, d, lit(0, INT4)), lit(0, INT4)),), _div(lit(100, INT4), d))
    assert ev.evaluate(expr, _ints(D0)).to_pylist() == [25, 0, -50, None, 0, 20]
    # the guard in a later WHEN, and the failing division in a condition
    expr = Case(INT4, ((call("is_null", BOOL, d), lit(-1, INT4)),
                       (call(">", BOOL, _div(lit(100, INT4), d), lit(10, INT4)), lit(1, INT4))), lit(0, INT4))
    with pytest.raises(ExecutionError, match="division by zero"):
        ev.evaluate(expr, _ints(D0))
    expr = Case(INT4, ((call("=", BOOL, d, lit(0, INT4)), lit(0, INT4)),
                       (call(">", BOOL, _div(lit(100, INT4), d), lit(10, INT4)), lit(1, INT4))), lit(2, INT4))
    assert ev.evaluate(expr, _ints(D0)).to_pylist() == [1, 0, 2, 2, 0, 1]


def test_case_still_raises_for_a_row_that_takes_the_branch() -> None:
    d = col(0, INT4)
    expr = Case(INT4, ((call(">=", BOOL, d, lit(0, INT4)), _div(lit(1, INT4), d)),), None)
    with pytest.raises(ExecutionError, match="^division by zero$"):
        ev.evaluate(expr, _ints(D0))


def test_case_scatters_branch_results_to_their_rows() -> None:
    x, d = col(0, INT4), col(1, INT4)
    # three branches, two of them failing elsewhere, over interleaved rows
    expr = Case(INT4, (
        (call("=", BOOL, d, lit(0, INT4)), call("*", INT4, x, lit(10, INT4))),
        (call(">", BOOL, d, lit(0, INT4)), _div(x, d)),
    ), call("%", INT4, x, call("neg", INT4, d)))
    table = _ints([10, 20, 30, 40, 50, 60, 70], [0, 3, -4, None, 0, 7, -8])
    assert ev.evaluate(expr, table).to_pylist() == [100, 6, 2, None, 500, 8, 6]


def test_coalesce_stops_at_the_first_non_null() -> None:
    c, d = col(0, INT4), col(1, INT4)
    expr = call("coalesce", INT4, c, _div(lit(100, INT4), d), lit(7, INT4))
    table = _ints([1, 2, None, None, 5, None], [0, 0, 4, None, 0, 50])
    assert ev.evaluate(expr, table).to_pylist() == [1, 2, 25, 7, 5, 2]
    with pytest.raises(ExecutionError, match="division by zero"):
        ev.evaluate(expr, _ints([None], [0]))


def test_and_or_skip_the_right_side_where_the_left_decides() -> None:
    d = col(0, INT4)
    big = call(">", BOOL, _div(lit(10, INT4), d), lit(1, INT4))
    guard = call("<>", BOOL, d, lit(0, INT4))
    table = _ints([4, 0, 20, 0, 5])
    assert ev.evaluate(call("and", BOOL, guard, big), table).to_pylist() == [True, False, False, False, True]
    zero = call("=", BOOL, d, lit(0, INT4))
    assert ev.evaluate(call("or", BOOL, zero, big), table).to_pylist() == [True, True, False, True, True]
    assert ev.evaluate_filter(call("and", BOOL, guard, big), table).to_pylist() == [True, False, False, False, True]
    # a NULL left side does not decide: the right side runs (as in Spark and PostgreSQL)
    unknown = call("<>", BOOL, col(1, INT4), lit(0, INT4))
    with pytest.raises(ExecutionError, match="division by zero"):
        ev.evaluate(call("and", BOOL, unknown, big), _ints([0], [None]))


def test_nested_guards_and_casts() -> None:
    s = col(0, TEXT)
    is_number = call("like", BOOL, s, lit("n:%", TEXT))
    number = Cast(INT4, call("substring", TEXT, s, lit(3, INT4)))
    expr = Case(INT4, ((is_number, call("+", INT4, number, lit(1, INT4))),), call("length", INT4, s))
    table = table_of([(TEXT, ["n:41", "hello", None, "n: 7 ", "n:x"][:4])])
    assert ev.evaluate(expr, table).to_pylist() == [42, 5, None, 8]
    with pytest.raises(ExecutionError, match='invalid input syntax for type integer: "x"'):
        ev.evaluate(expr, table_of([(TEXT, ["n:41", "n:x"])]))


def test_null_operand_skips_the_rest_as_spark_does() -> None:
    """Spark evaluates an operator's right operand only where the left one is non-NULL, so an
    error there is hidden by a NULL (PostgreSQL would raise); the Arrow evaluator does the same."""
    n, d = col(0, INT4), col(1, INT4)
    table = _ints([None, None], [0, 0])
    assert ev.evaluate(call("+", INT4, n, _div(lit(1, INT4), d)), table).to_pylist() == [None, None]
    with pytest.raises(ExecutionError):  # the left operand is evaluated whatever the right one is
        ev.evaluate(call("+", INT4, _div(lit(1, INT4), d), n), table)
    # / and %: Spark evaluates the divisor first
    assert ev.evaluate(call("/", INT4, _div(lit(1, INT4), d), n), table).to_pylist() == [None, None]
    assert ev.evaluate(call("/", INT4, n, d), table).to_pylist() == [None, None]


def test_only_failing_sub_expressions_are_evaluated_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    subsets: list[int] = []
    original = ev._Evaluator.where

    def counting(self: Any, e: Expr, mask: Any) -> Any:
        if self.can_fail(e) and not mask.all() and mask.any():
            subsets.append(int(mask.sum()))
        return original(self, e, mask)

    subset_rows: list[int] = []
    original_init = ev._Evaluator.__init__

    def recording_init(self: Any, column: Any, n: int, memo: Any) -> None:
        subset_rows.append(n)
        original_init(self, column, n, memo)

    monkeypatch.setattr(ev._Evaluator, "where", counting)
    monkeypatch.setattr(ev._Evaluator, "__init__", recording_init)
    x = col(0, FLOAT8)
    guarded = Case(FLOAT8, ((call("<>", BOOL, x, lit(0.0, FLOAT8)), call("/", FLOAT8, lit(1.0, FLOAT8), x)),), x)
    table = table_of([(FLOAT8, [1.0, 0.0, 4.0])])
    assert ev.evaluate(guarded, table).to_pylist() == [1.0, 0.0, 0.25]
    assert subsets == [2] and subset_rows == [3, 2]  # 1/x fails on the batch: again on its 2 rows
    subsets.clear(), subset_rows.clear()
    positive = Case(FLOAT8, ((call(">", BOOL, x, lit(0.0, FLOAT8)), call("/", FLOAT8, lit(1.0, FLOAT8), x)),), x)
    assert ev.evaluate(positive, table_of([(FLOAT8, [1.0, -2.0, 4.0])])).to_pylist() == [1.0, -2.0, 0.25]
    assert subsets == [] and subset_rows == [3]  # could fail, but does not: one pass, no masks
    subsets.clear(), subset_rows.clear()
    # one branch fails on another's rows, the other branch could fail but does not: only the first
    # is evaluated again on its own rows
    y = col(1, FLOAT8)
    two = Case(FLOAT8, ((call("<>", BOOL, x, lit(0.0, FLOAT8)), call("/", FLOAT8, lit(1.0, FLOAT8), x)),),
               call("/", FLOAT8, lit(1.0, FLOAT8), y))
    assert ev.evaluate(two, table_of([(FLOAT8, [1.0, 0.0, 4.0]), (FLOAT8, [2.0, 2.0, 2.0])])).to_pylist() \
        == [1.0, 0.5, 0.25]
    assert subset_rows == [3, 2]
    subsets.clear(), subset_rows.clear()
    cheap = Case(FLOAT8, ((call(">", BOOL, x, lit(0.0, FLOAT8)), call("*", FLOAT8, x, x)),), x)
    assert ev.evaluate(cheap, table).to_pylist() == [1.0, 0.0, 16.0]
    assert subsets == [] and subset_rows == [3]  # nothing can fail: no laziness at all


def test_results_have_the_declared_type_and_length() -> None:
    table = table_of([(INT4, [1, 2, 3]), (INT8, [0, 0, 0])]).append_column("_weight", pa.array([1, 1, -1]))
    for e in [lit(None, TEXT), lit(_D("1.5"), num(2)), lit(dt.date(2020, 1, 1), DATE), lit(None, SqlType("null")),
              lit(dt.datetime(2020, 1, 1, tzinfo=UTC), TSTZ), lit(dt.datetime(2020, 1, 1, 12), TS),
              lit(2.5, FLOAT4), lit(True, BOOL), lit(7, INT2), call("+", INT4, col(0, INT4), lit(1, INT4)),
              Case(TEXT, ((lit(False, BOOL), lit("x", TEXT)),), None)]:
        out = ev.evaluate(e, table)
        assert out.type == e.type.arrow and len(out) == 3, e
    empty = table.slice(0, 0)
    lazy = Case(INT4, ((call("=", BOOL, col(0, INT4), lit(0, INT4)), lit(0, INT4)),), _div(lit(1, INT4), col(0, INT4)))
    assert ev.evaluate(lazy, empty).to_pylist() == []
    assert ev.evaluate_filter(call(">", BOOL, col(0, INT4), lit(1, INT4)), table).to_pylist() == [False, True, True]


# Expressions whose evaluation reads Arrow buffers directly (decimal words, string offsets, floats).
_BUFFER_READERS = [
    call("+", NUM, col(4, NUM), col(4, NUM)),
    call("*", num(8), col(5, NUM2), Cast(num(6), col(5, NUM2))),
    call("%", NUM, col(4, NUM), lit(_D("0.7"), NUM)),
    Cast(SqlType.numeric(20, 1), col(4, NUM)),
    Cast(FLOAT8, col(4, NUM)),
    call("/", num(16), col(4, NUM), lit(_D("3"), num(0))),
    call("<", BOOL, col(7, FLOAT8), col(8, FLOAT8)),
    call("substring", TEXT, col(9, TEXT), col(2, INT4)),
    Cast(TEXT, col(7, FLOAT8)),
    Cast(TEXT, col(5, NUM2)),
]


@pytest.mark.parametrize("expr", _BUFFER_READERS, ids=str)
def test_slices_and_chunks_give_the_same_rows(expr: Expr) -> None:
    for seed in range(3):
        table = random_table(seed)
        nan_last = [None] * (table.num_rows - 1) + [NAN]  # a NaN only a correct offset reaches
        table = table.set_column(8, "c8", pa.array(nan_last, pa.float64()))
        for cut in (1, 6, 17):
            _check_slices(expr, table, cut)


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**31), expr=expressions(4), cut=st.integers(1, 23))
def test_slices_and_chunks_give_the_same_rows_random(seed: int, expr: Expr, cut: int) -> None:
    _check_slices(expr, random_table(seed), cut)


def _check_slices(expr: Expr, table: pa.Table, cut: int) -> None:
    """Buffers read directly honour array offsets and chunking: a slice gives the slice's rows."""
    whole = arrow_values(expr, table)
    if isinstance(whole, Exception):
        return
    tail = arrow_values(expr, table.slice(cut))
    assert not isinstance(tail, Exception), tail
    assert all(same_value(a, b) for a, b in zip(tail, whole[cut:])), (expr, tail, whole[cut:])
    chunked = pa.Table.from_batches(table.slice(0, cut).to_batches() + table.slice(cut).to_batches())
    again = arrow_values(expr, chunked)
    assert not isinstance(again, Exception)
    assert all(same_value(a, b) for a, b in zip(again, whole)), (expr, again, whole)


def test_single_row_is_its_rows_value_or_the_dialects_error():
    # sql.single_row: v where the subquery's row count n is 0 or 1; above, PostgreSQL's (MariaDB's) error;
    # lazily under CASE, so a row that does not read it does not raise.
    n, v = ColumnRef(INT8, 0), ColumnRef(TEXT, 1)
    ok = pa.table({"c0": pa.array([0, 1, 1], pa.int64()), "c1": pa.array([None, "x", None])})
    assert ev.evaluate(Call(TEXT, "single_row", (n, v), "postgres"), ok).to_pylist() == [None, "x", None]
    many = pa.table({"c0": pa.array([1, 2], pa.int64()), "c1": pa.array(["x", "y"])})
    for dialect, message in (("postgres", "more than one row returned by a subquery used as an expression"),
                             ("mysql", "Subquery returns more than 1 row")):
        with pytest.raises(ExecutionError, match=re.escape(message)):
            ev.evaluate(Call(TEXT, "single_row", (n, v), dialect), many)
    only_first = Case(TEXT, ((Call(BOOL, "<", (n, Literal(INT8, 2))), Call(TEXT, "single_row", (n, v), "postgres")),),
                      Literal(TEXT, None))
    assert ev.evaluate(only_first, many).to_pylist() == ["x", None]
