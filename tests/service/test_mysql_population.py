"""End to end on MariaDB: a view populated beside the binlog stream (``service.population``), as on
PostgreSQL (``test_population.py``): held in its first computation while another view keeps being
stepped, its progress in ``freshview.views``, then caught up and equal to MariaDB's answer."""

from __future__ import annotations

import logging
import random
import threading
import time

from freshview.service import loading
from tests.service.test_mysql_service import (  # noqa: F401 - fixtures
    VIEWS, connect, run_transactions, shop, start_service, wait_until_fresh,
)

HELD, PROBE = "order_regions", "event_totals"


def test_a_view_populates_beside_the_binlog_stream(shop, start_service, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="freshview")
    gate, reached = threading.Event(), threading.Event()
    original = loading.compute_first

    def held(flow, view, sql, *args):
        if view.endswith(HELD):
            reached.set()
            assert gate.wait(120)
        return original(flow, view, sql, *args)

    monkeypatch.setattr(loading, "compute_first", held)
    start_service()
    database = shop["database"]
    rng = random.Random(4)
    next_id = [300]
    try:
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CALL freshview.create_view(%s, %s)", (f"{database}.{PROBE}", VIEWS[PROBE]))
            started = time.monotonic()
            cur.execute("CALL freshview.create_view_async(%s, %s)", (f"{database}.{HELD}", VIEWS[HELD]))
            assert time.monotonic() - started < 5, "create_view_async waited for the population"
            assert reached.wait(60)
            deadline = time.monotonic() + 30
            while True:
                cur.execute("SELECT status, phase, rows_read FROM freshview.views WHERE name = %s",
                            (f"{database}.{HELD}",))
                row = cur.fetchone()
                if (row and row[1] == "computing") or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert row == ("populating", "computing", 330), row  # 300 orders + 30 customers read
            cur.execute("SELECT heartbeat_at FROM freshview.progress WHERE source = %s", (database,))
            beat = cur.fetchone()[0]
        run_transactions(shop, rng, 40, next_id)
        wait_until_fresh(shop, [PROBE], timeout=180)  # the other view keeps being stepped meanwhile
        with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT heartbeat_at FROM freshview.progress WHERE source = %s", (database,))
            assert cur.fetchone()[0] > beat
            cur.execute("SELECT status FROM freshview.views WHERE name = %s", (f"{database}.{HELD}",))
            assert cur.fetchone() == ("populating",)
    finally:
        gate.set()
    run_transactions(shop, rng, 20, next_id)
    wait_until_fresh(shop, [PROBE, HELD], timeout=180)
    # written aside by the worker, renamed into place at the join (the changes since written then)
    said = [r.getMessage() for r in caplog.records]
    assert any(f"{HELD}: " in m and "rows written aside" in m for m in said), said
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME LIKE '\\_fv\\_fill\\_%%'", (database,))
        assert cur.fetchone()[0] == 0


def test_tables_written_aside_by_a_stopped_service_are_dropped_when_it_starts(shop, start_service):
    database = shop["database"]
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`._fv_fill_0123456789ab_deadbeef (x int)")  # (a population killed)
        cur.execute(f"CREATE TABLE `{database}`.xfv_fill_kept (x int)")  # not one: LIKE's _ is escaped
    start_service()
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME LIKE '%%fill%%'", (database,))
        assert [r[0] for r in cur.fetchall()] == ["xfv_fill_kept"]


def test_a_view_reading_columns_a_copy_lacks_widens_it_beside_the_binlog_stream(shop, start_service, caplog):
    caplog.set_level(logging.INFO, logger="freshview")
    service = start_service().service
    database = shop["database"]
    with connect(shop, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("CALL freshview.create_view(%s, %s)", (f"{database}.everything", VIEWS["everything"]))
        cur.execute(f"CREATE INDEX by_n ON `{database}`.everything (n)")  # the user's, on its result table
        cur.execute("CALL freshview.create_view(%s, %s)", (f"{database}.customer_totals", VIEWS["customer_totals"]))
        cur.execute("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = 'everything' AND INDEX_NAME = 'by_n'", (database,))
        assert cur.fetchone()[0] == 1  # (its table kept: written by difference)
    assert "status" in service.flow.source_schema(service.names.engine(f"{database}.orders")).names
    said = [r.getMessage() for r in caplog.records]
    assert any(f"view {database}.everything: computed again over the wider copy beside the stream" in m
               for m in said), said
    run_transactions(shop, random.Random(9), 20, [900])
    wait_until_fresh(shop, ["everything", "customer_totals"], timeout=120)
