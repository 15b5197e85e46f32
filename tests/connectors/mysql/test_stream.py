"""The binlog stream against a real MariaDB: snapshot + stream = history, whole transactions, TRUNCATE,
DDL, reconnects without duplicates, purged binlogs."""

from __future__ import annotations

import collections
import threading
import time

import pymysql
import pytest

from freshview.connectors.mysql.catalog import TableName, describe_table
from freshview.connectors.mysql.deltas import to_deltas
from freshview.connectors.mysql.snapshot import Snapshot
from freshview.connectors.mysql.stream import BinlogStream, PositionLost
from freshview.connectors.mysql.transactions import BinlogPosition
from freshview.schema import WEIGHT


@pytest.fixture
def conn(mysql_database):
    c = pymysql.connect(autocommit=True, **mysql_database)
    yield c
    c.close()


def run(conn, *statements):
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(s)


def server_position(conn) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        return cur.fetchone()[0]


def read_until(stream: BinlogStream, gtid: str, timeout: float = 30) -> list:
    """Every transaction until the stream's position reaches the server GTID ``gtid``."""
    txns, deadline = [], time.monotonic() + timeout
    while stream.position.gtid != gtid:
        assert time.monotonic() < deadline, f"stream stuck at {stream.position} before {gtid}"
        txn = stream.read(timeout=1)
        if txn is not None:
            txns.append(txn)
    return txns


def multiset(table) -> collections.Counter:
    out = collections.Counter()
    for r in table.to_pylist():
        w = r.pop(WEIGHT)
        out[tuple(r.values())] += w
    return out  # negative weights kept (a delta's deletes)


def test_snapshot_plus_stream_is_the_history_with_commits_during_the_snapshot(conn, mysql_database):
    # No key: a transaction counted twice (or lost) at the boundary shows as a row too many (or missing).
    run(conn, "CREATE TABLE h (id INT, v INT)", "CREATE TABLE counter (n INT)", "INSERT INTO counter VALUES (0)")
    h = describe_table(conn, "h")
    counter = describe_table(conn, "counter")
    sources = {h.name: h, counter.name: counter}
    stop = threading.Event()
    committed = []

    def writer():
        c = pymysql.connect(**mysql_database)
        i = 0
        while not stop.is_set() and i < 2000:
            with c.cursor() as cur:
                cur.execute("INSERT INTO h VALUES (%s, %s)", (i, i % 7))
                cur.execute("UPDATE counter SET n = n + 1")
                if i % 5 == 0:
                    cur.execute("DELETE FROM h WHERE id = %s", (i - 3,))
            c.commit()
            committed.append(i)
            i += 1
        c.close()

    thread = threading.Thread(target=writer)
    thread.start()
    while len(committed) < 50:
        time.sleep(0.01)
    snapshot = Snapshot.open(mysql_database)
    state = {name: multiset(snapshot.read_all(src)) for name, src in sources.items()}
    [(at_snapshot,)] = state[counter.name]  # writer transactions the snapshot sees
    assert 50 <= at_snapshot
    snapshot.close()
    while len(committed) < at_snapshot + 50:
        time.sleep(0.01)
    stop.set()
    thread.join()
    with BinlogStream(mysql_database, snapshot.position, set(sources)) as stream:
        txns = read_until(stream, server_position(conn))
    for txn in txns:  # every transaction whole: its three statements' changes together
        assert txn.position > snapshot.position
        assert sum(len(r) for r in txn.changes[counter.name]) == 1 and txn.changes[h.name][0].kind == "insert"
    for name, delta in to_deltas(txns, sources).items():
        state[name].update(multiset(delta))
    with Snapshot.open(mysql_database) as final:
        for name, src in sources.items():
            assert +state[name] == multiset(final.read_all(src)) and not -state[name], name
    assert +state[counter.name] == {(len(committed),): 1}
    # the snapshot saw exactly the writer's first n transactions, and the stream delivered the others
    assert len(txns) == len(committed) - at_snapshot


def test_the_lock_snapshot_method_gives_the_same_position_kind(conn, mysql_database):
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
    t = describe_table(conn, "t")
    with Snapshot.open(mysql_database, method="lock") as snap:
        assert snap.method == "lock" and snap.position.gtid == server_position(conn)
        run(conn, "INSERT INTO t VALUES (3)")  # after the snapshot: not in it, in the stream
        done = []
        batches = list(snap.read_table(t, batch_rows=1, progress=done.append))
        assert sorted(r["id"] for b in batches for r in b.to_pylist()) == [1, 2] and done == [1, 2]
    with BinlogStream(mysql_database, snap.position, {t.name}) as stream:
        [txn] = read_until(stream, server_position(conn))
    assert to_deltas(txn, {t.name: t})[t.name].to_pylist() == [{"id": 3, WEIGHT: 1}]


def test_multi_statement_and_large_transactions_are_never_split(conn, mysql_database):
    run(conn, "CREATE TABLE a (id INT PRIMARY KEY, v INT)", "CREATE TABLE b (id INT, note VARCHAR(10))")
    a, b = describe_table(conn, "a"), describe_table(conn, "b")
    with Snapshot.open(mysql_database) as snap:
        start = snap.position
    c = pymysql.connect(**mysql_database)
    with c.cursor() as cur:
        for k in range(3):
            cur.execute("INSERT INTO a VALUES (%s, 1), (%s, 2)", (10 * k, 10 * k + 1))
            cur.execute("INSERT INTO b VALUES (%s, 'x')", (k,))
            cur.execute("UPDATE a SET v = v + 10 WHERE id = %s", (10 * k,))
            cur.execute("DELETE FROM a WHERE id = %s", (10 * k + 1,))
            c.commit()
        cur.execute("INSERT INTO a SELECT seq, seq FROM seq_100_to_100099")  # 100k rows
        cur.execute("UPDATE a SET v = -v WHERE id >= 100")
        cur.execute("INSERT INTO b VALUES (-1, 'big')")
        c.commit()
    c.close()
    with BinlogStream(mysql_database, start, {a.name, b.name}) as stream:
        txns = read_until(stream, server_position(conn), timeout=120)
    assert [t.row_count for t in txns] == [5, 5, 5, 200_001]
    for t in txns[:3]:
        assert [(r.kind, len(r)) for r in t.changes[a.name]] == [("insert", 2), ("update", 1), ("delete", 1)]
    big = txns[3]
    assert [(r.kind, len(r)) for r in big.changes[a.name]] == [("insert", 100_000), ("update", 100_000)]
    delta = to_deltas(big, {a.name: a, b.name: b})
    assert delta[a.name].num_rows == 100_000 and set(delta[a.name].column(WEIGHT).to_pylist()) == {1}
    assert sorted(r["v"] for r in delta[a.name].to_pylist())[:2] == [-100099, -100098]


def test_truncate_and_ddl_are_reported_and_other_tables_ignored(conn, mysql_database):
    db = mysql_database["database"]
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE other (id INT)")
    t = describe_table(conn, "t")
    with Snapshot.open(mysql_database) as snap:
        start = snap.position
    run(conn, "INSERT INTO other VALUES (1)", "INSERT INTO t VALUES (1)", "TRUNCATE TABLE t",
        "ALTER TABLE other ADD COLUMN x INT", "ALTER TABLE t ADD COLUMN x INT")
    with BinlogStream(mysql_database, start, {t.name}) as stream:
        ins, trunc, ddl = read_until(stream, server_position(conn))
    assert set(ins.changes) == {t.name} and ins.row_count == 1
    assert trunc.truncated == (t.name,) and trunc.row_count == 0
    assert ddl.ddl[0].statement == "ALTER TABLE t ADD COLUMN x INT" and ddl.ddl[0].tables == (t.name,)
    assert ddl.ddl[0].database == db


def test_rows_decode_with_each_definition_across_ddl_and_binlog_rotation(conn, mysql_database):
    """Table maps are parsed once per table id (freeze_schema): a definition change or a new binlog file
    (where a restarted server would reuse table ids) must not decode rows with a stale map."""
    run(conn, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    before = describe_table(conn, "t")
    with Snapshot.open(mysql_database) as snap:
        start = snap.position
    run(conn, "INSERT INTO t VALUES (1, 10)", "INSERT INTO t VALUES (2, 20)",
        "ALTER TABLE t MODIFY v VARCHAR(10), ADD COLUMN w DOUBLE FIRST")
    after = describe_table(conn, "t")
    run(conn, "INSERT INTO t VALUES (0.5, 3, 'x')", "FLUSH BINARY LOGS", "INSERT INTO t VALUES (1.5, 4, 'y')")
    with BinlogStream(mysql_database, start, {before.name}) as stream:
        txns = read_until(stream, server_position(conn))
        rotated_maps = dict(stream._reader.table_map)
    changed = [txn for txn in txns if before.name in txn.changes]
    rows = []
    for txn, table in zip(changed, [before, before, after, after]):
        for run_ in txn.changes[before.name]:
            for images in run_.after:
                rows += list(zip(*(a.to_pylist() for a in images.arrays(table.columns))))
    assert len(changed) == 4 and rows == [(1, 10), (2, 20), (0.5, 3, "x"), (1.5, 4, "y")]
    assert len(rotated_maps) == 1, "table maps from before the rotation were kept"


def test_a_read_without_timeout_takes_what_arrived_past_transactions_not_followed(conn, mysql_database):
    """read(0) returns None only when nothing more has arrived: transactions of other tables (the
    service's own result writes) between followed ones do not end it, or a stream that fell behind
    would step one old batch at a time and never catch up."""
    run(conn, "CREATE TABLE t (id INT)", "CREATE TABLE other (id INT)")
    with Snapshot.open(mysql_database) as snap:
        start = snap.position
    for i in range(20):
        run(conn, f"INSERT INTO t VALUES ({i})", f"INSERT INTO other VALUES ({i})")
    with BinlogStream(mysql_database, start, {TableName(mysql_database["database"], "t")}) as stream:
        first = stream.read(timeout=10)
        time.sleep(0.5)  # everything is sent by now
        rest = [stream.read(timeout=0) for _ in range(19)]
        assert first is not None and all(txn is not None for txn in rest)
        began = time.monotonic()
        assert stream.read(timeout=0) is None and time.monotonic() - began < 0.5  # nothing more: no wait


def test_readable_now_sees_the_socket_and_the_read_buffer():
    import socket

    from freshview.connectors.mysql.stream import readable_now
    a, b = socket.socketpair()
    with a, b:
        buffered = b.makefile("rb")
        assert not readable_now(b, buffered)
        a.sendall(b"two packets")
        assert readable_now(b, buffered)
        buffered.read(3)  # the rest now waits in the reader's buffer, where select cannot see it
        assert readable_now(b, buffered)
        buffered.read(8)
        assert not readable_now(b, buffered) and b.gettimeout() is None


def test_an_idle_read_returns_none_after_its_timeout(conn, mysql_database):
    run(conn, "CREATE TABLE t (id INT)")
    with Snapshot.open(mysql_database) as snap:
        start = snap.position
    with BinlogStream(mysql_database, start, {TableName(mysql_database["database"], "t")},
                      heartbeat_s=0.2) as stream:
        began = time.monotonic()
        assert stream.read(timeout=0.5) is None
        assert 0.5 <= time.monotonic() - began < 5
        assert stream.position == start


def dump_threads(conn) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
        return [r[0] for r in cur.fetchall()]


def test_a_killed_replication_connection_resumes_without_duplicates(conn, mysql_database):
    run(conn, "CREATE TABLE t (id INT)")
    t = describe_table(conn, "t")
    with Snapshot.open(mysql_database) as snap:
        start = snap.position
    before = set(dump_threads(conn))
    for i in range(40):
        run(conn, f"INSERT INTO t VALUES ({i})")
    seen = []
    with BinlogStream(mysql_database, start, {t.name}) as stream:
        for _ in range(20):
            seen.append(stream.read(timeout=10))
        [killed] = set(dump_threads(conn)) - before
        run(conn, f"KILL {killed}")
        for i in range(40, 50):  # and more commits while it reconnects
            run(conn, f"INSERT INTO t VALUES ({i})")
        seen += read_until(stream, server_position(conn))
        assert set(dump_threads(conn)) - before - {killed}, "the reader did not reconnect"
    ids = [i for txn in seen for run_ in txn.changes[t.name] for images in run_.after
           for i in images.arrays(t.columns)[0].to_pylist()]
    assert ids == list(range(50))


def test_a_purged_position_raises_position_lost(conn, mysql_database):
    run(conn, "CREATE TABLE t (id INT)")
    t = describe_table(conn, "t")
    with Snapshot.open(mysql_database) as snap:
        old = snap.position
    run(conn, "INSERT INTO t VALUES (1)", "FLUSH BINARY LOGS", "INSERT INTO t VALUES (2)")
    purge_binlogs_before_now(conn, old.file)
    with BinlogStream(mysql_database, old, {t.name}) as stream:
        with pytest.raises(PositionLost, match=f"cannot resume the binlog at {old.to_text()}"):
            stream.read(timeout=10)
    # a position still in the binlog keeps working
    with Snapshot.open(mysql_database) as snap:
        fresh = snap.position
    run(conn, "INSERT INTO t VALUES (3)")
    with BinlogStream(mysql_database, fresh, {t.name}) as stream:
        [txn] = read_until(stream, server_position(conn))
        assert txn.row_count == 1 and isinstance(txn.position, BinlogPosition)


def purge_binlogs_before_now(conn, file: str) -> None:
    """PURGE BINARY LOGS until ``file`` is gone (MariaDB keeps a binlog until InnoDB checkpointed past it)."""
    deadline = time.monotonic() + 30
    with conn.cursor() as cur:
        while True:
            cur.execute("SHOW MASTER STATUS")
            cur.execute(f"PURGE BINARY LOGS TO '{cur.fetchone()[0]}'")
            cur.execute("SHOW BINARY LOGS")
            if file not in [r[0] for r in cur.fetchall()]:
                return
            assert time.monotonic() < deadline, f"{file} was never purged"
            time.sleep(0.2)
            cur.execute("FLUSH BINARY LOGS")
