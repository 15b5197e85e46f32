"""The snapshot reader's throughput: the old per-row conversion against the CSV reader, in rows/s.

A throwaway PostgreSQL (``PostgresServer``, as the tests and the other
benchmarks start it) gets ``--rows`` rows in tables shaped like ``freshview
demo``'s (``orders``: bigint, int, text, timestamp, numeric(12,2);
``order_items``: bigint, 3 x int, numeric(10,2)) and, with ``--wide``, a table
of every source type (``types``: the nasty-value table's columns, random
values).  Under one exported snapshot each table is read

* ``per-row``: ``tests.support.snapshot_reference.read_table_per_row``, the
  reader before CSV (COPY text, ``to_arrow`` on Python lists);
* ``csv serial``: ``read_table(..., workers=1)``;
* ``csv parallel``: ``read_table(..., workers=--workers)``, block ranges.

For each, the best of ``--repeat`` runs (the readers taking turns) is printed: wall-clock rows/s and
this process's CPU seconds per million rows (the server's COPY work is not
in it; on a 2-core machine server and client share the cores).

    python3 -m benchmarks.snapshot_read [--rows 1000000] [--repeat 3] [--workers 2] [--wide]
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Callable, Iterable

import psycopg
import pyarrow as pa

from freshview.connectors.postgres.catalog import describe_table
from freshview.connectors.postgres.snapshot import read_table
from freshview.service.embedded import PostgresServer
from tests.support.snapshot_reference import read_table_per_row

TABLES = {
    "orders": (
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL, "
        "placed_at timestamp NOT NULL, total numeric(12,2) NOT NULL)",
        "INSERT INTO orders SELECT g, g %% 10000, (ARRAY['placed','paid','shipped','delivered'])[1 + g %% 4], "
        "timestamp '2024-01-01' + g * interval '17.5 second', (g %% 100000) / 100.0 FROM generate_series(1, %s) g"),
    "order_items": (
        "CREATE TABLE order_items (order_id bigint NOT NULL, line int NOT NULL, product_id int NOT NULL, "
        "quantity int NOT NULL, price numeric(10,2) NOT NULL, PRIMARY KEY (order_id, line))",
        "INSERT INTO order_items SELECT g / 3, g %% 3, g %% 997, 1 + g %% 5, (g %% 5000) / 100.0 "
        "FROM generate_series(1, %s) g"),
    "types": (
        "CREATE TABLE types (id int PRIMARY KEY, i2 smallint, i8 bigint, f4 real, f8 double precision, "
        "n numeric, n12 numeric(12,2), t text, b boolean, d date, ts timestamp, tstz timestamptz)",
        "INSERT INTO types SELECT g, (g %% 30000)::smallint, g::bigint * 1000003, random()::real, random() * 1e6, "
        "round((random() * 1e9)::numeric, 3), round((random() * 1e6)::numeric, 2), "
        "CASE WHEN g %% 10 = 0 THEN NULL WHEN g %% 10 = 1 THEN 'with, \"quotes\"\nand a line' "
        "ELSE md5(g::text) END, g %% 2 = 0, date '2000-01-01' + g %% 9000, "
        "timestamp '2000-01-01' + g * interval '1.001 second', timestamptz '2000-01-01' + g * interval '3 second' "
        "FROM generate_series(1, %s) g"),
}


def _time(run: Callable[[], Iterable[pa.Table]]) -> tuple[int, float, float]:
    """(rows, wall seconds, this process's CPU seconds) of one read."""
    wall, cpu = time.perf_counter(), time.process_time()
    rows = sum(t.num_rows for t in run())
    return rows, time.perf_counter() - wall, time.process_time() - cpu


def _calibration() -> float:
    """CPU seconds of a fixed pure-Python loop: how fast this (possibly shared) machine is right now."""
    cpu = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--wide", action="store_true", help="also the table of every source type")
    parser.add_argument("--skip-old", action="store_true", help="do not time the per-row reader")
    args = parser.parse_args()
    tables = ["orders", "order_items"] + (["types"] if args.wide else [])
    server = PostgresServer(settings={"shared_buffers": "512MB"})
    try:
        dsn = server.start()
        with psycopg.connect(dsn, autocommit=True) as db:
            for name in tables:
                create, fill = TABLES[name]
                db.execute(create)
                db.execute(fill, (args.rows,))
                db.execute(f"VACUUM ANALYZE {name}")
            version = db.execute("SHOW server_version").fetchone()[0]
        print(f"PostgreSQL {version}, {args.rows:,} rows per table, best of {args.repeat}; "
              f"this machine runs a 10M-step Python loop in {_calibration():.2f} s CPU")
        with psycopg.connect(dsn) as holder:
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            snapshot = holder.execute("SELECT pg_export_snapshot()").fetchone()[0]
            for name in tables:
                with psycopg.connect(dsn) as conn:
                    schema = describe_table(conn, f"public.{name}").schema
                table = (dsn, snapshot, f"public.{name}", schema)
                readers: dict[str, Callable[[], Iterable[pa.Table]]] = {
                    "per-row": partial(read_table_per_row, *table),
                    "csv serial": partial(read_table, *table, workers=1),
                    f"csv parallel ({args.workers})": partial(read_table, *table, workers=args.workers),
                }
                if args.skip_old:
                    del readers["per-row"]
                best: dict[str, tuple[int, float, float]] = {}
                for _ in range(args.repeat):  # interleaved, so a busy spell of the machine hits every reader
                    for label, run in readers.items():
                        result = _time(run)
                        if label not in best or result[1] < best[label][1]:
                            best[label] = result
                for label, (rows, wall, cpu) in best.items():
                    print(f"{name:12} {label:18} {rows / wall:>12,.0f} rows/s  {wall:6.2f} s  "
                          f"client CPU {cpu / rows * 1e6:5.2f} s per million rows", flush=True)
            holder.rollback()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
