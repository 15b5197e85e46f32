"""The MariaDB source: describing tables, and every supported type through the snapshot and the binlog."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pymysql
import pyarrow as pa
import pytest

from freshview.connectors.mysql.catalog import TableName, describe_table, parse_table_name
from freshview.connectors.mysql.deltas import to_deltas
from freshview.connectors.mysql.snapshot import Snapshot
from freshview.connectors.mysql.stream import BinlogStream
from freshview.errors import CatalogError
from freshview.schema import WEIGHT, SqlType


@pytest.fixture
def conn(mysql_database):
    c = pymysql.connect(autocommit=True, **mysql_database)
    yield c
    c.close()


def run(conn, *statements):
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(s)


def test_names():
    assert parse_table_name("app.t") == TableName("app", "t")
    assert parse_table_name("`My Db`.`Or``ders`") == TableName("My Db", "Or`ders")
    assert parse_table_name(" t ", "app") == TableName("app", "t")
    assert TableName("My Db", "Or`ders").quoted == "`My Db`.`Or``ders`"
    with pytest.raises(CatalogError, match="names no database"):
        parse_table_name("t")
    with pytest.raises(CatalogError, match="invalid table name"):
        parse_table_name("a.b.c", "x")


def test_describe_keys_names_and_refusals(conn, mysql_database):
    db = mysql_database["database"]
    run(conn, "CREATE TABLE `Mixed Case` (b INT NOT NULL, a VARCHAR(5) COLLATE utf8mb4_bin NOT NULL, "
              "n DECIMAL(10,2), PRIMARY KEY (a, b))",
        "CREATE TABLE nokey (x INT, y TEXT)",
        "CREATE TABLE withblob (id INT PRIMARY KEY, payload BLOB)",
        "CREATE VIEW v AS SELECT * FROM nokey")
    t = describe_table(conn, f"`{db}`.`Mixed Case`")
    assert t.name == TableName(db, "Mixed Case")
    assert t.schema.names == ["b", "a", "n"] and t.schema.primary_key == ("a", "b")
    assert t.schema.column("a").type.collation == "utf8mb4_bin" and not t.schema.column("a").nullable
    assert t.schema.column("n").type == SqlType.numeric(10, 2)
    nokey = describe_table(conn, "nokey")  # the connection's database
    assert nokey.schema.primary_key == () and nokey.has_full_old_rows
    with pytest.raises(CatalogError, match=rf"{db}\.withblob\.payload has type blob"):
        describe_table(conn, "withblob")
    with pytest.raises(CatalogError, match=rf"table {db}\.missing does not exist"):
        describe_table(conn, "missing")
    with pytest.raises(CatalogError, match="is a view, not a base table"):
        describe_table(conn, "v")
    with pytest.raises(CatalogError, match="does not exist"):
        describe_table(conn, f"{db}.`mixed case`")  # names match exactly


COLUMNS = """
 id INT PRIMARY KEY, ti TINYINT, tb TINYINT(1), tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED,
 mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED,
 d DECIMAL(12,3), d38 DECIMAL(38,10), f FLOAT, db DOUBLE, bt BIT(10), y YEAR, dd DATE, dtt DATETIME(6),
 ts TIMESTAMP(3) NULL DEFAULT NULL, tm TIME(6), c CHAR(3), vc VARCHAR(20), tx TEXT, e ENUM('x','y z'),
 s SET('a','b','c'), j JSON
"""
INSERTS = [
    "SET time_zone = '+02:00'",
    "INSERT INTO alltypes VALUES (1, -128, 2, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295,"
    " -9223372036854775808, 18446744073709551615, -123456789.123, 1234567890123456789012345678.0123456789,"
    " 1.5, 1e300, b'1000000001', 2155, '2024-02-29', '2024-02-29 23:59:59.123456', '2024-02-29 12:00:00.5',"
    " '-838:59:59', 'ab', 'héllo ☃', 'long text', 'y z', 'c,a', '{\"a\": [1, 2]}')",
    "INSERT INTO alltypes (id) VALUES (2)",
    "SET sql_mode = ''",
    "INSERT INTO alltypes (id, y, dd, dtt, ts, s, tm, c, bu) VALUES (3, 0, '0000-00-00', '0000-00-00 00:00:00',"
    " '0000-00-00 00:00:00', '', '12:00:00.25', '', 0)",
]
EXPECTED = [
    {"id": 1, "ti": -128, "tb": 2, "tu": 255, "si": -32768, "su": 65535, "mi": -8388608, "mu": 16777215,
     "i": -2147483648, "iu": 4294967295, "b": -9223372036854775808, "bu": Decimal(18446744073709551615),
     "d": Decimal("-123456789.123"), "d38": Decimal("1234567890123456789012345678.0123456789"), "f": 1.5,
     "db": 1e300, "bt": 513, "y": 2155, "dd": dt.date(2024, 2, 29),
     "dtt": dt.datetime(2024, 2, 29, 23, 59, 59, 123456),
     "ts": dt.datetime(2024, 2, 29, 10, 0, 0, 500000, tzinfo=dt.timezone.utc),
     "tm": -dt.timedelta(hours=838, minutes=59, seconds=59), "c": "ab", "vc": "héllo ☃", "tx": "long text",
     "e": "y z", "s": "a,c", "j": '{"a": [1, 2]}'},
    {"id": 2} | {k: None for k in ("ti tb tu si su mi mu i iu b bu d d38 f db bt y dd dtt ts tm c vc tx e s j"
                                    ).split()},
    {"id": 3} | {k: None for k in "ti tb tu si su mi mu i iu b d d38 f db bt dd dtt ts vc tx e j".split()}
    | {"y": 0, "s": "", "tm": dt.timedelta(hours=12, microseconds=250000), "c": "", "bu": Decimal(0)},
]


def test_every_supported_type_reads_the_same_from_the_snapshot_and_the_binlog(conn, mysql_database):
    run(conn, f"CREATE TABLE alltypes ({COLUMNS})")
    table = describe_table(conn, "alltypes")
    with Snapshot.open(mysql_database) as before:
        assert before.read_all(table).num_rows == 0
        start = before.position
    run(conn, *INSERTS)
    with Snapshot.open(mysql_database) as after:
        snap = after.read_all(table)
        end = after.position
    with BinlogStream(mysql_database, start, {table.name}) as stream:
        txns = []
        while stream.position < end:
            txn = stream.read(timeout=10)
            assert txn is not None, "the stream stopped before the snapshot's position"
            txns.append(txn)
    assert stream.position == end
    streamed = to_deltas(txns, {table.name: table})[table.name]
    assert streamed.schema == snap.schema == table.schema.arrow(with_weight=True)
    assert sorted(streamed.to_pylist(), key=lambda r: r["id"]) == sorted(snap.to_pylist(), key=lambda r: r["id"])
    got = sorted(snap.to_pylist(), key=lambda r: r["id"])
    for row, expected in zip(got, EXPECTED):
        assert row.pop(WEIGHT) == 1
        assert {k: _timedelta(v) for k, v in row.items()} == expected


def _timedelta(value):
    """Intervals arrive as Arrow month_day_nano values; TIME has no months, so compare as timedeltas."""
    if isinstance(value, pa.MonthDayNano):
        assert value.months == 0
        assert value.days == 0  # TIME is all in the time part
        return dt.timedelta(microseconds=value.nanoseconds // 1000)
    return value


def test_the_snapshot_reads_only_the_columns_asked_for(conn, mysql_database):
    # Every type, NULLs included: each projection equals the whole rows' projection; the key stays with its
    # columns; no column at all still counts the rows; the query itself names only those columns.
    run(conn, "DROP TABLE IF EXISTS alltypes_p", f"CREATE TABLE alltypes_p ({COLUMNS})",
        *(s.replace("alltypes", "alltypes_p", 1) for s in INSERTS))
    table = describe_table(conn, "alltypes_p")
    names = table.schema.names
    with Snapshot.open(mysql_database) as snap:
        whole = snap.read_all(table)
        for columns in (names[1:], ["id"] + names[5:9], names[::3], ["tx", "j", "ts"], []):
            got = pa.concat_tables(snap.read_table(table, 2, columns=columns))
            expected = table.schema.projected(columns)
            assert got.schema == expected.arrow(with_weight=True)
            assert got.num_rows == whole.num_rows
            want = whole.select(expected.names + [WEIGHT])
            assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)
        statements: list[str] = []
        real = snap.connection.cursor

        def spying(*args):
            cur = real(*args)
            execute = cur.execute
            cur.execute = lambda q, *a: statements.append(q) or execute(q, *a)
            return cur
        snap.connection.cursor = spying
        list(snap.read_table(table, columns=["tx", "id"]))
    assert statements == ["SELECT `id`, `tx` FROM `%s`.`alltypes_p`" % table.name.database]
