"""The snapshot reader's projection, its parallel readers under concurrent writes, and a killed reader.

* ``columns=``: the query selects only those columns; the chunks equal the whole
  rows' projection (key kept only when all its columns are; no column at all
  still counts the rows), on the binary and on the CSV path.
* Readers in parallel import one exported snapshot: rows committed while they
  read (inserts, updates, deletes from another session) never appear.
* A reader's connection terminated mid-read surfaces from ``Snapshot.read`` as
  ``errors.ConnectionLost`` (the connector's edge), which the service retries.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Iterator

import psycopg
import pyarrow as pa
import pytest

from freshview.connectors import postgres
from freshview.connectors.postgres.replication import ReplicationConnection
from freshview.connectors.postgres.snapshot import read_table
from freshview.errors import ConnectionLost
from freshview.schema import SchemaError, schema_from_ddl

TABLE = "public.fv_proj"
SCHEMA = schema_from_ddl("id INT, k INT, v NUMERIC(12,2), t TEXT, d DATE", ["id", "k"])
ROWS = 40_000
BINARY = pytest.mark.parametrize("binary", [True, False], ids=["binary", "csv"])


@pytest.fixture(scope="module")
def table(pg: str) -> Iterator[str]:
    with psycopg.connect(pg, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS fv_proj")
        db.execute("CREATE TABLE fv_proj (id int, k int, v numeric(12,2), t text, d date, PRIMARY KEY (id, k))")
        db.execute("INSERT INTO fv_proj SELECT g, g %% 3, CASE WHEN g %% 5 = 0 THEN NULL ELSE g / 100.0 END, "
                   "md5(g::text), date '2020-01-01' + g %% 1000 FROM generate_series(1, %s) g", (ROWS,))
        yield pg
        db.execute("DROP TABLE fv_proj")


def _exported(pg: str) -> tuple[psycopg.Connection, str]:
    holder = psycopg.connect(pg)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    return holder, holder.execute("SELECT pg_export_snapshot()").fetchone()[0]


def _rows(chunks: list[pa.Table], names: list[str]) -> Counter:
    return Counter(row for c in chunks for row in zip(*(c.column(n).to_pylist() for n in names)))


@BINARY
@pytest.mark.parametrize("workers", [1, 3])
def test_columns_are_projected_in_the_query(table, binary, workers):
    holder, name = _exported(table)
    with holder:
        whole = list(read_table(table, name, TABLE, SCHEMA, workers=1, binary=binary))
        for columns, key in [(["d", "id", "k"], ("id", "k")), (["v", "t"], ()), (["id", "v"], ())]:
            chunks = list(read_table(table, name, TABLE, SCHEMA, 5000, columns=columns, workers=workers,
                                     parallel_min_pages=10, binary=binary))
            expected = SCHEMA.projected(columns)
            assert expected.names == [n for n in SCHEMA.names if n in columns] and expected.primary_key == key
            assert all(c.schema == expected.arrow(with_weight=True) for c in chunks)
            assert all(0 < c.num_rows <= 5000 for c in chunks)
            assert _rows(chunks, expected.names) == _rows(whole, expected.names)
        counted = list(read_table(table, name, TABLE, SCHEMA, columns=[], workers=workers,
                                  parallel_min_pages=10, binary=binary))
        assert sum(c.num_rows for c in counted) == ROWS and all(c.column_names == ["_weight"] for c in counted)
        with pytest.raises(SchemaError, match="no column nope"):
            list(read_table(table, name, TABLE, SCHEMA, columns=["id", "nope"], binary=binary))


def test_the_query_selects_only_the_columns(table, monkeypatch):
    from freshview.connectors.postgres import binary_copy

    queries: list[str] = []
    real = binary_copy.Session.batches
    monkeypatch.setattr(binary_copy.Session, "batches", lambda self, q: queries.append(q.as_string()) or real(self, q))
    holder, name = _exported(table)
    with holder:
        list(read_table(table, name, TABLE, SCHEMA, columns=["v", "id"], workers=1, binary=True))
    assert queries == ['SELECT "id", "v"::text AS "v" FROM ONLY "public"."fv_proj"']


@BINARY
def test_parallel_readers_see_one_snapshot_while_writes_commit(table, binary):
    with psycopg.connect(table, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS fv_busy")
        db.execute("CREATE TABLE fv_busy (id int PRIMARY KEY, v int)")
        db.execute("INSERT INTO fv_busy SELECT g, 0 FROM generate_series(1, %s) g", (ROWS,))
        schema = schema_from_ddl("id INT, v INT", ["id"])
        with ReplicationConnection(table) as rep:
            slot = rep.create_slot("fv_busy_slot", temporary=True)  # as the service takes its snapshots
            expected = Counter((i, 0) for i in range(1, ROWS + 1))
            stop, committed = threading.Event(), []

            def write() -> None:
                with psycopg.connect(table, autocommit=True) as w:
                    n = 0
                    while not stop.is_set():
                        n += 1
                        w.execute("INSERT INTO fv_busy VALUES (%s, 1)", (ROWS + n,))
                        w.execute("UPDATE fv_busy SET v = v + 1 WHERE id %% 97 = %s", (n % 97,))
                        w.execute("DELETE FROM fv_busy WHERE id = %s", (n * 13,))
                        committed.append(n)

            writer = threading.Thread(target=write)
            writer.start()
            try:
                def slowly(done: int) -> None:  # keep the read going while the writer commits
                    time.sleep(0.02)
                chunks = list(read_table(table, slot.snapshot_name or "", "public.fv_busy", schema, 1000, slowly,
                                         workers=3, parallel_min_pages=10, binary=binary))
            finally:
                stop.set()
                writer.join()
        assert len(committed) > 5  # writes really committed during the read
        assert _rows(chunks, ["id", "v"]) == expected
        db.execute("DROP TABLE fv_busy")


@BINARY
def test_a_reader_killed_mid_read_is_a_lost_connection(table, binary, monkeypatch):
    from freshview.connectors.postgres import binary_copy

    monkeypatch.setattr(binary_copy, "AVAILABLE", binary)  # the path read_table takes by default
    monkeypatch.setattr(binary_copy, "_BATCH_BYTES", 64 << 10)  # many batches: the kill lands mid-COPY
    with psycopg.connect(table, autocommit=True) as db:  # larger than the socket buffers: the COPY is still on
        db.execute("CREATE TABLE IF NOT EXISTS fv_kill AS SELECT g AS id, repeat(md5(g::text), 3) AS t "
                   "FROM generate_series(1, 300000) g")
        db.execute("ALTER TABLE fv_kill REPLICA IDENTITY FULL")
    connector = postgres.connect(table, slot="fv_proj_kill", publication="fv_proj_pub")
    try:
        described = connector.source.describe("public.fv_kill")
        with connector.source.snapshot() as snap:
            def kill(done: int) -> None:
                with psycopg.connect(table, autocommit=True) as c:
                    c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                              "'freshview snapshot' AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
            chunks = 0
            with pytest.raises(ConnectionLost):
                for _ in snap.read(described, 1000, kill):
                    chunks += 1
            assert 0 < chunks < 300
    finally:
        connector.source.close()


def test_errors_of_the_binary_stream_are_classified_as_psycopg_errors_were():
    from freshview.connectors.postgres import binary_copy, faults

    killed = binary_copy.stream_error(OSError("[libpq] Execution error [PGRES_FATAL_ERROR]: FATAL:  terminating "
                                              "connection due to administrator command"))
    assert isinstance(faults.classify(killed), ConnectionLost)
    assert isinstance(faults.classify(binary_copy.stream_error(OSError("server closed the connection "
                                                                       "unexpectedly"))), ConnectionLost)
    assert faults.classify(binary_copy.stream_error(OSError("ERROR:  division by zero"))) is None

    class DriverError(Exception):
        sqlstate = "22023"
    refused = binary_copy.as_psycopg(DriverError("invalid snapshot identifier"))
    assert isinstance(refused, psycopg.errors.InvalidParameterValue) and faults.classify(refused) is None
    assert isinstance(faults.classify(binary_copy.as_psycopg(Exception("socket closed"))), ConnectionLost)
