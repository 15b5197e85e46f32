"""Issue 24 on PostgreSQL: views survive DDL on the tables they read, followed from the stream, while writes go on.

Every step ends with ``wait_until_fresh``: each result table equals its view's SQL as ``freshview.views`` now
holds it (rewritten to the new names after a rename), run by PostgreSQL.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest

from tests.support.service import wait_for_status, wait_until_fresh

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, region text);
CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount numeric(12,2), status text, note text);
INSERT INTO customers SELECT g, (ARRAY['north','south',NULL])[1 + g % 3] FROM generate_series(1, 30) g;
INSERT INTO orders SELECT g, 1 + g % 35, (g * 37 % 1000) + 0.5, (ARRAY['open','paid',NULL])[1 + g % 3],
                          'n' || (g % 4) FROM generate_series(1, 300) g;
"""
VIEWS = {
    "public.totals": "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY customer",
    "public.big": "SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.customer = c.id "
                  "WHERE o.amount > 500",
    "public.by_status": "SELECT status, COUNT(*) AS n, MAX(amount) AS top FROM orders GROUP BY status",
}  # (each reads amount, which is renamed; by_status alone reads status, which is dropped last)


class Writer:
    """Random writes to orders by its current names, on a thread, paused for each comparison."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.table, self.amount = dsn, "orders", "amount"
        self.go, self.idle, self.stop = threading.Event(), threading.Event(), threading.Event()
        self.rng, self.next_id, self.done = random.Random(24), 1000, 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.go.set()
        self.thread.start()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                if not self.go.is_set():
                    self.idle.set()
                    self.go.wait(0.1)
                    continue
                self.idle.clear()
                try:
                    with conn.transaction():
                        self.write(conn)
                    self.done += 1
                except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
                    pass  # renamed meanwhile: the next write uses the new names

    def write(self, conn: psycopg.Connection) -> None:
        rng, table, amount = self.rng, self.table, self.amount
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.4:
                self.next_id += 1
                conn.execute(f"INSERT INTO {table} (id, customer, {amount}, status) VALUES (%s, %s, %s, %s)",
                             (self.next_id, rng.randint(1, 35), rng.choice([None, rng.randint(1, 99_999) / 100]),
                              rng.choice(["open", "paid", None])))
            elif op < 0.75:
                conn.execute(f"UPDATE {table} SET {amount} = {amount} + %s WHERE id = %s",
                             (rng.randint(-300, 300), rng.randint(1, self.next_id)))
            else:
                conn.execute(f"DELETE FROM {table} WHERE id = %s", (rng.randint(1, self.next_id),))

    def fresh(self, dsn: str, views: list[str]) -> None:
        """Writes pause, the views must catch up and equal their SQL, writes resume."""
        self.go.clear()
        self.idle.wait(10)
        try:
            wait_until_fresh(dsn, views)
        finally:
            self.go.set()

    def close(self) -> None:
        self.stop.set()
        self.go.set()
        self.thread.join(10)


@pytest.fixture
def sales(database: str) -> str:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return database


def view_sql(conn: psycopg.Connection, name: str) -> str:
    return conn.execute("SELECT sql FROM freshview.views WHERE name = %s", (name,)).fetchone()[0]


def wait_rewritten(conn: psycopg.Connection, names: list[str], text: str, timeout: float = 60.0) -> None:
    """The service has followed a rename once the views' stored SQL names ``text`` (the new name)."""
    deadline = time.monotonic() + timeout
    while not all(text in view_sql(conn, n) for n in names):
        assert time.monotonic() < deadline, [(n, view_sql(conn, n)) for n in names]
        time.sleep(0.1)


def test_views_survive_renames_added_dropped_and_retyped_columns_without_a_snapshot(sales, start_service):
    from freshview.service.service import ServiceOptions

    snapshots: list[str] = []

    def start():
        return start_service(options=ServiceOptions(poll_s=0.05, catalog_check_s=0.5),
                             snapshot_progress=lambda t, d, e, f: snapshots.append(t) if f else None)

    service = start()
    with psycopg.connect(sales, autocommit=True) as conn:
        for name, sql in VIEWS.items():
            conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))
        followed = list(snapshots)
        writer = Writer(sales)
        try:
            # ADD COLUMN with a default (no row events), then a backfill UPDATE in a transaction with other DML.
            conn.execute("ALTER TABLE orders ADD COLUMN extra int DEFAULT 7")
            with conn.transaction():
                conn.execute("UPDATE orders SET extra = id % 5")
                conn.execute("UPDATE orders SET amount = amount + 1 WHERE id < 40")
            writer.fresh(sales, list(VIEWS))
            # RENAME COLUMN of a column the views read, inside a transaction with writes before and after it.
            with conn.transaction():
                conn.execute("UPDATE orders SET amount = amount * 2 WHERE id BETWEEN 40 AND 60")
                conn.execute("ALTER TABLE orders RENAME COLUMN amount TO amount_due")
                conn.execute("INSERT INTO orders (id, customer, amount_due, status) VALUES (900, 3, 777, 'paid')")
                conn.execute("UPDATE orders SET amount_due = amount_due - 1 WHERE id BETWEEN 50 AND 70")
            writer.amount = "amount_due"
            wait_rewritten(conn, list(VIEWS), "amount_due")
            writer.fresh(sales, list(VIEWS))
            assert '"amount_due" AS amount' in view_sql(conn, "public.big"), view_sql(conn, "public.big")
            # ALTER TABLE ... RENAME TO, then SET SCHEMA back and forth: the views follow the table by its OID.
            conn.execute("ALTER TABLE orders RENAME TO orders_v2")
            writer.table = "orders_v2"
            wait_rewritten(conn, list(VIEWS), "orders_v2")
            writer.fresh(sales, list(VIEWS))
            assert "FROM orders_v2 AS orders" in view_sql(conn, "public.totals")
            conn.execute("CREATE SCHEMA sales")
            conn.execute("ALTER TABLE orders_v2 SET SCHEMA sales")
            writer.table = "sales.orders_v2"
            wait_rewritten(conn, list(VIEWS), "sales.orders_v2")
            writer.fresh(sales, list(VIEWS))
            service.stop()  # a restart keeps following the renamed table (the names kept with the engine's state)
            conn.execute("UPDATE sales.orders_v2 SET amount_due = amount_due + 2 WHERE id < 20")
            service = start()
            # Columns no view reads dropped and retyped; the key column renamed.
            conn.execute("ALTER TABLE sales.orders_v2 DROP COLUMN note")
            conn.execute("ALTER TABLE sales.orders_v2 ALTER COLUMN extra TYPE bigint")
            conn.execute("ALTER TABLE sales.orders_v2 RENAME COLUMN id TO order_id")
            writer.go.clear()
            writer.idle.wait(10)
            conn.execute("UPDATE sales.orders_v2 SET amount_due = amount_due + 5 WHERE order_id < 30")
            conn.execute("DELETE FROM sales.orders_v2 WHERE order_id BETWEEN 30 AND 35")
            time.sleep(1)  # (the catalog's periodic look too)
            wait_until_fresh(sales, list(VIEWS))
            assert snapshots == followed, "a rename or an unread column's change took a snapshot"
            # TRUNCATE stays followed.
            conn.execute("TRUNCATE customers")
            conn.execute("INSERT INTO customers SELECT g, 'west' FROM generate_series(1, 20) g")
            wait_until_fresh(sales, list(VIEWS))
            # A new view naming the table by its new name shares it with the old views (followed anew once).
            conn.execute("CALL freshview.create_view('public.extras', "
                         "'SELECT extra, COUNT(*) AS n, SUM(amount_due) AS s FROM sales.orders_v2 GROUP BY extra')")
            conn.execute("UPDATE sales.orders_v2 SET extra = extra + 1, amount_due = 1 WHERE order_id < 10")
            wait_until_fresh(sales, [*VIEWS, "public.extras"])
            # A change a view cannot survive fails that view alone, naming it; the others go on.
            conn.execute("ALTER TABLE sales.orders_v2 DROP COLUMN status")
            conn.execute("UPDATE sales.orders_v2 SET amount_due = 3 WHERE order_id < 5")
            status, error = wait_for_status(conn, "public.by_status", "failed")
            assert status == "failed" and "column status of sales.orders_v2 was dropped" in error, error
            assert "CALL freshview.alter_view('public.by_status', ...)" in error, error
            wait_until_fresh(sales, ["public.totals", "public.big", "public.extras"])
        finally:
            writer.close()
        assert writer.done > 0
