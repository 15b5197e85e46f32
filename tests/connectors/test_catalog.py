"""Reading source table definitions from PostgreSQL's catalog."""

from __future__ import annotations

import psycopg
import pytest

from freshview.connectors.postgres.catalog import describe_table
from freshview.errors import CatalogError


@pytest.fixture
def conn(pg):
    with psycopg.connect(pg) as c:
        yield c
        c.rollback()


def test_columns_types_key_and_identity(conn):
    conn.execute("CREATE TABLE fv_cat (b int, a bigint, amount numeric(12,3), label varchar(10) NOT NULL, "
                 "at timestamptz, PRIMARY KEY (a, b))")
    conn.execute("ALTER TABLE fv_cat DROP COLUMN at")
    t = describe_table(conn, "fv_cat")
    assert t.name == "public.fv_cat" and t.schema.names == ["b", "a", "amount", "label"]
    assert t.schema.primary_key == ("a", "b") and t.replica_identity == "d"
    assert t.schema.column("amount").type.pg == "numeric(12,3)" and not t.schema.column("label").nullable


def test_tables_freshview_cannot_follow_are_refused_with_the_fix(conn):
    conn.execute("CREATE TABLE fv_nokey (x int)")
    with pytest.raises(CatalogError, match="REPLICA IDENTITY FULL"):
        describe_table(conn, "fv_nokey")
    conn.execute("ALTER TABLE fv_nokey REPLICA IDENTITY FULL")
    assert describe_table(conn, "fv_nokey").has_full_old_rows
    conn.execute("CREATE TABLE fv_json (id int PRIMARY KEY, doc xml)")
    with pytest.raises(CatalogError, match="xml"):
        describe_table(conn, "fv_json")
    from freshview.connectors.postgres.catalog import publishable

    assert publishable(conn, "fv_json")[1:] == ("public.fv_json", False)  # publishing it breaks no write
    conn.execute("CREATE TABLE fv_loose (x int)")
    with pytest.raises(CatalogError, match="REPLICA IDENTITY FULL"):
        publishable(conn, "fv_loose")
    with pytest.raises(CatalogError, match="does not exist"):
        describe_table(conn, "fv_missing")


def test_recheck_finds_a_table_by_oid_and_reads_it_again_only_when_it_changed(conn):
    from freshview.connectors.postgres.catalog import recheck

    conn.execute("CREATE TABLE fv_re (id int PRIMARY KEY, a int)")
    identity = describe_table(conn, "fv_re").identity
    seen: dict = {}
    first = recheck(conn, {"public.fv_re": identity}, seen)["public.fv_re"]
    assert first.name == "public.fv_re" and first.identity == identity and first.refusal is None
    assert recheck(conn, {"public.fv_re": identity}, seen)["public.fv_re"] is first  # unchanged: not read again
    conn.execute("ALTER TABLE fv_re ADD COLUMN b text")
    added = recheck(conn, {"public.fv_re": identity}, seen)["public.fv_re"]
    assert added is not first and list(added.columns) == ["id", "a", "b"]
    conn.execute("ALTER TABLE fv_re RENAME TO fv_re2")
    assert recheck(conn, {"public.fv_re": identity}, seen)["public.fv_re"].name == "public.fv_re2"
    conn.execute("ALTER TABLE fv_re2 REPLICA IDENTITY NOTHING")
    assert "REPLICA IDENTITY NOTHING" in recheck(conn, {"public.fv_re": identity}, seen)["public.fv_re"].refusal
    conn.execute("DROP TABLE fv_re2")
    assert recheck(conn, {"public.fv_re": identity}, seen)["public.fv_re"].name is None


def test_views_and_inheritance_parents_are_read_through_a_definition(conn):
    from freshview.connectors.postgres.catalog import expansion

    conn.execute("CREATE TABLE fv_par (id int PRIMARY KEY, v text)")
    conn.execute("CREATE TABLE fv_kid (extra int) INHERITS (fv_par)")
    conn.execute("CREATE VIEW fv_v AS SELECT id FROM fv_par WHERE v IN ('a', 'b')")
    assert expansion(conn, "public.fv_par") == ("SELECT id, v FROM ONLY public.fv_par UNION ALL "
                                                "SELECT id, v FROM ONLY public.fv_kid")
    assert expansion(conn, "public.fv_kid") is None and expansion(conn, "public.fv_missing") is None
    assert "FROM public.fv_par" in expansion(conn, "public.fv_v") and not expansion(conn, "public.fv_v").endswith(";")
    conn.execute("CREATE TABLE fv_ident (id int NOT NULL, k int NOT NULL, v int)")
    conn.execute("CREATE UNIQUE INDEX fv_ident_k ON fv_ident (k)")
    conn.execute("ALTER TABLE fv_ident REPLICA IDENTITY USING INDEX fv_ident_k")
    assert describe_table(conn, "fv_ident").schema.primary_key == ("k",)  # keyed as the stream sends old keys
    conn.execute("CREATE MATERIALIZED VIEW fv_mv AS SELECT 1 AS one")
    with pytest.raises(CatalogError, match="materialized view: it has no change stream"):
        describe_table(conn, "fv_mv")


def test_json_arrays_enums_domains_uuid_inet_are_described(conn):
    from freshview.schema import SqlType

    conn.execute("CREATE TYPE fv_mood AS ENUM ('zen', 'sad', 'happy')")
    conn.execute("ALTER TYPE fv_mood ADD VALUE 'calm' BEFORE 'sad'")  # declared order, not creation order
    conn.execute("CREATE DOMAIN fv_qty AS numeric(10,2) CHECK (VALUE >= 0)")
    conn.execute("CREATE DOMAIN fv_label AS varchar(20)")
    conn.execute("CREATE TABLE fv_types (id int PRIMARY KEY, j jsonb, js json, u uuid, ip inet, m fv_mood, "
                 "q fv_qty, l fv_label, xs int[], ts text[], ms fv_mood[], qs fv_qty[])")
    types = {c.name: c.type for c in describe_table(conn, "fv_types").schema.columns}
    mood = SqlType.enum_of("fv_mood", ["zen", "calm", "sad", "happy"])
    assert types == {"id": SqlType("int4"), "j": SqlType("jsonb"), "js": SqlType("json"), "u": SqlType("uuid"),
                     "ip": SqlType("inet"), "m": mood, "q": SqlType.numeric(10, 2), "l": SqlType("text"),
                     "xs": SqlType.array(SqlType("int4")), "ts": SqlType.array(SqlType("text")),
                     "ms": SqlType.array(mood), "qs": SqlType.array(SqlType.numeric(10, 2))}
