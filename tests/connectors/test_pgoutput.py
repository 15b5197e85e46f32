"""The pgoutput decoder and value conversion on messages from a real PostgreSQL.

Payloads come from ``pg_logical_slot_get_binary_changes`` (the same bytes the
walsender streams), so the decoder is tested without a replication socket.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import psycopg
import pytest

from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.types import sql_type, to_arrow


@pytest.fixture
def conn(pg):
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute("DROP PUBLICATION IF EXISTS fv_test_pub")
        c.execute("DROP TABLE IF EXISTS fv_items")
        c.execute("CREATE TABLE fv_items (id int PRIMARY KEY, amount numeric(10,2), note text, "
                  "at timestamptz, day date, ok bool, f float8, big text)")
        c.execute("CREATE PUBLICATION fv_test_pub FOR TABLE fv_items")
        c.execute("SELECT pg_create_logical_replication_slot('fv_test_slot', 'pgoutput')")
        try:
            yield c
        finally:
            c.execute("SELECT pg_drop_replication_slot('fv_test_slot')")
            c.execute("DROP PUBLICATION fv_test_pub")
            c.execute("DROP TABLE fv_items")


def changes(conn, *options: str) -> list:
    opts = ", ".join(f"'{o}'" for o in ("proto_version", "2", "publication_names", "fv_test_pub") + options)
    rows = conn.execute(f"SELECT data FROM pg_logical_slot_get_binary_changes('fv_test_slot', NULL, NULL, {opts})")
    decoder = p.Decoder()
    return [decoder.decode(bytes(r[0])) for r in rows]


def test_insert_update_delete_truncate_round_trip(conn):
    conn.execute("INSERT INTO fv_items VALUES (1, 12.50, 'a', '2024-01-01 10:00+02', '2024-02-29', true, 1.5, "
                 "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g)), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    conn.execute("UPDATE fv_items SET amount = 13 WHERE id = 1")
    conn.execute("ALTER TABLE fv_items REPLICA IDENTITY FULL")
    conn.execute("UPDATE fv_items SET id = 3 WHERE id = 2")
    conn.execute("DELETE FROM fv_items WHERE id = 3")
    conn.execute("TRUNCATE fv_items")
    msgs = changes(conn)
    kinds = [type(m).__name__ for m in msgs]
    assert kinds.count("Begin") == kinds.count("Commit") == 5
    rel = next(m for m in msgs if isinstance(m, p.Relation))
    assert rel.qualified_name == "public.fv_items" and [c.name for c in rel.columns][:3] == ["id", "amount", "note"]
    assert rel.columns[0].is_key and sql_type(rel.columns[1].type_oid, rel.columns[1].type_modifier).pg == "numeric(10,2)"
    inserts = [m for m in msgs if isinstance(m, p.Insert)]
    assert inserts[0].new[:3] == ["1", "12.50", "a"] and inserts[1].new == [ "2"] + [None] * 7
    updates = [m for m in msgs if isinstance(m, p.Update)]
    assert updates[0].old is None and updates[0].new[1] == "13.00"
    assert updates[0].new[7] is p.UNCHANGED_TOAST  # the big TOASTed text did not change, so it is not sent
    assert updates[1].old is not None and not updates[1].old_is_key_only and updates[1].old[0] == "2"
    delete = next(m for m in msgs if isinstance(m, p.Delete))
    assert delete.old[0] == "3" and not delete.old_is_key_only
    trunc = next(m for m in msgs if isinstance(m, p.Truncate))
    assert [r.name for r in trunc.relations] == ["fv_items"]
    commits = [m for m in msgs if isinstance(m, p.Commit)]
    assert all(c.end_lsn >= c.commit_lsn for c in commits)
    assert p.parse_lsn(p.format_lsn(commits[-1].end_lsn)) == commits[-1].end_lsn


def test_large_transactions_are_streamed(conn):
    conn.execute("SET logical_decoding_work_mem = '64kB'")
    with conn.transaction():
        conn.execute("INSERT INTO fv_items (id, note) SELECT g, md5(g::text) FROM generate_series(1, 3000) g")
    msgs = changes(conn, "streaming", "on")
    assert any(isinstance(m, p.StreamStart) for m in msgs)
    commit = [m for m in msgs if isinstance(m, p.StreamCommit)]
    assert len(commit) == 1
    streamed = [m for m in msgs if isinstance(m, p.Insert)]
    assert len(streamed) == 3000 and all(m.xid == commit[0].xid for m in streamed)


def test_text_values_convert_to_arrow():
    from freshview.schema import SqlType

    assert to_arrow(["1", None, "-7"], SqlType("int8")).to_pylist() == [1, None, -7]
    assert to_arrow(["12.50", None], SqlType.numeric(10, 2)).to_pylist() == [Decimal("12.50"), None]
    assert to_arrow(["t", "f", None], SqlType("bool")).to_pylist() == [True, False, None]
    assert to_arrow(["2024-02-29"], SqlType("date")).to_pylist() == [dt.date(2024, 2, 29)]
    got = to_arrow(["2024-01-01 10:00:00+02", "2024-01-01 10:00:00.5-03:30"], SqlType("timestamptz")).to_pylist()
    assert got[0] == dt.datetime(2024, 1, 1, 8, tzinfo=dt.timezone.utc)
    assert got[1] == dt.datetime(2024, 1, 1, 13, 30, 0, 500000, tzinfo=dt.timezone.utc)
    assert to_arrow(["NaN", "1.5", "-Infinity"], SqlType("float8")).to_pylist()[1:] == [1.5, float("-inf")]
