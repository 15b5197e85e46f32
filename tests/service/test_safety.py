"""Safe beside a production database (PostgreSQL): no request stops the service, every relation kind is
handled on purpose, and no DDL leaves a view ``active`` and wrong.  The MariaDB side is in
``test_mysql_service.py``."""

from __future__ import annotations

import psycopg
import pytest

from freshview.service import requests
from tests.support.service import wait_for_status, wait_until_fresh

SCHEMA = """
CREATE TABLE t (id int PRIMARY KEY, a int, b text);
INSERT INTO t SELECT g, g % 5, 'b' || (g % 3) FROM generate_series(1, 30) g;
"""


@pytest.fixture
def db(database: str) -> str:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(SCHEMA)
    return database


def refused(conn: psycopg.Connection, name: str, sql: str) -> str:
    with pytest.raises(psycopg.errors.RaiseException) as info:
        conn.execute("CALL freshview.create_view(%s, %s, 30)", (name, sql))
    return str(info.value)


MALFORMED = [
    ("SELECT FROM t", "a SELECT list with no columns is not supported"),
    ("SELECT g FROM generate_series(1, 10) g", "set-returning functions in FROM are not supported"),
    ("SELECT id FROM t WHERE EXISTS (WITH w AS (SELECT id FROM t) SELECT 1 FROM w WHERE w.id = t.id AND w.nope)",
     "unknown column 'w.nope'"),
    ("SELECT t.id FROM (t JOIN t u ON t.id = u.id) JOIN t w ON w.id = t.id", "a parenthesised join in FROM"),
    ("SELECT id FROM t TABLESAMPLE SYSTEM (50)", "TABLESAMPLE is not supported"),
    ("SELECT id, random() AS r FROM t", "random() is not supported"),
    ("SELECT id, now() AS r FROM t", "now() / current_timestamp is not supported"),
    ("SELECT boom FROM t", "failed with an internal error (IndexError: injected)"),
]


def test_malformed_requests_are_answered_and_the_service_goes_on(db, start_service, monkeypatch):
    real = requests.build_plan

    def build_plan(sql, *args, **kwargs):  # a bug in the front end, as the zero-column select was one
        if "boom" in sql:
            raise IndexError("injected")
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(requests, "build_plan", build_plan)
    service = start_service()
    with psycopg.connect(db, autocommit=True) as conn:
        for n, (sql, message) in enumerate(MALFORMED):
            error = refused(conn, f"public.bad{n}", sql)
            assert message in error, (sql, error)
            assert "Traceback" not in error
        assert conn.execute("SELECT count(*) FROM freshview.views").fetchone()[0] == 0
        failed = conn.execute("SELECT count(*) FROM freshview.requests WHERE state = 'failed' AND error LIKE "
                              "'freshview: %'").fetchone()[0]
        assert failed == len(MALFORMED)  # each failure is recorded with its message
        conn.execute("CALL freshview.create_view('public.fine', 'SELECT a, count(*) AS n FROM t GROUP BY a')")
        conn.execute("UPDATE t SET a = 7 WHERE id < 4")
        wait_until_fresh(db, ["public.fine"])
    assert service.thread.is_alive()


def test_a_request_that_stopped_the_service_is_retried_once_then_failed(db, start_service):
    with psycopg.connect(db, autocommit=True) as conn:  # two requests a dead service was working on
        for name, attempts in (("public.once", 1), ("public.twice", 2)):
            conn.execute("INSERT INTO freshview.requests (action, name, sql, state, attempts) "
                         "VALUES ('create', %s, 'SELECT id FROM t', 'running', %s)", (name, attempts))
        start_service()
        rows = {r[0]: r[1:] for r in conn.execute("SELECT name, state, error, attempts FROM freshview.requests")}
        assert rows["public.twice"] == ("failed", "freshview: this request stopped the service; not retried", 2)
        status, _ = wait_for_status(conn, "public.once", "active")
        assert status == "active"
        assert conn.execute("SELECT state, attempts FROM freshview.requests WHERE name = 'public.once'"
                            ).fetchone() == ("done", 2)
        assert conn.execute("SELECT to_regclass('public.twice')").fetchone()[0] is None
