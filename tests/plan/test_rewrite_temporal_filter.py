"""plan.rewrite.temporal_filter: fixtures, the bound B(y) checked against g(now) > y, refusals."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from freshview.errors import UnsupportedSqlError
from freshview.errors import SqlLocation
from freshview.plan import nodes as pn
from freshview.plan.expr import Call, Cast, ColumnRef, Expr, Literal
from freshview.plan.rewrite.temporal_filter import temporal_filter, threshold
from freshview.plan.temporal import TIME, Now, TemporalFilter
from freshview.runtime.expressions.arrow import evaluate
from freshview.schema import SqlType

BOOL, INT8, DATE, TSTZ = SqlType("bool"), SqlType("int8"), SqlType("date"), SqlType("timestamptz")
NOW = Now(TSTZ, SqlLocation(1, 30))
T = pn.Scan("t", (("id", SqlType("int4")), ("ts", TIME)))
TS = ColumnRef(TIME, 1, "ts")


def shift(e: Expr, days: int = 0, micros: int = 0, months: int = 0) -> Expr:
    return Call(e.type, "add_interval", (e, Literal(INT8, months), Literal(INT8, days), Literal(INT8, micros)))


def test_a_filter_on_now_becomes_a_temporal_filter_and_the_rest_stays_a_filter():
    plain = Call(BOOL, ">", (ColumnRef(SqlType("int4"), 0), Literal(SqlType("int4"), 3)))
    timed = Call(BOOL, ">", (Cast(TSTZ, TS), shift(NOW, days=-30)))
    out = temporal_filter(pn.Filter(T, Call(BOOL, "and", (plain, timed))))
    now = ColumnRef(TIME, 2, "now")
    bound = shift(TS, days=30)  # ts > now - 30 days ⇔ now < ts + 30 days
    assert out == TemporalFilter(pn.Filter(T, plain), Call(BOOL, "not", (Call(BOOL, ">=", (now, bound)),)), (bound,))


def test_a_plan_without_now_is_unchanged():
    plan = pn.Filter(T, Call(BOOL, "is_null", (TS,)))
    assert temporal_filter(plan) is plan


# ---------------------------------------------------------------------------------------------- B(y)
def _with_column(e: Expr) -> Expr:
    """``e`` with ``Now`` read from column 1 (a timestamptz) instead."""
    if isinstance(e, Now):
        return ColumnRef(e.type, 1)
    return e.map_children(_with_column)


def _g_forms() -> list[Expr]:
    today = Cast(DATE, NOW)
    return [NOW, shift(NOW, days=-30), shift(NOW, micros=-5), Call(TSTZ, "date_trunc", (NOW,), "day"),
            Call(TSTZ, "date_trunc", (shift(NOW, days=1),), "hour"), today, Call(DATE, "-", (today, Literal(SqlType("int4"), 7))),
            Call(TSTZ, "date_trunc", (NOW,), "month"), Call(TSTZ, "date_trunc", (NOW,), "week"),
            shift(Cast(TIME, Call(TSTZ, "date_trunc", (NOW,), "year")), days=2), Cast(TIME, today)]


@pytest.mark.parametrize("g", _g_forms(), ids=str)
def test_the_bound_is_the_first_instant_g_passes_y(g):
    """(g(now) > y) ⇔ now ≥ B(y), at random instants and at B(y) ± 1µs (µs-exact)."""
    rng = random.Random(str(g))
    base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    ys = [base + dt.timedelta(microseconds=rng.randrange(-10**14, 10**14)) for _ in range(60)]
    ys += [dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc), dt.datetime(2026, 2, 28, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)]
    y_naive = pa.array([y.replace(tzinfo=None) for y in ys], pa.timestamp("us"))
    bounds = evaluate(threshold(g, ColumnRef(TIME, 0)), pa.table({"c0": y_naive}))
    nows, rows_y = [], []
    for y, b in zip(ys, bounds.to_pylist()):
        b = b.replace(tzinfo=dt.timezone.utc)
        for now in (b - dt.timedelta(microseconds=1), b, b + dt.timedelta(microseconds=1),
                    y + dt.timedelta(microseconds=rng.randrange(-10**12, 10**12))):
            nows.append(now)
            rows_y.append(y.replace(tzinfo=None))
    table = pa.table({"c0": pa.array(rows_y, pa.timestamp("us")), "c1": pa.array(nows, pa.timestamp("us", tz="UTC"))})
    g_now = _with_column(g)
    passed = evaluate(Call(BOOL, ">", (Cast(TIME, g_now) if g_now.type != TIME else g_now, ColumnRef(TIME, 0))), table)
    bound = evaluate(threshold(g, ColumnRef(TIME, 0)), table)
    at_or_after = [n.replace(tzinfo=None) >= b for n, b in zip(nows, bound.to_pylist())]
    assert passed.to_pylist() == at_or_after


# ---------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("plan, words", [
    (pn.Project(T, (NOW,), ("n",)), "in the SELECT list"),
    (pn.Aggregate(T, (Cast(DATE, NOW),), ()), "in a GROUP BY key"),
    (pn.Filter(T, Call(BOOL, ">", (TS, shift(NOW, months=-1)))), "a month is not a fixed span"),
    (pn.Filter(T, Call(BOOL, "=", (Call(SqlType.numeric(None, 0), "extract", (NOW,), "hour"), Literal(INT8, 3)))),
     "outside a comparison"),
    (pn.Filter(T, Call(BOOL, "=", (Literal(INT8, 3), NOW))), "not between a row's date"),
    (pn.Filter(T, Call(BOOL, ">", (TS, Call(TSTZ, "coalesce", (NOW, Cast(TSTZ, TS)))))), "does not move monotonically"),
    (pn.Filter(T, Call(BOOL, "is_null", (NOW,))), "outside a comparison"),
])
def test_now_that_cannot_be_scheduled_is_refused_where_it_was_written(plan, words):
    with pytest.raises(UnsupportedSqlError) as err:
        temporal_filter(plan)
    assert words in err.value.message and err.value.location == SqlLocation(1, 30)
