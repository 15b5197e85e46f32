"""A result table changed by hand so that it refuses rows (a CHECK constraint, the table dropped) stops its
view alone with status ``sink error`` and the database's message; the other views and the service go on,
and the view is rebuilt into a new table after ``sink_retry_s`` (PostgreSQL; ``sink_errors``).  Before,
the service died on the first refused row and every view stopped with it."""

from __future__ import annotations

import time

import psycopg

from freshview.service.sink_errors import SinkErrors, message
from freshview.service.service import ServiceOptions
from tests.support.service import wait_for_status

A = "SELECT k, sum(v) AS s FROM t GROUP BY k"
B = "SELECT id, v FROM t"


def _equal(conn: psycopg.Connection, table: str, sql: str, timeout: float = 30.0) -> None:
    """The result table (its rows repeated by ``_fv_count`` where it has one) equals the SQL's answer."""
    deadline = time.monotonic() + timeout
    while True:
        cur = conn.execute(f"SELECT * FROM {table}")
        names = [d.name for d in cur.description]
        got = sorted((tuple(v for n, v in zip(names, row) if not n.startswith("_fv_"))
                      for row in cur.fetchall() for _ in range(dict(zip(names, row)).get("_fv_count", 1))), key=repr)
        want = sorted(conn.execute(sql).fetchall(), key=repr)
        if got == want:
            return
        assert time.monotonic() < deadline, f"{table}: {got} != {want}"
        time.sleep(0.1)


def test_the_retry_schedule_is_pure():
    errors = SinkErrors(retry_s=5)
    errors.stopped(["public.a", "public.r"], now=100.0)
    assert errors.take_due(104.9) == []
    assert errors.take_due(105.0) == ["public.a", "public.r"] and errors.take_due(1e9) == []
    errors.found_at_start([("public.a", "SELECT 1", "sink error"), ("public.b", "SELECT 1", "failed")])
    assert errors.take_due(0.0) == ["public.a"]
    assert message("freshview: the result table public.a refused a step's rows: x", 5).endswith(
        "this one is rebuilt into a new table in 5 s (to keep the table as it is: CALL freshview.drop_view)")


def test_a_result_table_that_refuses_rows_stops_its_view_alone_which_is_rebuilt(database, start_service):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, k int, v int)")
        conn.execute("INSERT INTO t VALUES (1, 1, 1), (2, 2, 2), (3, NULL, 3)")
        service = start_service(options=ServiceOptions(poll_s=0.05, sink_retry_s=2.0))
        conn.execute("CALL freshview.create_view('public.a', $$" + A + "$$)")
        conn.execute("CALL freshview.create_view('public.b', $$" + B + "$$)")
        conn.execute("CALL freshview.create_view('public.r', $$SELECT count(*) AS n FROM public.a$$)")  # reads a
        conn.execute("ALTER TABLE public.a ADD CONSTRAINT small CHECK (s < 100)")
        conn.execute("INSERT INTO t VALUES (4, 1, 500), (5, 5, 5)")
        status, error = wait_for_status(conn, "public.a", "sink error", timeout=30)
        assert status == "sink error", error
        assert "the result table public.a refused a step's rows" in error and '"small"' in error
        assert "rebuilt into a new table in 2 s" in error
        assert conn.execute("SELECT status FROM freshview.views WHERE name = 'public.r'").fetchone()[0] in (
            "sink error", "rebuilding", "active")  # (stopped with it, then rebuilt with it)
        _equal(conn, "public.b", B)  # the other view went on, with the step that a refused
        conn.execute("UPDATE t SET v = v + 1 WHERE id = 2")
        _equal(conn, "public.b", B)
        # after the wait: rebuilt into a new table (without the constraint), then maintained again
        assert wait_for_status(conn, "public.a", "active", timeout=60)[0] == "active"
        assert wait_for_status(conn, "public.r", "active", timeout=60)[0] == "active"
        _equal(conn, "public.a", A)
        conn.execute("INSERT INTO t VALUES (6, 2, 1000)")
        _equal(conn, "public.a", A)
        _equal(conn, "public.r", "SELECT count(*) FROM (" + A + ") q")
        # the table dropped by hand: the same, and the table is back
        conn.execute("DROP TABLE public.a CASCADE")
        conn.execute("DELETE FROM t WHERE id = 6")
        status, error = wait_for_status(conn, "public.a", "sink error", timeout=30)
        assert status == "sink error" and "does not exist" in error, error
        assert wait_for_status(conn, "public.a", "active", timeout=60)[0] == "active"
        _equal(conn, "public.a", A)
        _equal(conn, "public.b", B)
    assert service.error is None
    service.stop()
