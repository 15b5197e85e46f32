"""Plans of the constructs of issue 23 without Spark: what each becomes, and what is refused."""

from __future__ import annotations

import decimal

import pytest
import sqlglot

from freshview.errors import SqlError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.schema import SqlType, schema_from_ddl
from freshview.sql import build_plan
from freshview.sql.grouping_sets import expand

SOURCES = {"a": schema_from_ddl("a_id INT, a_k INT, a_v INT, a_s TEXT"),
           "b": schema_from_ddl("b_id INT, b_k INT, b_v INT")}


class Catalog:
    def relation_columns(self, name):
        s = SOURCES.get(name)
        return (tuple((c.name, c.type) for c in s.columns), False) if s is not None else None


def plan(sql, dialect="postgres"):
    return build_plan(sql, Catalog(), dialect)


def nodes(p, kind):
    return [n for n in pn.walk(p) if isinstance(n, kind)]


@pytest.mark.parametrize("sql", [
    "SELECT a_id, (SELECT COUNT(*) FROM a AS x WHERE x.a_v > a.a_v) AS n FROM a",
    "SELECT a_id, s.n FROM a, LATERAL (SELECT COUNT(*) AS n FROM b WHERE b_k = a.a_k) s",
])
def test_a_magic_set_leaves_no_placeholder_and_reads_the_outer_values_once_distinct(sql):
    p = plan(sql)
    assert not nodes(p, pn.OuterRows)
    assert nodes(p, pn.Distinct)  # D = Distinct(π_o(outer))


def test_constants_are_typed_as_postgresql_types_them():
    p = plan("SELECT * FROM (VALUES (1, 'x'), (2.5, NULL)) AS v(n, s)")
    assert [t for _, t in p.columns] == [SqlType.numeric(None, 1), SqlType("text")]
    (const,) = nodes(p, pn.Constant)
    assert const.rows == ((decimal.Decimal(1), "x"), (decimal.Decimal("2.5"), None))
    series = plan("SELECT * FROM generate_series(10, -2, -3) AS g")
    assert series.columns == (("g", SqlType("int4")),)
    assert nodes(series, pn.Constant)[0].rows == ((10,), (7,), (4,), (1,), (-2,))
    assert plan("SELECT 1 AS x").columns == (("x", SqlType("int4")),)


@pytest.mark.parametrize("group, sets", [
    ("ROLLUP (a, b)", [(0, 1), (0,), ()]),
    ("CUBE (a, b)", [(0, 1), (0,), (1,), ()]),
    ("a, ROLLUP (b, (c, d))", [(0, 1, 2, 3), (0, 1), (0,)]),
    ("GROUPING SETS ((a, b), a, ())", [(0, 1), (0,), ()]),
    ("GROUPING SETS (a, ROLLUP (b))", [(0,), (1,), ()]),
])
def test_grouping_sets_combine_as_postgresql_combines_them(group, sets):
    tree = sqlglot.parse_one(f"SELECT 1 FROM t GROUP BY {group}", read="postgres")
    assert expand(tree.args["group"], "")[1] == sets
    assert expand(sqlglot.parse_one("SELECT 1 FROM t GROUP BY a, b", read="postgres").args["group"], "") is None


def test_mysql_with_rollup_is_a_rollup_of_the_group_by_list():
    tree = sqlglot.parse_one("SELECT a FROM t GROUP BY a, b WITH ROLLUP", read="mysql")
    assert expand(tree.args["group"], "")[1] == [(0, 1), (0,), ()]


def test_distinct_on_is_a_row_number_on_the_window_operator():
    p = plan("SELECT DISTINCT ON (a_k) a_k, a_v FROM a ORDER BY a_k, a_v DESC")
    (w,) = nodes(p, pn.Window)
    assert [f.func for f in w.functions] == ["row_number"] and len(w.partition) == 1


@pytest.mark.parametrize("sql, error, fragment", [
    ("SELECT DISTINCT ON (a_k) a_k, a_v FROM a ORDER BY a_v", SqlError, "must match initial ORDER BY"),
    ("SELECT * FROM a, LATERAL (SELECT * FROM b WHERE b_k = a_k LIMIT 1) s", UnsupportedSqlError,
     "LIMIT in a LATERAL subquery"),
    ("SELECT * FROM a FULL JOIN LATERAL (SELECT 1 AS o) s ON true", UnsupportedSqlError, "FULL JOIN LATERAL"),
    ("SELECT * FROM (a JOIN b USING (a_id))", UnsupportedSqlError, "USING / NATURAL JOIN inside a parenthesised"),
    ("SELECT * FROM generate_series(1, 2000000) g", UnsupportedSqlError, "at most 1000000"),
    ("SELECT a_id, random() AS r FROM a", UnsupportedSqlError, "random() is not supported: its value changes"),
    ("SELECT * FROM (SELECT a_k, a_k FROM a) AS q", SqlError, "two columns named 'a_k'"),
])
def test_refusals(sql, error, fragment):
    with pytest.raises(error) as info:
        plan(sql)
    assert fragment in str(info.value)
    assert info.value.location is not None
