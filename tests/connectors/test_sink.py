"""Result tables: keys derived from plans, and step deltas applied as upserts and deletes."""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest

from freshview.connectors.postgres.sink import COUNT_COLUMN, ResultTable, result_shape
from freshview.schema import schema_from_ddl
from freshview.sql import build_plan

SRC = schema_from_ddl("id INT, grp TEXT, amount NUMERIC(10,2)", ["id"])


class Catalog:
    def relation_columns(self, name):
        return (tuple((c.name, c.type) for c in SRC.columns), False) if name == "t" else None


def shape(sql_text):
    return result_shape(build_plan(sql_text, Catalog()))


def test_keys_follow_the_view_kind():
    agg = shape("SELECT grp, SUM(amount) AS total, COUNT(*) AS n FROM t GROUP BY grp")
    assert agg.key == ("grp",) and not agg.counted and agg.nullable_key
    assert agg.columns == (("grp", "text"), ("total", "numeric"), ("n", "bigint"))
    assert shape("SELECT DISTINCT grp FROM t").key == ("grp",)
    bag = shape("SELECT grp, amount FROM t WHERE amount > 0")
    assert bag.counted and bag.key == ("grp", "amount")
    assert shape("SELECT COUNT(*) AS n FROM t").key == ()


def delta(rows, names, types):
    cols = list(zip(*rows))
    arrays = [pa.array(list(c), t) for c, t in zip(cols[:-1], types)] + [pa.array(list(cols[-1]), pa.int64())]
    return pa.Table.from_arrays(arrays, names=names + ["_weight"])


@pytest.fixture
def conn(pg):
    with psycopg.connect(pg) as c:
        yield c
        c.rollback()


def contents(conn, table, order):
    return conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()


def test_aggregate_view_updates_rows_in_place_and_keeps_null_groups(conn):
    table = ResultTable("public.fv_totals", shape("SELECT grp, SUM(amount) AS total FROM t GROUP BY grp"))
    for stmt in table.create_sql():
        conn.execute(stmt)
    types = [pa.string(), pa.decimal128(38, 2)]
    table.apply(conn, delta([("a", Decimal("1.00"), 1), (None, Decimal("2.00"), 1)], ["grp", "total"], types))
    assert contents(conn, "fv_totals", "grp NULLS LAST") == [("a", Decimal("1.00")), (None, Decimal("2.00"))]
    table.apply(conn, delta([("a", Decimal("1.00"), -1), ("a", Decimal("5.00"), 1),
                             (None, Decimal("2.00"), -1)], ["grp", "total"], types))
    assert contents(conn, "fv_totals", "grp") == [("a", Decimal("5.00"))]


def test_bag_view_counts_duplicates(conn):
    table = ResultTable("public.fv_bag", shape("SELECT grp, amount FROM t"))
    for stmt in table.create_sql():
        conn.execute(stmt)
    types = [pa.string(), pa.decimal128(10, 2)]
    table.apply(conn, delta([("a", Decimal("1.00"), 2), ("b", None, 1)], ["grp", "amount"], types))
    assert contents(conn, "fv_bag", "grp") == [("a", Decimal("1.00"), 2), ("b", None, 1)]
    table.apply(conn, delta([("a", Decimal("1.00"), -1), ("b", None, -1)], ["grp", "amount"], types))
    assert contents(conn, "fv_bag", "grp") == [("a", Decimal("1.00"), 1)]
    assert COUNT_COLUMN in [d.name for d in conn.execute("SELECT * FROM fv_bag").description]


def test_global_aggregate_single_row(conn):
    table = ResultTable("public.fv_count", shape("SELECT COUNT(*) AS n FROM t"))
    for stmt in table.create_sql():
        conn.execute(stmt)
    table.apply(conn, delta([(0, 1)], ["n"], [pa.int64()]))
    table.apply(conn, delta([(0, -1), (3, 1)], ["n"], [pa.int64()]))
    assert contents(conn, "fv_count", "n") == [(3,)]
