"""Binding of aggregate calls: DISTINCT, FILTER, ORDER BY inside, result types, and located refusals."""

from __future__ import annotations

import pytest

from freshview.errors import SqlError, SqlTypeError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.plan.expr import Case, Literal
from freshview.schema import SqlType
from tests.sql.test_build import plan


def aggs(sql):
    [agg] = [n for n in pn.walk(plan(sql)) if isinstance(n, pn.Aggregate)]
    return agg.aggs


def test_filter_becomes_a_case_inside_the_argument():
    count_star, count_x, sum_d = aggs(
        "SELECT COUNT(*) FILTER (WHERE amount > 1) AS a, COUNT(note) FILTER (WHERE big > 2) AS b, "
        "SUM(DISTINCT big) FILTER (WHERE f > 0) AS c FROM orders")
    assert count_star.func == "count" and isinstance(count_star.arg, Case)
    assert count_star.arg.whens[0][1] == Literal(SqlType("int4"), 1)
    assert count_x.func == "count" and isinstance(count_x.arg, Case) and not count_x.distinct
    assert sum_d.func == "sum" and sum_d.distinct and isinstance(sum_d.arg, Case)


def test_names_types_and_dropped_distinct():
    got = aggs("SELECT every(big > 1) AS e, bool_or(big > 1) AS o, stddev(o_customer) AS s, variance(amount) AS v, "
               "var_pop(f) AS vp, stddev_pop(big) AS sp, MIN(DISTINCT note) AS m, COUNT(DISTINCT note) AS n, "
               "string_agg(note, ', ' ORDER BY o_id DESC) AS t, SUM(amount ORDER BY o_id) AS sa FROM orders")
    assert [a.func for a in got] == ["bool_and", "bool_or", "stddev_samp", "var_samp", "var_pop", "stddev_pop",
                                     "min", "count", "string_agg", "sum"]
    assert [a.type.kind for a in got] == ["bool", "bool", "numeric", "numeric", "float8", "numeric", "text",
                                          "int8", "text", "numeric"]
    assert not got[6].distinct and got[7].distinct
    t = got[8]
    assert t.separator == ", " and len(t.order) == 1 and t.order[0].desc and t.order[0].nulls_first
    assert got[9].order == ()  # the order of a sum does not matter
    assert got[3].type.decimal_precision_scale[1] >= 16


def test_array_agg_types():
    got = aggs("SELECT array_agg(o_id ORDER BY f DESC) AS a, array_agg(DISTINCT note) AS b, "
               "array_agg(amount) AS c FROM orders")
    assert [a.type.pg for a in got] == ["integer[]", "text[]", str(got[2].arg.type) + "[]"]
    assert got[0].order[0].desc and got[0].order[0].nulls_first and got[1].distinct
    assert all(a.recomputed for a in got)


def test_aggregates_in_having_and_expressions():
    p = plan("SELECT o_customer, SUM(big) / COUNT(DISTINCT note) AS r FROM orders GROUP BY 1 "
             "HAVING bool_and(f > 0) AND COUNT(DISTINCT note) > 1")
    [agg] = [n for n in pn.walk(p) if isinstance(n, pn.Aggregate)]
    assert [a.func for a in agg.aggs] == ["sum", "count", "bool_and"]  # COUNT(DISTINCT) bound once


@pytest.mark.parametrize("sql, error, fragment, column", [
    ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY f) FROM orders", UnsupportedSqlError,
     "ordered-set aggregate", None),
    ("SELECT array_agg(o_id) FILTER (WHERE f > 0) FROM orders", UnsupportedSqlError, "array_agg(...) FILTER", 8),
    ("SELECT array_agg(o_id * INTERVAL '1 day') FROM orders", UnsupportedSqlError, "array_agg() of an interval", 18),
    ("SELECT array_agg(a) FROM (SELECT array_agg(o_id) AS a FROM orders) s", UnsupportedSqlError,
     "array_agg() of an array", 18),
    ("SELECT a FROM (SELECT array_agg(o_id) AS a FROM orders) s WHERE a = a", UnsupportedSqlError,
     "comparing arrays", None),
    ("SELECT array_agg(o_id) FROM orders INTERSECT SELECT array_agg(o_id) FROM orders", UnsupportedSqlError,
     "INTERSECT over an array column", None),
    ("SELECT COUNT(*) FROM orders GROUP BY o_id * INTERVAL '1 day'", UnsupportedSqlError, "GROUP BY an interval",
     None),
    ("SELECT DISTINCT o_id * INTERVAL '1 day' AS d FROM orders", UnsupportedSqlError,
     "SELECT DISTINCT over an interval", None),
    ("SELECT o_id * INTERVAL '1 day' FROM orders UNION SELECT INTERVAL '1 day' FROM orders", UnsupportedSqlError,
     "UNION over an interval", None),
    ("SELECT max(o_id * INTERVAL '1 day') FROM orders", UnsupportedSqlError,
     "max() of an interval", 12),
    ("SELECT string_agg(note, note) FROM orders", UnsupportedSqlError, "non-constant delimiter", 25),
    ("SELECT string_agg(DISTINCT note, ',' ORDER BY o_id) FROM orders", SqlError,
     "ORDER BY expressions must appear in argument list", 47),
    ("SELECT COUNT(DISTINCT o_id, note) FROM orders", UnsupportedSqlError, "several arguments", None),
    ("SELECT o_id FROM orders WHERE every(f > 0)", UnsupportedSqlError, "EVERY is not allowed in WHERE", None),
    ("SELECT o_id FROM orders GROUP BY o_id HAVING SUM(big) FILTER (WHERE SUM(big) > 1) > 0",
     UnsupportedSqlError, "not allowed in FILTER", None),
    ("SELECT string_agg(o_id, ',') FROM orders", SqlTypeError, "string_agg(integer", None),
    ("SELECT bool_and(big) FROM orders", SqlTypeError, "bool_and(bigint)", None),
    ("SELECT stddev(note) FROM orders", SqlTypeError, "stddev_samp(text)", None),
    ("SELECT COUNT(*) FILTER (WHERE big) FROM orders", SqlTypeError, "boolean", None),
])
def test_refusals_are_located(sql, error, fragment, column):
    with pytest.raises(error) as info:
        plan(sql)
    assert fragment in str(info.value), str(info.value)
    assert info.value.location is not None
    if column is not None:
        assert info.value.location.column == column, str(info.value)
