"""Repairs: a lost replication slot (dropped or invalidated) and a lost state directory.

Each leads to the same remedy, rebuilding the views from a new snapshot, and
must end with result tables equal to the views' SQL.
"""

from __future__ import annotations

import random
import shutil
import threading
import time

import psycopg

from tests.service.test_service import SCHEMA, VIEWS, create_views, random_transaction
from tests.support.service import wait_until_fresh

RECOVERY_VIEWS = {k: VIEWS[k] for k in ("public.customer_totals", "public.region_revenue", "public.event_totals")}


def _prepare(dsn: str, start_service, state):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    service = start_service(state)
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_views(conn, RECOVERY_VIEWS)
    wait_until_fresh(dsn, list(RECOVERY_VIEWS))
    return service


def test_a_dropped_slot_rebuilds_the_views(database, start_service, tmp_path):
    service = _prepare(database, start_service, tmp_path / "state")
    slot = service.service.slot
    service.stop()
    rng, next_id = random.Random(1), [600]
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        for _ in range(30):
            random_transaction(conn, rng, next_id)
    start_service(tmp_path / "state")
    wait_until_fresh(database, list(RECOVERY_VIEWS))
    with psycopg.connect(database, autocommit=True) as conn:
        for _ in range(30):
            random_transaction(conn, rng, next_id)
    wait_until_fresh(database, list(RECOVERY_VIEWS))


def test_a_lost_state_directory_rebuilds_the_views(database, start_service, tmp_path):
    service = _prepare(database, start_service, tmp_path / "state")
    service.stop()
    shutil.rmtree(tmp_path / "state")
    rng, next_id = random.Random(2), [600]
    with psycopg.connect(database, autocommit=True) as conn:
        for _ in range(30):
            random_transaction(conn, rng, next_id)
    start_service(tmp_path / "state")
    with psycopg.connect(database, autocommit=True) as conn:
        for _ in range(30):
            random_transaction(conn, rng, next_id)
    wait_until_fresh(database, list(RECOVERY_VIEWS))


def test_an_invalidated_slot_is_detected_and_the_views_rebuilt(database, start_service, tmp_path):
    service = _prepare(database, start_service, tmp_path / "state")
    slot = service.service.slot
    service.stop()
    rng, next_id = random.Random(3), [600]
    with psycopg.connect(database, autocommit=True) as conn:
        try:
            conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
            conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.5)
            for _ in range(20):
                random_transaction(conn, rng, next_id)
            conn.execute("CREATE TABLE filler (x text)")  # not followed: just WAL
            for _ in range(6):  # the slot falls further behind than 1MB allows
                conn.execute("INSERT INTO filler SELECT repeat(md5(g::text), 30) FROM generate_series(1, 20000) g")
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                status = conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                                      (slot,)).fetchone()[0]
                if status == "lost":
                    break
            assert status == "lost", status
        finally:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")
    start_service(tmp_path / "state")
    with psycopg.connect(database, autocommit=True) as conn:
        for _ in range(20):
            random_transaction(conn, rng, next_id)
        assert conn.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0] != "lost"
    wait_until_fresh(database, list(RECOVERY_VIEWS))


def test_a_slot_lost_while_streaming_rebuilds_the_views(database, start_service, tmp_path, caplog):
    """The running service's slot is dropped under it (its walsender terminated first): the reconnect
    finds the position lost, the views go ``rebuilding``, are rebuilt from a new snapshot, and stay
    equal to their SQL through the changes made meanwhile and after."""
    service = _prepare(database, start_service, tmp_path / "state")
    slot = service.service.slot
    rng, next_id = random.Random(4), [600]
    with psycopg.connect(database, autocommit=True) as conn:
        for _ in range(10):
            random_transaction(conn, rng, next_id)
        wait_until_fresh(database, list(RECOVERY_VIEWS))
        caplog.set_level("WARNING", logger="freshview.service")
        # The service reconnects at once: hold its reconnect until the slot is gone (its walsender is
        # terminated and waited for, then the slot dropped), so the drop never races the reconnect.
        core = service.service
        gate, original = threading.Event(), core._ride_out

        def held_reconnect(kind, exc):
            gate.wait(60)
            original(kind, exc)

        core._ride_out = held_reconnect
        try:
            for _ in range(100):
                try:
                    conn.execute("SELECT pg_terminate_backend(active_pid, 5000), pg_drop_replication_slot(slot_name) "
                                 "FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                    break
                except psycopg.errors.ObjectInUse:
                    time.sleep(0.05)
            else:
                raise AssertionError("the slot could not be dropped")
        finally:
            gate.set()
            core._ride_out = original
        for _ in range(20):  # while the slot is gone
            random_transaction(conn, rng, next_id)
        wait_until_fresh(database, list(RECOVERY_VIEWS))
        assert any("rebuilding every view" in r.getMessage() and "is gone" in r.getMessage()
                   for r in caplog.records)
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0] == 1
        for _ in range(20):
            random_transaction(conn, rng, next_id)
    wait_until_fresh(database, list(RECOVERY_VIEWS))
    assert service.thread.is_alive()
