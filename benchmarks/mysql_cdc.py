"""The MySQL/MariaDB source's throughput: snapshot rows/s, and binlog decode + delta changes/s.

A throwaway MariaDB (``MariaDBServer``, as the tests start it) gets

* ``orders`` (``--rows`` rows: bigint, int, varchar, datetime, decimal(12,2)),
  read under one consistent snapshot (``Snapshot.read_table``) into Arrow;
* ``items`` (4 columns, like research/cdc-feasibility.md §3), then a backlog of
  ``--changes`` inserts, as many updates and as many deletes, in
  transactions of ``--txn-rows`` rows, replayed from the snapshot's position
  by ``BinlogStream`` (decode: whole transactions) and turned into deltas by
  ``to_deltas`` in micro-batches of ``--batch`` transactions.

Printed: rows/s (wall) and this process's CPU seconds; an update counts as
one change (its delta has two rows).  Also printed: the load average and the
CPU seconds of a plain 10M-iteration Python loop (about 0.45 s on an idle
core), to tell a slow machine from slow code.  Not a test: nothing asserts a
speed.

    python3 -m benchmarks.mysql_cdc [--rows 1000000] [--changes 200000] [--txn-rows 1000] [--batch 50]
"""

from __future__ import annotations

import argparse
import time

import pymysql

from freshview.connectors.mysql.catalog import describe_table
from freshview.connectors.mysql.deltas import to_deltas
from freshview.connectors.mysql.snapshot import Snapshot
from freshview.connectors.mysql.stream import BinlogStream
from freshview.service.embedded_mariadb import MariaDBServer


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _calibration() -> str:
    import os

    c0 = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"load average {load:.1f}; a 10M-iteration Python loop took {time.process_time() - c0:.2f} s CPU"


def _library_alone(connect_args: dict, start, end: str) -> int:
    """The reader by itself over the same binlog (the floor under ``BinlogStream``)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    settings = {k: v for k, v in connect_args.items() if k != "database"}
    reader = BinLogStreamReader(connection_settings=settings, server_id=987_654, is_mariadb=True, blocking=True,
                                auto_position=start.gtid, enable_logging=False,
                                only_events=[MariadbGtidEvent, XidEvent, WriteRowsEvent, UpdateRowsEvent,
                                             DeleteRowsEvent])
    n, gtid = 0, None
    try:
        for event in reader:
            if isinstance(event, MariadbGtidEvent):
                gtid = event.gtid
            elif isinstance(event, XidEvent):
                if gtid == end:
                    break
            else:
                n += len(event.rows)
    finally:
        reader.close()
    return n


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.mysql_cdc")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--txn-rows", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50, help="transactions per to_deltas call")
    args = parser.parse_args()
    print(_calibration())
    with MariaDBServer() as server:
        root = server.connect_args()
        conn = pymysql.connect(autocommit=True, **root)
        cur = conn.cursor()
        cur.execute("CREATE DATABASE bench")
        cur.execute("USE bench")
        cur.execute("CREATE TABLE bench.orders (id BIGINT PRIMARY KEY, customer_id INT NOT NULL, "
                    "status VARCHAR(12) NOT NULL, placed_at DATETIME NOT NULL, total DECIMAL(12,2) NOT NULL)")
        cur.execute("INSERT INTO bench.orders SELECT seq, seq % 10000, ELT(1 + seq % 4, 'placed', 'paid', "
                    "'shipped', 'delivered'), '2024-01-01' + INTERVAL seq SECOND, (seq % 100000) / 100 "
                    f"FROM seq_1_to_{args.rows}")
        cur.execute("CREATE TABLE bench.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, "
                    "price DECIMAL(10,2))")
        args_db = {**root, "database": "bench"}
        orders, items = describe_table(conn, "bench.orders"), describe_table(conn, "bench.items")

        (w0, c0) = _clock()
        with Snapshot.open(args_db) as snap:
            n = sum(t.num_rows for t in snap.read_table(orders))
            start = snap.position
        (w1, c1) = _clock()
        print(f"| snapshot read, {n:,} rows (5 columns) | {n / (w1 - w0):,.0f} rows/s | "
              f"CPU {c1 - c0:.2f} s |")

        step, m = args.txn_rows, args.changes
        for lo in range(0, m, step):
            cur.execute(f"INSERT INTO bench.items SELECT seq, CONCAT('item ', seq), seq % 97, (seq % 5000) / 100 "
                        f"FROM seq_{lo}_to_{min(lo + step, m) - 1}")
        for lo in range(0, m, step):
            cur.execute(f"UPDATE bench.items SET qty = qty + 1, price = price + 1 WHERE id >= {lo} AND id < {lo + step}")
        for lo in range(0, m, step):
            cur.execute(f"DELETE FROM bench.items WHERE id >= {lo} AND id < {lo + step}")
        cur.execute("SELECT @@gtid_binlog_pos")
        end = cur.fetchone()[0]

        c0 = time.process_time()
        raw = _library_alone(args_db, start, end)
        print(f"| mysql-replication alone (rows decoded, nothing else), {raw:,} changes | | "
              f"CPU {time.process_time() - c0:.2f} s |")

        decode = delta = decode_cpu = delta_cpu = 0.0
        cpu0 = time.process_time()
        changes = rows_out = 0
        sources = {items.name: items}
        with BinlogStream(args_db, start, {items.name}) as stream:
            while stream.position.gtid != end:
                t0, p0 = time.perf_counter(), time.process_time()
                batch = []
                while len(batch) < args.batch and stream.position.gtid != end:
                    txn = stream.read(timeout=1)
                    if txn is not None:
                        batch.append(txn)
                        changes += sum(len(c) for r in txn.changes.values() for c in r)
                t1, p1 = time.perf_counter(), time.process_time()
                for d in to_deltas(batch, sources).values():
                    rows_out += d.num_rows
                delta += time.perf_counter() - t1
                delta_cpu += time.process_time() - p1
                decode += t1 - t0
                decode_cpu += p1 - p0
        cpu = time.process_time() - cpu0
        print(f"| binlog decode, {changes:,} changes (3 x {m:,}, {step}-row transactions) | "
              f"{changes / decode:,.0f} changes/s | CPU {decode_cpu:.2f} s |")
        print(f"| to_deltas ({args.batch} transactions per call, {rows_out:,} delta rows) | "
              f"{changes / delta:,.0f} changes/s | CPU {delta_cpu:.2f} s |")
        print(f"| decode + deltas | {changes / (decode + delta):,.0f} changes/s | CPU {cpu:.2f} s |")
        print(_calibration())


if __name__ == "__main__":
    main()
