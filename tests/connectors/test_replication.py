"""The replication connection against a real server: exported snapshot + stream = history, acks move the slot."""

from __future__ import annotations

import time

import psycopg
import pytest

from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.replication import ReplicationConnection, ReplicationError


@pytest.fixture
def db(pg):
    with psycopg.connect(pg, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS fv_rep")
        c.execute("CREATE TABLE fv_rep (id int PRIMARY KEY, v int)")
        c.execute("INSERT INTO fv_rep SELECT g, g FROM generate_series(1, 100) g")
        c.execute("DROP PUBLICATION IF EXISTS fv_rep_pub")
        c.execute("CREATE PUBLICATION fv_rep_pub FOR TABLE fv_rep")
        yield c
        # A closed replication connection's walsender exits asynchronously: drop the slot once it is released.
        deadline = time.monotonic() + 10.0
        while c.execute("SELECT active FROM pg_replication_slots WHERE slot_name = 'fv_rep_slot'").fetchone() == (True,) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'fv_rep_slot'")
        c.execute("DROP PUBLICATION fv_rep_pub")
        c.execute("DROP TABLE fv_rep")


def test_snapshot_plus_stream_is_exactly_the_history(pg, db):
    with ReplicationConnection(pg) as rep:
        slot = rep.create_slot("fv_rep_slot")
        db.execute("INSERT INTO fv_rep VALUES (101, 101)")          # after the slot: only in the stream
        db.execute("UPDATE fv_rep SET v = -1 WHERE id = 1")
        with psycopg.connect(pg) as snap:                          # import the snapshot before START
            snap.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            snap.execute(f"SET TRANSACTION SNAPSHOT '{slot.snapshot_name}'")
            rows = dict(snap.execute("SELECT id, v FROM fv_rep").fetchall())
            snap.rollback()
        assert len(rows) == 100 and rows[1] == 1 and 101 not in rows
        rep.start("fv_rep_slot", "fv_rep_pub", slot.consistent_point)
        decoder = p.Decoder()
        commits = []
        for _ in range(20):
            for msg in rep.messages(timeout=0.5):
                m = decoder.decode(msg.payload)
                if isinstance(m, p.Insert):
                    rows[int(m.new[0])] = int(m.new[1])
                elif isinstance(m, p.Update):
                    rows[int(m.new[0])] = int(m.new[1])
                elif isinstance(m, p.Commit):
                    commits.append(m.end_lsn)
            if len(commits) == 2:
                break
        assert len(commits) == 2 and rows[101] == 101 and rows[1] == -1
        current = dict(db.execute("SELECT id, v FROM fv_rep").fetchall())
        assert rows == current
        rep.acknowledge(commits[-1])
        # The walsender applies a status update asynchronously: wait (bounded) for it to show.
        deadline = time.monotonic() + 10.0
        while True:
            confirmed = db.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                   "WHERE slot_name = 'fv_rep_slot'").fetchone()[0]
            if p.parse_lsn(str(confirmed)) >= commits[-1] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert p.parse_lsn(str(confirmed)) == commits[-1]


def test_starting_a_missing_slot_fails_clearly(pg, db):
    with ReplicationConnection(pg) as rep:
        with pytest.raises(ReplicationError, match="fv_nope"):
            rep.start("fv_nope", "fv_rep_pub")


def test_snapshot_reader_sees_the_slot_snapshot_in_chunks(pg, db):
    from freshview.connectors.postgres.snapshot import read_table
    from freshview.schema import schema_from_ddl

    with ReplicationConnection(pg) as rep:
        slot = rep.create_slot("fv_rep_slot")
        db.execute("DELETE FROM fv_rep WHERE id > 50")   # after the snapshot: invisible to it
        seen: list[int] = []
        chunks = list(read_table(pg, slot.snapshot_name, "public.fv_rep",
                                 schema_from_ddl("id INT, v INT", ["id"]), chunk_rows=30, progress=seen.append))
        assert [c.num_rows for c in chunks] == [30, 30, 30, 10] and seen == [30, 60, 90, 100]
        assert sum(c.column("_weight").to_pylist().count(1) for c in chunks) == 100
