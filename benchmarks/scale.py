"""The peers' view over TPC-H at a large scale factor: time and peak memory (issue 22, "Scale").

``tpchgen-cli`` Parquet at ``SF`` (cached in benchmarks/data); an ``IncrementalFlow`` with its defaults
(``first_computation="auto"``: in-process, or Spark when the inputs exceed the memory budget) takes
``orders`` and ``lineitem`` (the view's columns and the keys) from the files in record batches of
``BATCH`` rows (``load_source``: nothing here holds a whole table), then computes the peers' view
(``benchmarks.peers.workload.VIEW``).  Then DuckDB (2 threads, in memory) loads the same columns from the
same files and runs the query.  Printed: each phase's seconds, the peak RSS of this process and of
Spark's JVM (sampled every 0.2 s; the JVM is started first, so an in-process computation shows the
idle JVM), the engine's log line on where the first computation ran and why, and whether the two
results are equal.

    PYTHONPATH=src:. python3 -m benchmarks.scale [SF] [auto|local|spark]

(the second argument: the flow's ``first_computation``, default auto).
"""
from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from benchmarks.peers.workload import COLUMNS, VIEW, VIEW_NAME
from benchmarks.report import PeakMemory
from benchmarks.tpch.data import PRIMARY_KEYS, generate

BATCH = 1_000_000
ROOT = Path(__file__).resolve().parent


class _Said(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if "first computation of" in record.getMessage():
            print("  log:", record.getMessage(), flush=True)


def _ddl(schema) -> str:
    from benchmarks.tpch.data import _sql_type
    return ", ".join(f"{f.name} {_sql_type(f.type)}" for f in schema)


def _batches(path: Path, columns: list[str]):
    from benchmarks.tpch.data import _stable
    import pyarrow as pa
    for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH, columns=columns):
        yield _stable(pa.Table.from_batches([batch]))


def main(sf: float, first: str = "auto") -> None:
    from freshview import IncrementalFlow
    from freshview.runtime.spark import get_session

    logging.getLogger("freshview").addHandler(_Said())
    logging.getLogger("freshview").setLevel(logging.INFO)
    directory = generate(sf, ROOT / "data")
    spark = get_session()
    memory = PeakMemory(spark)
    workdir = Path(tempfile.mkdtemp(prefix="freshview-scale-"))
    try:
        flow = IncrementalFlow(spark=spark, state_dir=workdir / "state", first_computation=first)
        started = time.perf_counter()
        rows = {}
        for table, columns in COLUMNS.items():
            path = directory / f"{table}.parquet"
            schema = pq.ParquetFile(path).schema_arrow
            from benchmarks.tpch.data import _stable
            fields = _stable(schema.empty_table()).select(columns).schema
            flow.register_source(table, _ddl(fields), primary_key=PRIMARY_KEYS[table])
            rows[table] = flow.load_source(table, _batches(path, columns))
        loaded = time.perf_counter() - started
        print(f"SF {sf:g}: orders {rows['orders']:,}, lineitem {rows['lineitem']:,} rows loaded in {loaded:.1f} s "
              f"(peak RSS so far: Python {memory.python_peak / 2**30:.2f} GiB, JVM {memory.jvm_peak / 2**30:.2f} GiB)",
              flush=True)
        started = time.perf_counter()
        flow.register_view(VIEW_NAME, VIEW)
        computed = time.perf_counter() - started
        ours = sorted(tuple(r.values()) for r in flow.snapshot(VIEW_NAME).to_pylist())
        print(f"first computation {computed:.1f} s; total {loaded + computed:.1f} s; peak RSS Python "
              f"{memory.python_peak / 2**30:.2f} GiB, JVM {memory.jvm_peak / 2**30:.2f} GiB "
              f"(sum {(memory.python_peak + memory.jvm_peak) / 2**30:.2f} GiB)", flush=True)
        flow.close()
        memory.close()
        con = duckdb.connect()
        con.execute("SET threads = 2")
        started = time.perf_counter()
        for table, columns in COLUMNS.items():
            con.execute(f"CREATE TABLE {table} AS SELECT {', '.join(columns)} FROM "
                        f"read_parquet('{directory / (table + '.parquet')}')")
        duck_load = time.perf_counter() - started
        started = time.perf_counter()
        theirs = sorted(con.execute(VIEW).fetchall())
        duck_query = time.perf_counter() - started
        equal = len(ours) == len(theirs) and all(
            a[0] == b[0] and a[1] == b[1] and abs(float(a[2]) - float(b[2])) < 1e-2 for a, b in zip(ours, theirs))
        print(f"DuckDB: load {duck_load:.1f} s, query {duck_query:.1f} s (total {duck_load + duck_query:.1f} s); "
              f"freshview / DuckDB total: {(loaded + computed) / (duck_load + duck_query):.1f}x; results "
              f"{'equal' if equal else 'DIFFER'}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0, sys.argv[2] if len(sys.argv) > 2 else "auto")
