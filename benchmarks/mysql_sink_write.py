"""One step's result write on MariaDB: ``connectors.mysql.sink.commit_step`` with 10k-row view deltas.

A throwaway MariaDB (``service.embedded_mariadb``: ``innodb_flush_log_at_trx_commit=2``,
``sync_binlog=0``), the ``freshview`` database, and two result tables filled
with ``--groups`` rows:

* ``customer_totals (customer bigint, n bigint, total decimal(65,6))`` keyed by customer;
* ``order_list (customer bigint, amount decimal(12,2), _fv_count)``, a counted view.

Each measured step writes ``--rows`` rows into one of them (half old rows at
-1, half new rows at +1, so ``rows / 2`` keys change) plus the position, in
one transaction.  Prints the median and p90 step time and rows/s per table.

    python3 -m benchmarks.mysql_sink_write [--rows 10000] [--repeat 20] [--groups 100000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from decimal import Decimal

import pyarrow as pa
import pymysql

from freshview.connectors.mysql import control
from freshview.connectors.mysql.sink import ResultShape, ResultTable, commit_step
from freshview.service.embedded_mariadb import MariaDBServer

SHAPES = {
    "customer_totals": ResultShape((("customer", "bigint"), ("n", "bigint"), ("total", "decimal(65,6)")),
                                   ("customer",), False),
    "order_list": ResultShape((("customer", "bigint"), ("amount", "decimal(12,2)")), ("customer", "amount"), True),
}
TYPES = {"customer": pa.int64(), "n": pa.int64(), "total": pa.decimal128(38, 6), "amount": pa.decimal128(12, 2)}


def delta(view: str, rows: list[tuple]) -> pa.Table:
    names = [n for n, _ in SHAPES[view].columns]
    cols = list(zip(*rows))
    return pa.table({**{n: pa.array(list(c), TYPES[n]) for n, c in zip(names, cols)},
                     "_weight": pa.array(list(cols[-1]), pa.int64())})


def row(view: str, key: int, version: int) -> tuple:
    if view == "customer_totals":
        return (key, version, Decimal(key * 7 + version) / 100)
    return (key, Decimal(key % 1000 + version) / 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--groups", type=int, default=100_000)
    args = parser.parse_args()
    rng = random.Random(1)
    with MariaDBServer() as server:
        conn = pymysql.connect(**server.connect_args())
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE app")
        control.install(conn)
        for view, shape in SHAPES.items():
            table = ResultTable(f"app.{view}", shape)
            with conn.cursor() as cur:
                for statement in table.create_sql():
                    cur.execute(statement)
            version = {k: 0 for k in range(args.groups)}
            commit_step(conn, [(table, delta(view, [row(view, k, 0) + (1,) for k in version]))], "app", "0-1-0")
            times = []
            for step in range(args.repeat):
                keys = rng.sample(range(args.groups), args.rows // 2)
                rows = []
                for k in keys:
                    rows.append(row(view, k, version[k]) + (-1,))
                    version[k] += 1
                    rows.append(row(view, k, version[k]) + (1,))
                started = time.perf_counter()
                commit_step(conn, [(table, delta(view, rows))], "app", f"0-1-{step + 1}")
                times.append(time.perf_counter() - started)
            times.sort()
            median, p90 = statistics.median(times), times[int(0.9 * (len(times) - 1))]
            print(f"{view:16s} {args.rows:6d}-row delta: median {median * 1000:7.1f} ms, p90 {p90 * 1000:7.1f} ms, "
                  f"{args.rows / median:9.0f} rows/s")
        conn.close()


if __name__ == "__main__":
    main()
