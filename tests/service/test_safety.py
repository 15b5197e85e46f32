"""Safe beside a production database (PostgreSQL): no request stops the service, every relation kind is
handled on purpose, and no DDL leaves a view ``active`` and wrong.  The MariaDB side is in
``test_mysql_service.py``."""

from __future__ import annotations

import time

import psycopg
import pytest

from freshview.service import catalog
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
    ("SELECT a FROM jsonb_to_recordset('[]') AS g(a int)", "jsonb_to_recordset(...) in FROM is not supported"),
    ("SELECT id FROM t WHERE EXISTS (WITH w AS (SELECT id FROM t) SELECT 1 FROM w WHERE w.id = t.id AND w.nope)",
     "unknown column 'w.nope'"),
    ("SELECT id FROM t TABLESAMPLE SYSTEM (50)", "TABLESAMPLE is not supported"),
    ("SELECT id, random() AS r FROM t", "random() is not supported"),
    ("SELECT id, now() AS r FROM t", "now() in the SELECT list cannot be scheduled"),
    ("SELECT boom FROM t", "failed with an internal error (IndexError: injected)"),
]


def test_malformed_requests_are_answered_and_the_service_goes_on(db, start_service, monkeypatch):
    real = catalog.compile_view

    def compile_view(sql, *args, **kwargs):  # a bug in the front end, as the zero-column select was one
        if "boom" in sql:
            raise IndexError("injected")
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(catalog, "compile_view", compile_view)
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


KINDS = """
CREATE TABLE pt (id int, region text, amount int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE pt_north PARTITION OF pt FOR VALUES IN ('north');
CREATE TABLE pt_rest PARTITION OF pt DEFAULT;
INSERT INTO pt SELECT g, (ARRAY['north', 'south', 'east'])[1 + g % 3], g FROM generate_series(1, 30) g;
CREATE TABLE pt_nokey (id int, v int) PARTITION BY RANGE (id);
CREATE TABLE pt_nokey_1 PARTITION OF pt_nokey FOR VALUES FROM (0) TO (100);
INSERT INTO pt_nokey VALUES (1, 1);
CREATE TABLE parent (id int PRIMARY KEY, v int);
CREATE TABLE child (note text, PRIMARY KEY (id)) INHERITS (parent);
CREATE TABLE loose_child () INHERITS (parent);
INSERT INTO parent SELECT g, g % 4 FROM generate_series(1, 10) g;
INSERT INTO child SELECT g, g % 4, 'c' FROM generate_series(11, 20) g;
INSERT INTO loose_child SELECT g, g % 4 FROM generate_series(21, 25) g;
CREATE VIEW north AS SELECT id, amount FROM pt WHERE region IN ('north', 'east');
CREATE VIEW series AS SELECT a AS g FROM jsonb_to_recordset('[{"a": 1}]') AS r(a int);
CREATE MATERIALIZED VIEW mv AS SELECT region, sum(amount) AS s FROM pt GROUP BY region;
CREATE FOREIGN DATA WRAPPER fv_test_fdw;
CREATE SERVER fv_test_server FOREIGN DATA WRAPPER fv_test_fdw;
CREATE FOREIGN TABLE ft (id int) SERVER fv_test_server;
"""


def test_each_relation_kind_is_followed_or_refused_on_purpose(db, start_service):
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(KINDS)
    service = start_service()
    views = {
        "public.by_region": "SELECT region, count(*) AS n, sum(amount) AS total FROM pt GROUP BY region",
        "public.north_totals": "SELECT count(*) AS n, sum(amount) AS total FROM north",
        "public.only_parent": "SELECT v, count(*) AS n FROM ONLY parent GROUP BY v",
    }
    with psycopg.connect(db, autocommit=True) as conn:
        refusals = {
            "SELECT v, count(*) AS n FROM parent GROUP BY v":
                "public.loose_child has no primary key and REPLICA IDENTITY is not FULL",
            "SELECT id FROM pt_nokey": "partitioned table public.pt_nokey has no primary key",
            "SELECT id FROM pt_north": "public.pt_north is a partition of public.pt: read public.pt instead",
            "SELECT region FROM mv": "public.mv is a materialized view: it has no change stream",
            "SELECT id FROM ft": "public.ft is a foreign table: it has no change stream",
            "SELECT g FROM series": "series is read through its definition, where function jsonb_to_recordset(...) in FROM",
        }
        for sql, message in refusals.items():
            error = refused(conn, "public.refused", sql)
            assert message in error, (sql, error)
            if "FROM mv" in sql or "FROM series" in sql:
                assert "REPLICA IDENTITY" not in error, error  # the old advice PostgreSQL rejects for a view
        # none of them joined the publication: the application's writes on them still work
        conn.execute("UPDATE loose_child SET v = v + 1")
        conn.execute("UPDATE pt_nokey SET v = 2")
        assert conn.execute("SELECT count(*) FROM pg_publication_tables WHERE pubname = 'freshview'").fetchone()[0] == 0
        for name, sql in views.items():
            conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))
        conn.execute("ALTER TABLE loose_child REPLICA IDENTITY FULL")  # the fix the refusal gave
        views["public.family"] = "SELECT v, count(*) AS n, sum(id) AS ids FROM parent GROUP BY v"
        conn.execute("CALL freshview.create_view('public.family', %s)", (views["public.family"],))
        published = {r[0] for r in conn.execute("SELECT tablename FROM pg_publication_tables WHERE pubname = "
                                                "'freshview'")}
        assert published == {"pt", "parent", "child", "loose_child"}, published  # the root, and each table alone
        conn.execute("INSERT INTO pt VALUES (100, 'north', 7), (101, 'west', 8)")
        conn.execute("UPDATE pt SET region = 'north' WHERE id = 2")  # moves a row to another partition
        conn.execute("UPDATE pt SET amount = amount * 2 WHERE id % 4 = 0")
        conn.execute("DELETE FROM pt WHERE id = 5")
        conn.execute("INSERT INTO parent VALUES (50, 1)")
        conn.execute("INSERT INTO child VALUES (51, 2, 'x')")
        conn.execute("UPDATE child SET v = 9 WHERE id = 12")
        conn.execute("UPDATE loose_child SET v = 8 WHERE id = 22")
        conn.execute("DELETE FROM loose_child WHERE id = 23")
        conn.execute("UPDATE parent SET v = 7 WHERE id < 4")  # parent and children: UPDATE of the whole family
        conn.execute("DELETE FROM parent WHERE id = 15")
        wait_until_fresh(db, list(views))
        # the family changes: the view over the parent is read anew, its new definition followed
        conn.execute("CREATE TABLE child3 (PRIMARY KEY (id)) INHERITS (parent)")
        conn.execute("INSERT INTO child3 VALUES (60, 1), (61, 2)")
        conn.execute("ALTER TABLE child NO INHERIT parent")
        wait_until_fresh(db, list(views))
        conn.execute("UPDATE child3 SET v = 5")
        conn.execute("UPDATE child SET v = 6")  # no longer in the family
        wait_until_fresh(db, list(views))
    assert service.thread.is_alive()


def ddl_table(conn: psycopg.Connection, name: str, extra: str = "") -> None:
    conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, a int, b text, c int{extra})")
    conn.execute(f"INSERT INTO {name} SELECT g, g % 4, 'b' || g, g FROM generate_series(1, 12) g")


def test_every_alter_table_keeps_the_views_right_or_fails_them_naming_it(db, start_service):
    from freshview.service.service import ServiceOptions

    failing = {  # table -> (DDL, what the error must say); each view reads id, a and b of its table
        "f_drop": ("ALTER TABLE f_drop DROP COLUMN a", "column a of public.f_drop was dropped"),
        "f_type": ("ALTER TABLE f_type ALTER COLUMN a TYPE bigint",
                   "column a of public.f_type changed type from integer to bigint"),
        "f_nothing": ("ALTER TABLE f_nothing REPLICA IDENTITY NOTHING", "has REPLICA IDENTITY NOTHING"),
        "f_nokey": ("ALTER TABLE f_nokey DROP CONSTRAINT f_nokey_pkey",
                    "no primary key and REPLICA IDENTITY is not FULL"),
        "f_dropped": ("DROP TABLE f_dropped", "public.f_dropped no longer exists"),
    }
    renamed = {  # table -> (DDL, its name after): the views keep running, their SQL rewritten to the new names
        "r_col": ("ALTER TABLE r_col RENAME COLUMN b TO bb", "r_col"),
        "r_table": ("ALTER TABLE r_table RENAME TO r_renamed", "r_renamed"),
        "r_idle": ("ALTER TABLE r_idle RENAME TO r_idle_renamed", None),  # no change after it
        "r_schema": ("ALTER TABLE r_schema SET SCHEMA other", "other.r_schema"),
    }
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA other")
        for table in [*failing, *renamed, "kept"]:
            ddl_table(conn, table)
        conn.execute("CREATE TABLE kp (id int, region text, v int, PRIMARY KEY (id, region)) "
                     "PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE kp_a PARTITION OF kp FOR VALUES IN ('a')")
        conn.execute("CREATE TABLE kp_b PARTITION OF kp FOR VALUES IN ('b')")
        conn.execute("INSERT INTO kp SELECT g, (ARRAY['a', 'b'])[1 + g % 2], g FROM generate_series(1, 10) g")
    start_service(options=ServiceOptions(poll_s=0.05, catalog_check_s=0.3))
    views = {f"public.v_{t}": f"SELECT a, count(*) AS n, max(b) AS b, sum(id) AS ids FROM {t} GROUP BY a"
             for t in [*failing, *renamed, "kept"]}
    views["public.v_kept_rows"] = "SELECT id, a FROM kept WHERE a > 0"
    views["public.v_kp"] = "SELECT region, count(*) AS n, sum(v) AS v FROM kp GROUP BY region"
    with psycopg.connect(db, autocommit=True) as conn:
        for name, sql in views.items():
            conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))
        # Changes the views do not depend on: each is followed (anew where the engine's copy needs it), the views
        # stay right through them and through the changes after each.
        for n, ddl in enumerate([
            "ALTER TABLE kept ADD COLUMN d int",
            "ALTER TABLE kept ADD COLUMN e text NOT NULL DEFAULT 'e'",
            "ALTER TABLE kept DROP COLUMN c",  # a column no view reads
            "ALTER TABLE kept ALTER COLUMN d TYPE bigint",
            "ALTER TABLE kept RENAME COLUMN e TO e2",
            "ALTER TABLE kept ALTER COLUMN b SET NOT NULL",
            "ALTER TABLE kept ALTER COLUMN b DROP NOT NULL",
            "ALTER TABLE kept ADD CONSTRAINT a_small CHECK (a < 100)",
            "ALTER TABLE kept DROP CONSTRAINT a_small",
            "ALTER TABLE kept REPLICA IDENTITY FULL",
            "ALTER TABLE kept DROP CONSTRAINT kept_pkey, ADD PRIMARY KEY (id, a)",
            "ALTER TABLE kept REPLICA IDENTITY DEFAULT",
            "ALTER TABLE kept ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE kept DISABLE ROW LEVEL SECURITY",
        ]):
            conn.execute(ddl)
            conn.execute("INSERT INTO kept (id, a, b) VALUES (%s, %s, 'new')", (100 + n, n % 3))
            conn.execute("UPDATE kept SET a = a + 1, b = b || 'u' WHERE id = %s", (1 + n,))
            conn.execute("DELETE FROM kept WHERE id = %s", (12 - n % 5,))
        conn.execute("CREATE TABLE kp_c (LIKE kp)")
        conn.execute("INSERT INTO kp_c VALUES (50, 'c', 5), (51, 'c', 6)")
        conn.execute("ALTER TABLE kp ATTACH PARTITION kp_c FOR VALUES IN ('c')")  # rows appear without DML
        conn.execute("ALTER TABLE kp DETACH PARTITION kp_a")  # rows vanish without DML
        conn.execute("UPDATE kp SET v = v + 1 WHERE id < 4")
        kept = ["public.v_kept", "public.v_kept_rows", "public.v_kp"]
        wait_until_fresh(db, kept)
        for table, (ddl, after) in renamed.items():
            conn.execute(ddl)
            if after is not None:
                conn.execute(f"INSERT INTO {after} VALUES (99, 1, 'x', 5)")
                conn.execute(f"UPDATE {after} SET a = a + 1 WHERE id < 4")
        deadline = time.monotonic() + 60
        while True:  # each view's stored SQL rewritten to the new names once the service has seen the DDL
            sql = dict(conn.execute("SELECT name, sql FROM freshview.views").fetchall())
            if "bb" in sql["public.v_r_col"] and "r_renamed" in sql["public.v_r_table"] and \
                    "r_idle_renamed" in sql["public.v_r_idle"] and "other.r_schema" in sql["public.v_r_schema"]:
                break
            assert time.monotonic() < deadline, sql
            time.sleep(0.1)
        wait_until_fresh(db, [f"public.v_{t}" for t in renamed])  # active, equal to their rewritten SQL
        for table, (ddl, message) in failing.items():
            conn.execute(ddl)
            if table not in ("f_dropped", "f_nothing", "f_nokey"):
                conn.execute(f"INSERT INTO {table} (id) VALUES (99)")
            status, error = wait_for_status(conn, f"public.v_{table}", "failed")
            assert status == "failed" and message in error, (table, error)
            assert error.startswith("freshview: ") and f"CALL freshview.alter_view('public.v_{table}', ...)" in error or \
                "can no longer be followed" in error, error
        for table in ("f_nothing", "f_nokey"):  # out of the publication: the application's writes work again
            deadline = time.monotonic() + 30
            while conn.execute("SELECT count(*) FROM pg_publication_tables WHERE pubname = 'freshview' AND "
                               "tablename = %s", (table,)).fetchone()[0]:
                assert time.monotonic() < deadline, f"{table} stayed in the publication"
                time.sleep(0.1)
            conn.execute(f"UPDATE {table} SET a = 0")
        conn.execute("UPDATE kept SET a = 3 WHERE id < 6")
        wait_until_fresh(db, kept)
