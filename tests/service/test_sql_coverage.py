"""SQL coverage through the PostgreSQL service: views created with CALL freshview.create_view, kept fresh
under random transactions, checked against PostgreSQL, and their result tables keyed as README says
(GROUP BY columns for an aggregate view, all columns plus ``_fv_count`` for any other)."""

from __future__ import annotations

import random

import psycopg

from tests.support.service import wait_until_fresh

SCHEMA = """
CREATE TABLE cust (cid int PRIMARY KEY, region text);
CREATE TABLE ord (oid bigint PRIMARY KEY, cid int, amount numeric(10,2));
INSERT INTO cust SELECT g, (ARRAY['north','south',NULL])[1 + g % 3] FROM generate_series(1, 30) g;
INSERT INTO ord SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE 1 + g % 40 END, (g * 37 % 1000) + 0.5
                FROM generate_series(1, 300) g;
"""

# view -> (SQL, the result table's expected key columns; a trailing "_fv_count" says the view is counted:
# the table has that multiplicity column beside the key)
VIEWS = {
    "public.cov_using_left": ("SELECT * FROM cust LEFT JOIN ord USING (cid)",
                              ["cid", "region", "oid", "amount", "_fv_count"]),
    "public.cov_using_full": ("SELECT cid, region, COUNT(oid) AS n, SUM(amount) AS total "
                              "FROM cust FULL JOIN ord USING (cid) GROUP BY cid, region", ["cid", "region"]),
    "public.cov_or_in": ("SELECT oid, amount FROM ord WHERE amount > 900 "
                         "OR cid IN (SELECT cid FROM cust WHERE region = 'north')",
                         ["oid", "amount", "_fv_count"]),
    "public.cov_or_exists": ("SELECT region, COUNT(*) AS n FROM cust WHERE region IS NULL OR "
                             "EXISTS (SELECT 1 FROM ord WHERE ord.cid = cust.cid AND amount > 500) GROUP BY region",
                             ["region"]),
    "public.cov_having_corr": ("SELECT cid, SUM(amount) AS total FROM ord GROUP BY cid "
                               "HAVING SUM(amount) > (SELECT COUNT(*) * 100 FROM cust WHERE cust.cid = ord.cid)",
                               # the subquery is joined after the aggregate: plan.shape sees a join, not the
                               # aggregate, so the table is keyed by all columns, counted
                               ["cid", "total", "_fv_count"]),
}


def _key_columns(conn: psycopg.Connection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND (i.indisprimary OR i.indisunique) "
        "ORDER BY array_position(i.indkey::int2[], a.attnum)", (table,)).fetchall()
    return [r[0] for r in rows]


def _transaction(conn: psycopg.Connection, rng: random.Random, next_id: list[int]) -> None:
    with conn.transaction():
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.3:
                next_id[0] += 1
                conn.execute("INSERT INTO ord VALUES (%s, %s, %s)",
                             (next_id[0], rng.choice([None, *range(1, 40)]), rng.randint(0, 99_999) / 100))
            elif op < 0.5:
                conn.execute("UPDATE ord SET amount = %s, cid = %s WHERE oid = %s",
                             (rng.randint(0, 99_999) / 100, rng.randint(1, 40), rng.randint(1, next_id[0])))
            elif op < 0.65:
                conn.execute("DELETE FROM ord WHERE oid = %s", (rng.randint(1, next_id[0]),))
            elif op < 0.85:
                conn.execute("UPDATE cust SET region = %s WHERE cid = %s",
                             (rng.choice(["north", "south", None]), rng.randint(1, 30)))
            else:
                cid = rng.randint(1, 45)
                conn.execute("DELETE FROM cust WHERE cid = %s", (cid,))
                conn.execute("INSERT INTO cust VALUES (%s, %s)", (cid, rng.choice(["north", None])))


def test_using_joins_and_subqueries_as_values_through_the_service(database, start_service):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    start_service()
    rng, next_id = random.Random(11), [300]
    with psycopg.connect(database, autocommit=True) as conn:
        for name, (sql, _) in VIEWS.items():
            conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))
        for name, (_, key) in VIEWS.items():
            counted = key[-1] == "_fv_count"
            assert _key_columns(conn, name) == [k for k in key if k != "_fv_count"], name
            has_count = conn.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                                     "'public' AND table_name = %s AND column_name = '_fv_count'",
                                     (name.split(".")[1],)).fetchone()[0]
            assert bool(has_count) == counted, name
        wait_until_fresh(database, list(VIEWS))
        for _ in range(40):
            _transaction(conn, rng, next_id)
        wait_until_fresh(database, list(VIEWS), timeout=120)
