"""PostgreSQL's scalar functions in both executors, against PostgreSQL itself.

Each case runs ``SELECT <sql>`` over typed VALUES in PostgreSQL, is bound by
freshview's binder (sql/functions.py) and evaluated by the Arrow evaluator:
the values must be PostgreSQL's, or the error PostgreSQL's message.  The
same cases go through the Spark lowering (values in one Spark job; each
error case alone, whose message must contain PostgreSQL's).  Then: the
binder's result types, and the refusals (non-deterministic functions,
GROUP BY/DISTINCT over intervals, untranslatable regular expressions), each
with a position.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D
from typing import Any

import pytest

from freshview.errors import SqlTypeError, UnsupportedSqlError
from freshview.plan.expr import remap_columns
from freshview.runtime.expressions import arrow as ev
from freshview.schema import SqlType
from tests.runtime.test_expressions_arrow import (  # noqa: F401  (pg_conn is a fixture)
    BOOL, DATE, FLOAT4, FLOAT8, INT2, INT4, INT8, NUM, NUM2, TEXT, TS, TSTZ, UTC, PgCase, _pg_equal, _pg_query,
    bind, check_arrow_against_postgresql, pg_conn, spark_values, table_of,
)

I, B, N, F_, T_ = INT4, INT8, NUM, FLOAT8, TEXT
NAN, INF = float("nan"), float("inf")
_TS = [dt.datetime(2021, 1, 31, 10, 30), dt.datetime(2020, 2, 29, 23, 59, 59, 999999), dt.datetime(1969, 12, 31, 0, 0, 1),
       dt.datetime(2023, 3, 31, 0, 0), dt.datetime(2000, 1, 1, 12, 0, 0, 500000), dt.datetime(1999, 12, 31, 23, 0)]
_TEXTS = ["", "abc", "héllo wörld", "a,b,,c", "  pad  ", "ÉTÉ été", "x", "aaa"]

PG_CASES: list[PgCase] = [
    # -- math: double precision, PostgreSQL's errors -----------------------------------------------
    PgCase("sqrt(c0)", [F_], [(v,) for v in (0.0, -0.0, 2.0, 1e300, NAN, INF, None)], approx=True),
    PgCase("sqrt(c0)", [I], [(4,), (2,), (None,)], approx=True),
    PgCase("cbrt(c0)", [F_], [(v,) for v in (8.0, -27.0, 0.0, 2.0, NAN, -INF)], approx=True),
    PgCase("exp(c0)", [F_], [(v,) for v in (0.0, 1.0, -1.0, 700.0, -740.0, NAN, INF, -INF, None)], approx=True),
    PgCase("ln(c0)", [F_], [(v,) for v in (1.0, 2.718281828459045, 1e-300, NAN, INF, None)], approx=True),
    PgCase("log(c0)", [F_], [(v,) for v in (1.0, 10.0, 1000.0, 0.001, NAN, INF)], approx=True),
    PgCase("ln(c0)", [I], [(1,), (7,)], approx=True),
    PgCase("power(c0, c1)", [F_, F_],
           [(2.0, 10.0), (2.0, -2.0), (-8.0, 3.0), (-8.0, 2.0), (0.0, 0.0), (0.0, 5.0), (NAN, 0.0), (NAN, 1.0),
            (1.0, NAN), (2.0, NAN), (-1.0, INF), (-1.0, -INF), (0.5, INF), (2.0, INF), (2.0, -INF), (INF, 0.0),
            (INF, -1.0), (-INF, 3.0), (-INF, 2.0), (-INF, -3.0), (9.0, 0.5), (2.0, -1074.0), (None, 1.0),
            (1.0, None)], approx=True),
    PgCase("power(c0, c1)", [I, I], [(2, 3), (2, -1), (-2, 3), (10, 0)], approx=True),
    PgCase("c0 ^ c1", [F_, F_], [(2.0, 0.5), (3.0, 2.0)], approx=True),
    PgCase("power(c0, 0.5)", [F_], [(2.0,), (0.0,)], approx=True),
    PgCase("power(c0, c1)", [N, F_], [(D("2.25"), 0.5)], approx=True),
    PgCase("mod(c0, c1)", [I, I], [(7, 3), (-7, 3), (7, -3), (None, 1)]),
    PgCase("mod(c0, c1)", [N, N], [(D("7.5"), D("2")), (D("-7.5"), D("2"))]),
    PgCase("sign(c0)", [F_], [(v,) for v in (2.5, -0.1, 0.0, -0.0, NAN, INF, -INF, None)]),
    PgCase("sign(c0)", [N], [(D("2.5"),), (D("-0.000001"),), (D("0"),), (None,)]),
    PgCase("sign(c0)", [I], [(5,), (-5,), (0,)]),
    PgCase("trunc(c0)", [F_], [(v,) for v in (2.7, -2.7, -0.5, 0.5, 1e300, NAN, -INF, None)]),
    PgCase("trunc(c0)", [N], [(D("2.7"),), (D("-2.7"),), (D("-0.5"),), (None,)]),
    PgCase("trunc(c0, 2)", [N], [(D("2.567"),), (D("-2.567"),), (D("0.009"),), (D("-0.009"),), (None,)]),
    PgCase("trunc(c0, -1)", [N], [(D("15.5"),), (D("-15.5"),), (D("-5"),)]),
    PgCase("trunc(c0, 1)", [NUM2], [(D("1.99"),), (D("-1.99"),)]),
    PgCase("trunc(c0, 1)", [I], [(7,), (-7,)]),
    PgCase("ceiling(c0)", [N], [(D("1.5"),), (D("-1.5"),)]),
    PgCase("round(c0, 2)", [N], [(D(v),) for v in ("1.005", "-1.005", "2.675", "-0.125", "0.125")]),
    PgCase("round(c0)", [F_], [(v,) for v in (0.5, 1.5, 2.5, -0.5, -2.5)]),
    *[PgCase(sql, types, rows, error=msg) for sql, types, rows, msg in [
        ("sqrt(c0)", [F_], [(-1.0,)], "cannot take square root of a negative number"),
        ("sqrt(c0)", [I], [(-4,)], "cannot take square root of a negative number"),
        ("ln(c0)", [F_], [(0.0,)], "cannot take logarithm of zero"),
        ("ln(c0)", [F_], [(-1.0,)], "cannot take logarithm of a negative number"),
        ("log(c0)", [F_], [(0.0,)], "cannot take logarithm of zero"),
        ("log(c0)", [F_], [(-INF,)], "cannot take logarithm of a negative number"),
        ("exp(c0)", [F_], [(1000.0,)], "value out of range: overflow"),
        ("exp(c0)", [F_], [(-1000.0,)], "value out of range: underflow"),
        ("power(c0, c1)", [F_, F_], [(0.0, -1.0)], "zero raised to a negative power is undefined"),
        ("power(c0, c1)", [F_, F_], [(-8.0, 0.5)], "a negative number raised to a non-integer power yields a "
                                                   "complex result"),
        ("power(c0, c1)", [F_, F_], [(10.0, 400.0)], "value out of range: overflow"),
        ("power(c0, c1)", [F_, F_], [(10.0, -400.0)], "value out of range: underflow"),
        ("mod(c0, c1)", [I, I], [(1, 0)], "division by zero"),
        ("split_part(c0, ',', c1)", [T_, I], [("a,b", 0)], "field position must not be zero"),
        ("make_date(c0, c1, c2)", [I, I, I], [(2023, 2, 30)], "date field value out of range: 2023-02-30"),
        ("make_date(c0, c1, c2)", [I, I, I], [(2023, 13, 1)], "date field value out of range: 2023-13-01"),
        ("make_date(c0, c1, c2)", [I, I, I], [(0, 3, 15)], "date field value out of range: 0-03-15"),
        ("make_date(c0, c1, c2)", [I, I, I], [(2021, 2, 29)], "date field value out of range: 2021-02-29"),
        ("make_date(c0, c1, c2)", [I, I, I], [(5874898, 1, 1)], "date out of range: 5874898-01-01"),
    ]],
    # -- text ----------------------------------------------------------------------------------
    PgCase("replace(c0, c1, c2)", [T_, T_, T_],
           [("abcabc", "b", "XY"), ("aaa", "aa", "b"), ("abc", "", "x"), ("héllo", "é", "e"), ("abc", "z", "q"),
            (None, "a", "b"), ("abc", None, "b"), ("abc", "b", None), ("", "a", "b")]),
    PgCase("replace(c0, 'a', '')", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("split_part(c0, ',', c1)", [T_, I],
           [("a,b,c", 1), ("a,b,c", 3), ("a,b,c", 4), ("a,b,c", -1), ("a,b,c", -3), ("a,b,c", -4), ("", 1),
            ("", -1), ("a,,c", 2), (None, 1), ("a,b", None), ("héllo,wörld", 2)]),
    PgCase("split_part(c0, c1, c2)", [T_, T_, I],
           [("a,b,c", "", 1), ("a,b,c", "", 2), ("a,b,c", "", -1), ("a--b--c", "--", 2), ("abc", "abc", 1),
            ("abc", "abc", 2), ("a,b", None, 1)]),
    PgCase("strpos(c0, c1)", [T_, T_], [("héllo", "l"), ("abc", ""), ("", ""), ("abc", "d"), ("aXbX", "X"),
                                        ("ÉTÉ été", "été"), (None, "a"), ("a", None)]),
    PgCase("position('l' in c0)", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("strpos(c0, 'é')", [T_], [(t,) for t in _TEXTS]),
    *[PgCase(f"{fn}(c0, c1)", [T_, I], [(t, k) for t in ("héllo", "", "ab") for k in (-5, -2, 0, 1, 2, 9)]
             + [(None, 1), ("abc", None)]) for fn in ("left", "right")],
    PgCase("left(c0, 2)", [T_], [(t,) for t in _TEXTS]),
    PgCase("right(c0, -1)", [T_], [(t,) for t in _TEXTS]),
    *[PgCase(f"{fn}(c0, c1, c2)", [T_, I, T_],
             [("hi", 5, "xy"), ("hello", 3, "x"), ("hi", -1, "x"), ("hi", 5, ""), ("hé", 4, "é"), ("", 3, "ab"),
              ("hi", 0, "x"), ("hi", 2, "x"), (None, 3, "x"), ("hi", None, "x"), ("hi", 5, None)])
      for fn in ("lpad", "rpad")],
    *[PgCase(f"{fn}(c0, c1)", [T_, I], [("hi", 5), ("hello", 2), ("é", 3), (None, 3)]) for fn in ("lpad", "rpad")],
    PgCase("lpad(c0, 6, '*-')", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("rpad(c0, c1, '.')", [T_, I], [("ab", 4), ("abcdef", 4), ("ab", None), ("é", 2)]),
    PgCase("repeat(c0, c1)", [T_, I], [("ab", 3), ("ab", 0), ("ab", -1), ("é", 2), (None, 2), ("x", None)]),
    PgCase("reverse(c0)", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("initcap(c0)", [T_], [("hello-wORLD 3rd éTÉ aBc_def",), ("",), ("o'neil mcDONALD",), ("123abc",),
                                 (None,), ("ÉTÉ été",)]),
    PgCase("md5(c0)", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("starts_with(c0, c1)", [T_, T_], [("abc", "ab"), ("abc", ""), ("abc", "b"), ("", ""), ("é", "é"),
                                             (None, "a"), ("a", None)]),
    PgCase("starts_with(c0, 'a')", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("char_length(c0)", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("character_length(c0)", [T_], [("héllo",)]),
    PgCase("octet_length(c0)", [T_], [(t,) for t in _TEXTS] + [(None,)]),
    PgCase("concat_ws(c0, c1, c2, c3)", [T_, T_, I, BOOL],
           [(",", "a", 1, True), (",", None, 1, None), (",", None, None, None), (None, "a", 1, True),
            ("", "a", 2, False), (" - ", "x", None, True)]),
    PgCase("concat_ws('|', c0, c1)", [T_, NUM2], [("a", D("2.50")), (None, None), ("", None)]),
    PgCase("btrim(c0, 'xy')", [T_], [("xyhixy",), ("yx",), (None,)]),
    PgCase("ltrim(c0, 'x')", [T_], [("xxhix",)]),
    *[PgCase(f"regexp_replace(c0, {pattern}, {repl}{flags})", [T_],
             [(t,) for t in ("a.b.c", "hello world", "AbcABC", "a\nb", "ab\n", "été ÉTÉ", "x1y22z333", "", "aaa",
                             "[x]&y", "a$b")] + [(None,)])
      for pattern, repl, flags in [
          ("'\\.'", "'-'", ""), ("'\\.'", "'-'", ", 'g'"), ("'(b)'", "'[\\1\\&]'", ", 'g'"), ("'a.b'", "'X'", ""),
          ("'b$'", "'X'", ""), ("'[aeiou]'", "''", ", 'g'"), ("'A'", "'_'", ", 'gi'"), ("'\\d+'", "'#'", ", 'g'"),
          ("'\\d+'", "'<\\&>'", ""), ("'(\\w+) (\\w+)'", "'\\2 \\1'", ""), ("'\\s+'", "' '", ", 'g'"),
          ("'x*'", "'-'", ""), ("'x+'", "'-'", ", 'g'"), ("'^a'", "'^'", ""), ("'[[\\]&]'", "'\\\\'", ", 'g'"),
          ("'\\$'", "'$$'", ", 'g'"), ("'(a)(b)?'", "'\\2\\1\\3'", ", 'g'"), ("'\\W'", "'_'", ", 'g'"),
          ("'a{2}'", "'B'", ", 'g'"), ("'(?:a|b)+'", "'<>'", ""), ("'.'", "'\\\\1'", ", 'g'"),
      ]],
    # -- dates, timestamps, intervals -------------------------------------------------------------
    PgCase("make_date(c0, c1, c2)", [I, I, I], [(2024, 2, 29), (1, 1, 1), (9999, 12, 31), (2023, 1, 31),
                                                (1970, 1, 1), (None, 1, 1), (2023, None, 1)]),
    *[PgCase(f"date_part('{f}', c0)", [DATE], [(d,) for d in (dt.date(2020, 2, 29), dt.date(1969, 12, 31),
                                                                dt.date(2021, 1, 3))] + [(None,)])
      for f in ("year", "month", "day", "dow", "isodow", "doy", "week", "quarter", "epoch", "hour")],
    *[PgCase(f"date_part('{f}', c0)", [TS], [(t,) for t in _TS]) for f in ("epoch", "second", "minute", "hour")],
    PgCase("extract(quarter from c0)", [DATE], [(dt.date(2020, 11, 1),)]),
    *[PgCase(f"to_char(c0, '{fmt}')", [TS], [(t,) for t in _TS] + [(None,)]) for fmt in (
        "YYYY-MM-DD", "YYYY-MM-DD HH24:MI:SS", "DD/MM/YY HH12:MI AM", "Mon DD, YYYY", "FMMonth FMDD", "Day",
        "FMDay, DDth", "DY dy Dy", "YYYY\"Q\"Q", "HH24:MI:SS.MS", "US", "IW ID D DDD WW", "yyyy-mm-dd hh24:mi",
        "MONTH|month|Month", "p.m. A.M.", "\"text only\"", "Y YY YYY")
      if "th" not in fmt],
    PgCase("to_char(c0, 'YYYY-MM-DD')", [DATE], [(dt.date(2020, 2, 29),), (dt.date(1, 1, 1),), (None,)]),
    PgCase("to_char(c0, 'YYYY-MM-DD HH24:MI')", [TSTZ], [(t.replace(tzinfo=UTC),) for t in _TS]),
    PgCase("c0 + c1 * interval '1 day'", [DATE, I], [(dt.date(2020, 2, 28), 1), (dt.date(2020, 2, 28), -60),
                                                     (dt.date(2020, 1, 1), None), (None, 1)]),
    PgCase("c0 + (c1 || ' days')::interval", [DATE, I], [(dt.date(2020, 2, 28), 2), (dt.date(2021, 1, 1), -1)]),
    PgCase("c0 + (c1 || ' months')::interval", [DATE, I],
           [(dt.date(2020, 1, 31), 1), (dt.date(2021, 1, 31), 1), (dt.date(2020, 3, 31), -1),
            (dt.date(2020, 12, 15), 14), (dt.date(2020, 5, 31), -27), (dt.date(2020, 5, 31), None)]),
    PgCase("c0 - interval '1 month'", [TS], [(t,) for t in _TS] + [(None,)]),
    PgCase("c0 + interval '1 year' + interval '36 hours'", [TS], [(t,) for t in _TS]),
    PgCase("c0 + interval '3' day", [TSTZ], [(t.replace(tzinfo=UTC),) for t in _TS]),
    PgCase("c0 + c1 * interval '2 hours' - interval '1 week'", [TS, I], [(t, k) for t, k in zip(_TS, range(-3, 3))]),
    PgCase("c0 - c1 > interval '1 day'", [TS, TS], [(a, b) for a in _TS[:3] for b in _TS[:3]]),
    PgCase("c0::timestamp - c1 <= interval '1 month'", [DATE, DATE],
           [(dt.date(2020, 3, 1), dt.date(2020, 1, 31)), (dt.date(2020, 3, 2), dt.date(2020, 1, 31)), (None, None)]),
    PgCase("extract(epoch from c0 - c1)", [TS, TS], [(a, b) for a in _TS[:3] for b in _TS[:3]] + [(None, _TS[0])]),
    PgCase("extract(day from c0 - c1)", [TS, TS], [(a, b) for a in _TS[:4] for b in _TS[:4]]),
    PgCase("extract(hour from c0 - c1)", [TS, TS], [(a, b) for a in _TS[:4] for b in _TS[:4]]),
    *[PgCase(f"extract({f} from age(c0, c1))", [TS, TS], [(a, b) for a in _TS for b in _TS])
      for f in ("year", "month", "day", "hour", "minute", "second", "epoch")],
    PgCase("extract(day from age(c0, c1))", [DATE, DATE],
           [(dt.date(2020, 3, 1), dt.date(2020, 1, 31)), (dt.date(2020, 1, 31), dt.date(2020, 3, 1)),
            (dt.date(2021, 3, 1), dt.date(2021, 1, 31)), (dt.date(2020, 1, 1), dt.date(1999, 12, 31)),
            (dt.date(2020, 12, 31), dt.date(2020, 2, 29)), (dt.date(2020, 2, 29), dt.date(2020, 12, 31))]),
    PgCase("c0 + age(c1, c2)", [TS, TS, TS], [(a, b, c) for a, b, c in zip(_TS, _TS[1:], _TS[2:])]),
    PgCase("c0 - c1", [DATE, DATE], [(dt.date(2021, 3, 1), dt.date(2020, 3, 1))]),
    # -- boolean tests -------------------------------------------------------------------------------
    *[PgCase(f"c0 {test}", [BOOL], [(True,), (False,), (None,)])
      for test in ("IS TRUE", "IS NOT TRUE", "IS FALSE", "IS NOT FALSE", "IS UNKNOWN", "IS NOT UNKNOWN")],
    *[PgCase(f"c0 {test} c1", types, rows) for test in ("IS DISTINCT FROM", "IS NOT DISTINCT FROM")
      for types, rows in [([I, I], [(1, 1), (1, 2), (None, 1), (1, None), (None, None)]),
                          ([F_, F_], [(NAN, NAN), (-0.0, 0.0), (NAN, None)]),
                          ([T_, T_], [("a", "a"), ("a", None), (None, None)]),
                          ([I, N], [(1, D("1.0")), (1, D("1.5"))])]],
    PgCase("NOT (c0 > 1) IS TRUE", [I], [(0,), (2,), (None,)]),
]


def _id(case: PgCase) -> str:
    return repr(case)[:120]


@pytest.mark.parametrize("case", PG_CASES, ids=_id)
def test_arrow_matches_postgresql(case: PgCase, pg_conn: Any) -> None:
    check_arrow_against_postgresql(case, pg_conn)


def test_spark_matches_postgresql(spark: Any, pg_conn: Any) -> None:
    """Every value case through the Spark lowering, side by side, 30 cases per Spark job (one job
    of all would spend longer in Spark's optimizer than in running)."""
    value_cases = [c for c in PG_CASES if not c.error]
    bad = []
    for start in range(0, len(value_cases), 30):
        bad += _spark_against_postgresql(spark, pg_conn, value_cases[start:start + 30])
    assert not bad, "\n".join(bad)


def _spark_against_postgresql(spark: Any, pg_conn: Any, cases: list[PgCase]) -> list[str]:
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
            bad.append(f"{case.sql}: Spark raised {str(got).splitlines()[0][:300]}")
            continue
        diffs = [(row, g, e) for row, g, e in zip(case.rows, got, expected)
                 if not _pg_equal(g, e, case.approx, expr.type)]
        if diffs:
            bad.append(f"{case.sql} :: {[t.kind for t in case.types]}: (input, Spark, PostgreSQL) = {diffs[:3]}")
    return bad


def test_spark_raises_postgresql_errors(spark: Any) -> None:
    """Each error case alone through Spark: it fails, and the failure carries PostgreSQL's message."""
    bad = []
    for case in [c for c in PG_CASES if c.error]:
        table = table_of([(t, [row[i] for row in case.rows]) for i, t in enumerate(case.types)])
        (out,) = spark_values(spark, table, [bind(case.sql, case.types)])
        if not isinstance(out, Exception):
            bad.append(f"{case.sql} {case.rows}: Spark gave {out}, PostgreSQL says {case.error!r}")
        elif case.error not in str(out) and case.error != "division by zero":
            bad.append(f"{case.sql} {case.rows}: Spark raised {str(out).splitlines()[0][:300]}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------
# result types (PostgreSQL's function resolution)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("sql, types, expected", [
    ("sqrt(c0)", [I], "double precision"), ("power(c0, c0)", [I], "double precision"),
    ("power(c0, 2)", [F_], "double precision"), ("power(c0, 0.5)", [F_], "double precision"), ("mod(c0, c0)", [I], "integer"),
    ("mod(c0, c0)", [INT2], "smallint"), ("trunc(c0)", [I], "double precision"), ("trunc(c0)", [N], "numeric"),
    ("trunc(c0, 2)", [N], "numeric"), ("sign(c0)", [I], "double precision"), ("sign(c0)", [N], "numeric"),
    ("exp(c0)", [B], "double precision"), ("log(c0)", [INT2], "double precision"),
    ("strpos(c0, 'a')", [T_], "integer"), ("octet_length(c0)", [T_], "integer"),
    ("date_part('year', c0)", [DATE], "double precision"), ("extract(year from c0)", [DATE], "numeric"),
    ("make_date(2020, 1, c0)", [I], "date"), ("c0 + interval '1 day'", [DATE], "timestamp without time zone"),
    ("c0 + interval '1 day'", [TSTZ], "timestamp with time zone"), ("to_char(c0, 'YYYY')", [DATE], "text"),
    ("c0 IS DISTINCT FROM 1", [I], "boolean"), ("concat_ws(',', c0)", [I], "text"),
])
def test_result_types_are_postgresqls(sql: str, types: list, expected: str, pg_conn: Any) -> None:
    expr = bind(sql, types)
    row = "(" + ", ".join(f"NULL::{t.pg}" for t in types) + ")"
    names = ", ".join(f"c{i}" for i in range(len(types)))
    (pg_type,) = pg_conn.execute(f"SELECT pg_typeof({sql})::text FROM (VALUES {row}) AS t({names})").fetchone()
    assert pg_type == expected
    assert expr.type.pg.split("(")[0] == {"timestamp without time zone": "timestamp",
                                          "timestamp with time zone": "timestamptz"}.get(expected, expected)


# ---------------------------------------------------------------------------
# refusals: each names the construct, says why, and points at it
# ---------------------------------------------------------------------------

def _view_error(sql: str) -> Exception:
    from tests.sql.test_build import plan

    with pytest.raises((UnsupportedSqlError, SqlTypeError)) as info:
        plan(sql)
    return info.value


@pytest.mark.parametrize("call, keyword", [
    ("random()", "random"), ("clock_timestamp()", "clock_timestamp"),
    ("gen_random_uuid()", "gen_random_uuid"), ("timeofday()", "timeofday"), ("age(o_date)", "age"),
    ("current_time", "current_time"), ("localtime", "localtime"),
])
def test_nondeterministic_functions_are_refused_with_the_reason(call: str, keyword: str) -> None:
    sql = f"SELECT o_id,\n       o_id + 1 AS x FROM orders WHERE o_date < {call}"
    err = _view_error(sql)
    assert isinstance(err, UnsupportedSqlError)
    assert "is not supported" in str(err) and "maintained incrementally" in str(err)
    assert err.location is not None and err.location.line == 2
    assert sql.splitlines()[1][err.location.column - 1:].lower().startswith(keyword)


@pytest.mark.parametrize("sql, what", [
    ("SELECT DISTINCT o_date - o_date::timestamp AS gap FROM orders", "SELECT DISTINCT over an interval"),
    ("SELECT age(o_date) AS a FROM orders", "current_date"),
    ("SELECT SUM(INTERVAL '1 day' * o_id) AS i FROM orders", "sum() of an interval"),
    ("SELECT COUNT(*) AS n FROM orders GROUP BY o_date - o_date::timestamp", "GROUP BY an interval"),
    ("SELECT regexp_replace(note, '(a)\\1', 'x') FROM orders", "escape \\1"),
    ("SELECT regexp_replace(note, '[[:alpha:]]', 'x') FROM orders", "POSIX class"),
    ("SELECT regexp_replace(note, 'a(?=b)', 'x') FROM orders", "look-around"),
    ("SELECT regexp_replace(note, 'a', 'x', 'n') FROM orders", "flag"),
    ("SELECT regexp_replace(note, 'a|x*', 'x', 'g') FROM orders", "empty string"),
    ("SELECT regexp_replace(note, note, 'x') FROM orders", "non-constant pattern"),
    ("SELECT sqrt(amount) FROM orders", "sqrt(numeric)"),
    ("SELECT power(amount, 2) FROM orders", "power(numeric)"),
    ("SELECT power(o_id, 0.5) FROM orders", "power(numeric)"),  # PostgreSQL: power(numeric, numeric)
    ("SELECT log(2, f) FROM orders", "log(b, x)"),
    ("SELECT to_char(o_date, 'YYYY TZ') FROM orders", "'TZ'"),
    ("SELECT to_char(o_date, note) FROM orders", "non-constant format"),
    ("SELECT o_date + INTERVAL '1 day' * f FROM orders", "non-integer"),
    ("SELECT trunc(amount, o_id) FROM orders", "non-constant"),
])
def test_unsupported_uses_are_refused_with_a_position(sql: str, what: str) -> None:
    err = _view_error(sql)
    assert isinstance(err, UnsupportedSqlError), err
    assert what in str(err) and "is not supported" in str(err)
    assert err.location is not None and err.location.line == 1


@pytest.mark.parametrize("sql", [
    "SELECT o_id FROM orders WHERE left(o_id, 2) = 'x'",
    "SELECT o_id FROM orders WHERE o_date - o_date <= INTERVAL '1 day'",  # date - date is an integer
    "SELECT o_id FROM orders WHERE sqrt(note) > 1",
])
def test_function_type_errors_point_at_the_call(sql: str) -> None:
    err = _view_error(sql)
    assert isinstance(err, SqlTypeError) and err.location is not None


def test_intervals_inside_expressions_bind() -> None:
    from tests.sql.test_build import plan

    p = plan("SELECT o_id, o_date + o_id * INTERVAL '1 day' AS due, o_date + (o_id || ' months')::interval AS m, "
             "EXTRACT(EPOCH FROM o_date::timestamp - o_date::timestamp) AS e FROM orders "
             "WHERE o_date + INTERVAL '1 month' > o_date AND o_date - o_date::timestamp < INTERVAL '1 day'")
    types = dict(p.columns)
    assert types["due"] == SqlType("timestamp") and types["m"] == SqlType("timestamp")
    assert types["e"].kind == "numeric"


@pytest.mark.parametrize("sql", [
    "sqrt(2)", "power(2, c0)", "sign(-2.0::float8)", "make_date(2020, 1, 2)", "left('abc', 2)", "right(c1, -1)",
    "exp(1)", "date '2020-01-31' + interval '1 month'", "c2 + c0 * interval '1 day'",
    "extract(year from age(timestamp '2020-01-01', c2))", "replace(c1, 'b', 'x')", "split_part('a,b', ',', c0)",
    "lpad(c1, 3, 'xy')", "initcap('ab cd')", "concat_ws(',', c1, NULL)", "to_char(c2, 'YYYY-MM-DD HH24:MI:SS')",
    "regexp_replace(c1, 'b', 'X')", "strpos('abc', c1)", "octet_length('é')", "repeat(c1, 2)", "md5('a')",
    "trunc(2.567, 2)", "c0 + 0 < sqrt(4)", "c1 IS DISTINCT FROM 'x'",
])
def test_constant_and_empty_batches_have_one_value_per_row(sql: str) -> None:
    """All-constant calls evaluate once (a scalar, broadcast); an empty batch gives an empty result."""
    types = [I, T_, TS]
    expr = bind(sql, types)
    for rows in ([], [(1, "abc", dt.datetime(2021, 5, 6, 7, 8, 9))]):
        table = table_of([(t, [r[i] for r in rows]) for i, t in enumerate(types)])
        out = ev.evaluate(expr, table)
        assert len(out) == len(rows) and out.type == expr.type.arrow


_RANDOM_EXPRS = [
    "sqrt(c7)", "sqrt(abs(c8))", "cbrt(c7)", "exp(c8)", "ln(c7)", "log(abs(c8) + 1)", "power(c8, c2)",
    "power(c7, c8)", "power(c6, 2)", "sign(c7)", "sign(c4)", "trunc(c7)", "trunc(c4, 2)", "trunc(c5, -1)",
    "replace(c9, 'a', 'é')", "split_part(c9, ' ', c2)", "split_part(c9, 'a', -1)", "strpos(c9, 'a')",
    "left(c9, c2)", "right(c9, c2)", "lpad(c9, c2, 'xy')", "rpad(c9, 4, c9)", "repeat(c9, c2 % 4)",
    "reverse(c9)", "initcap(c9)", "md5(c9)", "starts_with(c9, 'a')", "octet_length(c9)",
    "concat_ws(c9, c0, c15, c16)", "regexp_replace(c9, '[a-c]', '<\\&>', 'g')", "regexp_replace(c9, '(.)(.)', '\\2\\1')",
    "make_date(2000 + c2, 1 + abs(c2) % 12, 28)", "make_date(c0, c2, c2)", "c16 + c2 * interval '1 month'",
    "c17 - c2 * interval '3 hours'", "c18 + (c2 || ' months')::interval", "extract(epoch from c17 - c16)",
    "extract(day from age(c17, c16))", "extract(month from age(c16, c17))", "c17 - c16 < interval '1 day'",
    "to_char(c17, 'YYYY-MM-DD HH12:MI:SS.US AM Dy Mon')", "to_char(c16, 'FMDay FMMonth DDD IW Q')",
    "date_part('dow', c16)", "date_part('epoch', c18)", "c15 IS NOT TRUE", "c0 IS DISTINCT FROM c2",
    "CASE WHEN c7 >= 0 THEN sqrt(c7) END", "coalesce(ln(nullif(c2, 0)), -1)",
]


@pytest.mark.parametrize("seed", [1])
def test_arrow_and_spark_agree_on_random_rows(spark: Any, seed: int) -> None:
    """The functions over random columns of every type (NULLs, NaN, infinities, extreme dates): the
    two executors give the same values, or both raise."""
    from tests.runtime.test_expressions_arrow import COLUMN_TYPES, compare_with_spark, random_table

    exprs = [bind(sql, COLUMN_TYPES) for sql in _RANDOM_EXPRS]
    problems = compare_with_spark(spark, random_table(seed), exprs)
    assert not problems, "\n".join(problems)
