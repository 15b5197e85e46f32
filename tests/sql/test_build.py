"""The SQL front end without Spark: plans, pushdown, pruning, types, and every refusal."""

from __future__ import annotations

import pytest

from freshview.errors import (
    SqlError, SqlTypeError, UnknownColumnError, UnknownTableError, UnsupportedSqlError,
)
from freshview.plan import nodes as pn
from freshview.plan.explain import render
from freshview.schema import SqlType, schema_from_ddl
from freshview.sql import build_plan

SOURCES = {
    "orders": schema_from_ddl("o_id INT, o_customer INT, o_date DATE, amount NUMERIC(10,2), note TEXT, big BIGINT, f FLOAT8"),
    "customers": schema_from_ddl("c_id INT, c_region TEXT, c_name TEXT"),
}


class Catalog:
    def __init__(self, views=None):
        self.views = views or {}

    def relation_columns(self, name):
        if name in SOURCES:
            return tuple((c.name, c.type) for c in SOURCES[name].columns), False
        if name in self.views:
            return self.views[name].columns, True
        return None


def plan(sql, views=None):
    return build_plan(sql, Catalog(views))


def scans(node):
    return [n for n in pn.walk(node) if isinstance(n, pn.Scan)]


def test_result_types_follow_postgresql():
    p = plan("SELECT o_customer, SUM(o_id) AS s_int, SUM(big) AS s_big, SUM(amount) AS s_num, AVG(o_id) AS a_int, "
             "COUNT(*) AS n, COUNT(note) AS nn, MIN(note) AS mn, SUM(f) AS sf, o_customer / 2 AS half "
             "FROM orders GROUP BY o_customer")
    types = dict(p.columns)
    assert types["s_int"] == SqlType("int8")
    assert types["s_big"].kind == "numeric"
    assert types["s_num"] == SqlType.numeric(None, 2)
    assert types["a_int"].kind == "numeric" and types["a_int"].decimal_precision_scale[1] >= 16
    assert types["n"] == SqlType("int8") and types["nn"] == SqlType("int8")
    assert types["mn"] == SqlType("text") and types["sf"] == SqlType("float8")
    assert types["half"] == SqlType("int4")  # grouped expression over an int stays int


def test_predicates_are_pushed_to_their_source_and_columns_pruned():
    p = plan("SELECT c_region, COUNT(*) AS n FROM orders JOIN customers ON o_customer = c_id "
             "WHERE amount > 100 AND c_region LIKE 'E%' AND o_id < c_id GROUP BY c_region")
    text = render(p)
    join = next(n for n in pn.walk(p) if isinstance(n, pn.Join))
    assert len(join.left_keys) == 1
    # each side is filtered below the join, and only needed columns enter the join state
    left_filters = [n for n in pn.walk(join.left) if isinstance(n, pn.Filter)]
    right_filters = [n for n in pn.walk(join.right) if isinstance(n, pn.Filter)]
    assert left_filters and right_filters, text
    assert [n for n, _ in join.left.columns] == ["o_id", "o_customer"], text
    assert [n for n, _ in join.right.columns] == ["c_id", "c_region"], text
    # the non-equi condition stays above the join
    above = [n for n in pn.walk(p) if isinstance(n, pn.Filter) and n not in left_filters + right_filters]
    assert above, text


def test_comma_joins_and_three_way_keys():
    p = plan("SELECT o.o_id FROM orders o, customers c, orders o2 WHERE o.o_customer = c.c_id AND o2.o_id = o.o_id")
    joins = [n for n in pn.walk(p) if isinstance(n, pn.Join)]
    assert len(joins) == 2 and all(j.left_keys for j in joins)


def test_views_over_views_scan_the_view():
    inner = plan("SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer")
    outer = plan("SELECT COUNT(*) AS n FROM totals WHERE total > 5", {"totals": inner})
    assert [s.relation for s in scans(outer)] == ["totals"] and scans(outer)[0].is_view


def test_group_by_ordinal_alias_and_expression():
    p1 = plan("SELECT o_customer % 3 AS b, COUNT(*) AS n FROM orders GROUP BY 1")
    p2 = plan("SELECT o_customer % 3 AS b, COUNT(*) AS n FROM orders GROUP BY b")
    p3 = plan("SELECT o_customer % 3 AS b, COUNT(*) AS n FROM orders GROUP BY o_customer % 3")
    assert render(p1) == render(p2) == render(p3)


@pytest.mark.parametrize("sql, error, fragment, column", [
    ("SELECT nope FROM orders", UnknownColumnError, "unknown column 'nope'", 8),
    ("SELECT o.zz FROM orders o", UnknownColumnError, "unknown column 'o.zz'", 8),
    ("SELECT x.o_id FROM orders o", UnknownColumnError, "unknown table or alias 'x'", 8),
    ("SELECT * FROM missing", UnknownTableError, "unknown table 'missing'", 15),
    ("SELECT o_id FROM orders, orders", SqlError, "specified more than once", None),
    ("SELECT o_id FROM orders o JOIN orders p ON o.o_id = p.o_id WHERE o_customer = 1", UnknownColumnError,
     "ambiguous", None),
    ("SELECT o_id, nth_value(o_id, 2) OVER (ORDER BY o_id) FROM orders", UnsupportedSqlError, "window function", None),
    ("SELECT o_id FROM orders ORDER BY o_id LIMIT o_id", UnsupportedSqlError, "LIMIT", None),
    ("SELECT o_id FROM orders WHERE o_id = (SELECT c_id FROM customers WHERE c_id = o_id LIMIT 1)",
     UnsupportedSqlError, "LIMIT in a correlated scalar subquery that is not an aggregate", None),
    ("SELECT o_id FROM orders LEFT JOIN customers USING (c_id)", SqlError,
     "column 'c_id' specified in USING clause does not exist in left table", 52),
    ("SELECT o_id FROM orders LEFT JOIN customers ON o_customer IN (SELECT c_id FROM customers)",
     UnsupportedSqlError, "IN (subquery) in JOIN conditions", None),
    ("SELECT o_customer FROM orders GROUP BY o_customer HAVING EXISTS (SELECT 1 FROM customers)",
     UnsupportedSqlError, "EXISTS (subquery) in the SELECT list or HAVING of an aggregating query", 58),
    ("SELECT COUNT(DISTINCT o_customer, o_id) FROM orders", UnsupportedSqlError, "COUNT(DISTINCT", 8),
    ("SELECT o_customer, o_id FROM orders GROUP BY o_customer", SqlError, "must appear in the GROUP BY", 20),
    ("SELECT SUM(note) FROM orders", SqlTypeError, "sum(text)", None),
    ("SELECT o_id FROM orders WHERE note + 1 > 2", SqlTypeError, "operator +", None),
    ("SELECT o_id FROM orders WHERE o_id", SqlError, "must be boolean", None),
    ("SELECT o_id FROM orders WHERE SUM(o_id) > 1", UnsupportedSqlError, "not allowed in WHERE", None),
    ("SELECT o_id, o_id FROM orders", SqlError, "two columns named 'o_id'", None),
    ("SELECT unknown_fn(o_id) FROM orders", UnsupportedSqlError, "unknown_fn", 8),
    ("SELECT o_id FROM orders WHERE GROUPING(o_id) = 0", UnsupportedSqlError, "GROUPING() in WHERE", 31),
    ("SELECT o_id, GROUPING(note) FROM orders GROUP BY ROLLUP(o_id)", SqlError,
     "arguments to GROUPING must be grouping expressions", None),
    ("SELECT o_id FROM orders; SELECT 1", SqlError, "one query", None),
    ("SELEC o_id FROM orders", SqlError, "", None),
    ("SELECT *", SqlError, "SELECT * with no tables specified is not valid", None),
    ("SELECT * FROM generate_series(DATE '2024-01-01', DATE '2024-02-01', INTERVAL '1 day') g",
     UnsupportedSqlError, "over integer or numeric constants only", 15),
    ("SELECT * FROM generate_series(1, 10, 0) g", SqlError, "step size cannot equal zero", 15),
    ("SELECT * FROM jsonb_to_recordset('[]') AS g(a int)", UnsupportedSqlError, "in FROM is not supported", 15),
    ("VALUES (1, 2), (3)", SqlError, "VALUES lists must all be the same length", None),
    ("SELECT o_id FROM orders WHERE note LIKE 'a' ESCAPE '!'", UnsupportedSqlError, "ESCAPE", None),
    ("SELECT o_id FROM orders JOIN customers USING (o_id)", SqlError, "does not exist in right table", None),
    # what freshview cannot maintain, said as it is (issue 20: these used to crash or mislead)
    ("SELECT FROM orders", SqlError, "a SELECT list with no columns is not supported", 1),
    ("SELECT * FROM (SELECT FROM orders) s", SqlError, "a SELECT list with no columns", 16),
    ("SELECT g FROM generate_series(1, o_id) g, orders", SqlError, "unknown column 'o_id'", 34),
    ("SELECT x FROM orders RIGHT JOIN LATERAL unnest(ARRAY[o_id]) x ON TRUE", UnsupportedSqlError,
     "RIGHT JOIN to a set-returning function", 22),
    ("SELECT o_id FROM orders TABLESAMPLE SYSTEM (10)", UnsupportedSqlError, "TABLESAMPLE is not supported", 25),
    ("SELECT o_id FROM (orders JOIN customers ON o_customer = c_id) JOIN orders p ON p.o_id = c_id",
     UnknownColumnError, "column reference 'o_id' is ambiguous (it is in orders, p)", 8),
    ("SELECT o_id FROM orders WHERE EXISTS (WITH w AS (SELECT c_id FROM customers) SELECT 1 FROM w "
     "WHERE w.nope = o_customer)", UnknownColumnError, "unknown column 'w.nope'", None),
])
def test_refusals_name_the_problem_and_its_position(sql, error, fragment, column):
    with pytest.raises(error) as info:
        plan(sql)
    assert fragment in str(info.value)
    if column is not None:
        assert info.value.location is not None and info.value.location.column == column, str(info.value)
    assert "Traceback" not in str(info.value) and "java" not in str(info.value).lower()


def test_error_message_shows_a_caret_under_the_construct():
    with pytest.raises(UnsupportedSqlError) as info:
        plan("SELECT o_id\nFROM orders\nWHERE o_id = 1 OR EXISTS (SELECT 1 FROM customers) OR o_date > current_time")
    text = str(info.value)
    assert "line 3, column 64" in text and "^" in text


def test_constant_interval_arithmetic_is_folded_like_postgresql():
    p = plan("SELECT o_id FROM orders WHERE o_date >= DATE '1994-01-31' + INTERVAL '1' MONTH "
             "AND o_date < DATE '1994-01-01' + INTERVAL '1' YEAR")
    text = render(p)
    assert "datetime.date(1994, 2, 28)" in text and "datetime.date(1995, 1, 1)" in text, text
    # On columns, date + interval is a timestamp, as in PostgreSQL (see tests/runtime/test_functions.py).
    assert dict(plan("SELECT o_date + INTERVAL '1' DAY AS d FROM orders").columns)["d"] == SqlType("timestamp")
    with pytest.raises(UnsupportedSqlError, match="interval multiplied by a non-integer"):
        plan("SELECT o_date + INTERVAL '1' DAY * f AS d FROM orders")


def test_join_condition_repeated_in_every_or_branch_becomes_a_join_key():
    p = plan("SELECT o_id FROM orders, customers WHERE (o_customer = c_id AND c_region = 'a') "
             "OR (o_customer = c_id AND amount > 5)")
    join = next(n for n in pn.walk(p) if isinstance(n, pn.Join))
    assert len(join.left_keys) == 1, render(p)


def test_a_subquery_in_from_without_alias():
    # PostgreSQL 16+ accepts it (its columns are named without a qualifier); MySQL wants an alias.
    assert [n for n, _ in plan("SELECT o_id FROM (SELECT o_id FROM orders), (SELECT c_id FROM customers)").columns] \
        == ["o_id"]
    with pytest.raises(SqlError, match="must have an alias"):
        build_plan("SELECT o_id FROM (SELECT o_id FROM orders)", Catalog(), "mysql")
