"""End to end on MariaDB: ``alter_view`` / ``alter_view_timeout``, under concurrent writes, with a reader that
must never see an empty table or a mix of the two definitions; the same columns keep the table (emptied and
filled in one transaction), other columns swap a new table in by one RENAME TABLE."""

from __future__ import annotations

import random
import threading

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
