"""``CALL freshview.create_view`` over TPC-H customer ⋈ orders ⋈ lineitem, end to end, beside the peers (issue 22).

A throwaway PostgreSQL gets TPC-H's customer, orders and lineitem at ``SF``
(``tpchgen-cli``, cached in benchmarks/data; the TPC-H suite's columns, with
their keys); a ``Service`` in a thread of this process serves one
``create_view`` of a view joining the three.  Printed: the engine's and the
service's own log lines (sources read -- the snapshot read and the bulk load
of its chunks -- where the first computation ran and why, and how long it
took) and the CALL's wall time.  Then, on the same server and data, in the
same run:

* ``CREATE MATERIALIZED VIEW`` of the same query;
* pg_ivm's ``pgivm.create_immv`` when ``--pg-bindir`` names the bin directory of a PostgreSQL
  with pg_ivm installed (the whole benchmark then runs on that server, started with
  ``shared_preload_libraries = 'pg_ivm'``); pg_ivm is built by hand, not by this repository;
* DuckDB: the tables from Arrow into DuckDB, then the query (2 threads);
* with ``--spark``: Spark's own recompute of the query over cached tables (local session),
  and, with ``--spark-first``, a second ``create_view`` whose first computation is forced
  onto Spark (``execution="spark"``).

Each result is compared with freshview's result table (counts exactly, sums to 4 decimals).
Which freshview runs is whatever ``PYTHONPATH`` puts first, so the same script times two checkouts:

    PYTHONPATH=src:. python3 -m benchmarks.create_view [SF] [--pg-bindir DIR] [--spark] [--spark-first]
"""
from __future__ import annotations

import argparse
import io
import logging
import os
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.csv as pa_csv

import freshview
from benchmarks.tpch.data import COLUMNS, Tables, generate
from freshview.connectors.postgres import control
from freshview.service.embedded import PostgresServer
from freshview.service.service import ServiceOptions
from tests.support.service import ThreadedService

KEYS = {"customer": "c_custkey", "orders": "o_orderkey", "lineitem": "l_orderkey, l_linenumber"}
VIEW = ("SELECT c_mktsegment, o_orderpriority, COUNT(*) AS n, SUM(l_extendedprice * (1 - l_discount)) AS revenue "
        "FROM customer JOIN orders ON o_custkey = c_custkey JOIN lineitem ON l_orderkey = o_orderkey "
        "WHERE o_orderdate >= DATE '1995-01-01' GROUP BY c_mktsegment, o_orderpriority")
ORDER = " ORDER BY 1, 2"
COLS = "c_mktsegment, o_orderpriority, n, revenue"


class _Lines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "sources read" in message or "created" in message or "first computation of" in message:
            print("  log:", message, flush=True)


def _rows(rows) -> list[tuple]:
    return [(a, b, int(n), round(Decimal(r), 4)) for a, b, n, r in rows]


def _timed(label: str, fn) -> tuple[float, object]:
    started = time.perf_counter()
    out = fn()
    took = time.perf_counter() - started
    print(f"{label}: {took:.2f} s; load average {os.getloadavg()[0]:.1f}", flush=True)
    return took, out


def _create_view(dsn: str, work: Path, name: str, execution: str) -> list[tuple]:
    """A service of its own creates the view, its result is read, and the view is dropped again (a next
    service would otherwise rebuild it first)."""
    svc = ThreadedService(dsn, work / f"state-{name}", None, options=ServiceOptions(execution=execution))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _timed(f"freshview create_view ({name}, execution={execution})",
                   lambda: conn.execute("CALL freshview.create_view(%s, %s, 3600)", (f"public.{name}", VIEW)))
            rows = _rows(conn.execute(f"SELECT {COLS} FROM public.{name}" + ORDER).fetchall())
            conn.execute("CALL freshview.drop_view(%s)", (f"public.{name}",))
    finally:
        svc.stop()
    return rows


def _duckdb(data: Tables) -> list[tuple]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    def load() -> None:
        for name, table in data.data.items():
            con.register(f"{name}_arrow", table)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    _timed("DuckDB: tables from Arrow", load)
    _, rows = _timed("DuckDB: the query", lambda: con.execute(VIEW + ORDER).fetchall())
    return _rows(rows)


def _spark(data: Tables) -> list[tuple]:
    from freshview.runtime.spark import get_session

    spark = get_session()
    for name, table in data.data.items():
        frame = spark.createDataFrame(table.to_pandas())
        frame.cache().count()
        frame.createOrReplaceTempView(name)
    _timed("Spark recompute over cached tables (warm-up)", lambda: spark.sql(VIEW).collect())
    _, rows = _timed("Spark recompute over cached tables", lambda: spark.sql(VIEW + ORDER).collect())
    return _rows([tuple(r) for r in rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sf", nargs="?", type=float, default=1.0)
    parser.add_argument("--pg-bindir", type=Path, help="bin directory of a PostgreSQL with pg_ivm installed")
    parser.add_argument("--spark", action="store_true", help="also time Spark's own recompute of the query")
    parser.add_argument("--spark-first", action="store_true", help="also create the view with its first "
                                                                   "computation on Spark (execution='spark')")
    parser.add_argument("--skip-duckdb", action="store_true")
    parser.add_argument("--skip-freshview", action="store_true", help="no create_view under execution='auto' "
                                                                      "(its result: DuckDB's)")
    args = parser.parse_args()
    print("freshview from", freshview.__file__, flush=True)
    for logger in ("freshview.service", "freshview.engine"):
        logging.getLogger(logger).addHandler(_Lines())
        logging.getLogger(logger).setLevel(logging.INFO)
    data = Tables.load(generate(args.sf, Path(__file__).parent / "data"), {t: COLUMNS[t] for t in KEYS})
    settings = {"shared_buffers": "2GB"}
    if args.pg_bindir:
        settings["shared_preload_libraries"] = "pg_ivm"
    server = PostgresServer(bindir=args.pg_bindir, settings=settings)
    work = Path(tempfile.mkdtemp(prefix="fv-create-view-"))
    try:
        dsn = server.start()
        with psycopg.connect(dsn, autocommit=True) as db:
            control.install(db)
            for name, table in data.data.items():
                db.execute(f"CREATE TABLE {name} ({data.ddl(name)}, PRIMARY KEY ({KEYS[name]}))")
                for batch in table.to_batches(500_000):
                    text = io.BytesIO()
                    pa_csv.write_csv(pa.Table.from_batches([batch]), text, pa_csv.WriteOptions(include_header=False))
                    with db.cursor().copy(f"COPY {name} FROM STDIN WITH (FORMAT csv)") as copy:
                        copy.write(text.getvalue())
            db.execute("VACUUM ANALYZE")
            version = db.execute("SELECT version()").fetchone()[0]
        rows = sum(t.num_rows for t in data.data.values())
        print(f"loaded TPC-H SF {args.sf:g} ({rows:,} rows) into {version}; load average {os.getloadavg()}",
              flush=True)
        ours = _duckdb(data) if args.skip_freshview else _create_view(dsn, work, "seg_revenue", "auto")
        with psycopg.connect(dsn, autocommit=True) as db:
            _timed("PostgreSQL CREATE MATERIALIZED VIEW",
                   lambda: db.execute(f"CREATE MATERIALIZED VIEW seg_revenue_mv AS {VIEW}"))
            assert _rows(db.execute("SELECT * FROM seg_revenue_mv" + ORDER).fetchall()) == ours, "matview differs"
            if args.pg_bindir:
                db.execute("CREATE EXTENSION pg_ivm")
                ivm = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_ivm'").fetchone()[0]
                _timed(f"pg_ivm {ivm} pgivm.create_immv",
                       lambda: db.execute("SELECT pgivm.create_immv('seg_revenue_ivm', %s)", (VIEW,)))
                got = db.execute(f"SELECT {COLS} FROM seg_revenue_ivm" + ORDER).fetchall()
                assert _rows(got) == ours, "pg_ivm's IMMV differs"
        if not args.skip_duckdb and not args.skip_freshview:
            assert _duckdb(data) == ours, "DuckDB differs"
        if args.spark:
            assert _spark(data) == ours, "Spark differs"
        if args.spark_first:
            assert _create_view(dsn, work, "seg_revenue_spark", "spark") == ours, "Spark's first computation differs"
        print("every result equals freshview's", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
