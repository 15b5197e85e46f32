"""plan.rewrite.fold_constants: fixtures (input plan -> expected plan) and same rows on random tables."""

from __future__ import annotations

import datetime as dt

import pytest

from freshview.plan import nodes as pn
from freshview.plan.expr import Call, Cast, ColumnRef, Literal
from freshview.plan.rewrite.fold_constants import fold, fold_constants
from freshview.schema import SqlType
from tests.plan.fixtures import INT, check_same_result

BOOL, INT8, TS, DATE = SqlType("bool"), SqlType("int8"), SqlType("timestamp"), SqlType("date")
D = pn.Scan("d", (("day", DATE), ("n", INT)))


def add(start, months, days=0, micros=0):
    return Call(TS, "add_interval", (Literal(TS, start), Literal(INT8, months), Literal(INT8, days),
                                     Literal(INT8, micros)))


@pytest.mark.parametrize("start, months, days, expect", [
    (dt.datetime(1994, 1, 1), 12, 0, dt.datetime(1995, 1, 1)),
    (dt.datetime(1995, 1, 31), 1, 0, dt.datetime(1995, 2, 28)),  # clamped to the month's end
    (dt.datetime(1996, 3, 31), -1, 0, dt.datetime(1996, 2, 29)),
    (dt.datetime(1995, 1, 31), 1, 1, dt.datetime(1995, 3, 1)),  # months first, then days
    (dt.datetime(1998, 12, 1), 0, -90, dt.datetime(1998, 9, 2)),
])
def test_constant_date_plus_interval(start, months, days, expect):
    assert fold(add(start, months, days)) == Literal(TS, expect)


def test_null_interval_part_is_null():
    e = Call(TS, "add_interval", (Literal(TS, dt.datetime(1994, 1, 1)), Literal(INT8, None),
                                  Literal(INT8, 0), Literal(INT8, 0)))
    assert fold(e) == Literal(TS, None)


def test_a_date_compared_with_a_midnight_constant_compares_dates():
    widened = Cast(TS, ColumnRef(DATE, 0))
    plan = pn.Filter(D, Call(BOOL, ">=", (widened, add(dt.datetime(1994, 1, 1), 12))))
    assert fold_constants(plan) == pn.Filter(D, Call(BOOL, ">=", (ColumnRef(DATE, 0), Literal(DATE, dt.date(1995, 1, 1)))))


def test_not_at_midnight_stays_a_timestamp_comparison():
    e = Call(BOOL, "<", (Cast(TS, ColumnRef(DATE, 0)), Literal(TS, dt.datetime(1995, 1, 1, 12))))
    assert fold(e) == e


def test_null_tests_of_constants():
    assert fold(Call(BOOL, "is_null", (Literal(INT, None),))) == Literal(BOOL, True)
    assert fold(Call(BOOL, "=", (Literal(INT, None), ColumnRef(INT, 1)))) == Literal(BOOL, None)


def test_a_column_is_never_folded():
    e = Call(TS, "add_interval", (Cast(TS, ColumnRef(DATE, 0)), Literal(INT8, 1), Literal(INT8, 0), Literal(INT8, 0)))
    assert fold(e) == e


def test_same_rows_on_random_tables():
    from collections import Counter

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tests.support.plan_eval import evaluate

    plan = pn.Filter(D, Call(BOOL, "and", (
        Call(BOOL, ">=", (Cast(TS, ColumnRef(DATE, 0)), add(dt.datetime(1995, 1, 31), 1))),
        Call(BOOL, "<", (Cast(TS, ColumnRef(DATE, 0)), add(dt.datetime(1995, 1, 31), 1, 3))))))
    folded = fold_constants(plan)
    assert folded != plan
    days = st.one_of(st.none(), st.dates(dt.date(1995, 2, 25), dt.date(1995, 3, 5)))

    @settings(max_examples=30, derandomize=True, deadline=None)
    @given(rows=st.lists(st.tuples(days, st.just(1)), max_size=8))
    def same(rows):
        tables = {"d": Counter(rows)}
        assert evaluate(folded, tables) == evaluate(plan, tables)

    same()
