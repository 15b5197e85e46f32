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


def test_json_array_enum_uuid_inet_tables_through_the_stream(database, start_service):
    """A table of jsonb, json, arrays, an enum, a domain, uuid and inet is snapshotted, then followed through the
    replication stream: result tables (with json, jsonb, array, enum and uuid columns) equal the views' SQL."""
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('zen', 'sad', 'ok', 'happy')")
        conn.execute("CREATE DOMAIN qty AS integer CHECK (VALUE >= 0)")
        conn.execute("""CREATE TABLE items (id int PRIMARY KEY, doc jsonb, raw json, tags text[], nums int[],
                        m mood, q qty, u uuid, ip inet)""")
        conn.execute("""INSERT INTO items SELECT g,
                        jsonb_build_object('kind', (ARRAY['a','b','c'])[1 + g % 3], 'n', g % 4, 'x', ARRAY[g, g % 2]),
                        ('{"k":  ' || (g % 3) || ', "k2": [1, "t"]}')::json,
                        CASE g % 3 WHEN 0 THEN ARRAY['x','y'] WHEN 1 THEN ARRAY['y'] ELSE ARRAY['a b', NULL] END,
                        ARRAY[g % 5, NULL, g % 2], (ARRAY['zen','sad','ok','happy'])[1 + g % 4]::mood, g % 7,
                        md5(g::text)::uuid, ('10.0.' || (g % 3) || '.' || g)::inet
                        FROM generate_series(1, 40) g""")
    start_service()
    views = {
        "public.item_rows": "SELECT id, doc, raw, doc ->> 'kind' AS kind, raw -> 'k2' AS k2, tags, m, u, ip "
                            "FROM items WHERE 'y' = ANY(tags) OR m > 'sad'",
        "public.item_groups": "SELECT m, doc -> 'kind' AS kind, COUNT(*) AS n, SUM(q) AS q, "
                              "jsonb_agg(id ORDER BY id) AS ids, MAX(m) AS top, array_agg(u ORDER BY id) AS us "
                              "FROM items GROUP BY m, doc -> 'kind'",
        "public.item_arrays": "SELECT cardinality(tags) AS c, nums[1] AS first, COUNT(*) AS n, "
                              "json_agg(ip::text ORDER BY id) AS ips FROM items GROUP BY cardinality(tags), nums[1]",
    }
    with psycopg.connect(database, autocommit=True) as conn:
        for name, sql in views.items():
            conn.execute("CALL freshview.create_view(%s, %s)", (name, sql))
        types = dict(conn.execute(
            "SELECT c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid WHERE c.relname LIKE 'item_%' "
            "AND a.attnum > 0 AND NOT a.attisdropped").fetchall())
        assert (types["item_rows.doc"], types["item_rows.raw"], types["item_rows.tags"]) == ("jsonb", "json", "text[]")
        assert (types["item_rows.m"], types["item_rows.u"], types["item_rows.ip"]) == ("mood", "uuid", "inet")
        assert (types["item_groups.ids"], types["item_groups.us"], types["item_arrays.ips"]) == \
            ("jsonb", "uuid[]", "json")
        wait_until_fresh(database, list(views))
        conn.execute("""UPDATE items SET doc = doc || '{"kind": "z", "extra": {"b": 1, "a": [true, null]}}',
                        m = 'happy', tags = tags || ARRAY['y'] WHERE id % 5 = 0""")
        conn.execute("""UPDATE items SET raw = '{"k2"  :  {"b":1,"a":2}}', nums = '{}', ip = '::1' WHERE id % 4 = 1""")
        conn.execute("DELETE FROM items WHERE m = 'zen' AND id % 3 = 0")
        conn.execute("""INSERT INTO items VALUES (100, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
                        (101, '{"kind": "a"}', '[]', '{}', '{7}', 'sad', 0, 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
                         '192.168.0.1/24')""")
        wait_until_fresh(database, list(views))
        assert conn.execute("SELECT raw::text FROM public.item_rows WHERE id = 101").fetchone() is None  # (m = sad)
        row = conn.execute("SELECT raw::text, k2::text FROM public.item_rows WHERE id = 5").fetchone()
        assert row == ('{"k2"  :  {"b":1,"a":2}}', '{"b":1,"a":2}')  # json keeps its text
