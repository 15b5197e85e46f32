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


ALL_TYPES = """
 id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, mi MEDIUMINT,
 mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED,
 d1 DECIMAL(1,0), d5 DECIMAL(5,5), d12 DECIMAL(12,2), d18 DECIMAL(18,9), d19 DECIMAL(19,0), d30 DECIMAL(30,4),
 d38 DECIMAL(38,10), d38s DECIMAL(38,38), f FLOAT, db DOUBLE, bt1 BIT(1), bt BIT(10), bt63 BIT(63), y YEAR,
 dd DATE, dt0 DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts0 TIMESTAMP NULL DEFAULT NULL,
 ts6 TIMESTAMP(6) NULL DEFAULT NULL, tm0 TIME, tm3 TIME(3), tm6 TIME(6), c CHAR(3), cl CHAR(100),
 vc VARCHAR(20), vl VARCHAR(300), l1 VARCHAR(10) CHARACTER SET latin1, tt TINYTEXT, tx TEXT, mt MEDIUMTEXT,
 e ENUM('x','y z'), s SET('a','b','c'), j JSON
"""


def _value(rng: random.Random, name: str, sql_type: str):
    """A random SQL value (a Python value for PyMySQL to quote) for a column, edges included."""
    t = sql_type.lower().split(" null")[0]
    if rng.random() < 0.15:
        return None
    ints = {"tinyint unsigned": (0, 255), "tinyint": (-128, 127), "smallint unsigned": (0, 65535),
            "smallint": (-32768, 32767), "mediumint unsigned": (0, 2**24 - 1), "mediumint": (-2**23, 2**23 - 1),
            "int unsigned": (0, 2**32 - 1), "int": (-2**31, 2**31 - 1), "bigint unsigned": (0, 2**64 - 1),
            "bigint": (-2**63, 2**63 - 1)}
    if t in ints:
        lo, hi = ints[t]
        return rng.choice([lo, hi, 0, -1 if lo else 1, rng.randint(lo, hi), rng.randint(-100, 100) if lo else 7])
    if t.startswith("decimal"):
        p, s = (int(x) for x in t[8:-1].split(","))
        whole = "".join(rng.choice("0123456789") for _ in range(rng.choice([0, 1, p - s]) if p > s else 0)) or "0"
        frac = "".join(rng.choice("0123456789") for _ in range(s))
        sign = rng.choice(["", "-"])
        if rng.random() < 0.1:
            whole, frac = "9" * (p - s) or "0", "9" * s  # the widest
        return Decimal(f"{sign}{whole}.{frac}" if s else f"{sign}{whole}")
    if t == "float":
        return rng.choice([0.0, 1.5, -3.25e10, rng.uniform(-1e6, 1e6), 3.4e38])
    if t == "double":
        return rng.choice([0.0, -0.5, 1e300, -2.2250738585072014e-308, rng.uniform(-1e12, 1e12)])
    if t.startswith("bit"):
        return rng.randrange(1 << int(t[4:-1]))
    if t == "year":
        return rng.choice([0, 1901, 2155, rng.randint(1901, 2155)])
    if t == "date":
        return rng.choice(["0000-00-00", "2024-00-05", "1000-01-01", "9999-12-31", "2024-02-29",
                           f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"])
    if t.startswith("datetime") or t.startswith("timestamp"):
        fsp = int(t[t.index("(") + 1:-1]) if "(" in t else 0
        frac = f".{rng.randrange(10 ** fsp):0{fsp}d}" if fsp else ""
        if t.startswith("timestamp"):
            return rng.choice(["0000-00-00 00:00:00", f"2038-01-19 03:14:07{frac}", f"1970-01-01 00:00:01{frac}",
                               f"{rng.randint(1971, 2037)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                               f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}"])
        return rng.choice(["0000-00-00 00:00:00", f"9999-12-31 23:59:59{frac}", f"1000-01-01 00:00:00{frac}",
                           f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                           f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}"])
    if t.startswith("time"):
        fsp = int(t[5:-1]) if "(" in t else 0
        frac = f".{rng.randrange(10 ** fsp):0{fsp}d}" if fsp else ""
        return rng.choice([f"838:59:59{frac}", f"-838:59:59{frac}", "00:00:00", f"-00:00:01{frac}",
                           f"{rng.choice(['', '-'])}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:"
                           f"{rng.randint(0, 59):02d}{frac}"])
    if t.startswith("enum"):
        return rng.choice(["x", "y z", "not a member"])  # (sql_mode '': the error value '', index 0)
    if t.startswith("set"):
        return ",".join(m for m in "abc" if rng.random() < 0.5)
    if t == "json":
        return rng.choice(['{"a": [1, 2]}', "[]", '"text ☃"', "null", '{"k": {"n": 1.5}}'])
    alphabet = "abc xyz" if "latin1" in t else "aé☃ 𝄞z"
    length = rng.choice([0, 1, 3]) if t.startswith("char(3)") else rng.randint(0, 15)
    return "".join(rng.choice(alphabet) for _ in range(length))


def test_every_type_decodes_as_the_library_does(conn, mysql_database):
    columns = [c.strip().split(" ", 1) for c in ALL_TYPES.replace("\n", " ").split(", ")]
    run(conn, f"CREATE TABLE alltypes ({ALL_TYPES})", "SET SESSION sql_mode = ''")
    rng = random.Random(20261126)
    start = gtid_now(conn)
    names = [n for n, _ in columns]
    marks = ", ".join(["%s"] * len(names))
    with conn.cursor() as cur:
        for image in range(3):  # inserts, then two rounds of updates of every row, then deletes
            for row_id in range(1, 301):
                values = [_value(rng, n, t) for n, t in columns[1:]]
                if image == 0:
                    cur.execute(f"INSERT INTO alltypes ({', '.join(names)}) VALUES ({marks})", [row_id, *values])
                else:
                    cur.execute(f"UPDATE alltypes SET {', '.join(f'{n} = %s' for n in names[1:])} WHERE id = %s",
                                [*values, row_id])
        cur.execute("DELETE FROM alltypes WHERE id % 2 = 0")
        cur.execute("DELETE FROM alltypes")
    end = gtid_now(conn)
    counts = compare(mysql_database, conn, "alltypes", start, end,
                     columns={n for n in names if not n.startswith("tm")})  # TIME: below
    assert counts["insert"] == 300 and counts["delete"] == 300 and counts["update"] > 2 * 550


def test_time_decodes_as_the_server_prints_it(conn, mysql_database):
    """TIME(n) with negative fractions, where the library's reading differs (its fraction is read apart
    from the sign): against the server's own text of the values, through the snapshot."""
    from freshview.connectors.mysql.deltas import to_deltas
    from freshview.connectors.mysql.snapshot import Snapshot
    from freshview.connectors.mysql.stream import BinlogStream

    run(conn, "CREATE TABLE tm (id INT PRIMARY KEY, t0 TIME, t2 TIME(2), t3 TIME(3), t6 TIME(6))")
    table = describe_table(conn, "tm")
    with Snapshot.open(mysql_database) as before:
        start = before.position
    values = ["-00:00:00.5", "-838:59:59.99", "-12:34:56.789", "-00:00:01.000001", "838:59:59.999999",
              "00:00:00.01", "-01:00:00", "10:00:00.123456"]
    with conn.cursor() as cur:
        for i, v in enumerate(values):
            cur.execute("INSERT INTO tm VALUES (%s, %s, %s, %s, %s)", (i, v, v, v, v))
    with Snapshot.open(mysql_database) as after:
        snap = after.read_all(table)
        end = after.position
    with BinlogStream(mysql_database, start, {table.name}) as stream:
        txns = []
        while stream.position < end:
            txn = stream.read(timeout=10)
            assert txn is not None
            txns.append(txn)
    streamed = to_deltas(txns, {table.name: table})[table.name]
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(streamed.to_pylist(), key=key) == sorted(snap.to_pylist(), key=key)
    t6 = {r["id"]: r["t6"] for r in streamed.to_pylist()}
    assert t6[0].nanoseconds == -500_000_000 and t6[3].nanoseconds == -1_000_001_000
