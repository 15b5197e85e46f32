"""plan.shape: the result key of each kind of view (what sinks build their tables from)."""

from __future__ import annotations

import pytest

from freshview.plan.shape import nullable_columns, result_key
from freshview.schema import schema_from_ddl
from freshview.sql.build import build_plan

TABLES = {
    "orders": schema_from_ddl("o_id INT, o_customer INT, amount NUMERIC(10,2), status TEXT", ["o_id"]),
    "customers": schema_from_ddl("c_id INT, region TEXT", ["c_id"]),
}


class Catalog:
    def relation_columns(self, name):
        s = TABLES.get(name)
        return (tuple((c.name, c.type) for c in s.columns), False) if s is not None else None


@pytest.mark.parametrize("sql, key, counted", [
    ("SELECT status, o_customer, sum(amount) AS total FROM orders GROUP BY o_customer, status", (1, 0), False),
    ("SELECT sum(amount) AS total FROM orders", (), False),
    ("SELECT region, count(DISTINCT status) AS n FROM customers LEFT JOIN orders ON o_customer = c_id "
     "GROUP BY region", (0,), False),
    ("SELECT DISTINCT status FROM orders", (0,), False),
    ("SELECT status FROM orders UNION SELECT region FROM customers", (0,), False),
    ("SELECT o_id, region FROM orders LEFT JOIN customers ON o_customer = c_id", (0, 1), True),
    ("SELECT status FROM orders INTERSECT ALL SELECT region FROM customers", (0,), True),
    ("SELECT o_id, amount FROM orders ORDER BY amount DESC LIMIT 3", (0, 1), True),
    ("SELECT o_id, rank() OVER (PARTITION BY o_customer ORDER BY amount) AS r FROM orders", (0, 1), True),
    # the group column is not an output column: rows may repeat
    ("SELECT sum(amount) AS total FROM orders GROUP BY o_customer", (0,), True),
])
def test_result_keys(sql, key, counted):
    rk = result_key(build_plan(sql, Catalog()))
    assert (rk.key, rk.counted) == (key, counted)


def test_a_count_is_never_null_but_a_group_can_be():
    plan = build_plan("SELECT status, count(*) AS n, sum(amount) AS s FROM orders GROUP BY status", Catalog())
    assert nullable_columns(plan) == [True, False, True]
    assert result_key(plan).nullable  # a NULL group is a group: the sink needs NULLS NOT DISTINCT
