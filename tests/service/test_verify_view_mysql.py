"""End to end on MariaDB: ``CALL freshview.verify_view`` (``service.verify``), as on PostgreSQL
(``test_verify_view.py``): equal while the binlog keeps bringing writes, a result table damaged by hand
named row by row, and each step's view columns in ``freshview.views``."""

from __future__ import annotations

import random
import threading

import pymysql
import pytest

from freshview.service.core import ServiceOptions
from tests.service.test_mysql_service import (  # noqa: F401 - fixtures
    VIEWS, connect, create_views, run_transactions, shop, start_service, wait_until_fresh,
)

CHECKED = ("customer_totals", "order_regions", "event_totals")  # grouped, a join (counted), duplicates


def call(cur, statement: str, *args) -> list[tuple]:
    cur.execute(statement, args)
    rows = list(cur.fetchall())
    while cur.nextset():  # a CALL's result sets, then its status
        pass
    return rows


def test_views_verify_equal_under_writes_and_damage_done_by_hand_is_named(shop, start_service):
    start_service(options=ServiceOptions(poll_s=0.05, execution="local"))  # (Spark steps: slow on a busy machine)
    database = shop["database"]
    create_views(shop, {name: VIEWS[name] for name in CHECKED})
    rng, next_id, stop = random.Random(5), [300], threading.Event()

    def writer() -> None:
        while not stop.is_set():
            run_transactions(shop, rng, 3, next_id)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            for name in CHECKED:
                answer = call(cur, "CALL freshview.verify_view(%s)", f"{database}.{name}")
                assert answer and answer[0][0].startswith("equal at "), (name, answer)
    finally:
        stop.set()
        thread.join(60)
    wait_until_fresh(shop, list(CHECKED), timeout=120)
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT verify_result, changes_received > 0, last_step_at IS NOT NULL, executor "
                    "FROM freshview.views WHERE name = %s", (f"{database}.customer_totals",))
        assert cur.fetchone() == ("equal", 1, 1, "local")
        cur.execute("SELECT customer, status, total FROM customer_totals WHERE total IS NOT NULL "
                    "ORDER BY customer, status LIMIT 1")
        customer, status, total = cur.fetchone()
        cur.execute("UPDATE customer_totals SET total = total + 1000 WHERE customer <=> %s AND status = %s",
                    (customer, status))
        cur.execute("INSERT INTO event_totals (_fv_key, kind, qty, n, _fv_count) VALUES (X'00', 'forged', 7, 1, 1)")
        with pytest.raises(pymysql.err.OperationalError) as damaged:
            call(cur, "CALL freshview.verify_view(%s)", f"{database}.customer_totals")
        text = damaged.value.args[1]
        assert f"view {database}.customer_totals differs from its SQL at " in text, text
        assert f"missing from the result table: ({customer if customer is not None else 'NULL'}, " in text, text
        assert f"{total + 1000}" in text, text
        with pytest.raises(pymysql.err.OperationalError, match=r"extra in the result table: +\(forged, 7, 1\)"):
            call(cur, "CALL freshview.verify_view(%s)", f"{database}.event_totals")
        cur.execute("SELECT verify_result, verify_detail FROM freshview.views WHERE name = %s",
                    (f"{database}.event_totals",))
        result, detail = cur.fetchone()
        assert result == "different" and "(forged, 7, 1)" in detail
        with pytest.raises(pymysql.err.OperationalError, match="verify_view takes the view with its database"):
            call(cur, "CALL freshview.verify_view('customer_totals')")
