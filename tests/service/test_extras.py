"""End to end: Prometheus metrics of a running service, who may drop a view, quoted mixed-case names."""

from __future__ import annotations

import time
import urllib.request

import psycopg
import psycopg.conninfo
import pytest
from prometheus_client.parser import text_string_to_metric_families

from freshview.service.metrics import ServiceMetrics
from freshview.service.service import ServiceOptions
from tests.support.service import wait_until_fresh


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_for(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@pytest.mark.parametrize("execution", ["local", "spark"])
def test_metrics_move_after_a_change(database, start_service, execution):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, g text, v int)")
        conn.execute("INSERT INTO t SELECT i, 'g' || (i % 3), i FROM generate_series(1, 30) i")
    metrics = ServiceMetrics()
    server = metrics.serve(0, addr="127.0.0.1")
    port = server.server_port
    try:
        start_service(metrics=metrics, options=ServiceOptions(poll_s=0.05, heartbeat_s=0.2, execution=execution))
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("CALL freshview.create_view('public.sums', 'SELECT g, SUM(v) AS s FROM t GROUP BY g')")
            before = scrape(port)
            retained = ("freshview_source_retained_wal_bytes", (("source", metrics_source(database)),))
            assert wait_for(lambda: retained in scrape(port)), "no retained WAL reported"
            conn.execute("INSERT INTO t VALUES (31, 'g1', 100), (32, 'new', 5)")
            wait_until_fresh(database, ["public.sums"])
            view = (("view", "public.sums"),)
            after = wait_for(lambda: (s := scrape(port)).get(("freshview_view_steps_total", view)) and s)
        assert after, "the view's step was not counted"
        assert after[("freshview_view_steps_total", view)] >= 1 + before.get(("freshview_view_steps_total", view), 0)
        assert after[("freshview_view_rows_in_total", view)] >= 2
        assert after[("freshview_view_rows_out_total", view)] >= 2  # g1 changed (-1 +1) and 'new' appeared
        assert 0 <= after[("freshview_view_lag_seconds", view)] < 60
        assert after[("freshview_view_step_seconds_count", (("executor", execution),))] >= 1
        assert after[("freshview_steps_total", ())] >= 1
        position = wait_for(lambda: scrape(port).get(("freshview_source_position_bytes",
                                                       (("source", metrics_source(database)),))))
        assert position and position > 0
    finally:
        server.shutdown()
        server.server_close()


def metrics_source(dsn: str) -> str:
    from freshview.connectors.postgres.control import slot_name

    return slot_name(dsn)


def as_role(dsn: str, role: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["user"] = role
    return psycopg.conninfo.make_conninfo(**params)


def test_only_the_creator_or_an_administrator_drops_a_view(database, start_service):
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute("CREATE TABLE t (id int PRIMARY KEY, g text)")
        admin.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, NULL)")
        for role in ("fv_alice", "fv_bob", "fv_alice_team"):
            admin.execute(f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN "
                          f"CREATE ROLE {role} LOGIN; END IF; END$$")
        admin.execute("GRANT fv_alice TO fv_alice_team")
        admin.execute("GRANT SELECT ON t TO PUBLIC")
    start_service()
    with psycopg.connect(as_role(database, "fv_alice"), autocommit=True) as alice, \
            psycopg.connect(as_role(database, "fv_bob"), autocommit=True) as bob, \
            psycopg.connect(as_role(database, "fv_alice_team"), autocommit=True) as team, \
            psycopg.connect(database, autocommit=True) as admin:
        for name in ("a1", "a2", "a3"):
            alice.execute(f"CALL freshview.create_view('public.{name}', 'SELECT g, COUNT(*) AS n FROM t GROUP BY g')")
        assert admin.execute("SELECT owner FROM freshview.views WHERE name = 'public.a1'").fetchone()[0] == "fv_alice"
        with pytest.raises(psycopg.errors.RaiseException,
                           match=r"permission denied to drop view public.a1 for role fv_bob: the role that "
                                 r"created it \(fv_alice\)"):
            bob.execute("CALL freshview.drop_view('public.a1')")
        assert admin.execute("SELECT status FROM freshview.views WHERE name = 'public.a1'").fetchone()[0] == "active"
        assert admin.execute("SELECT count(*) FROM public.a1").fetchone()[0] == 3
        alice.execute("CALL freshview.drop_view('public.a1')")  # the creator
        team.execute("CALL freshview.drop_view('public.a2')")  # a member of the creator's role
        admin.execute("CALL freshview.drop_view('public.a3')")  # a superuser
        assert admin.execute("SELECT count(*) FROM freshview.views").fetchone()[0] == 0
        assert admin.execute("SELECT to_regclass('public.a1')").fetchone()[0] is None


QUOTED = r"""
CREATE SCHEMA "Sales";
CREATE TABLE "Sales"."Orders" ("Order Id" int PRIMARY KEY, "Region" text, "Amount" numeric(10,2), plain int);
INSERT INTO "Sales"."Orders" SELECT g, (ARRAY['North','south',NULL])[1 + g % 3], g * 1.5, g % 4
                             FROM generate_series(1, 40) g;
CREATE TABLE lower_case (id int PRIMARY KEY, v int);
INSERT INTO lower_case SELECT g, g % 5 FROM generate_series(1, 20) g;
"""


def test_quoted_mixed_case_names_end_to_end(database, start_service):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(QUOTED)
    start_service()
    views = ['"Sales"."Big Totals"', 'public."Per Region Count"', "public.plain_view", '"Sales".lower_join']
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("""CALL freshview.create_view('"Sales"."Big Totals"', 'SELECT "Region", SUM("Amount") AS "Total", """
                     """COUNT(*) AS n FROM "Sales"."Orders" GROUP BY "Region"', 600)""")
        # a view reading the quoted view (straight from the engine), named without a schema
        conn.execute("""CALL freshview.create_view('"Per Region Count"', 'SELECT COUNT(*) AS "Regions", SUM("Total") """
                     """AS "All" FROM "Sales"."Big Totals"', 600)""")
        conn.execute("CALL freshview.create_view('Plain_View', 'SELECT V, COUNT(*) AS N FROM Lower_Case GROUP BY v', 600)")
        conn.execute("""CALL freshview.create_view('"Sales".lower_join', 'SELECT o."Order Id", l.v FROM "Sales"."Orders" o """
                     """JOIN lower_case l ON o.plain = l.v', 600)""")
        names = [r[0] for r in conn.execute("SELECT name FROM freshview.views ORDER BY created_at")]
        assert names == views
        columns = [r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = "
                                              "'\"Sales\".\"Big Totals\"'::regclass AND attnum > 0 ORDER BY attnum")]
        assert columns == ["Region", "Total", "n"]
        wait_until_fresh(database, views)
        with conn.transaction():
            conn.execute("""INSERT INTO "Sales"."Orders" VALUES (100, 'West', 2.5, 1), (101, NULL, NULL, 2)""")
            conn.execute("""UPDATE "Sales"."Orders" SET "Region" = 'North' WHERE "Order Id" % 3 = 2""")
            conn.execute("""DELETE FROM "Sales"."Orders" WHERE "Order Id" IN (3, 4)""")
            conn.execute("UPDATE lower_case SET v = v + 1 WHERE id < 5")
        wait_until_fresh(database, views)
        assert conn.execute("""SELECT "Total" FROM "Sales"."Big Totals" WHERE "Region" = 'West'""").fetchone()[0] == 2.5
        with pytest.raises(psycopg.errors.RaiseException, match=r'views public."Per Region Count" read "Sales"'):
            conn.execute("""CALL freshview.drop_view('"Sales"."Big Totals"')""")
        for name in reversed(views):
            conn.execute("CALL freshview.drop_view(%s)", (name,))
        assert conn.execute("""SELECT to_regclass('"Sales"."Big Totals"')""").fetchone()[0] is None
        with pytest.raises(psycopg.errors.RaiseException, match="invalid table name"):
            conn.execute("CALL freshview.create_view('bad name', 'SELECT 1 AS x FROM lower_case')")
