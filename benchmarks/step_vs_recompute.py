"""Step time of an incremental view against Spark recomputing it from scratch.

For each state size (rows of ``lineitem``), the script loads synthetic
TPC-H-shaped ``orders`` (N/4 rows) and ``lineitem`` (N rows) into an
IncrementalFlow, registers the peers' join-aggregate view, then times
``--steps`` incremental steps of ``--changes`` row changes each (half deletes
of existing lineitems, half inserts) and, in the same run on the same data,
Spark SQL recomputing the view from Parquet files of the current tables.
After the last step it checks that both results are equal.

    python -m benchmarks.step_vs_recompute --rows 1000000 10000000 --changes 1000 --steps 20

Results are printed as a Markdown table (and JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

VIEW = ("SELECT o_orderpriority, COUNT(*) AS n, SUM(l_extendedprice * (1 - l_discount)) AS revenue "
        "FROM orders JOIN lineitem ON l_orderkey = o_orderkey "
        "WHERE o_orderdate >= DATE '1995-01-01' GROUP BY o_orderpriority")
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
LOAD_CHUNK = 1_000_000


class Data:
    """Synthetic orders/lineitem kept in numpy so steps can delete real rows."""

    def __init__(self, n_lineitem: int, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.n_orders = max(n_lineitem // 4, 1)
        self.orders = pa.table({
            "o_orderkey": pa.array(np.arange(1, self.n_orders + 1), pa.int64()),
            "o_orderpriority": pa.array(self.rng.choice(PRIORITIES, self.n_orders)),
            "o_orderdate": pa.array(np.datetime64("1992-01-01") + self.rng.integers(0, 2400, self.n_orders)
                                    .astype("timedelta64[D]"), pa.date32()),
        })
        self.l_orderkey = self.rng.integers(1, self.n_orders + 1, n_lineitem)
        self.l_linenumber = np.arange(n_lineitem, dtype=np.int64)  # unique, the key
        self.l_price = self.rng.integers(100_00, 100_000_00, n_lineitem)  # cents
        self.l_discount = self.rng.integers(0, 11, n_lineitem)  # hundredths
        self.alive = np.ones(n_lineitem, dtype=bool)
        self.next_line = n_lineitem

    def lineitem(self, idx: np.ndarray, weight: int) -> pa.Table:
        return pa.table({
            "l_orderkey": pa.array(self.l_orderkey[idx], pa.int64()),
            "l_linenumber": pa.array(self.l_linenumber[idx], pa.int64()),
            "l_extendedprice": hundredths(self.l_price[idx]),
            "l_discount": hundredths(self.l_discount[idx]),
            "_weight": pa.array(np.full(len(idx), weight, np.int64)),
        })

    def step(self, changes: int) -> pa.Table:
        n_del = changes // 2
        alive_idx = np.flatnonzero(self.alive)
        victims = self.rng.choice(alive_idx, n_del, replace=False)
        self.alive[victims] = False
        n_ins = changes - n_del
        start = len(self.l_orderkey)
        self.l_orderkey = np.concatenate([self.l_orderkey, self.rng.integers(1, self.n_orders + 1, n_ins)])
        self.l_linenumber = np.concatenate([self.l_linenumber, np.arange(self.next_line, self.next_line + n_ins)])
        self.next_line += n_ins
        self.l_price = np.concatenate([self.l_price, self.rng.integers(100_00, 100_000_00, n_ins)])
        self.l_discount = np.concatenate([self.l_discount, self.rng.integers(0, 11, n_ins)])
        self.alive = np.concatenate([self.alive, np.ones(n_ins, dtype=bool)])
        return pa.concat_tables([self.lineitem(victims, -1),
                                 self.lineitem(np.arange(start, start + n_ins), 1)])


def hundredths(values: np.ndarray) -> pa.Array:
    """Integer cents/hundredths as exact numeric(15,2) values."""
    whole = pa.array(values, pa.int64()).cast(pa.decimal128(19, 0))
    return pc.multiply(whole, pa.scalar(decimal.Decimal("0.01"))).cast(pa.decimal128(15, 2))


def run_size(n_rows: int, change_sizes: list[int], steps: int, workdir: Path, spark, profile: bool = False,
             warmup: int = 5) -> list[dict]:
    """Load ``n_rows`` lineitems once, then time steps of each size in ``change_sizes``."""
    from benchmarks.profiling import StepProfile
    from benchmarks.report import PeakMemory
    from freshview import IncrementalFlow

    memory = PeakMemory(spark)
    data = Data(n_rows)
    state_dir = workdir / f"state_{n_rows}"
    flow = IncrementalFlow(spark=spark, state_dir=state_dir)
    flow.register_source("orders", "o_orderkey BIGINT, o_orderpriority TEXT, o_orderdate DATE",
                         primary_key=["o_orderkey"])
    flow.register_source("lineitem", "l_orderkey BIGINT, l_linenumber BIGINT, l_extendedprice NUMERIC(15,2), "
                         "l_discount NUMERIC(15,2)", primary_key=["l_linenumber"])
    flow.register_view("revenue", VIEW)

    t0 = time.perf_counter()
    orders = data.orders.append_column("_weight", pa.array(np.ones(data.n_orders, np.int64)))
    for start in range(0, data.n_orders, LOAD_CHUNK):
        flow.tick("orders", orders.slice(start, LOAD_CHUNK))
    for start in range(0, n_rows, LOAD_CHUNK):
        idx = np.arange(start, min(start + LOAD_CHUNK, n_rows))
        flow.tick("lineitem", data.lineitem(idx, 1))
        print(f"  loaded {min(start + LOAD_CHUNK, n_rows):,}/{n_rows:,} lineitems "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    load_s = time.perf_counter() - t0
    load_memory = memory.snapshot()

    per_size = []
    for changes in change_sizes:
        memory.reset()
        timed = steps if changes <= 10_000 else max(5, steps // 4)  # 100k-row steps take seconds each
        for _ in range(warmup):  # untimed: JIT-compile the JVM paths a step uses
            flow.tick("lineitem", data.step(changes))
        step_ms, profiles = [], []
        for _ in range(timed):
            delta = data.step(changes)
            prof = StepProfile()
            with prof:
                s = flow.tick("lineitem", delta)
            step_ms.append(s.duration_ms)
            profiles.append(prof.breakdown())
        med = statistics.median(step_ms)
        per_size.append({
            "state_rows": n_rows, "changes_per_step": changes, "steps": timed,
            "step_ms_median": round(med, 1), "step_ms_p95": round(sorted(step_ms)[int(0.95 * (len(step_ms) - 1))], 1),
            "profile_median": {k: statistics.median(p[k] for p in profiles) for k in profiles[0]},
            "initial_load_s": round(load_s, 1), "memory_after_load": load_memory, "memory_steps": memory.snapshot(),
        })
        print(f"  {changes} changes/step: median {med:.0f} ms", flush=True)
    if profile:
        import cProfile
        import pstats

        delta = data.step(change_sizes[0])
        prof = cProfile.Profile()
        prof.runcall(flow.tick, "lineitem", delta)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    incremental = flow.snapshot("revenue")

    # Spark recomputing the view from Parquet files of the current data.
    pdir = workdir / f"parquet_{n_rows}"
    shutil.rmtree(pdir, ignore_errors=True)
    pdir.mkdir(parents=True)
    pq.write_table(data.orders, pdir / "orders.parquet")
    alive = np.flatnonzero(data.alive)
    pq.write_table(data.lineitem(alive, 1).drop(["_weight"]), pdir / "lineitem.parquet",
                   row_group_size=1_000_000)
    spark.read.parquet(str(pdir / "orders.parquet")).createOrReplaceTempView("orders")
    spark.read.parquet(str(pdir / "lineitem.parquet")).createOrReplaceTempView("lineitem")
    recompute_ms = []
    for _ in range(3):
        t = time.perf_counter()
        recomputed = spark.sql(VIEW).toArrow()
        recompute_ms.append((time.perf_counter() - t) * 1000)
    same = _rows(incremental) == _rows(recomputed)
    flow.close()
    memory.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    shutil.rmtree(pdir, ignore_errors=True)
    recompute = statistics.median(recompute_ms)
    for r in per_size:
        r["recompute_ms_median"] = round(recompute, 1)
        r["speedup"] = round(recompute / r["step_ms_median"], 1)
        r["results_equal"] = same
    return per_size


def _rows(table: pa.Table) -> list:
    out = []
    for r in table.to_pylist():
        vals = list(r.values())
        out.append(tuple(round(float(v), 2) if hasattr(v, "as_integer_ratio") and not isinstance(v, int) else v
                         for v in vals))
    return sorted(out, key=repr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--changes", type=int, nargs="+", default=[1000], help="changes per step (several: a sweep)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--profile", action="store_true", help="cProfile one extra step and print where it went")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before the timed ones")
    parser.add_argument("--write-doc", action="store_true", help="replace the scaling section of docs/benchmarks.md")
    args = parser.parse_args()

    from benchmarks.report import machine, machine_line, write_json, write_section
    from freshview.runtime.spark import get_session

    info = machine()
    info["command"] = "python3 -m benchmarks.step_vs_recompute " + " ".join(sys.argv[1:])
    spark = get_session(driver_memory=os.environ.get("FRESHVIEW_DRIVER_MEMORY", "6g"))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="freshview-bench-"))
    results = []
    for n in args.rows:
        print(f"state of {n:,} lineitem rows ...", flush=True)
        results.extend(run_size(n, args.changes, args.steps, workdir, spark, args.profile, args.warmup))
    lines = [
        "### Step cost against state size and change size (synthetic join-aggregate view)",
        "",
        f"{machine_line(info)}  ",
        f"Command: `{info['command']}`  ",
        f"View: `{VIEW}`",
        "",
        "| lineitem rows (state) | changes/step | step median (p95) | Spark jobs | Spark plans (py4j) | state r/w "
        "| Python | Spark recompute | ratio | initial load | peak RSS Python / JVM (steps) | equal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        p, mem = r["profile_median"], r["memory_steps"]
        lines.append(
            f"| {r['state_rows']:,} | {r['changes_per_step']:,} | {r['step_ms_median']:,.0f} ms ({r['step_ms_p95']:,.0f}) "
            f"| {p['spark_jobs']:,.0f} ms | {p['spark_plan']:,.0f} ms | {p['state_read']:,.0f} / {p['state_write']:,.0f} ms "
            f"| {p['python']:,.0f} ms | {r['recompute_ms_median']:,.0f} ms | {r['speedup']}× | {r['initial_load_s']:,.0f} s "
            f"| {mem['python_peak_mib']:,} / {mem['jvm_peak_mib']:,} MiB | {r['results_equal']} |")
    markdown = "\n".join(lines)
    print(markdown)
    path = write_json("scaling", {"machine": info, "results": results})
    print(f"JSON: {path}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.write_doc:
        write_section("scaling", markdown)


if __name__ == "__main__":
    main()
