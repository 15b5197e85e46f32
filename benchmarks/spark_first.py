"""Spark's first computation of the create_view benchmark's view against Spark's own recompute (issue 22).

TPC-H customer, orders and lineitem at ``SF`` (the columns the view reads, with their primary keys)
are bulk-loaded into a fresh ``IncrementalFlow``; the embedded Spark session is started and warmed
up; then, in one process:

* the view (customer ⋈ orders ⋈ lineitem, grouped) is registered with ``first_computation="spark"``
  and its first computation timed (``register_view``: the sources read from state, the joins and
  sums on Spark, the joins' and aggregate's state written);
* Spark's own recompute of the same query with ``spark.sql``, over the same data as Parquet files
  (the generator's files, read by Spark) and over the same tables cached in Spark (read and cached
  first, untimed), each run once to warm up and then timed.

Printed: seconds of each, the ratio, the Python process's peak RSS during the first computation
(``/proc/self/clear_refs`` resets the peak just before it) and its RSS before, the Spark JVM's peak
RSS, and whether the results agree (counts exactly, sums to 4 decimals).  Which freshview runs is
whatever ``PYTHONPATH`` puts first, so the same script times two checkouts:

    PYTHONPATH=src:. python3 -m benchmarks.spark_first [SF] [--repeat N]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import freshview
from benchmarks.bulk_load import COLUMNS, KEYS, _chunks
from benchmarks.create_view import ORDER, VIEW
from benchmarks.tpch.data import Tables, generate
from freshview import IncrementalFlow


def _status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process, GiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 2**20
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _rows(rows) -> list[tuple]:
    return sorted((a, b, int(n), round(Decimal(str(r)), 4)) for a, b, n, r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sf", nargs="?", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1, help="first computations (each in a fresh flow)")
    args = parser.parse_args()
    print("freshview from", freshview.__file__, flush=True)
    directory = generate(args.sf, Path(__file__).parent / "data")
    data = Tables.load(directory, COLUMNS)
    print(f"TPC-H SF {args.sf:g}: " + ", ".join(f"{n} {t.num_rows:,}" for n, t in data.data.items()), flush=True)
    from freshview.runtime.spark import get_session

    spark = get_session()
    spark.range(1).count()
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    ours = None
    for round_ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="fv-spark-first-") as work:
            with IncrementalFlow(state_dir=Path(work) / "state", first_computation="spark") as flow:
                for name, table in data.data.items():
                    flow.register_source(name, table.schema, KEYS[name])
                    flow.load_source(name, _chunks(table, False))
                before = _status()["VmRSS"]
                _reset_peak()
                load = os.getloadavg()[0]
                started = time.perf_counter()
                flow.register_view("v", VIEW)
                took = time.perf_counter() - started
                peak = _status()["VmHWM"]
                print(f"round {round_ + 1}: freshview first computation on Spark {took:.2f} s; "
                      f"RSS before {before:.2f} GiB, peak during {peak:.2f} GiB; JVM peak "
                      f"{_status(jvm)['VmHWM']:.2f} GiB; load average {load:.1f} -> {os.getloadavg()[0]:.1f}",
                      flush=True)
                ours = _rows([tuple(r.values()) for r in flow.snapshot("v").to_pylist()])
    for name in COLUMNS:
        frame = spark.read.parquet(str(directory / f"{name}.parquet")).select(*COLUMNS[name])
        frame.createOrReplaceTempView(name)
    spark.sql(VIEW).collect()
    load = os.getloadavg()[0]
    started = time.perf_counter()
    parquet_rows = spark.sql(VIEW + ORDER).collect()
    parquet = time.perf_counter() - started
    print(f"Spark recompute over the Parquet files: {parquet:.2f} s; load average {load:.1f}", flush=True)
    for name in COLUMNS:
        frame = spark.read.parquet(str(directory / f"{name}.parquet")).select(*COLUMNS[name]).cache()
        frame.count()
        frame.createOrReplaceTempView(name)
    spark.sql(VIEW).collect()
    load = os.getloadavg()[0]
    started = time.perf_counter()
    cached_rows = spark.sql(VIEW + ORDER).collect()
    cached = time.perf_counter() - started
    print(f"Spark recompute over cached tables: {cached:.2f} s; load average {load:.1f}", flush=True)
    print(f"JVM peak RSS {_status(jvm)['VmHWM']:.2f} GiB", flush=True)
    same = ours == _rows([tuple(r) for r in parquet_rows]) == _rows([tuple(r) for r in cached_rows])
    print(f"first computation ÷ recompute over Parquet {took / parquet:.2f}×, over cached tables "
          f"{took / cached:.2f}×; results {'equal' if same else 'DIFFER'}", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
