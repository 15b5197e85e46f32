"""A time-based view run by the service on PostgreSQL: rows leave the result table as time passes, with no
source change (the loop wakes at the earliest due time and steps with no transaction)."""

from __future__ import annotations

import time

import psycopg

from tests.support.service import wait_for_status

SCHEMA = """
CREATE TABLE ev (id int PRIMARY KEY, ts timestamptz, kind text);
"""


def _rows(conn: psycopg.Connection, sql: str) -> list[tuple]:
    return sorted(conn.execute(sql).fetchall())


def test_rows_leave_the_result_table_as_time_passes(database, start_service):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("INSERT INTO ev VALUES (1, now() - interval '1 hour', 'old'), (2, now() + interval '1 hour', 'b')")
        service = start_service()
        conn.execute("CALL freshview.create_view('public.recent', $$SELECT id, kind FROM ev "
                     "WHERE ts > now() - interval '6 seconds' AND ts <= now()$$)")
        conn.execute("CALL freshview.create_view('public.recent_n', $$SELECT kind, count(*) AS n FROM ev "
                     "WHERE ts > now() - interval '6 seconds' GROUP BY kind$$)")
        assert wait_for_status(conn, "public.recent", "active")[0] == "active"
        assert wait_for_status(conn, "public.recent_n", "active")[0] == "active"
        assert _rows(conn, "SELECT id, kind FROM public.recent") == []
        assert _rows(conn, "SELECT kind, n FROM public.recent_n") == [("b", 1)]
        conn.execute("INSERT INTO ev VALUES (3, now(), 'a'), (4, now() + interval '3 seconds', 'a'), (5, NULL, 'a')")
        inserted = time.monotonic()

        def seen(sql: str, want: list[tuple]) -> float:
            while time.monotonic() < inserted + 40:
                if _rows(conn, sql) == want:
                    return time.monotonic() - inserted
                time.sleep(0.05)
            raise AssertionError(f"{sql}: never {want}, last {_rows(conn, sql)}")

        # row 4 enters when its ts passes (3 s), row 3 leaves 6 s after its ts, row 4 at 9 s: no source change
        assert seen("SELECT id FROM public.recent", [(3,), (4,)]) >= 2.9
        assert seen("SELECT id FROM public.recent", [(4,)]) >= 5.9
        assert seen("SELECT kind, n FROM public.recent_n", [("a", 1), ("b", 1)]) >= 5.9
        assert seen("SELECT id FROM public.recent", []) >= 8.9
        assert seen("SELECT kind, n FROM public.recent_n", [("b", 1)]) >= 8.9
        # PostgreSQL agrees at this moment
        assert _rows(conn, "SELECT id FROM ev WHERE ts > now() - interval '6 seconds' AND ts <= now()") == []
        status = conn.execute("SELECT status FROM freshview.views WHERE name = 'public.recent'").fetchone()
        assert status == ("active",)
    service.stop()
