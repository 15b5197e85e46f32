"""Which views a partitioned flow computes shard by shard, and the refusals that name the column."""

from __future__ import annotations

import pytest

from freshview.flow.partitioning import PartitionError, key_positions
from freshview.schema import schema_from_ddl
from freshview.sql import build_plan

SOURCES = {
    "orders": schema_from_ddl("o_id INT, o_customer INT, amount INT, status TEXT"),
    "customers": schema_from_ddl("c_id BIGINT, region TEXT"),
    "items": schema_from_ddl("i_order INT, i_customer INT, qty INT"),
}
KEYS = {"orders": ["o_customer"], "customers": ["c_id"], "items": ["i_customer"]}


class Catalog:
    def relation_columns(self, name):
        if name in SOURCES:
            return tuple((c.name, c.type) for c in SOURCES[name].columns), False
        return None


def positions(sql: str):
    return key_positions(build_plan(sql, Catalog()), KEYS)


@pytest.mark.parametrize("sql, expected", [
    ("SELECT o_customer, SUM(amount) FROM orders GROUP BY o_customer", (0,)),
    ("SELECT status, o_customer, COUNT(*) FROM orders GROUP BY status, o_customer", (1,)),
    ("SELECT amount, o_customer FROM orders WHERE amount > 3", (1,)),
    ("SELECT amount FROM orders WHERE amount > 3", None),  # row by row: fine without the key
    ("SELECT c.region, o.o_customer, SUM(o.amount) FROM orders o JOIN customers c ON o.o_customer = c.c_id "
     "GROUP BY c.region, o.o_customer", (1,)),
    ("SELECT o.o_id, c.region FROM orders o LEFT JOIN customers c ON o.o_customer = c.c_id", None),
    ("SELECT o_customer, region FROM orders LEFT JOIN customers ON o_customer = c_id", (0,)),
    ("SELECT DISTINCT o_customer, status FROM orders", (0,)),
    ("SELECT o_customer FROM orders UNION ALL SELECT i_customer FROM items", (0,)),
    ("SELECT o_customer, n FROM (SELECT o_customer, COUNT(*) AS n FROM orders GROUP BY o_customer) t WHERE n > 1",
     (0,)),
    ("SELECT o_id, o_customer, ROW_NUMBER() OVER (PARTITION BY o_customer ORDER BY o_id) AS r FROM orders", (1,)),
])
def test_views_computed_shard_by_shard(sql, expected):
    assert positions(sql) == expected


@pytest.mark.parametrize("sql, message", [
    ("SELECT status, COUNT(*) FROM orders GROUP BY status",
     "GROUP BY status does not include the partition key (orders: o_customer)"),
    ("SELECT SUM(amount) FROM orders", "an aggregate without GROUP BY"),
    ("SELECT * FROM orders JOIN customers ON o_id = c_id",
     "a join on o_id = c_id does not match the partition keys ((o_customer) = (c_id))"),
    ("SELECT * FROM orders JOIN items ON o_id = i_order",
     "a join on o_id = i_order does not match the partition keys ((o_customer) = (i_customer))"),
    ("SELECT DISTINCT status FROM orders", "DISTINCT over rows without the partition key"),
    ("SELECT * FROM orders ORDER BY amount LIMIT 3", "ORDER BY … LIMIT/OFFSET"),
    ("SELECT o_id, ROW_NUMBER() OVER (PARTITION BY status ORDER BY o_id) FROM orders",
     "PARTITION BY does not include the partition key"),
    ("SELECT c.region, COUNT(*) FROM customers c RIGHT JOIN orders o ON o.o_customer = c.c_id GROUP BY c.region",
     "GROUP BY region does not include the partition key"),
])
def test_refusals_name_the_construct_and_the_column(sql, message):
    with pytest.raises(PartitionError) as info:
        positions(sql)
    assert message in str(info.value)
