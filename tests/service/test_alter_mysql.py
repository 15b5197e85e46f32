"""End to end on MariaDB: ``alter_view`` / ``alter_view_timeout``, under concurrent writes, with a reader that
must never see an empty table or a mix of the two definitions; the same columns keep the table (emptied and
filled in one transaction), other columns swap a new table in by one RENAME TABLE."""

from __future__ import annotations

import random
import threading
import time

import pymysql
import pytest

from tests.service.test_mysql_service import (  # noqa: F401 - fixtures
    connect, run_transactions, shop, start_service, wait_until_fresh,
)

OLD = "SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders WHERE status <> 'cancelled' GROUP BY customer"
NEW = ("SELECT customer, COUNT(*) - 1000000 AS n, SUM(amount) AS total FROM orders WHERE status = 'paid' "
       "GROUP BY customer")
WIDER = ("SELECT customer, COUNT(*) - 1000000 AS n, SUM(amount) AS total, MAX(amount) AS biggest FROM orders "
         "WHERE status = 'paid' GROUP BY customer")


def test_alter_view_on_mariadb_swaps_without_a_gap(shop, start_service):
    start_service()
    database = shop["database"]
    name = f"{database}.totals"
    stop, problems, reads = threading.Event(), [], [0]

    def read() -> None:
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            while not stop.is_set():
                cur.execute(f"SELECT COUNT(*), COALESCE(SUM(n > 0), 0) FROM `{database}`.totals")
                rows, old = cur.fetchone()
                reads[0] += 1
                if rows == 0 or 0 < old < rows:
                    problems.append((rows, old))

    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CALL freshview.create_view(%s, %s)", (name, OLD))
        cur.execute("CREATE USER IF NOT EXISTS 'fv_alter_r'@'%'")
        cur.execute(f"GRANT SELECT ON `{database}`.totals TO 'fv_alter_r'@'%'")
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        rng, next_id = random.Random(8), [300]
        writer = threading.Thread(target=run_transactions, args=(shop, rng, 60, next_id), daemon=True)
        writer.start()
        try:
            cur.execute("CALL freshview.alter_view(%s, %s)", (name, NEW))
            cur.execute("CALL freshview.alter_view_timeout(%s, %s, 120)", (name, WIDER))
        finally:
            writer.join(120)
            stop.set()
            reader.join(30)
        assert reads[0] > 10 and problems == [], problems[:5]
        with pytest.raises(pymysql.err.MySQLError, match="no view named .*nothing to alter"):
            cur.execute("CALL freshview.alter_view(%s, 'SELECT 1 AS x')", (f"{database}.nothing",))
        cur.execute("SELECT `sql`, status, phase, altered_at IS NOT NULL FROM freshview.views WHERE name = %s", (name,))
        assert cur.fetchone() == (WIDER, "active", None, 1)
        cur.execute("SHOW GRANTS FOR 'fv_alter_r'@'%'")  # (kept through the RENAME: MySQL grants by name)
        grants = " ".join(g for g, in cur.fetchall())
        cur.execute("DROP USER 'fv_alter_r'@'%'")
        assert f"`{database}`.`totals`" in grants, grants
    wait_until_fresh(shop, ["totals"], timeout=120)
    run_transactions(shop, random.Random(9), 20, [2000])
    wait_until_fresh(shop, ["totals"], timeout=120)


def _ship(cur, rng: random.Random, next_id: list[int], count: int, weight: bool) -> None:
    """``count`` random changes of ``shipments`` (``weight``: the column is still there)."""
    for _ in range(count):
        op, sid = rng.random(), rng.randint(1, next_id[0])
        if op < 0.4:
            next_id[0] += 1
            if weight:
                cur.execute("INSERT INTO shipments (id, customer, weight) VALUES (%s, %s, %s)",
                            (next_id[0], rng.randint(1, 12), rng.randint(1, 9999) / 100))
            else:
                cur.execute("INSERT INTO shipments (id, customer) VALUES (%s, %s)", (next_id[0], rng.randint(1, 12)))
        elif op < 0.7:
            cur.execute("UPDATE shipments SET customer = %s WHERE id = %s", (rng.randint(1, 12), sid))
        else:
            cur.execute("DELETE FROM shipments WHERE id = %s", (sid,))


def _failed(cur, name: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        cur.execute("SELECT status, error FROM freshview.views WHERE name = %s", (name,))
        status, error = cur.fetchone()
        if status == "failed":
            return error
        assert time.monotonic() < deadline, (status, error)
        time.sleep(0.1)


def test_a_view_failed_by_ddl_is_altered_back_to_active_on_mariadb(shop, start_service):
    """DDL a view cannot survive fails it, naming the statement and ``alter_view``; ``alter_view`` of the failed
    view makes it active again with the new query: the same columns keep the table (its index too), other
    columns swap a new one in; a refused alter leaves it failed with the alter's error."""
    start_service()
    database = shop["database"]
    name = f"{database}.shipped"
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE shipments (id int PRIMARY KEY, customer int, weight decimal(10,2), "
                    "carrier varchar(10))")
        cur.executemany("INSERT INTO shipments VALUES (%s, %s, %s, %s)",
                        [(i, 1 + i % 12, i * 1.5, [None, "dhl", "ups"][i % 3]) for i in range(1, 201)])
        cur.execute("CALL freshview.create_view(%s, 'SELECT customer, COUNT(*) AS n, SUM(weight) AS weight, "
                    "COUNT(carrier) AS carrier FROM shipments GROUP BY customer')", (name,))
        cur.execute("CREATE INDEX shipped_n ON shipped (n)")
        rng, next_id = random.Random(22), [200]
        cur.execute("ALTER TABLE shipments DROP COLUMN carrier")
        _ship(cur, rng, next_id, 5, True)
        error = _failed(cur, name)
        assert "column carrier of" in error and "(by `ALTER TABLE shipments DROP COLUMN carrier`)" in error, error
        assert f"CALL freshview.alter_view('{name}', ...)" in error, error
        with pytest.raises(pymysql.err.MySQLError, match="nope"):  # refused: still failed, saying why
            cur.execute("CALL freshview.alter_view(%s, 'SELECT customer, nope FROM shipments')", (name,))
        cur.execute("SELECT status, error FROM freshview.views WHERE name = %s", (name,))
        status, error = cur.fetchone()
        assert status == "failed" and "nope" in error, error
        # the same columns (names and types): the table kept, emptied and filled
        same = ("SELECT customer, COUNT(*) AS n, SUM(weight) AS weight, COUNT(weight) AS carrier FROM shipments "
                "GROUP BY customer")
        cur.execute("CALL freshview.alter_view(%s, %s)", (name, same))
        cur.execute("SELECT `sql`, status, error, phase, altered_at IS NOT NULL FROM freshview.views WHERE name = %s",
                    (name,))
        assert cur.fetchone() == (same, "active", None, None, 1)
        wait_until_fresh(shop, ["shipped"], timeout=60)  # (its rows: MariaDB's answer to the new SQL)
        cur.execute("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = 'shipped' AND INDEX_NAME = 'shipped_n'", (database,))
        assert cur.fetchone() == (1,)  # (the same table)
        _ship(cur, rng, next_id, 30, True)
        wait_until_fresh(shop, ["shipped"], timeout=60)
        # failed again; a query with other columns: a new table swapped in
        cur.execute("ALTER TABLE shipments DROP COLUMN weight")
        _ship(cur, rng, next_id, 5, False)
        _failed(cur, name)
        cur.execute("CALL freshview.alter_view(%s, 'SELECT customer, COUNT(*) AS n, AVG(id) AS mean FROM shipments "
                    "GROUP BY customer')", (name,))
        wait_until_fresh(shop, ["shipped"], timeout=60)
        _ship(cur, rng, next_id, 30, False)
        wait_until_fresh(shop, ["shipped"], timeout=60)
        cur.execute("CALL freshview.verify_view(%s)", (name,))
        assert cur.fetchone()[0].startswith("equal")


def test_between_the_rename_and_the_views_row_the_stored_sql_is_already_the_new_one(shop, start_service, monkeypatch):
    """MariaDB's RENAME TABLE commits on its own: the view's row takes the new SQL before it, so a service killed
    between the RENAME and the row's activation (phase swapping) rebuilds the view from the definition its table
    has (before: from the old SQL, readers seeing the old definition's rows again until the retried alter)."""
    from freshview.connectors.mysql.results import MySqlResults

    database = shop["database"]
    name = f"{database}.totals"
    start_service()
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CALL freshview.create_view(%s, %s)", (name, OLD))
    original, reached, gate = MySqlResults._activate, threading.Event(), threading.Event()

    def held(self, view, sql, *args, **kwargs):
        if sql == WIDER:  # the RENAME is done: the service could be killed here
            reached.set()
            assert gate.wait(120), "the test never let the swap go"
        return original(self, view, sql, *args, **kwargs)

    monkeypatch.setattr(MySqlResults, "_activate", held)
    failures: list[BaseException] = []

    def alter() -> None:
        try:
            with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
                cur.execute("CALL freshview.alter_view(%s, %s)", (name, WIDER))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
    caller = threading.Thread(target=alter, daemon=True)
    caller.start()
    try:
        assert reached.wait(120)
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = 'totals' AND COLUMN_NAME = 'biggest'", (database,))
            assert cur.fetchone() == (1,)  # the new table is in place ...
            cur.execute("SELECT `sql`, phase FROM freshview.views WHERE name = %s", (name,))
            assert cur.fetchone() == (WIDER, "swapping")  # ... and a restart would rebuild its definition
    finally:
        gate.set()
        caller.join(120)
    assert failures == []
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT `sql`, status, phase FROM freshview.views WHERE name = %s", (name,))
        assert cur.fetchone() == (WIDER, "active", None)
    run_transactions(shop, random.Random(10), 20, [3000])
    wait_until_fresh(shop, ["totals"], timeout=120)


def test_an_alter_on_mariadb_starts_from_the_state_it_shares_with_the_old_view(shop, start_service, caplog):
    """A HAVING added to a join + aggregate: the aggregate's state is the old view's (``runtime.reuse``)."""
    import logging

    caplog.set_level(logging.INFO, logger="freshview")
    database = shop["database"]
    name = f"{database}.regional"
    base = ("SELECT c.region, o.customer, COUNT(*) AS n, SUM(o.amount) AS total FROM orders o JOIN customers c "
            "ON o.customer = c.id WHERE o.status <> 'cancelled' GROUP BY c.region, o.customer")
    start_service()
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CALL freshview.create_view(%s, %s)", (name, base))
        run_transactions(shop, random.Random(11), 10, [4000])  # (the old view's state made of steps too)
        cur.execute("CALL freshview.alter_view(%s, %s)", (name, base + " HAVING COUNT(*) > 1"))
    assert "aggregate op" in caplog.text.split("state reused from", 1)[1].split("\n", 1)[0]
    run_transactions(shop, random.Random(12), 20, [5000])
    wait_until_fresh(shop, ["regional"], timeout=120)
