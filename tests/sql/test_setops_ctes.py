"""The front end of set operations, WITH and ORDER BY: plan shapes, scoping, and located refusals."""

from __future__ import annotations

import pytest

from freshview.errors import SqlError, UnknownTableError, UnsupportedSqlError
from freshview.plan import nodes as pn
from freshview.schema import SqlType
from tests.sql.test_build import plan, scans


def test_union_is_distinct_over_union_all_and_intersect_a_reweighted_count():
    u = plan("SELECT o_id FROM orders UNION SELECT c_id FROM customers")
    assert isinstance(u, pn.Distinct) and isinstance(u.input, pn.UnionAll)
    i = plan("SELECT o_customer FROM orders INTERSECT ALL SELECT c_id FROM customers")
    assert isinstance(i, pn.Project) and isinstance(i.input, pn.Reweight)
    assert isinstance(i.input.input, pn.Aggregate) and [a.func for a in i.input.input.aggs] == ["count", "count"]
    assert i.columns == (("o_customer", SqlType("int4")),)


def test_set_operation_columns_take_left_names_and_common_types():
    p = plan("SELECT o_id AS x, amount FROM orders EXCEPT SELECT c_id, 1 FROM customers")
    assert [n for n, _ in p.columns] == ["x", "amount"]
    assert p.columns[1][1].kind == "numeric"
    p = plan("SELECT o_id FROM orders INTERSECT SELECT big FROM orders UNION ALL SELECT f FROM orders")
    assert p.columns[0][1] == SqlType("float8")


def test_order_by_without_limit_is_ignored():
    for body in ("SELECT o_id, note FROM orders",
                 "SELECT o_id, note FROM orders EXCEPT SELECT c_id, c_name FROM customers",
                 "SELECT o_id, note FROM orders UNION ALL SELECT c_id, c_name FROM customers"):
        assert plan(body + " ORDER BY 1 DESC, note NULLS FIRST") == plan(body)
    assert plan("SELECT * FROM (SELECT o_id FROM orders ORDER BY o_id) AS s") == \
        plan("SELECT * FROM (SELECT o_id FROM orders) AS s")


def test_cte_scopes_shadow_in_order():
    # A CTE shadows the source of the same name; its own body still sees the source.
    p = plan("WITH orders AS (SELECT o_id FROM orders WHERE o_id > 1) SELECT o_id FROM orders")
    assert any(isinstance(n, pn.Filter) for n in pn.walk(p)) and len(scans(p)) == 1
    # A later CTE sees an earlier one; a nested WITH shadows the outer CTE.
    p = plan("WITH a AS (SELECT c_id FROM customers), b(z) AS (SELECT c_id FROM a) "
             "SELECT * FROM (WITH a AS (SELECT o_id FROM orders) SELECT o_id FROM a) AS s, b")
    assert sorted(s.relation for s in scans(p)) == ["customers", "orders"]
    assert [n for n, _ in p.columns] == ["o_id", "z"]
    # Referenced twice: planned twice (two scans), unused: planned (and checked) but not in the plan.
    p = plan("WITH t AS (SELECT o_id FROM orders), unused AS (SELECT c_id FROM customers) "
             "SELECT x.o_id FROM t x JOIN t y ON x.o_id = y.o_id")
    assert [s.relation for s in scans(p)] == ["orders", "orders"]


def test_cte_names_compare_as_postgresql_folds_them():
    p = plan("WITH T AS (SELECT c_id FROM customers) SELECT * FROM t")
    assert [s.relation for s in scans(p)] == ["customers"]
    p = plan('WITH "orders" AS (SELECT c_id FROM customers) SELECT * FROM ORDERS')  # both: orders
    assert [s.relation for s in scans(p)] == ["customers"]
    p = plan('WITH "Orders" AS (SELECT c_id FROM customers) SELECT o_id FROM orders')  # "Orders" is not orders
    assert [s.relation for s in scans(p)] == ["orders"]


def test_recursive_cte_plans_a_fixpoint_over_its_anchor_and_external_inputs():
    p = plan("WITH RECURSIVE tc(a, b) AS (SELECT o_id, o_customer FROM orders UNION "
             "SELECT tc.a, c.c_id FROM tc JOIN customers c ON tc.b = c.c_id) SELECT b, a FROM tc")
    rec = next(n for n in pn.walk(p) if isinstance(n, pn.Recursive))
    assert rec.distinct and [n for n, _ in rec.columns] == ["a", "b"]
    assert [s.relation for s in scans(rec.anchor)] == ["orders"]
    assert [s.relation for e in rec.externals for s in scans(e)] == ["customers"]
    leaves = [n for n in _step_nodes(rec.step) if not n.inputs()]
    assert {type(n).__name__ for n in leaves} == {"RecursiveRef", "ExternalRef"}
    # Not self-referencing: an ordinary CTE, even in a WITH RECURSIVE list.
    assert not any(isinstance(n, pn.Recursive) for n in pn.walk(
        plan("WITH RECURSIVE t AS (SELECT o_id FROM orders) SELECT o_id FROM t")))


def _step_nodes(node):
    yield node
    for child in node.inputs():
        yield from _step_nodes(child)


@pytest.mark.parametrize("sql, error, fragment, column", [
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM orders UNION SELECT r.n FROM r JOIN r r2 ON r.n = r2.n) "
     "SELECT n FROM r", UnsupportedSqlError, "non-linear recursion", 78),
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM orders UNION SELECT CAST(COUNT(*) AS INT) FROM r) SELECT n FROM r",
     UnsupportedSqlError, "recursion through an aggregate", 55),
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM orders UNION ALL SELECT DISTINCT n FROM r) SELECT n FROM r",
     UnsupportedSqlError, "recursion through DISTINCT", 59),
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM orders UNION ALL SELECT n FROM "
     "(SELECT n FROM r INTERSECT SELECT c_id FROM customers) s) SELECT n FROM r",
     UnsupportedSqlError, "recursion through INTERSECT or EXCEPT", 59),
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM r UNION SELECT n FROM r) SELECT n FROM r", SqlError,
     "must not appear within its non-recursive term", 42),
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM orders INTERSECT SELECT n FROM r) SELECT n FROM r", SqlError,
     "does not have the form non-recursive-term UNION [ALL] recursive-term", 16),
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM orders UNION SELECT big FROM r, orders) SELECT n FROM r", SqlError,
     "has type integer in non-recursive term but type bigint overall", 32),
    ("WITH RECURSIVE r(n) AS (SELECT o_id FROM orders UNION SELECT o_id FROM s), s AS (SELECT o_id FROM orders) "
     "SELECT n FROM r", UnsupportedSqlError, "later WITH query 's'", 72),
    ("WITH t AS (SELECT o_id FROM orders), t AS (SELECT c_id FROM customers) SELECT * FROM t", SqlError,
     "specified more than once", 38),
    ("WITH t(a, b) AS (SELECT o_id FROM orders) SELECT * FROM t", SqlError,
     "1 columns available but 2 columns specified", 6),
    ("WITH t AS (SELECT o_id FROM t) SELECT * FROM t", UnknownTableError, "unknown table 't'", 29),
    ("WITH t AS (SELECT nope FROM orders) SELECT o_id FROM orders", SqlError, "unknown column 'nope'", 19),
    ("WITH t AS (DELETE FROM orders) SELECT * FROM t", UnsupportedSqlError, "DELETE in WITH (data-modifying", 12),
    ("SELECT o_id FROM orders INTERSECT SELECT c_id, c_name FROM customers", SqlError,
     "each INTERSECT query must have the same number of columns", 25),
    ("SELECT o_id FROM orders EXCEPT ALL SELECT c_name FROM customers", SqlError,
     "EXCEPT column 1 has incompatible types integer and text", 25),
])
def test_refusals_are_located(sql, error, fragment, column):
    with pytest.raises(error) as info:
        plan(sql)
    assert fragment in str(info.value)
    assert info.value.location is not None
    if column is not None:
        assert info.value.location.column == column, str(info.value)
