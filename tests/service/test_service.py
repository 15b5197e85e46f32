"""End to end: views created with CALL, kept fresh from logical replication, checked against PostgreSQL.

Every test ends with ``wait_until_fresh``: each result table must equal its
view's SQL run by PostgreSQL over the same database.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import psycopg.conninfo
import pytest

from tests.support.service import result_rows, wait_for_status, wait_until_fresh

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, region text, vip boolean);
CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount numeric(12,2), status varchar(10),
                     placed date, note text);
CREATE TABLE events (kind text, qty int);
ALTER TABLE events REPLICA IDENTITY FULL;
INSERT INTO customers SELECT g, (ARRAY['north','south','east',NULL])[1 + g % 4], g % 3 = 0 FROM generate_series(1, 40) g;
INSERT INTO orders SELECT g, 1 + g % 45, (g * 37 % 1000) + 0.25, (ARRAY['open','paid','cancelled'])[1 + g % 3],
                          DATE '2024-01-01' + g % 60, CASE WHEN g % 5 = 0 THEN NULL ELSE 'n' || (g % 7) END
                   FROM generate_series(1, 600) g;
INSERT INTO events SELECT (ARRAY['click','view','buy'])[1 + g % 3], g % 4 FROM generate_series(1, 90) g;
"""

VIEWS = {
    "public.customer_totals":
        "SELECT o.customer, c.region, COUNT(*) AS n, SUM(o.amount) AS total, MAX(o.amount) AS biggest "
        "FROM orders o JOIN customers c ON o.customer = c.id WHERE o.status <> 'cancelled' "
        "GROUP BY o.customer, c.region",
    "public.region_revenue": "SELECT region, SUM(total) AS revenue, COUNT(*) AS customers "
                             "FROM customer_totals GROUP BY region",
    "public.big_orders": "SELECT customer, amount, status FROM orders WHERE amount > 500",
    "public.by_note": "SELECT note, COUNT(*) AS n, MIN(placed) AS first_placed FROM orders GROUP BY note",
    "public.event_totals": "SELECT kind, SUM(qty) AS qty, COUNT(*) AS n FROM events GROUP BY kind",
    "public.regions": "SELECT DISTINCT region, vip FROM customers",
}


def random_transaction(conn: psycopg.Connection, rng: random.Random, next_id: list[int]) -> None:
    """1-5 random statements over the three tables, in one transaction."""
    with conn.transaction():
        for _ in range(rng.randint(1, 5)):
            op = rng.random()
            oid = rng.randint(1, next_id[0])
            if op < 0.25:
                next_id[0] += 1
                conn.execute("INSERT INTO orders VALUES (%s, %s, %s, %s, DATE '2024-03-01' + %s, %s)",
                             (next_id[0], rng.randint(1, 45), rng.randint(1, 99_999) / 100,
                              rng.choice(["open", "paid", "cancelled"]), rng.randint(0, 30),
                              rng.choice([None, "n1", "n2", "vip"])))
            elif op < 0.40:
                conn.execute("UPDATE orders SET amount = amount + %s, status = %s WHERE id = %s",
                             (rng.randint(-300, 300), rng.choice(["open", "paid", "cancelled"]), oid))
            elif op < 0.48:
                conn.execute("UPDATE orders SET customer = %s, note = %s WHERE id = %s",
                             (rng.randint(1, 45), rng.choice([None, "n3"]), oid))
            elif op < 0.55:  # the key changes
                next_id[0] += 1
                conn.execute("UPDATE orders SET id = %s WHERE id = %s", (next_id[0], oid))
            elif op < 0.65:
                conn.execute("DELETE FROM orders WHERE id = %s", (oid,))
            elif op < 0.75:
                conn.execute("UPDATE customers SET region = %s, vip = NOT vip WHERE id = %s",
                             (rng.choice(["north", "south", "west", None]), rng.randint(1, 45)))
            elif op < 0.80:
                cid = rng.randint(1, 45)
                conn.execute("DELETE FROM customers WHERE id = %s", (cid,))
                conn.execute("INSERT INTO customers VALUES (%s, %s, %s)", (cid, rng.choice(["east", None]), True))
            elif op < 0.90:
                conn.execute("INSERT INTO events VALUES (%s, %s)", (rng.choice(["click", "view", "buy"]),
                                                                     rng.randint(0, 5)))
            elif op < 0.95:
                conn.execute("UPDATE events SET qty = qty + 1 WHERE ctid = (SELECT ctid FROM events "
                             "WHERE kind = %s LIMIT 1)", (rng.choice(["click", "view", "buy"]),))
            else:
                conn.execute("DELETE FROM events WHERE ctid = (SELECT ctid FROM events WHERE kind = %s LIMIT 1)",
                             (rng.choice(["click", "view", "buy"]),))


def create_views(conn: psycopg.Connection, views: dict[str, str]) -> None:
    for name, sql in views.items():
        conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))


@pytest.fixture
def shop(database: str) -> str:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return database


def test_random_transactions_while_views_are_created(shop, start_service):
    start_service()
    rng = random.Random(7)
    next_id = [600]
    stop = threading.Event()

    def writer() -> None:  # changes keep committing while snapshots are taken
        with psycopg.connect(shop, autocommit=True) as conn:
            while not stop.is_set():
                random_transaction(conn, rng, next_id)
                time.sleep(0.005)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with psycopg.connect(shop, autocommit=True) as conn:
            create_views(conn, VIEWS)
            time.sleep(1.0)
    finally:
        stop.set()
        thread.join()
    wait_until_fresh(shop, list(VIEWS))
    with psycopg.connect(shop, autocommit=True) as conn:
        for _ in range(60):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, list(VIEWS))
        statuses = conn.execute("SELECT name, status, rows FROM freshview.views ORDER BY name").fetchall()
        for name, status, rows in statuses:
            assert status == "active"
            assert rows == len(result_rows(conn, name)), f"freshview.views.rows is wrong for {name}"
        progress = conn.execute("SELECT steps, changes, lsn > '0/0' FROM freshview.progress").fetchone()
        assert progress[0] > 0 and progress[1] > 0 and progress[2]


def test_restart_resumes_from_stored_progress_without_a_new_snapshot(shop, start_service, tmp_path):
    snapshots: list[str] = []
    service = start_service(tmp_path / "s", snapshot_progress=lambda t, d, e, f: snapshots.append(t))
    views = {k: VIEWS[k] for k in ("public.customer_totals", "public.event_totals")}
    rng, next_id = random.Random(3), [600]
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, views)
        for _ in range(20):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(shop, list(views))
        service.stop()
        for _ in range(40):  # while the service is down
            random_transaction(conn, rng, next_id)
        snapshots.clear()
        start_service(tmp_path / "s", snapshot_progress=lambda t, d, e, f: snapshots.append(t))
        wait_until_fresh(shop, list(views))
        assert snapshots == [], "a restart must resume from the stored position, not re-snapshot"


def test_a_large_streamed_transaction(shop, start_service):
    start_service()
    views = {"public.note_totals": "SELECT note, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY note"}
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, views)
        conn.execute("ALTER SYSTEM SET logical_decoding_work_mem = '64kB'")  # force streaming of in-progress txns
        conn.execute("SELECT pg_reload_conf()")
        try:
            with conn.transaction():
                conn.execute("INSERT INTO orders SELECT g, g % 45, g % 1000, 'open', DATE '2024-05-01', "
                             "'bulk' || (g % 3) FROM generate_series(100001, 160000) g")
                conn.execute("UPDATE orders SET amount = amount + 1 WHERE id > 150000")
                conn.execute("DELETE FROM orders WHERE id BETWEEN 100001 AND 101000")
            wait_until_fresh(shop, list(views), timeout=120)
        finally:
            conn.execute("ALTER SYSTEM RESET logical_decoding_work_mem")
            conn.execute("SELECT pg_reload_conf()")


def test_truncate_and_key_changing_updates(shop, start_service):
    start_service()
    views = {k: VIEWS[k] for k in ("public.customer_totals", "public.region_revenue", "public.big_orders")}
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, views)
        conn.execute("UPDATE orders SET id = id + 10000 WHERE id % 2 = 0")
        conn.execute("UPDATE customers SET id = id + 100 WHERE id < 5")
        wait_until_fresh(shop, list(views))
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (99999, 1, 777, 'open', DATE '2024-01-01', NULL)")
            conn.execute("TRUNCATE orders")
            conn.execute("INSERT INTO orders VALUES (1, 1, 600, 'open', DATE '2024-01-01', NULL), "
                         "(2, 2, 900, 'paid', DATE '2024-01-02', 'x')")
            conn.execute("UPDATE orders SET amount = 901 WHERE id = 2")
        wait_until_fresh(shop, list(views))
        conn.execute("TRUNCATE customers, orders")
        wait_until_fresh(shop, list(views))
        assert result_rows(conn, "public.big_orders") == []


def test_types_nulls_and_unchanged_toast(database, start_service):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("""CREATE TABLE typed (id int8 PRIMARY KEY, a int2, b int4, n numeric(14,4), r real,
                        d double precision, t text, v varchar(20), c char(3), f boolean, day date,
                        ts timestamp, tz timestamptz, big text)""")
        conn.execute("""INSERT INTO typed SELECT g, g % 7, g * 1000, g / 7.0, g / 3.0, g / 9.0, 't' || g,
                        'v' || (g % 3), 'c' || (g % 2), g % 2 = 0, DATE '2024-02-28' + g,
                        TIMESTAMP '2024-01-01 10:00:00.5' + g * interval '1 hour',
                        TIMESTAMPTZ '2024-01-01 10:00:00+02' + g * interval '1 minute',
                        (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 200) i)
                        FROM generate_series(1, 50) g""")
        conn.execute("INSERT INTO typed (id) VALUES (1000)")  # NULLs everywhere
    start_service()
    views = {
        "public.typed_copy": "SELECT id, a, b, n, d, t, v, c, f, day, ts, tz, length(big) AS big_len FROM typed",
        "public.typed_groups": "SELECT f, v, c, COUNT(*) AS k, SUM(n) AS sn, SUM(b) AS sb, MAX(ts) AS last_ts, "
                               "MIN(tz) AS first_tz, MAX(day) AS last_day FROM typed GROUP BY f, v, c",
    }
    with psycopg.connect(database, autocommit=True) as conn:
        create_views(conn, views)
        conn.execute("UPDATE typed SET a = a + 1 WHERE id <= 20")      # big (TOASTed) is not sent: unchanged
        conn.execute("UPDATE typed SET id = id + 500 WHERE id > 45")   # key change, TOAST unchanged
        conn.execute("UPDATE typed SET n = NULL, tz = NULL, v = NULL WHERE id % 4 = 0")
        conn.execute("DELETE FROM typed WHERE id % 5 = 0")
        conn.execute("UPDATE typed SET big = 'small' WHERE id = 1")
        wait_until_fresh(database, list(views))


def test_a_failing_view_does_not_stop_the_others(shop, start_service):
    start_service()
    views = {"public.ratio": "SELECT id, 1000 / (amount - 42.25) AS r FROM orders WHERE id <= 10",
             "public.event_totals": VIEWS["public.event_totals"]}
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, views)
        conn.execute("UPDATE orders SET amount = 42.25 WHERE id = 3")  # division by zero in public.ratio
        conn.execute("INSERT INTO events VALUES ('buy', 10)")
        status, error = wait_for_status(conn, "public.ratio", "failed")
        assert status == "failed" and "zero" in error.lower(), (status, error)
        wait_until_fresh(shop, ["public.event_totals"])
        conn.execute("INSERT INTO events VALUES ('view', 3)")
        wait_until_fresh(shop, ["public.event_totals"])
        conn.execute("CALL freshview.drop_view('public.ratio')")
        assert conn.execute("SELECT to_regclass('public.ratio')").fetchone()[0] is None


def test_a_ddl_change_stops_only_the_views_reading_the_table(shop, start_service):
    start_service()
    views = {"public.big_orders": VIEWS["public.big_orders"], "public.event_totals": VIEWS["public.event_totals"]}
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, views)
        conn.execute("ALTER TABLE orders ALTER COLUMN amount TYPE double precision")
        conn.execute("INSERT INTO orders VALUES (5000, 1, 900, 'open', DATE '2024-01-01', NULL)")
        conn.execute("INSERT INTO events VALUES ('buy', 1)")
        status, error = wait_for_status(conn, "public.big_orders", "failed")
        assert status == "failed" and "amount" in error and "changed type" in error, (status, error)
        wait_until_fresh(shop, ["public.event_totals"])
        # Re-creating the view follows the new definition.
        conn.execute("CALL freshview.drop_view('public.big_orders')")
        conn.execute("CALL freshview.create_view('public.big_orders', %s)", (VIEWS["public.big_orders"],))
        conn.execute("UPDATE orders SET amount = 950 WHERE id = 1")
        wait_until_fresh(shop, ["public.big_orders", "public.event_totals"])


@pytest.mark.parametrize("sql, message", [
    ("SELECT nope FROM orders", "unknown column 'nope'"),
    ("SELECT id FROM no_such_table", "no_such_table"),
    ("SELECT id, NTH_VALUE(id, 2) OVER (ORDER BY id) FROM orders", "window"),
    ("SELEC id FROM orders", "freshview"),
])
def test_create_view_errors_surface_in_the_call(shop, start_service, sql, message):
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException) as info:
            conn.execute("CALL freshview.create_view('public.bad', %s)", (sql,))
        assert message.lower() in str(info.value).lower()
        assert conn.execute("SELECT count(*) FROM freshview.views").fetchone()[0] == 0
        assert conn.execute("SELECT to_regclass('public.bad')").fetchone()[0] is None


def test_create_view_refuses_names_in_use_and_unfollowable_tables(shop, start_service):
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("CREATE TABLE loose (a int, b int)")
        with pytest.raises(psycopg.errors.RaiseException, match="REPLICA IDENTITY FULL"):
            conn.execute("CALL freshview.create_view('public.l', 'SELECT a, SUM(b) AS s FROM loose GROUP BY a')")
        with pytest.raises(psycopg.errors.RaiseException, match="already exists"):
            conn.execute("CALL freshview.create_view('public.orders', 'SELECT id FROM customers')")
        conn.execute("CALL freshview.create_view('public.v1', 'SELECT region FROM customers')")
        with pytest.raises(psycopg.errors.RaiseException, match="already exists"):
            conn.execute("CALL freshview.create_view('public.v1', 'SELECT id FROM customers')")
        with pytest.raises(psycopg.errors.RaiseException, match="no view named"):
            conn.execute("CALL freshview.drop_view('public.nothing')")


def test_create_view_times_out_without_a_service(shop):
    with psycopg.connect(shop, autocommit=True) as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.RaiseException, match="no freshview service answered"):
            conn.execute("CALL freshview.create_view('public.v', 'SELECT id FROM orders', 1)")
        assert time.monotonic() - started < 10
        assert conn.execute("SELECT state FROM freshview.requests").fetchone()[0] == "cancelled"


def test_a_plain_user_can_create_a_view_and_read_its_table(shop, start_service):
    start_service()
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fv_app_user') THEN "
                     "CREATE ROLE fv_app_user LOGIN; END IF; END$$")
        conn.execute("GRANT SELECT ON customers TO fv_app_user")  # a view runs with its requester's rights
    params = psycopg.conninfo.conninfo_to_dict(shop)
    params["user"] = "fv_app_user"
    with psycopg.connect(psycopg.conninfo.make_conninfo(**params), autocommit=True) as user:
        user.execute("CALL freshview.create_view('public.mine', "
                     "'SELECT region, COUNT(*) AS n FROM customers GROUP BY region')")
        assert user.execute("SELECT sum(n) FROM mine").fetchone()[0] == 40
        assert user.execute("SELECT status FROM freshview.views WHERE name = 'public.mine'").fetchone()[0] == "active"


def test_a_table_is_read_for_the_columns_its_views_read_and_widened_for_a_new_view(shop, start_service):
    # The snapshot reads, and the engine keeps, only the key and the columns views read; a later view reading
    # more reads the table again with them (its earlier views recomputed and still right); one reading
    # nothing new reuses the copy (no snapshot).
    snapshots: list[str] = []
    svc = start_service(snapshot_progress=lambda t, d, e, f: snapshots.append(t) if f else None).service
    kept = lambda: svc.flow.source_schema(svc.names.engine("public.orders")).names  # noqa: E731
    rng, next_id = random.Random(11), [600]
    with psycopg.connect(shop, autocommit=True) as conn:
        create_views(conn, {"public.by_note": VIEWS["public.by_note"]})
        assert kept() == ["id", "placed", "note"] and snapshots == ["public.orders"]
        conn.execute("CREATE INDEX by_note_idx ON public.by_note (note)")  # the user's, on a result table
        oid = conn.execute("SELECT 'public.by_note'::regclass::oid").fetchone()[0]
        create_views(conn, {"public.big_orders": VIEWS["public.big_orders"]})
        assert kept() == ["id", "customer", "amount", "status", "placed", "note"]
        assert snapshots == ["public.orders"] * 2
        # by_note was recomputed from the new copy into its own table: the same table, the user's index kept
        assert conn.execute("SELECT 'public.by_note'::regclass::oid").fetchone()[0] == oid
        assert conn.execute("SELECT to_regclass('public.by_note_idx')").fetchone()[0] is not None
        create_views(conn, {"public.amounts": "SELECT status, SUM(amount) AS total FROM orders GROUP BY status"})
        assert snapshots == ["public.orders"] * 2
        # A table without a key (REPLICA IDENTITY FULL) kept for one column: updates of the other change nothing.
        create_views(conn, {"public.kinds": "SELECT kind, COUNT(*) AS n FROM events GROUP BY kind"})
        assert svc.flow.source_schema(svc.names.engine("public.events")).names == ["kind"]
        for _ in range(60):
            random_transaction(conn, rng, next_id)
        names = ["public.by_note", "public.big_orders", "public.amounts", "public.kinds"]
        wait_until_fresh(shop, names)
        assert [r[0] for r in conn.execute("SELECT status FROM freshview.views ORDER BY name")] == ["active"] * 4
