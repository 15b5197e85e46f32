"""Spark's first computation of the create_view benchmark's view against Spark's own recompute (issue 22).

TPC-H customer, orders and lineitem at ``SF`` (the columns the view reads, with their primary keys)
are bulk-loaded into a fresh ``IncrementalFlow``; the embedded Spark session is started and warmed
up; then, in one process:

* the view (customer ⋈ orders ⋈ lineitem, grouped) is registered with ``first_computation="spark"``
  and its first computation timed (``register_view``: the sources read from state, the joins and
  sums on Spark, the joins' and aggregate's state written);
* Spark's own recompute of the same query with ``spark.sql``, over the same data as Parquet files
  (the generator's files, read by Spark) and over the same tables cached in Spark (read and cached
  first, untimed), each run once to warm up and then timed ``--repeat`` times.

The first computation is run ``--warm-up`` times first, untimed (the JVM compiles each new job's
code on its first run: a cold first computation takes about twice as long), then ``--repeat``
times, each in a fresh flow.  Printed: seconds of each, the ratio of the best of each, the Python
process's RSS before and peak during the first computation (``/proc/self/clear_refs`` resets the
peak just before it; it includes the memory-mapped state files the computation reads and writes),
its anonymous RSS (its own memory, sampled every 10 ms), the Spark JVM's peak RSS, and whether the
results agree (counts exactly, sums to 4 decimals).  Which freshview runs is
whatever ``PYTHONPATH`` puts first, so the same script times two checkouts:

    PYTHONPATH=src:. python3 -m benchmarks.spark_first [SF] [--repeat N] [--warm-up N] [--view grouped|wide]
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


# ``--view wide``: the same joins without the GROUP BY, 3.3M rows at SF 1 (a Spark result as large as the
# view itself, which must reach the view's state)
WIDE = ("SELECT c_mktsegment, o_orderkey, o_orderpriority, l_linenumber, l_extendedprice, l_discount "
        "FROM customer JOIN orders ON o_custkey = c_custkey JOIN lineitem ON l_orderkey = o_orderkey "
        "WHERE o_orderdate >= DATE '1995-01-01'")


def _status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process, GiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 2**20
    return out


class _AnonPeak:
    """The largest RssAnon (the process's own memory, not the memory-mapped state files) seen while it
    runs, sampled every 10 ms on a thread."""

    def __enter__(self) -> "_AnonPeak":
        import threading

        self.peak = 0.0
        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.wait(0.01):
                self.peak = max(self.peak, _anon())

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _anon() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _rows(rows) -> list[tuple]:
    return sorted((a, b, int(n), round(Decimal(str(r)), 4)) for a, b, n, r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sf", nargs="?", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2, help="first computations timed (each in a fresh flow) "
                                                               "and recomputes")
    parser.add_argument("--warm-up", type=int, default=1, help="first computations run before, not counted "
                                                                "(the JVM's first jobs compile their code)")
    parser.add_argument("--view", choices=["grouped", "wide"], default="grouped",
                        help="grouped: the create_view benchmark's view; wide: its joins without the GROUP BY "
                             "(Spark's recompute then runs into Spark's no-op sink, results compared by count)")
    args = parser.parse_args()
    wide = args.view == "wide"
    sql = WIDE if wide else VIEW
    print("freshview from", freshview.__file__, flush=True)
    directory = generate(args.sf, Path(__file__).parent / "data")
    data = Tables.load(directory, COLUMNS)
    print(f"TPC-H SF {args.sf:g}: " + ", ".join(f"{n} {t.num_rows:,}" for n, t in data.data.items()), flush=True)
    from freshview.runtime.spark import get_session

    spark = get_session()
    spark.range(1).count()
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    ours = None
    firsts: list[float] = []
    for round_ in range(args.warm_up + args.repeat):
        with tempfile.TemporaryDirectory(prefix="fv-spark-first-") as work:
            with IncrementalFlow(state_dir=Path(work) / "state", first_computation="spark") as flow:
                for name, table in data.data.items():
                    flow.register_source(name, table.schema, KEYS[name])
                    flow.load_source(name, _chunks(table, False))
                before, anon_before = _status()["VmRSS"], _anon()
                _reset_peak()
                load = os.getloadavg()[0]
                started = time.perf_counter()
                with _AnonPeak() as anon:
                    flow.register_view("v", sql)
                took = time.perf_counter() - started
                peak = _status()["VmHWM"]
                if round_ < args.warm_up:
                    print(f"warm-up: first computation on Spark {took:.2f} s", flush=True)
                    continue
                firsts.append(took)
                print(f"round {len(firsts)}: freshview first computation on Spark {took:.2f} s; RSS before "
                      f"{before:.2f} GiB, peak during {peak:.2f} GiB; anonymous RSS before {anon_before:.2f} GiB, "
                      f"peak during {anon.peak:.2f} GiB; JVM peak {_status(jvm)['VmHWM']:.2f} GiB; "
                      f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
                ours = flow.snapshot("v").num_rows if wide else _rows(
                    [tuple(r.values()) for r in flow.snapshot("v").to_pylist()])
    recompute: dict[str, list[float]] = {}
    results = []
    for how in ("Parquet files", "cached tables"):
        for name in COLUMNS:
            frame = spark.read.parquet(str(directory / f"{name}.parquet")).select(*COLUMNS[name])
            if how == "cached tables":
                frame = frame.cache()
                frame.count()
            frame.createOrReplaceTempView(name)
        def recompute_once():
            if wide:
                spark.sql(sql).write.format("noop").mode("overwrite").save()
                return spark.sql(sql).count()
            return _rows([tuple(r) for r in spark.sql(VIEW + ORDER).collect()])

        recompute_once()  # warm-up
        for _ in range(args.repeat):
            load = os.getloadavg()[0]
            started = time.perf_counter()
            if wide:
                spark.sql(sql).write.format("noop").mode("overwrite").save()
            else:
                got = _rows([tuple(r) for r in spark.sql(VIEW + ORDER).collect()])
            recompute.setdefault(how, []).append(time.perf_counter() - started)
            print(f"Spark recompute over the {how}: {recompute[how][-1]:.2f} s; load average {load:.1f}", flush=True)
        results.append(recompute_once() if wide else got)
    print(f"JVM peak RSS {_status(jvm)['VmHWM']:.2f} GiB", flush=True)
    same = all(r == ours for r in results)
    best = min(firsts)
    print(f"first computation (best of {len(firsts)}: {best:.2f} s) ÷ recompute (best) over the Parquet files "
          f"{best / min(recompute['Parquet files']):.2f}×, over cached tables {best / min(recompute['cached tables']):.2f}×; "
          f"results {'equal' if same else 'DIFFER'}", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
