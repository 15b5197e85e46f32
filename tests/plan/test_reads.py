"""``plan.rewrite.prune.columns_read`` as DDL on a followed table uses it: the columns each view reads."""

from __future__ import annotations

import pytest

from freshview.plan.rewrite.prune import columns_read
from freshview.schema import schema_from_ddl
from freshview.sql import build_plan

SOURCES = {
    "orders": schema_from_ddl("id INT, customer INT, amount NUMERIC(10,2), status TEXT, note TEXT, placed DATE"),
    "customers": schema_from_ddl("id INT, region TEXT, name TEXT"),
}


class Catalog:
    def relation_columns(self, name):
        if name in SOURCES:
            return tuple((c.name, c.type) for c in SOURCES[name].columns), False
        return None


@pytest.mark.parametrize("sql, expected", [
    ("SELECT id, amount FROM orders", {"orders": {"id", "amount"}}),
    ("SELECT id FROM orders WHERE status = 'open'", {"orders": {"id", "status"}}),
    ("SELECT customer, SUM(amount) AS s FROM orders WHERE placed > DATE '2024-01-01' GROUP BY customer",
     {"orders": {"customer", "amount", "placed"}}),
    ("SELECT o.id, c.region FROM orders o JOIN customers c ON o.customer = c.id",
     {"orders": {"id", "customer"}, "customers": {"id", "region"}}),
    ("SELECT o.id FROM orders o LEFT JOIN customers c ON o.customer = c.id AND c.name <> 'x'",
     {"orders": {"id", "customer"}, "customers": {"id", "name"}}),
    ("SELECT id FROM orders o WHERE NOT EXISTS (SELECT 1 FROM customers c WHERE c.id = o.customer)",
     {"orders": {"id", "customer"}, "customers": {"id"}}),
    ("SELECT id FROM orders UNION ALL SELECT id FROM customers", {"orders": {"id"}, "customers": {"id"}}),
    ("SELECT DISTINCT status FROM orders", {"orders": {"status"}}),
    ("SELECT * FROM orders", {"orders": set(SOURCES["orders"].names)}),
    ("SELECT COUNT(*) AS n FROM orders", {"orders": set()}),
])
def test_the_columns_a_view_reads(sql, expected):
    read = columns_read(build_plan(sql, Catalog()))
    assert {r: read.get(r, set()) for r in expected} == expected
