"""The snapshot reader against a real server: every row of the snapshot exactly once, serial or in parallel."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Iterator, NamedTuple

import psycopg
import pytest
from psycopg import sql

from freshview.connectors.postgres import snapshot
from freshview.connectors.postgres.replication import ReplicationConnection
from freshview.connectors.postgres.snapshot import read_table
from freshview.schema import schema_from_ddl

TABLE = "public.fv_snap"
SCHEMA = schema_from_ddl("id INT, v INT, t TEXT", ["id"])
ROWS = 50_000
MIN_PAGES = 100  # the table has ~900 pages: far above this, so workers > 1 take the parallel path


class Snap(NamedTuple):
    snapshot_name: str
    expected: Counter  # the table's rows as of the snapshot


@pytest.fixture(scope="module")
def snap(pg: str) -> Iterator[Snap]:
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS fv_snap")
        db.execute("CREATE TABLE fv_snap (id int PRIMARY KEY, v int, t text)")
        db.execute("INSERT INTO fv_snap SELECT g, CASE WHEN g %% 7 = 0 THEN NULL ELSE g %% 100 END, "
                   "repeat(md5(g::text), 3) FROM generate_series(1, %s) g", (ROWS,))
        db.execute("INSERT INTO fv_snap VALUES (0, 1, 'dup'), (-1, 1, 'dup')")  # equal rows but for id
        expected = Counter(db.execute("SELECT id, v, t FROM fv_snap").fetchall())
        try:
            with ReplicationConnection(pg) as rep:
                slot = rep.create_slot("fv_snap_slot")
                # After the snapshot: invisible to it.  Updates put new versions in new pages at the end.
                db.execute("INSERT INTO fv_snap SELECT g, 0, 'new' FROM generate_series(%s, %s) g",
                           (ROWS + 1, ROWS + 5000))
                db.execute("DELETE FROM fv_snap WHERE id % 10 = 3")
                db.execute("UPDATE fv_snap SET v = -v, t = 'changed' WHERE id % 10 = 5")
                assert Counter(db.execute("SELECT id, v, t FROM fv_snap").fetchall()) != expected
                yield Snap(slot.snapshot_name or "", expected)
        finally:
            db.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                       "WHERE slot_name = 'fv_snap_slot'")
            db.execute("DROP TABLE fv_snap")


def _client_backends(pg: str) -> int:
    with psycopg.connect(pg, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                         "AND pid <> pg_backend_pid()").fetchone()[0]


def _settled_backends(pg: str, want: int, timeout: float = 5.0) -> int:
    """Backends exit a moment after their client closed the socket: wait for the count to settle."""
    deadline = time.monotonic() + timeout
    while (n := _client_backends(pg)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("freshview-snapshot")]


@pytest.mark.parametrize("workers", [1, 3])
def test_reads_exactly_the_snapshot(pg, snap, monkeypatch, workers):
    parallel_calls = []
    real = snapshot._read_parallel
    monkeypatch.setattr(snapshot, "_read_parallel", lambda *a: parallel_calls.append(a[-1]) or real(*a))
    seen: list[int] = []
    chunks = list(read_table(pg, snap.snapshot_name, TABLE, SCHEMA, 4000, seen.append,
                             workers=workers, parallel_min_pages=MIN_PAGES))
    assert (len(parallel_calls) == 1) == (workers > 1)
    if parallel_calls:
        assert len(parallel_calls[0]) == workers * snapshot.RANGES_PER_WORKER
    rows = Counter(row for c in chunks for row in zip(*(c.column(n).to_pylist() for n in SCHEMA.names)))
    assert rows == snap.expected
    assert all(c.column("_weight").to_pylist() == [1] * c.num_rows for c in chunks)
    assert all(0 < c.num_rows <= 4000 for c in chunks)
    assert seen == list(_running_sum(c.num_rows for c in chunks))
    assert seen[-1] == sum(snap.expected.values()) and seen == sorted(set(seen))
    assert not _reader_threads()


def _running_sum(values: Iterator[int]) -> Iterator[int]:
    total = 0
    for v in values:
        total += v
        yield total


def test_a_stale_page_count_loses_nothing(pg, snap, monkeypatch):
    # The last range is open-ended: blocks past the size read when splitting are still read.
    monkeypatch.setattr(snapshot, "_heap_pages", lambda *a: MIN_PAGES)
    chunks = list(read_table(pg, snap.snapshot_name, TABLE, SCHEMA, 4000, workers=2, parallel_min_pages=MIN_PAGES))
    rows = Counter(row for c in chunks for row in zip(*(c.column(n).to_pylist() for n in SCHEMA.names)))
    assert rows == snap.expected


def test_block_ranges_tile_the_table():
    assert snapshot._block_ranges(0, 4) == [(0, None)]
    assert snapshot._block_ranges(3, 8) == [(0, 1), (1, 2), (2, None)]
    ranges = snapshot._block_ranges(1001, 12)
    assert ranges[0][0] == 0 and ranges[-1][1] is None and len(ranges) == 12
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # no gap, no overlap


def test_ranges_are_tid_range_scans(pg, snap):
    select = sql.SQL("SELECT id FROM {}").format(sql.Identifier("public", "fv_snap"))
    with psycopg.connect(pg, autocommit=True) as c:
        for block_range in [(0, 10), (10, None)]:
            plan = c.execute(sql.SQL("EXPLAIN {}").format(snapshot._range_select(select, block_range)))
            assert "Tid Range Scan" in "\n".join(r[0] for r in plan.fetchall())


def test_closing_early_stops_the_workers_and_their_connections(pg, snap):
    before = _client_backends(pg)
    reader = read_table(pg, snap.snapshot_name, TABLE, SCHEMA, 500, workers=3, parallel_min_pages=MIN_PAGES)
    assert next(reader).num_rows == 500
    assert len(_reader_threads()) == 3
    started = time.monotonic()
    reader.close()
    assert time.monotonic() - started < 5
    assert not _reader_threads()
    assert _settled_backends(pg, before) == before


def test_a_worker_error_reaches_the_consumer(pg, snap):
    before = _client_backends(pg)
    reader = read_table(pg, "00000003-0000BAD-1", TABLE, SCHEMA, workers=3, parallel_min_pages=MIN_PAGES)
    with pytest.raises(psycopg.Error, match="snapshot") as info:
        next(reader)
    assert any("snapshot reader" in note and "00000003-0000BAD-1" in note for note in info.value.__notes__)
    assert not _reader_threads()
    assert _settled_backends(pg, before) == before


def test_rows_a_policy_would_hide_are_an_error_not_a_silent_subset(pg: str):
    import psycopg.conninfo

    reader = psycopg.conninfo.make_conninfo(**{**psycopg.conninfo.conninfo_to_dict(pg), "user": "fv_snap_rls_reader"})
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fv_snap_rls_reader') THEN "
                   "CREATE ROLE fv_snap_rls_reader LOGIN; END IF; END$$")
        db.execute("DROP TABLE IF EXISTS fv_snap_rls")
        db.execute("CREATE TABLE fv_snap_rls (id int PRIMARY KEY, who text)")
        db.execute("INSERT INTO fv_snap_rls VALUES (1, 'fv_snap_rls_reader'), (2, 'someone else')")
        db.execute("ALTER TABLE fv_snap_rls ENABLE ROW LEVEL SECURITY")
        db.execute("CREATE POLICY mine ON fv_snap_rls USING (who = current_user)")
        db.execute("GRANT SELECT ON fv_snap_rls TO fv_snap_rls_reader")
        table_schema = schema_from_ddl("id INT, who TEXT", ["id"])
        try:
            with psycopg.connect(pg) as exporter:  # any exported snapshot will do
                exporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                name = exporter.execute("SELECT pg_export_snapshot()").fetchone()[0]
                everything = list(read_table(pg, name, "public.fv_snap_rls", table_schema, workers=1))
                assert sum(c.num_rows for c in everything) == 2  # the owner (a superuser here) reads every row
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                    list(read_table(reader, name, "public.fv_snap_rls", table_schema, workers=1))
        finally:
            db.execute("DROP TABLE fv_snap_rls")
