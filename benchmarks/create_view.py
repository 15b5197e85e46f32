"""``CALL freshview.create_view`` over TPC-H customer ⋈ orders ⋈ lineitem, end to end (issue 22).

A throwaway PostgreSQL gets TPC-H's customer, orders and lineitem at ``SF``
(``tpchgen-cli``, cached in benchmarks/data; the TPC-H suite's columns, with
their keys); a ``Service`` in a thread of this process (its own local Spark)
serves one ``create_view`` of a view joining the three.  Printed: the
service's own log line (sources read -- the snapshot read and the engine
taking in its chunks -- and the first computation) and the CALL's wall time.
Which freshview runs is whatever ``PYTHONPATH`` puts first, so the same
script times two checkouts:

    PYTHONPATH=src:. python3 -m benchmarks.create_view [SF]
"""
from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
import time
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


class _Lines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "sources read" in message or "created" in message:
            print(message, flush=True)


def main() -> int:
    sf = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    print("freshview from", freshview.__file__, flush=True)
    log = logging.getLogger("freshview.service")
    log.addHandler(_Lines())
    log.setLevel(logging.INFO)
    data = Tables.load(generate(sf, Path(__file__).parent / "data"), {t: COLUMNS[t] for t in KEYS})
    server = PostgresServer(settings={"shared_buffers": "2GB"})
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
        print(f"loaded TPC-H SF {sf:g}; load average {os.getloadavg()}", flush=True)
        svc = ThreadedService(dsn, work / "state", None, options=ServiceOptions())
        started = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CALL freshview.create_view(%s, %s, 1800)", ("public.seg_revenue", VIEW))
        print(f"create_view returned after {time.perf_counter() - started:.1f} s; load average {os.getloadavg()}",
              flush=True)
        svc.stop()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
