"""Reading source table definitions from PostgreSQL's catalog."""

from __future__ import annotations

import psycopg
import pytest

from freshview.connectors.postgres.catalog import describe_table
from freshview.errors import CatalogError


@pytest.fixture
def conn(pg):
    with psycopg.connect(pg) as c:
        yield c
        c.rollback()


def test_columns_types_key_and_identity(conn):
    conn.execute("CREATE TABLE fv_cat (b int, a bigint, amount numeric(12,3), label varchar(10) NOT NULL, "
                 "at timestamptz, PRIMARY KEY (a, b))")
    conn.execute("ALTER TABLE fv_cat DROP COLUMN at")
    t = describe_table(conn, "fv_cat")
    assert t.name == "public.fv_cat" and t.schema.names == ["b", "a", "amount", "label"]
    assert t.schema.primary_key == ("a", "b") and t.replica_identity == "d"
    assert t.schema.column("amount").type.pg == "numeric(12,3)" and not t.schema.column("label").nullable


def test_tables_freshview_cannot_follow_are_refused_with_the_fix(conn):
    conn.execute("CREATE TABLE fv_nokey (x int)")
    with pytest.raises(CatalogError, match="REPLICA IDENTITY FULL"):
        describe_table(conn, "fv_nokey")
    conn.execute("ALTER TABLE fv_nokey REPLICA IDENTITY FULL")
    assert describe_table(conn, "fv_nokey").has_full_old_rows
    conn.execute("CREATE TABLE fv_json (id int PRIMARY KEY, doc jsonb)")
    with pytest.raises(CatalogError, match="jsonb"):
        describe_table(conn, "fv_json")
    with pytest.raises(CatalogError, match="does not exist"):
        describe_table(conn, "fv_missing")
