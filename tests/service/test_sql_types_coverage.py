"""SQL coverage through the service: views created with CALL whose result tables need PostgreSQL types
beyond the scalars (arrays, intervals), kept fresh and checked against PostgreSQL."""

from __future__ import annotations

import psycopg

from tests.support.service import wait_until_fresh


def test_array_agg_and_interval_columns_through_create_view(database, start_service):
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("""CREATE TABLE visits (id int PRIMARY KEY, who text, page text, score int,
                        started timestamp, ended timestamp)""")
        conn.execute("""INSERT INTO visits SELECT g, 'u' || (g % 5), (ARRAY['home','a "q"','x,y',NULL])[1 + g % 4],
                        CASE WHEN g % 6 = 0 THEN NULL ELSE g % 9 END,
                        TIMESTAMP '2024-01-01' + g * interval '7 hours',
                        TIMESTAMP '2024-01-01' + g * interval '7 hours' + (g % 50) * interval '1 day 3 minutes'
                        FROM generate_series(1, 60) g""")
    start_service()
    views = {
        "public.visit_lists": "SELECT who, array_agg(page ORDER BY id) AS pages, array_agg(score ORDER BY id DESC) "
                              "AS scores, max(ended) - min(started) AS span, COUNT(*) AS n FROM visits GROUP BY who",
        "public.visit_lengths": "SELECT id, ended - started AS length, age(ended, started) AS age, "
                                "score * INTERVAL '1 month' AS months FROM visits",
    }
    with psycopg.connect(database, autocommit=True) as conn:
        for name, sql in views.items():
            conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))
        types = dict(conn.execute(
            "SELECT c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid WHERE c.relname IN ('visit_lists', 'visit_lengths') "
            "AND a.attnum > 0 AND NOT a.attisdropped").fetchall())
        assert types["visit_lists.pages"] == "text[]" and types["visit_lists.scores"] == "integer[]"
        assert types["visit_lists.span"] == "interval" and types["visit_lengths.age"] == "interval"
        conn.execute("UPDATE visits SET page = 'moved', score = NULL WHERE id % 7 = 0")
        conn.execute("UPDATE visits SET ended = ended + interval '40 days' WHERE id % 5 = 1")
        conn.execute("DELETE FROM visits WHERE who = 'u3'")
        conn.execute("INSERT INTO visits VALUES (100, 'u9', NULL, NULL, TIMESTAMP '2024-02-29', "
                     "TIMESTAMP '2024-03-31 12:00')")
        wait_until_fresh(database, list(views))
        assert conn.execute("SELECT pages, span FROM public.visit_lists WHERE who = 'u9'").fetchone()[0] == [None]
