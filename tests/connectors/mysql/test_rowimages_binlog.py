"""``rowimages`` against python-mysql-replication on the same binlog events of a real MariaDB.

Every rows event of the test's table is decoded twice from the same bytes: by ``rowimages`` (the
body after the library has read the header) and by the library itself (``event.rows`` through
``types.to_arrow``, the stream's old path).  The Arrow
arrays must be equal, column by column, for inserts, updates (old and new images) and deletes.
"""

from __future__ import annotations

import random
from decimal import Decimal

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from freshview.connectors.mysql import rowimages
from freshview.connectors.mysql.catalog import describe_table
from freshview.connectors.mysql.stream import library_column
from freshview.connectors.mysql.types import SESSION_SETUP

KINDS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}


@pytest.fixture
def conn(mysql_database):
    c = pymysql.connect(autocommit=True, **mysql_database)
    with c.cursor() as cur:
        for s in SESSION_SETUP:
            cur.execute(s)
    yield c
    c.close()


def run(conn, *statements, args=None):
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(s, args)


def gtid_now(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        return cur.fetchone()[0]


def peek_body(event) -> bytes:
    """The rows part of the event's body, left unread for the library (``unread`` would not do: the
    library's DECIMAL decoding unreads a byte itself, behind what was pushed back)."""
    packet = event.packet.packet  # PyMySQL's packet: the whole event; the wrapper has read up to the rows
    n = event.event_size - event.packet.read_bytes
    return packet.get_all_data()[packet._position:packet._position + n]


def compare(mysql_database, conn, table: str, start: str, end: str, columns=None) -> dict:
    """Decode every rows event of ``table`` between the GTIDs both ways; assert equal; count the images."""
    described = describe_table(conn, table)
    cols = [c for c in described.columns if columns is None or c.name in columns]
    settings = {k: v for k, v in mysql_database.items() if k != "database"}
    reader = BinLogStreamReader(connection_settings=settings, server_id=765_432, is_mariadb=True, blocking=True,
                                auto_position=start, enable_logging=False,
                                only_events=[MariadbGtidEvent, XidEvent, *KINDS])
    counts = {"insert": 0, "update": 0, "delete": 0, "fast": 0, "events": 0}
    gtid = None
    try:
        for event in reader:
            if isinstance(event, MariadbGtidEvent):
                gtid = event.gtid
                if gtid == end and event.flags & 1:
                    break
                continue
            if isinstance(event, XidEvent):
                if gtid == end:
                    break
                continue
            if event.table != table:
                continue
            kind = KINDS[type(event)]
            layout = rowimages.layout_of([library_column(c) for c in event.columns])
            assert layout is not None, f"rowimages does not decode {table}"
            body = peek_body(event)
            ours = rowimages.decode(layout, body, kind)
            theirs = rowimages.library_images(kind, event.rows)
            counts["events"] += 1
            counts["fast"] += layout.fixed and body and rowimages._cut_fixed(layout, body, [rowimages.RowImages(
                layout)] * (2 if kind == "update" else 1))
            for mine, lib in zip(ours, theirs):
                assert (mine is None) == (lib is None)
                if mine is None:
                    continue
                assert len(mine) == len(lib)
                counts[kind] += len(mine)
                for col, a, b in zip(cols, mine.arrays(cols), lib.arrays(cols)):
                    assert a.type == b.type, col.name
                    assert a.to_pylist() == b.to_pylist(), f"{table}.{col.name} ({kind})"
    finally:
        reader.close()
    return counts


def test_fixed_width_tables_decode_as_the_library_does(conn, mysql_database):
    """The benchmark's orders: all fixed-width, NOT NULL (the NumPy path), then with NULLs (image by image)."""
    run(conn, "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(12,2) NOT NULL)",
        "CREATE TABLE n (id BIGINT PRIMARY KEY, customer INT, amount DECIMAL(12,2), d DATE, t DATETIME(3))")
    start = gtid_now(conn)
    run(conn, "INSERT INTO orders SELECT seq, 1 + (seq * 7919) % 1000, ((seq * 37) % 100000) / 100.0 - 300 "
              "FROM seq_1_to_3000",
        "UPDATE orders SET amount = amount + 0.01, customer = 1 + customer % 1000 WHERE id BETWEEN 100 AND 2600",
        "DELETE FROM orders WHERE id % 3 = 0")
    end = gtid_now(conn)
    counts = compare(mysql_database, conn, "orders", start, end)
    assert counts["insert"] == 3000 and counts["update"] == 2 * 2501 and counts["delete"] == 1000
    assert counts["fast"] == counts["events"]  # no NULLs: every event cut as one matrix
    start = gtid_now(conn)
    run(conn, "INSERT INTO n SELECT seq, IF(seq % 3 = 0, NULL, seq), IF(seq % 5 = 0, NULL, seq / 7), "
              "IF(seq % 2 = 0, NULL, '2024-01-01' + INTERVAL seq DAY), "
              "IF(seq % 7 = 0, NULL, '2024-01-01 00:00:00.5' + INTERVAL seq SECOND) FROM seq_1_to_2000",
        "UPDATE n SET customer = NULL, amount = -amount WHERE id % 4 = 1")
    end = gtid_now(conn)
    counts = compare(mysql_database, conn, "n", start, end)
    assert counts["insert"] == 2000 and counts["update"] > 2 * 400
